// uroced: the shared uroce device (issue 15; DESIGN.md "The shared
// device").  Owns the configured ports (the same TOML file and variables
// as the libraries: UROCE_CONFIG, UROCE_DEVICE, UROCE_IP ...), answers
// ARP/ND/ICMP where it owns addresses, runs QP 1 and the CM routing for
// every process, and serves the drop-in libraries of every RDMA program on
// the host over a Unix socket (UROCE_SOCKET, else /run/uroce/uroced.sock).
//
//   uroced                      # foreground; "uroced: ready" once it accepts clients
//   systemctl start uroced      # the unit it ships (Type=notify)
//
// SIGTERM, SIGINT and SIGHUP stop it cleanly: every client sees its
// device go (IBV_EVENT_DEVICE_FATAL, RDMA_CM_EVENT_DEVICE_REMOVAL), the
// ports close.
#include <grp.h>
#include <signal.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <rte_log.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cm/device_cm.hpp"
#include "daemon/port_space.hpp"
#include "daemon/server.hpp"
#include "daemon/switch.hpp"
#include "drivers/daemon/msg_socket.hpp"
#include "drivers/devnode.hpp"
#include "lib/util/devnode.hpp"
#include "lib/util/log.hpp"
#include "transport/device.hpp"

namespace {

using namespace uroce;

constexpr int kExitOk = 0;
constexpr int kExitUsage = 2;
constexpr int kExitFailed = 1;
// The engine threads' SCHED_FIFO priority while they may sleep
// (--no-realtime: none).  Idle, they sleep (EngineConfig::idle_wait: after
// at most params::kIdleWaitSpinNs of spinning) unless a client spins on a
// CQ; then they poll at SCHED_OTHER and yield between idle turns (busy
// polling, --no-busy-poll: never), never at this priority.  Measured: at
// SCHED_OTHER a woken daemon waited behind spinning applications
// (perftest) for whole scheduler slices, RC retries ran out (ib_send_lat
// between two namespaces: RETRY_EXC_ERR in 3 runs of 3, and ACK
// timeouts), at SCHED_FIFO 1 none in every run since.
constexpr int kRealtimePriority = 1;

std::string addresses_text(const transport::DeviceInfo& info) {
  std::string s;
  for (const config::IpPrefix& a : info.addresses) {
    const transport::IpAddr ip{a.addr.bytes};
    if (!s.empty()) s += ", ";
    if (ip.is_v4()) {
      const uint32_t v = ip.as_v4();
      s += fmt::format("{}.{}.{}.{}/{}", v >> 24, (v >> 16) & 255, (v >> 8) & 255, v & 255, a.prefix_len);
    } else {
      std::string h;
      for (int i = 0; i < 16; i += 2) h += fmt::format("{}{:x}", i == 0 ? "" : ":", (a.addr.bytes[i] << 8) | a.addr.bytes[i + 1]);
      s += fmt::format("{}/{}", h, a.prefix_len);
    }
  }
  return s.empty() ? "no address" : s;
}

// The command line.
struct Options {
  std::string socket = drivers::daemon::socket_path();
  std::string config_file;
  std::string mode_text = "0666";
  std::string group_name;
  uint32_t max_clients = 1024;
  bool no_realtime = false;
  bool no_busy_poll = false;
};

// The socket's mode and group, from the options: false (with a message)
// when either is not one.
bool socket_access(const Options& o, daemon::ServerConfig& scfg) {
  char* end = nullptr;
  const unsigned long mode = std::strtoul(o.mode_text.c_str(), &end, 8);
  if (end == o.mode_text.c_str() || *end != '\0' || mode > 0777) {
    fmt::print(stderr, "uroced: --socket-mode {}: not an octal mode\n", o.mode_text);
    return false;
  }
  scfg.socket_mode = static_cast<mode_t>(mode);
  if (!o.group_name.empty()) {
    const struct group* g = ::getgrnam(o.group_name.c_str());
    if (g == nullptr) {
      fmt::print(stderr, "uroced: --socket-group {}: no such group\n", o.group_name);
      return false;
    }
    scfg.socket_group = g->gr_gid;
  }
  return true;
}

// Every configured device, opened as the daemon runs them, with its switch.
// False (with a message) when one does not start.
bool open_devices(transport::Devices& devs, const std::vector<std::string>& names, const Options& o,
                  daemon::PortSpace& ports, std::unique_ptr<daemon::Server>& server,
                  std::vector<std::unique_ptr<daemon::Switch>>& switches, std::vector<daemon::DeviceEntry>& entries) {
  for (const std::string& name : names) {
    transport::OpenOptions oo;
    oo.idle_wait = true;  // the daemon sleeps when nothing happens, and wakes at once
    oo.realtime_priority = o.no_realtime ? 0 : kRealtimePriority;
    oo.hold_acks = false;  // the clients' RNICs coalesce their ACKs; the daemon only carries frames
    auto d = devs.open(name, oo);
    if (!d) {
      fmt::print(stderr, "uroced: device {} did not start: {}\n", name, d.error().message);
      return false;
    }
    auto* cm = (*d)->client<cm::DeviceCm>();
    daemon::Switch::Config swcfg;
    swcfg.busy_poll = !o.no_busy_poll;
    switches.push_back(std::make_unique<daemon::Switch>(**d, ports, *cm, swcfg, [&server](daemon::ClientId c) {
      if (server) server->report_violation(c);
    }));
    entries.push_back({*d, switches.back().get()});
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"uroced: the shared uroce RoCEv2 device for every RDMA program on this host.", "uroced"};
  Options o;
  app.add_option("--socket", o.socket, "the Unix socket clients connect to (default: UROCE_SOCKET, else " +
                                           std::string(drivers::daemon::kDefaultSocket) + ")");
  app.add_option("--config", o.config_file, "the configuration file (default: UROCE_CONFIG, else /etc/uroce.toml)");
  app.add_option("--socket-mode", o.mode_text, "the socket's permissions, octal (default 0666: every local user)");
  app.add_option("--socket-group", o.group_name, "the socket's group (with --socket-mode 0660: only its members)");
  app.add_option("--max-clients", o.max_clients, "processes served at once (default 1024)");
  app.add_flag("--no-realtime", o.no_realtime,
               "run the engine threads at SCHED_OTHER (default: SCHED_FIFO 1, as they sleep when idle)");
  app.add_flag("--no-busy-poll", o.no_busy_poll,
               "sleep whenever idle, even while a client spins on a completion queue (default: poll for it)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUsage;
  }
  daemon::ServerConfig scfg;
  scfg.socket_path = o.socket;
  scfg.max_clients = o.max_clients;
  if (!socket_access(o, scfg)) return kExitUsage;
  if (!o.config_file.empty()) ::setenv("UROCE_CONFIG", o.config_file.c_str(), 1);
  // The daemon serves; it is never a client of another daemon.
  ::unsetenv(std::string(drivers::daemon::kEnvSocket).c_str());

  // The stop signals go to one thread that waits for them (blocked
  // everywhere else, before any thread starts: the EAL's inherit it).
  sigset_t stop_set;
  sigemptyset(&stop_set);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop_set, sig);
  pthread_sigmask(SIG_BLOCK, &stop_set, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  transport::Devices devs;
  auto added = devs.add_client([](transport::Device& d) -> drivers::Result<std::unique_ptr<transport::DeviceClient>> {
    cm::CmConfig cfg;
    cfg.no_listener_grace_ns = 0;  // a REQ nobody listens for is rejected at once, as ib_cm does
    auto c = cm::DeviceCm::open(d.rnic(), cfg);
    if (!c) return c.error();
    return std::unique_ptr<transport::DeviceClient>(std::move(*c));
  });
  if (!added) {
    fmt::print(stderr, "uroced: {}\n", added.error().message);
    return kExitFailed;
  }
  auto names = devs.names();
  if (!names) {
    fmt::print(stderr, "uroced: configuration: {}\n", names.error().message);
    return kExitFailed;
  }
  if (names->empty()) {
    fmt::print(stderr,
               "uroced: no device is configured: set UROCE_DEVICE (a DPDK port, e.g. net_af_packet0,iface=eth1) "
               "or list [[device]] entries in the configuration file\n");
    return kExitUsage;
  }

  daemon::PortSpace ports;
  std::vector<std::unique_ptr<daemon::Switch>> switches;
  std::vector<daemon::DeviceEntry> entries;
  std::unique_ptr<daemon::Server> server;
  if (!open_devices(devs, *names, o, ports, server, switches, entries)) return kExitFailed;
  // The nodes UCX looks for, one per device the clients see (drivers/devnode.hpp).
  if (drivers::may_make_dev_nodes()) {
    for (const std::string& e : drivers::make_dev_nodes(kDevNodeDir, static_cast<unsigned>(names->size())).errors) {
      fmt::print(stderr, "uroced: device node: {}\n", e);
    }
  }
  // The daemon's own lines (clients coming and going) at INFO, after the
  // EAL set every level.
  log_set_level(LogType::Daemon, LogLevel::Info);
  server = std::make_unique<daemon::Server>(scfg, entries, ports);
  if (auto st = server->start(); !st) {
    fmt::print(stderr, "uroced: {}\n", st.error().message);
    server.reset();
    switches.clear();
    devs.shutdown();
    return kExitFailed;
  }
  std::atomic<bool> signalled{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&stop_set, &sig);
    signalled.store(true);
    server->stop();
  });
  for (const daemon::DeviceEntry& e : entries) {
    const transport::DeviceInfo& info = e.dev->info();
    fmt::print("uroced: {} on {} ({}, MTU {}, link {})\n", info.name, info.port, addresses_text(info), info.mtu,
               e.dev->port().link_up() ? "up" : "down");
  }
  fmt::print("uroced: ready: {} device(s); clients connect to {}\n", entries.size(), o.socket);
  std::fflush(stdout);
  sd_notify(0, "READY=1\nSTATUS=serving RDMA programs");

  server->run();

  sd_notify(0, "STOPPING=1");
  // run() may have ended without a signal (a fatal epoll error): wake the waiter.
  if (!signalled.load()) pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  server.reset();   // every client's sockets hang up
  switches.clear(); // the engines get their own sinks back
  devs.shutdown();
  fmt::print("uroced: stopped\n");
  return kExitOk;
}
