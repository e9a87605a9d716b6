#include "transport/neigh.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace uroce::transport {
namespace {

// Frames are opaque to the table: fake pointers stand in for mbufs.
rte_mbuf* frame(uintptr_t n) { return reinterpret_cast<rte_mbuf*>(n * 64); }

struct Fixture : ::testing::Test {
  TimerWheel wheel{0};
  std::vector<IpAddr> requests;
  std::vector<std::pair<rte_mbuf*, wire::MacAddr>> released;
  std::vector<rte_mbuf*> dropped;
  std::vector<std::pair<IpAddr, bool>> results;
  NeighConfig cfg;
  std::unique_ptr<NeighTable> t;

  void SetUp() override {
    cfg.retry_interval_ns = 1'000'000;
    cfg.max_requests = 3;
    cfg.reachable_ns = 50'000'000;
    cfg.failed_hold_ns = 5'000'000;
    cfg.max_pending = 2;
    make();
  }
  void make() {
    t = std::make_unique<NeighTable>(wheel, cfg, NeighTable::Hooks{
        [this](const IpAddr& ip) { requests.push_back(ip); },
        [this](rte_mbuf* m, const wire::MacAddr& mac) { released.emplace_back(m, mac); },
        [this](rte_mbuf* m) { dropped.push_back(m); },
        [this](const IpAddr& ip, bool ok) { results.emplace_back(ip, ok); },
    });
  }
};

const IpAddr kPeer = IpAddr::v4(0x0A000002);
const wire::MacAddr kMac{2, 0, 0, 0, 0, 2};

TEST_F(Fixture, QueuesUntilReplyThenReleasesInOrder) {
  EXPECT_TRUE(t->send(kPeer, frame(1), 0));
  EXPECT_TRUE(t->send(kPeer, frame(2), 10));
  ASSERT_EQ(requests.size(), 1u);  // one request, not one per frame
  EXPECT_EQ(t->state(kPeer), NeighState::Incomplete);
  t->learn(kPeer, kMac, true, 100);
  ASSERT_EQ(released.size(), 2u);
  EXPECT_EQ(released[0].first, frame(1));
  EXPECT_EQ(released[1].first, frame(2));
  EXPECT_EQ(released[1].second, kMac);
  EXPECT_EQ(t->state(kPeer), NeighState::Reachable);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].second);
  // Known now: straight through.
  EXPECT_TRUE(t->send(kPeer, frame(3), 200));
  EXPECT_EQ(released.size(), 3u);
}

TEST_F(Fixture, PendingQueueKeepsNewest) {
  t->send(kPeer, frame(1), 0);
  t->send(kPeer, frame(2), 0);
  t->send(kPeer, frame(3), 0);  // over max_pending = 2
  ASSERT_EQ(dropped.size(), 1u);
  EXPECT_EQ(dropped[0], frame(1));
  t->learn(kPeer, kMac, true, 1);
  ASSERT_EQ(released.size(), 2u);
  EXPECT_EQ(released[0].first, frame(2));
}

