// Two engines on the sim wire find each other (ARP, IPv6 ND), answer
// ICMP echo, and deliver RoCEv2 frames to the QP table; a third, raw port
// floods one engine with garbage, each frame counted under its reason.
#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "drivers/port.hpp"
#include "drivers/sim/sim_wire.hpp"
#include "lib/wire/build.hpp"
#include "lib/wire/icmp.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/util/log.hpp"
#include "transport/engine.hpp"
#include "transport/params.hpp"

namespace uroce::transport {
namespace {

using drivers::sim::SimPort;
using drivers::sim::SimWire;
using wire::MacAddr;

// A sink with one QP, 0x11: what it takes is recorded; a packet for
// another QPN, or that fails the engine's frame checks, is the engine's to
// count, as the RNIC's receive dispatcher does.
struct RecordingSink final : RoceSink {
  static constexpr Qpn kQpn{0x11};
  std::vector<std::vector<uint8_t>> frames;
  void rx_burst(Engine& engine, RoceRx* pkts, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) {
      if (pkts[i].info.dest_qp != kQpn) {
        engine.drop(pkts[i].m, EngineCtr::drop_unknown_qpn);
        continue;
      }
      if (!engine.accept_roce(pkts[i])) continue;
      const uint8_t* p = rte_pktmbuf_mtod(pkts[i].m, const uint8_t*);
      frames.emplace_back(p, p + pkts[i].m->data_len);
      rte_pktmbuf_free(pkts[i].m);
    }
  }
};

IpAddr v6addr(uint8_t last) {
  wire::Ipv6Addr a{0xfd, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last};
  return IpAddr::v6(a);
}

EngineConfig config_for(SimPort& p, uint32_t v4, uint8_t v6last) {
  EngineConfig c;
  c.local.mac = p.mac();
  c.local.ips = {IpAddr::v4(v4), v6addr(v6last)};
  c.answer_host = true;
  c.neigh.retry_interval_ns = 20'000'000;
  c.neigh.max_requests = 5;
  return c;
}

constexpr uint32_t kIpA = 0x0A000001, kIpB = 0x0A000002;

struct EngineWire : ::testing::Test {
  SimWire wire;
  SimPort* pa = nullptr;
  SimPort* pb = nullptr;
  SimPort* raw = nullptr;
  std::unique_ptr<Engine> a, b;
  RecordingSink sink_b;

  void SetUp() override {
    auto ra = wire.add_port();
    auto rb = wire.add_port();
    auto rr = wire.add_port();
    ASSERT_TRUE(ra && rb && rr);
    pa = *ra;
    pb = *rb;
    raw = *rr;
    a = std::make_unique<Engine>(*pa, config_for(*pa, kIpA, 1));
    b = std::make_unique<Engine>(*pb, config_for(*pb, kIpB, 2));
    ASSERT_TRUE(a->init());
    ASSERT_TRUE(b->init());
    b->set_roce_sink(&sink_b);
  }
  void TearDown() override {
    a.reset();
    b.reset();
    drain_raw();
  }
  void drain_raw() {
    rte_mbuf* m[32];
    uint16_t n;
    while ((n = raw->rx_burst(m, 32)) > 0) rte_pktmbuf_free_bulk(m, n);
  }
  // Poll both engines until `done` or 2 s pass.
  bool run_until(const std::function<bool()>& done) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (std::chrono::steady_clock::now() < end) {
      a->poll();
      b->poll();
      drain_raw();
      if (done()) return true;
    }
    return false;
  }
  rte_mbuf* frame(const uint8_t* data, size_t len, rte_mempool* pool) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool);
    EXPECT_NE(m, nullptr);
    std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), data, len);
    m->data_len = static_cast<uint16_t>(len);
    m->pkt_len = static_cast<uint32_t>(len);
    return m;
  }
  std::vector<uint8_t> roce_frame(uint8_t opcode, uint32_t dst_qp, MacAddr dst_mac, uint32_t dst_ip) {
    wire::PktDesc d;
    d.eth_dst = dst_mac;
    d.eth_src = pa->mac();
    d.src = wire::PktDesc::ipv4_mapped(kIpA);
    d.dst = wire::PktDesc::ipv4_mapped(dst_ip);
    d.opcode = opcode;
    d.dest_qp = Qpn(dst_qp);
    d.deth_qkey = Qkey(0x11111111);
    d.deth_src_qp = Qpn(0x22);
    static const uint8_t payload[40] = {1, 2, 3};
    d.payload = payload;
    std::vector<uint8_t> out(256);
    out.resize(wire::build(out, d));
    return out;
  }

  // An RC packet from A to B's recording sink, as an mbuf of A's pool: an
  // ACK without payload, anything else with 8 bytes (a RETH of 8 when the
  // opcode has one).
  rte_mbuf* rc_frame(uint8_t opcode, uint32_t psn) {
    wire::PktDesc d;
    d.eth_src = pa->mac();
    d.src = wire::PktDesc::ipv4_mapped(kIpA);
    d.dst = wire::PktDesc::ipv4_mapped(kIpB);
    d.opcode = opcode;
    d.dest_qp = RecordingSink::kQpn;
    d.psn = Psn(psn);
    d.reth_len = 8;
    static const uint8_t payload[8] = {};
    if (opcode != wire::op::RC_ACK) d.payload = payload;
    std::vector<uint8_t> out(256);
    out.resize(wire::build(out, d));
    return frame(out.data(), out.size(), pa->pool());
  }

  // A frame to `ip` with the kind its opcode gives it (TxKind), as the
  // transport's senders say it (rnic/tx.hpp).  [engine]
  static bool send_kind(Engine& e, const IpAddr& ip, rte_mbuf* m) {
    const wire::PktInfo pi = wire::parse({rte_pktmbuf_mtod(m, const uint8_t*), m->data_len});
    return e.send_to(ip, m, pi.is_roce() ? tx_kind(pi.opcode) : TxKind::Other);
  }

  // The neighbour table is the engine's (DESIGN.md "Threads: the rule"):
  // the test reaches it through run_sync.
  static void resolve(Engine& e, const IpAddr& ip) {
    e.run_sync([&] { e.neighbours().resolve(ip, e.now()); });
  }
  static std::optional<MacAddr> mac_of(Engine& e, const IpAddr& ip) {
    std::optional<MacAddr> mac;
    e.run_sync([&] {
      if (const MacAddr* m = e.neighbours().lookup(ip, e.now())) mac = *m;
    });
    return mac;
  }
};

