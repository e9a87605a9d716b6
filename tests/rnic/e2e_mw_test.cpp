// Memory windows end to end (IBA 10.6.7; ibv_alloc_mw(3), ibv_bind_mw(3)):
// type 1 and type 2 binds on the send queue, access through a window's
// R_Key with its own rights and bounds, type 2's QP binding, local and
// remote invalidation, and the MR/PD rules while windows are bound.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tests/rnic/harness.hpp"

namespace uroce::rnic::testing {
namespace {

constexpr int kMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                          IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;

uint32_t inc_rkey(uint32_t k) { return (k & 0xFFFFFF00u) | ((k + 1) & 0xFFu); }

ibv_send_wr bind_wr(uint64_t wr_id, Mw* mw, uint32_t rkey, Mr* mr, uint64_t addr, uint64_t len, unsigned access,
                    ibv_mr* abi_mr) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = &mw->ibv;
  wr.bind_mw.rkey = rkey;
  // The RNIC names the MR by the L_Key of the application's ibv_mr.
  abi_mr->lkey = mr != nullptr ? mr->lkey.value() : 0;
  wr.bind_mw.bind_info.mr = mr != nullptr ? abi_mr : nullptr;
  wr.bind_mw.bind_info.addr = addr;
  wr.bind_mw.bind_info.length = len;
  wr.bind_mw.bind_info.mw_access_flags = access;
  return wr;
}

struct MwFixture : ::testing::Test {
  Harness h;
  Pair p;
  ibv_mr abi_mr{};
  Buffer src, win;

  void SetUp() override {
    p = h.pair(IBV_QPT_RC);
    ASSERT_NE(p.qa, nullptr);
    src = h.buffer(h.a(), 4096, kMrAccess);
    win = h.buffer(h.b(), 4096, kMrAccess);
    for (size_t i = 0; i < 4096; ++i) src.data()[i] = static_cast<uint8_t>(i * 7 + 1);
  }

  Mw* alloc(ibv_mw_type type) {
    int err = 0;
    Mw* mw = h.b().rnic->alloc_mw(h.b().pd, type, &err);
    EXPECT_NE(mw, nullptr) << err;
    return mw;
  }
  // Bind on B's QP `q`; the completion's status.
  ibv_wc_status bind(Qp* q, Cq* scq, Mw* mw, uint32_t rkey, uint64_t off, uint64_t len, unsigned access,
                     bool with_mr = true) {
    ibv_send_wr wr = bind_wr(77, mw, rkey, with_mr ? win.mr : nullptr, win.addr(off), len, access, &abi_mr);
    EXPECT_EQ(post_send(q, wr), 0);
    const ibv_wc wc = h.wait_wc(scq);
    EXPECT_EQ(wc.wr_id, 77u);
    if (wc.status == IBV_WC_SUCCESS) {
      EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
    }
    return wc.status;
  }
  // An RDMA op from A through `rkey` at B's `win` offset; its status.
  ibv_wc_status rdma(ibv_wr_opcode op, uint32_t rkey, size_t off, size_t len, Qp* qa = nullptr, Cq* scq = nullptr) {
    ibv_sge s = src.sge(0, len);
    ibv_send_wr wr = rdma_wr(op, 5, {&s, 1}, win.addr(off), rkey);
    EXPECT_EQ(post_send(qa != nullptr ? qa : p.qa, wr), 0);
    return h.wait_wc(scq != nullptr ? scq : p.scq_a).status;
  }
};

TEST_F(MwFixture, Type1BindAccessRebindAndUnbind) {
  Mw* mw = alloc(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  const uint32_t k0 = mw->ibv.rkey;
  // Allocated, not bound: covers nothing.
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, k0, 0, 8), IBV_WC_REM_ACCESS_ERR);
  p = h.pair(IBV_QPT_RC);
  const uint32_t k1 = inc_rkey(k0);
  ASSERT_EQ(bind(p.qb, p.scq_b, mw, k1, 1024, 1024, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ),
            IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, k1, 1024, 1024), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(win.data() + 1024, src.data(), 1024), 0);
  EXPECT_EQ(win.data()[1023], 0);
  EXPECT_EQ(win.data()[2048], 0);
  // Outside the window (in the MR): refused, nothing written.
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, k1, 2000, 100), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(win.data()[2048], 0);
  p = h.pair(IBV_QPT_RC);
  // Rights are the window's: no atomic through it although the MR allows.
  ibv_sge s = src.sge(0, 8);
  ibv_send_wr fa = atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 6, &s, win.addr(1024), k1, 1, 0);
  ASSERT_EQ(post_send(p.qa, fa), 0);
  EXPECT_EQ(h.wait_wc(p.scq_a).status, IBV_WC_REM_ACCESS_ERR);
  p = h.pair(IBV_QPT_RC);
  // A type 1 window is the PD's, not the QP's: another QP of B reaches it.
  EXPECT_EQ(rdma(IBV_WR_RDMA_READ, k1, 1024, 64), IBV_WC_SUCCESS);
  // Rebinding with the next key: the old key names nothing.
  const uint32_t k2 = inc_rkey(k1);
  ASSERT_EQ(bind(p.qb, p.scq_b, mw, k2, 0, 512, IBV_ACCESS_REMOTE_WRITE), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, k1, 1024, 8), IBV_WC_REM_ACCESS_ERR);
  p = h.pair(IBV_QPT_RC);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, k2, 0, 512), IBV_WC_SUCCESS);
  // A zero-length bind leaves the window covering nothing.
  const uint32_t k3 = inc_rkey(k2);
  ASSERT_EQ(bind(p.qb, p.scq_b, mw, k3, 0, 0, 0), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, k3, 0, 8), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(h.b().rnic->dealloc_mw(mw), 0);
}

