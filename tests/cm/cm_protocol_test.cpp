// The CM state machine, two CMs back to back over an in-memory wire that
// drops or duplicates chosen MADs (suite 'protocol').  Every MAD either CM
// sends is also checked against the field tables (decode, re-encode, equal
// bytes; header class 0x07 version 2 method Send).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <cerrno>
#include <functional>
#include <memory>
#include <set>
#include <string_view>
#include <vector>

#include "cm/cm.hpp"
#include "cm/cma_hdr.hpp"
#include "lib/util/log.hpp"
#include "tests/cm/loop_port.hpp"

namespace uroce::test {
namespace {

constexpr uint64_t kGuidA = 0x505400fffe910011ULL;
constexpr uint64_t kGuidB = 0x505400fffe910012ULL;
constexpr uint32_t kIpA = 0x0A5B000B;
constexpr uint32_t kIpB = 0x0A5B000C;
constexpr uint16_t kPort = 7471;
constexpr uint8_t kTimeout = 12;                       // 4.096 us * 2^12 = 16.8 ms
constexpr uint64_t kTimeoutNs = cm_timeout_ns(kTimeout);
constexpr uint64_t kTimewaitNs = 40'000'000;  // > 2 response timeouts
constexpr uint64_t kMs = 1'000'000;

std::span<const uint8_t> bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
std::string_view text(std::span<const uint8_t> b, size_t n) {
  return {reinterpret_cast<const char*>(b.data()), std::min(n, b.size())};
}

// Decode with the message's field table, re-encode, compare bytes.
bool mad_roundtrips(const SentMad& s, std::string& why) {
  const wire::MadHdrC h(s.mad.data());
  if (h.base_version() != 1 || h.mgmt_class() != 0x07 || h.class_version() != 2 || h.method() != 0x03 ||
      h.status() != 0 || h.attr_mod() != 0) {
    why = "bad MAD header";
    return false;
  }
  MadBuf again{};
  auto redo = [&](auto msg) {
    again = build_mad(msg, h.tid());
    return again == s.mad;
  };
  bool ok = false;
  switch (static_cast<wire::CmAttr>(h.attr_id())) {
    case wire::CmAttr::Req: ok = redo(decode(ReqViewC(s.body()))); break;
    case wire::CmAttr::Mra: ok = redo(decode(MraViewC(s.body()))); break;
    case wire::CmAttr::Rej: ok = redo(decode(RejViewC(s.body()))); break;
    case wire::CmAttr::Rep: ok = redo(decode(RepViewC(s.body()))); break;
    case wire::CmAttr::Rtu: ok = redo(decode(RtuViewC(s.body()))); break;
    case wire::CmAttr::Dreq: ok = redo(decode(DreqViewC(s.body()))); break;
    case wire::CmAttr::Drep: ok = redo(decode(DrepViewC(s.body()))); break;
    case wire::CmAttr::SidrReq: ok = redo(decode(SidrReqViewC(s.body()))); break;
    case wire::CmAttr::SidrRep: ok = redo(decode(SidrRepViewC(s.body()))); break;
    case wire::CmAttr::ClassPortInfo: case wire::CmAttr::Lap: case wire::CmAttr::Apr:
      why = "unexpected attribute";
      return false;
  }
  if (!ok) why = "re-encoding differs";
  return ok;
}

class CmPair : public ::testing::Test {
 protected:
  void SetUp() override {
    make(0, kGuidA);
    make(1, kGuidB);
  }

  void TearDown() override {
    for (const SentMad& s : w.log()) {
      std::string why;
      EXPECT_TRUE(mad_roundtrips(s, why)) << wire::cm_attr_name(s.attr()) << ": " << why;
    }
  }

  void make(int side, uint64_t guid, uint64_t seed = 0, uint64_t no_listener_grace_ns = 0) {
    CmConfig c;
    c.no_listener_grace_ns = no_listener_grace_ns;
    c.ca_guid = guid;
    c.seed = seed != 0 ? seed : 0x1234 + static_cast<uint64_t>(side);
    c.packet_life_ns = 0;
    c.timewait_ns = kTimewaitNs;
    cm[side] = std::make_unique<Cm>(w.port(side), wheel, [this] { return now; }, c,
                                    [this, side](const CmEvent& e) {
                                      ev[side].push_back(e);
                                      if (hook[side]) hook[side](e);
                                    });
    w.attach(side, cm[side].get());
  }

  // Advance the fake clock by `ns` in steps, firing timers and delivering.
  void run(uint64_t ns, uint64_t step = 100'000) {
    w.pump();
    for (uint64_t t = 0; t < ns; t += step) {
      now += step;
      wheel.advance(now);
      w.pump();
    }
  }

  std::vector<CmEventType> types(int side) const {
    std::vector<CmEventType> v;
    for (const CmEvent& e : ev[side]) v.push_back(e.type);
    return v;
  }
  const CmEvent* last(int side, CmEventType t) const {
    for (auto it = ev[side].rbegin(); it != ev[side].rend(); ++it) {
      if (it->type == t) return &*it;
    }
    return nullptr;
  }
  unsigned n_events(int side, CmEventType t) const {
    return static_cast<unsigned>(std::count_if(ev[side].begin(), ev[side].end(),
                                               [t](const CmEvent& e) { return e.type == t; }));
  }

  uint64_t sid() const { return cma_service_id(PortSpace::Tcp, kPort); }

  // B listens; A's REQ carries the rdma_cm header and `user` bytes.
  CmId* listen_b() {
    CmId* l = cm[1]->create_id();
    EXPECT_EQ(cm[1]->listen(l, sid()), 0);
    return l;
  }

  ConnectParams params_a(std::string_view user = "hello from A") {
    ConnectParams p;
    p.dest = w.addr(1);
    p.service_id = sid();
    p.path.local_gid = w.addr(0).gid;
    p.path.remote_gid = w.addr(1).gid;
    p.path.mtu = IBV_MTU_1024;
    p.path.local_ack_timeout = 14;
    p.qpn = Qpn(0x15);
    p.starting_psn = Psn(0x64a8b2);
    p.responder_resources = 4;
    p.initiator_depth = 2;
    p.remote_cm_response_timeout = kTimeout;
    p.local_cm_response_timeout = kTimeout;
    p.retry_count = 5;
    p.rnr_retry_count = 6;
    p.max_cm_retries = 3;
    EXPECT_TRUE(format_cma_private_data(CmaHdr::ipv4(kIpA, kIpB, 0x91f1), bytes(user), req_pdata));
    p.private_data = req_pdata;
    return p;
  }

  AcceptParams params_b(std::string_view user = "welcome, A") {
    AcceptParams p;
    p.qpn = Qpn(0x16);
    p.starting_psn = Psn(0x027852);
    p.responder_resources = 1;
    p.initiator_depth = 3;
    p.rnr_retry_count = 7;
    std::fill(rep_pdata.begin(), rep_pdata.end(), 0);
    std::copy(user.begin(), user.end(), rep_pdata.begin());
    p.private_data = std::span<const uint8_t>(rep_pdata.data(), user.size());
    return p;
  }

