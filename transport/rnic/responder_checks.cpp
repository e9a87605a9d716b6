// The responder's checks (IBA 9.7.4.1, 9.7.5): what a request packet
// passes, in rxe's order, before the responder carries it out
// (responder.cpp's driver calls them; each returns the next step).
// [engine] everything here.
#include <rte_mbuf.h>

#include <algorithm>

#include "transport/rnic/responder_internal.hpp"

namespace uroce::rnic::resp {

// ---- the checks --------------------------------------------------------------------

Transport transport_of(ibv_qp_type t) noexcept {
  switch (t) {
    case IBV_QPT_RC: return Transport::RC;
    case IBV_QPT_UC: return Transport::UC;
    case IBV_QPT_UD: return Transport::UD;
    case IBV_QPT_XRC_RECV: return Transport::XRC;
    case IBV_QPT_RAW_PACKET:
    case IBV_QPT_XRC_SEND:  // requests only: nothing to respond to
    case IBV_QPT_DRIVER:
      return Transport::None;
  }
  return Transport::None;
}

// The request's transport is the QP's, and a UD/GSI Q_Key matches
// (10.2.5, C10-15).  The QP's state, path and P_Key were checked by the
// receive dispatcher (recv.cpp).  An XRC request's SRQ is looked up here
// (a duplicate needs its PD too) and judged after the PSN (check_srq).
Step check_qp(Rx& r) noexcept {
  if (!r.op.request || r.op.transport != transport_of(r.qp.type())) {
    r.ctr.inc(RnicCtr::drop_bad_transport);
    return Step::Done;
  }
  if (r.op.has(wire::kHdrXrceth)) {
    Srq* srq = r.rnic.srq_by_num(r.ext<wire::XrcEthC>(wire::kHdrXrceth).number());
    const bool in_domain = srq != nullptr && srq->xrcd() != nullptr && srq->xrcd() == r.qp.xrcd();
    r.srq = in_domain ? srq : nullptr;
    r.pd = in_domain ? srq->pd() : nullptr;
  }
  if (r.op.has(wire::kHdrDeth)) {
    const Qkey want(r.qp.is_gsi() ? kGsiQkey : r.qp.attrs().qkey);  // GSI: 0x80010000 (IBA 13.4.6.1)
    if (r.ext<wire::DethC>(wire::kHdrDeth).qkey() != want) {
      r.ctr.inc(RnicCtr::drop_qkey);
      return Step::Done;
    }
  }
  return Step::CheckPsn;
}

Step sequence_error(Rx& r) noexcept {
  r.ctr.inc(RnicCtr::drop_psn_out_of_seq);
  if (r.s.nak_sent) return Step::Done;
  r.s.nak_sent = true;
  return Step::NakPsnSeq;
}

// IBA 9.7.4.1.1-3 (RC): the expected PSN executes; one within the previous
// half of the PSN space is a duplicate; a later one is a sequence error,
// NAKed once per gap (C9-114).  UC (9.8.3.1): a gap drops the rest of the
// message; the next FIRST/ONLY resynchronises.  UD has no sequence.
Step check_psn(Rx& r) noexcept {
  RespState& s = r.s;
  switch (r.op.transport) {
    case Transport::RC:
    case Transport::XRC: {
      s.peer_offers_sr = !s.reorder.ring.empty() && (r.bth().resv7() & wire::kResv7Selective) != 0;
      const int32_t d = distance(r.psn, s.epsn);
      if (d > 0) {
        if (s.peer_offers_sr) return reorder_hold(r);
        return sequence_error(r);
      }
      if (d < 0) {
        r.ctr.inc(RnicCtr::dup_requests);
        return Step::Duplicate;
      }
      s.nak_sent = false;
      return r.op.transport == Transport::XRC ? Step::CheckSrq : Step::CheckOpSeq;
    }
    case Transport::UC:
      if (s.uc_drop || r.psn != s.epsn) {
        if (r.op.first) {
          s.uc_drop = false;
          abandon_message(s);
          s.epsn = r.psn;
          return Step::CheckOpSeq;
        }
        s.uc_drop = true;
        abandon_message(s);
        r.ctr.inc(RnicCtr::drop_uc_gap);
        return Step::Done;
      }
      return Step::CheckOpSeq;
    case Transport::UD:
      return Step::CheckOpSeq;
    case Transport::RD:
    case Transport::CNP:
    case Transport::None:
      break;
  }
  r.ctr.inc(RnicCtr::drop_bad_transport);
  return Step::Done;
}

// Annex A14: the SRQ an XRC request names must be an XRC SRQ of the
// receive QP's domain (check_qp found it), and every packet of a message
// must name the SRQ its first packet named.  Its PD is what the request's
// R_Keys are checked against, its CQ where the receive completes.  Anything
// else is an invalid request (class C: NAK, the QP to ERR).
Step check_srq(Rx& r) noexcept {
  const bool continues = !r.op.first && r.s.in_message;
  if (r.srq == nullptr || (continues && r.srq != r.s.msg_srq)) {
    r.ctr.inc(RnicCtr::xrc_srq_refused);
    return fault(r, Fault::XrcSrq);
  }
  if (r.op.first) r.s.msg_srq = r.srq;
  return Step::CheckOpSeq;
}

// The opcode sequence within a message (IBA 9.7.5.2.2 / 9.8.3.2): the
// opcode table says which opcodes may follow the message's last one.
Step check_op_seq(Rx& r) noexcept {
  RespState& s = r.s;
  if (s.in_message ? wire::opcode_info(s.msg_opcode).may_follow(r.pi.opcode) : r.op.first) {
    return Step::CheckAccess;
  }
  if (r.op.transport == Transport::UC && r.op.first) {
    // 9.8.3.2: a new FIRST/ONLY ends the unfinished message; it starts anew.
    abandon_message(s);
    r.ctr.inc(RnicCtr::drop_bad_opcode_seq);
    return Step::CheckAccess;
  }
  return fault(r, Fault::OpSeq);
}

// The QP's own remote access enables (ibv_modify_qp IBV_QP_ACCESS_FLAGS),
// by the opcode table's right (a FLUSH's by its FETH, as rxe's
// check_qp_attr_access); an operation this responder does not carry out,
// or a FLUSH it cannot parse, is refused the same way, as rxe refuses what
// it does not enable.
Step check_access(Rx& r) noexcept {
  const OpRow& row = op_row(r.op.op);
  int need = ibv_rights(r.op.right);
  if ((r.op.right & wire::kRightFlush) != 0) need = flush_rights(r.ext<wire::FethC>(wire::kHdrFeth).word());
  if (!row.executes || need < 0 || (r.qp.attrs().qp_access_flags & need) != need) return fault(r, Fault::NotEnabled);
  return Step::CheckResource;
}

// READ/atomic result slots; the receive WQE of a SEND (at FIRST/ONLY) or
// of a WRITE_WITH_IMM (at the packet carrying the immediate, before any
// byte of it is written, so that the RNR retry writes nothing twice).
Step check_resource(Rx& r) noexcept {
  if (r.op.rd_atomic) {
    if (r.s.results.empty()) return fault(r, Fault::NoRdResource);
    return Step::CheckLength;
  }
  if (!r.op.consumes_rwqe) return Step::CheckLength;
  r.wqe = r.op.first || r.op.op == Operation::Write ? take_wqe(r) : current_wqe(r);
  return r.wqe != nullptr ? Step::CheckLength : Step::Rnr;
}

// Payload length against the path MTU (IBA 9.7.5.2.2 / C9-89: FIRST and
// MIDDLE carry exactly one MTU, LAST 1..MTU, ONLY up to one MTU) and the
// DMA length limit.  UD: one packet up to the port MTU, checked by the
// receive buffer instead.
Step check_length(Rx& r) noexcept {
  if (!r.ud()) {
    const uint32_t mtu = r.mtu();
    bool ok;
    if (r.op.only()) {
      ok = r.len <= mtu;
    } else if (r.op.last) {
      ok = r.len > 0 && r.len <= mtu;
    } else {
      ok = r.len == mtu;
    }
    if (!ok) return fault(r, Fault::Length);
  }
  if (r.op.has(wire::kHdrReth) && r.ext<wire::RethC>(wire::kHdrReth).dma_len() > kMaxDmaLen) return fault(r, Fault::Length);
  return Step::CheckRkey;
}

// R_Key checks over the whole remote range (IBA 9.7.5.1.3, C9-88:
// key, PD, rights, bounds; 64-bit wrap included); atomics 8-byte aligned
// (C9-92).  A zero-length READ/WRITE needs no key (9.4.4, 9.4.5).  The
// operation's own handler does it (op_row).
Step check_rkey(Rx& r) noexcept {
  const OpRow& row = op_row(r.op.op);
  return row.rkey != nullptr ? row.rkey(r) : Step::Execute;
}

Step rkey_write(Rx& r) noexcept {
  RespState& s = r.s;
  KeyCheck check = KeyCheck::Ok;
  if (r.op.has(wire::kHdrReth)) {
    // The message's first packet: the whole range is checked now (C9-88),
    // and what the rest of the message needs is kept.
    const wire::RethC reth = r.ext<wire::RethC>(wire::kHdrReth);
    s.write_len = reth.dma_len();
    s.write_resid = reth.dma_len();
    s.write_rkey = reth.rkey();
    s.write_va = reth.va();
    if (reth.dma_len() != 0 && r.rnic.check_rkey(s.write_rkey, s.write_va, reth.dma_len(), IBV_ACCESS_REMOTE_WRITE,
                                                 r.pd, &check, &s.write_epoch, &r.qp) == nullptr) return fault(r, Fault::RemoteAccess);
  }
  // The payload must fit what the RETH announced: the message's last
  // packet brings exactly the rest (C9-89).
  const bool fits = r.op.last ? r.len == s.write_resid : r.len < s.write_resid;
  if (!fits) return fault(r, Fault::Length);
  // Every packet: the key as it is now, over this packet's bytes, in the
  // registration the message began under.
  if (r.len != 0) {
    uint32_t epoch = 0;
    r.target =
        r.rnic.check_rkey(s.write_rkey, s.write_va, r.len, IBV_ACCESS_REMOTE_WRITE, r.pd, &check, &epoch, &r.qp);
    if (r.target == nullptr || epoch != s.write_epoch) return fault(r, Fault::RemoteAccess);
  }
  return Step::Execute;
}

Step rkey_read(Rx& r) noexcept {
  const wire::RethC reth = r.ext<wire::RethC>(wire::kHdrReth);
  r.va = reth.va();
  r.dma_len = reth.dma_len();
  r.rkey = reth.rkey();
  if (r.dma_len != 0) {
    KeyCheck check = KeyCheck::Ok;
    r.target = r.rnic.check_rkey(r.rkey, r.va, r.dma_len, IBV_ACCESS_REMOTE_READ, r.pd, &check, &r.epoch, &r.qp);
    if (r.target == nullptr) return fault(r, Fault::RemoteAccess);
  }
  return Step::Execute;
}

// The 8-byte word at r.va under r.rkey with the right `need` (atomics and
// ATOMIC WRITE): aligned on the wire (C9-92) and in memory (an MR whose
// iova and address differ in alignment), inside the key's range.
Step rkey_word(Rx& r, int need) noexcept {
  r.dma_len = kAtomicLen;
  if ((r.va & (kAtomicLen - 1)) != 0) return fault(r, Fault::Misaligned);
  KeyCheck check = KeyCheck::Ok;
  r.target = r.rnic.check_rkey(r.rkey, r.va, kAtomicLen, need, r.pd, &check, nullptr, &r.qp);
  if (r.target == nullptr) return fault(r, Fault::RemoteAccess);
  if ((reinterpret_cast<uintptr_t>(r.target) & (kAtomicLen - 1)) != 0) return fault(r, Fault::Misaligned);
  return Step::Execute;
}

Step rkey_atomic(Rx& r) noexcept {
  const wire::AtomicEthC aeth = r.ext<wire::AtomicEthC>(wire::kHdrAtomicEth);
  r.va = aeth.va();
  r.rkey = aeth.rkey();
  return rkey_word(r, IBV_ACCESS_REMOTE_ATOMIC);
}

// ATOMIC WRITE (IBA 1.5; rxe's rules): one packet whose RETH and payload
// both say 8 bytes, at an 8-byte aligned address, under the write right.
Step rkey_atomic_write(Rx& r) noexcept {
  const wire::RethC reth = r.ext<wire::RethC>(wire::kHdrReth);
  r.va = reth.va();
  r.rkey = reth.rkey();
  if (reth.dma_len() != kAtomicLen || r.len != kAtomicLen) return fault(r, Fault::Length);
  return rkey_word(r, IBV_ACCESS_REMOTE_WRITE);
}

// FLUSH (IBA 1.5; rxe's rules): the R_Key must grant the placement types'
// flush rights; at the RANGE level the range lies inside it (as a READ's,
// C9-88; a zero-length range still needs a valid key), at the MR level the
// RETH's address and length are not read and the whole region is meant.
// A memory window never grants a flush right (bind_mw refuses them), so
// only an MR's R_Key passes.
Step rkey_flush(Rx& r) noexcept {
  const wire::RethC reth = r.ext<wire::RethC>(wire::kHdrReth);
  const uint32_t feth = r.ext<wire::FethC>(wire::kHdrFeth).word();
  r.rkey = reth.rkey();
  KeyCheck check = KeyCheck::Ok;
  const int need = flush_rights(feth);  // valid: check_access passed it
  if (wire::feth_level(feth) == wire::kFethMr) {
    r.rnic.check_rkey_region(r.rkey, need, r.pd, &check, &r.qp);
  } else {
    r.rnic.check_rkey(r.rkey, reth.va(), reth.dma_len(), need, r.pd, &check, nullptr, &r.qp);
  }
  if (check != KeyCheck::Ok) return fault(r, Fault::RemoteAccess);
  return Step::Execute;
}


}  // namespace uroce::rnic::resp
