// The BTH opcode table (IBA 9.2.1 table 38 of volume 1 release 1.4, annex
// A14 for XRC, annex A17.9 for the RoCEv2 CNP, IBA 1.5 for FLUSH and ATOMIC
// WRITE).  One 256-entry constexpr table says for every opcode which
// extended headers follow the BTH and where, whether it carries payload,
// where it sits in a message, whether it consumes a receive WQE or needs an
// acknowledgement, and which opcodes may follow it inside the same message.
// The data path asks the table; it never re-derives a layout.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "lib/wire/bth.hpp"
#include "lib/wire/ext.hpp"

namespace uroce::wire {

enum class Transport : uint8_t { RC, UC, RD, UD, CNP, XRC, None };

// The operation an opcode belongs to.
enum class Operation : uint8_t {
  None,
  Send,
  Write,
  ReadRequest,
  ReadResponse,
  Ack,
  AtomicAck,
  CompareSwap,
  FetchAdd,
  Flush,
  AtomicWrite,
  Cnp,
};

// Header presence bits.  The order of the enumerators is the order in which
// the headers follow the BTH (IBA 9.2, figure 28 and the annexes).
enum Hdr : uint16_t {
  kHdrRdeth = 1u << 0,
  kHdrDeth = 1u << 1,
  kHdrXrceth = 1u << 2,
  kHdrFeth = 1u << 3,
  kHdrReth = 1u << 4,
  kHdrAtomicEth = 1u << 5,
  kHdrAeth = 1u << 6,
  kHdrAtomicAckEth = 1u << 7,
  kHdrImmDt = 1u << 8,
  kHdrIeth = 1u << 9,
  kHdrPayload = 1u << 10,  // the packet may carry a data payload
};

inline constexpr size_t kNumExtHeaders = 10;

// Size of each extended header, indexed by its bit position in `Hdr`.
inline constexpr std::array<uint8_t, kNumExtHeaders> kExtHeaderSize = {
    Rdeth::kSize, Deth::kSize, XrcEth::kSize, Feth::kSize, Reth::kSize,
    AtomicEth::kSize, Aeth::kSize, AtomicAckEth::kSize, ImmDt::kSize, Ieth::kSize,
};

inline constexpr std::array<std::string_view, kNumExtHeaders> kExtHeaderName = {
    "RDETH", "DETH", "XRCETH", "FETH", "RETH", "AtomicETH", "AETH", "AtomicAckETH", "ImmDt", "IETH",
};

// The remote access right a request needs of its QP and of the MR its
// R_Key names (IBA 9.7.5.1.3, 10.6.3.1): the responder checks it once, by
// the table.  FLUSH needs a flush right and ATOMIC WRITE the write right
// (IBA 1.5); they are listed for completeness.
enum RemoteRight : uint8_t {
  kRightNone = 0,
  kRightWrite = 1u << 0,
  kRightRead = 1u << 1,
  kRightAtomic = 1u << 2,
  kRightFlush = 1u << 3,
};

inline constexpr uint8_t kCnpOpcode = 0x81;      // RoCEv2 CNP (A17.9.2)
inline constexpr size_t kCnpReservedLen = 16;    // the 16 reserved bytes after its BTH
inline constexpr uint8_t kNoOffset = 0xFF;

struct OpcodeInfo {
  std::string_view name;  // e.g. "RC_SEND_FIRST"; empty when invalid
  bool valid = false;
  Transport transport = Transport::None;
  Operation op = Operation::None;
  uint16_t hdrs = 0;           // Hdr bits
  bool first = false;          // FIRST or ONLY
  bool last = false;           // LAST or ONLY
  bool request = false;        // sent by a requester (else a response)
  bool consumes_rwqe = false;  // needs a receive WQE at the responder
  bool needs_ack = false;      // a reliable request the responder acknowledges
  bool immediate = false;      // carries ImmDt
  bool invalidate = false;     // carries IETH
  uint8_t right = kRightNone;  // RemoteRight bits the request needs
  bool rd_atomic = false;      // a READ or atomic request: holds a responder result slot (9.7.5.1.4)
  uint8_t hdr_len = 0;         // BTH plus extended headers, in bytes
  // Offset of each extended header from the start of the BTH, indexed by
  // its bit position in `Hdr`; kNoOffset when absent.
  std::array<uint8_t, kNumExtHeaders> off{};
  // Opcodes that may follow this one inside the same message (empty for
  // LAST/ONLY: the next packet starts a new message).
  std::array<uint8_t, 4> next{};
  uint8_t next_count = 0;

