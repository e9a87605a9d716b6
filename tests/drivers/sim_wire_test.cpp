// The sim wire: switching, every fault at its configured rate,
// determinism, link state, the bandwidth cap, two threads.
#include <gtest/gtest.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <map>
#include <numeric>
#include <thread>
#include <vector>

#include "drivers/sim/sim_wire.hpp"
#include "tests/drivers/frames.hpp"

namespace uroce::drivers::sim {
namespace {

using testing::bytes_of;
using testing::frame_seq;
using testing::free_all;
using testing::make_frame;

constexpr uint64_t kUs = 1000;
constexpr uint16_t kPoolMbufs = 2047;
constexpr uint16_t kDataRoom = 2048 + RTE_PKTMBUF_HEADROOM;
constexpr uint16_t kBurst = 32;
constexpr int kManyFrames = 10'000;

// A wire of `n` ports with small pools.
struct Bench {
  explicit Bench(size_t n, WireClock::Mode mode = WireClock::Mode::kManual,
                 uint32_t queue = kDefaultLinkQueueFrames)
      : wire({.clock = mode, .max_ports = kDefaultMaxPorts, .link_queue_frames = queue}) {
    for (size_t i = 0; i < n; ++i) {
      auto p = wire.add_port({.pool_mbufs = kPoolMbufs, .data_room = kDataRoom});
      EXPECT_TRUE(p) << p.error().message;
      ports.push_back(*p);
    }
  }
  SimPort& operator[](size_t i) { return *ports[i]; }

  // Sends one frame from `from` to `dst`; false if the pool was empty.
  bool send(size_t from, const wire::MacAddr& dst, uint64_t seq, uint16_t len = testing::kSmallFrame) {
    rte_mbuf* m = make_frame(ports[from]->pool(), dst, ports[from]->mac(), seq, len);
    if (m == nullptr) return false;
    EXPECT_EQ(ports[from]->tx_burst(&m, 1), 1);
    return true;
  }
  bool send(size_t from, size_t to, uint64_t seq, uint16_t len = testing::kSmallFrame) {
    return send(from, ports[to]->mac(), seq, len);
  }

  // Everything port `to` can receive now: the sequence numbers, frames freed.
  std::vector<uint64_t> receive(size_t to) {
    std::vector<uint64_t> seqs;
    rte_mbuf* pkts[kBurst];
    while (uint16_t n = ports[to]->rx_burst(pkts, kBurst)) {
      for (uint16_t i = 0; i < n; ++i) seqs.push_back(frame_seq(pkts[i]));
      free_all(pkts, n);
    }
    return seqs;
  }