TEST_F(MwFixture, Type2IsBoundToItsQpAndInvalidated) {
  Mw* mw = alloc(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const uint32_t k1 = inc_rkey(mw->ibv.rkey);
  ASSERT_EQ(bind(p.qb, p.scq_b, mw, k1, 0, 4096, IBV_ACCESS_REMOTE_WRITE), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, k1, 100, 200), IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(win.data() + 100, src.data(), 200), 0);
  // Through another connection of B (same PD, another QP): refused.
  Pair other = h.pair(IBV_QPT_RC);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, k1, 0, 8, other.qa, other.scq_a), IBV_WC_REM_ACCESS_ERR);
  // The MR under a bound window is not deregistered (EBUSY).
  EXPECT_EQ(h.b().rnic->dereg_mr(win.mr), EBUSY);
  // Binding it again before invalidation: a bind error, the QP to ERR.
  Pair again = h.pair(IBV_QPT_RC);
  EXPECT_EQ(bind(again.qb, again.scq_b, mw, inc_rkey(k1), 0, 64, IBV_ACCESS_REMOTE_WRITE), IBV_WC_MW_BIND_ERR);
  EXPECT_EQ(qp_state(again.qb), IBV_QPS_ERR);
  // LOCAL_INV from B: the key names nothing afterwards.
  ibv_send_wr inv{};
  inv.wr_id = 8;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = k1;
  ASSERT_EQ(post_send(p.qb, inv), 0);
  ibv_wc wc = h.wait_wc(p.scq_b);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, k1, 0, 8), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(h.b().rnic->dereg_mr(win.mr), 0) << "no window holds the MR once invalidated";
  win.mr = nullptr;
  // Invalidating it again: nothing bound, a local QP operation error.
  p = h.pair(IBV_QPT_RC);
  ASSERT_EQ(post_send(p.qb, inv), 0);
  EXPECT_EQ(h.wait_wc(p.scq_b).status, IBV_WC_LOC_QP_OP_ERR);
  EXPECT_EQ(h.b().rnic->dealloc_mw(mw), 0);
}

