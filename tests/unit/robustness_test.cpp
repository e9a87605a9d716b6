// parse() on hostile input: random bytes, every truncation of valid
// packets, and one hand-made frame per ParseError reason.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>

#include "lib/wire/arp.hpp"
#include "lib/wire/bth.hpp"
#include "lib/wire/build.hpp"
#include "lib/wire/icrc.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"
#include "lib/wire/pkt.hpp"
#include "lib/wire/udp.hpp"
#include "tests/common/test_util.hpp"

namespace uroce::test {
namespace {

using namespace uroce::wire;

// What every parse result must satisfy, whatever the input.
void check_invariants(const Bytes& f, const PktInfo& pi) {
  ASSERT_LT(static_cast<size_t>(pi.error), kNumParseErrors);
  if (pi.cls == FrameClass::Malformed) {
    ASSERT_NE(pi.error, ParseError::None);
    ASSERT_NE(parse_error_name(pi.error), "?");
    return;
  }
  ASSERT_EQ(pi.error, ParseError::None) << frame_class_name(pi.cls);
  ASSERT_EQ(pi.frame_len, f.size());
  ASSERT_GE(pi.l3_off, 14);
  ASSERT_LE(pi.l3_off, f.size());
  if (pi.cls == FrameClass::OtherEther) return;
  if (pi.cls == FrameClass::ARP) {
    ASSERT_LE(pi.l3_off + Arp::kSize, f.size());
    return;
  }
  ASSERT_LE(pi.l3_off + pi.l3_hdr_len, pi.l3_end);
  ASSERT_LE(pi.l3_end, f.size());
  ASSERT_EQ(pi.l4_off, pi.l3_off + pi.l3_hdr_len);
  if (pi.cls != FrameClass::RoceV2) return;
  // A RoCEv2 result describes the packet completely and in bounds.
  ASSERT_EQ(UdpC(f.data() + pi.l4_off).dst_port(), kRoceV2Port);
  ASSERT_EQ(pi.bth_off, pi.l4_off + Udp::kSize);
  const OpcodeInfo& op = opcode_info(pi.opcode);
  ASSERT_EQ(pi.opcode_known, op.valid);
  ASSERT_EQ(pi.payload_off, pi.bth_off + (op.valid ? op.hdr_len : Bth::kSize));
  ASSERT_EQ(pi.payload_off + pi.payload_len + pi.pad, pi.icrc_off);
  ASSERT_EQ(pi.icrc_off + kIcrcSize, pi.l3_end);
  ASSERT_EQ(BthC(f.data() + pi.bth_off).tver(), 0);
  // describe() + build() reproduces every byte but the ICRC, and the ICRC
  // too when it was right.
  const Bytes again = build_frame(describe(f.data(), pi));
  ASSERT_EQ(again.size(), f.size());
  if (verify_icrc(f.data(), pi)) {
    ASSERT_EQ(again, f);
  } else {
    ASSERT_EQ(0, std::memcmp(again.data(), f.data(), pi.icrc_off));
    ASSERT_EQ(0, std::memcmp(again.data() + pi.l3_end, f.data() + pi.l3_end, f.size() - pi.l3_end));
  }
}

std::vector<Bytes> valid_templates(Rng& rng) {
  std::vector<Bytes> t;
  const uint8_t ops[] = {op::RC_SEND_ONLY, op::RC_WRITE_FIRST, op::RC_ACK, op::RC_ATOMIC_ACK, op::UD_SEND_ONLY_IMM,
                         op::RC_COMPARE_SWAP, op::RC_READ_RESPONSE_MIDDLE, 0xA6, 0x4C, op::CNP};
  for (uint8_t o : ops) {
    for (L3 l3 : {L3::IPv4, L3::IPv6}) {
      RandomSpec spec{o, l3, static_cast<uint8_t>(rng.range(0, 2)), opcode_info(o).has(kHdrPayload) ? rng.range(0, 300) : 0};
      spec.trailer = rng.coin();
      spec.ip_options = l3 == L3::IPv4 && rng.coin();
      t.push_back(build_frame(random_desc(rng, spec).d));
    }
  }
  return t;
}

TEST(Robustness, RandomFrames) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed);
  const std::vector<Bytes> templates = valid_templates(rng);
  std::map<std::string, int> classes;
  std::set<ParseError> errors;
  for (int i = 0; i < 100000; ++i) {
    Bytes f;
    switch (i % 4) {
      case 0:  // pure noise
        f = rng.bytes(rng.range(0, 2000));
        break;
      case 1: {  // noise behind a plausible Ethernet/VLAN/IP prefix
        f = rng.bytes(rng.range(0, 2000));
        const uint16_t types[] = {kEtherTypeIpv4, kEtherTypeIpv6, kEtherTypeVlan, kEtherTypeQinQ, kEtherTypeArp};
        size_t off = 12;
        for (int k = 0; k < 4 && off + 2 <= f.size(); ++k, off += 4) {
          store_be<uint16_t>(f.data() + off, types[rng.range(0, 4)]);
        }
        break;
      }
      case 2: {  // a valid packet with a few bytes changed
        f = templates[rng.range(0, templates.size() - 1)];
        const int changes = static_cast<int>(rng.range(1, 4));
        for (int k = 0; k < changes; ++k) f[rng.range(0, f.size() - 1)] = rng.u8();
        break;
      }
      default: {  // a valid packet cut short or extended with noise
        f = templates[rng.range(0, templates.size() - 1)];
        if (rng.coin()) {
          f.resize(rng.range(0, f.size()));
        } else {
          const Bytes tail = rng.bytes(rng.range(1, 64));
          f.insert(f.end(), tail.begin(), tail.end());
        }
        break;
      }
    }
    const PktInfo pi = parse(f);
    check_invariants(f, pi);
    if (HasFatalFailure()) {
      ADD_FAILURE() << "frame " << i << ": " << to_hex(f);
      return;
    }
    ++classes[std::string(frame_class_name(pi.cls))];
    if (pi.cls == FrameClass::Malformed) errors.insert(pi.error);
  }
  // The generator reaches deep into the parser, not only the first check.
  EXPECT_GT(classes["roce_v2"], 1000);
  EXPECT_GT(classes["malformed"], 1000);
  EXPECT_GT(classes["other_ethertype"], 1000);
  EXPECT_GE(errors.size(), 10u);
  for (const auto& [name, count] : classes) RecordProperty(name, count);
}

