// FaultPort around another Port: each direction, delays flushed by the
// poll loop, back-pressure kept.
#include <gtest/gtest.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <vector>

#include "drivers/dpdk/eal.hpp"
#include "drivers/fault.hpp"
#include "drivers/sim/sim_wire.hpp"
#include "tests/drivers/frames.hpp"

namespace uroce::drivers {
namespace {

using testing::frame_seq;
using testing::free_all;
using testing::make_frame;

constexpr uint64_t kUs = 1000;
constexpr uint16_t kBurst = 32;
constexpr int kManyFrames = 10'000;
constexpr uint16_t kDataRoom = 2048 + RTE_PKTMBUF_HEADROOM;

// A port that keeps what it is sent and takes at most `accept` per burst.
class FakePort final : public Port {
 public:
  FakePort() {
    auto p = dpdk::create_pktmbuf_pool({.name_prefix = "fake", .mbufs = 255, .data_room = kDataRoom});
    EXPECT_TRUE(p) << p.error().message;
    pool_ = *p;
  }
  ~FakePort() override {
    for (rte_mbuf* m : sent) rte_pktmbuf_free(m);
    for (rte_mbuf* m : inbox) rte_pktmbuf_free(m);
    rte_mempool_free(pool_);
  }
  uint16_t rx_burst(rte_mbuf** pkts, uint16_t n) override {
    uint16_t k = 0;
    for (; k < n && !inbox.empty(); ++k) {
      pkts[k] = inbox.front();
      inbox.pop_front();
    }
    return k;
  }
  uint16_t tx_burst(rte_mbuf** pkts, uint16_t n) override {
    const uint16_t k = std::min(n, accept);
    sent.insert(sent.end(), pkts, pkts + k);
    return k;
  }
  wire::MacAddr mac() const override { return {2, 0, 0, 0, 0, 0x0f}; }
  uint16_t mtu() const override { return 1500; }
  bool link_up() const override { return true; }
  PortStats stats() const override { return PortStats{.tx_frames = sent.size()}; }
  rte_mempool* pool() const override { return pool_; }
  std::string name() const override { return "fake0"; }

  std::vector<uint64_t> sent_seqs() const {
    std::vector<uint64_t> s;
    for (rte_mbuf* m : sent) s.push_back(frame_seq(m));
    return s;
  }

  std::vector<rte_mbuf*> sent;
  std::deque<rte_mbuf*> inbox;
  uint16_t accept = UINT16_MAX;

