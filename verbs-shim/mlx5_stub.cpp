// libmlx5.so.1 for uroce: perftest NEEDs this library (research/abi-shim.md
// §2) and the real one links rdma-core's private provider ABI, which the
// drop-in libibverbs does not have.  No uroce device is an mlx5 device, so
// every function fails the way the mlx5dv man pages say a function fails:
// NULL with errno, or the errno returned.  The arguments are never read, so
// they are declared as opaque pointers (the C ABI passes them alike).
#include <cerrno>
#include <cstddef>
#include <cstdint>

#define UROCE_STUB_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
void* fail_null() noexcept {
  errno = EOPNOTSUPP;
  return nullptr;
}
}  // namespace

UROCE_STUB_EXPORT bool mlx5dv_is_supported(void* /*device*/) noexcept { return false; }
UROCE_STUB_EXPORT int mlx5dv_query_device(void*, void*) noexcept { return EOPNOTSUPP; }
UROCE_STUB_EXPORT void* mlx5dv_create_qp(void*, void*, void*) noexcept { return fail_null(); }
UROCE_STUB_EXPORT int mlx5dv_devx_general_cmd(void*, const void*, size_t, void*, size_t) noexcept {
  return EOPNOTSUPP;
}
UROCE_STUB_EXPORT void* mlx5dv_open_device(void*, void*) noexcept { return fail_null(); }
UROCE_STUB_EXPORT void* mlx5dv_create_mkey(void*) noexcept { return fail_null(); }
UROCE_STUB_EXPORT int mlx5dv_destroy_mkey(void*) noexcept { return EOPNOTSUPP; }
UROCE_STUB_EXPORT void* mlx5dv_qp_ex_from_ibv_qp_ex(void*) noexcept { return fail_null(); }
UROCE_STUB_EXPORT int mlx5dv_crypto_login(void*, void*) noexcept { return EOPNOTSUPP; }
UROCE_STUB_EXPORT void* mlx5dv_dek_create(void*, void*) noexcept { return fail_null(); }
UROCE_STUB_EXPORT int mlx5dv_dek_destroy(void*) noexcept { return EOPNOTSUPP; }