// Parsing must not read past the span: a frame at the end of a page-sized
// allocation would fault, so check the result against the same bytes in a
// bigger buffer with garbage behind them.
TEST(Robustness, DoesNotLookPastTheEnd) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed);
  for (const Bytes& t : valid_templates(rng)) {
    for (size_t len = 0; len <= t.size(); ++len) {
      Bytes a(t.begin(), t.begin() + static_cast<ptrdiff_t>(len));
      Bytes b = a;
      const Bytes junk = rng.bytes(64);
      b.insert(b.end(), junk.begin(), junk.end());
      const PktInfo x = parse(std::span<const uint8_t>(a.data(), len));
      const PktInfo y = parse(std::span<const uint8_t>(b.data(), len));
      ASSERT_EQ(x.cls, y.cls) << len;
      ASSERT_EQ(x.error, y.error) << len;
    }
  }
}

// Cutting a valid packet anywhere gives exactly the error for the layer
// that was cut.
TEST(Robustness, EveryTruncation) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed);
  size_t cases = 0;
  for (L3 l3 : {L3::IPv4, L3::IPv6}) {
    for (uint8_t vlans = 0; vlans <= 2; ++vlans) {
      for (uint8_t o : {op::RC_SEND_ONLY, op::RC_WRITE_ONLY_IMM, op::RC_ACK, op::UD_SEND_ONLY}) {
        RandomSpec spec{o, l3, vlans, opcode_info(o).has(kHdrPayload) ? 37u : 0u};
        spec.ip_options = l3 == L3::IPv4 && vlans == 1;
        const Bytes f = build_frame(random_desc(rng, spec).d);
        const PktInfo full = parse(f);
        ASSERT_EQ(full.cls, FrameClass::RoceV2);
        const size_t ip = full.l3_off;
        for (size_t len = 0; len < f.size(); ++len) {
          SCOPED_TRACE(::testing::Message() << opcode_info(o).name << " vlans " << int{vlans}
                                            << (l3 == L3::IPv6 ? " IPv6" : " IPv4") << " cut at " << len);
          const Bytes cut(f.begin(), f.begin() + static_cast<ptrdiff_t>(len));
          const PktInfo pi = parse(cut);
          check_invariants(cut, pi);
          ASSERT_EQ(pi.cls, FrameClass::Malformed);
          ParseError want;
          if (len < 14) {
            want = ParseError::EthTruncated;
          } else if (len < ip) {
            want = ParseError::VlanTruncated;
          } else if (l3 == L3::IPv4) {
            want = len < ip + 20 ? ParseError::Ipv4Truncated
                   : len < ip + full.l3_hdr_len ? ParseError::Ipv4BadIhl
                                                : ParseError::Ipv4BadTotalLen;
          } else {
            want = len < ip + 40 ? ParseError::Ipv6Truncated : ParseError::Ipv6BadPayloadLen;
          }
          ASSERT_EQ(pi.error, want) << parse_error_name(pi.error) << " instead of " << parse_error_name(want);
          ++cases;
        }
      }
    }
  }
  RecordProperty("prefixes", static_cast<int>(cases));
}

