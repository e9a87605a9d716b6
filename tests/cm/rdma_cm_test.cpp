// The rdma_cm model (cm/rdma_cm.hpp) between two devices in one process:
// two devices (engine and RNIC) on the sim wire (tests/rnic/harness.hpp),
// each engine on its own thread as in the drop-in library, each device's
// IB CM attached to it (cm/device_cm.hpp), one RdmaCm over both.  What is checked is what an rdma_cm application sees: events, their
// status and private data, conn params, QP states and data through the
// connected QPs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cm/gsi_port.hpp"
#include "cm/rdma_cm.hpp"
#include "lib/util/log.hpp"
#include "lib/wire/build.hpp"
#include "tests/rnic/harness.hpp"

namespace uroce::cm {
namespace {

using rnic::testing::Harness;
using rnic::testing::HarnessOptions;
using transport::IpAddr;

sockaddr_in sin4(uint32_t ip, uint16_t port) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_addr.s_addr = htonl(ip);
  s.sin_port = htons(port);
  return s;
}
const sockaddr* sa(const sockaddr_in& s) { return reinterpret_cast<const sockaddr*>(&s); }
const sockaddr* sa(const sockaddr_in6& s) { return reinterpret_cast<const sockaddr*>(&s); }

std::string pdata_str(const RdmaEvent& ev, size_t n) {
  return std::string(reinterpret_cast<const char*>(ev.pdata.data()), std::min<size_t>(n, ev.pdata_len));
}

class RdmaCmTest : public ::testing::Test {
 protected:
  void SetUp() override { start({}); }

  // Each device of the model gets its IB CM (configured by `cc`) as the
  // drop-in gives it one; with both = false only A does (and is in the model).
  void start(RdmaCmOptions opt, bool both = true, CmConfig cc = {}) {
    cm_.reset();
    HarnessOptions ho;
    ho.resolve_neighbours = false;  // the model resolves them (ARP/ND)
    h_ = std::make_unique<Harness>(ho);
    h_->a().engine->start();
    h_->b().engine->start();
    cc.packet_life_ns = 1'000'000;  // a sim wire: 1 ms, not 268
    std::vector<RdmaCmDevice> devs;
    for (rnic::testing::Node* n : {&h_->a(), &h_->b()}) {
      if (!both && n == &h_->b()) break;
      auto dcm = DeviceCm::open(*n->rnic, cc);
      ASSERT_TRUE(dcm) << dcm.error().message;
      RdmaCmDevice d;
      d.cm = dcm->get();
      d.rnic = n->rnic;
      d.addresses = {{IpAddr::v4(n->ip4), 24}, {IpAddr::v6(n->ip6), 64}};
      devs.push_back(d);
      n->dev->attach(std::move(*dcm));
    }
    cm_ = std::make_unique<RdmaCm>(std::move(devs), opt);
    ASSERT_EQ(cm_->start(), 0);
  }

  void TearDown() override {
    cm_.reset();
    h_.reset();
  }

  // The next event on `ch` within `ms` (the fd polled, as an application does).
  std::optional<RdmaEvent> next(RdmaChannel* ch, int ms = 5000) {
    pollfd p{ch->q.fd(), POLLIN, 0};
    if (::poll(&p, 1, ms) != 1) return std::nullopt;
    RdmaEvent ev;
    if (cm_->get_event(ch, &ev) != 0) return std::nullopt;
    return ev;
  }
  // The next event, which must be `type`; acked.
  RdmaEvent expect(RdmaChannel* ch, rdma_cm_event_type type, int ms = 5000) {
    auto ev = next(ch, ms);
    EXPECT_TRUE(ev.has_value()) << "no event, wanted " << rdma_event_name(type);
    if (!ev) return RdmaEvent{};
    EXPECT_EQ(ev->type, type) << rdma_event_name(ev->type) << " status " << ev->status;
    cm_->ack_event(*ev);
    return *ev;
  }

  rnic::Qp* make_qp(rnic::testing::Node& n, ibv_qp_type type, rnic::Cq** cq_out) {
    rnic::Cq* cq = h_->cq(n, 256);
    rnic::testing::QpCaps caps;
    caps.max_send_wr = caps.max_recv_wr = 64;
    *cq_out = cq;
    return h_->qp(n, type, cq, cq, caps);
  }

  // Client id on A resolved to B's address and port.
  RdmaId* resolved_client(RdmaChannel* ch, rdma_port_space ps, uint16_t port, bool v6 = false) {
    RdmaId* c = nullptr;
    EXPECT_EQ(cm_->create_id(ch, nullptr, ps, ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC, &c), 0);
    if (v6) {
      sockaddr_in6 dst{};
      dst.sin6_family = AF_INET6;
      dst.sin6_port = htons(port);
      std::memcpy(&dst.sin6_addr, h_->b().ip6.data(), 16);
      EXPECT_EQ(cm_->resolve_addr(c, nullptr, sa(dst), 2000), 0);
    } else {
      const sockaddr_in src = sin4(h_->a().ip4, 0), dst = sin4(h_->b().ip4, port);
      EXPECT_EQ(cm_->resolve_addr(c, sa(src), sa(dst), 2000), 0);
    }
    expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED);
    EXPECT_EQ(cm_->resolve_route(c, 2000), 0);
    expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED);
    return c;
  }

  RdmaId* server(RdmaChannel* ch, rdma_port_space ps, uint16_t port, bool wildcard = false) {
    RdmaId* s = nullptr;
    EXPECT_EQ(cm_->create_id(ch, nullptr, ps, ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC, &s), 0);
    const sockaddr_in addr = sin4(wildcard ? 0 : h_->b().ip4, port);
    EXPECT_EQ(cm_->bind_addr(s, sa(addr)), 0);
    EXPECT_EQ(cm_->listen(s, 4), 0);
    return s;
  }

  std::unique_ptr<Harness> h_;
  std::unique_ptr<RdmaCm> cm_;
};

// The IB CM is the device's (a client of it, cm/device_cm.hpp); the model
// is only its consumer.  A second model cannot take a CM while the first
// runs (EBUSY).  When the first goes, its connections go with it (a DREQ
// leaves), the CMs stay, and a new model connects through them, on the
// same port.
TEST_F(RdmaCmTest, TheDevicesCmOutlivesTheModel) {
  auto devices = [&] {
    std::vector<RdmaCmDevice> v;
    for (rnic::testing::Node* n : {&h_->a(), &h_->b()}) {
      RdmaCmDevice d;
      d.cm = n->dev->client<DeviceCm>();
      d.rnic = n->rnic;
      d.addresses = {{IpAddr::v4(n->ip4), 24}, {IpAddr::v6(n->ip6), 64}};
      v.push_back(d);
    }
    return v;
  };
  DeviceCm* cm_a = h_->a().dev->client<DeviceCm>();
  ASSERT_NE(cm_a, nullptr);
  {
    RdmaCm second(devices());
    EXPECT_EQ(second.start(), EBUSY) << "the first model is the CM's consumer";
  }
  auto connect = [&](uint16_t port) {
    RdmaChannel* sch = cm_->create_channel();
    RdmaChannel* cch = cm_->create_channel();
    server(sch, RDMA_PS_TCP, port);
    RdmaId* c = resolved_client(cch, RDMA_PS_TCP, port);
    rnic::Cq* ccq = nullptr;
    rnic::Qp* cqp = make_qp(h_->a(), IBV_QPT_RC, &ccq);
    ASSERT_EQ(cm_->attach_qp(c, cqp), 0);
    rdma_conn_param cp{};
    ASSERT_EQ(cm_->connect(c, &cp), 0);
    RdmaEvent req = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_NE(req.id, nullptr);
    rnic::Cq* scq = nullptr;
    rnic::Qp* sqp = make_qp(h_->b(), IBV_QPT_RC, &scq);
    ASSERT_EQ(cm_->attach_qp(req.id, sqp), 0);
    rdma_conn_param ap{};
    ASSERT_EQ(cm_->accept(req.id, &ap), 0);
    expect(cch, RDMA_CM_EVENT_ESTABLISHED);
    expect(sch, RDMA_CM_EVENT_ESTABLISHED);
    EXPECT_EQ(cqp->state(), IBV_QPS_RTS);
  };
  ASSERT_NO_FATAL_FAILURE(connect(7400));
  const uint64_t sent = cm_a->cm().counters().get(CmCtr::tx_mads);
  cm_.reset();  // the model goes with a live connection
  EXPECT_GT(cm_a->cm().counters().get(CmCtr::tx_mads), sent) << "the connection's DREQ (or REJ) left";
  EXPECT_EQ(h_->a().dev->client<DeviceCm>(), cm_a) << "the CM is still the device's";

  cm_ = std::make_unique<RdmaCm>(devices());
  ASSERT_EQ(cm_->start(), 0);
  ASSERT_NO_FATAL_FAILURE(connect(7400));
}

