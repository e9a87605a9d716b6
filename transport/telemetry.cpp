#include "transport/telemetry.hpp"

#include <rte_telemetry.h>

#include <map>
#include <mutex>

#include "transport/engine.hpp"

namespace uroce::transport {
namespace {

std::mutex g_mu;
std::map<std::string, Engine*>& registry() {
  static std::map<std::string, Engine*> r;
  return r;
}

int cmd_devices(const char*, const char*, rte_tel_data* d) {
  rte_tel_data_start_array(d, RTE_TEL_STRING_VAL);
  std::lock_guard lock(g_mu);
  for (const auto& [name, e] : registry()) rte_tel_data_add_array_string(d, name.c_str());
  return 0;
}

// The engine named by `params` (or the only one); call with g_mu held.
Engine* find_locked(const char* params) {
  auto& r = registry();
  if (params == nullptr || *params == '\0') return r.size() == 1 ? r.begin()->second : nullptr;
  auto it = r.find(params);
  return it == r.end() ? nullptr : it->second;
}

int cmd_stats(const char*, const char* params, rte_tel_data* d) {
  std::lock_guard lock(g_mu);  // the engine cannot go away while we read
  Engine* e = find_locked(params);
  if (!e) return -EINVAL;
  rte_tel_data_start_dict(d);
  e->for_each_counter([&](std::string_view name, std::string_view, uint64_t v) {
    const std::string key(name);
    rte_tel_data_add_dict_u64(d, key.c_str(), v);
  });
  return 0;
}

int cmd_neigh(const char*, const char* params, rte_tel_data* d) {
  std::lock_guard lock(g_mu);
  Engine* e = find_locked(params);
  if (!e) return -EINVAL;
  const NeighStats& s = e->neighbours().stats();
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "entries", e->neighbours().size());
  rte_tel_data_add_dict_u64(d, "requests_sent", s.requests_sent);
  rte_tel_data_add_dict_u64(d, "resolved", s.resolved);
  rte_tel_data_add_dict_u64(d, "failed", s.failed);
  rte_tel_data_add_dict_u64(d, "pending_dropped", s.pending_dropped);
  rte_tel_data_add_dict_u64(d, "table_full", s.table_full);
  return 0;
}

void register_commands_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    rte_telemetry_register_cmd("/uroce/devices", cmd_devices, "uroce devices in this process. No parameters");
    rte_telemetry_register_cmd("/uroce/stats", cmd_stats,
                               "Engine counters of a uroce device. Parameters: device name");
    rte_telemetry_register_cmd("/uroce/neigh", cmd_neigh,
                               "Neighbour table statistics of a uroce device. Parameters: device name");
  });
}

}  // namespace

void telemetry_register(const std::string& device, Engine* engine) {
  register_commands_once();
  std::lock_guard lock(g_mu);
  registry()[device] = engine;
}

void telemetry_unregister(const std::string& device) {
  std::lock_guard lock(g_mu);
  registry().erase(device);
}

}  // namespace uroce::transport
