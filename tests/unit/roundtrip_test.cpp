// Builder and parser against each other: every valid opcode, IPv4 and
// IPv6, 0-2 VLAN tags, payloads of 0..4096 bytes, random header fields.
#include <gtest/gtest.h>

#include <cstring>

#include "lib/wire/bth.hpp"
#include "lib/wire/build.hpp"
#include "lib/wire/ext.hpp"
#include "lib/wire/icrc.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"
#include "lib/wire/pkt.hpp"
#include "lib/wire/udp.hpp"
#include "tests/common/test_util.hpp"

namespace uroce::test {
namespace {

using namespace uroce::wire;

constexpr size_t kPayloadLens[] = {0, 1, 2, 3, 4, 255, 1024, 4096};

// memcmp() that accepts the null pointer of an empty span.
bool same_bytes(const uint8_t* a, std::span<const uint8_t> b) {
  return b.empty() || std::memcmp(a, b.data(), b.size()) == 0;
}

// The header values in the frame, read through the views, equal what the
// description asked for.
void expect_fields(const Bytes& f, const PktInfo& pi, const PktDesc& d) {
  EthC eth(f.data());
  EXPECT_EQ(eth.dst(), d.eth_dst);
  EXPECT_EQ(eth.src(), d.eth_src);
  for (uint8_t i = 0; i < d.vlan_count; ++i) EXPECT_EQ(pi.vlans[i], d.vlans[i]);
  const uint8_t* ip = f.data() + pi.l3_off;
  const size_t udp_len = pi.l3_end - pi.l4_off;
  if (d.l3 == L3::IPv4) {
    EXPECT_EQ(pi.ethertype, kEtherTypeIpv4);
    Ipv4C h(ip);
    EXPECT_EQ(h.version(), 4);
    EXPECT_EQ(h.header_len(), 20 + d.ip_options.size());
    EXPECT_EQ(h.tos(), d.tos);
    EXPECT_EQ(h.ttl(), d.ttl);
    EXPECT_EQ(h.id(), d.ip_id);
    EXPECT_EQ(h.flags_frag(), d.ip_flags_frag);
    EXPECT_EQ(h.protocol(), kIpProtoUdp);
    EXPECT_EQ(h.total_len(), h.header_len() + udp_len);
    EXPECT_EQ(h.src(), load_be<uint32_t>(d.src.data() + 12));
    EXPECT_EQ(h.dst(), load_be<uint32_t>(d.dst.data() + 12));
    if (d.ip_checksum) {
      EXPECT_EQ(h.checksum(), *d.ip_checksum);
    } else {
      EXPECT_EQ(h.compute_checksum(), 0) << "computed IPv4 checksum does not verify";
    }
    EXPECT_TRUE(same_bytes(ip + 20, d.ip_options));
  } else {
    EXPECT_EQ(pi.ethertype, kEtherTypeIpv6);
    Ipv6C h(ip);
    EXPECT_EQ(h.version(), 6);
    EXPECT_EQ(h.traffic_class(), d.tos);
    EXPECT_EQ(h.flow_label(), d.flow_label);
    EXPECT_EQ(h.hop_limit(), d.ttl);
    EXPECT_EQ(h.next_header(), kIpProtoUdp);
    EXPECT_EQ(h.payload_len(), udp_len);
    EXPECT_EQ(h.src(), d.src);
    EXPECT_EQ(h.dst(), d.dst);
  }
  UdpC u(f.data() + pi.l4_off);
  EXPECT_EQ(u.src_port(), d.sport);
  EXPECT_EQ(u.dst_port(), kRoceV2Port);
  EXPECT_EQ(u.length(), udp_len);
  EXPECT_EQ(u.checksum(), d.udp_checksum);
  BthC b(f.data() + pi.bth_off);
  EXPECT_EQ(b.opcode(), d.opcode);
  EXPECT_EQ(b.se(), d.se);
  EXPECT_EQ(b.mig(), d.mig);
  EXPECT_EQ(b.pad_count(), pi.pad);
  EXPECT_EQ(b.tver(), 0);
  EXPECT_EQ(b.pkey(), d.pkey);
  EXPECT_EQ(b.resv8a(), d.resv8a);
  EXPECT_EQ(b.dest_qp(), d.dest_qp);
  EXPECT_EQ(b.ack_req(), d.ack_req);
  EXPECT_EQ(b.resv7(), d.resv7);
  EXPECT_EQ(b.psn(), d.psn);
  const OpcodeInfo& op = opcode_info(d.opcode);
  const uint8_t* bth = f.data() + pi.bth_off;
  if (op.has(kHdrRdeth)) {
    RdethC h(f.data() + pi.ext_off(kHdrRdeth));
    EXPECT_EQ(h.resv8(), d.rdeth_resv);
    EXPECT_EQ(h.number(), d.rdeth_eecnxt);
  }
  if (op.has(kHdrDeth)) {
    DethC h(bth + op.offset(kHdrDeth));
    EXPECT_EQ(h.qkey(), d.deth_qkey);
    EXPECT_EQ(h.resv8(), d.deth_resv);
    EXPECT_EQ(h.src_qp(), d.deth_src_qp);
  }
  if (op.has(kHdrXrceth)) {
    XrcEthC h(bth + op.offset(kHdrXrceth));
    EXPECT_EQ(h.resv8(), d.xrceth_resv);
    EXPECT_EQ(h.number(), d.xrceth_srq);
  }
  if (op.has(kHdrFeth)) {
    EXPECT_EQ(FethC(bth + op.offset(kHdrFeth)).word(), d.feth);
  }
  if (op.has(kHdrReth)) {
    RethC h(bth + op.offset(kHdrReth));
    EXPECT_EQ(h.va(), d.reth_va);
    EXPECT_EQ(h.rkey(), d.reth_rkey);
    EXPECT_EQ(h.dma_len(), d.reth_len);
  }
  if (op.has(kHdrAtomicEth)) {
    AtomicEthC h(bth + op.offset(kHdrAtomicEth));
    EXPECT_EQ(h.va(), d.atomic_va);
    EXPECT_EQ(h.rkey(), d.atomic_rkey);
    EXPECT_EQ(h.swap_add(), d.atomic_swap_add);
    EXPECT_EQ(h.compare(), d.atomic_compare);
  }
  if (op.has(kHdrAeth)) {
    AethC h(bth + op.offset(kHdrAeth));
    EXPECT_EQ(h.syndrome(), d.aeth_syndrome);
    EXPECT_EQ(h.msn(), d.aeth_msn);
  }
  if (op.has(kHdrAtomicAckEth)) {
    EXPECT_EQ(AtomicAckEthC(bth + op.offset(kHdrAtomicAckEth)).orig(), d.atomic_ack_orig);
  }
  if (op.has(kHdrImmDt)) {
    EXPECT_EQ(ImmDtC(bth + op.offset(kHdrImmDt)).imm(), d.imm);
  }
  if (op.has(kHdrIeth)) {
    EXPECT_EQ(IethC(bth + op.offset(kHdrIeth)).rkey(), d.ieth_rkey);
  }
  EXPECT_TRUE(same_bytes(f.data() + pi.payload_off, d.payload));
  for (size_t i = 0; i < pi.pad; ++i) {
    const uint8_t want = d.pad_bytes.size() == pi.pad ? d.pad_bytes[i] : 0;
    EXPECT_EQ(f[pi.payload_off + pi.payload_len + i], want) << "pad byte " << i;
  }
  EXPECT_TRUE(same_bytes(f.data() + pi.l3_end, d.eth_trailer));
}

// describe() reads back what build() was given.
void expect_described(const PktDesc& got, const PktDesc& want) {
  EXPECT_EQ(got.eth_dst, want.eth_dst);
  EXPECT_EQ(got.vlan_count, want.vlan_count);
  EXPECT_EQ(got.l3, want.l3);
  EXPECT_EQ(got.tos, want.tos);
  EXPECT_EQ(got.ttl, want.ttl);
  EXPECT_EQ(got.src, want.src);
  EXPECT_EQ(got.dst, want.dst);
  if (want.l3 == L3::IPv6) {
    EXPECT_EQ(got.flow_label, want.flow_label);
  } else {
    EXPECT_EQ(got.ip_id, want.ip_id);
    EXPECT_EQ(got.ip_flags_frag, want.ip_flags_frag);
    EXPECT_EQ(got.ip_options.size(), want.ip_options.size());
  }
  EXPECT_EQ(got.sport, want.sport);
  EXPECT_EQ(got.udp_checksum, want.udp_checksum);
  EXPECT_EQ(got.opcode, want.opcode);
  EXPECT_EQ(got.dest_qp, want.dest_qp);
  EXPECT_EQ(got.psn, want.psn);
  EXPECT_EQ(got.pkey, want.pkey);
  EXPECT_EQ(got.resv8a, want.resv8a);
  EXPECT_EQ(got.resv7, want.resv7);
  EXPECT_EQ(got.payload.size(), want.payload.size());
  EXPECT_EQ(got.eth_trailer.size(), want.eth_trailer.size());
}

void round_trip(Rng& rng, const RandomSpec& spec) {
  const OwnedDesc o = random_desc(rng, spec);
  const PktDesc& d = o.d;
  const size_t n = frame_len(d, d.payload.size());
  Bytes f(n + 16, 0xEE);  // room to spare: build must not write past n
  ASSERT_EQ(build(f, d), n);
  for (size_t i = n; i < f.size(); ++i) ASSERT_EQ(f[i], 0xEE) << "build wrote past the frame";
  f.resize(n);

  const PktInfo pi = parse(f);
  ASSERT_EQ(pi.cls, FrameClass::RoceV2) << parse_error_name(pi.error);
  EXPECT_EQ(pi.error, ParseError::None);
  const OpcodeInfo& op = opcode_info(d.opcode);
  const size_t l3_off = 14 + 4u * spec.vlans;
  const size_t ip_hl = spec.l3 == L3::IPv6 ? 40 : 20 + o.ip_options.size();
  const size_t hdr = op.valid ? op.hdr_len : Bth::kSize;
  const uint8_t pad = static_cast<uint8_t>((4 - spec.payload_len % 4) % 4);
  EXPECT_EQ(pi.l3, spec.l3);
  EXPECT_EQ(pi.vlan_count, spec.vlans);
  EXPECT_EQ(pi.frame_len, n);
  EXPECT_EQ(pi.l3_off, l3_off);
  EXPECT_EQ(pi.l3_hdr_len, ip_hl);
  EXPECT_EQ(pi.l4_proto, kIpProtoUdp);
  EXPECT_EQ(pi.l4_off, l3_off + ip_hl);
  EXPECT_EQ(pi.bth_off, l3_off + ip_hl + 8);
  EXPECT_EQ(pi.payload_off, pi.bth_off + hdr);
  EXPECT_EQ(pi.payload_len, spec.payload_len);
  EXPECT_EQ(pi.pad, pad);
  EXPECT_EQ(pi.icrc_off, pi.payload_off + spec.payload_len + pad);
  EXPECT_EQ(pi.l3_end, pi.icrc_off + kIcrcSize);
  EXPECT_EQ(pi.frame_len, pi.l3_end + o.trailer.size());
  EXPECT_EQ(pi.opcode, d.opcode);
  EXPECT_EQ(pi.opcode_known, op.valid);
  EXPECT_EQ(pi.dest_qp, d.dest_qp);
  EXPECT_EQ(pi.psn, d.psn);
  EXPECT_EQ(header_len(d), pi.payload_off);
  EXPECT_EQ(pad_for(d, spec.payload_len), pad);
  expect_fields(f, pi, d);

  EXPECT_TRUE(verify_icrc(f.data(), pi));
  EXPECT_EQ(compute_icrc(f.data(), pi), ref_icrc(f, pi.l3_off, pi.l3_hdr_len, spec.l3 == L3::IPv6, pi.icrc_off));

  // describe() + build() gives the same bytes.
  const PktDesc back = describe(f.data(), pi);
  expect_described(back, d);
  EXPECT_EQ(build_frame(back), f);

  // write_headers(), the payload copied in by the caller, finish().
  Bytes g(n + 16, 0x5A);
  EXPECT_EQ(write_headers(g.data(), d, d.payload.size()), header_len(d));
  if (!d.payload.empty()) std::memcpy(g.data() + header_len(d), d.payload.data(), d.payload.size());
  EXPECT_EQ(finish(g.data(), d, d.payload.size()), n);
  for (size_t i = n; i < g.size(); ++i) ASSERT_EQ(g[i], 0x5A) << "finish wrote past the frame";
  g.resize(n);
  EXPECT_EQ(g, f);
}

TEST(RoundTrip, EveryOpcodeL3VlanAndPayloadLength) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed);
  size_t built = 0;
  for (unsigned o = 0; o < 256; ++o) {
    const OpcodeInfo& op = opcode_info(static_cast<uint8_t>(o));
    if (!op.valid) continue;
    for (L3 l3 : {L3::IPv4, L3::IPv6}) {
      for (uint8_t vlans = 0; vlans <= 2; ++vlans) {
        for (size_t len : kPayloadLens) {
          if (len != 0 && !op.has(kHdrPayload)) continue;
          SCOPED_TRACE(::testing::Message() << op.name << (l3 == L3::IPv6 ? " IPv6" : " IPv4") << " vlans "
                                            << int{vlans} << " payload " << len);
          RandomSpec spec{static_cast<uint8_t>(o), l3, vlans, len};
          spec.trailer = rng.range(0, 3) == 0;
          spec.ip_options = l3 == L3::IPv4 && rng.range(0, 3) == 0;
          spec.random_pad_bytes = rng.coin();
          round_trip(rng, spec);
          if (HasFatalFailure()) return;
          ++built;
        }
      }
    }
  }
  // 82 valid opcodes; those with payload contribute 8 lengths each.
  EXPECT_GT(built, 2500u);
  RecordProperty("packets", static_cast<int>(built));
}

