// IPv6 fixed header (RFC 8200).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "lib/wire/bytes.hpp"

namespace uroce::wire {

using Ipv6Addr = std::array<uint8_t, 16>;

// IPv4 addresses as IPv6 (::ffff:a.b.c.d, RFC 4291 2.5.5.2), as GIDs carry them.
inline constexpr std::array<uint8_t, 12> kIpv4MappedPrefix{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
inline constexpr bool is_ipv4_mapped(const Ipv6Addr& a) noexcept {
  for (size_t i = 0; i < kIpv4MappedPrefix.size(); ++i) {
    if (a[i] != kIpv4MappedPrefix[i]) return false;
  }
  return true;
}

// Whether `a` and `b` are of one family and share their first `prefix_len`
// bits as that family counts them (an IPv4-mapped address's last 32, an
// IPv6 address's 128): the one subnet test of the device's routes and
// rdma_cm's address matching.
inline bool same_subnet(const Ipv6Addr& a, const Ipv6Addr& b, unsigned prefix_len) noexcept {
  const bool v4 = is_ipv4_mapped(a);
  if (v4 != is_ipv4_mapped(b)) return false;
  unsigned bits = v4 ? 8u * kIpv4MappedPrefix.size() + prefix_len : prefix_len;
  for (size_t i = 0; i < a.size() && bits > 0; ++i) {
    const unsigned take = bits < 8u ? bits : 8u;
    const auto mask = static_cast<uint8_t>(0xFF00u >> take);
    if ((a[i] & mask) != (b[i] & mask)) return false;
    bits -= take;
  }
  return true;
}

// An IPv4 address (4 bytes in network order) as its IPv4-mapped GID.
inline Ipv6Addr ipv4_mapped(const uint8_t* v4) noexcept {
  Ipv6Addr a{};
  std::memcpy(a.data(), kIpv4MappedPrefix.data(), kIpv4MappedPrefix.size());
  std::memcpy(a.data() + kIpv4MappedPrefix.size(), v4, 4);
  return a;
}

// A multicast GID: IPv4-mapped 224.0.0.0/4 (RoCEv2 over IPv4, A17.4.5.1),
// or IPv6 ff00::/8.
inline constexpr bool is_multicast_gid(const Ipv6Addr& a) noexcept {
  return is_ipv4_mapped(a) ? (a[12] >> 4) == 0xE : a[0] == 0xFF;
}

template <class Byte>
class Ipv6T : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 40;
  using ByteView<Byte>::ByteView;

  uint32_t vtcfl() const noexcept { return load_be<uint32_t>(this->p_); }
  uint8_t version() const noexcept { return static_cast<uint8_t>(vtcfl() >> 28); }
  uint8_t traffic_class() const noexcept { return static_cast<uint8_t>(vtcfl() >> 20); }
  uint32_t flow_label() const noexcept { return vtcfl() & 0xFFFFF; }
  uint16_t payload_len() const noexcept { return load_be<uint16_t>(this->p_ + 4); }
  uint8_t next_header() const noexcept { return this->p_[6]; }
  uint8_t hop_limit() const noexcept { return this->p_[7]; }
  Ipv6Addr src() const noexcept { return addr_at(8); }
  Ipv6Addr dst() const noexcept { return addr_at(24); }
  const Byte* src_bytes() const noexcept { return this->p_ + 8; }
  const Byte* dst_bytes() const noexcept { return this->p_ + 24; }

  void set_vtcfl(uint8_t tc, uint32_t fl) noexcept requires ByteView<Byte>::kWritable {
    store_be<uint32_t>(this->p_, (6u << 28) | (uint32_t{tc} << 20) | (fl & 0xFFFFF));
  }
  void set_payload_len(uint16_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 4, v); }
  void set_next_header(uint8_t v) noexcept requires ByteView<Byte>::kWritable { this->p_[6] = v; }
  void set_hop_limit(uint8_t v) noexcept requires ByteView<Byte>::kWritable { this->p_[7] = v; }
  void set_src(const Ipv6Addr& a) noexcept requires ByteView<Byte>::kWritable { std::memcpy(this->p_ + 8, a.data(), 16); }
  void set_dst(const Ipv6Addr& a) noexcept requires ByteView<Byte>::kWritable { std::memcpy(this->p_ + 24, a.data(), 16); }

 private:
  Ipv6Addr addr_at(size_t off) const noexcept {
    Ipv6Addr a;
    std::memcpy(a.data(), this->p_ + off, 16);
    return a;
  }
};

using Ipv6 = Ipv6T<uint8_t>;
using Ipv6C = Ipv6T<const uint8_t>;
static_assert(Ipv6::kSize == 40);

}  // namespace uroce::wire
