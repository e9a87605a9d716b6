// The completer: RC responses -> WQEs retired, send CQEs, retransmission
// (IBA 9.7.5.1 requester side of ACK/NAK, 9.7.5.2 error recovery, 9.7.6.1
// timers).  One response packet goes through a small state machine:
//
//   CheckPsn     in the outstanding range [comp.psn, psn_hi)?  else a
//                duplicate or a ghost: dropped and counted
//   SelectiveNak a uroce responder's NAK that names a gap it kept packets
//                after (DESIGN.md "Loss recovery on a lossy link"): only
//                the gap is sent again; it acknowledges nothing
//   ImpliedAcks  every SEND/WRITE WQE ending before the PSN is done
//                (IBA 9.7.5.1.4: a later response implies their ACK); a
//                READ/atomic ending before it lost its response: retry
//   Dispatch     by the opcode table and the AETH syndrome
//   Ack / ReadResp / AtomicAck / RnrNak / SeqNak / ErrorNak
//   Retry        go back N from comp.psn, one transport retry consumed
//   Error        the WQE completes in error, the QP fails
//   Drop / Done
//
// After a packet: retry counters restored on progress, the ACK timer
// re-armed or cancelled, CQEs written, the requester run again (the
// window may have opened).
#include "lib/util/log.hpp"
#include "lib/util/stamps.hpp"
#include "transport/rnic/completer.hpp"

#include <rte_mbuf.h>

#include <array>
#include <cstring>
#include <string_view>

#include "lib/wire/bth.hpp"
#include "lib/wire/opcode.hpp"
#include "transport/params.hpp"
#include "transport/rnic/qp.hpp"
#include "transport/rnic/requester.hpp"
#include "transport/rnic/rnic.hpp"
#include "transport/rnic/sge.hpp"
#include "transport/rnic/verbs_newer.hpp"

