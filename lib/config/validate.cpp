// Checks that need more than one key: devargs against kind, spraying
// against loss recovery, default names, names and DPDK devices unique
// across devices.
#include <algorithm>
#include <set>

#include "lib/config/fields.hpp"
#include "lib/config/internal.hpp"

namespace uroce::config {

namespace {

Status check_devargs_present(const Parsed& p, size_t i) {
  const DeviceConfig& dev = p.cfg.devices[i];
  const DeviceOrigin& origin = p.origins[i];
  if (dev.kind == DeviceKind::kDpdk && dev.devargs.empty()) {
    return Err{error_at(p.source, origin.table, device_key_path(i, "devargs"),
                        "missing; a \"dpdk\" device needs DPDK devargs such as \"net_tap0,iface=tap0\"")};
  }
  if (dev.kind == DeviceKind::kSim && !dev.devargs.empty()) {
    return Err{error_at(p.source, origin.devargs, device_key_path(i, "devargs"), "a \"sim\" device takes none")};
  }
  return Ok{};
}

// Spraying reorders a QP's packets: only a selective-repeat responder
// takes that without resending, so a device sprays only toward one
// (DESIGN.md "Spraying"), and only when it offers selective repeat itself.
Status check_spray(const Parsed& p, size_t i) {
  const DeviceConfig& dev = p.cfg.devices[i];
  if (dev.spray_ports > 1 && dev.loss_recovery != LossRecovery::kSelective) {
    return Err{error_at(p.source, p.origins[i].spray_ports, device_key_path(i, "spray_ports"),
                        "needs loss_recovery = \"selective\" (spraying reorders packets)")};
  }
  return Ok{};
}

// An engine on several lcores (transport/lcores.hpp) runs engine threads
// of its own: not inline progress, which has none, and not uroced's
// devices and their clients, whose engine is the daemon's one loop; and
// its capture would miss the workers' frames.
Status check_lcores(const Parsed& p, size_t i) {
  const DeviceConfig& dev = p.cfg.devices[i];
  if (dev.engine_lcores <= 1) return Ok{};
  const auto at = p.origins[i].engine_lcores;
  const std::string key = device_key_path(i, "engine_lcores");
  if (dev.kind == DeviceKind::kDaemon) return Err{error_at(p.source, at, key, "a device uroced serves runs one engine lcore")};
  if (p.cfg.progress == Progress::kInline)
    return Err{error_at(p.source, at, key, "needs engine threads (progress = \"thread\", not \"inline\")")};
  if (dev.pcap || p.cfg.pcap) return Err{error_at(p.source, at, key, "a capture (pcap) needs engine_lcores = 1")};
  return Ok{};
}

// Unnamed devices get the lowest "uroceN" that no device is called, in
// file order: the kernel's way with eth0, eth1, ...
void assign_default_names(Config& cfg) {
  std::set<std::string, std::less<>> taken;
  for (const DeviceConfig& dev : cfg.devices) {
    if (!dev.name.empty()) taken.insert(dev.name);
  }
  size_t next = 0;
  for (DeviceConfig& dev : cfg.devices) {
    if (!dev.name.empty()) continue;
    std::string name;
    do {
      name = std::string(kDefaultNamePrefix) + std::to_string(next++);
    } while (taken.contains(name));
    taken.insert(name);
    dev.name = std::move(name);
  }
}

// The first j < i for which `same(j, i)`.
template <class Same>
std::optional<size_t> earlier_match(size_t i, Same same) {
  for (size_t j = 0; j < i; ++j) {
    if (same(j, i)) return j;
  }
  return std::nullopt;
}

Status check_unique(const Parsed& p, size_t i) {
  const std::vector<DeviceConfig>& devs = p.cfg.devices;
  if (auto j = earlier_match(i, [&](size_t a, size_t b) { return devs[a].name == devs[b].name; })) {
    return Err{error_at(p.source, p.origins[i].name, device_key_path(i, "name"),
                        quote(devs[i].name) + " is already the name of " + device_path(*j))};
  }
  const auto same_port = [&](size_t a, size_t b) {
    return devs[a].kind == DeviceKind::kDpdk && devs[b].kind == DeviceKind::kDpdk &&
           dpdk_device_name(devs[a].devargs) == dpdk_device_name(devs[b].devargs);
  };
  if (auto j = earlier_match(i, same_port)) {
    return Err{error_at(p.source, p.origins[i].devargs, device_key_path(i, "devargs"),
                        "DPDK device " + quote(dpdk_device_name(devs[i].devargs)) + " is already " +
                            device_path(*j) + "'s")};
  }
  return Ok{};
}

}  // namespace

Status validate(Parsed& p) {
  for (size_t i = 0; i < p.cfg.devices.size(); ++i) {
    if (Status s = check_devargs_present(p, i); !s) return s;
    if (Status s = check_spray(p, i); !s) return s;
    if (Status s = check_lcores(p, i); !s) return s;
  }
  assign_default_names(p.cfg);
  for (size_t i = 0; i < p.cfg.devices.size(); ++i) {
    if (Status s = check_unique(p, i); !s) return s;
  }
  return Ok{};
}

}  // namespace uroce::config
