// The 256-entry opcode table (lib/wire/opcode.hpp): structural invariants
// for every entry, and a hand transcription of IBA table 38 for RC, UC
// and UD to compare against.
#include <gtest/gtest.h>

#include <cstdio>
#include <set>
#include <string>
#include <string_view>

#include "lib/wire/opcode.hpp"

namespace uroce::test {
namespace {

using namespace uroce::wire;

bool contains(std::string_view s, std::string_view sub) { return s.find(sub) != std::string_view::npos; }

std::string hex(unsigned v) {
  char b[8];
  std::snprintf(b, sizeof b, "0x%02X", v);
  return b;
}

// The opcodes IBA table 38 (and annexes A14, A17.9, IBA 1.5) defines, as the
// table implements them.  RD's RESYNC (0x55) is not in the table: see the
// note at AllOpcodesValidExactlyAsSpecified.
bool spec_valid(unsigned o) {
  if (o <= 0x14 || o == 0x16 || o == 0x17 || o == 0x1C || o == 0x1D) return true;  // RC
  if (o >= 0x20 && o <= 0x2B) return true;                                        // UC
  if (o >= 0x40 && o <= 0x54) return true;                                        // RD
  if (o == 0x64 || o == 0x65) return true;                                        // UD
  if (o == 0x81) return true;                                                     // CNP
  if ((o >= 0xA0 && o <= 0xB4) || o == 0xB6 || o == 0xB7) return true;            // XRC
  return false;
}

TEST(Opcode, AllOpcodesValidExactlyAsSpecified) {
  for (unsigned o = 0; o < 256; ++o) {
    if (o == 0x55) continue;  // RD RESYNC: defined by IBA, absent from the table (RD is not served)
    EXPECT_EQ(opcode_info(static_cast<uint8_t>(o)).valid, spec_valid(o)) << hex(o);
  }
  // The reserved opcodes the brief lists, spelled out.
  for (unsigned o : {0x15u, 0x18u, 0x19u, 0x1Au, 0x1Bu, 0x1Eu, 0x1Fu, 0x80u}) {
    EXPECT_FALSE(opcode_info(static_cast<uint8_t>(o)).valid) << hex(o);
  }
  for (unsigned o = 0x82; o <= 0x9F; ++o) EXPECT_FALSE(opcode_info(static_cast<uint8_t>(o)).valid) << hex(o);
  for (unsigned o = 0xC0; o <= 0xFF; ++o) EXPECT_FALSE(opcode_info(static_cast<uint8_t>(o)).valid) << hex(o);
}

TEST(Opcode, InvalidEntriesAreEmpty) {
  for (unsigned o = 0; o < 256; ++o) {
    const OpcodeInfo& e = opcode_info(static_cast<uint8_t>(o));
    if (e.valid) continue;
    EXPECT_TRUE(e.name.empty()) << hex(o);
    EXPECT_EQ(e.transport, Transport::None) << hex(o);
    EXPECT_EQ(e.hdrs, 0) << hex(o);
    EXPECT_EQ(e.next_count, 0) << hex(o);
    EXPECT_FALSE(e.needs_ack || e.consumes_rwqe || e.request) << hex(o);
  }
}

TEST(Opcode, NamesAreUniqueAndCarryTheTransport) {
  std::set<std::string_view> names;
  for (unsigned o = 0; o < 256; ++o) {
    const OpcodeInfo& e = opcode_info(static_cast<uint8_t>(o));
    if (!e.valid) continue;
    EXPECT_FALSE(e.name.empty()) << hex(o);
    EXPECT_TRUE(names.insert(e.name).second) << "duplicate name " << e.name;
    std::string_view prefix;
    switch (e.transport) {
      case Transport::RC: prefix = "RC_"; break;
      case Transport::UC: prefix = "UC_"; break;
      case Transport::RD: prefix = "RD_"; break;
      case Transport::UD: prefix = "UD_"; break;
      case Transport::XRC: prefix = "XRC_"; break;
      case Transport::CNP: prefix = "CNP"; break;
      case Transport::None: ADD_FAILURE() << hex(o) << " valid with no transport"; break;
    }
    EXPECT_EQ(e.name.substr(0, prefix.size()), prefix) << hex(o);
    // The block of 32 says the transport (IBA 9.2.1: opcode bits 7-5).
    static constexpr Transport kByBlock[8] = {Transport::RC, Transport::UC, Transport::RD, Transport::UD,
                                              Transport::CNP, Transport::XRC, Transport::None, Transport::None};
    EXPECT_EQ(e.transport, kByBlock[o >> 5]) << hex(o);
  }
}

TEST(Opcode, HeaderLengthIsTheSumOfItsHeaders) {
  for (unsigned o = 0; o < 256; ++o) {
    const OpcodeInfo& e = opcode_info(static_cast<uint8_t>(o));
    if (!e.valid) continue;
    size_t sum = Bth::kSize;
    for (size_t i = 0; i < kNumExtHeaders; ++i) {
      if (e.hdrs & (1u << i)) sum += kExtHeaderSize[i];
    }
    EXPECT_EQ(e.hdr_len, sum) << e.name;
    EXPECT_EQ(e.hdrs & ~((1u << (kNumExtHeaders + 1)) - 1), 0) << e.name << ": unknown header bits";
  }
}

TEST(Opcode, OffsetsFollowHdrBitOrder) {
  for (unsigned o = 0; o < 256; ++o) {
    const OpcodeInfo& e = opcode_info(static_cast<uint8_t>(o));
    if (!e.valid) continue;
    size_t expect = Bth::kSize;
    int last = -1;
    for (size_t i = 0; i < kNumExtHeaders; ++i) {
      if (e.hdrs & (1u << i)) {
        EXPECT_EQ(e.off[i], expect) << e.name << " " << kExtHeaderName[i];
        EXPECT_GT(static_cast<int>(e.off[i]), last) << e.name << " " << kExtHeaderName[i];
        EXPECT_EQ(e.offset(static_cast<Hdr>(1u << i)), e.off[i]);
        last = e.off[i];
        expect += kExtHeaderSize[i];
      } else {
        EXPECT_EQ(e.off[i], kNoOffset) << e.name << " " << kExtHeaderName[i];
      }
    }
    EXPECT_EQ(expect, e.hdr_len) << e.name;
  }
}

TEST(Opcode, PositionMatchesTheName) {
  for (unsigned o = 0; o < 256; ++o) {
    const OpcodeInfo& e = opcode_info(static_cast<uint8_t>(o));
    if (!e.valid) continue;
    const int marks = contains(e.name, "FIRST") + contains(e.name, "MIDDLE") + contains(e.name, "LAST") +
                      contains(e.name, "ONLY");
    EXPECT_LE(marks, 1) << e.name;
    if (contains(e.name, "FIRST")) {
      EXPECT_TRUE(e.first && !e.last && !e.only() && !e.middle()) << e.name;
    } else if (contains(e.name, "MIDDLE")) {
      EXPECT_TRUE(!e.first && !e.last && e.middle()) << e.name;
    } else if (contains(e.name, "LAST")) {
      EXPECT_TRUE(!e.first && e.last && !e.only()) << e.name;
    } else {
      // ONLY, and the single-packet operations (READ_REQUEST, ACKNOWLEDGE,
      // atomics, FLUSH, CNP).
      EXPECT_TRUE(e.first && e.last && e.only() && !e.middle()) << e.name;
    }
  }
}

TEST(Opcode, NextOpcodesStayInTheMessage) {
  for (unsigned o = 0; o < 256; ++o) {
    const OpcodeInfo& e = opcode_info(static_cast<uint8_t>(o));
    if (!e.valid) continue;
    if (e.last) {
      EXPECT_EQ(e.next_count, 0) << e.name;
      continue;
    }
    EXPECT_GT(e.next_count, 0) << e.name << " (FIRST/MIDDLE) lists no next opcode";
    bool has_middle = false, has_last = false;
    for (uint8_t i = 0; i < e.next_count; ++i) {
      const OpcodeInfo& n = opcode_info(e.next[i]);
      ASSERT_TRUE(n.valid) << e.name << " -> " << hex(e.next[i]);
      EXPECT_EQ(n.transport, e.transport) << e.name << " -> " << n.name;
      EXPECT_EQ(n.op, e.op) << e.name << " -> " << n.name;
      EXPECT_FALSE(n.first) << e.name << " -> " << n.name << " starts a message";
      EXPECT_TRUE(contains(n.name, "MIDDLE") || contains(n.name, "LAST")) << e.name << " -> " << n.name;
      EXPECT_TRUE(e.may_follow(e.next[i]));
      has_middle |= n.middle();
      has_last |= n.last;
      for (uint8_t k = 0; k < i; ++k) EXPECT_NE(e.next[k], e.next[i]) << e.name << " lists a next twice";
    }
    EXPECT_TRUE(has_middle && has_last) << e.name;
    // Every MIDDLE/LAST opcode of the same transport and operation is listed.
    for (unsigned p = 0; p < 256; ++p) {
      const OpcodeInfo& n = opcode_info(static_cast<uint8_t>(p));
      if (n.valid && n.transport == e.transport && n.op == e.op && !n.first) {
        EXPECT_TRUE(e.may_follow(static_cast<uint8_t>(p))) << e.name << " should allow " << n.name;
      }
    }
  }
}

TEST(Opcode, NeedsAckOnlyOnReliableRequests) {
  for (unsigned o = 0; o < 256; ++o) {
    const OpcodeInfo& e = opcode_info(static_cast<uint8_t>(o));
    if (!e.valid) continue;
    const bool reliable = e.transport == Transport::RC || e.transport == Transport::RD || e.transport == Transport::XRC;
    EXPECT_EQ(e.needs_ack, reliable && e.request) << e.name;
    // Responses are exactly the read responses and the acknowledgements.
    const bool response = e.op == Operation::ReadResponse || e.op == Operation::Ack || e.op == Operation::AtomicAck;
    if (e.transport != Transport::CNP) {
      EXPECT_EQ(e.request, !response) << e.name;
    }
  }
}

TEST(Opcode, ConsumesReceiveWqeExactlyOnSendsAndWriteWithImmediate) {
  for (unsigned o = 0; o < 256; ++o) {
    const OpcodeInfo& e = opcode_info(static_cast<uint8_t>(o));
    if (!e.valid) continue;
    const bool want = contains(e.name, "SEND") || (contains(e.name, "WRITE") && contains(e.name, "WITH_IMMEDIATE"));
    EXPECT_EQ(e.consumes_rwqe, want) << e.name;
    EXPECT_EQ(e.immediate, e.has(kHdrImmDt)) << e.name;
    EXPECT_EQ(e.immediate, contains(e.name, "WITH_IMMEDIATE")) << e.name;
    EXPECT_EQ(e.invalidate, e.has(kHdrIeth)) << e.name;
    EXPECT_EQ(e.invalidate, contains(e.name, "WITH_INVALIDATE")) << e.name;
  }
}

TEST(Opcode, UdHasOnlySendOnlyWithDeth) {
  int count = 0;
  for (unsigned o = 0x60; o < 0x80; ++o) {
    const OpcodeInfo& e = opcode_info(static_cast<uint8_t>(o));
    if (!e.valid) continue;
    ++count;
    EXPECT_TRUE(o == 0x64 || o == 0x65) << hex(o);
    EXPECT_TRUE(e.has(kHdrDeth)) << e.name;
    EXPECT_EQ(e.offset(kHdrDeth), Bth::kSize) << e.name;
    EXPECT_TRUE(e.only()) << e.name;
  }
  EXPECT_EQ(count, 2);
  EXPECT_EQ(opcode_info(op::UD_SEND_ONLY).name, "UD_SEND_ONLY");
  EXPECT_EQ(opcode_info(op::UD_SEND_ONLY_IMM).name, "UD_SEND_ONLY_WITH_IMMEDIATE");
  EXPECT_EQ(opcode_info(op::UD_SEND_ONLY_IMM).offset(kHdrImmDt), Bth::kSize + Deth::kSize);
  // Only UD (and RD requests) carry a DETH.
  for (unsigned o = 0; o < 256; ++o) {
    const OpcodeInfo& e = opcode_info(static_cast<uint8_t>(o));
    if (e.valid && e.has(kHdrDeth)) {
      EXPECT_TRUE(e.transport == Transport::UD || (e.transport == Transport::RD && e.request)) << e.name;
    }
  }
}

TEST(Opcode, RdAndXrcExtraHeaders) {
  for (unsigned o = 0x40; o < 0x60; ++o) {
    const OpcodeInfo& e = opcode_info(static_cast<uint8_t>(o));
    if (!e.valid) continue;
    EXPECT_TRUE(e.has(kHdrRdeth)) << e.name;
    EXPECT_EQ(e.offset(kHdrRdeth), Bth::kSize) << e.name;
    EXPECT_EQ(e.has(kHdrDeth), e.request) << e.name;  // IBA 9.3.1/9.3.2: responses carry RDETH only
  }
  for (unsigned o = 0xA0; o < 0xC0; ++o) {
    const OpcodeInfo& e = opcode_info(static_cast<uint8_t>(o));
    if (!e.valid) continue;
    EXPECT_EQ(e.has(kHdrXrceth), e.request) << e.name;  // A14: XRCETH on requests only
    if (e.request) {
      EXPECT_EQ(e.offset(kHdrXrceth), Bth::kSize) << e.name;
    }
    // Otherwise the same layout as the RC opcode with the same low bits.
    const OpcodeInfo& rc = opcode_info(static_cast<uint8_t>(o & 0x1F));
    EXPECT_EQ(e.hdrs & ~kHdrXrceth, rc.hdrs) << e.name;
    EXPECT_EQ(e.op, rc.op) << e.name;
  }
  const OpcodeInfo& cnp = opcode_info(op::CNP);
  EXPECT_EQ(cnp.transport, Transport::CNP);
  EXPECT_EQ(cnp.op, Operation::Cnp);
  EXPECT_EQ(cnp.hdr_len, Bth::kSize);
  EXPECT_FALSE(cnp.needs_ack || cnp.consumes_rwqe);
}

// ---- IBA table 38, transcribed by hand for RC, UC and UD ----------------

enum class Pos { First, Middle, Last, Only };

struct Row {
  unsigned opcode;
  std::string_view name;
  uint16_t hdrs;  // extended headers, and kHdrPayload when data may follow
  unsigned hdr_len;
  Pos pos;
  bool request;
  bool rwqe;
};

constexpr uint16_t P = kHdrPayload;
constexpr uint16_t RETH = kHdrReth, IMM = kHdrImmDt, AETH = kHdrAeth, IETH = kHdrIeth, DETH = kHdrDeth;

constexpr Row kTable38[] = {
    {0x00, "RC_SEND_FIRST", P, 12, Pos::First, true, true},
    {0x01, "RC_SEND_MIDDLE", P, 12, Pos::Middle, true, true},
    {0x02, "RC_SEND_LAST", P, 12, Pos::Last, true, true},
    {0x03, "RC_SEND_LAST_WITH_IMMEDIATE", P | IMM, 16, Pos::Last, true, true},
    {0x04, "RC_SEND_ONLY", P, 12, Pos::Only, true, true},
    {0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", P | IMM, 16, Pos::Only, true, true},
    {0x06, "RC_RDMA_WRITE_FIRST", P | RETH, 28, Pos::First, true, false},
    {0x07, "RC_RDMA_WRITE_MIDDLE", P, 12, Pos::Middle, true, false},
    {0x08, "RC_RDMA_WRITE_LAST", P, 12, Pos::Last, true, false},
    {0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", P | IMM, 16, Pos::Last, true, true},
    {0x0A, "RC_RDMA_WRITE_ONLY", P | RETH, 28, Pos::Only, true, false},
    {0x0B, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", P | RETH | IMM, 32, Pos::Only, true, true},
    {0x0C, "RC_RDMA_READ_REQUEST", RETH, 28, Pos::Only, true, false},
    {0x0D, "RC_RDMA_READ_RESPONSE_FIRST", P | AETH, 16, Pos::First, false, false},
    {0x0E, "RC_RDMA_READ_RESPONSE_MIDDLE", P, 12, Pos::Middle, false, false},
    {0x0F, "RC_RDMA_READ_RESPONSE_LAST", P | AETH, 16, Pos::Last, false, false},
    {0x10, "RC_RDMA_READ_RESPONSE_ONLY", P | AETH, 16, Pos::Only, false, false},
    {0x11, "RC_ACKNOWLEDGE", AETH, 16, Pos::Only, false, false},
    {0x12, "RC_ATOMIC_ACKNOWLEDGE", AETH | kHdrAtomicAckEth, 24, Pos::Only, false, false},
    {0x13, "RC_COMPARE_SWAP", kHdrAtomicEth, 40, Pos::Only, true, false},
    {0x14, "RC_FETCH_ADD", kHdrAtomicEth, 40, Pos::Only, true, false},
    {0x16, "RC_SEND_LAST_WITH_INVALIDATE", P | IETH, 16, Pos::Last, true, true},
    {0x17, "RC_SEND_ONLY_WITH_INVALIDATE", P | IETH, 16, Pos::Only, true, true},
    // IBA 1.5 (as Linux rxe implements them).
    {0x1C, "RC_FLUSH", kHdrFeth | RETH, 32, Pos::Only, true, false},
    {0x1D, "RC_ATOMIC_WRITE", P | RETH, 28, Pos::Only, true, false},
    {0x20, "UC_SEND_FIRST", P, 12, Pos::First, true, true},
    {0x21, "UC_SEND_MIDDLE", P, 12, Pos::Middle, true, true},
    {0x22, "UC_SEND_LAST", P, 12, Pos::Last, true, true},
    {0x23, "UC_SEND_LAST_WITH_IMMEDIATE", P | IMM, 16, Pos::Last, true, true},
    {0x24, "UC_SEND_ONLY", P, 12, Pos::Only, true, true},
    {0x25, "UC_SEND_ONLY_WITH_IMMEDIATE", P | IMM, 16, Pos::Only, true, true},
    {0x26, "UC_RDMA_WRITE_FIRST", P | RETH, 28, Pos::First, true, false},
    {0x27, "UC_RDMA_WRITE_MIDDLE", P, 12, Pos::Middle, true, false},
    {0x28, "UC_RDMA_WRITE_LAST", P, 12, Pos::Last, true, false},
    {0x29, "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", P | IMM, 16, Pos::Last, true, true},
    {0x2A, "UC_RDMA_WRITE_ONLY", P | RETH, 28, Pos::Only, true, false},
    {0x2B, "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", P | RETH | IMM, 32, Pos::Only, true, true},
    {0x64, "UD_SEND_ONLY", P | DETH, 20, Pos::Only, true, true},
    {0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", P | DETH | IMM, 24, Pos::Only, true, true},
};

TEST(Opcode, MatchesIbaTable38ForRcUcUd) {
  std::set<unsigned> listed;
  for (const Row& r : kTable38) {
    SCOPED_TRACE(r.name);
    listed.insert(r.opcode);
    const OpcodeInfo& e = opcode_info(static_cast<uint8_t>(r.opcode));
    ASSERT_TRUE(e.valid);
    EXPECT_EQ(e.name, r.name);
    EXPECT_EQ(e.hdrs, r.hdrs);
    EXPECT_EQ(e.hdr_len, r.hdr_len);
    EXPECT_EQ(e.first, r.pos == Pos::First || r.pos == Pos::Only);
    EXPECT_EQ(e.last, r.pos == Pos::Last || r.pos == Pos::Only);
    EXPECT_EQ(e.request, r.request);
    EXPECT_EQ(e.consumes_rwqe, r.rwqe);
    EXPECT_EQ(e.needs_ack, r.request && r.opcode < 0x20);
    EXPECT_EQ(e.has(kHdrPayload), (r.hdrs & P) != 0);
  }
  // Every valid RC, UC and UD opcode is in the transcription.
  for (unsigned o = 0; o < 0x80; ++o) {
    if (o >= 0x40 && o < 0x60) continue;  // RD
    EXPECT_EQ(opcode_info(static_cast<uint8_t>(o)).valid, listed.count(o) == 1) << hex(o);
  }
  // Spot checks of offsets the transport relies on.
  EXPECT_EQ(opcode_info(0x0B).offset(kHdrReth), 12);
  EXPECT_EQ(opcode_info(0x0B).offset(kHdrImmDt), 28);
  EXPECT_EQ(opcode_info(0x12).offset(kHdrAeth), 12);
  EXPECT_EQ(opcode_info(0x12).offset(kHdrAtomicAckEth), 16);
  EXPECT_EQ(opcode_info(0x1C).offset(kHdrFeth), 12);
  EXPECT_EQ(opcode_info(0x1C).offset(kHdrReth), 16);
  EXPECT_EQ(opcode_info(0x65).offset(kHdrImmDt), 20);
  // The UC block repeats RC's layout for the codes it has.
  for (unsigned o = 0x20; o <= 0x2B; ++o) {
    EXPECT_EQ(opcode_info(static_cast<uint8_t>(o)).hdrs, opcode_info(static_cast<uint8_t>(o - 0x20)).hdrs);
  }
  // Send-with-invalidate may end an RC send, never a UC one.
  EXPECT_TRUE(opcode_info(op::RC_SEND_MIDDLE).may_follow(op::RC_SEND_LAST_INV));
  EXPECT_FALSE(opcode_info(op::UC_SEND_MIDDLE).may_follow(0x36));
  EXPECT_FALSE(opcode_info(op::RC_SEND_FIRST).may_follow(op::RC_WRITE_LAST));
  EXPECT_FALSE(opcode_info(op::RC_SEND_FIRST).may_follow(op::UC_SEND_LAST));
}

}  // namespace
}  // namespace uroce::test
