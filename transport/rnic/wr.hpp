// Work-request opcodes: one row per ibv_wr_opcode, everything the RNIC
// and the drop-in know of it (as rxe's rxe_wr_opcode_info).  post_send
// validates a WR against its row and fills the WQE from it; the requester
// takes its wire opcode per segment and its read/atomic credit from it;
// the completer its WC opcode; the drop-in the ibv_qp_ex builders it
// offers.  A new verb is one row.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <string_view>

#include "lib/wire/opcode.hpp"
#include "transport/rnic/verbs_newer.hpp"

namespace uroce::rnic {

// The QP's service type as the tables index it: the connected services,
// UD and the GSI QP (UD with the GSI's rules), and XRC's two halves (annex
// A14: the send QP, INI, and the receive QP, TGT).
enum QpClass : uint8_t { kRC, kUC, kUD, kGSI, kXrcIni, kXrcTgt, kNumQpClasses };

constexpr QpClass qp_class(ibv_qp_type type, bool gsi) noexcept {
  if (gsi) return kGSI;
  switch (type) {
    case IBV_QPT_RC: return kRC;
    case IBV_QPT_UC: return kUC;
    case IBV_QPT_UD: return kUD;
    case IBV_QPT_XRC_SEND: return kXrcIni;
    case IBV_QPT_XRC_RECV: return kXrcTgt;
    case IBV_QPT_RAW_PACKET:
    case IBV_QPT_DRIVER:
      break;
  }
  return kUD;  // not created (Rnic::create_qp refuses other types)
}

// The segment of a message a packet carries (IBA 9.2: FIRST, MIDDLE, LAST, ONLY).
enum class Seg : uint8_t { First, Middle, Last, Only };

// Where a WR's remote side is named in ibv_send_wr.
enum class WrRemote : uint8_t {
  None,    // SEND, SEND with immediate or invalidate (the invalidated R_Key in imm_data)
  Rdma,    // wr.rdma: remote_addr, rkey
  Atomic,  // wr.atomic: remote_addr, rkey, compare_add, swap
  Flush,   // wr.atomic: remote_addr, rkey; compare_add the length, swap the type and level (ibv_wr_flush)
  Bind,    // bind_mw: the window, its new R_Key and the binding
};

struct WrInfo {
  std::string_view name;
  bool valid = false;        // an opcode this RNIC carries out
  uint8_t classes = 0;       // the QP classes that take it: bit (1 << QpClass)
  bool local = false;        // no packet, no PSN, no SGE read: carried out in SQ order (bind, local invalidate)
  WrRemote remote = WrRemote::None;
  bool inline_ok = false;    // IBV_SEND_INLINE allowed (it has data to send)
  bool rd_atomic = false;    // READ or atomic: held against max_rd_atomic, acknowledged by its response
  bool atomic = false;       // CAS / FETCH_ADD: one SGE of at least 8 bytes takes the original value (IBA 9.4.5)
  uint32_t exact_len = 0;    // a message of exactly this many bytes, or 0 (ATOMIC WRITE: 8, IBA 1.5)
  bool multi = false;        // segmented by the path MTU (SEND, WRITE)
  std::array<uint8_t, 4> code{};  // the operation code within a transport's block (IBA table 38), by Seg
  ibv_wc_opcode wc = IBV_WC_SEND;
  uint64_t qp_ex_bit = 0;    // IBV_QP_EX_WITH_*: the ibv_qp_ex builder the drop-in offers for it
  bool wc_imm = false;       // its send CQE carries the immediate (IBV_WC_WITH_IMM)
};

inline constexpr size_t kNumWrOpcodes = 16;

constexpr uint8_t classes_of(std::initializer_list<QpClass> l) {
  uint8_t m = 0;
  for (QpClass c : l) m = static_cast<uint8_t>(m | (1u << c));
  return m;
}

// Which service types take which operation (IBA 11.4.1.1, table 86
// "Service types and operations"): UD sends only; UC no READ or atomics;
// SEND with Invalidate RC only (IBA table 38 has no UC/UD opcode with an
// IETH); the IBA 1.5 operations (ATOMIC WRITE, FLUSH) RC only.  LOCAL_INV
// and BIND_MW (memory windows, IBA 10.6.7) on the connected services that
// send, as rxe.  An XRC send QP (annex A14) takes RC's SENDs, WRITEs, READs
// and atomics (the XRC block of table 38); no SEND with Invalidate (its
// R_Key would be checked against the SRQ's PD, not the window's QP) and no
// IBA 1.5 operation; an XRC receive QP sends nothing.
constexpr std::array<WrInfo, kNumWrOpcodes> make_wr_table() {
  namespace o = wire::op;
  constexpr uint8_t kSenders = classes_of({kRC, kUC, kUD, kGSI, kXrcIni});
  constexpr uint8_t kConnected = classes_of({kRC, kUC, kXrcIni});
  constexpr uint8_t kReliable = classes_of({kRC, kXrcIni});
  constexpr uint8_t kRcOnly = classes_of({kRC});
  std::array<WrInfo, kNumWrOpcodes> t{};
  t[IBV_WR_SEND] = {"SEND", true, kSenders, false, WrRemote::None, true, false, false, 0, true,
                    {o::kSendFirst, o::kSendMiddle, o::kSendLast, o::kSendOnly}, IBV_WC_SEND,
                    IBV_QP_EX_WITH_SEND};
  t[IBV_WR_SEND_WITH_IMM] = {"SEND_WITH_IMM", true, kSenders, false, WrRemote::None, true, false, false, 0, true,
                             {o::kSendFirst, o::kSendMiddle, o::kSendLastImm, o::kSendOnlyImm}, IBV_WC_SEND,
                             IBV_QP_EX_WITH_SEND_WITH_IMM, true};
  t[IBV_WR_SEND_WITH_INV] = {"SEND_WITH_INV", true, kRcOnly, false, WrRemote::None, true, false, false, 0, true,
                             {o::kSendFirst, o::kSendMiddle, o::kSendLastInv, o::kSendOnlyInv}, IBV_WC_SEND,
                             IBV_QP_EX_WITH_SEND_WITH_INV};
  t[IBV_WR_RDMA_WRITE] = {"RDMA_WRITE", true, kConnected, false, WrRemote::Rdma, true, false, false, 0, true,
                          {o::kWriteFirst, o::kWriteMiddle, o::kWriteLast, o::kWriteOnly}, IBV_WC_RDMA_WRITE,
                          IBV_QP_EX_WITH_RDMA_WRITE};
  t[IBV_WR_RDMA_WRITE_WITH_IMM] = {"RDMA_WRITE_WITH_IMM", true, kConnected, false, WrRemote::Rdma, true, false, false,
                                   0, true, {o::kWriteFirst, o::kWriteMiddle, o::kWriteLastImm, o::kWriteOnlyImm},
                                   IBV_WC_RDMA_WRITE, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, true};
  // READ: one request; its PSNs are its response packets' (IBA 9.7.4.1.1).
  t[IBV_WR_RDMA_READ] = {"RDMA_READ", true, kReliable, false, WrRemote::Rdma, false, true, false, 0, false,
                         {o::kReadRequest, o::kReadRequest, o::kReadRequest, o::kReadRequest}, IBV_WC_RDMA_READ,
                         IBV_QP_EX_WITH_RDMA_READ};
  t[IBV_WR_ATOMIC_CMP_AND_SWP] = {"ATOMIC_CMP_AND_SWP", true, kReliable, false, WrRemote::Atomic, false, true, true,
                                  0, false, {o::kCompareSwap, o::kCompareSwap, o::kCompareSwap, o::kCompareSwap},
                                  IBV_WC_COMP_SWAP, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP};
  t[IBV_WR_ATOMIC_FETCH_AND_ADD] = {"ATOMIC_FETCH_AND_ADD", true, kReliable, false, WrRemote::Atomic, false, true,
                                    true, 0, false, {o::kFetchAdd, o::kFetchAdd, o::kFetchAdd, o::kFetchAdd},
                                    IBV_WC_FETCH_ADD, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD};
  t[IBV_WR_LOCAL_INV] = {"LOCAL_INV", true, kConnected, true, WrRemote::None, false, false, false, 0, false,
                         {}, IBV_WC_LOCAL_INV, IBV_QP_EX_WITH_LOCAL_INV};
  t[IBV_WR_BIND_MW] = {"BIND_MW", true, kConnected, true, WrRemote::Bind, false, false, false, 0, false,
                       {}, IBV_WC_BIND_MW, IBV_QP_EX_WITH_BIND_MW};
  t[IBV_WR_TSO] = {"TSO", false, 0, false, WrRemote::None, false, false, false, 0, false, {}, IBV_WC_TSO, 0};
  t[IBV_WR_DRIVER1] = {"DRIVER1", false, 0, false, WrRemote::None, false, false, false, 0, false, {}, IBV_WC_SEND, 0};
  t[12] = {"(12)", false, 0, false, WrRemote::None, false, false, false, 0, false, {}, IBV_WC_SEND, 0};
  t[13] = {"(13)", false, 0, false, WrRemote::None, false, false, false, 0, false, {}, IBV_WC_SEND, 0};
  // FLUSH (IBA 1.5; rdma-core 45): one packet, FETH and RETH, no payload,
  // answered by an ACK (rxe's requester holds no read/atomic credit for it).
  t[verbs_newer::kWrFlush] = {"FLUSH", true, kRcOnly, false, WrRemote::Flush, false, false, false, 0, false,
                              {o::kFlush, o::kFlush, o::kFlush, o::kFlush}, verbs_newer::kWcFlush,
                              verbs_newer::kQpExWithFlush};
  // ATOMIC WRITE (IBA 1.5): one packet, RETH and exactly 8 bytes, answered
  // by an ACK (as a WRITE; rxe holds no read/atomic credit for it).
  t[IBV_WR_ATOMIC_WRITE] = {"ATOMIC_WRITE", true, kRcOnly, false, WrRemote::Rdma, true, false, false, 8, false,
                            {o::kAtomicWrite, o::kAtomicWrite, o::kAtomicWrite, o::kAtomicWrite},
                            IBV_WC_ATOMIC_WRITE, IBV_QP_EX_WITH_ATOMIC_WRITE};
  return t;
}

inline constexpr std::array<WrInfo, kNumWrOpcodes> kWrTable = make_wr_table();

// The row of an opcode as an application left it (any integer: read as
// the enum's underlying type, never loaded as an enumerator it is not).
inline constexpr WrInfo kWrUnknown{"(unknown)"};
constexpr const WrInfo& wr_info(long long opcode) noexcept {
  return opcode >= 0 && opcode < static_cast<long long>(kNumWrOpcodes) ? kWrTable[static_cast<size_t>(opcode)]
                                                                        : kWrUnknown;
}
constexpr const WrInfo& wr_info(ibv_wr_opcode op) noexcept { return wr_info(static_cast<long long>(op)); }

constexpr bool wr_allowed(const WrInfo& w, QpClass c) noexcept { return w.valid && (w.classes & (1u << c)) != 0; }

// The ibv_qp_ex builders the drop-in offers: every row's bit.
constexpr uint64_t supported_qp_ex_ops() noexcept {
  uint64_t m = 0;
  for (const WrInfo& w : kWrTable)
    if (w.valid) m |= w.qp_ex_bit;
  return m;
}

// The table against the opcode table: every wire code a row names is a
// valid opcode in the blocks of the classes that take it.
constexpr bool wr_table_consistent() {
  for (const WrInfo& w : kWrTable) {
    if (!w.valid || w.local) continue;
    const uint8_t bases[] = {wire::op::kRcBase, wire::op::kUcBase, wire::op::kUdBase, wire::op::kUdBase,
                             wire::op::kXrcBase, wire::op::kXrcBase};
    for (unsigned c = 0; c < kNumQpClasses; ++c) {
      if ((w.classes & (1u << c)) == 0) continue;
      const unsigned segs = w.multi && c != kUD && c != kGSI ? 4 : 1;
      for (unsigned s = 0; s < segs; ++s) {
        const size_t seg = segs == 1 ? static_cast<size_t>(Seg::Only) : s;
        if (!wire::opcode_info(static_cast<uint8_t>(bases[c] | w.code[seg])).valid) return false;
      }
    }
  }
  return true;
}
static_assert(wr_table_consistent());
static_assert(wire::opcode_info(wire::op::kRcBase | kWrTable[IBV_WR_SEND_WITH_IMM].code[3]).name ==
              "RC_SEND_ONLY_WITH_IMMEDIATE");
static_assert(wire::opcode_info(wire::op::kUcBase | kWrTable[IBV_WR_RDMA_WRITE].code[0]).name == "UC_RDMA_WRITE_FIRST");
static_assert(!wire::opcode_info(wire::op::kUdBase | kWrTable[IBV_WR_RDMA_WRITE].code[3]).valid);
static_assert(wire::opcode_info(wire::op::kRcBase | kWrTable[IBV_WR_ATOMIC_WRITE].code[3]).name == "RC_ATOMIC_WRITE");
static_assert(wire::opcode_info(wire::op::kRcBase | kWrTable[verbs_newer::kWrFlush].code[3]).name == "RC_FLUSH");
static_assert(kWrTable[IBV_WR_ATOMIC_WRITE].qp_ex_bit == IBV_QP_EX_WITH_ATOMIC_WRITE);

}  // namespace uroce::rnic