TEST_F(EngineWire, ArpResolutionAndRoceDelivery) {
  resolve(*a, IpAddr::v4(kIpB));
  ASSERT_TRUE(run_until([&] { return mac_of(*a, IpAddr::v4(kIpB)).has_value(); }));
  EXPECT_EQ(*mac_of(*a, IpAddr::v4(kIpB)), pb->mac());
  EXPECT_GE(a->counters().get(EngineCtr::tx_arp_request), 1u);
  EXPECT_EQ(b->counters().get(EngineCtr::tx_arp_reply), 1u);
  EXPECT_EQ(a->counters().get(EngineCtr::neigh_resolved), 1u);

  // A RoCEv2 UD packet with a zero destination MAC is completed by send_to.
  auto f = roce_frame(wire::op::UD_SEND_ONLY, 0x11, MacAddr{}, kIpB);
  a->run_sync([&] { a->send_to(IpAddr::v4(kIpB), frame(f.data(), f.size(), pa->pool())); });
  ASSERT_TRUE(run_until([&] { return sink_b.frames.size() == 1; }));
  EXPECT_EQ(b->counters().get(EngineCtr::rx_roce), 1u);
  auto expect = f;
  std::memcpy(expect.data(), pb->mac().data(), 6);  // the destination MAC send_to filled in
  EXPECT_EQ(sink_b.frames[0].size(), expect.size());
  EXPECT_EQ(std::memcmp(sink_b.frames[0].data(), expect.data(), 6), 0);
}

// A path's NextHop: the first frame resolves, later ones reuse the MAC
// without the table, and a neighbour that moves is followed at once.
TEST_F(EngineWire, PathNextHopFollowsTheNeighbourTable) {
  resolve(*a, IpAddr::v4(kIpB));
  ASSERT_TRUE(run_until([&] { return mac_of(*a, IpAddr::v4(kIpB)).has_value(); }));
  NextHop hop;
  auto f = roce_frame(wire::op::UD_SEND_ONLY, 0x11, MacAddr{}, kIpB);
  a->run_sync([&] { EXPECT_TRUE(a->send_to(IpAddr::v4(kIpB), frame(f.data(), f.size(), pa->pool()), hop)); });
  EXPECT_NE(hop.generation, 0u);
  EXPECT_FALSE(hop.loopback);
  EXPECT_EQ(hop.mac, pb->mac());
  a->run_sync([&] { EXPECT_TRUE(a->send_to(IpAddr::v4(kIpB), frame(f.data(), f.size(), pa->pool()), hop)); });
  ASSERT_TRUE(run_until([&] { return sink_b.frames.size() == 2; }));
  for (const auto& got : sink_b.frames) EXPECT_EQ(std::memcmp(got.data(), pb->mac().data(), 6), 0);

  // The neighbour moves (a gratuitous ARP would do this): the next frame
  // goes to the new MAC, and the engine's own address loops back.
  const MacAddr moved{2, 0, 0, 0, 0x77, 0x77};
  a->run_sync([&] { a->neighbours().learn(IpAddr::v4(kIpB), moved, true, a->now()); });
  a->run_sync([&] { EXPECT_TRUE(a->send_to(IpAddr::v4(kIpB), frame(f.data(), f.size(), pa->pool()), hop)); });
  EXPECT_EQ(hop.mac, moved);
  const uint64_t looped = a->counters().get(EngineCtr::loopback);
  a->run_sync([&] { EXPECT_TRUE(a->send_to(IpAddr::v4(kIpA), frame(f.data(), f.size(), pa->pool()), hop)); });
  EXPECT_TRUE(hop.loopback);
  EXPECT_EQ(a->counters().get(EngineCtr::loopback), looped + 1);
}

// EngineConfig::ack_hold_ns: a turn that ends with only ACKs to send keeps
// them; the next frame that is not an ACK takes them along in its burst
// (behind it when it is a request: HeldAcksLeaveBehindRequestsNotResponses);
// held ACKs leave by themselves once the hold is over.
TEST_F(EngineWire, AcksWaitForTheNextFrameUpToTheHold) {
  EngineConfig c = config_for(*pa, kIpA, 1);
  c.ack_hold_ns = 1'000'000'000;  // 1 s: far longer than the checks below take
  a.reset();
  a = std::make_unique<Engine>(*pa, c);
  ASSERT_TRUE(a->init());
  resolve(*a, IpAddr::v4(kIpB));
  ASSERT_TRUE(run_until([&] { return mac_of(*a, IpAddr::v4(kIpB)).has_value(); }));
  auto ack = roce_frame(wire::op::RC_ACK, 0x11, MacAddr{}, kIpB);
  auto send = roce_frame(wire::op::RC_WRITE_ONLY, 0x11, MacAddr{}, kIpB);
  const uint64_t sent0 = a->counters().get(EngineCtr::tx_frames);
  a->run_sync([&] { EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), frame(ack.data(), ack.size(), pa->pool()))); });
  for (int i = 0; i < 100; ++i) {
    // A turn that holds frames is not idle: an engine thread that took
    // it for one would nap, and the ACKs would wait out the nap.
    EXPECT_GT(a->poll(), 0u) << "turn " << i << " holds an ACK";
    b->poll();
  }
  EXPECT_EQ(sink_b.frames.size(), 0u) << "an ACK alone is held";
  EXPECT_EQ(a->counters().get(EngineCtr::tx_frames), sent0);

  a->run_sync([&] { EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), frame(send.data(), send.size(), pa->pool()))); });
  EXPECT_EQ(a->counters().get(EngineCtr::tx_frames), sent0 + 2) << "the WRITE's turn sends both in one burst";
  ASSERT_TRUE(run_until([&] { return sink_b.frames.size() == 2; }));
  EXPECT_EQ(wire::parse(sink_b.frames[0]).opcode, wire::op::RC_WRITE_ONLY) << "the request first";
  EXPECT_EQ(wire::parse(sink_b.frames[1]).opcode, wire::op::RC_ACK) << "the held ACK behind it";

  // Nothing follows: the ACK leaves when its hold is over.
  a->run_sync([&] { EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), frame(ack.data(), ack.size(), pa->pool()))); });
  ASSERT_TRUE(run_until([&] { return sink_b.frames.size() == 3; })) << "held past ack_hold_ns";
}

