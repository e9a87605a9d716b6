// The requester: SQ WQEs -> request packets (IBA 9.7.4 for RC, 9.8 UC,
// 9.9 UD and the GSI QP) and go-back-N rewinding (9.7.4.1.4 / 9.7.5.2).
//
//   requester_run: for each WQE from req.wqe_idx
//     new WQE?   local checks (keys, length), READ/atomic window, fence,
//                PSNs assigned (first_psn .. last_psn)
//     per packet the unacknowledged-PSN window, a send budget, then one
//                packet: opcode from its wr.hpp row by segment, headers from the
//                opcode table, payload gathered from the SGEs into the mbuf
//     last packet: RC waits for the completer (Sent); UC/UD are Done
//   requester_rewind: back to comp.psn, inside the WQE that holds it
#include "transport/rnic/requester.hpp"

#include <endian.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "lib/util/stamps.hpp"
#include "lib/wire/bth.hpp"
#include "lib/wire/opcode.hpp"
#include "transport/params.hpp"
#include "transport/rnic/completer.hpp"
#include "transport/rnic/qp.hpp"
#include "transport/rnic/rnic.hpp"
#include "transport/rnic/sge.hpp"
#include "transport/rnic/tx.hpp"
#include "transport/rnic/verbs_newer.hpp"

