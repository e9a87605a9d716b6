// Attacks on the connection manager (suite 'security'): two CMs connected
// through the in-memory MAD wire (tests/cm/loop_port.hpp), and a third
// party on another GID that has read every MAD of theirs off the wire and
// sends its own straight into one of them.
//
//   forged DREQ / REJ / stale REQ with sniffed comm IDs   end nothing
//   DREQ for unknown IDs                                  not reflected
//   REQ flood                                             bounded, counted
//   TimeWait flood                                        bounded, counted
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "cm/cm.hpp"
#include "cm/cma_hdr.hpp"
#include "tests/cm/loop_port.hpp"

namespace uroce::test {
namespace {

constexpr uint64_t kGuidA = 0x0002c9fffe000001ull;
constexpr uint64_t kGuidB = 0x0002c9fffe000002ull;
constexpr uint8_t kTimeout = 12;  // 16.8 ms
constexpr uint64_t kTimeoutNs = cm_timeout_ns(kTimeout);
constexpr uint64_t kTimewaitNs = 40'000'000;
constexpr uint64_t kMs = 1'000'000;
constexpr uint32_t kEvilIp = 0x0A5B0042;  // 10.91.0.66

class CmAttack : public ::testing::Test {
 protected:
  void SetUp() override {
    make(0, kGuidA, {});
    make(1, kGuidB, {});
    evil.gid = ipv4_mapped_gid(kEvilIp);
  }

  void make(int side, uint64_t guid, CmConfig extra) {
    CmConfig c = extra;
    c.ca_guid = guid;
    c.seed = 0x5eed + static_cast<uint64_t>(side);
    c.packet_life_ns = 0;
    c.timewait_ns = kTimewaitNs;
    cm[side] = std::make_unique<Cm>(w.port(side), wheel, [this] { return now; }, c,
                                    [this, side](const CmEvent& e) { on_event(side, e); });
    w.attach(side, cm[side].get());
  }

  void on_event(int side, const CmEvent& e) {
    ev[side].push_back(e.type);
    if (e.type == CmEventType::DreqReceived) {
      EXPECT_EQ(cm[side]->disconnect(e.id), 0);  // the DREP
    }
    if (side == 1 && e.type == CmEventType::ReqReceived) b_ids.push_back(e.id);
    if (side == 1 && e.type == CmEventType::ReqReceived && accept) {
      AcceptParams p;
      p.qpn = Qpn(0x100 + static_cast<uint32_t>(b_ids.size()));
      p.starting_psn = Psn(0x1111);
      p.responder_resources = 1;
      p.initiator_depth = 1;
      EXPECT_EQ(cm[1]->accept(e.id, p), 0);
    }
    if (side == 0 && e.type == CmEventType::RepReceived) {
      EXPECT_EQ(cm[0]->send_rtu(e.id), 0);
    }
  }

  void run(uint64_t ns, uint64_t step = 100'000) {
    w.pump();
    for (uint64_t t = 0; t < ns; t += step) {
      now += step;
      wheel.advance(now);
      w.pump();
    }
  }

  uint64_t sid() const { return cma_service_id(PortSpace::Tcp, 7471); }
  // (The REJs the flood test sends go to addresses the loop wire does not
  // know; it is never pumped after them.)

  ConnectParams params(uint32_t qpn) {
    ConnectParams p;
    p.dest = w.addr(1);
    p.service_id = sid();
    p.path.local_gid = w.addr(0).gid;
    p.path.remote_gid = w.addr(1).gid;
    p.path.local_ack_timeout = 14;
    p.qpn = Qpn(qpn);
    p.starting_psn = Psn(0x2222);
    p.responder_resources = 1;
    p.initiator_depth = 1;
    p.remote_cm_response_timeout = kTimeout;
    p.local_cm_response_timeout = kTimeout;
    p.max_cm_retries = 3;
    return p;
  }

  // A connected pair: A's id, B's id.
  std::pair<CmId*, CmId*> connect(uint32_t qpn = 0x15) {
    CmId* a = cm[0]->create_id();
    EXPECT_EQ(cm[0]->connect(a, params(qpn)), 0);
    run(kMs);
    EXPECT_EQ(a->state, CmState::Established);
    EXPECT_FALSE(b_ids.empty());
    CmId* b = b_ids.empty() ? nullptr : b_ids.back();
    if (b != nullptr) {
      EXPECT_EQ(b->state, CmState::Established);
    }
    return {a, b};
  }