  SimWire wire;
  std::vector<SimPort*> ports;
};

FaultSpec spec(void (*edit)(FaultSpec&)) {
  FaultSpec s;
  edit(s);
  return s;
}

// ---- switching -------------------------------------------------------------------------

TEST(SimWire, TwoEndpointsExchangeFrames) {
  Bench b(2);
  rte_mbuf* m = make_frame(b[0].pool(), b[1].mac(), b[0].mac(), 7, 200);
  ASSERT_NE(m, nullptr);
  const auto sent = bytes_of(m);
  ASSERT_EQ(b[0].tx_burst(&m, 1), 1);
  rte_mbuf* got[4];
  ASSERT_EQ(b[1].rx_burst(got, 4), 1);
  EXPECT_EQ(bytes_of(got[0]), sent);
  rte_pktmbuf_free(got[0]);
  EXPECT_EQ(b[0].rx_burst(got, 4), 0);  // nothing comes back

  for (uint64_t s = 0; s < 100; ++s) ASSERT_TRUE(b.send(1, 0, s));
  std::vector<uint64_t> expected(100);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(b.receive(0), expected);

  EXPECT_EQ(b[0].stats().tx_frames, 1u);
  EXPECT_EQ(b[0].stats().tx_bytes, 200u);
  EXPECT_EQ(b[0].stats().rx_frames, 100u);
  EXPECT_EQ(b[1].stats().rx_frames, 1u);
  EXPECT_EQ(b[1].stats().tx_frames, 100u);
  EXPECT_EQ(b.wire.in_flight(), 0u);
  EXPECT_TRUE(b[0].link_up());
  EXPECT_EQ(b[0].name(), "sim0");
  EXPECT_EQ(b[1].mac(), (wire::MacAddr{0x02, 0, 0, 0, 0, 2}));
}

TEST(SimWire, ThreeEndpointsSwitchLikeEthernet) {
  Bench b(3);
  // Unicast reaches only its destination.
  ASSERT_TRUE(b.send(0, 2, 1));
  EXPECT_EQ(b.receive(1), std::vector<uint64_t>{});
  EXPECT_EQ(b.receive(2), std::vector<uint64_t>{1});
  // Broadcast, multicast and unknown unicast reach every other port, with equal bytes.
  const wire::MacAddr multicast{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01};
  const wire::MacAddr unknown{0x02, 0xaa, 0, 0, 0, 9};
  uint64_t seq = 10;
  for (const auto& dst : {wire::kBroadcastMac, multicast, unknown}) {
    rte_mbuf* m = make_frame(b[1].pool(), dst, b[1].mac(), seq, 300);
    ASSERT_NE(m, nullptr);
    const auto sent = bytes_of(m);
    ASSERT_EQ(b[1].tx_burst(&m, 1), 1);
    for (size_t to : {0u, 2u}) {
      rte_mbuf* got[2];
      ASSERT_EQ(b[to].rx_burst(got, 2), 1) << "port " << to;
      EXPECT_EQ(bytes_of(got[0]), sent);
      rte_pktmbuf_free(got[0]);
    }
    EXPECT_EQ(b.receive(1), std::vector<uint64_t>{}) << "no frame goes back out of its own port";
    ++seq;
  }
  EXPECT_EQ(b[1].stats().tx_frames, 3u);
  EXPECT_EQ(b[0].stats().rx_frames, 3u);
  EXPECT_EQ(b[2].stats().rx_frames, 4u);
}

TEST(SimWire, RefusedFramesAreCountedByReason) {
  Bench alone(1);
  ASSERT_TRUE(alone.send(0, wire::kBroadcastMac, 1));
  EXPECT_EQ(alone[0].drops(SimDrop::kTxNoReceiver), 1u);

  Bench b(2);
  rte_mbuf* runt = rte_pktmbuf_alloc(b[0].pool());
  ASSERT_NE(runt, nullptr);
  ASSERT_NE(rte_pktmbuf_append(runt, 10), nullptr);
  ASSERT_EQ(b[0].tx_burst(&runt, 1), 1);
  EXPECT_EQ(b[0].drops(SimDrop::kTxRunt), 1u);

  auto small_mtu = SimWire({.clock = WireClock::Mode::kManual});
  auto p0 = small_mtu.add_port({.mtu = 1500, .pool_mbufs = 63, .data_room = kDataRoom});
  auto p1 = small_mtu.add_port({.mtu = 1500, .pool_mbufs = 63, .data_room = kDataRoom});
  ASSERT_TRUE(p0 && p1);
  rte_mbuf* fits = make_frame((*p0)->pool(), (*p1)->mac(), (*p0)->mac(), 1, 1500 + kEthOverheadBytes);
  ASSERT_NE(fits, nullptr);
  rte_mbuf* big = make_frame((*p0)->pool(), (*p1)->mac(), (*p0)->mac(), 2, 1500 + kEthOverheadBytes + 1);
  ASSERT_NE(big, nullptr);
  rte_mbuf* both[] = {fits, big};
  ASSERT_EQ((*p0)->tx_burst(both, 2), 2);
  EXPECT_EQ((*p0)->drops(SimDrop::kTxOversize), 1u);
  EXPECT_EQ((*p0)->stats().tx_dropped, 1u);
  EXPECT_EQ((*p0)->stats().tx_frames, 1u);
  rte_mbuf* got[2];
  ASSERT_EQ((*p1)->rx_burst(got, 2), 1);
  rte_pktmbuf_free(got[0]);
}

TEST(SimWire, AddPortChecks) {
  SimWire w({.clock = WireClock::Mode::kManual, .max_ports = 2});
  ASSERT_TRUE(w.add_port({.mac = wire::MacAddr{2, 0, 0, 0, 0, 1}, .pool_mbufs = 63, .data_room = kDataRoom}));
  auto dup = w.add_port({.mac = wire::MacAddr{2, 0, 0, 0, 0, 1}, .pool_mbufs = 63});
  ASSERT_FALSE(dup);
  EXPECT_EQ(dup.error().code, EEXIST);
  auto group = w.add_port({.mac = wire::MacAddr{1, 0, 0, 0, 0, 1}, .pool_mbufs = 63});
  ASSERT_FALSE(group);
  EXPECT_EQ(group.error().code, EINVAL);
  ASSERT_TRUE(w.add_port({.pool_mbufs = 63, .data_room = kDataRoom}));
  auto full = w.add_port({.pool_mbufs = 63});
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().code, ENOSPC);
}

TEST(SimWire, NoPortsAfterTheFirstBurst) {
  Bench b(2);
  rte_mbuf* none[1];
  EXPECT_EQ(b[0].rx_burst(none, 1), 0);
  auto late = b.wire.add_port({.pool_mbufs = 63});
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code, EBUSY);
}

