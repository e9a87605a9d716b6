#include "lib/wire/icrc.hpp"

#include <immintrin.h>
#include <isa-l/crc.h>

#include <array>
#include <cstring>

#include "lib/wire/bth.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"
#include "lib/wire/udp.hpp"

namespace uroce::wire {
namespace {

// Bitwise CRC-32 for compile-time constants only.
constexpr uint32_t crc32_bitwise(uint32_t crc, const uint8_t* p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

constexpr std::array<uint8_t, 8> kLrhStandIn = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
// The CRC after the 8 bytes of ones that replace the LRH.
constexpr uint32_t kAfterPrefix = crc32_bitwise(0, kLrhStandIn.data(), kLrhStandIn.size());
static_assert((kAfterPrefix ^ 0xFFFFFFFFu) == 0xDEBB20E3u, "CRC state after 8 x 0xFF");

// Largest pseudo-header: IPv4 with 40 bytes of options, UDP, BTH.
constexpr size_t kMaxPseudo = Ipv4::kMaxSize + Udp::kSize + Bth::kSize;

// Copy IP+UDP+BTH (and possibly more) to `dst` and set the variant fields
// to ones.
inline void mask_variant_fields(uint8_t* dst, size_t ip_hdr_len, bool ipv6) noexcept {
  if (ipv6) {
    dst[0] |= 0x0F;  // traffic class, high nibble (byte 0 is version | TC[7:4])
    dst[1] = 0xFF;   // traffic class low nibble + flow label[19:16]
    dst[2] = 0xFF;
    dst[3] = 0xFF;
    dst[7] = 0xFF;   // hop limit
  } else {
    dst[1] = 0xFF;   // TOS
    dst[8] = 0xFF;   // TTL
    dst[10] = 0xFF;  // header checksum
    dst[11] = 0xFF;
  }
  uint8_t* udp = dst + ip_hdr_len;
  udp[6] = 0xFF;  // UDP checksum
  udp[7] = 0xFF;
  udp[Udp::kSize + Bth::kResv8aOffset] = 0xFF;
}

// ISA-L's AVX-512 CRC returns with the upper halves of the vector
// registers dirty (no vzeroupper).  The SSE code that follows (memcpy,
// parsing, everything built for -march=corei7) then pays a transition
// penalty on every instruction: measured as parse+verify 199 ns instead of
// 80 ns per 1 KiB packet.  Clear them after each call when the CPU has AVX.
__attribute__((target("avx"))) void zero_upper() noexcept { _mm256_zeroupper(); }

const bool kHasAvx = __builtin_cpu_supports("avx");

}  // namespace

uint32_t crc32(uint32_t crc, const uint8_t* data, size_t len) noexcept {
  const uint32_t r = crc32_gzip_refl(crc, data, len);
  if (kHasAvx) zero_upper();
  return r;
}


namespace {

// Masking without a masked copy.  CRC is linear: for the same initial state,
//   crc(h XOR d) = crc(h) XOR Lin(d),
// where Lin(d) is the CRC register after `d` from a zero register.  So the
// pseudo-header is folded in place, unmasked, and corrected by Lin(delta),
// delta = (masked XOR original), which is non-zero only in the few variant
// bytes.  Lin(delta) is the XOR of one table lookup per variant byte:
// table[p][b] = Lin(a block of `len` zero bytes with b at position p).
// This avoids writing a masked copy that the CRC engine's wide loads would
// read back through a store-forwarding stall.
struct Layout {
  size_t len;                      // IP + UDP + BTH
  std::array<uint8_t, 8> pos;      // variant byte offsets from the IP header
  std::array<uint8_t, 8> keep;     // bits of each that are not masked
  size_t count;
};

constexpr size_t kV4 = Ipv4::kMinSize, kUdpV4 = kV4, kBthV4 = kV4 + Udp::kSize;
constexpr size_t kV6 = Ipv6::kSize, kUdpV6 = kV6, kBthV6 = kV6 + Udp::kSize;

// IPv4 (no options): TOS, TTL, header checksum; UDP checksum; BTH Resv8a.
constexpr Layout kLayoutV4{kBthV4 + Bth::kSize,
                           {1, 8, 10, 11, kUdpV4 + 6, kUdpV4 + 7, kBthV4 + Bth::kResv8aOffset, 0},
                           {0, 0, 0, 0, 0, 0, 0, 0},
                           7};
// IPv6: traffic class (low nibble of byte 0, high nibble of byte 1), flow
// label, hop limit; UDP checksum; BTH Resv8a.
constexpr Layout kLayoutV6{kBthV6 + Bth::kSize,
                           {0, 1, 2, 3, 7, kUdpV6 + 6, kUdpV6 + 7, kBthV6 + Bth::kResv8aOffset},
                           {0xF0, 0, 0, 0, 0, 0, 0, 0},
                           8};

// Carrying a register past zero bytes is linear in the register, so the
// register after 2^k zero bytes is the XOR of four lookups, one per byte
// of it (ShiftTable, k < kShiftSteps).  Any n < 2^kShiftSteps bytes: one
// such step per set bit of n, at most kShiftSteps short dependent steps.
// (A zero byte at a time was n dependent lookups: 2.2 ns a byte, 150 ns of
// a 64-byte SEND's 104 covered bytes.)
constexpr size_t kShiftSteps = 7;
using ShiftTable = std::array<std::array<uint32_t, 256>, 4>;

struct DeltaTables {
  std::array<std::array<uint32_t, 256>, 8> v4{};
  std::array<std::array<uint32_t, 256>, 8> v6{};
};
using ShiftTables = std::array<ShiftTable, kShiftSteps>;  // [k]: past 2^k zero bytes

// Short packets: one CRC call over everything the ICRC covers, and the
// pseudo-header correction carried past the `tail` bytes that follow the
// BTH (the shift tables).  Longer tails: two calls (pseudo-header, then
// the rest), the correction applied between them.
constexpr size_t kShortTail = (size_t{1} << kShiftSteps) - 1;

// One byte through the CRC register from zero: the classic table (compile
// time only; the data path never runs a bytewise CRC).
constexpr std::array<uint32_t, 256> make_byte_table() {
  std::array<uint32_t, 256> t{};
  for (unsigned b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int k = 0; k < 8; ++k) r = (r >> 1) ^ (0xEDB88320u & (0u - (r & 1u)));
    t[b] = r;
  }
  return t;
}

constexpr std::array<uint32_t, 256> kByteTable = make_byte_table();

constexpr uint32_t past_zero_byte(uint32_t reg) { return kByteTable[reg & 0xFF] ^ (reg >> 8); }

// Lin of `b` at `pos` in a block of `len` bytes: the byte, then the zero
// bytes that follow it (past_zero_byte written out: a call per byte took
// the masking tables past clang's budget of constant-evaluation steps).
constexpr uint32_t lin_byte(uint8_t b, size_t pos, size_t len) {
  uint32_t reg = kByteTable[b];
  for (size_t i = pos + 1; i < len; ++i) reg = kByteTable[reg & 0xFF] ^ (reg >> 8);
  return reg;
}

constexpr void fill(std::array<std::array<uint32_t, 256>, 8>& t, const Layout& l) {
  for (size_t i = 0; i < l.count; ++i) {
    for (unsigned v = 0; v < 256; ++v) t[i][v] = lin_byte(static_cast<uint8_t>(v), l.pos[i], l.len);
  }
}

constexpr uint32_t shift(uint32_t reg, const ShiftTable& t) noexcept {
  return t[0][reg & 0xFF] ^ t[1][(reg >> 8) & 0xFF] ^ t[2][(reg >> 16) & 0xFF] ^ t[3][reg >> 24];
}

constexpr DeltaTables make_delta_tables() {
  DeltaTables d;
  fill(d.v4, kLayoutV4);
  fill(d.v6, kLayoutV6);
  return d;
}

constexpr ShiftTables make_shift_tables() {
  ShiftTables t{};
  for (size_t j = 0; j < 4; ++j) {
    for (uint32_t b = 0; b < 256; ++b) t[0][j][b] = past_zero_byte(b << (8 * j));
  }
  for (size_t k = 1; k < kShiftSteps; ++k) {  // 2^k bytes: twice 2^(k-1)
    for (size_t j = 0; j < 4; ++j) {
      for (uint32_t b = 0; b < 256; ++b) t[k][j][b] = shift(shift(b << (8 * j), t[k - 1]), t[k - 1]);
    }
  }
  return t;
}

// Built by the compiler: nothing to compute on the first packet.  Two
// constants, so that each stays within the compiler's budget of
// constant-evaluation steps (clang's 1,048,576 refused them as one).
constexpr DeltaTables kDeltaTables = make_delta_tables();
constexpr ShiftTables kShiftTables = make_shift_tables();

constexpr const DeltaTables& delta_tables() { return kDeltaTables; }

// Lin(delta) of the pseudo-header's variant bytes.
inline uint32_t pseudo_header_delta(const uint8_t* ip, const Layout& l,
                                    const std::array<std::array<uint32_t, 256>, 8>& t) noexcept {
  uint32_t d = 0;
  for (size_t i = 0; i < l.count; ++i) {
    const uint8_t orig = ip[l.pos[i]];
    const uint8_t masked = static_cast<uint8_t>(orig | static_cast<uint8_t>(~l.keep[i]));
    d ^= t[i][orig ^ masked];
  }
  return d;
}

// The ICRC state after the masked pseudo-header, folded in place.
inline uint32_t pseudo_header_crc(const uint8_t* ip, const Layout& l,
                                  const std::array<std::array<uint32_t, 256>, 8>& t) noexcept {
  return crc32_gzip_refl(kAfterPrefix, ip, l.len) ^ pseudo_header_delta(ip, l, t);
}

// The whole ICRC of a packet whose tail after the BTH is short.
inline uint32_t short_icrc(const uint8_t* ip, size_t covered_len, const Layout& l,
                           const std::array<std::array<uint32_t, 256>, 8>& t,
                           const ShiftTables& shifts) noexcept {
  uint32_t d = pseudo_header_delta(ip, l, t);
  size_t tail = covered_len - l.len;  // <= kShortTail
  for (size_t k = 0; tail != 0; ++k, tail >>= 1) {
    if ((tail & 1) != 0) d = shift(d, shifts[k]);
  }
  return crc32_gzip_refl(kAfterPrefix, ip, covered_len) ^ d;
}

}  // namespace

Icrc Icrc::begin(const uint8_t* ip, size_t ip_hdr_len, bool ipv6) noexcept {
  if (ipv6) return Icrc(pseudo_header_crc(ip, kLayoutV6, delta_tables().v6));
  if (ip_hdr_len == Ipv4::kMinSize) return Icrc(pseudo_header_crc(ip, kLayoutV4, delta_tables().v4));
  // IPv4 with options: a masked copy.
  uint8_t buf[kMaxPseudo];
  const size_t n = ip_hdr_len + Udp::kSize + Bth::kSize;
  std::memcpy(buf, ip, n);
  mask_variant_fields(buf, ip_hdr_len, ipv6);
  return Icrc(crc32(kAfterPrefix, buf, n));
}

uint32_t icrc(const uint8_t* ip, size_t ip_hdr_len, bool ipv6, size_t covered_len) noexcept {
  const size_t pseudo = ip_hdr_len + Udp::kSize + Bth::kSize;
  const bool plain_layout = ipv6 || ip_hdr_len == Ipv4::kMinSize;
  if (!plain_layout || covered_len - pseudo > kShortTail) {
    Icrc c = Icrc::begin(ip, ip_hdr_len, ipv6);
    c.update(ip + pseudo, covered_len - pseudo);
    return c.value();
  }
  const DeltaTables& t = delta_tables();
  const uint32_t crc = ipv6 ? short_icrc(ip, covered_len, kLayoutV6, t.v6, kShiftTables)
                            : short_icrc(ip, covered_len, kLayoutV4, t.v4, kShiftTables);
  if (kHasAvx) zero_upper();
  return crc;
}

}  // namespace uroce::wire
