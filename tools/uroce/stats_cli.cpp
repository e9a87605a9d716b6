// `uroce stats [--pid N] [--device NAME] [--json]`: every counter set —
// engine, RNIC, connection manager, GSI port — of running uroce processes,
// read through DPDK telemetry (/uroce/devices, /uroce/counters,<device>;
// transport/telemetry.hpp).  Default: every uroce-<pid> runtime directory.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lib/wire/pkt.hpp"
#include "tools/uroce/commands.hpp"
#include "tools/uroce/exit_status.hpp"
#include "tools/uroce/telemetry_client.hpp"
#include "cm/cm.hpp"
#include "cm/gsi_port.hpp"
#include "transport/engine.hpp"
#include "transport/rnic/rnic.hpp"

namespace uroce::tools {
namespace {

constexpr int kJsonIndent = 2;
constexpr std::string_view kDevicesCommand = "/uroce/devices";
constexpr std::string_view kCountersCommand = "/uroce/counters";

struct StatsArgs {
  int pid = 0;
  std::string device;
  bool json = false;
  bool nonzero = false;
};

// name -> help text, from this build's tables (the process serves values only).
const std::map<std::string, std::string, std::less<>>& counter_help() {
  static const auto table = [] {
    std::map<std::string, std::string, std::less<>> m;
    for (const CounterInfo& c : transport::kEngineCtrInfo) m.emplace(c.name, c.help);
    for (const CounterInfo& c : transport::kProgressCtrInfo) m.emplace(c.name, c.help);
    for (const CounterInfo& c : rnic::kRnicCtrInfo) m.emplace(c.name, c.help);
    for (const CounterInfo& c : cm::kCmCtrInfo) m.emplace(c.name, c.help);
    for (const CounterInfo& c : cm::kGsiCtrInfo) m.emplace(c.name, c.help);
    m.emplace("mem_faults", "accesses to registered memory that found it unmapped (this process, every device)");
    m.emplace("pending_requests", "REQs/SIDR_REQs received and not yet answered");
    m.emplace("timewait", "connections in TimeWait");
    m.emplace("address_handles", "peer address handles the GSI port keeps");
    m.emplace("port_rx_frames", "frames the port delivered");
    m.emplace("port_tx_frames", "frames the port sent");
    m.emplace("port_rx_dropped", "frames lost before the engine saw them (ring full, imissed)");
    m.emplace("port_tx_dropped", "frames handed to the port and not sent");
    m.emplace("port_burst_faults", "bursts cut short by a fault in the PMD (a memif peer unmapping as it left)");
    for (size_t i = 1; i < wire::kNumParseErrors; ++i) {
      const auto e = static_cast<wire::ParseError>(i);
      m.emplace(wire::parse_error_name(e), wire::parse_error_text(e));
    }
    return m;
  }();
  return table;
}

struct DeviceStats {
  std::string device;
  nlohmann::ordered_json sets;  // set -> (name -> value), in the order the process sent them
};

struct ProcessStats {
  int pid = 0;
  std::vector<DeviceStats> devices;
};

Result<std::vector<std::string>, std::string> device_names(TelemetryClient& c, const StatsArgs& args) {
  auto list = c.query(std::string(kDevicesCommand));
  if (!list) return Err{list.error()};
  std::vector<std::string> names;
  for (const auto& n : *list) {
    if (n.is_string() && (args.device.empty() || n.get<std::string>() == args.device)) names.push_back(n.get<std::string>());
  }
  return names;
}

Result<ProcessStats, std::string> read_process(const TelemetryTarget& t, const StatsArgs& args) {
  auto client = TelemetryClient::connect(t.socket);
  if (!client) return Err{client.error()};
  auto names = device_names(*client, args);
  if (!names) return Err{names.error()};
  ProcessStats p{t.pid, {}};
  for (const std::string& dev : *names) {
    auto sets = client->query(std::string(kCountersCommand) + "," + dev);
    if (!sets) return Err{sets.error()};
    p.devices.push_back({dev, std::move(*sets)});
  }
  return p;
}

void print_text(const ProcessStats& p, const StatsArgs& args) {
  for (const DeviceStats& d : p.devices) {
    for (const auto& [set, counters] : d.sets.items()) {
      fmt::print("{}{} {} {}\n", kUroceRuntimePrefix, p.pid, d.device, set);
      std::vector<std::pair<std::string, std::string>> lines;  // name=value, help
      size_t width = 0;
      for (const auto& [name, value] : counters.items()) {
        if (args.nonzero && value == 0) continue;
        const auto help = counter_help().find(name);
        lines.emplace_back(name + "=" + value.dump(), help == counter_help().end() ? "" : help->second);
        width = std::max(width, lines.back().first.size());
      }
      for (const auto& [pair, help] : lines) fmt::print("  {:<{}}  {}\n", pair, width, help);
    }
  }
}

nlohmann::ordered_json to_json(const std::vector<ProcessStats>& all) {
  nlohmann::ordered_json procs = nlohmann::ordered_json::array();
  for (const ProcessStats& p : all) {
    nlohmann::ordered_json devs = nlohmann::ordered_json::object();
    for (const DeviceStats& d : p.devices) devs[d.device] = d.sets;
    procs.push_back({{"pid", p.pid}, {"devices", devs}});
  }
  return {{"processes", procs}};
}

int run_stats(const StatsArgs& args) {
  const std::string base = dpdk_runtime_base();
  std::vector<ProcessStats> all;
  bool any_device = false;
  for (const TelemetryTarget& t : telemetry_targets(args.pid, base)) {
    auto p = read_process(t, args);
    if (!p) {
      // A directory left by a process that died is no error unless asked for.
      if (args.pid != 0) fmt::print(stderr, "uroce stats: pid {}: {}\n", t.pid, p.error());
      continue;
    }
    any_device = any_device || !p->devices.empty();
    all.push_back(std::move(*p));
  }
  if (args.json) {
    fmt::print("{}\n", to_json(all).dump(kJsonIndent));
  } else {
    for (const ProcessStats& p : all) print_text(p, args);
  }
  if (!any_device) {
    fmt::print(stderr, "uroce stats: no running uroce process{}{} answered under {} (is telemetry on?)\n",
               args.pid ? " with pid " + std::to_string(args.pid) : "",
               args.device.empty() ? "" : " with device " + args.device, base);
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

void add_stats_command(CLI::App& app, int& exit_status) {
  auto args = std::make_shared<StatsArgs>();
  CLI::App* sub = app.add_subcommand(
      "stats",
      "Print every counter (engine, rnic, cm, gsi) of running uroce processes, read through DPDK telemetry "
      "(<runtime dir>/uroce-<pid>/dpdk_telemetry.v2). Exit 0: counters printed; 1: no process answered; 2: usage.");
  sub->add_option("--pid", args->pid, "only this process (default: every uroce-<pid> runtime directory)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--device", args->device, "only this device (default: every device of each process)");
  sub->add_flag("--json", args->json, "print one JSON document");
  sub->add_flag("--nonzero", args->nonzero, "leave out counters that are 0 (text output)");
  sub->callback([args, &exit_status] { exit_status = run_stats(*args); });
}

}  // namespace uroce::tools
