// libefa.so.1 for uroce: perftest NEEDs this library (research/abi-shim.md
// §2).  No uroce device is an EFA device: every function fails as the
// efadv man pages say (NULL with errno, or the errno returned).  Arguments
// are never read and are declared opaque.
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

UROCE_STUB_EXPORT void* efadv_create_driver_qp(void*, void*, uint32_t) noexcept { return fail_null(); }
UROCE_STUB_EXPORT void* efadv_create_qp_ex(void*, void*, void*, uint32_t) noexcept { return fail_null(); }
UROCE_STUB_EXPORT int efadv_query_device(void*, void*, uint32_t) noexcept { return EOPNOTSUPP; }
UROCE_STUB_EXPORT int efadv_query_ah(void*, void*, uint32_t) noexcept { return EOPNOTSUPP; }
UROCE_STUB_EXPORT void* efadv_create_cq(void*, void*, void*, uint32_t) noexcept { return fail_null(); }
UROCE_STUB_EXPORT void* efadv_cq_from_ibv_cq_ex(void*) noexcept { return fail_null(); }
// Added after rdma-core 44 (EFA_1.3 .. 1.6, as of v64.0).  The depth
// queries return the depth or a negative errno, as rdma-core's own for a
// device that is not EFA.
UROCE_STUB_EXPORT int efadv_query_mr(void*, void*, uint32_t) noexcept { return EOPNOTSUPP; }
UROCE_STUB_EXPORT int efadv_query_qp_wqs(void*, void*, void*, uint32_t) noexcept { return EOPNOTSUPP; }
UROCE_STUB_EXPORT int efadv_query_cq(void*, void*, uint32_t) noexcept { return EOPNOTSUPP; }
UROCE_STUB_EXPORT int efadv_get_max_sq_depth(void*, void*, uint32_t) noexcept { return -EOPNOTSUPP; }
UROCE_STUB_EXPORT int efadv_get_max_rq_depth(void*, void*, uint32_t) noexcept { return -EOPNOTSUPP; }
UROCE_STUB_EXPORT void* efadv_qp_from_ibv_qp_ex(void*) noexcept { return fail_null(); }
