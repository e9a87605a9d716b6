// The device limits: what query_device reports is exactly what create_* and
// post_* enforce (the man pages' EINVAL/ENOMEM when exceeded).  Chosen near
// rxe's (drivers/infiniband/sw/rxe/rxe_param.h) so that programs sized for
// rxe fit.
#pragma once

#include <cstdint>

namespace uroce::rnic {

inline constexpr uint32_t kMaxQp = 1u << 16;           // QPNs 2 .. kMaxQp-1 (0, 1: SMI, GSI)
inline constexpr uint32_t kMaxQpWr = 16384;            // per SQ / RQ
inline constexpr uint32_t kMaxSge = 32;                // per WR, send and receive
inline constexpr uint32_t kMaxSgeRd = 32;
inline constexpr uint32_t kMaxInlineData = 512;        // bytes per WR
inline constexpr uint32_t kMaxCq = 16384;
// CQ entries: mlx5's limit, not rxe's 32767.  libfabric's verbs;ofi_rxm
// sizes its CQ by universe size times queue depth (2^18 at its defaults)
// without reading max_cqe; the ring's memory is touched only as it fills.
inline constexpr uint32_t kMaxCqe = (1u << 22) - 1;
inline constexpr uint32_t kMaxPd = 0x7ffc;
inline constexpr uint32_t kMaxMr = 1u << 18;
inline constexpr uint64_t kMaxMrSize = uint64_t{1} << 40;
inline constexpr uint32_t kMaxQpRdAtom = 128;          // max_rd_atomic / max_dest_rd_atomic
inline constexpr uint32_t kMaxSrq = 1u << 14;
inline constexpr uint32_t kMaxSrqWr = 16384;
inline constexpr uint32_t kMaxSrqSge = 32;
inline constexpr uint32_t kMaxXrcd = 1u << 12;          // XRC domains (annex A14)
inline constexpr uint32_t kMaxAh = 1u << 16;
// Bytes per message (RC/UC).  1 GiB, as mlx5 reports (rxe's 2 GiB would let
// a READ at the 256-byte MTU take 2^23 PSNs, one past what the 24-bit
// modular PSN compare can order, IBA 9.7.1: requester.cpp asserts it).
inline constexpr uint32_t kMaxMsgSize = 1u << 30;
inline constexpr uint16_t kMaxPkeys = 1;               // one P_Key, 0xFFFF
// Multicast (ibv_attach_mcast), rxe's: groups, QPs per group, attachments
// in all (8192 * 56: the per-group limit binds first, as in rxe).
inline constexpr uint32_t kMaxMcastGrp = 8192;
inline constexpr uint32_t kMaxMcastQpAttach = 56;
inline constexpr uint32_t kMaxTotalMcastQpAttach = 0x70000;
// Bytes an atomic (IBA 9.4.5) or an ATOMIC WRITE (IBA 1.5) operates on.
inline constexpr uint64_t kAtomicLen = 8;
inline constexpr uint32_t kMaxGid = 16;                // GID table entries per port
inline constexpr uint32_t kVendorId = 0xFFFFFF;        // as rxe
inline constexpr uint32_t kVendorPartId = 0;
inline constexpr uint8_t kPortNum = 1;
inline constexpr uint32_t kGsiQkey = 0x80010000u;

}  // namespace uroce::rnic
