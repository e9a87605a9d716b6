// The responder (IBA 9.7.4.1, 9.7.5, 9.8, 9.9): request packets, in PSN
// order, into memory and receive CQEs; ACK / NAK / READ responses / atomic
// ACKs back to the requester.
//
// One packet runs through a state machine of small checks, in the order
// IBA 9.7.4.1 and Linux rxe (rxe_resp.c) take them:
//
//   CheckQp -> CheckPsn -> (XRC: CheckSrq) -> CheckOpSeq -> CheckAccess -> CheckResource
//     -> CheckLength -> CheckRkey -> Execute -> (Complete) -> Acknowledge
//   side exits: Duplicate (9.7.5.1.4), NakPsnSeq (C9-114), Rnr (9.7.5.1.1),
//               Fault (class C errors: NAK + QP to ERR; UC/UD: drop)
//
// [engine] everything here runs on the engine thread.
#include "lib/util/log.hpp"
#include "transport/rnic/responder.hpp"

#include <endian.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <string_view>

#include "lib/util/spin_guard.hpp"
#include "lib/util/stamps.hpp"
#include "lib/wire/bth.hpp"
#include "lib/wire/ext.hpp"
#include "lib/wire/grh.hpp"
#include "lib/wire/icrc.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"
#include "transport/engine.hpp"
#include "transport/params.hpp"
#include "transport/rnic/memory.hpp"
#include "transport/rnic/qp.hpp"
#include "transport/rnic/rnic.hpp"
#include "transport/rnic/sge.hpp"
#include "transport/rnic/tx.hpp"
#include "transport/rnic/verbs_newer.hpp"

#include "transport/rnic/responder_internal.hpp"

