// ICRC: the golden vectors of research/wire-vectors.md section 5, and the
// CRC engine (ISA-L crc32_gzip_refl) against zlib.
#include <zlib.h>

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "lib/wire/bth.hpp"
#include "lib/wire/build.hpp"
#include "lib/wire/icrc.hpp"
#include "lib/wire/ipv6.hpp"
#include "lib/wire/pkt.hpp"
#include "lib/wire/udp.hpp"
#include "tests/common/golden.hpp"
#include "tests/common/test_util.hpp"

namespace uroce::test {
namespace {

using namespace uroce::wire;

uint32_t zlib_crc(uint32_t crc, const uint8_t* p, size_t n) {
  return static_cast<uint32_t>(::crc32(crc, p, static_cast<uInt>(n)));
}

class GoldenV2 : public ::testing::TestWithParam<GoldenFrame> {};

TEST_P(GoldenV2, ParsesAndVerifies) {
  const GoldenFrame& g = GetParam();
  const Bytes f = from_hex(g.frame);
  const PktInfo pi = parse(f);
  ASSERT_EQ(pi.cls, FrameClass::RoceV2) << parse_error_name(pi.error);
  EXPECT_EQ(pi.l3, L3::IPv4);
  EXPECT_EQ(pi.opcode, op::RC_ACK);
  EXPECT_EQ(pi.icrc_off + kIcrcSize, f.size());
  EXPECT_TRUE(verify_icrc(f.data(), pi));
  EXPECT_EQ(compute_icrc(f.data(), pi), g.crc);
  // The ICRC is stored least-significant byte first.
  const uint8_t want[4] = {static_cast<uint8_t>(g.crc), static_cast<uint8_t>(g.crc >> 8),
                           static_cast<uint8_t>(g.crc >> 16), static_cast<uint8_t>(g.crc >> 24)};
  EXPECT_EQ(0, std::memcmp(f.data() + pi.icrc_off, want, 4));
  EXPECT_EQ(load_icrc(f.data() + pi.icrc_off), g.crc);
}

TEST_P(GoldenV2, ComputeMatchesWireBytes) {
  const GoldenFrame& g = GetParam();
  Bytes f = from_hex(g.frame);
  const PktInfo pi = parse(f);
  ASSERT_EQ(pi.cls, FrameClass::RoceV2);
  const Bytes wire_icrc(f.begin() + pi.icrc_off, f.end());
  // Recompute into a zeroed ICRC through the builder: the bytes come back.
  std::memset(f.data() + pi.icrc_off, 0, kIcrcSize);
  EXPECT_FALSE(verify_icrc(f.data(), pi));
  store_icrc(f.data() + pi.icrc_off, compute_icrc(f.data(), pi));
  EXPECT_EQ(Bytes(f.begin() + pi.icrc_off, f.end()), wire_icrc);
  // describe() + build() reproduces the frame.
  const PktDesc d = describe(f.data(), pi);
  EXPECT_EQ(build_frame(d), f);
}

TEST_P(GoldenV2, MaskedInputMatchesTheIndependentChecker) {
  const GoldenFrame& g = GetParam();
  const Bytes f = from_hex(g.frame);
  const PktInfo pi = parse(f);
  ASSERT_EQ(pi.cls, FrameClass::RoceV2);
  const Bytes input = from_hex(g.input);
  // The test's own masking reproduces the checker's input byte for byte …
  EXPECT_EQ(to_hex(ref_icrc_input(f, pi.l3_off, pi.l3_hdr_len, false, pi.icrc_off)), to_hex(input));
  // … and every CRC engine agrees on it.
  EXPECT_EQ(crc32(0, input.data(), input.size()), g.crc);
  EXPECT_EQ(zlib_crc(0, input.data(), input.size()), g.crc);
  EXPECT_EQ(ref_crc32(0, input), g.crc);
  // Streaming: the masked pseudo-header, then the rest.
  const size_t pseudo = pi.l3_hdr_len + Udp::kSize + Bth::kSize;
  Icrc c = Icrc::begin(f.data() + pi.l3_off, pi.l3_hdr_len, false);
  c.update(f.data() + pi.l3_off + pseudo, pi.icrc_off - pi.l3_off - pseudo);
  EXPECT_EQ(c.value(), g.crc);
}

INSTANTIATE_TEST_SUITE_P(Wire, GoldenV2, ::testing::ValuesIn(kRoceV2Golden),
                         [](const ::testing::TestParamInfo<GoldenFrame>& p) {
                           return std::string(p.index == 0 ? "ConnectX" : p.index == 1 ? "Rxe" : "Hns");
                         });

// RoCEv1 (GRH, no IP/UDP): not ours to parse, but its masked input pins the
// IPv6-style masking (traffic class, flow label, hop limit) on traffic a
// ConnectX NIC produced.
TEST(GoldenV1, Ipv6StyleMaskingMatchesConnectX) {
  const GoldenFrame& g = kConnectxRoceV1Ack;
  const Bytes f = from_hex(g.frame);
  const PktInfo pi = parse(f);
  EXPECT_EQ(pi.cls, FrameClass::OtherEther);
  EXPECT_EQ(pi.ethertype, kEtherTypeRoceV1);

  const size_t grh = 14;
  const size_t bth = grh + Ipv6::kSize;
  const size_t icrc_off = f.size() - kIcrcSize;
  Bytes input(8, 0xFF);
  for (size_t i = grh; i < icrc_off; ++i) {
    uint8_t b = f[i];
    if (i < bth) {
      for (unsigned bit = 0; bit < 8; ++bit) {
        // The IPv6 rule of icrc_masked_bit, applied to the GRH.
        if (icrc_masked_bit(i - grh, bit, Ipv6::kSize, true)) b = static_cast<uint8_t>(b | (0x80u >> bit));
      }
    } else if (i == bth + Bth::kResv8aOffset) {
      b = 0xFF;
    }
    input.push_back(b);
  }
  EXPECT_EQ(to_hex(input), to_hex(from_hex(g.input)));
  EXPECT_EQ(crc32(0, input.data(), input.size()), g.crc);
  EXPECT_EQ(load_icrc(f.data() + icrc_off), g.crc);
}

TEST(Crc32, CheckValue) {
  const std::string_view s = "123456789";
  EXPECT_EQ(crc32(0, reinterpret_cast<const uint8_t*>(s.data()), s.size()), 0xCBF43926u);
  EXPECT_EQ(crc32(0, nullptr, 0), 0u);
  EXPECT_EQ(crc32(0x12345678u, nullptr, 0), 0x12345678u);
}

// The 8 bytes of ones that stand in for the LRH leave the CRC register at
// 0xDEBB20E3: the seed Linux rxe starts from.
TEST(Crc32, LrhStandInState) {
  const uint8_t ones[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  EXPECT_EQ(crc32(0, ones, 8) ^ 0xFFFFFFFFu, 0xDEBB20E3u);
}

TEST(Crc32, MatchesZlibOnRandomBuffers) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed);
  const Bytes buf = rng.bytes(70000);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 2100; ++n) lengths.push_back(n);
  for (size_t n : {4095, 4096, 4097, 8191, 9000, 9216, 16384, 65535, 65536}) lengths.push_back(n);
  for (size_t n : lengths) {
    const size_t align = rng.range(0, 15);
    const uint32_t init = rng.coin() ? 0u : rng.u32();
    ASSERT_EQ(crc32(init, buf.data() + align, n), zlib_crc(init, buf.data() + align, n))
        << "len " << n << " align " << align << " init " << init;
  }
}