// The CNP carries its 16 reserved bytes as payload.
TEST(RoundTrip, CnpWithReservedBytes) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed);
  for (L3 l3 : {L3::IPv4, L3::IPv6}) round_trip(rng, {op::CNP, l3, 0, kCnpReservedLen});
}

// Reserved opcodes: the BTH is known, the rest is opaque payload, and the
// packet still checks and reproduces.
TEST(RoundTrip, UnknownOpcodesAreOpaque) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed);
  for (unsigned o = 0; o < 256; ++o) {
    if (opcode_info(static_cast<uint8_t>(o)).valid) continue;
    for (size_t len : {0, 3, 64}) {
      SCOPED_TRACE(::testing::Message() << "opcode " << o << " payload " << len);
      round_trip(rng, {static_cast<uint8_t>(o), rng.coin() ? L3::IPv4 : L3::IPv6, 0, len});
      if (HasFatalFailure()) return;
    }
  }
}

// An explicit pad count wins over the computed one; the bytes still
// round-trip (a peer may send a pad the payload does not need).
TEST(RoundTrip, ExplicitPadCount) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE(::testing::Message() << "UROCE_SEED=" << seed);
  Rng rng(seed);
  for (uint8_t pad = 0; pad < 4; ++pad) {
    OwnedDesc o = random_desc(rng, {op::RC_SEND_ONLY, L3::IPv4, 0, 8});
    o.d.pad = pad;
    const Bytes f = build_frame(o.d);
    const PktInfo pi = parse(f);
    ASSERT_EQ(pi.cls, FrameClass::RoceV2);
    EXPECT_EQ(pi.pad, pad);
    EXPECT_EQ(pi.payload_len, 8);
    EXPECT_TRUE(verify_icrc(f.data(), pi));
    EXPECT_EQ(build_frame(describe(f.data(), pi)), f);
  }
}