TEST_F(RdmaCmTest, ConnectAcceptDataDisconnect) {
  RdmaChannel* sch = cm_->create_channel();
  RdmaChannel* cch = cm_->create_channel();
  RdmaId* l = server(sch, RDMA_PS_TCP, 7100);
  RdmaId* c = resolved_client(cch, RDMA_PS_TCP, 7100);
  ASSERT_NE(c->dev, nullptr);
  EXPECT_EQ(c->sgid_index, h_->a().gid_v4);

  rnic::Cq* ccq = nullptr;
  rnic::Qp* cqp = make_qp(h_->a(), IBV_QPT_RC, &ccq);
  ASSERT_EQ(cm_->attach_qp(c, cqp), 0);
  EXPECT_EQ(cqp->state(), IBV_QPS_INIT);  // rdma_create_qp: INIT at once

  const char hello[] = "hello from A";
  rdma_conn_param cp{};
  cp.private_data = hello;
  cp.private_data_len = sizeof hello;
  cp.responder_resources = 4;
  cp.initiator_depth = 2;
  cp.retry_count = 5;
  cp.rnr_retry_count = 6;
  ASSERT_EQ(cm_->connect(c, &cp), 0);

  RdmaEvent req = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  ASSERT_NE(req.id, nullptr);
  EXPECT_EQ(req.listen_id, l);
  EXPECT_EQ(req.pdata_len, kReqUserDataMax) << "the whole 56 bytes after the rdma_cm header";
  EXPECT_EQ(pdata_str(req, sizeof hello - 1), "hello from A");
  EXPECT_EQ(req.conn.responder_resources, 4);
  EXPECT_EQ(req.conn.initiator_depth, 2);
  EXPECT_EQ(req.conn.retry_count, 5);
  EXPECT_EQ(req.conn.rnr_retry_count, 6);
  EXPECT_EQ(req.conn.qp_num, cqp->qpn().value());
  EXPECT_EQ(port_of(reinterpret_cast<const sockaddr*>(&req.id->dst)), port_of(reinterpret_cast<const sockaddr*>(&c->src)));

  RdmaId* s = req.id;
  rnic::Cq* scq = nullptr;
  rnic::Qp* sqp = make_qp(h_->b(), IBV_QPT_RC, &scq);
  ASSERT_EQ(cm_->attach_qp(s, sqp), 0);
  const char world[] = "and from B";
  rdma_conn_param ap{};
  ap.private_data = world;
  ap.private_data_len = sizeof world;
  ap.responder_resources = 2;
  ap.initiator_depth = 4;
  ap.rnr_retry_count = 7;
  ASSERT_EQ(cm_->accept(s, &ap), 0);
  EXPECT_EQ(sqp->state(), IBV_QPS_RTS) << "the passive QP is ready before the REP leaves";

  RdmaEvent est = expect(cch, RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(pdata_str(est, sizeof world - 1), "and from B");
  EXPECT_EQ(est.conn.qp_num, sqp->qpn().value());
  EXPECT_EQ(cqp->state(), IBV_QPS_RTS);
  EXPECT_EQ(cqp->attrs().dest_qp_num, sqp->qpn().value());
  EXPECT_EQ(cqp->attrs().max_rd_atomic, 2) << "min(our initiator depth, their responder resources)";
  EXPECT_EQ(cqp->attrs().retry_cnt, 5);
  expect(sch, RDMA_CM_EVENT_ESTABLISHED);

  // Data through the connection the CM set up.
  auto sbuf = h_->buffer(h_->a(), 64, IBV_ACCESS_LOCAL_WRITE, 0x5A);
  auto rbuf = h_->buffer(h_->b(), 64, IBV_ACCESS_LOCAL_WRITE, 0);
  ibv_sge rs = rbuf.sge(0, 64);
  ASSERT_EQ(rnic::testing::post_recv(sqp, 1, {&rs, 1}), 0);
  ibv_sge ss = sbuf.sge(0, 64);
  ibv_send_wr wr = rnic::testing::send_wr(IBV_WR_SEND, 2, {&ss, 1});
  ASSERT_EQ(rnic::testing::post_send(cqp, wr), 0);
  ibv_wc wc{};
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int got = 0;
  while (got == 0 && std::chrono::steady_clock::now() < end) got = scq->poll(1, &wc);
  ASSERT_EQ(got, 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, 64u);
  EXPECT_EQ(rbuf.data()[63], 0x5A);

  // A receive left posted on the passive side flushes when it disconnects.
  ASSERT_EQ(rnic::testing::post_recv(sqp, 3, {&rs, 1}), 0);
  ASSERT_EQ(cm_->disconnect(c), 0);
  expect(sch, RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(sqp->state(), IBV_QPS_ERR);
  ASSERT_EQ(cm_->disconnect(s), 0);  // answers the DREQ
  expect(cch, RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(cqp->state(), IBV_QPS_ERR);
  got = 0;
  while (got == 0 && std::chrono::steady_clock::now() < end) got = scq->poll(1, &wc);
  ASSERT_EQ(got, 1);
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);

  cm_->detach_qp(c);
  cm_->detach_qp(s);
  EXPECT_EQ(cm_->destroy_id(c), 0);
  EXPECT_EQ(cm_->destroy_id(s), 0);
  EXPECT_EQ(cm_->destroy_id(l), 0);
  EXPECT_EQ(cm_->destroy_channel(sch), 0);
  EXPECT_EQ(cm_->destroy_channel(cch), 0);
}

// QPs the application brings up itself from rdma_init_qp_attr (no QP
// attached to either id), as pyverbs' external-QP test does: the passive
// side moves its QP to RTS before rdma_accept, so the receive PSN it is
// given then must be the Starting PSN its REP carries (Linux: the id's
// seq_num), and the active side after CONNECT_RESPONSE.  Data then flows
// both ways from the first PSN.
TEST_F(RdmaCmTest, ExternalQpsFromInitQpAttr) {
  RdmaChannel* ch = cm_->create_channel();
  RdmaId* l = server(ch, RDMA_PS_TCP, 7105);
  RdmaId* c = resolved_client(ch, RDMA_PS_TCP, 7105);
  rnic::Cq* ccq = nullptr;
  rnic::Cq* scq = nullptr;
  rnic::Qp* cqp = make_qp(h_->a(), IBV_QPT_RC, &ccq);
  rnic::Qp* sqp = make_qp(h_->b(), IBV_QPT_RC, &scq);
  auto bring_up = [&](RdmaId* id, rnic::Qp* qp) {
    for (ibv_qp_state st : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
      ibv_qp_attr a{};
      a.qp_state = st;
      int mask = 0;
      ASSERT_EQ(cm_->init_qp_attr(id, &a, &mask), 0) << "state " << st;
      if (st == IBV_QPS_INIT) a.qp_access_flags |= IBV_ACCESS_LOCAL_WRITE;
      ASSERT_EQ(qp->modify(a, mask), 0) << "state " << st;
    }
  };
  rdma_conn_param cp{};
  cp.qp_num = cqp->qpn().value();
  ASSERT_EQ(cm_->connect(c, &cp), 0);
  RdmaEvent req = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  RdmaId* s = req.id;
  ASSERT_NE(s, nullptr);
  bring_up(s, sqp);
  const uint32_t rq_psn_before_accept = sqp->attrs().rq_psn;
  rdma_conn_param ap{};
  ap.qp_num = sqp->qpn().value();
  ASSERT_EQ(cm_->accept(s, &ap), 0);
  expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE);  // no QP attached to the active id
  bring_up(c, cqp);
  EXPECT_EQ(cqp->attrs().sq_psn, rq_psn_before_accept) << "the REP's Starting PSN is what the passive QP expects";
  ASSERT_EQ(cm_->establish(c), 0);
  expect(ch, RDMA_CM_EVENT_ESTABLISHED);

  auto abuf = h_->buffer(h_->a(), 64, IBV_ACCESS_LOCAL_WRITE, 0x11);
  auto bbuf = h_->buffer(h_->b(), 64, IBV_ACCESS_LOCAL_WRITE, 0x22);
  ibv_sge as = abuf.sge(0, 64), bs = bbuf.sge(0, 64);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto one = [&](rnic::Cq* cq) {
    ibv_wc wc{};
    int got = 0;
    while (got == 0 && std::chrono::steady_clock::now() < end) got = cq->poll(1, &wc);
    EXPECT_EQ(got, 1);
    return wc;
  };
  // A to B, then B to A, each SEND into a posted receive.
  ASSERT_EQ(rnic::testing::post_recv(sqp, 1, {&bs, 1}), 0);
  ibv_send_wr w1 = rnic::testing::send_wr(IBV_WR_SEND, 2, {&as, 1});
  ASSERT_EQ(rnic::testing::post_send(cqp, w1), 0);
  ibv_wc wc = one(scq);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(bbuf.data()[0], 0x11);
  EXPECT_EQ(one(ccq).status, IBV_WC_SUCCESS);
  std::memset(abuf.data(), 0, 64);
  std::memset(bbuf.data(), 0x33, 64);
  ASSERT_EQ(rnic::testing::post_recv(cqp, 3, {&as, 1}), 0);
  ibv_send_wr w2 = rnic::testing::send_wr(IBV_WR_SEND, 4, {&bs, 1});
  ASSERT_EQ(rnic::testing::post_send(sqp, w2), 0);
  wc = one(ccq);
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(abuf.data()[63], 0x33);
  EXPECT_EQ(one(scq).status, IBV_WC_SUCCESS);

  EXPECT_EQ(cm_->destroy_id(c), 0);
  EXPECT_EQ(cm_->destroy_id(s), 0);
  EXPECT_EQ(cm_->destroy_id(l), 0);
}

// The id's state machine (rdma_cm_state.cpp): what each consumer call
// takes, as rdma_cm(7) and Linux's cma.c have it, and no state that
// nothing reaches or nothing leaves except the ends (a listener, a failed
// or a disconnected id: only rdma_destroy_id is left to them).
// QP 1's sends past its send ring wait in a backlog, in order, and go as
// slots free (as the kernel's ib_mad overflow list): a burst loses nothing
// until the backlog itself is full, and then only what does not fit.
TEST(GsiBacklog, ABurstPastTheSendRingWaitsInOrder) {
  HarnessOptions ho;
  Harness h(ho);
  h.a().engine->start();
  h.b().engine->start();
  GsiPort a(*h.a().rnic), b(*h.b().rnic);
  ASSERT_EQ(a.open(), 0);
  ASSERT_EQ(b.open(), 0);
  ibv_gid g{};
  ASSERT_EQ(h.b().rnic->query_gid(1, h.b().gid_v4, &g), 0);
  MadAddr to;
  std::memcpy(to.gid.data(), g.raw, to.gid.size());
  constexpr uint32_t kExtra = 100;
  constexpr uint32_t kBurst = GsiPort::kSendSlots + kExtra;
  std::array<uint8_t, wire::kMadSize> mad{};
  h.a().engine->run_sync([&] {
    for (uint32_t i = 0; i < kBurst; ++i) {
      std::memcpy(mad.data(), &i, sizeof i);
      EXPECT_TRUE(a.send(to, mad)) << i;
    }
  });
  EXPECT_EQ(a.counters().get(GsiCtr::tx_posted), GsiPort::kSendSlots);
  EXPECT_EQ(a.counters().get(GsiCtr::tx_queued), kExtra);
  // Both ports polled (as the CM's completion hook does) until the
  // backlog went out; B sees what it receives in the order it was sent.
  std::vector<uint32_t> got;
  const GsiPort::Receiver keep = [&](const MadAddr&, std::span<const uint8_t> m) {
    uint32_t i = 0;
    std::memcpy(&i, m.data(), sizeof i);
    got.push_back(i);
  };
  const GsiPort::Receiver none = [](const MadAddr&, std::span<const uint8_t>) {};
  unsigned quiet = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (quiet < 3 && std::chrono::steady_clock::now() < deadline) {
    unsigned n = 0;
    h.a().engine->run_sync([&] { n += a.poll(none); });
    h.b().engine->run_sync([&] { n += b.poll(keep); });
    quiet = n == 0 && a.counters().get(GsiCtr::tx_posted) == kBurst ? quiet + 1 : 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(a.counters().get(GsiCtr::tx_posted), kBurst) << "the backlog went out";
  EXPECT_EQ(a.counters().get(GsiCtr::tx_no_slot), 0u);
  EXPECT_EQ(a.counters().get(GsiCtr::tx_errors), 0u);
  ASSERT_FALSE(got.empty());
  EXPECT_TRUE(std::is_sorted(got.begin(), got.end())) << "MADs overtook each other";
  // Every slot free again: a ring's worth and a backlog's worth are taken,
  // the one after them is not.
  uint32_t refused = 0;
  h.a().engine->run_sync([&] {
    for (size_t i = 0; i < GsiPort::kSendSlots + GsiPort::kMaxBacklog + 1; ++i) refused += a.send(to, mad) ? 0 : 1;
  });
  EXPECT_EQ(refused, 1u);
  EXPECT_EQ(a.counters().get(GsiCtr::tx_no_slot), 1u);
  a.close();
  b.close();
}

TEST(RdmaIdStateMachine, TableAsTheManPagesHaveIt) {
  using S = RdmaIdState;
  using In = RdmaIdInput;
  const auto takes = [](In in) {
    std::set<S> out;
    for (unsigned s = 0; s < static_cast<unsigned>(S::kCount); ++s)
      if (rdma_id_allows(static_cast<S>(s), in)) out.insert(static_cast<S>(s));
    return out;
  };
  EXPECT_EQ(takes(In::Bind), (std::set<S>{S::Idle}));
  EXPECT_EQ(takes(In::ResolveAddr), (std::set<S>{S::AddrBound, S::AddrResolved, S::RouteResolved}));
  EXPECT_EQ(takes(In::ResolveRoute), (std::set<S>{S::AddrResolved, S::RouteResolved}));
  EXPECT_EQ(takes(In::Listen), (std::set<S>{S::AddrBound, S::Listen}));
  EXPECT_EQ(takes(In::Connect), (std::set<S>{S::RouteResolved}));
  EXPECT_EQ(takes(In::ConnectUd), (std::set<S>{S::AddrResolved, S::RouteResolved}));
  for (In in : {In::Accept, In::AcceptUd, In::Reject}) EXPECT_EQ(takes(in), (std::set<S>{S::ConnectRequest}));
  EXPECT_EQ(takes(In::Establish), (std::set<S>{S::Connect}));
  EXPECT_EQ(rdma_id_next(S::Accepting, In::Established), S::Connected);
  EXPECT_EQ(rdma_id_next(S::Connect, In::Rejected), S::Failed);
  EXPECT_EQ(rdma_id_next(S::Connected, In::Disconnected), S::Disconnected);
  EXPECT_EQ(rdma_id_next(S::AddrQuery, In::AddrError), S::AddrBound) << "bound still: resolve again";
  EXPECT_EQ(rdma_id_next(S::Listen, In::Listen), S::Listen);

  // Every state is reached from Idle; only Listen, Failed and Disconnected are ends.
  std::set<S> seen{S::Idle};
  std::vector<S> todo{S::Idle};
  while (!todo.empty()) {
    const S s = todo.back();
    todo.pop_back();
    for (unsigned i = 0; i < static_cast<unsigned>(In::kCount); ++i) {
      const auto in = static_cast<In>(i);
      if (!rdma_id_allows(s, in)) continue;
      const S to = rdma_id_next(s, in);
      if (seen.insert(to).second) todo.push_back(to);
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(S::kCount));
  for (unsigned s = 0; s < static_cast<unsigned>(S::kCount); ++s) {
    bool leaves = false;
    for (unsigned i = 0; i < static_cast<unsigned>(In::kCount); ++i)
      leaves |= rdma_id_allows(static_cast<S>(s), static_cast<In>(i)) &&
                rdma_id_next(static_cast<S>(s), static_cast<In>(i)) != static_cast<S>(s);
    const bool end = static_cast<S>(s) == S::Failed || static_cast<S>(s) == S::Disconnected ||
                     static_cast<S>(s) == S::Listen;
    EXPECT_EQ(leaves, !end) << rdma_id_state_name(static_cast<S>(s));
  }
}

// Every change of an id's state goes through the driver: with `conn`
// tracing on, a connection's ids leave one line per step, and a call the
// state does not take fails EINVAL and changes nothing.
TEST_F(RdmaCmTest, IdTraceFollowsEachStateChange) {
  std::vector<std::string> lines;
  std::mutex lines_mu;
  set_trace_hook([&](TraceCat c, std::string_view line) {
    std::lock_guard lock(lines_mu);
    if (c == TraceCat::Conn) lines.emplace_back(line);
  });
  ASSERT_TRUE(trace_apply("conn"));
  RdmaChannel* sch = cm_->create_channel();
  RdmaChannel* cch = cm_->create_channel();
  RdmaId* l = server(sch, RDMA_PS_TCP, 7101);
  RdmaId* c = resolved_client(cch, RDMA_PS_TCP, 7101);
  rnic::Cq* ccq = nullptr;
  ASSERT_EQ(cm_->attach_qp(c, make_qp(h_->a(), IBV_QPT_RC, &ccq)), 0);
  EXPECT_EQ(cm_->accept(c, nullptr), EINVAL) << "an active id has no request to accept";
  EXPECT_EQ(cm_->listen(c, 1), EINVAL);
  ASSERT_EQ(cm_->connect(c, nullptr), 0);
  RdmaEvent req = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  RdmaId* s = req.id;
  ASSERT_NE(s, nullptr);
  rnic::Cq* scq = nullptr;
  ASSERT_EQ(cm_->attach_qp(s, make_qp(h_->b(), IBV_QPT_RC, &scq)), 0);
  ASSERT_EQ(cm_->accept(s, nullptr), 0);
  expect(cch, RDMA_CM_EVENT_ESTABLISHED);
  expect(sch, RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(cm_->accept(s, nullptr), EINVAL) << "accepted already";
  EXPECT_EQ(s->state, RdmaIdState::Connected);
  ASSERT_TRUE(trace_apply("none"));
  set_trace_hook(nullptr);

  const auto has = [&](const RdmaId* id, const char* step) {
    char want[160];
    std::snprintf(want, sizeof want, "rdma_cm id %p: %s", static_cast<const void*>(id), step);
    return std::find(lines.begin(), lines.end(), std::string(want)) != lines.end();
  };
  EXPECT_TRUE(has(l, "Idle --bind--> AddrBound"));
  EXPECT_TRUE(has(l, "AddrBound --listen--> Listen"));
  EXPECT_TRUE(has(c, "AddrBound --resolve_addr--> AddrQuery"));
  EXPECT_TRUE(has(c, "AddrQuery --ADDR_RESOLVED--> AddrResolved"));
  EXPECT_TRUE(has(c, "AddrResolved --resolve_route--> RouteResolved"));
  EXPECT_TRUE(has(c, "RouteResolved --connect--> Connect"));
  EXPECT_TRUE(has(c, "Connect --ESTABLISHED--> Connected"));
  EXPECT_TRUE(has(s, "Idle --CONNECT_REQUEST--> ConnectRequest"));
  EXPECT_TRUE(has(s, "ConnectRequest --accept--> Accepting"));
  EXPECT_TRUE(has(s, "Accepting --ESTABLISHED--> Connected"));

  ASSERT_EQ(cm_->disconnect(c), 0);
  expect(sch, RDMA_CM_EVENT_DISCONNECTED);
  ASSERT_EQ(cm_->disconnect(s), 0);
  expect(cch, RDMA_CM_EVENT_DISCONNECTED);
  EXPECT_EQ(c->state, RdmaIdState::Disconnected);
  EXPECT_EQ(cm_->connect(c, nullptr), EINVAL) << "Disconnected is an end";
  cm_->detach_qp(c);
  cm_->detach_qp(s);
  EXPECT_EQ(cm_->destroy_id(c), 0);
  EXPECT_EQ(cm_->destroy_id(s), 0);
  EXPECT_EQ(cm_->destroy_id(l), 0);
  EXPECT_EQ(cm_->destroy_channel(sch), 0);
  EXPECT_EQ(cm_->destroy_channel(cch), 0);
}

// Loopback (issue 13): a client connecting to its own device — to the
// device's address or to 127.0.0.1, which binds the device as Linux's
// rdma_cm does — has address and route resolution, the CM's MADs on QP 1
// and the data loop back inside device A; B's wire stays silent.  The
// model has device A only, as a process with one device (with two, a
// destination one of them owns is reached from the other, over the wire:
// dev_for_dst).
class RdmaCmLoopback : public RdmaCmTest {
 protected:
  void SetUp() override { start({}, false); }

  // A listener on `listen_ip`, a client to `connect_ip`, both port 7300.
  void connect_and_send(uint32_t listen_ip, uint32_t connect_ip) {
    RdmaChannel* sch = cm_->create_channel();
    RdmaChannel* cch = cm_->create_channel();
    RdmaId* l = nullptr;
    ASSERT_EQ(cm_->create_id(sch, nullptr, RDMA_PS_TCP, IBV_QPT_RC, &l), 0);
    const sockaddr_in laddr = sin4(listen_ip, 7300), caddr = sin4(connect_ip, 7300);
    ASSERT_EQ(cm_->bind_addr(l, sa(laddr)), 0);
    ASSERT_EQ(cm_->listen(l, 4), 0);
    RdmaId* c = nullptr;
    ASSERT_EQ(cm_->create_id(cch, nullptr, RDMA_PS_TCP, IBV_QPT_RC, &c), 0);
    ASSERT_EQ(cm_->resolve_addr(c, nullptr, sa(caddr), 2000), 0);
    expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED);
    ASSERT_EQ(cm_->resolve_route(c, 2000), 0);
    expect(cch, RDMA_CM_EVENT_ROUTE_RESOLVED);
    ASSERT_NE(c->dev, nullptr);
    EXPECT_EQ(c->sgid_index, h_->a().gid_v4);
    // The id keeps the address it was given (rdma_get_local_addr/peer_addr).
    EXPECT_EQ(ntohl(reinterpret_cast<const sockaddr_in*>(&c->dst)->sin_addr.s_addr), connect_ip);

    rnic::Cq* ccq = nullptr;
    rnic::Qp* cqp = make_qp(h_->a(), IBV_QPT_RC, &ccq);
    ASSERT_EQ(cm_->attach_qp(c, cqp), 0);
    rdma_conn_param cp{};
    cp.responder_resources = 1;
    cp.initiator_depth = 1;
    cp.retry_count = 7;
    ASSERT_EQ(cm_->connect(c, &cp), 0);
    RdmaEvent req = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
    ASSERT_NE(req.id, nullptr);
    rnic::Cq* scq = nullptr;
    rnic::Qp* sqp = make_qp(h_->a(), IBV_QPT_RC, &scq);
    ASSERT_EQ(cm_->attach_qp(req.id, sqp), 0);
    ASSERT_EQ(cm_->accept(req.id, &cp), 0);
    expect(cch, RDMA_CM_EVENT_ESTABLISHED);
    expect(sch, RDMA_CM_EVENT_ESTABLISHED);
    EXPECT_EQ(cqp->attrs().dest_qp_num, sqp->qpn().value());

    auto sbuf = h_->buffer(h_->a(), 64, IBV_ACCESS_LOCAL_WRITE, 0x6B);
    auto rbuf = h_->buffer(h_->a(), 64, IBV_ACCESS_LOCAL_WRITE, 0);
    ibv_sge rs = rbuf.sge(0, 64);
    ASSERT_EQ(rnic::testing::post_recv(sqp, 1, {&rs, 1}), 0);
    ibv_sge ss = sbuf.sge(0, 64);
    ibv_send_wr wr = rnic::testing::send_wr(IBV_WR_SEND, 2, {&ss, 1});
    ASSERT_EQ(rnic::testing::post_send(cqp, wr), 0);
    ibv_wc wc{};
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    int got = 0;
    while (got == 0 && std::chrono::steady_clock::now() < end) got = scq->poll(1, &wc);
    ASSERT_EQ(got, 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(rbuf.data()[63], 0x6B);

    ASSERT_EQ(cm_->disconnect(c), 0);
    expect(sch, RDMA_CM_EVENT_DISCONNECTED);
    ASSERT_EQ(cm_->disconnect(req.id), 0);
    expect(cch, RDMA_CM_EVENT_DISCONNECTED);
    EXPECT_EQ(h_->b().engine->counters().get(transport::EngineCtr::rx_roce), 0u) << "nothing reached the wire";
    EXPECT_GT(h_->a().engine->counters().get(transport::EngineCtr::loopback), 0u);

    cm_->detach_qp(c);
    cm_->detach_qp(req.id);
    EXPECT_EQ(cm_->destroy_id(c), 0);
    EXPECT_EQ(cm_->destroy_id(req.id), 0);
    EXPECT_EQ(cm_->destroy_id(l), 0);
    EXPECT_EQ(cm_->destroy_channel(sch), 0);
    EXPECT_EQ(cm_->destroy_channel(cch), 0);
  }
};

constexpr uint32_t kLocalhost = 0x7F000001;  // 127.0.0.1

TEST_F(RdmaCmLoopback, ToTheDevicesOwnAddress) { connect_and_send(h_->a().ip4, h_->a().ip4); }
TEST_F(RdmaCmLoopback, To127001) { connect_and_send(kLocalhost, kLocalhost); }
TEST_F(RdmaCmLoopback, To127001WildcardListener) { connect_and_send(0, kLocalhost); }

// A listener on 127.0.0.1 hears a client of the device's own address: as
// a source, Linux counts a loopback address as a wildcard.
TEST_F(RdmaCmLoopback, ListenerOn127001HearsTheDevicesAddress) { connect_and_send(kLocalhost, h_->a().ip4); }

// Kernel 6.1 (rxe): rdma_bind_addr(127.0.0.1) succeeds with id->verbs NULL,
// keeps the address and port, and overlaps every binding of its port
// (EADDRNOTAVAIL), 127.0.0.2 included.  libfabric's verbs provider counts
// on the NULL verbs to pick a device address of its own.
TEST_F(RdmaCmLoopback, BindLocalhostBindsNoDevice) {
  RdmaId* id = nullptr;
  ASSERT_EQ(cm_->create_id(nullptr, nullptr, RDMA_PS_TCP, IBV_QPT_RC, &id), 0);
  const sockaddr_in lo = sin4(kLocalhost, 7310);
  ASSERT_EQ(cm_->bind_addr(id, sa(lo)), 0);
  EXPECT_EQ(id->dev, nullptr);
  EXPECT_EQ(id->verbs, nullptr);
  EXPECT_EQ(ntohl(reinterpret_cast<const sockaddr_in*>(&id->src)->sin_addr.s_addr), kLocalhost);
  EXPECT_EQ(port_of(reinterpret_cast<const sockaddr*>(&id->src)), 7310);
  for (const uint32_t other : {h_->a().ip4, uint32_t{0}, kLocalhost + 1}) {
    RdmaId* o = nullptr;
    ASSERT_EQ(cm_->create_id(nullptr, nullptr, RDMA_PS_TCP, IBV_QPT_RC, &o), 0);
    const sockaddr_in addr = sin4(other, 7310);
    EXPECT_EQ(cm_->bind_addr(o, sa(addr)), EADDRNOTAVAIL) << std::hex << other;
    EXPECT_EQ(cm_->destroy_id(o), 0);
  }
  EXPECT_EQ(cm_->destroy_id(id), 0);
}

TEST_F(RdmaCmTest, RejectCarriesReasonAndPrivateData) {
  RdmaChannel* ch = cm_->create_channel();
  RdmaId* l = server(ch, RDMA_PS_TCP, 7101, /*wildcard=*/true);
  RdmaId* c = resolved_client(ch, RDMA_PS_TCP, 7101);
  rdma_conn_param cp{};
  cp.qp_num = 0x123;  // no QP attached: the number in the REQ
  ASSERT_EQ(cm_->connect(c, &cp), 0);
  RdmaEvent req = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  EXPECT_EQ(req.conn.qp_num, 0x123u);
  const char no[] = "go away";
  ASSERT_EQ(cm_->reject(req.id, no, sizeof no), 0);
  RdmaEvent rej = expect(ch, RDMA_CM_EVENT_REJECTED);
  EXPECT_EQ(rej.id, c);
  EXPECT_EQ(rej.status, 28) << "IBA table 109: consumer reject";
  EXPECT_EQ(pdata_str(rej, sizeof no - 1), "go away");
  EXPECT_EQ(cm_->destroy_id(req.id), 0);
  EXPECT_EQ(cm_->destroy_id(c), 0);
  EXPECT_EQ(cm_->destroy_id(l), 0);
}

TEST_F(RdmaCmTest, NoListenerIsRejectedInvalidServiceId) {
  RdmaChannel* ch = cm_->create_channel();
  RdmaId* c = resolved_client(ch, RDMA_PS_TCP, 7199);
  rdma_conn_param cp{};
  cp.qp_num = 0x42;
  ASSERT_EQ(cm_->connect(c, &cp), 0);
  RdmaEvent rej = expect(ch, RDMA_CM_EVENT_REJECTED);
  EXPECT_EQ(rej.status, 8) << "IBA table 109: invalid service ID";
  EXPECT_EQ(cm_->destroy_id(c), 0);
}

// A full listen backlog (CONNECT_REQUESTs queued and not yet retrieved)
// forgets the REQ unanswered, as Linux's ucma + ib_cm do; the active side's
// REQ retransmission is taken once the application has retrieved a request.
TEST_F(RdmaCmTest, FullBacklogForgetsTheReqAndTakesItsRetry) {
  RdmaCmOptions opt;
  opt.cm_response_timeout = 14;  // ~67 ms per REQ try
  start(opt);
  RdmaChannel* sch = cm_->create_channel();
  RdmaChannel* cch = cm_->create_channel();
  RdmaId* l = nullptr;
  ASSERT_EQ(cm_->create_id(sch, nullptr, RDMA_PS_TCP, IBV_QPT_RC, &l), 0);
  const sockaddr_in addr = sin4(h_->b().ip4, 7104);
  ASSERT_EQ(cm_->bind_addr(l, sa(addr)), 0);
  ASSERT_EQ(cm_->listen(l, 1), 0);
  RdmaId* c1 = resolved_client(cch, RDMA_PS_TCP, 7104);
  RdmaId* c2 = resolved_client(cch, RDMA_PS_TCP, 7104);
  rdma_conn_param cp{};
  cp.qp_num = 0x42;
  ASSERT_EQ(cm_->connect(c1, &cp), 0);
  cp.qp_num = 0x43;
  ASSERT_EQ(cm_->connect(c2, &cp), 0);
  // One REQ is queued; the other finds the backlog full and is forgotten.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (cm_->cm_counters(1)->get(CmCtr::req_dropped) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(cm_->cm_counters(1)->get(CmCtr::req_dropped), 1u);
  EXPECT_FALSE(next(cch, 50).has_value()) << "nothing answers the dropped REQ";
  RdmaEvent r1 = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
  // Retrieved: room again, and the retransmitted REQ comes in.
  RdmaEvent r2 = expect(sch, RDMA_CM_EVENT_CONNECT_REQUEST, 3000);
  ASSERT_NE(r1.id, nullptr);
  ASSERT_NE(r2.id, nullptr);
  EXPECT_NE(r1.conn.qp_num, r2.conn.qp_num);
  EXPECT_EQ(r1.conn.qp_num + r2.conn.qp_num, 0x42u + 0x43u) << "both clients' requests, once each";
  EXPECT_GE(cm_->cm_counters(0)->get(CmCtr::retransmits), 1u);
  const char no[] = "full";
  ASSERT_EQ(cm_->reject(r1.id, no, sizeof no), 0);
  ASSERT_EQ(cm_->reject(r2.id, no, sizeof no), 0);
  EXPECT_EQ(expect(cch, RDMA_CM_EVENT_REJECTED).status, 28);
  EXPECT_EQ(expect(cch, RDMA_CM_EVENT_REJECTED).status, 28);
  for (RdmaId* id : {r1.id, r2.id, c1, c2, l}) EXPECT_EQ(cm_->destroy_id(id), 0);
}

TEST_F(RdmaCmTest, UnreachableWhenThePeerHasNoCm) {
  RdmaCmOptions opt;
  opt.cm_response_timeout = 10;  // 4 ms per try
  opt.max_cm_retries = 2;
  start(opt, /*both=*/false);    // B has no QP 1: its engine drops the MADs
  RdmaChannel* ch = cm_->create_channel();
  RdmaId* c = resolved_client(ch, RDMA_PS_TCP, 7102);
  rdma_conn_param cp{};
  cp.qp_num = 0x77;
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(cm_->connect(c, &cp), 0);
  RdmaEvent ev = expect(ch, RDMA_CM_EVENT_UNREACHABLE, 10000);
  EXPECT_EQ(ev.status, -ETIMEDOUT);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 2000) << "3 tries of ~6 ms";
  EXPECT_GE(cm_->cm_counters(0)->get(CmCtr::retransmits), 2u);
  EXPECT_EQ(cm_->destroy_id(c), 0);
}

TEST_F(RdmaCmTest, AddressResolutionTimesOut) {
  RdmaChannel* ch = cm_->create_channel();
  RdmaId* c = nullptr;
  ASSERT_EQ(cm_->create_id(ch, nullptr, RDMA_PS_TCP, IBV_QPT_RC, &c), 0);
  const sockaddr_in dst = sin4(0x0A000063, 7000);  // 10.0.0.99: nobody
  ASSERT_EQ(cm_->resolve_addr(c, nullptr, sa(dst), 100), 0);
  RdmaEvent ev = expect(ch, RDMA_CM_EVENT_ADDR_ERROR);
  EXPECT_EQ(ev.status, -ETIMEDOUT);
  EXPECT_EQ(cm_->destroy_id(c), 0);
}

TEST_F(RdmaCmTest, UdServiceResolutionThroughSidr) {
  RdmaChannel* ch = cm_->create_channel();
  RdmaId* l = server(ch, RDMA_PS_UDP, 7103);
  RdmaId* c = resolved_client(ch, RDMA_PS_UDP, 7103);
  rnic::Cq* ccq = nullptr;
  rnic::Qp* cqp = make_qp(h_->a(), IBV_QPT_UD, &ccq);
  ASSERT_EQ(cm_->attach_qp(c, cqp), 0);
  EXPECT_EQ(cqp->state(), IBV_QPS_RTS) << "a UD QP is ready at once";
  EXPECT_EQ(cqp->attrs().qkey, static_cast<uint32_t>(RDMA_UDP_QKEY));
  const char hi[] = "sidr";
  rdma_conn_param cp{};
  cp.private_data = hi;
  cp.private_data_len = sizeof hi;
  ASSERT_EQ(cm_->connect(c, &cp), 0);
  RdmaEvent req = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  EXPECT_TRUE(req.ud);
  EXPECT_EQ(req.pdata_len, kSidrReqUserDataMax);
  EXPECT_EQ(pdata_str(req, 4), "sidr");
  rnic::Cq* scq = nullptr;
  rnic::Qp* sqp = make_qp(h_->b(), IBV_QPT_UD, &scq);
  ASSERT_EQ(cm_->attach_qp(req.id, sqp), 0);
  ASSERT_EQ(cm_->accept(req.id, nullptr), 0);
  RdmaEvent est = expect(ch, RDMA_CM_EVENT_ESTABLISHED);
  EXPECT_EQ(est.id, c);
  EXPECT_TRUE(est.ud);
  EXPECT_EQ(est.ud_param.qp_num, sqp->qpn().value());
  EXPECT_EQ(est.ud_param.qkey, static_cast<uint32_t>(RDMA_UDP_QKEY));
  EXPECT_EQ(est.ud_param.ah_attr.is_global, 1);
  EXPECT_EQ(0, std::memcmp(est.ud_param.ah_attr.grh.dgid.raw, wire::PktDesc::ipv4_mapped(h_->b().ip4).data(), 16));
  cm_->detach_qp(c);
  cm_->detach_qp(req.id);
  EXPECT_EQ(cm_->destroy_id(req.id), 0);
  EXPECT_EQ(cm_->destroy_id(c), 0);
  EXPECT_EQ(cm_->destroy_id(l), 0);
}

TEST_F(RdmaCmTest, Ipv6ConnectWithoutQp) {
  RdmaChannel* ch = cm_->create_channel();
  RdmaId* l = nullptr;
  ASSERT_EQ(cm_->create_id(ch, nullptr, RDMA_PS_TCP, IBV_QPT_RC, &l), 0);
  sockaddr_in6 any{};
  any.sin6_family = AF_INET6;
  any.sin6_port = htons(7104);
  ASSERT_EQ(cm_->bind_addr(l, sa(any)), 0);
  ASSERT_EQ(cm_->listen(l, 0), 0);
  RdmaId* c = resolved_client(ch, RDMA_PS_TCP, 7104, /*v6=*/true);
  EXPECT_EQ(c->sgid_index, h_->a().gid_v6);
  rdma_conn_param cp{};
  cp.qp_num = 0x99;
  ASSERT_EQ(cm_->connect(c, &cp), 0);
  RdmaEvent req = expect(ch, RDMA_CM_EVENT_CONNECT_REQUEST);
  EXPECT_EQ(req.id->src.ss_family, AF_INET6);
  rdma_conn_param ap{};
  ap.qp_num = 0x98;
  ASSERT_EQ(cm_->accept(req.id, &ap), 0);
  RdmaEvent resp = expect(ch, RDMA_CM_EVENT_CONNECT_RESPONSE);  // no QP attached
  EXPECT_EQ(resp.conn.qp_num, 0x98u);
  ASSERT_EQ(cm_->establish(c), 0);
  expect(ch, RDMA_CM_EVENT_ESTABLISHED);  // the passive side, on the RTU
  EXPECT_EQ(cm_->destroy_id(c), 0);
  EXPECT_EQ(cm_->destroy_id(req.id), 0);
  EXPECT_EQ(cm_->destroy_id(l), 0);
}

TEST_F(RdmaCmTest, BindingRules) {
  RdmaChannel* ch = cm_->create_channel();
  RdmaId* a = nullptr;
  RdmaId* b = nullptr;
  ASSERT_EQ(cm_->create_id(ch, nullptr, RDMA_PS_TCP, IBV_QPT_RC, &a), 0);
  ASSERT_EQ(cm_->create_id(ch, nullptr, RDMA_PS_TCP, IBV_QPT_RC, &b), 0);
  const sockaddr_in any0 = sin4(0, 0);
  ASSERT_EQ(cm_->bind_addr(a, sa(any0)), 0);
  EXPECT_NE(port_of(reinterpret_cast<const sockaddr*>(&a->src)), 0) << "port 0 picks one";
  // Linux's cma_check_port: a specific address under a wildcard binding of
  // its port is EADDRNOTAVAIL; the same address twice is EADDRINUSE.
  const uint16_t port = port_of(reinterpret_cast<const sockaddr*>(&a->src));
  const sockaddr_in specific = sin4(h_->b().ip4, port);
  EXPECT_EQ(cm_->bind_addr(b, sa(specific)), EADDRNOTAVAIL);
  EXPECT_EQ(cm_->destroy_id(a), 0);
  ASSERT_EQ(cm_->bind_addr(b, sa(specific)), 0) << "the port is free once the wildcard is gone";
  ASSERT_EQ(cm_->create_id(ch, nullptr, RDMA_PS_TCP, IBV_QPT_RC, &a), 0);
  EXPECT_EQ(cm_->bind_addr(a, sa(specific)), EADDRINUSE);
  const sockaddr_in foreign = sin4(0x0A0000FE, 5000);
  EXPECT_EQ(cm_->bind_addr(a, sa(foreign)), EADDRNOTAVAIL) << "no device owns it";
  EXPECT_EQ(cm_->destroy_id(a), 0);
  EXPECT_EQ(cm_->destroy_id(b), 0);
}

TEST_F(RdmaCmTest, NonBlockingChannelSaysEagain) {
  RdmaChannel* ch = cm_->create_channel();
  ASSERT_EQ(::fcntl(ch->q.fd(), F_SETFL, ::fcntl(ch->q.fd(), F_GETFL) | O_NONBLOCK), 0);
  RdmaEvent ev;
  EXPECT_EQ(cm_->get_event(ch, &ev), EAGAIN);
  RdmaId* c = resolved_client(ch, RDMA_PS_TCP, 7105);  // events do arrive on it
  EXPECT_EQ(cm_->get_event(ch, &ev), EAGAIN);
  EXPECT_EQ(cm_->destroy_id(c), 0);
  EXPECT_EQ(cm_->destroy_channel(ch), 0);
}

TEST_F(RdmaCmTest, DestroyWaitsForAcks) {
  RdmaChannel* ch = cm_->create_channel();
  RdmaId* c = nullptr;
  ASSERT_EQ(cm_->create_id(ch, nullptr, RDMA_PS_TCP, IBV_QPT_RC, &c), 0);
  const sockaddr_in dst = sin4(h_->b().ip4, 7106);
  ASSERT_EQ(cm_->resolve_addr(c, nullptr, sa(dst), 2000), 0);
  auto ev = next(ch);
  ASSERT_TRUE(ev.has_value());
  std::atomic<bool> destroyed{false};
  std::thread t([&] {
    cm_->destroy_id(c);
    destroyed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(destroyed.load()) << "an unacknowledged event holds rdma_destroy_id";
  cm_->ack_event(*ev);
  t.join();
  EXPECT_TRUE(destroyed.load());
}

// ---- many connections at once ----------------------------------------------------------------

// 1,000 connections set up and torn down at once, as a server with many
// clients sees them: every connect posted first, then one thread services
// both channels (each CONNECT_REQUEST accepted with a QP of its own,
// ESTABLISHED on both sides), a SEND through every connection, then every
// connection disconnected at once, half by each side (the other side
// answers the DREQ with rdma_disconnect, as applications do), DISCONNECTED
// once per id on both sides, every id destroyed at once, and nothing left
// in the model once the connections' TimeWait is over.
TEST_F(RdmaCmTest, ThousandConnectionsAtOnce) {
  constexpr uint32_t kN = 1000;
  constexpr uint16_t kPort = 7300;
  constexpr auto kPhase = std::chrono::seconds(20);  // per phase; ~0.1 s unloaded
  CmConfig cc;
  cc.timewait_ns = 20'000'000;  // 20 ms instead of the ACK timeout's 2.1 s: the leak check waits for it
  start({}, true, cc);
  RdmaChannel* sch = cm_->create_channel();
  RdmaChannel* cch = cm_->create_channel();
  RdmaId* l = nullptr;
  ASSERT_EQ(cm_->create_id(sch, nullptr, RDMA_PS_TCP, IBV_QPT_RC, &l), 0);
  const sockaddr_in laddr = sin4(h_->b().ip4, kPort);
  ASSERT_EQ(cm_->bind_addr(l, sa(laddr)), 0);
  ASSERT_EQ(cm_->listen(l, static_cast<int>(kN)), 0);

  // Services both channels until done() or the phase's deadline; each event
  // goes to on(ev, on_b) and is acked after.
  auto serve = [&](const std::function<void(const RdmaEvent&, bool)>& on, const std::function<bool()>& done) {
    const auto end = std::chrono::steady_clock::now() + kPhase;
    while (!done() && std::chrono::steady_clock::now() < end) {
      pollfd p[2] = {{sch->q.fd(), POLLIN, 0}, {cch->q.fd(), POLLIN, 0}};
      if (::poll(p, 2, 100) <= 0) continue;
      for (int k = 0; k < 2; ++k) {
        if ((p[k].revents & POLLIN) == 0) continue;
        RdmaEvent ev;
        if (cm_->get_event(k == 0 ? sch : cch, &ev) != 0) continue;
        on(ev, k == 0);
        cm_->ack_event(ev);
      }
    }
  };
  auto unexpected = [](const RdmaEvent& ev, bool on_b) {
    ADD_FAILURE() << (on_b ? "B: " : "A: ") << rdma_event_name(ev.type) << " status " << ev.status;
  };

  // The active ids, resolved (the address and route events serviced as they come).
  std::vector<RdmaId*> cs(kN);
  std::map<const RdmaId*, uint32_t> a_index, b_index;  // id -> connection number
  for (uint32_t i = 0; i < kN; ++i) {
    ASSERT_EQ(cm_->create_id(cch, nullptr, RDMA_PS_TCP, IBV_QPT_RC, &cs[i]), 0);
    a_index[cs[i]] = i;
    const sockaddr_in src = sin4(h_->a().ip4, 0), dst = sin4(h_->b().ip4, kPort);
    ASSERT_EQ(cm_->resolve_addr(cs[i], sa(src), sa(dst), 2000), 0);
  }
  uint32_t routed = 0;
  serve(
      [&](const RdmaEvent& ev, bool on_b) {
        if (!on_b && ev.type == RDMA_CM_EVENT_ADDR_RESOLVED) {
          EXPECT_EQ(cm_->resolve_route(ev.id, 2000), 0);
        } else if (!on_b && ev.type == RDMA_CM_EVENT_ROUTE_RESOLVED) {
          ++routed;
        } else {
          unexpected(ev, on_b);
        }
      },
      [&] { return routed == kN; });
  ASSERT_EQ(routed, kN);

  // A QP per id on each side, one CQ per side; 8 bytes per connection in
  // one buffer per side.
  const rnic::testing::QpCaps caps{
      .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1, .max_recv_sge = 1, .max_inline_data = 0};
  rnic::Cq* acq = h_->cq(h_->a(), 2 * kN);
  rnic::Cq* bcq = h_->cq(h_->b(), 2 * kN);
  ASSERT_NE(acq, nullptr);
  ASSERT_NE(bcq, nullptr);
  auto abuf = h_->buffer(h_->a(), 8 * kN, IBV_ACCESS_LOCAL_WRITE);
  auto bbuf = h_->buffer(h_->b(), 8 * kN, IBV_ACCESS_LOCAL_WRITE);
  std::vector<rnic::Qp*> aqp(kN), bqp(kN, nullptr);
  std::vector<RdmaId*> ss(kN, nullptr);
  std::map<uint32_t, uint32_t> bqpn_index;  // B's QPN -> connection number
  for (uint32_t i = 0; i < kN; ++i) {
    aqp[i] = h_->qp(h_->a(), IBV_QPT_RC, acq, acq, caps);
    ASSERT_NE(aqp[i], nullptr);
    ASSERT_EQ(cm_->attach_qp(cs[i], aqp[i]), 0);
  }

  // Every connect at once, the connection number as private data.
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t i = 0; i < kN; ++i) {
    rdma_conn_param cp{};
    cp.private_data = &i;
    cp.private_data_len = sizeof i;
    cp.retry_count = 7;
    cp.rnr_retry_count = 7;
    ASSERT_EQ(cm_->connect(cs[i], &cp), 0) << i;
  }
  std::vector<int> est_a(kN, 0), est_b(kN, 0);
  uint32_t n_est = 0;
  serve(
      [&](const RdmaEvent& ev, bool on_b) {
        if (on_b && ev.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
          EXPECT_EQ(ev.listen_id, l);
          uint32_t i = kN;
          std::memcpy(&i, ev.pdata.data(), sizeof i);
          if (i >= kN || ss[i] != nullptr) {
            ADD_FAILURE() << "CONNECT_REQUEST for connection " << i << " (unknown or repeated)";
            return;
          }
          ss[i] = ev.id;
          b_index[ev.id] = i;
          bqp[i] = h_->qp(h_->b(), IBV_QPT_RC, bcq, bcq, caps);
          ASSERT_NE(bqp[i], nullptr);
          bqpn_index[bqp[i]->qpn().value()] = i;
          EXPECT_EQ(cm_->attach_qp(ev.id, bqp[i]), 0);
          ibv_sge rs = bbuf.sge(8 * i, 8);
          EXPECT_EQ(rnic::testing::post_recv(bqp[i], i, {&rs, 1}), 0);  // INIT takes receives
          EXPECT_EQ(cm_->accept(ev.id, nullptr), 0);
        } else if (ev.type == RDMA_CM_EVENT_ESTABLISHED) {
          auto& idx = on_b ? b_index : a_index;
          const auto it = idx.find(ev.id);
          ASSERT_NE(it, idx.end());
          ++(on_b ? est_b : est_a)[it->second];
          ++n_est;
        } else {
          unexpected(ev, on_b);
        }
      },
      [&] { return n_est == 2 * kN; });
  const auto setup_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(n_est, 2 * kN) << "ESTABLISHED events after " << setup_ms << " ms\n" << h_->counters();
  for (uint32_t i = 0; i < kN; ++i) {
    ASSERT_EQ(est_a[i], 1) << i;
    ASSERT_EQ(est_b[i], 1) << i;
    EXPECT_EQ(aqp[i]->state(), IBV_QPS_RTS) << i;
    EXPECT_EQ(bqp[i]->state(), IBV_QPS_RTS) << i;
    EXPECT_EQ(aqp[i]->attrs().dest_qp_num, bqp[i]->qpn().value()) << i;
  }
  std::cout << "[          ] " << kN << " connections established in " << setup_ms << " ms\n";

  // A SEND through every connection: its number lands in B's slot for it,
  // on the QP B accepted it with.
  for (uint32_t i = 0; i < kN; ++i) {
    std::memcpy(abuf.data() + 8 * i, &i, sizeof i);
    ibv_sge sg = abuf.sge(8 * i, 8);
    ibv_send_wr wr = rnic::testing::send_wr(IBV_WR_SEND, i, {&sg, 1});
    ASSERT_EQ(rnic::testing::post_send(aqp[i], wr), 0) << i;
  }
  // (The engines run on their threads: the CQs are only polled here, never
  // Harness::wait_wcs, which would run the engines from this thread too.)
  auto reap = [&](rnic::Cq* cq) {
    std::vector<ibv_wc> wcs;
    std::array<ibv_wc, 64> batch;
    const auto end = std::chrono::steady_clock::now() + kPhase;
    while (wcs.size() < kN && std::chrono::steady_clock::now() < end) {
      const int n = cq->poll(static_cast<int>(batch.size()), batch.data());
      wcs.insert(wcs.end(), batch.begin(), batch.begin() + std::max(n, 0));
    }
    return wcs;
  };
  const std::vector<ibv_wc> sent = reap(acq);
  const std::vector<ibv_wc> got = reap(bcq);
  ASSERT_EQ(sent.size(), kN);
  ASSERT_EQ(got.size(), kN);
  for (const ibv_wc& wc : sent) EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id;
  std::vector<bool> seen(kN, false);
  for (const ibv_wc& wc : got) {
    ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << wc.wr_id;
    ASSERT_LT(wc.wr_id, kN);
    const auto i = static_cast<uint32_t>(wc.wr_id);
    EXPECT_EQ(bqpn_index.at(wc.qp_num), i) << "the SEND of connection " << i << " on another QP";
    EXPECT_EQ(wc.byte_len, 8u);
    uint32_t v = kN;
    std::memcpy(&v, bbuf.data() + 8 * i, sizeof v);
    EXPECT_EQ(v, i);
    EXPECT_FALSE(seen[i]);
    seen[i] = true;
  }

  // Every connection disconnected at once: even ones by A, odd ones by B.
  const auto t1 = std::chrono::steady_clock::now();
  std::set<const RdmaId*> initiators;
  for (uint32_t i = 0; i < kN; ++i) {
    RdmaId* id = i % 2 == 0 ? cs[i] : ss[i];
    initiators.insert(id);
    ASSERT_EQ(cm_->disconnect(id), 0) << i;
  }
  std::vector<int> dis_a(kN, 0), dis_b(kN, 0);
  uint32_t n_dis = 0;
  serve(
      [&](const RdmaEvent& ev, bool on_b) {
        if (ev.type == RDMA_CM_EVENT_DISCONNECTED) {
          auto& idx = on_b ? b_index : a_index;
          const auto it = idx.find(ev.id);
          ASSERT_NE(it, idx.end());
          ++(on_b ? dis_b : dis_a)[it->second];
          ++n_dis;
          // The side that got the DREQ answers it (rdma_disconnect: the DREP).
          if (initiators.count(ev.id) == 0) {
            EXPECT_EQ(cm_->disconnect(ev.id), 0);
          }
        } else if (ev.type != RDMA_CM_EVENT_TIMEWAIT_EXIT) {
          unexpected(ev, on_b);
        }
      },
      [&] { return n_dis == 2 * kN; });
  const auto teardown_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t1).count();
  ASSERT_EQ(n_dis, 2 * kN) << "DISCONNECTED events after " << teardown_ms << " ms\n" << h_->counters();
  for (uint32_t i = 0; i < kN; ++i) {
    EXPECT_EQ(dis_a[i], 1) << i;
    EXPECT_EQ(dis_b[i], 1) << i;
    EXPECT_EQ(aqp[i]->state(), IBV_QPS_ERR) << i;
    EXPECT_EQ(bqp[i]->state(), IBV_QPS_ERR) << i;
  }
  std::cout << "[          ] " << kN << " connections disconnected in " << teardown_ms << " ms\n";

  // Nothing was lost or repeated on the way: no CM message retried, none
  // refused, no MAD dropped for want of a receive buffer or a send slot.
  for (size_t d = 0; d < 2; ++d) {
    const CmCounters& c = *cm_->cm_counters(d);
    EXPECT_EQ(c.get(CmCtr::retransmits), 0u) << "device " << d;
    EXPECT_EQ(c.get(CmCtr::timeouts), 0u) << "device " << d;
    EXPECT_EQ(c.get(CmCtr::rej_stale), 0u) << "device " << d;
    const GsiCounters& g = *cm_->gsi_counters(d);
    EXPECT_EQ(g.get(GsiCtr::tx_no_slot), 0u) << "device " << d;
    EXPECT_EQ(g.get(GsiCtr::rx_errors), 0u) << "device " << d;
  }
  EXPECT_EQ(h_->b().rnic->counters().get(rnic::RnicCtr::drop_no_recv_ud), 0u) << "QP 1 ran out of receives";
  EXPECT_EQ(h_->a().rnic->counters().get(rnic::RnicCtr::drop_no_recv_ud), 0u) << "QP 1 ran out of receives";

  // Every id destroyed at once (their connections still in TimeWait), then
  // the model's tables empty once TimeWait is over.
  for (uint32_t i = 0; i < kN; ++i) {
    cm_->detach_qp(cs[i]);
    cm_->detach_qp(ss[i]);
    ASSERT_EQ(cm_->destroy_id(cs[i]), 0) << i;
    ASSERT_EQ(cm_->destroy_id(ss[i]), 0) << i;
  }
  ASSERT_EQ(cm_->destroy_id(l), 0);
  ASSERT_EQ(cm_->destroy_channel(sch), 0);
  ASSERT_EQ(cm_->destroy_channel(cch), 0);
  RdmaCm::Usage u = cm_->usage();
  const auto end = std::chrono::steady_clock::now() + kPhase;
  while (u.cm_ids != 0 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    u = cm_->usage();
  }
  EXPECT_EQ(u.ids, 0u);
  EXPECT_EQ(u.channels, 0u);
  EXPECT_EQ(u.bound_ports, 0u);
  EXPECT_EQ(u.cm_ids, 0u) << "CM ids left after their TimeWait";
  EXPECT_EQ(u.cm_peers, 0u);
  EXPECT_EQ(u.cm_listens, 0u);
  EXPECT_EQ(u.accepting, 0u);
  EXPECT_EQ(u.resolving, 0u);
}

// ---- multicast (rdma_join_multicast on RoCEv2) ---------------------------------------------

constexpr uint32_t kGroup4 = 0xEF010101;  // 239.1.1.1

// A UD id on `n` resolved towards the group (no ARP: ADDR_RESOLVED at once)
// with a UD QP attached.
struct McastEnd {
  RdmaId* id = nullptr;
  rnic::Qp* qp = nullptr;
  rnic::Cq* cq = nullptr;
};

class RdmaCmMcastTest : public RdmaCmTest {
 protected:
  McastEnd end(RdmaChannel* ch, rnic::testing::Node& n, rdma_port_space ps = RDMA_PS_UDP) {
    McastEnd e;
    EXPECT_EQ(cm_->create_id(ch, nullptr, ps, IBV_QPT_UD, &e.id), 0);
    const sockaddr_in src = sin4(n.ip4, 0), group = sin4(kGroup4, 0);
    EXPECT_EQ(cm_->resolve_addr(e.id, sa(src), sa(group), 2000), 0);
    expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 1000);
    e.qp = make_qp(n, IBV_QPT_UD, &e.cq);
    EXPECT_EQ(cm_->attach_qp(e.id, e.qp), 0);
    return e;
  }

  static int poll_one(rnic::Cq* cq, ibv_wc* wc, int ms) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    int got = 0;
    while (got == 0 && std::chrono::steady_clock::now() < deadline) got = cq->poll(1, wc);
    return got;
  }
};

TEST_F(RdmaCmMcastTest, JoinSendReceiveLeave) {
  RdmaChannel* ch = cm_->create_channel();
  McastEnd rx = end(ch, h_->b());
  McastEnd tx = end(ch, h_->a());
  const sockaddr_in group = sin4(kGroup4, 0);
  int rx_ctx = 0, tx_ctx = 0;

  ASSERT_EQ(cm_->join_multicast(rx.id, sa(group), RDMA_MC_JOIN_FLAG_FULLMEMBER, &rx_ctx), 0);
  const RdmaEvent jr = expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
  EXPECT_EQ(jr.id, rx.id);
  EXPECT_EQ(jr.status, 0);
  EXPECT_TRUE(jr.ud);
  EXPECT_EQ(jr.ud_param.qp_num, 0xFFFFFFu);
  EXPECT_EQ(jr.ud_param.qkey, static_cast<uint32_t>(RDMA_UDP_QKEY));
  EXPECT_EQ(jr.ud_param.private_data, &rx_ctx) << "librdmacm hands the join's context back here";
  const ibv_ah_attr& ah = jr.ud_param.ah_attr;
  EXPECT_EQ(ah.is_global, 1);
  EXPECT_EQ(ah.port_num, 1);
  EXPECT_EQ(0, std::memcmp(ah.grh.dgid.raw, wire::PktDesc::ipv4_mapped(kGroup4).data(), 16))
      << "the MGID of an IPv4 group on RoCEv2 is ::ffff:a.b.c.d";
  EXPECT_EQ(ah.grh.sgid_index, h_->b().gid_v4);
  EXPECT_EQ(ah.grh.hop_limit, 64);

  // The sender joins send-only (its QP is not attached) and sends as mckey
  // does: an AH from the event, QPN 0xFFFFFF, the event's Q_Key.
  ASSERT_EQ(cm_->join_multicast(tx.id, sa(group), RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, &tx_ctx), 0);
  const RdmaEvent jt = expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
  EXPECT_EQ(jt.id, tx.id);
  EXPECT_EQ(jt.ud_param.ah_attr.grh.sgid_index, h_->a().gid_v4);
  int err = 0;
  rnic::Ah* sah = h_->a().rnic->create_ah(h_->a().pd, jt.ud_param.ah_attr, &err);
  ASSERT_NE(sah, nullptr) << err;

  auto sbuf = h_->buffer(h_->a(), 64, IBV_ACCESS_LOCAL_WRITE, 0x6B);
  auto rbuf = h_->buffer(h_->b(), 2 * (40 + 64), IBV_ACCESS_LOCAL_WRITE, 0);
  for (uint64_t i = 0; i < 2; ++i) {
    ibv_sge rs = rbuf.sge(i * (40 + 64), 40 + 64);
    ASSERT_EQ(rnic::testing::post_recv(rx.qp, i, {&rs, 1}), 0);
  }
  ibv_sge ss = sbuf.sge(0, 64);
  ibv_send_wr wr = rnic::testing::send_wr(IBV_WR_SEND, 7, {&ss, 1});
  wr.wr.ud.ah = &sah->ibv;
  wr.wr.ud.remote_qpn = jt.ud_param.qp_num;
  wr.wr.ud.remote_qkey = jt.ud_param.qkey;
  ASSERT_EQ(rnic::testing::post_send(tx.qp, wr), 0);
  ibv_wc wc{};
  ASSERT_EQ(poll_one(tx.cq, &wc, 5000), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(poll_one(rx.cq, &wc, 5000), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 0u);
  EXPECT_EQ(wc.byte_len, 40u + 64u);
  EXPECT_EQ(wc.src_qp, tx.qp->qpn().value());
  EXPECT_EQ(rbuf.data()[40 + 63], 0x6B);

  // Leave: the QP is detached, the next send reaches no group on B.
  EXPECT_EQ(cm_->leave_multicast(rx.id, sa(group)), 0);
  EXPECT_EQ(cm_->leave_multicast(rx.id, sa(group)), EADDRNOTAVAIL);
  const uint64_t no_group = h_->b().rnic->counters().get(rnic::RnicCtr::drop_mcast_no_group);
  wr.wr_id = 8;
  ASSERT_EQ(rnic::testing::post_send(tx.qp, wr), 0);
  ASSERT_EQ(poll_one(tx.cq, &wc, 5000), 1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (h_->b().rnic->counters().get(rnic::RnicCtr::drop_mcast_no_group) == no_group &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(h_->b().rnic->counters().get(rnic::RnicCtr::drop_mcast_no_group), no_group + 1);
  EXPECT_EQ(poll_one(rx.cq, &wc, 50), 0) << "nothing after the leave";

  EXPECT_EQ(cm_->leave_multicast(tx.id, sa(group)), 0);
  EXPECT_EQ(h_->a().rnic->destroy_ah(sah), 0);
  cm_->detach_qp(rx.id);
  cm_->detach_qp(tx.id);
  EXPECT_EQ(cm_->destroy_id(rx.id), 0);
  EXPECT_EQ(cm_->destroy_id(tx.id), 0);
  EXPECT_EQ(cm_->destroy_channel(ch), 0);
}

// Destroying an id leaves its groups: its QP no longer gets the group's
// packets.
TEST_F(RdmaCmMcastTest, DestroyIdLeaves) {
  RdmaChannel* ch = cm_->create_channel();
  McastEnd rx = end(ch, h_->b());
  const sockaddr_in group = sin4(kGroup4, 0);
  ASSERT_EQ(cm_->join_multicast(rx.id, sa(group), RDMA_MC_JOIN_FLAG_FULLMEMBER, nullptr), 0);
  expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
  EXPECT_EQ(cm_->destroy_id(rx.id), 0);
  // The QP outlives the id here: a group packet finds no group.
  rnic::Cq* scq = nullptr;
  rnic::Qp* sqp = make_qp(h_->a(), IBV_QPT_UD, &scq);
  ASSERT_EQ(h_->ud_ready(sqp, RDMA_UDP_QKEY), 0);
  ibv_ah_attr a{};
  a.is_global = 1;
  a.port_num = 1;
  a.grh.sgid_index = static_cast<uint8_t>(h_->a().gid_v4);
  std::memcpy(a.grh.dgid.raw, wire::PktDesc::ipv4_mapped(kGroup4).data(), 16);
  int err = 0;
  rnic::Ah* ah = h_->a().rnic->create_ah(h_->a().pd, a, &err);
  ASSERT_NE(ah, nullptr);
  auto sbuf = h_->buffer(h_->a(), 16, IBV_ACCESS_LOCAL_WRITE, 1);
  auto rbuf = h_->buffer(h_->b(), 40 + 16, IBV_ACCESS_LOCAL_WRITE, 0);
  ibv_sge rs = rbuf.sge(0, 40 + 16);
  ASSERT_EQ(rnic::testing::post_recv(rx.qp, 1, {&rs, 1}), 0);
  ibv_sge ss = sbuf.sge(0, 16);
  ibv_send_wr wr = rnic::testing::send_wr(IBV_WR_SEND, 1, {&ss, 1});
  wr.wr.ud.ah = &ah->ibv;
  wr.wr.ud.remote_qpn = 0xFFFFFF;
  wr.wr.ud.remote_qkey = RDMA_UDP_QKEY;
  ASSERT_EQ(rnic::testing::post_send(sqp, wr), 0);
  ibv_wc wc{};
  ASSERT_EQ(poll_one(scq, &wc, 5000), 1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (h_->b().rnic->counters().get(rnic::RnicCtr::drop_mcast_no_group) == 0 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(h_->b().rnic->counters().get(rnic::RnicCtr::drop_mcast_no_group), 1u);
  EXPECT_EQ(poll_one(rx.cq, &wc, 50), 0);
  EXPECT_EQ(h_->a().rnic->destroy_ah(ah), 0);
}

TEST_F(RdmaCmMcastTest, JoinRules) {
  RdmaChannel* ch = cm_->create_channel();
  const sockaddr_in group = sin4(kGroup4, 0), unicast = sin4(h_->a().ip4, 0);
  // Not bound to a device yet.
  RdmaId* idle = nullptr;
  ASSERT_EQ(cm_->create_id(ch, nullptr, RDMA_PS_UDP, IBV_QPT_UD, &idle), 0);
  EXPECT_EQ(cm_->join_multicast(idle, sa(group), RDMA_MC_JOIN_FLAG_FULLMEMBER, nullptr), EINVAL);
  // A connected port space.
  RdmaId* tcp = nullptr;
  ASSERT_EQ(cm_->create_id(ch, nullptr, RDMA_PS_TCP, IBV_QPT_RC, &tcp), 0);
  const sockaddr_in b_addr = sin4(h_->b().ip4, 0);
  ASSERT_EQ(cm_->bind_addr(tcp, sa(b_addr)), 0);
  EXPECT_EQ(cm_->join_multicast(tcp, sa(group), RDMA_MC_JOIN_FLAG_FULLMEMBER, nullptr), EINVAL);
  McastEnd e = end(ch, h_->b());
  EXPECT_EQ(cm_->join_multicast(e.id, sa(unicast), RDMA_MC_JOIN_FLAG_FULLMEMBER, nullptr), EINVAL);
  EXPECT_EQ(cm_->join_multicast(e.id, sa(group), RDMA_MC_JOIN_FLAG_RESERVED, nullptr), EINVAL);
  EXPECT_EQ(cm_->leave_multicast(e.id, sa(group)), EADDRNOTAVAIL);
  // IPoIB port space joins too (the id's Q_Key).
  McastEnd ipoib = end(ch, h_->b(), RDMA_PS_IPOIB);
  ASSERT_EQ(cm_->join_multicast(ipoib.id, sa(group), RDMA_MC_JOIN_FLAG_FULLMEMBER, nullptr), 0);
  const RdmaEvent j = expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
  EXPECT_EQ(j.ud_param.qp_num, 0xFFFFFFu);
  EXPECT_EQ(cm_->leave_multicast(ipoib.id, sa(group)), 0);
  cm_->detach_qp(e.id);
  cm_->detach_qp(ipoib.id);
  for (RdmaId* id : {idle, tcp, e.id, ipoib.id}) EXPECT_EQ(cm_->destroy_id(id), 0);
  EXPECT_EQ(cm_->destroy_channel(ch), 0);
}

// A join whose QP cannot be attached (the group is full) is reported as
// MULTICAST_ERROR with the attach's errno, as librdmacm turns it.
TEST_F(RdmaCmMcastTest, FullGroupIsMulticastError) {
  RdmaChannel* ch = cm_->create_channel();
  rnic::Rnic& rb = *h_->b().rnic;
  rnic::Cq* cq = h_->cq(h_->b(), 64);
  const wire::Ipv6Addr mgid = wire::PktDesc::ipv4_mapped(kGroup4);
  for (uint32_t i = 0; i < rnic::kMaxMcastQpAttach; ++i) {
    rnic::Qp* q = h_->qp(h_->b(), IBV_QPT_UD, cq, cq, rnic::testing::QpCaps{.max_send_wr = 1, .max_recv_wr = 1});
    ASSERT_NE(q, nullptr);
    ASSERT_EQ(rb.attach_mcast(q, mgid), 0);
  }
  McastEnd e = end(ch, h_->b());
  const sockaddr_in group = sin4(kGroup4, 0);
  int ctx = 0;
  ASSERT_EQ(cm_->join_multicast(e.id, sa(group), RDMA_MC_JOIN_FLAG_FULLMEMBER, &ctx), 0);
  const RdmaEvent ev = expect(ch, RDMA_CM_EVENT_MULTICAST_ERROR);
  EXPECT_EQ(ev.status, -ENOMEM);
  EXPECT_EQ(ev.ud_param.private_data, &ctx);
  // A send-only join attaches nothing, so it succeeds.
  McastEnd s = end(ch, h_->b());
  ASSERT_EQ(cm_->join_multicast(s.id, sa(group), RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER, nullptr), 0);
  expect(ch, RDMA_CM_EVENT_MULTICAST_JOIN);
  EXPECT_EQ(cm_->leave_multicast(e.id, sa(group)), 0);
  EXPECT_EQ(cm_->leave_multicast(s.id, sa(group)), 0);
  cm_->detach_qp(e.id);
  cm_->detach_qp(s.id);
  EXPECT_EQ(cm_->destroy_id(e.id), 0);
  EXPECT_EQ(cm_->destroy_id(s.id), 0);
  EXPECT_EQ(cm_->destroy_channel(ch), 0);
}

}  // namespace
}  // namespace uroce::cm
