// `uroce memif-wire --socket-a PATH --socket-b PATH`: a memif wire that
// outlives the programs on it.  Two memif ports in role=server, one per
// socket, and every frame received on one sent out of the other (Relay,
// memif_wire.hpp).  Programs connect as memif clients (UROCE_DEVICE=
// net_memif0,role=client,socket=PATH,socket-abstract=no), one per socket,
// and may come and go: a server port takes the next client when one leaves.
// So a program that wants its link up when it starts (perftest refuses a
// port that is not ACTIVE) finds it up, whichever side starts first.
//
// Prints "uroce memif-wire: up" once both ports are started, and its
// counters when SIGINT or SIGTERM stops it.
// Exit: 0 stopped by a signal, 1 a port or the EAL did not start, 2 usage.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <sched.h>
#include <time.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "drivers/dpdk/dpdk_port.hpp"
#include "drivers/dpdk/eal.hpp"
#include "tools/uroce/commands.hpp"
#include "tools/uroce/exit_status.hpp"
#include "tools/uroce/memif_wire.hpp"

namespace uroce::tools {
namespace {

namespace dpdk = drivers::dpdk;

// The idle policy of the engine thread (transport/engine.cpp): spin for a
// while, then yield the core, then nap; the nap is shorter, as every frame
// of the programs' exchange passes here.  A frame arriving during a nap
// waits at most kIdleNap.
constexpr uint64_t kSpinNs = 20'000;
constexpr uint64_t kYieldNs = 2'000'000;
constexpr timespec kIdleNap{0, 20'000};
constexpr uint64_t kNsPerS = 1'000'000'000;
// Relayed frames are copied into the peer's ring and freed at once: a
// small pool per port does.
constexpr uint32_t kPoolMbufs = 1023;

std::atomic<bool> g_stop{false};

extern "C" void on_wire_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

struct WireArgs {
  std::string socket_a;
  std::string socket_b;
  std::string log_level = "warning";
};

uint64_t steady_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * kNsPerS + static_cast<uint64_t>(ts.tv_nsec);
}

void idle_backoff(uint64_t idle_ns) noexcept {
  if (idle_ns < kSpinNs) return;
  if (idle_ns < kYieldNs) {
    sched_yield();
    return;
  }
  nanosleep(&kIdleNap, nullptr);
}

drivers::Result<std::unique_ptr<dpdk::DpdkPort>> open_server(unsigned index, const std::string& socket) {
  dpdk::DpdkPortConfig pc;
  pc.devargs = fmt::format("net_memif{},role=server,socket={},socket-abstract=no", index, socket);
  pc.pool_mbufs = kPoolMbufs;
  return dpdk::DpdkPort::open(pc);
}

void print_lane(std::string_view name, const LaneCounters& c) {
  std::string line = fmt::format("uroce memif-wire: {} forwarded={}", name, c.forwarded);
  for (size_t i = 0; i < kRelayDropNames.size(); ++i) line += fmt::format(" {}={}", kRelayDropNames[i], c.dropped[i]);
  fmt::print("{}\n", line);
}

void print_port(std::string_view name, const dpdk::DpdkPort& p) {
  const drivers::PortStats s = p.stats();
  fmt::print("uroce memif-wire: port {} rx_dropped={} tx_dropped={}\n", name, s.rx_dropped, s.tx_dropped);
}

void relay_until_stopped(Relay& relay) {
  uint64_t idle_since = 0;  // 0: the last pass moved frames
  while (!g_stop.load(std::memory_order_relaxed)) {
    if (relay.poll() != 0) {
      idle_since = 0;
      continue;
    }
    const uint64_t now = steady_ns();
    if (idle_since == 0) idle_since = now;
    idle_backoff(now - idle_since);
  }
}

int run_wire(const WireArgs& a) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // the ready line reaches a log file at once
  if (a.socket_a == a.socket_b) {
    fmt::print(stderr, "uroce memif-wire: --socket-a and --socket-b must differ\n");
    return kExitError;
  }
  std::signal(SIGINT, on_wire_signal);
  std::signal(SIGTERM, on_wire_signal);
  std::signal(SIGPIPE, SIG_IGN);  // a memif control message to a client that just left
  dpdk::EalOptions eo;
  eo.telemetry = false;
  eo.log_level = a.log_level;
  if (const auto& eal = dpdk::eal_init(eo); !eal) {
    fmt::print(stderr, "uroce memif-wire: EAL: {}\n", eal.error().message);
    return kExitFailed;
  }
  int rc = kExitOk;
  {
    auto port_a = open_server(0, a.socket_a);
    auto port_b = port_a ? open_server(1, a.socket_b) : drivers::Result<std::unique_ptr<dpdk::DpdkPort>>(port_a.error());
    if (!port_b) {
      fmt::print(stderr, "uroce memif-wire: {}\n", port_b.error().message);
      rc = kExitFailed;
    } else {
      fmt::print("uroce memif-wire: a {}\nuroce memif-wire: b {}\n", (*port_a)->name(), (*port_b)->name());
      fmt::print("uroce memif-wire: up\n");
      Relay relay(**port_a, **port_b);
      relay_until_stopped(relay);
      relay.release();
      print_lane("a->b", relay.a_to_b());
      print_lane("b->a", relay.b_to_a());
      print_port("a", **port_a);
      print_port("b", **port_b);
    }
  }  // the ports close here, before the EAL
  (void)dpdk::eal_shutdown();
  return rc;
}

}  // namespace

void add_memif_wire_command(CLI::App& app, int& exit_status) {
  auto a = std::make_shared<WireArgs>();
  CLI::App* sub = app.add_subcommand(
      "memif-wire",
      "A memif wire that outlives the programs on it: two memif server ports (one per socket), every frame "
      "forwarded from one to the other, clients free to come and go. Prints 'uroce memif-wire: up' when ready; "
      "stops on SIGINT/SIGTERM. Exit 0: stopped; 1: a port did not start; 2: usage.");
  sub->add_option("--socket-a", a->socket_a, "the first port's socket path (must not exist yet)")->required();
  sub->add_option("--socket-b", a->socket_b, "the second port's socket path (must not exist yet)")->required();
  sub->add_option("--log-level", a->log_level, "DPDK's --log-level")->capture_default_str();
  sub->callback([a, &exit_status] { exit_status = run_wire(*a); });
}

}  // namespace uroce::tools
