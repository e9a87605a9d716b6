// `uroce`: command-line tools for the uroce RoCEv2 stack, one subcommand
// per tool.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <array>
#include <exception>

#include "tools/uroce/commands.hpp"
#include "tools/uroce/exit_status.hpp"

namespace {

using AddCommand = void (*)(CLI::App&, int&);

// Alphabetical.
constexpr auto kCommands = std::to_array<AddCommand>({
    &uroce::tools::add_daemon_commands,
    &uroce::tools::add_devnode_command,
    &uroce::tools::add_memif_wire_command,
    &uroce::tools::add_node_command,
    &uroce::tools::add_pcap_check_command,
    &uroce::tools::add_stats_command,
    &uroce::tools::add_sysfs_command,
    &uroce::tools::add_trace_command,
});

}  // namespace

int main(int argc, char** argv) {
  using namespace uroce::tools;
  CLI::App app{"Tools for uroce, a user-space RoCEv2 stack.", "uroce"};
  app.require_subcommand(1);
  int exit_status = kExitOk;
  for (AddCommand add : kCommands) add(app, exit_status);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Help prints and succeeds; every other parse error is a usage error.
    return app.exit(e) == static_cast<int>(CLI::ExitCodes::Success) ? kExitOk : kExitError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "uroce: internal error: {}\n", e.what());
    return kExitError;
  }
  return exit_status;
}
