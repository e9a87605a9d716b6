// `uroce pcap-check FILE... [--json] [-v] [--allow-truncated]`
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "tools/uroce/commands.hpp"
#include "tools/uroce/pcap_check.hpp"
#include "tools/uroce/pcap_check_report.hpp"

namespace uroce::tools {
namespace {

constexpr int kJsonIndent = 2;

struct PcapCheckArgs {
  std::vector<std::string> files;
  bool json = false;
  bool verbose = false;
  bool allow_truncated = false;
};

// check_file() reports bad input in the report; this also turns a failure
// of our own (out of memory …) into an unreadable file, so the other files
// are still checked.
CheckReport check_one(const std::string& path, const CheckOptions& options) {
  try {
    return check_file(path, options);
  } catch (const std::exception& e) {
    CheckReport r;
    r.path = path;
    r.error = fmt::format("internal error: {}", e.what());
    return r;
  }
}

void report_error(const CheckReport& r) {
  if (r.error.empty()) return;
  std::fflush(stdout);  // keep the error next to its file's block on a terminal
  fmt::print(stderr, "{}\n", error_line(r));
}

int run_pcap_check(const PcapCheckArgs& args) {
  const CheckOptions options{.allow_truncated = args.allow_truncated};
  CheckTotals totals;
  std::vector<CheckReport> reports;  // kept for the JSON document
  for (const std::string& path : args.files) {
    CheckReport r = check_one(path, options);
    totals.add(r);
    report_error(r);
    if (args.json) {
      reports.push_back(std::move(r));
    } else {
      print_report(stdout, r, args.verbose);
    }
  }
  if (args.json) {
    // Paths and libpcap messages need not be UTF-8: replace, do not throw.
    const std::string doc =
        document_json(reports, totals).dump(kJsonIndent, ' ', false, nlohmann::json::error_handler_t::replace);
    fmt::print("{}\n", doc);
  } else {
    print_totals(stdout, totals);
  }
  return totals.exit_status;
}

}  // namespace

void add_pcap_check_command(CLI::App& app, int& exit_status) {
  auto args = std::make_shared<PcapCheckArgs>();
  CLI::App* sub = app.add_subcommand(
      "pcap-check",
      "Check every RoCEv2 packet in pcap/pcapng captures: ICRC, and a byte-exact re-serialization. "
      "Exit 0: all good; 1: a packet failed; 2: usage error or unreadable file.");
  sub->add_option("files", args->files, "capture files (pcap or pcapng)")->required();
  sub->add_flag("--json", args->json, "print one JSON document instead of text");
  sub->add_flag("-v,--verbose", args->verbose, "list every failing frame");
  sub->add_flag("--allow-truncated", args->allow_truncated,
                "do not fail RoCEv2 frames cut short by the capture's snaplen (they are still counted)");
  sub->callback([args, &exit_status] { exit_status = run_pcap_check(*args); });
}

}  // namespace uroce::tools
