// `uroce node`: brings up the configured device (UROCE_CONFIG, UROCE_DEVICE,
// UROCE_IP, …) and, by options:
//   --ping IP [--count N] [--icmp]  resolves IP through the engine (ARP or
//                                   ND) and makes N round trips with a peer
//                                   running `uroce node --echo` (RoCEv2 UD
//                                   SEND_ONLY, node_msg.hpp), or with --icmp
//                                   ICMP echo with any host; reports RTT
//   --echo [--count N]              answers pings (until N, a signal, or
//                                   --seconds)
//   --seconds S                     bounds the whole run
// and prints the engine's counters at exit.  Telemetry is on (for
// `uroce stats`) unless --no-telemetry.
// Exit: 0 ok, 1 failure (no answer, a lost round trip, a device that does
// not start), 2 usage.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "lib/config/config.hpp"
#include "lib/config/mac.hpp"
#include "tools/uroce/commands.hpp"
#include "tools/uroce/exit_status.hpp"
#include "tools/uroce/node_session.hpp"
#include "transport/device.hpp"

namespace uroce::tools {
namespace {

using Clock = std::chrono::steady_clock;
using transport::Device;

constexpr uint32_t kDefaultCount = 10;
constexpr uint32_t kDefaultTimeoutMs = 1000;
constexpr size_t kDefaultPayload = 32;
constexpr auto kLinkWait = std::chrono::seconds(5);
constexpr auto kWaitStep = std::chrono::milliseconds(1);
constexpr uint32_t kIcmpIdMask = 0xFFFF;
constexpr double kNsPerUs = 1e3;
constexpr double kNsPerMs = 1e6;
constexpr size_t kMedianPct = 50;
constexpr size_t kTailPct = 99;
constexpr size_t kPercent = 100;

std::atomic<bool> g_stop{false};

extern "C" void on_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

struct NodeArgs {
  std::string ping;
  bool echo = false;
  bool icmp = false;
  uint32_t count = 0;  // 0: the role's default
  bool count_set = false;
  size_t size = kDefaultPayload;
  uint32_t interval_ms = 0;
  uint32_t timeout_ms = kDefaultTimeoutMs;
  uint32_t resolve_tries = 1;
  double seconds = 0;
  std::string device;
  bool no_telemetry = false;
  bool verbose = false;
};

Clock::time_point deadline_of(const NodeArgs& a) {
  if (a.seconds <= 0) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.seconds));
}

// Drives (inline progress) or waits for (engine thread) the device until
// `done`, the deadline or a signal; true when `done`.
bool wait_until(Device& dev, const std::function<bool()>& done, Clock::time_point deadline) {
  while (!done()) {
    if (g_stop.load(std::memory_order_relaxed) || Clock::now() >= deadline) return false;
    if (!dev.progress()) std::this_thread::sleep_for(kWaitStep);
  }
  return true;
}

std::string addresses_text(const transport::DeviceInfo& info) {
  std::string s;
  for (const auto& p : info.addresses) s += (s.empty() ? "" : " ") + config::to_string(p);
  return s.empty() ? "no address" : s;
}

void print_device(const transport::DeviceInfo& info) {
  const std::string netdev =
      info.netdev.empty() ? "no kernel netdev"
                          : fmt::format("netdev {} ({})", info.netdev, drivers::dpdk::to_string(info.netdev_role));
  fmt::print("uroce node: {} on {} ({}, {}): mac {}, mtu {}, {}; {} answers ARP/ND/ICMP\n", info.name, info.port,
             info.driver, netdev, config::format_mac(info.mac), info.mtu, addresses_text(info),
             info.answer_host ? "the engine" : "the kernel");
  if (info.ingress_filter) {
    fmt::print("uroce node: {}'s kernel stack is spared our RoCE frames (tcx ingress filter)\n", info.netdev);
  }
  if (!info.pcap.empty()) fmt::print("uroce node: capturing to {}\n", info.pcap);
  for (const std::string& w : info.warnings) fmt::print(stderr, "uroce node: warning: {}\n", w);
}

void print_counters(Device& dev) {
  fmt::print("counters ({}, non-zero):\n", dev.name());
  dev.engine().for_each_counter([](std::string_view name, std::string_view help, uint64_t v) {
    if (v != 0) fmt::print("  {}={}  {}\n", name, v, help);
  });
  const drivers::PortStats ps = dev.port().stats();
  fmt::print("port {}: rx_frames={} tx_frames={} rx_dropped={} tx_dropped={} burst_faults={}\n", dev.info().port,
             ps.rx_frames, ps.tx_frames, ps.rx_dropped, ps.tx_dropped, ps.burst_faults);
}