  // The usual consumers: B accepts every REQ, A answers a REP with an RTU.
  void auto_consumers() {
    hook[1] = [this](const CmEvent& e) {
      if (e.type == CmEventType::ReqReceived) {
        b_id = e.id;
        EXPECT_EQ(cm[1]->accept(e.id, params_b()), 0);
      }
    };
    hook[0] = [this](const CmEvent& e) {
      if (e.type == CmEventType::RepReceived) {
        EXPECT_EQ(cm[0]->send_rtu(e.id), 0);
      }
    };
  }

  CmId* connect_a() {
    CmId* a = cm[0]->create_id();
    EXPECT_EQ(cm[0]->connect(a, params_a()), 0);
    return a;
  }

  uint64_t now = 1'000'000'000;
  TimerWheel wheel{now};
  LoopWire w;
  std::unique_ptr<Cm> cm[2];
  std::vector<CmEvent> ev[2];
  std::function<void(const CmEvent&)> hook[2];
  std::array<uint8_t, 92> req_pdata{};
  std::array<uint8_t, 196> rep_pdata{};
  CmId* b_id = nullptr;
};

TEST_F(CmPair, ConnectTransferAttrsAndDisconnect) {
  listen_b();
  auto_consumers();
  CmId* a = connect_a();
  run(1 * kMs);

  ASSERT_EQ(types(0), (std::vector{CmEventType::RepReceived, CmEventType::Established}));
  ASSERT_EQ(types(1), (std::vector{CmEventType::ReqReceived, CmEventType::Established}));
  EXPECT_EQ(a->state, CmState::Established);
  ASSERT_NE(b_id, nullptr);
  EXPECT_EQ(b_id->state, CmState::Established);

  // The REQ as B saw it: service ID, QPN, PSN, the rdma_cm header, the user's bytes.
  const CmEvent& rq = ev[1][0];
  ASSERT_NE(rq.req, nullptr);
  EXPECT_EQ(rq.service_id, 0x0000000001061D2FULL);
  EXPECT_EQ(rq.req->local_qpn, 0x15u);
  EXPECT_EQ(rq.req->starting_psn, 0x64a8b2u);
  EXPECT_EQ(rq.req->local_ca_guid, kGuidA);
  const std::optional<CmaHdr> cma = read_cma_hdr(rq.private_data());
  ASSERT_TRUE(cma.has_value());
  EXPECT_EQ(cma->ip_version, 4);
  EXPECT_EQ(cma->port, 0x91f1);
  EXPECT_EQ(cma->src_ipv4(), kIpA);
  EXPECT_EQ(cma->dst_ipv4(), kIpB);
  EXPECT_EQ(rq.pdata_len, 92);
  EXPECT_EQ(text(rq.private_data().subspan(kCmaHdrSize), 12), "hello from A");
  EXPECT_NE(rq.listen_id, nullptr);

  // The REP as A saw it.
  const CmEvent& rp = ev[0][0];
  ASSERT_NE(rp.rep, nullptr);
  EXPECT_EQ(rp.rep->local_qpn, 0x16u);
  EXPECT_EQ(rp.rep->starting_psn, 0x027852u);
  EXPECT_EQ(text(rp.private_data(), 10), "welcome, A");

  // Transactions: REP and RTU reuse the REQ's TID.
  ASSERT_EQ(w.log().size(), 3u);
  const uint64_t tid = wire::MadHdrC(w.log()[0].mad.data()).tid();
  EXPECT_EQ(wire::MadHdrC(w.log()[1].mad.data()).tid(), tid);
  EXPECT_EQ(wire::MadHdrC(w.log()[2].mad.data()).tid(), tid);
  EXPECT_EQ(RepViewC(w.log()[1].body()).remote_comm_id(), a->local_id);
  EXPECT_EQ(RtuViewC(w.log()[2].body()).remote_comm_id(), b_id->local_id);

  // QP attributes for both sides (what rdma_cm feeds ibv_modify_qp).
  ibv_qp_attr qa{};
  int mask = 0;
  ASSERT_EQ(cm[0]->init_qp_attr(a, IBV_QPS_RTR, qa, mask), 0);
  EXPECT_EQ(qa.dest_qp_num, 0x16u);
  EXPECT_EQ(qa.rq_psn, 0x64a8b2u);  // its own REQ's Starting PSN (as Linux's CM)
  EXPECT_EQ(qa.path_mtu, IBV_MTU_1024);
  EXPECT_EQ(qa.max_dest_rd_atomic, 3);  // min(our 4, B's initiator depth 3)
  EXPECT_TRUE(std::equal(w.addr(1).gid.begin(), w.addr(1).gid.end(), qa.ah_attr.grh.dgid.raw));
  EXPECT_TRUE(mask & IBV_QP_DEST_QPN);
  ASSERT_EQ(cm[0]->init_qp_attr(a, IBV_QPS_RTS, qa, mask), 0);
  EXPECT_EQ(qa.sq_psn, 0x027852u);  // the REP's
  EXPECT_EQ(qa.max_rd_atomic, 1);  // min(our 2, B's responder resources 1)
  EXPECT_EQ(qa.retry_cnt, 5);
  EXPECT_EQ(qa.rnr_retry, 7);      // what B asked for in its REP
  EXPECT_EQ(qa.timeout, 14);
  ASSERT_EQ(cm[1]->init_qp_attr(b_id, IBV_QPS_RTR, qa, mask), 0);
  EXPECT_EQ(qa.dest_qp_num, 0x15u);
  EXPECT_EQ(qa.rq_psn, 0x027852u);  // its own REP's
  EXPECT_EQ(qa.max_dest_rd_atomic, 1);
  EXPECT_TRUE(std::equal(w.addr(0).gid.begin(), w.addr(0).gid.end(), qa.ah_attr.grh.dgid.raw));
  ASSERT_EQ(cm[1]->init_qp_attr(b_id, IBV_QPS_RTS, qa, mask), 0);
  EXPECT_EQ(qa.sq_psn, 0x64a8b2u);  // the REQ's
  EXPECT_EQ(qa.rnr_retry, 6);      // what A asked for in its REQ
  EXPECT_EQ(qa.max_rd_atomic, 3);

  // A disconnects; B's consumer answers the DREQ.
  hook[1] = [this](const CmEvent& e) {
    if (e.type == CmEventType::DreqReceived) {
      EXPECT_EQ(cm[1]->disconnect(e.id), 0);
    }
  };
  EXPECT_EQ(cm[0]->disconnect(a), 0);
  run(1 * kMs);
  EXPECT_EQ(a->state, CmState::TimeWait);
  EXPECT_EQ(b_id->state, CmState::TimeWait);
  EXPECT_EQ(n_events(0, CmEventType::DrepReceived), 1u);
  EXPECT_EQ(n_events(1, CmEventType::DreqReceived), 1u);
  ASSERT_EQ(w.log().size(), 5u);
  EXPECT_EQ(DreqViewC(w.log()[3].body()).remote_qpn_eecn(), 0x16u);
  EXPECT_EQ(wire::MadHdrC(w.log()[4].mad.data()).tid(), wire::MadHdrC(w.log()[3].mad.data()).tid());
  run(kTimewaitNs + kMs);
  EXPECT_EQ(n_events(0, CmEventType::TimewaitExit), 1u);
  EXPECT_EQ(n_events(1, CmEventType::TimewaitExit), 1u);
  EXPECT_EQ(a->state, CmState::Idle);
  EXPECT_EQ(cm[0]->counters().get(CmCtr::retransmits), 0u);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::retransmits), 0u);
}