// ---- one hand-made frame per ParseError ---------------------------------

Bytes base_frame(L3 l3, uint8_t opcode = op::RC_SEND_ONLY, size_t payload = 8) {
  Rng rng(7);
  OwnedDesc o = random_desc(rng, {opcode, l3, 0, payload});
  o.d.ip_flags_frag = kIpv4FlagDf;
  return build_frame(o.d);
}

// Keep IP and UDP lengths consistent after growing or shrinking the UDP
// payload to `udp_payload` bytes (IPv4 at 14, no options).
Bytes resize_udp(Bytes f, L3 l3, size_t udp_payload) {
  const size_t ip_hl = l3 == L3::IPv6 ? 40 : 20;
  f.resize(14 + ip_hl + 8 + udp_payload);
  if (l3 == L3::IPv6) {
    Ipv6(f.data() + 14).set_payload_len(static_cast<uint16_t>(8 + udp_payload));
  } else {
    Ipv4 h(f.data() + 14);
    h.set_total_len(static_cast<uint16_t>(20 + 8 + udp_payload));
    h.update_checksum();
  }
  Udp(f.data() + 14 + ip_hl).set_length(static_cast<uint16_t>(8 + udp_payload));
  return f;
}

struct Crafted {
  std::string what;
  Bytes frame;
  ParseError want;
};

