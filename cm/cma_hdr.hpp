// What Linux's rdma_cm (drivers/infiniband/core/cma.c) puts on the wire
// on top of the IB CM, so that kernel and rdma-core peers accept us:
//   - the service ID of an IP port space: 0x0000000001 | ps (16 bits) | port
//     (IBA annex A11, "RDMA IP CM Service": the IP CM service ID range);
//   - the 36-byte rdma_cm private-data header that starts the REQ's and the
//     SIDR_REQ's private data (A11.6.1 layout): version 0, IP version in
//     bits 7:4, the active side's source port, source and destination
//     address (IPv4 in the last 4 bytes of each 16-byte field, the first 12
//     bytes zero);
//   - the private-data room left to the application.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

#include "cm/msg.hpp"

namespace uroce::cm {

// rdma_port_space (rdma/rdma_cma.h): the values Linux and librdmacm use.
enum class PortSpace : uint16_t {
  Ipoib = 0x0002,
  Tcp = 0x0106,
  Udp = 0x0111,
  Ib = 0x013F,
};

inline constexpr uint64_t kCmaServiceIdBase = 0x0000000001000000ULL;  // IB_CMA_SERVICE_ID
inline constexpr uint64_t kCmaServiceIdMask = 0xFFFFFFFFFF000000ULL;  // IB_CMA_SERVICE_ID_MASK

constexpr uint64_t cma_service_id(PortSpace ps, uint16_t port) noexcept {
  return kCmaServiceIdBase | (uint64_t{static_cast<uint16_t>(ps)} << 16) | port;
}

constexpr bool is_cma_service_id(uint64_t sid) noexcept {
  return (sid & kCmaServiceIdMask) == kCmaServiceIdBase;
}
constexpr PortSpace cma_port_space(uint64_t sid) noexcept {
  return static_cast<PortSpace>(static_cast<uint16_t>(sid >> 16));
}
constexpr uint16_t cma_port(uint64_t sid) noexcept { return static_cast<uint16_t>(sid); }

// ---- the private-data header ------------------------------------------------
inline constexpr uint8_t kCmaVersion = 0x00;  // CMA_VERSION
inline constexpr size_t kCmaHdrSize = 36;      // sizeof(struct cma_hdr)

using Ip6Bytes = std::array<uint8_t, 16>;

// Field table of the header (byte, bit, width), like the CM messages.
namespace cma_hdr {
inline constexpr Field kVersion{0, 0, 8};
inline constexpr Field kIpVersion{1, 0, 4};   // bits 7:4 of byte 1; 3:0 reserved
inline constexpr Field kPort{2, 0, 16};       // the active side's source port
inline constexpr Blob kSrcAddr{4, 16};
inline constexpr Blob kDstAddr{20, 16};
static_assert(kDstAddr.end() == kCmaHdrSize);
}  // namespace cma_hdr

struct CmaHdr {
  uint8_t version = kCmaVersion;
  uint8_t ip_version = 4;  // 4 or 6
  uint16_t port = 0;       // host order
  Ip6Bytes src{};          // IPv4: the address in bytes 12..15, 0..11 zero
  Ip6Bytes dst{};
  friend bool operator==(const CmaHdr&, const CmaHdr&) = default;

