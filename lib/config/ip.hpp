// IP addresses and prefixes as the configuration holds them.
//
// Every address is 16 bytes in network order.  An IPv4 address is held
// IPv4-mapped (::ffff:a.b.c.d), which is also the RoCEv2 GID it stands for,
// so `bytes` is the GID of either family.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "lib/util/result.hpp"

namespace uroce::config {

enum class IpFamily : uint8_t { kIpv4, kIpv6 };

inline constexpr uint8_t kIpv4MaxPrefix = 32;
inline constexpr uint8_t kIpv6MaxPrefix = 128;
inline constexpr size_t kIpv4Bytes = 4;
inline constexpr size_t kIpBytes = 16;

struct IpAddr {
  IpFamily family = IpFamily::kIpv4;
  std::array<uint8_t, kIpBytes> bytes{};  // IPv4 as ::ffff:a.b.c.d

  static IpAddr ipv4(const std::array<uint8_t, kIpv4Bytes>& octets) noexcept;
  // The four octets of an IPv4 address (the low 4 bytes of `bytes`).
  std::array<uint8_t, kIpv4Bytes> ipv4_octets() const noexcept;

  friend bool operator==(const IpAddr&, const IpAddr&) = default;
};

struct IpPrefix {
  IpAddr addr;             // the device's own address (host bits kept)
  uint8_t prefix_len = 0;  // 0..32 for IPv4, 0..128 for IPv6

  IpFamily family() const noexcept { return addr.family; }
  friend bool operator==(const IpPrefix&, const IpPrefix&) = default;
};

inline constexpr uint8_t max_prefix(IpFamily f) noexcept {
  return f == IpFamily::kIpv4 ? kIpv4MaxPrefix : kIpv6MaxPrefix;
}

// "10.0.0.1" or "fd00::1".  Text with a ':' is IPv6; an IPv4-mapped IPv6
// address ("::ffff:10.0.0.1") comes back as IPv4, since it is the same GID.
// The error is a complete reason that quotes `text`.
Result<IpAddr, std::string> parse_ip_address(std::string_view text);

// "10.0.0.1/24" or "fd00::1/64": the prefix length is required.  IPv4-mapped
// IPv6 text is refused here (write the IPv4 form), and so are addresses no
// device can own: unspecified, loopback, multicast, IPv4 broadcast.
Result<IpPrefix, std::string> parse_ip_prefix(std::string_view text);

// Why `a` cannot be a device address or a GID, or empty when it can be.
std::string_view unusable_address_reason(const IpAddr& a) noexcept;

// Whether `addr` (16 bytes, IPv4 as ::ffff:a.b.c.d) lies in `p`'s subnet:
// the same family and the same first prefix_len bits.
bool prefix_contains(const IpPrefix& p, const std::array<uint8_t, kIpBytes>& addr) noexcept;

std::string to_string(const IpAddr& a);    // "10.0.0.1", "fd00::1"
std::string to_string(const IpPrefix& p);  // "10.0.0.1/24"

}  // namespace uroce::config
