// The rdma_cm model (cm/rdma_cm.hpp) between two devices in one process:
// two engines with their RNICs on the sim wire (tests/rnic/harness.hpp),
// each engine on its own thread as in the drop-in library, one RdmaCm over
// both.  What is checked is what an rdma_cm application sees: events, their
// status and private data, conn params, QP states and data through the
// connected QPs.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "cm/rdma_cm.hpp"
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

  void start(RdmaCmOptions opt, bool both = true) {
    cm_.reset();
    HarnessOptions ho;
    ho.resolve_neighbours = false;  // the model resolves them (ARP/ND)
    h_ = std::make_unique<Harness>(ho);
    h_->a().engine->start();
    h_->b().engine->start();
    std::vector<RdmaCmDevice> devs;
    for (rnic::testing::Node* n : {&h_->a(), &h_->b()}) {
      if (!both && n == &h_->b()) break;
      RdmaCmDevice d;
      d.rnic = n->rnic.get();
      d.addresses = {{IpAddr::v4(n->ip4), 24}, {IpAddr::v6(n->ip6), 64}};
      devs.push_back(d);
    }
    opt.cm.packet_life_ns = 1'000'000;  // a sim wire: 1 ms, not 268
    cm_ = std::make_unique<RdmaCm>(std::move(devs), opt);
    ASSERT_EQ(cm_->start(), 0);
  }

  void TearDown() override {
    cm_.reset();
    h_.reset();
  }

  // The next event on `ch` within `ms` (the fd polled, as an application does).
  std::optional<RdmaEvent> next(RdmaChannel* ch, int ms = 5000) {
    pollfd p{ch->fd, POLLIN, 0};
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
  const sockaddr_in same = sin4(h_->b().ip4, port_of(reinterpret_cast<const sockaddr*>(&a->src)));
  EXPECT_EQ(cm_->bind_addr(b, sa(same)), EADDRINUSE);
  const sockaddr_in foreign = sin4(0x0A0000FE, 5000);
  EXPECT_EQ(cm_->bind_addr(b, sa(foreign)), EADDRNOTAVAIL);
  EXPECT_EQ(cm_->destroy_id(a), 0);
  EXPECT_EQ(cm_->destroy_id(b), 0);
}

TEST_F(RdmaCmTest, NonBlockingChannelSaysEagain) {
  RdmaChannel* ch = cm_->create_channel();
  ASSERT_EQ(::fcntl(ch->fd, F_SETFL, ::fcntl(ch->fd, F_GETFL) | O_NONBLOCK), 0);
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

}  // namespace
}  // namespace uroce::cm
