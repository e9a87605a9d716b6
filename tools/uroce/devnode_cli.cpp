// `uroce devnode [--count N] [--dir DIR] [--remove]`: the character device
// nodes DIR/uroce-uverbs0 .. N-1 (default /dev/infiniband, 4 nodes) that
// programs such as UCX require before they use a verbs device
// (lib/util/devnode.hpp).  Each is a node with /dev/null's device number,
// mode 0666, as rdma-core's udev rules open the uverbs nodes to every user.
// Nodes already present are left as they are; --remove deletes only nodes
// that carry /dev/null's number, then DIR if it is left empty.  Needs root
// (mknod).
// Exit: 0 done, 1 a node could not be made or removed, 2 usage.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "lib/util/devnode.hpp"
#include "tools/uroce/commands.hpp"
#include "tools/uroce/exit_status.hpp"

namespace uroce::tools {
namespace {

constexpr unsigned kDefaultCount = 4;
constexpr mode_t kNodeMode = 0666;
constexpr mode_t kDirMode = 0755;

struct DevnodeArgs {
  unsigned count = kDefaultCount;
  std::string dir = kDevNodeDir;
  bool remove = false;
};

int make_nodes(const DevnodeArgs& a, dev_t null_dev) {
  if (::mkdir(a.dir.c_str(), kDirMode) != 0 && errno != EEXIST) {
    fmt::print(stderr, "uroce devnode: mkdir {}: {}\n", a.dir, std::strerror(errno));
    return kExitError;
  }
  int status = kExitOk;
  for (unsigned i = 0; i < a.count; ++i) {
    const std::string path = a.dir + "/" + dev_node_name(i);
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (!S_ISCHR(st.st_mode)) {
        fmt::print(stderr, "uroce devnode: {} exists and is not a character device\n", path);
        status = kExitError;
      }
      continue;
    }
    if (::mknod(path.c_str(), S_IFCHR | kNodeMode, null_dev) != 0 || ::chmod(path.c_str(), kNodeMode) != 0) {
      fmt::print(stderr, "uroce devnode: mknod {}: {}\n", path, std::strerror(errno));
      status = kExitError;
      continue;
    }
    fmt::print("{}\n", path);
  }
  return status;
}

int remove_nodes(const DevnodeArgs& a, dev_t null_dev) {
  int status = kExitOk;
  for (unsigned i = 0; i < a.count; ++i) {
    const std::string path = a.dir + "/" + dev_node_name(i);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (!S_ISCHR(st.st_mode) || st.st_rdev != null_dev) continue;  // not one of ours
    if (::unlink(path.c_str()) != 0) {
      fmt::print(stderr, "uroce devnode: unlink {}: {}\n", path, std::strerror(errno));
      status = kExitError;
    }
  }
  ::rmdir(a.dir.c_str());  // only succeeds when empty; a real device's nodes keep it
  return status;
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
  sub->callback([args, &exit_status] {
    struct stat null_st {};
    if (::stat("/dev/null", &null_st) != 0 || !S_ISCHR(null_st.st_mode)) {
      fmt::print(stderr, "uroce devnode: /dev/null is not a character device\n");
      exit_status = kExitError;
      return;
    }
    exit_status = args->remove ? remove_nodes(*args, null_st.st_rdev) : make_nodes(*args, null_st.st_rdev);
  });
}

}  // namespace uroce::tools