  // What the CMs sent to the attacker's address (must stay 0: nothing is
  // reflected to an address that is no connection's peer).
  unsigned sent_to_evil() const {
    unsigned n = 0;
    for (const SentMad& s : w.log()) n += s.to.gid == evil.gid;
    return n;
  }

  uint64_t now = 1'000'000'000;
  TimerWheel wheel{now};
  LoopWire w;
  std::unique_ptr<Cm> cm[2];
  std::vector<CmEventType> ev[2];
  std::vector<CmId*> b_ids;
  bool accept = true;
  MadAddr evil;
  CmId* listener = nullptr;

  void listen() {
    listener = cm[1]->create_id();
    ASSERT_EQ(cm[1]->listen(listener, sid()), 0);
  }
  unsigned count(int side, CmEventType t) const {
    return static_cast<unsigned>(std::count(ev[side].begin(), ev[side].end(), t));
  }
};

TEST_F(CmAttack, ForgedDreqWithSniffedIdsEndsNothing) {
  listen();
  auto [a, b] = connect();
  ASSERT_NE(b, nullptr);
  // Both comm IDs were on the wire (REQ and REP): the attacker has them.
  DreqMsg d;
  d.local_comm_id = a->local_id;   // as if from A
  d.remote_comm_id = b->local_id;
  d.remote_qpn_eecn = 0x15;
  cm[1]->on_mad(evil, build_mad(d, 0x77));
  // ... and the other way round, into A.
  DreqMsg d2;
  d2.local_comm_id = b->local_id;
  d2.remote_comm_id = a->local_id;
  d2.remote_qpn_eecn = 0x101;
  cm[0]->on_mad(evil, build_mad(d2, 0x78));
  EXPECT_EQ(b->state, CmState::Established);
  EXPECT_EQ(a->state, CmState::Established);
  EXPECT_EQ(count(1, CmEventType::DreqReceived), 0u);
  EXPECT_EQ(count(0, CmEventType::DreqReceived), 0u);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rx_wrong_source), 1u);
  EXPECT_EQ(cm[0]->counters().get(CmCtr::rx_wrong_source), 1u);
  EXPECT_EQ(sent_to_evil(), 0u);
  // A forged REJ and RTU, likewise.
  RejMsg j;
  j.local_comm_id = a->local_id;
  j.remote_comm_id = b->local_id;
  j.reason = static_cast<uint16_t>(RejReason::ConsumerReject);
  cm[1]->on_mad(evil, build_mad(j, 0x79));
  EXPECT_EQ(b->state, CmState::Established);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rx_wrong_source), 2u);
  // The real peer's DREQ still works.
  EXPECT_EQ(cm[0]->disconnect(a), 0);
  run(kMs);
  EXPECT_EQ(count(1, CmEventType::DreqReceived), 1u);
  EXPECT_EQ(count(0, CmEventType::DrepReceived), 1u);
}

TEST_F(CmAttack, StaleReqFromAnotherAddressEndsNothing) {
  listen();
  auto [a, b] = connect(0x15);
  ASSERT_NE(b, nullptr);
  // A REQ naming A's CA GUID and QPN (both in A's REQ on the wire) would
  // make B drop the connection as stale: only from A's own address.
  ReqMsg r;
  r.local_comm_id = 0xabcdef01;
  r.service_id = sid();
  r.local_ca_guid = kGuidA;
  r.local_qpn = 0x15;
  r.transport_service_type = static_cast<uint8_t>(CmTransport::RC);
  cm[1]->on_mad(evil, build_mad(r, 0x80));
  EXPECT_EQ(b->state, CmState::Established);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rej_stale), 0u);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rx_wrong_source), 1u);
  EXPECT_EQ(sent_to_evil(), 0u);
  // A duplicate of A's own REQ from elsewhere: ignored as well.
  r.local_comm_id = a->local_id;
  cm[1]->on_mad(evil, build_mad(r, 0x81));
  EXPECT_EQ(b->state, CmState::Established);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rx_wrong_source), 2u);
  EXPECT_EQ(sent_to_evil(), 0u);
}

TEST_F(CmAttack, UnknownDreqIsNotReflected) {
  for (uint32_t i = 1; i <= 100; ++i) {
    DreqMsg d;
    d.local_comm_id = 0x1000 + i;
    d.remote_comm_id = 0x5000 + i;
    cm[1]->on_mad(evil, build_mad(d, i));
  }
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rx_dreq_unknown), 100u);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::drep_unknown), 0u);
  EXPECT_EQ(sent_to_evil(), 0u);
  EXPECT_EQ(cm[1]->id_count(), 0u);
}