namespace uroce::rnic {
namespace {

using transport::params::ack_timeout_ns;
using transport::params::kInfiniteRnrRetry;  // (retry_cnt has no infinite value: see params.hpp)
using transport::params::rnr_timer_ns;

enum class Step : uint8_t {
  CheckPsn,
  ImpliedAcks,
  SelectiveNak,
  Dispatch,
  Ack,
  ReadResp,
  AtomicAck,
  RnrNak,
  SeqNak,
  ErrorNak,
  Retry,
  Error,
  Drop,
  Done,
};

struct Ctx {
  transport::Engine& engine;
  Qp& qp;
  const uint8_t* frame;
  const wire::PktInfo& info;
  Psn psn;
  SendWqe* w = nullptr;  // the oldest WQE not yet completed (it holds `psn`)
  ibv_wc_status status = IBV_WC_SUCCESS;
};

// A READ response's bytes or an atomic's original value into the WQE's
// SGEs (which check_local_keys found writable when the WQE started; they
// are looked up again now).
bool scatter(Qp& qp, const SendWqe& w, uint64_t off, const uint8_t* src, uint64_t len) noexcept {
  return sge_scatter(qp.rnic(), qp.pd(), {w.sge, w.num_sge}, off, src, len, IBV_ACCESS_LOCAL_WRITE);
}

RnicCounters& ctr(Ctx& x) noexcept { return x.qp.rnic().counters(); }

wire::AethC aeth(const Ctx& x) noexcept { return wire::AethC(x.frame + x.info.ext_off(wire::kHdrAeth)); }

// The oldest started WQE not yet completed, or nullptr.
SendWqe* oldest(Qp& qp) noexcept {
  CompState& c = qp.comp;
  if (sq_before(c.wqe_idx, qp.sq.head())) c.wqe_idx = qp.sq.head();
  if (!sq_before(c.wqe_idx, qp.req.wqe_hi)) return nullptr;
  return &qp.sq.slot(c.wqe_idx);
}

// `w` (the oldest) is acknowledged: Done, and the window it held freed.
void retire(Qp& qp, SendWqe& w) noexcept {
  CompState& c = qp.comp;
  w.state = WqeState::Done;
  ++c.wqe_idx;
  if (distance(w.last_psn + 1, c.psn) > 0) c.psn = w.last_psn + 1;
  if (w.rd_atomic() && qp.req.rd_atomic_inflight > 0) --qp.req.rd_atomic_inflight;
}

// Taken only from a device that offers selective repeat itself: any other
// NAK, with or without the bit, is the IBA's.
bool selective_nak(const Ctx& x) noexcept {
  if (!x.qp.rnic().selective_repeat() || x.info.op().op != wire::Operation::Ack) return false;
  const wire::BthC bth(x.frame + x.info.bth_off);
  return (bth.resv7() & wire::kResv7Selective) != 0 && aeth(x).type() == wire::AckType::Nak &&
         aeth(x).value() == static_cast<uint8_t>(wire::NakCode::PsnSequenceError);
}

Step check_psn(Ctx& x) {
  // (The QP's state — RTS or SQD — was the receive dispatcher's check.)
  // Responses of the QP's own transport: RC's to an RC QP, XRC's to an
  // XRC send QP (annex A14; one answered with RC's opcodes is taken too,
  // their headers being the same).
  const wire::Transport t = x.info.op().transport;
  const bool ours = x.qp.type() == IBV_QPT_RC ? t == wire::Transport::RC
                                              : x.qp.type() == IBV_QPT_XRC_SEND &&
                                                    (t == wire::Transport::XRC || t == wire::Transport::RC);
  if (!ours) {
    ctr(x).inc(RnicCtr::drop_bad_transport);
    return Step::Drop;
  }
  // Responses come for PSNs we sent and have not seen acknowledged
  // (IBA 9.7.5.1.1); anything else is a duplicate or a ghost.
  if (distance(x.psn, x.qp.comp.psn) < 0 || distance(x.psn, x.qp.req.psn_hi) >= 0) {
    ctr(x).inc(RnicCtr::drop_resp_unexpected);
    return Step::Drop;
  }
  // A responder that keeps what arrives after a gap says so on its ACKs
  // and selective NAKs: spraying may start (DESIGN.md "Spraying").
  if (x.qp.rnic().selective_repeat() && !x.qp.req.peer_keeps &&
      (wire::BthC(x.frame + x.info.bth_off).resv7() & wire::kResv7Selective) != 0) {
    x.qp.req.peer_keeps = true;
  }
  return selective_nak(x) ? Step::SelectiveNak : Step::ImpliedAcks;
}

Step on_selective_nak(Ctx& x) {
  ctr(x).inc(RnicCtr::seq_naks_rcvd);
  ctr(x).inc(RnicCtr::sr_naks_rcvd);
  ++x.qp.tally.sr_naks_rcvd;
  const uint32_t len = (wire::BthC(x.frame + x.info.bth_off).resv7() & wire::kResv7GapMask) + 1u;
  requester_resend(x.engine, x.qp, x.psn, len);
  return Step::Done;
}

Step implied_acks(Ctx& x) {
  while (SendWqe* w = oldest(x.qp)) {
    if (distance(w->last_psn, x.psn) >= 0) {
      x.w = w;
      return Step::Dispatch;
    }
    if (w->rd_atomic()) {
      // A response for a later PSN while this READ/atomic lacks its own:
      // that response was lost (9.7.5.1.4 implied NAK).  Re-request it.
      x.w = w;
      return Step::Retry;
    }
    retire(x.qp, *w);
  }
  ctr(x).inc(RnicCtr::drop_resp_unexpected);  // no WQE holds it (the SQ was reset under it)
  return Step::Drop;
}

Step dispatch(Ctx& x) {
  const wire::OpcodeInfo& op = x.info.op();
  switch (op.op) {
    case wire::Operation::Ack:
      switch (aeth(x).type()) {
        case wire::AckType::Ack: return Step::Ack;
        case wire::AckType::RnrNak: return Step::RnrNak;
        case wire::AckType::Nak:
          return aeth(x).value() == static_cast<uint8_t>(wire::NakCode::PsnSequenceError) ? Step::SeqNak
                                                                                          : Step::ErrorNak;
        case wire::AckType::Reserved: break;
      }
      ctr(x).inc(RnicCtr::drop_resp_unexpected);
      return Step::Drop;
    case wire::Operation::ReadResponse: return Step::ReadResp;
    case wire::Operation::AtomicAck: return Step::AtomicAck;
    case wire::Operation::None: case wire::Operation::Send: case wire::Operation::Write:
    case wire::Operation::ReadRequest: case wire::Operation::CompareSwap: case wire::Operation::FetchAdd:
    case wire::Operation::Flush: case wire::Operation::AtomicWrite: case wire::Operation::Cnp:
      break;
  }
  ctr(x).inc(RnicCtr::drop_resp_unexpected);
  return Step::Drop;
}

// A (coalesced) ACK: acknowledges every PSN up to its own (9.7.5.1.2).
Step on_ack(Ctx& x) {
  SendWqe& w = *x.w;
  if (w.rd_atomic()) {  // a READ/atomic is acknowledged by its response, not an ACK
    ctr(x).inc(RnicCtr::drop_resp_unexpected);
    return Step::Drop;
  }
  x.qp.comp.psn = x.psn + 1;
  if (x.psn == w.last_psn) retire(x.qp, w);
  return Step::Done;
}

Step on_read_resp(Ctx& x) {
  Qp& qp = x.qp;
  CompState& c = qp.comp;
  SendWqe& w = *x.w;
  const wire::OpcodeInfo& op = x.info.op();
  if (w.opcode != IBV_WR_RDMA_READ) {
    ctr(x).inc(RnicCtr::drop_resp_unexpected);
    return Step::Drop;
  }
  if (x.psn != c.psn) {
    // A gap inside the READ's responses: re-request from the first missing
    // PSN, once per gap (later packets of the gap are dropped).
    ctr(x).inc(RnicCtr::drop_resp_out_of_seq);
    return Step::Retry;
  }
  // The first PSN starts the response (FIRST/ONLY).  Past it a re-request
  // is answered either by continuing the message (MIDDLE/LAST, as rxe
  // replays) or by a new one (FIRST/ONLY): both are taken; the length
  // checks below decide.
  if ((x.psn == w.first_psn && !op.first) || (op.has(wire::kHdrAeth) && aeth(x).type() != wire::AckType::Ack)) {
    ctr(x).inc(RnicCtr::drop_bad_opcode_seq);
    return Step::Drop;
  }
  const uint64_t mtu = std::max<uint32_t>(qp.attrs().pmtu_bytes, 256);
  const uint64_t off = static_cast<uint64_t>(distance(x.psn, w.first_psn)) * mtu;
  const uint64_t want = off < w.length ? std::min<uint64_t>(mtu, w.length - off) : 0;
  const bool last = off + want >= w.length;
  if (off != w.read_done || x.info.payload_len != want || op.last != last) {
    ctr(x).inc(RnicCtr::drop_bad_opcode_seq);  // not the response this READ expects here
    return Step::Drop;
  }
  if (!scatter(qp, w, off, x.frame + x.info.payload_off, want)) {
    x.status = IBV_WC_LOC_PROT_ERR;
    return Step::Error;
  }
  UROCE_STAMP(Placed);  // a READ's response leg (bench/stages.cpp --op read)
  w.read_done = off + want;
  c.psn = x.psn + 1;
  if (last) retire(qp, w);
  return Step::Done;
}

Step on_atomic_ack(Ctx& x) {
  SendWqe& w = *x.w;
  const bool atomic = w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP || w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
  if (!atomic || x.psn != w.first_psn || aeth(x).type() != wire::AckType::Ack) {
    ctr(x).inc(RnicCtr::drop_resp_unexpected);
    return Step::Drop;
  }
  // The original remote value, host order, into the 8-byte local buffer.
  uint64_t orig = wire::AtomicAckEthC(x.frame + x.info.ext_off(wire::kHdrAtomicAckEth)).orig();
  w.atomic_orig = orig;
  if (!scatter(x.qp, w, 0, reinterpret_cast<const uint8_t*>(&orig), sizeof orig)) {
    x.status = IBV_WC_LOC_PROT_ERR;
    return Step::Error;
  }
  retire(x.qp, w);
  return Step::Done;
}

// RNR NAK (9.7.5.2.8): wait the time the responder asks, then resend from
// the NAK's PSN; rnr_retry 7 retries for ever (ibv_modify_qp(3)).
Step on_rnr_nak(Ctx& x) {
  CompState& c = x.qp.comp;
  ctr(x).inc(RnicCtr::rnr_naks_rcvd);
  if (c.rnr_wait) return Step::Drop;  // already waiting
  c.psn = x.psn;  // acknowledges the PSNs before it
  if (c.rnr_left == 0) {
    ctr(x).inc(RnicCtr::rnr_retry_exceeded);
    x.status = IBV_WC_RNR_RETRY_EXC_ERR;
    return Step::Error;
  }
  if (c.rnr_left != kInfiniteRnrRetry) --c.rnr_left;
  UROCE_TRACE(TraceCat::Qp, "qp 0x%06x: RNR NAK for PSN 0x%06x, waiting %llu us (rnr_retry left %u)",
              x.qp.qpn().value(), x.psn.value(),
              static_cast<unsigned long long>(rnr_timer_ns(aeth(x).value()) / 1000), c.rnr_left);
  c.rnr_wait = true;
  x.engine.timers().cancel(c.ack_timer);
  x.engine.timers().arm(c.rnr_timer, x.engine.now() + rnr_timer_ns(aeth(x).value()));
  return Step::Done;
}

// PSN sequence error NAK (9.7.5.2.1): the responder expects this PSN;
// everything before it arrived.  Go back N from it.
Step on_seq_nak(Ctx& x) {
  ctr(x).inc(RnicCtr::seq_naks_rcvd);
  if (x.qp.comp.rnr_wait) return Step::Drop;  // the RNR retry resends from there anyway
  x.qp.comp.psn = x.psn;
  return Step::Retry;
}

Step on_error_nak(Ctx& x) {
  switch (static_cast<wire::NakCode>(aeth(x).value())) {
    case wire::NakCode::InvalidRequest: x.status = IBV_WC_REM_INV_REQ_ERR; return Step::Error;
    case wire::NakCode::RemoteAccessError: x.status = IBV_WC_REM_ACCESS_ERR; return Step::Error;
    case wire::NakCode::RemoteOperationalError: x.status = IBV_WC_REM_OP_ERR; return Step::Error;
    case wire::NakCode::InvalidRdRequest: x.status = IBV_WC_REM_INV_RD_REQ_ERR; return Step::Error;
    case wire::NakCode::PsnSequenceError: return Step::SeqNak;
  }
  x.status = IBV_WC_REM_OP_ERR;  // a reserved NAK code (table 43)
  return Step::Error;
}

// Go back N (9.7.5.2): one transport retry is consumed; progress
// since restores them.  retry_cnt counts (7 is not infinite, see above).
Step retry(Ctx& x) {
  CompState& c = x.qp.comp;
  // One retry sequence per PSN: the responses still in flight from before
  // the rewind (later ACKs, the rest of a READ) must not each start
  // another one (rxe's started_retry).  The ACK timer still can, and so
  // does a READ whose re-requested response lost its head in turn (a
  // receive ring that overflowed under a long response overflows under
  // its replay too): once the old response was seen to its end, a
  // response inside the READ is the replay's, and the gap before it is
  // re-requested now rather than at the ACK timeout.  Duplicated or
  // reordered packets of the old response rarely look like that; acting
  // on one costs a re-request and one of retry_cnt.
  if (c.retry_started && c.retry_psn == c.psn) {
    const SendWqe* w = x.w;
    const bool replay = w != nullptr && w->opcode == IBV_WR_RDMA_READ && c.retry_seen_any &&
                        distance(c.retry_seen_hi, w->last_psn) >= 0 && distance(x.psn, w->last_psn) < 0;
    if (!replay) {
      if (!c.retry_seen_any || distance(x.psn, c.retry_seen_hi) > 0) c.retry_seen_hi = x.psn;
      c.retry_seen_any = true;
      return Step::Drop;
    }
    ctr(x).inc(RnicCtr::replay_head_lost);
  }
  if (c.retry_left == 0) {
    ctr(x).inc(RnicCtr::retry_exceeded);
    x.status = IBV_WC_RETRY_EXC_ERR;
    return Step::Error;
  }
  --c.retry_left;
  c.retry_started = true;
  c.retry_psn = c.psn;
  c.retry_seen_any = false;
  requester_shrink_window(x.qp, LossSignal::SeqNak);
  UROCE_TRACE(TraceCat::Qp, "qp 0x%06x: go back N from PSN 0x%06x (retry_cnt left %u, window %u)",
              x.qp.qpn().value(), c.psn.value(), c.retry_left, x.qp.req.window);
  requester_rewind(x.qp);
  return Step::Done;
}

// After any packet that did not fail the QP.
void after(transport::Engine& engine, Qp& qp, Psn before_psn) {
  CompState& c = qp.comp;
  ReqState& r = qp.req;
  const int32_t acked = distance(c.psn, before_psn);  // PSNs this packet acknowledged
  const bool progress = acked > 0;
  if (progress) {
    // The packet being timed is acknowledged: a round-trip sample (Karn:
    // a go-back-N since stopped the timing).
    if (r.rtt_timing && distance(c.psn, r.rtt_psn) > 0) {
      r.rtt_timing = false;
      completer_rtt_sample(qp, engine.now() - r.rtt_sent_ns);
    }
    c.backoff = 0;
    requester_grow_window(qp, static_cast<uint32_t>(acked));
    if (c.psn != c.retry_psn) c.retry_started = false;  // past where the go-back-N began
    c.retry_left = qp.attrs().retry_cnt;
    if (!c.rnr_wait) c.rnr_left = qp.attrs().rnr_retry;
  }
  // An ACK may cover PSNs beyond where a rewind left the requester.
  if (distance(c.psn, r.next_psn) > 0) requester_rewind(qp);
  const bool all_acked = distance(r.psn_hi, c.psn) <= 0;
  if (all_acked) {
    requester_idle(qp);  // its share of the device's window goes back
    cc_idle(qp);         // nothing in flight: a congested QP may change paths
  }
  if (all_acked || c.rnr_wait) {
    engine.timers().cancel(c.ack_timer);
  } else if (progress) {
    completer_arm_ack_timer(engine, qp);
  }
  completer_retire(qp);
  requester_run(engine, qp);
}

}  // namespace

void completer_rx(transport::Engine& engine, Qp& qp, transport::RoceRx& pkt) noexcept {
  UROCE_ASSERT_ENGINE(engine);
  Ctx x{engine, qp, rte_pktmbuf_mtod(pkt.m, const uint8_t*), pkt.info, pkt.info.psn};
  const Psn before_psn = qp.comp.psn;
  Step s = Step::CheckPsn;
  for (;;) {
    switch (s) {
      case Step::CheckPsn: s = check_psn(x); break;
      case Step::ImpliedAcks: s = implied_acks(x); break;
      case Step::SelectiveNak: s = on_selective_nak(x); break;
      case Step::Dispatch: s = dispatch(x); break;
      case Step::Ack: s = on_ack(x); break;
      case Step::ReadResp: s = on_read_resp(x); break;
      case Step::AtomicAck: s = on_atomic_ack(x); break;
      case Step::RnrNak: s = on_rnr_nak(x); break;
      case Step::SeqNak: s = on_seq_nak(x); break;
      case Step::ErrorNak: s = on_error_nak(x); break;
      case Step::Retry: s = retry(x); break;
      case Step::Error:
        rte_pktmbuf_free(pkt.m);
        completer_fail(qp, *x.w, x.status);
        return;
      case Step::Drop:
        rte_pktmbuf_free(pkt.m);
        if (distance(qp.comp.psn, before_psn) > 0) after(engine, qp, before_psn);  // implied ACKs did retire WQEs
        return;
      case Step::Done:
        rte_pktmbuf_free(pkt.m);
        after(engine, qp, before_psn);
        return;
    }
  }
}

namespace {

// Local ACK timeout (9.7.6.1.3): nothing came back in time for the oldest
// outstanding PSN.  Retry from it, or give up after retry_cnt retries.
void on_ack_timeout(Timer& t, uint64_t) {
  Qp& qp = t.owner_as<Qp>();
  transport::Engine& engine = qp.engine();
  CompState& c = qp.comp;
  const ibv_qp_state st = qp.state();
  if ((st != IBV_QPS_RTS && st != IBV_QPS_SQD) || c.rnr_wait) return;
  if (distance(qp.req.psn_hi, c.psn) <= 0) return;  // everything was acknowledged meanwhile
  SendWqe* w = oldest(qp);
  if (w == nullptr) return;
  qp.rnic().counters().inc(RnicCtr::ack_timeouts);
  ++qp.tally.ack_timeouts;
  UROCE_TRACE(TraceCat::Qp, "qp 0x%06x: ACK timeout at PSN 0x%06x (retry_cnt left %u)", qp.qpn().value(),
              c.psn.value(), c.retry_left);
  // `timeout` 0 is the IBA's infinite (9.7.6.1.3): without adaptive
  // retransmission no timer runs at all (as rxe); with it, what was lost
  // is sent again, and the QP never gives up.
  const bool infinite = qp.attrs().timeout == 0;
  if (c.retry_left == 0 && !infinite) {
    qp.rnic().counters().inc(RnicCtr::retry_exceeded);
    completer_fail(qp, *w, IBV_WC_RETRY_EXC_ERR);
    return;
  }
  if (!infinite) --c.retry_left;
  c.retry_started = true;
  c.retry_psn = c.psn;
  c.retry_seen_any = false;
  if (c.backoff < transport::params::kRtoMaxBackoff) ++c.backoff;
  requester_shrink_window(qp, LossSignal::AckTimeout);
  requester_rewind(qp);
  requester_run(engine, qp);  // re-arms the timer
}

// The RNR wait is over: resend from the NAK's PSN.
void on_rnr_timeout(Timer& t, uint64_t) {
  Qp& qp = t.owner_as<Qp>();
  qp.comp.rnr_wait = false;
  const ibv_qp_state st = qp.state();
  if (st != IBV_QPS_RTS && st != IBV_QPS_SQD) return;
  requester_rewind(qp);
  requester_run(qp.engine(), qp);
}

}  // namespace

// ---- send completions -------------------------------------------------------------

void completer_retire(Qp& qp) noexcept {
  UROCE_ASSERT_ENGINE(qp.engine());
  const uint32_t tail = qp.sq.tail();
  while (qp.sq.head() != tail) {
    SendWqe& w = qp.sq.slot(qp.sq.head());
    if (w.state != WqeState::Done && w.state != WqeState::Error) break;
    // IBA 10.8.1 (completion semantics): a CQE for every signaled WQE, and
    // for every WQE completed in error whatever its flags.
    const bool error = w.state == WqeState::Error || w.status != IBV_WC_SUCCESS;
    const bool signaled = error || qp.sq_sig_all() || (w.send_flags & IBV_SEND_SIGNALED);
    ibv_wc wc{};
    if (signaled) {
      wc.wr_id = w.wr_id;
      wc.status = error && w.status == IBV_WC_SUCCESS ? IBV_WC_GENERAL_ERR : w.status;
      const WrInfo& op = wr_info(w.opcode);
      wc.opcode = op.wc;
      wc.qp_num = qp.qpn().value();
      if (!error) {
        wc.byte_len = static_cast<uint32_t>(w.length);  // as rxe: the message length
        if (op.wc_imm) {
          wc.wc_flags = IBV_WC_WITH_IMM;
          wc.imm_data = w.imm_data;
        }
      }
    }
    // The slot is free before its CQE is seen: a program that posts again
    // as soon as it polls the completion finds room (ibv_post_send after
    // each completion at max_send_wr 1, as qperf's latency tests do).  The
    // entry was copied into `wc` first: a poster may reuse the slot now.
    qp.sq.retire();
    if (signaled && qp.send_cq()->push(wc)) UROCE_STAMP(Completed);
  }
  qp.check_drained();
}

void completer_fail(Qp& qp, SendWqe& w, ibv_wc_status status) noexcept {
  UROCE_ASSERT_ENGINE(qp.engine());
  transport::Engine& engine = qp.engine();
  UROCE_TRACE(TraceCat::Qp, "qp 0x%06x: send WQE wr_id 0x%llx failed, ibv_wc_status %d", qp.qpn().value(),
              static_cast<unsigned long long>(w.wr_id), static_cast<int>(status));
  w.status = status;
  w.state = WqeState::Error;
  completer_stop(qp, engine);
  engine.timers().cancel(qp.req.kick);
  completer_retire(qp);  // the Done WQEs before it, then its own error CQE
  qp.send_error();       // RC: ERR; UC/UD: SQE.  The rest is flushed.
}

void completer_flush(Qp& qp) noexcept {
  UROCE_ASSERT_ENGINE(qp.engine());
  // Every WQE not yet completed, from the oldest, completes with
  // WR_FLUSH_ERR (IBA 10.3.1.7); one that failed keeps its own status.
  const uint32_t tail = qp.sq.tail();
  for (uint32_t i = qp.sq.head(); i != tail; ++i) {
    SendWqe& w = qp.sq.slot(i);
    if (w.state == WqeState::Done || w.state == WqeState::Error) continue;
    w.state = WqeState::Error;
    w.status = IBV_WC_WR_FLUSH_ERR;
  }
  qp.req.wqe_idx = tail;
  qp.comp.wqe_idx = tail;
  qp.req.rd_atomic_inflight = 0;
  qp.req.fence_wait = false;
  requester_idle(qp);
  completer_retire(qp);
}

// ---- state and timers ---------------------------------------------------------------

void completer_bind(Qp& qp) noexcept {
  qp.comp.ack_timer.cb = on_ack_timeout;
  qp.comp.ack_timer.owner = &qp;
  qp.comp.rnr_timer.cb = on_rnr_timeout;
  qp.comp.rnr_timer.owner = &qp;
}

uint64_t completer_rto(const Qp& qp) noexcept {
  using transport::params::kRtoMinNs;
  if (!qp.rnic().adaptive_retransmission()) return ack_timeout_ns(qp.attrs().timeout);
  const CompState& c = qp.comp;
  const uint64_t base = c.srtt_ns == 0 ? kRtoMinNs : std::max(kRtoMinNs, c.srtt_ns + 4 * c.rttvar_ns);
  const uint64_t rto = base << c.backoff;  // kRtoMaxBackoff keeps this far from overflowing
  const uint64_t ceiling = ack_timeout_ns(qp.attrs().timeout);  // 0: infinite, no ceiling
  return ceiling == 0 ? rto : std::min(rto, ceiling);
}

void completer_arm_ack_timer(transport::Engine& engine, Qp& qp) noexcept {
  if (const uint64_t t = completer_rto(qp); t != 0) engine.timers().arm(qp.comp.ack_timer, engine.now() + t);
}

void completer_rtt_sample(Qp& qp, uint64_t ns) noexcept {
  cc_rtt_sample(qp, ns);  // the delay-based controller's input (cc.hpp)
  CompState& c = qp.comp;
  if (c.srtt_ns == 0) {  // RFC 6298 2.2
    c.srtt_ns = std::max<uint64_t>(ns, 1);
    c.rttvar_ns = ns / 2;
    return;
  }
  const uint64_t err = ns > c.srtt_ns ? ns - c.srtt_ns : c.srtt_ns - ns;  // 2.3: beta 1/4, alpha 1/8
  c.rttvar_ns = (3 * c.rttvar_ns + err) / 4;
  c.srtt_ns = std::max<uint64_t>((7 * c.srtt_ns + ns) / 8, 1);
}

void completer_reset(Qp& qp, transport::Engine& engine, Psn psn) noexcept {
  CompState& c = qp.comp;
  completer_stop(qp, engine);
  c.srtt_ns = 0;
  c.rttvar_ns = 0;
  c.backoff = 0;
  c.psn = psn;
  c.wqe_idx = qp.sq.head();
  c.retry_left = qp.attrs().retry_cnt;
  c.rnr_left = qp.attrs().rnr_retry;
  c.retry_started = false;
}

void completer_stop(Qp& qp, transport::Engine& engine) noexcept {
  UROCE_ASSERT_ENGINE(engine);
  engine.timers().cancel(qp.comp.ack_timer);
  engine.timers().cancel(qp.comp.rnr_timer);
  qp.comp.rnr_wait = false;
}

}  // namespace uroce::rnic