// A port whose ring has room for `room` more frames (a full memif or
// uroced ring): what it refuses stays with the engine, in order, up to
// tx_batch frames (counted tx_deferred), beyond that is dropped
// (drop_tx_full), and the engine says it is stalled, so that the RNIC's
// bulk senders wait (DESIGN.md "What every error path does").
struct ScarcePort final : drivers::Port {
  explicit ScarcePort(drivers::Port& inner) : in(inner) {}
  drivers::Port& in;
  std::atomic<uint32_t> room{0};  // another thread may make room (DrainTx...)
  uint16_t rx_burst(rte_mbuf** pkts, uint16_t n) override { return in.rx_burst(pkts, n); }
  uint16_t tx_burst(rte_mbuf** pkts, uint16_t n) override {
    const auto take = static_cast<uint16_t>(std::min<uint32_t>(n, room.load()));
    room -= take;
    return take == 0 ? 0 : in.tx_burst(pkts, take);
  }
  wire::MacAddr mac() const override { return in.mac(); }
  uint16_t mtu() const override { return in.mtu(); }
  bool link_up() const override { return in.link_up(); }
  drivers::PortStats stats() const override { return in.stats(); }
  rte_mempool* pool() const override { return in.pool(); }
  std::string name() const override { return "scarce"; }
};

TEST_F(EngineWire, FramesAFullPortRefusesWaitInOrder) {
  ScarcePort scarce(*pa);
  scarce.room = 1u << 30;  // room while the neighbour is resolved
  EngineConfig c = config_for(*pa, kIpA, 1);
  c.tx_batch = 4;
  a.reset();
  a = std::make_unique<Engine>(scarce, c);
  ASSERT_TRUE(a->init());
  resolve(*a, IpAddr::v4(kIpB));
  ASSERT_TRUE(run_until([&] { return mac_of(*a, IpAddr::v4(kIpB)).has_value(); }));
  auto numbered = [&](uint32_t psn) {
    wire::PktDesc d;
    d.eth_src = pa->mac();
    d.src = wire::PktDesc::ipv4_mapped(kIpA);
    d.dst = wire::PktDesc::ipv4_mapped(kIpB);
    d.opcode = wire::op::UD_SEND_ONLY;
    d.dest_qp = RecordingSink::kQpn;
    d.deth_qkey = Qkey(0x11111111);
    d.deth_src_qp = Qpn(0x22);
    d.psn = Psn(psn);
    static const uint8_t payload[16] = {};
    d.payload = payload;
    std::vector<uint8_t> out(256);
    out.resize(wire::build(out, d));
    return frame(out.data(), out.size(), pa->pool());
  };
  const auto ctr = [&](EngineCtr k) { return a->counters().get(k); };
  const uint64_t sent0 = ctr(EngineCtr::tx_frames);

  // Each run_sync is one turn of the loop, which ends in a flush.
  scarce.room = 0;  // the ring is full
  a->run_sync([&] {
    for (uint32_t i = 0; i < 3; ++i) EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), numbered(i)));
  });
  EXPECT_EQ(ctr(EngineCtr::tx_frames), sent0);
  EXPECT_EQ(ctr(EngineCtr::tx_deferred), 3u) << "three refused at the turn's flush, kept";
  EXPECT_EQ(ctr(EngineCtr::drop_tx_full), 0u) << "nothing lost while it fits in tx_batch";
  EXPECT_TRUE(a->tx_stalled());

  // Three more: six wait for a ring of tx_batch (4); the two newest go.
  a->run_sync([&] {
    for (uint32_t i = 3; i < 6; ++i) EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), numbered(i)));
  });
  EXPECT_EQ(ctr(EngineCtr::drop_tx_full), 2u);
  EXPECT_TRUE(a->tx_stalled());

  // Room for one: the oldest leaves, the rest still wait.
  scarce.room = 1;
  a->run_sync([] {});
  EXPECT_EQ(ctr(EngineCtr::tx_frames), sent0 + 1);
  EXPECT_TRUE(a->tx_stalled());

  scarce.room = 1u << 30;
  a->run_sync([] {});
  EXPECT_FALSE(a->tx_stalled()) << "every kept frame left";
  EXPECT_EQ(ctr(EngineCtr::tx_frames), sent0 + 4);
  ASSERT_TRUE(run_until([&] { return sink_b.frames.size() == 4; }));
  for (uint32_t i = 0; i < 4; ++i)
    EXPECT_EQ(wire::parse(sink_b.frames[i]).psn.value(), i) << "the oldest first, the kept ones in order";
}

