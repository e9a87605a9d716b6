// FlowRule → rte_flow arrays, and installing a rule set (flow_apply.hpp).
#include "drivers/mlx5/flow_apply.hpp"

#include <rte_byteorder.h>
#include <rte_errno.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace uroce::drivers::mlx5 {
namespace {

using detail::ActionConf;
using detail::ItemConf;
using detail::ItemStorage;

// rte_flow's item structs are C structs with anonymous unions and
// bitfields: start each from all-zero bytes, fields unmatched.
template <class T>
T zeroed() noexcept {
  T v;
  std::memset(&v, 0, sizeof v);
  return v;
}

// ---- one fill() per item type: spec and mask, big-endian ---------------------------
// Each assigns whole structs to the union members, which makes them the
// active ones, and returns the item's type.

rte_flow_item_eth eth_conf(const EthFields& f) noexcept {
  auto c = zeroed<rte_flow_item_eth>();
  c.hdr.ether_type = rte_cpu_to_be_16(f.ether_type);
  return c;
}

rte_flow_item_type fill(const Item<EthFields>& it, ItemConf& spec, ItemConf& mask) noexcept {
  spec.eth = eth_conf(it.spec);
  mask.eth = eth_conf(it.mask);
  return RTE_FLOW_ITEM_TYPE_ETH;
}

rte_flow_item_vlan vlan_conf(const VlanFields& f) noexcept {
  auto c = zeroed<rte_flow_item_vlan>();
  c.hdr.vlan_tci = rte_cpu_to_be_16(f.tci);
  c.hdr.eth_proto = rte_cpu_to_be_16(f.inner_type);
  return c;
}

rte_flow_item_type fill(const Item<VlanFields>& it, ItemConf& spec, ItemConf& mask) noexcept {
  spec.vlan = vlan_conf(it.spec);
  mask.vlan = vlan_conf(it.mask);
  return RTE_FLOW_ITEM_TYPE_VLAN;
}

rte_flow_item_ipv4 ipv4_conf(const Ipv4Fields& f) noexcept {
  auto c = zeroed<rte_flow_item_ipv4>();
  c.hdr.dst_addr = rte_cpu_to_be_32(f.dst);
  return c;
}

rte_flow_item_type fill(const Item<Ipv4Fields>& it, ItemConf& spec, ItemConf& mask) noexcept {
  spec.ipv4 = ipv4_conf(it.spec);
  mask.ipv4 = ipv4_conf(it.mask);
  return RTE_FLOW_ITEM_TYPE_IPV4;
}

rte_flow_item_ipv6 ipv6_conf(const Ipv6Fields& f) noexcept {
  auto c = zeroed<rte_flow_item_ipv6>();
  static_assert(sizeof c.hdr.dst_addr == sizeof f.dst);
  std::memcpy(c.hdr.dst_addr, f.dst.data(), sizeof c.hdr.dst_addr);
  return c;
}

rte_flow_item_type fill(const Item<Ipv6Fields>& it, ItemConf& spec, ItemConf& mask) noexcept {
  spec.ipv6 = ipv6_conf(it.spec);
  mask.ipv6 = ipv6_conf(it.mask);
  return RTE_FLOW_ITEM_TYPE_IPV6;
}

rte_flow_item_udp udp_conf(const UdpFields& f) noexcept {
  auto c = zeroed<rte_flow_item_udp>();
  c.hdr.dst_port = rte_cpu_to_be_16(f.dst_port);
  return c;
}

rte_flow_item_type fill(const Item<UdpFields>& it, ItemConf& spec, ItemConf& mask) noexcept {
  spec.udp = udp_conf(it.spec);
  mask.udp = udp_conf(it.mask);
  return RTE_FLOW_ITEM_TYPE_UDP;
}

rte_flow_item_arp_eth_ipv4 arp_conf(const ArpEthIpv4Fields& f) noexcept {
  auto c = zeroed<rte_flow_item_arp_eth_ipv4>();
  c.tpa = rte_cpu_to_be_32(f.tpa);
  return c;
}

rte_flow_item_type fill(const Item<ArpEthIpv4Fields>& it, ItemConf& spec, ItemConf& mask) noexcept {
  spec.arp = arp_conf(it.spec);
  mask.arp = arp_conf(it.mask);
  return RTE_FLOW_ITEM_TYPE_ARP_ETH_IPV4;
}

rte_flow_item_icmp6 icmp6_conf(const Icmp6Fields& f) noexcept {
  auto c = zeroed<rte_flow_item_icmp6>();
  c.type = f.type;
  return c;
}

rte_flow_item_type fill(const Item<Icmp6Fields>& it, ItemConf& spec, ItemConf& mask) noexcept {
  spec.icmp6 = icmp6_conf(it.spec);
  mask.icmp6 = icmp6_conf(it.mask);
  return RTE_FLOW_ITEM_TYPE_ICMP6;
}

rte_flow_item_icmp6_nd_ns nd_ns_conf(const Icmp6NdNsFields& f) noexcept {
  auto c = zeroed<rte_flow_item_icmp6_nd_ns>();
  static_assert(sizeof c.target_addr == sizeof f.target);
  std::memcpy(c.target_addr, f.target.data(), sizeof c.target_addr);
  return c;
}

rte_flow_item_type fill(const Item<Icmp6NdNsFields>& it, ItemConf& spec, ItemConf& mask) noexcept {
  spec.nd_ns = nd_ns_conf(it.spec);
  mask.nd_ns = nd_ns_conf(it.mask);
  return RTE_FLOW_ITEM_TYPE_ICMP6_ND_NS;
}

template <class Fields>
bool matches_any(const Item<Fields>& it) noexcept {
  return it.mask == Fields{};
}

rte_flow_action_type fill(const QueueAction& a, ActionConf& conf) noexcept {
  conf.queue = rte_flow_action_queue{a.index};
  return RTE_FLOW_ACTION_TYPE_QUEUE;
}

// ---- errors ------------------------------------------------------------------------

// Which part of the rule rte_flow_error::cause points at, if we can tell.
std::string cause_text(const rte_flow_error& err, const FlowRule& rule, const RteFlowRule& compiled) {
  if (err.cause == nullptr) return {};
  for (size_t i = 0; i < compiled.pattern_size(); ++i) {
    const rte_flow_item& item = compiled.pattern()[i];
    if (err.cause == &item || err.cause == item.spec || err.cause == item.mask) {
      return " at pattern item " + std::to_string(i) + " (" + to_string(rule.pattern[i]) + ")";
    }
  }
  for (size_t i = 0; i < compiled.actions_size(); ++i) {
    const rte_flow_action& action = compiled.actions()[i];
    if (err.cause == &action || err.cause == action.conf) return " at action " + std::to_string(i);
  }
  return err.cause == &compiled.attr() ? " in the attributes" : std::string{};
}

// "rte_flow_validate on port 0: <PMD's message> (errno 95) at pattern item 1
// (arp_eth_ipv4 tpa is 10.0.0.1): `flow create 0 ...`"
Error flow_error(std::string_view call, uint16_t port_id, int code, const rte_flow_error& err,
                 const FlowRule& rule, const RteFlowRule& compiled) {
  std::string msg(call);
  msg += " on port " + std::to_string(port_id) + ": ";
  msg += err.message != nullptr ? err.message : std::strerror(code);
  msg += " (errno " + std::to_string(code) + ")";
  msg += cause_text(err, rule, compiled);
  msg += ": `" + rule.to_string(port_id) + "`";
  return Error{code, std::move(msg)};
}

std::string group_label(RuleKind kind, Scope scope) {
  return std::string(to_string(kind)) + " rules (" + std::string(to_string(scope)) + ")";
}

// rte_flow_create reports its errno in rte_errno only; a PMD that forgets
// to set it still failed.
int create_errno() noexcept { return rte_errno != 0 ? rte_errno : EIO; }

class RteFlowApi final : public FlowApi {
 public:
  int validate(uint16_t port_id, const rte_flow_attr* attr, const rte_flow_item* pattern,
               const rte_flow_action* actions, rte_flow_error* error) override {
    return rte_flow_validate(port_id, attr, pattern, actions, error);
  }
  rte_flow* create(uint16_t port_id, const rte_flow_attr* attr, const rte_flow_item* pattern,
                   const rte_flow_action* actions, rte_flow_error* error) override {
    return rte_flow_create(port_id, attr, pattern, actions, error);
  }
  int destroy(uint16_t port_id, rte_flow* flow, rte_flow_error* error) override {
    return rte_flow_destroy(port_id, flow, error);
  }
  int isolate(uint16_t port_id, int set, rte_flow_error* error) override {
    return rte_flow_isolate(port_id, set, error);
  }
};

}  // namespace

