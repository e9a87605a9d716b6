// Base Transport Header (IBA 9.2, table 20 of volume 1 release 1.4).
//
//  byte 0   OpCode
//  byte 1   SE(7) M(6) PadCnt(5:4) TVer(3:0)
//  byte 2-3 P_Key
//  byte 4   Resv8a (FECN/BECN on IB; masked out of the ICRC)
//  byte 5-7 DestQP
//  byte 8   AckReq(7) Resv7(6:0)
//  byte 9-11 PSN
#pragma once

#include <cstdint>

#include "lib/wire/bytes.hpp"
#include "lib/wire/types.hpp"

namespace uroce::wire {

// uroce's selective repeat (DESIGN.md "Loss recovery on a lossy link"):
// the top bit of Resv7, which the ICRC covers and every other RoCE sender
// leaves 0.  On a reliable request: its requester resends only what a
// selective NAK names.  On a PSN sequence NAK: the responder keeps what
// arrived after the gap the NAK's PSN starts, kResv7GapMask + 1 PSNs at
// most long (the low bits: its length - 1); such a NAK acknowledges
// nothing.  On a plain ACK: its responder keeps (the requester may then
// spray).  kResv7Sprayed, on a request that offers selective repeat: its
// requester spreads the QP's packets over several UDP source ports, so
// they may arrive out of order (the responder waits before NAKing a gap).
inline constexpr uint8_t kResv7Selective = 0x40;
inline constexpr uint8_t kResv7GapMask = 0x3F;
inline constexpr uint8_t kResv7Sprayed = 0x20;
inline constexpr uint32_t kMaxSelectiveGap = kResv7GapMask + 1;

template <class Byte>
class BthT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 12;
  static constexpr size_t kResv8aOffset = 4;  // the one BTH byte the ICRC masks
  using ByteView<Byte>::ByteView;

  uint8_t opcode() const noexcept { return this->p_[0]; }
  bool se() const noexcept { return this->p_[1] & 0x80; }
  bool mig() const noexcept { return this->p_[1] & 0x40; }
  uint8_t pad_count() const noexcept { return (this->p_[1] >> 4) & 0x3; }
  uint8_t tver() const noexcept { return this->p_[1] & 0x0F; }
  Pkey pkey() const noexcept { return Pkey(load_be<uint16_t>(this->p_ + 2)); }
  uint8_t resv8a() const noexcept { return this->p_[4]; }
  Qpn dest_qp() const noexcept { return Qpn(load_be24(this->p_ + 5)); }
  bool ack_req() const noexcept { return this->p_[8] & 0x80; }
  uint8_t resv7() const noexcept { return this->p_[8] & 0x7F; }
  Psn psn() const noexcept { return Psn(load_be24(this->p_ + 9)); }

  void set_opcode(uint8_t v) noexcept requires ByteView<Byte>::kWritable { this->p_[0] = v; }
  void set_se(bool v) noexcept requires ByteView<Byte>::kWritable { set_bit(1, 0x80, v); }
  void set_mig(bool v) noexcept requires ByteView<Byte>::kWritable { set_bit(1, 0x40, v); }
  void set_pad_count(uint8_t v) noexcept requires ByteView<Byte>::kWritable {
    this->p_[1] = with_bits(this->p_[1], 0x30, static_cast<uint8_t>(v << 4));
  }
  void set_tver(uint8_t v) noexcept requires ByteView<Byte>::kWritable {
    this->p_[1] = with_bits(this->p_[1], 0x0F, v);
  }
  void set_pkey(Pkey v) noexcept requires ByteView<Byte>::kWritable { store_be(this->p_ + 2, v.value()); }
  void set_resv8a(uint8_t v) noexcept requires ByteView<Byte>::kWritable { this->p_[4] = v; }
  void set_dest_qp(Qpn v) noexcept requires ByteView<Byte>::kWritable { store_be24(this->p_ + 5, v.value()); }
  void set_ack_req(bool v) noexcept requires ByteView<Byte>::kWritable { set_bit(8, 0x80, v); }
  void set_resv7(uint8_t v) noexcept requires ByteView<Byte>::kWritable {
    this->p_[8] = with_bits(this->p_[8], 0x7F, v);
  }
  void set_psn(Psn v) noexcept requires ByteView<Byte>::kWritable { store_be24(this->p_ + 9, v.value()); }

 private:
  void set_bit(size_t off, uint8_t mask, bool v) noexcept {
    this->p_[off] = with_bits(this->p_[off], mask, v ? mask : 0);
  }
};

using Bth = BthT<uint8_t>;
using BthC = BthT<const uint8_t>;
static_assert(Bth::kSize == 12);

}  // namespace uroce::wire
