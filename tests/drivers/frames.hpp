// Test frames: an Ethernet header, then a 64-bit sequence number, then
// bytes derived from it, so a receiver can tell which frame it got and
// whether its bytes changed on the way.
#pragma once

#include <gtest/gtest.h>
#include <rte_mbuf.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "lib/wire/bytes.hpp"
#include "lib/wire/eth.hpp"

namespace uroce::drivers::testing {

inline constexpr uint16_t kTestEtherType = 0x88B5;  // IEEE local experimental
inline constexpr size_t kSeqOffset = wire::Eth::kSize;
inline constexpr size_t kHeaderBytes = kSeqOffset + sizeof(uint64_t);
inline constexpr uint16_t kSmallFrame = 64;

inline uint8_t fill_byte(uint64_t seq, size_t i) { return static_cast<uint8_t>(seq * 31 + i * 7); }

// A frame from `pool`, or nullptr when the pool is empty.
inline rte_mbuf* make_frame(rte_mempool* pool, const wire::MacAddr& dst, const wire::MacAddr& src, uint64_t seq,
                            uint16_t len = kSmallFrame) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  if (m == nullptr) return nullptr;
  auto* p = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, len));
  if (p == nullptr) {
    rte_pktmbuf_free(m);
    return nullptr;
  }
  wire::Eth eth(p);
  eth.set_dst(dst);
  eth.set_src(src);
  eth.set_ethertype(kTestEtherType);
  wire::store_be<uint64_t>(p + kSeqOffset, seq);
  for (size_t i = kHeaderBytes; i < len; ++i) p[i] = fill_byte(seq, i);
  return m;
}

inline uint64_t frame_seq(const rte_mbuf* m) {
  return wire::load_be<uint64_t>(rte_pktmbuf_mtod(m, const uint8_t*) + kSeqOffset);
}

// Bits that differ from what make_frame wrote for `seq` (payload only,
// so a flipped sequence number does not confuse the count).
inline int payload_bit_errors(const rte_mbuf* m, uint64_t seq) {
  const auto* p = rte_pktmbuf_mtod(m, const uint8_t*);
  int bits = 0;
  for (size_t i = kHeaderBytes; i < m->data_len; ++i) bits += std::popcount(static_cast<uint8_t>(p[i] ^ fill_byte(seq, i)));
  return bits;
}

// Bits that differ between two single-segment frames of the same length.
inline int bit_distance(const rte_mbuf* a, const std::vector<uint8_t>& b) {
  const auto* p = rte_pktmbuf_mtod(a, const uint8_t*);
  int bits = 0;
  for (size_t i = 0; i < a->data_len && i < b.size(); ++i) bits += std::popcount(static_cast<uint8_t>(p[i] ^ b[i]));
  return bits;
}

inline std::vector<uint8_t> bytes_of(const rte_mbuf* m) {
  const auto* p = rte_pktmbuf_mtod(m, const uint8_t*);
  return {p, p + m->data_len};
}

// The bytes make_frame writes, without an mbuf.
inline std::vector<uint8_t> frame_bytes(const wire::MacAddr& dst, const wire::MacAddr& src, uint64_t seq,
                                        uint16_t len = kSmallFrame) {
  std::vector<uint8_t> b(len);
  wire::Eth eth(b.data());
  eth.set_dst(dst);
  eth.set_src(src);
  eth.set_ethertype(kTestEtherType);
  wire::store_be<uint64_t>(b.data() + kSeqOffset, seq);
  for (size_t i = kHeaderBytes; i < len; ++i) b[i] = fill_byte(seq, i);
  return b;
}

inline void free_all(rte_mbuf** pkts, uint16_t n) {
  for (uint16_t i = 0; i < n; ++i) rte_pktmbuf_free(pkts[i]);
}

}  // namespace uroce::drivers::testing
