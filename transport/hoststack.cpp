#include "transport/hoststack.hpp"

#include <cstring>

#include "lib/wire/arp.hpp"
#include "lib/wire/icmp.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"

namespace uroce::transport {
namespace {

using namespace wire;
using Kind = HostAction::Kind;

constexpr uint8_t kDefaultTtl = 64;
constexpr Ipv6Addr kAllNodes{0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};

bool is_link_local(const IpAddr& a) { return !a.is_v4() && a.bytes[0] == 0xfe && (a.bytes[1] & 0xc0) == 0x80; }

// Ethernet header plus our VLAN tags; returns the offset of the L3 header.
size_t write_l2(uint8_t* out, const LocalAddrs& local, const MacAddr& dst, uint16_t ethertype) {
  Eth eth(out);
  eth.set_dst(dst);
  eth.set_src(local.mac);
  size_t off = Eth::kSize - 2;
  for (uint8_t i = 0; i < local.vlan_count; ++i) {
    store_be<uint16_t>(out + off, local.vlans[i].tpid);
    store_be<uint16_t>(out + off + 2, local.vlans[i].tci);
    off += Vlan::kSize;
  }
  store_be<uint16_t>(out + off, ethertype);
  return off + 2;
}

// A reply keeps the request's L2 framing (tags included) with the
// addresses swapped.
void reply_l2(uint8_t* out, const uint8_t* in, const PktInfo& info, const MacAddr& our_mac) {
  std::memcpy(out, in, info.l3_off);
  Eth eth(out);
  eth.set_dst(EthC(in).src());
  eth.set_src(our_mac);
}

size_t pad_min(uint8_t* out, size_t len) {
  if (len < kEthMinFrame) {
    std::memset(out + len, 0, kEthMinFrame - len);
    len = kEthMinFrame;
  }
  return len;
}

HostAction on_arp(std::span<const uint8_t> f, const PktInfo& info, const LocalAddrs& local, bool answer,
                  uint8_t* out, size_t cap) {
  HostAction act;
  ArpC arp(f.data() + info.l3_off);
  if (!arp.is_ipv4_over_ethernet()) {
    act.kind = Kind::Ignored;
    return act;
  }
  const IpAddr sender = IpAddr::v4(arp.spa());
  const IpAddr target = IpAddr::v4(arp.tpa());
  const bool for_us = local.owns(target);
  if (arp.spa() != 0) {
    // RFC 826: update the sender if known; a request to us or a reply to us creates it.
    act.learned = Learned{sender, arp.sha(), for_us};
  }
  if (arp.op() == kArpOpReply) {
    act.kind = for_us ? Kind::ArpReply : Kind::NotForUs;
    return act;
  }
  if (arp.op() != kArpOpRequest || !for_us) {
    act.kind = Kind::NotForUs;
    return act;
  }
  act.kind = Kind::ArpRequest;
  if (!answer || cap < info.l3_off + Arp::kSize || arp.spa() == arp.tpa()) return act;  // gratuitous: no answer
  reply_l2(out, f.data(), info, local.mac);
  Arp r(out + info.l3_off);
  r.set_ipv4_over_ethernet(kArpOpReply);
  r.set_sha(local.mac);
  r.set_spa(arp.tpa());
  r.set_tha(arp.sha());
  r.set_tpa(arp.spa());
  act.reply_len = pad_min(out, info.l3_off + Arp::kSize);
  return act;
}

HostAction on_icmp4(std::span<const uint8_t> f, const PktInfo& info, const LocalAddrs& local, bool answer,
                    uint8_t* out, size_t cap) {
  HostAction act;
  Ipv4C ip(f.data() + info.l3_off);
  const size_t icmp_len = info.l3_end - info.l4_off;
  if (!local.owns(IpAddr::v4(ip.dst())) || icmp_len < Icmp::kSize) {
    act.kind = Kind::NotForUs;
    return act;
  }
  IcmpC icmp(f.data() + info.l4_off);
  if (icmp.type() != kIcmpEchoRequest || icmp4_checksum(f.data() + info.l4_off, icmp_len) != 0) {
    act.kind = Kind::Ignored;
    return act;
  }
  act.kind = Kind::IcmpEcho;
  if (!answer || cap < info.l3_end) return act;
  reply_l2(out, f.data(), info, local.mac);
  std::memcpy(out + info.l3_off, f.data() + info.l3_off, info.l3_end - info.l3_off);
  Ipv4 rip(out + info.l3_off);
  rip.set_src(ip.dst());
  rip.set_dst(ip.src());
  rip.set_ttl(kDefaultTtl);
  rip.update_checksum();
  Icmp r(out + info.l4_off);
  r.set_type(kIcmpEchoReply);
  r.set_checksum(0);
  r.set_checksum(icmp4_checksum(out + info.l4_off, icmp_len));
  act.reply_len = pad_min(out, info.l3_end);
  return act;
}

// The MAC in an ND link-layer address option of `type`, if present.
std::optional<MacAddr> nd_link_option(const uint8_t* msg, size_t len, uint8_t type) {
  size_t off = kNdOptionsOffset;
  while (off + 2 <= len) {
    const size_t opt_len = size_t{msg[off + 1]} * 8;
    if (opt_len == 0 || off + opt_len > len) return std::nullopt;
    if (msg[off] == type && opt_len >= kNdLinkAddrOptLen) {
      MacAddr m;
      std::memcpy(m.data(), msg + off + 2, m.size());
      return m;
    }
    off += opt_len;
  }
  return std::nullopt;
}

// ICMPv6 message with an IPv6 header; returns the frame length.
size_t write_icmp6(uint8_t* out, size_t l3, const Ipv6Addr& src, const Ipv6Addr& dst, uint8_t hop_limit,
                   size_t msg_len) {
  Ipv6 ip(out + l3);
  ip.set_vtcfl(0, 0);
  ip.set_payload_len(static_cast<uint16_t>(msg_len));
  ip.set_next_header(kIpProtoIcmpv6);
  ip.set_hop_limit(hop_limit);
  ip.set_src(src);
  ip.set_dst(dst);
  uint8_t* msg = out + l3 + Ipv6::kSize;
  Icmp(msg).set_checksum(0);
  Icmp(msg).set_checksum(icmp6_checksum(src, dst, msg, msg_len));
  return pad_min(out, l3 + Ipv6::kSize + msg_len);
}

size_t write_na(uint8_t* out, size_t l3, const LocalAddrs& local, const Ipv6Addr& target, const Ipv6Addr& dst,
                bool solicited) {
  uint8_t* msg = out + l3 + Ipv6::kSize;
  Icmp icmp(msg);
  icmp.set_type(kIcmp6NeighborAdvert);
  icmp.set_code(0);
  icmp.set_rest(kNaFlagOverride | (solicited ? kNaFlagSolicited : 0));
  std::memcpy(msg + kNdTargetOffset, target.data(), 16);
  uint8_t* opt = msg + kNdOptionsOffset;
  opt[0] = kNdOptTargetLinkAddr;
  opt[1] = 1;
  std::memcpy(opt + 2, local.mac.data(), 6);
  return write_icmp6(out, l3, target, dst, kNdHopLimit, kNdOptionsOffset + kNdLinkAddrOptLen);
}

HostAction on_icmp6(std::span<const uint8_t> f, const PktInfo& info, const LocalAddrs& local, bool answer,
                    uint8_t* out, size_t cap) {
  HostAction act;
  Ipv6C ip(f.data() + info.l3_off);
  const uint8_t* msg = f.data() + info.l4_off;
  const size_t len = info.l3_end - info.l4_off;
  if (len < Icmp::kSize || icmp6_checksum(ip.src(), ip.dst(), msg, len) != 0) {
    act.kind = Kind::Ignored;
    return act;
  }
  IcmpC icmp(msg);
  const IpAddr src = IpAddr::v6(ip.src());
  const bool unspecified_src = src.bytes == Ipv6Addr{};
  switch (icmp.type()) {
    case kIcmp6NeighborSolicit: {
      if (len < kNdOptionsOffset || ip.hop_limit() != kNdHopLimit) break;
      Ipv6Addr target;
      std::memcpy(target.data(), msg + kNdTargetOffset, 16);
      const bool for_us = local.owns(IpAddr::v6(target));
      if (auto mac = nd_link_option(msg, len, kNdOptSourceLinkAddr); mac && !unspecified_src) {
        act.learned = Learned{src, *mac, for_us};
      }
      if (!for_us) {
        act.kind = Kind::NotForUs;
        return act;
      }
      act.kind = Kind::NdSolicit;
      if (!answer || cap < 128) return act;
      reply_l2(out, f.data(), info, local.mac);
      // DAD probes (unspecified source) are answered to all-nodes.
      const Ipv6Addr dst = unspecified_src ? kAllNodes : ip.src();
      if (unspecified_src) Eth(out).set_dst(ipv6_multicast_mac(kAllNodes));
      act.reply_len = write_na(out, info.l3_off, local, target, dst, !unspecified_src);
      return act;
    }
    case kIcmp6NeighborAdvert: {
      if (len < kNdOptionsOffset || ip.hop_limit() != kNdHopLimit) break;
      Ipv6Addr target;
      std::memcpy(target.data(), msg + kNdTargetOffset, 16);
      if (auto mac = nd_link_option(msg, len, kNdOptTargetLinkAddr)) {
        act.learned = Learned{IpAddr::v6(target), *mac, (icmp.rest() & kNaFlagSolicited) != 0};
      }
      act.kind = Kind::NdAdvert;
      return act;
    }
    case kIcmp6EchoRequest: {
      if (!local.owns(IpAddr::v6(ip.dst()))) {
        act.kind = Kind::NotForUs;
        return act;
      }
      act.kind = Kind::Icmp6Echo;
      if (!answer || cap < info.l3_end) return act;
      reply_l2(out, f.data(), info, local.mac);
      std::memcpy(out + info.l4_off, msg, len);
      Icmp(out + info.l4_off).set_type(kIcmp6EchoReply);
      act.reply_len = write_icmp6(out, info.l3_off, ip.dst(), ip.src(), kDefaultTtl, len);
      return act;
    }
    default:
      break;
  }
  act.kind = Kind::Ignored;
  return act;
}

}  // namespace

bool LocalAddrs::owns(const IpAddr& ip) const noexcept {
  for (const IpAddr& a : ips) if (a == ip) return true;
  return false;
}

std::optional<IpAddr> LocalAddrs::source_for(const IpAddr& dst) const noexcept {
  std::optional<IpAddr> any;
  for (const IpAddr& a : ips) {
    if (a.is_v4() != dst.is_v4()) continue;
    if (dst.is_v4() || is_link_local(a) == is_link_local(dst)) return a;
    if (!any) any = a;
  }
  return any;
}

HostAction handle_host_frame(std::span<const uint8_t> frame, const PktInfo& info, const LocalAddrs& local,
                             bool answer, uint8_t* out, size_t cap) noexcept {
  switch (info.cls) {
    case FrameClass::ARP:
      return on_arp(frame, info, local, answer, out, cap);
    case FrameClass::ICMPv4:
      return on_icmp4(frame, info, local, answer, out, cap);
    case FrameClass::ICMPv6:
      return on_icmp6(frame, info, local, answer, out, cap);
    case FrameClass::RoceV2:
    case FrameClass::OtherIPv4:
    case FrameClass::OtherIPv6:
    case FrameClass::OtherEther:
    case FrameClass::Malformed:
      break;
  }
  HostAction act;
  act.kind = Kind::Ignored;
  return act;
}

size_t build_arp_request(uint8_t* out, const LocalAddrs& local, const IpAddr& src, const IpAddr& target) noexcept {
  const size_t l3 = write_l2(out, local, kBroadcastMac, kEtherTypeArp);
  Arp a(out + l3);
  a.set_ipv4_over_ethernet(kArpOpRequest);
  a.set_sha(local.mac);
  a.set_spa(src.as_v4());
  a.set_tha(MacAddr{});
  a.set_tpa(target.as_v4());
  return pad_min(out, l3 + Arp::kSize);
}

size_t build_gratuitous_arp(uint8_t* out, const LocalAddrs& local, const IpAddr& ip) noexcept {
  return build_arp_request(out, local, ip, ip);
}

size_t build_neighbor_solicit(uint8_t* out, const LocalAddrs& local, const IpAddr& src, const IpAddr& target) noexcept {
  const Ipv6Addr group = solicited_node(target.bytes);
  const size_t l3 = write_l2(out, local, ipv6_multicast_mac(group), kEtherTypeIpv6);
  uint8_t* msg = out + l3 + Ipv6::kSize;
  Icmp icmp(msg);
  icmp.set_type(kIcmp6NeighborSolicit);
  icmp.set_code(0);
  icmp.set_rest(0);
  std::memcpy(msg + kNdTargetOffset, target.bytes.data(), 16);
  uint8_t* opt = msg + kNdOptionsOffset;
  opt[0] = kNdOptSourceLinkAddr;
  opt[1] = 1;
  std::memcpy(opt + 2, local.mac.data(), 6);
  return write_icmp6(out, l3, src.bytes, group, kNdHopLimit, kNdOptionsOffset + kNdLinkAddrOptLen);
}

size_t build_unsolicited_na(uint8_t* out, const LocalAddrs& local, const IpAddr& ip) noexcept {
  const size_t l3 = write_l2(out, local, ipv6_multicast_mac(kAllNodes), kEtherTypeIpv6);
  return write_na(out, l3, local, ip.bytes, kAllNodes, false);
}

size_t build_echo_request(uint8_t* out, const LocalAddrs& local, const MacAddr& dst_mac, const IpAddr& src,
                          const IpAddr& dst, uint16_t id, uint16_t seq, std::span<const uint8_t> data) noexcept {
  const bool v4 = dst.is_v4();
  const size_t l3 = write_l2(out, local, dst_mac, v4 ? kEtherTypeIpv4 : kEtherTypeIpv6);
  const size_t msg_len = Icmp::kSize + data.size();
  // The echo request itself, the same in ICMP and ICMPv6 but for its type.
  uint8_t* msg = out + l3 + (v4 ? Ipv4::kMinSize : Ipv6::kSize);
  Icmp icmp(msg);
  icmp.set_type(v4 ? kIcmpEchoRequest : kIcmp6EchoRequest);
  icmp.set_code(0);
  icmp.set_rest((uint32_t{id} << 16) | seq);
  std::memcpy(msg + Icmp::kSize, data.data(), data.size());
  if (v4) {
    icmp.set_checksum(0);
    icmp.set_checksum(icmp4_checksum(msg, msg_len));
    Ipv4 ip(out + l3);
    ip.set_version_ihl(5);
    ip.set_tos(0);
    ip.set_total_len(static_cast<uint16_t>(Ipv4::kMinSize + msg_len));
    ip.set_id(seq);
    ip.set_flags_frag(kIpv4FlagDf);
    ip.set_ttl(kDefaultTtl);
    ip.set_protocol(kIpProtoIcmp);
    ip.set_src(src.as_v4());
    ip.set_dst(dst.as_v4());
    ip.update_checksum();
    return pad_min(out, l3 + Ipv4::kMinSize + msg_len);
  }
  return write_icmp6(out, l3, src.bytes, dst.bytes, kDefaultTtl, msg_len);
}

}  // namespace uroce::transport
