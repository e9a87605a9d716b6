#include "bench/wire_limit/options.hpp"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <map>
#include <sstream>

#include "bench/wire_limit/frame.hpp"
#include "lib/config/ip.hpp"
#include "lib/config/mac.hpp"
#include "lib/wire/bytes.hpp"

namespace uroce::bench::wire_limit {

namespace {

constexpr const char* kDescription =
    "The wire limit: raw RoCEv2-shaped frames between two DPDK processes over one wire,\n"
    "the baseline every uroce latency and rate figure is divided by.\n"
    "Start the responder (pong, rx; the memif server) first, then the initiator (ping, tx).";

const std::map<std::string, Mode> kModes{
    {"ping", Mode::kPing}, {"pong", Mode::kPong}, {"rx", Mode::kRx}, {"tx", Mode::kTx}};

// The defaults that depend on the mode, for what the command line left unset.
void fill_mode_defaults(Options& o) {
  if (o.seconds <= 0) o.seconds = o.mode == Mode::kTx ? kDefaultTxSeconds : kDefaultMaxSeconds;
  if (o.count == 0 && o.mode == Mode::kPing) o.count = kDefaultRoundTrips;
}

// "a.b.c.d" (the configuration's parser) as a host-order IPv4 address.
drivers::Result<uint32_t> parse_ipv4(const std::string& text, const char* option) {
  auto a = config::parse_ip_address(text);
  if (!a) return drivers::Error{EINVAL, std::string(option) + ": " + a.error()};
  if (a->family != config::IpFamily::kIpv4) {
    return drivers::Error{EINVAL, std::string(option) + ": not an IPv4 address: " + text};
  }
  return wire::load_be<uint32_t>(a->ipv4_octets().data());
}

// --to-mac/--from-ip/--to-ip into o.to (all three or none).
drivers::Status parse_addressing(Options& o, const std::string& mac, const std::string& from, const std::string& to) {
  const int given = !mac.empty() + !from.empty() + !to.empty();
  if (given == 0) return {};
  if (given != 3) return drivers::Error{EINVAL, "--to-mac, --from-ip and --to-ip go together"};
  auto m = config::parse_mac(mac);
  if (!m) return drivers::Error{EINVAL, "--to-mac: " + m.error()};
  auto f = parse_ipv4(from, "--from-ip");
  if (!f) return f.error();
  auto t = parse_ipv4(to, "--to-ip");
  if (!t) return t.error();
  o.to = Addressing{*m, *f, *t};
  return {};
}

drivers::Status check(const Options& o) {
  if (o.vdev.empty()) return drivers::Error{EINVAL, "--vdev is required"};
  if (o.frame_bytes < kMinFrameBytes || o.frame_bytes > kMaxFrameBytes) {
    return drivers::Error{EINVAL, "--size must be within [" + std::to_string(kMinFrameBytes) + ", " +
                                      std::to_string(kMaxFrameBytes) + "]"};
  }
  if (o.burst == 0 || o.burst > kMaxBurst) {
    return drivers::Error{EINVAL, "--burst must be within [1, " + std::to_string(kMaxBurst) + "]"};
  }
  if (o.timeout.count() <= 0) return drivers::Error{EINVAL, "--timeout-ms must be positive"};
  if (o.companions > kMaxCompanions) {
    return drivers::Error{EINVAL, "--companions must be within [0, " + std::to_string(kMaxCompanions) + "]"};
  }
  if (o.companions != 0 && o.mode != Mode::kPing && o.mode != Mode::kPong) {
    return drivers::Error{EINVAL, "--companions is for ping and pong"};
  }
  if (o.duplex && o.mode != Mode::kTx && o.mode != Mode::kRx) {
    return drivers::Error{EINVAL, "--duplex is for tx and rx"};
  }
  if (o.duplex && o.to.dst != kNotOurMac) {
    return drivers::Error{EINVAL, "--duplex sends both ways with the default addressing (the rx end takes no --to-mac)"};
  }
  if (o.relay_core != -1 && (!o.relay || o.relay_core < 0)) {
    return drivers::Error{EINVAL, "--relay-core is a CPU number, with --relay"};
  }
  return {};
}

}  // namespace

std::string_view mode_name(Mode m) noexcept {
  switch (m) {
    case Mode::kPing: return "ping";
    case Mode::kPong: return "pong";
    case Mode::kTx: return "tx";
    case Mode::kRx: return "rx";
  }
  return "?";
}

drivers::Result<Options> parse_options(int argc, char** argv) {
  Options o;
  CLI::App app{kDescription, "uroce-wire-limit"};
  int64_t timeout_ms = o.timeout.count();
  app.add_option("--mode", o.mode, "ping | pong | tx | rx")
      ->required()
      ->transform(CLI::CheckedTransformer(kModes));
  app.add_option("--vdev", o.vdev,
                 "EAL vdev: net_af_packet0,iface=X or net_memif0,role=server|client,socket=F,socket-abstract=no")
      ->required();
  app.add_option("--size", o.frame_bytes, "frame bytes without FCS")->capture_default_str();
  app.add_option("--count", o.count, "ping: measured round trips (default 100000); tx: frames (default: no limit)");
  app.add_option("--warmup", o.warmup, "ping: round trips before measuring")->capture_default_str();
  app.add_option("--seconds", o.seconds, "tx: how long to send (default 5); others: give up after (default 60)");
  app.add_option("--core", o.core, "CPU to run on (EAL -l)")->capture_default_str();
  app.add_option("--burst", o.burst, "tx/rx/pong burst size")->capture_default_str();
  app.add_option("--companions", o.companions,
                 "ping/pong: this many more frames go ahead of each request and each reply, in its burst, "
                 "and the far end drops them (RC: the ACK of the SEND a reply answers goes with it)")
      ->capture_default_str();
  app.add_option("--timeout-ms", timeout_ms, "resend or give up after this long with no answer")
      ->capture_default_str();
  app.add_option("--log-level", o.log_level, "EAL --log-level")->capture_default_str();
  app.add_flag("--json", o.json, "print one JSON object on stdout");
  std::string to_mac, from_ip, to_ip;
  app.add_option("--to-mac", to_mac,
                 "ping/tx: send to this MAC (the peer interface's own; default one no interface owns, "
                 "which the peer's kernel drops at once)");
  app.add_option("--from-ip", from_ip, "ping/tx, with --to-mac: IPv4 source (this interface's address)");
  app.add_option("--to-ip", to_ip, "ping/tx, with --to-mac: IPv4 destination (the peer interface's address)");
  app.add_flag("--relay", o.relay,
               "a second thread owns the port and every frame goes through it, by rings of pointers, "
               "both threads yielding when idle: the least a hop through another thread (uroced's) costs");
  app.add_flag("--duplex", o.duplex,
               "tx/rx: the rx end streams back from the hello to the done, and each end counts what the "
               "other sent (both directions at once, as perftest -b)");
  app.add_option("--relay-core", o.relay_core, "--relay: the relay thread's CPU (default: any online CPU)");
  app.add_flag("--claim-udp", o.claim_udp,
               "hold UDP port 4791 in this namespace as uroce does, so that the kernel takes frames "
               "addressed to it without an ICMP error");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    std::ostringstream out;
    std::ostringstream err;
    const int rc = app.exit(e, out, err);
    return drivers::Error{rc == 0 ? 0 : EINVAL, out.str() + err.str()};
  }
  o.timeout = std::chrono::milliseconds(timeout_ms);
  if (auto ok = parse_addressing(o, to_mac, from_ip, to_ip); !ok) return ok.error();
  fill_mode_defaults(o);
  if (auto ok = check(o); !ok) return ok.error();
  return o;
}

}  // namespace uroce::bench::wire_limit