 private:
  rte_mempool* pool_ = nullptr;
};

std::vector<rte_mbuf*> frames(Port& p, int n, uint64_t first = 0) {
  std::vector<rte_mbuf*> v;
  for (int i = 0; i < n; ++i) v.push_back(make_frame(p.pool(), wire::kBroadcastMac, p.mac(), first + i));
  return v;
}

TEST(FaultPort, WithoutFaultsItIsTransparentBackPressureIncluded) {
  FakePort inner;
  inner.accept = 2;
  auto fp = FaultPort::create(inner, FaultSpec{});
  ASSERT_TRUE(fp) << fp.error().message;
  auto v = frames(inner, 5);
  EXPECT_EQ((*fp)->tx_burst(v.data(), 5), 2);
  free_all(v.data() + 2, 3);
  inner.inbox.push_back(make_frame(inner.pool(), inner.mac(), inner.mac(), 9));
  rte_mbuf* got[4];
  ASSERT_EQ((*fp)->rx_burst(got, 4), 1);
  EXPECT_EQ(frame_seq(got[0]), 9u);
  rte_pktmbuf_free(got[0]);
  EXPECT_EQ((*fp)->name(), "fake0+faults");
  EXPECT_EQ((*fp)->mac(), inner.mac());
}

TEST(FaultPort, DelayedTxGoesOutFromThePollLoopInOrder) {
  FakePort inner;
  inner.accept = 2;
  WireClock clock(WireClock::Mode::kManual);
  FaultSpec s;
  s.delay_ns = 20 * kUs;
  s.dir = FaultDir::kTx;
  auto fp = FaultPort::create(inner, s, {.clock = &clock});
  ASSERT_TRUE(fp) << fp.error().message;
  auto v = frames(inner, 10);
  EXPECT_EQ((*fp)->tx_burst(v.data(), 10), 10) << "with faults, tx takes everything";
  EXPECT_TRUE(inner.sent.empty());
  EXPECT_EQ((*fp)->queued(FaultDir::kTx), 10u);
  clock.advance(20 * kUs);
  rte_mbuf* none[1];
  for (size_t polls = 1; polls <= 5; ++polls) {
    EXPECT_EQ((*fp)->rx_burst(none, 1), 0);
    EXPECT_EQ(inner.sent.size(), 2 * polls) << "the inner port takes two per burst";
  }
  EXPECT_EQ(inner.sent_seqs(), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ((*fp)->queued(FaultDir::kTx), 0u);
  EXPECT_EQ((*fp)->counters(FaultDir::kTx)[FaultCounter::kDelayed], 10u);
  EXPECT_EQ((*fp)->counters(FaultDir::kRx)[FaultCounter::kDelayed], 0u);
}

TEST(FaultPort, TxDropAgainstAnotherPort) {
  sim::SimWire wire({.clock = WireClock::Mode::kManual});
  auto a = wire.add_port({.pool_mbufs = 1023, .data_room = kDataRoom});
  auto b = wire.add_port({.pool_mbufs = 1023, .data_room = kDataRoom});
  ASSERT_TRUE(a && b);
  auto spec = parse_fault_spec("drop=0.3,dir=tx,seed=5");
  ASSERT_TRUE(spec);
  auto fp = FaultPort::create(**a, *spec);
  ASSERT_TRUE(fp);
  uint64_t received = 0;
  rte_mbuf* pkts[kBurst];
  for (int i = 0; i < kManyFrames; ++i) {
    rte_mbuf* m = make_frame((*fp)->pool(), (*b)->mac(), (*fp)->mac(), i);
    ASSERT_EQ((*fp)->tx_burst(&m, 1), 1);
    const uint16_t n = (*b)->rx_burst(pkts, kBurst);
    received += n;
    free_all(pkts, n);
  }
  const uint64_t dropped = (*fp)->counters(FaultDir::kTx)[FaultCounter::kDropped];
  EXPECT_NEAR(static_cast<double>(dropped), 0.3 * kManyFrames, 5 * std::sqrt(kManyFrames * 0.3 * 0.7));
  EXPECT_EQ(received, kManyFrames - dropped);
  EXPECT_EQ((*fp)->stats().tx_dropped, dropped);
  EXPECT_EQ((*fp)->stats().tx_frames, kManyFrames - dropped);
  EXPECT_EQ((*fp)->counters(FaultDir::kRx).lost(), 0u);
}

TEST(FaultPort, RxReorderAndDropStayWithinTheirBounds) {
  sim::SimWire wire({.clock = WireClock::Mode::kManual});
  auto a = wire.add_port({.pool_mbufs = 1023, .data_room = kDataRoom});
  auto b = wire.add_port({.pool_mbufs = 1023, .data_room = kDataRoom});
  ASSERT_TRUE(a && b);
  auto spec = parse_fault_spec("drop=0.1,reorder=0.1,reorder_window=4,dir=rx,seed=8");
  ASSERT_TRUE(spec);
  auto fp = FaultPort::create(**b, *spec, {.clock = &wire.clock()});
  ASSERT_TRUE(fp);
  std::vector<uint64_t> got;
  rte_mbuf* pkts[kBurst];
  auto poll = [&] {
    while (uint16_t n = (*fp)->rx_burst(pkts, kBurst)) {
      for (uint16_t i = 0; i < n; ++i) got.push_back(frame_seq(pkts[i]));
      free_all(pkts, n);
    }
  };
  for (int i = 0; i < kManyFrames; ++i) {
    rte_mbuf* m = make_frame((*a)->pool(), (*b)->mac(), (*a)->mac(), i);
    ASSERT_EQ((*a)->tx_burst(&m, 1), 1);
    poll();
  }
  wire.clock().advance(kDefaultReorderHoldNs);
  poll();
  const auto& c = (*fp)->counters(FaultDir::kRx);
  EXPECT_EQ(got.size(), kManyFrames - c[FaultCounter::kDropped]);
  EXPECT_GT(c[FaultCounter::kReordered], 0u);
  EXPECT_EQ((*fp)->stats().rx_dropped, c[FaultCounter::kDropped]);
  for (size_t i = 0; i < got.size(); ++i) {
    const auto newer = std::count_if(got.begin(), got.begin() + static_cast<ptrdiff_t>(i),
                                     [&](uint64_t s) { return s > got[i]; });
    ASSERT_LE(newer, 4) << "frame " << got[i];
  }
  EXPECT_EQ((*fp)->counters(FaultDir::kTx).lost(), 0u);
}

TEST(FaultPort, CreateRejectsBadConfiguration) {
  FakePort inner;
  FaultSpec bad;
  bad.corrupt_bits = 0;
  auto r = FaultPort::create(inner, bad);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "corrupt_bits: 0 is outside [1, 64]");
  auto q = FaultPort::create(inner, FaultSpec{}, {.queue_frames = 0});
  ASSERT_FALSE(q);
  EXPECT_EQ(q.error().code, EINVAL);
}

TEST(FaultPort, TeardownFreesWhatItHolds) {
  FakePort inner;
  {
    FaultSpec s;
    s.delay_ns = kUs;
    s.reorder = 1;
    s.dir = FaultDir::kTx;
    WireClock clock(WireClock::Mode::kManual);
    auto fp = FaultPort::create(inner, s, {.clock = &clock});
    ASSERT_TRUE(fp);
    auto v = frames(inner, 20);
    ASSERT_EQ((*fp)->tx_burst(v.data(), 20), 20);
    EXPECT_EQ((*fp)->queued(FaultDir::kTx), 20u);
  }
  EXPECT_TRUE(inner.sent.empty());
  EXPECT_EQ(rte_mempool_avail_count(inner.pool()), 255u);
}

}  // namespace
}  // namespace uroce::drivers
