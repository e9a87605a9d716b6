// FlowRule → rte_flow arrays, and installing through a stand-in PMD:
// fallback, rollback, errors.  No EAL, no hardware.
#include "drivers/mlx5/flow_apply.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "drivers/mlx5/tests/fake_flow_api.hpp"

namespace uroce::drivers::mlx5 {
namespace {

using testing::FakePmd;

constexpr Ipv4Addr kIp4 = 0x0A000001;  // 10.0.0.1
constexpr wire::Ipv6Addr kIp6 = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};  // fd00::1
constexpr uint16_t kPort = 3;

FlowPolicy sample_policy() {
  FlowPolicy p;
  p.ipv4 = {kIp4};
  p.ipv6 = {kIp6};
  p.vlan = 100;
  p.rx_queue = 2;
  return p;
}

const FlowRule& first_rule(const FlowRuleSet& set, RuleKind kind, size_t choice = 0, size_t rule = 0) {
  const FlowRuleGroup* g = set.find(kind);
  EXPECT_NE(g, nullptr);
  return g->choices.at(choice).rules.at(rule);
}

template <size_t N>
std::array<uint8_t, N> bytes_of(const void* p) {
  std::array<uint8_t, N> out{};
  std::memcpy(out.data(), p, N);
  return out;
}

// True when every byte of `obj` is zero.
template <class T>
bool all_zero(const T& obj) {
  const auto* p = reinterpret_cast<const uint8_t*>(&obj);
  for (size_t i = 0; i < sizeof obj; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

// ---- translation -----------------------------------------------------------------------

TEST(Translate, RoceIpv4RuleInAVlan) {
  const auto set = make_rule_set(sample_policy());
  const RteFlowRule c(first_rule(set, RuleKind::kRoce));

  EXPECT_EQ(c.attr().ingress, 1u);
  EXPECT_EQ(c.attr().egress, 0u);
  EXPECT_EQ(c.attr().transfer, 0u);
  EXPECT_EQ(c.attr().group, 0u);
  EXPECT_EQ(c.attr().priority, 0u);

  ASSERT_EQ(c.pattern_size(), 4u);
  const rte_flow_item* items = c.pattern();
  EXPECT_EQ(items[0].type, RTE_FLOW_ITEM_TYPE_ETH);
  EXPECT_EQ(items[1].type, RTE_FLOW_ITEM_TYPE_VLAN);
  EXPECT_EQ(items[2].type, RTE_FLOW_ITEM_TYPE_IPV4);
  EXPECT_EQ(items[3].type, RTE_FLOW_ITEM_TYPE_UDP);
  EXPECT_EQ(items[4].type, RTE_FLOW_ITEM_TYPE_END);
  for (size_t i = 0; i <= c.pattern_size(); ++i) EXPECT_EQ(items[i].last, nullptr) << i;

  // eth: any Ethernet header.
  EXPECT_EQ(items[0].spec, nullptr);
  EXPECT_EQ(items[0].mask, nullptr);

  // vlan: VID 100 under mask 0x0fff, nothing else.
  ASSERT_NE(items[1].spec, nullptr);
  ASSERT_NE(items[1].mask, nullptr);
  const auto* vspec = static_cast<const rte_flow_item_vlan*>(items[1].spec);
  const auto* vmask = static_cast<const rte_flow_item_vlan*>(items[1].mask);
  EXPECT_EQ(bytes_of<2>(&vspec->hdr.vlan_tci), (std::array<uint8_t, 2>{0x00, 0x64}));
  EXPECT_EQ(bytes_of<2>(&vmask->hdr.vlan_tci), (std::array<uint8_t, 2>{0x0f, 0xff}));
  EXPECT_EQ(vmask->hdr.eth_proto, 0);
  EXPECT_EQ(vmask->has_more_vlan, 0u);

  // ipv4: destination 10.0.0.1, exactly; every other field unmatched.
  ASSERT_NE(items[2].spec, nullptr);
  const auto* ispec = static_cast<const rte_flow_item_ipv4*>(items[2].spec);
  const auto* imask = static_cast<const rte_flow_item_ipv4*>(items[2].mask);
  EXPECT_EQ(bytes_of<4>(&ispec->hdr.dst_addr), (std::array<uint8_t, 4>{10, 0, 0, 1}));
  EXPECT_EQ(bytes_of<4>(&imask->hdr.dst_addr), (std::array<uint8_t, 4>{0xff, 0xff, 0xff, 0xff}));
  rte_flow_item_ipv4 rest = *imask;
  rest.hdr.dst_addr = 0;
  EXPECT_TRUE(all_zero(rest)) << "the mask matches the destination only";
  rest = *ispec;
  rest.hdr.dst_addr = 0;
  EXPECT_TRUE(all_zero(rest));

  // udp: destination port 4791 (0x12b7).
  const auto* uspec = static_cast<const rte_flow_item_udp*>(items[3].spec);
  const auto* umask = static_cast<const rte_flow_item_udp*>(items[3].mask);
  EXPECT_EQ(bytes_of<2>(&uspec->hdr.dst_port), (std::array<uint8_t, 2>{0x12, 0xb7}));
  EXPECT_EQ(bytes_of<2>(&umask->hdr.dst_port), (std::array<uint8_t, 2>{0xff, 0xff}));
  EXPECT_EQ(umask->hdr.src_port, 0);
  EXPECT_EQ(umask->hdr.dgram_cksum, 0);

  ASSERT_EQ(c.actions_size(), 1u);
  EXPECT_EQ(c.actions()[0].type, RTE_FLOW_ACTION_TYPE_QUEUE);
  ASSERT_NE(c.actions()[0].conf, nullptr);
  EXPECT_EQ(static_cast<const rte_flow_action_queue*>(c.actions()[0].conf)->index, 2);
  EXPECT_EQ(c.actions()[1].type, RTE_FLOW_ACTION_TYPE_END);
  EXPECT_EQ(c.actions()[1].conf, nullptr);
}

TEST(Translate, RoceIpv6Rule) {
  FlowPolicy p;
  p.ipv6 = {kIp6};
  const auto set = make_rule_set(p);
  const RteFlowRule c(first_rule(set, RuleKind::kRoce));
  ASSERT_EQ(c.pattern_size(), 3u);
  EXPECT_EQ(c.pattern()[1].type, RTE_FLOW_ITEM_TYPE_IPV6);
  const auto* spec = static_cast<const rte_flow_item_ipv6*>(c.pattern()[1].spec);
  const auto* mask = static_cast<const rte_flow_item_ipv6*>(c.pattern()[1].mask);
  EXPECT_EQ(0, std::memcmp(spec->hdr.dst_addr, kIp6.data(), 16));
  for (uint8_t b : mask->hdr.dst_addr) EXPECT_EQ(b, 0xff);
  for (uint8_t b : mask->hdr.src_addr) EXPECT_EQ(b, 0);
  EXPECT_EQ(mask->hdr.proto, 0);
  EXPECT_EQ(mask->hdr.vtc_flow, 0u);
  EXPECT_EQ(c.pattern()[3].type, RTE_FLOW_ITEM_TYPE_END);
}

TEST(Translate, AnyIpItemHasNoSpecOrMask) {
  FlowPolicy p;
  p.match_dst_ip = false;
  const auto set = make_rule_set(p);
  const RteFlowRule c(first_rule(set, RuleKind::kRoce));
  ASSERT_EQ(c.pattern_size(), 3u);
  EXPECT_EQ(c.pattern()[1].type, RTE_FLOW_ITEM_TYPE_IPV4);
  EXPECT_EQ(c.pattern()[1].spec, nullptr);
  EXPECT_EQ(c.pattern()[1].mask, nullptr);
  EXPECT_NE(c.pattern()[2].spec, nullptr) << "the UDP port is still matched";
}

TEST(Translate, ArpTargetAndEtherTypeFallback) {
  auto p = sample_policy();
  p.steer_arp = true;
  const auto set = make_rule_set(p);

  const RteFlowRule exact(first_rule(set, RuleKind::kArp, 0));
  ASSERT_EQ(exact.pattern_size(), 3u);
  EXPECT_EQ(exact.pattern()[2].type, RTE_FLOW_ITEM_TYPE_ARP_ETH_IPV4);
  const auto* spec = static_cast<const rte_flow_item_arp_eth_ipv4*>(exact.pattern()[2].spec);
  const auto* mask = static_cast<const rte_flow_item_arp_eth_ipv4*>(exact.pattern()[2].mask);
  EXPECT_EQ(bytes_of<4>(&spec->tpa), (std::array<uint8_t, 4>{10, 0, 0, 1}));
  EXPECT_EQ(mask->tpa, 0xFFFFFFFFu);
  EXPECT_EQ(mask->spa, 0u);
  EXPECT_EQ(mask->op, 0) << "requests and replies alike";
  EXPECT_TRUE(all_zero(mask->sha));
  EXPECT_TRUE(all_zero(mask->tha));

  const RteFlowRule coarse(first_rule(set, RuleKind::kArp, 1));
  ASSERT_EQ(coarse.pattern_size(), 2u);
  EXPECT_EQ(coarse.pattern()[1].type, RTE_FLOW_ITEM_TYPE_VLAN);
  const auto* vspec = static_cast<const rte_flow_item_vlan*>(coarse.pattern()[1].spec);
  const auto* vmask = static_cast<const rte_flow_item_vlan*>(coarse.pattern()[1].mask);
  EXPECT_EQ(bytes_of<2>(&vspec->hdr.eth_proto), (std::array<uint8_t, 2>{0x08, 0x06}));
  EXPECT_EQ(vmask->hdr.eth_proto, 0xFFFF);
  EXPECT_EQ(coarse.pattern()[2].type, RTE_FLOW_ITEM_TYPE_END);
}

TEST(Translate, UntaggedEtherType) {
  FlowPolicy p;
  p.ipv4 = {kIp4};
  p.steer_arp = true;
  const auto set = make_rule_set(p);
  const RteFlowRule coarse(first_rule(set, RuleKind::kArp, 1));
  ASSERT_EQ(coarse.pattern_size(), 1u);
  const auto* spec = static_cast<const rte_flow_item_eth*>(coarse.pattern()[0].spec);
  const auto* mask = static_cast<const rte_flow_item_eth*>(coarse.pattern()[0].mask);
  ASSERT_NE(spec, nullptr);
  EXPECT_EQ(bytes_of<2>(&spec->hdr.ether_type), (std::array<uint8_t, 2>{0x08, 0x06}));
  EXPECT_EQ(mask->hdr.ether_type, 0xFFFF);
  EXPECT_TRUE(all_zero(mask->hdr.dst_addr));
  EXPECT_TRUE(all_zero(mask->hdr.src_addr));
  EXPECT_EQ(mask->has_vlan, 0u);
}

TEST(Translate, NdItems) {
  auto p = sample_policy();
  p.steer_nd = true;
  const auto set = make_rule_set(p);

  const RteFlowRule ns(first_rule(set, RuleKind::kNd, 0, 0));
  ASSERT_EQ(ns.pattern_size(), 4u);
  EXPECT_EQ(ns.pattern()[2].type, RTE_FLOW_ITEM_TYPE_IPV6);
  EXPECT_EQ(ns.pattern()[2].spec, nullptr);
  EXPECT_EQ(ns.pattern()[3].type, RTE_FLOW_ITEM_TYPE_ICMP6_ND_NS);
  const auto* nspec = static_cast<const rte_flow_item_icmp6_nd_ns*>(ns.pattern()[3].spec);
  const auto* nmask = static_cast<const rte_flow_item_icmp6_nd_ns*>(ns.pattern()[3].mask);
  EXPECT_EQ(0, std::memcmp(nspec->target_addr, kIp6.data(), 16));
  for (uint8_t b : nmask->target_addr) EXPECT_EQ(b, 0xff);
  EXPECT_EQ(nmask->type, 0) << "the item type implies 135";

  const RteFlowRule na(first_rule(set, RuleKind::kNd, 0, 1));
  ASSERT_EQ(na.pattern_size(), 4u);
  EXPECT_EQ(na.pattern()[3].type, RTE_FLOW_ITEM_TYPE_ICMP6);
  const auto* ispec = static_cast<const rte_flow_item_icmp6*>(na.pattern()[3].spec);
  const auto* imask = static_cast<const rte_flow_item_icmp6*>(na.pattern()[3].mask);
  EXPECT_EQ(ispec->type, 136);
  EXPECT_EQ(imask->type, 0xff);
  EXPECT_EQ(imask->code, 0);
  EXPECT_EQ(na.pattern()[4].type, RTE_FLOW_ITEM_TYPE_END);
}

TEST(Translate, MovingKeepsThePointersValid) {
  const auto set = make_rule_set(sample_policy());
  std::vector<RteFlowRule> rules;
  for (int i = 0; i < 8; ++i) rules.emplace_back(first_rule(set, RuleKind::kRoce));  // reallocates
  RteFlowRule moved = std::move(rules.front());
  for (const RteFlowRule* c : {&moved, &rules.back()}) {
    const auto* ispec = static_cast<const rte_flow_item_ipv4*>(c->pattern()[2].spec);
    EXPECT_EQ(bytes_of<4>(&ispec->hdr.dst_addr), (std::array<uint8_t, 4>{10, 0, 0, 1}));
    EXPECT_EQ(static_cast<const rte_flow_action_queue*>(c->actions()[0].conf)->index, 2);
  }
}

// ---- installing ------------------------------------------------------------------------

TEST(Install, EveryRuleOfTheFirstChoiceIsCreatedAndRemovedNewestFirst) {
  FakePmd pmd;
  auto p = sample_policy();
  p.steer_arp = true;
  auto flows = install_flow_rules(kPort, p, pmd);
  ASSERT_TRUE(flows.ok()) << flows.error().message;
  EXPECT_EQ(flows->port_id(), kPort);
  ASSERT_EQ(flows->size(), 3u);  // roce v4, roce v6, arp v4
  EXPECT_EQ(pmd.calls.creates, 3);
  EXPECT_EQ(pmd.calls.validates, 3) << "each rule is validated before it is created";
  EXPECT_EQ(flows->scope_of(RuleKind::kRoce), Scope::kDestinationAddress);
  EXPECT_EQ(flows->scope_of(RuleKind::kArp), Scope::kTargetAddress);
  EXPECT_EQ(flows->scope_of(RuleKind::kNd), std::nullopt);
  EXPECT_EQ(flows->rules()[2].text,
            "flow create 3 ingress pattern eth / vlan vid is 100 / arp_eth_ipv4 tpa is 10.0.0.1 / "
            "end actions queue index 2 / end");

  const std::set<rte_flow*> created = pmd.calls.live;
  ASSERT_TRUE(flows->remove().ok());
  EXPECT_TRUE(flows->empty());
  EXPECT_TRUE(pmd.calls.live.empty());
  ASSERT_EQ(pmd.calls.destroyed.size(), 3u);
  EXPECT_EQ(std::set<rte_flow*>(pmd.calls.destroyed.begin(), pmd.calls.destroyed.end()), created);
  EXPECT_GT(pmd.calls.destroyed[0], pmd.calls.destroyed[1]) << "newest first (fake handles grow)";
  EXPECT_GT(pmd.calls.destroyed[1], pmd.calls.destroyed[2]);
  EXPECT_TRUE(flows->remove().ok()) << "removing twice is harmless";
  EXPECT_EQ(pmd.calls.destroys, 3);
}

TEST(Install, DestructorRemovesAndMovingTransfersOwnership) {
  FakePmd pmd;
  {
    auto flows = install_flow_rules(kPort, sample_policy(), pmd);
    ASSERT_TRUE(flows.ok());
    InstalledFlows owner = std::move(*flows);
    EXPECT_TRUE(flows->empty());
    EXPECT_EQ(owner.size(), 2u);
    InstalledFlows other;
    other = std::move(owner);
    EXPECT_EQ(other.size(), 2u);
    EXPECT_EQ(pmd.calls.destroys, 0);
  }
  EXPECT_EQ(pmd.calls.destroys, 2);
  EXPECT_TRUE(pmd.calls.live.empty());
}

TEST(Install, ArpFallsBackToEtherTypeWhenThePmdCannotMatchTheTarget) {
  FakePmd pmd;
  pmd.rejects = {{RTE_FLOW_ITEM_TYPE_ARP_ETH_IPV4, ENOTSUP}};
  auto p = sample_policy();
  p.ipv4 = {kIp4, 0x0A000002};
  p.steer_arp = true;
  auto flows = install_flow_rules(kPort, p, pmd);
  ASSERT_TRUE(flows.ok()) << flows.error().message;
  EXPECT_EQ(flows->scope_of(RuleKind::kArp), Scope::kAll);
  ASSERT_EQ(flows->size(), 4u);  // roce ×3, one EtherType rule
  EXPECT_EQ(flows->rules()[3].text,
            "flow create 3 ingress pattern eth / vlan vid is 100 inner_type is 0x0806 / "
            "end actions queue index 2 / end");
  for (const auto& types : pmd.created_patterns) {
    for (auto t : types) EXPECT_NE(t, RTE_FLOW_ITEM_TYPE_ARP_ETH_IPV4);
  }
}

TEST(Install, NdFallsBackToDestinationsWhenThePmdHasNoNdItem) {
  FakePmd pmd;
  pmd.rejects = {{RTE_FLOW_ITEM_TYPE_ICMP6_ND_NS, ENOTSUP}};
  auto p = sample_policy();
  p.steer_nd = true;
  auto flows = install_flow_rules(kPort, p, pmd);
  ASSERT_TRUE(flows.ok()) << flows.error().message;
  EXPECT_EQ(flows->scope_of(RuleKind::kNd), Scope::kDestinationAddress);
  EXPECT_EQ(flows->size(), 2u + 3u);
  EXPECT_EQ(pmd.calls.live.size(), 5u) << "the NA rule validated in the first choice was not created";
}

TEST(Install, WithoutFallbackTheInstallFailsAndRollsBack) {
  FakePmd pmd;
  pmd.rejects = {{RTE_FLOW_ITEM_TYPE_ARP_ETH_IPV4, ENOTSUP}};
  auto p = sample_policy();
  p.steer_arp = true;
  p.coarse_fallback = false;
  auto flows = install_flow_rules(kPort, p, pmd);
  ASSERT_FALSE(flows.ok());
  EXPECT_EQ(flows.error().code, ENOTSUP);
  const std::string& msg = flows.error().message;
  EXPECT_NE(msg.find("arp rules (target address)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rte_flow_validate on port 3: fake: item not supported (errno 95)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("at pattern item 2 (arp_eth_ipv4 tpa is 10.0.0.1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("`flow create 3 ingress pattern eth / vlan vid is 100 / arp_eth_ipv4 tpa is 10.0.0.1 / "
                     "end actions queue index 2 / end`"),
            std::string::npos)
      << msg;
  EXPECT_EQ(pmd.calls.creates, 2) << "the roce rules went in first";
  EXPECT_EQ(pmd.calls.destroys, 2) << "and were rolled back";
  EXPECT_TRUE(pmd.calls.live.empty());
}

TEST(Install, EveryChoiceRejectedListsEachReason) {
  FakePmd pmd;
  pmd.rejects = {{RTE_FLOW_ITEM_TYPE_ARP_ETH_IPV4, ENOTSUP}, {RTE_FLOW_ITEM_TYPE_VLAN, EINVAL}};
  FlowPolicy p;
  p.ipv4 = {kIp4};
  p.steer_arp = true;
  p.vlan = 7;
  auto flows = install_flow_rules(kPort, p, pmd);
  ASSERT_FALSE(flows.ok());
  const std::string& msg = flows.error().message;
  // roce is the first group and has one choice: its own error, no list.
  EXPECT_EQ(msg.find("no choice"), std::string::npos) << msg;
  EXPECT_NE(msg.find("roce rules (destination address): rte_flow_validate"), std::string::npos) << msg;
  EXPECT_EQ(flows.error().code, EINVAL);

  // With the VLAN accepted but ARP items refused and an EtherType refused too:
  FakePmd pmd2;
  pmd2.rejects = {{RTE_FLOW_ITEM_TYPE_ARP_ETH_IPV4, ENOTSUP}};
  struct RejectEtherType final : FlowApi {
    FakePmd& inner;
    explicit RejectEtherType(FakePmd& i) : inner(i) {}
    int validate(uint16_t port, const rte_flow_attr* a, const rte_flow_item* pattern,
                 const rte_flow_action* act, rte_flow_error* e) override {
      if (pattern[0].spec != nullptr) {  // eth type is 0x0806
        return rte_flow_error_set(e, EPERM, RTE_FLOW_ERROR_TYPE_ITEM_SPEC, pattern[0].spec, "no EtherType");
      }
      return inner.validate(port, a, pattern, act, e);
    }
    rte_flow* create(uint16_t port, const rte_flow_attr* a, const rte_flow_item* pattern,
                     const rte_flow_action* act, rte_flow_error* e) override {
      return inner.create(port, a, pattern, act, e);
    }
    int destroy(uint16_t port, rte_flow* f, rte_flow_error* e) override { return inner.destroy(port, f, e); }
    int isolate(uint16_t port, int set, rte_flow_error* e) override { return inner.isolate(port, set, e); }
  } api(pmd2);
  p.vlan.reset();
  flows = install_flow_rules(kPort, p, api);
  ASSERT_FALSE(flows.ok());
  const std::string& msg2 = flows.error().message;
  EXPECT_NE(msg2.find("no choice the PMD accepts: arp rules (target address): "), std::string::npos) << msg2;
  EXPECT_NE(msg2.find("; arp rules (all): rte_flow_validate on port 3: no EtherType (errno 1) "
                      "at pattern item 0 (eth type is 0x0806)"),
            std::string::npos)
      << msg2;
  EXPECT_EQ(flows.error().code, EPERM) << "the last choice's errno";
  EXPECT_TRUE(pmd2.calls.live.empty());
  EXPECT_EQ(pmd2.calls.destroys, 1) << "the roce rule was rolled back";
}

TEST(Install, CreateFailureRollsBackEverythingCreated) {
  FakePmd pmd;
  pmd.fail_create_at = 2;
  auto p = sample_policy();
  p.steer_arp = true;
  auto flows = install_flow_rules(kPort, p, pmd);
  ASSERT_FALSE(flows.ok());
  EXPECT_EQ(flows.error().code, ENOSPC);
  EXPECT_EQ(flows.error().message,
            "arp rules (target address): rte_flow_create on port 3: fake: no room for another rule (errno 28): "
            "`flow create 3 ingress pattern eth / vlan vid is 100 / arp_eth_ipv4 tpa is 10.0.0.1 / "
            "end actions queue index 2 / end`");
  EXPECT_EQ(pmd.calls.creates, 2);
  EXPECT_EQ(pmd.calls.destroys, 2);
  EXPECT_TRUE(pmd.calls.live.empty());
}

TEST(Install, AFailedRollbackIsReportedToo) {
  FakePmd pmd;
  pmd.fail_create_at = 1;
  pmd.fail_destroy_at = 0;
  auto flows = install_flow_rules(kPort, sample_policy(), pmd);
  ASSERT_FALSE(flows.ok());
  EXPECT_EQ(flows.error().code, ENOSPC) << "the install's error, not the rollback's";
  const std::string& msg = flows.error().message;
  EXPECT_NE(msg.find("; rolling back: rte_flow_destroy on port 3: fake: cannot destroy (errno 16): "
                     "`flow create 3 ingress pattern eth / vlan vid is 100 / ipv4 dst is 10.0.0.1 / "
                     "udp dst is 4791 / end actions queue index 2 / end`"),
            std::string::npos)
      << msg;
}

TEST(Install, BadPolicyOrEmptySetTouchesNothing) {
  FakePmd pmd;
  FlowPolicy p;  // match_dst_ip with no address
  auto flows = install_flow_rules(kPort, p, pmd);
  ASSERT_FALSE(flows.ok());
  EXPECT_EQ(flows.error().code, EINVAL);
  flows = apply_rule_set(kPort, FlowRuleSet{}, pmd);
  ASSERT_FALSE(flows.ok());
  EXPECT_EQ(flows.error().code, EINVAL);
  EXPECT_EQ(pmd.calls.validates, 0);
  EXPECT_EQ(pmd.calls.creates, 0);
}

TEST(Isolation, EnabledWithSetOne) {
  FakePmd pmd;
  ASSERT_TRUE(enable_isolation(kPort, pmd).ok());
  EXPECT_EQ(pmd.calls.isolates, 1);
  EXPECT_EQ(pmd.calls.last_isolate_set, 1);
}

TEST(Isolation, RefusalNamesThePortAndTheOrderingRule) {
  FakePmd pmd;
  pmd.isolate_result = -EBUSY;
  const auto st = enable_isolation(kPort, pmd);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, EBUSY);
  EXPECT_EQ(st.error().message,
            "rte_flow_isolate on port 3: fake: isolation refused (errno 16); "
            "flow isolation must be enabled before rte_eth_dev_configure");
}

}  // namespace
}  // namespace uroce::drivers::mlx5
