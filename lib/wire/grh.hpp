// The GRH area of a RoCEv2 UD receive (IBA 11.4.1.2: the first 40 bytes of
// the receive buffer hold the packet's GRH).  On RoCEv2 the GRH is the IP
// header: an IPv6 header fills the 40 bytes; an IPv4 header takes the last
// 20 and the first 20 are zero — as rxe and mlx5 fill it, and as UCX and
// rdma-core's ibv_init_ah_from_wc read it.
#pragma once

#include <cstdint>
#include <cstring>

#include "lib/wire/bytes.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"
#include "lib/wire/pkt.hpp"

namespace uroce::wire {

template <class Byte>
class GrhAreaT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 40;
  static constexpr size_t kIpv4At = kSize - Ipv4C::kMinSize;  // an IPv4 header's place in the area
  using ByteView<Byte>::ByteView;

  // The IP version the area holds: 6, 4, or 0 when it holds neither.
  uint8_t version() const noexcept {
    if ((this->p_[kIpv4At] >> 4) == 4) return 4;
    if ((this->p_[0] >> 4) == 6) return 6;
    return 0;
  }
  // The sender's address as a GID (IPv4 mapped); false when the area
  // holds no IP header.
  bool sgid(Ipv6Addr& out) const noexcept {
    switch (version()) {
      case 4:
        out = ipv4_mapped(Ipv4C(this->p_ + kIpv4At).src_bytes());
        return true;
      case 6:
        out = Ipv6C(this->p_).src();
        return true;
      default:
        return false;
    }
  }

  // The area for a received frame's IP header (`pi` from parse()).
  void fill(const uint8_t* frame, const PktInfo& pi) noexcept requires ByteView<Byte>::kWritable {
    std::memset(this->p_, 0, kSize);
    const uint8_t* ip = frame + pi.l3_off;
    if (pi.l3 == L3::IPv4) {
      std::memcpy(this->p_ + kIpv4At, ip, Ipv4C::kMinSize);
    } else {
      std::memcpy(this->p_, ip, Ipv6C::kSize);
    }
  }
};
using GrhArea = GrhAreaT<uint8_t>;
using GrhAreaC = GrhAreaT<const uint8_t>;
static_assert(GrhAreaC::kSize == Ipv6C::kSize && GrhAreaC::kIpv4At == 20);

}  // namespace uroce::wire
