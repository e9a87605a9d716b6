// ICRC coverage, bit by bit: flipping any single bit that the ICRC covers
// changes it; the masked (variant) fields, the Ethernet header and the
// Ethernet trailer do not.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lib/wire/bth.hpp"
#include "lib/wire/build.hpp"
#include "lib/wire/icrc.hpp"
#include "lib/wire/pkt.hpp"
#include "lib/wire/udp.hpp"
#include "tests/common/golden.hpp"
#include "tests/common/test_util.hpp"

namespace uroce::test {
namespace {

using namespace uroce::wire;

struct Sample {
  std::string name;
  Bytes frame;
};

Sample built(Rng& rng, std::string name, const RandomSpec& spec) {
  const OwnedDesc o = random_desc(rng, spec);
  return {std::move(name), build_frame(o.d)};
}

std::vector<Sample> ipv4_samples(Rng& rng) {
  std::vector<Sample> s;
  for (const GoldenFrame& g : kRoceV2Golden) s.push_back({std::string(g.what), from_hex(g.frame)});
  s.push_back(built(rng, "RC_SEND_ONLY 1024 B, one VLAN tag", {op::RC_SEND_ONLY, L3::IPv4, 1, 1024}));
  s.push_back(built(rng, "RC_WRITE_ONLY_IMM 13 B (pad 3)", {op::RC_WRITE_ONLY_IMM, L3::IPv4, 0, 13}));
  RandomSpec ud{op::UD_SEND_ONLY, L3::IPv4, 2, 256};
  ud.ip_options = true;
  s.push_back(built(rng, "UD_SEND_ONLY 256 B, two tags, IPv4 options", ud));
  s.push_back(built(rng, "RC_COMPARE_SWAP", {op::RC_COMPARE_SWAP, L3::IPv4, 0, 0}));
  s.push_back(built(rng, "RC_SEND_ONLY 4096 B", {op::RC_SEND_ONLY, L3::IPv4, 0, 4096}));
  return s;
}

std::vector<Sample> ipv6_samples(Rng& rng) {
  std::vector<Sample> s;
  s.push_back(built(rng, "v6 RC_SEND_ONLY 100 B", {op::RC_SEND_ONLY, L3::IPv6, 0, 100}));
  s.push_back(built(rng, "v6 RC_WRITE_FIRST 1024 B, two tags", {op::RC_WRITE_FIRST, L3::IPv6, 2, 1024}));
  s.push_back(built(rng, "v6 UD_SEND_ONLY_IMM 7 B", {op::UD_SEND_ONLY_IMM, L3::IPv6, 1, 7}));
  s.push_back(built(rng, "v6 RC_ATOMIC_ACK", {op::RC_ATOMIC_ACK, L3::IPv6, 0, 0}));
  s.push_back(built(rng, "v6 RC_READ_REQUEST", {op::RC_READ_REQUEST, L3::IPv6, 0, 0}));
  s.push_back(built(rng, "v6 RC_SEND_ONLY 4096 B", {op::RC_SEND_ONLY, L3::IPv6, 0, 4096}));
  return s;
}

// ICRC over the packet geometry of `pi` (not re-parsed: a flipped length
// field must not move what is covered).
uint32_t icrc_at(const Bytes& f, const PktInfo& pi) {
  return icrc(f.data() + pi.l3_off, pi.l3_hdr_len, pi.l3 == L3::IPv6, pi.icrc_off - pi.l3_off);
}

void check_every_bit(const Sample& s, L3 want_l3) {
  SCOPED_TRACE(s.name);
  Bytes f = s.frame;
  const PktInfo pi = parse(f);
  ASSERT_EQ(pi.cls, FrameClass::RoceV2) << parse_error_name(pi.error);
  ASSERT_EQ(pi.l3, want_l3);
  ASSERT_TRUE(verify_icrc(f.data(), pi));
  const bool v6 = pi.l3 == L3::IPv6;
  const uint32_t base = icrc_at(f, pi);
  size_t masked = 0, covered = 0;
  for (size_t i = pi.l3_off; i < pi.icrc_off; ++i) {
    for (unsigned bit = 0; bit < 8; ++bit) {
      const uint8_t m = static_cast<uint8_t>(0x80u >> bit);
      f[i] ^= m;
      const uint32_t c = icrc_at(f, pi);
      f[i] ^= m;
      const size_t rel = i - pi.l3_off;
      const bool in_pseudo = rel < pi.l3_hdr_len + Udp::kSize + Bth::kSize;
      if (in_pseudo && icrc_masked_bit(rel, bit, pi.l3_hdr_len, v6)) {
        ++masked;
        ASSERT_EQ(c, base) << "masked bit " << bit << " of byte " << rel << " from the IP header changed the ICRC";
      } else {
        ++covered;
        ASSERT_NE(c, base) << "bit " << bit << " of byte " << rel << " from the IP header is not covered";
      }
    }
  }
  // IPv4: TOS 8 + TTL 8 + checksum 16; IPv6: TC 8 + flow label 20 + hop limit 8;
  // both: UDP checksum 16 + Resv8a 8.
  EXPECT_EQ(masked, v6 ? 8u + 20 + 8 + 16 + 8 : 8u + 8 + 16 + 16 + 8);
  EXPECT_EQ(covered + masked, (pi.icrc_off - pi.l3_off) * 8);

  // Ethernet header (and VLAN tags) and the ICRC's own bytes are outside.
  for (size_t i = 0; i < pi.l3_off; ++i) {
    for (unsigned bit = 0; bit < 8; ++bit) {
      f[i] ^= static_cast<uint8_t>(0x80u >> bit);
      ASSERT_EQ(compute_icrc(f.data(), pi), base) << "Ethernet byte " << i;
      ASSERT_TRUE(verify_icrc(f.data(), pi));
      f[i] ^= static_cast<uint8_t>(0x80u >> bit);
    }
  }
  for (size_t i = pi.icrc_off; i < pi.icrc_off + kIcrcSize; ++i) {
    for (unsigned bit = 0; bit < 8; ++bit) {
      f[i] ^= static_cast<uint8_t>(0x80u >> bit);
      ASSERT_FALSE(verify_icrc(f.data(), pi)) << "ICRC byte " << i - pi.icrc_off;
      f[i] ^= static_cast<uint8_t>(0x80u >> bit);
    }
  }
  EXPECT_EQ(f, s.frame);
}

TEST(BitFlip, Ipv4EveryCoveredBitMatters) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed);
  for (const Sample& s : ipv4_samples(rng)) check_every_bit(s, L3::IPv4);
}

