// ping: one frame in flight; the RTT of each is the TSC at the reply minus
// the timestamp the request carried (written just before it goes to the
// port, or with --relay to the relay).
#include <rte_cycles.h>
#include <rte_ethdev.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <numeric>
#include <vector>

#include "bench/wire_limit/runs.hpp"

namespace uroce::bench::wire_limit {

namespace {

constexpr double kNsPerSecond = 1e9;

struct PingCounters {
  uint64_t companions = 0;
  uint64_t lost = 0;
  uint64_t stale = 0;
  uint64_t foreign = 0;
};

// Polls for the reply to `seq`: its RTT in ticks, or nothing once the
// request sent at `t0` has waited a timeout.
std::optional<uint64_t> await_reply(const Endpoint& ep, uint32_t seq, uint64_t t0, PingCounters& c) {
  rte_mbuf* bufs[kMaxBurst];
  for (;;) {
    const uint16_t n = port_rx(ep, bufs, ep.burst);
    const uint64_t now = rte_rdtsc();
    std::optional<uint64_t> rtt;
    for (uint16_t i = 0; i < n; ++i) {
      const auto info = classify(bufs[i]);
      if (!info) {
        ++c.foreign;
      } else if (info->kind == FrameKind::kCompanion) {
        ++c.companions;
      } else if (info->kind == FrameKind::kReply && info->seq == seq) {
        rtt = static_cast<uint32_t>(static_cast<uint32_t>(now) - info->tsc);  // modulo 2^32 ticks
      } else {
        ++c.stale;
      }
    }
    rte_pktmbuf_free_bulk(bufs, n);
    if (rtt) return rtt;
    if (now - t0 > ep.timeout_tsc || stop_requested()) {
      ++c.lost;
      return std::nullopt;
    }
  }
}

// The request goes last in its burst, after `companions` frames the far
// end drops.
std::optional<uint64_t> round_trip(const Endpoint& ep, uint32_t seq, uint16_t companions, PingCounters& c) {
  rte_mbuf* burst[kMaxCompanions + 1];
  uint16_t n = 0;
  for (; n <= companions; ++n) {
    burst[n] = make_frame(ep, n == companions ? FrameKind::kRequest : FrameKind::kCompanion, seq, 0);
    if (burst[n] == nullptr) {
      rte_pktmbuf_free_bulk(burst, n);
      ++c.lost;
      return std::nullopt;
    }
  }
  const uint64_t t0 = rte_rdtsc();
  set_timestamp(rte_pktmbuf_mtod(burst[companions], uint8_t*), static_cast<uint32_t>(t0));
  if (send_all(ep, burst, n, t0 + ep.timeout_tsc) != n) {  // it freed what the wire did not take
    ++c.lost;
    return std::nullopt;
  }
  return await_reply(ep, seq, t0, c);
}

double percentile(std::span<const uint64_t> sorted, double p) {
  const auto rank = static_cast<size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return static_cast<double>(sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1]);
}

}  // namespace

LatencySummary summarize(std::span<uint64_t> ticks, uint64_t tsc_hz) {
  LatencySummary s;
  s.samples = ticks.size();
  if (ticks.empty()) return s;
  std::sort(ticks.begin(), ticks.end());
  const double ns = kNsPerSecond / static_cast<double>(tsc_hz);
  s.min_ns = static_cast<double>(ticks.front()) * ns;
  s.median_ns = percentile(ticks, 0.5) * ns;
  s.p90_ns = percentile(ticks, 0.9) * ns;
  s.p99_ns = percentile(ticks, 0.99) * ns;
  s.p999_ns = percentile(ticks, 0.999) * ns;
  s.max_ns = static_cast<double>(ticks.back()) * ns;
  const double sum = std::accumulate(ticks.begin(), ticks.end(), 0.0,
                                     [](double acc, uint64_t t) { return acc + static_cast<double>(t); });
  s.mean_ns = sum / static_cast<double>(ticks.size()) * ns;
  return s;
}

drivers::Result<PingResult> run_ping(const Endpoint& ep, const Options& o) {
  std::vector<uint64_t> samples;
  samples.reserve(o.count);  // the timed loop must not allocate
  const auto hz = static_cast<double>(ep.tsc_hz);
  const uint64_t start = rte_rdtsc();
  const uint64_t deadline = start + static_cast<uint64_t>(o.seconds * hz);
  if (!greet(ep, std::min(deadline, start + static_cast<uint64_t>(kGreetSeconds * hz)))) {
    return drivers::Error{ETIMEDOUT, "no responder answered (start pong first, on the other end)"};
  }
  uint32_t seq = 0;
  PingCounters warm;
  for (uint64_t i = 0; i < o.warmup && !stop_requested() && rte_rdtsc() < deadline; ++i) {
    round_trip(ep, seq++, o.companions, warm);
  }
  PingCounters c;
  PingResult r;
  const uint64_t t_start = rte_rdtsc();
  for (; r.attempts < o.count && !stop_requested() && rte_rdtsc() < deadline; ++r.attempts) {
    if (const auto rtt = round_trip(ep, seq++, o.companions, c)) samples.push_back(*rtt);
  }
  const uint64_t t_end = rte_rdtsc();
  r.done_acked = say_done(ep, r.attempts);
  r.rtt = summarize(samples, ep.tsc_hz);
  r.lost = c.lost;
  r.companions = c.companions + warm.companions;
  r.warmup_lost = warm.lost;
  r.stale = c.stale + warm.stale;
  r.foreign = c.foreign + warm.foreign;
  r.seconds = static_cast<double>(t_end - t_start) / hz;
  r.round_trips_per_s = r.seconds > 0 ? static_cast<double>(samples.size()) / r.seconds : 0;
  return r;
}

}  // namespace uroce::bench::wire_limit
