// What uroced serves, as iproute2's `rdma` tool shows a kernel's devices
// (issue 15): `uroce dev`, `uroce client`, `uroce qp` and `uroce
// daemon-stats`, each with --json.  They ask the daemon at its socket
// (--socket, else UROCE_SOCKET, else /run/uroce/uroced.sock) with one Admin
// request (drivers/daemon/proto.hpp); a QP listing asks every client for
// its QPs (state, PSNs, destination, path, rate, loss recovery) and adds
// what the daemon itself knows of them (which QPNs it gave the client,
// what each claimed).  `uroce qp` also lists the QPs of programs whose
// devices are in-process, through their DPDK telemetry (/uroce/qps).
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "drivers/daemon/msg_socket.hpp"
#include "drivers/daemon/proto.hpp"
#include "lib/util/result.hpp"
#include "tools/uroce/commands.hpp"
#include "tools/uroce/exit_status.hpp"
#include "tools/uroce/telemetry_client.hpp"

namespace uroce::tools {
namespace {

namespace proto = drivers::daemon;
using nlohmann::json;
constexpr int kJsonIndent = 2;

struct DaemonArgs {
  std::string socket;
  bool json = false;
  bool nonzero = false;
};

// The daemon's answer to one Admin request, parsed.
Result<json, std::string> ask(const std::string& path, proto::AdminWhat what) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof sa.sun_path) return Err{std::string("socket path too long")};
  std::memcpy(sa.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return Err{std::string("socket: ") + std::strerror(errno)};
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    const int e = errno;
    ::close(fd);
    return Err{"no uroced at " + path + ": " + std::strerror(e)};
  }
  const proto::AdminReq req{static_cast<uint32_t>(what), 0};
  proto::Message rep;
  int rc = proto::send_message(fd, proto::MsgType::Admin, 0, 1, 0, proto::bytes_of(req));
  if (rc == 0) rc = proto::recv_message(fd, &rep);
  ::close(fd);
  rep.close_fds();
  if (rc != 0) return Err{"uroced at " + path + " did not answer: " + std::strerror(rc)};
  if (rep.hdr.status != 0) return Err{"uroced refused: " + std::string(std::strerror(rep.hdr.status))};
  json j = json::parse(std::string(rep.body.begin(), rep.body.end()), nullptr, false);
  if (j.is_discarded()) return Err{std::string("uroced's answer is not JSON")};
  return j;
}

std::string qpn_text(const json& v) { return fmt::format("0x{:06x}", v.get<uint32_t>()); }

void print_devices(const json& devs) {
  for (const json& d : devs) {
    fmt::print("{}: port {} ({}{}) link {} mtu {} (RoCE {}) mac {}\n", d.value("name", ""), d.value("port", ""),
               d.value("driver", ""), d.value("netdev", "").empty() ? "" : ", netdev " + d.value("netdev", ""),
               d.value("link", ""), d.value("mtu", 0), d.value("active_mtu", 0), d.value("mac", ""));
    std::string addrs;
    for (const json& a : d["addresses"]) addrs += (addrs.empty() ? "" : ", ") + a.get<std::string>();
    fmt::print("    addresses {}\n", addrs.empty() ? "none" : addrs);
    if (!d.value("netdev", "").empty()) {
      fmt::print("    the kernel's stack {}\n", d.value("ingress_filter", false)
                                                     ? "is spared our RoCE frames (tcx ingress filter)"
                                                     : "also takes our RoCE frames (no ingress filter)");
    }
    fmt::print("    clients {}, QPNs {}, claimed paths {}, multicast groups {}, CM connections {} ({} pending)\n",
               d.value("clients", 0), d.value("qpns", 0), d.value("claims", 0), d.value("mcast_groups", 0),
               d.value("cm_connections", 0), d.value("cm_pending", 0));
    const json& ps = d["port_stats"];
    fmt::print("    port rx {} frames ({} dropped), tx {} frames ({} dropped)\n", ps.value("rx_frames", 0),
               ps.value("rx_dropped", 0), ps.value("tx_frames", 0), ps.value("tx_dropped", 0));
  }
}