std::vector<Crafted> crafted_frames() {
  std::vector<Crafted> c;
  const Bytes v4 = base_frame(L3::IPv4);
  const Bytes v6 = base_frame(L3::IPv6);
  constexpr size_t ip = 14, udp4 = 34, udp6 = 54, bth4 = 42;

  c.push_back({"empty frame", {}, ParseError::EthTruncated});
  c.push_back({"13 bytes", Bytes(v4.begin(), v4.begin() + 13), ParseError::EthTruncated});
  {
    // A valid packet followed by trailer up to 65536 bytes: PktInfo's
    // 16-bit offsets cannot describe it.
    Bytes f = v4;
    f.resize(65536, 0);
    c.push_back({"65536-byte frame", f, ParseError::FrameTooLong});
    f.resize(65535);
    const PktInfo pi = parse(f);
    EXPECT_EQ(pi.cls, FrameClass::RoceV2) << "65535 bytes is still a frame";
    EXPECT_EQ(pi.l3_end, v4.size());
  }
  {
    Bytes f(v4.begin(), v4.begin() + 16);
    store_be<uint16_t>(f.data() + 12, kEtherTypeVlan);
    c.push_back({"802.1Q tag cut after its TCI", f, ParseError::VlanTruncated});
  }
  {
    Bytes f(v4.begin(), v4.begin() + 12);
    for (int k = 0; k < 3; ++k) {
      const uint8_t tag[4] = {0x81, 0x00, 0x00, static_cast<uint8_t>(k + 1)};
      f.insert(f.end(), tag, tag + 4);
    }
    f.push_back(0x08);
    f.push_back(0x00);
    f.insert(f.end(), v4.begin() + 14, v4.end());
    c.push_back({"three 802.1Q tags", f, ParseError::TooManyVlanTags});
  }
  {
    Bytes f(v4.begin(), v4.begin() + 14 + 27);
    store_be<uint16_t>(f.data() + 12, kEtherTypeArp);
    c.push_back({"ARP of 27 bytes", f, ParseError::ArpTruncated});
  }
  c.push_back({"IPv4 header of 19 bytes", Bytes(v4.begin(), v4.begin() + ip + 19), ParseError::Ipv4Truncated});
  {
    Bytes f = v4;
    f[ip] = 0x65;
    c.push_back({"IPv4 EtherType, version 6", f, ParseError::Ipv4BadVersion});
  }
  {
    Bytes f = v4;
    f[ip] = 0x44;
    c.push_back({"IPv4 IHL 4 (16 bytes)", f, ParseError::Ipv4BadIhl});
  }
  {
    Bytes f(v4.begin(), v4.begin() + ip + 40);
    f[ip] = 0x4F;
    c.push_back({"IPv4 IHL 15 past the frame", f, ParseError::Ipv4BadIhl});
  }
  {
    Bytes f = v4;
    Ipv4(f.data() + ip).set_total_len(19);
    c.push_back({"IPv4 total length below the header", f, ParseError::Ipv4BadTotalLen});
  }
  {
    Bytes f = v4;
    Ipv4(f.data() + ip).set_total_len(static_cast<uint16_t>(f.size() - ip + 1));
    c.push_back({"IPv4 total length past the frame", f, ParseError::Ipv4BadTotalLen});
  }
  {
    Bytes f = v4;
    Ipv4(f.data() + ip).set_flags_frag(kIpv4FlagMf);
    c.push_back({"IPv4 first fragment (MF)", f, ParseError::Ipv4Fragment});
    Ipv4(f.data() + ip).set_flags_frag(kIpv4FlagDf | 0x0010);
    c.push_back({"IPv4 fragment offset 16", f, ParseError::Ipv4Fragment});
  }
  c.push_back({"IPv6 header of 39 bytes", Bytes(v6.begin(), v6.begin() + ip + 39), ParseError::Ipv6Truncated});
  {
    Bytes f = v6;
    f[ip] = 0x45;
    c.push_back({"IPv6 EtherType, version 4", f, ParseError::Ipv6BadVersion});
  }
  {
    Bytes f = v6;
    Ipv6(f.data() + ip).set_payload_len(static_cast<uint16_t>(f.size() - 54 + 1));
    c.push_back({"IPv6 payload length past the frame", f, ParseError::Ipv6BadPayloadLen});
  }
  {
    Bytes f(v4.begin(), v4.begin() + udp4 + 7);
    Ipv4(f.data() + ip).set_total_len(27);
    c.push_back({"IPv4 carrying 7 bytes of UDP", f, ParseError::UdpTruncated});
    Bytes g(v6.begin(), v6.begin() + udp6 + 5);
    Ipv6(g.data() + ip).set_payload_len(5);
    c.push_back({"IPv6 carrying 5 bytes of UDP", g, ParseError::UdpTruncated});
  }
  {
    Bytes f = v4;
    Udp(f.data() + udp4).set_length(static_cast<uint16_t>(UdpC(f.data() + udp4).length() - 4));
    c.push_back({"UDP length 4 short of the IP length", f, ParseError::UdpBadLength});
    Udp(f.data() + udp4).set_length(7);
    c.push_back({"UDP length 7", f, ParseError::UdpBadLength});
    Bytes g = v6;
    Udp(g.data() + udp6).set_length(static_cast<uint16_t>(UdpC(g.data() + udp6).length() + 4));
    c.push_back({"IPv6: UDP length past the IP payload", g, ParseError::UdpBadLength});
  }
  c.push_back({"UDP payload of 15 bytes (BTH + ICRC need 16)", resize_udp(v4, L3::IPv4, 15), ParseError::BthTruncated});
  c.push_back({"UDP payload of 0 bytes", resize_udp(v4, L3::IPv4, 0), ParseError::BthTruncated});
  {
    Bytes f = v4;
    Bth(f.data() + bth4).set_tver(1);
    c.push_back({"BTH TVer 1", f, ParseError::BthBadTver});
  }
  {
    // RDMA WRITE FIRST needs a 16-byte RETH; give it 12.
    Bytes f = resize_udp(base_frame(L3::IPv4, op::RC_WRITE_FIRST, 0), L3::IPv4, 12 + 12 + 4);
    c.push_back({"WRITE_FIRST with a 12-byte RETH", f, ParseError::ExtTruncated});
    Bytes g = resize_udp(base_frame(L3::IPv4, op::RC_ATOMIC_ACK, 0), L3::IPv4, 12 + 4 + 4 + 4);
    c.push_back({"ATOMIC_ACK without its AtomicAckETH", g, ParseError::ExtTruncated});
  }
  {
    Bytes f = resize_udp(base_frame(L3::IPv4, op::RC_SEND_ONLY, 0), L3::IPv4, 12 + 2 + 4);
    Bth(f.data() + bth4).set_pad_count(3);
    c.push_back({"pad count 3 with 2 data bytes", f, ParseError::PadTooLong});
    Bytes g = base_frame(L3::IPv4, op::RC_ACK, 0);
    Bth(g.data() + bth4).set_pad_count(1);
    c.push_back({"ACK with pad count 1 and no data", g, ParseError::PadTooLong});
  }
  return c;
}