// Engine::drain_tx: the frames a full port refused leave before whatever
// the caller writes next (uroced's claim records): it waits for room made
// by another thread, and gives up after its time when none comes.
TEST_F(EngineWire, DrainTxWaitsForTheKeptFramesOrItsTime) {
  ScarcePort scarce(*pa);
  scarce.room = 1u << 30;  // room while the neighbour is resolved
  EngineConfig c = config_for(*pa, kIpA, 1);
  a.reset();
  a = std::make_unique<Engine>(scarce, c);
  ASSERT_TRUE(a->init());
  resolve(*a, IpAddr::v4(kIpB));
  ASSERT_TRUE(run_until([&] { return mac_of(*a, IpAddr::v4(kIpB)).has_value(); }));
  auto f = roce_frame(wire::op::UD_SEND_ONLY, 0x11, MacAddr{}, kIpB);
  const uint64_t sent0 = a->counters().get(EngineCtr::tx_frames);

  scarce.room = 0;
  a->run_sync([&] {
    for (int i = 0; i < 3; ++i) EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), frame(f.data(), f.size(), pa->pool())));
  });
  ASSERT_TRUE(a->tx_stalled());

  // Nobody makes room: false once its time is over, the frames still kept.
  bool drained = true;
  auto t0 = std::chrono::steady_clock::now();
  a->run_sync([&] { drained = a->drain_tx(20'000'000); });
  EXPECT_FALSE(drained);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(20));
  EXPECT_TRUE(a->tx_stalled());
  EXPECT_EQ(a->counters().get(EngineCtr::tx_frames), sent0);

  // Room comes 30 ms into a wait of 10 s: every kept frame leaves, and the
  // wait ends then, not at its limit.
  std::thread consumer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    scarce.room = 1u << 30;
  });
  t0 = std::chrono::steady_clock::now();
  a->run_sync([&] { drained = a->drain_tx(10'000'000'000); });
  const auto waited = std::chrono::steady_clock::now() - t0;
  consumer.join();
  EXPECT_TRUE(drained);
  EXPECT_FALSE(a->tx_stalled());
  EXPECT_EQ(a->counters().get(EngineCtr::tx_frames), sent0 + 3);
  EXPECT_GE(waited, std::chrono::milliseconds(30));
  EXPECT_LT(waited, std::chrono::seconds(5));
  ASSERT_TRUE(run_until([&] { return sink_b.frames.size() == 3; }));
}

// Held ACKs (EngineConfig::ack_hold_ns) that a request joins leave behind
// it: the peer's application, polling for its own completion, then finds
// our request already placed when the ACK completes its WQE.  Responses
// share the ACKs' PSN stream and keep their place.
TEST_F(EngineWire, HeldAcksLeaveBehindRequestsNotResponses) {
  EngineConfig c = config_for(*pa, kIpA, 1);
  c.ack_hold_ns = 60'000'000'000;  // held until something else is sent
  a.reset();
  a = std::make_unique<Engine>(*pa, c);
  ASSERT_TRUE(a->init());
  resolve(*a, IpAddr::v4(kIpB));
  ASSERT_TRUE(run_until([&] { return mac_of(*a, IpAddr::v4(kIpB)).has_value(); }));
  const auto ctr = [&](EngineCtr k) { return a->counters().get(k); };
  const uint64_t sent0 = ctr(EngineCtr::tx_frames);
  auto opcodes = [&] {
    std::vector<std::pair<uint8_t, uint32_t>> v;
    for (const auto& f : sink_b.frames) {
      const wire::PktInfo pi = wire::parse(f);
      v.emplace_back(pi.opcode, pi.psn.value());
    }
    return v;
  };
  using V = std::vector<std::pair<uint8_t, uint32_t>>;

  // Each run_sync is one turn.  An ACK alone is held.
  a->run_sync([&] { EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), rc_frame(wire::op::RC_ACK, 100))); });
  a->run_sync([] {});
  EXPECT_EQ(ctr(EngineCtr::tx_frames), sent0) << "the ACK waits for company";
  // A request joins it: the request leaves first.
  a->run_sync([&] { EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), rc_frame(wire::op::RC_WRITE_ONLY, 7))); });
  EXPECT_EQ(ctr(EngineCtr::tx_frames), sent0 + 2);
  EXPECT_EQ(ctr(EngineCtr::tx_acks_behind), 1u);
  ASSERT_TRUE(run_until([&] { return sink_b.frames.size() == 2; }));
  EXPECT_EQ(opcodes(), (V{{wire::op::RC_WRITE_ONLY, 7}, {wire::op::RC_ACK, 100}}));

  // A READ response joins a held ACK: both answer the peer's requests, in
  // PSN order; nothing moves.
  sink_b.frames.clear();
  a->run_sync([&] { EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), rc_frame(wire::op::RC_ACK, 101))); });
  a->run_sync([&] { EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), rc_frame(wire::op::RC_READ_RESPONSE_ONLY, 102))); });
  ASSERT_TRUE(run_until([&] { return sink_b.frames.size() == 2; }));
  EXPECT_EQ(opcodes(), (V{{wire::op::RC_ACK, 101}, {wire::op::RC_READ_RESPONSE_ONLY, 102}}));

  // Requests that complete a receive at the peer (SEND, WRITE with
  // immediate, UD SEND) stay behind the ACK: the peer's send completion
  // comes first, as from an RNIC that acknowledges at once.
  for (const uint8_t op : {wire::op::RC_SEND_ONLY, wire::op::RC_SEND_ONLY_IMM,
                           wire::op::RC_WRITE_ONLY_IMM, wire::op::UD_SEND_ONLY}) {
    sink_b.frames.clear();
    a->run_sync([&] { EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), rc_frame(wire::op::RC_ACK, 110))); });
    a->run_sync([] {});
    EXPECT_TRUE(sink_b.frames.empty()) << "the ACK is held";
    a->run_sync([&] { EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), rc_frame(op, 9))); });
    ASSERT_TRUE(run_until([&] { return sink_b.frames.size() == 2; }));
    EXPECT_EQ(opcodes(), (V{{wire::op::RC_ACK, 110}, {op, 9}})) << wire::opcode_info(op).name;
  }
  // A held ACK (PSN `ack`), then one turn of two frames: the three as they left.
  auto ack_then_two = [&](uint32_t ack, std::pair<uint8_t, uint32_t> x, std::pair<uint8_t, uint32_t> y) {
    sink_b.frames.clear();
    a->run_sync([&] { EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), rc_frame(wire::op::RC_ACK, ack))); });
    a->run_sync([&] {
      EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), rc_frame(x.first, x.second)));
      EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), rc_frame(y.first, y.second)));
    });
    EXPECT_TRUE(run_until([&] { return sink_b.frames.size() == 3; }));
    return opcodes();
  };
  // Nor does a WRITE that travels with one.
  EXPECT_EQ(ack_then_two(111, {wire::op::RC_WRITE_ONLY, 10}, {wire::op::RC_SEND_ONLY, 11}),
            (V{{wire::op::RC_ACK, 111}, {wire::op::RC_WRITE_ONLY, 10}, {wire::op::RC_SEND_ONLY, 11}}));
  EXPECT_EQ(ctr(EngineCtr::tx_acks_behind), 1u);

  // A request and a response together behind an ACK: nothing moves either.
  EXPECT_EQ(ack_then_two(103, {wire::op::RC_SEND_ONLY, 8}, {wire::op::RC_READ_RESPONSE_ONLY, 104}),
            (V{{wire::op::RC_ACK, 103}, {wire::op::RC_SEND_ONLY, 8}, {wire::op::RC_READ_RESPONSE_ONLY, 104}}));
  EXPECT_EQ(ctr(EngineCtr::tx_acks_behind), 1u);
}

