// Selective repeat, the responder's side (DESIGN.md "Loss recovery on a
// lossy link"): what a requester that offers it (the BTH's Resv7 bit,
// wire::kResv7Selective) sends past a gap is kept, not dropped, and
// carried out in PSN order once the gap fills; each gap is NAKed once when
// it is first seen, with the same bit and its length, so that the
// requester resends only what is missing.  A requester that sprays its
// packets over several paths (wire::kResv7Sprayed) reorders them: its gaps
// are NAKed once kSprayReorderPkts packets past them are kept
// (nak_reordered).  Nothing is placed out of order:
// a kept packet goes through every check of process() when its turn
// comes, as if it had just arrived.
//
//   reorder_hold   check_psn's way out for a PSN past the expected one
//   reorder_drain  after a request: the kept ones that now follow
//   reorder_clear  RESET, ERR, destroy: what is kept is dropped
//
// [engine] everything here.
#include <rte_mbuf.h>

#include <algorithm>

#include "lib/util/log.hpp"
#include "lib/wire/bth.hpp"
#include "lib/wire/ext.hpp"
#include "lib/wire/opcode.hpp"
#include "transport/params.hpp"
#include "transport/rnic/qp.hpp"
#include "transport/rnic/responder_internal.hpp"
#include "transport/rnic/rnic.hpp"
#include "transport/rnic/tx.hpp"

