#include "drivers/devnode.hpp"

#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lib/util/devnode.hpp"

namespace uroce::drivers {
namespace {

constexpr mode_t kNodeMode = 0666;  // as rdma-core's udev rules open uverbs nodes
constexpr mode_t kDirMode = 0755;
constexpr const char* kNull = "/dev/null";

// /dev/null's device number, the one every node of ours carries; when
// there is none, the report says so.
bool null_device(dev_t* out, DevNodeReport& r) {
  struct stat st {};
  if (::stat(kNull, &st) != 0 || !S_ISCHR(st.st_mode)) {
    r.errors.push_back(std::string(kNull) + " is not a character device");
    return false;
  }
  *out = st.st_rdev;
  return true;
}

std::string why(const char* what, const std::string& path) {
  return std::string(what) + " " + path + ": " + std::strerror(errno);
}

}  // namespace

DevNodeReport make_dev_nodes(const std::string& dir, unsigned count) {
  DevNodeReport r;
  dev_t null_dev = 0;
  if (!null_device(&null_dev, r)) return r;
  if (::mkdir(dir.c_str(), kDirMode) != 0 && errno != EEXIST) {
    r.errors.push_back(why("mkdir", dir));
    return r;
  }
  for (unsigned i = 0; i < count; ++i) {
    const std::string path = dir + "/" + dev_node_name(i);
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (!S_ISCHR(st.st_mode)) r.errors.push_back(path + " exists and is not a character device");
      continue;
    }
    // mknod's mode passes through the umask; chmod sets what we mean.
    if (::mknod(path.c_str(), S_IFCHR | kNodeMode, null_dev) != 0) {
      if (errno != EEXIST) r.errors.push_back(why("mknod", path));  // EEXIST: another process won the race
      continue;
    }
    if (::chmod(path.c_str(), kNodeMode) != 0) r.errors.push_back(why("chmod", path));
    r.made.push_back(path);
  }
  return r;
}

DevNodeReport remove_dev_nodes(const std::string& dir, unsigned count) {
  DevNodeReport r;
  dev_t null_dev = 0;
  if (!null_device(&null_dev, r)) return r;
  for (unsigned i = 0; i < count; ++i) {
    const std::string path = dir + "/" + dev_node_name(i);
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (!S_ISCHR(st.st_mode) || st.st_rdev != null_dev) continue;  // not one of ours
    if (::unlink(path.c_str()) != 0) r.errors.push_back(why("unlink", path));
  }
  ::rmdir(dir.c_str());  // succeeds only when empty: a real device's nodes keep it
  return r;
}

bool may_make_dev_nodes() noexcept {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
  if (::syscall(SYS_capget, &hdr, data) != 0) return ::geteuid() == 0;
  return (data[CAP_MKNOD / 32].effective & (1u << (CAP_MKNOD % 32))) != 0;
}

}  // namespace uroce::drivers
