// The subcommands of `uroce`.  Each `add_*_command` adds its subcommand and
// options to `app`; when the subcommand runs, it stores its exit status
// (exit_status.hpp) in `exit_status`.  A new subcommand is one more function
// here and one more entry in main.cpp's table.
#pragma once

namespace CLI {
class App;
}

namespace uroce::tools {

// uroced's: dev, client, qp, daemon-stats (daemon_cli.cpp).
void add_daemon_commands(CLI::App& app, int& exit_status);
void add_devnode_command(CLI::App& app, int& exit_status);
void add_memif_wire_command(CLI::App& app, int& exit_status);
void add_node_command(CLI::App& app, int& exit_status);
void add_pcap_check_command(CLI::App& app, int& exit_status);
void add_stats_command(CLI::App& app, int& exit_status);
void add_sysfs_command(CLI::App& app, int& exit_status);
void add_trace_command(CLI::App& app, int& exit_status);

}  // namespace uroce::tools