namespace uroce::rnic {
namespace resp {

using transport::params::kSrHoldDeviceMax;
using transport::params::kSprayReorderPkts;
using transport::params::kSrRenakEvery;

namespace {

rte_mbuf*& slot(RespState::Reorder& o, Psn psn) noexcept {
  return o.ring[psn.value() % static_cast<uint32_t>(o.ring.size())];
}

// The length of the gap at `from`: up to the first kept PSN after it (or
// `end`), at most wire::kMaxSelectiveGap.
uint32_t gap_at(RespState::Reorder& o, Psn from, Psn end) noexcept {
  uint32_t n = 0;
  for (Psn p = from; n < wire::kMaxSelectiveGap && distance(end, p) > 0 && slot(o, p) == nullptr; p += 1) ++n;
  return std::max<uint32_t>(n, 1);
}

// A PSN sequence NAK with the selective bit: [from, from + len) is missing,
// and what came after it is kept.  Acknowledges nothing (the requester
// retires only on ACKs).
void send_selective_nak(transport::Engine& engine, Qp& qp, Psn from, uint32_t len) noexcept {
  RespState::Reorder& o = qp.resp.reorder;
  wire::PktDesc d =
      response_desc(engine, qp, resp_opcode(qp, wire::op::kAck), from, nak_syndrome(wire::NakCode::PsnSequenceError));
  d.resv7 = static_cast<uint8_t>(wire::kResv7Selective | ((len - 1) & wire::kResv7GapMask));
  if (distance(from + len, o.nak_hi) > 0) o.nak_hi = from + len;
  o.since_nak = 0;
  if (!tx_send(engine, qp.attrs().path, d)) return;
  RnicCounters& ctr = qp.rnic().counters();
  ctr.inc(RnicCtr::resp_pkts);
  ctr.inc(RnicCtr::sr_naks_sent);
  ++qp.tally.sr_naks_sent;
}

// A sprayed requester's packets overtake each other on their different
// paths, so a gap is not yet a loss: NAK (selectively) each missing run
// behind which kSprayReorderPkts packets are kept already, oldest first;
// stop at the first run that is younger (later arrivals may fill it).
// Counted in packets, not PSNs: a READ request takes the PSNs of its
// responses.  Each call walks from the last NAKed run to the highest
// kept PSN (the ring, kSrHoldPsns, bounds it).
void nak_reordered(transport::Engine& engine, Qp& qp) noexcept {
  const RespState& s = qp.resp;
  RespState::Reorder& o = qp.resp.reorder;
  Psn p = distance(o.nak_hi, s.epsn) > 0 ? o.nak_hi : s.epsn;
  while (distance(o.hi, p) > 0) {
    if (slot(o, p) != nullptr) {
      p += 1;
      continue;
    }
    uint32_t behind = 0;
    for (Psn q = p + 1; distance(o.hi, q) > 0 && behind < kSprayReorderPkts; q += 1) {
      if (slot(o, q) != nullptr) ++behind;
    }
    if (behind < kSprayReorderPkts) return;
    const uint32_t len = gap_at(o, p, o.hi);
    send_selective_nak(engine, qp, p, len);  // moves nak_hi past it
    p += len;
  }
}

// Kept packets that the expected PSN moved past without carrying them out:
// a READ takes the PSNs of its responses, and a request a peer sent inside
// them is a duplicate by the time they are passed (never carried out).
// Only after a jump of more than one PSN, so rarely; each kept packet's PSN
// is read back from its frame.
void drop_passed(Qp& qp) noexcept {
  RespState& s = qp.resp;
  RespState::Reorder& o = s.reorder;
  for (rte_mbuf*& m : o.ring) {
    if (m == nullptr) continue;
    const wire::PktInfo pi = wire::parse({rte_pktmbuf_mtod(m, const uint8_t*), m->data_len});
    if (distance(pi.psn, s.epsn) >= 0) continue;
    rte_pktmbuf_free(m);
    m = nullptr;
    --o.held;
    qp.rnic().add_held(-1);
    qp.rnic().counters().inc(RnicCtr::dup_requests);
  }
}

}  // namespace

Step reorder_hold(Rx& r) noexcept {
  RespState& s = r.s;
  RespState::Reorder& o = s.reorder;
  const auto ahead = static_cast<uint32_t>(distance(r.psn, s.epsn));  // > 0: check_psn's case
  if (ahead >= o.ring.size() || r.rnic.held_packets() >= kSrHoldDeviceMax) {
    r.ctr.inc(RnicCtr::sr_no_room);
    return sequence_error(r);
  }
  rte_mbuf*& kept = slot(o, r.psn);
  if (kept != nullptr) {  // kept already: a resend crossed the original
    r.ctr.inc(RnicCtr::dup_requests);
    return Step::Done;
  }
  o.seen = s.epsn;
  // A new gap: between the expected PSN (nothing kept yet) or the highest
  // kept one and this packet.
  const bool first = o.held == 0;
  const Psn gap_from = first ? s.epsn : o.hi;
  const bool new_gap = first || distance(r.psn, o.hi) > 0;
  kept = r.m;
  ++o.held;
  r.rnic.add_held(1);
  r.ctr.inc(RnicCtr::sr_kept_pkts);
  if (first || distance(r.psn + 1, o.hi) > 0) o.hi = r.psn + 1;
  if (first) o.nak_hi = s.epsn;
  o.sprayed = (r.bth().resv7() & wire::kResv7Sprayed) != 0;
  if (o.sprayed) {
    nak_reordered(r.engine, r.qp);
    // The first gap NAKed and still open after kSrRenakEvery more: its
    // NAK or its resend was lost too.
    if (distance(o.nak_hi, s.epsn) > 0 && ++o.since_nak >= kSrRenakEvery) {
      send_selective_nak(r.engine, r.qp, s.epsn, gap_at(o, s.epsn, o.hi));
    }
  } else if (new_gap) {
    UROCE_TRACE(TraceCat::Qp, "qp 0x%06x: PSNs 0x%06x-0x%06x missing, keeping 0x%06x", r.qp.qpn().value(),
                gap_from.value(), (r.psn - 1).value(), r.psn.value());
    send_selective_nak(r.engine, r.qp, gap_from,
                       std::min<uint32_t>(static_cast<uint32_t>(distance(r.psn, gap_from)), wire::kMaxSelectiveGap));
  } else if (++o.since_nak >= kSrRenakEvery) {
    // Still no sign of the first gap: its NAK or its resend was lost too.
    send_selective_nak(r.engine, r.qp, s.epsn, gap_at(o, s.epsn, o.hi));
  }
  return Step::Hold;
}

void reorder_drain(transport::Engine& engine, Qp& qp) noexcept {
  RespState& s = qp.resp;
  RespState::Reorder& o = s.reorder;
  if (distance(s.epsn, o.seen) > 1) drop_passed(qp);
  while (o.held > 0 && !s.stream.active) {
    rte_mbuf*& kept = slot(o, s.epsn);
    if (kept == nullptr) break;
    transport::RoceRx pkt{kept, wire::parse({rte_pktmbuf_mtod(kept, const uint8_t*), kept->data_len})};
    kept = nullptr;
    --o.held;
    qp.rnic().add_held(-1);
    const Psn before = s.epsn;
    process(engine, qp, pkt);  // may fail the QP: reorder_clear then empties the ring
    if (o.held > 0 && distance(s.epsn, before) > 1) drop_passed(qp);
  }
  o.seen = s.epsn;
  if (o.held == 0 || s.stream.active) return;
  if (o.sprayed) {  // a young gap is not NAKed yet (nak_reordered)
    nak_reordered(engine, qp);
    return;
  }
  // A gap at the expected PSN with packets kept behind it: NAKed when it
  // was first seen, unless it opened past where those NAKs reached (a gap
  // longer than one NAK names).
  if (distance(s.epsn, o.nak_hi) >= 0) send_selective_nak(engine, qp, s.epsn, gap_at(o, s.epsn, o.hi));
}

}  // namespace resp

void reorder_clear(Qp& qp) noexcept {
  RespState::Reorder& o = qp.resp.reorder;
  if (o.held == 0) return;
  for (rte_mbuf*& m : o.ring) {
    if (m == nullptr) continue;
    rte_pktmbuf_free(m);
    m = nullptr;
  }
  qp.rnic().add_held(-static_cast<int32_t>(o.held));
  o.held = 0;
  o.since_nak = 0;
  o.sprayed = false;
}

}  // namespace uroce::rnic
