// Helpers shared by the unit and vectors suites: hex, a seeded RNG whose
// seed is printed, an independent reference ICRC, and a generator of
// random packet descriptions for the builder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "lib/wire/build.hpp"
#include "lib/wire/pkt.hpp"

namespace uroce::test {

using Bytes = std::vector<uint8_t>;

// "08c0 eb.." -> bytes; whitespace is ignored, anything else must be hex.
Bytes from_hex(std::string_view hex);
std::string to_hex(std::span<const uint8_t> b);

// ---- seeded randomness ------------------------------------------------
// The seed is UROCE_SEED from the environment (a number, or "random" for
// a fresh one), else `fallback`.  Tests put it in a SCOPED_TRACE so that
// every failure prints it.
uint64_t test_seed(uint64_t fallback = 0x5eedf00dULL);

class Rng {
 public:
  explicit Rng(uint64_t seed) : g_(seed) {}
  uint64_t u64() { return g_(); }
  uint32_t u32() { return static_cast<uint32_t>(g_()); }
  uint16_t u16() { return static_cast<uint16_t>(g_()); }
  uint8_t u8() { return static_cast<uint8_t>(g_()); }
  bool coin() { return (g_() & 1) != 0; }
  // Uniform in [lo, hi].
  uint64_t range(uint64_t lo, uint64_t hi) { return std::uniform_int_distribution<uint64_t>(lo, hi)(g_); }
  Bytes bytes(size_t n);
  std::mt19937_64& engine() { return g_; }

 private:
  std::mt19937_64 g_;
};

// ---- an ICRC that shares no code with lib/wire ------------------------
// Table-driven CRC-32 (reflected 0xEDB88320, zlib's convention).
uint32_t ref_crc32(uint32_t crc, std::span<const uint8_t> b);

// The masked ICRC input exactly as research/wire-vectors.md section 5
// writes it: 8 x 0xFF, then IP..BTH with the variant fields set to ones,
// then everything up to (not including) the ICRC.
//   l3_off: the IP header; ip_hdr_len: 20..60 or 40; icrc_off: the ICRC.
Bytes ref_icrc_input(std::span<const uint8_t> frame, size_t l3_off, size_t ip_hdr_len, bool ipv6,
                     size_t icrc_off);
uint32_t ref_icrc(std::span<const uint8_t> frame, size_t l3_off, size_t ip_hdr_len, bool ipv6,
                  size_t icrc_off);

// Whether bit `bit` (0 = MSB) of byte `off` of the IP..BTH region is one of
// the fields the ICRC masks.  `off` counts from the IP header.
bool icrc_masked_bit(size_t off, unsigned bit, size_t ip_hdr_len, bool ipv6);

// ---- random packets -----------------------------------------------------
// A PktDesc whose spans point into buffers this object owns.
struct OwnedDesc {
  wire::PktDesc d;
  Bytes payload;
  Bytes pad_bytes;
  Bytes trailer;
  Bytes ip_options;

  OwnedDesc() = default;
  OwnedDesc(const OwnedDesc& o) { *this = o; }
  OwnedDesc& operator=(const OwnedDesc& o);
  void rebind();  // re-point d's spans at the owned buffers
};

struct RandomSpec {
  uint8_t opcode = 0;
  wire::L3 l3 = wire::L3::IPv4;
  uint8_t vlans = 0;
  size_t payload_len = 0;
  bool trailer = false;      // random Ethernet trailer of 1..8 bytes
  bool ip_options = false;   // IPv4 options (4..40 bytes)
  bool random_pad_bytes = false;
};

// Every header field random (within what the wire allows: tver 0, no IPv4
// fragment, UDP destination 4791), the pad computed by the builder.
OwnedDesc random_desc(Rng& rng, const RandomSpec& spec);

// build() into a fresh vector sized by frame_len(); empty when build fails.
Bytes build_frame(const wire::PktDesc& d);

// What f() returns, computed inside `engine`'s loop (Engine::run_sync):
// how a test calls a function that runs only there (one marked [engine],
// which asserts it).
template <class E, class F>
auto in_loop(E& engine, F&& f) -> decltype(f()) {
  if constexpr (std::is_void_v<decltype(f())>) {
    engine.run_sync([&] { f(); });
  } else {
    decltype(f()) r{};
    engine.run_sync([&] { r = f(); });
    return r;
  }
}

}  // namespace uroce::test
