// The rule set for a policy, and its testpmd text (flow_rules.hpp).
#include "drivers/mlx5/flow_rules.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <string>
#include <vector>

namespace uroce::drivers::mlx5 {
namespace {

constexpr Ipv4Addr kIp4 = 0x0A000001;  // 10.0.0.1
constexpr Ipv4Addr kIp4b = 0x0A000002;  // 10.0.0.2
constexpr wire::Ipv6Addr kIp6 = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};  // fd00::1
// fd00::2:0:1, whose solicited-node group is that of fd00::1 (same low 24 bits).
constexpr wire::Ipv6Addr kIp6SameGroup = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1};
constexpr uint16_t kVlan = 100;

FlowPolicy sample_policy() {
  FlowPolicy p;
  p.ipv4 = {kIp4};
  p.ipv6 = {kIp6};
  p.vlan = kVlan;
  return p;
}

std::vector<std::string> texts(const FlowRuleChoice& c, uint16_t port = 0) {
  std::vector<std::string> out;
  for (const auto& r : c.rules) out.push_back(r.to_string(port));
  return out;
}

template <class Fields>
const Item<Fields>& item(const FlowRule& r, size_t i) {
  const auto* it = std::get_if<Item<Fields>>(&r.pattern.at(i));
  EXPECT_NE(it, nullptr) << "item " << i << " of " << r.to_string() << " is not the type asked for";
  static const Item<Fields> none{};
  return it != nullptr ? *it : none;
}

// ---- roce ----------------------------------------------------------------------------

TEST(RuleSet, UntaggedIpv4IsTheTestpmdExampleExactly) {
  FlowPolicy p;
  p.ipv4 = {kIp4};
  const auto set = make_rule_set(p);
  ASSERT_EQ(set.groups.size(), 1u);
  ASSERT_EQ(set.groups[0].kind, RuleKind::kRoce);
  ASSERT_EQ(set.groups[0].choices.size(), 1u);
  EXPECT_EQ(set.groups[0].choices[0].scope, Scope::kDestinationAddress);
  EXPECT_EQ(texts(set.groups[0].choices[0]),
            std::vector<std::string>{"flow create 0 ingress pattern eth / ipv4 dst is 10.0.0.1 / "
                                     "udp dst is 4791 / end actions queue index 0 / end"});
}

TEST(RuleSet, RoceRulesMatchEachAddressInsideTheVlan) {
  const auto set = make_rule_set(sample_policy());
  ASSERT_EQ(set.groups.size(), 1u) << "ARP and ND are the kernel's unless asked for";
  const auto& rules = set.groups[0].choices.at(0).rules;
  ASSERT_EQ(rules.size(), 2u);

  const FlowRule& v4 = rules[0];
  ASSERT_EQ(v4.pattern.size(), 4u);
  EXPECT_EQ(item<EthFields>(v4, 0), Item<EthFields>{}) << "eth matches any";
  EXPECT_EQ(item<VlanFields>(v4, 1).spec.tci, kVlan);
  EXPECT_EQ(item<VlanFields>(v4, 1).mask.tci, kVlanVidMask) << "the VID only, not PCP/DEI";
  EXPECT_EQ(item<VlanFields>(v4, 1).mask.inner_type, 0) << "the ipv4 item implies it";
  EXPECT_EQ(item<Ipv4Fields>(v4, 2).spec.dst, kIp4);
  EXPECT_EQ(item<Ipv4Fields>(v4, 2).mask.dst, 0xFFFFFFFFu);
  EXPECT_EQ(item<UdpFields>(v4, 3).spec.dst_port, 4791);
  EXPECT_EQ(item<UdpFields>(v4, 3).mask.dst_port, 0xFFFF);
  ASSERT_EQ(v4.actions.size(), 1u);
  EXPECT_EQ(std::get<QueueAction>(v4.actions[0]).index, 0);
  EXPECT_EQ(v4.attr, FlowAttr{});

  const FlowRule& v6 = rules[1];
  ASSERT_EQ(v6.pattern.size(), 4u);
  EXPECT_EQ(item<Ipv6Fields>(v6, 2).spec.dst, kIp6);
  EXPECT_EQ(texts(set.groups[0].choices[0]),
            (std::vector<std::string>{
                "flow create 0 ingress pattern eth / vlan vid is 100 / ipv4 dst is 10.0.0.1 / "
                "udp dst is 4791 / end actions queue index 0 / end",
                "flow create 0 ingress pattern eth / vlan vid is 100 / ipv6 dst is fd00::1 / "
                "udp dst is 4791 / end actions queue index 0 / end"}));
}

