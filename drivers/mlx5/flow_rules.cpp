// The rule set for a FlowPolicy, and its testpmd text (flow_rules.hpp).
#include "drivers/mlx5/flow_rules.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <utility>

#include "lib/wire/eth.hpp"
#include "lib/wire/icmp.hpp"
#include "lib/wire/udp.hpp"

namespace uroce::drivers::mlx5 {
namespace {

constexpr uint8_t kFull8 = 0xFF;
constexpr uint16_t kFull16 = 0xFFFF;
constexpr uint32_t kFull32 = 0xFFFFFFFF;
constexpr wire::Ipv6Addr kFullIpv6 = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                      0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
// ::ffff:0:0/96 (RFC 4291 2.5.5.2): an IPv4 address written as IPv6.

// ---- items -----------------------------------------------------------------------

Item<EthFields> eth(uint16_t ether_type) {
  return ether_type == 0 ? Item<EthFields>{} : Item<EthFields>{{ether_type}, {kFull16}};
}

Item<VlanFields> vlan(uint16_t vid, uint16_t inner_type) {
  Item<VlanFields> v{{vid, inner_type}, {kVlanVidMask, 0}};
  if (inner_type != 0) v.mask.inner_type = kFull16;
  return v;
}

Item<Ipv4Fields> ipv4_dst(Ipv4Addr a) { return {{a}, {kFull32}}; }
Item<Ipv6Fields> ipv6_dst(const wire::Ipv6Addr& a) { return {{a}, {kFullIpv6}}; }
Item<UdpFields> udp_dst(uint16_t port) { return {{port}, {kFull16}}; }
Item<ArpEthIpv4Fields> arp_tpa(Ipv4Addr a) { return {{a}, {kFull32}}; }
Item<Icmp6Fields> icmp6_type(uint8_t type) { return {{type}, {kFull8}}; }
Item<Icmp6NdNsFields> nd_ns_target(const wire::Ipv6Addr& a) { return {{a}, {kFullIpv6}}; }

// eth [/ vlan]: the Ethernet part of every rule.  `ether_type` (0: any;
// the next item implies it) is that of the payload, so it goes in the VLAN
// tag when there is one.
std::vector<PatternItem> l2(const FlowPolicy& p, uint16_t ether_type = 0) {
  if (!p.vlan) return {eth(ether_type)};
  return {eth(0), vlan(*p.vlan, ether_type)};
}

FlowRule rule(const FlowPolicy& p, std::vector<PatternItem> pattern) {
  return FlowRule{{}, std::move(pattern), {QueueAction{p.rx_queue}}};
}

template <class... Items>
FlowRule rule(const FlowPolicy& p, std::vector<PatternItem> prefix, Items&&... items) {
  (prefix.emplace_back(std::forward<Items>(items)), ...);
  return rule(p, std::move(prefix));
}

// ---- groups ----------------------------------------------------------------------

FlowRuleGroup roce_group(const FlowPolicy& p) {
  const auto udp = udp_dst(wire::kRoceV2Port);
  FlowRuleChoice c{p.match_dst_ip ? Scope::kDestinationAddress : Scope::kAll, {}};
  if (p.match_dst_ip) {
    for (Ipv4Addr a : p.ipv4) c.rules.push_back(rule(p, l2(p), ipv4_dst(a), udp));
    for (const auto& a : p.ipv6) c.rules.push_back(rule(p, l2(p), ipv6_dst(a), udp));
  } else {
    c.rules.push_back(rule(p, l2(p), Item<Ipv4Fields>{}, udp));
    c.rules.push_back(rule(p, l2(p), Item<Ipv6Fields>{}, udp));
  }
  return {RuleKind::kRoce, {std::move(c)}};
}

FlowRuleChoice all_arp(const FlowPolicy& p) {
  return {Scope::kAll, {rule(p, l2(p, wire::kEtherTypeArp))}};
}

FlowRuleGroup arp_group(const FlowPolicy& p) {
  FlowRuleGroup g{RuleKind::kArp, {}};
  if (p.match_dst_ip) {
    FlowRuleChoice exact{Scope::kTargetAddress, {}};
    for (Ipv4Addr a : p.ipv4) exact.rules.push_back(rule(p, l2(p), arp_tpa(a)));
    g.choices.push_back(std::move(exact));
    if (p.coarse_fallback) g.choices.push_back(all_arp(p));
  } else {
    g.choices.push_back(all_arp(p));
  }
  return g;
}

// NS whose target is ours (any destination: solicited-node group or, for
// reachability probes, our unicast address) and NA sent to us.
FlowRuleChoice nd_by_target(const FlowPolicy& p) {
  FlowRuleChoice c{Scope::kTargetAddress, {}};
  for (const auto& a : p.ipv6) {
    c.rules.push_back(rule(p, l2(p), Item<Ipv6Fields>{}, nd_ns_target(a)));
    c.rules.push_back(rule(p, l2(p), ipv6_dst(a), icmp6_type(wire::kIcmp6NeighborAdvert)));
  }
  return c;
}

// The same by IPv6 destination: NS to our solicited-node groups (each
// group once) and to our addresses, NA to our addresses.
FlowRuleChoice nd_by_destination(const FlowPolicy& p) {
  FlowRuleChoice c{Scope::kDestinationAddress, {}};
  std::vector<wire::Ipv6Addr> groups;
  for (const auto& a : p.ipv6) {
    const auto group = wire::solicited_node(a);
    if (std::find(groups.begin(), groups.end(), group) == groups.end()) {
      groups.push_back(group);
      c.rules.push_back(rule(p, l2(p), ipv6_dst(group), icmp6_type(wire::kIcmp6NeighborSolicit)));
    }
    c.rules.push_back(rule(p, l2(p), ipv6_dst(a), icmp6_type(wire::kIcmp6NeighborSolicit)));
    c.rules.push_back(rule(p, l2(p), ipv6_dst(a), icmp6_type(wire::kIcmp6NeighborAdvert)));
  }
  return c;
}

FlowRuleChoice all_nd(const FlowPolicy& p) {
  FlowRuleChoice c{Scope::kAll, {}};
  for (uint8_t type : {wire::kIcmp6NeighborSolicit, wire::kIcmp6NeighborAdvert}) {
    c.rules.push_back(rule(p, l2(p), Item<Ipv6Fields>{}, icmp6_type(type)));
  }
  return c;
}

FlowRuleGroup nd_group(const FlowPolicy& p) {
  FlowRuleGroup g{RuleKind::kNd, {}};
  if (p.match_dst_ip) {
    g.choices.push_back(nd_by_target(p));
    if (p.coarse_fallback) g.choices.push_back(nd_by_destination(p));
  } else {
    g.choices.push_back(all_nd(p));
  }
  return g;
}

// ---- testpmd text ------------------------------------------------------------------

std::string hex16(uint16_t v) {
  char buf[sizeof "0xffff"];
  std::snprintf(buf, sizeof buf, "0x%04x", v);
  return buf;
}

// " name is V" for a field matched exactly, " name spec V name mask M" for
// one matched in part, nothing for one not matched.
template <class T, class Format>
void append_field(std::string& out, std::string_view name, const T& spec, const T& mask, const T& full,
                  Format format) {
  if (mask == T{}) return;
  out += ' ';
  out += name;
  if (mask == full) {
    out += " is ";
    out += format(spec);
    return;
  }
  out += " spec ";
  out += format(spec);
  out += ' ';
  out += name;
  out += " mask ";
  out += format(mask);
}

std::string decimal(unsigned v) { return std::to_string(v); }

void append_item(std::string& out, const Item<EthFields>& it) {
  out += "eth";
  append_field(out, "type", it.spec.ether_type, it.mask.ether_type, kFull16, hex16);
}

void append_item(std::string& out, const Item<VlanFields>& it) {
  out += "vlan";
  if (it.mask.tci == kVlanVidMask) {
    out += " vid is " + decimal(it.spec.tci & kVlanVidMask);
  } else {
    append_field(out, "tci", it.spec.tci, it.mask.tci, kFull16, hex16);
  }
  append_field(out, "inner_type", it.spec.inner_type, it.mask.inner_type, kFull16, hex16);
}

void append_item(std::string& out, const Item<Ipv4Fields>& it) {
  out += "ipv4";
  append_field(out, "dst", it.spec.dst, it.mask.dst, kFull32, ipv4_to_string);
}

void append_item(std::string& out, const Item<Ipv6Fields>& it) {
  out += "ipv6";
  append_field(out, "dst", it.spec.dst, it.mask.dst, kFullIpv6, ipv6_to_string);
}

void append_item(std::string& out, const Item<UdpFields>& it) {
  out += "udp";
  append_field(out, "dst", it.spec.dst_port, it.mask.dst_port, kFull16, decimal);
}

void append_item(std::string& out, const Item<ArpEthIpv4Fields>& it) {
  out += "arp_eth_ipv4";
  append_field(out, "tpa", it.spec.tpa, it.mask.tpa, kFull32, ipv4_to_string);
}

void append_item(std::string& out, const Item<Icmp6Fields>& it) {
  out += "icmp6";
  append_field(out, "type", it.spec.type, it.mask.type, kFull8, decimal);
}

void append_item(std::string& out, const Item<Icmp6NdNsFields>& it) {
  out += "icmp6_nd_ns";
  append_field(out, "target_addr", it.spec.target, it.mask.target, kFullIpv6, ipv6_to_string);
}

void append_action(std::string& out, const QueueAction& a) {
  out += "queue index " + decimal(a.index);
}

template <class T>
Status duplicate_error(std::string_view list, const std::vector<T>& addrs,
                       std::string (*format)(T)) {
  for (auto it = addrs.begin(); it != addrs.end(); ++it) {
    if (std::find(addrs.begin(), it, *it) != it) {
      return Error{EINVAL, std::string(list) + ": " + format(*it) + " is listed twice"};
    }
  }
  return {};
}

std::string ipv6_text(wire::Ipv6Addr a) { return ipv6_to_string(a); }

}  // namespace

Status check_policy(const FlowPolicy& p) {
  if (p.vlan && *p.vlan > kMaxVlanId) {
    return Error{EINVAL, "vlan: " + std::to_string(*p.vlan) + " is above " + std::to_string(kMaxVlanId)};
  }
  if (p.match_dst_ip && p.ipv4.empty() && p.ipv6.empty()) {
    return Error{EINVAL, "no address to match: match_dst_ip needs an IPv4 or IPv6 address"};
  }
  for (const auto& a : p.ipv6) {
    if (wire::is_ipv4_mapped(a)) {
      return Error{EINVAL, "ipv6: " + ipv6_to_string(a) + " is IPv4-mapped: list it as IPv4"};
    }
  }
  if (auto st = duplicate_error<Ipv4Addr>("ipv4", p.ipv4, ipv4_to_string); !st) return st;
  return duplicate_error<wire::Ipv6Addr>("ipv6", p.ipv6, ipv6_text);
}

FlowRuleSet make_rule_set(const FlowPolicy& policy) {
  assert(check_policy(policy).ok());
  FlowRuleSet set;
  set.groups.push_back(roce_group(policy));
  if (policy.steer_arp && (!policy.match_dst_ip || !policy.ipv4.empty())) {
    set.groups.push_back(arp_group(policy));
  }
  if (policy.steer_nd && (!policy.match_dst_ip || !policy.ipv6.empty())) {
    set.groups.push_back(nd_group(policy));
  }
  // An address family with no address leaves the roce choice short, never
  // empty: check_policy asked for at least one address.
  return set;
}

std::string FlowRule::to_string(uint16_t port_id) const {
  std::string out = "flow create " + std::to_string(port_id);
  if (attr.group != 0) out += " group " + std::to_string(attr.group);
  if (attr.priority != 0) out += " priority " + std::to_string(attr.priority);
  out += " ingress pattern ";
  for (const auto& item : pattern) out += mlx5::to_string(item) + " / ";
  out += "end actions ";
  for (const auto& action : actions) {
    std::visit([&out](const auto& a) { append_action(out, a); }, action);
    out += " / ";
  }
  out += "end";
  return out;
}

std::string to_string(const PatternItem& item) {
  std::string out;
  std::visit([&out](const auto& it) { append_item(out, it); }, item);
  return out;
}

const FlowRuleGroup* FlowRuleSet::find(RuleKind kind) const noexcept {
  for (const auto& g : groups) {
    if (g.kind == kind) return &g;
  }
  return nullptr;
}

std::string FlowRuleSet::to_string(uint16_t port_id) const {
  std::string out;
  for (const auto& g : groups) {
    for (size_t i = 0; i < g.choices.size(); ++i) {
      out += "# ";
      out += mlx5::to_string(g.kind);
      out += ": ";
      out += mlx5::to_string(g.choices[i].scope);
      if (i > 0) out += " (fallback: instead of the rules above, if the PMD rejects one of them)";
      out += '\n';
      for (const auto& r : g.choices[i].rules) out += r.to_string(port_id) + '\n';
    }
  }
  return out;
}

std::string_view to_string(RuleKind kind) noexcept {
  switch (kind) {
    case RuleKind::kRoce: return "roce";
    case RuleKind::kArp: return "arp";
    case RuleKind::kNd: return "nd";
  }
  return "?";
}

std::string_view to_string(Scope scope) noexcept {
  switch (scope) {
    case Scope::kTargetAddress: return "target address";
    case Scope::kDestinationAddress: return "destination address";
    case Scope::kAll: return "all";
  }
  return "?";
}

std::string ipv4_to_string(Ipv4Addr a) {
  return std::to_string(a >> 24) + '.' + std::to_string((a >> 16) & 0xFF) + '.' +
         std::to_string((a >> 8) & 0xFF) + '.' + std::to_string(a & 0xFF);
}

std::string ipv6_to_string(const wire::Ipv6Addr& a) {
  char buf[INET6_ADDRSTRLEN];
  const char* s = inet_ntop(AF_INET6, a.data(), buf, sizeof buf);
  assert(s != nullptr);  // only fails for a short buffer or a bad family
  return s;
}

}  // namespace uroce::drivers::mlx5