  constexpr bool has(Hdr h) const noexcept { return (hdrs & h) != 0; }
  constexpr uint8_t offset(Hdr h) const noexcept {
    return off[static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(h)))];
  }
  constexpr bool only() const noexcept { return first && last; }
  constexpr bool middle() const noexcept { return !first && !last; }
  constexpr bool may_follow(uint8_t opcode) const noexcept {
    for (uint8_t i = 0; i < next_count; ++i) if (next[i] == opcode) return true;
    return false;
  }
};

namespace detail {

// Operation codes within a transport's 32-opcode block (IBA table 38).
enum : uint8_t {
  kSendFirst = 0x00, kSendMiddle = 0x01, kSendLast = 0x02, kSendLastImm = 0x03,
  kSendOnly = 0x04, kSendOnlyImm = 0x05, kWriteFirst = 0x06, kWriteMiddle = 0x07,
  kWriteLast = 0x08, kWriteLastImm = 0x09, kWriteOnly = 0x0A, kWriteOnlyImm = 0x0B,
  kReadRequest = 0x0C, kReadRespFirst = 0x0D, kReadRespMiddle = 0x0E, kReadRespLast = 0x0F,
  kReadRespOnly = 0x10, kAck = 0x11, kAtomicAck = 0x12, kCompareSwap = 0x13, kFetchAdd = 0x14,
  kSendLastInv = 0x16, kSendOnlyInv = 0x17, kFlush = 0x1C, kAtomicWrite = 0x1D,
};

struct OpDef {
  uint8_t code;
  std::string_view suffix;
  Operation op;
  uint16_t hdrs;
  bool first, last, request, rwqe;
};

inline constexpr uint16_t P = kHdrPayload;

// The operations of one transport block; which of them a transport has is
// decided in `make_table`.
inline constexpr OpDef kOps[] = {
    {kSendFirst, "SEND_FIRST", Operation::Send, P, true, false, true, true},
    {kSendMiddle, "SEND_MIDDLE", Operation::Send, P, false, false, true, true},
    {kSendLast, "SEND_LAST", Operation::Send, P, false, true, true, true},
    {kSendLastImm, "SEND_LAST_WITH_IMMEDIATE", Operation::Send, P | kHdrImmDt, false, true, true, true},
    {kSendOnly, "SEND_ONLY", Operation::Send, P, true, true, true, true},
    {kSendOnlyImm, "SEND_ONLY_WITH_IMMEDIATE", Operation::Send, P | kHdrImmDt, true, true, true, true},
    {kWriteFirst, "RDMA_WRITE_FIRST", Operation::Write, P | kHdrReth, true, false, true, false},
    {kWriteMiddle, "RDMA_WRITE_MIDDLE", Operation::Write, P, false, false, true, false},
    {kWriteLast, "RDMA_WRITE_LAST", Operation::Write, P, false, true, true, false},
    {kWriteLastImm, "RDMA_WRITE_LAST_WITH_IMMEDIATE", Operation::Write, P | kHdrImmDt, false, true, true, true},
    {kWriteOnly, "RDMA_WRITE_ONLY", Operation::Write, P | kHdrReth, true, true, true, false},
    {kWriteOnlyImm, "RDMA_WRITE_ONLY_WITH_IMMEDIATE", Operation::Write, P | kHdrReth | kHdrImmDt, true, true, true, true},
    {kReadRequest, "RDMA_READ_REQUEST", Operation::ReadRequest, kHdrReth, true, true, true, false},
    {kReadRespFirst, "RDMA_READ_RESPONSE_FIRST", Operation::ReadResponse, P | kHdrAeth, true, false, false, false},
    {kReadRespMiddle, "RDMA_READ_RESPONSE_MIDDLE", Operation::ReadResponse, P, false, false, false, false},
    {kReadRespLast, "RDMA_READ_RESPONSE_LAST", Operation::ReadResponse, P | kHdrAeth, false, true, false, false},
    {kReadRespOnly, "RDMA_READ_RESPONSE_ONLY", Operation::ReadResponse, P | kHdrAeth, true, true, false, false},
    {kAck, "ACKNOWLEDGE", Operation::Ack, kHdrAeth, true, true, false, false},
    {kAtomicAck, "ATOMIC_ACKNOWLEDGE", Operation::AtomicAck, kHdrAeth | kHdrAtomicAckEth, true, true, false, false},
    {kCompareSwap, "COMPARE_SWAP", Operation::CompareSwap, kHdrAtomicEth, true, true, true, false},
    {kFetchAdd, "FETCH_ADD", Operation::FetchAdd, kHdrAtomicEth, true, true, true, false},
    {kSendLastInv, "SEND_LAST_WITH_INVALIDATE", Operation::Send, P | kHdrIeth, false, true, true, true},
    {kSendOnlyInv, "SEND_ONLY_WITH_INVALIDATE", Operation::Send, P | kHdrIeth, true, true, true, true},
    {kFlush, "FLUSH", Operation::Flush, kHdrFeth | kHdrReth, true, true, true, false},
    {kAtomicWrite, "ATOMIC_WRITE", Operation::AtomicWrite, P | kHdrReth, true, true, true, false},
};

// Which operation codes each transport has (IBA table 38).
constexpr bool transport_has(Transport t, uint8_t code) {
  switch (t) {
    case Transport::RC:
      return true;
    case Transport::XRC:  // XRC has RC's requests and responses but no FLUSH/ATOMIC_WRITE
      return code != kFlush && code != kAtomicWrite;
    case Transport::RD:   // RD has everything but the invalidate sends and the 1.5 additions
      return code != kSendLastInv && code != kSendOnlyInv && code != kFlush && code != kAtomicWrite;
    case Transport::UC:
      return code <= kWriteOnlyImm;
    case Transport::UD:
      return code == kSendOnly || code == kSendOnlyImm;
    case Transport::CNP:
    case Transport::None:
      return false;
  }
  return false;
}

struct Block {
  uint8_t base;
  Transport transport;
  std::string_view prefix;
  uint16_t extra_hdrs;  // headers every opcode of the block carries
};

inline constexpr Block kBlocks[] = {
    {0x00, Transport::RC, "RC_", 0},
    {0x20, Transport::UC, "UC_", 0},
    {0x40, Transport::RD, "RD_", kHdrRdeth | kHdrDeth},
    {0x60, Transport::UD, "UD_", kHdrDeth},
    {0xA0, Transport::XRC, "XRC_", kHdrXrceth},
};

// RD responses carry only the RDETH (requests RDETH and DETH); XRC
// responses carry no XRCETH (annex A14.5.2).
constexpr uint16_t block_headers(const Block& b, const OpDef& d) {
  if (b.transport == Transport::RD && !d.request) return kHdrRdeth;
  if (b.transport == Transport::XRC && !d.request) return 0;
  return b.extra_hdrs;
}

constexpr void lay_out(OpcodeInfo& e) {
  e.off.fill(kNoOffset);
  uint8_t off = Bth::kSize;
  for (size_t i = 0; i < kNumExtHeaders; ++i) {
    if (e.hdrs & (1u << i)) {
      e.off[i] = off;
      off = static_cast<uint8_t>(off + kExtHeaderSize[i]);
    }
  }
  e.hdr_len = off;
}

constexpr uint8_t right_of(Operation op) {
  switch (op) {
    case Operation::Write: case Operation::AtomicWrite: return kRightWrite;
    case Operation::ReadRequest: return kRightRead;
    case Operation::CompareSwap: case Operation::FetchAdd: return kRightAtomic;
    case Operation::Flush: return kRightFlush;
    case Operation::None: case Operation::Send: case Operation::ReadResponse: case Operation::Ack:
    case Operation::AtomicAck: case Operation::Cnp:
      break;
  }
  return kRightNone;
}

// Which opcodes of the same operation may follow `d` within a message.
constexpr void set_next(OpcodeInfo& e, uint8_t base, const OpDef& d, Transport t) {
  auto add = [&](uint8_t code) {
    if (transport_has(t, code)) e.next[e.next_count++] = static_cast<uint8_t>(base | code);
  };
  if (d.last) return;
  switch (d.op) {
    case Operation::Send:
      add(kSendMiddle); add(kSendLast); add(kSendLastImm); add(kSendLastInv);
      break;
    case Operation::Write:
      add(kWriteMiddle); add(kWriteLast); add(kWriteLastImm);
      break;
    case Operation::ReadResponse:
      add(kReadRespMiddle); add(kReadRespLast);
      break;
    case Operation::None: case Operation::ReadRequest: case Operation::Ack:
    case Operation::AtomicAck: case Operation::CompareSwap: case Operation::FetchAdd:
    case Operation::Flush: case Operation::AtomicWrite: case Operation::Cnp:
      break;
  }
}

// Opcode names live in static storage built at compile time.
struct NameStore {
  std::array<std::array<char, 40>, 256> text{};
};

constexpr NameStore make_names() {
  NameStore s{};
  for (const Block& b : kBlocks) {
    for (const OpDef& d : kOps) {
      if (!transport_has(b.transport, d.code)) continue;
      auto& out = s.text[b.base | d.code];
      size_t n = 0;
      for (char c : b.prefix) out[n++] = c;
      for (char c : d.suffix) out[n++] = c;
    }
  }
  auto& cnp = s.text[kCnpOpcode];
  size_t n = 0;
  for (char c : std::string_view("CNP")) cnp[n++] = c;
  return s;
}

inline constexpr NameStore kNames = make_names();

constexpr std::string_view name_of(size_t i) {
  const auto& t = kNames.text[i];
  size_t n = 0;
  while (n < t.size() && t[n] != '\0') ++n;
  return std::string_view(t.data(), n);
}

constexpr std::array<OpcodeInfo, 256> make_table() {
  std::array<OpcodeInfo, 256> t{};
  for (auto& e : t) e.off.fill(kNoOffset);
  for (const Block& b : kBlocks) {
    for (const OpDef& d : kOps) {
      if (!transport_has(b.transport, d.code)) continue;
      const uint8_t code = static_cast<uint8_t>(b.base | d.code);
      OpcodeInfo& e = t[code];
      e.name = name_of(code);
      e.valid = true;
      e.transport = b.transport;
      e.op = d.op;
      e.hdrs = static_cast<uint16_t>(d.hdrs | block_headers(b, d));
      e.first = d.first;
      e.last = d.last;
      e.request = d.request;
      e.consumes_rwqe = d.rwqe;
      e.needs_ack = d.request && b.transport != Transport::UC && b.transport != Transport::UD;
      e.immediate = (e.hdrs & kHdrImmDt) != 0;
      e.invalidate = (e.hdrs & kHdrIeth) != 0;
      e.right = d.request ? right_of(d.op) : uint8_t{kRightNone};
      e.rd_atomic = d.op == Operation::ReadRequest || d.op == Operation::CompareSwap || d.op == Operation::FetchAdd;
      lay_out(e);
      set_next(e, b.base, d, b.transport);
    }
  }
  OpcodeInfo& cnp = t[kCnpOpcode];
  cnp.name = name_of(kCnpOpcode);
  cnp.valid = true;
  cnp.transport = Transport::CNP;
  cnp.op = Operation::Cnp;
  cnp.hdrs = 0;  // 16 reserved bytes follow, carried as payload
  cnp.first = cnp.last = true;
  lay_out(cnp);
  return t;
}

}  // namespace detail

