#include "bench/wire_limit/frame.hpp"

#include <cstring>

#include "lib/wire/bth.hpp"
#include "lib/wire/bytes.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/udp.hpp"

namespace uroce::bench::wire_limit {

namespace {

constexpr uint8_t kIpv4HeaderWords = 5;  // 20 bytes, no options
constexpr uint8_t kTtl = 64;

static_assert(kIpv4Offset == kEthOffset + wire::Eth::kSize);
static_assert(kUdpOffset == kIpv4Offset + wire::Ipv4::kMinSize);
static_assert(kBthOffset == kUdpOffset + wire::Udp::kSize);
static_assert(kMagicOffset == kBthOffset + wire::Bth::kSize);
static_assert(kSeqOffset == kMagicOffset + sizeof(uint16_t));
static_assert(kTscOffset == kSeqOffset + sizeof(uint32_t));
static_assert(kMinFrameBytes == kTscOffset + sizeof(uint32_t));

bool known_kind(uint8_t opcode) noexcept {
  return opcode >= static_cast<uint8_t>(FrameKind::kHello) && opcode <= static_cast<uint8_t>(FrameKind::kCompanion);
}

void write_ipv4(uint8_t* p, size_t len, const Addressing& to) noexcept {
  wire::Ipv4 ip(p + kIpv4Offset);
  ip.set_version_ihl(kIpv4HeaderWords);
  ip.set_tos(0);
  ip.set_total_len(static_cast<uint16_t>(len - kIpv4Offset));
  ip.set_id(0);
  ip.set_flags_frag(wire::kIpv4FlagDf);
  ip.set_ttl(kTtl);
  ip.set_protocol(wire::kIpProtoUdp);
  ip.set_src(to.src_ip);
  ip.set_dst(to.dst_ip);
  ip.update_checksum();
}

void write_bth(uint8_t* p) noexcept {
  wire::Bth bth(p + kBthOffset);
  std::memset(bth.data(), 0, wire::Bth::kSize);
  bth.set_opcode(static_cast<uint8_t>(FrameKind::kRequest));
  bth.set_pkey(kDefaultPkey);
  bth.set_dest_qp(kDestQp);
}

}  // namespace

void write_frame(uint8_t* p, size_t len, const wire::MacAddr& src, const Addressing& to) noexcept {
  std::memset(p, 0, len);
  wire::Eth eth(p + kEthOffset);
  eth.set_dst(to.dst);
  eth.set_src(src);
  eth.set_ethertype(wire::kEtherTypeIpv4);
  write_ipv4(p, len, to);
  wire::Udp udp(p + kUdpOffset);
  udp.set_src_port(kSrcPort);
  udp.set_dst_port(wire::kRoceV2Port);
  udp.set_length(static_cast<uint16_t>(len - kUdpOffset));
  udp.set_checksum(0);
  write_bth(p);
  wire::store_be(p + kMagicOffset, kMagic);
}

void stamp(uint8_t* p, FrameKind kind, uint32_t seq, uint32_t tsc) noexcept {
  wire::Bth bth(p + kBthOffset);
  bth.set_opcode(static_cast<uint8_t>(kind));
  bth.set_psn(Psn(seq));
  wire::store_be(p + kSeqOffset, seq);
  wire::store_be(p + kTscOffset, tsc);
}

void set_timestamp(uint8_t* p, uint32_t tsc) noexcept { wire::store_be(p + kTscOffset, tsc); }

std::optional<FrameInfo> classify(const uint8_t* p, size_t len) noexcept {
  if (len < kMinFrameBytes) return std::nullopt;
  if (wire::EthC(p + kEthOffset).ethertype() != wire::kEtherTypeIpv4) return std::nullopt;
  const wire::Ipv4C ip(p + kIpv4Offset);
  if (ip.ihl() != kIpv4HeaderWords || ip.protocol() != wire::kIpProtoUdp) return std::nullopt;
  if (wire::UdpC(p + kUdpOffset).dst_port() != wire::kRoceV2Port) return std::nullopt;
  if (wire::load_be<uint16_t>(p + kMagicOffset) != kMagic) return std::nullopt;
  const uint8_t opcode = wire::BthC(p + kBthOffset).opcode();
  if (!known_kind(opcode)) return std::nullopt;
  return FrameInfo{static_cast<FrameKind>(opcode), wire::load_be<uint32_t>(p + kSeqOffset),
                   wire::load_be<uint32_t>(p + kTscOffset)};
}

void turn_around(uint8_t* p, FrameKind kind, const wire::MacAddr& own) noexcept {
  wire::Eth eth(p + kEthOffset);
  if (eth.dst() == own) eth.set_dst(eth.src());
  eth.set_src(own);
  wire::Ipv4 ip(p + kIpv4Offset);
  const uint32_t src = ip.src();
  ip.set_src(ip.dst());
  ip.set_dst(src);
  wire::Bth(p + kBthOffset).set_opcode(static_cast<uint8_t>(kind));
}

}  // namespace uroce::bench::wire_limit