TEST(ParseErrors, EachReasonFromAHandMadeFrame) {
  std::set<ParseError> seen;
  for (const Crafted& c : crafted_frames()) {
    SCOPED_TRACE(c.what);
    const PktInfo pi = parse(c.frame);
    EXPECT_EQ(pi.cls, FrameClass::Malformed);
    EXPECT_EQ(pi.error, c.want) << parse_error_name(pi.error) << " instead of " << parse_error_name(c.want);
    seen.insert(pi.error);
  }
  // Every reason but None is produced: a new reason needs a frame here.
  for (size_t i = 1; i < kNumParseErrors; ++i) {
    EXPECT_EQ(seen.count(static_cast<ParseError>(i)), 1u) << "no frame yields " << parse_error_name(static_cast<ParseError>(i));
  }
  // The unmodified frames parse, so each case is the one change it names.
  EXPECT_EQ(parse(base_frame(L3::IPv4)).cls, FrameClass::RoceV2);
  EXPECT_EQ(parse(base_frame(L3::IPv6)).cls, FrameClass::RoceV2);
  EXPECT_EQ(parse(base_frame(L3::IPv4, op::RC_WRITE_FIRST, 0)).cls, FrameClass::RoceV2);
  EXPECT_EQ(parse(base_frame(L3::IPv4, op::RC_ACK, 0)).cls, FrameClass::RoceV2);
}

