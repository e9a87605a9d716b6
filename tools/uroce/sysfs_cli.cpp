// `uroce sysfs DIR`: the part of a kernel RDMA device's sysfs directory
// that programs look for, for the devices a program would get (uroced's,
// by the drop-in's rule, else the in-process configuration), written under
// DIR as /sys/class/infiniband would hold it.  There is no kernel device
// behind uroce, so nothing under /sys/class/infiniband exists; `uroce-run
// --sysfs` runs a program in a mount namespace of its own with DIR
// mounted there (README "What programs look for outside the libraries").
// For each device DIR/<name>/ holds:
//   node_type            "1: CA"
//   ports/1/link_layer   "Ethernet"
//   device/net/<netdev>/ the kernel netdev the device's port shares, when
//                        it has one (af_packet, af_xdp, a PCI function's
//                        netdev): rdma-core's pyverbs rdma_cm tests find
//                        the device's IP address through it
// Nothing is written for what changes while a program runs (GIDs, port
// state): the drop-in answers those through the verbs.
// Exit: 0 written; 1 no device, or DIR could not be written; 2 usage.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "drivers/daemon/link.hpp"
#include "drivers/daemon/msg_socket.hpp"
#include "drivers/dpdk/devargs.hpp"
#include "lib/config/config.hpp"
#include "tools/uroce/commands.hpp"
#include "tools/uroce/exit_status.hpp"

namespace uroce::tools {
namespace {

namespace fs = std::filesystem;

struct SysfsDevice {
  std::string name;
  std::string netdev;  // empty: none
};

// The kernel netdev an in-process device's port shares: af_packet's and
// af_xdp's iface, or a PCI function's own netdev (the real sysfs).
std::string netdev_of(const config::DeviceConfig& d) {
  if (d.kind != config::DeviceKind::kDpdk) return {};
  auto args = drivers::dpdk::parse_devargs(d.devargs);
  if (!args) return {};
  const std::string_view drv = drivers::dpdk::vdev_driver(args->name);
  if (drivers::dpdk::is_af_packet(args->name) || drv == "net_af_xdp") {
    if (auto iface = args->get("iface")) return std::string(*iface);
    return {};
  }
  if (drivers::dpdk::is_pci_address(args->name)) {
    const fs::path net = fs::path("/sys/bus/pci/devices") / drivers::dpdk::canonical_pci_address(args->name) / "net";
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(net, ec)) return e.path().filename().string();
  }
  return {};
}

std::optional<std::vector<SysfsDevice>> devices(std::string* why) {
  std::vector<SysfsDevice> out;
  if (const auto sock = drivers::daemon::client_socket(config::kEnvDevice, config::kEnvConfig)) {
    auto link = drivers::daemon::Link::connect(*sock, "uroce-sysfs");
    if (!link) {
      *why = link.error().message;
      return std::nullopt;
    }
    for (const drivers::daemon::DeviceDesc& d : (*link)->devices()) out.push_back({d.name, d.netdev});
    return out;
  }
  auto cfg = config::load_config(config::process_env());
  if (!cfg) {
    *why = "configuration: " + cfg.error().message();
    return std::nullopt;
  }
  for (const config::DeviceConfig& d : cfg->devices) out.push_back({d.name, netdev_of(d)});
  return out;
}

bool write_file(const fs::path& p, std::string_view text) {
  std::ofstream f(p);
  f << text << '\n';
  return static_cast<bool>(f);
}

int run(const std::string& dir) {
  std::string why;
  const auto devs = devices(&why);
  if (!devs) {
    fmt::print(stderr, "uroce sysfs: {}\n", why);
    return kExitFailed;
  }
  if (devs->empty()) {
    fmt::print(stderr, "uroce sysfs: no device configured\n");
    return kExitFailed;
  }
  for (const SysfsDevice& d : *devs) {
    const fs::path base = fs::path(dir) / d.name;
    std::error_code ec;
    fs::create_directories(base / "ports" / "1", ec);
    if (!ec && !d.netdev.empty()) fs::create_directories(base / "device" / "net" / d.netdev, ec);
    if (ec || !write_file(base / "node_type", "1: CA") || !write_file(base / "ports" / "1" / "link_layer", "Ethernet")) {
      fmt::print(stderr, "uroce sysfs: cannot write {}: {}\n", base.string(),
                 ec ? ec.message() : std::string(std::strerror(errno)));
      return kExitFailed;
    }
    fmt::print("{}{}\n", d.name, d.netdev.empty() ? std::string(" (no netdev)") : " " + d.netdev);
  }
  return kExitOk;
}

}  // namespace

void add_sysfs_command(CLI::App& app, int& exit_status) {
  auto dir = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand(
      "sysfs",
      "Write what programs look for under /sys/class/infiniband (node type, link layer, the device's netdev) for "
      "the devices a program would get into DIR; uroce-run --sysfs mounts it there. Exit 0: written; 1: no "
      "device or DIR not writable; 2: usage.");
  sub->add_option("DIR", *dir, "where to write the tree (one directory per device)")->required();
  sub->callback([dir, &exit_status] { exit_status = run(*dir); });
}

}  // namespace uroce::tools
