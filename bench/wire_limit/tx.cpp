// tx: bursts of requests as fast as the wire takes them, for --seconds (or
// --count frames).  Frames the wire refuses stay at the head of the next
// burst, so back-pressure (memif) costs no sequence numbers.
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

drivers::Result<TxResult> run_tx(const Endpoint& ep, const Options& o) {
  const auto hz = static_cast<double>(ep.tsc_hz);
  if (!greet(ep, rte_rdtsc() + static_cast<uint64_t>(kGreetSeconds * hz))) {
    return drivers::Error{ETIMEDOUT, "no responder answered (start rx first, on the other end)"};
  }
  TxResult r;
  rte_mbuf* bufs[kMaxBurst];
  uint16_t pending = 0;  // refused last time; sent first
  uint32_t seq = 0;
  const uint64_t start = rte_rdtsc();
  const uint64_t end = start + static_cast<uint64_t>(o.seconds * hz);
  uint64_t now = start;
  while (now < end && !stop_requested() && (o.count == 0 || r.sent < o.count)) {
    if (refill(ep, bufs, pending, seq, static_cast<uint32_t>(now))) {
      pending = ep.burst;
    } else {
      ++r.pool_empty;
    }
    const uint16_t n = port_tx(ep, bufs, pending);
    if (n < pending) {
      ++r.busy_polls;
      if (n > 0) std::copy(bufs + n, bufs + pending, bufs);
    }
    pending = static_cast<uint16_t>(pending - n);
    r.sent += n;
    now = rte_rdtsc();
  }
  rte_pktmbuf_free_bulk(bufs, pending);
  r.seconds = static_cast<double>(now - start) / hz;
  r.frames_per_s = r.seconds > 0 ? static_cast<double>(r.sent) / r.seconds : 0;
  r.done_acked = say_done(ep, r.sent);
  return r;
}

}  // namespace uroce::bench::wire_limit
