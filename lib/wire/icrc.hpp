// The RoCEv2 invariant CRC (IBA annex A17.3.3).
//
// CRC-32 (Ethernet polynomial, reflected; the zlib/ISO-HDLC CRC) over
//   8 bytes of 0xFF standing in for the LRH,
//   the IP header with IPv4 TOS, TTL and header checksum (IPv6 traffic
//     class, flow label and hop limit) set to all ones,
//   the UDP header with its checksum set to all ones,
//   the BTH with Resv8a set to all ones,
//   everything after the BTH up to the ICRC (extended headers, payload, pad),
// stored least-significant byte first in the 4 bytes that end the UDP payload.
//
// The CRC engine is ISA-L's PCLMUL-folded crc32_gzip_refl, chosen over DPDK's
// rte_net_crc because it takes a running CRC: the masked pseudo-header goes
// through a small stack copy and the rest (up to 9 KB of payload, possibly in
// another buffer) is folded in place, without copying.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace uroce::wire {

inline constexpr size_t kIcrcSize = 4;

// CRC-32 of `data` continuing from `crc` (0 for a fresh CRC), zlib's convention.
uint32_t crc32(uint32_t crc, const uint8_t* data, size_t len) noexcept;

class Icrc {
 public:
  // Start over the masked pseudo-header.  `ip` points at the IP header,
  // which is followed contiguously by UDP and BTH; `ip_hdr_len` is 20..60
  // for IPv4 (options included) and 40 for IPv6.
  static Icrc begin(const uint8_t* ip, size_t ip_hdr_len, bool ipv6) noexcept;

  // Fold in the bytes after the BTH: extended headers, payload, pad.
  void update(const uint8_t* data, size_t len) noexcept { crc_ = crc32(crc_, data, len); }
  void update(std::span<const uint8_t> s) noexcept { update(s.data(), s.size()); }

  uint32_t value() const noexcept { return crc_; }

 private:
  explicit Icrc(uint32_t c) noexcept : crc_(c) {}
  uint32_t crc_;
};

// The ICRC of a contiguous packet: `ip` as above, `covered_len` bytes from
// the IP header to the ICRC (exclusive).
uint32_t icrc(const uint8_t* ip, size_t ip_hdr_len, bool ipv6, size_t covered_len) noexcept;

inline void store_icrc(uint8_t* p, uint32_t crc) noexcept {
  p[0] = static_cast<uint8_t>(crc);
  p[1] = static_cast<uint8_t>(crc >> 8);
  p[2] = static_cast<uint8_t>(crc >> 16);
  p[3] = static_cast<uint8_t>(crc >> 24);
}

inline uint32_t load_icrc(const uint8_t* p) noexcept {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

}  // namespace uroce::wire