TEST(ParseErrors, NamesAndTexts) {
  std::set<std::string_view> names;
  for (size_t i = 0; i < kNumParseErrors; ++i) {
    const auto e = static_cast<ParseError>(i);
    const std::string_view n = parse_error_name(e);
    EXPECT_FALSE(n.empty());
    EXPECT_FALSE(parse_error_text(e).empty());
    EXPECT_TRUE(names.insert(n).second) << n;
    for (char ch : n) EXPECT_TRUE((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_') << n;
  }
  EXPECT_EQ(parse_error_name(ParseError::None), "none");
  EXPECT_EQ(parse_error_name(ParseError::Ipv4BadIhl), "ipv4_bad_ihl");
  EXPECT_EQ(parse_error_name(ParseError::BthBadTver), "bth_bad_tver");
  EXPECT_EQ(parse_error_name(static_cast<ParseError>(kNumParseErrors)), "?");
}

// ---- frames that are not RoCEv2 ------------------------------------------

TEST(Classes, NonRoceFrames) {
  const Bytes v4 = base_frame(L3::IPv4);
  const Bytes v6 = base_frame(L3::IPv6);
  {
    Bytes f(v4.begin(), v4.begin() + 14);
    store_be<uint16_t>(f.data() + 12, kEtherTypeArp);
    Bytes arp(Arp::kSize);
    Arp(arp.data()).set_ipv4_over_ethernet(kArpOpRequest);
    f.insert(f.end(), arp.begin(), arp.end());
    const PktInfo pi = parse(f);
    EXPECT_EQ(pi.cls, FrameClass::ARP);
    EXPECT_EQ(pi.l3_off, 14);
  }
  auto with_proto4 = [&](uint8_t proto) {
    Bytes f = v4;
    Ipv4(f.data() + 14).set_protocol(proto);
    return parse(f);
  };
  EXPECT_EQ(with_proto4(kIpProtoIcmp).cls, FrameClass::ICMPv4);
  EXPECT_EQ(with_proto4(6).cls, FrameClass::OtherIPv4);  // TCP
  auto with_proto6 = [&](uint8_t proto) {
    Bytes f = v6;
    Ipv6(f.data() + 14).set_next_header(proto);
    return parse(f);
  };
  EXPECT_EQ(with_proto6(kIpProtoIcmpv6).cls, FrameClass::ICMPv6);
  EXPECT_EQ(with_proto6(6).cls, FrameClass::OtherIPv6);
  EXPECT_EQ(with_proto6(0).cls, FrameClass::OtherIPv6);  // hop-by-hop options: not served
  {
    Bytes f = v4;
    Udp(f.data() + 34).set_dst_port(4790);
    const PktInfo pi = parse(f);
    EXPECT_EQ(pi.cls, FrameClass::OtherIPv4);
    EXPECT_EQ(pi.l4_proto, kIpProtoUdp);
    Bytes g = v6;
    Udp(g.data() + 54).set_dst_port(53);
    EXPECT_EQ(parse(g).cls, FrameClass::OtherIPv6);
    // The source port does not matter: 4791 as source only is not RoCE.
    Udp(g.data() + 54).set_src_port(kRoceV2Port);
    EXPECT_EQ(parse(g).cls, FrameClass::OtherIPv6);
  }
  for (uint16_t type : {kEtherTypeRoceV1, uint16_t{0x88CC}, uint16_t{0x0000}}) {
    Bytes f = v4;
    store_be<uint16_t>(f.data() + 12, type);
    const PktInfo pi = parse(f);
    EXPECT_EQ(pi.cls, FrameClass::OtherEther) << type;
    EXPECT_EQ(pi.ethertype, type);
  }
  {
    // An ICMP fragment is ICMP; only UDP fragments are errors.
    Bytes f = v4;
    Ipv4 h(f.data() + 14);
    h.set_protocol(kIpProtoIcmp);
    h.set_flags_frag(kIpv4FlagMf);
    EXPECT_EQ(parse(f).cls, FrameClass::ICMPv4);
  }
  for (FrameClass c : {FrameClass::RoceV2, FrameClass::ARP, FrameClass::ICMPv4, FrameClass::ICMPv6,
                       FrameClass::OtherIPv4, FrameClass::OtherIPv6, FrameClass::OtherEther, FrameClass::Malformed}) {
    EXPECT_NE(frame_class_name(c), "?");
  }
}

}  // namespace
}  // namespace uroce::test
