#include "lib/wire/icrc.hpp"

#include <isa-l/crc.h>

#include <array>
#include <cstring>

#include "lib/wire/bth.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"
#include "lib/wire/udp.hpp"

namespace uroce::wire {
namespace {

// Bitwise CRC-32 for compile-time constants only.
constexpr uint32_t crc32_bitwise(uint32_t crc, const uint8_t* p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

constexpr std::array<uint8_t, 8> kLrhStandIn = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
// The CRC after the 8 bytes of ones that replace the LRH.
constexpr uint32_t kAfterPrefix = crc32_bitwise(0, kLrhStandIn.data(), kLrhStandIn.size());
static_assert((kAfterPrefix ^ 0xFFFFFFFFu) == 0xDEBB20E3u, "CRC state after 8 x 0xFF");

// Largest pseudo-header: IPv4 with 40 bytes of options, UDP, BTH.
constexpr size_t kMaxPseudo = Ipv4::kMaxSize + Udp::kSize + Bth::kSize;
// Packets up to this many covered bytes are copied whole: one CRC call.
constexpr size_t kCopyWhole = 256;

// Copy IP+UDP+BTH (and possibly more) to `dst` and set the variant fields
// to ones.
inline void mask_variant_fields(uint8_t* dst, size_t ip_hdr_len, bool ipv6) noexcept {
  if (ipv6) {
    dst[0] |= 0x0F;  // traffic class, high nibble (byte 0 is version | TC[7:4])
    dst[1] = 0xFF;   // traffic class low nibble + flow label[19:16]
    dst[2] = 0xFF;
    dst[3] = 0xFF;
    dst[7] = 0xFF;   // hop limit
  } else {
    dst[1] = 0xFF;   // TOS
    dst[8] = 0xFF;   // TTL
    dst[10] = 0xFF;  // header checksum
    dst[11] = 0xFF;
  }
  uint8_t* udp = dst + ip_hdr_len;
  udp[6] = 0xFF;  // UDP checksum
  udp[7] = 0xFF;
  udp[Udp::kSize + Bth::kResv8aOffset] = 0xFF;
}

}  // namespace

uint32_t crc32(uint32_t crc, const uint8_t* data, size_t len) noexcept {
  return crc32_gzip_refl(crc, data, len);
}

Icrc Icrc::begin(const uint8_t* ip, size_t ip_hdr_len, bool ipv6) noexcept {
  uint8_t buf[kMaxPseudo];
  const size_t n = ip_hdr_len + Udp::kSize + Bth::kSize;
  std::memcpy(buf, ip, n);
  mask_variant_fields(buf, ip_hdr_len, ipv6);
  return Icrc(crc32(kAfterPrefix, buf, n));
}

uint32_t icrc(const uint8_t* ip, size_t ip_hdr_len, bool ipv6, size_t covered_len) noexcept {
  const size_t pseudo = ip_hdr_len + Udp::kSize + Bth::kSize;
  if (covered_len <= kCopyWhole) {
    uint8_t buf[kCopyWhole];
    std::memcpy(buf, ip, covered_len);
    mask_variant_fields(buf, ip_hdr_len, ipv6);
    return crc32(kAfterPrefix, buf, covered_len);
  }
  Icrc c = Icrc::begin(ip, ip_hdr_len, ipv6);
  c.update(ip + pseudo, covered_len - pseudo);
  return c.value();
}

}  // namespace uroce::wire