// ---- each fault, at its rate ---------------------------------------------------------------

// Binomial(n, p) within 5 standard deviations.
void expect_rate(uint64_t count, int n, double p, const char* what) {
  const double mean = n * p;
  const double sd = std::sqrt(n * p * (1 - p));
  EXPECT_NEAR(static_cast<double>(count), mean, 5 * sd) << what;
}

TEST(SimFaults, DropAtItsRate) {
  Bench b(2);
  ASSERT_TRUE(b.wire.set_link_faults(b[0], b[1], spec([](FaultSpec& s) { s.drop = 0.1; s.seed = 11; })));
  std::vector<uint64_t> got;
  for (int i = 0; i < kManyFrames; ++i) {
    ASSERT_TRUE(b.send(0, 1, i));
    for (uint64_t s : b.receive(1)) got.push_back(s);
  }
  const auto c = b.wire.link_counters(b[0], b[1]);
  expect_rate(c[FaultCounter::kDropped], kManyFrames, 0.1, "dropped");
  EXPECT_EQ(got.size(), kManyFrames - c[FaultCounter::kDropped]);
  EXPECT_TRUE(std::is_sorted(got.begin(), got.end()));
  EXPECT_EQ(std::adjacent_find(got.begin(), got.end()), got.end());
  // The other direction is untouched.
  EXPECT_EQ(b.wire.link_counters(b[1], b[0])[FaultCounter::kDropped], 0u);
  EXPECT_EQ(b.wire.counters()[FaultCounter::kDropped], c[FaultCounter::kDropped]);
}

TEST(SimFaults, DuplicateAtItsRate) {
  Bench b(2);
  ASSERT_TRUE(b.wire.set_link_faults(b[0], b[1], spec([](FaultSpec& s) { s.dup = 0.05; s.seed = 12; })));
  std::map<uint64_t, int> copies;
  int received = 0;
  rte_mbuf* pkts[kBurst];
  for (int i = 0; i < kManyFrames; ++i) {
    ASSERT_TRUE(b.send(0, 1, i, 100));
    const auto want = testing::frame_bytes(b[1].mac(), b[0].mac(), i, 100);
    while (uint16_t n = b[1].rx_burst(pkts, kBurst)) {
      for (uint16_t k = 0; k < n; ++k) {
        EXPECT_EQ(bytes_of(pkts[k]), want) << "a twin is an exact copy";
        ++copies[frame_seq(pkts[k])];
      }
      received += n;
      free_all(pkts, n);
    }
  }
  const auto c = b.wire.link_counters(b[0], b[1]);
  expect_rate(c[FaultCounter::kDuplicated], kManyFrames, 0.05, "duplicated");
  EXPECT_EQ(received, kManyFrames + static_cast<int>(c[FaultCounter::kDuplicated]));
  EXPECT_EQ(copies.size(), static_cast<size_t>(kManyFrames));
  for (const auto& [seq, n] : copies) EXPECT_TRUE(n == 1 || n == 2) << seq;
}

TEST(SimFaults, CorruptFlipsExactlyTheConfiguredBits) {
  Bench b(2);
  constexpr uint32_t kBits = 3;
  ASSERT_TRUE(b.wire.set_link_faults(b[0], b[1], spec([](FaultSpec& s) {
    s.corrupt = 0.05;
    s.corrupt_bits = kBits;
    s.seed = 13;
  })));
  uint64_t damaged = 0;
  rte_mbuf* pkts[kBurst];
  for (int i = 0; i < kManyFrames; ++i) {
    rte_mbuf* m = make_frame(b[0].pool(), b[1].mac(), b[0].mac(), i, 128);
    ASSERT_NE(m, nullptr);
    const auto sent = bytes_of(m);
    ASSERT_EQ(b[0].tx_burst(&m, 1), 1);
    ASSERT_EQ(b[1].rx_burst(pkts, kBurst), 1);  // the only frame in flight
    const int bits = testing::bit_distance(pkts[0], sent);
    EXPECT_TRUE(bits == 0 || bits == static_cast<int>(kBits)) << "frame " << i << ": " << bits << " bits";
    damaged += bits != 0;
    rte_pktmbuf_free(pkts[0]);
  }
  const auto c = b.wire.link_counters(b[0], b[1]);
  expect_rate(c[FaultCounter::kCorrupted], kManyFrames, 0.05, "corrupted");
  EXPECT_EQ(damaged, c[FaultCounter::kCorrupted]);
}

