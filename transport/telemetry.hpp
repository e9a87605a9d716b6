// Every counter set of a running process through DPDK telemetry, so that
// `uroce stats` (or DPDK's own client, `dpdk-telemetry.py -f uroce-<pid>`)
// reads them with no configuration (telemetry is on by default):
//
//   /uroce/devices              the devices in this process, by name
//   /uroce/stats,<device>       that device's engine counters (flat)
//   /uroce/counters,<device>    every counter set of that device, by set:
//                               {"engine": {...}, "rnic": {...}, "cm": {...}, ...}
//   /uroce/neigh,<device>       its neighbour table size and statistics
//   /uroce/qps,<device>[,<n>]   its QPs from the n-th, a page of them (`uroce qp`)
//
// Each layer registers its own sets when it comes up (the engine "engine",
// the RNIC "rnic", the connection manager "cm" and "gsi") and unregisters
// them before they are destroyed.  The telemetry thread reads counters
// (relaxed atomics); the registry is guarded by a mutex, held while it
// reads, so a set never goes away under a reader.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace uroce::transport {

class Engine;

// f(name, value) for every counter of a set.
using CounterVisitor = std::function<void(std::string_view, uint64_t)>;
using CounterSource = std::function<void(const CounterVisitor&)>;

void telemetry_register(const std::string& device, Engine* engine);
// Unregisters the device's engine and every set of that device (an empty
// name: nothing; it makes sure the registry exists).
void telemetry_unregister(const std::string& device);

// A named counter set of `device`, registered by `owner` (replaces one of
// the same name).  Unregistering removes it only if `owner` still owns it
// (two test devices of one name never remove each other's).
void telemetry_register_set(const std::string& device, const std::string& set, const void* owner,
                            CounterSource source);
void telemetry_unregister_set(const std::string& device, const std::string& set, const void* owner);

// A table of rows, each row (column, value) pairs, a value a number or a
// text: `/uroce/qps,<device>[,<first row>]` answers the device's "qps"
// table a page at a time (DPDK's replies are bounded):
//   {"row0": {"qpn": 7, "type": "RC", ...}, "row1": {...}, ..., "next": 16}   (next: 0 = the last page)
// The source runs on the telemetry thread with the registry's mutex held
// (it may wait for the engine's loop, which never takes that mutex).
struct TableCell {
  std::string_view name;  // a literal
  uint64_t number = 0;
  std::string text;
  bool is_text = false;
};
using TableRow = std::vector<TableCell>;
using TableSource = std::function<std::vector<TableRow>()>;

void telemetry_register_table(const std::string& device, const std::string& table, const void* owner,
                              TableSource source);
void telemetry_unregister_table(const std::string& device, const std::string& table, const void* owner);

// Adapts a CounterSet (lib/util/counters.hpp) to a CounterSource.
template <class Set>
CounterSource counter_source(const Set& s) {
  return [&s](const CounterVisitor& f) { s.for_each([&](std::string_view n, std::string_view, uint64_t v) { f(n, v); }); };
}

}  // namespace uroce::transport
