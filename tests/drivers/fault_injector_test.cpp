// FaultInjector on its own: determinism, independence of the faults,
// holding and releasing, what it does when a pool runs dry.
#include <gtest/gtest.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
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

}  // namespace
}  // namespace uroce::drivers