// XRC (annex A14, as Linux's ib_cm): the REQ says Transport Service Type 3
// with Extended Transport Type 1 and leaves the responder's fields 0; the
// REP names the receive QP in its Local EECN, with SRQ set; each side's QP
// attributes are its half's (receive QP: responder and a timeout; send QP:
// requester); the DREQ names the receive QP.
TEST_F(CmPair, XrcConnectionFields) {
  listen_b();
  auto_consumers();
  CmId* a = cm[0]->create_id();
  ConnectParams p = params_a();
  p.transport = CmTransport::Xrc;
  ASSERT_EQ(cm[0]->connect(a, p), 0);
  run(1 * kMs);
  ASSERT_EQ(types(0), (std::vector{CmEventType::RepReceived, CmEventType::Established}));
  ASSERT_NE(b_id, nullptr);
  EXPECT_EQ(b_id->transport, CmTransport::Xrc);

  const ReqViewC req(w.log()[0].body());
  EXPECT_EQ(req.transport_service_type(), 3u);
  EXPECT_EQ(req.extended_transport_type(), 1u);
  EXPECT_EQ(req.local_qpn(), 0x15u);
  EXPECT_EQ(req.responder_resources(), 0u);
  EXPECT_EQ(req.retry_count(), 0u);
  EXPECT_EQ(req.rnr_retry_count(), 0u);
  EXPECT_EQ(req.srq(), 0u);
  const RepViewC rep(w.log()[1].body());
  EXPECT_EQ(rep.local_eecn(), 0x16u);
  EXPECT_EQ(rep.local_qpn(), 0u);
  EXPECT_EQ(rep.srq(), 1u);
  EXPECT_EQ(rep.initiator_depth(), 0u);

  ibv_qp_attr qa{};
  int mask = 0;
  ASSERT_EQ(cm[0]->init_qp_attr(a, IBV_QPS_RTR, qa, mask), 0);
  EXPECT_EQ(qa.dest_qp_num, 0x16u) << "from the REP's Local EECN";
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN);
  ASSERT_EQ(cm[0]->init_qp_attr(a, IBV_QPS_RTS, qa, mask), 0);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                      IBV_QP_MAX_QP_RD_ATOMIC);
  ASSERT_EQ(cm[1]->init_qp_attr(b_id, IBV_QPS_RTR, qa, mask), 0);
  EXPECT_EQ(qa.dest_qp_num, 0x15u);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  ASSERT_EQ(cm[1]->init_qp_attr(b_id, IBV_QPS_RTS, qa, mask), 0);
  EXPECT_EQ(mask, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT);
  EXPECT_EQ(qa.timeout, 14);

  hook[1] = [this](const CmEvent& e) {
    if (e.type == CmEventType::DreqReceived) {
      EXPECT_EQ(cm[1]->disconnect(e.id), 0);
    }
  };
  EXPECT_EQ(cm[0]->disconnect(a), 0);
  run(1 * kMs);
  EXPECT_EQ(DreqViewC(w.log()[3].body()).remote_qpn_eecn(), 0x16u);
  EXPECT_EQ(b_id->state, CmState::TimeWait);
}

// A REQ for a service this CM does not carry (RD; type 3 with another
// extended type) is rejected "invalid transport type" (IBA table 109).
TEST_F(CmPair, ReqForAnotherTransportIsRejected) {
  listen_b();
  auto_consumers();
  for (const auto& [ts, ext] : {std::pair{2, 0}, std::pair{3, 0}, std::pair{3, 2}}) {
    ev[0].clear();
    CmId* a = cm[0]->create_id();
    ASSERT_EQ(cm[0]->connect(a, params_a()), 0);
    // Rewrite the REQ on its way (its MAD is the last one sent).
    w.tamper([ts, ext](uint8_t* mad) {
      ReqView r(mad + kMadHdrSize);
      r.set_transport_service_type(static_cast<uint8_t>(ts));
      r.set_extended_transport_type(static_cast<uint8_t>(ext));
    });
    run(1 * kMs);
    const CmEvent* rej = last(0, CmEventType::RejReceived);
    ASSERT_NE(rej, nullptr) << ts << "/" << ext;
    EXPECT_EQ(rej->reason, static_cast<uint16_t>(RejReason::InvalidTransportType));
  }
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rej_transport), 3u);
}

TEST_F(CmPair, RejectWithPrivateData) {
  listen_b();
  hook[1] = [this](const CmEvent& e) {
    if (e.type == CmEventType::ReqReceived) {
      EXPECT_EQ(cm[1]->reject(e.id, RejReason::ConsumerReject, bytes("go away")), 0);
    }
  };
  CmId* a = connect_a();
  run(1 * kMs);
  const CmEvent* r = last(0, CmEventType::RejReceived);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->reason, 28);
  EXPECT_EQ(r->message_rejected, static_cast<uint8_t>(CmMsgRef::Req));
  EXPECT_EQ(text(r->private_data(), 7), "go away");
  EXPECT_EQ(r->pdata_len, 148);
  EXPECT_EQ(a->state, CmState::Idle);
  run(10 * kTimeoutNs);
  EXPECT_EQ(w.count(wire::CmAttr::Req), 1u);  // no retransmission after a REJ
  // Private data longer than the REJ's 148 bytes is refused.
  std::vector<uint8_t> big(149, 1);
  CmId* a2 = connect_a();
  hook[1] = [&](const CmEvent& e) {
    if (e.type == CmEventType::ReqReceived) {
      EXPECT_EQ(cm[1]->reject(e.id, RejReason::ConsumerReject, big), -EINVAL);
      EXPECT_EQ(cm[1]->reject(e.id, RejReason::ConsumerReject), 0);
    }
  };
  run(1 * kMs);
  EXPECT_EQ(a2->state, CmState::Idle);
}

// In the start-up grace (CmConfig::no_listener_grace_ns) a REQ for a
// service nobody listens on yet is forgotten, not rejected; the active
// side's retry finds the listener and connects.  After the grace: REJ.
TEST_F(CmPair, ReqBeforeListenInTheGraceIsLeftForTheRetry) {
  make(1, kGuidB, 0, 50 * kMs);
  auto_consumers();
  CmId* a = connect_a();
  run(1 * kMs);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::req_before_listen), 1u);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rej_no_listener), 0u);
  EXPECT_EQ(last(0, CmEventType::RejReceived), nullptr);
  EXPECT_EQ(a->state, CmState::ReqSent);
  listen_b();
  run(200 * kMs);  // A's REQ retransmission
  EXPECT_EQ(a->state, CmState::Established);
  ASSERT_NE(b_id, nullptr);
  EXPECT_EQ(b_id->state, CmState::Established);

  // Past the grace, a REQ for another service is rejected at once.
  ConnectParams p = params_a();
  p.service_id = cma_service_id(PortSpace::Tcp, kPort + 1);
  p.qpn = Qpn(0x16);  // not the established connection's (that would be a stale REQ)
  CmId* a2 = cm[0]->create_id();
  ASSERT_EQ(cm[0]->connect(a2, p), 0);
  run(1 * kMs);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rej_no_listener), 1u);
  EXPECT_EQ(a2->state, CmState::Idle);
}

