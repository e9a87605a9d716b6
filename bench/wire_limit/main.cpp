// uroce-wire-limit: raw RoCEv2-shaped frames between two DPDK processes
// over one wire (net_af_packet on a veth pair, net_memif), measuring what
// the wire alone costs: RTT with one frame in flight (ping/pong) and the
// one-way frame rate (tx/rx).  scripts/bench-wire-limit runs the pairs and
// keeps the figures every uroce latency and rate is later divided by.
//
//   uroce-wire-limit --mode=pong --vdev=net_memif0,role=server,socket=/tmp/x/m.sock,socket-abstract=no --core=1
//   uroce-wire-limit --mode=ping --vdev=net_memif0,role=client,socket=/tmp/x/m.sock,socket-abstract=no --core=0
//
// Exit status: 0 done; 1 the run failed (no peer, nothing measured); 2 usage.
#include <fmt/format.h>

#include <cstdio>

#include "bench/wire_limit/endpoint.hpp"
#include "bench/wire_limit/options.hpp"
#include "bench/wire_limit/report.hpp"
#include "bench/wire_limit/runs.hpp"
#include "drivers/dpdk/eal.hpp"

namespace {

namespace wl = uroce::bench::wire_limit;

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

int fail(const wl::Options& o, const uroce::drivers::Error& e) {
  fmt::print(stderr, "uroce-wire-limit {}: {}\n", wl::mode_name(o.mode), e.message);
  return kExitFailed;
}

// After a run: the relay stopped (nothing moves after), then the figures.
wl::RunContext finish(const wl::Endpoint& ep, const wl::Options& o) {
  const auto relay = wl::stop_relay(ep);
  return {o, ep, wl::port_stats(ep), relay};
}

int ping_main(const wl::Endpoint& ep, const wl::Options& o) {
  auto r = wl::run_ping(ep, o);
  const wl::RunContext ctx = finish(ep, o);
  if (!r) return fail(o, r.error());
  wl::report(ctx, *r);
  if (r->rtt.samples == 0) return fail(o, {0, "no round trip completed"});
  return kExitOk;
}

int tx_main(const wl::Endpoint& ep, const wl::Options& o) {
  auto r = wl::run_tx(ep, o);
  const wl::RunContext ctx = finish(ep, o);
  if (!r) return fail(o, r.error());
  wl::report(ctx, *r);
  return r->sent > 0 ? kExitOk : fail(o, {0, "the wire took no frame"});
}

int responder_main(const wl::Endpoint& ep, const wl::Options& o, bool echo) {
  const wl::ResponderResult r = wl::run_responder(ep, o, echo);
  wl::report(finish(ep, o), r);
  return r.done ? kExitOk : fail(o, {0, "the initiator never said done"});
}

int run_mode(const wl::Endpoint& ep, const wl::Options& o) {
  switch (o.mode) {
    case wl::Mode::kPing: return ping_main(ep, o);
    case wl::Mode::kPong: return responder_main(ep, o, true);
    case wl::Mode::kTx: return tx_main(ep, o);
    case wl::Mode::kRx: return responder_main(ep, o, false);
  }
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  auto parsed = wl::parse_options(argc, argv);
  if (!parsed) {
    const bool help = parsed.error().code == 0;
    std::fputs(parsed.error().message.c_str(), help ? stdout : stderr);
    return help ? kExitOk : kExitUsage;
  }
  const wl::Options& o = *parsed;
  wl::install_signal_handlers();
  auto ep = wl::open_endpoint(o);
  if (!ep) {
    (void)uroce::drivers::dpdk::eal_shutdown();
    return fail(o, ep.error());
  }
  const int rc = run_mode(*ep, o);
  if (auto closed = wl::close_endpoint(*ep); !closed) return fail(o, closed.error());
  return rc;
}
