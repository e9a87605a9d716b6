// IPv4 header (RFC 791).
#pragma once

#include <cstdint>

#include "lib/wire/bytes.hpp"

namespace uroce::wire {

inline constexpr uint8_t kIpProtoIcmp = 1;
inline constexpr uint8_t kIpProtoUdp = 17;
inline constexpr uint8_t kIpProtoIcmpv6 = 58;
inline constexpr uint16_t kIpv4FlagDf = 0x4000;
inline constexpr uint16_t kIpv4FlagMf = 0x2000;
inline constexpr uint16_t kIpv4FragOffsetMask = 0x1FFF;

template <class Byte>
class Ipv4T : public ByteView<Byte> {
 public:
  static constexpr size_t kMinSize = 20;
  static constexpr size_t kMaxSize = 60;
  using ByteView<Byte>::ByteView;

  uint8_t version() const noexcept { return this->p_[0] >> 4; }
  uint8_t ihl() const noexcept { return this->p_[0] & 0x0F; }  // in 32-bit words
  size_t header_len() const noexcept { return size_t{ihl()} * 4; }
  uint8_t tos() const noexcept { return this->p_[1]; }
  uint16_t total_len() const noexcept { return load_be<uint16_t>(this->p_ + 2); }
  uint16_t id() const noexcept { return load_be<uint16_t>(this->p_ + 4); }
  uint16_t flags_frag() const noexcept { return load_be<uint16_t>(this->p_ + 6); }
  bool df() const noexcept { return flags_frag() & kIpv4FlagDf; }
  bool is_fragment() const noexcept {
    return (flags_frag() & (kIpv4FlagMf | kIpv4FragOffsetMask)) != 0;
  }
  uint8_t ttl() const noexcept { return this->p_[8]; }
  uint8_t protocol() const noexcept { return this->p_[9]; }
  uint16_t checksum() const noexcept { return load_be<uint16_t>(this->p_ + 10); }
  uint32_t src() const noexcept { return load_be<uint32_t>(this->p_ + 12); }
  uint32_t dst() const noexcept { return load_be<uint32_t>(this->p_ + 16); }
  const Byte* src_bytes() const noexcept { return this->p_ + 12; }  // network order
  const Byte* dst_bytes() const noexcept { return this->p_ + 16; }

  void set_version_ihl(uint8_t ihl_words) noexcept requires ByteView<Byte>::kWritable {
    this->p_[0] = static_cast<uint8_t>(0x40 | (ihl_words & 0x0F));
  }
  void set_tos(uint8_t v) noexcept requires ByteView<Byte>::kWritable { this->p_[1] = v; }
  void set_total_len(uint16_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 2, v); }
  void set_id(uint16_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 4, v); }
  void set_flags_frag(uint16_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 6, v); }
  void set_ttl(uint8_t v) noexcept requires ByteView<Byte>::kWritable { this->p_[8] = v; }
  void set_protocol(uint8_t v) noexcept requires ByteView<Byte>::kWritable { this->p_[9] = v; }
  void set_checksum(uint16_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 10, v); }
  void set_src(uint32_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 12, v); }
  void set_dst(uint32_t v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 16, v); }

  // Header checksum over `header_len()` bytes with the checksum field as it
  // is; 0 means the stored checksum is right (RFC 1071).
  uint16_t compute_checksum() const noexcept {
    uint32_t sum = 0;
    for (size_t i = 0; i < header_len(); i += 2) sum += load_be<uint16_t>(this->p_ + i);
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    return static_cast<uint16_t>(~sum);
  }
  // Fill the checksum field for the header as it stands.
  void update_checksum() noexcept requires ByteView<Byte>::kWritable {
    set_checksum(0);
    set_checksum(compute_checksum());
  }
};

using Ipv4 = Ipv4T<uint8_t>;
using Ipv4C = Ipv4T<const uint8_t>;
static_assert(Ipv4::kMinSize == 20);

}  // namespace uroce::wire