TEST_F(CmPair, NoListenerGetsInvalidServiceId) {
  CmId* a = connect_a();
  run(1 * kMs);
  const CmEvent* r = last(0, CmEventType::RejReceived);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->reason, static_cast<uint16_t>(RejReason::InvalidServiceId));
  EXPECT_EQ(a->state, CmState::Idle);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rej_no_listener), 1u);
  // As Linux sends it: local comm ID 0, remote = A's, the REQ's TID.
  const SentMad& rej = w.log().back();
  EXPECT_EQ(RejViewC(rej.body()).local_comm_id(), 0u);
  EXPECT_EQ(RejViewC(rej.body()).remote_comm_id(), a->local_id);
  EXPECT_EQ(wire::MadHdrC(rej.mad.data()).tid(), wire::MadHdrC(w.log()[0].mad.data()).tid());
}

TEST_F(CmPair, ReqLossIsRetransmitted) {
  listen_b();
  auto_consumers();
  w.add_rule({wire::CmAttr::Req, 1, Fault::Drop});
  CmId* a = connect_a();
  run(kTimeoutNs / 2);
  EXPECT_EQ(a->state, CmState::ReqSent);
  EXPECT_TRUE(ev[1].empty());
  run(kTimeoutNs);
  EXPECT_EQ(a->state, CmState::Established);
  EXPECT_EQ(w.count(wire::CmAttr::Req), 2u);
  EXPECT_EQ(w.log()[0].mad, w.log()[1].mad);  // the same REQ, same TID
  EXPECT_EQ(cm[0]->counters().get(CmCtr::retransmits), 1u);
  EXPECT_EQ(n_events(1, CmEventType::ReqReceived), 1u);
}

TEST_F(CmPair, RepLossDuplicateReqGetsStoredRep) {
  listen_b();
  auto_consumers();
  w.add_rule({wire::CmAttr::Rep, 1, Fault::Drop});
  // B waits 4x longer for the RTU than A for the REP, so A's repeated REQ,
  // not B's own timer, brings the second REP.
  ConnectParams p = params_a();
  p.local_cm_response_timeout = kTimeout + 2;
  CmId* a = cm[0]->create_id();
  ASSERT_EQ(cm[0]->connect(a, p), 0);
  run(kTimeoutNs / 2);
  ASSERT_NE(b_id, nullptr);
  EXPECT_EQ(b_id->state, CmState::RepSent);
  // B answers the duplicate REQ with the REP it stored.
  run(kTimeoutNs * 3 / 4);
  EXPECT_EQ(a->state, CmState::Established);
  EXPECT_EQ(b_id->state, CmState::Established);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rx_dup_req), 1u);
  EXPECT_EQ(n_events(1, CmEventType::ReqReceived), 1u);  // the duplicate is not a new request
  std::vector<MadBuf> reps;
  for (const SentMad& s : w.log()) {
    if (s.attr() == static_cast<uint16_t>(wire::CmAttr::Rep)) reps.push_back(s.mad);
  }
  ASSERT_EQ(reps.size(), 2u);
  EXPECT_EQ(reps[0], reps[1]);
}

TEST_F(CmPair, RtuLossEstablishedByFirstData) {
  listen_b();
  auto_consumers();
  w.add_rule({wire::CmAttr::Rtu, 1, Fault::Drop});
  CmId* a = connect_a();
  run(1 * kMs);
  EXPECT_EQ(a->state, CmState::Established);
  ASSERT_NE(b_id, nullptr);
  EXPECT_EQ(b_id->state, CmState::RepSent);
  EXPECT_EQ(n_events(1, CmEventType::Established), 0u);
  // The transport sees the first data packet on B's QP (IB_EVENT_COMM_EST).
  EXPECT_EQ(cm[1]->established(b_id), 0);
  EXPECT_EQ(b_id->state, CmState::Established);
  EXPECT_EQ(n_events(1, CmEventType::Established), 1u);
  run(5 * kTimeoutNs);
  EXPECT_EQ(w.count(wire::CmAttr::Rep), 1u);  // no REP retransmission after that
  EXPECT_EQ(n_events(1, CmEventType::Established), 1u);
}

TEST_F(CmPair, RtuLossRepeatedRepGetsRtuAgain) {
  listen_b();
  auto_consumers();
  w.add_rule({wire::CmAttr::Rtu, 1, Fault::Drop});
  connect_a();
  run(kTimeoutNs + kMs);
  ASSERT_NE(b_id, nullptr);
  EXPECT_EQ(b_id->state, CmState::Established);
  EXPECT_EQ(w.count(wire::CmAttr::Rep), 2u);
  EXPECT_EQ(w.count(wire::CmAttr::Rtu), 2u);
  EXPECT_EQ(cm[0]->counters().get(CmCtr::rx_dup_rep), 1u);
}

TEST_F(CmPair, RetriesExhaustedGiveTimeoutRej) {
  listen_b();  // B's consumer never answers: REQ received, nothing sent
  CmId* a = connect_a();
  const uint64_t t0 = now;
  uint64_t t_fail = 0;
  hook[0] = [&](const CmEvent& e) {
    if (e.type == CmEventType::ReqTimeout) t_fail = now;
  };
  run(10 * kTimeoutNs);
  EXPECT_EQ(w.count(wire::CmAttr::Req), 4u);  // 1 + max_cm_retries (3)
  ASSERT_EQ(n_events(0, CmEventType::ReqTimeout), 1u);
  EXPECT_EQ(a->state, CmState::Idle);
  // (1 + retries) response timeouts, within one run() step.
  EXPECT_GE(t_fail - t0, 4 * kTimeoutNs);
  EXPECT_LE(t_fail - t0, 4 * kTimeoutNs + 200'000);
  // A told B with REJ(timeout), ARI = A's CA GUID; B's pending request is gone.
  ASSERT_EQ(w.count(wire::CmAttr::Rej, 0), 1u);
  const RejMsg j = decode(RejViewC(w.log().back().body()));
  EXPECT_EQ(j.reason, 4);
  EXPECT_EQ(j.reject_info_length, 8);
  EXPECT_EQ(wire::load_be<uint64_t>(j.ari.data()), kGuidA);
  const CmEvent* r = last(1, CmEventType::RejReceived);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->reason, 4);
  EXPECT_EQ(r->id->state, CmState::Idle);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rx_dup_req), 3u);
}

TEST_F(CmPair, PeerThatNeverAnswers) {
  w.attach(1, nullptr);  // nobody at B
  CmId* a = connect_a();
  run(10 * kTimeoutNs);
  EXPECT_EQ(n_events(0, CmEventType::ReqTimeout), 1u);
  EXPECT_EQ(a->state, CmState::Idle);
  EXPECT_EQ(cm[0]->counters().get(CmCtr::timeouts), 1u);
}