void print_clients(const json& clients) {
  if (clients.empty()) fmt::print("no client\n");
  for (const json& c : clients) {
    fmt::print("client {}: {} (pid {}, uid {}{}), rdma_cm bindings {}\n", c.value("id", 0), c.value("program", ""),
               c.value("pid", 0), c.value("uid", 0), c.value("cap_net_raw", false) ? ", CAP_NET_RAW" : "",
               c.value("rdma_cm_bindings", 0));
    for (const json& d : c["devices"]) {
      fmt::print("    {}: QPNs {}, rx {} frames ({} dropped: ring full), tx {} frames ({} refused)\n",
                 d.value("device", ""), d.value("qpns", 0), d.value("rx_frames", 0), d.value("rx_dropped", 0),
                 d.value("tx_frames", 0), d.value("tx_refused", 0));
    }
  }
}

// A QP's second line: its path, rate, round trip, CNPs and loss recovery.
void print_qp_flow(const json& q) {
  constexpr double kBpsPerGbps = 1e9;
  constexpr double kNsPerUs = 1e3;
  constexpr double kAlphaOne = 1024.0;
  const uint64_t rate = q.value("rate_bps", uint64_t{0});
  const uint64_t target = q.value("dcqcn_target_bps", uint64_t{0});
  std::string rate_text = rate == 0 ? std::string("line rate") : fmt::format("{:.3f} Gb/s", rate / kBpsPerGbps);
  if (target != 0) rate_text += fmt::format(" (DCQCN target {:.3f} Gb/s)", target / kBpsPerGbps);
  const uint64_t srtt = q.value("srtt_ns", uint64_t{0});
  fmt::print("        udp sport {} rate {} alpha {:.3f} srtt {} cnps sent {} rcvd {} path changes {}\n",
             q.value("udp_sport", 0), rate_text, q.value("alpha_1024", 0) / kAlphaOne,
             srtt == 0 ? std::string("-") : fmt::format("{:.1f} us", srtt / kNsPerUs), q.value("cnps_sent", 0),
             q.value("cnps_rcvd", 0), q.value("path_changes", 0));
  fmt::print("        recovery {} retransmitted {} (selective {}) ack timeouts {} selective naks rcvd {} sent {}\n",
             q.value("recovery", ""), q.value("retrans_pkts", 0), q.value("sr_resent_pkts", 0),
             q.value("ack_timeouts", 0), q.value("sr_naks_rcvd", 0), q.value("sr_naks_sent", 0));
}

void print_qps(const json& all) {
  const json& clients = all["clients"];
  if (clients.empty()) fmt::print("no process has a device open\n");
  for (const json& c : clients) {
    if (c.value("in_process", false)) {
      fmt::print("process {} ({}) on {}, in-process\n", c.value("pid", 0), c.value("program", ""),
                 c.value("device", ""));
    } else {
      fmt::print("client {}: {} (pid {}) on {}\n", c.value("client", 0), c.value("program", ""), c.value("pid", 0),
                 c.value("device", ""));
    }
    if (c["qps"].empty()) fmt::print("    no QP\n");
    for (const json& q : c["qps"]) {
      std::string dest;
      const std::string type = q.value("type", "");
      if (type != "UD" && q.value("dest_qpn", 0u) != 0)
        dest = fmt::format(" dest {} qpn {}", q.value("dest_gid", ""), qpn_text(q["dest_qpn"]));
      fmt::print("    qpn {} {} {} sq_psn {} rq_psn {}{} send_posted {} recv_posted {}\n", qpn_text(q["qpn"]), type,
                 q.value("state", ""), qpn_text(q["sq_psn"]), qpn_text(q["rq_psn"]), dest,
                 q.value("send_posted", 0), q.value("recv_posted", 0));
      if (q.contains("udp_sport")) print_qp_flow(q);
    }
  }
  if (all.value("unanswered", 0) != 0)
    fmt::print("({} client(s) did not answer within the wait)\n", all.value("unanswered", 0));
  if (all.value("truncated", false)) fmt::print("(cut: more QPs than one answer holds)\n");
}

void print_stats(const json& devs, bool nonzero) {
  for (const json& d : devs) {
    for (const char* set : {"engine", "switch", "cm_router", "cm", "gsi"}) {
      fmt::print("uroced {} {}\n", d.value("device", ""), set);
      for (const auto& [name, value] : d[set].items()) {
        if (nonzero && value == 0) continue;
        fmt::print("  {}={}\n", name, value.dump());
      }
    }
  }
}

