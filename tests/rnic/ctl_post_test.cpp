// post_send / post_recv validation: the errnos of ibv_post_send(3) and
// ibv_post_recv(3), the first bad work request in *bad, and what a
// posted WQE holds.
#include "tests/common/raw_enum.hpp"
#include "tests/rnic/ctl_fixture.hpp"

namespace uroce::rnic::ctltest {
namespace {

struct Post : Ctl {
  std::vector<uint8_t> buf = std::vector<uint8_t>(8192, 0x5a);
  ibv_sge sge(uint32_t len, uint32_t off = 0) { return ibv_sge{reinterpret_cast<uint64_t>(buf.data() + off), len, 0x100}; }
  static ibv_send_wr wr(ibv_wr_opcode op, ibv_sge* s, int n, uint64_t id = 1) {
    ibv_send_wr w{};
    w.wr_id = id;
    w.opcode = op;
    w.sg_list = s;
    w.num_sge = n;
    w.send_flags = IBV_SEND_SIGNALED;
    return w;
  }
  int post(Qp* q, ibv_send_wr& w, const ibv_send_wr** bad = nullptr) {
    const ibv_send_wr* b = nullptr;
    const int rc = q->post_send(&w, bad ? bad : &b);
    return rc;
  }
};

TEST_F(Post, SendRefusedBeforeRts) {
  Qp* q = qp(IBV_QPT_RC);
  ibv_sge s = sge(8);
  ibv_send_wr w = wr(IBV_WR_SEND, &s, 1);
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post(q, w, &bad), EINVAL);  // RESET
  EXPECT_EQ(bad, &w);
  ASSERT_EQ(to_init(q), 0);
  EXPECT_EQ(post(q, w), EINVAL);
  ASSERT_EQ(to_rtr(q), 0);
  EXPECT_EQ(post(q, w), EINVAL);
  EXPECT_EQ(q->sq.tail(), 0u);
  ASSERT_EQ(to_rts(q), 0);
  EXPECT_EQ(post(q, w), 0);
  EXPECT_EQ(q->sq.tail(), 1u);
}

TEST_F(Post, OpcodesPerType) {
  Qp* rc = qp(IBV_QPT_RC);
  Qp* uc = qp(IBV_QPT_UC);
  Qp* ud = qp(IBV_QPT_UD);
  ready(rc);
  ready(uc);
  ready(ud);
  int err = 0;
  Ah* ah = rnic->create_ah(pd, ah_attr(), &err);
  ASSERT_NE(ah, nullptr);
  ibv_sge s = sge(8);
  struct Case {
    unsigned op;  // as the application wrote it (99: no opcode at all)
    int rc, uc, ud;
  };
  const Case cases[] = {
      {IBV_WR_SEND, 0, 0, 0},
      {IBV_WR_SEND_WITH_IMM, 0, 0, 0},
      {IBV_WR_RDMA_WRITE, 0, 0, EINVAL},
      {IBV_WR_RDMA_WRITE_WITH_IMM, 0, 0, EINVAL},
      {IBV_WR_RDMA_READ, 0, EINVAL, EINVAL},
      {IBV_WR_ATOMIC_CMP_AND_SWP, 0, EINVAL, EINVAL},
      {IBV_WR_ATOMIC_FETCH_AND_ADD, 0, EINVAL, EINVAL},
      {IBV_WR_LOCAL_INV, 0, 0, EINVAL},   // memory windows: connected QPs (fails later: no such key)
      {IBV_WR_BIND_MW, EINVAL, EINVAL, EINVAL},  // no window named (bind_mw.mw NULL)
      {99, EINVAL, EINVAL, EINVAL},
  };
  for (const Case& c : cases) {
    ibv_send_wr w = wr(IBV_WR_SEND, &s, 1);
    uroce::testing::set_raw(w.opcode, c.op);
    EXPECT_EQ(post(rc, w), c.rc) << "RC opcode " << c.op;
    EXPECT_EQ(post(uc, w), c.uc) << "UC opcode " << c.op;
    w.wr.ud.ah = &ah->ibv;
    w.wr.ud.remote_qpn = 0x99;
    w.wr.ud.remote_qkey = 0x11111111;
    EXPECT_EQ(post(ud, w), c.ud) << "UD opcode " << c.op;
  }
}

TEST_F(Post, SendLimits) {
  Qp* q = qp(IBV_QPT_RC);  // 8 WRs, 2 SGEs, 64 inline bytes
  ready(q);
  ibv_sge s[3] = {sge(8), sge(8, 8), sge(8, 16)};
  ibv_send_wr w = wr(IBV_WR_SEND, s, 3);
  const ibv_send_wr* bad = nullptr;
  EXPECT_EQ(post(q, w, &bad), EINVAL);  // num_sge > max_send_sge
  EXPECT_EQ(bad, &w);

  ibv_sge big = sge(65);
  w = wr(IBV_WR_SEND, &big, 1);
  w.send_flags |= IBV_SEND_INLINE;
  EXPECT_EQ(post(q, w), EINVAL);  // inline above max_inline_data
  ibv_sge in = sge(64);
  w = wr(IBV_WR_RDMA_READ, &in, 1);
  w.send_flags |= IBV_SEND_INLINE;
  EXPECT_EQ(post(q, w), EINVAL);  // nothing to inline in a READ

  ibv_sge four = sge(4);
  w = wr(IBV_WR_ATOMIC_FETCH_AND_ADD, &four, 1);
  EXPECT_EQ(post(q, w), EINVAL);  // an atomic needs 8 bytes
  ibv_sge two[2] = {sge(8), sge(8, 8)};
  w = wr(IBV_WR_ATOMIC_CMP_AND_SWP, two, 2);
  EXPECT_EQ(post(q, w), EINVAL);  // and one SGE

  ibv_sge huge{reinterpret_cast<uint64_t>(buf.data()), 0x80000000u, 1};
  ibv_sge more = sge(1);
  ibv_sge msg[2] = {huge, more};
  w = wr(IBV_WR_RDMA_WRITE, msg, 2);
  EXPECT_EQ(post(q, w), EINVAL);  // above max_msg_sz
  EXPECT_EQ(q->sq.tail(), 0u);

  // A chain that fills the SQ: the ninth WR is the bad one, ENOMEM; the
  // first eight are posted.
  std::vector<ibv_send_wr> chain(9);
  ibv_sge one = sge(8);
  for (size_t i = 0; i < chain.size(); ++i) {
    chain[i] = wr(IBV_WR_RDMA_WRITE, &one, 1, i);
    chain[i].wr.rdma.remote_addr = 0x1000;
    chain[i].wr.rdma.rkey = 0x1234;
    if (i + 1 < chain.size()) chain[i].next = &chain[i + 1];
  }
  EXPECT_EQ(q->post_send(chain.data(), &bad), ENOMEM);
  EXPECT_EQ(bad, &chain[8]);
  EXPECT_EQ(q->sq.tail(), 8u);
  EXPECT_TRUE(q->sq.full());
  const SendWqe& first = q->sq.slot(0);
  EXPECT_EQ(first.opcode, IBV_WR_RDMA_WRITE);
  EXPECT_EQ(first.remote_addr, 0x1000u);
  EXPECT_EQ(first.rkey, Rkey(0x1234));
  EXPECT_EQ(first.length, 8u);
  EXPECT_EQ(first.num_sge, 1u);
}

TEST_F(Post, InlineBytesAreCopied) {
  Qp* q = qp(IBV_QPT_RC);
  ready(q);
  for (size_t i = 0; i < 40; ++i) buf[i] = static_cast<uint8_t>(i);
  ibv_sge s[2] = {sge(24), sge(16, 24)};
  ibv_send_wr w = wr(IBV_WR_SEND_WITH_IMM, s, 2, 42);
  w.send_flags |= IBV_SEND_INLINE;
  w.imm_data = 0x01020304;
  ASSERT_EQ(post(q, w), 0);
  std::fill(buf.begin(), buf.begin() + 40, 0);  // the caller may reuse its buffer at once
  const SendWqe& e = q->sq.slot(0);
  EXPECT_EQ(e.wr_id, 42u);
  EXPECT_EQ(e.length, 40u);
  EXPECT_EQ(e.imm_data, 0x01020304u);
  for (size_t i = 0; i < 40; ++i) ASSERT_EQ(e.inline_data[i], i) << i;
}

TEST_F(Post, UdAddressHandleAndLength) {
  Qp* q = qp(IBV_QPT_UD);
  ready(q);
  int err = 0;
  Ah* ah = rnic->create_ah(pd, ah_attr(true), &err);
  ASSERT_NE(ah, nullptr);
  Pd* other = rnic->alloc_pd(&err);
  Ah* foreign = rnic->create_ah(other, ah_attr(), &err);
  ASSERT_NE(foreign, nullptr);

  ibv_sge s = sge(4096);  // the port's MTU (4096 on a 9000-byte sim port)
  ibv_send_wr w = wr(IBV_WR_SEND, &s, 1, 5);
  w.wr.ud.ah = &foreign->ibv;
  EXPECT_EQ(post(q, w), EINVAL);  // an AH of another PD
  w.wr.ud.ah = nullptr;
  EXPECT_EQ(post(q, w), EINVAL);
  w.wr.ud.ah = &ah->ibv;
  w.wr.ud.remote_qpn = 0x1234;
  w.wr.ud.remote_qkey = 0x11111111;
  ibv_sge too_long = sge(4097);
  ibv_send_wr w2 = w;
  w2.sg_list = &too_long;
  EXPECT_EQ(post(q, w2), EINVAL);  // one packet at most
  ASSERT_EQ(post(q, w), 0);
  const SendWqe& e = q->sq.slot(0);
  EXPECT_EQ(e.remote_qpn, Qpn(0x1234));
  EXPECT_EQ(e.remote_qkey, 0x11111111u);
  EXPECT_EQ(e.ud_path.dgid, kPeerUla);
  EXPECT_FALSE(e.ud_path.ipv4);
  // The path is the WQE's own: destroying the AH now is fine.
  EXPECT_EQ(rnic->destroy_ah(ah), 0);
  EXPECT_EQ(q->sq.slot(0).ud_path.dgid, kPeerUla);
}

TEST_F(Post, RecvErrnos) {
  Qp* q = qp(IBV_QPT_RC);  // 8 WRs, 2 SGEs
  ibv_sge s[3] = {sge(8), sge(8, 8), sge(8, 16)};
  ibv_recv_wr w{};
  w.wr_id = 1;
  w.sg_list = s;
  w.num_sge = 1;
  const ibv_recv_wr* bad = nullptr;
  EXPECT_EQ(q->post_recv(&w, &bad), EINVAL);  // RESET
  EXPECT_EQ(bad, &w);
  ASSERT_EQ(to_init(q), 0);
  w.num_sge = 3;
  EXPECT_EQ(q->post_recv(&w, &bad), EINVAL);  // num_sge > max_recv_sge
  w.num_sge = 2;
  std::vector<ibv_recv_wr> chain(9, w);
  for (size_t i = 0; i + 1 < chain.size(); ++i) chain[i].next = &chain[i + 1];
  EXPECT_EQ(q->post_recv(chain.data(), &bad), ENOMEM);  // INIT takes receives; the ninth does not fit
  EXPECT_EQ(bad, &chain[8]);
  EXPECT_EQ(q->rq.size(), 8u);
  EXPECT_EQ(q->rq.front()->total_len, 16u);

  int err = 0;
  ibv_srq_init_attr si{};
  si.attr.max_wr = 4;
  si.attr.max_sge = 1;
  Srq* srq = rnic->create_srq(pd, si, &err);
  ASSERT_NE(srq, nullptr);
  Cq* c = cq();
  Qp* on_srq = qp(IBV_QPT_RC, c, c, srq);
  ASSERT_EQ(to_init(on_srq), 0);
  w.num_sge = 1;
  w.next = nullptr;
  EXPECT_EQ(on_srq->post_recv(&w, &bad), EINVAL);  // receives go to the SRQ

  w.num_sge = 2;
  EXPECT_EQ(srq->post_recv(&w, &bad), EINVAL);  // SRQ max_sge 1
  w.num_sge = 1;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(srq->post_recv(&w, &bad), 0);
  EXPECT_EQ(srq->post_recv(&w, &bad), ENOMEM);
}

}  // namespace
}  // namespace uroce::rnic::ctltest