TEST_F(CmPair, RepUnansweredGivesRepTimeout) {
  listen_b();
  auto_consumers();
  hook[0] = nullptr;  // A never sends the RTU
  w.add_rule({wire::CmAttr::Rej, 0, Fault::Drop});
  connect_a();
  run(10 * kTimeoutNs);
  ASSERT_NE(b_id, nullptr);
  EXPECT_EQ(n_events(1, CmEventType::RepTimeout), 1u);
  EXPECT_EQ(w.count(wire::CmAttr::Rep), 4u);
  EXPECT_EQ(b_id->state, CmState::Idle);
}

TEST_F(CmPair, MraExtendsTheWait) {
  listen_b();
  hook[1] = [this](const CmEvent& e) {
    if (e.type == CmEventType::ReqReceived) {
      b_id = e.id;
      EXPECT_EQ(cm[1]->send_mra(e.id, kTimeout + 3), 0);  // 8x the REQ timeout
    }
  };
  hook[0] = [this](const CmEvent& e) {
    if (e.type == CmEventType::RepReceived) {
      EXPECT_EQ(cm[0]->send_rtu(e.id), 0);
    }
  };
  CmId* a = connect_a();
  run(1 * kMs);
  EXPECT_EQ(a->state, CmState::MraReqRcvd);
  ASSERT_NE(last(0, CmEventType::MraReceived), nullptr);
  EXPECT_EQ(last(0, CmEventType::MraReceived)->service_timeout, kTimeout + 3);
  run(4 * kTimeoutNs);  // past several REQ timeouts: no retransmission, no failure
  EXPECT_EQ(w.count(wire::CmAttr::Req), 1u);
  EXPECT_EQ(a->state, CmState::MraReqRcvd);
  EXPECT_EQ(cm[1]->accept(b_id, params_b()), 0);
  run(1 * kMs);
  EXPECT_EQ(a->state, CmState::Established);
  EXPECT_EQ(b_id->state, CmState::Established);
}

TEST_F(CmPair, DuplicatedMadsAreHarmless) {
  listen_b();
  auto_consumers();
  w.add_rule({std::nullopt, 0, Fault::Duplicate});
  CmId* a = connect_a();
  run(1 * kMs);
  EXPECT_EQ(a->state, CmState::Established);
  EXPECT_EQ(n_events(0, CmEventType::Established), 1u);
  EXPECT_EQ(n_events(1, CmEventType::Established), 1u);
  EXPECT_EQ(n_events(1, CmEventType::ReqReceived), 1u);
  hook[1] = [this](const CmEvent& e) {
    if (e.type == CmEventType::DreqReceived) {
      EXPECT_EQ(cm[1]->disconnect(e.id), 0);
    }
  };
  EXPECT_EQ(cm[0]->disconnect(a), 0);
  run(1 * kMs);
  EXPECT_EQ(n_events(1, CmEventType::DreqReceived), 1u);
  EXPECT_EQ(a->state, CmState::TimeWait);
  run(kTimewaitNs + kMs);
  EXPECT_EQ(n_events(0, CmEventType::TimewaitExit), 1u);
  EXPECT_EQ(n_events(1, CmEventType::TimewaitExit), 1u);
}

// Tracing (lib/util/log.hpp): with `conn` on, each CM state change of a
// connection is one line naming its comm ID, the states and the input; with
// it off, a whole connection traces nothing.
TEST_F(CmPair, ConnTraceFollowsEachStateChange) {
  std::vector<std::string> lines;
  set_trace_hook([&](TraceCat c, std::string_view line) {
    if (c == TraceCat::Conn) lines.emplace_back(line);
  });
  ASSERT_TRUE(trace_apply("conn"));
  EXPECT_TRUE(trace_on(TraceCat::Conn));
  EXPECT_FALSE(trace_on(TraceCat::Qp));
  listen_b();
  auto_consumers();
  CmId* a = connect_a();
  run(1 * kMs);
  ASSERT_TRUE(trace_apply("none"));
  set_trace_hook(nullptr);
  ASSERT_EQ(a->state, CmState::Established);
  ASSERT_NE(b_id, nullptr);

  char active[64], passive[64];
  std::snprintf(active, sizeof active, "conn 0x%08x: ", a->local_id);
  std::snprintf(passive, sizeof passive, "conn 0x%08x: ", b_id->local_id);
  const auto has = [&](const std::string& want) { return std::find(lines.begin(), lines.end(), want) != lines.end(); };
  EXPECT_TRUE(has(std::string(active) + "Idle --Connect--> ReqSent"));
  EXPECT_TRUE(has(std::string(active) + "ReqSent --RecvRep--> RepRcvd"));
  EXPECT_TRUE(has(std::string(active) + "RepRcvd --SendRtu--> Established"));
  EXPECT_TRUE(has(std::string(passive) + "RepSent --RecvRtu--> Established"));
  for (const std::string& l : lines) {
    EXPECT_EQ(l.rfind("conn 0x", 0), 0u) << l;
    EXPECT_NE(l.find("--> "), std::string::npos) << l;
  }

  // Off: a second connection leaves no line.
  lines.clear();
  set_trace_hook([&](TraceCat, std::string_view line) { lines.emplace_back(line); });
  EXPECT_EQ(cm[0]->disconnect(a), 0);
  run(1 * kMs);
  set_trace_hook(nullptr);
  EXPECT_TRUE(lines.empty()) << lines.front();
}

TEST(Trace, SpecWordsAndRefusals) {
  ASSERT_TRUE(trace_apply("none"));
  EXPECT_TRUE(trace_apply("qp"));
  EXPECT_TRUE(trace_on(TraceCat::Qp));
  EXPECT_FALSE(trace_on(TraceCat::Conn));
  EXPECT_TRUE(trace_apply("all,qp=off"));
  EXPECT_FALSE(trace_on(TraceCat::Qp));
  EXPECT_TRUE(trace_on(TraceCat::Conn));
  // A word it does not know changes nothing, even after good words.
  EXPECT_FALSE(trace_apply("qp,bogus"));
  EXPECT_FALSE(trace_on(TraceCat::Qp));
  EXPECT_FALSE(trace_apply("conn=maybe"));
  EXPECT_TRUE(trace_on(TraceCat::Conn));
  EXPECT_TRUE(trace_apply("none"));
  EXPECT_FALSE(trace_on(TraceCat::Conn));
}

class CmConnected : public CmPair {
 protected:
  void SetUp() override {
    CmPair::SetUp();
    listen_b();
    auto_consumers();
    a = connect_a();
    run(1 * kMs);
    ASSERT_EQ(a->state, CmState::Established);
    ASSERT_NE(b_id, nullptr);
    ASSERT_EQ(b_id->state, CmState::Established);
    ev[0].clear();
    ev[1].clear();
    w.clear_log();
  }
  CmId* a = nullptr;
};

