// Strong types for the identifiers that cross function boundaries on the
// data path: PSN, QPN, MSN and the keys.  Raw integers for these never do.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>

namespace uroce {

// A 24-bit packet sequence number with modular order (IBA 9.7.1: PSNs are
// compared within a window of half the sequence space).
class Psn {
 public:
  static constexpr uint32_t kBits = 24;
  static constexpr uint32_t kMask = (1u << kBits) - 1;
  static constexpr uint32_t kHalf = 1u << (kBits - 1);

  constexpr Psn() noexcept = default;
  constexpr explicit Psn(uint32_t v) noexcept : v_(v & kMask) {}

  constexpr uint32_t value() const noexcept { return v_; }

  constexpr Psn operator+(uint32_t n) const noexcept { return Psn(v_ + n); }
  constexpr Psn operator-(uint32_t n) const noexcept { return Psn(v_ - n); }
  constexpr Psn& operator+=(uint32_t n) noexcept { v_ = (v_ + n) & kMask; return *this; }
  constexpr Psn& operator++() noexcept { return *this += 1; }

  // Signed distance a - b in the modular space, in [-2^23, 2^23).
  friend constexpr int32_t distance(Psn a, Psn b) noexcept {
    uint32_t d = (a.v_ - b.v_) & kMask;
    return d >= kHalf ? static_cast<int32_t>(d) - static_cast<int32_t>(1u << kBits)
                      : static_cast<int32_t>(d);
  }
  friend constexpr bool operator==(Psn a, Psn b) noexcept = default;
  // Modular order: a < b when b is ahead of a by less than half the space.
  friend constexpr std::strong_ordering operator<=>(Psn a, Psn b) noexcept {
    return distance(a, b) <=> 0;
  }

 private:
  uint32_t v_ = 0;
};

// Identifiers that are only compared for equality and printed.
template <class Tag, class Rep, Rep Mask = static_cast<Rep>(~Rep{0})>
class StrongId {
 public:
  static constexpr Rep kMask = Mask;
  constexpr StrongId() noexcept = default;
  constexpr explicit StrongId(Rep v) noexcept : v_(static_cast<Rep>(v & Mask)) {}
  constexpr Rep value() const noexcept { return v_; }
  friend constexpr bool operator==(StrongId, StrongId) noexcept = default;
  friend constexpr auto operator<=>(StrongId, StrongId) noexcept = default;

 private:
  Rep v_ = 0;
};

struct QpnTag {};
struct RkeyTag {};
struct LkeyTag {};
struct QkeyTag {};
struct PkeyTag {};

using Qpn = StrongId<QpnTag, uint32_t, 0xFFFFFFu>;  // 24 bits (IBA 9.2)
using Rkey = StrongId<RkeyTag, uint32_t>;
using Lkey = StrongId<LkeyTag, uint32_t>;
using Qkey = StrongId<QkeyTag, uint32_t>;
using Pkey = StrongId<PkeyTag, uint16_t>;

// Message sequence number carried in the AETH (IBA 9.7.5.1.2): 24 bits,
// modular like the PSN.
class Msn {
 public:
  static constexpr uint32_t kMask = 0xFFFFFFu;
  constexpr Msn() noexcept = default;
  constexpr explicit Msn(uint32_t v) noexcept : v_(v & kMask) {}
  constexpr uint32_t value() const noexcept { return v_; }
  constexpr Msn& operator++() noexcept { v_ = (v_ + 1) & kMask; return *this; }
  friend constexpr bool operator==(Msn, Msn) noexcept = default;

 private:
  uint32_t v_ = 0;
};

inline constexpr Qpn kQp0{0};
inline constexpr Qpn kQp1{1};                       // GSI
inline constexpr Qkey kGsiQkey{0x80010000u};        // IBA 13.4.6.1
inline constexpr Pkey kDefaultPkey{0xFFFF};

}  // namespace uroce

template <class Tag, class Rep, Rep Mask>
struct std::hash<uroce::StrongId<Tag, Rep, Mask>> {
  size_t operator()(uroce::StrongId<Tag, Rep, Mask> id) const noexcept {
    return std::hash<Rep>{}(id.value());
  }
};
