// Extended transport headers (IBA 9.3 and annexes): RDETH, DETH, XRCETH,
// RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, FETH.
#pragma once

#include <cstdint>

#include "lib/wire/bytes.hpp"
#include "lib/wire/types.hpp"

namespace uroce::wire {

#define UROCE_W requires ByteView<Byte>::kWritable

// RDMA ETH (IBA 9.3.3): virtual address, R_Key, DMA length.
template <class Byte>
class RethT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 16;
  using ByteView<Byte>::ByteView;
  uint64_t va() const noexcept { return load_be<uint64_t>(this->p_); }
  Rkey rkey() const noexcept { return Rkey(load_be<uint32_t>(this->p_ + 8)); }
  uint32_t dma_len() const noexcept { return load_be<uint32_t>(this->p_ + 12); }
  void set_va(uint64_t v) noexcept UROCE_W { store_be(this->p_, v); }
  void set_rkey(Rkey v) noexcept UROCE_W { store_be(this->p_ + 8, v.value()); }
  void set_dma_len(uint32_t v) noexcept UROCE_W { store_be(this->p_ + 12, v); }
};

// Atomic ETH (IBA 9.3.4): VA, R_Key, swap (or add) data, compare data.
template <class Byte>
class AtomicEthT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 28;
  using ByteView<Byte>::ByteView;
  uint64_t va() const noexcept { return load_be<uint64_t>(this->p_); }
  Rkey rkey() const noexcept { return Rkey(load_be<uint32_t>(this->p_ + 8)); }
  uint64_t swap_add() const noexcept { return load_be<uint64_t>(this->p_ + 12); }
  uint64_t compare() const noexcept { return load_be<uint64_t>(this->p_ + 20); }
  void set_va(uint64_t v) noexcept UROCE_W { store_be(this->p_, v); }
  void set_rkey(Rkey v) noexcept UROCE_W { store_be(this->p_ + 8, v.value()); }
  void set_swap_add(uint64_t v) noexcept UROCE_W { store_be(this->p_ + 12, v); }
  void set_compare(uint64_t v) noexcept UROCE_W { store_be(this->p_ + 20, v); }
};

// AETH syndrome classes (IBA 9.7.5.1.2, table 42).
enum class AckType : uint8_t { Ack = 0, RnrNak = 1, Reserved = 2, Nak = 3 };
// NAK codes (table 43).
enum class NakCode : uint8_t {
  PsnSequenceError = 0,
  InvalidRequest = 1,
  RemoteAccessError = 2,
  RemoteOperationalError = 3,
  InvalidRdRequest = 4,
};
inline constexpr uint8_t kAethCreditInvalid = 0x1F;  // "no credit count" ACK

constexpr uint8_t make_syndrome(AckType t, uint8_t value) noexcept {
  return static_cast<uint8_t>((static_cast<uint8_t>(t) << 5) | (value & 0x1F));
}

// ACK ETH (IBA 9.3.5): syndrome and MSN.
template <class Byte>
class AethT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 4;
  using ByteView<Byte>::ByteView;
  uint8_t syndrome() const noexcept { return this->p_[0]; }
  AckType type() const noexcept { return static_cast<AckType>((this->p_[0] >> 5) & 0x3); }
  uint8_t value() const noexcept { return this->p_[0] & 0x1F; }  // credits, RNR timer or NAK code
  Msn msn() const noexcept { return Msn(load_be24(this->p_ + 1)); }
  void set_syndrome(uint8_t v) noexcept UROCE_W { this->p_[0] = v; }
  void set_msn(Msn v) noexcept UROCE_W { store_be24(this->p_ + 1, v.value()); }
};

// Atomic ACK ETH (IBA 9.3.6): the original remote data.
template <class Byte>
class AtomicAckEthT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 8;
  using ByteView<Byte>::ByteView;
  uint64_t orig() const noexcept { return load_be<uint64_t>(this->p_); }
  void set_orig(uint64_t v) noexcept UROCE_W { store_be(this->p_, v); }
};

// Immediate data (IBA 9.3.7): opaque 4 bytes, kept in wire order as
// libibverbs does (ibv_wc.imm_data is __be32).
template <class Byte>
class ImmDtT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 4;
  using ByteView<Byte>::ByteView;
  uint32_t imm() const noexcept { return load_be<uint32_t>(this->p_); }
  void set_imm(uint32_t v) noexcept UROCE_W { store_be(this->p_, v); }
};

// Invalidate ETH (IBA 9.3.8): the R_Key to invalidate.
template <class Byte>
class IethT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 4;
  using ByteView<Byte>::ByteView;
  Rkey rkey() const noexcept { return Rkey(load_be<uint32_t>(this->p_)); }
  void set_rkey(Rkey v) noexcept UROCE_W { store_be(this->p_, v.value()); }
};

