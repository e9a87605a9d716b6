// Making and removing the device nodes a uroce device answers to
// (lib/util/devnode.hpp says why UCX wants them): character nodes with
// /dev/null's device number, mode 0666, DIR/uroce-uverbs0 .. count-1.
//
// Who makes them, so that nobody has to by hand: the drop-in when its
// process may (root, or CAP_MKNOD) as it builds the device list, uroced
// at start for the devices it serves, the Debian package at install and
// boot (tmpfiles.d), and `uroce devnode` on request.
//
// Threads: any; the functions touch only the filesystem.
#pragma once

#include <string>
#include <vector>

namespace uroce::drivers {

struct DevNodeReport {
  std::vector<std::string> made;    // nodes this call created
  std::vector<std::string> errors;  // one line per node it could not make or remove
};

// Makes DIR (0755) and each missing node; a node already there is left as
// it is (an error line if it is not a character device).
DevNodeReport make_dev_nodes(const std::string& dir, unsigned count);
// Removes the nodes that carry /dev/null's number (never a real uverbs
// node), then DIR if that left it empty.
DevNodeReport remove_dev_nodes(const std::string& dir, unsigned count);
// True when this process may make device nodes (mknod needs CAP_MKNOD).
bool may_make_dev_nodes() noexcept;

}  // namespace uroce::drivers
