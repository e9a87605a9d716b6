// ICMPv4 echo (RFC 792) and ICMPv6 echo / neighbour discovery (RFC 4443,
// RFC 4861): what the engine answers itself on ports with no kernel.
#pragma once

#include <cstdint>
#include <span>

#include "lib/wire/bytes.hpp"
#include "lib/wire/eth.hpp"
#include "lib/wire/ipv6.hpp"

namespace uroce::wire {

inline constexpr uint8_t kIcmpEchoReply = 0;
inline constexpr uint8_t kIcmpEchoRequest = 8;
inline constexpr uint8_t kIcmp6EchoRequest = 128;
inline constexpr uint8_t kIcmp6EchoReply = 129;
inline constexpr uint8_t kIcmp6NeighborSolicit = 135;
inline constexpr uint8_t kIcmp6NeighborAdvert = 136;
inline constexpr uint8_t kNdOptSourceLinkAddr = 1;
inline constexpr uint8_t kNdOptTargetLinkAddr = 2;
inline constexpr uint32_t kNaFlagSolicited = 0x40000000;
inline constexpr uint32_t kNaFlagOverride = 0x20000000;
inline constexpr uint8_t kNdHopLimit = 255;  // RFC 4861 7.1.1

// The first 4 bytes every ICMP message has, plus the 4 that follow
// (identifier/sequence for echo, flags/reserved for ND).
template <class Byte>
class IcmpT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 8;
  using ByteView<Byte>::ByteView;
  uint8_t type() const noexcept { return this->p_[0]; }
  uint8_t code() const noexcept { return this->p_[1]; }
  uint16_t checksum() const noexcept { return load_be<uint16_t>(this->p_ + 2); }
  uint32_t rest() const noexcept { return load_be<uint32_t>(this->p_ + 4); }
  void set_type(uint8_t v) noexcept requires ByteView<Byte>::kWritable { this->p_[0] = v; }
  void set_code(uint8_t v) noexcept requires ByteView<Byte>::kWritable { this->p_[1] = v; }
  void set_checksum(uint16_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 2, v); }
  void set_rest(uint32_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 4, v); }
};

using Icmp = IcmpT<uint8_t>;
using IcmpC = IcmpT<const uint8_t>;
static_assert(Icmp::kSize == 8);

// Neighbour solicitation / advertisement body after the 8-byte ICMPv6
// header: the 16-byte target address, then options.
inline constexpr size_t kNdTargetOffset = 8;
inline constexpr size_t kNdOptionsOffset = 24;
inline constexpr size_t kNdLinkAddrOptLen = 8;  // type, length (in 8-byte units), MAC

// One's-complement sum helpers (RFC 1071).
inline uint32_t csum_add(uint32_t sum, const uint8_t* p, size_t len) noexcept {
  for (; len >= 2; p += 2, len -= 2) sum += load_be<uint16_t>(p);
  if (len) sum += uint32_t{p[0]} << 8;
  return sum;
}

inline uint16_t csum_fold(uint32_t sum) noexcept {
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

// ICMPv6 checksum over the IPv6 pseudo-header and the message (with its
// checksum field zero or as it is: a message with a correct checksum sums
// to 0).
inline uint16_t icmp6_checksum(const Ipv6Addr& src, const Ipv6Addr& dst, const uint8_t* msg,
                               size_t len) noexcept {
  uint32_t sum = csum_add(0, src.data(), 16);
  sum = csum_add(sum, dst.data(), 16);
  sum += static_cast<uint32_t>(len >> 16) + static_cast<uint32_t>(len & 0xFFFF);
  sum += 58;  // next header: ICMPv6
  sum = csum_add(sum, msg, len);
  return csum_fold(sum);
}

inline uint16_t icmp4_checksum(const uint8_t* msg, size_t len) noexcept {
  return csum_fold(csum_add(0, msg, len));
}

// The solicited-node multicast address ff02::1:ffXX:XXXX (RFC 4291 2.7.1)
// and its Ethernet group address 33:33:ff:XX:XX:XX (RFC 2464 7).
inline Ipv6Addr solicited_node(const Ipv6Addr& a) noexcept {
  return {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, a[13], a[14], a[15]};
}

inline MacAddr ipv6_multicast_mac(const Ipv6Addr& a) noexcept {
  return {0x33, 0x33, a[12], a[13], a[14], a[15]};
}

}  // namespace uroce::wire
