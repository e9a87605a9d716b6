// What the responder's files share (responder.cpp: the driver, receive
// WQEs, execution, duplicates, errors; responder_checks.cpp: the checks a
// request passes before it is carried out), as rxe's rxe_loc.h: the steps,
// the faults and their rules, one packet's context (Rx) and the
// per-operation rows.  [engine] everything here.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <string_view>

#include "lib/wire/bth.hpp"
#include "lib/wire/ext.hpp"
#include "lib/wire/grh.hpp"
#include "lib/wire/opcode.hpp"
#include "lib/wire/build.hpp"
#include "lib/wire/pkt.hpp"
#include "transport/engine.hpp"
#include "transport/params.hpp"
#include "transport/rnic/qp.hpp"
#include "transport/rnic/rnic.hpp"
#include "transport/rnic/verbs_newer.hpp"

namespace uroce::rnic::resp {


using transport::params::kNoBufferRetryNs;
using transport::params::kRespBacklog;
using transport::params::kRespBudget;
using wire::AckType;
using wire::NakCode;
using wire::OpcodeInfo;
using wire::Operation;
using wire::Transport;


// The GRH area at the head of a UD receive buffer (lib/wire/grh.hpp).
inline constexpr uint32_t kGrhBytes = wire::GrhArea::kSize;
inline constexpr uint64_t kMaxDmaLen = uint64_t{1} << 31;  // IBA 9.4.3: a message is at most 2^31 bytes

constexpr uint8_t ack_syndrome() noexcept {
  return wire::make_syndrome(AckType::Ack, wire::kAethCreditInvalid);  // "unlimited credits", as rxe
}
constexpr uint8_t nak_syndrome(NakCode c) noexcept {
  return wire::make_syndrome(AckType::Nak, static_cast<uint8_t>(c));
}

// ---- the packet's way through the responder -------------------------------------

enum class Step : uint8_t {
  CheckQp,
  CheckPsn,
  CheckSrq,
  CheckOpSeq,
  CheckAccess,
  CheckResource,
  CheckLength,
  CheckRkey,
  Execute,
  ReadReply,
  AtomicReply,
  Complete,
  Acknowledge,
  Duplicate,
  NakPsnSeq,
  Hold,  // kept for after a gap (reorder.cpp): the mbuf is the QP's now
  Rnr,
  Fault,
  Done,
};

// What went wrong with a request (IBA 9.7.5.2: class C errors for RC;
// UC and UD drop the message, 9.8.3 / 9.9.3).
enum class Fault : uint8_t {
  OpSeq,         // MIDDLE/LAST without FIRST, or a new message mid-message (9.7.5.2.2)
  NotEnabled,    // READ/WRITE/atomic the QP's access flags do not allow (rxe: invalid request)
  Length,        // payload vs MTU / RETH length (9.7.5.2.2, C9-89)
  NoRdResource,  // READ/atomic with max_dest_rd_atomic 0 (9.7.5.2.2)
  Misaligned,    // atomic VA not 8-byte aligned (C9-92)
  RemoteAccess,  // R_Key, bounds, rights, PD (9.7.5.1.3, C9-88)
  RecvProt,      // a receive SGE failed its L_Key check (9.7.5.2.4: remote operational error)
  RecvLength,    // the message is longer than the receive WQE (9.7.5.2.2)
  Invalidate,    // SEND with Invalidate naming a key that cannot be invalidated (class J, as rxe)
  XrcSrq,        // XRC: the XRCETH names no XRC SRQ of the QP's domain, or another than its message's (A14)
};

struct FaultRule {
  NakCode nak;
  RnicCtr nak_ctr;
  ibv_wc_status wqe_status;  // of a receive WQE the message holds
  ibv_event_type event;      // affiliated async event (IBA 11.6.3.1) when the RC QP goes to ERR
  RnicCtr drop_ctr;          // UC/UD
};

// One row per Fault, by its name.
constexpr std::array<FaultRule, static_cast<size_t>(Fault::XrcSrq) + 1> make_fault_rules() {
  std::array<FaultRule, static_cast<size_t>(Fault::XrcSrq) + 1> t{};
  constexpr FaultRule kInvalid{NakCode::InvalidRequest, RnicCtr::rem_inv_req_naks, IBV_WC_REM_INV_REQ_ERR,
                               IBV_EVENT_QP_REQ_ERR, RnicCtr::drop_bad_transport};
  auto at = [&t](Fault f) -> FaultRule& { return t[static_cast<size_t>(f)]; };
  at(Fault::OpSeq) = kInvalid;
  at(Fault::OpSeq).drop_ctr = RnicCtr::drop_bad_opcode_seq;
  at(Fault::NotEnabled) = kInvalid;
  at(Fault::NotEnabled).drop_ctr = RnicCtr::drop_uc_access;
  at(Fault::Length) = kInvalid;
  at(Fault::Length).drop_ctr = RnicCtr::drop_bad_length;
  at(Fault::NoRdResource) = kInvalid;  // READ/atomic opcodes exist for RC only: UC/UD never get here
  at(Fault::Misaligned) = kInvalid;    // likewise
  // A receive WQE the message consumes (a WRITE with immediate) completes
  // with a local access error: the responder's own view of the access it
  // refused (ConnectX's; the requester gets REM_ACCESS_ERR from the NAK).
  at(Fault::RemoteAccess) = {NakCode::RemoteAccessError, RnicCtr::rem_access_naks, IBV_WC_LOC_ACCESS_ERR,
                             IBV_EVENT_QP_ACCESS_ERR, RnicCtr::drop_uc_access};
  at(Fault::RecvProt) = {NakCode::RemoteOperationalError, RnicCtr::rem_op_naks, IBV_WC_LOC_PROT_ERR,
                         IBV_EVENT_QP_ACCESS_ERR, RnicCtr::drop_recv_prot};
  at(Fault::RecvLength) = {NakCode::InvalidRequest, RnicCtr::rem_inv_req_naks, IBV_WC_LOC_LEN_ERR,
                           IBV_EVENT_QP_REQ_ERR, RnicCtr::drop_ud_too_long};
  at(Fault::Invalidate) = kInvalid;  // IETH opcodes exist for RC only: UC/UD never get here
  at(Fault::XrcSrq) = kInvalid;      // XRC is reliable: never dropped
  return t;
}
inline constexpr auto kFaultRules = make_fault_rules();
static_assert(kFaultRules.size() == static_cast<size_t>(Fault::XrcSrq) + 1);

inline constexpr const FaultRule& rule(Fault f) noexcept { return kFaultRules[static_cast<size_t>(f)]; }

// One request packet and what the checks found out about it.
struct Rx {
  transport::Engine& engine;
  Qp& qp;
  RespState& s;
  Rnic& rnic;
  RnicCounters& ctr;
  const uint8_t* frame;
  const wire::PktInfo& pi;
  const OpcodeInfo& op;
  Psn psn;
  const uint8_t* payload;
  uint32_t len;               // payload bytes
  Fault fault = Fault::OpSeq;
  RecvWqe* wqe = nullptr;     // the receive WQE this packet fills or completes
  uint8_t* target = nullptr;  // READ / atomic: the host address
  uint64_t va = 0;            // READ / atomic: from the RETH / AtomicETH
  uint32_t dma_len = 0;
  Rkey rkey{};
  uint32_t epoch = 0;         // READ: the MR's epoch when the request was checked
  // Where the request goes: the SRQ that gives its receive WQE (the QP's,
  // or an XRC request's by its XRCETH, found by check_qp and checked by
  // check_srq) and the PD its keys are checked against (the QP's; XRC: that
  // SRQ's, nullptr while there is none).
  Srq* srq = nullptr;
  const Pd* pd = nullptr;
  rte_mbuf* m = nullptr;      // the packet's buffer (reorder_hold keeps it)