// A type 2 window covers some memory or is invalid: a zero-length bind
// is a bind error (ConnectX), and only the QP it was bound through
// invalidates it locally (another QP's LOCAL_INV is a memory window
// error and leaves it bound).
TEST_F(MwFixture, Type2ZeroLengthBindAndAnotherQpsInvalidate) {
  Mw* mw = alloc(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  EXPECT_EQ(bind(p.qb, p.scq_b, mw, inc_rkey(mw->ibv.rkey), 0, 0, IBV_ACCESS_REMOTE_READ), IBV_WC_MW_BIND_ERR);
  EXPECT_FALSE(mw->bound);
  p = h.pair(IBV_QPT_RC);
  const uint32_t k = inc_rkey(mw->ibv.rkey);
  ASSERT_EQ(bind(p.qb, p.scq_b, mw, k, 0, 64, IBV_ACCESS_REMOTE_READ), IBV_WC_SUCCESS);
  Pair other = h.pair(IBV_QPT_RC);
  ibv_send_wr inv{};
  inv.wr_id = 8;
  inv.opcode = IBV_WR_LOCAL_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.invalidate_rkey = mw->ibv.rkey;
  ASSERT_EQ(post_send(other.qb, inv), 0);
  EXPECT_EQ(h.wait_wc(other.scq_b).status, IBV_WC_MW_BIND_ERR);
  EXPECT_TRUE(mw->bound);
  EXPECT_EQ(rdma(IBV_WR_RDMA_READ, mw->ibv.rkey, 0, 64), IBV_WC_SUCCESS) << "still bound";
  ASSERT_EQ(post_send(p.qb, inv), 0);
  EXPECT_EQ(h.wait_wc(p.scq_b).status, IBV_WC_SUCCESS);
  EXPECT_FALSE(mw->bound);
  EXPECT_EQ(h.b().rnic->dealloc_mw(mw), 0);
}

// The bind names its window as an RNIC's WQE does, by the window's R_Key
// (its index): ibv_mw.handle is the kernel's and a program that garbles it
// (rdma-unit-test's MwGeneralTest.BindInvalidMw) still binds, as on ConnectX.
TEST_F(MwFixture, BindFindsTheWindowByItsKeyNotItsHandle) {
  for (const ibv_mw_type type : {IBV_MW_TYPE_1, IBV_MW_TYPE_2}) {
    p = h.pair(IBV_QPT_RC);
    Mw* mw = alloc(type);
    ASSERT_NE(mw, nullptr);
    const uint32_t handle = mw->ibv.handle;
    mw->ibv.handle ^= 0xDEADBEEF;
    const uint32_t k = inc_rkey(mw->ibv.rkey);
    ASSERT_EQ(bind(p.qb, p.scq_b, mw, k, 0, 64, IBV_ACCESS_REMOTE_READ), IBV_WC_SUCCESS) << type;
    EXPECT_EQ(rdma(IBV_WR_RDMA_READ, k, 0, 64), IBV_WC_SUCCESS) << type;
    mw->ibv.handle = handle;
    EXPECT_EQ(h.b().rnic->dealloc_mw(mw), 0);
  }
}

TEST_F(MwFixture, SendWithInvalidateFromThePeer) {
  Mw* mw = alloc(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const uint32_t k1 = inc_rkey(mw->ibv.rkey);
  ASSERT_EQ(bind(p.qb, p.scq_b, mw, k1, 0, 4096, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ),
            IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(IBV_WR_RDMA_READ, k1, 0, 64), IBV_WC_SUCCESS);
  Buffer rb = h.buffer(h.b(), 256, kMrAccess);
  ibv_sge r = rb.sge(0, 256);
  ASSERT_EQ(post_recv(p.qb, 3, {&r, 1}), 0);
  ibv_sge s = src.sge(0, 32);
  ibv_send_wr wr = send_wr(IBV_WR_SEND_WITH_INV, 4, {&s, 1});
  wr.invalidate_rkey = k1;
  ASSERT_EQ(post_send(p.qa, wr), 0);
  EXPECT_EQ(h.wait_wc(p.scq_a).status, IBV_WC_SUCCESS);
  const ibv_wc rw = h.wait_wc(p.rcq_b);
  EXPECT_EQ(rw.status, IBV_WC_SUCCESS) << wc_status_name(rw.status);
  EXPECT_NE(rw.wc_flags & IBV_WC_WITH_INV, 0u);
  EXPECT_EQ(rw.invalidated_rkey, k1);
  EXPECT_EQ(h.b().rnic->counters().get(RnicCtr::mw_remote_invalidated), 1u);
  EXPECT_EQ(rdma(IBV_WR_RDMA_READ, k1, 0, 64), IBV_WC_REM_ACCESS_ERR);
  // Once invalidated it binds again with a new key.
  p = h.pair(IBV_QPT_RC);
  const uint32_t k2 = inc_rkey(k1);
  ASSERT_EQ(bind(p.qb, p.scq_b, mw, k2, 0, 64, IBV_ACCESS_REMOTE_READ), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(IBV_WR_RDMA_READ, k2, 0, 64), IBV_WC_SUCCESS);
  // A type 2 window bound through another QP cannot be invalidated by this peer.
  Pair other = h.pair(IBV_QPT_RC);
  ibv_sge r2 = rb.sge(0, 256);
  ASSERT_EQ(post_recv(other.qb, 5, {&r2, 1}), 0);
  wr.invalidate_rkey = k2;
  ASSERT_EQ(post_send(other.qa, wr), 0);
  // Class J (IBA 9.9.6.3): the receive completes in error, no NAK; the
  // sender runs out of retries.
  EXPECT_EQ(h.wait_wc(other.rcq_b).status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(h.wait_wc(other.scq_a, std::chrono::seconds(10)).status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(rdma(IBV_WR_RDMA_READ, k2, 0, 64), IBV_WC_SUCCESS) << "still bound";
  EXPECT_EQ(h.b().rnic->dealloc_mw(mw), 0);
}

// Destroying the QP a type 2 window was bound through invalidates the
// window: no later QP (one made at the same address included) reaches it.
TEST_F(MwFixture, DestroyingItsQpInvalidatesAType2Window) {
  Mw* mw = alloc(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const uint32_t k1 = inc_rkey(mw->ibv.rkey);
  ASSERT_EQ(bind(p.qb, p.scq_b, mw, k1, 0, 4096, IBV_ACCESS_REMOTE_WRITE), IBV_WC_SUCCESS);
  EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, k1, 0, 8), IBV_WC_SUCCESS);
  ASSERT_EQ(h.b().rnic->destroy_qp(p.qb), 0);
  EXPECT_FALSE(mw->bound);
  for (int i = 0; i < 4; ++i) {  // new QPs, possibly at the old address
    Pair q = h.pair(IBV_QPT_RC);
    ASSERT_NE(q.qa, nullptr);
    EXPECT_EQ(rdma(IBV_WR_RDMA_WRITE, k1, 0, 8, q.qa, q.scq_a), IBV_WC_REM_ACCESS_ERR) << i;
  }
  EXPECT_EQ(h.b().rnic->dereg_mr(win.mr), 0) << "the window no longer holds the MR";
  win.mr = nullptr;
  EXPECT_EQ(h.b().rnic->dealloc_mw(mw), 0);
}

// The bind rules (IBA C10-72 .. C10-76): each failure completes the bind
// with IBV_WC_MW_BIND_ERR and leaves the window unbound.
TEST_F(MwFixture, BindRules) {
  int err = 0;
  Buffer nobind = h.buffer(h.b(), 256, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  Buffer ro = h.buffer(h.b(), 256, IBV_ACCESS_MW_BIND | IBV_ACCESS_REMOTE_READ);
  Pd* pd2 = h.b().rnic->alloc_pd(&err);
  ASSERT_NE(pd2, nullptr);
  Mw* other_pd = h.b().rnic->alloc_mw(pd2, IBV_MW_TYPE_2, &err);
  ASSERT_NE(other_pd, nullptr);
  struct Case {
    const char* what;
    Mw* mw;
    Mr* mr;
    uint64_t addr, len;
    unsigned access;
    int key_delta;
  };
  Mw* mw = alloc(IBV_MW_TYPE_2);
  ASSERT_NE(mw, nullptr);
  const Case cases[] = {
      {"MR without MW_BIND", mw, nobind.mr, nobind.addr(), 64, IBV_ACCESS_REMOTE_READ, 1},
      {"remote write over an MR without local write", mw, ro.mr, ro.addr(), 64, IBV_ACCESS_REMOTE_WRITE, 1},
      {"past the MR", mw, win.mr, win.addr(4000), 200, IBV_ACCESS_REMOTE_READ, 1},
      {"a window of another PD", other_pd, win.mr, win.addr(), 64, IBV_ACCESS_REMOTE_READ, 1},
      {"a length without an MR", mw, nullptr, 0, 64, IBV_ACCESS_REMOTE_READ, 1},
      {"unknown access bits", mw, win.mr, win.addr(), 64, 1u << 20, 1},
  };
  for (const Case& c : cases) {
    Pair q = h.pair(IBV_QPT_RC);
    const uint32_t key = c.key_delta == 1 ? inc_rkey(c.mw->rkey.value()) : c.mw->rkey.value() + c.key_delta;
    ibv_send_wr wr = bind_wr(9, c.mw, key, c.mr, c.addr, c.len, c.access, &abi_mr);
    ASSERT_EQ(post_send(q.qb, wr), 0) << c.what;
    const ibv_wc wc = h.wait_wc(q.scq_b);
    EXPECT_EQ(wc.status, IBV_WC_MW_BIND_ERR) << c.what;
    EXPECT_EQ(qp_state(q.qb), IBV_QPS_ERR) << c.what;
    EXPECT_FALSE(c.mw->bound) << c.what;
  }
  // The consumer owns only the key's low byte (IBA 10.6.7.2.1): a key
  // naming another index binds with the window's own index, and the
  // window's ibv_mw shows the key it got.
  {
    Pair q = h.pair(IBV_QPT_RC);
    const uint32_t asked = inc_rkey(mw->rkey.value()) + 0x100;
    ibv_send_wr wr = bind_wr(9, mw, asked, win.mr, win.addr(), 64, IBV_ACCESS_REMOTE_READ, &abi_mr);
    ASSERT_EQ(post_send(q.qb, wr), 0);
    EXPECT_EQ(h.wait_wc(q.scq_b).status, IBV_WC_SUCCESS);
    EXPECT_TRUE(mw->bound);
    EXPECT_EQ(mw->ibv.rkey >> 8, mw->ibv.handle >> 8) << "the index is the window's";
    EXPECT_EQ(mw->ibv.rkey & 0xFFu, asked & 0xFFu) << "the key byte is the consumer's";
    EXPECT_EQ(mw->rkey.value(), mw->ibv.rkey);
    EXPECT_EQ(rdma(IBV_WR_RDMA_READ, mw->ibv.rkey, 0, 64, q.qa, q.scq_a), IBV_WC_SUCCESS);
    ibv_send_wr inv{};
    inv.wr_id = 10;
    inv.opcode = IBV_WR_LOCAL_INV;
    inv.send_flags = IBV_SEND_SIGNALED;
    inv.invalidate_rkey = mw->ibv.rkey;
    ASSERT_EQ(post_send(q.qb, inv), 0);
    EXPECT_EQ(h.wait_wc(q.scq_b).status, IBV_WC_SUCCESS);
    EXPECT_FALSE(mw->bound);
  }
  // A window object that is not this device's (here: a copy claiming a
  // live window's index) is refused without being used.
  {
    Mw fake;
    fake.ibv = mw->ibv;
    fake.pd = h.b().pd;
    Pair q = h.pair(IBV_QPT_RC);
    ibv_send_wr wr = bind_wr(9, &fake, inc_rkey(mw->ibv.rkey), win.mr, win.addr(), 64, IBV_ACCESS_REMOTE_READ,
                             &abi_mr);
    ASSERT_EQ(post_send(q.qb, wr), 0);
    EXPECT_EQ(h.wait_wc(q.scq_b).status, IBV_WC_MW_BIND_ERR);
    EXPECT_FALSE(fake.bound);
    EXPECT_FALSE(mw->bound);
  }
  // Not on UD (post), and not inline.
  Cq* cq = h.cq(h.b());
  Qp* ud = h.qp(h.b(), IBV_QPT_UD, cq, cq);
  ASSERT_EQ(h.ud_ready(ud), 0);
  ibv_send_wr wr = bind_wr(9, mw, inc_rkey(mw->rkey.value()), win.mr, win.addr(), 64, 0, &abi_mr);
  EXPECT_EQ(post_send(ud, wr), EINVAL);
  wr.send_flags |= IBV_SEND_INLINE;
  EXPECT_EQ(post_send(p.qb, wr), EINVAL);
  // Windows hold their PD; a bad type is EINVAL.
  EXPECT_EQ(h.b().rnic->dealloc_pd(pd2), EBUSY);
  EXPECT_EQ(h.b().rnic->alloc_mw(h.b().pd, static_cast<ibv_mw_type>(3), &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(h.b().rnic->dealloc_mw(other_pd), 0);
  EXPECT_EQ(h.b().rnic->dealloc_mw(other_pd), EINVAL) << "twice";
  EXPECT_EQ(h.b().rnic->dealloc_pd(pd2), 0);
  EXPECT_EQ(h.b().rnic->dealloc_mw(mw), 0);
}

// An unsignaled WRITE that only a bind follows: the bind sends nothing,
// so the WRITE is the last message and asks for the ACK that completes
// both (without the ask the bind's CQE waited for the ACK timeout).
TEST_F(MwFixture, AMessageThatOnlyABindFollowsAsksForTheAck) {
  Mw* mw = alloc(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  Buffer own = h.buffer(h.b(), 256, kMrAccess);
  Buffer at_a = h.buffer(h.a(), 256, kMrAccess);
  ibv_sge s = own.sge(0, 64);
  ibv_send_wr w1 = rdma_wr(IBV_WR_RDMA_WRITE, 1, {&s, 1}, at_a.addr(), at_a.rkey(), 0);
  ibv_send_wr b = bind_wr(2, mw, inc_rkey(mw->rkey.value()), win.mr, win.addr(), 128, IBV_ACCESS_REMOTE_READ, &abi_mr);
  w1.next = &b;
  ASSERT_EQ(post_send(p.qb, w1), 0);
  const ibv_wc wc = h.wait_wc(p.scq_b);
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(h.b().rnic->counters().get(RnicCtr::ack_timeouts), 0u);
  EXPECT_EQ(h.b().rnic->counters().get(RnicCtr::req_retrans_pkts), 0u);
}

// Deallocating a bound window ends access through it at once, and frees
// its MR for deregistration; binds keep send-queue order with the WRITEs
// around them.
TEST_F(MwFixture, DeallocUnbindsAndBindsKeepOrder) {
  Mw* mw = alloc(IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  Buffer own = h.buffer(h.b(), 256, kMrAccess);
  // B: WRITE to A, bind, WRITE to A, all signaled: three CQEs in order.
  Buffer at_a = h.buffer(h.a(), 256, kMrAccess);
  ibv_sge s = own.sge(0, 64);
  ibv_send_wr w1 = rdma_wr(IBV_WR_RDMA_WRITE, 1, {&s, 1}, at_a.addr(), at_a.rkey());
  ibv_send_wr b = bind_wr(2, mw, inc_rkey(mw->rkey.value()), win.mr, win.addr(), 128, IBV_ACCESS_REMOTE_READ, &abi_mr);
  ibv_send_wr w3 = rdma_wr(IBV_WR_RDMA_WRITE, 3, {&s, 1}, at_a.addr(64), at_a.rkey());
  w1.next = &b;
  b.next = &w3;
  ASSERT_EQ(post_send(p.qb, w1), 0);
  const auto wcs = h.wait_wcs(p.scq_b, 3);
  ASSERT_EQ(wcs.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(wcs[i].wr_id, i + 1);
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS) << i;
  }
  EXPECT_EQ(wcs[1].opcode, IBV_WC_BIND_MW);
  const uint32_t key = inc_rkey(mw->ibv.rkey);
  EXPECT_EQ(rdma(IBV_WR_RDMA_READ, key, 0, 128), IBV_WC_SUCCESS);
  EXPECT_EQ(h.b().rnic->dealloc_mw(mw), 0);
  EXPECT_EQ(rdma(IBV_WR_RDMA_READ, key, 0, 128), IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(h.b().rnic->dereg_mr(win.mr), 0) << "no window holds it now";
  win.mr = nullptr;
}

}  // namespace
}  // namespace uroce::rnic::testing