TEST_F(CmConnected, SimultaneousDreq) {
  EXPECT_EQ(cm[0]->disconnect(a), 0);
  EXPECT_EQ(cm[1]->disconnect(b_id), 0);
  run(1 * kMs);
  // Each side got the other's DREQ while its own was out, answered it and
  // entered TimeWait; the DREPs that follow are dropped there.
  EXPECT_EQ(a->state, CmState::TimeWait);
  EXPECT_EQ(b_id->state, CmState::TimeWait);
  EXPECT_EQ(w.count(wire::CmAttr::Dreq), 2u);
  EXPECT_EQ(w.count(wire::CmAttr::Drep), 2u);
  EXPECT_EQ(n_events(0, CmEventType::DreqReceived), 1u);
  EXPECT_EQ(n_events(1, CmEventType::DreqReceived), 1u);
  EXPECT_EQ(n_events(0, CmEventType::DreqTimeout), 0u);
  run(kTimewaitNs + kMs);
  EXPECT_EQ(a->state, CmState::Idle);
  EXPECT_EQ(b_id->state, CmState::Idle);
  EXPECT_EQ(n_events(0, CmEventType::TimewaitExit), 1u);
  EXPECT_EQ(n_events(1, CmEventType::TimewaitExit), 1u);
  EXPECT_EQ(w.count(wire::CmAttr::Dreq), 2u);  // nothing retransmitted
}

TEST_F(CmConnected, DreqLossRetransmitted) {
  hook[1] = [this](const CmEvent& e) {
    if (e.type == CmEventType::DreqReceived) {
      EXPECT_EQ(cm[1]->disconnect(e.id), 0);
    }
  };
  w.add_rule({wire::CmAttr::Dreq, 1, Fault::Drop});
  EXPECT_EQ(cm[0]->disconnect(a), 0);
  run(kTimeoutNs + kMs);
  EXPECT_EQ(w.count(wire::CmAttr::Dreq), 2u);
  EXPECT_EQ(n_events(0, CmEventType::DrepReceived), 1u);
  EXPECT_EQ(a->state, CmState::TimeWait);
}

TEST_F(CmConnected, DrepLossRepeatedDreqGetsStoredDrep) {
  hook[1] = [this](const CmEvent& e) {
    if (e.type == CmEventType::DreqReceived) {
      EXPECT_EQ(cm[1]->disconnect(e.id), 0);
    }
  };
  w.add_rule({wire::CmAttr::Drep, 1, Fault::Drop});
  EXPECT_EQ(cm[0]->disconnect(a), 0);
  run(kTimeoutNs + kMs);
  EXPECT_EQ(w.count(wire::CmAttr::Drep), 2u);
  EXPECT_EQ(n_events(1, CmEventType::DreqReceived), 1u);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rx_dup_dreq), 1u);
  EXPECT_EQ(n_events(0, CmEventType::DrepReceived), 1u);
}

TEST_F(CmConnected, DreqUnansweredTimesOutIntoTimewait) {
  w.add_rule({wire::CmAttr::Dreq, 0, Fault::Drop});
  EXPECT_EQ(cm[0]->disconnect(a), 0);
  run(5 * kTimeoutNs);
  EXPECT_EQ(w.count(wire::CmAttr::Dreq), 4u);
  EXPECT_EQ(n_events(0, CmEventType::DreqTimeout), 1u);
  run(kTimewaitNs + kMs);
  EXPECT_EQ(n_events(0, CmEventType::TimewaitExit), 1u);
  EXPECT_EQ(a->state, CmState::Idle);
}

TEST_F(CmConnected, DreqForAForgottenConnectionIsAnswered) {
  // B forgets everything (destroy sends DREQs, all lost); A's
  // DREQ, arriving after B's TimeWait, still gets a DREP.
  w.add_rule({wire::CmAttr::Dreq, 0, Fault::Drop});
  cm[1]->destroy_id(b_id);
  b_id = nullptr;
  run(5 * kTimeoutNs + kTimewaitNs + kMs);  // B: DREQ retries, TimeWait, gone
  const size_t before = cm[1]->id_count();
  w.clear_rules();
  EXPECT_EQ(cm[0]->disconnect(a), 0);
  run(1 * kMs);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::drep_unknown), 1u);
  EXPECT_EQ(n_events(0, CmEventType::DrepReceived), 1u);
  EXPECT_EQ(cm[1]->id_count(), before);
}

TEST_F(CmConnected, StaleConnection) {
  // A's side reboots its CM state and connects again from the same QPN: B
  // rejects the new REQ as stale and releases the old connection (DREQ).
  cm[0] = nullptr;
  make(0, kGuidA, 0x9999);
  CmId* a2 = cm[0]->create_id();
  EXPECT_EQ(cm[0]->connect(a2, params_a()), 0);
  run(1 * kMs);
  const CmEvent* r = last(0, CmEventType::RejReceived);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->reason, static_cast<uint16_t>(RejReason::StaleConn));
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rej_stale), 1u);
  EXPECT_EQ(w.count(wire::CmAttr::Dreq, 1), 1u);
  // The new A knows nothing of the old connection, so B's DREQ names no
  // connection A remembers: it is not answered (no DREP to a sender we
  // cannot verify), and B's old connection ends by its DREQ timing out.
  EXPECT_EQ(cm[0]->counters().get(CmCtr::rx_dreq_unknown), 1u);
  EXPECT_EQ(cm[0]->counters().get(CmCtr::drep_unknown), 0u);
  EXPECT_EQ(w.count(wire::CmAttr::Drep, 0), 0u);
  EXPECT_EQ(b_id->state, CmState::DreqSent);
  run(5 * kTimeoutNs);
  EXPECT_EQ(n_events(1, CmEventType::DreqTimeout), 1u);
  EXPECT_EQ(b_id->state, CmState::TimeWait);
}

TEST_F(CmConnected, StaleRep) {
  // B's side reboots its CM state and accepts a new REQ of A's with the QP
  // the old connection still names (12.9.8.3): A rejects the REP as stale,
  // releases its old connection (DREQ), and the new attempt fails on both
  // sides with reason 10.
  cm[1] = nullptr;
  b_id = nullptr;
  make(1, kGuidB, 0x7777);
  listen_b();
  CmId* a2 = cm[0]->create_id();
  ConnectParams p = params_a();
  p.qpn = Qpn(0x25);  // A's new QP; B's accept reuses 0x16
  EXPECT_EQ(cm[0]->connect(a2, p), 0);
  run(1 * kMs);
  EXPECT_EQ(cm[0]->counters().get(CmCtr::rej_stale_rep), 1u);
  const CmEvent* ra = last(0, CmEventType::RejReceived);
  ASSERT_NE(ra, nullptr);
  EXPECT_EQ(ra->id, a2);
  EXPECT_EQ(ra->reason, static_cast<uint16_t>(RejReason::StaleConn));
  EXPECT_EQ(ra->message_rejected, static_cast<uint8_t>(CmMsgRef::Rep));
  EXPECT_EQ(a2->state, CmState::Idle);
  EXPECT_EQ(n_events(0, CmEventType::Established), 0u);
  ASSERT_NE(b_id, nullptr);
  const CmEvent* rb = last(1, CmEventType::RejReceived);
  ASSERT_NE(rb, nullptr);
  EXPECT_EQ(rb->id, b_id);
  EXPECT_EQ(rb->reason, static_cast<uint16_t>(RejReason::StaleConn));
  EXPECT_EQ(b_id->state, CmState::Idle);
  EXPECT_EQ(n_events(1, CmEventType::Established), 0u);
  // The old connection: A's DREQ reaches a B that knows nothing of it, so
  // it goes unanswered (counted), and A's side ends by its DREQ timing out.
  EXPECT_EQ(w.count(wire::CmAttr::Dreq, 0), 1u);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rx_dreq_unknown), 1u);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::drep_unknown), 0u);
  EXPECT_EQ(a->state, CmState::DreqSent);
  run(5 * kTimeoutNs);
  EXPECT_EQ(a->state, CmState::TimeWait);
  run(kTimewaitNs + kMs);
  EXPECT_EQ(a->state, CmState::Idle);
  EXPECT_EQ(cm[0]->remote_index_size(), 0u);
}

