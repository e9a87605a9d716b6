// Verbs values newer than the rdma-core 44 headers this tree builds
// against (Debian 12), as rdma-core's later verbs.h and kernel uAPI define
// them.  A program built against a newer rdma-core passes them; the RNIC and
// the drop-in name them here, once.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "lib/wire/ext.hpp"

namespace uroce::rnic::verbs_newer {

// FLUSH (IBA 1.5 memory placement; rdma-core 45, rxe since Linux 6.2).
inline constexpr auto kWrFlush = static_cast<ibv_wr_opcode>(14);  // IBV_WR_FLUSH
inline constexpr auto kWcFlush = static_cast<ibv_wc_opcode>(8);   // IBV_WC_FLUSH
inline constexpr int kAccessFlushGlobal = 1 << 8;                 // IBV_ACCESS_FLUSH_GLOBAL
inline constexpr int kAccessFlushPersistent = 1 << 9;             // IBV_ACCESS_FLUSH_PERSISTENT
// IBV_FLUSH_GLOBAL / _PERSISTENT (placement type) and IBV_FLUSH_RANGE /
// _MR (selectivity level) are the FETH's own values (lib/wire/ext.hpp).
inline constexpr uint8_t kFlushGlobal = wire::kFethGlobal;
inline constexpr uint8_t kFlushPersistent = wire::kFethPersistent;
inline constexpr uint8_t kFlushRange = wire::kFethRange;
inline constexpr uint8_t kFlushMr = wire::kFethMr;
inline constexpr uint64_t kQpExWithFlush = uint64_t{1} << 11;     // IBV_QP_EX_WITH_FLUSH

// device_cap_flags_ex bits past 31 (IB_UVERBS_DEVICE_*).
inline constexpr uint64_t kDeviceFlushGlobal = uint64_t{1} << 38;
inline constexpr uint64_t kDeviceFlushPersistent = uint64_t{1} << 39;
inline constexpr uint64_t kDeviceAtomicWrite = uint64_t{1} << 40;

// ODP capability bits (rdma-core 47).
inline constexpr uint32_t kOdpSupportFlush = 1u << 6;        // IBV_ODP_SUPPORT_FLUSH
inline constexpr uint32_t kOdpSupportAtomicWrite = 1u << 7;  // IBV_ODP_SUPPORT_ATOMIC_WRITE

// ibv_qp_ex grew one entry after rdma-core 44's last (wr_atomic_write):
// wr_flush.  The drop-in keeps it right behind its ibv_qp_ex.
using WrFlushFn = void (*)(ibv_qp_ex* qp, uint32_t rkey, uint64_t remote_addr, size_t len, uint8_t type,
                           uint8_t level);

}  // namespace uroce::rnic::verbs_newer