TEST(RuleSet, EveryAddressGetsARuleInPolicyOrderIpv4First) {
  FlowPolicy p;
  p.ipv6 = {kIp6};
  p.ipv4 = {kIp4b, kIp4};
  p.rx_queue = 3;
  const auto set = make_rule_set(p);
  const auto& rules = set.groups.at(0).choices.at(0).rules;
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(item<Ipv4Fields>(rules[0], 1).spec.dst, kIp4b);
  EXPECT_EQ(item<Ipv4Fields>(rules[1], 1).spec.dst, kIp4);
  EXPECT_EQ(item<Ipv6Fields>(rules[2], 1).spec.dst, kIp6);
  for (const auto& r : rules) EXPECT_EQ(std::get<QueueAction>(r.actions.at(0)).index, 3);
  EXPECT_EQ(rules[0].to_string(7),
            "flow create 7 ingress pattern eth / ipv4 dst is 10.0.0.2 / udp dst is 4791 / "
            "end actions queue index 3 / end");
}

TEST(RuleSet, OneFamilyOnlyGivesRulesForThatFamilyOnly) {
  FlowPolicy p;
  p.ipv6 = {kIp6};
  p.steer_arp = true;  // no IPv4 address: nothing to steer
  const auto set = make_rule_set(p);
  ASSERT_EQ(set.groups.size(), 1u);
  ASSERT_EQ(set.groups[0].choices.at(0).rules.size(), 1u);
  EXPECT_NE(std::get_if<Item<Ipv6Fields>>(&set.groups[0].choices[0].rules[0].pattern.at(1)), nullptr);
  EXPECT_EQ(set.find(RuleKind::kArp), nullptr);
}

TEST(RuleSet, WithoutDestinationMatchAllRoceOfBothFamilies) {
  FlowPolicy p;
  p.match_dst_ip = false;
  const auto set = make_rule_set(p);
  ASSERT_EQ(set.groups.size(), 1u);
  EXPECT_EQ(set.groups[0].choices.at(0).scope, Scope::kAll);
  EXPECT_EQ(texts(set.groups[0].choices[0]),
            (std::vector<std::string>{
                "flow create 0 ingress pattern eth / ipv4 / udp dst is 4791 / end actions queue index 0 / end",
                "flow create 0 ingress pattern eth / ipv6 / udp dst is 4791 / end actions queue index 0 / end"}));
}

// ---- arp -----------------------------------------------------------------------------

TEST(RuleSet, ArpByTargetAddressThenAllArpAsFallback) {
  auto p = sample_policy();
  p.ipv4 = {kIp4, kIp4b};
  p.steer_arp = true;
  const auto set = make_rule_set(p);
  const FlowRuleGroup* arp = set.find(RuleKind::kArp);
  ASSERT_NE(arp, nullptr);
  ASSERT_EQ(arp->choices.size(), 2u);
  EXPECT_EQ(arp->choices[0].scope, Scope::kTargetAddress);
  EXPECT_EQ(texts(arp->choices[0]),
            (std::vector<std::string>{
                "flow create 0 ingress pattern eth / vlan vid is 100 / arp_eth_ipv4 tpa is 10.0.0.1 / "
                "end actions queue index 0 / end",
                "flow create 0 ingress pattern eth / vlan vid is 100 / arp_eth_ipv4 tpa is 10.0.0.2 / "
                "end actions queue index 0 / end"}));
  EXPECT_EQ(item<ArpEthIpv4Fields>(arp->choices[0].rules[0], 2).spec.tpa, kIp4);
  EXPECT_EQ(item<ArpEthIpv4Fields>(arp->choices[0].rules[0], 2).mask.tpa, 0xFFFFFFFFu);

  EXPECT_EQ(arp->choices[1].scope, Scope::kAll);
  ASSERT_EQ(arp->choices[1].rules.size(), 1u) << "one EtherType rule serves every address";
  const auto& vlan = item<VlanFields>(arp->choices[1].rules[0], 1);
  EXPECT_EQ(vlan.spec.inner_type, 0x0806);
  EXPECT_EQ(vlan.mask.inner_type, 0xFFFF);
  EXPECT_EQ(texts(arp->choices[1]),
            std::vector<std::string>{"flow create 0 ingress pattern eth / vlan vid is 100 inner_type is 0x0806 / "
                                     "end actions queue index 0 / end"});
}

