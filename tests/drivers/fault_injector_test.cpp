// FaultInjector on its own: determinism, independence of the faults,
// holding and releasing, what it does when a pool runs dry.
#include <gtest/gtest.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "drivers/dpdk/eal.hpp"
#include "drivers/fault.hpp"
#include "tests/drivers/frames.hpp"

namespace uroce::drivers {
namespace {

using testing::frame_seq;
using testing::make_frame;

constexpr wire::MacAddr kDst{2, 0, 0, 0, 0, 2};
constexpr wire::MacAddr kSrc{2, 0, 0, 0, 0, 1};
constexpr uint32_t kQueue = 4096;
constexpr int kFrames = 2000;

struct Pool {
  explicit Pool(uint32_t n) {
    auto p = dpdk::create_pktmbuf_pool({.name_prefix = "fi", .mbufs = n, .data_room = 2048 + RTE_PKTMBUF_HEADROOM});
    EXPECT_TRUE(p) << p.error().message;
    mp = p ? *p : nullptr;
  }
  ~Pool() { rte_mempool_free(mp); }
  rte_mempool* mp;
};

std::vector<uint64_t> drain(DelayQueue& q) {
  std::vector<uint64_t> seqs;
  rte_mbuf* pkts[64];
  while (uint16_t n = q.pop_due(DelayQueue::kNever - 1, pkts, 64)) {
    for (uint16_t i = 0; i < n; ++i) seqs.push_back(frame_seq(pkts[i]));
    testing::free_all(pkts, n);
  }
  return seqs;
}

// The sequence numbers that come out, in order, for frames 0..n-1.
std::vector<uint64_t> run(const FaultSpec& spec, uint64_t stream, int n = kFrames,
                          FaultCounters* counters = nullptr) {
  Pool pool(2 * kQueue - 1);
  FaultInjector inj;
  EXPECT_TRUE(inj.configure(spec, stream));
  DelayQueue q;
  q.reset(kQueue);
  std::vector<uint64_t> out;
  for (int i = 0; i < n; ++i) {
    inj.submit(make_frame(pool.mp, kDst, kSrc, i), 0, pool.mp, q);
    for (uint64_t s : drain(q)) out.push_back(s);
  }
  inj.release_all(0, q);
  for (uint64_t s : drain(q)) out.push_back(s);
  if (counters != nullptr) *counters = inj.counters();
  return out;
}

FaultSpec drop_half(uint64_t seed) {
  FaultSpec s;
  s.drop = 0.5;
  s.seed = seed;
  return s;
}

TEST(FaultInjector, SameSeedAndStreamSameFates) {
  const auto a = run(drop_half(1), 1);
  EXPECT_EQ(a, run(drop_half(1), 1));
  EXPECT_NE(a, run(drop_half(1), 2)) << "another stream (link, direction)";
  EXPECT_NE(a, run(drop_half(2), 1)) << "another seed";
}

TEST(FaultInjector, TurningOnOneFaultLeavesTheOthersChoicesAlone) {
  FaultSpec drop_only;
  drop_only.drop = 0.2;
  FaultSpec everything = drop_only;
  everything.dup = 0.3;
  everything.reorder = 0.2;
  everything.reorder_window = 5;
  everything.delay_ns = 1000;
  everything.jitter_ns = 1000;
  FaultCounters c1, c2;
  const auto a = run(drop_only, 9, kFrames, &c1);
  const auto b = run(everything, 9, kFrames, &c2);
  EXPECT_EQ(std::set<uint64_t>(a.begin(), a.end()), std::set<uint64_t>(b.begin(), b.end()))
      << "the same frames survive";
  EXPECT_EQ(c1[FaultCounter::kDropped], c2[FaultCounter::kDropped]);
  EXPECT_GT(c2[FaultCounter::kDuplicated], 0u);
  EXPECT_GT(c2[FaultCounter::kReordered], 0u);

  FaultSpec with_corrupt = drop_only;
  with_corrupt.corrupt = 0.5;
  FaultCounters c3;
  const auto c = run(with_corrupt, 9, kFrames, &c3);
  EXPECT_EQ(c.size(), a.size());
  EXPECT_EQ(c3[FaultCounter::kDropped], c1[FaultCounter::kDropped]);
}

TEST(FaultInjector, CertainFaultsAlwaysHappen) {
  FaultSpec drop_all;
  drop_all.drop = 1;
  EXPECT_TRUE(run(drop_all, 1, 100).empty());
  FaultSpec dup_all;
  dup_all.dup = 1;
  const auto twins = run(dup_all, 1, 100);
  ASSERT_EQ(twins.size(), 200u);
  for (size_t i = 0; i < twins.size(); ++i) EXPECT_EQ(twins[i], i / 2);
}

TEST(FaultInjector, NoFaultsIsTheIdentity) {
  const auto out = run(FaultSpec{}, 1, 100);
  ASSERT_EQ(out.size(), 100u);
  EXPECT_TRUE(std::is_sorted(out.begin(), out.end()));
}

TEST(FaultInjector, ReconfigureWaitsForHeldFrames) {
  Pool pool(63);
  FaultInjector inj;
  FaultSpec hold_all;
  hold_all.reorder = 1;
  ASSERT_TRUE(inj.configure(hold_all, 1));
  DelayQueue q;
  q.reset(8);
  inj.submit(make_frame(pool.mp, kDst, kSrc, 1), 0, pool.mp, q);
  EXPECT_EQ(inj.held(), 1u);
  EXPECT_TRUE(q.empty());
  auto busy = inj.configure(FaultSpec{}, 1);
  ASSERT_FALSE(busy);
  EXPECT_EQ(busy.error().code, EBUSY);
  inj.release_all(0, q);
  EXPECT_EQ(drain(q), std::vector<uint64_t>{1});
  EXPECT_TRUE(inj.configure(FaultSpec{}, 1));
}

TEST(FaultInjector, TeardownFreesHeldFrames) {
  Pool pool(63);
  {
    FaultInjector inj;
    FaultSpec hold_all;
    hold_all.reorder = 1;
    hold_all.reorder_window = 16;
    ASSERT_TRUE(inj.configure(hold_all, 1));
    DelayQueue q;
    q.reset(64);
    for (int i = 0; i < 8; ++i) inj.submit(make_frame(pool.mp, kDst, kSrc, i), 0, pool.mp, q);
    EXPECT_GT(inj.held(), 0u);
  }
  EXPECT_EQ(rte_mempool_avail_count(pool.mp), 63u);
}

TEST(FaultInjector, TwinWithoutMbufIsCountedNotLost) {
  Pool pool(63);
  Pool empty(7);
  std::vector<rte_mbuf*> hog;
  while (rte_mbuf* m = rte_pktmbuf_alloc(empty.mp)) hog.push_back(m);
  FaultInjector inj;
  FaultSpec dup_all;
  dup_all.dup = 1;
  ASSERT_TRUE(inj.configure(dup_all, 1));
  DelayQueue q;
  q.reset(8);
  inj.submit(make_frame(pool.mp, kDst, kSrc, 5), 0, empty.mp, q);
  EXPECT_EQ(drain(q), std::vector<uint64_t>{5});
  EXPECT_EQ(inj.counters()[FaultCounter::kNoMbuf], 1u);
  EXPECT_EQ(inj.counters()[FaultCounter::kDuplicated], 0u);
  EXPECT_EQ(inj.counters().lost(), 0u);
  for (rte_mbuf* m : hog) rte_pktmbuf_free(m);
}

// ---- ECN marks (ce=, ecn_mark_us=) ------------------------------------------------------

// An IPv4 frame (one 802.1Q tag when `vlan`) with TOS `tos` and a valid
// header checksum; or an IPv6 one with that traffic class.
rte_mbuf* ip_frame(rte_mempool* mp, uint8_t tos, bool ipv6, bool vlan = false) {
  rte_mbuf* m = rte_pktmbuf_alloc(mp);
  uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
  std::memset(f, 0, 128);
  size_t off = 12;
  if (vlan) {
    f[off] = 0x81, f[off + 1] = 0x00, f[off + 2] = 0x00, f[off + 3] = 0x0A;
    off += 4;
  }
  f[off] = ipv6 ? 0x86 : 0x08, f[off + 1] = ipv6 ? 0xDD : 0x00;
  uint8_t* ip = f + off + 2;
  if (ipv6) {
    ip[0] = static_cast<uint8_t>(0x60 | tos >> 4);
    ip[1] = static_cast<uint8_t>(tos << 4);
  } else {
    ip[0] = 0x45, ip[1] = tos, ip[3] = 20, ip[8] = 64, ip[9] = 17;
    ip[12] = 10, ip[15] = 1, ip[16] = 10, ip[19] = 2;
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2) sum += static_cast<uint32_t>(ip[i] << 8 | ip[i + 1]);
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    ip[10] = static_cast<uint8_t>(~sum >> 8), ip[11] = static_cast<uint8_t>(~sum);
  }
  m->data_len = 128;
  m->pkt_len = 128;
  return m;
}

uint16_t ipv4_checksum_of(const uint8_t* ip) {  // 0 when the header's checksum is right
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += static_cast<uint32_t>(ip[i] << 8 | ip[i + 1]);
  while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
  return static_cast<uint16_t>(~sum);
}

TEST(FaultInjector, CeMarksEcnCapableFramesOnly) {
  Pool pool(64);
  FaultSpec spec;
  spec.ce = 1;
  FaultInjector inj;
  ASSERT_TRUE(inj.configure(spec, 0));
  DelayQueue q;
  q.reset(64);
  struct Case { uint8_t tos; bool ipv6, vlan; uint8_t ecn_after; };
  const Case cases[] = {
      {0xC2, false, false, 3},  // ECT(0) -> CE, DSCP kept
      {0x01, false, true, 3},   // ECT(1), behind a VLAN tag
      {0x00, false, false, 0},  // Not-ECT: left alone
      {0x03, false, false, 3},  // already CE
      {0x6A, true, false, 3},   // IPv6 ECT(0)
      {0x68, true, false, 0},   // IPv6 Not-ECT
  };
  for (const Case& c : cases) inj.submit(ip_frame(pool.mp, c.tos, c.ipv6, c.vlan), 0, pool.mp, q);
  rte_mbuf* out[8];
  ASSERT_EQ(q.pop_due(DelayQueue::kNever - 1, out, 8), std::size(cases));
  for (size_t i = 0; i < std::size(cases); ++i) {
    SCOPED_TRACE(i);
    const uint8_t* ip = rte_pktmbuf_mtod(out[i], const uint8_t*) + 14 + (cases[i].vlan ? 4 : 0);
    const uint8_t tc = cases[i].ipv6 ? static_cast<uint8_t>((ip[0] & 0x0F) << 4 | ip[1] >> 4) : ip[1];
    EXPECT_EQ(tc & 0x03, cases[i].ecn_after);
    EXPECT_EQ(tc & 0xFC, cases[i].tos & 0xFC);
    if (!cases[i].ipv6) {
      EXPECT_EQ(ipv4_checksum_of(ip), 0) << "the IPv4 checksum follows the mark";
    }
  }
  testing::free_all(out, static_cast<uint16_t>(std::size(cases)));
  EXPECT_EQ(inj.counters()[FaultCounter::kCeMarked], 3u);  // ECT(0), ECT(1), IPv6 ECT(0); not the CE one again
}

// A congested port's step marking: frames that find the link busy for
// longer than ecn_mark_us are marked, the first ones of a burst are not.
TEST(FaultInjector, EcnMarkOnTheSojournTime) {
  Pool pool(64);
  FaultSpec spec;
  spec.rate_bps = 8'000'000;      // 1 byte per µs: a 128-byte frame holds the link 128 µs
  spec.ecn_mark_ns = 200'000;     // marked after waiting more than 200 µs
  FaultInjector inj;
  ASSERT_TRUE(inj.configure(spec, 0));
  DelayQueue q;
  q.reset(64);
  for (int i = 0; i < 5; ++i) inj.submit(ip_frame(pool.mp, 0x02, false), 0, pool.mp, q);
  rte_mbuf* out[8];
  ASSERT_EQ(q.pop_due(DelayQueue::kNever - 1, out, 8), 5u);
  // Waits: 0, 128, 256, 384, 512 µs.
  const uint8_t want[] = {2, 2, 3, 3, 3};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(rte_pktmbuf_mtod(out[i], const uint8_t*)[15] & 0x03, want[i]) << i;
  testing::free_all(out, 5);
  EXPECT_EQ(inj.counters()[FaultCounter::kCeMarked], 3u);
}

}  // namespace
}  // namespace uroce::drivers