  wire::BthC bth() const noexcept { return wire::BthC(frame + pi.bth_off); }
  template <class View>
  View ext(wire::Hdr h) const noexcept { return View(frame + pi.ext_off(h)); }
  bool rc() const noexcept { return qp.reliable(); }  // RC and XRC: ACK/NAK, class C errors
  bool ud() const noexcept { return qp.type() == IBV_QPT_UD; }
  uint32_t mtu() const noexcept { return qp.attrs().pmtu_bytes; }
};

// A check that fails: the fault it found, and the step that handles it.
inline Step fault(Rx& r, Fault f) noexcept {
  r.fault = f;
  return Step::Fault;
}

// ---- what the responder does with each operation ------------------------------
// One row per Operation, so that the steps ask the table instead of
// switching over operations (rxe's opcode masks, STYLE 3): whether this
// responder carries it out, and its handlers for the steps that differ.
// The right it needs and whether it holds a result slot are the opcode
// table's (OpcodeInfo::right, ::rd_atomic).  The table is after the
// handlers (make_op_rows).
struct OpRow {
  bool executes = false;             // a request this responder carries out
  Step (*rkey)(Rx&) = nullptr;       // the R_Key checks; nullptr: no remote memory
  Step (*exec)(Rx&) = nullptr;       // carry it out
  Step (*dup)(Rx&) = nullptr;        // a duplicate of it (9.7.5.1.4)
};
const OpRow& op_row(Operation op) noexcept;

// The verbs access bits of an opcode table right.
constexpr int ibv_rights(uint8_t right) noexcept {
  return ((right & wire::kRightWrite) != 0 ? IBV_ACCESS_REMOTE_WRITE : 0) |
         ((right & wire::kRightRead) != 0 ? IBV_ACCESS_REMOTE_READ : 0) |
         ((right & wire::kRightAtomic) != 0 ? IBV_ACCESS_REMOTE_ATOMIC : 0);
}

// ---- shared between the files -------------------------------------------------------
// responder.cpp
uint8_t resp_opcode(const Qp& qp, uint8_t code) noexcept;
// A response's headers toward the QP's peer, its AETH `syndrome` (a
// plain ACK unless told).  A plain ACK, an atomic ACK or a READ response
// to a requester that offers selective repeat, from a QP that keeps,
// carries wire::kResv7Selective (RespState::peer_offers_sr); a NAK never
// does (the selective NAK sets its own bits).
wire::PktDesc response_desc(const transport::Engine& engine, Qp& qp, uint8_t opcode, Psn psn,
                            uint8_t syndrome = ack_syndrome()) noexcept;
// One request through the checks and its execution.  Consumes the mbuf
// (or keeps it: Step::Hold).
void process(transport::Engine& engine, Qp& qp, transport::RoceRx& pkt) noexcept;
int flush_rights(uint32_t feth) noexcept;
RecvWqe* current_wqe(Rx& r) noexcept;
RecvWqe* take_wqe(Rx& r) noexcept;
void abandon_message(RespState& s) noexcept;
Step execute_send(Rx& r) noexcept;
// responder_checks.cpp: the steps before Execute, and the R_Key checks of
// each operation's row
Step check_qp(Rx& r) noexcept;
Step check_psn(Rx& r) noexcept;
// RC/XRC, a PSN past the expected one the IBA's way (C9-114): the packet
// dropped, one PSN sequence NAK per gap (the requester goes back N).
Step sequence_error(Rx& r) noexcept;
Step check_srq(Rx& r) noexcept;
Step check_op_seq(Rx& r) noexcept;
Step check_access(Rx& r) noexcept;
Step check_resource(Rx& r) noexcept;
Step check_length(Rx& r) noexcept;
Step check_rkey(Rx& r) noexcept;
Step rkey_write(Rx& r) noexcept;
Step rkey_read(Rx& r) noexcept;
Step rkey_atomic(Rx& r) noexcept;
Step rkey_atomic_write(Rx& r) noexcept;
Step rkey_flush(Rx& r) noexcept;
// reorder.cpp: selective repeat's responder side
// A request beyond the expected PSN whose requester offers selective
// repeat (the BTH's kResv7Selective), on a QP that keeps packets: kept
// (Step::Hold) when the ring and the device's budget have room, a new gap
// NAKed selectively; else the IBA's way (one PSN sequence NAK per gap).
Step reorder_hold(Rx& r) noexcept;
// After a request was carried out: the kept ones that now follow in
// order, each through process() as if it had just come; a gap left behind
// the expected PSN that was never NAKed is NAKed.
void reorder_drain(transport::Engine& engine, Qp& qp) noexcept;

}  // namespace uroce::rnic::resp
