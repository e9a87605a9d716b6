// What the verbs answer when a program hands them something wrong, as the
// kernel's uverbs layer answers it (through the drop-in's C ABI, two sim
// devices of sim2.toml): an object named by a handle its context does not
// hold is ENOENT and nothing is freed; a failed destroy leaves its errno;
// an asynchronous event reaches the context that made the object it names.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

namespace {

constexpr int kCqe = 16;

class VerbsSemantics : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    list_ = ibv_get_device_list(&n);
    ASSERT_NE(list_, nullptr);
    ASSERT_GE(n, 1);
    ctx_ = ibv_open_device(list_[0]);
    ASSERT_NE(ctx_, nullptr);
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
  }
  void TearDown() override {
    if (pd_ != nullptr) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
    if (ctx_ != nullptr) ibv_close_device(ctx_);
    ibv_free_device_list(list_);
  }
  ibv_qp* rc_qp(ibv_cq* cq, ibv_srq* srq = nullptr) {
    ibv_qp_init_attr qa{};
    qa.send_cq = qa.recv_cq = cq;
    qa.srq = srq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap = {4, srq != nullptr ? 0u : 4u, 1, srq != nullptr ? 0u : 1u, 0};
    return ibv_create_qp(pd_, &qa);
  }

  ibv_device** list_ = nullptr;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
};

// A handle changed under the verbs (rdma-unit-test's HandleGarble): the
// kernel looks each handle up in the context's table and a miss is
// ENOENT; nothing is freed, errno says why, and the object works again
// once its handle is restored.
class Garbled {
 public:
  explicit Garbled(uint32_t& h) : h_(h), was_(h) { h_ ^= 0xDEADBEEF; }
  ~Garbled() { h_ = was_; }
  Garbled(const Garbled&) = delete;
  Garbled& operator=(const Garbled&) = delete;

 private:
  uint32_t& h_;
  uint32_t was_;
};

template <class F>
int errno_of(F&& f, int* rc) {
  errno = 0;
  *rc = f();
  return errno;
}