// A message longer than tx_batch leaves in several flushes within one
// turn: a held ACK it joins stays queued through the turn's full-batch
// flushes and leaves behind its last packet, so that the peer has the
// whole message when our ACK ends its CQ poll.
TEST_F(EngineWire, HeldAcksLeaveBehindTheWholeTurnOfRequests) {
  EngineConfig c = config_for(*pa, kIpA, 1);
  c.ack_hold_ns = 60'000'000'000;
  c.tx_batch = 4;
  a.reset();
  a = std::make_unique<Engine>(*pa, c);
  ASSERT_TRUE(a->init());
  resolve(*a, IpAddr::v4(kIpB));
  ASSERT_TRUE(run_until([&] { return mac_of(*a, IpAddr::v4(kIpB)).has_value(); }));
  a->run_sync([&] { EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), rc_frame(wire::op::RC_ACK, 100))); });
  a->run_sync([] {});
  const uint64_t sent0 = a->counters().get(EngineCtr::tx_frames);
  // One turn, seven packets of one message: two full batches go mid-turn.
  a->run_sync([&] {
    EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), rc_frame(wire::op::RC_WRITE_FIRST, 10)));
    for (uint32_t i = 11; i < 16; ++i) EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), rc_frame(wire::op::RC_WRITE_MIDDLE, i)));
    EXPECT_TRUE(send_kind(*a, IpAddr::v4(kIpB), rc_frame(wire::op::RC_WRITE_LAST, 16)));
  });
  EXPECT_EQ(a->counters().get(EngineCtr::tx_frames), sent0 + 8) << "all of it left within the turn";
  ASSERT_TRUE(run_until([&] { return sink_b.frames.size() == 8; }));
  for (uint32_t i = 0; i < 7; ++i) {
    const wire::PktInfo pi = wire::parse(sink_b.frames[i]);
    EXPECT_EQ(pi.psn.value(), 10 + i) << "the message in order";
    EXPECT_NE(pi.opcode, wire::op::RC_ACK);
  }
  EXPECT_EQ(wire::parse(sink_b.frames[7]).opcode, wire::op::RC_ACK) << "the ACK behind the message's last packet";
  EXPECT_EQ(wire::parse(sink_b.frames[7]).psn.value(), 100u);
}

// Engine::post_kick: an application thread's posts.  Each "post" here is
// a doorbell that sends one prepared frame to B, then post_kick, as
// verbs-shim's ibv_post_send does.
struct PostFrame {
  rte_mbuf* m;
};
void send_post_frame(Engine& e, void* ctx) {
  auto* p = static_cast<PostFrame*>(ctx);
  EXPECT_TRUE(e.send_to(IpAddr::v4(kIpB), p->m));
}

// Without an engine thread (inline progress) every post runs its own turn:
// its frame leaves before post_kick returns, however close the posts.
TEST_F(EngineWire, PostKickInlineSendsEachPostAtOnce) {
  resolve(*a, IpAddr::v4(kIpB));
  ASSERT_TRUE(run_until([&] { return mac_of(*a, IpAddr::v4(kIpB)).has_value(); }));
  std::vector<PostFrame> posts(20);
  for (PostFrame& p : posts) p = {rc_frame(wire::op::RC_WRITE_ONLY, 1)};
  const uint64_t sent0 = a->counters().get(EngineCtr::tx_frames);
  const uint64_t bursts0 = a->counters().get(EngineCtr::tx_bursts);
  for (size_t i = 0; i < posts.size(); ++i) {
    ASSERT_TRUE(a->ring({send_post_frame, &posts[i]}));
    a->progress().post_kick();
    EXPECT_EQ(a->counters().get(EngineCtr::tx_frames), sent0 + i + 1) << "post " << i;
  }
  EXPECT_EQ(a->counters().get(EngineCtr::tx_bursts), bursts0 + posts.size());
  ASSERT_TRUE(run_until([&] { return sink_b.frames.size() == posts.size(); }));
}