TEST(Build, RejectsWhatCannotBeBuilt) {
  Rng rng(1);
  OwnedDesc o = random_desc(rng, {op::RC_SEND_ONLY, L3::IPv4, 0, 100});
  Bytes out(frame_len(o.d, 100));
  EXPECT_EQ(build(std::span(out.data(), out.size() - 1), o.d), 0u) << "buffer one byte short";
  EXPECT_EQ(build(out, o.d), out.size());
  o.ip_options = Bytes(6, 1);  // not a multiple of 4
  o.rebind();
  EXPECT_EQ(build(out, o.d), 0u);
  o.ip_options = Bytes(44, 1);  // more than 40
  o.rebind();
  Bytes big(200);
  EXPECT_EQ(build(big, o.d), 0u);
  o.ip_options.clear();
  o.rebind();
  o.d.l3 = L3::None;
  EXPECT_EQ(build(big, o.d), 0u);
  o.d.l3 = L3::IPv4;
  o.d.vlan_count = 3;
  EXPECT_EQ(build(big, o.d), 0u);
  o.d.vlan_count = 0;
  o.payload = Bytes(70000);
  o.rebind();
  Bytes huge(80000);
  EXPECT_EQ(build(huge, o.d), 0u) << "a frame past 65535 bytes";
}

}  // namespace
}  // namespace uroce::test
