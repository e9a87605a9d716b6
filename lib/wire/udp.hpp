// UDP header (RFC 768) and the RoCEv2 port numbers.
#pragma once

#include <cstdint>

#include "lib/wire/bytes.hpp"

namespace uroce::wire {

inline constexpr uint16_t kRoceV2Port = 4791;        // IANA, RoCEv2 annex A17.2.1
inline constexpr uint16_t kRoceSrcPortMin = 0xC000;  // A17.2.3: source port as flow entropy
inline constexpr uint16_t kRoceSrcPortMax = 0xFFFF;

template <class Byte>
class UdpT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 8;
  using ByteView<Byte>::ByteView;

  uint16_t src_port() const noexcept { return load_be<uint16_t>(this->p_); }
  uint16_t dst_port() const noexcept { return load_be<uint16_t>(this->p_ + 2); }
  uint16_t length() const noexcept { return load_be<uint16_t>(this->p_ + 4); }
  uint16_t checksum() const noexcept { return load_be<uint16_t>(this->p_ + 6); }

  void set_src_port(uint16_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_, v); }
  void set_dst_port(uint16_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 2, v); }
  void set_length(uint16_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 4, v); }
  void set_checksum(uint16_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 6, v); }
};

using Udp = UdpT<uint8_t>;
using UdpC = UdpT<const uint8_t>;
static_assert(Udp::kSize == 8);

}  // namespace uroce::wire