// With an engine thread, a burst of posts shares turns (far fewer
// tx_bursts than posts), and the posts left for a later turn leave
// although the application never calls again (it spins on memory): the
// engine thread takes them.  Each burst comes right after an assisting
// call (try_progress(Hold), as a CQ poll): the engine thread then naps
// (kAssistNapNs) and leaves the loop's lock free, so that without batching
// every post would run a turn and a tx_burst of its own.
TEST_F(EngineWire, PostKickBatchesABurstAndTheEngineThreadSendsItsTail) {
  EngineConfig c = config_for(*pa, kIpA, 1);
  c.post_batch_gap_ns = 1'000'000'000;  // 1 s: every post of a burst is within it, sanitizers or not
  a.reset();
  a = std::make_unique<Engine>(*pa, c);
  ASSERT_TRUE(a->init());
  resolve(*a, IpAddr::v4(kIpB));
  ASSERT_TRUE(run_until([&] { return mac_of(*a, IpAddr::v4(kIpB)).has_value(); }));
  a->start();
  constexpr size_t kBurst = 24;  // below kPostBatchMax: nothing but a turn sends the tail
  static_assert(kBurst < params::kPostBatchMax);
  // The engine thread naps off call when its core is taken from it (a
  // yield that came back after a scheduler slice) or it has been idle for
  // long: posts then run their own turns, as they should.  A round counts
  // when the thread was on call throughout its posts.
  constexpr int kRounds = 10, kMaxAttempts = 200;
  int counted = 0;
  size_t received = 0;
  for (int attempt = 0; attempt < kMaxAttempts && counted < kRounds; ++attempt) {
    std::vector<PostFrame> posts(kBurst);
    for (PostFrame& p : posts) p = {rc_frame(wire::op::RC_WRITE_ONLY, 1)};
    const uint64_t bursts0 = a->counters().get(EngineCtr::tx_bursts);
    a->progress().try_progress(Progress::Assist::Hold);
    const uint64_t off0 = a->progress().counters().get(ProgressCtr::off_call);
    const bool on_call = a->progress().on_call();
    for (PostFrame& p : posts) {
      ASSERT_TRUE(a->ring({send_post_frame, &p}));
      a->progress().post_kick();
    }
    const bool stayed = on_call && a->progress().counters().get(ProgressCtr::off_call) == off0;
    // No call into `a` from here: B's polls only, yielding (a thread that
    // spins beside the engine thread would take its core for a slice).
    received += kBurst;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (sink_b.frames.size() < received && std::chrono::steady_clock::now() < end) {
      b->poll();
      drain_raw();
      std::this_thread::yield();
    }
    ASSERT_EQ(sink_b.frames.size(), received) << "attempt " << attempt << ": posts left behind";
    if (!stayed) continue;
    ++counted;
    // The first post runs its turn (the gap since the last burst's end);
    // the rest share the engine thread's next turn, or two if one began
    // during the burst.
    EXPECT_LE(a->counters().get(EngineCtr::tx_bursts) - bursts0, 3u) << "attempt " << attempt;
  }
  EXPECT_GE(counted, 1) << "the engine thread was never on call through a burst (a machine too busy to tell)";

  // A burst, then the engine thread stops at once (the program exits):
  // the posts it was left still leave.
  std::vector<PostFrame> posts(kBurst);
  for (PostFrame& p : posts) p = {rc_frame(wire::op::RC_WRITE_ONLY, 1)};
  a->progress().try_progress(Progress::Assist::Hold);
  for (PostFrame& p : posts) {
    ASSERT_TRUE(a->ring({send_post_frame, &p}));
    a->progress().post_kick();
  }
  a->stop();
  received += kBurst;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (sink_b.frames.size() < received && std::chrono::steady_clock::now() < end) {
    b->poll();  // B's only: nothing runs A's loop after its thread
    drain_raw();
  }
  EXPECT_EQ(sink_b.frames.size(), received) << "posts left behind at stop";
}

// A port with a wait fd, as af_packet's socket is: an eventfd the test
// writes once it has put a frame on the wire for it.  rx_burst clears it
// first, so that a frame sent after the clear signals again.
class WaitFdPort final : public drivers::Port {
 public:
  explicit WaitFdPort(drivers::Port& inner) : inner_(inner), fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}
  ~WaitFdPort() override {
    if (fd_ >= 0) ::close(fd_);
  }
  WaitFdPort(const WaitFdPort&) = delete;
  WaitFdPort& operator=(const WaitFdPort&) = delete;
  void signal() {
    const uint64_t one = 1;
    EXPECT_EQ(::write(fd_, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  }
  uint16_t rx_burst(rte_mbuf** pkts, uint16_t n) override {
    uint64_t v;
    [[maybe_unused]] const ssize_t r = ::read(fd_, &v, sizeof v);
    return inner_.rx_burst(pkts, n);
  }
  uint16_t tx_burst(rte_mbuf** pkts, uint16_t n) override { return inner_.tx_burst(pkts, n); }
  MacAddr mac() const override { return inner_.mac(); }
  uint16_t mtu() const override { return inner_.mtu(); }
  bool link_up() const override { return inner_.link_up(); }
  drivers::PortStats stats() const override { return inner_.stats(); }
  rte_mempool* pool() const override { return inner_.pool(); }
  std::string name() const override { return inner_.name(); }
  int wait_fd() const override { return fd_; }

 private:
  drivers::Port& inner_;
  int fd_;
};

// Counts what it takes, from whichever thread runs the engine's loop.
struct CountingSink final : RoceSink {
  std::atomic<uint64_t> taken{0};
  void rx_burst(Engine& engine, RoceRx* pkts, uint16_t n) override {
    for (uint16_t i = 0; i < n; ++i) {
      if (!engine.accept_roce(pkts[i])) continue;
      rte_pktmbuf_free(pkts[i].m);
      taken.fetch_add(1, std::memory_order_relaxed);
    }
  }
};

// An application that polled its CQ once and went to spin on memory
// (ib_write_lat -c UC after its send completion) leaves the peer's next
// frame to the engine thread, which naps while the application's poll is
// recent: the frame ends that nap (the port's wait fd) and the thread
// takes it at once.  A plain nap held it to the nap's end, and the
// kernel's timer slack made that ~70 us.  An attempt counts when the
// thread was in its assist nap as the frame came (it may have been
// descheduled past the application's hold on a busy machine): without a
// wait on the port, none ever does.
TEST_F(EngineWire, AFrameEndsTheAssistNapOfAnApplicationThatStoppedPolling) {
  WaitFdPort wait_b(*pb);
  struct Stop {
    std::unique_ptr<Engine>& e;
    ~Stop() { e.reset(); }  // before wait_b goes, whatever ends the test
  } stop{b};
  b.reset();
  b = std::make_unique<Engine>(wait_b, config_for(*pb, kIpB, 2));
  ASSERT_TRUE(b->init());
  CountingSink sink;
  b->set_roce_sink(&sink);
  b->start();
  constexpr int kMaxAttempts = 200;
  int taken = 0;
  for (int attempt = 0; attempt < kMaxAttempts && taken == 0; ++attempt) {
    const uint64_t frames0 = b->progress().counters().get(ProgressCtr::assist_nap_frames);
    const uint64_t got0 = sink.taken.load();
    b->progress().try_progress(Progress::Assist::Hold);  // the application's one poll
    rte_mbuf* m = rc_frame(wire::op::RC_SEND_ONLY, 1);
    const MacAddr dst = pb->mac();
    std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), dst.data(), dst.size());
    ASSERT_EQ(pa->tx_burst(&m, 1), 1);
    wait_b.signal();
    // No call into `b` from here: the application spins on memory.
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (sink.taken.load() == got0 && std::chrono::steady_clock::now() < end) std::this_thread::yield();
    ASSERT_EQ(sink.taken.load(), got0 + 1) << "attempt " << attempt << ": the engine thread did not deliver";
    if (b->progress().counters().get(ProgressCtr::assist_nap_frames) > frames0) ++taken;
  }
  EXPECT_EQ(taken, 1) << "no frame ended an assist nap in " << kMaxAttempts << " attempts";
  EXPECT_GE(b->progress().counters().get(ProgressCtr::assist_naps), 1u);
}

