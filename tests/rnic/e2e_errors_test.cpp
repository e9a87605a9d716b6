// Error paths end to end: RNR (retried, then exhausted), a peer that is
// gone (retry exhausted, then every other WQE flushed), the remote access
// table (bad keys, bounds, wrap, rights, deregistered MRs: REM_ACCESS_ERR
// and the target memory unchanged), CQ overflow (IBV_EVENT_CQ_ERR), SRQ
// shared by several QPs and its limit event, SEND with Invalidate of a
// registered MR (refused, as rxe), port events on link down/up, and the
// count of UD sends lost to an unresolved destination.
#include <gtest/gtest.h>
#include <fcntl.h>

#include <atomic>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "lib/wire/build.hpp"
#include "transport/params.hpp"
#include "tests/rnic/harness.hpp"

namespace uroce::rnic::testing {
namespace {

using std::chrono::milliseconds;

constexpr int kRemoteAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;

void nonblocking(int fd) {
  const int fl = fcntl(fd, F_GETFL);
  ASSERT_EQ(fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
}

// Every async event queued now.
std::vector<AsyncEvent> async_events(Rnic& r) {
  std::vector<AsyncEvent> out;
  AsyncEvent ev;
  while (r.get_async_event(&ev) == 0) out.push_back(ev);
  return out;
}

// ---- RNR --------------------------------------------------------------------------------

// No receive posted: the responder answers RNR NAK (IBA 9.7.5.2.8), the
// requester waits min_rnr_timer and retries; once a receive is posted the
// SEND completes, once.
// A QP moved to RESET takes its completions not yet polled out of its CQs
// (as mlx5 does); another QP's on the same CQ stay, in order.  rdma-core's
// test_mr_rereg_* bring a QP from ERR back through RESET and must not poll
// its old flush errors.
TEST(Reset, CleansTheQpsCompletions) {
  Harness h;
  Cq* cq = h.cq(h.a());
  Qp* q1 = h.qp(h.a(), IBV_QPT_RC, cq, cq);
  Qp* q2 = h.qp(h.a(), IBV_QPT_RC, cq, cq);
  ASSERT_NE(q1, nullptr);
  ASSERT_NE(q2, nullptr);
  Buffer b = h.buffer(h.a(), 64, IBV_ACCESS_LOCAL_WRITE);
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  init.port_num = 1;
  for (Qp* q : {q1, q2}) ASSERT_EQ(q->modify(init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  ibv_sge s = b.sge(0, 64);
  for (uint64_t i = 0; i < 2; ++i) {
    ASSERT_EQ(post_recv(q1, 10 + i, {&s, 1}), 0);
    ASSERT_EQ(post_recv(q2, 20 + i, {&s, 1}), 0);
  }
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(q1->modify(err, IBV_QP_STATE), 0);
  ASSERT_EQ(q2->modify(err, IBV_QP_STATE), 0);
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(q1->modify(reset, IBV_QP_STATE), 0);
  const std::vector<ibv_wc> left = h.poll_cq(cq);
  ASSERT_EQ(left.size(), 2u) << "q2's two flushed receives";
  EXPECT_EQ(left[0].wr_id, 20u);
  EXPECT_EQ(left[1].wr_id, 21u);
  for (const ibv_wc& wc : left) {
    EXPECT_EQ(wc.qp_num, q2->qpn().value());
    EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  }
}

TEST(Rnr, RetriedUntilReceivePosted) {
  Harness h;
  ConnOpts o;
  o.min_rnr_timer = 1;  // 0.01 ms
  o.rnr_retry = 7;      // infinite
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  Buffer src = h.buffer(h.a(), 3000, kRemoteAll);
  Buffer dst = h.buffer(h.b(), 3000, kRemoteAll, 0xEE);
  fill_pattern(src.bytes(0, 3000), 4);
  ibv_sge s = src.sge(0, 3000);
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 7, {&s, 1});
  ASSERT_EQ(post_send(p.qa, wr), 0);
  EXPECT_TRUE(h.collect_for(p.scq_a, milliseconds(30)).empty()) << "no completion while the peer has no receive";
  EXPECT_GE(h.b().rnic->counters().get(RnicCtr::rnr_naks_sent), 2u);
  EXPECT_GE(h.a().rnic->counters().get(RnicCtr::rnr_naks_rcvd), 2u);
  EXPECT_EQ(qp_state(p.qa), IBV_QPS_RTS);
  ibv_sge r = dst.sge(0, 3000);
  ASSERT_EQ(post_recv(p.qb, 8, {&r, 1}), 0);
  const ibv_wc sw = h.wait_wc(p.scq_a);
  EXPECT_EQ(sw.status, IBV_WC_SUCCESS) << wc_status_name(sw.status);
  EXPECT_EQ(sw.wr_id, 7u);
  const ibv_wc rw = h.wait_wc(p.rcq_b);
  EXPECT_EQ(rw.status, IBV_WC_SUCCESS);
  EXPECT_EQ(rw.byte_len, 3000u);
  EXPECT_EQ(first_diff(dst.bytes(0, 3000), src.bytes(0, 3000)), -1);
  EXPECT_TRUE(h.collect_for(p.rcq_b, milliseconds(20)).empty()) << "delivered once";
}

// rnr_retry exhausted: RNR_RETRY_EXC_ERR, the QP in ERR, the rest flushed.
TEST(Rnr, RetryExhausted) {
  Harness h;
  ConnOpts o;
  o.min_rnr_timer = 1;
  o.rnr_retry = 2;
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  Buffer src = h.buffer(h.a(), 64, kRemoteAll);
  Buffer dst = h.buffer(h.b(), 64, kRemoteAll);
  ibv_sge s = src.sge(0, 64);
  ibv_send_wr w1 = send_wr(IBV_WR_SEND, 1, {&s, 1});
  ibv_send_wr w2 = send_wr(IBV_WR_SEND, 2, {&s, 1});
  ibv_send_wr w3 = rdma_wr(IBV_WR_RDMA_WRITE, 3, {&s, 1}, dst.addr(), dst.rkey());
  w1.next = &w2;
  w2.next = &w3;
  ASSERT_EQ(post_send(p.qa, w1), 0);
  const auto wcs = h.wait_wcs(p.scq_a, 3);
  ASSERT_EQ(wcs.size(), 3u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RNR_RETRY_EXC_ERR) << wc_status_name(wcs[0].status);
  EXPECT_EQ(wcs[0].qp_num, p.qa->qpn().value());
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR) << wc_status_name(wcs[1].status);
  EXPECT_EQ(wcs[2].wr_id, 3u);
  EXPECT_EQ(wcs[2].status, IBV_WC_WR_FLUSH_ERR) << wc_status_name(wcs[2].status);
  EXPECT_EQ(qp_state(p.qa), IBV_QPS_ERR);
  EXPECT_EQ(h.a().rnic->counters().get(RnicCtr::rnr_retry_exceeded), 1u);
  // 1 try + 2 retries.
  EXPECT_EQ(h.a().rnic->counters().get(RnicCtr::rnr_naks_rcvd), 3u);
  EXPECT_EQ(qp_state(p.qb), IBV_QPS_RTS) << "the responder is not in error";
  // A WQE posted in ERR completes with WR_FLUSH_ERR.
  ibv_send_wr w4 = send_wr(IBV_WR_SEND, 4, {&s, 1});
  ASSERT_EQ(post_send(p.qa, w4), 0);
  const ibv_wc late = h.wait_wc(p.scq_a);
  EXPECT_EQ(late.wr_id, 4u);
  EXPECT_EQ(late.status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_TRUE(h.collect_for(p.scq_a, milliseconds(20)).empty());
}

// ---- peer gone -------------------------------------------------------------------------

// The peer's port goes down: the first WQE completes with RETRY_EXC_ERR
// after about (retry_cnt + 1) local ACK timeouts (IBA 9.7.6.1.3), every
// other send WQE and every posted receive is flushed, in order; the peer's
// QP knows nothing of it.
TEST(PeerGone, RetryExceededThenFlush) {
  Harness h;
  ConnOpts o;
  o.timeout = 12;  // 4.096 us << 12 = 16.8 ms
  o.retry_cnt = 3;
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  Buffer a = h.buffer(h.a(), 1 << 16, kRemoteAll);
  Buffer b = h.buffer(h.b(), 1 << 16, kRemoteAll, 0x5A);
  for (int i = 0; i < 4; ++i) {
    ibv_sge r = b.sge(1024 * i, 1024);
    ASSERT_EQ(post_recv(p.qb, 100 + i, {&r, 1}), 0);
    ibv_sge ra = a.sge(1024 * i, 1024);
    ASSERT_EQ(post_recv(p.qa, 200 + i, {&ra, 1}), 0);
  }
  const std::vector<uint8_t> b_before(b.data(), b.data() + b.len);
  h.wire().set_link_up(*h.b().port, false);

  ibv_sge s = a.sge(0, 5000);
  std::vector<ibv_send_wr> wrs;
  wrs.push_back(send_wr(IBV_WR_SEND, 1, {&s, 1}));
  wrs.push_back(rdma_wr(IBV_WR_RDMA_WRITE, 2, {&s, 1}, b.addr(), b.rkey()));
  wrs.push_back(rdma_wr(IBV_WR_RDMA_READ, 3, {&s, 1}, b.addr(), b.rkey()));
  wrs.push_back(send_wr(IBV_WR_SEND, 4, {&s, 1}, 0));  // unsignaled: flushed with a CQE all the same
  wrs.push_back(send_wr(IBV_WR_SEND, 5, {&s, 1}));
  for (size_t i = 0; i + 1 < wrs.size(); ++i) wrs[i].next = &wrs[i + 1];
  const auto t0 = Clock::now();
  ASSERT_EQ(post_send(p.qa, wrs[0]), 0);
  const ibv_wc first = h.wait_wc(p.scq_a, std::chrono::seconds(5));
  const auto elapsed = Clock::now() - t0;
  EXPECT_EQ(first.wr_id, 1u);
  EXPECT_EQ(first.status, IBV_WC_RETRY_EXC_ERR) << wc_status_name(first.status);
  const auto t = std::chrono::nanoseconds(transport::params::ack_timeout_ns(o.timeout));
  EXPECT_GE(elapsed, t * o.retry_cnt) << "retries came too fast";
  EXPECT_LE(elapsed, t * (o.retry_cnt + 1) * 2 + milliseconds(100)) << "retries too slow";
  std::printf("RETRY_EXC_ERR after %.1f ms (timeout %.1f ms, retry_cnt %u)\n",
              std::chrono::duration<double, std::milli>(elapsed).count(),
              std::chrono::duration<double, std::milli>(t).count(), o.retry_cnt);
  const auto rest = h.wait_wcs(p.scq_a, 4);
  ASSERT_EQ(rest.size(), 4u);
  for (size_t i = 0; i < rest.size(); ++i) {
    EXPECT_EQ(rest[i].wr_id, 2 + i);
    EXPECT_EQ(rest[i].status, IBV_WC_WR_FLUSH_ERR) << wc_status_name(rest[i].status);
    EXPECT_EQ(rest[i].qp_num, p.qa->qpn().value());
  }
  const auto recv_flushed = h.wait_wcs(p.rcq_a, 4);
  ASSERT_EQ(recv_flushed.size(), 4u);
  for (size_t i = 0; i < recv_flushed.size(); ++i) {
    EXPECT_EQ(recv_flushed[i].wr_id, 200 + i);
    EXPECT_EQ(recv_flushed[i].status, IBV_WC_WR_FLUSH_ERR);
  }
  EXPECT_EQ(qp_state(p.qa), IBV_QPS_ERR);
  EXPECT_EQ(h.a().rnic->counters().get(RnicCtr::retry_exceeded), 1u);
  EXPECT_GE(h.a().rnic->counters().get(RnicCtr::ack_timeouts), uint64_t{o.retry_cnt} + 1);

  // The peer: still RTS, its receives still posted, its memory untouched.
  h.wire().set_link_up(*h.b().port, true);
  h.run_for(milliseconds(20));
  EXPECT_EQ(qp_state(p.qb), IBV_QPS_RTS);
  EXPECT_TRUE(h.poll_cq(p.rcq_b).empty());
  EXPECT_TRUE(h.poll_cq(p.scq_b).empty());
  EXPECT_EQ(first_diff(b.bytes(0, b.len), b_before), -1);
}

// ---- adaptive retransmission --------------------------------------------------------------

// The local ACK timer follows the QP's measured round trips (RTO = SRTT +
// 4 RTTVAR, params::kRtoMinNs at least) with the programmed `timeout` as
// its ceiling, doubled by each timeout in a row (completer_rto): a packet
// lost at the tail of a burst is sent again after about kRtoMinNs, not
// after the programmed second.  Each timeout still takes one of retry_cnt.
TEST(AdaptiveRetransmission, TailLossCostsTheEstimateNotTheProgrammedTimeout) {
  Harness h;
  ConnOpts o;
  o.timeout = 18;  // 4.096 us << 18 = 1.07 s
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  Buffer a = h.buffer(h.a(), 4096, kRemoteAll);
  Buffer b = h.buffer(h.b(), 4096, kRemoteAll);
  ibv_sge s = a.sge(0, 64);
  for (uint64_t i = 0; i < 16; ++i) {  // round-trip samples
    ibv_send_wr w = rdma_wr(IBV_WR_RDMA_WRITE, i, {&s, 1}, b.addr(), b.rkey());
    ASSERT_EQ(post_send(p.qa, w), 0);
    ASSERT_EQ(h.wait_wc(p.scq_a).status, IBV_WC_SUCCESS);
  }
  // The one request of the next message is lost on its way.
  h.wire().set_link_up(*h.b().port, false);
  const uint64_t lost0 = h.b().port->stats().rx_dropped;
  ibv_send_wr w = rdma_wr(IBV_WR_RDMA_WRITE, 99, {&s, 1}, b.addr(), b.rkey());
  const auto t0 = Clock::now();
  ASSERT_EQ(post_send(p.qa, w), 0);
  // Until the wire lost it (built is not yet sent: an engine on another
  // lcore flushes it at the end of its turn).
  ASSERT_TRUE(h.run_until([&] { return h.b().port->stats().rx_dropped > lost0; }));
  EXPECT_EQ(h.a().rnic->counters().get(RnicCtr::req_pkts), 17u);
  h.wire().set_link_up(*h.b().port, true);
  const ibv_wc wc = h.wait_wc(p.scq_a, std::chrono::seconds(5));
  const auto elapsed = Clock::now() - t0;
  EXPECT_EQ(wc.wr_id, 99u);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(h.a().rnic->counters().get(RnicCtr::ack_timeouts), 1u);
  const auto programmed = std::chrono::nanoseconds(transport::params::ack_timeout_ns(o.timeout));
  EXPECT_LT(elapsed, programmed / 2) << "the retransmission waited for the programmed timeout";
  EXPECT_GE(elapsed, std::chrono::nanoseconds(transport::params::kRtoMinNs)) << "faster than the floor";
}

// A peer that vanished: the timeouts double from the estimate up to the
// programmed ceiling, so retry_cnt 5 at timeout 18 (1.07 s) ends in
// RETRY_EXC_ERR after 16+32+...+512 ms (about 1 s) rather than 6.4 s.
// With `timeout` 0 (the IBA's infinite) the QP resends with the same
// backoff and never gives up: the peer that comes back gets the message.
// With adaptive retransmission off, the programmed timeout is the timer.
TEST(AdaptiveRetransmission, VanishedPeerBackoffUnderTheCeiling) {
  for (const uint8_t timeout : {uint8_t{18}, uint8_t{0}}) {
    Harness h;
    ConnOpts o;
    o.timeout = timeout;
    o.retry_cnt = 5;
    Pair p = h.pair(IBV_QPT_RC, o);
    ASSERT_NE(p.qa, nullptr);
    Buffer a = h.buffer(h.a(), 4096, kRemoteAll);
    Buffer b = h.buffer(h.b(), 4096, kRemoteAll);
    h.wire().set_link_up(*h.b().port, false);
    ibv_sge s = a.sge(0, 64);
    ibv_send_wr w = rdma_wr(IBV_WR_RDMA_WRITE, 7, {&s, 1}, b.addr(), b.rkey());
    const auto t0 = Clock::now();
    ASSERT_EQ(post_send(p.qa, w), 0);
    const auto floor = std::chrono::nanoseconds(transport::params::kRtoMinNs);
    if (timeout == 0) {
      EXPECT_TRUE(h.collect_for(p.scq_a, std::chrono::milliseconds(1500)).empty()) << "infinite gave up";
      EXPECT_GE(h.a().rnic->counters().get(RnicCtr::ack_timeouts), 6u);
      EXPECT_EQ(qp_state(p.qa), IBV_QPS_RTS);
      h.wire().set_link_up(*h.b().port, true);
      const ibv_wc wc = h.wait_wc(p.scq_a, std::chrono::seconds(10));
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
      continue;
    }
    const ibv_wc wc = h.wait_wc(p.scq_a, std::chrono::seconds(10));
    const auto elapsed = Clock::now() - t0;
    EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR) << wc_status_name(wc.status);
    EXPECT_EQ(h.a().rnic->counters().get(RnicCtr::ack_timeouts), 6u);
    EXPECT_GE(elapsed, floor * 63) << "the timeouts did not double";
    EXPECT_LT(elapsed, std::chrono::milliseconds(3000));
  }
  Harness h;
  h.a().rnic->set_adaptive_retransmission(false);
  ConnOpts o;
  o.timeout = 15;  // 134 ms
  o.retry_cnt = 2;
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  Buffer a = h.buffer(h.a(), 4096, kRemoteAll);
  Buffer b = h.buffer(h.b(), 4096, kRemoteAll);
  h.wire().set_link_up(*h.b().port, false);
  ibv_sge s = a.sge(0, 64);
  ibv_send_wr w = rdma_wr(IBV_WR_RDMA_WRITE, 7, {&s, 1}, b.addr(), b.rkey());
  const auto t0 = Clock::now();
  ASSERT_EQ(post_send(p.qa, w), 0);
  EXPECT_EQ(h.wait_wc(p.scq_a, std::chrono::seconds(10)).status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_GE(Clock::now() - t0, std::chrono::nanoseconds(transport::params::ack_timeout_ns(o.timeout)) * 3);
}

// ---- remote access ------------------------------------------------------------------------

enum class Bad {
  Rkey,             // a key no MR has
  PastEnd,          // starts inside, ends 1 byte past the MR
  BeforeStart,      // starts 1 byte before the MR
  Wrap,             // va + len wraps the 64-bit space
  NoRight,          // the MR lacks the right the operation needs
  QpNoRight,        // the QP's access flags lack it
  Deregistered,     // the MR was deregistered
  OtherPd,          // the MR is on another PD of the responder
};
enum class AccessOp { Write, Read, FetchAdd, CmpSwap, WriteImm };

const char* bad_name(Bad b) {
  switch (b) {
    case Bad::Rkey: return "Rkey";
    case Bad::PastEnd: return "PastEnd";
    case Bad::BeforeStart: return "BeforeStart";
    case Bad::Wrap: return "Wrap";
    case Bad::NoRight: return "NoRight";
    case Bad::QpNoRight: return "QpNoRight";
    case Bad::Deregistered: return "Deregistered";
    case Bad::OtherPd: return "OtherPd";
  }
  return "?";
}
const char* access_op_name(AccessOp o) {
  switch (o) {
    case AccessOp::Write: return "Write";
    case AccessOp::Read: return "Read";
    case AccessOp::FetchAdd: return "FetchAdd";
    case AccessOp::CmpSwap: return "CmpSwap";
    case AccessOp::WriteImm: return "WriteImm";
  }
  return "?";
}

int right_for(AccessOp o) {
  switch (o) {
    case AccessOp::Write:
    case AccessOp::WriteImm: return IBV_ACCESS_REMOTE_WRITE;
    case AccessOp::Read: return IBV_ACCESS_REMOTE_READ;
    case AccessOp::FetchAdd:
    case AccessOp::CmpSwap: return IBV_ACCESS_REMOTE_ATOMIC;
  }
  return 0;
}

using AccessParam = std::tuple<Bad, AccessOp>;
class Access : public ::testing::TestWithParam<AccessParam> {};

// The requester's WQE completes with REM_ACCESS_ERR (a QP without the
// right may answer REM_INV_REQ_ERR, as rxe does), its QP goes to ERR, and
// not one byte of the responder's memory — nor of the requester's READ
// target — changes (IBA 9.7.5.1.3, C9-88, o9-?).
TEST_P(Access, RefusedAndMemoryUnchanged) {
  const auto [bad, op] = GetParam();
  constexpr size_t kMrLen = 4096;
  constexpr size_t kPad = 4096;  // unregistered neighbours of the MR, same allocation
  Harness h;
  ConnOpts o;
  o.mtu = IBV_MTU_1024;
  if (bad == Bad::QpNoRight) o.access = kRemoteAll & ~right_for(op);
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);

  // The target: [kPad, kPad + kMrLen) of a larger block, registered alone.
  constexpr size_t kBlock = kPad * 2 + kMrLen;
  uint8_t* base = h.memory(kBlock);
  fill_pattern({base, kBlock}, 1234);
  const std::vector<uint8_t> before(base, base + kBlock);
  int access = kRemoteAll;
  if (bad == Bad::NoRight) access &= ~right_for(op);
  Pd* pd = h.b().pd;
  if (bad == Bad::OtherPd) {
    int err = 0;
    pd = h.b().rnic->alloc_pd(&err);
    ASSERT_NE(pd, nullptr);
  }
  int err = 0;
  Mr* mr = h.b().rnic->reg_mr(pd, base + kPad, kMrLen, reinterpret_cast<uint64_t>(base + kPad), access, &err);
  ASSERT_NE(mr, nullptr) << std::strerror(err);
  uint32_t rkey = mr->rkey.value();
  const uint64_t mr_va = reinterpret_cast<uint64_t>(base + kPad);
  if (bad == Bad::Deregistered) {
    ASSERT_EQ(h.b().rnic->dereg_mr(mr), 0);
  }

  const bool atomic = op == AccessOp::FetchAdd || op == AccessOp::CmpSwap;
  const size_t len = atomic ? 8 : 1000;
  uint64_t va = mr_va + 64;
  switch (bad) {
    case Bad::Rkey: rkey ^= 0x5A5A5A00u; break;
    case Bad::PastEnd: va = mr_va + kMrLen - len + (atomic ? 8 : 1); break;
    case Bad::BeforeStart: va = mr_va - (atomic ? 8 : 1); break;
    case Bad::Wrap: va = ~uint64_t{0} - (atomic ? 7 : len / 2); break;
    case Bad::NoRight:
    case Bad::QpNoRight:
    case Bad::Deregistered:
    case Bad::OtherPd: break;
  }

  Buffer local = h.buffer(h.a(), 4096, kRemoteAll, 0x77);
  const std::vector<uint8_t> local_before(local.data(), local.data() + local.len);
  Buffer recv_buf = h.buffer(h.b(), 64, kRemoteAll);
  ibv_sge s = local.sge(0, len);
  ibv_send_wr wr{};
  switch (op) {
    case AccessOp::Write: wr = rdma_wr(IBV_WR_RDMA_WRITE, 1, {&s, 1}, va, rkey); break;
    case AccessOp::WriteImm: {
      ibv_sge r = recv_buf.sge(0, 64);  // B's receive: a refused write must not complete it
      ASSERT_EQ(post_recv(p.qb, 9, {&r, 1}), 0);
      wr = rdma_wr(IBV_WR_RDMA_WRITE_WITH_IMM, 1, {&s, 1}, va, rkey);
      break;
    }
    case AccessOp::Read: wr = rdma_wr(IBV_WR_RDMA_READ, 1, {&s, 1}, va, rkey); break;
    case AccessOp::FetchAdd: wr = atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 1, &s, va, rkey, 1, 0); break;
    case AccessOp::CmpSwap: {
      uint64_t cur;
      std::memcpy(&cur, base + kPad + 64, 8);
      wr = atomic_wr(IBV_WR_ATOMIC_CMP_AND_SWP, 1, &s, va, rkey, cur, ~cur);
      break;
    }
  }
  ibv_send_wr next = send_wr(IBV_WR_SEND, 2, {&s, 1});
  wr.next = &next;
  ASSERT_EQ(post_send(p.qa, wr), 0);
  const auto wcs = h.wait_wcs(p.scq_a, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  if (bad == Bad::QpNoRight) {
    EXPECT_TRUE(wcs[0].status == IBV_WC_REM_ACCESS_ERR || wcs[0].status == IBV_WC_REM_INV_REQ_ERR)
        << wc_status_name(wcs[0].status);
  } else {
    EXPECT_EQ(wcs[0].status, IBV_WC_REM_ACCESS_ERR) << wc_status_name(wcs[0].status);
  }
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR) << wc_status_name(wcs[1].status);
  EXPECT_EQ(qp_state(p.qa), IBV_QPS_ERR);
  EXPECT_GE(h.b().rnic->counters().get(RnicCtr::rem_access_naks) +
                h.b().rnic->counters().get(RnicCtr::rem_inv_req_naks),
            1u);
  h.run_for(milliseconds(5));
  EXPECT_EQ(first_diff({base, before.size()}, before), -1) << "the responder's memory changed";
  EXPECT_EQ(first_diff(local.bytes(0, local.len), local_before), -1) << "the requester's buffer changed";
  if (op == AccessOp::WriteImm) {
    const auto rw = h.poll_cq(p.rcq_b);
    for (const auto& w : rw) EXPECT_NE(w.status, IBV_WC_SUCCESS) << "a refused WRITE_IMM consumed a receive";
  }
}

std::string access_param_name(const ::testing::TestParamInfo<AccessParam>& i) {
  return std::string(bad_name(std::get<0>(i.param))) + "_" + access_op_name(std::get<1>(i.param));
}

INSTANTIATE_TEST_SUITE_P(Table, Access,
                         ::testing::Combine(::testing::Values(Bad::Rkey, Bad::PastEnd, Bad::BeforeStart, Bad::Wrap,
                                                              Bad::NoRight, Bad::QpNoRight, Bad::Deregistered,
                                                              Bad::OtherPd),
                                            ::testing::Values(AccessOp::Write, AccessOp::Read, AccessOp::FetchAdd,
                                                              AccessOp::CmpSwap, AccessOp::WriteImm)),
                         access_param_name);

// A zero-length RDMA WRITE/READ checks no R_Key (IBA 9.7.5.1.3 / C9-88's
// exception): it completes and touches nothing.
TEST(AccessZeroLength, NoKeyCheck) {
  Harness h;
  Pair p = h.pair(IBV_QPT_RC);
  ASSERT_NE(p.qa, nullptr);
  ibv_send_wr wr = rdma_wr(IBV_WR_RDMA_WRITE, 1, {}, 0x1234, 0xDEADBE00u);
  ASSERT_EQ(post_send(p.qa, wr), 0);
  ibv_wc wc = h.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  wr = rdma_wr(IBV_WR_RDMA_READ, 2, {}, 0x1234, 0xDEADBE00u);
  ASSERT_EQ(post_send(p.qa, wr), 0);
  wc = h.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(qp_state(p.qa), IBV_QPS_RTS);
}

// A misaligned atomic is refused (IBA 9.4.5: the VA must be 8-byte
// aligned) and changes nothing.
TEST(AccessAtomic, MisalignedRefused) {
  Harness h;
  Pair p = h.pair(IBV_QPT_RC);
  ASSERT_NE(p.qa, nullptr);
  Buffer t = h.buffer(h.b(), 64, kRemoteAll);
  fill_pattern(t.bytes(0, 64), 3);
  const std::vector<uint8_t> before(t.data(), t.data() + 64);
  Buffer l = h.buffer(h.a(), 64, kRemoteAll);
  ibv_sge s = l.sge(0, 8);
  ibv_send_wr wr = atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 1, &s, t.addr(4), t.rkey(), 1, 0);
  ASSERT_EQ(post_send(p.qa, wr), 0);
  const ibv_wc wc = h.wait_wc(p.scq_a);
  EXPECT_TRUE(wc.status == IBV_WC_REM_INV_REQ_ERR || wc.status == IBV_WC_REM_ACCESS_ERR)
      << wc_status_name(wc.status);
  EXPECT_EQ(first_diff(t.bytes(0, 64), before), -1);
}

// A SEND larger than the receive buffer: LOC_LEN_ERR at the responder,
// REM_INV_REQ_ERR at the requester (IBA 9.7.5.2.8 / C9-?); nothing past
// the receive buffer written.
TEST(RecvTooSmall, RemoteInvalidRequest) {
  Harness h;
  Pair p = h.pair(IBV_QPT_RC);
  ASSERT_NE(p.qa, nullptr);
  Buffer src = h.buffer(h.a(), 4096, kRemoteAll);
  Buffer dst = h.buffer(h.b(), 4096, kRemoteAll, 0xEE);
  fill_pattern(src.bytes(0, 4096), 1);
  ibv_sge r = dst.sge(0, 1000);
  ASSERT_EQ(post_recv(p.qb, 1, {&r, 1}), 0);
  ibv_sge s = src.sge(0, 3000);
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 1, {&s, 1});
  ASSERT_EQ(post_send(p.qa, wr), 0);
  const ibv_wc sw = h.wait_wc(p.scq_a);
  EXPECT_EQ(sw.status, IBV_WC_REM_INV_REQ_ERR) << wc_status_name(sw.status);
  const ibv_wc rw = h.wait_wc(p.rcq_b);
  EXPECT_EQ(rw.status, IBV_WC_LOC_LEN_ERR) << wc_status_name(rw.status);
  for (size_t i = 1000; i < 4096; ++i) ASSERT_EQ(dst.data()[i], 0xEE) << "byte " << i;
}

