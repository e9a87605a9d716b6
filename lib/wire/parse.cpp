#include <array>

#include "lib/wire/arp.hpp"
#include "lib/wire/bth.hpp"
#include "lib/wire/icrc.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"
#include "lib/wire/pkt.hpp"
#include "lib/wire/udp.hpp"

namespace uroce::wire {
namespace {

constexpr std::array<std::string_view, kNumParseErrors> kErrorText = {
#define X(name, text) text,
    UROCE_PARSE_ERRORS(X)
#undef X
};

// snake_case names for counters, derived from the enumerator names at
// compile time ("Ipv4BadIhl" -> "ipv4_bad_ihl").
constexpr std::array<std::string_view, kNumParseErrors> kErrorEnum = {
#define X(name, text) #name,
    UROCE_PARSE_ERRORS(X)
#undef X
};

struct SnakeNames {
  std::array<std::array<char, 32>, kNumParseErrors> text{};
  std::array<uint8_t, kNumParseErrors> len{};
};

constexpr SnakeNames make_snake() {
  SnakeNames s{};
  for (size_t i = 0; i < kNumParseErrors; ++i) {
    size_t n = 0;
    for (size_t k = 0; k < kErrorEnum[i].size(); ++k) {
      char c = kErrorEnum[i][k];
      if (c >= 'A' && c <= 'Z') {
        if (k != 0) s.text[i][n++] = '_';
        c = static_cast<char>(c - 'A' + 'a');
      }
      s.text[i][n++] = c;
    }
    s.len[i] = static_cast<uint8_t>(n);
  }
  return s;
}

constexpr SnakeNames kSnake = make_snake();

inline PktInfo fail(PktInfo& pi, ParseError e) noexcept {
  pi.cls = FrameClass::Malformed;
  pi.error = e;
  return pi;
}

// Everything after the UDP header of a packet to port 4791.
PktInfo parse_roce(PktInfo& pi, const uint8_t* f, size_t udp_end) noexcept {
  const size_t bth = pi.l4_off + Udp::kSize;
  if (bth + Bth::kSize + kIcrcSize > udp_end) return fail(pi, ParseError::BthTruncated);
  BthC b(f + bth);
  // IBA C9-3 (TVer): a packet with a transport version we do not know is dropped.
  if (b.tver() != 0) return fail(pi, ParseError::BthBadTver);
  pi.bth_off = static_cast<uint16_t>(bth);
  pi.opcode = b.opcode();
  pi.pad = b.pad_count();
  pi.dest_qp = b.dest_qp();
  pi.psn = b.psn();
  const OpcodeInfo& op = opcode_info(pi.opcode);
  pi.opcode_known = op.valid;
  // Unknown opcodes: everything after the BTH is opaque payload, so the
  // packet can still be checked and reproduced.
  const size_t hdr_len = op.valid ? op.hdr_len : Bth::kSize;
  const size_t icrc = udp_end - kIcrcSize;
  if (bth + hdr_len > icrc) return fail(pi, ParseError::ExtTruncated);
  const size_t data = icrc - (bth + hdr_len);
  if (pi.pad > data) return fail(pi, ParseError::PadTooLong);
  pi.payload_off = static_cast<uint16_t>(bth + hdr_len);
  pi.payload_len = static_cast<uint16_t>(data - pi.pad);
  pi.icrc_off = static_cast<uint16_t>(icrc);
  pi.cls = FrameClass::RoceV2;
  return pi;
}

PktInfo parse_udp(PktInfo& pi, const uint8_t* f) noexcept {
  if (pi.l4_off + Udp::kSize > pi.l3_end) return fail(pi, ParseError::UdpTruncated);
  UdpC u(f + pi.l4_off);
  const size_t ip_payload = pi.l3_end - pi.l4_off;
  if (u.length() < Udp::kSize || u.length() != ip_payload) return fail(pi, ParseError::UdpBadLength);
  if (u.dst_port() != kRoceV2Port) {
    pi.cls = pi.l3 == L3::IPv4 ? FrameClass::OtherIPv4 : FrameClass::OtherIPv6;
    return pi;
  }
  return parse_roce(pi, f, pi.l4_off + u.length());
}

PktInfo parse_ipv4(PktInfo& pi, const uint8_t* f, size_t len) noexcept {
  const size_t l3 = pi.l3_off;
  if (l3 + Ipv4::kMinSize > len) return fail(pi, ParseError::Ipv4Truncated);
  Ipv4C ip(f + l3);
  if (ip.version() != 4) return fail(pi, ParseError::Ipv4BadVersion);
  const size_t hl = ip.header_len();
  if (hl < Ipv4::kMinSize || l3 + hl > len) return fail(pi, ParseError::Ipv4BadIhl);
  if (ip.total_len() < hl || l3 + ip.total_len() > len) return fail(pi, ParseError::Ipv4BadTotalLen);
  pi.l3 = L3::IPv4;
  pi.l3_hdr_len = static_cast<uint16_t>(hl);
  pi.l3_end = static_cast<uint16_t>(l3 + ip.total_len());
  pi.l4_proto = ip.protocol();
  pi.l4_off = static_cast<uint16_t>(l3 + hl);
  if (ip.protocol() == kIpProtoIcmp) {
    pi.cls = FrameClass::ICMPv4;
    return pi;
  }
  if (ip.protocol() != kIpProtoUdp) {
    pi.cls = FrameClass::OtherIPv4;
    return pi;
  }
  // RoCEv2 never fragments (A17.4.1: DF set); a fragment cannot be parsed as UDP.
  if (ip.is_fragment()) return fail(pi, ParseError::Ipv4Fragment);
  return parse_udp(pi, f);
}

PktInfo parse_ipv6(PktInfo& pi, const uint8_t* f, size_t len) noexcept {
  const size_t l3 = pi.l3_off;
  if (l3 + Ipv6::kSize > len) return fail(pi, ParseError::Ipv6Truncated);
  Ipv6C ip(f + l3);
  if (ip.version() != 6) return fail(pi, ParseError::Ipv6BadVersion);
  if (l3 + Ipv6::kSize + ip.payload_len() > len) return fail(pi, ParseError::Ipv6BadPayloadLen);
  pi.l3 = L3::IPv6;
  pi.l3_hdr_len = Ipv6::kSize;
  pi.l3_end = static_cast<uint16_t>(l3 + Ipv6::kSize + ip.payload_len());
  pi.l4_proto = ip.next_header();
  pi.l4_off = static_cast<uint16_t>(l3 + Ipv6::kSize);
  // RoCEv2 puts UDP right after the fixed header; extension headers are
  // not RoCE traffic we can serve.
  if (ip.next_header() == kIpProtoIcmpv6) {
    pi.cls = FrameClass::ICMPv6;
    return pi;
  }
  if (ip.next_header() != kIpProtoUdp) {
    pi.cls = FrameClass::OtherIPv6;
    return pi;
  }
  return parse_udp(pi, f);
}

}  // namespace

std::string_view parse_error_name(ParseError e) noexcept {
  const auto i = static_cast<size_t>(e);
  return i < kNumParseErrors ? std::string_view(kSnake.text[i].data(), kSnake.len[i]) : "?";
}

std::string_view parse_error_text(ParseError e) noexcept {
  const auto i = static_cast<size_t>(e);
  return i < kNumParseErrors ? kErrorText[i] : "?";
}

std::string_view frame_class_name(FrameClass c) noexcept {
  switch (c) {
    case FrameClass::RoceV2: return "roce_v2";
    case FrameClass::ARP: return "arp";
    case FrameClass::ICMPv4: return "icmpv4";
    case FrameClass::ICMPv6: return "icmpv6";
    case FrameClass::OtherIPv4: return "other_ipv4";
    case FrameClass::OtherIPv6: return "other_ipv6";
    case FrameClass::OtherEther: return "other_ethertype";
    case FrameClass::Malformed: return "malformed";
  }
  return "?";
}

PktInfo parse(std::span<const uint8_t> frame) noexcept {
  PktInfo pi;
  const uint8_t* f = frame.data();
  const size_t len = frame.size();
  if (len > 0xFFFF) return fail(pi, ParseError::FrameTooLong);  // offsets are 16-bit
  pi.frame_len = static_cast<uint16_t>(len);
  if (len < Eth::kSize) return fail(pi, ParseError::EthTruncated);
  size_t off = Eth::kSize;
  uint16_t type = EthC(f).ethertype();
  while (type == kEtherTypeVlan || type == kEtherTypeQinQ) {
    if (pi.vlan_count == pi.vlans.size()) return fail(pi, ParseError::TooManyVlanTags);
    if (off + Vlan::kSize > len) return fail(pi, ParseError::VlanTruncated);
    VlanC v(f + off);
    pi.vlans[pi.vlan_count++] = VlanTag{type, v.tci()};
    type = v.ethertype();
    off += Vlan::kSize;
  }
  pi.ethertype = type;
  pi.l3_off = static_cast<uint16_t>(off);
  switch (type) {
    case kEtherTypeIpv4:
      return parse_ipv4(pi, f, len);
    case kEtherTypeIpv6:
      return parse_ipv6(pi, f, len);
    case kEtherTypeArp:
      if (off + Arp::kSize > len) return fail(pi, ParseError::ArpTruncated);
      pi.cls = FrameClass::ARP;
      return pi;
    default:
      pi.cls = FrameClass::OtherEther;
      return pi;
  }
}

uint32_t compute_icrc(const uint8_t* frame, const PktInfo& info) noexcept {
  return icrc(frame + info.l3_off, info.l3_hdr_len, info.l3 == L3::IPv6,
              static_cast<size_t>(info.icrc_off - info.l3_off));
}

bool verify_icrc(const uint8_t* frame, const PktInfo& info) noexcept {
  return compute_icrc(frame, info) == load_icrc(frame + info.icrc_off);
}

Ipv6Addr src_gid(const uint8_t* frame, const PktInfo& pi) noexcept {
  const uint8_t* l3 = frame + pi.l3_off;
  return pi.l3 == L3::IPv4 ? ipv4_mapped(Ipv4C(l3).src_bytes()) : Ipv6C(l3).src();
}

Ipv6Addr dst_gid(const uint8_t* frame, const PktInfo& pi) noexcept {
  const uint8_t* l3 = frame + pi.l3_off;
  return pi.l3 == L3::IPv4 ? ipv4_mapped(Ipv4C(l3).dst_bytes()) : Ipv6C(l3).dst();
}

Ecn ecn(const uint8_t* frame, const PktInfo& pi) noexcept {
  const uint8_t* l3 = frame + pi.l3_off;
  const uint8_t tc = pi.l3 == L3::IPv4 ? Ipv4C(l3).tos() : Ipv6C(l3).traffic_class();
  return static_cast<Ecn>(tc & 0x03);
}

}  // namespace uroce::wire