TEST(RuleSet, UntaggedArpFallbackMatchesTheEtherType) {
  FlowPolicy p;
  p.ipv4 = {kIp4};
  p.steer_arp = true;
  const auto set = make_rule_set(p);
  const FlowRuleGroup* arp = set.find(RuleKind::kArp);
  ASSERT_NE(arp, nullptr);
  ASSERT_EQ(arp->choices.size(), 2u);
  EXPECT_EQ(item<EthFields>(arp->choices[1].rules.at(0), 0), (Item<EthFields>{{0x0806}, {0xFFFF}}));
  EXPECT_EQ(arp->choices[1].rules[0].to_string(),
            "flow create 0 ingress pattern eth type is 0x0806 / end actions queue index 0 / end");
}

TEST(RuleSet, NoCoarseFallbackLeavesTheExactChoiceOnly) {
  auto p = sample_policy();
  p.steer_arp = true;
  p.steer_nd = true;
  p.coarse_fallback = false;
  const auto set = make_rule_set(p);
  ASSERT_NE(set.find(RuleKind::kArp), nullptr);
  ASSERT_EQ(set.find(RuleKind::kArp)->choices.size(), 1u);
  EXPECT_EQ(set.find(RuleKind::kArp)->choices[0].scope, Scope::kTargetAddress);
  ASSERT_NE(set.find(RuleKind::kNd), nullptr);
  ASSERT_EQ(set.find(RuleKind::kNd)->choices.size(), 1u);
  EXPECT_EQ(set.find(RuleKind::kNd)->choices[0].scope, Scope::kTargetAddress);
}

TEST(RuleSet, WithoutDestinationMatchAllArpAndAllNd) {
  FlowPolicy p;
  p.match_dst_ip = false;
  p.steer_arp = true;
  p.steer_nd = true;
  const auto set = make_rule_set(p);
  ASSERT_EQ(set.groups.size(), 3u);
  ASSERT_EQ(set.find(RuleKind::kArp)->choices.size(), 1u);
  EXPECT_EQ(set.find(RuleKind::kArp)->choices[0].scope, Scope::kAll);
  ASSERT_EQ(set.find(RuleKind::kNd)->choices.size(), 1u);
  EXPECT_EQ(texts(set.find(RuleKind::kNd)->choices[0]),
            (std::vector<std::string>{
                "flow create 0 ingress pattern eth / ipv6 / icmp6 type is 135 / end actions queue index 0 / end",
                "flow create 0 ingress pattern eth / ipv6 / icmp6 type is 136 / end actions queue index 0 / end"}));
}

// ---- nd ------------------------------------------------------------------------------

TEST(RuleSet, NdByTargetThenByDestination) {
  auto p = sample_policy();
  p.steer_nd = true;
  const auto set = make_rule_set(p);
  const FlowRuleGroup* nd = set.find(RuleKind::kNd);
  ASSERT_NE(nd, nullptr);
  ASSERT_EQ(nd->choices.size(), 2u);
  EXPECT_EQ(nd->choices[0].scope, Scope::kTargetAddress);
  EXPECT_EQ(texts(nd->choices[0]),
            (std::vector<std::string>{
                "flow create 0 ingress pattern eth / vlan vid is 100 / ipv6 / icmp6_nd_ns target_addr is fd00::1 / "
                "end actions queue index 0 / end",
                "flow create 0 ingress pattern eth / vlan vid is 100 / ipv6 dst is fd00::1 / icmp6 type is 136 / "
                "end actions queue index 0 / end"}));
  EXPECT_EQ(item<Icmp6NdNsFields>(nd->choices[0].rules[0], 3).spec.target, kIp6);

  EXPECT_EQ(nd->choices[1].scope, Scope::kDestinationAddress);
  EXPECT_EQ(texts(nd->choices[1]),
            (std::vector<std::string>{
                "flow create 0 ingress pattern eth / vlan vid is 100 / ipv6 dst is ff02::1:ff00:1 / icmp6 type is 135 / "
                "end actions queue index 0 / end",
                "flow create 0 ingress pattern eth / vlan vid is 100 / ipv6 dst is fd00::1 / icmp6 type is 135 / "
                "end actions queue index 0 / end",
                "flow create 0 ingress pattern eth / vlan vid is 100 / ipv6 dst is fd00::1 / icmp6 type is 136 / "
                "end actions queue index 0 / end"}));
}