// ---- RteFlowRule ---------------------------------------------------------------------

RteFlowRule::RteFlowRule(const FlowRule& rule)
    : item_storage_(rule.pattern.size()), action_storage_(rule.actions.size()) {
  attr_.group = rule.attr.group;
  attr_.priority = rule.attr.priority;
  attr_.ingress = 1;

  items_.reserve(rule.pattern.size() + 1);
  for (size_t i = 0; i < rule.pattern.size(); ++i) {
    ItemStorage& s = item_storage_[i];
    std::visit(
        [&](const auto& it) {
          rte_flow_item item = zeroed<rte_flow_item>();
          item.type = fill(it, s.spec, s.mask);
          if (!matches_any(it)) {
            item.spec = &s.spec;
            item.mask = &s.mask;
          }
          items_.push_back(item);
        },
        rule.pattern[i]);
  }
  items_.push_back(rte_flow_item{RTE_FLOW_ITEM_TYPE_END, nullptr, nullptr, nullptr});

  actions_.reserve(rule.actions.size() + 1);
  for (size_t i = 0; i < rule.actions.size(); ++i) {
    ActionConf& conf = action_storage_[i];
    std::visit([&](const auto& a) { actions_.push_back(rte_flow_action{fill(a, conf), &conf}); },
               rule.actions[i]);
  }
  actions_.push_back(rte_flow_action{RTE_FLOW_ACTION_TYPE_END, nullptr});
}