// How far each frame was overtaken: the number of newer frames that
// arrived before it.
std::vector<size_t> overtaken_by(const std::vector<uint64_t>& arrivals) {
  std::vector<size_t> out;
  for (size_t i = 0; i < arrivals.size(); ++i) {
    out.push_back(static_cast<size_t>(
        std::count_if(arrivals.begin(), arrivals.begin() + static_cast<ptrdiff_t>(i),
                      [&](uint64_t s) { return s > arrivals[i]; })));
  }
  return out;
}

TEST(SimFaults, ReorderStaysWithinItsWindow) {
  Bench b(2);
  constexpr uint32_t kWindow = 8;
  ASSERT_TRUE(b.wire.set_link_faults(b[0], b[1], spec([](FaultSpec& s) {
    s.reorder = 0.05;
    s.reorder_window = kWindow;
    s.seed = 14;
  })));
  std::vector<uint64_t> got;
  for (int i = 0; i < kManyFrames; ++i) {
    ASSERT_TRUE(b.send(0, 1, i));
    for (uint64_t s : b.receive(1)) got.push_back(s);
  }
  b.wire.clock().advance(kDefaultReorderHoldNs);  // the last held frames time out
  for (uint64_t s : b.receive(1)) got.push_back(s);

  const auto c = b.wire.link_counters(b[0], b[1]);
  expect_rate(c[FaultCounter::kReordered], kManyFrames, 0.05, "reordered");
  ASSERT_EQ(got.size(), static_cast<size_t>(kManyFrames)) << "every frame arrives exactly once";
  auto sorted = got;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());

  const auto depth = overtaken_by(got);
  const size_t late = static_cast<size_t>(std::count_if(depth.begin(), depth.end(), [](size_t d) { return d > 0; }));
  EXPECT_EQ(late, c[FaultCounter::kReordered]) << "each held frame is overtaken, the rest are not";
  EXPECT_LE(*std::max_element(depth.begin(), depth.end()), kWindow);
  EXPECT_EQ(*std::max_element(depth.begin(), depth.end()), kWindow) << "the whole window gets used";
}

TEST(SimFaults, HeldFrameTimesOutWithoutLaterTraffic) {
  Bench b(2);
  ASSERT_TRUE(b.wire.set_link_faults(b[0], b[1], spec([](FaultSpec& s) {
    s.reorder = 1;
    s.reorder_hold_ns = 100 * kUs;
  })));
  ASSERT_TRUE(b.send(0, 1, 1));
  EXPECT_EQ(b.receive(1), std::vector<uint64_t>{});
  EXPECT_EQ(b.wire.in_flight(), 1u);
  b.wire.clock().advance(100 * kUs - 1);
  EXPECT_EQ(b.receive(1), std::vector<uint64_t>{});
  b.wire.clock().advance(1);
  EXPECT_EQ(b.receive(1), std::vector<uint64_t>{1});
}