inline constexpr std::array<OpcodeInfo, 256> kOpcodeTable = detail::make_table();

constexpr const OpcodeInfo& opcode_info(uint8_t opcode) noexcept { return kOpcodeTable[opcode]; }

// Named opcodes the transport uses (RC, UC and UD blocks).
namespace op {
using namespace detail;
inline constexpr uint8_t kRcBase = 0x00, kUcBase = 0x20, kRdBase = 0x40, kUdBase = 0x60, kXrcBase = 0xA0;
inline constexpr uint8_t RC_SEND_FIRST = kRcBase | kSendFirst;
inline constexpr uint8_t RC_SEND_MIDDLE = kRcBase | kSendMiddle;
inline constexpr uint8_t RC_SEND_LAST = kRcBase | kSendLast;
inline constexpr uint8_t RC_SEND_LAST_IMM = kRcBase | kSendLastImm;
inline constexpr uint8_t RC_SEND_ONLY = kRcBase | kSendOnly;
inline constexpr uint8_t RC_SEND_ONLY_IMM = kRcBase | kSendOnlyImm;
inline constexpr uint8_t RC_WRITE_FIRST = kRcBase | kWriteFirst;
inline constexpr uint8_t RC_WRITE_MIDDLE = kRcBase | kWriteMiddle;
inline constexpr uint8_t RC_WRITE_LAST = kRcBase | kWriteLast;
inline constexpr uint8_t RC_WRITE_LAST_IMM = kRcBase | kWriteLastImm;
inline constexpr uint8_t RC_WRITE_ONLY = kRcBase | kWriteOnly;
inline constexpr uint8_t RC_WRITE_ONLY_IMM = kRcBase | kWriteOnlyImm;
inline constexpr uint8_t RC_READ_REQUEST = kRcBase | kReadRequest;
inline constexpr uint8_t RC_READ_RESPONSE_FIRST = kRcBase | kReadRespFirst;
inline constexpr uint8_t RC_READ_RESPONSE_MIDDLE = kRcBase | kReadRespMiddle;
inline constexpr uint8_t RC_READ_RESPONSE_LAST = kRcBase | kReadRespLast;
inline constexpr uint8_t RC_READ_RESPONSE_ONLY = kRcBase | kReadRespOnly;
inline constexpr uint8_t RC_ACK = kRcBase | kAck;
inline constexpr uint8_t RC_ATOMIC_ACK = kRcBase | kAtomicAck;
inline constexpr uint8_t RC_COMPARE_SWAP = kRcBase | kCompareSwap;
inline constexpr uint8_t RC_FETCH_ADD = kRcBase | kFetchAdd;
inline constexpr uint8_t RC_SEND_LAST_INV = kRcBase | kSendLastInv;
inline constexpr uint8_t RC_SEND_ONLY_INV = kRcBase | kSendOnlyInv;
inline constexpr uint8_t RC_FLUSH = kRcBase | kFlush;
inline constexpr uint8_t RC_ATOMIC_WRITE = kRcBase | kAtomicWrite;
inline constexpr uint8_t UC_SEND_FIRST = kUcBase | kSendFirst;
inline constexpr uint8_t UC_SEND_MIDDLE = kUcBase | kSendMiddle;
inline constexpr uint8_t UC_SEND_LAST = kUcBase | kSendLast;
inline constexpr uint8_t UC_SEND_LAST_IMM = kUcBase | kSendLastImm;
inline constexpr uint8_t UC_SEND_ONLY = kUcBase | kSendOnly;
inline constexpr uint8_t UC_SEND_ONLY_IMM = kUcBase | kSendOnlyImm;
inline constexpr uint8_t UC_WRITE_FIRST = kUcBase | kWriteFirst;
inline constexpr uint8_t UC_WRITE_MIDDLE = kUcBase | kWriteMiddle;
inline constexpr uint8_t UC_WRITE_LAST = kUcBase | kWriteLast;
inline constexpr uint8_t UC_WRITE_LAST_IMM = kUcBase | kWriteLastImm;
inline constexpr uint8_t UC_WRITE_ONLY = kUcBase | kWriteOnly;
inline constexpr uint8_t UC_WRITE_ONLY_IMM = kUcBase | kWriteOnlyImm;
inline constexpr uint8_t UD_SEND_ONLY = kUdBase | kSendOnly;
inline constexpr uint8_t UD_SEND_ONLY_IMM = kUdBase | kSendOnlyImm;
inline constexpr uint8_t CNP = kCnpOpcode;
}  // namespace op