namespace uroce::rnic {

using transport::params::kMaxPktsPerAckReq;
using transport::params::kMaxUnackedPsns;
using transport::params::kMinSharePsns;
using transport::params::kMinUnackedPsns;
using transport::params::kNoBufferRetryNs;
using transport::params::kReqBudget;

// What a request's headers add to its payload on the wire, near enough for
// the pacer's look ahead (Ethernet, IPv4, UDP, BTH, RETH, ICRC).
constexpr uint32_t kPaceHeaderBytes = 14 + 20 + 8 + 12 + 16 + 4;

// ---- segmentation --------------------------------------------------------------------
namespace {

using wire::Hdr;

bool is_ud(const Qp& qp) noexcept { return qp.type() == IBV_QPT_UD || qp.is_gsi(); }

uint8_t transport_base(const Qp& qp) noexcept {
  if (is_ud(qp)) return wire::op::kUdBase;
  if (qp.type() == IBV_QPT_XRC_SEND) return wire::op::kXrcBase;  // annex A14: RC's opcodes in the XRC block
  return qp.type() == IBV_QPT_UC ? wire::op::kUcBase : wire::op::kRcBase;
}

uint32_t pmtu(const Qp& qp) noexcept { return std::max<uint32_t>(qp.attrs().pmtu_bytes, 256); }

// PSNs a WQE consumes: one per packet; a READ one per response packet
// (IBA 9.7.4.1.1), at least one.  The largest message at the smallest path
// MTU stays below 2^23 PSNs, so that a READ's last response PSN and the
// next request's PSN still order after its first (IBA 9.7.1: no more than
// 2^23 outstanding PSNs); post_send refuses longer messages.
static_assert(uint64_t{kMaxMsgSize} / 256 < (uint64_t{1} << 23), "a READ could span 2^23 PSNs");
uint32_t psn_count(const Qp& qp, const SendWqe& w) noexcept {
  if (is_ud(qp)) return 1;
  if (wr_info(w.opcode).atomic) return 1;
  const uint64_t mtu = pmtu(qp);
  return static_cast<uint32_t>(std::max<uint64_t>(1, (w.length + mtu - 1) / mtu));
}

// Every SGE's L_Key once per WQE whose data goes out (the local access
// checks of IBA 10.6): the MR exists, belongs to the QP's PD and covers the
// SGE.  A READ's or an atomic's buffers are written only when the response
// comes (the completer's scatter checks them then: LOC_PROT_ERR), as an
// RNIC checks them only when it writes: the request goes out, and a remote
// error, if any, is the one the WQE completes with.
bool check_local_keys(Qp& qp, const SendWqe& w) noexcept {
  if ((w.send_flags & IBV_SEND_INLINE) != 0 || w.rd_atomic()) return true;
  for (uint32_t i = 0; i < w.num_sge; ++i) {
    const ibv_sge& s = w.sge[i];
    if (s.length == 0) continue;
    KeyCheck why{};
    Mr* mr = qp.rnic().lookup_lkey(Lkey(s.lkey), qp.pd(), &why);
    if (mr == nullptr || mr->translate(s.addr, s.length) == nullptr) return false;
  }
  return true;
}

void on_kick(Timer& t, uint64_t) {
  Qp& qp = t.owner_as<Qp>();
  requester_run(qp.engine(), qp);
}

void kick_soon(transport::Engine& engine, Qp& qp, uint64_t delay_ns) noexcept {
  if (!qp.req.kick.armed()) engine.timers().arm(qp.req.kick, engine.now() + delay_ns);
}

enum class Start : uint8_t { Go, Wait, Failed, LocalDone };

// A bind or local invalidate (IBA 10.6.7): carried out here, in send-queue
// order, after every earlier WQE has been sent (and, with IBV_SEND_FENCE,
// after every earlier READ/atomic completed).  It takes no PSN: its
// [first, last] range is empty at next_psn, so an ACK for a later PSN
// retires it like any WQE before that PSN, and the completer writes its
// CQE in order.  A failure completes it in error and the QP with it.
Start start_local(Qp& qp, SendWqe& w) noexcept {
  ReqState& r = qp.req;
  if ((w.send_flags & IBV_SEND_FENCE) != 0 && r.rd_atomic_inflight > 0) {
    r.fence_wait = true;
    return Start::Wait;
  }
  r.fence_wait = false;
  const ibv_wc_status st = w.opcode == IBV_WR_BIND_MW ? qp.rnic().bind_mw(qp, w)
                                                       : qp.rnic().local_invalidate(qp, Rkey(w.imm_data));
  if (st != IBV_WC_SUCCESS) {
    completer_fail(qp, w, st);
    return Start::Failed;
  }
  w.first_psn = r.next_psn;
  w.last_psn = r.next_psn - 1;
  w.sent = 0;
  w.state = WqeState::Done;
  r.wqe_hi = r.wqe_idx + 1;
  return Start::LocalDone;
}

// A WQE the requester has not started before (post_send checked it
// against its row and the QP): its L_Keys, windows, PSNs.
Start start_wqe(Qp& qp, SendWqe& w) noexcept {
  ReqState& r = qp.req;
  const WrInfo& ops = wr_info(w.opcode);
  if (w.post_error != IBV_WC_SUCCESS) {  // taken by post_send, but not one this QP can carry out
    completer_fail(qp, w, w.post_error);
    return Start::Failed;
  }
  if (ops.local) return start_local(qp, w);
  if (!check_local_keys(qp, w)) {
    completer_fail(qp, w, IBV_WC_LOC_PROT_ERR);
    return Start::Failed;
  }
  // IBV_SEND_FENCE (the fence indicator of IBA chapter 10): wait until
  // every earlier READ/atomic completed.
  if ((w.send_flags & IBV_SEND_FENCE) != 0 && r.rd_atomic_inflight > 0) {
    r.fence_wait = true;
    return Start::Wait;
  }
  r.fence_wait = false;
  // At most max_rd_atomic READ/atomics outstanding (the initiator depth;
  // 0 is taken as 1 so that a READ can ever go).
  if (ops.rd_atomic && r.rd_atomic_inflight >= std::max<uint32_t>(1, qp.attrs().max_rd_atomic)) return Start::Wait;

  w.first_psn = r.next_psn;
  w.last_psn = r.next_psn + (psn_count(qp, w) - 1);
  w.sent = 0;
  w.cursor = SgeCursor{};
  w.read_done = 0;
  w.atomic_orig = 0;
  w.state = WqeState::Sending;
  if (ops.rd_atomic) ++r.rd_atomic_inflight;
  r.wqe_hi = r.wqe_idx + 1;
  return Start::Go;
}

// Gather `len` bytes of `w` at message offset `off` into `buf`: inline
// bytes, or the SGEs through the WQE's cursor (each packet continues where
// the last one ended: a message costs O(packets + SGEs)).  False when an
// SGE no longer translates (deregistered or unmapped since the WQE's check).
bool gather(Qp& qp, SendWqe& w, uint64_t off, uint8_t* buf, uint64_t len, SgeCursor* cursor) noexcept {
  if (len == 0) return true;
  if ((w.send_flags & IBV_SEND_INLINE) != 0) {
    if (off + len > w.length || off + len > kMaxInlineData) return false;
    std::memcpy(buf, w.inline_bytes() + off, len);
    return true;
  }
  return sge_gather(qp.rnic(), qp.pd(), {w.sge, w.num_sge}, off, buf, len, 0, cursor);
}

enum class Emit : uint8_t {
  Sent,    // on its way (or lost on the way, counted): the PSN is taken
  NoMbuf,  // no buffer: try again later
  Failed,  // the payload could not be gathered: the WQE failed (LOC_PROT_ERR), the send queue with it
};

// Spraying (DESIGN.md "Spraying"): the UDP source port of the next
// request.  Port 0 of the round is the QP's own (its path, which repath
// may move); the others sit an odd stride apart in RoCEv2's range
// (A17.3.2.1: 0xC000-0xFFFF), so that an ECMP hash over the 5-tuple
// spreads them as it spreads flows.
constexpr uint32_t kSprayStride = 0x9E5;

uint16_t request_port(Qp& qp) noexcept {
  const uint16_t own = qp.attrs().sport;
  if (!requester_sprays(qp)) return own;
  ReqState& r = qp.req;
  const uint32_t k = r.spray_next;
  r.spray_next = k + 1 >= qp.rnic().spray_ports() ? 0 : k + 1;
  return static_cast<uint16_t>(0xC000u | ((own + k * kSprayStride) & 0x3FFFu));
}

// Build and send one request packet of `w` at `psn`.  `off` is the
// message offset of its payload (SEND/WRITE) or of the remaining READ;
// `cursor` the WQE's own (the next packet in order) or none (a selective
// resend: the gather seeks).
Emit emit(transport::Engine& engine, Qp& qp, SendWqe& w, Seg seg, uint64_t off, uint32_t len, bool ack_req,
          Psn psn, SgeCursor* cursor) noexcept {
  ReqState& r = qp.req;
  const WrInfo& ops = wr_info(w.opcode);
  const uint8_t opcode = static_cast<uint8_t>(transport_base(qp) | ops.code[static_cast<size_t>(seg)]);
  const wire::OpcodeInfo& info = wire::opcode_info(opcode);
  const bool ud = is_ud(qp);
  const AhAttr& path = ud ? w.ud_path : qp.attrs().path;

  rte_mbuf* m = engine.alloc();
  if (m == nullptr) return Emit::NoMbuf;

  wire::PktDesc d;
  tx_fill_path(engine, path, ud ? qp.attrs().sport : request_port(qp), d);
  d.udp_checksum = 0;  // RoCEv2 sends 0 (A17.4.3)
  d.opcode = opcode;
  d.psn = psn;
  d.ack_req = ack_req;
  // Selective repeat offered (DESIGN.md "Loss recovery on a lossy link"),
  // and whether these requests are sprayed (the responder then waits
  // before it NAKs a gap).
  if (qp.reliable() && qp.rnic().selective_repeat()) {
    d.resv7 = requester_sprays(qp) ? wire::kResv7Selective | wire::kResv7Sprayed : wire::kResv7Selective;
  }
  if (!qp.is_gsi()) cc_mark_data(qp.rnic(), d);  // ECT(0) (cc.hpp)
  d.se = info.last && (w.send_flags & IBV_SEND_SOLICITED) != 0;
  d.dest_qp = ud ? w.remote_qpn : Qpn(qp.attrs().dest_qp_num);
  if (qp.is_gsi()) d.pkey = kDefaultPkey;  // GSI MADs go with the default P_Key (IBA chapter 13)
  if (info.has(wire::kHdrDeth)) {
    // C10-15: a Q_Key with the high bit set means "use the QP's own".
    const uint32_t own = qp.is_gsi() ? kGsiQkey : qp.attrs().qkey;
    d.deth_qkey = Qkey((w.remote_qkey & 0x80000000u) != 0 ? own : w.remote_qkey);
    d.deth_src_qp = qp.qpn();
  }
  if (info.has(wire::kHdrXrceth)) d.xrceth_srq = w.remote_srqn;  // every XRC request names its SRQ (A14)
  if (info.has(wire::kHdrReth)) {
    d.reth_va = w.remote_addr + off;
    d.reth_rkey = w.rkey;
    d.reth_len = static_cast<uint32_t>(w.length - off);  // WRITE: the whole message; READ: what remains
  }
  if (info.has(wire::kHdrFeth)) {  // FLUSH: its range's length, not a payload's
    d.feth = w.feth;
    d.reth_len = w.flush_len;
  }
  if (info.has(wire::kHdrAtomicEth)) {
    d.atomic_va = w.remote_addr;
    d.atomic_rkey = w.rkey;
    const bool cas = w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP;  // IBA 9.4.5: CmpSwap's compare and swap, FetchAdd's add
    d.atomic_swap_add = cas ? w.swap : w.compare_add;
    d.atomic_compare = cas ? w.compare_add : 0;
  }
  if (info.immediate) d.imm = be32toh(w.imm_data);  // kept in wire order in the WQE
  if (info.invalidate) d.ieth_rkey = Rkey(w.imm_data);  // invalidate_rkey shares the field
  const uint32_t payload = info.has(wire::kHdrPayload) ? len : 0;
  const TxResult sent =
      tx_frame(engine, m, path, d, payload, [&](uint8_t* dst) { return gather(qp, w, off, dst, payload, cursor); });
  if (sent == TxResult::CopyFault) {
    // An SGE deregistered or unmapped since the WQE's check (IBA 10.6.3:
    // local protection error); nothing is sent in its place.
    completer_fail(qp, w, IBV_WC_LOC_PROT_ERR);
    return Emit::Failed;
  }

  // A packet lost on the way still takes its PSN: RC retransmits it after
  // the ACK timeout; UC/UD lose it and still complete successfully (they
  // are unreliable: rxe and hardware complete a UD send whose destination
  // is unreachable).  Each loss is counted under its reason.
  RnicCounters& ctr = qp.rnic().counters();
  switch (sent) {
    case TxResult::Sent:
      ctr.inc(RnicCtr::req_pkts);
      if (d.sport != qp.attrs().sport) ctr.inc(RnicCtr::spray_pkts);
      if (cc_tracking(qp.cc)) cc_sent(engine, qp, static_cast<uint32_t>(wire::frame_len(d, payload)));
      if (distance(psn, r.psn_hi) < 0) {
        const bool go_back_n = cursor != nullptr;
        ctr.inc(go_back_n ? RnicCtr::req_retrans_pkts : RnicCtr::sr_resent_pkts);
        ++(go_back_n ? qp.tally.retrans_pkts : qp.tally.sr_resent_pkts);
      }
      break;
    case TxResult::TooLong:
      ctr.inc(RnicCtr::drop_tx_too_long);
      break;
    case TxResult::NoNeighbour:
      ctr.inc(RnicCtr::drop_tx_no_neigh);
      break;
    case TxResult::CopyFault:
      break;  // handled above
  }
  return Emit::Sent;
}

}  // namespace

// ---- the requester ---------------------------------------------------------------------

// The PSNs this QP may have outstanding now: its own window (shrunk by
// loss), within an equal share of kMaxUnackedPsns among the device's
// requesters with packets outstanding (params.hpp, kMinSharePsns).
uint32_t send_window(const Qp& qp) noexcept {
  const uint32_t n = std::max<uint32_t>(1, qp.rnic().active_senders());
  return std::min(qp.req.window, std::max(kMinSharePsns, kMaxUnackedPsns / n));
}

namespace {

// The next packet of `w`, at r.next_psn: its segment, its payload's
// message offset (SEND/WRITE) or the offset of what a READ still asks
// for, and its payload length.
struct NextPkt {
  Seg seg = Seg::Only;
  uint64_t off = 0;
  uint32_t len = 0;
  bool last() const noexcept { return seg == Seg::Only || seg == Seg::Last; }
};

// The segment of a multi-packet SEND or WRITE that starts at message
// offset `off` (< w.length, or 0 for an empty message).
NextPkt segment_at(const Qp& qp, const SendWqe& w, uint64_t off) noexcept {
  NextPkt p;
  p.off = off;
  p.len = static_cast<uint32_t>(std::min<uint64_t>(pmtu(qp), w.length - off));
  const bool first = off == 0;
  const bool last = off + p.len == w.length;
  p.seg = first ? (last ? Seg::Only : Seg::First) : (last ? Seg::Last : Seg::Middle);
  return p;
}

NextPkt next_packet(const Qp& qp, const SendWqe& w, const WrInfo& ops) noexcept {
  const uint32_t mtu = pmtu(qp);
  NextPkt p;
  if (ops.multi && !is_ud(qp)) {
    p = segment_at(qp, w, w.sent);
  } else if (w.opcode == IBV_WR_RDMA_READ) {
    const uint64_t psn_off = static_cast<uint32_t>(distance(qp.req.next_psn, w.first_psn));
    p.off = std::min<uint64_t>(psn_off * mtu, w.length);  // a re-request asks only for the rest
  } else {
    p.len = static_cast<uint32_t>(w.length);  // UD: the whole message in one packet
  }
  return p;
}

// The BTH AckReq bit (IBA 9.2, the BTH's A bit: the requester's choice; a
// responder may acknowledge only what asks, as rxe does, 9.7.5.1.1).  It
// goes on:
// - a message's last packet when an ACK is due for it: the WQE is signaled
//   (its CQE waits for the ACK) or a READ/atomic, or no message follows it
//   at once (it is the last the SQ holds now, the next WQE is a bind or
//   local invalidate, which sends nothing, or the SQ is draining: SQD
//   starts no later message).  A message that another follows leaves the
//   ask to that one: a burst of unsignaled messages costs the peer one ACK,
//   not one per message.  Every other way out of requester_run's loop comes
//   back (budget, full ring, no mbuf: kick_soon; Start::Wait: on a READ or
//   atomic response) or rewinds (the SQD break);
// - at least every kMaxPktsPerAckReq packets;
// - the packet that fills the send window (`window_full`: a smaller window
//   would wait for the timer), or the one more a shrunk window lets go
//   (`solicit`);
// - the first packet a go-back-N resends: the oldest PSN, whose
//   acknowledgement is progress (retry_cnt restored, the window growing
//   again) even when a later packet of the resent window is lost too;
//   otherwise only the window's last packet asked, and its loss cost
//   another ACK timeout and another of retry_cnt however much arrived;
// - (requester_run) a paced QP's last packet before its pacer makes it
//   wait.
bool ack_req_needed(const Qp& qp, const SendWqe& w, const WrInfo& ops, bool last_pkt, bool window_full,
                    bool solicit) noexcept {
  const ReqState& r = qp.req;
  const uint32_t next = r.wqe_idx + 1;
  const bool message_follows =
      next != qp.sq.tail() && !qp.sq.slot(next).local_op() && qp.state() != IBV_QPS_SQD;
  const bool ack_due = last_pkt && (ops.rd_atomic || qp.sq_sig_all() || (w.send_flags & IBV_SEND_SIGNALED) != 0 ||
                                    !message_follows);
  return ack_due || window_full || solicit || r.ackreq_next || r.pkts_since_ackreq + 1 >= kMaxPktsPerAckReq;
}

// What starting the WQE at r.wqe_idx (or passing it) leaves requester_run to do.
enum class Next : uint8_t { Send, Again, Stop, Failed };

Next reach_wqe(Qp& qp, SendWqe& w, ibv_qp_state st, bool& done_local) noexcept {
  ReqState& r = qp.req;
  if (!sq_before(r.wqe_idx, r.wqe_hi)) {
    if (st == IBV_QPS_SQD) {  // SQ drain: no new message (IBA 10.3.1.4)
      // The drain ends on an ACK.  The QP went to SQD between our runs,
      // after a message that left its AckReq to the next one: resend what
      // is unacknowledged (a go-back-N; the responder acknowledges the
      // duplicates), asking on its first and last packets.
      if (qp.reliable() && r.pkts_since_ackreq != 0 && distance(r.psn_hi, qp.comp.psn) > 0) {
        requester_rewind(qp);
        return Next::Again;
      }
      return Next::Stop;
    }
    switch (start_wqe(qp, w)) {
      case Start::Go: return Next::Send;
      case Start::Wait: return Next::Stop;
      case Start::Failed: return Next::Failed;
      case Start::LocalDone:
        ++r.wqe_idx;
        done_local = true;
        return Next::Again;
    }
  }
  if (w.local_op()) {
    ++r.wqe_idx;  // done when first reached; a retransmission passes over it
    return Next::Again;
  }
  return Next::Send;
}

}  // namespace

void requester_run(transport::Engine& engine, Qp& qp) noexcept {
  UROCE_ASSERT_ENGINE(engine);
  const ibv_qp_state st = qp.state();
  if (st != IBV_QPS_RTS && st != IBV_QPS_SQD) return;
  ReqState& r = qp.req;
  CompState& c = qp.comp;
  if (c.rnr_wait) return;  // the RNR timer restarts us
  if (r.wqe_idx != qp.sq.tail()) UROCE_STAMP(Picked);
  const bool rc = qp.reliable();
  uint32_t budget = kReqBudget;
  bool done_unreliable = false;
  bool done_local = false;
  while (r.wqe_idx != qp.sq.tail()) {
    SendWqe& w = qp.sq.slot(r.wqe_idx);
    const Next n = reach_wqe(qp, w, st, done_local);
    if (n == Next::Failed) return;
    if (n == Next::Stop) break;
    if (n == Next::Again) continue;
    if (budget == 0) {
      kick_soon(engine, qp, 0);  // next poll iteration: let RX and other QPs run
      break;
    }
    if (engine.tx_stalled()) {  // the port's ring is full: build nothing it would drop
      kick_soon(engine, qp, kNoBufferRetryNs);
      break;
    }
    if (const uint64_t wait = qp.cc.pacer.wait(engine.now()); wait != 0) {  // below the line rate (cc.hpp)
      qp.rnic().counters().inc(RnicCtr::rp_paced_waits);
      kick_soon(engine, qp, wait);
      break;
    }
    // Past the window the completer reruns us on the next ACK.  One must
    // come: the last packet sent asked for it (it filled the window) unless
    // the window shrank under packets sent since (another sender took its
    // share, or a budget break came first); then one packet more goes,
    // asking.
    uint32_t win = rc ? send_window(qp) : 0;
    bool solicit = false;
    if (rc && distance(r.next_psn, c.psn) >= static_cast<int32_t>(win)) {
      if (r.pkts_since_ackreq == 0) break;
      solicit = true;
    }
    const WrInfo& ops = wr_info(w.opcode);
    const NextPkt p = next_packet(qp, w, ops);
    if (rc && !r.active) {  // its first packet outstanding: it takes its share from now
      r.active = true;
      qp.rnic().sender_active(true);
      win = send_window(qp);
    }
    const bool window_full = rc && distance(r.next_psn + 1, c.psn) >= static_cast<int32_t>(win);
    // Paced below the line rate (cc.hpp): the packet before a pause asks
    // for an ACK, so that nothing unsolicited waits out the pause and the
    // ACK timer (a slow rate's pause may be longer than it).
    const bool pause_next =
        rc && qp.cc.pacer.pacing() && qp.cc.pacer.pauses_after(engine.now(), p.len + kPaceHeaderBytes);
    const bool ack_req = rc && (ack_req_needed(qp, w, ops, p.last(), window_full, solicit) || pause_next);
    const Emit e = emit(engine, qp, w, p.seg, p.off, p.len, ack_req, r.next_psn, &w.cursor);
    if (e == Emit::Failed) return;
    if (e == Emit::NoMbuf) {
      kick_soon(engine, qp, kNoBufferRetryNs);
      break;
    }
    if (rc) r.pkts_since_ackreq = ack_req ? 0 : r.pkts_since_ackreq + 1;
    if (rc && ack_req && !r.rtt_timing && distance(r.next_psn, r.psn_hi) >= 0) {  // sent for the first time
      r.rtt_timing = true;
      r.rtt_psn = r.next_psn;
      r.rtt_sent_ns = engine.now();
    }
    r.ackreq_next = false;
    --budget;
    if (ops.multi && !is_ud(qp)) {
      w.sent = p.off + p.len;
      r.next_psn += 1;
    } else {
      r.next_psn = w.last_psn + 1;
    }
    if (distance(r.next_psn, r.psn_hi) > 0) r.psn_hi = r.next_psn;
    if (p.last()) {
      w.state = rc ? WqeState::Sent : WqeState::Done;
      done_unreliable = done_unreliable || !rc;
      ++r.wqe_idx;
    }
  }
  if (done_unreliable || done_local) completer_retire(qp);
  if (rc && distance(r.psn_hi, c.psn) > 0 && !c.ack_timer.armed()) completer_arm_ack_timer(engine, qp);
}

void requester_rewind(Qp& qp) noexcept {
  UROCE_ASSERT_ENGINE(qp.engine());
  ReqState& r = qp.req;
  const CompState& c = qp.comp;
  if (!qp.reliable()) return;
  const uint32_t mtu = pmtu(qp);
  r.next_psn = c.psn;
  r.pkts_since_ackreq = 0;
  r.ackreq_next = true;
  r.rtt_timing = false;  // Karn: what is sent again times no round trip
  uint32_t idx = c.wqe_idx;
  if (sq_before(idx, qp.sq.head())) idx = qp.sq.head();
  // The WQE that holds comp.psn: the first started one not wholly acknowledged.
  while (sq_before(idx, r.wqe_hi) && distance(qp.sq.slot(idx).last_psn, c.psn) < 0) ++idx;
  r.wqe_idx = idx;
  for (uint32_t i = idx; sq_before(i, r.wqe_hi); ++i) {
    SendWqe& w = qp.sq.slot(i);
    const int32_t in = i == idx ? std::max(0, distance(c.psn, w.first_psn)) : 0;
    if (w.local_op()) continue;  // carried out once, when first reached
    w.sent = std::min<uint64_t>(static_cast<uint64_t>(in) * mtu, w.length);
    w.state = WqeState::Sending;  // the gather cursor seeks to w.sent on the next packet
  }
}

namespace {

// The packet of `w` at `psn` again, as it went the first time: a SEND or
// WRITE's segment at its offset; a READ's or an atomic's request only for
// its first PSN (the rest of a READ's PSNs are its responses').
bool resend_one(transport::Engine& engine, Qp& qp, SendWqe& w, Psn psn, bool ack_req) noexcept {
  const WrInfo& ops = wr_info(w.opcode);
  if (w.local_op() || distance(psn, w.first_psn) < 0) return true;
  NextPkt p;  // a READ's or an atomic's request: Only, from offset 0
  if (ops.multi && !is_ud(qp)) {
    const uint64_t off = static_cast<uint64_t>(distance(psn, w.first_psn)) * pmtu(qp);
    if (off > w.length || (off == w.length && w.length != 0)) return true;
    p = segment_at(qp, w, off);
  } else if (psn != w.first_psn) {
    return true;
  }
  return emit(engine, qp, w, p.seg, p.off, p.len, ack_req, psn, nullptr) == Emit::Sent;
}

}  // namespace

void requester_resend(transport::Engine& engine, Qp& qp, Psn from, uint32_t n) noexcept {
  UROCE_ASSERT_ENGINE(engine);
  ReqState& r = qp.req;
  const CompState& c = qp.comp;
  const ibv_qp_state st = qp.state();
  if (!qp.reliable() || (st != IBV_QPS_RTS && st != IBV_QPS_SQD) || c.rnr_wait) return;
  uint32_t idx = c.wqe_idx;
  if (sq_before(idx, qp.sq.head())) idx = qp.sq.head();
  // Only what this pass sent: past r.next_psn the requester sends anyway.
  uint32_t left = std::min<uint32_t>(n, static_cast<uint32_t>(std::max(0, distance(r.next_psn, from))));
  for (Psn psn = from; left > 0; psn += 1, --left) {
    if (distance(psn, c.psn) < 0) continue;  // acknowledged since
    while (sq_before(idx, r.wqe_hi) && distance(qp.sq.slot(idx).last_psn, psn) < 0) ++idx;
    if (!sq_before(idx, r.wqe_hi)) return;
    if (!resend_one(engine, qp, qp.sq.slot(idx), psn, /*ack_req=*/left == 1)) return;  // no buffer: the NAK comes again
  }
}

bool requester_sprays(const Qp& qp) noexcept {
  return qp.req.peer_keeps && qp.rnic().spray_ports() > 1 && qp.reliable();
}

void requester_shrink_window(Qp& qp, LossSignal why) noexcept {
  UROCE_ASSERT_ENGINE(qp.engine());
  ReqState& r = qp.req;
  switch (why) {
    case LossSignal::SeqNak: r.window = std::max(kMinUnackedPsns, r.window / 2); break;
    case LossSignal::AckTimeout: r.window = kMinUnackedPsns; break;
  }
}

void requester_grow_window(Qp& qp, uint32_t acked_psns) noexcept {
  UROCE_ASSERT_ENGINE(qp.engine());
  ReqState& r = qp.req;
  r.window = static_cast<uint32_t>(std::min<uint64_t>(kMaxUnackedPsns, uint64_t{r.window} + acked_psns));
}

void requester_idle(Qp& qp) noexcept {
  UROCE_ASSERT_ENGINE(qp.engine());
  ReqState& r = qp.req;
  if (!r.active) return;
  r.active = false;
  qp.rnic().sender_active(false);
}

void sender_reset(Qp& qp, transport::Engine& engine) noexcept {
  ReqState& r = qp.req;
  requester_idle(qp);
  engine.timers().cancel(r.kick);
  const Psn psn(qp.attrs().sq_psn);
  const uint32_t head = qp.sq.head();
  r.next_psn = psn;
  r.wqe_idx = head;
  r.ackreq_next = false;
  r.rd_atomic_inflight = 0;
  r.pkts_since_ackreq = 0;
  r.fence_wait = false;
  r.psn_hi = psn;
  r.wqe_hi = head;
  // A rate controller starts at line rate and hears of a queue a round
  // trip later: under one, the first round trip is a window's
  // (params.hpp kInitialUnackedPsns).  Without one, the whole window, as a
  // hardware RNIC sends what its send queue holds.
  r.window = qp.rnic().cc().mode == config::CcMode::kNone ? kMaxUnackedPsns
                                                          : transport::params::kInitialUnackedPsns;
  r.rtt_timing = false;
  r.peer_keeps = false;
  r.spray_next = 0;
  cc_reset(qp, engine);
  completer_reset(qp, engine, psn);
}

void requester_bind(Qp& qp) noexcept {
  qp.req.kick.cb = on_kick;
  qp.req.kick.owner = &qp;
  cc_bind(qp);
}

}  // namespace uroce::rnic
