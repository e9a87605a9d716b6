// ConnectX (mlx5 PMD), bifurcated model: the rte_flow rules that steer
// uroce's own traffic to its RX queue while the kernel netdev keeps the rest.
//
// This header is the description only: plain values, no DPDK, no I/O.  Unit
// tests inspect every rule, and FlowRule::to_string prints it in
// dpdk-testpmd's `flow create` syntax so that it can be tried by hand on real
// hardware.  flow_apply.hpp turns the rules into rte_flow arrays and installs
// them on a port in flow isolation mode.
//
// What is steered (README.md in this folder has the reasoning):
//   roce  UDP destination port 4791 to each of our addresses (IPv4, IPv6),
//         inside our VLAN when there is one.  Always.
//   arp   only with FlowPolicy::steer_arp: ARP whose target protocol address
//         is ours, else (PMD cannot match it, coarse_fallback) all ARP.
//   nd    only with FlowPolicy::steer_nd: neighbour solicitations for our
//         addresses and advertisements sent to them.
// Everything else stays with the kernel.  A frame a rule matches goes to
// uroce only: mlx5 (DPDK 22.11) cannot hand it to the kernel as well.  So
// ARP/ND are left to the kernel by default, which answers them for the
// addresses it shares with uroce; steer them only when uroce's addresses
// are not the kernel's (then nobody else answers for them).
//
// A group of rules may offer several choices, best first: the installer
// takes the first one whose every rule the PMD validates.  That is how the
// exact ARP match falls back to EtherType only on a PMD without
// RTE_FLOW_ITEM_TYPE_ARP_ETH_IPV4.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "drivers/result.hpp"
#include "lib/wire/ipv6.hpp"

namespace uroce::drivers::mlx5 {

// An IPv4 address in host order, as lib/wire's Ipv4 and Arp views return
// it: 10.0.0.1 is 0x0A000001.
using Ipv4Addr = uint32_t;

inline constexpr uint16_t kMaxVlanId = 4094;     // 802.1Q: 4095 is reserved
inline constexpr uint16_t kVlanVidMask = 0x0FFF;  // the VID bits of the TCI

// ---- policy ------------------------------------------------------------------

struct FlowPolicy {
  std::vector<Ipv4Addr> ipv4;        // the device's own addresses
  std::vector<wire::Ipv6Addr> ipv6;
  std::optional<uint16_t> vlan;      // 802.1Q VID 0..kMaxVlanId; unset: untagged
  uint16_t rx_queue = 0;             // where every rule sends its frames

