// tx: bursts of requests as fast as the wire takes them, for --seconds (or
// --count frames).  Frames the wire refuses stay at the head of the next
// burst, so back-pressure (memif) costs no sequence numbers.  With --duplex
// each turn also reads a burst: the rx end's stream back, counted.
#include <rte_cycles.h>
#include <rte_ethdev.h>

#include <algorithm>
#include <cerrno>

#include "bench/wire_limit/runs.hpp"

namespace uroce::bench::wire_limit {

namespace {

// Fills bufs[from, burst) with fresh requests; false if the pool is empty.
bool refill(const Endpoint& ep, rte_mbuf** bufs, uint16_t from, uint32_t& seq, uint32_t tsc) {
  const uint16_t fresh = ep.burst - from;
  if (fresh == 0) return true;
  if (rte_pktmbuf_alloc_bulk(ep.tx_pool, bufs + from, fresh) != 0) return false;
  for (uint16_t i = from; i < ep.burst; ++i) {
    rte_mbuf* m = bufs[i];
    m->data_len = ep.frame_bytes;
    m->pkt_len = ep.frame_bytes;
    stamp(rte_pktmbuf_mtod(m, uint8_t*), FrameKind::kRequest, seq++, tsc);
  }
  return true;
}

}  // namespace

void Sender::step(uint32_t tsc) noexcept {
  if (refill(ep_, bufs_, pending_, seq_, tsc)) {
    pending_ = ep_.burst;
  } else {
    ++pool_empty;
  }
  const uint16_t n = port_tx(ep_, bufs_, pending_);
  if (n < pending_) {
    ++busy_polls;
    if (n > 0) std::copy(bufs_ + n, bufs_ + pending_, bufs_);
  }
  pending_ = static_cast<uint16_t>(pending_ - n);
  sent += n;
}

drivers::Result<TxResult> run_tx(const Endpoint& ep, const Options& o) {
  const auto hz = static_cast<double>(ep.tsc_hz);
  if (!greet(ep, rte_rdtsc() + static_cast<uint64_t>(kGreetSeconds * hz))) {
    return drivers::Error{ETIMEDOUT, "no responder answered (start rx first, on the other end)"};
  }
  TxResult r;
  Sender tx(ep);
  rte_mbuf* in[kMaxBurst];
  uint64_t first_in = 0;
  uint64_t last_in = 0;
  const uint64_t start = rte_rdtsc();
  const uint64_t end = start + static_cast<uint64_t>(o.seconds * hz);
  uint64_t now = start;
  while (now < end && !stop_requested() && (o.count == 0 || tx.sent < o.count)) {
    tx.step(static_cast<uint32_t>(now));
    if (o.duplex) {
      // The other end's stream: counted and dropped, as rx does.
      const uint16_t n = port_rx(ep, in, ep.burst);
      uint64_t got = 0;
      for (uint16_t i = 0; i < n; ++i) {
        const auto info = classify(in[i]);
        got += info && info->kind == FrameKind::kRequest;
      }
      rte_pktmbuf_free_bulk(in, n);
      if (got != 0) {
        if (first_in == 0) first_in = now;
        last_in = now;
        r.received += got;
      }
    }
    now = rte_rdtsc();
  }
  r.sent = tx.sent;
  r.busy_polls = tx.busy_polls;
  r.pool_empty = tx.pool_empty;
  r.seconds = static_cast<double>(now - start) / hz;
  r.frames_per_s = r.seconds > 0 ? static_cast<double>(r.sent) / r.seconds : 0;
  r.rx_seconds = last_in > first_in ? static_cast<double>(last_in - first_in) / hz : 0;
  r.rx_frames_per_s = r.rx_seconds > 0 ? static_cast<double>(r.received) / r.rx_seconds : 0;
  r.done_acked = say_done(ep, r.sent);
  return r;
}

}  // namespace uroce::bench::wire_limit