TEST(SimFaults, DelayHoldsEveryFrameExactly) {
  Bench b(2);
  ASSERT_TRUE(b.wire.set_link_faults(b[0], b[1], spec([](FaultSpec& s) { s.delay_ns = 50 * kUs; })));
  for (uint64_t s = 0; s < 10; ++s) ASSERT_TRUE(b.send(0, 1, s));
  b.wire.clock().advance(50 * kUs - 1);
  EXPECT_EQ(b.receive(1), std::vector<uint64_t>{});
  b.wire.clock().advance(1);
  EXPECT_EQ(b.receive(1), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(b.wire.link_counters(b[0], b[1])[FaultCounter::kDelayed], 10u);
  // The reverse link has no delay.
  ASSERT_TRUE(b.send(1, 0, 99));
  EXPECT_EQ(b.receive(0), std::vector<uint64_t>{99});
}

TEST(SimFaults, JitterIsUniformAndNeverReorders) {
  Bench b(2);
  constexpr uint64_t kJitterUs = 100;
  constexpr int kFrames = 1000;
  ASSERT_TRUE(b.wire.set_link_faults(b[0], b[1], spec([](FaultSpec& s) {
    s.jitter_ns = kJitterUs * kUs;
    s.seed = 15;
  })));
  std::vector<uint64_t> latency_us;
  for (int i = 0; i < kFrames; ++i) {
    ASSERT_TRUE(b.send(0, 1, i));
    for (uint64_t t = 0; t <= kJitterUs; ++t) {
      const auto got = b.receive(1);
      if (!got.empty()) {
        EXPECT_EQ(got, std::vector<uint64_t>{static_cast<uint64_t>(i)});
        latency_us.push_back(t);
        b.wire.clock().advance((kJitterUs + 1 - t) * kUs);
        break;
      }
      b.wire.clock().advance(kUs);
    }
    ASSERT_EQ(latency_us.size(), static_cast<size_t>(i + 1)) << "frame " << i << " later than the jitter bound";
  }
  const double mean = std::accumulate(latency_us.begin(), latency_us.end(), 0.0) / kFrames;
  EXPECT_NEAR(mean, kJitterUs / 2.0, 5.0);
  EXPECT_LE(*std::min_element(latency_us.begin(), latency_us.end()), 2u);
  EXPECT_GE(*std::max_element(latency_us.begin(), latency_us.end()), kJitterUs - 2);

  // Back to back, jittered frames still arrive in order.
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(b.send(0, 1, i));
  b.wire.clock().advance(kJitterUs * kUs);
  const auto burst = b.receive(1);
  ASSERT_EQ(burst.size(), 200u);
  EXPECT_TRUE(std::is_sorted(burst.begin(), burst.end()));
}

TEST(SimFaults, BandwidthCapSerialisesFrames) {
  Bench b(2);
  // 1250-byte frames at 100 Mbit/s: 100 µs each.
  constexpr uint16_t kLen = 1250;
  constexpr uint64_t kFrameTime = 100 * kUs;
  constexpr int kFrames = 20;
  ASSERT_TRUE(b.wire.set_link_faults(b[0], b[1], spec([](FaultSpec& s) { s.rate_bps = 100'000'000; })));
  for (int i = 0; i < kFrames; ++i) ASSERT_TRUE(b.send(0, 1, i, kLen));
  size_t total = 0;
  for (int k = 1; k <= kFrames; ++k) {
    b.wire.clock().set(k * kFrameTime - 1);
    total += b.receive(1).size();
    EXPECT_EQ(total, static_cast<size_t>(k - 1)) << "before frame " << k << " is serialised";
    b.wire.clock().set(k * kFrameTime);
    total += b.receive(1).size();
    EXPECT_EQ(total, static_cast<size_t>(k));
  }
  EXPECT_EQ(b.wire.link_counters(b[0], b[1])[FaultCounter::kRateLimited], kFrames - 1u);
  EXPECT_EQ(b[1].stats().rx_bytes, uint64_t{kLen} * kFrames);
}

TEST(SimFaults, FullLinkQueueDropsAndCounts) {
  constexpr uint32_t kQueue = 16;
  Bench b(2, WireClock::Mode::kManual, kQueue);
  ASSERT_TRUE(b.wire.set_link_faults(b[0], b[1], spec([](FaultSpec& s) { s.delay_ns = 10 * kUs; })));
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(b.send(0, 1, i));
  EXPECT_EQ(b.wire.link_counters(b[0], b[1])[FaultCounter::kQueueFull], 4u);
  EXPECT_EQ(b[1].stats().rx_dropped, 4u);
  b.wire.clock().advance(10 * kUs);
  EXPECT_EQ(b.receive(1).size(), kQueue);
}

TEST(SimFaults, PortFaultsFollowTheirDirection) {
  Bench b(3);
  ASSERT_TRUE(b.wire.set_port_faults(b[0], spec([](FaultSpec& s) { s.drop = 1; s.dir = FaultDir::kTx; })));
  ASSERT_TRUE(b.wire.set_port_faults(b[2], spec([](FaultSpec& s) { s.drop = 1; s.dir = FaultDir::kRx; })));
  ASSERT_TRUE(b.send(0, 1, 1));  // leaves 0: dropped
  ASSERT_TRUE(b.send(1, 0, 2));  // enters 0: fine
  ASSERT_TRUE(b.send(1, 2, 3));  // enters 2: dropped
  ASSERT_TRUE(b.send(2, 1, 4));  // leaves 2: fine
  EXPECT_EQ(b.receive(0), std::vector<uint64_t>{2});
  EXPECT_EQ(b.receive(1), std::vector<uint64_t>{4});
  EXPECT_EQ(b.receive(2), std::vector<uint64_t>{});
  EXPECT_EQ(b.wire.counters()[FaultCounter::kDropped], 2u);
}

TEST(SimFaults, AllFaultsApplyToEveryLinkAndLaterPorts) {
  SimWire w({.clock = WireClock::Mode::kManual});
  ASSERT_TRUE(w.add_port({.pool_mbufs = 63, .data_room = kDataRoom}));
  ASSERT_TRUE(w.set_all_faults(spec([](FaultSpec& s) { s.drop = 1; })));
  auto p1 = w.add_port({.pool_mbufs = 63, .data_room = kDataRoom});
  ASSERT_TRUE(p1);
  rte_mbuf* m = make_frame((*p1)->pool(), w.port(0).mac(), (*p1)->mac(), 1);
  ASSERT_NE(m, nullptr);
  ASSERT_EQ((*p1)->tx_burst(&m, 1), 1);
  EXPECT_EQ(w.link_counters(**p1, w.port(0))[FaultCounter::kDropped], 1u);
}

TEST(SimFaults, BadSpecIsRefused) {
  Bench b(2);
  auto st = b.wire.set_link_faults(b[0], b[1], spec([](FaultSpec& s) { s.drop = 2; }));
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message, "drop: 2 is outside [0, 1]");
  EXPECT_FALSE(b.wire.set_link_faults(b[0], b[0], FaultSpec{}));
}

