#include "transport/telemetry.hpp"

#include "lib/util/log.hpp"

#include <rte_telemetry.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "transport/engine.hpp"

namespace uroce::transport {
namespace {

struct SetEntry {
  const void* owner = nullptr;
  CounterSource source;
};

struct TableEntry {
  const void* owner = nullptr;
  TableSource source;
};

struct DeviceEntry {
  Engine* engine = nullptr;
  std::map<std::string, SetEntry> sets;      // by set name
  std::map<std::string, TableEntry> tables;  // by table name
  bool empty() const { return engine == nullptr && sets.empty() && tables.empty(); }
};

// Rows per /uroce/qps reply: a QP row is about 600 bytes of JSON, DPDK's
// reply at most 16 KB.
constexpr size_t kRowsPerPage = 16;

std::mutex g_mu;
std::map<std::string, DeviceEntry>& registry() {
  static std::map<std::string, DeviceEntry> r;
  return r;
}

int cmd_devices(const char*, const char*, rte_tel_data* d) {
  rte_tel_data_start_array(d, RTE_TEL_STRING_VAL);
  std::lock_guard lock(g_mu);
  for (const auto& [name, e] : registry())
    if (e.engine != nullptr) rte_tel_data_add_array_string(d, name.c_str());
  return 0;
}

// The device named by `params` (or the only one); call with g_mu held.
DeviceEntry* find_locked(const char* params) {
  auto& r = registry();
  if (params == nullptr || *params == '\0') return r.size() == 1 ? &r.begin()->second : nullptr;
  auto it = r.find(params);
  return it == r.end() ? nullptr : &it->second;
}

int cmd_stats(const char*, const char* params, rte_tel_data* d) {
  std::lock_guard lock(g_mu);  // the engine cannot go away while we read
  DeviceEntry* e = find_locked(params);
  if (e == nullptr || e->engine == nullptr) return -EINVAL;
  rte_tel_data_start_dict(d);
  e->engine->for_each_counter([&](std::string_view name, std::string_view, uint64_t v) {
    const std::string key(name);
    rte_tel_data_add_dict_u64(d, key.c_str(), v);
  });
  return 0;
}

int cmd_counters(const char*, const char* params, rte_tel_data* d) {
  std::lock_guard lock(g_mu);
  DeviceEntry* e = find_locked(params);
  if (e == nullptr) return -EINVAL;
  rte_tel_data_start_dict(d);
  auto add_set = [d](const std::string& set, const CounterSource& src) {
    rte_tel_data* inner = rte_tel_data_alloc();
    if (inner == nullptr) return;
    rte_tel_data_start_dict(inner);
    src([inner](std::string_view name, uint64_t v) {
      const std::string key(name);
      rte_tel_data_add_dict_u64(inner, key.c_str(), v);
    });
    if (rte_tel_data_add_dict_container(d, set.c_str(), inner, 0) != 0) rte_tel_data_free(inner);
  };
  if (e->engine != nullptr) {
    Engine* engine = e->engine;
    add_set("engine", [engine](const CounterVisitor& f) {
      engine->for_each_counter([&](std::string_view n, std::string_view, uint64_t v) { f(n, v); });
    });
  }
  for (const auto& [set, entry] : e->sets) add_set(set, entry.source);
  return 0;
}

int cmd_neigh(const char*, const char* params, rte_tel_data* d) {
  std::lock_guard lock(g_mu);
  DeviceEntry* de = find_locked(params);
  if (de == nullptr || de->engine == nullptr) return -EINVAL;
  Engine* e = de->engine;
  const NeighStats& s = e->neighbours().stats();
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_u64(d, "entries", e->neighbours().size());
  // NeighStats and the size are atomics: the engine writes them meanwhile.
  rte_tel_data_add_dict_u64(d, "requests_sent", s.requests_sent.load(std::memory_order_relaxed));
  rte_tel_data_add_dict_u64(d, "resolved", s.resolved.load(std::memory_order_relaxed));
  rte_tel_data_add_dict_u64(d, "failed", s.failed.load(std::memory_order_relaxed));
  rte_tel_data_add_dict_u64(d, "pending_dropped", s.pending_dropped.load(std::memory_order_relaxed));
  rte_tel_data_add_dict_u64(d, "table_full", s.table_full.load(std::memory_order_relaxed));
  return 0;
}

// /uroce/qps,<device>[,<first>]: a page of the device's "qps" table.
int cmd_qps(const char*, const char* params, rte_tel_data* d) {
  std::string device = params != nullptr ? params : "";
  size_t first = 0;
  if (const size_t comma = device.find(','); comma != std::string::npos) {
    const std::string n = device.substr(comma + 1);
    device.resize(comma);
    char* end = nullptr;
    first = std::strtoul(n.c_str(), &end, 10);
    if (n.empty() || end == nullptr || *end != '\0') return -EINVAL;
  }
  std::lock_guard lock(g_mu);
  DeviceEntry* e = find_locked(device.c_str());
  if (e == nullptr) return -EINVAL;
  const auto t = e->tables.find("qps");
  if (t == e->tables.end()) return -ENOENT;
  const std::vector<TableRow> rows = t->second.source();
  // DPDK nests one level of containers: the page is a dict of rows
  // ("row<n>", each a dict) and "next".
  rte_tel_data_start_dict(d);
  size_t i = first;
  for (; i < rows.size() && i < first + kRowsPerPage; ++i) {
    rte_tel_data* row = rte_tel_data_alloc();
    if (row == nullptr) break;
    rte_tel_data_start_dict(row);
    for (const TableCell& c : rows[i]) {
      const std::string name(c.name);
      if (c.is_text) {
        rte_tel_data_add_dict_string(row, name.c_str(), c.text.c_str());
      } else {
        rte_tel_data_add_dict_u64(row, name.c_str(), c.number);
      }
    }
    const std::string key = "row" + std::to_string(i);
    if (rte_tel_data_add_dict_container(d, key.c_str(), row, 0) != 0) {
      rte_tel_data_free(row);
      break;
    }
  }
  rte_tel_data_add_dict_u64(d, "next", i < rows.size() ? i : 0);
  return 0;
}

// /uroce/trace[,spec]: switches the trace categories (lib/util/log.hpp)
// when given a spec, and answers each category's state (1 on, 0 off).
int cmd_trace(const char*, const char* params, rte_tel_data* d) {
  if (params != nullptr && *params != '\0' && !trace_apply(params)) return -EINVAL;
  rte_tel_data_start_dict(d);
  for (size_t i = 0; i < kNumTraceCats; ++i) {
    const auto c = static_cast<TraceCat>(i);
    const std::string key(trace_cat_name(c));
    rte_tel_data_add_dict_int(d, key.c_str(), trace_on(c) ? 1 : 0);
  }
  return 0;
}

// Removes `name` from the device's `member` map if `owner` still owns it,
// and the device's entry once nothing is left in it.
template <class Map>
void unregister_owned(const std::string& device, Map DeviceEntry::*member, const std::string& name,
                      const void* owner) {
  std::lock_guard lock(g_mu);
  auto it = registry().find(device);
  if (it == registry().end()) return;
  Map& map = it->second.*member;
  auto e = map.find(name);
  if (e == map.end() || e->second.owner != owner) return;
  map.erase(e);
  if (it->second.empty()) registry().erase(it);
}

void register_commands_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    rte_telemetry_register_cmd("/uroce/devices", cmd_devices, "uroce devices in this process. No parameters");
    rte_telemetry_register_cmd("/uroce/stats", cmd_stats,
                               "Engine counters of a uroce device. Parameters: device name");
    rte_telemetry_register_cmd("/uroce/counters", cmd_counters,
                               "Every counter set (engine, rnic, cm, gsi) of a uroce device. Parameters: device name");
    rte_telemetry_register_cmd("/uroce/trace", cmd_trace, "Trace categories. Parameters: qp=on,conn=off, all, none");
    rte_telemetry_register_cmd("/uroce/neigh", cmd_neigh,
                               "Neighbour table statistics of a uroce device. Parameters: device name");
    rte_telemetry_register_cmd("/uroce/qps", cmd_qps,
                               "A uroce device's QPs, a page at a time. Parameters: device name[,first row]");
  });
}

}  // namespace

void telemetry_register(const std::string& device, Engine* engine) {
  register_commands_once();
  std::lock_guard lock(g_mu);
  registry()[device].engine = engine;
}

void telemetry_unregister(const std::string& device) {
  std::lock_guard lock(g_mu);
  registry().erase(device);
}

void telemetry_register_set(const std::string& device, const std::string& set, const void* owner,
                            CounterSource source) {
  register_commands_once();
  std::lock_guard lock(g_mu);
  registry()[device].sets[set] = SetEntry{owner, std::move(source)};
}

void telemetry_unregister_set(const std::string& device, const std::string& set, const void* owner) {
  unregister_owned(device, &DeviceEntry::sets, set, owner);
}

void telemetry_register_table(const std::string& device, const std::string& table, const void* owner,
                              TableSource source) {
  register_commands_once();
  std::lock_guard lock(g_mu);
  registry()[device].tables[table] = TableEntry{owner, std::move(source)};
}

void telemetry_unregister_table(const std::string& device, const std::string& table, const void* owner) {
  unregister_owned(device, &DeviceEntry::tables, table, owner);  // waits for a reader of the table to finish
}

}  // namespace uroce::transport