TEST(RuleSet, NdSolicitedNodeGroupSharedByTwoAddressesGetsOneRule) {
  FlowPolicy p;
  p.ipv6 = {kIp6, kIp6SameGroup};
  p.steer_nd = true;
  const auto set = make_rule_set(p);
  const auto& by_dst = set.find(RuleKind::kNd)->choices.at(1);
  ASSERT_EQ(by_dst.rules.size(), 5u) << "one group rule, then NS and NA for each address";
  int group_rules = 0;
  for (const auto& r : by_dst.rules) {
    if (r.to_string().find("ff02::1:ff00:1") != std::string::npos) ++group_rules;
  }
  EXPECT_EQ(group_rules, 1);
}

// ---- the set as text -------------------------------------------------------------------

TEST(RuleSet, SetTextListsEveryChoiceUnderComments) {
  auto p = sample_policy();
  p.steer_arp = true;
  const std::string text = make_rule_set(p).to_string(1);
  EXPECT_EQ(text,
            "# roce: destination address\n"
            "flow create 1 ingress pattern eth / vlan vid is 100 / ipv4 dst is 10.0.0.1 / udp dst is 4791 / "
            "end actions queue index 0 / end\n"
            "flow create 1 ingress pattern eth / vlan vid is 100 / ipv6 dst is fd00::1 / udp dst is 4791 / "
            "end actions queue index 0 / end\n"
            "# arp: target address\n"
            "flow create 1 ingress pattern eth / vlan vid is 100 / arp_eth_ipv4 tpa is 10.0.0.1 / "
            "end actions queue index 0 / end\n"
            "# arp: all (fallback: instead of the rules above, if the PMD rejects one of them)\n"
            "flow create 1 ingress pattern eth / vlan vid is 100 inner_type is 0x0806 / "
            "end actions queue index 0 / end\n");
}

TEST(RuleText, AttributesAndPartialMasks) {
  FlowRule r;
  r.attr = {2, 1};
  Item<VlanFields> whole_tci{{0x2064, 0}, {0xFFFF, 0}};
  Item<Ipv4Fields> subnet{{0x0A000000}, {0xFFFFFF00}};
  r.pattern = {Item<EthFields>{}, whole_tci, subnet};
  r.actions = {QueueAction{5}};
  EXPECT_EQ(r.to_string(),
            "flow create 0 group 2 priority 1 ingress pattern eth / vlan tci is 0x2064 / "
            "ipv4 dst spec 10.0.0.0 dst mask 255.255.255.0 / end actions queue index 5 / end");
}

TEST(RuleText, Addresses) {
  EXPECT_EQ(ipv4_to_string(0xC0A80101), "192.168.1.1");
  EXPECT_EQ(ipv4_to_string(0), "0.0.0.0");
  EXPECT_EQ(ipv6_to_string(kIp6), "fd00::1");
  EXPECT_EQ(ipv6_to_string(wire::Ipv6Addr{}), "::");
  EXPECT_EQ(ipv6_to_string({0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10}), "2001:db8:1::10");
}

// ---- policy checks -----------------------------------------------------------------------

TEST(Policy, SampleIsValid) { EXPECT_TRUE(check_policy(sample_policy()).ok()); }

TEST(Policy, VlanAbove4094IsRefused) {
  auto p = sample_policy();
  p.vlan = kMaxVlanId;
  EXPECT_TRUE(check_policy(p).ok());
  p.vlan = kMaxVlanId + 1;
  const auto st = check_policy(p);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, EINVAL);
  EXPECT_EQ(st.error().message, "vlan: 4095 is above 4094");
}

TEST(Policy, MatchingDestinationsNeedsAnAddress) {
  FlowPolicy p;
  const auto st = check_policy(p);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, EINVAL);
  EXPECT_NE(st.error().message.find("no address"), std::string::npos) << st.error().message;
  p.match_dst_ip = false;
  EXPECT_TRUE(check_policy(p).ok());
}

TEST(Policy, AnAddressListedTwiceIsRefused) {
  auto p = sample_policy();
  p.ipv4 = {kIp4, kIp4b, kIp4};
  auto st = check_policy(p);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "ipv4: 10.0.0.1 is listed twice");
  p = sample_policy();
  p.ipv6 = {kIp6, kIp6};
  st = check_policy(p);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().message, "ipv6: fd00::1 is listed twice");
}

TEST(Policy, Ipv4MappedIpv6IsRefused) {
  FlowPolicy p;
  p.ipv6 = {wire::Ipv6Addr{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}};
  const auto st = check_policy(p);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, EINVAL);
  EXPECT_EQ(st.error().message, "ipv6: ::ffff:10.0.0.1 is IPv4-mapped: list it as IPv4");
}

}  // namespace
}  // namespace uroce::drivers::mlx5