TEST(Crc32, ChainedCallsEqualOneCall) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed + 1);
  for (int iter = 0; iter < 2000; ++iter) {
    const size_t n = rng.range(0, 5000);
    const Bytes buf = rng.bytes(n);
    const uint32_t whole = crc32(0, buf.data(), n);
    // Split into up to 8 random pieces, some empty.
    uint32_t c = 0;
    size_t at = 0;
    const int pieces = static_cast<int>(rng.range(1, 8));
    for (int p = 0; p < pieces && at < n; ++p) {
      const size_t len = p == pieces - 1 ? n - at : rng.range(0, n - at);
      c = crc32(c, buf.data() + at, len);
      at += len;
    }
    c = crc32(c, buf.data() + at, n - at);
    ASSERT_EQ(c, whole) << "len " << n << " pieces " << pieces;
    ASSERT_EQ(whole, zlib_crc(0, buf.data(), n));
  }
}

// icrc() and Icrc::begin/update in any split give the same value as the
// independent reference around 256 covered bytes.
TEST(Icrc, ContiguousAndStreamingAgreeAcrossTheCopyThreshold) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed + 2);
  for (L3 l3 : {L3::IPv4, L3::IPv6}) {
    const size_t ip = l3 == L3::IPv6 ? 40 : 20;
    const size_t fixed = ip + Udp::kSize + Bth::kSize + kIcrcSize;  // covered = fixed - 4 + payload + pad
    for (size_t covered = 236; covered <= 276; covered += 4) {
      const size_t payload = covered - (fixed - kIcrcSize);
      RandomSpec spec{op::RC_SEND_ONLY, l3, 0, payload};
      const OwnedDesc o = random_desc(rng, spec);
      const Bytes f = build_frame(o.d);
      const PktInfo pi = parse(f);
      ASSERT_EQ(pi.cls, FrameClass::RoceV2);
      ASSERT_EQ(pi.icrc_off - pi.l3_off, covered);
      const uint32_t want = ref_icrc(f, pi.l3_off, pi.l3_hdr_len, l3 == L3::IPv6, pi.icrc_off);
      EXPECT_EQ(icrc(f.data() + pi.l3_off, pi.l3_hdr_len, l3 == L3::IPv6, covered), want) << covered;
      const size_t pseudo = pi.l3_hdr_len + Udp::kSize + Bth::kSize;
      Icrc c = Icrc::begin(f.data() + pi.l3_off, pi.l3_hdr_len, l3 == L3::IPv6);
      const size_t split = rng.range(0, covered - pseudo);
      c.update(f.data() + pi.l3_off + pseudo, split);
      c.update(std::span<const uint8_t>(f.data() + pi.l3_off + pseudo + split, covered - pseudo - split));
      EXPECT_EQ(c.value(), want) << covered;
      EXPECT_EQ(load_icrc(f.data() + pi.icrc_off), want);
    }
  }
}

