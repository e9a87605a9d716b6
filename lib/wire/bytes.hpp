// Big-endian loads and stores over raw bytes.  Every wire header in
// lib/wire is a view over bytes that reads and writes its fields through
// these helpers: no host-order structs, no bitfields on the wire.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace uroce::wire {

template <class T>
constexpr T byteswap(T v) noexcept {
  static_assert(std::is_unsigned_v<T>);
  if constexpr (sizeof(T) == 1) {
    return v;
  } else if constexpr (sizeof(T) == 2) {
    return static_cast<T>(__builtin_bswap16(v));
  } else if constexpr (sizeof(T) == 4) {
    return static_cast<T>(__builtin_bswap32(v));
  } else {
    static_assert(sizeof(T) == 8);
    return static_cast<T>(__builtin_bswap64(v));
  }
}

template <class T>
inline T load_be(const uint8_t* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::little) v = byteswap(v);
  return v;
}

template <class T>
inline void store_be(uint8_t* p, T v) noexcept {
  if constexpr (std::endian::native == std::endian::little) v = byteswap(v);
  std::memcpy(p, &v, sizeof v);
}

inline uint32_t load_be24(const uint8_t* p) noexcept {
  return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
}

inline void store_be24(uint8_t* p, uint32_t v) noexcept {
  p[0] = static_cast<uint8_t>(v >> 16);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v);
}

// Replace the bits of `mask` in byte `b` with `v` (already shifted).
constexpr uint8_t with_bits(uint8_t b, uint8_t mask, uint8_t v) noexcept {
  return static_cast<uint8_t>((b & ~mask) | (v & mask));
}

// Base of every header view.  `Byte` is `uint8_t` for a writable view and
// `const uint8_t` for a read-only one; setters exist only on the former.
template <class Byte>
class ByteView {
 public:
  static_assert(std::is_same_v<std::remove_const_t<Byte>, uint8_t>);
  static constexpr bool kWritable = !std::is_const_v<Byte>;

  constexpr explicit ByteView(Byte* p) noexcept : p_(p) {}
  constexpr Byte* data() const noexcept { return p_; }

 protected:
  Byte* p_;
};

}  // namespace uroce::wire
