// Limits: what query_device/query_port report is what create_* and post_*
// enforce — up to the limit works, one past it returns the errno the man
// pages name (ibv_create_qp/cq/srq: EINVAL; ibv_post_send/recv: EINVAL for
// a bad WR, ENOMEM for a full queue, with bad_wr at the failing WR).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "lib/wire/build.hpp"
#include "tests/common/raw_enum.hpp"
#include "tests/rnic/harness.hpp"

namespace uroce::rnic::testing {
namespace {

constexpr int kRemoteAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;

class Limits : public ::testing::Test {
 protected:
  Harness h;
  Node& n() { return h.a(); }
  const ibv_device_attr& dev() { return n().rnic->device_attr(); }

  ibv_qp_init_attr init_attr(Cq* cq, ibv_qp_type type = IBV_QPT_RC) {
    ibv_qp_init_attr init{};
    init.send_cq = reinterpret_cast<ibv_cq*>(cq);
    init.recv_cq = reinterpret_cast<ibv_cq*>(cq);
    init.qp_type = type;
    init.cap.max_send_wr = 16;
    init.cap.max_recv_wr = 16;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    return init;
  }
  // create_qp's errno (0 and the QP destroyed on success).
  int try_qp(const ibv_qp_init_attr& init) {
    int err = 0;
    Qp* q = n().rnic->create_qp(n().pd, init, &err);
    if (q == nullptr) return err == 0 ? -1 : err;
    EXPECT_EQ(n().rnic->destroy_qp(q), 0);
    return 0;
  }
};

TEST_F(Limits, DeviceAttrIsTheContract) {
  // The values limits.hpp promises (near rxe's) are what is reported.
  EXPECT_EQ(dev().max_qp_wr, static_cast<int>(kMaxQpWr));
  EXPECT_EQ(dev().max_sge, static_cast<int>(kMaxSge));
  EXPECT_EQ(dev().max_cqe, static_cast<int>(kMaxCqe));
  EXPECT_EQ(dev().max_srq_wr, static_cast<int>(kMaxSrqWr));
  EXPECT_EQ(dev().max_srq_sge, static_cast<int>(kMaxSrqSge));
  EXPECT_EQ(dev().max_qp_rd_atom, static_cast<int>(kMaxQpRdAtom));
  EXPECT_EQ(dev().max_qp_init_rd_atom, static_cast<int>(kMaxQpRdAtom));
  EXPECT_EQ(dev().max_mr_size, kMaxMrSize);
  EXPECT_EQ(dev().phys_port_cnt, 1);
  EXPECT_NE(dev().atomic_cap, IBV_ATOMIC_NONE);
  EXPECT_EQ(dev().max_pkeys, kMaxPkeys);
  ibv_port_attr pa{};
  ASSERT_EQ(n().rnic->query_port(kPortNum, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(pa.max_msg_sz, kMaxMsgSize);
  EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_GE(pa.max_mtu, IBV_MTU_4096) << "the sim wire is jumbo";
  EXPECT_LE(n().rnic->gid_count(), static_cast<size_t>(pa.gid_tbl_len));
  EXPECT_EQ(n().rnic->query_port(2, &pa), EINVAL) << "one port";
  ibv_gid gid{};
  // Past the entries in use an entry reads as zeros (as sysfs shows an
  // empty GID); past gid_tbl_len it is EINVAL.
  std::memset(gid.raw, 0xFF, 16);
  if (n().rnic->gid_count() < static_cast<size_t>(pa.gid_tbl_len)) {
    EXPECT_EQ(n().rnic->query_gid(kPortNum, static_cast<int>(n().rnic->gid_count()), &gid), 0);
    for (uint8_t b : gid.raw) EXPECT_EQ(b, 0);
  }
  EXPECT_EQ(n().rnic->query_gid(kPortNum, pa.gid_tbl_len, &gid), EINVAL);
  ASSERT_EQ(n().rnic->query_gid(kPortNum, n().gid_v4, &gid), 0);
  const auto mapped = wire::PktDesc::ipv4_mapped(kIpA);
  EXPECT_EQ(std::memcmp(gid.raw, mapped.data(), 16), 0);
  int type = -1;
  EXPECT_EQ(n().rnic->query_gid_type(kPortNum, n().gid_v4, &type), 0);
  EXPECT_EQ(type, IBV_GID_TYPE_ROCE_V2);
  uint16_t pkey = 0;
  EXPECT_EQ(n().rnic->query_pkey(kPortNum, 0, &pkey), 0);
  EXPECT_EQ(pkey, 0xFFFF);
}

TEST_F(Limits, CqEntries) {
  int err = 0;
  Cq* c = n().rnic->create_cq(dev().max_cqe, nullptr, nullptr, 0, &err);
  ASSERT_NE(c, nullptr) << "max_cqe itself: " << std::strerror(err);
  EXPECT_GE(c->capacity(), static_cast<uint32_t>(dev().max_cqe));
  EXPECT_EQ(n().rnic->destroy_cq(c), 0);
  err = 0;
  EXPECT_EQ(n().rnic->create_cq(dev().max_cqe + 1, nullptr, nullptr, 0, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  err = 0;
  EXPECT_EQ(n().rnic->create_cq(0, nullptr, nullptr, 0, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  err = 0;
  EXPECT_EQ(n().rnic->create_cq(-1, nullptr, nullptr, 0, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
}

TEST_F(Limits, QpCaps) {
  Cq* c = h.cq(n(), 64);
  ASSERT_NE(c, nullptr);
  auto init = init_attr(c);
  init.cap.max_send_wr = dev().max_qp_wr;
  init.cap.max_recv_wr = dev().max_qp_wr;
  init.cap.max_send_sge = dev().max_sge;
  init.cap.max_recv_sge = dev().max_sge;
  EXPECT_EQ(try_qp(init), 0) << "every cap at its limit";
  init = init_attr(c);
  init.cap.max_send_wr = dev().max_qp_wr + 1;
  EXPECT_EQ(try_qp(init), EINVAL) << "max_send_wr";
  init = init_attr(c);
  init.cap.max_recv_wr = dev().max_qp_wr + 1;
  EXPECT_EQ(try_qp(init), EINVAL) << "max_recv_wr";
  init = init_attr(c);
  init.cap.max_send_sge = dev().max_sge + 1;
  EXPECT_EQ(try_qp(init), EINVAL) << "max_send_sge";
  init = init_attr(c);
  init.cap.max_recv_sge = dev().max_sge + 1;
  EXPECT_EQ(try_qp(init), EINVAL) << "max_recv_sge";
  init = init_attr(c);
  init.cap.max_inline_data = kMaxInlineData;
  EXPECT_EQ(try_qp(init), 0) << "max_inline_data at its limit";
  init.cap.max_inline_data = kMaxInlineData + 1;
  EXPECT_EQ(try_qp(init), EINVAL) << "max_inline_data";
  init = init_attr(c);
  init.send_cq = nullptr;
  EXPECT_EQ(try_qp(init), EINVAL) << "no send CQ";
  init = init_attr(c);
  init.qp_type = static_cast<ibv_qp_type>(0x77);
  EXPECT_NE(try_qp(init), 0) << "unknown QP type";
}

TEST_F(Limits, SrqCaps) {
  int err = 0;
  ibv_srq_init_attr init{};
  init.attr.max_wr = dev().max_srq_wr;
  init.attr.max_sge = dev().max_srq_sge;
  Srq* s = n().rnic->create_srq(n().pd, init, &err);
  ASSERT_NE(s, nullptr) << std::strerror(err);
  EXPECT_EQ(n().rnic->destroy_srq(s), 0);
  init.attr.max_wr = dev().max_srq_wr + 1;
  err = 0;
  EXPECT_EQ(n().rnic->create_srq(n().pd, init, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  init.attr.max_wr = 16;
  init.attr.max_sge = dev().max_srq_sge + 1;
  err = 0;
  EXPECT_EQ(n().rnic->create_srq(n().pd, init, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  // srq_limit above max_wr.
  init.attr.max_sge = 1;
  s = n().rnic->create_srq(n().pd, init, &err);
  ASSERT_NE(s, nullptr);
  ibv_srq_attr at{};
  ibv_srq_attr q{};
  ASSERT_EQ(s->query(&q), 0);
  at.srq_limit = q.max_wr + 1;
  EXPECT_EQ(s->modify(at, IBV_SRQ_LIMIT), EINVAL);
}

TEST_F(Limits, RdAtomicAttributes) {
  Cq* c = h.cq(n(), 64);
  Qp* q = h.qp(n(), IBV_QPT_RC, c, c);
  ASSERT_NE(q, nullptr);
  ConnOpts o;
  o.max_rd_atomic = static_cast<uint8_t>(dev().max_qp_rd_atom);
  o.max_dest_rd_atomic = static_cast<uint8_t>(dev().max_qp_init_rd_atom);
  ASSERT_EQ(h.to_rts(q, h.a(), h.b(), Qpn(0x77), 1, 1, o), 0) << "rd_atomic at the limits";

  Qp* q2 = h.qp(n(), IBV_QPT_RC, c, c);
  ConnOpts bad = o;
  bad.max_dest_rd_atomic = static_cast<uint8_t>(dev().max_qp_init_rd_atom + 1);
  EXPECT_EQ(h.to_rts(q2, h.a(), h.b(), Qpn(0x77), 1, 1, bad), EINVAL) << "max_dest_rd_atomic";
  EXPECT_EQ(qp_state(q2), IBV_QPS_INIT) << "a refused modify leaves the QP as it was";
  Qp* q3 = h.qp(n(), IBV_QPT_RC, c, c);
  bad = o;
  bad.max_rd_atomic = static_cast<uint8_t>(dev().max_qp_rd_atom + 1);
  EXPECT_EQ(h.to_rts(q3, h.a(), h.b(), Qpn(0x77), 1, 1, bad), EINVAL) << "max_rd_atomic";
  EXPECT_EQ(qp_state(q3), IBV_QPS_RTR);
}

TEST_F(Limits, PostSendChecks) {
  Pair p = h.pair(IBV_QPT_RC, {}, QpCaps{.max_send_wr = 8, .max_recv_wr = 4, .max_send_sge = 2, .max_recv_sge = 2,
                                          .max_inline_data = 64});
  ASSERT_NE(p.qa, nullptr);
  const ibv_qp_cap cap = p.qa->cap();
  ASSERT_GE(cap.max_send_wr, 8u);
  ASSERT_GE(cap.max_send_sge, 2u);
  Buffer a = h.buffer(h.a(), 1 << 16, kRemoteAll);
  Buffer b = h.buffer(h.b(), 1 << 16, kRemoteAll);
  std::vector<ibv_sge> sges(cap.max_send_sge + 1, a.sge(0, 8));

  // More SGEs than max_send_sge: EINVAL, bad_wr the offender, nothing posted.
  ibv_send_wr ok = rdma_wr(IBV_WR_RDMA_WRITE, 1, {sges.data(), 1}, b.addr(), b.rkey());
  ibv_send_wr too_many = rdma_wr(IBV_WR_RDMA_WRITE, 2, sges, b.addr(), b.rkey());
  ok.next = &too_many;
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(p.qa->post_send(&ok, &bad), EINVAL);
  EXPECT_EQ(bad, &too_many);
  // The first WR of the list was posted (the verbs convention: bad_wr and
  // everything after it was not).
  auto wcs = h.wait_wcs(p.scq_a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 1u);

  // Unknown opcode: EINVAL.
  ibv_send_wr odd = rdma_wr(IBV_WR_RDMA_WRITE, 3, {sges.data(), 1}, b.addr(), b.rkey());
  uroce::testing::set_raw(odd.opcode, 0x55u);
  bad = nullptr;
  EXPECT_EQ(p.qa->post_send(&odd, &bad), EINVAL);
  EXPECT_EQ(bad, &odd);
  // A message longer than max_msg_sz: EINVAL (never touches the memory).
  ibv_port_attr pa{};
  ASSERT_EQ(h.a().rnic->query_port(kPortNum, &pa), 0);
  ibv_sge huge[2] = {{a.addr(), pa.max_msg_sz, a.lkey()}, {a.addr(), 1, a.lkey()}};
  ibv_send_wr big = rdma_wr(IBV_WR_RDMA_WRITE, 5, huge, b.addr(), b.rkey());
  EXPECT_EQ(post_send(p.qa, big), EINVAL);
  // Inline beyond the QP's max_inline_data: EINVAL.
  std::vector<uint8_t> plain(cap.max_inline_data + 1);
  ibv_sge in{reinterpret_cast<uint64_t>(plain.data()), static_cast<uint32_t>(plain.size()), 0};
  ibv_send_wr inl = rdma_wr(IBV_WR_RDMA_WRITE, 6, {&in, 1}, b.addr(), b.rkey(), IBV_SEND_INLINE | IBV_SEND_SIGNALED);
  EXPECT_EQ(post_send(p.qa, inl), EINVAL);
  EXPECT_TRUE(h.collect_for(p.scq_a, std::chrono::milliseconds(10)).empty()) << "refused WRs leave no trace";

  // The SQ full: exactly max_send_wr WQEs go in, the next is ENOMEM.
  // (Without progress the WQEs stay outstanding: post without polling.)
  std::vector<ibv_send_wr> wrs(cap.max_send_wr + 1);
  ibv_sge one = a.sge(0, 8);
  for (size_t i = 0; i < wrs.size(); ++i) {
    wrs[i] = rdma_wr(IBV_WR_RDMA_WRITE, 100 + i, {&one, 1}, b.addr(), b.rkey());
    if (i + 1 < wrs.size()) wrs[i].next = &wrs[i + 1];
  }
  bad = nullptr;
  EXPECT_EQ(p.qa->post_send(wrs.data(), &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[cap.max_send_wr]);
  wcs = h.wait_wcs(p.scq_a, cap.max_send_wr);
  ASSERT_EQ(wcs.size(), cap.max_send_wr);
  for (size_t i = 0; i < wcs.size(); ++i) EXPECT_EQ(wcs[i].wr_id, 100 + i);
  // Room again once completed.
  ibv_send_wr again = rdma_wr(IBV_WR_RDMA_WRITE, 999, {&one, 1}, b.addr(), b.rkey());
  EXPECT_EQ(post_send(p.qa, again), 0);
  EXPECT_EQ(h.wait_wc(p.scq_a).wr_id, 999u);

  // An atomic whose SGE is not 8 bytes: the verbs allow the post, the
  // WR completes with a local length error and nothing reaches the peer
  // (IBA 9.4.5; ConnectX and rxe alike).
  ibv_sge four = a.sge(0, 4);
  ibv_send_wr at = atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 4, &four, b.addr(), b.rkey(), 1, 0);
  at.send_flags = IBV_SEND_SIGNALED;
  const uint64_t requests = h.a().rnic->counters().get(RnicCtr::req_pkts);
  EXPECT_EQ(post_send(p.qa, at), 0);
  const ibv_wc wc = h.wait_wc(p.scq_a);
  EXPECT_EQ(wc.wr_id, 4u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR) << wc_status_name(wc.status);
  EXPECT_EQ(h.a().rnic->counters().get(RnicCtr::req_pkts), requests) << "nothing sent";
  EXPECT_EQ(qp_state(p.qa), IBV_QPS_ERR);
}

TEST_F(Limits, PostRecvChecks) {
  Pair p = h.pair(IBV_QPT_RC, {}, QpCaps{.max_send_wr = 8, .max_recv_wr = 4, .max_send_sge = 2, .max_recv_sge = 2,
                                          .max_inline_data = 64});
  ASSERT_NE(p.qb, nullptr);
  const ibv_qp_cap cap = p.qb->cap();
  Buffer b = h.buffer(h.b(), 4096, kRemoteAll);
  std::vector<ibv_sge> sges(cap.max_recv_sge + 1, b.sge(0, 8));
  ibv_recv_wr wr{};
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<int>(sges.size());
  const ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(p.qb->post_recv(&wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  std::vector<ibv_recv_wr> wrs(cap.max_recv_wr + 1);
  for (size_t i = 0; i < wrs.size(); ++i) {
    wrs[i].wr_id = i;
    wrs[i].sg_list = sges.data();
    wrs[i].num_sge = 1;
    if (i + 1 < wrs.size()) wrs[i].next = &wrs[i + 1];
  }
  bad = nullptr;
  EXPECT_EQ(p.qb->post_recv(wrs.data(), &bad), ENOMEM);
  EXPECT_EQ(bad, &wrs[cap.max_recv_wr]);
  // A QP on an SRQ takes no receives of its own.
  Srq* s = h.srq(h.b(), 16);
  Cq* c = h.cq(h.b());
  Qp* qs = h.qp(h.b(), IBV_QPT_RC, c, c, {}, s);
  ASSERT_NE(qs, nullptr);
  ibv_recv_wr one{};
  one.sg_list = sges.data();
  one.num_sge = 1;
  bad = nullptr;
  EXPECT_NE(qs->post_recv(&one, &bad), 0);
  // SRQ: more SGEs than its max_sge.
  ibv_srq_attr sa{};
  ASSERT_EQ(s->query(&sa), 0);
  std::vector<ibv_sge> many(sa.max_sge + 1, b.sge(0, 8));
  EXPECT_EQ(post_srq_recv(s, 1, many), EINVAL);
}

// A send posted in RESET, INIT or RTR is taken and dropped: it is never
// sent and never completes (as ConnectX; IBA 10.8.2 leaves it to the
// device); modify refuses illegal transitions with EINVAL.
TEST_F(Limits, StateMachine) {
  Cq* c = h.cq(n(), 64);
  Qp* q = h.qp(n(), IBV_QPT_RC, c, c);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(qp_state(q), IBV_QPS_RESET);
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(q->modify(at, IBV_QP_STATE), EINVAL) << "RESET -> RTS";
  at.qp_state = IBV_QPS_INIT;
  EXPECT_EQ(q->modify(at, IBV_QP_STATE), EINVAL) << "RESET -> INIT without its required attributes";
  EXPECT_EQ(qp_state(q), IBV_QPS_RESET);
  Buffer a = h.buffer(n(), 64, kRemoteAll);
  ibv_sge s = a.sge(0, 8);
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 1, {&s, 1});
  EXPECT_EQ(post_send(q, wr), 0) << "post_send in RESET";
  EXPECT_EQ(n().rnic->counters().get(RnicCtr::post_send_not_ready), 1u);
  const uint64_t requests = n().rnic->counters().get(RnicCtr::req_pkts);
  ConnOpts o;
  ASSERT_EQ(h.to_rts(q, h.a(), h.b(), Qpn(0x77), 1, 1, o), 0);
  EXPECT_TRUE(h.collect_for(c, std::chrono::milliseconds(20)).empty()) << "dropped, no completion";
  EXPECT_EQ(n().rnic->counters().get(RnicCtr::req_pkts), requests) << "never sent";
  at = {};
  at.qp_state = IBV_QPS_RTR;
  EXPECT_EQ(q->modify(at, IBV_QP_STATE), EINVAL) << "RTS -> RTR";
  at.qp_state = IBV_QPS_ERR;
  EXPECT_EQ(q->modify(at, IBV_QP_STATE), 0) << "any -> ERR";
  EXPECT_EQ(qp_state(q), IBV_QPS_ERR);
  at.qp_state = IBV_QPS_RESET;
  EXPECT_EQ(q->modify(at, IBV_QP_STATE), 0) << "ERR -> RESET";
  EXPECT_EQ(qp_state(q), IBV_QPS_RESET);
  ibv_qp_attr qa{};
  ibv_qp_init_attr qi{};
  EXPECT_EQ(q->query(&qa, IBV_QP_STATE, &qi), 0);
  EXPECT_EQ(qa.qp_state, IBV_QPS_RESET);
}

// Objects in use cannot be destroyed (EBUSY), as the man pages say.
TEST_F(Limits, DestroyInUseIsBusy) {
  Cq* c = h.cq(n(), 64);
  Qp* q = h.qp(n(), IBV_QPT_RC, c, c);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(n().rnic->destroy_cq(c), EBUSY);
  EXPECT_EQ(n().rnic->dealloc_pd(n().pd), EBUSY);
  EXPECT_EQ(n().rnic->destroy_qp(q), 0);
  EXPECT_EQ(n().rnic->destroy_cq(c), 0);
  int err = 0;
  CompChannel* ch = n().rnic->create_comp_channel(&err);
  ASSERT_NE(ch, nullptr);
  Cq* c2 = h.cq(n(), 16, ch);
  EXPECT_EQ(n().rnic->destroy_comp_channel(ch), EBUSY);
  EXPECT_EQ(n().rnic->destroy_cq(c2), 0);
  EXPECT_EQ(n().rnic->destroy_comp_channel(ch), 0);
}

}  // namespace
}  // namespace uroce::rnic::testing