// Datagram ETH (IBA 9.3.2): Q_Key, reserved byte, source QP.
template <class Byte>
class DethT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 8;
  using ByteView<Byte>::ByteView;
  Qkey qkey() const noexcept { return Qkey(load_be<uint32_t>(this->p_)); }
  uint8_t resv8() const noexcept { return this->p_[4]; }
  Qpn src_qp() const noexcept { return Qpn(load_be24(this->p_ + 5)); }
  void set_qkey(Qkey v) noexcept UROCE_W { store_be(this->p_, v.value()); }
  void set_resv8(uint8_t v) noexcept UROCE_W { this->p_[4] = v; }
  void set_src_qp(Qpn v) noexcept UROCE_W { store_be24(this->p_ + 5, v.value()); }
};

// Reliable Datagram ETH (IBA 9.3.1) and XRC ETH (annex A14): one reserved
// byte and a 24-bit EE context / XRC SRQ number.  Parsed so that such
// packets are named and round-trip; the transport does not serve them.
template <class Byte>
class Eth24T : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 4;
  using ByteView<Byte>::ByteView;
  uint8_t resv8() const noexcept { return this->p_[0]; }
  uint32_t number() const noexcept { return load_be24(this->p_ + 1); }
  void set_resv8(uint8_t v) noexcept UROCE_W { this->p_[0] = v; }
  void set_number(uint32_t v) noexcept UROCE_W { store_be24(this->p_ + 1, v); }
};

// Flush ETH (IBA 1.5 annex, as rxe sends it): placement type and
// selectivity level in one 32-bit word.
template <class Byte>
class FethT : public ByteView<Byte> {
 public:
  static constexpr size_t kSize = 4;
  using ByteView<Byte>::ByteView;
  uint32_t word() const noexcept { return load_be<uint32_t>(this->p_); }
  void set_word(uint32_t v) noexcept UROCE_W { store_be(this->p_, v); }
};

// The FETH word's fields (rxe's layout): the placement type in bits 3-0
// (global visibility, persistence; the verbs' IBV_FLUSH_GLOBAL /
// _PERSISTENT), the selectivity level in bits 5-4 (a range, or the whole
// MR; IBV_FLUSH_RANGE / _MR), the rest reserved.  The requester builds it
// and the responder reads it through these, one layout for both.
inline constexpr uint32_t kFethGlobal = 1u << 0;
inline constexpr uint32_t kFethPersistent = 1u << 1;
inline constexpr uint32_t kFethRange = 0;
inline constexpr uint32_t kFethMr = 1;
inline constexpr uint32_t kFethPlacementMask = 0xf;
inline constexpr uint32_t kFethLevelShift = 4;
inline constexpr uint32_t kFethLevelMask = 0x3;  // bits 5-4
constexpr uint32_t feth_placement(uint32_t word) noexcept { return word & kFethPlacementMask; }
constexpr uint32_t feth_level(uint32_t word) noexcept { return word >> kFethLevelShift; }
constexpr uint32_t make_feth(uint32_t placement, uint32_t level) noexcept {
  return level << kFethLevelShift | (placement & kFethPlacementMask);
}
// One or both known placement types, a known level, nothing reserved.
constexpr bool feth_known(uint32_t word) noexcept {
  const uint32_t type = feth_placement(word);
  const uint32_t level = feth_level(word);
  return type != 0 && (type & ~(kFethGlobal | kFethPersistent)) == 0 && (level == kFethRange || level == kFethMr);
}
static_assert(feth_known(make_feth(kFethGlobal, kFethMr)) && !feth_known(make_feth(0, kFethRange)) &&
              !feth_known(make_feth(kFethGlobal, 2)) && !feth_known(make_feth(kFethGlobal, kFethRange) | 0x100));

#undef UROCE_W

using Reth = RethT<uint8_t>;
using RethC = RethT<const uint8_t>;
using AtomicEth = AtomicEthT<uint8_t>;
using AtomicEthC = AtomicEthT<const uint8_t>;
using Aeth = AethT<uint8_t>;
using AethC = AethT<const uint8_t>;
using AtomicAckEth = AtomicAckEthT<uint8_t>;
using AtomicAckEthC = AtomicAckEthT<const uint8_t>;
using ImmDt = ImmDtT<uint8_t>;
using ImmDtC = ImmDtT<const uint8_t>;
using Ieth = IethT<uint8_t>;
using IethC = IethT<const uint8_t>;
using Deth = DethT<uint8_t>;
using DethC = DethT<const uint8_t>;
using Rdeth = Eth24T<uint8_t>;
using RdethC = Eth24T<const uint8_t>;
using XrcEth = Eth24T<uint8_t>;
using XrcEthC = Eth24T<const uint8_t>;
using Feth = FethT<uint8_t>;
using FethC = FethT<const uint8_t>;

static_assert(Reth::kSize == 16 && AtomicEth::kSize == 28 && Aeth::kSize == 4);
static_assert(AtomicAckEth::kSize == 8 && ImmDt::kSize == 4 && Ieth::kSize == 4);
static_assert(Deth::kSize == 8 && Rdeth::kSize == 4 && Feth::kSize == 4);

}  // namespace uroce::wire
