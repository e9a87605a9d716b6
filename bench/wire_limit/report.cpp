#include "bench/wire_limit/report.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>

namespace uroce::bench::wire_limit {

namespace {

using nlohmann::json;

constexpr double kNsPerUs = 1e3;
constexpr double kMega = 1e6;
constexpr double kBitsPerByte = 8;

json port_json(const PortStats& s) {
  return {{"rx_frames", s.rx_frames},   {"tx_frames", s.tx_frames}, {"rx_dropped", s.rx_dropped},
          {"tx_dropped", s.tx_dropped}, {"burst_faults", s.burst_faults}};
}

json relay_json(const std::optional<RelayStats>& r) {
  if (!r) return nullptr;
  return {{"to_wire", r->to_wire}, {"from_wire", r->from_wire}, {"dropped", r->dropped},
          {"idle_yields", r->idle_yields}};
}

json common_json(const RunContext& ctx) {
  const Options& o = ctx.options;
  return {{"tool", "uroce-wire-limit"},
          {"mode", mode_name(o.mode)},
          {"vdev", o.vdev},
          {"frame_bytes", o.frame_bytes},
          {"core", o.core},
          {"companions", o.companions},
          {"relay", relay_json(ctx.relay)},
          {"tsc_hz", ctx.endpoint.tsc_hz},
          {"port", port_json(ctx.port)}};
}

json latency_json(const LatencySummary& s) {
  return {{"samples", s.samples}, {"min", s.min_ns},   {"median", s.median_ns}, {"p90", s.p90_ns},
          {"p99", s.p99_ns},      {"p99_9", s.p999_ns}, {"max", s.max_ns},      {"mean", s.mean_ns}};
}

// null for nothing.  Out of line: GCC 12 warns of an uninitialised
// optional when this is inlined into a json initialiser list.
template <class T>
[[gnu::noinline]] json or_null(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

void emit(const json& j) {
  std::fputs(j.dump().c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

std::string header(const RunContext& ctx) {
  return fmt::format("{} {} {} B{}", mode_name(ctx.options.mode), ctx.options.vdev, ctx.options.frame_bytes,
                     ctx.relay ? fmt::format(" (relay: {} to the wire, {} from it, {} dropped)", ctx.relay->to_wire,
                                             ctx.relay->from_wire, ctx.relay->dropped)
                               : std::string());
}

double gbit_per_s(double frames_per_s, uint16_t frame_bytes) {
  return frames_per_s * frame_bytes * kBitsPerByte / 1e9;
}

}  // namespace

void report(const RunContext& ctx, const PingResult& r) {
  if (ctx.options.json) {
    json j = common_json(ctx);
    j.update({{"round_trips", r.rtt.samples},
              {"attempts", r.attempts},
              {"lost", r.lost},
              {"warmup_lost", r.warmup_lost},
              {"stale", r.stale},
              {"companions_received", r.companions},
              {"foreign", r.foreign},
              {"seconds", r.seconds},
              {"round_trips_per_s", r.round_trips_per_s},
              {"done_acked", r.done_acked},
              {"rtt_ns", latency_json(r.rtt)}});
    emit(j);
    return;
  }
  const LatencySummary& s = r.rtt;
  fmt::print("{}: {} round trips in {:.3f} s ({:.3f} M/s), lost {} (+{} in warm-up), stale {}, foreign {}\n",
             header(ctx), s.samples, r.seconds, r.round_trips_per_s / kMega, r.lost, r.warmup_lost, r.stale,
             r.foreign);
  fmt::print("  RTT us: min {:.3f}  median {:.3f}  p90 {:.3f}  p99 {:.3f}  p99.9 {:.3f}  max {:.3f}  mean {:.3f}\n",
             s.min_ns / kNsPerUs, s.median_ns / kNsPerUs, s.p90_ns / kNsPerUs, s.p99_ns / kNsPerUs,
             s.p999_ns / kNsPerUs, s.max_ns / kNsPerUs, s.mean_ns / kNsPerUs);
  std::fflush(stdout);
}

void report(const RunContext& ctx, const TxResult& r) {
  if (ctx.options.json) {
    json j = common_json(ctx);
    j.update({{"frames_sent", r.sent},
              {"busy_polls", r.busy_polls},
              {"pool_empty", r.pool_empty},
              {"seconds", r.seconds},
              {"frames_per_s", r.frames_per_s},
              {"gbit_per_s", gbit_per_s(r.frames_per_s, ctx.options.frame_bytes)},
              {"done_acked", r.done_acked}});
    if (ctx.options.duplex) {
      j.update({{"duplex_received", r.received},
                {"duplex_rx_seconds", r.rx_seconds},
                {"duplex_rx_frames_per_s", r.rx_frames_per_s}});
    }
    emit(j);
    return;
  }
  fmt::print("{}: sent {} frames in {:.3f} s: {:.3f} Mframes/s ({:.2f} Gbit/s); busy polls {}, pool empty {}, "
             "tx dropped {}\n",
             header(ctx), r.sent, r.seconds, r.frames_per_s / kMega,
             gbit_per_s(r.frames_per_s, ctx.options.frame_bytes), r.busy_polls, r.pool_empty, ctx.port.tx_dropped);
  if (ctx.options.duplex) {
    fmt::print("{}: received the other end's {} frames in {:.3f} s: {:.3f} Mframes/s\n", header(ctx), r.received,
               r.rx_seconds, r.rx_frames_per_s / kMega);
  }
  std::fflush(stdout);
}

void report(const RunContext& ctx, const ResponderResult& r) {
  const bool rx = ctx.options.mode == Mode::kRx;
  const std::optional<double> delivered =
      rx && r.peer_sent && *r.peer_sent > 0
          ? std::optional(static_cast<double>(r.requests) / static_cast<double>(*r.peer_sent))
          : std::nullopt;
  if (ctx.options.json) {
    json j = common_json(ctx);
    j.update({{rx ? "frames_received" : "echoed", r.requests},
              {"echo_failed", r.echo_failed},
              {"foreign", r.foreign},
              {"unexpected", r.unexpected},
              {"companions_received", r.companions},
              {"done", r.done},
              {"peer_sent", or_null(r.peer_sent)},
              {"delivered", or_null(delivered)},
              {"seconds", r.seconds},
              {"frames_per_s", r.frames_per_s},
              {"gbit_per_s", gbit_per_s(r.frames_per_s, ctx.options.frame_bytes)}});
    if (ctx.options.duplex) {
      j.update({{"duplex_sent", r.sent},
                {"duplex_tx_seconds", r.tx_seconds},
                {"duplex_tx_frames_per_s", r.tx_frames_per_s}});
    }
    emit(j);
    return;
  }
  const std::string tail = r.done ? "" : "; the initiator never said done";
  if (rx) {
    fmt::print("{}: received {} frames in {:.3f} s: {:.3f} Mframes/s; delivered {}; foreign {}, unexpected {}{}\n",
               header(ctx), r.requests, r.seconds, r.frames_per_s / kMega,
               delivered ? fmt::format("{:.4f}", *delivered) : std::string("unknown"), r.foreign, r.unexpected, tail);
  } else {
    fmt::print("{}: echoed {} requests ({} not taken by the wire); foreign {}, unexpected {}{}\n", header(ctx),
               r.requests, r.echo_failed, r.foreign, r.unexpected, tail);
  }
  if (ctx.options.duplex) {
    fmt::print("{}: sent its own {} frames in {:.3f} s: {:.3f} Mframes/s\n", header(ctx), r.sent, r.tx_seconds,
               r.tx_frames_per_s / kMega);
  }
  std::fflush(stdout);
}

}  // namespace uroce::bench::wire_limit
