// The device nodes a uroce device answers to.  There is no uverbs char
// device behind a uroce device: the drop-in libibverbs reaches the RNIC in
// process.  Some programs still look for one: UCX lists an IB device only
// when /dev/infiniband/<ibv_device.dev_name> is a character device it may
// read and write (uct_ib_device_is_accessible).  `uroce devnode` makes such
// nodes (a copy of /dev/null's device number: opening one does nothing
// harmful), named apart from the kernel's uverbsN so that a real RDMA
// device loaded later keeps its names.
#pragma once

#include <string>

namespace uroce {

inline constexpr const char* kDevNodeDir = "/dev/infiniband";
inline constexpr const char* kDevNodePrefix = "uroce-uverbs";

// The ibv_device dev_name (and node name) of the process's device `index`.
inline std::string dev_node_name(unsigned index) { return kDevNodePrefix + std::to_string(index); }

}  // namespace uroce
