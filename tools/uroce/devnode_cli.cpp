// `uroce devnode [--count N] [--dir DIR] [--remove]`: the character device
// nodes DIR/uroce-uverbs0 .. N-1 (default /dev/infiniband, 4 nodes) that
// programs such as UCX require before they use a verbs device
// (lib/util/devnode.hpp, drivers/devnode.hpp).  The drop-in and uroced make
// them by themselves when they may; this command is for the rest (a
// directory of one's own, removing them).  Nodes already present are left
// as they are; --remove deletes only nodes that carry /dev/null's number,
// then DIR if it is left empty.  Needs root (mknod).
// Exit: 0 done, 1 a node could not be made or removed, 2 usage.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <string>

#include "drivers/devnode.hpp"
#include "lib/util/devnode.hpp"
#include "tools/uroce/commands.hpp"
#include "tools/uroce/exit_status.hpp"

namespace uroce::tools {
namespace {

constexpr unsigned kDefaultCount = 4;

struct DevnodeArgs {
  unsigned count = kDefaultCount;
  std::string dir = kDevNodeDir;
  bool remove = false;
};

int run(const DevnodeArgs& a) {
  const drivers::DevNodeReport r =
      a.remove ? drivers::remove_dev_nodes(a.dir, a.count) : drivers::make_dev_nodes(a.dir, a.count);
  for (const std::string& path : r.made) fmt::print("{}\n", path);
  for (const std::string& e : r.errors) fmt::print(stderr, "uroce devnode: {}\n", e);
  return r.errors.empty() ? kExitOk : kExitError;
}

}  // namespace

void add_devnode_command(CLI::App& app, int& exit_status) {
  auto args = std::make_shared<DevnodeArgs>();
  CLI::App* sub = app.add_subcommand(
      "devnode", "Make (or --remove) the /dev/infiniband/uroce-uverbsN nodes that UCX looks for.");
  sub->add_option("--count", args->count, "number of nodes, uroce-uverbs0 .. N-1")
      ->capture_default_str()
      ->check(CLI::Range(1u, 64u));
  sub->add_option("--dir", args->dir, "where the nodes go")->capture_default_str();
  sub->add_flag("--remove", args->remove, "remove the nodes this command makes");
  sub->callback([args, &exit_status] { exit_status = run(*args); });
}

}  // namespace uroce::tools