// Packets whose tail after the BTH is short take one CRC call and carry
// the masking's correction past the tail in power-of-two steps; longer ones
// take two calls.  Every tail length on both sides of that threshold (and
// every step combination below it) against the independent reference, for
// SENDs, ACKs (an AETH) and READ requests (a RETH).  A packet's pad makes
// its tail a multiple of 4, so the covered range is also cut 1-3 bytes
// short: the 1- and 2-byte steps, which no valid packet takes.
TEST(Icrc, EveryShortTailLengthMatchesTheReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed + 4);
  for (L3 l3 : {L3::IPv4, L3::IPv6}) {
    for (uint8_t opcode : {op::RC_SEND_ONLY, op::RC_ACK, op::RC_READ_REQUEST}) {
      const size_t max_payload = opcode == op::RC_SEND_ONLY ? 300 : 0;
      for (size_t payload = 0; payload <= max_payload; ++payload) {
        const OwnedDesc o = random_desc(rng, RandomSpec{opcode, l3, 0, payload});
        const Bytes f = build_frame(o.d);
        const PktInfo pi = parse(f);
        ASSERT_EQ(pi.cls, FrameClass::RoceV2);
        const size_t tail = pi.icrc_off - pi.l3_off - (pi.l3_hdr_len + Udp::kSize + Bth::kSize);
        for (size_t cut = 0; cut < 4 && cut <= tail; ++cut) {
          const size_t end = pi.icrc_off - cut;
          const uint32_t want = ref_icrc(f, pi.l3_off, pi.l3_hdr_len, l3 == L3::IPv6, end);
          EXPECT_EQ(icrc(f.data() + pi.l3_off, pi.l3_hdr_len, l3 == L3::IPv6, end - pi.l3_off), want)
              << "opcode " << int{opcode} << " payload " << payload << " cut " << cut;
        }
      }
    }
  }
}

// IPv4 options are inside the covered IP header and are not masked.
TEST(Icrc, Ipv4OptionsAreCovered) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed + 3);
  for (size_t payload : {0, 16, 300, 1024}) {
    RandomSpec spec{op::RC_WRITE_ONLY, L3::IPv4, 1, payload};
    spec.ip_options = true;
    OwnedDesc o = random_desc(rng, spec);
    Bytes f = build_frame(o.d);
    const PktInfo pi = parse(f);
    ASSERT_EQ(pi.cls, FrameClass::RoceV2);
    ASSERT_GT(pi.l3_hdr_len, 20);
    EXPECT_EQ(compute_icrc(f.data(), pi), ref_icrc(f, pi.l3_off, pi.l3_hdr_len, false, pi.icrc_off));
    EXPECT_TRUE(verify_icrc(f.data(), pi));
    f[pi.l3_off + 20] ^= 0x01;  // first option byte
    EXPECT_FALSE(verify_icrc(f.data(), pi));
  }
}

}  // namespace
}  // namespace uroce::test
