// Stand-ins for the rte_flow calls (FlowApi) that tests install through.
//   FakePmd       a PMD with rte_flow, made of rules the test sets: reject
//                 some items at validate, fail the Nth create or destroy.
//   CountingApi   passes every call to another FlowApi (DPDK's own) and
//                 keeps the set of live flows, so a test can assert that an
//                 error path left nothing behind.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "drivers/mlx5/flow_apply.hpp"

namespace uroce::drivers::mlx5::testing {

// The calls one FlowApi saw.
struct FlowCalls {
  int validates = 0;
  int creates = 0;      // successful ones
  int destroys = 0;     // successful ones
  int isolates = 0;
  int last_isolate_set = -1;
  std::set<rte_flow*> live;            // created and not yet destroyed
  std::vector<rte_flow*> destroyed;    // in call order
};

class FakePmd final : public FlowApi {
 public:
  // validate fails with this errno for a rule with an item of this type.
  struct Reject {
    rte_flow_item_type type;
    int code;
  };
  std::vector<Reject> rejects;
  int fail_create_at = -1;   // 0-based index among create calls; -1: never
  int fail_destroy_at = -1;  // 0-based index among destroy calls; -1: never
  int isolate_result = 0;    // what isolate returns (a negative errno to fail)
  static constexpr const char* kCreateMessage = "fake: no room for another rule";
  static constexpr const char* kDestroyMessage = "fake: cannot destroy";

  FlowCalls calls;
  std::vector<std::vector<rte_flow_item_type>> created_patterns;  // per successful create

  int validate(uint16_t port_id, const rte_flow_attr* attr, const rte_flow_item* pattern,
               const rte_flow_action* actions, rte_flow_error* error) override;
  rte_flow* create(uint16_t port_id, const rte_flow_attr* attr, const rte_flow_item* pattern,
                   const rte_flow_action* actions, rte_flow_error* error) override;
  int destroy(uint16_t port_id, rte_flow* flow, rte_flow_error* error) override;
  int isolate(uint16_t port_id, int set, rte_flow_error* error) override;

 private:
  int create_calls_ = 0;
  int destroy_calls_ = 0;
  uintptr_t next_handle_ = 0x1000;  // fake handles: never dereferenced
};

class CountingApi final : public FlowApi {
 public:
  explicit CountingApi(FlowApi& inner) : inner_(inner) {}
  FlowCalls calls;

  int validate(uint16_t port_id, const rte_flow_attr* attr, const rte_flow_item* pattern,
               const rte_flow_action* actions, rte_flow_error* error) override;
  rte_flow* create(uint16_t port_id, const rte_flow_attr* attr, const rte_flow_item* pattern,
                   const rte_flow_action* actions, rte_flow_error* error) override;
  int destroy(uint16_t port_id, rte_flow* flow, rte_flow_error* error) override;
  int isolate(uint16_t port_id, int set, rte_flow_error* error) override;

 private:
  FlowApi& inner_;
};

}  // namespace uroce::drivers::mlx5::testing
