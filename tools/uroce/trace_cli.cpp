// `uroce trace [--pid N] [SPEC...]`: shows, or switches, the trace
// categories (qp, conn, progress, cc) of running uroce processes, through DPDK telemetry
// (/uroce/trace; lib/util/log.hpp).  SPEC words as in UROCE_TRACE: qp, conn, progress, cc,
// all, none, each may end in =on or =off.  The lines themselves go to each
// process's log (stderr, or where its EAL arguments send rte_log).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <memory>
#include <string>
#include <vector>

#include "tools/uroce/commands.hpp"
#include "tools/uroce/exit_status.hpp"
#include "tools/uroce/telemetry_client.hpp"

namespace uroce::tools {
namespace {

constexpr std::string_view kTraceCommand = "/uroce/trace";

struct TraceArgs {
  int pid = 0;
  std::vector<std::string> spec;
};

int run_trace(const TraceArgs& args) {
  const std::string base = dpdk_runtime_base();
  std::string command(kTraceCommand);
  std::string spec;
  for (const std::string& w : args.spec) spec += (spec.empty() ? "" : ",") + w;
  if (!spec.empty()) command += "," + spec;
  int answered = 0;
  for (const TelemetryTarget& t : telemetry_targets(args.pid, base)) {
    auto client = TelemetryClient::connect(t.socket);
    if (!client) {
      if (args.pid != 0) fmt::print(stderr, "uroce trace: pid {}: {}\n", t.pid, client.error());
      continue;
    }
    auto reply = client->query(command);
    if (!reply || !reply->is_object()) {
      fmt::print(stderr, "uroce trace: pid {}: '{}' refused ({}); expected qp, conn, progress, cc, all, none, each may end in =on or =off\n",
                 t.pid, spec, reply ? std::string("not a dictionary") : reply.error());
      return kExitError;
    }
    ++answered;
    std::string line;
    for (const auto& [cat, on] : reply->items()) line += fmt::format(" {}={}", cat, on == 1 ? "on" : "off");
    fmt::print("{}{}{}\n", kUroceRuntimePrefix, t.pid, line);
  }
  if (answered == 0) {
    fmt::print(stderr, "uroce trace: no running uroce process{} answered under {}\n",
               args.pid ? " with pid " + std::to_string(args.pid) : "", base);
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace

void add_trace_command(CLI::App& app, int& exit_status) {
  auto args = std::make_shared<TraceArgs>();
  CLI::App* sub = app.add_subcommand(
      "trace",
      "Show or switch the trace categories (qp: QP state changes, retransmissions, NAKs, errors; conn: CM and "
      "rdma_cm state changes and events) of running uroce processes. Exit 0: done; 1: no process answered; 2: usage.");
  sub->add_option("--pid", args->pid, "only this process (default: every uroce-<pid> runtime directory)")
      ->check(CLI::PositiveNumber);
  sub->add_option("spec", args->spec, "qp, conn, all, none, each may end in =on or =off (none given: show)");
  sub->callback([args, &exit_status] { exit_status = run_trace(*args); });
}

}  // namespace uroce::tools