// Compile-time checks of the table against IBA table 38.
static_assert(opcode_info(op::RC_SEND_ONLY).hdr_len == 12);
static_assert(opcode_info(op::RC_WRITE_MIDDLE).right == kRightWrite && opcode_info(op::UC_WRITE_FIRST).right == kRightWrite);
static_assert(opcode_info(op::RC_READ_REQUEST).right == kRightRead && opcode_info(op::RC_READ_REQUEST).rd_atomic);
static_assert(opcode_info(op::RC_FETCH_ADD).right == kRightAtomic && opcode_info(op::RC_COMPARE_SWAP).rd_atomic);
static_assert(opcode_info(op::RC_SEND_ONLY).right == kRightNone && !opcode_info(op::RC_SEND_ONLY).rd_atomic);
static_assert(opcode_info(op::RC_READ_RESPONSE_ONLY).right == kRightNone);  // responses need nothing
static_assert(opcode_info(op::RC_WRITE_ONLY_IMM).hdr_len == 12 + 16 + 4);
static_assert(opcode_info(op::RC_WRITE_ONLY_IMM).offset(kHdrImmDt) == 28);
static_assert(opcode_info(op::RC_ATOMIC_ACK).hdr_len == 12 + 4 + 8);
static_assert(opcode_info(op::RC_COMPARE_SWAP).hdr_len == 12 + 28);
static_assert(opcode_info(op::UD_SEND_ONLY_IMM).hdr_len == 12 + 8 + 4);
static_assert(opcode_info(op::UD_SEND_ONLY).offset(kHdrDeth) == 12);
static_assert(opcode_info(op::RC_FLUSH).offset(kHdrFeth) == 12 && opcode_info(op::RC_FLUSH).offset(kHdrReth) == 16);
static_assert(!opcode_info(0x15).valid && !opcode_info(0x80).valid && opcode_info(0x81).valid);
static_assert(opcode_info(op::RC_SEND_FIRST).may_follow(op::RC_SEND_LAST_INV));
static_assert(!opcode_info(op::UC_SEND_FIRST).may_follow(0x20 | 0x16));
static_assert(opcode_info(op::RC_SEND_ONLY).name == "RC_SEND_ONLY");
static_assert(opcode_info(op::CNP).name == "CNP");

}  // namespace uroce::wire