// Progress: an idle engine thread goes through its modes in order — Poll,
// then Yield past kIdleSpinNs, then Nap past kIdleYieldNs — with one trace
// line per change (UROCE_TRACE=progress) and a counter per mode; a frame
// brings it back to Poll; stopped, it says so.
TEST_F(EngineWire, ProgressModesAreTracedAndCounted) {
  std::mutex mu;
  std::vector<std::string> lines;
  set_trace_hook([&](TraceCat c, std::string_view line) {
    if (c != TraceCat::Progress) return;
    std::lock_guard lock(mu);
    lines.emplace_back(line);
  });
  ASSERT_TRUE(trace_apply("progress"));
  auto seen = [&](std::string_view what) {
    std::lock_guard lock(mu);
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(what) != std::string::npos; });
  };
  EXPECT_EQ(a->progress().mode(), Progress::Mode::Stopped);
  a->start();
  // Idle: past kIdleYieldNs (2 ms) the thread naps.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!seen("-> Nap") && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(seen("Poll -> Yield")) << "the spin ends in yields";
  EXPECT_TRUE(seen("Yield -> Nap")) << "the yields end in naps";
  EXPECT_EQ(a->progress().mode(), Progress::Mode::Nap);
  const uint64_t naps = a->progress().counters().get(ProgressCtr::mode_nap);
  EXPECT_GE(naps, 1u);
  EXPECT_GE(a->progress().counters().get(ProgressCtr::mode_yield), 1u);
  // A frame (B's ARP request for A) brings it back to Poll: the engine
  // thread's own turn finds work.
  resolve(*b, IpAddr::v4(kIpA));
  const auto end2 = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!seen("Nap -> Poll") && std::chrono::steady_clock::now() < end2) {
    b->poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(seen("Nap -> Poll"));
  a->stop();
  EXPECT_EQ(a->progress().mode(), Progress::Mode::Stopped);
  ASSERT_TRUE(trace_apply("progress=off"));
  set_trace_hook({});
  // The trace names each mode, the counters the same.
  std::string all;
  a->for_each_counter([&](std::string_view name, std::string_view, uint64_t) { all += std::string(name) + " "; });
  for (const char* c : {"mode_poll", "mode_yield", "mode_nap", "mode_assist", "mode_sleep", "loop_busy", "off_call"})
    EXPECT_NE(all.find(c), std::string::npos) << c;
}

TEST_F(EngineWire, Ipv6NeighbourDiscovery) {
  resolve(*a, v6addr(2));
  ASSERT_TRUE(run_until([&] { return mac_of(*a, v6addr(2)).has_value(); }));
  EXPECT_EQ(*mac_of(*a, v6addr(2)), pb->mac());
  EXPECT_GE(a->counters().get(EngineCtr::tx_nd_solicit), 1u);
  EXPECT_EQ(b->counters().get(EngineCtr::tx_nd_advert), 2u);  // its unsolicited NA at start, then ours
}

TEST_F(EngineWire, AnswersIcmpEcho) {
  LocalAddrs me;
  me.mac = raw->mac();
  std::array<uint8_t, 128> buf{};
  const std::array<uint8_t, 4> data{1, 2, 3, 4};
  const size_t n = build_echo_request(buf.data(), me, pb->mac(), IpAddr::v4(0x0A000063), IpAddr::v4(kIpB), 1, 1, data);
  rte_mbuf* m = frame(buf.data(), n, raw->pool());
  ASSERT_EQ(raw->tx_burst(&m, 1), 1);
  std::vector<uint8_t> reply;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (reply.empty() && std::chrono::steady_clock::now() < end) {
    b->poll();
    rte_mbuf* in[8];
    const uint16_t k = raw->rx_burst(in, 8);
    for (uint16_t i = 0; i < k; ++i) {
      const uint8_t* p = rte_pktmbuf_mtod(in[i], const uint8_t*);
      const auto pi = wire::parse({p, in[i]->data_len});
      if (pi.cls == wire::FrameClass::ICMPv4 && wire::IcmpC(p + pi.l4_off).type() == wire::kIcmpEchoReply) {
        reply.assign(p, p + in[i]->data_len);
      }
      rte_pktmbuf_free(in[i]);
    }
  }
  ASSERT_FALSE(reply.empty());
  EXPECT_EQ(b->counters().get(EngineCtr::tx_icmp_reply), 1u);
}

TEST_F(EngineWire, ArpSurvivesLossThroughRetries) {
  auto spec = drivers::parse_fault_spec("drop=0.5,seed=7");
  ASSERT_TRUE(spec) << spec.error().message;
  ASSERT_TRUE(wire.set_all_faults(*spec));
  resolve(*a, IpAddr::v4(kIpB));
  ASSERT_TRUE(run_until([&] { return mac_of(*a, IpAddr::v4(kIpB)).has_value(); }));
}