  // Steer ARP for our IPv4 addresses to uroce (the kernel no longer sees
  // it).  Only when the kernel netdev does not own those addresses.
  bool steer_arp = false;
  // Steer IPv6 neighbour discovery (ICMPv6 135/136) for our IPv6
  // addresses to uroce; the same condition as steer_arp.
  bool steer_nd = false;
  // true: match our addresses (ARP/ND: the target or destination address).
  // false: every RoCEv2 frame, and with steer_arp/steer_nd every ARP/ND
  // frame, on the port (or VLAN): a port given to uroce entirely.
  bool match_dst_ip = true;
  // When the PMD cannot match the ARP/ND target address, fall back to a
  // coarser rule: ARP by EtherType only (every ARP frame), NS by the
  // solicited-node group (which also takes NS for the kernel's addresses
  // in that group, such as a link-local with the same interface ID).
  // false: such a PMD fails the install instead.
  bool coarse_fallback = true;
};

// Why `policy` cannot be turned into rules, or ok: a VLAN id above
// kMaxVlanId, an address listed twice, or match_dst_ip with no address.
// Every error's code is EINVAL.
Status check_policy(const FlowPolicy& policy);

// ---- pattern items: spec and mask as plain values ------------------------------
// Only the fields uroce matches on.  Values are in host order; a field whose
// mask is zero is not matched.  An item whose mask is all zero matches any
// header of its protocol (testpmd: the bare item name).

struct EthFields {
  uint16_t ether_type = 0;
  friend bool operator==(const EthFields&, const EthFields&) = default;
};

struct VlanFields {
  uint16_t tci = 0;         // PCP, DEI and VID; uroce masks the VID
  uint16_t inner_type = 0;  // the EtherType after the tag
  friend bool operator==(const VlanFields&, const VlanFields&) = default;
};

struct Ipv4Fields {
  Ipv4Addr dst = 0;
  friend bool operator==(const Ipv4Fields&, const Ipv4Fields&) = default;
};

struct Ipv6Fields {
  wire::Ipv6Addr dst{};
  friend bool operator==(const Ipv6Fields&, const Ipv6Fields&) = default;
};

struct UdpFields {
  uint16_t dst_port = 0;
  friend bool operator==(const UdpFields&, const UdpFields&) = default;
};

struct ArpEthIpv4Fields {
  Ipv4Addr tpa = 0;  // target protocol address
  friend bool operator==(const ArpEthIpv4Fields&, const ArpEthIpv4Fields&) = default;
};

struct Icmp6Fields {
  uint8_t type = 0;
  friend bool operator==(const Icmp6Fields&, const Icmp6Fields&) = default;
};

struct Icmp6NdNsFields {
  wire::Ipv6Addr target{};
  friend bool operator==(const Icmp6NdNsFields&, const Icmp6NdNsFields&) = default;
};

template <class Fields>
struct Item {
  Fields spec{};
  Fields mask{};
  friend bool operator==(const Item&, const Item&) = default;
};

// One alternative per rte_flow item type uroce uses.
using PatternItem = std::variant<Item<EthFields>, Item<VlanFields>, Item<Ipv4Fields>,
                                 Item<Ipv6Fields>, Item<UdpFields>, Item<ArpEthIpv4Fields>,
                                 Item<Icmp6Fields>, Item<Icmp6NdNsFields>>;

// testpmd syntax: "ipv4 dst is 10.0.0.1", "vlan vid is 100", "eth".
std::string to_string(const PatternItem& item);

// ---- actions ---------------------------------------------------------------------

struct QueueAction {
  uint16_t index = 0;
  friend bool operator==(const QueueAction&, const QueueAction&) = default;
};

// One alternative per rte_flow action type uroce uses.
using FlowAction = std::variant<QueueAction>;

// ---- rules -----------------------------------------------------------------------

struct FlowAttr {  // always ingress
  uint32_t group = 0;
  uint32_t priority = 0;
  friend bool operator==(const FlowAttr&, const FlowAttr&) = default;
};

struct FlowRule {
  FlowAttr attr;
  std::vector<PatternItem> pattern;  // outermost first; END is implied
  std::vector<FlowAction> actions;   // END is implied

  // testpmd syntax, e.g. "flow create 0 ingress pattern eth / ipv4 dst is
  // 10.0.0.1 / udp dst is 4791 / end actions queue index 0 / end".
  std::string to_string(uint16_t port_id = 0) const;
  friend bool operator==(const FlowRule&, const FlowRule&) = default;
};

enum class RuleKind : uint8_t {
  kRoce,  // UDP destination port 4791
  kArp,   // EtherType 0x0806
  kNd,    // ICMPv6 neighbour solicitation (135) and advertisement (136)
};

enum class Scope : uint8_t {
  kTargetAddress,       // ARP target / ND target address is ours
  kDestinationAddress,  // IP destination is ours (NS: or our solicited-node group)
  kAll,                 // every frame of the kind, on the port or VLAN
};

std::string_view to_string(RuleKind kind) noexcept;
std::string_view to_string(Scope scope) noexcept;

struct FlowRuleChoice {
  Scope scope = Scope::kDestinationAddress;
  std::vector<FlowRule> rules;
};

// The rules for one kind of traffic; `choices` best first (see the top).
struct FlowRuleGroup {
  RuleKind kind = RuleKind::kRoce;
  std::vector<FlowRuleChoice> choices;
};

struct FlowRuleSet {
  std::vector<FlowRuleGroup> groups;  // roce, then arp and nd when asked for

  const FlowRuleGroup* find(RuleKind kind) const noexcept;
  // Every rule of every choice, as testpmd commands, one per line, each
  // group and choice introduced by a '#' comment (testpmd skips those):
  // paste the first choice of each group, or a fallback instead of it.
  std::string to_string(uint16_t port_id = 0) const;
};

// The rules for `policy`.  Pure.  `policy` must pass check_policy (asserted).
FlowRuleSet make_rule_set(const FlowPolicy& policy);

// "10.0.0.1"; "fd00::1" (RFC 5952, as inet_ntop writes it; testpmd reads both).
std::string ipv4_to_string(Ipv4Addr addr);
std::string ipv6_to_string(const wire::Ipv6Addr& addr);

}  // namespace uroce::drivers::mlx5