TEST_F(VerbsSemantics, AHandleTheContextDoesNotHoldIsEnoent) {
  static std::array<uint8_t, 4096> buf;
  ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_mw* mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  ibv_cq* cq = ibv_create_cq(ctx_, kCqe, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_srq_init_attr si{};
  si.attr.max_wr = 4;
  si.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd_, &si);
  ASSERT_NE(srq, nullptr);
  ibv_port_attr pa{};
  ASSERT_EQ(ibv_query_port(ctx_, 1, &pa), 0);
  ibv_ah_attr aa{};
  aa.is_global = 1;
  aa.port_num = 1;
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &aa.grh.dgid), 0);
  ibv_ah* ah = ibv_create_ah(pd_, &aa);
  ASSERT_NE(ah, nullptr);
  ibv_qp* qp = rc_qp(cq);
  ASSERT_NE(qp, nullptr);

  int rc = 0;
  {
    Garbled g(qp->handle);
    EXPECT_EQ(errno_of([&] { return ibv_destroy_qp(qp); }, &rc), ENOENT);
    EXPECT_EQ(rc, ENOENT);
    ibv_qp_attr attr{};
    ibv_qp_init_attr init{};
    EXPECT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init), ENOENT);
    attr.qp_state = IBV_QPS_ERR;
    EXPECT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), ENOENT);
  }
  {
    Garbled g(cq->handle);
    EXPECT_EQ(errno_of([&] { return ibv_destroy_cq(cq); }, &rc), ENOENT);
    EXPECT_EQ(rc, ENOENT);
    errno = 0;
    EXPECT_EQ(rc_qp(cq), nullptr) << "a QP on a CQ that is not the context's";
    EXPECT_EQ(errno, EINVAL);
  }
  {
    Garbled g(srq->handle);
    EXPECT_EQ(errno_of([&] { return ibv_destroy_srq(srq); }, &rc), ENOENT);
    EXPECT_EQ(rc, ENOENT);
    EXPECT_EQ(rc_qp(cq, srq), nullptr) << "a QP on an SRQ that is not the context's";
  }
  {
    Garbled g(ah->handle);
    EXPECT_EQ(errno_of([&] { return ibv_destroy_ah(ah); }, &rc), ENOENT);
    EXPECT_EQ(rc, ENOENT);
  }
  {
    Garbled g(mw->handle);
    EXPECT_EQ(errno_of([&] { return ibv_dealloc_mw(mw); }, &rc), ENOENT);
    EXPECT_EQ(rc, ENOENT);
  }
  {
    Garbled g(mr->handle);
    EXPECT_EQ(errno_of([&] { return ibv_dereg_mr(mr); }, &rc), ENOENT);
    EXPECT_EQ(rc, ENOENT);
  }
  {
    Garbled g(pd_->handle);
    EXPECT_EQ(errno_of([&] { return ibv_dealloc_pd(pd_); }, &rc), ENOENT);
    EXPECT_EQ(rc, ENOENT);
    errno = 0;
    EXPECT_EQ(ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE), nullptr);
    EXPECT_NE(errno, 0);
    EXPECT_EQ(rc_qp(cq), nullptr) << "a QP of a PD that is not the context's";
    EXPECT_EQ(ibv_alloc_mw(pd_, IBV_MW_TYPE_2), nullptr);
  }
  // Restored: every object is still there and goes the normal way.
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  EXPECT_EQ(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(attr.qp_state, IBV_QPS_RESET);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

// An object of another context of the same device is not this one's.
TEST_F(VerbsSemantics, AnotherContextsObjectsAreNotThisOnes) {
  ibv_context* other = ibv_open_device(list_[0]);
  ASSERT_NE(other, nullptr);
  ibv_cq* foreign = ibv_create_cq(other, kCqe, nullptr, nullptr, 0);
  ASSERT_NE(foreign, nullptr);
  errno = 0;
  EXPECT_EQ(rc_qp(foreign), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_destroy_cq(foreign), 0);
  EXPECT_EQ(ibv_close_device(other), 0);
}

// A PD with objects on it stays (EBUSY), and errno says so as well
// (libibverbs' command failed with it).
TEST_F(VerbsSemantics, BusyDeallocLeavesItsErrno) {
  static std::array<uint8_t, 4096> buf;
  ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  int rc = 0;
  EXPECT_EQ(errno_of([&] { return ibv_dealloc_pd(pd_); }, &rc), EBUSY);
  EXPECT_EQ(rc, EBUSY);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

bool readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1 && (p.revents & POLLIN) != 0;
}

// Each context has its own event queue and file descriptor (as each
// uverbs file has): an event about a QP goes to the context that made the
// QP and no other; an event not yet read when its QP is destroyed goes
// with it.
TEST_F(VerbsSemantics, AsyncEventsReachTheObjectsContextOnly) {
  ibv_context* other = ibv_open_device(list_[0]);
  ASSERT_NE(other, nullptr);
  EXPECT_NE(other->async_fd, ctx_->async_fd);
  ibv_cq* cq = ibv_create_cq(ctx_, kCqe, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_srq_init_attr si{};
  si.attr.max_wr = 4;
  si.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd_, &si);
  ASSERT_NE(srq, nullptr);
  // A QP on an SRQ that enters ERR: IBV_EVENT_QP_LAST_WQE_REACHED (IBA 11.6.3.1).
  ibv_qp* qp = rc_qp(cq, srq);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(qp, &attr, IBV_QP_STATE), 0);
  ASSERT_TRUE(readable(ctx_->async_fd, 2000));
  ibv_async_event ev{};
  ASSERT_EQ(ibv_get_async_event(ctx_, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(ev.element.qp, qp);
  ibv_ack_async_event(&ev);
  EXPECT_FALSE(readable(other->async_fd, 50)) << "another context heard of it";
  EXPECT_FALSE(readable(ctx_->async_fd, 0));
  EXPECT_EQ(ibv_destroy_qp(qp), 0);

  // Not read before its QP goes: gone with it.
  ibv_qp* qp2 = rc_qp(cq, srq);
  ASSERT_NE(qp2, nullptr);
  ASSERT_EQ(ibv_modify_qp(qp2, &attr, IBV_QP_STATE), 0);
  ASSERT_TRUE(readable(ctx_->async_fd, 2000));
  EXPECT_EQ(ibv_destroy_qp(qp2), 0);
  EXPECT_FALSE(readable(ctx_->async_fd, 50)) << "an event about a destroyed QP";
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_close_device(other), 0);
}

// Windows and address handles are freed by the device itself: threads
// that make and free them at once never see another thread's object
// under their handle (a freed address reused at once stays the new
// object's).
TEST_F(VerbsSemantics, ConcurrentAllocAndFreeKeepEachHandle) {
  ibv_ah_attr aa{};
  aa.is_global = 1;
  aa.port_num = 1;
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &aa.grh.dgid), 0);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 300; ++i) {
        ibv_mw* mw = ibv_alloc_mw(pd_, (i + t) % 2 == 0 ? IBV_MW_TYPE_1 : IBV_MW_TYPE_2);
        ibv_ah* ah = ibv_create_ah(pd_, &aa);
        if (mw == nullptr || ah == nullptr) {
          ++failures;
          continue;
        }
        if (ibv_dealloc_mw(mw) != 0) ++failures;
        if (ibv_destroy_ah(ah) != 0) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
