// Ethernet II and IEEE 802.1Q tags.
#pragma once

#include <array>
#include <cstdint>

#include "lib/wire/bytes.hpp"

namespace uroce::wire {

using MacAddr = std::array<uint8_t, 6>;

inline constexpr uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr uint16_t kEtherTypeArp = 0x0806;
inline constexpr uint16_t kEtherTypeVlan = 0x8100;  // 802.1Q C-tag
inline constexpr uint16_t kEtherTypeQinQ = 0x88A8;  // 802.1ad S-tag
inline constexpr uint16_t kEtherTypeIpv6 = 0x86DD;
inline constexpr uint16_t kEtherTypeRoceV1 = 0x8915;

inline constexpr size_t kEthMinFrame = 60;  // without FCS

template <class Byte>
class EthT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 14;
  using ByteView<Byte>::ByteView;

  MacAddr dst() const noexcept { return mac_at(0); }
  MacAddr src() const noexcept { return mac_at(6); }
  uint16_t ethertype() const noexcept { return load_be<uint16_t>(this->p_ + 12); }

  void set_dst(const MacAddr& m) noexcept requires ByteView<Byte>::kWritable { put_mac(0, m); }
  void set_src(const MacAddr& m) noexcept requires ByteView<Byte>::kWritable { put_mac(6, m); }
  void set_ethertype(uint16_t t) noexcept requires ByteView<Byte>::kWritable {
    store_be<uint16_t>(this->p_ + 12, t);
  }

 private:
  MacAddr mac_at(size_t off) const noexcept {
    MacAddr m;
    std::memcpy(m.data(), this->p_ + off, m.size());
    return m;
  }
  void put_mac(size_t off, const MacAddr& m) noexcept { std::memcpy(this->p_ + off, m.data(), m.size()); }
};

// The 4 bytes that follow the TPID: TCI then the inner EtherType.
template <class Byte>
class VlanT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 4;
  using ByteView<Byte>::ByteView;

  uint16_t tci() const noexcept { return load_be<uint16_t>(this->p_); }
  uint8_t pcp() const noexcept { return static_cast<uint8_t>(tci() >> 13); }
  uint16_t vid() const noexcept { return tci() & 0x0FFF; }
  uint16_t ethertype() const noexcept { return load_be<uint16_t>(this->p_ + 2); }

  void set_tci(uint16_t v) noexcept requires ByteView<Byte>::kWritable { store_be<uint16_t>(this->p_, v); }
  void set_ethertype(uint16_t t) noexcept requires ByteView<Byte>::kWritable {
    store_be<uint16_t>(this->p_ + 2, t);
  }
};

using Eth = EthT<uint8_t>;
using EthC = EthT<const uint8_t>;
using Vlan = VlanT<uint8_t>;
using VlanC = VlanT<const uint8_t>;
static_assert(Eth::kSize == 14 && Vlan::kSize == 4);

inline constexpr MacAddr kBroadcastMac{0xff, 0xff, 0xff, 0xff, 0xff, 0xff};

}  // namespace uroce::wire