int run(const DaemonArgs& args, proto::AdminWhat what) {
  const std::string path = args.socket.empty() ? proto::socket_path() : args.socket;
  auto j = ask(path, what);
  if (!j) {
    fmt::print(stderr, "uroce: {}\n", j.error());
    return kExitFailed;
  }
  if (args.json) {
    fmt::print("{}\n", j->dump(kJsonIndent));
    return kExitOk;
  }
  switch (what) {
    case proto::AdminWhat::kDevices: print_devices(*j); break;
    case proto::AdminWhat::kClients: print_clients(*j); break;
    case proto::AdminWhat::kQps: print_qps(*j); break;
    case proto::AdminWhat::kStats: print_stats(*j, args.nonzero); break;
  }
  return kExitOk;
}

// `uroce qp`: uroced's clients (when a daemon answers) and every uroce
// process with its devices in-process (DPDK telemetry, /uroce/qps); with
// --socket the daemon's only, with --pid that process only.
struct QpArgs {
  std::string socket;
  int pid = 0;
  bool json = false;
};

int run_qp(const QpArgs& args) {
  json all = {{"clients", json::array()}};
  std::string why;
  bool answered = false;
  std::vector<int> daemon_pids;
  if (args.pid == 0) {
    const std::string path = args.socket.empty() ? proto::socket_path() : args.socket;
    if (auto j = ask(path, proto::AdminWhat::kQps)) {
      all = std::move(*j);
      answered = true;
      for (const json& c : all["clients"]) daemon_pids.push_back(c.value("pid", 0));
    } else {
      why = j.error();
    }
  }
  if (args.socket.empty()) {
    size_t asked = 0;
    for (const TelemetryTarget& t : telemetry_targets(args.pid, dpdk_runtime_base())) {
      // A client of uroced has its own telemetry too: the daemon's view of it is listed.
      if (std::find(daemon_pids.begin(), daemon_pids.end(), t.pid) != daemon_pids.end()) continue;
      ++asked;
      auto procs = process_qps(t);
      if (!procs) {
        if (args.pid != 0) why += (why.empty() ? "" : "; ") + fmt::format("pid {}: {}", t.pid, procs.error());
        continue;  // a process that just ended
      }
      for (json& c : *procs) all["clients"].push_back(std::move(c));
      answered = true;
    }
    if (asked == 0 && args.pid == 0) why += (why.empty() ? "" : "; ") + std::string("no in-process uroce process");
  }
  if (!answered) {
    fmt::print(stderr, "uroce: {}\n", why);
    return kExitFailed;
  }
  if (args.json) {
    fmt::print("{}\n", all.dump(kJsonIndent));
    return kExitOk;
  }
  print_qps(all);
  return kExitOk;
}

void add_one(CLI::App& app, int& exit_status, const char* name, const char* help, proto::AdminWhat what) {
  auto args = std::make_shared<DaemonArgs>();
  CLI::App* sub = app.add_subcommand(name, help);
  sub->add_option("--socket", args->socket, "uroced's socket (default: UROCE_SOCKET, else /run/uroce/uroced.sock)");
  sub->add_flag("--json", args->json, "print one JSON document");
  if (what == proto::AdminWhat::kStats) sub->add_flag("--nonzero", args->nonzero, "leave out counters that are 0");
  sub->callback([args, what, &exit_status] { exit_status = run(*args, what); });
}

}  // namespace

void add_daemon_commands(CLI::App& app, int& exit_status) {
  add_one(app, exit_status, "dev",
          "uroced's devices and ports: link, MTU, addresses, clients, QPNs, CM connections. Exit 0; 1: no daemon.",
          proto::AdminWhat::kDevices);
  add_one(app, exit_status, "client", "the processes uroced serves: pid, user, program, per device QPNs and frames.",
          proto::AdminWhat::kClients);
  {
    auto args = std::make_shared<QpArgs>();
    CLI::App* sub = app.add_subcommand(
        "qp",
        "every QP of uroced's clients and of in-process uroce programs: type, state, PSNs, destination, path, "
        "rate, round trip, CNPs, loss recovery. Exit 0; 1: nobody answered.");
    sub->add_option("--socket", args->socket, "uroced's socket only (default: UROCE_SOCKET, else /run/uroce/uroced.sock, "
                                              "and every in-process uroce)");
    sub->add_option("--pid", args->pid, "only this in-process uroce program");
    sub->add_flag("--json", args->json, "print one JSON document");
    sub->callback([args, &exit_status] { exit_status = run_qp(*args); });
  }
  add_one(app, exit_status, "daemon-stats", "uroced's counters per device: engine, switch, CM router, CM, GSI.",
          proto::AdminWhat::kStats);
}

}  // namespace uroce::tools