TEST_F(CmConnected, RepReusingALiveCommIdIsStale) {
  // A REP whose sender's communication ID an established connection of
  // ours holds is stale too (12.9.8.3): B's side restarts with the same
  // seed, so its new connection gets the old one's ID.
  cm[1] = nullptr;
  b_id = nullptr;
  make(1, kGuidB);  // the seed SetUp used: the same communication IDs
  listen_b();
  hook[1] = [this](const CmEvent& e) {
    if (e.type == CmEventType::ReqReceived) {
      b_id = e.id;
      AcceptParams ap = params_b();
      ap.qpn = Qpn(0x36);  // another QP: only the ID repeats
      EXPECT_EQ(cm[1]->accept(e.id, ap), 0);
    }
  };
  CmId* a2 = cm[0]->create_id();
  ConnectParams p = params_a();
  p.qpn = Qpn(0x25);
  EXPECT_EQ(cm[0]->connect(a2, p), 0);
  run(1 * kMs);
  EXPECT_EQ(cm[0]->counters().get(CmCtr::rej_stale_rep), 1u);
  EXPECT_EQ(a2->state, CmState::Idle);
  EXPECT_EQ(w.count(wire::CmAttr::Dreq, 0), 1u);
}

TEST_F(CmConnected, LapAndAprDroppedAsLinuxDoesOnRoce) {
  // Linux's ib_cm drops LAP and APR on a RoCE port without an answer
  // (cm_lap_handler / cm_apr_handler); the connection goes on.
  MadBuf m = build_mad(RtuMsg{}, 7);
  wire::store_be(m.data() + kMadHdrSize, b_id->local_id);  // LAP: local comm ID (the sender's)
  wire::store_be(m.data() + kMadHdrSize + 4, a->local_id);  // remote comm ID
  wire::MadHdr(m.data()).set_attr_id(0x0019);  // LAP
  cm[0]->on_mad(w.addr(1), m);
  wire::MadHdr(m.data()).set_attr_id(0x001A);  // APR
  cm[0]->on_mad(w.addr(1), m);
  EXPECT_EQ(cm[0]->counters().get(CmCtr::rx_lap_dropped), 1u);
  EXPECT_EQ(cm[0]->counters().get(CmCtr::rx_apr_dropped), 1u);
  EXPECT_EQ(cm[0]->counters().get(CmCtr::rx_unsupported_attr), 0u);
  run(1 * kMs);
  EXPECT_TRUE(w.log().empty());  // no APR, no REJ
  EXPECT_TRUE(ev[0].empty());
  EXPECT_EQ(a->state, CmState::Established);
}

TEST_F(CmConnected, DestroyEstablishedSendsDreq) {
  hook[1] = [this](const CmEvent& e) {
    if (e.type == CmEventType::DreqReceived) {
      EXPECT_EQ(cm[1]->disconnect(e.id), 0);
    }
  };
  const size_t n = cm[0]->id_count();
  cm[0]->destroy_id(a);
  run(1 * kMs);
  EXPECT_EQ(w.count(wire::CmAttr::Dreq, 0), 1u);
  EXPECT_EQ(n_events(1, CmEventType::DreqReceived), 1u);
  EXPECT_TRUE(ev[0].empty());  // a destroyed id reports nothing
  run(kTimewaitNs + kMs);
  EXPECT_EQ(cm[0]->id_count(), n - 1);  // reaped after TimeWait
}

TEST_F(CmPair, SidrResolve) {
  const uint64_t usid = cma_service_id(PortSpace::Udp, 0x1c06);
  CmId* l = cm[1]->create_id();
  ASSERT_EQ(cm[1]->listen(l, usid), 0);
  hook[1] = [this](const CmEvent& e) {
    if (e.type == CmEventType::SidrReqReceived) {
      SidrReplyParams p;
      p.qpn = Qpn(0x16);
      p.qkey = 0x01234567;  // RDMA_UDP_QKEY
      p.private_data = bytes("udp ok");
      EXPECT_EQ(cm[1]->sidr_reply(e.id, p), 0);
    }
  };
  w.add_rule({wire::CmAttr::SidrRep, 1, Fault::Drop});  // lost once: repeated
  std::array<uint8_t, 216> pd{};
  ASSERT_TRUE(format_cma_private_data(CmaHdr::ipv4(kIpA, kIpB, 0xcf0b), bytes("who is there"), pd));
  SidrParams sp;
  sp.dest = w.addr(1);
  sp.service_id = usid;
  sp.timeout = kTimeout;
  sp.max_retries = 3;
  sp.private_data = pd;
  CmId* a = cm[0]->create_id();
  ASSERT_EQ(cm[0]->sidr_resolve(a, sp), 0);
  EXPECT_EQ(a->state, CmState::SidrReqSent);
  run(kTimeoutNs + kMs);
  const CmEvent* rq = last(1, CmEventType::SidrReqReceived);
  ASSERT_NE(rq, nullptr);
  const std::optional<CmaHdr> cma = read_cma_hdr(rq->private_data());
  ASSERT_TRUE(cma.has_value());
  EXPECT_EQ(cma->port, 0xcf0b);
  EXPECT_EQ(text(rq->private_data().subspan(kCmaHdrSize), 12), "who is there");
  EXPECT_EQ(n_events(1, CmEventType::SidrReqReceived), 1u);  // the repeat is answered, not reported
  const CmEvent* rp = last(0, CmEventType::SidrRepReceived);
  ASSERT_NE(rp, nullptr);
  EXPECT_EQ(rp->sidr_status, SidrStatus::Success);
  EXPECT_EQ(rp->sidr_qpn, Qpn(0x16));
  EXPECT_EQ(rp->sidr_qkey, 0x01234567u);
  EXPECT_EQ(rp->service_id, usid);
  EXPECT_EQ(text(rp->private_data(), 6), "udp ok");
  EXPECT_EQ(a->state, CmState::Idle);
  EXPECT_EQ(w.count(wire::CmAttr::SidrReq), 2u);
  EXPECT_EQ(w.count(wire::CmAttr::SidrRep), 2u);

  // No listener: status 1 (service ID not supported).
  CmId* a2 = cm[0]->create_id();
  sp.service_id = cma_service_id(PortSpace::Udp, 9);
  ASSERT_EQ(cm[0]->sidr_resolve(a2, sp), 0);
  run(1 * kMs);
  EXPECT_EQ(last(0, CmEventType::SidrRepReceived)->sidr_status, SidrStatus::Unsupported);

  // Nobody at all: SidrTimeout after the retries.
  w.attach(1, nullptr);
  CmId* a3 = cm[0]->create_id();
  ASSERT_EQ(cm[0]->sidr_resolve(a3, sp), 0);
  run(5 * kTimeoutNs);
  EXPECT_EQ(n_events(0, CmEventType::SidrTimeout), 1u);
}

