// ARP for IPv4 over Ethernet (RFC 826).
#pragma once

#include <cstdint>

#include "lib/wire/bytes.hpp"
#include "lib/wire/eth.hpp"

namespace uroce::wire {

inline constexpr uint16_t kArpHwEthernet = 1;
inline constexpr uint16_t kArpOpRequest = 1;
inline constexpr uint16_t kArpOpReply = 2;

template <class Byte>
class ArpT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 28;
  using ByteView<Byte>::ByteView;

  uint16_t htype() const noexcept { return load_be<uint16_t>(this->p_); }
  uint16_t ptype() const noexcept { return load_be<uint16_t>(this->p_ + 2); }
  uint8_t hlen() const noexcept { return this->p_[4]; }
  uint8_t plen() const noexcept { return this->p_[5]; }
  uint16_t op() const noexcept { return load_be<uint16_t>(this->p_ + 6); }
  MacAddr sha() const noexcept { return mac_at(8); }
  uint32_t spa() const noexcept { return load_be<uint32_t>(this->p_ + 14); }
  MacAddr tha() const noexcept { return mac_at(18); }
  uint32_t tpa() const noexcept { return load_be<uint32_t>(this->p_ + 24); }

  // An ARP packet for IPv4 over Ethernet (the only kind we answer).
  bool is_ipv4_over_ethernet() const noexcept {
    return htype() == kArpHwEthernet && ptype() == kEtherTypeIpv4 && hlen() == 6 && plen() == 4;
  }

  void set_ipv4_over_ethernet(uint16_t op) noexcept requires ByteView<Byte>::kWritable {
    store_be<uint16_t>(this->p_, kArpHwEthernet);
    store_be<uint16_t>(this->p_ + 2, kEtherTypeIpv4);
    this->p_[4] = 6;
    this->p_[5] = 4;
    store_be<uint16_t>(this->p_ + 6, op);
  }
  void set_sha(const MacAddr& m) noexcept requires ByteView<Byte>::kWritable { put_mac(8, m); }
  void set_spa(uint32_t a) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 14, a); }
  void set_tha(const MacAddr& m) noexcept requires ByteView<Byte>::kWritable { put_mac(18, m); }
  void set_tpa(uint32_t a) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 24, a); }

 private:
  MacAddr mac_at(size_t off) const noexcept {
    MacAddr m;
    std::memcpy(m.data(), this->p_ + off, m.size());
    return m;
  }
  void put_mac(size_t off, const MacAddr& m) noexcept { std::memcpy(this->p_ + off, m.data(), m.size()); }
};

using Arp = ArpT<uint8_t>;
using ArpC = ArpT<const uint8_t>;
static_assert(Arp::kSize == 28);

}  // namespace uroce::wire
