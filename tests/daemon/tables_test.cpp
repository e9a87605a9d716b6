// uroced's tables, without a daemon (suite unit): the rdma_cm port space
// (Linux's binding rules across processes), the QPN space (random,
// quarantined, bounded per client), the CM router (which client a CM
// message is for, what a client may send, what is sent for a client that
// went away) and the shared ring (what a hostile producer cannot do to
// its consumer).
#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <set>
#include <vector>

#include "cm/msg.hpp"
#include "cm/cma_hdr.hpp"
#include "daemon/cm_router.hpp"
#include "daemon/port_space.hpp"
#include "daemon/qpn_space.hpp"
#include "drivers/daemon/shm_ring.hpp"

namespace uroce::daemon {
namespace {

using transport::IpAddr;

IpAddr v4(uint32_t a) { return IpAddr::v4(a); }
constexpr int kTcp = 0x0106;
constexpr int kUdp = 0x0111;

// ---- PortSpace ------------------------------------------------------------------------

TEST(PortSpace, TheSameAddressAndPortTwiceIsInUseAcrossClients) {
  PortSpace ps(1);
  uint16_t port = 0;
  ASSERT_EQ(ps.bind(3, 100, kTcp, v4(0x0A000001), false, 7471, false, false, &port), 0);
  EXPECT_EQ(port, 7471);
  uint16_t other = 0;
  EXPECT_EQ(ps.bind(4, 200, kTcp, v4(0x0A000001), false, 7471, false, false, &other), EADDRINUSE);
  // Another port space, another port, another address: free.
  EXPECT_EQ(ps.bind(4, 201, kUdp, v4(0x0A000001), false, 7471, false, false, &other), 0);
  EXPECT_EQ(ps.bind(4, 202, kTcp, v4(0x0A000001), false, 7472, false, false, &other), 0);
  EXPECT_EQ(ps.bind(4, 203, kTcp, v4(0x0A000002), false, 7471, false, false, &other), 0);
}

TEST(PortSpace, AWildcardOverlapsEveryAddressOfItsFamily) {
  PortSpace ps(1);
  uint16_t port = 0;
  ASSERT_EQ(ps.bind(3, 1, kTcp, v4(0), true, 5000, false, false, &port), 0);
  EXPECT_EQ(ps.bind(4, 2, kTcp, v4(0x0A000001), false, 5000, false, false, &port), EADDRNOTAVAIL);
  // IPv6 wildcard covers IPv4 unless AFONLY (cma_check_port).
  PortSpace ps6(1);
  ASSERT_EQ(ps6.bind(3, 1, kTcp, IpAddr{}, true, 5000, false, false, &port), 0);
  EXPECT_EQ(ps6.bind(4, 2, kTcp, v4(0x0A000001), false, 5000, false, false, &port), EADDRNOTAVAIL);
  PortSpace ps6only(1);
  ASSERT_EQ(ps6only.bind(3, 1, kTcp, IpAddr{}, true, 5000, false, true, &port), 0);
  EXPECT_EQ(ps6only.bind(4, 2, kTcp, v4(0x0A000001), false, 5000, false, false, &port), 0);
}

TEST(PortSpace, ReuseaddrSharesAPortUntilOneListens) {
  PortSpace ps(1);
  uint16_t port = 0;
  ASSERT_EQ(ps.bind(3, 1, kTcp, v4(0x0A000001), false, 6000, true, false, &port), 0);
  ASSERT_EQ(ps.bind(4, 2, kTcp, v4(0x0A000001), false, 6000, true, false, &port), 0);
  EXPECT_EQ(ps.listen(3, 1, true), EADDRINUSE);  // Linux checks again at listen
  ASSERT_EQ(ps.unbind(4, 2), 0);
  EXPECT_EQ(ps.listen(3, 1, true), 0);
  EXPECT_EQ(ps.bind(5, 3, kTcp, v4(0x0A000001), false, 6000, true, false, &port), EADDRINUSE);
}

TEST(PortSpace, PortZeroPicksAnEphemeralPortNobodyHolds) {
  PortSpace ps(7);
  std::set<uint16_t> seen;
  for (uint64_t t = 1; t <= 200; ++t) {
    uint16_t port = 0;
    ASSERT_EQ(ps.bind(3, t, kTcp, v4(0x0A000001), false, 0, false, false, &port), 0);
    EXPECT_GE(port, PortSpace::kEphemeralLow);
    EXPECT_LE(port, PortSpace::kEphemeralHigh);
    EXPECT_TRUE(seen.insert(port).second) << "port " << port << " handed out twice";
  }
}

TEST(PortSpace, ListenersAreFoundByExactAddressBeforeAWildcard) {
  PortSpace ps(1);
  uint16_t port = 0;
  ASSERT_EQ(ps.bind(3, 1, kTcp, v4(0), true, 7000, false, false, &port), 0);
  EXPECT_FALSE(ps.listener(kTcp, 7000, v4(0x0A000001)));  // bound, not listening
  ASSERT_EQ(ps.listen(3, 1, true), 0);
  auto l = ps.listener(kTcp, 7000, v4(0x0A000001));
  ASSERT_TRUE(l);
  EXPECT_EQ(l->client, 3u);
  // Another client may not take the exact address of a port a wildcard
  // holds (EADDRNOTAVAIL), but one on another port is found for its own.
  ASSERT_EQ(ps.bind(4, 2, kTcp, v4(0x0A000001), false, 7001, false, false, &port), 0);
  ASSERT_EQ(ps.listen(4, 2, true), 0);
  EXPECT_EQ(ps.listener(kTcp, 7001, v4(0x0A000001))->client, 4u);
  EXPECT_FALSE(ps.listener(kTcp, 7001, v4(0x0A000002)));
  EXPECT_FALSE(ps.listener(kUdp, 7000, v4(0x0A000001)));
}

TEST(PortSpace, AClientThatGoesReleasesEveryBinding) {
  PortSpace ps(1);
  uint16_t port = 0;
  for (uint64_t t = 1; t <= 5; ++t) ASSERT_EQ(ps.bind(3, t, kTcp, v4(0x0A000001), false, 0, false, false, &port), 0);
  ASSERT_EQ(ps.bind(4, 1, kTcp, v4(0x0A000001), false, 9000, false, false, &port), 0);
  EXPECT_EQ(ps.size(), 6u);
  ps.release(3);
  EXPECT_EQ(ps.size(), 1u);
  EXPECT_EQ(ps.unbind(3, 1), ENOENT);
  EXPECT_EQ(ps.bind(4, 1, kTcp, v4(0x0A000001), false, 9001, false, false, &port), EEXIST);  // token bound
}

TEST(PortSpace, AListenerItsProgramEndedLeavesItsPortRelisteningForAWhile) {
  uint64_t now = 1'000'000'000;
  PortSpace ps(1, [&] { return now; });
  uint16_t port = 0;
  ASSERT_EQ(ps.bind(3, 1, kTcp, v4(0x0A000001), false, 7000, false, false, &port), 0);
  EXPECT_FALSE(ps.relistening(kTcp, 7000));  // bound, never listened
  ASSERT_EQ(ps.listen(3, 1, true), 0);
  EXPECT_FALSE(ps.relistening(kTcp, 7000));
  ASSERT_EQ(ps.unbind(3, 1), 0);  // rdma_destroy_id of the listener
  EXPECT_TRUE(ps.relistening(kTcp, 7000));
  EXPECT_FALSE(ps.relistening(kTcp, 7001));
  EXPECT_FALSE(ps.relistening(kUdp, 7000));
  now += PortSpace::kRelistenGraceNs - 1;
  EXPECT_TRUE(ps.relistening(kTcp, 7000));
  now += 1;
  EXPECT_FALSE(ps.relistening(kTcp, 7000));
  // listen(off) ends one too.
  ASSERT_EQ(ps.bind(3, 2, kTcp, v4(0x0A000001), false, 7002, false, false, &port), 0);
  ASSERT_EQ(ps.listen(3, 2, true), 0);
  ASSERT_EQ(ps.listen(3, 2, false), 0);
  EXPECT_TRUE(ps.relistening(kTcp, 7002));
  // A program that went away leaves no grace: its port refuses at once.
  ASSERT_EQ(ps.bind(4, 1, kTcp, v4(0x0A000001), false, 7003, false, false, &port), 0);
  ASSERT_EQ(ps.listen(4, 1, true), 0);
  ps.release(4);
  EXPECT_FALSE(ps.relistening(kTcp, 7003));
}

// ---- QpnSpace -------------------------------------------------------------------------

struct Owner {
  int id;
};

TEST(QpnSpace, QpnsAreRandomUniqueAndNeverTheGsisOrBeyondTheLimit) {
  Owner a{1};
  QpnSpace<Owner> s(1024, 1'000'000'000, 1024, 42);
  std::set<uint32_t> got;
  for (uint32_t i = 0; i < 1022; ++i) {
    const uint32_t q = s.alloc(&a, i, 0);
    ASSERT_NE(q, 0u) << "after " << i;
    EXPECT_GE(q, 2u);
    EXPECT_LT(q, 1024u);
    EXPECT_TRUE(got.insert(q).second);
    EXPECT_EQ(s.owner(q), &a);
  }
  EXPECT_EQ(s.alloc(&a, 1022, 0), 0u);  // the space is used up
}

TEST(QpnSpace, AFreedQpnWaitsOutItsQuarantine) {
  Owner a{1}, b{2};
  constexpr uint64_t kQuarantine = 60'000'000'000;
  QpnSpace<Owner> s(4, kQuarantine, 100, 1);  // two usable QPNs: 2 and 3
  const uint32_t q1 = s.alloc(&a, 0, 1000);
  const uint32_t q2 = s.alloc(&a, 1, 1000);
  ASSERT_NE(q1, 0u);
  ASSERT_NE(q2, 0u);
  EXPECT_FALSE(s.free(&b, q1, 2000));  // not b's
  EXPECT_TRUE(s.free(&a, q1, 2000));
  EXPECT_EQ(s.owner(q1), nullptr);
  EXPECT_TRUE(s.in_quarantine(q1, 2000 + kQuarantine - 1));
  EXPECT_EQ(s.alloc(&b, 0, 2000 + kQuarantine - 1), 0u);  // a late packet for q1 must not reach b
  EXPECT_EQ(s.alloc(&b, 0, 2000 + kQuarantine + 1), q1);
  EXPECT_EQ(s.free_all(&a, 5000), 1u);
  EXPECT_EQ(s.owner(q2), nullptr);
}

TEST(QpnSpace, OneClientCannotTakeTheWholeSpace) {
  Owner a{1}, b{2};
  QpnSpace<Owner> s(1024, 0, 16, 3);
  for (uint32_t i = 0; i < 16; ++i) ASSERT_NE(s.alloc(&a, i, 0), 0u);
  EXPECT_EQ(s.alloc(&a, 16, 0), 0u);
  EXPECT_NE(s.alloc(&b, 0, 0), 0u);
}

// ---- CmRouter ---------------------------------------------------------------------------

wire::Ipv6Addr gid4(uint32_t a) {
  wire::Ipv6Addr g{};
  g[10] = g[11] = 0xff;
  g[12] = static_cast<uint8_t>(a >> 24);
  g[13] = static_cast<uint8_t>(a >> 16);
  g[14] = static_cast<uint8_t>(a >> 8);
  g[15] = static_cast<uint8_t>(a);
  return g;
}

constexpr uint32_t kPeerIp = 0x0A000002;
constexpr uint32_t kOurIp = 0x0A000001;

// A REQ from the peer to rdma_cm port `port` at `dst`, its comm ID `id`.
cm::MadBuf req(uint32_t id, uint16_t port, uint32_t dst, uint32_t qpn, uint64_t tid = 77) {
  cm::ReqMsg r;
  r.local_comm_id = id;
  r.service_id = cm::cma_service_id(cm::PortSpace::Tcp, port);
  r.local_ca_guid = 0x1122334455667788ull;
  r.local_qpn = qpn;
  const cm::CmaHdr h = cm::CmaHdr::ipv4(kPeerIp, dst, 40000);
  cm::write_cma_hdr(h, r.private_data.data());
  return cm::build_mad(r, tid);
}

struct RouterFixture : ::testing::Test {
  std::set<std::pair<ClientId, uint32_t>> owned{{3, 0x100}, {4, 0x200}};
  std::optional<ClientId> listener;
  CmRouter router{CmRouter::Hooks{
      [this](int ps, uint16_t port, const IpAddr& dst) -> std::optional<ClientId> {
        if (ps == kTcp && port == 7471 && dst == v4(kOurIp)) return listener;
        return std::nullopt;
      },
      [this](ClientId c, uint32_t q) { return owned.count({c, q}) != 0; },
      [this](int ps, uint16_t port) { return ps == kTcp && port == relistening_port; },
  }};
  uint16_t relistening_port = 0;
  wire::Ipv6Addr peer = gid4(kPeerIp);
};

TEST_F(RouterFixture, AReqGoesToItsListenersClientAndElseToTheDaemon) {
  EXPECT_EQ(router.route_in(peer, req(0xAAAA, 7471, kOurIp, 0x55), 0), kDaemonCm);  // nobody listens
  listener = 3;
  EXPECT_EQ(router.route_in(peer, req(0xAAAB, 7471, kOurIp, 0x55), 0), 3u);
  EXPECT_EQ(router.route_in(peer, req(0xAAAB, 7471, kOurIp, 0x55), 0), 3u);  // its retry, too
  EXPECT_EQ(router.route_in(peer, req(0xAAAC, 7472, kOurIp, 0x55), 0), kDaemonCm);
  // A service ID that is not rdma_cm's: the daemon's CM rejects it.
  cm::ReqMsg raw;
  raw.local_comm_id = 9;
  raw.service_id = 0x1234;
  EXPECT_EQ(router.route_in(peer, cm::build_mad(raw, 1), 0), kDaemonCm);
}

TEST_F(RouterFixture, AReqForAPortWhoseListenerJustEndedIsLeftForTheRetry) {
  relistening_port = 7471;
  EXPECT_EQ(router.route_in(peer, req(0xBBBA, 7471, kOurIp, 0x55), 0), kNoOne);
  EXPECT_EQ(router.counters().get(CmRouterCtr::in_held_relisten), 1u);
  EXPECT_EQ(router.counters().get(CmRouterCtr::in_to_daemon), 0u);
  EXPECT_EQ(router.route_in(peer, req(0xBBBB, 7472, kOurIp, 0x55), 0), kDaemonCm);  // another port: REJ
  listener = 3;  // the program listens again: the retry gets through
  EXPECT_EQ(router.route_in(peer, req(0xBBBA, 7471, kOurIp, 0x55), 0), 3u);
}

TEST_F(RouterFixture, AnswersGoToTheClientWhoseIdTheyName) {
  listener = 3;
  ASSERT_EQ(router.route_in(peer, req(0xAAAB, 7471, kOurIp, 0x55), 0), 3u);
  // Client 3 answers with a REP naming its QP and its own comm ID.
  cm::RepMsg rep;
  rep.local_comm_id = 0x3003;
  rep.remote_comm_id = 0xAAAB;
  rep.local_qpn = 0x100;
  EXPECT_EQ(router.check_out(3, peer, cm::build_mad(rep, 77), 0), CmRouter::Verdict::Pass);
  // The peer's RTU, and later its DREQ, come back to 3.
  cm::RtuMsg rtu;
  rtu.local_comm_id = 0xAAAB;
  rtu.remote_comm_id = 0x3003;
  EXPECT_EQ(router.route_in(peer, cm::build_mad(rtu, 78), 0), 3u);
  cm::DreqMsg dreq;
  dreq.local_comm_id = 0xAAAB;
  dreq.remote_comm_id = 0x3003;
  EXPECT_EQ(router.route_in(peer, cm::build_mad(dreq, 79), 0), 3u);
  // An answer naming no id of anyone's: the daemon's.
  dreq.remote_comm_id = 0x9999;
  EXPECT_EQ(router.route_in(peer, cm::build_mad(dreq, 80), 0), kDaemonCm);
}

TEST_F(RouterFixture, AClientSendsOnlyForItsOwnQpsAndIds) {
  // A REQ naming another client's QP is refused.
  cm::ReqMsg r;
  r.local_comm_id = 0x4004;
  r.local_qpn = 0x200;  // client 4's
  EXPECT_EQ(router.check_out(3, peer, cm::build_mad(r, 1), 0), CmRouter::Verdict::NotOwnQp);
  r.local_qpn = 0x100;
  EXPECT_EQ(router.check_out(3, peer, cm::build_mad(r, 1), 0), CmRouter::Verdict::Pass);
  // Client 4 may not reuse client 3's comm ID, nor speak for it.
  r.local_qpn = 0x200;
  EXPECT_EQ(router.check_out(4, peer, cm::build_mad(r, 2), 0), CmRouter::Verdict::Collision);
  cm::DreqMsg d;
  d.local_comm_id = 0x4004;
  EXPECT_EQ(router.check_out(4, peer, cm::build_mad(d, 3), 0), CmRouter::Verdict::NotOwnId);
  EXPECT_EQ(router.check_out(3, peer, cm::build_mad(d, 3), 0), CmRouter::Verdict::Pass);
  // A REP for a REQ nobody gave it.
  cm::RepMsg rep;
  rep.local_comm_id = 0x4005;
  rep.remote_comm_id = 0xBBBB;
  rep.local_qpn = 0x200;
  EXPECT_EQ(router.check_out(4, peer, cm::build_mad(rep, 4), 0), CmRouter::Verdict::NotOwnId);
  // Not a CM MAD at all.
  cm::MadBuf junk{};
  junk[0] = 1;
  junk[1] = 0x04;  // performance management
  EXPECT_EQ(router.check_out(3, peer, junk, 0), CmRouter::Verdict::NotCm);
  EXPECT_EQ(router.counters().get(CmRouterCtr::out_refused_qpn), 1u);
  EXPECT_EQ(router.counters().get(CmRouterCtr::out_refused_collision), 1u);
}

TEST_F(RouterFixture, AnXrcConnectionNamesItsQpsWhereAnnexA14PutsThem) {
  // The REQ names the XRC send QP in Local QPN, the REP the receive QP in
  // Local EECN (its Local QPN zero), as Linux's ib_cm sends them.
  cm::ReqMsg r;
  r.local_comm_id = 0x3010;
  r.local_qpn = 0x100;
  r.transport_service_type = static_cast<uint8_t>(cm::CmTransport::Xrc);
  r.extended_transport_type = cm::kExtTransportXrc;
  EXPECT_EQ(router.check_out(3, peer, cm::build_mad(r, 9), 0), CmRouter::Verdict::Pass);
  listener = 4;
  auto in = req(0xB010, 7471, kOurIp, 0x66);
  cm::ReqView(in.data() + cm::kMadHdrSize).set_transport_service_type(static_cast<uint8_t>(cm::CmTransport::Xrc));
  ASSERT_EQ(router.route_in(peer, in, 0), 4u);
  cm::RepMsg rep;
  rep.local_comm_id = 0x4010;
  rep.remote_comm_id = 0xB010;
  rep.local_eecn = 0x200;  // client 4's receive QP
  EXPECT_EQ(router.check_out(4, peer, cm::build_mad(rep, 10), 0), CmRouter::Verdict::Pass);
  rep.local_comm_id = 0x4011;
  rep.local_eecn = 0x100;  // client 3's: not client 4's to answer with
  EXPECT_EQ(router.check_out(4, peer, cm::build_mad(rep, 10), 0), CmRouter::Verdict::NotOwnQp);
}

TEST_F(RouterFixture, AClientThatGoesLeavesAFarewellForEachConnection) {
  listener = 3;
  // Passive connection, established (REQ in, REP out, RTU in).
  ASSERT_EQ(router.route_in(peer, req(0xA001, 7471, kOurIp, 0x77, 500), 0), 3u);
  cm::RepMsg rep;
  rep.local_comm_id = 0x3001;
  rep.remote_comm_id = 0xA001;
  rep.local_qpn = 0x100;
  ASSERT_EQ(router.check_out(3, peer, cm::build_mad(rep, 500), 0), CmRouter::Verdict::Pass);
  cm::RtuMsg rtu;
  rtu.local_comm_id = 0xA001;
  rtu.remote_comm_id = 0x3001;
  ASSERT_EQ(router.route_in(peer, cm::build_mad(rtu, 500), 0), 3u);
  // A REQ it was given and never answered.
  ASSERT_EQ(router.route_in(peer, req(0xA002, 7471, kOurIp, 0x78, 600), 0), 3u);
  // A connection the peer asked to end (DREQ in, no DREP yet).
  cm::ReqMsg r;
  r.local_comm_id = 0x3003;
  r.local_qpn = 0x100;
  ASSERT_EQ(router.check_out(3, peer, cm::build_mad(r, 700), 0), CmRouter::Verdict::Pass);
  cm::RepMsg prep;
  prep.local_comm_id = 0xA003;
  prep.remote_comm_id = 0x3003;
  prep.local_qpn = 0x79;
  ASSERT_EQ(router.route_in(peer, cm::build_mad(prep, 700), 0), 3u);
  cm::RtuMsg ortu;
  ortu.local_comm_id = 0x3003;
  ortu.remote_comm_id = 0xA003;
  ASSERT_EQ(router.check_out(3, peer, cm::build_mad(ortu, 700), 0), CmRouter::Verdict::Pass);
  cm::DreqMsg dreq;
  dreq.local_comm_id = 0xA003;
  dreq.remote_comm_id = 0x3003;
  ASSERT_EQ(router.route_in(peer, cm::build_mad(dreq, 800), 0), 3u);

  auto f = router.client_gone(3, 1);
  ASSERT_EQ(f.size(), 3u);
  std::map<CmRouter::Farewell::Kind, CmRouter::Farewell> by;
  for (const auto& x : f) by[x.kind] = x;
  const auto& disc = by.at(CmRouter::Farewell::Kind::Disconnect);
  EXPECT_EQ(disc.local_id, 0x3001u);
  EXPECT_EQ(disc.remote_id, 0xA001u);
  EXPECT_EQ(disc.remote_qpn, 0x77u);
  EXPECT_EQ(disc.local_qpn, 0x100u);
  EXPECT_EQ(disc.peer, peer);
  const auto& rej = by.at(CmRouter::Farewell::Kind::RejectReq);
  EXPECT_EQ(rej.remote_id, 0xA002u);
  EXPECT_EQ(rej.tid, 600u);
  const auto& drep = by.at(CmRouter::Farewell::Kind::Drep);
  EXPECT_EQ(drep.local_id, 0x3003u);
  EXPECT_EQ(drep.remote_id, 0xA003u);
  EXPECT_EQ(drep.tid, 800u);
  // What arrives for them now is the daemon's CM's.
  EXPECT_EQ(router.route_in(peer, cm::build_mad(dreq, 801), 2), kDaemonCm);
  EXPECT_TRUE(router.client_gone(3, 3).empty());
}

// ---- ShmRing ----------------------------------------------------------------------------

struct RingFixture : ::testing::Test {
  static constexpr uint32_t kSlots = 8;
  static constexpr uint32_t kSlotBytes = 256;
  std::vector<uint8_t> mem = std::vector<uint8_t>(kSlots * kSlotBytes);
  drivers::daemon::SharedIndex head, tail;
  drivers::daemon::ShmRing prod{mem.data(), kSlots, kSlotBytes, &head, &tail};
  drivers::daemon::ShmRing cons{mem.data(), kSlots, kSlotBytes, &head, &tail};
};

TEST_F(RingFixture, RecordsCrossInOrderAndAFullRingRefuses) {
  for (uint32_t i = 0; i < kSlots; ++i) {
    const uint32_t v = i * 7;
    ASSERT_TRUE(prod.put(drivers::daemon::RecordKind::kFrame, &v, sizeof v));
  }
  const uint32_t extra = 1;
  EXPECT_FALSE(prod.put(drivers::daemon::RecordKind::kFrame, &extra, sizeof extra));
  EXPECT_EQ(cons.ready(), 0u);  // nothing published yet
  prod.publish();
  ASSERT_EQ(cons.ready(), kSlots);
  for (uint32_t i = 0; i < kSlots; ++i) {
    const auto h = cons.header(i);
    ASSERT_EQ(h.len, 4u);
    uint32_t v;
    std::memcpy(&v, cons.payload(i), 4);
    EXPECT_EQ(v, i * 7);
  }
  cons.consume(kSlots);
  EXPECT_EQ(prod.free_slots(), kSlots);
  const uint8_t big[kSlotBytes] = {};
  EXPECT_FALSE(prod.put(drivers::daemon::RecordKind::kFrame, big, sizeof big));  // larger than a slot
}

TEST_F(RingFixture, AProducerThatLiesIsSeenAndItsLengthsAreBounded) {
  // A tail beyond what the ring holds.
  tail.v.store(kSlots + 1);
  EXPECT_EQ(cons.ready(), UINT32_MAX);
  // A slot that claims more bytes than it has.
  tail.v.store(1);
  drivers::daemon::SlotHeader h{100000, 1, 0};
  std::memcpy(mem.data(), &h, sizeof h);
  ASSERT_EQ(cons.ready(), 1u);
  EXPECT_GT(cons.header(0).len, cons.payload_max());
  // Wrapping indexes are fine.
  drivers::daemon::SharedIndex h2, t2;
  h2.v.store(UINT32_MAX - 1);
  t2.v.store(UINT32_MAX - 1);
  drivers::daemon::ShmRing p2{mem.data(), kSlots, kSlotBytes, &h2, &t2};
  drivers::daemon::ShmRing c2{mem.data(), kSlots, kSlotBytes, &h2, &t2};
  p2.producer_sync();
  c2.consumer_sync();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(p2.put(drivers::daemon::RecordKind::kFrame, &i, sizeof i));
  p2.publish();
  EXPECT_EQ(c2.ready(), 4u);
}

TEST(ShmGeometry, SlotsHoldAWholeFrameAndRingsStayWithinTheirBudget) {
  for (uint32_t frame : {1522u, 4200u, 9022u}) {
    const auto g = drivers::daemon::geometry_for(frame);
    EXPECT_TRUE(g.valid());
    EXPECT_GE(g.payload_max(), frame);
    EXPECT_LE(size_t{g.tx_slots} * g.slot_bytes, 4u << 20);
    EXPECT_LE(size_t{g.rx_slots} * g.slot_bytes, 8u << 20);
    EXPECT_GE(g.tx_slots, 64u);
    EXPECT_GE(g.rx_slots, g.tx_slots);
  }
  // At MTU 1500 the receive ring holds 4096 frames: 4 MiB of READ
  // response at MTU 1024 arrives whole however late the client runs.
  EXPECT_EQ(drivers::daemon::geometry_for(1522).rx_slots, 4096u);
  EXPECT_EQ(drivers::daemon::geometry_for(1522).tx_slots, 1024u);
}

}  // namespace
}  // namespace uroce::daemon
