// Installing a FlowRuleSet (flow_rules.hpp) on a DPDK port through rte_flow.
//
// The order a ConnectX port is brought up in (README.md in this folder):
//   enable_isolation(port)          before rte_eth_dev_configure: from then
//                                   on the port receives only what a rule
//                                   steers to it; the kernel gets the rest
//   rte_eth_dev_configure, queue setup, rte_eth_dev_start
//   install_flow_rules(port, policy)   after start (mlx5 keeps rules across
//                                   stop/start, other PMDs may not)
//   ... traffic ...
//   InstalledFlows::remove(), then rte_eth_dev_stop / rte_eth_dev_close
//
// Control path only.  Calls for one port come from one thread at a time.
#pragma once

#include <rte_flow.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "drivers/mlx5/flow_rules.hpp"
#include "drivers/result.hpp"

namespace uroce::drivers::mlx5 {

// ---- translation -------------------------------------------------------------------

namespace detail {
// Room for the spec or the mask of any item type a FlowRule has.
union ItemConf {
  rte_flow_item_eth eth;
  rte_flow_item_vlan vlan;
  rte_flow_item_ipv4 ipv4;
  rte_flow_item_ipv6 ipv6;
  rte_flow_item_udp udp;
  rte_flow_item_arp_eth_ipv4 arp;
  rte_flow_item_icmp6 icmp6;
  rte_flow_item_icmp6_nd_ns nd_ns;
};
struct ItemStorage {
  ItemConf spec;
  ItemConf mask;
};
// Room for the configuration of any action type a FlowRule has.
union ActionConf {
  rte_flow_action_queue queue;
};
}  // namespace detail

// One FlowRule as the arrays rte_flow takes.  It owns the spec/mask
// storage its items point into and the configuration its actions point
// to; moving it keeps those pointers valid (the buffers move with it; the
// moved-from rule may only be destroyed or assigned to).
// Fields are big-endian as rte_flow wants them; an item whose mask is all
// zero gets spec = mask = NULL (any header of that protocol).
class RteFlowRule {
 public:
  explicit RteFlowRule(const FlowRule& rule);
  RteFlowRule(RteFlowRule&&) noexcept = default;
  RteFlowRule& operator=(RteFlowRule&&) noexcept = default;
  RteFlowRule(const RteFlowRule&) = delete;
  RteFlowRule& operator=(const RteFlowRule&) = delete;

  const rte_flow_attr& attr() const noexcept { return attr_; }
  // pattern_size() items, then RTE_FLOW_ITEM_TYPE_END.
  const rte_flow_item* pattern() const noexcept { return items_.data(); }
  size_t pattern_size() const noexcept { return items_.size() - 1; }
  // actions_size() actions, then RTE_FLOW_ACTION_TYPE_END.
  const rte_flow_action* actions() const noexcept { return actions_.data(); }
  size_t actions_size() const noexcept { return actions_.size() - 1; }

 private:
  rte_flow_attr attr_{};
  std::vector<detail::ItemStorage> item_storage_;   // one per item; sized once, never grows
  std::vector<rte_flow_item> items_;
  std::vector<detail::ActionConf> action_storage_;  // one per action; sized once
  std::vector<rte_flow_action> actions_;
};

// ---- the rte_flow calls ----------------------------------------------------------------

// The rte_flow calls the installer makes, behind an interface so tests can
// stand in for a PMD (fail the third create, count the destroys).
// Same arguments and returns as the rte_flow functions of the same name.
class FlowApi {
 public:
  virtual ~FlowApi() = default;
  virtual int validate(uint16_t port_id, const rte_flow_attr* attr, const rte_flow_item* pattern,
                       const rte_flow_action* actions, rte_flow_error* error) = 0;
  virtual rte_flow* create(uint16_t port_id, const rte_flow_attr* attr, const rte_flow_item* pattern,
                           const rte_flow_action* actions, rte_flow_error* error) = 0;
  virtual int destroy(uint16_t port_id, rte_flow* flow, rte_flow_error* error) = 0;
  virtual int isolate(uint16_t port_id, int set, rte_flow_error* error) = 0;
};

// DPDK's own rte_flow functions.
FlowApi& rte_flow_api() noexcept;

// ---- installing --------------------------------------------------------------------

struct InstalledRule {
  RuleKind kind = RuleKind::kRoce;
  Scope scope = Scope::kDestinationAddress;  // the choice of its group that was taken
  std::string text;                          // FlowRule::to_string for the port
};

// The rules apply_rule_set created.  Destroying it removes them (errors
// ignored: call remove() to see them).  Remove the rules before the port is
// closed; closing an mlx5 port frees them anyway, and then remove() reports
// each destroy's error.
class [[nodiscard]] InstalledFlows {
 public:
  InstalledFlows() = default;
  ~InstalledFlows();
  InstalledFlows(InstalledFlows&& other) noexcept;
  InstalledFlows& operator=(InstalledFlows&& other) noexcept;
  InstalledFlows(const InstalledFlows&) = delete;
  InstalledFlows& operator=(const InstalledFlows&) = delete;

  uint16_t port_id() const noexcept { return port_id_; }
  size_t size() const noexcept { return handles_.size(); }
  bool empty() const noexcept { return handles_.empty(); }
  // In creation order.
  const std::vector<InstalledRule>& rules() const noexcept { return rules_; }
  // Which choice of the `kind` group was installed; nullopt: none (the set
  // had no such group).
  std::optional<Scope> scope_of(RuleKind kind) const noexcept;

  // Destroys every rule, the newest first.  Goes on past a failure and
  // returns the first one.  Empty afterwards either way.
  Status remove();

 private:
  friend Result<InstalledFlows> apply_rule_set(uint16_t, const FlowRuleSet&, FlowApi&);
  InstalledFlows(uint16_t port_id, FlowApi& api) : port_id_(port_id), api_(&api) {}
  // Validates and creates the first acceptable choice of `group`.
  Status install(const FlowRuleGroup& group);

  uint16_t port_id_ = 0;
  FlowApi* api_ = nullptr;
  std::vector<rte_flow*> handles_;
  std::vector<InstalledRule> rules_;  // parallel to handles_
};

// For each group, the first choice whose every rule rte_flow_validate
// accepts: rte_flow_create for each of its rules.  On any failure the rules
// created so far are destroyed and the error names the rule (testpmd text)
// and gives rte_flow_error's message; its code is the errno rte_flow
// returned (ENOSYS or ENOTSUP: the PMD has no rte_flow or not this rule).
// When every choice of a group fails validation, the error lists each.
// An empty set is an error (EINVAL).
Result<InstalledFlows> apply_rule_set(uint16_t port_id, const FlowRuleSet& set,
                                      FlowApi& api = rte_flow_api());

// check_policy, make_rule_set, apply_rule_set.
Result<InstalledFlows> install_flow_rules(uint16_t port_id, const FlowPolicy& policy,
                                          FlowApi& api = rte_flow_api());

// rte_flow_isolate(port_id, 1): the port then receives only the traffic
// its rules steer to it.  Call it before rte_eth_dev_configure (mlx5 takes
// it on any stopped port; other PMDs only before configure).
Status enable_isolation(uint16_t port_id, FlowApi& api = rte_flow_api());

}  // namespace uroce::drivers::mlx5