// ---- link down / up ---------------------------------------------------------------------

TEST(SimLink, DownLosesEverythingUntilUp) {
  Bench b(2);
  ASSERT_TRUE(b.wire.set_link_faults(b[0], b[1], spec([](FaultSpec& s) { s.delay_ns = 100 * kUs; })));
  for (uint64_t s = 0; s < 5; ++s) ASSERT_TRUE(b.send(0, 1, s));  // in flight
  b.wire.set_link_up(b[1], false);
  EXPECT_FALSE(b[1].link_up());
  EXPECT_TRUE(b[0].link_up());
  EXPECT_EQ(b.wire.in_flight(), 0u);
  for (uint64_t s = 5; s < 8; ++s) ASSERT_TRUE(b.send(0, 1, s));  // arrive at a dead port
  ASSERT_TRUE(b.send(1, 0, 100));                                  // sent from a dead port
  ASSERT_TRUE(b.send(1, 0, 101));
  b.wire.clock().advance(100 * kUs);
  EXPECT_EQ(b.receive(1), std::vector<uint64_t>{});
  EXPECT_EQ(b.receive(0), std::vector<uint64_t>{});

  EXPECT_EQ(b.wire.link_counters(b[0], b[1])[FaultCounter::kDownDropped], 8u);
  EXPECT_EQ(b[1].drops(SimDrop::kTxLinkDown), 2u);
  EXPECT_EQ(b[1].stats().tx_dropped, 2u);
  EXPECT_EQ(b[1].stats().rx_dropped, 8u);
  EXPECT_EQ(b.wire.counters()[FaultCounter::kDownDropped], 10u);

  b.wire.set_link_up(b[1], true);
  EXPECT_TRUE(b[1].link_up());
  for (uint64_t s = 10; s < 14; ++s) ASSERT_TRUE(b.send(0, 1, s));
  ASSERT_TRUE(b.send(1, 0, 102));
  b.wire.clock().advance(100 * kUs);
  EXPECT_EQ(b.receive(1), (std::vector<uint64_t>{10, 11, 12, 13}));
  EXPECT_EQ(b.receive(0), std::vector<uint64_t>{102});
}

// ---- determinism ------------------------------------------------------------------------------

struct Arrival {
  size_t port;
  uint64_t time;
  uint64_t hash;  // of the frame's bytes: corruption shows
  bool operator==(const Arrival&) const = default;
};

