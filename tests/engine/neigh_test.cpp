#include "transport/neigh.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <optional>
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
  // Off-link destinations and their gateway (next_hop); none: all on the link.
  std::function<std::optional<IpAddr>(const IpAddr&)> route;
  void make() {
    t = std::make_unique<NeighTable>(wheel, cfg, NeighTable::Hooks{
        [this](const IpAddr& ip) { requests.push_back(ip); },
        [this](rte_mbuf* m, const wire::MacAddr& mac) { released.emplace_back(m, mac); },
        [this](rte_mbuf* m) { dropped.push_back(m); },
        [this](const IpAddr& ip, bool ok) { results.emplace_back(ip, ok); },
        route,
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

// A destination behind a router: the request asks for the gateway, and
// its answer resolves every destination routed through it (each with its
// own queued frames and its own `resolved`), while an on-link neighbour is
// asked for itself.  The gateway's own entry is not needed for that.
TEST_F(Fixture, OffLinkDestinationsResolveThroughTheirGateway) {
  const IpAddr gw = IpAddr::v4(0x0A000001);
  const IpAddr far1 = IpAddr::v4(0x0A010002);
  const IpAddr far2 = IpAddr::v4(0x0A010003);
  const wire::MacAddr gw_mac{2, 0, 0, 0, 0, 1};
  route = [gw](const IpAddr& ip) -> std::optional<IpAddr> {
    if (ip.as_v4() >> 16 == 0x0A01) return gw;
    return std::nullopt;
  };
  make();
  EXPECT_TRUE(t->send(far1, frame(1), 0));
  t->resolve(far2, 0);
  EXPECT_TRUE(t->send(kPeer, frame(2), 0));
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0], gw);
  EXPECT_EQ(requests[1], gw);
  EXPECT_EQ(requests[2], kPeer);
  t->learn(gw, gw_mac, true, 10);
  EXPECT_EQ(t->state(far1), NeighState::Reachable);
  EXPECT_EQ(t->state(far2), NeighState::Reachable);
  EXPECT_EQ(t->state(kPeer), NeighState::Incomplete);
  EXPECT_FALSE(t->state(gw).has_value()) << "the gateway needs no entry of its own";
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].first, frame(1));
  EXPECT_EQ(released[0].second, gw_mac);
  ASSERT_NE(t->lookup(far2, 20), nullptr);
  EXPECT_EQ(*t->lookup(far2, 20), gw_mac);
  EXPECT_EQ(results.size(), 2u);  // far1 and far2
  // The gateway moves (a failover): overheard, every routed entry follows.
  const wire::MacAddr gw_mac2{2, 0, 0, 0, 0, 9};
  t->learn(gw, gw_mac2, false, 30);
  EXPECT_EQ(*t->lookup(far1, 40), gw_mac2);
  // A stale routed entry re-probes its gateway, not itself.
  const uint64_t stale_at = cfg.reachable_ns + 200'000;
  for (uint64_t now = 0; now <= stale_at; now += 100'000) wheel.advance(now);
  EXPECT_EQ(t->state(far1), NeighState::Stale);
  requests.clear();
  ASSERT_NE(t->lookup(far1, stale_at), nullptr);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0], gw);
  // Unanswered: the routed entry fails (its `resolved` false), is held,
  // then goes; the gateway's next answer still reaches the one left.
  results.clear();
  for (uint64_t now = stale_at; now <= stale_at + 8 * cfg.retry_interval_ns; now += 100'000)
    wheel.advance(now);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0], std::make_pair(far1, false));
  EXPECT_FALSE(t->state(far1).has_value());
  t->learn(gw, gw_mac, true, stale_at + 9 * cfg.retry_interval_ns);
  EXPECT_EQ(t->state(far2), NeighState::Reachable);
  EXPECT_FALSE(t->state(far1).has_value()) << "a gone entry is not brought back by its gateway";
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
