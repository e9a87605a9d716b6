// libmlx5.so.1 for uroce: perftest NEEDs this library (research/abi-shim.md
// §2), pyverbs' mlx5 module and UCX's libuct_ib import most of its
// functions, and the real one links rdma-core's private provider ABI, which
// the drop-in libibverbs does not have.  No uroce device is an mlx5 device,
// so every function fails the way the mlx5dv man pages say a function
// fails: NULL with errno, or the errno returned (mlx5_stub_gen.cpp, made by
// scripts/gen-mlx5-stub with the version nodes in libmlx5.map).
#pragma once

#include <cerrno>

#define UROCE_STUB_EXPORT extern "C" __attribute__((visibility("default")))

inline void* fail_null() noexcept {
  errno = EOPNOTSUPP;
  return nullptr;
}