void print_rtt(std::vector<uint64_t> rtt) {
  if (rtt.empty()) return;
  std::sort(rtt.begin(), rtt.end());
  uint64_t sum = 0;
  for (uint64_t v : rtt) sum += v;
  const size_t n = rtt.size();
  const auto us = [](double ns) { return ns / kNsPerUs; };
  fmt::print("rtt min/avg/p50/p99/max = {:.2f}/{:.2f}/{:.2f}/{:.2f}/{:.2f} us\n", us(rtt.front()),
             us(static_cast<double>(sum) / n), us(rtt[n * kMedianPct / kPercent]),
             us(rtt[std::min(n - 1, n * kTailPct / kPercent)]), us(rtt.back()));
}

bool ping_ok(const PingResults& r, const PingConfig& cfg) {
  return r.failure.empty() && r.received > 0 && r.received == r.sent && (cfg.count == 0 || r.sent == cfg.count);
}

int report_ping(const NodeArgs& a, const PingConfig& cfg, const PingResults& r) {
  if (r.resolved) {
    fmt::print("resolved {} at {} in {:.3f} ms\n", a.ping, config::format_mac(r.peer_mac), r.resolve_ns / kNsPerMs);
  }
  if (a.verbose) {
    for (size_t i = 0; i < r.rtt_ns.size(); ++i) fmt::print("rtt[{}]={:.2f} us\n", i, r.rtt_ns[i] / kNsPerUs);
  }
  fmt::print("--- {} ({}): {} sent, {} received, {} lost, {} unexpected\n", a.ping,
             cfg.icmp ? "ICMP echo" : "RoCEv2", r.sent, r.received, r.lost, r.unexpected);
  print_rtt(r.rtt_ns);
  if (!r.failure.empty()) fmt::print(stderr, "uroce node: ping {}: {}\n", a.ping, r.failure);
  return ping_ok(r, cfg) ? kExitOk : kExitFailed;
}

int run_ping(Device& dev, const NodeArgs& a, const transport::IpAddr& target, IcmpReplyTap* tap,
             Clock::time_point deadline) {
  PingConfig cfg;
  cfg.target = target;
  cfg.count = a.count_set ? a.count : kDefaultCount;
  cfg.icmp = a.icmp;
  cfg.icmp_id = static_cast<uint16_t>(static_cast<uint32_t>(getpid()) & kIcmpIdMask);
  cfg.payload = a.size;
  cfg.resolve_tries = a.resolve_tries;
  cfg.timeout_ns = uint64_t{a.timeout_ms} * static_cast<uint64_t>(kNsPerMs);
  cfg.interval_ns = uint64_t{a.interval_ms} * static_cast<uint64_t>(kNsPerMs);
  if (!wait_until(dev, [&] { return dev.port().link_up(); }, std::min(deadline, Clock::now() + kLinkWait))) {
    fmt::print(stderr, "uroce node: the link of {} did not come up\n", dev.name());
    return kExitFailed;
  }
  fmt::print("PING {} ({}, {}-byte payload)\n", a.ping,
             a.icmp ? "ICMP echo" : fmt::format("RoCEv2 UD SEND_ONLY to QP {:#x}", kNodeQpn.value()), a.size);
  transport::Engine& engine = dev.engine();
  PingSession session(engine, cfg);
  engine.run_sync([&] {
    engine.set_roce_sink(&session);
    if (tap != nullptr) tap->attach(&session);
    session.start();
  });
  wait_until(dev, [&] { return session.done(); }, deadline);
  dev.stop();  // the session's results are ours from here on
  engine.set_resolve_hook(nullptr);
  engine.set_roce_sink(nullptr);
  if (tap != nullptr) tap->attach(nullptr);
  return report_ping(a, cfg, session.results());
}

int run_echo(Device& dev, const NodeArgs& a, Clock::time_point deadline) {
  transport::Engine& engine = dev.engine();
  EchoSession session(engine, a.count);
  engine.run_sync([&] { engine.set_roce_sink(&session); });
  fmt::print("uroce node: echo ready on {} (QP {:#x})\n", dev.name(), kNodeQpn.value());
  const bool done = wait_until(dev, [&] { return session.done(); }, deadline);
  dev.stop();
  engine.set_roce_sink(nullptr);
  fmt::print("echoed {} pings ({} other frames ignored)\n", session.echoed(), session.ignored());
  return a.count_set && a.count != 0 && !done ? kExitFailed : kExitOk;
}

