#include "drivers/mlx5/tests/fake_flow_api.hpp"

#include <cerrno>

namespace uroce::drivers::mlx5::testing {

int FakePmd::validate(uint16_t, const rte_flow_attr*, const rte_flow_item* pattern,
                      const rte_flow_action*, rte_flow_error* error) {
  ++calls.validates;
  for (const rte_flow_item* item = pattern; item->type != RTE_FLOW_ITEM_TYPE_END; ++item) {
    for (const Reject& r : rejects) {
      if (item->type == r.type) {
        return rte_flow_error_set(error, r.code, RTE_FLOW_ERROR_TYPE_ITEM, item, "fake: item not supported");
      }
    }
  }
  return 0;
}

rte_flow* FakePmd::create(uint16_t, const rte_flow_attr*, const rte_flow_item* pattern,
                          const rte_flow_action*, rte_flow_error* error) {
  if (create_calls_++ == fail_create_at) {
    rte_flow_error_set(error, ENOSPC, RTE_FLOW_ERROR_TYPE_UNSPECIFIED, nullptr, kCreateMessage);
    return nullptr;
  }
  auto* flow = reinterpret_cast<rte_flow*>(next_handle_);
  next_handle_ += 0x10;
  ++calls.creates;
  calls.live.insert(flow);
  std::vector<rte_flow_item_type> types;
  for (const rte_flow_item* item = pattern; item->type != RTE_FLOW_ITEM_TYPE_END; ++item) {
    types.push_back(item->type);
  }
  created_patterns.push_back(std::move(types));
  return flow;
}

int FakePmd::destroy(uint16_t, rte_flow* flow, rte_flow_error* error) {
  if (destroy_calls_++ == fail_destroy_at) {
    return rte_flow_error_set(error, EBUSY, RTE_FLOW_ERROR_TYPE_HANDLE, flow, kDestroyMessage);
  }
  if (calls.live.erase(flow) == 0) {
    return rte_flow_error_set(error, ENOENT, RTE_FLOW_ERROR_TYPE_HANDLE, flow, "fake: no such flow");
  }
  ++calls.destroys;
  calls.destroyed.push_back(flow);
  return 0;
}

int FakePmd::isolate(uint16_t, int set, rte_flow_error* error) {
  ++calls.isolates;
  calls.last_isolate_set = set;
  if (isolate_result != 0) {
    return rte_flow_error_set(error, -isolate_result, RTE_FLOW_ERROR_TYPE_UNSPECIFIED, nullptr,
                              "fake: isolation refused");
  }
  return 0;
}

int CountingApi::validate(uint16_t port_id, const rte_flow_attr* attr, const rte_flow_item* pattern,
                          const rte_flow_action* actions, rte_flow_error* error) {
  ++calls.validates;
  return inner_.validate(port_id, attr, pattern, actions, error);
}

rte_flow* CountingApi::create(uint16_t port_id, const rte_flow_attr* attr, const rte_flow_item* pattern,
                              const rte_flow_action* actions, rte_flow_error* error) {
  rte_flow* flow = inner_.create(port_id, attr, pattern, actions, error);
  if (flow != nullptr) {
    ++calls.creates;
    calls.live.insert(flow);
  }
  return flow;
}

int CountingApi::destroy(uint16_t port_id, rte_flow* flow, rte_flow_error* error) {
  const int rc = inner_.destroy(port_id, flow, error);
  if (rc == 0) {
    ++calls.destroys;
    calls.live.erase(flow);
    calls.destroyed.push_back(flow);
  }
  return rc;
}

int CountingApi::isolate(uint16_t port_id, int set, rte_flow_error* error) {
  ++calls.isolates;
  calls.last_isolate_set = set;
  return inner_.isolate(port_id, set, error);
}

}  // namespace uroce::drivers::mlx5::testing