// ---- InstalledFlows ------------------------------------------------------------------

InstalledFlows::~InstalledFlows() { (void)remove(); }

InstalledFlows::InstalledFlows(InstalledFlows&& other) noexcept
    : port_id_(other.port_id_),
      api_(other.api_),
      handles_(std::exchange(other.handles_, {})),
      rules_(std::exchange(other.rules_, {})) {}

InstalledFlows& InstalledFlows::operator=(InstalledFlows&& other) noexcept {
  if (this != &other) {
    (void)remove();
    port_id_ = other.port_id_;
    api_ = other.api_;
    handles_ = std::exchange(other.handles_, {});
    rules_ = std::exchange(other.rules_, {});
  }
  return *this;
}

std::optional<Scope> InstalledFlows::scope_of(RuleKind kind) const noexcept {
  for (const auto& r : rules_) {
    if (r.kind == kind) return r.scope;
  }
  return std::nullopt;
}

Status InstalledFlows::remove() {
  Status first;
  for (size_t i = handles_.size(); i-- > 0;) {
    rte_flow_error err = zeroed<rte_flow_error>();
    const int rc = api_->destroy(port_id_, handles_[i], &err);
    if (rc != 0 && first.ok()) {
      const int code = -rc;
      first = Error{code, "rte_flow_destroy on port " + std::to_string(port_id_) + ": " +
                              (err.message != nullptr ? err.message : std::strerror(code)) +
                              " (errno " + std::to_string(code) + "): `" + rules_[i].text + "`"};
    }
  }
  handles_.clear();
  rules_.clear();
  return first;
}

Status InstalledFlows::install(const FlowRuleGroup& group) {
  std::string rejected;  // why each choice was passed over
  int code = EINVAL;
  for (const auto& choice : group.choices) {
    std::vector<RteFlowRule> compiled;
    compiled.reserve(choice.rules.size());
    std::optional<Error> invalid;
    for (const auto& rule : choice.rules) {
      compiled.emplace_back(rule);
      rte_flow_error err = zeroed<rte_flow_error>();
      const RteFlowRule& c = compiled.back();
      if (const int rc = api_->validate(port_id_, &c.attr(), c.pattern(), c.actions(), &err); rc != 0) {
        invalid = flow_error("rte_flow_validate", port_id_, -rc, err, rule, c);
        break;
      }
    }
    if (invalid) {
      code = invalid->code;
      rejected += (rejected.empty() ? "" : "; ") + group_label(group.kind, choice.scope) + ": " +
                  invalid->message;
      continue;
    }
    for (size_t i = 0; i < compiled.size(); ++i) {
      const RteFlowRule& c = compiled[i];
      rte_flow_error err = zeroed<rte_flow_error>();
      rte_errno = 0;
      rte_flow* flow = api_->create(port_id_, &c.attr(), c.pattern(), c.actions(), &err);
      if (flow == nullptr) {
        Error e = flow_error("rte_flow_create", port_id_, create_errno(), err, choice.rules[i], c);
        e.message = group_label(group.kind, choice.scope) + ": " + e.message;
        return e;
      }
      handles_.push_back(flow);
      rules_.push_back(InstalledRule{group.kind, choice.scope, choice.rules[i].to_string(port_id_)});
    }
    return {};
  }
  if (rejected.empty()) return {};  // a group with no choices installs nothing
  if (group.choices.size() > 1) rejected = "no choice the PMD accepts: " + rejected;
  return Error{code, std::move(rejected)};
}

// ---- the calls -------------------------------------------------------------------------

FlowApi& rte_flow_api() noexcept {
  static RteFlowApi api;
  return api;
}

Result<InstalledFlows> apply_rule_set(uint16_t port_id, const FlowRuleSet& set, FlowApi& api) {
  if (set.groups.empty()) return Error{EINVAL, "the rule set is empty: nothing to install"};
  InstalledFlows flows(port_id, api);
  for (const auto& group : set.groups) {
    if (auto st = flows.install(group); !st) {
      Error e = st.error();
      if (auto rolled_back = flows.remove(); !rolled_back) {
        e.message += "; rolling back: " + rolled_back.error().message;
      }
      return e;
    }
  }
  return flows;
}

Result<InstalledFlows> install_flow_rules(uint16_t port_id, const FlowPolicy& policy, FlowApi& api) {
  if (auto st = check_policy(policy); !st) return st.error();
  return apply_rule_set(port_id, make_rule_set(policy), api);
}

Status enable_isolation(uint16_t port_id, FlowApi& api) {
  rte_flow_error err = zeroed<rte_flow_error>();
  if (const int rc = api.isolate(port_id, 1, &err); rc != 0) {
    const int code = -rc;
    return Error{code, "rte_flow_isolate on port " + std::to_string(port_id) + ": " +
                           (err.message != nullptr ? err.message : std::strerror(code)) +
                           " (errno " + std::to_string(code) +
                           "); flow isolation must be enabled before rte_eth_dev_configure"};
  }
  return {};
}

}  // namespace uroce::drivers::mlx5