uint64_t fnv1a(const std::vector<uint8_t>& bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint8_t c : bytes) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Three ports, every fault on, unicast and broadcast traffic.
std::vector<Arrival> run_trace(uint64_t seed) {
  Bench b(3);
  FaultSpec s;
  s.drop = 0.05;
  s.dup = 0.05;
  s.reorder = 0.05;
  s.reorder_window = 4;
  s.corrupt = 0.05;
  s.corrupt_bits = 2;
  s.delay_ns = 10 * kUs;
  s.jitter_ns = 5 * kUs;
  s.rate_bps = 1'000'000'000;
  s.seed = seed;
  EXPECT_TRUE(b.wire.set_all_faults(s));
  std::vector<Arrival> trace;
  rte_mbuf* pkts[kBurst];
  for (uint64_t step = 0; step < 3000; ++step) {
    EXPECT_TRUE(b.send(0, 1, step, static_cast<uint16_t>(64 + step % 200)));
    if (step % 3 == 0) {
      EXPECT_TRUE(b.send(1, wire::kBroadcastMac, step));
    }
    if (step % 7 == 0) {
      EXPECT_TRUE(b.send(2, 0, step));
    }
    b.wire.clock().advance(kUs);
    for (size_t p = 0; p < 3; ++p) {
      while (uint16_t n = b[p].rx_burst(pkts, kBurst)) {
        for (uint16_t i = 0; i < n; ++i) trace.push_back({p, b.wire.clock().now_ns(), fnv1a(bytes_of(pkts[i]))});
        free_all(pkts, n);
      }
    }
  }
  return trace;
}

TEST(SimDeterminism, SameSeedSameTraceOtherSeedOtherTrace) {
  const auto a = run_trace(42);
  const auto again = run_trace(42);
  const auto other = run_trace(43);
  ASSERT_GT(a.size(), 4000u);
  EXPECT_TRUE(a == again) << "same seed, different deliveries";
  EXPECT_FALSE(a == other) << "different seeds, same deliveries";
}

// ---- two threads ------------------------------------------------------------------------------

TEST(SimThreads, TwoEngineThreadsOneWire) {
  Bench b(2, WireClock::Mode::kReal);
  const FaultSpec s = spec([](FaultSpec& f) { f.drop = 0.1; f.dup = 0.02; f.seed = 3; });
  ASSERT_TRUE(b.wire.set_all_faults(s));
  constexpr uint64_t kFrames = 20'000;
  std::atomic<int> senders_done{0};
  struct Seen {
    uint64_t received = 0;
    bool in_order = true;
  };
  Seen seen[2];

  auto engine = [&](size_t me) {
    const size_t peer = 1 - me;
    uint64_t next = 0;
    uint64_t last = 0;
    rte_mbuf* pkts[kBurst];
    auto poll = [&] {
      const uint16_t n = b[me].rx_burst(pkts, kBurst);
      for (uint16_t i = 0; i < n; ++i) {
        const uint64_t seq = frame_seq(pkts[i]);
        if (seq < last) seen[me].in_order = false;
        last = seq;
      }
      seen[me].received += n;
      free_all(pkts, n);
      return n;
    };
    while (next < kFrames) {
      uint16_t k = 0;
      for (; k < kBurst && next < kFrames; ++k, ++next) {
        pkts[k] = make_frame(b[me].pool(), b[peer].mac(), b[me].mac(), next);
        if (pkts[k] == nullptr) break;
      }
      if (k > 0) b[me].tx_burst(pkts, k);
      poll();
    }
    senders_done.fetch_add(1);
    while (senders_done.load() < 2 || b.wire.in_flight() > 0 || poll() > 0) poll();
  };
  std::thread t0(engine, 0);
  std::thread t1(engine, 1);
  t0.join();
  t1.join();

  for (size_t to = 0; to < 2; ++to) {
    const auto c = b.wire.link_counters(b[1 - to], b[to]);
    const uint64_t sent = b[1 - to].stats().tx_frames;
    EXPECT_EQ(seen[to].received, sent - c.lost() + c[FaultCounter::kDuplicated]) << "port " << to;
    EXPECT_TRUE(seen[to].in_order) << "port " << to;
    expect_rate(c[FaultCounter::kDropped], static_cast<int>(sent), 0.1, "dropped");
  }
  EXPECT_EQ(rte_mempool_avail_count(b[0].pool()), kPoolMbufs) << "no mbuf leaked";
  EXPECT_EQ(rte_mempool_avail_count(b[1].pool()), kPoolMbufs);
}

}  // namespace
}  // namespace uroce::drivers::sim