TEST_F(CmAttack, LateDreqFromTheRealPeerIsStillAnswered) {
  // The legitimate case the kernel's reflector serves: our DREP was lost
  // and TimeWait is over.  The peer's retry names both IDs from its own
  // address: answered.  The same DREQ from elsewhere is not.
  listen();
  auto [a, b] = connect();
  ASSERT_NE(b, nullptr);
  const uint32_t a_local = a->local_id, b_local = b->local_id;
  w.add_rule({wire::CmAttr::Drep, 0, Fault::Drop});
  EXPECT_EQ(cm[0]->disconnect(a), 0);
  run(kMs);  // B answered (lost), and is in TimeWait
  run(kTimewaitNs + kMs);
  w.clear_rules();
  cm[1]->destroy_id(b);  // B's program is done with it (rdma_destroy_id)
  ASSERT_EQ(cm[1]->find(b_local), nullptr);  // B has forgotten it
  DreqMsg d;
  d.local_comm_id = a_local;
  d.remote_comm_id = b_local;
  cm[1]->on_mad(evil, build_mad(d, 0x90));
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rx_dreq_unknown), 1u);
  EXPECT_EQ(sent_to_evil(), 0u);
  const unsigned dreps_before = w.count(wire::CmAttr::Drep, 1);  // the lost ones
  cm[1]->on_mad(w.addr(0), build_mad(d, 0x91));
  EXPECT_EQ(cm[1]->counters().get(CmCtr::drep_unknown), 1u);
  EXPECT_EQ(w.count(wire::CmAttr::Drep, 1), dreps_before + 1);
}

TEST_F(CmAttack, ReqFloodIsBounded) {
  CmConfig c;
  c.max_pending_requests = 16;
  make(1, kGuidB, c);
  accept = false;  // a busy server: nobody answers yet
  listen();
  for (uint32_t i = 0; i < 1000; ++i) {
    MadAddr from;
    from.gid = ipv4_mapped_gid(0x0B000000 + i);  // a new source address each time
    ReqMsg r;
    r.local_comm_id = 0x10000 + i;
    r.service_id = sid();
    r.local_ca_guid = 0x1000 + i;
    r.local_qpn = 0x20 + i;
    r.transport_service_type = static_cast<uint8_t>(CmTransport::RC);
    cm[1]->on_mad(from, build_mad(r, i));
  }
  EXPECT_EQ(cm[1]->pending_requests(), 16u);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::req_flood_dropped), 984u);
  EXPECT_EQ(count(1, CmEventType::ReqReceived), 16u);
  EXPECT_LE(cm[1]->id_count(), 17u);  // the listener and the 16
  // Once they are answered (here: rejected), requests are taken again.
  ASSERT_EQ(b_ids.size(), 16u);
  for (CmId* id : b_ids) EXPECT_EQ(cm[1]->reject(id, RejReason::ConsumerReject), 0);
  EXPECT_EQ(cm[1]->pending_requests(), 0u);
  ReqMsg r;
  r.local_comm_id = 0x99999;
  r.service_id = sid();
  r.local_ca_guid = 0x4242;
  r.local_qpn = 0x4242;
  r.transport_service_type = static_cast<uint8_t>(CmTransport::RC);
  MadAddr from;
  from.gid = ipv4_mapped_gid(0x0C000001);
  cm[1]->on_mad(from, build_mad(r, 0x4242));
  EXPECT_EQ(count(1, CmEventType::ReqReceived), 17u);
}

TEST_F(CmAttack, TimewaitIsBounded) {
  CmConfig c;
  c.max_timewait = 4;
  make(1, kGuidB, c);
  listen();
  std::vector<std::pair<CmId*, CmId*>> conns;
  for (uint32_t i = 0; i < 10; ++i) conns.push_back(connect(0x40 + i));
  for (auto& [a, b] : conns) EXPECT_EQ(cm[1]->disconnect(b), 0);  // B asks: B enters TimeWait
  run(kMs);
  EXPECT_EQ(cm[1]->timewait_count(), 4u);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::timewait_evicted), 6u);
  run(kTimewaitNs + kMs);
  EXPECT_EQ(cm[1]->timewait_count(), 0u);
  EXPECT_EQ(count(1, CmEventType::TimewaitExit), 10u);
}

}  // namespace
}  // namespace uroce::test