// Usage problems the parser cannot see; empty when there are none.
std::string usage_error(const NodeArgs& a) {
  if (a.ping.empty() == !a.echo) return "give exactly one of --ping IP and --echo";
  if (a.echo && (a.icmp || a.interval_ms != 0)) return "--icmp and --interval-ms go with --ping";
  if (a.size < kNodeMsgSize) return fmt::format("--size: at least {} bytes", kNodeMsgSize);
  return {};
}

int run_node(const NodeArgs& a) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a log file sees each line as it happens
  if (const std::string why = usage_error(a); !why.empty()) {
    fmt::print(stderr, "uroce node: {}\n", why);
    return kExitError;
  }
  transport::IpAddr target;
  if (!a.ping.empty()) {
    auto ip = config::parse_ip_address(a.ping);
    if (!ip) {
      fmt::print(stderr, "uroce node: --ping: {}\n", ip.error());
      return kExitError;
    }
    target = transport::IpAddr::v6(ip->bytes);
  }
  auto cfg = config::load_config(config::process_env());
  if (!cfg) {
    fmt::print(stderr, "uroce node: {}\n", cfg.error().message());
    return kExitFailed;
  }
  if (!a.no_telemetry) cfg->eal.telemetry = true;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  const Clock::time_point deadline = deadline_of(a);

  transport::Devices& devices = transport::Devices::instance();
  (void)devices.configure(std::move(*cfg));
  IcmpReplyTap* tap = nullptr;
  transport::OpenOptions options;
  if (a.icmp) {
    options.wrap_port = [&tap](drivers::Port& inner) {
      auto t = std::make_unique<IcmpReplyTap>(inner);
      tap = t.get();
      return std::unique_ptr<drivers::Port>(std::move(t));
    };
  }
  auto dev = devices.open(a.device, options);
  if (!dev) {
    fmt::print(stderr, "uroce node: {}\n", dev.error().message);
    devices.shutdown();
    return kExitFailed;
  }
  print_device((*dev)->info());
  int rc = kExitOk;
  if (a.size > max_node_payload((*dev)->info().mtu)) {
    fmt::print(stderr, "uroce node: --size {} does not fit the MTU {}\n", a.size, (*dev)->info().mtu);
    rc = kExitError;
  } else {
    rc = a.echo ? run_echo(**dev, a, deadline) : run_ping(**dev, a, target, tap, deadline);
  }
  (*dev)->stop();
  print_counters(**dev);
  devices.shutdown();
  return rc;
}

}  // namespace

void add_node_command(CLI::App& app, int& exit_status) {
  auto a = std::make_shared<NodeArgs>();
  CLI::App* sub = app.add_subcommand(
      "node",
      "Bring up the configured uroce device and ping a peer (--ping IP) or answer pings (--echo) with RoCEv2 UD "
      "frames (or ICMP echo with --icmp); prints RTT and the engine's counters. Exit 0: ok; 1: failure; 2: usage.");
  sub->add_option("--ping", a->ping, "the peer's IPv4 or IPv6 address");
  sub->add_flag("--echo", a->echo, "answer pings until --count, --seconds or a signal");
  sub->add_option("--count", a->count, fmt::format("round trips to make (default {}; 0: until --seconds) or, with "
                                                   "--echo, pings to answer before exiting (0: no limit)",
                                                   kDefaultCount))
      ->each([a](const std::string&) { a->count_set = true; });
  sub->add_flag("--icmp", a->icmp, "ping with ICMP(v6) echo: answered by the peer's engine, or its kernel");
  sub->add_option("--size", a->size, "payload bytes per ping")->capture_default_str();
  sub->add_option("--interval-ms", a->interval_ms, "wait between a reply and the next ping")->capture_default_str();
  sub->add_option("--timeout-ms", a->timeout_ms, "a round trip with no reply by then is lost")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--resolve-tries", a->resolve_tries,
                  "ARP/ND probe sequences (3 requests, 1 s apart) before the peer counts as unreachable")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--seconds", a->seconds, "stop after this long (default: no limit)")->check(CLI::NonNegativeNumber);
  sub->add_option("--device", a->device, "the configured device to use (default: the first)");
  sub->add_flag("--no-telemetry", a->no_telemetry, "no DPDK telemetry socket (uroce stats cannot read this process)");
  sub->add_flag("-v,--verbose", a->verbose, "print every round trip's RTT");
  sub->callback([a, &exit_status] { exit_status = run_node(*a); });
}

}  // namespace uroce::tools