TEST(BitFlip, Ipv6EveryCoveredBitMatters) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed);
  for (const Sample& s : ipv6_samples(rng)) check_every_bit(s, L3::IPv6);
}

// Whole-field rewrites of the variant fields, through the full receive path
// (parse again, verify): what a router or an ECN-marking switch does.
TEST(BitFlip, Ipv4VariantFieldsAnyValue) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed);
  for (const Sample& s : ipv4_samples(rng)) {
    SCOPED_TRACE(s.name);
    const PktInfo pi0 = parse(s.frame);
    ASSERT_EQ(pi0.cls, FrameClass::RoceV2);
    const size_t ip = pi0.l3_off, udp = pi0.l4_off, bth = pi0.bth_off;
    for (unsigned v = 0; v < 256; ++v) {
      for (size_t off : {ip + 1, ip + 8, bth + Bth::kResv8aOffset}) {  // TOS, TTL, Resv8a
        Bytes f = s.frame;
        f[off] = static_cast<uint8_t>(v);
        const PktInfo pi = parse(f);
        ASSERT_EQ(pi.cls, FrameClass::RoceV2);
        ASSERT_TRUE(verify_icrc(f.data(), pi)) << "offset " << off << " value " << v;
      }
    }
    for (int k = 0; k < 512; ++k) {
      for (size_t off : {ip + 10, udp + 6}) {  // IPv4 checksum, UDP checksum
        Bytes f = s.frame;
        const uint16_t v = rng.u16();
        f[off] = static_cast<uint8_t>(v >> 8);
        f[off + 1] = static_cast<uint8_t>(v);
        const PktInfo pi = parse(f);
        ASSERT_EQ(pi.cls, FrameClass::RoceV2);
        ASSERT_TRUE(verify_icrc(f.data(), pi)) << "offset " << off << " value " << v;
      }
    }
  }
}

TEST(BitFlip, Ipv6VariantFieldsAnyValue) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed);
  for (const Sample& s : ipv6_samples(rng)) {
    SCOPED_TRACE(s.name);
    const PktInfo pi0 = parse(s.frame);
    ASSERT_EQ(pi0.cls, FrameClass::RoceV2);
    for (int k = 0; k < 1000; ++k) {
      Bytes f = s.frame;
      uint8_t* ip = f.data() + pi0.l3_off;
      // version stays 6; traffic class, flow label, hop limit, UDP checksum
      // and Resv8a all random.
      const uint32_t tc_fl = rng.u32() & 0x0FFFFFFF;
      ip[0] = static_cast<uint8_t>(0x60 | (tc_fl >> 24));
      ip[1] = static_cast<uint8_t>(tc_fl >> 16);
      ip[2] = static_cast<uint8_t>(tc_fl >> 8);
      ip[3] = static_cast<uint8_t>(tc_fl);
      ip[7] = rng.u8();
      f[pi0.l4_off + 6] = rng.u8();
      f[pi0.l4_off + 7] = rng.u8();
      f[pi0.bth_off + Bth::kResv8aOffset] = rng.u8();
      const PktInfo pi = parse(f);
      ASSERT_EQ(pi.cls, FrameClass::RoceV2);
      ASSERT_TRUE(verify_icrc(f.data(), pi)) << to_hex(std::span(ip, 8));
    }
  }
}

// Bytes after the IP packet (Ethernet padding, an FCS kept by the capture)
// are not covered.
TEST(BitFlip, EthernetTrailerIsNotCovered) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed);
  for (L3 l3 : {L3::IPv4, L3::IPv6}) {
    RandomSpec spec{op::RC_ACK, l3, 0, 0};
    spec.trailer = true;
    OwnedDesc o = random_desc(rng, spec);
    o.trailer = rng.bytes(8);
    o.rebind();
    Bytes f = build_frame(o.d);
    const PktInfo pi = parse(f);
    ASSERT_EQ(pi.cls, FrameClass::RoceV2);
    ASSERT_EQ(pi.frame_len - pi.l3_end, 8);
    const uint32_t base = compute_icrc(f.data(), pi);
    for (size_t i = pi.l3_end; i < f.size(); ++i) {
      for (unsigned bit = 0; bit < 8; ++bit) {
        f[i] ^= static_cast<uint8_t>(1u << bit);
        const PktInfo again = parse(f);
        ASSERT_EQ(again.cls, FrameClass::RoceV2);
        ASSERT_EQ(compute_icrc(f.data(), again), base);
        ASSERT_TRUE(verify_icrc(f.data(), again));
        f[i] ^= static_cast<uint8_t>(1u << bit);
      }
    }
  }
}

}  // namespace
}  // namespace uroce::test