// ---- CQ overflow ------------------------------------------------------------------------

// More completions than the CQ holds: IBV_EVENT_CQ_ERR, the entries that
// fit are intact and in order, nothing is written over an unread entry.
TEST(CqOverflow, ReportedAsCqErr) {
  Harness h;
  nonblocking(h.a().rnic->async_fd());
  Cq* small = h.cq(h.a(), 8);
  ASSERT_NE(small, nullptr);
  const uint32_t cap = small->capacity();
  ASSERT_GE(cap, 8u);
  Cq* rcq = h.cq(h.a());
  Cq* cb = h.cq(h.b());
  Qp* qa = h.qp(h.a(), IBV_QPT_RC, small, rcq);
  Qp* qb = h.qp(h.b(), IBV_QPT_RC, cb, cb);
  ASSERT_EQ(h.connect(qa, qb), 0);
  Buffer a = h.buffer(h.a(), 64, kRemoteAll);
  Buffer b = h.buffer(h.b(), 64, kRemoteAll);
  ibv_sge s = a.sge(0, 64);
  const uint32_t n = cap + 6;
  for (uint32_t i = 0; i < n; ++i) {
    ibv_send_wr wr = rdma_wr(IBV_WR_RDMA_WRITE, 1000 + i, {&s, 1}, b.addr(), b.rkey());
    ASSERT_EQ(post_send(qa, wr), 0);
  }
  std::vector<AsyncEvent> evs;
  ASSERT_TRUE(h.run_until([&] {
    for (const auto& e : async_events(*h.a().rnic)) evs.push_back(e);
    return !evs.empty();
  })) << "no async event";
  EXPECT_EQ(evs[0].type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(evs[0].cq, small);
  EXPECT_TRUE(small->overflowed());
  EXPECT_GE(h.a().rnic->counters().get(RnicCtr::cq_overflows), 1u);
  std::vector<ibv_wc> got(n + 8);
  const int k = small->poll(static_cast<int>(got.size()), got.data());
  // Either the entries that fit, in order, or an error: never garbage.
  if (k >= 0) {
    EXPECT_LE(static_cast<uint32_t>(k), cap);
    for (int i = 0; i < k; ++i) {
      EXPECT_EQ(got[i].wr_id, 1000u + i);
      EXPECT_EQ(got[i].status, IBV_WC_SUCCESS);
      EXPECT_EQ(got[i].opcode, IBV_WC_RDMA_WRITE);
      EXPECT_EQ(got[i].qp_num, qa->qpn().value());
    }
  }
  // The other node and its QP are unaffected.
  EXPECT_EQ(qp_state(qb), IBV_QPS_RTS);
  EXPECT_FALSE(cb->overflowed());
}

// ---- SRQ --------------------------------------------------------------------------------

// One SRQ feeds three QPs; every message lands in a receive of the SRQ,
// its completion names the QP it came in on, and each QP's messages keep
// their order.
TEST(Srq, SharedByThreeQps) {
  Harness h;
  Srq* srq = h.srq(h.b(), 128, 4);
  ASSERT_NE(srq, nullptr);
  Cq* rcq = h.cq(h.b());
  Cq* scq_b = h.cq(h.b());
  constexpr int kQps = 3, kMsgs = 20, kSlot = 2048;
  std::vector<Qp*> qa(kQps), qb(kQps);
  std::vector<Cq*> scq(kQps);
  for (int i = 0; i < kQps; ++i) {
    scq[i] = h.cq(h.a());
    qa[i] = h.qp(h.a(), IBV_QPT_RC, scq[i], scq[i]);
    qb[i] = h.qp(h.b(), IBV_QPT_RC, scq_b, rcq, {}, srq);
    ASSERT_TRUE(qa[i] && qb[i]);
    ASSERT_EQ(h.connect(qa[i], qb[i]), 0);
  }
  Buffer recv = h.buffer(h.b(), kSlot * kQps * kMsgs, kRemoteAll, 0xEE);
  for (int i = 0; i < kQps * kMsgs; ++i) {
    ibv_sge r = recv.sge(size_t{kSlot} * i, kSlot);
    ASSERT_EQ(post_srq_recv(srq, i, {&r, 1}), 0);
  }
  Buffer src = h.buffer(h.a(), kSlot * kQps * kMsgs, kRemoteAll);
  for (int m = 0; m < kMsgs; ++m) {
    for (int q = 0; q < kQps; ++q) {
      const size_t off = size_t{kSlot} * (m * kQps + q);
      const size_t len = 100 + 37 * m + q;
      fill_pattern(src.bytes(off, len), off);
      src.data()[off] = static_cast<uint8_t>(q);
      src.data()[off + 1] = static_cast<uint8_t>(m);
      ibv_sge s = src.sge(off, len);
      ibv_send_wr wr = send_wr(IBV_WR_SEND, m, {&s, 1});
      ASSERT_EQ(post_send(qa[q], wr), 0);
    }
  }
  const auto wcs = h.wait_wcs(rcq, kQps * kMsgs);
  ASSERT_EQ(wcs.size(), size_t{kQps * kMsgs});
  std::map<uint32_t, int> qp_index;
  for (int q = 0; q < kQps; ++q) qp_index[qb[q]->qpn().value()] = q;
  std::vector<int> next(kQps, 0);
  for (const auto& w : wcs) {
    ASSERT_EQ(w.status, IBV_WC_SUCCESS) << wc_status_name(w.status);
    ASSERT_TRUE(qp_index.count(w.qp_num)) << "qp_num " << w.qp_num;
    const int q = qp_index[w.qp_num];
    const uint8_t* d = recv.data() + size_t{kSlot} * w.wr_id;
    EXPECT_EQ(d[0], q) << "message came in on the QP it was sent on";
    const int m = d[1];
    EXPECT_EQ(m, next[q]++) << "QP " << q << " out of order";
    const size_t off = size_t{kSlot} * (m * kQps + q);
    EXPECT_EQ(w.byte_len, 100u + 37 * m + q);
    EXPECT_EQ(first_diff({d, w.byte_len}, src.bytes(off, w.byte_len)), -1);
  }
  for (int q = 0; q < kQps; ++q) EXPECT_EQ(h.wait_wcs(scq[q], kMsgs).size(), size_t{kMsgs});
}

// The SRQ limit: armed at 15 with 20 posted, the event comes once when the
// count drops below 15, and the limit disarms (IBA 10.2.9.2, o10-?).
TEST(Srq, LimitEventOnce) {
  Harness h;
  nonblocking(h.b().rnic->async_fd());
  Srq* srq = h.srq(h.b(), 32, 1);
  ASSERT_NE(srq, nullptr);
  Cq* rcq = h.cq(h.b());
  Cq* scq_a = h.cq(h.a());
  Qp* qa = h.qp(h.a(), IBV_QPT_RC, scq_a, scq_a);
  Qp* qb = h.qp(h.b(), IBV_QPT_RC, rcq, rcq, {}, srq);
  ASSERT_EQ(h.connect(qa, qb), 0);
  Buffer recv = h.buffer(h.b(), 64 * 32, kRemoteAll);
  for (int i = 0; i < 20; ++i) {
    ibv_sge r = recv.sge(64 * i, 64);
    ASSERT_EQ(post_srq_recv(srq, i, {&r, 1}), 0);
  }
  ibv_srq_attr at{};
  at.srq_limit = 15;
  ASSERT_EQ(srq->modify(at, IBV_SRQ_LIMIT), 0);
  Buffer src = h.buffer(h.a(), 64, kRemoteAll);
  ibv_sge s = src.sge(0, 32);
  auto send_n = [&](int n) {
    for (int i = 0; i < n; ++i) {
      ibv_send_wr wr = send_wr(IBV_WR_SEND, i, {&s, 1});
      ASSERT_EQ(post_send(qa, wr), 0);
    }
    EXPECT_EQ(h.wait_wcs(rcq, n).size(), size_t(n));
    EXPECT_EQ(h.wait_wcs(scq_a, n).size(), size_t(n));
  };
  send_n(5);  // 15 left: not below the limit
  EXPECT_TRUE(async_events(*h.b().rnic).empty()) << "event before the count fell below the limit";
  send_n(1);  // 14 left
  std::vector<AsyncEvent> evs;
  h.run_until([&] {
    for (const auto& e : async_events(*h.b().rnic)) evs.push_back(e);
    return !evs.empty();
  }, milliseconds(200));
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(evs[0].srq, srq);
  ibv_srq_attr q{};
  ASSERT_EQ(srq->query(&q), 0);
  EXPECT_EQ(q.srq_limit, 0u) << "the limit disarms after its event";
  send_n(4);
  EXPECT_TRUE(async_events(*h.b().rnic).empty()) << "one event only";
}

// An empty SRQ makes the responder answer RNR; posting to the SRQ lets
// the SEND through.
TEST(Srq, EmptySrqIsRnr) {
  Harness h;
  Srq* srq = h.srq(h.b(), 16, 1);
  Cq* rcq = h.cq(h.b());
  Cq* scq_a = h.cq(h.a());
  Qp* qa = h.qp(h.a(), IBV_QPT_RC, scq_a, scq_a);
  Qp* qb = h.qp(h.b(), IBV_QPT_RC, rcq, rcq, {}, srq);
  ASSERT_TRUE(srq && qa && qb);
  ASSERT_EQ(h.connect(qa, qb), 0);
  Buffer src = h.buffer(h.a(), 64, kRemoteAll);
  Buffer dst = h.buffer(h.b(), 64, kRemoteAll);
  ibv_sge s = src.sge(0, 64);
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 1, {&s, 1});
  ASSERT_EQ(post_send(qa, wr), 0);
  EXPECT_TRUE(h.collect_for(scq_a, milliseconds(20)).empty());
  EXPECT_GE(h.b().rnic->counters().get(RnicCtr::rnr_naks_sent), 1u);
  ibv_sge r = dst.sge(0, 64);
  ASSERT_EQ(post_srq_recv(srq, 5, {&r, 1}), 0);
  EXPECT_EQ(h.wait_wc(scq_a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(h.wait_wc(rcq).wr_id, 5u);
}

// ---- SEND with Invalidate ---------------------------------------------------------------

// IBV_WR_SEND_WITH_INV runs on RC (UC/UD have no IETH opcode, IBA table
// 38: the send queue takes such a WR and completes it with a local QP
// operation error, nothing sent).  The peer's MR comes from ibv_reg_mr,
// which cannot be invalidated remotely (rxe_invalidate_mr refuses any MR
// but a fast-register one or a memory window; e2e_mw_test.cpp has those):
// a class J error (IBA 9.9.6.3): the receive completes with
// REM_INV_REQ_ERR and the receiver's QP goes to ERR with no NAK, so the
// requester learns of it only by running out of retries; the MR named
// stays valid (its memory still takes a WRITE from a new connection).
TEST(SendWithInvalidate, RegisteredMrCannotBeInvalidated) {
  Harness h;
  Pair p = h.pair(IBV_QPT_RC);
  ASSERT_NE(p.qa, nullptr);
  Buffer src = h.buffer(h.a(), 256, kRemoteAll);
  Buffer dst = h.buffer(h.b(), 256, kRemoteAll, 0xEE);
  Buffer named = h.buffer(h.b(), 64, kRemoteAll, 0x11);
  fill_pattern(src.bytes(0, 256), 7);
  ibv_sge r = dst.sge(0, 256);
  ASSERT_EQ(post_recv(p.qb, 1, {&r, 1}), 0);
  ibv_sge s = src.sge(0, 100);
  ibv_send_wr wr = send_wr(IBV_WR_SEND_WITH_INV, 9, {&s, 1});
  wr.invalidate_rkey = named.rkey();
  ASSERT_EQ(post_send(p.qa, wr), 0);
  const ibv_wc rw = h.wait_wc(p.rcq_b);
  EXPECT_EQ(rw.wr_id, 1u);
  EXPECT_EQ(rw.status, IBV_WC_REM_INV_REQ_ERR) << wc_status_name(rw.status);
  EXPECT_EQ(qp_state(p.qb), IBV_QPS_ERR);
  EXPECT_EQ(h.b().rnic->counters().get(RnicCtr::inv_rkey_refused), 1u);
  const ibv_wc sw = h.wait_wc(p.scq_a, std::chrono::seconds(10));
  EXPECT_EQ(sw.wr_id, 9u);
  EXPECT_EQ(sw.status, IBV_WC_RETRY_EXC_ERR) << wc_status_name(sw.status);
  EXPECT_EQ(h.b().rnic->counters().get(RnicCtr::rem_inv_req_naks), 0u) << "no NAK for a class J error";

  // The named MR is still valid: a WRITE through a fresh pair lands.
  Pair q = h.pair(IBV_QPT_RC);
  ASSERT_NE(q.qa, nullptr);
  ibv_sge ws = src.sge(0, 64);
  ibv_send_wr w = rdma_wr(IBV_WR_RDMA_WRITE, 2, {&ws, 1}, named.addr(), named.rkey());
  ASSERT_EQ(post_send(q.qa, w), 0);
  EXPECT_EQ(h.wait_wc(q.scq_a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(first_diff(named.bytes(0, 64), src.bytes(0, 64)), -1);

  // UC has no SEND with Invalidate: taken, completed in error, not sent.
  Pair u = h.pair(IBV_QPT_UC);
  ASSERT_NE(u.qa, nullptr);
  ibv_send_wr uw = send_wr(IBV_WR_SEND_WITH_INV, 3, {&s, 1});
  uw.invalidate_rkey = named.rkey();
  const uint64_t sent = h.a().rnic->counters().get(RnicCtr::req_pkts);
  ASSERT_EQ(post_send(u.qa, uw), 0);
  const ibv_wc uwc = h.wait_wc(u.scq_a);
  EXPECT_EQ(uwc.wr_id, 3u);
  EXPECT_EQ(uwc.status, IBV_WC_LOC_QP_OP_ERR) << wc_status_name(uwc.status);
  EXPECT_EQ(h.a().rnic->counters().get(RnicCtr::req_pkts), sent);
}

// What the device reports matches what it does: memory windows of type 1
// and 2B (bound to a QP; not 2A), with local and remote invalidation
// (MEM_MGT_EXTENSIONS, as rxe), sharing the MRs' key space.
TEST(SendWithInvalidate, DeviceReportsMemoryWindows) {
  Harness h;
  const ibv_device_attr& a = h.a().rnic->device_attr();
  EXPECT_NE(a.device_cap_flags & IBV_DEVICE_MEM_MGT_EXTENSIONS, 0u);
  EXPECT_NE(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW, 0u);
  EXPECT_NE(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B, 0u);
  EXPECT_EQ(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A, 0u);
  EXPECT_EQ(a.max_mw, a.max_mr);
}

// ---- port events ------------------------------------------------------------------------

// The link goes down and comes back: IBV_EVENT_PORT_ERR then
// IBV_EVENT_PORT_ACTIVE, each once, for port 1 (IBA 11.6.3.3); query_port
// says DOWN in between and ACTIVE after.  The other node hears nothing.
TEST(PortEvents, LinkDownThenUp) {
  Harness h;
  nonblocking(h.a().rnic->async_fd());
  nonblocking(h.b().rnic->async_fd());
  ibv_port_attr pa{};
  ASSERT_EQ(h.a().rnic->query_port(kPortNum, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  EXPECT_TRUE(async_events(*h.a().rnic).empty());

  h.wire().set_link_up(*h.a().port, false);
  std::vector<AsyncEvent> evs;
  ASSERT_TRUE(h.run_until([&] {
    for (const auto& e : async_events(*h.a().rnic)) evs.push_back(e);
    return !evs.empty();
  }, std::chrono::seconds(5))) << "no PORT_ERR";
  EXPECT_EQ(evs[0].type, IBV_EVENT_PORT_ERR);
  EXPECT_EQ(evs[0].port, kPortNum);
  ASSERT_EQ(h.a().rnic->query_port(kPortNum, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_DOWN);

  h.wire().set_link_up(*h.a().port, true);
  evs.clear();
  ASSERT_TRUE(h.run_until([&] {
    for (const auto& e : async_events(*h.a().rnic)) evs.push_back(e);
    return !evs.empty();
  }, std::chrono::seconds(5))) << "no PORT_ACTIVE";
  EXPECT_EQ(evs[0].type, IBV_EVENT_PORT_ACTIVE);
  EXPECT_EQ(evs[0].port, kPortNum);
  ASSERT_EQ(h.a().rnic->query_port(kPortNum, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);

  h.run_for(milliseconds(120));  // more than one link sample: no repeat
  EXPECT_EQ(evs.size(), 1u);
  EXPECT_TRUE(async_events(*h.a().rnic).empty());
  EXPECT_TRUE(async_events(*h.b().rnic).empty());
  EXPECT_EQ(h.a().rnic->counters().get(RnicCtr::port_events), 2u);
}

// ---- communication established ---------------------------------------------------------

// IBA 11.6.3.1: the first request a connected QP receives while in RTR
// raises IBV_EVENT_COMM_EST for that QP, once; the SEND is delivered (a QP
// in RTR receives).  A QP already in RTS when its first request comes
// raises nothing (hardware behaves so; rdma_cm's passive side is such a
// QP).
TEST(CommEst, RaisedOnceInRtrOnly) {
  Harness h;
  nonblocking(h.a().rnic->async_fd());
  nonblocking(h.b().rnic->async_fd());
  Cq* ca = h.cq(h.a());
  Cq* cb = h.cq(h.b());
  Qp* qa = h.qp(h.a(), IBV_QPT_RC, ca, ca);
  Qp* qb = h.qp(h.b(), IBV_QPT_RC, cb, cb);
  ASSERT_NE(qa, nullptr);
  ASSERT_NE(qb, nullptr);
  const ConnOpts o;
  ASSERT_EQ(h.to_rts(qa, h.a(), h.b(), qb->qpn(), o.psn_a, o.psn_b, o), 0);
  // B: INIT then RTR only.
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_INIT;
  at.port_num = kPortNum;
  at.qp_access_flags = o.access;
  ASSERT_EQ(qb->modify(at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  at = {};
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = o.mtu;
  at.dest_qp_num = qa->qpn().value();
  at.rq_psn = o.psn_a;
  at.ah_attr = h.ah_attr(h.b(), h.a());
  at.max_dest_rd_atomic = o.max_dest_rd_atomic;
  at.min_rnr_timer = o.min_rnr_timer;
  ASSERT_EQ(qb->modify(at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            0);
  EXPECT_TRUE(async_events(*h.b().rnic).empty());

  Buffer dst = h.buffer(h.b(), 256, kRemoteAll);
  Buffer src = h.buffer(h.a(), 64, kRemoteAll, 0x5a);
  for (int i = 0; i < 3; ++i) {
    ibv_sge r = dst.sge(64 * i, 64);
    ASSERT_EQ(post_recv(qb, i, {&r, 1}), 0);
  }
  ibv_sge s = src.sge(0, 64);
  for (int i = 0; i < 3; ++i) {
    ibv_send_wr wr = send_wr(IBV_WR_SEND, i, {&s, 1});
    ASSERT_EQ(post_send(qa, wr), 0);
  }
  const auto wcs = h.wait_wcs(cb, 3);
  ASSERT_EQ(wcs.size(), 3u);
  for (const ibv_wc& wc : wcs) EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  std::vector<AsyncEvent> evs;
  h.run_until([&] {
    for (const auto& e : async_events(*h.b().rnic)) evs.push_back(e);
    return !evs.empty();
  }, milliseconds(200));
  ASSERT_EQ(evs.size(), 1u) << "one COMM_EST for three requests";
  EXPECT_EQ(evs[0].type, IBV_EVENT_COMM_EST);
  EXPECT_EQ(evs[0].qp, qb);
  EXPECT_TRUE(async_events(*h.a().rnic).empty()) << "A was in RTS when B's ACKs came";
}

// A QP moved to RTS before its first request (the common case) raises no
// COMM_EST.
TEST(CommEst, NotRaisedInRts) {
  Harness h;
  nonblocking(h.b().rnic->async_fd());
  Pair p = h.pair(IBV_QPT_RC);
  ASSERT_NE(p.qb, nullptr);
  Buffer dst = h.buffer(h.b(), 64, kRemoteAll);
  Buffer src = h.buffer(h.a(), 64, kRemoteAll, 0x5a);
  ibv_sge r = dst.sge(0, 64);
  ASSERT_EQ(post_recv(p.qb, 1, {&r, 1}), 0);
  ibv_sge s = src.sge(0, 64);
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 1, {&s, 1});
  ASSERT_EQ(post_send(p.qa, wr), 0);
  ASSERT_EQ(h.wait_wcs(p.rcq_b, 1).size(), 1u);
  h.run_for(milliseconds(20));
  EXPECT_TRUE(async_events(*h.b().rnic).empty());
}

// ---- a connected QP's next hop -----------------------------------------------------------

// ibv_modify_qp to RTR resolves the path's next hop before it returns, as
// Linux's modify_qp does for RoCE (ib_resolve_eth_dmac): the first packets
// of both sides then leave at once.  Before, they waited in the neighbour's
// queue, which holds 16 frames: ibv_srq_pingpong's 16 QPs answered their
// first messages all at once there, lost their ACKs, and the client ended
// in RETRY_EXC_ERR once the server had exited (1 run in 10 under load).
TEST(PathResolution, RtrResolvesTheNextHopBeforeItReturns) {
  Harness h{HarnessOptions{.resolve_neighbours = false}};
  // B's engine answers A's ARP while A's caller waits in modify.
  std::atomic<bool> stop{false};
  std::thread peer([&] {
    while (!stop.load()) {
      h.b().engine->poll();
      std::this_thread::sleep_for(std::chrono::microseconds(50));  // leaves the sim wire's lock to A
    }
  });
  Cq* cq = h.cq(h.a());
  Qp* rc = h.qp(h.a(), IBV_QPT_RC, cq, cq);
  Qp* uc = h.qp(h.a(), IBV_QPT_UC, cq, cq);
  ASSERT_NE(rc, nullptr);
  ASSERT_NE(uc, nullptr);
  const int rc4 = qp_to_rts(rc, h.ah_attr(h.a(), h.b()), 0x123, 0, 0, ConnOpts{});
  const int uc6 = qp_to_rts(uc, h.ah_attr(h.a(), h.b(), true), 0x124, 0, 0, ConnOpts{});
  stop = true;
  peer.join();
  EXPECT_EQ(rc4, 0) << std::strerror(rc4);
  EXPECT_EQ(uc6, 0) << std::strerror(uc6);
  transport::Engine& e = *h.a().engine;
  bool v4 = false;
  bool v6 = false;
  e.run_sync([&] {
    v4 = e.neighbours().lookup(transport::IpAddr::v4(kIpB), e.now()) != nullptr;
    v6 = e.neighbours().lookup(transport::IpAddr::v6(h.b().ip6), e.now()) != nullptr;
  });
  EXPECT_TRUE(v4) << "RC: RTR returned before the next hop resolved";
  EXPECT_TRUE(v6) << "UC over IPv6: RTR returned before the next hop resolved";
}

// A next hop that never answers fails the modify with ETIMEDOUT (Linux's
// answer), and the QP stays where it was.  A UD QP has no path: its RTR
// does not wait.
TEST(PathResolution, RtrToANeighbourThatNeverAnswersFails) {
  Harness h{HarnessOptions{.resolve_neighbours = false}};
  Cq* cq = h.cq(h.a());
  Qp* q = h.qp(h.a(), IBV_QPT_RC, cq, cq);
  Qp* ud = h.qp(h.a(), IBV_QPT_UD, cq, cq);
  ASSERT_NE(q, nullptr);
  ASSERT_NE(ud, nullptr);
  ibv_ah_attr path = h.ah_attr(h.a(), h.b());
  const wire::Ipv6Addr nowhere = wire::PktDesc::ipv4_mapped(0x0A000063);  // 10.0.0.99: nobody
  std::memcpy(path.grh.dgid.raw, nowhere.data(), nowhere.size());
  EXPECT_EQ(qp_to_rts(q, path, 0x123, 0, 0, ConnOpts{}), ETIMEDOUT);
  EXPECT_EQ(qp_state(q), IBV_QPS_INIT);
  EXPECT_EQ(h.ud_ready(ud), 0);
  EXPECT_EQ(qp_state(ud), IBV_QPS_RTS);
}

// ---- unreachable UD destination --------------------------------------------------------

// A UD send to an address that does not resolve completes successfully
// (UD is unreliable, as rxe and hardware), but the loss is counted: the
// engine's drop_neigh for what waited on the resolution, the RNIC's
// drop_tx_no_neigh for a send while the neighbour is known to fail; such a
// packet is not counted as sent.
TEST(UdUnreachable, CompletesAndCountsTheDrop) {
  Harness h;
  Cq* cq = h.cq(h.a());
  Qp* q = h.qp(h.a(), IBV_QPT_UD, cq, cq);
  ASSERT_NE(q, nullptr);
  ASSERT_EQ(h.ud_ready(q), 0);
  ibv_ah_attr attr = h.ah_attr(h.a(), h.b());
  const wire::Ipv6Addr nowhere = wire::PktDesc::ipv4_mapped(0x0A000063);  // 10.0.0.99: nobody
  std::memcpy(attr.grh.dgid.raw, nowhere.data(), nowhere.size());
  int err = 0;
  Ah* ah = h.a().rnic->create_ah(h.a().pd, attr, &err);
  ASSERT_NE(ah, nullptr);
  Buffer src = h.buffer(h.a(), 64, kRemoteAll);
  ibv_sge s = src.sge(0, 64);
  auto send_one = [&](uint64_t id) {
    ibv_send_wr wr = send_wr(IBV_WR_SEND, id, {&s, 1});
    wr.wr.ud.ah = &ah->ibv;
    wr.wr.ud.remote_qpn = 0x123;
    wr.wr.ud.remote_qkey = kUdQkey;
    ASSERT_EQ(post_send(q, wr), 0);
    const ibv_wc wc = h.wait_wc(cq);
    EXPECT_EQ(wc.wr_id, id);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  };
  RnicCounters& rc = h.a().rnic->counters();
  send_one(1);  // waits on the resolution, then is dropped with it
  ASSERT_TRUE(h.run_until([&] { return h.a().engine->total(transport::EngineCtr::neigh_failed) >= 1; },
                          std::chrono::seconds(5)));
  EXPECT_GE(h.a().engine->total(transport::EngineCtr::drop_neigh), 1u);
  const uint64_t sent_before = rc.get(RnicCtr::req_pkts);
  send_one(2);  // the neighbour is known to fail: dropped at once
  EXPECT_EQ(rc.get(RnicCtr::drop_tx_no_neigh), 1u);
  EXPECT_EQ(rc.get(RnicCtr::req_pkts), sent_before);
  EXPECT_EQ(qp_state(q), IBV_QPS_RTS);
}

// A QP on an SRQ that goes to ERR raises LAST_WQE_REACHED (IBA 11.6.3.1);
// the event carries the QP's context as it was when raised.  Destroying the
// QP before the event is read drops it, as the kernel's uverbs does: a
// reader never gets a QP that no longer exists (UCX's rc_verbs moves its
// QPs to ERR and destroys them at once, and read such an event's freed QP).
TEST(AsyncEvents, DestroyedQpsUnreadEventsAreDropped) {
  Harness h;
  nonblocking(h.b().rnic->async_fd());
  Srq* srq = h.srq(h.b(), 32, 1);
  ASSERT_NE(srq, nullptr);
  Cq* cq = h.cq(h.b());
  int marker_kept = 0;
  int marker_dropped = 0;
  Qp* kept = h.qp(h.b(), IBV_QPT_RC, cq, cq, {}, srq);
  Qp* dropped = h.qp(h.b(), IBV_QPT_RC, cq, cq, {}, srq);
  ASSERT_NE(kept, nullptr);
  ASSERT_NE(dropped, nullptr);
  kept->context = &marker_kept;
  dropped->context = &marker_dropped;
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(kept->modify(at, IBV_QP_STATE), 0);
  ASSERT_EQ(dropped->modify(at, IBV_QP_STATE), 0);
  ASSERT_EQ(h.b().rnic->destroy_qp(dropped), 0);
  const auto evs = async_events(*h.b().rnic);
  ASSERT_EQ(evs.size(), 1u) << "only the QP still there has its event";
  EXPECT_EQ(evs[0].type, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(evs[0].qp, kept);
  EXPECT_EQ(evs[0].context, &marker_kept);
}

}  // namespace
}  // namespace uroce::rnic::testing