TEST_F(CmPair, ConsumerCallsInTheWrongStateAreRefused) {
  CmId* a = cm[0]->create_id();
  EXPECT_EQ(cm[0]->accept(a, params_b()), -EINVAL);
  EXPECT_EQ(cm[0]->send_rtu(a), -EINVAL);
  EXPECT_EQ(cm[0]->disconnect(a), -EINVAL);
  EXPECT_EQ(cm[0]->established(a), -EINVAL);
  ConnectParams p = params_a();
  std::array<uint8_t, 93> big{};
  p.private_data = big;
  EXPECT_EQ(cm[0]->connect(a, p), -EINVAL);  // 93 > the REQ's 92 bytes
  EXPECT_EQ(a->state, CmState::Idle);
  CmId* l = listen_b();
  CmId* l2 = cm[1]->create_id();
  EXPECT_EQ(cm[1]->listen(l2, sid()), -EADDRINUSE);
  EXPECT_EQ(cm[1]->connect(l, params_a()), -EINVAL);
  EXPECT_TRUE(w.log().empty());
}

TEST_F(CmPair, CommIdsAreRandomAndUnique) {
  std::set<uint32_t> seen;
  for (int i = 0; i < 2000; ++i) {
    CmId* id = cm[0]->create_id();
    EXPECT_NE(id->local_id, 0u);
    seen.insert(id->local_id);
  }
  EXPECT_EQ(seen.size(), 2000u);
  // Not a counter: consecutive IDs are far apart most of the time.
  EXPECT_GT(*seen.rbegin() - *seen.begin(), 0x10000000u);
}

TEST_F(CmPair, BadMadsAreCountedAndDropped) {
  MadBuf m = build_mad(RtuMsg{}, 1);
  cm[1]->on_mad(w.addr(0), std::span<const uint8_t>(m.data(), 100));
  m[2] = 1;  // class version 1
  cm[1]->on_mad(w.addr(0), m);
  m[2] = 2;
  m[1] = 0x03;  // SA class
  cm[1]->on_mad(w.addr(0), m);
  m[1] = 0x07;
  wire::MadHdr(m.data()).set_attr_id(0x0001);  // ClassPortInfo: not handled
  cm[1]->on_mad(w.addr(0), m);
  wire::MadHdr(m.data()).set_attr_id(0x0014);  // RTU for nobody
  cm[1]->on_mad(w.addr(0), m);
  const CmCounters& c = cm[1]->counters();
  EXPECT_EQ(c.get(CmCtr::rx_short), 1u);
  EXPECT_EQ(c.get(CmCtr::rx_bad_class_version), 1u);
  EXPECT_EQ(c.get(CmCtr::rx_not_cm), 1u);
  EXPECT_EQ(c.get(CmCtr::rx_unsupported_attr), 1u);
  EXPECT_EQ(c.get(CmCtr::rx_unknown_id), 1u);
  EXPECT_TRUE(w.log().empty());
}

TEST_F(CmPair, ManyConnectionsAtOnce) {
  // 1,000 connections set up at once, then all torn down at once, half
  // by A's DREQ and half by B's: every one goes through TimeWait to Idle,
  // and once the consumers destroy their ids nothing is left (ids, the
  // peer indexes).
  constexpr uint32_t kN = 1000;
  CmId* l = listen_b();
  const size_t ids_a = cm[0]->id_count();
  std::vector<CmId*> bs;
  hook[1] = [this, &bs](const CmEvent& e) {
    if (e.type == CmEventType::ReqReceived) {
      AcceptParams p = params_b();
      p.qpn = Qpn(0x10000 + e.req->local_qpn);  // a QP of B's own per connection
      EXPECT_EQ(cm[1]->accept(e.id, p), 0);
      bs.push_back(e.id);
    }
    if (e.type == CmEventType::DreqReceived) {
      EXPECT_EQ(cm[1]->disconnect(e.id), 0);
    }
  };
  hook[0] = [this](const CmEvent& e) {
    if (e.type == CmEventType::RepReceived) {
      EXPECT_EQ(cm[0]->send_rtu(e.id), 0);
    }
    if (e.type == CmEventType::DreqReceived) {
      EXPECT_EQ(cm[0]->disconnect(e.id), 0);
    }
  };
  std::vector<CmId*> as;
  for (uint32_t i = 0; i < kN; ++i) {
    ConnectParams p = params_a();
    p.qpn = Qpn(0x100 + i);
    CmId* a = cm[0]->create_id();
    ASSERT_EQ(cm[0]->connect(a, p), 0);
    as.push_back(a);
  }
  run(1 * kMs);
  for (CmId* a : as) EXPECT_EQ(a->state, CmState::Established);
  ASSERT_EQ(bs.size(), kN);
  for (CmId* b : bs) EXPECT_EQ(b->state, CmState::Established);
  EXPECT_EQ(n_events(0, CmEventType::Established), kN);
  EXPECT_EQ(n_events(1, CmEventType::Established), kN);
  EXPECT_EQ(cm[0]->counters().get(CmCtr::rej_stale_rep), 0u);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::rej_stale), 0u);

  for (uint32_t i = 0; i < kN; ++i) {
    if (i % 2 == 0) {
      EXPECT_EQ(cm[0]->disconnect(as[i]), 0);
    } else {
      EXPECT_EQ(cm[1]->disconnect(bs[i]), 0);
    }
  }
  run(1 * kMs);
  for (CmId* a : as) EXPECT_EQ(a->state, CmState::TimeWait);
  for (CmId* b : bs) EXPECT_EQ(b->state, CmState::TimeWait);
  EXPECT_EQ(w.count(wire::CmAttr::Dreq), kN);
  EXPECT_EQ(w.count(wire::CmAttr::Drep), kN);
  run(kTimewaitNs + 2 * kMs);
  EXPECT_EQ(n_events(0, CmEventType::TimewaitExit), kN);
  EXPECT_EQ(n_events(1, CmEventType::TimewaitExit), kN);
  for (CmId* a : as) EXPECT_EQ(a->state, CmState::Idle);
  for (CmId* b : bs) EXPECT_EQ(b->state, CmState::Idle);
  EXPECT_EQ(cm[0]->remote_index_size(), 0u);
  EXPECT_EQ(cm[1]->remote_index_size(), 0u);
  EXPECT_EQ(cm[0]->counters().get(CmCtr::timeouts), 0u);
  EXPECT_EQ(cm[1]->counters().get(CmCtr::timeouts), 0u);
  for (CmId* a : as) cm[0]->destroy_id(a);
  for (CmId* b : bs) cm[1]->destroy_id(b);
  EXPECT_EQ(cm[0]->id_count(), ids_a);
  EXPECT_EQ(cm[1]->id_count(), 1u);  // the listener
  cm[1]->destroy_id(l);
  EXPECT_EQ(cm[1]->id_count(), 0u);
}

}  // namespace
}  // namespace uroce::test