TEST_F(EngineWire, UnreachableNeighbourFails) {
  std::vector<std::pair<IpAddr, bool>> results;
  a->set_resolve_hook([&](const IpAddr& ip, bool ok) { results.emplace_back(ip, ok); });
  resolve(*a, IpAddr::v4(0x0A0000FE));
  ASSERT_TRUE(run_until([&] { return !results.empty(); }));
  EXPECT_FALSE(results[0].second);
  EXPECT_EQ(a->counters().get(EngineCtr::neigh_failed), 1u);
  EXPECT_EQ(a->counters().get(EngineCtr::tx_arp_request), 1u + 5u);  // gratuitous + 5 tries
}

// Garbage at engine B from the raw port: every frame is counted under the
// right reason and B keeps working.
TEST_F(EngineWire, GarbageFloodIsCountedByReason) {
  const MacAddr to_b = pb->mac();
  std::vector<std::vector<uint8_t>> frames;
  std::map<std::string, uint64_t> expect;
  auto add = [&](std::vector<uint8_t> f, const std::string& reason) {
    frames.push_back(std::move(f));
    ++expect[reason];
  };
  const auto good = roce_frame(wire::op::UD_SEND_ONLY, 0x11, to_b, kIpB);
  // Truncated RoCE frames: every cut inside the UDP payload.
  for (size_t cut = 14 + 20 + 8 + 1; cut < good.size(); cut += 7) {
    auto f = std::vector<uint8_t>(good.begin(), good.begin() + static_cast<long>(cut));
    add(f, "drop_malformed");
  }
  auto bad_icrc = good;
  bad_icrc[60] ^= 0x01;
  add(bad_icrc, "drop_icrc");
  add(roce_frame(wire::op::UD_SEND_ONLY, 0x99, to_b, kIpB), "drop_unknown_qpn");
  add(roce_frame(0x15, 0x11, to_b, kIpB), "drop_unknown_opcode");
  add(roce_frame(wire::op::UD_SEND_ONLY, 0x11, to_b, 0x0A000077), "drop_not_our_ip");
  add(roce_frame(wire::op::UD_SEND_ONLY, 0x11, MacAddr{2, 9, 9, 9, 9, 9}, kIpB), "drop_not_our_mac");
  auto v5 = good;
  v5[14] = 0x55;  // IP version 5 in an IPv4 EtherType
  add(v5, "drop_malformed");
  auto tcp = good;
  tcp[14 + 9] = 6;  // TCP
  add(tcp, "drop_other_ipv4");
  auto lldp = good;
  lldp[12] = 0x88;
  lldp[13] = 0xcc;
  add(lldp, "drop_other_ethertype");
  std::mt19937_64 rng(42);
  for (int i = 0; i < 200; ++i) {
    std::vector<uint8_t> f(14 + rng() % 200);
    for (auto& byte : f) byte = static_cast<uint8_t>(rng());
    std::memcpy(f.data(), to_b.data(), 6);
    f[12] = 0x08;  // IPv4 EtherType with random contents
    f[13] = 0x00;
    f[14] = static_cast<uint8_t>(0x40 | (rng() % 16));  // version 4, random IHL
    frames.push_back(std::move(f));  // reason depends on the bytes: counted as a whole below
  }
  uint64_t sent = 0;
  for (const auto& f : frames) {
    rte_mbuf* m = frame(f.data(), f.size(), raw->pool());
    ASSERT_EQ(raw->tx_burst(&m, 1), 1);
    ++sent;
    if (sent % 16 == 0) b->poll();
  }
  ASSERT_TRUE(run_until([&] { return b->counters().get(EngineCtr::rx_frames) >= sent + 0; }));
  const auto& c = b->counters();
  EXPECT_EQ(c.get(EngineCtr::drop_icrc), expect["drop_icrc"]);
  EXPECT_EQ(c.get(EngineCtr::drop_unknown_qpn), expect["drop_unknown_qpn"]);
  EXPECT_EQ(c.get(EngineCtr::drop_unknown_opcode), expect["drop_unknown_opcode"]);
  EXPECT_EQ(c.get(EngineCtr::drop_not_our_ip), expect["drop_not_our_ip"]);
  EXPECT_EQ(c.get(EngineCtr::drop_not_our_mac), expect["drop_not_our_mac"]);
  EXPECT_GE(c.get(EngineCtr::drop_malformed), expect["drop_malformed"]);
  EXPECT_GE(c.get(EngineCtr::drop_other_ipv4), expect["drop_other_ipv4"]);
  EXPECT_EQ(c.get(EngineCtr::drop_other_ethertype), expect["drop_other_ethertype"]);
  EXPECT_EQ(c.get(EngineCtr::rx_roce), 0u);
  // Every frame B received is accounted for by exactly one reason (plus
  // the gratuitous ARP/NA from A at start).
  uint64_t accounted = 0;
  for (auto ctr : {EngineCtr::rx_roce, EngineCtr::rx_arp, EngineCtr::rx_icmp, EngineCtr::rx_icmp6,
                   EngineCtr::drop_not_our_mac, EngineCtr::drop_not_our_ip, EngineCtr::drop_malformed,
                   EngineCtr::drop_unknown_qpn, EngineCtr::drop_unknown_opcode, EngineCtr::drop_icrc,
                   EngineCtr::drop_other_ipv4, EngineCtr::drop_other_ipv6, EngineCtr::drop_other_ethertype}) {
    accounted += c.get(ctr);
  }
  EXPECT_EQ(accounted, c.get(EngineCtr::rx_frames));
  uint64_t by_reason = 0;
  for (size_t i = 1; i < wire::kNumParseErrors; ++i) by_reason += b->parse_errors(static_cast<wire::ParseError>(i));
  EXPECT_EQ(by_reason, c.get(EngineCtr::drop_malformed));
  // Still alive: A resolves B.
  resolve(*a, IpAddr::v4(kIpB));
  ASSERT_TRUE(run_until([&] { return mac_of(*a, IpAddr::v4(kIpB)).has_value(); }));
}

}  // namespace
}  // namespace uroce::transport
