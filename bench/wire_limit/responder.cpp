// pong and rx: the responder's loop.  Reads a burst, sorts each frame:
// requests are turned around (pong) or counted and dropped (rx); kHello
// gets a kHelloAck; kDone gets a kDoneAck and ends the loop.  The clock is
// read once per iteration.
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <thread>

#include "bench/wire_limit/runs.hpp"

namespace uroce::bench::wire_limit {

namespace {

struct Burst {
  rte_mbuf* out[kMaxBurst * (1 + kMaxCompanions)];  // turned around (and companions), to send
  rte_mbuf* drop[kMaxBurst];                        // to free
  uint16_t n_out = 0;
  uint16_t n_drop = 0;
};

// The answer to each of our frames a responder receives; nothing for
// frames it only counts.  With --duplex an rx end also streams back once
// the initiator is there, until its done.
std::optional<FrameKind> answer_to(FrameKind kind, bool echo) {
  switch (kind) {
    case FrameKind::kHello: return FrameKind::kHelloAck;
    case FrameKind::kRequest: return echo ? std::optional(FrameKind::kReply) : std::nullopt;
    case FrameKind::kDone: return FrameKind::kDoneAck;
    case FrameKind::kHelloAck:
    case FrameKind::kReply:
    case FrameKind::kDoneAck:
    case FrameKind::kCompanion: return std::nullopt;
  }
  return std::nullopt;
}

void sort_frame(const Endpoint& ep, rte_mbuf* m, bool echo, uint16_t companions, Burst& b, ResponderResult& r) {
  const auto info = classify(m);
  if (!info) {
    ++r.foreign;
  } else if (info->kind == FrameKind::kCompanion) {
    ++r.companions;
  } else if (info->kind == FrameKind::kRequest) {
    ++r.requests;
  } else if (info->kind == FrameKind::kDone) {
    r.done = true;
    r.peer_sent = join_count(info->seq, info->tsc);
  } else if (info->kind == FrameKind::kHello) {
    r.greeted = true;
  } else {
    ++r.unexpected;
  }
  const auto answer = info ? answer_to(info->kind, echo) : std::nullopt;
  if (answer) {
    // A reply's companions go ahead of it: copies of the request, turned
    // around as kCompanion (a copy the pool cannot give is left out).
    for (uint16_t i = 0; *answer == FrameKind::kReply && i < companions; ++i) {
      rte_mbuf* x = rte_pktmbuf_copy(m, m->pool, 0, UINT32_MAX);
      if (x == nullptr) break;
      turn_around(rte_pktmbuf_mtod(x, uint8_t*), FrameKind::kCompanion, ep.mac);
      b.out[b.n_out++] = x;
    }
    turn_around(rte_pktmbuf_mtod(m, uint8_t*), *answer, ep.mac);
    b.out[b.n_out++] = m;
  } else {
    b.drop[b.n_drop++] = m;
  }
}

}  // namespace

ResponderResult run_responder(const Endpoint& ep, const Options& o, bool echo) {
  ResponderResult r;
  rte_mbuf* bufs[kMaxBurst];
  const auto hz = static_cast<double>(ep.tsc_hz);
  uint64_t now = rte_rdtsc();
  const uint64_t deadline = now + static_cast<uint64_t>(o.seconds * hz);
  uint64_t first = 0;
  uint64_t last = 0;
  // --duplex (rx): this end's own stream, from the initiator's hello (the
  // first request or hello seen) to its done.
  Sender tx(ep);
  bool streaming = false;
  uint64_t tx_start = 0;
  while (!r.done && !stop_requested() && now < deadline) {
    if (streaming) tx.step(static_cast<uint32_t>(now));
    const uint16_t n = port_rx(ep, bufs, ep.burst);
    const uint64_t requests_before = r.requests;
    Burst b;
    for (uint16_t i = 0; i < n; ++i) sort_frame(ep, bufs[i], echo, o.companions, b, r);
    rte_pktmbuf_free_bulk(b.drop, b.n_drop);
    if (b.n_out != 0) r.echo_failed += b.n_out - send_all(ep, b.out, b.n_out, now + ep.timeout_tsc);
    now = rte_rdtsc();
    if (r.requests != requests_before) {
      if (first == 0) first = now;
      last = now;
    }
    if (o.duplex && !echo && !streaming && (r.greeted || r.requests != 0)) {
      streaming = true;  // the initiator is there (its hello, or already its stream)
      tx_start = now;
    }
  }
  r.sent = tx.sent;
  r.tx_seconds = streaming ? static_cast<double>(now - tx_start) / hz : 0;
  r.tx_frames_per_s = r.tx_seconds > 0 ? static_cast<double>(r.sent) / r.tx_seconds : 0;
  // The kDoneAck is out: stay off the wire while the initiator closes.
  if (r.done) std::this_thread::sleep_for(kPeerGrace);
  r.seconds = last > first ? static_cast<double>(last - first) / hz : 0;
  r.frames_per_s = r.seconds > 0 ? static_cast<double>(r.requests) / r.seconds : 0;
  return r;
}

}  // namespace uroce::bench::wire_limit