namespace uroce::rnic {
namespace resp {


// The access bits a FLUSH needs of its QP and of the MR its R_Key names:
// one per placement type it asks for (rxe: IB_ACCESS_FLUSH_GLOBAL /
// _PERSISTENT); -1 for a FETH that names no placement type, one unknown
// here, a selectivity level other than RANGE or MR, or sets reserved bits
// (wire::feth_known).
int flush_rights(uint32_t feth) noexcept {
  if (!wire::feth_known(feth)) return -1;
  const uint32_t type = wire::feth_placement(feth);
  return ((type & wire::kFethGlobal) != 0 ? verbs_newer::kAccessFlushGlobal : 0) |
         ((type & wire::kFethPersistent) != 0 ? verbs_newer::kAccessFlushPersistent : 0);
}

// ---- sending -----------------------------------------------------------------------

// A response's opcode: `code` in the QP's transport block (an XRC receive
// QP answers with XRC's, annex A14).
uint8_t resp_opcode(const Qp& qp, uint8_t code) noexcept {
  return static_cast<uint8_t>((qp.type() == IBV_QPT_XRC_RECV ? wire::op::kXrcBase : wire::op::kRcBase) | code);
}

wire::PktDesc response_desc(const transport::Engine& engine, Qp& qp, uint8_t opcode, Psn psn,
                            uint8_t syndrome) noexcept {
  qp.resp.last_ack = nullptr;  // a response follows it: a later ACK may not rewrite it (send_ack)
  wire::PktDesc d;
  tx_fill_path(engine, qp.attrs().path, qp.attrs().sport, d);
  d.opcode = opcode;
  d.dest_qp = Qpn(qp.attrs().dest_qp_num);
  d.psn = psn;
  d.aeth_syndrome = syndrome;
  d.aeth_msn = qp.resp.msn;
  if (qp.resp.peer_offers_sr && syndrome == ack_syndrome()) d.resv7 = wire::kResv7Selective;
  return d;
}
wire::PktDesc response_desc(Rx& r, uint8_t opcode, Psn psn, uint8_t syndrome = ack_syndrome()) noexcept {
  return response_desc(r.engine, r.qp, opcode, psn, syndrome);
}

// The QP's last ACK still waits in the engine's queue (RespState::last_ack):
// it becomes this one.  False when it has left (or there is none).
bool coalesce_ack(Rx& r, Psn psn, uint8_t syndrome) noexcept {
  RespState& s = r.qp.resp;
  if (s.last_ack == nullptr || !r.engine.waiting(s.last_ack, s.last_ack_gen)) return false;
  uint8_t* f = rte_pktmbuf_mtod(s.last_ack, uint8_t*);
  const wire::PktInfo pi = wire::parse({f, s.last_ack->data_len});
  if (pi.cls != wire::FrameClass::RoceV2 || !pi.op().has(wire::kHdrAeth)) return false;
  wire::Bth(f + pi.bth_off).set_psn(psn);
  wire::Aeth aeth(f + pi.ext_off(wire::kHdrAeth));
  aeth.set_syndrome(syndrome);
  aeth.set_msn(s.msn);
  wire::store_icrc(f + pi.icrc_off, wire::compute_icrc(f, pi));
  r.ctr.inc(RnicCtr::acks_coalesced);
  return true;
}

// ACK, NAK or RNR NAK (IBA 9.7.5.1.1-2).  An ACK whose predecessor has not
// left yet replaces it (coalesce_ack): a stream of small messages costs
// the peer one ACK per flush, not one per message.
void send_ack(Rx& r, Psn psn, uint8_t syndrome) noexcept {
  const bool plain = syndrome == ack_syndrome();
  if (plain && coalesce_ack(r, psn, syndrome)) return;
  wire::PktDesc d = response_desc(r, resp_opcode(r.qp, wire::op::kAck), psn, syndrome);
  rte_mbuf* m = r.engine.alloc();
  if (m == nullptr) return;
  const uint64_t gen = r.engine.tx_generation();
  if (tx_frame(r.engine, m, r.qp.attrs().path, d, 0, [](uint8_t*) { return true; }) != TxResult::Sent) return;
  r.ctr.inc(RnicCtr::resp_pkts);
  // Only an ACK in the engine's queue may be rewritten; one looped back or
  // waiting for its neighbour is not there (Engine::waiting).
  if (plain && r.engine.waiting(m, gen)) {
    r.qp.resp.last_ack = m;
    r.qp.resp.last_ack_gen = gen;
  }
}

void send_atomic_ack(Rx& r, Psn psn, uint64_t orig) noexcept {
  wire::PktDesc d = response_desc(r, resp_opcode(r.qp, wire::op::kAtomicAck), psn);
  d.atomic_ack_orig = orig;
  if (tx_send(r.engine, r.qp.attrs().path, d)) r.ctr.inc(RnicCtr::resp_pkts);
}

// ---- READ response streams ---------------------------------------------------------

// READ responses for [va, va+len) under `rkey` from `psn` on, segmented by
// the path MTU (IBA 9.7.5.1.6-7).  `first`: the response starts a message
// (FIRST/ONLY); a replay from the middle of one continues it with
// MIDDLE/LAST, as rxe sends it.  AETH on FIRST/LAST/ONLY (C9-28).
void stream_start(Qp& qp, const Pd* pd, Rkey rkey, uint32_t epoch, uint64_t va, uint32_t len, Psn psn,
                  bool first) noexcept {
  RespState::ReadStream& st = qp.resp.stream;
  st.active = true;
  st.pd = pd;
  st.first = first;
  st.rkey = rkey;
  st.epoch = epoch;
  st.va = va;
  st.resid = len;
  st.pkts_left = len == 0 ? 1 : (len + qp.attrs().pmtu_bytes - 1) / qp.attrs().pmtu_bytes;
  st.psn = psn;
}

enum class Pump : uint8_t { Done, More, NoBuffer, Paced, Refused };  // Paced: its pacer holds it (cc.hpp)

// Send up to kRespBudget packets of the stream.  The R_Key is checked
// again over what is left (the MR may have been deregistered or
// re-registered since: deregistration runs between engine iterations, so
// one check per burst covers every packet of it), and every byte is read
// through the memory guard (memory.hpp: memory unmapped since registration
// refuses the rest of the response).
Pump stream_pump(transport::Engine& engine, Qp& qp) noexcept {
  RespState::ReadStream& st = qp.resp.stream;
  const uint8_t* src = nullptr;
  if (st.resid != 0) {
    KeyCheck check = KeyCheck::Ok;
    uint32_t epoch = 0;
    src = qp.rnic().check_rkey(st.rkey, st.va, st.resid, IBV_ACCESS_REMOTE_READ, st.pd, &check, &epoch, &qp);
    if (src == nullptr || epoch != st.epoch) return Pump::Refused;
  }
  const uint32_t mtu = qp.attrs().pmtu_bytes;
  for (uint32_t budget = kRespBudget; budget > 0 && st.pkts_left > 0; --budget) {
    // The port's ring is full: wait for room rather than build frames it
    // would drop (the tail of a long response lost costs the requester
    // its ACK timeout).
    if (engine.tx_stalled()) return Pump::NoBuffer;
    if (qp.cc.pacer.wait(engine.now()) != 0) {  // below the line rate (cc.hpp)
      qp.rnic().counters().inc(RnicCtr::rp_paced_waits);
      return Pump::Paced;
    }
    const uint32_t seg = std::min(mtu, st.resid);
    const bool last = st.pkts_left == 1;
    uint8_t opcode;
    if (st.first) {
      opcode = resp_opcode(qp, last ? wire::op::kReadRespOnly : wire::op::kReadRespFirst);
    } else {
      opcode = resp_opcode(qp, last ? wire::op::kReadRespLast : wire::op::kReadRespMiddle);
    }
    wire::PktDesc d = response_desc(engine, qp, opcode, st.psn);
    cc_mark_data(qp.rnic(), d);  // ECT(0): READ responses are data
    rte_mbuf* m = engine.alloc();
    if (m == nullptr) return Pump::NoBuffer;
    const uint8_t* from = src;
    const TxResult sent = tx_frame(engine, m, qp.attrs().path, d, seg,
                                   [from, seg](uint8_t* dst) { return memory::copy(dst, from, seg); });
    if (sent == TxResult::CopyFault) return Pump::Refused;  // the PSN is not consumed: the NAK names it
    if (sent == TxResult::Sent) qp.rnic().counters().inc(RnicCtr::resp_pkts);
    if (cc_tracking(qp.cc)) cc_sent(engine, qp, static_cast<uint32_t>(wire::frame_len(d, seg)));
    if (src != nullptr) src += seg;
    st.va += seg;
    st.resid -= seg;
    --st.pkts_left;
    ++st.psn;
    st.first = false;
  }
  if (st.pkts_left > 0) return Pump::More;
  st.active = false;
  return Pump::Done;
}

void on_kick(Timer& t, uint64_t now_ns) noexcept;

void schedule(transport::Engine& engine, Qp& qp, uint64_t delay_ns) noexcept {
  RespState& s = qp.resp;
  if (!s.kick.armed()) engine.timers().arm(s.kick, engine.now() + delay_ns);
}

void raise_qp_event(Qp& qp, ibv_event_type type) noexcept {
  AsyncEvent ev;
  ev.type = type;
  ev.qp = &qp;
  qp.rnic().raise(ev);
}

// Run the stream one burst on; More and NoBuffer come back on the next
// iterations.  An MR gone under the stream is a remote access error
// (class C, as rxe's read_reply): NAK at the PSN reached, QP to ERR.
void stream_step(transport::Engine& engine, Qp& qp) noexcept {
  switch (stream_pump(engine, qp)) {
    case Pump::Done:
      return;
    case Pump::More:
      schedule(engine, qp, 0);
      return;
    case Pump::NoBuffer:
      schedule(engine, qp, kNoBufferRetryNs);
      return;
    case Pump::Paced:
      schedule(engine, qp, std::max<uint64_t>(1, qp.cc.pacer.wait(engine.now())));
      return;
    case Pump::Refused: {
      RespState::ReadStream& st = qp.resp.stream;
      st.active = false;
      const wire::PktDesc d =
          response_desc(engine, qp, resp_opcode(qp, wire::op::kAck), st.psn, nak_syndrome(NakCode::RemoteAccessError));
      if (tx_send(engine, qp.attrs().path, d)) qp.rnic().counters().inc(RnicCtr::resp_pkts);
      qp.rnic().counters().inc(RnicCtr::rem_access_naks);
      raise_qp_event(qp, IBV_EVENT_QP_ACCESS_ERR);
      qp.to_error(false);
      return;
    }
  }
}

// ---- receive WQEs ------------------------------------------------------------------

// The WQE of the message under way, if one was taken.
RecvWqe* current_wqe(Rx& r) noexcept {
  if (r.srq != nullptr) return r.s.have_srq_wqe ? &r.s.srq_wqe : nullptr;
  return r.qp.recv_front();
}

// Take a WQE for a new message: the RQ's head stays in place until the
// message completes; an SRQ's is copied out and popped at once, because
// other QPs share the queue (as rxe's get_srq_wqe).
RecvWqe* take_wqe(Rx& r) noexcept {
  Srq* srq = r.srq;
  if (srq == nullptr) return r.qp.recv_front();
  if (!r.s.have_srq_wqe) {
    const SpinGuard only_us(srq->take_lock());  // QPs of several lcores may share the SRQ
    RecvWqe* w = srq->rq().front();
    if (w == nullptr) return nullptr;
    r.s.srq_wqe.sge = r.s.srq_sges.data();
    copy_recv_wqe(r.s.srq_wqe, *w);
    srq->rq().pop();
    srq->after_pop();
    r.s.have_srq_wqe = true;
    r.s.wqe_srq = srq;
  }
  return &r.s.srq_wqe;
}

// Where a receive WQE of `srq` (nullptr: the QP's RQ) completes: an XRC
// SRQ's own CQ, else the QP's receive CQ.
Cq* recv_cq_of(const Qp& qp, const Srq* srq) noexcept {
  return srq != nullptr && srq->cq() != nullptr ? srq->cq() : qp.recv_cq();
}

// Give back `w` (the SRQ WQE held, or the RQ's head) and say where its
// completion goes: the CQ of the SRQ it came from (which, when a request
// named another SRQ mid-message, is not the request's).
Cq* release_wqe(Rx& r, const RecvWqe& w) noexcept {
  RespState& s = r.s;
  Cq* cq;
  if (&w == &s.srq_wqe) {
    cq = recv_cq_of(r.qp, s.wqe_srq);
    s.have_srq_wqe = false;
    s.wqe_srq = nullptr;
  } else {
    cq = r.qp.recv_cq();
    r.qp.recv_pop();
  }
  s.recv_offset = 0;
  return cq;
}

// A RoCE packet carries no SL.  In a UD receive completion ConnectX puts
// the packet's network header type there instead (the CQE's flags_rqpn,
// which mlx5's provider returns as sl): bit 3 set for RoCEv2 (UDP), bits
// 2:0 the L3 header, 1 IPv6 and 2 IPv4.  UCX's ud_verbs reads it to find
// the destination address in the 40-byte GRH area (an IPv4 header sits in
// its last 20 bytes) and drops every packet when sl says IPv6 but the area
// holds IPv4 (UCX 1.13 over rxe, whose sl is 0, loses all UD traffic).
constexpr uint8_t kSlRoceV2Udp = 0x8;
constexpr uint8_t kSlL3Ipv6 = 0x1;
constexpr uint8_t kSlL3Ipv4 = 0x2;
uint8_t ud_roce_sl(wire::L3 l3) noexcept {
  return kSlRoceV2Udp | (l3 == wire::L3::IPv4 ? kSlL3Ipv4 : kSlL3Ipv6);
}

// Write the receive CQE of `w` (IBA 10.7.2.2, ibv_poll_cq(3)) and give the
// WQE back.  Success needs the packet that ends the message.  False: the
// CQ overflowed and the QP went to ERR.
bool complete_recv(Rx& r, RecvWqe& w, ibv_wc_status status, uint32_t byte_len) noexcept {
  ibv_wc wc{};
  wc.wr_id = w.wr_id;
  wc.status = status;
  wc.opcode = IBV_WC_RECV;
  wc.qp_num = r.qp.qpn().value();
  wc.src_qp = r.qp.attrs().dest_qp_num;
  wc.pkey_index = 0;
  if (status == IBV_WC_SUCCESS) {
    wc.byte_len = byte_len;
    if (r.op.op == Operation::Write) wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    if (r.op.immediate) {
      wc.wc_flags |= IBV_WC_WITH_IMM;
      wc.imm_data = htobe32(r.ext<wire::ImmDtC>(wire::kHdrImmDt).imm());  // __be32, as libibverbs
    }
    if (r.op.invalidate) {
      wc.wc_flags |= IBV_WC_WITH_INV;
      wc.invalidated_rkey = r.ext<wire::IethC>(wire::kHdrIeth).rkey().value();
    }
    if (r.op.has(wire::kHdrDeth)) {
      wc.wc_flags |= IBV_WC_GRH;
      wc.src_qp = r.ext<wire::DethC>(wire::kHdrDeth).src_qp().value();
      wc.sl = ud_roce_sl(r.pi.l3);
    }
  }
  Cq* cq = release_wqe(r, w);
  if (!cq->push(wc, r.bth().se())) {
    // The CQ raised IBV_EVENT_CQ_ERR and counted; the QP cannot go on
    // (IBA 11.4.2.1: CQ overflow is an affiliated error).
    r.qp.to_error(true);
    return false;
  }
  UROCE_STAMP(Completed);
  return true;
}

// Scatter `n` bytes into the WQE's SGEs from message offset `at`; every
// SGE touched is checked against its L_Key, PD and Local Write right
// (IBA 10.6.3).  False: an SGE failed.
bool scatter(Rx& r, const RecvWqe& w, uint64_t at, const uint8_t* src, uint32_t n) noexcept {
  const Pd* pd = r.srq != nullptr ? r.srq->pd() : r.qp.pd();
  return sge_scatter(r.rnic, pd, {w.sge, w.num_sge}, at, src, n, IBV_ACCESS_LOCAL_WRITE);
}

// ---- the message under way -------------------------------------------------------

void abandon_message(RespState& s) noexcept {
  s.in_message = false;
  s.recv_offset = 0;
  s.write_rkey = Rkey{};
  s.write_va = 0;
  s.write_resid = 0;
}

// ---- execution ---------------------------------------------------------------------

// SEND: into the receive WQE (UD: behind the GRH area).
Step execute_send(Rx& r) noexcept {
  RecvWqe& w = *r.wqe;
  RespState& s = r.s;
  if (r.op.transport == Transport::UD) {
    if (uint64_t{kGrhBytes} + r.len > w.total_len) {
      return fault(r, Fault::RecvLength);
    }
    std::array<uint8_t, kGrhBytes> grh;
    wire::GrhArea(grh.data()).fill(r.frame, r.pi);
    if (!scatter(r, w, 0, grh.data(), kGrhBytes)) return fault(r, Fault::RecvProt);
    s.recv_offset = kGrhBytes;
  } else if (s.recv_offset + r.len > w.total_len) {
    return fault(r, Fault::RecvLength);
  }
  if (!scatter(r, w, s.recv_offset, r.payload, r.len)) return fault(r, Fault::RecvProt);
  UROCE_STAMP(Placed);
  s.recv_offset += r.len;
  return Step::Complete;
}

// A new SEND or WRITE packet executed: the expected PSN moves on
// (9.7.4.1.1); the MSN counts completed messages (9.7.5.1.2).
Step advance(Rx& r) noexcept {
  RespState& s = r.s;
  if (r.op.last) {
    ++s.msn;
    s.in_message = false;
  } else {
    s.in_message = true;
    s.msg_opcode = r.pi.opcode;
  }
  s.epsn = r.psn + 1;
  s.ack_psn = s.epsn;
  return r.op.last && r.op.consumes_rwqe ? Step::Complete : Step::Acknowledge;
}

Step execute(Rx& r) noexcept { return op_row(r.op.op).exec(r); }

Step exec_send(Rx& r) noexcept {
  const Step next = execute_send(r);
  return next == Step::Fault ? next : advance(r);
}

Step exec_write(Rx& r) noexcept {
  if (r.len != 0) {
    if (!memory::copy(r.target, r.payload, r.len)) {  // unmapped since registration (memory.hpp)
      return fault(r, Fault::RemoteAccess);
    }
    r.s.write_va += r.len;
    r.s.write_resid -= r.len;
  }
  UROCE_STAMP(Placed);
  return advance(r);
}

// The 8 bytes land as one 64-bit store, in the order they came (as rxe:
// no byte swap), then an ACK as for a WRITE.  A duplicate is re-ACKed and
// not stored again (dup_acked).
Step exec_atomic_write(Rx& r) noexcept {
  uint64_t value = 0;
  std::memcpy(&value, r.payload, sizeof value);
  if (!memory::store64(reinterpret_cast<uint64_t*>(r.target), value)) return fault(r, Fault::RemoteAccess);
  UROCE_STAMP(Placed);
  return advance(r);
}

// FLUSH to global visibility: every earlier request of this QP has been
// placed (the responder runs them in PSN order), and a full fence makes
// those stores visible to every thread of this host before the ACK leaves
// (a seq_cst read-modify-write: one locked instruction on x86, and a form
// ThreadSanitizer understands).  Then an ACK, as rxe's process_flush; a
// duplicate is re-ACKed and not run again (dup_acked).  FLUSH to
// persistence never gets here: no MR grants its right (reg_mr refuses it).
std::atomic<uint32_t> g_flush_fence{0};
Step exec_flush(Rx& r) noexcept {
  g_flush_fence.fetch_add(1, std::memory_order_seq_cst);
  r.ctr.inc(RnicCtr::flushes_executed);
  return advance(r);
}

Step exec_read(Rx&) noexcept { return Step::ReadReply; }
Step exec_atomic(Rx&) noexcept { return Step::AtomicReply; }

// Complete the message's receive WQE once its last packet is in.
Step complete(Rx& r) noexcept {
  if (!r.op.last) return Step::Acknowledge;
  if (r.op.invalidate) {
    // SEND with Invalidate (IBA 9.4.2 / 10.6.7.2.6): the responder
    // invalidates the IETH's R_Key before the receive completes.  Only a
    // bound type 2 window of this QP's PD, bound through this QP, can be
    // (this device has no fast-registered MRs; an MR from ibv_reg_mr never
    // can, as rxe_invalidate_mr refuses it).  Otherwise the receive
    // completes with REM_INV_REQ_ERR, the QP goes to ERR and the named key
    // stays valid, and the requester gets no NAK (class J, fault()).
    if (!r.rnic.remote_invalidate(r.qp, r.ext<wire::IethC>(wire::kHdrIeth).rkey())) {
      r.ctr.inc(RnicCtr::inv_rkey_refused);
      return fault(r, Fault::Invalidate);
    }
    r.ctr.inc(RnicCtr::mw_remote_invalidated);
  }
  uint32_t byte_len;
  if (r.op.op == Operation::Write) {
    byte_len = r.s.write_len;  // RECV_RDMA_WITH_IMM: the RDMA length, as rxe
  } else {
    byte_len = static_cast<uint32_t>(r.s.recv_offset);  // UD: the GRH area included
  }
  return complete_recv(r, *r.wqe, IBV_WC_SUCCESS, byte_len) ? Step::Acknowledge : Step::Done;
}

RdAtomicResult& next_result(RespState& s) noexcept {
  // A ring of max_dest_rd_atomic: keeping more READ/atomics outstanding
  // than it holds is the requester's fault (max_rd_atomic <= the peer's
  // max_dest_rd_atomic); the oldest entry is recycled, as rxe does.
  RdAtomicResult& res = s.results[s.results_next % s.results.size()];
  s.results_next = static_cast<uint32_t>((s.results_next + 1) % s.results.size());
  return res;
}

uint32_t read_packets(uint32_t len, uint32_t mtu) noexcept {
  return len == 0 ? 1 : (len + mtu - 1) / mtu;
}

// A new READ (9.7.5.1.6): the MSN counts it now (C9-148), the expected
// PSN skips the response's packets, the result is kept for duplicates.
Step read_reply(Rx& r) noexcept {
  RespState& s = r.s;
  const uint32_t npkts = read_packets(r.dma_len, r.mtu());
  RdAtomicResult& res = next_result(s);
  res = RdAtomicResult{r.psn, r.psn + (npkts - 1), false, 0, r.va, r.dma_len, r.rkey, true};
  ++s.msn;
  s.epsn = r.psn + npkts;
  stream_start(r.qp, r.pd, r.rkey, r.epoch, r.va, r.dma_len, r.psn, true);
  stream_step(r.engine, r.qp);
  return Step::Done;
}

// CMP_SWAP / FETCH_ADD (9.7.5.1.5): atomic with respect to every QP of the
// device (o9-25) and to the host's own atomics on that word.
Step atomic_reply(Rx& r) noexcept {
  RespState& s = r.s;
  const wire::AtomicEthC a = r.ext<wire::AtomicEthC>(wire::kHdrAtomicEth);
  // One CPU atomic on the word (one engine thread serves every QP of the
  // device), through the memory guard: a word unmapped since registration
  // is a remote access error, nothing changed.
  auto* word = reinterpret_cast<uint64_t*>(r.target);
  uint64_t orig = 0;
  const bool ok = r.op.op == Operation::CompareSwap ? memory::cas64(word, a.compare(), a.swap_add(), &orig)
                                                    : memory::fetch_add64(word, a.swap_add(), &orig);
  if (!ok) return fault(r, Fault::RemoteAccess);
  RdAtomicResult& res = next_result(s);
  res = RdAtomicResult{r.psn, r.psn, true, orig, r.va, static_cast<uint32_t>(kAtomicLen), r.rkey, true};
  ++s.msn;
  s.epsn = r.psn + 1;
  s.ack_psn = s.epsn;
  send_atomic_ack(r, r.psn, orig);
  return Step::Done;
}

// RC: ACK a request that asks for it (AckReq, 9.7.5.1.1); others are
// covered by a later ACK (coalescing: the MSN says how many messages).
Step acknowledge(Rx& r) noexcept {
  if (r.rc() && r.bth().ack_req()) send_ack(r, r.psn, ack_syndrome());
  return Step::Done;
}

// ---- duplicates (9.7.5.1.4) ------------------------------------------------------

RdAtomicResult* find_result(RespState& s, Psn psn, bool atomic) noexcept {
  for (RdAtomicResult& res : s.results) {
    if (!res.valid || res.atomic != atomic) continue;
    if (psn >= res.psn && psn <= res.last_psn) return &res;
  }
  return nullptr;
}

Step duplicate(Rx& r) noexcept { return op_row(r.op.op).dup(r); }

// C9-105: a SEND or WRITE is not executed again; ACK what has been (the
// MSN is current).
Step dup_acked(Rx& r) noexcept {
  send_ack(r, r.s.ack_psn - 1, ack_syndrome());
  return Step::Done;
}

void stop_stream(transport::Engine& engine, Qp& qp) noexcept;

// C9-107: a READ is executed again from the duplicate's PSN, which may
// point inside an earlier response (the requester re-asks for the rest:
// its RETH is then a subset of the original's).  One for a PSN the
// response streaming now has passed (responder_rx lets it past the
// queue) ends that stream and drops the requests queued behind it: the
// requester went back to the duplicate's PSN after a loss, takes
// responses only in PSN order, and sends everything after it again
// (go-back-N, 9.7.5.1.4), so what the stream and the queue would answer
// first it would discard.
Step dup_read(Rx& r) noexcept {
  RdAtomicResult* res = find_result(r.s, r.psn, false);
  const wire::RethC reth = r.ext<wire::RethC>(wire::kHdrReth);
  const uint64_t va = reth.va();
  const uint32_t len = reth.dma_len();
  const bool subset = res != nullptr && reth.rkey() == res->rkey && va >= res->va && len <= res->len &&
                      va - res->va <= res->len - len;
  if (!subset) {
    r.ctr.inc(RnicCtr::drop_dup_unknown);
    return Step::Done;
  }
  if (r.qp.resp.stream.active) {
    r.ctr.inc(RnicCtr::resp_read_restarts);
    stop_stream(r.engine, r.qp);
  }
  // The R_Key is checked again as the stream runs (deregistered since:
  // remote access error); a replay runs in the registration as it is now.
  KeyCheck check = KeyCheck::Ok;
  uint32_t epoch = 0;
  if (len != 0) r.rnic.check_rkey(res->rkey, va, len, IBV_ACCESS_REMOTE_READ, r.pd, &check, &epoch, &r.qp);
  stream_start(r.qp, r.pd, res->rkey, epoch, va, len, r.psn, r.psn == res->psn);
  stream_step(r.engine, r.qp);
  return Step::Done;
}

// C9-108: an atomic is never executed twice; the saved original value is
// replayed.
Step dup_atomic(Rx& r) noexcept {
  RdAtomicResult* res = find_result(r.s, r.psn, true);
  if (res == nullptr) {
    r.ctr.inc(RnicCtr::drop_dup_unknown);
    return Step::Done;
  }
  send_atomic_ack(r, r.psn, res->atomic_orig);
  return Step::Done;
}

Step dup_unknown(Rx& r) noexcept {
  r.ctr.inc(RnicCtr::drop_dup_unknown);
  return Step::Done;
}

Step not_executed(Rx&) noexcept { return Step::Done; }

constexpr size_t kNumOperations = static_cast<size_t>(Operation::Cnp) + 1;

constexpr std::array<OpRow, kNumOperations> make_op_rows() {
  std::array<OpRow, kNumOperations> t{};
  for (OpRow& row : t) row = OpRow{false, nullptr, not_executed, dup_unknown};  // responses, CNP
  t[static_cast<size_t>(Operation::Send)] = {true, nullptr, exec_send, dup_acked};
  t[static_cast<size_t>(Operation::Write)] = {true, rkey_write, exec_write, dup_acked};
  t[static_cast<size_t>(Operation::ReadRequest)] = {true, rkey_read, exec_read, dup_read};
  t[static_cast<size_t>(Operation::CompareSwap)] = {true, rkey_atomic, exec_atomic, dup_atomic};
  t[static_cast<size_t>(Operation::FetchAdd)] = {true, rkey_atomic, exec_atomic, dup_atomic};
  t[static_cast<size_t>(Operation::AtomicWrite)] = {true, rkey_atomic_write, exec_atomic_write, dup_acked};
  t[static_cast<size_t>(Operation::Flush)] = {true, rkey_flush, exec_flush, dup_acked};
  return t;
}
constexpr std::array<OpRow, kNumOperations> kOpRows = make_op_rows();
static_assert(!kOpRows[static_cast<size_t>(Operation::ReadResponse)].executes);
static_assert(kOpRows[static_cast<size_t>(Operation::FetchAdd)].dup == dup_atomic);

const OpRow& op_row(Operation op) noexcept { return kOpRows[static_cast<size_t>(op)]; }

// ---- errors ------------------------------------------------------------------------

// RNR NAK (IBA 9.7.5.1.1): the PSN is not consumed; the
// requester retries it after the QP's min_rnr_timer.  UC/UD: dropped.
Step rnr(Rx& r) noexcept {
  if (r.rc()) {
    send_ack(r, r.psn, wire::make_syndrome(AckType::RnrNak, r.qp.attrs().min_rnr_timer));
    r.ctr.inc(RnicCtr::rnr_naks_sent);
    return Step::Done;
  }
  r.ctr.inc(RnicCtr::drop_no_recv_ud);
  abandon_message(r.s);
  r.s.uc_drop = r.op.transport == Transport::UC && !r.op.last;
  return Step::Done;
}

// Class C (9.7.5.2): RC NAKs the request's PSN, completes a receive WQE
// the message holds in error, and the QP goes to ERR with its affiliated
// async event.  UC/UD (9.8.3.2, 9.9.3): the message is dropped; a WQE
// whose buffer failed completes in error, the QP goes on.
Step fault(Rx& r) noexcept {
  const FaultRule& f = rule(r.fault);
  RespState& s = r.s;
  RecvWqe* w = r.wqe != nullptr ? r.wqe : (s.in_message && wire::opcode_info(s.msg_opcode).op == Operation::Send
                                               ? current_wqe(r)
                                               : nullptr);
  // RC: a WRITE refused at its R_Key completes the receive WQE at the
  // head of the QP's own receive queue in error (a WRITE with immediate
  // would have completed it; the FIRST packet of a longer one does not
  // say whether it has one), so that the receiving application learns of
  // it before the flush, as from a ConnectX responder.  A shared
  // receive queue gives up a WQE only to a message that takes one.
  if (w == nullptr && r.rc() && r.fault == Fault::RemoteAccess && r.op.op == Operation::Write &&
      (r.op.consumes_rwqe || r.srq == nullptr))
    w = take_wqe(r);
  UROCE_TRACE(TraceCat::Qp, "qp 0x%06x: request PSN 0x%06x refused (%s)", r.qp.qpn().value(),
              r.psn.value(), kRnicCtrInfo[static_cast<size_t>(r.rc() ? f.nak_ctr : f.drop_ctr)].name.data());
  if (r.rc()) {
    // IBA 9.9.6.3, class J: a SEND with Invalidate whose R_Key cannot be
    // invalidated completes its receive in error and moves the QP to ERR,
    // with no NAK: the requester hears nothing of it.
    if (r.fault != Fault::Invalidate) {  // counted as inv_rkey_refused
      send_ack(r, r.psn, nak_syndrome(f.nak));
      r.ctr.inc(f.nak_ctr);
    }
    if (w != nullptr) complete_recv(r, *w, f.wqe_status, 0);
    abandon_message(s);
    raise_qp_event(r.qp, f.event);
    r.qp.to_error(false);
    return Step::Done;
  }
  r.ctr.inc(f.drop_ctr);
  // UC/UD (class D, IBA 9.8.3 / 9.9.3): the message is dropped; a receive
  // buffer it could not be written into completes in error (UC) — a UD
  // message longer than its receive buffer is dropped and leaves the WQE
  // for the next one, as ConnectX does.
  const bool buffer_fault =
      r.fault == Fault::RecvProt || (r.fault == Fault::RecvLength && r.op.transport != Transport::UD);
  if (w != nullptr && buffer_fault) {
    complete_recv(r, *w, f.wqe_status, 0);
  } else if (w != nullptr) {
    s.recv_offset = 0;  // the WQE waits for the next message
  }
  abandon_message(s);
  s.uc_drop = r.op.transport == Transport::UC && !r.op.last;
  return Step::Done;
}






// One request through the checks and its execution.  Consumes the mbuf.
void process(transport::Engine& engine, Qp& qp, transport::RoceRx& pkt) noexcept {
  const uint8_t* frame = rte_pktmbuf_mtod(pkt.m, const uint8_t*);
  Rx r{engine,
       qp,
       qp.resp,
       qp.rnic(),
       qp.rnic().counters(),
       frame,
       pkt.info,
       pkt.info.op(),
       pkt.info.psn,
       frame + pkt.info.payload_off,
       pkt.info.payload_len};
  r.srq = qp.srq();
  r.pd = qp.pd();
  r.m = pkt.m;
  Step step = Step::CheckQp;
  for (;;) {
    switch (step) {
      case Step::CheckQp: step = check_qp(r); continue;
      case Step::CheckPsn: step = check_psn(r); continue;
      case Step::CheckSrq: step = check_srq(r); continue;
      case Step::CheckOpSeq: step = check_op_seq(r); continue;
      case Step::CheckAccess: step = check_access(r); continue;
      case Step::CheckResource: step = check_resource(r); continue;
      case Step::CheckLength: step = check_length(r); continue;
      case Step::CheckRkey: step = check_rkey(r); continue;
      case Step::Execute:
        UROCE_STAMP(Checked);
        step = execute(r);
        continue;
      case Step::ReadReply: step = read_reply(r); continue;
      case Step::AtomicReply: step = atomic_reply(r); continue;
      case Step::Complete: step = complete(r); continue;
      case Step::Acknowledge: step = acknowledge(r); continue;
      case Step::Duplicate: step = duplicate(r); continue;
      case Step::NakPsnSeq:
        send_ack(r, r.s.epsn, nak_syndrome(NakCode::PsnSequenceError));
        r.ctr.inc(RnicCtr::seq_naks_sent);
        step = Step::Done;
        continue;
      case Step::Rnr: step = rnr(r); continue;
      case Step::Fault: step = fault(r); continue;
      case Step::Hold: return;
      case Step::Done:
        rte_pktmbuf_free(pkt.m);
        return;
    }
  }
}

// End the stream and drop what waited behind it.
void stop_stream(transport::Engine& engine, Qp& qp) noexcept {
  RespState& s = qp.resp;
  engine.timers().cancel(s.kick);
  s.stream.active = false;
  for (; s.backlog_count > 0; --s.backlog_count) {
    rte_pktmbuf_free(s.backlog[s.backlog_head].m);
    s.backlog_head = (s.backlog_head + 1) % static_cast<uint32_t>(s.backlog.size());
  }
  s.backlog_head = 0;
}

// The stream goes on; once it ends, the requests that waited run in order
// (until one of them starts a stream of its own).
void resume(transport::Engine& engine, Qp& qp) noexcept {
  RespState& s = qp.resp;
  // The requests that waited were checked when they came; the QP may have
  // changed state (or gone from the table) since.
  if (!state_caps(qp.state()).takes_requests || qp.rnic().qp_by_num(qp.qpn()) != &qp) {
    stop_stream(engine, qp);
    return;
  }
  if (s.stream.active) {
    stream_step(engine, qp);
    if (s.stream.active) return;
  }
  while (s.backlog_count > 0 && !s.stream.active) {
    RespState::Deferred& d = s.backlog[s.backlog_head];
    transport::RoceRx pkt{d.m, d.info};
    s.backlog_head = (s.backlog_head + 1) % static_cast<uint32_t>(s.backlog.size());
    --s.backlog_count;
    process(engine, qp, pkt);
  }
  if (s.reorder.held > 0) reorder_drain(engine, qp);
}

void on_kick(Timer& t, uint64_t) noexcept {
  Qp& qp = t.owner_as<Qp>();
  resume(qp.engine(), qp);
}

}  // namespace resp

using namespace resp;

void responder_rx(transport::Engine& engine, Qp& qp, transport::RoceRx& pkt) noexcept {
  UROCE_ASSERT_ENGINE(engine);
  RespState& s = qp.resp;
  // While a READ response streams nothing may overtake it but a duplicate
  // READ request for a PSN the stream has passed (the requester went back
  // after a loss: dup_read).  The duplicates that a go-back-N requester
  // sends after it, for later READs, wait their turn: each would cut short
  // the replay the first one started.
  if (!s.stream.active || (pkt.info.op().op == wire::Operation::ReadRequest && distance(pkt.info.psn, s.epsn) < 0 &&
                           distance(pkt.info.psn, s.stream.psn) < 0)) {
    process(engine, qp, pkt);
    if (s.reorder.held > 0) reorder_drain(engine, qp);
    return;
  }
  if (s.backlog_count == s.backlog.size()) {
    qp.rnic().counters().inc(RnicCtr::drop_resp_backlog);
    rte_pktmbuf_free(pkt.m);
    return;
  }
  const uint32_t tail = (s.backlog_head + s.backlog_count) % static_cast<uint32_t>(s.backlog.size());
  s.backlog[tail] = RespState::Deferred{pkt.m, pkt.info};
  ++s.backlog_count;
}

void responder_reset(Qp& qp) noexcept {
  stop_stream(qp.engine(), qp);
  if (qp.resp.backlog.size() != kRespBacklog) qp.resp.backlog.assign(kRespBacklog, RespState::Deferred{});
  RespState& s = qp.resp;
  reorder_clear(qp);
  // Only a device that offers selective repeat keeps packets, and only
  // for a reliable QP: nobody else pays the ring's memory.
  const bool keeps = qp.rnic().selective_repeat() && (qp.type() == IBV_QPT_RC || qp.type() == IBV_QPT_XRC_RECV);
  if (keeps && s.reorder.ring.size() != transport::params::kSrHoldPsns) {
    s.reorder.ring.assign(transport::params::kSrHoldPsns, nullptr);
  }
  s.epsn = Psn(qp.attrs().rq_psn);
  s.ack_psn = s.epsn;
  s.msn = Msn(0);
  s.nak_sent = false;
  s.peer_offers_sr = false;
  s.uc_drop = false;
  abandon_message(s);
  s.msg_opcode = 0;
  s.write_len = 0;
  s.have_srq_wqe = false;
  s.msg_srq = nullptr;
  s.wqe_srq = nullptr;
  s.results.assign(qp.attrs().max_dest_rd_atomic, RdAtomicResult{});
  s.results_next = 0;
}

void responder_stop(Qp& qp, transport::Engine& engine) noexcept {
  UROCE_ASSERT_ENGINE(engine);
  stop_stream(engine, qp);
  reorder_clear(qp);
}

void responder_bind(Qp& qp) noexcept {
  qp.resp.kick.cb = on_kick;
  qp.resp.kick.owner = &qp;
}

void responder_flush(Qp& qp) noexcept {
  UROCE_ASSERT_ENGINE(qp.engine());
  RespState& s = qp.resp;
  stop_stream(qp.engine(), qp);
  reorder_clear(qp);
  abandon_message(s);
  if (!s.have_srq_wqe) return;
  Cq* cq = recv_cq_of(qp, s.wqe_srq);
  s.have_srq_wqe = false;
  s.wqe_srq = nullptr;
  ibv_wc wc{};
  wc.wr_id = s.srq_wqe.wr_id;
  wc.status = IBV_WC_WR_FLUSH_ERR;
  wc.opcode = IBV_WC_RECV;
  wc.qp_num = qp.qpn().value();
  if (cq != nullptr) cq->push(wc);
}

void responder_forget_srq(Qp& qp, const Srq* srq) noexcept {
  UROCE_ASSERT_ENGINE(qp.engine());
  RespState& s = qp.resp;
  if (s.msg_srq == srq) {
    abandon_message(s);
    s.msg_srq = nullptr;
  }
  if (s.wqe_srq == srq) {
    s.have_srq_wqe = false;
    s.wqe_srq = nullptr;
    s.recv_offset = 0;
  }
}

}  // namespace uroce::rnic