  // IPv4 addresses in host order (10.0.0.1 = 0x0A000001).
  static CmaHdr ipv4(uint32_t src_ip, uint32_t dst_ip, uint16_t src_port) noexcept {
    CmaHdr h;
    h.ip_version = 4;
    h.port = src_port;
    wire::store_be(h.src.data() + 12, src_ip);
    wire::store_be(h.dst.data() + 12, dst_ip);
    return h;
  }
  static CmaHdr ipv6(const Ip6Bytes& src_ip, const Ip6Bytes& dst_ip, uint16_t src_port) noexcept {
    CmaHdr h;
    h.ip_version = 6;
    h.port = src_port;
    h.src = src_ip;
    h.dst = dst_ip;
    return h;
  }
  uint32_t src_ipv4() const noexcept { return wire::load_be<uint32_t>(src.data() + 12); }
  uint32_t dst_ipv4() const noexcept { return wire::load_be<uint32_t>(dst.data() + 12); }
};

// Writes the 36 bytes at `p` exactly as cma_format_hdr() does (the buffer
// it writes into is zeroed first, so IPv4 padding and reserved bits are 0).
inline void write_cma_hdr(const CmaHdr& h, uint8_t* p) noexcept {
  std::memset(p, 0, kCmaHdrSize);
  set_field(p, cma_hdr::kVersion, h.version);
  set_field(p, cma_hdr::kIpVersion, h.ip_version);
  set_field(p, cma_hdr::kPort, h.port);
  if (h.ip_version == 4) {
    std::memcpy(p + cma_hdr::kSrcAddr.byte + 12, h.src.data() + 12, 4);
    std::memcpy(p + cma_hdr::kDstAddr.byte + 12, h.dst.data() + 12, 4);
  } else {
    std::memcpy(p + cma_hdr::kSrcAddr.byte, h.src.data(), 16);
    std::memcpy(p + cma_hdr::kDstAddr.byte, h.dst.data(), 16);
  }
}

// Reads the header; empty when it is not one Linux would accept
// (cma_check_req_qp_type/cma_save_ip_info: version 0, IP version 4 or 6).
inline std::optional<CmaHdr> read_cma_hdr(std::span<const uint8_t> pdata) noexcept {
  if (pdata.size() < kCmaHdrSize) return std::nullopt;
  const uint8_t* p = pdata.data();
  CmaHdr h;
  h.version = static_cast<uint8_t>(get_field(p, cma_hdr::kVersion));
  h.ip_version = static_cast<uint8_t>(get_field(p, cma_hdr::kIpVersion));
  h.port = static_cast<uint16_t>(get_field(p, cma_hdr::kPort));
  if (h.version != kCmaVersion || (h.ip_version != 4 && h.ip_version != 6)) return std::nullopt;
  if (h.ip_version == 4) {
    std::memcpy(h.src.data() + 12, p + cma_hdr::kSrcAddr.byte + 12, 4);
    std::memcpy(h.dst.data() + 12, p + cma_hdr::kDstAddr.byte + 12, 4);
  } else {
    std::memcpy(h.src.data(), p + cma_hdr::kSrcAddr.byte, 16);
    std::memcpy(h.dst.data(), p + cma_hdr::kDstAddr.byte, 16);
  }
  return h;
}

// ---- private-data room ------------------------------------------------------
// rdma_connect(3): up to 56 bytes on RC/UC in the IP port spaces (92 - 36),
// 180 on UD/SIDR (216 - 36); rdma_accept: the REP's 196; rdma_reject: the
// REJ's 148; SIDR_REP 136.  AF_IB ids (RDMA_PS_IB with native IB
// addresses) carry no header and get the whole field.
inline constexpr size_t kReqUserDataMax = sizeof(ReqMsg{}.private_data) - kCmaHdrSize;          // 56
inline constexpr size_t kSidrReqUserDataMax = sizeof(SidrReqMsg{}.private_data) - kCmaHdrSize;  // 180
inline constexpr size_t kRepUserDataMax = sizeof(RepMsg{}.private_data);                        // 196
inline constexpr size_t kRejUserDataMax = sizeof(RejMsg{}.private_data);                        // 148
inline constexpr size_t kSidrRepUserDataMax = sizeof(SidrRepMsg{}.private_data);                // 136
static_assert(kReqUserDataMax == 56 && kSidrReqUserDataMax == 180);

// The private data of a REQ or SIDR_REQ as rdma_cm builds it: header, then
// the user's bytes; false when the user data does not fit.
inline bool format_cma_private_data(const CmaHdr& h, std::span<const uint8_t> user,
                                    std::span<uint8_t> out) noexcept {
  if (out.size() < kCmaHdrSize || user.size() > out.size() - kCmaHdrSize) return false;
  std::memset(out.data(), 0, out.size());
  write_cma_hdr(h, out.data());
  if (!user.empty()) std::memcpy(out.data() + kCmaHdrSize, user.data(), user.size());
  return true;
}

// IPv4-mapped GID (::ffff:a.b.c.d), the RoCEv2 GID of an IPv4 address.
inline Ip6Bytes ipv4_mapped_gid(uint32_t ip) noexcept {
  Ip6Bytes g{};
  g[10] = 0xFF;
  g[11] = 0xFF;
  wire::store_be(g.data() + 12, ip);
  return g;
}

// responder_resources / initiator_depth (IBA 12.6.5/12.6.8, as cma and
// librdmacm apply it): what we may have outstanding as initiator is capped
// by the peer's responder resources, and our responder resources need not
// exceed the peer's initiator depth.
struct RdAtomic {
  uint8_t responder_resources;
  uint8_t initiator_depth;
};
constexpr RdAtomic negotiate_rd_atomic(RdAtomic local, RdAtomic remote) noexcept {
  return RdAtomic{
      local.responder_resources < remote.initiator_depth ? local.responder_resources : remote.initiator_depth,
      local.initiator_depth < remote.responder_resources ? local.initiator_depth : remote.responder_resources};
}

}  // namespace uroce::cm