TEST_F(Fixture, RetriesThenFailsAndDropsPending) {
  t->send(kPeer, frame(1), 0);
  for (uint64_t now = 0; now <= 10'000'000; now += 100'000) wheel.advance(now);
  EXPECT_EQ(requests.size(), 3u);
  EXPECT_EQ(dropped.size(), 1u);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_FALSE(results[0].second);
  EXPECT_EQ(t->stats().failed.load(), 1u);
  // Held as failed, then forgotten.
  for (uint64_t now = 10'000'000; now <= 20'000'000; now += 100'000) wheel.advance(now);
  EXPECT_FALSE(t->state(kPeer).has_value());
}

TEST_F(Fixture, FailedNeighbourRefusesFramesUntilRetried) {
  t->resolve(kPeer, 0);
  for (uint64_t now = 0; now <= 3'500'000; now += 100'000) wheel.advance(now);
  ASSERT_EQ(t->state(kPeer), NeighState::Failed);
  EXPECT_FALSE(t->send(kPeer, frame(9), 3'600'000));
  EXPECT_EQ(dropped.back(), frame(9));
  t->resolve(kPeer, 3'700'000);  // explicit retry probes again
  EXPECT_EQ(t->state(kPeer), NeighState::Incomplete);
  EXPECT_EQ(requests.size(), 4u);
}

TEST_F(Fixture, GoesStaleAndReprobesOnUse) {
  t->learn(kPeer, kMac, true, 0);
  wheel.advance(60'000'000);
  EXPECT_EQ(t->state(kPeer), NeighState::Stale);
  const size_t before = requests.size();
  ASSERT_NE(t->lookup(kPeer, 60'000'000), nullptr);  // still usable
  EXPECT_EQ(requests.size(), before + 1);
  t->learn(kPeer, kMac, true, 60'100'000);
  EXPECT_EQ(t->state(kPeer), NeighState::Reachable);
}

TEST_F(Fixture, UnsolicitedDoesNotCreateButUpdates) {
  t->learn(kPeer, kMac, false, 0);
  EXPECT_FALSE(t->state(kPeer).has_value());
  t->learn(kPeer, kMac, true, 0);
  const wire::MacAddr moved{2, 0, 0, 0, 0, 9};
  t->learn(kPeer, moved, false, 1);
  EXPECT_EQ(*t->lookup(kPeer, 2), moved);
}

TEST_F(Fixture, StaticEntryIsPermanent) {
  t->add_static(kPeer, kMac);
  wheel.advance(1'000'000'000);
  EXPECT_EQ(t->state(kPeer), NeighState::Reachable);
  t->learn(kPeer, wire::MacAddr{9, 9, 9, 9, 9, 9}, true, 5);
  EXPECT_EQ(*t->lookup(kPeer, 6), kMac);
}

// What a per-path copy of a MAC (Engine::send_to's NextHop) relies on:
// every change lookup() could answer differently for moves the generation.
TEST_F(Fixture, GenerationMovesWithEveryChangeALookupWouldSee) {
  uint64_t g = t->generation();
  EXPECT_NE(g, 0u);
  t->send(kPeer, frame(1), 0);  // Incomplete: nothing to copy yet
  t->learn(kPeer, kMac, true, 1);
  EXPECT_NE(t->generation(), g) << "resolved";
  g = t->generation();
  t->learn(kPeer, kMac, true, 2);
  EXPECT_EQ(t->generation(), g) << "the same answer again changes nothing";
  const wire::MacAddr moved{2, 0, 0, 0, 0, 9};
  t->learn(kPeer, moved, false, 3);
  EXPECT_NE(t->generation(), g) << "moved MAC";
  g = t->generation();
  wheel.advance(60'000'000);
  ASSERT_EQ(t->state(kPeer), NeighState::Stale);
  EXPECT_NE(t->generation(), g) << "stale: the next use must re-probe";
  g = t->generation();
  ASSERT_NE(t->lookup(kPeer, 60'000'000), nullptr);
  EXPECT_EQ(t->generation(), g) << "probing a stale entry keeps its answer";
  for (uint64_t now = 60'000'000; now <= 64'000'000; now += 100'000) wheel.advance(now);
  ASSERT_EQ(t->state(kPeer), NeighState::Failed);
  EXPECT_NE(t->generation(), g) << "failed";
  g = t->generation();
  for (uint64_t now = 64'000'000; now <= 80'000'000; now += 100'000) wheel.advance(now);
  ASSERT_FALSE(t->state(kPeer).has_value());
  EXPECT_NE(t->generation(), g) << "forgotten";
  g = t->generation();
  t->add_static(kPeer, kMac);
  EXPECT_NE(t->generation(), g) << "static";
}

TEST(IpAddr, MappedV4) {
  const IpAddr a = IpAddr::v4(0x0A010203);
  EXPECT_TRUE(a.is_v4());
  EXPECT_EQ(a.as_v4(), 0x0A010203u);
  wire::Ipv6Addr v6{0xfe, 0x80};
  EXPECT_FALSE(IpAddr::v6(v6).is_v4());
}

}  // namespace
}  // namespace uroce::transport
