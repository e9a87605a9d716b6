// Engine counters through DPDK telemetry, so they can be read from a
// running process with `uroce stats` or DPDK's own client
// (`dpdk-telemetry.py -f uroce-<pid>`):
//
//   /uroce/devices            the engines in this process, by device name
//   /uroce/stats,<device>     every counter of that device's engine
//   /uroce/neigh,<device>     its neighbour table size and statistics
//
// Engines register when they start and unregister before they are
// destroyed.  The telemetry thread reads counters (relaxed atomics); the
// registry is guarded by a mutex.
#pragma once

#include <string>

namespace uroce::transport {

class Engine;

void telemetry_register(const std::string& device, Engine* engine);
void telemetry_unregister(const std::string& device);

}  // namespace uroce::transport
