// Congestion control end to end (DESIGN.md "Congestion control"): two
// RNICs on a sim link that is slower than they are and marks ECN-capable
// frames CE once they queued for longer than a threshold, as a congested
// switch port does (fault.hpp: rate_mbps, ecn_mark_us).
//
// WRITEs: B (the responder) sees CE on A's requests and sends CNPs; A's
// QP cuts its rate (DCQCN) and paces.  READs: A sees CE on B's responses;
// B's QP slows its responses.  Every byte arrives as it would without
// congestion control, nothing is retransmitted (the link never drops), and
// the QPs stay in RTS.  With cc "none" the CNPs still come and are counted
// and ignored; with ECN off at the sender nothing is marked at all; with
// ECN off and cc "delay" the requester's round trips alone cut its rate.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "tests/rnic/harness.hpp"

namespace uroce::rnic::testing {
namespace {

enum class Kind { Write, Read };
enum class Mode { Dcqcn, CcNone, EcnOff, Delay };

drivers::FaultSpec congested_link() {
  drivers::FaultSpec s;
  s.rate_bps = 200'000'000;  // 200 Mb/s: a 1 KiB frame holds the link ~42 µs
  s.ecn_mark_ns = 100'000;   // marked past 100 µs of queueing (a few frames)
  return s;
}

uint64_t ctr(Node& n, RnicCtr c) { return n.rnic->counters().get(c); }

using Param = std::tuple<Kind, Mode>;
class Congested : public ::testing::TestWithParam<Param> {};

TEST_P(Congested, StreamCompletesAndTheSenderReacts) {
  const auto [kind, mode] = GetParam();
  HarnessOptions ho;
  ho.faults = congested_link();
  for (config::CcConfig* c : {&ho.cc_a, &ho.cc_b}) {
    if (mode == Mode::CcNone) c->mode = config::CcMode::kNone;
    if (mode == Mode::EcnOff) c->ecn = false;
    if (mode == Mode::Delay) {  // no marks at all: only the round trip tells
      c->ecn = false;
      c->mode = config::CcMode::kDelay;
    }
  }
  Harness h(ho);
  ConnOpts o;
  o.mtu = IBV_MTU_1024;
  // perftest's local ACK timeout (14: ~67 ms), longer than the link's queue
  // can delay an ACK (8 messages of 16 KiB in flight at 200 Mb/s: ~5 ms,
  // more under a CPU-starved run): an ACK timeout or a retransmission here
  // is a fault, never the queue.
  o.timeout = 14;
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  constexpr int kOps = 96;
  constexpr int kWindow = 8;
  constexpr size_t kMsg = 16 * 1024;
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  Buffer a = h.buffer(h.a(), kMsg * kWindow, access);
  Buffer b = h.buffer(h.b(), kMsg * kWindow, access);
  fill_pattern(a.bytes(0, a.len), 1);
  fill_pattern(b.bytes(0, b.len), 2);
  int posted = 0, done = 0;
  const auto t0 = Clock::now();
  while (done < kOps && Clock::now() - t0 < std::chrono::seconds(60)) {
    while (posted < kOps && posted - done < kWindow) {
      const size_t off = size_t(posted % kWindow) * kMsg;
      ibv_sge s = a.sge(off, kMsg);
      ibv_send_wr wr = rdma_wr(kind == Kind::Write ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_READ, posted, {&s, 1},
                               b.addr(off), b.rkey());
      ASSERT_EQ(post_send(p.qa, wr), 0);
      ++posted;
    }
    for (const ibv_wc& wc : h.poll_cq(p.scq_a)) {
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status) << "\n" << h.counters();
      ASSERT_EQ(wc.wr_id, uint64_t(done));
      const size_t off = size_t(done % kWindow) * kMsg;
      EXPECT_EQ(first_diff(a.bytes(off, kMsg), b.bytes(off, kMsg)), -1) << "op " << done;
      ++done;
    }
  }
  ASSERT_EQ(done, kOps) << h.counters();
  EXPECT_EQ(qp_state(p.qa), IBV_QPS_RTS);
  EXPECT_EQ(qp_state(p.qb), IBV_QPS_RTS);
  EXPECT_EQ(ctr(h.a(), RnicCtr::req_retrans_pkts), 0u) << h.counters();
  EXPECT_EQ(ctr(h.a(), RnicCtr::ack_timeouts), 0u) << h.counters();

  // WRITE: data flows A -> B, B marks and A reacts; READ: the other way.
  Node& np = kind == Kind::Write ? h.b() : h.a();
  Node& rp = kind == Kind::Write ? h.a() : h.b();
  Qp* rp_qp = kind == Kind::Write ? p.qa : p.qb;
  const std::string all = h.counters();
  switch (mode) {
    case Mode::Dcqcn:
      EXPECT_GT(ctr(np, RnicCtr::np_ecn_marked_roce_packets), 0u) << all;
      EXPECT_GT(ctr(np, RnicCtr::np_cnp_sent), 0u) << all;
      EXPECT_GT(ctr(rp, RnicCtr::rp_cnp_handled), 0u) << all;
      EXPECT_GT(ctr(rp, RnicCtr::rp_rate_cuts), 0u) << all;
      EXPECT_GT(ctr(rp, RnicCtr::rp_paced_waits), 0u) << all;
      EXPECT_GT(engine_read(rp_qp->rnic().engine(), [&] { return rp_qp->cc.cnps_rcvd; }), 0u);
      break;
    case Mode::CcNone:
      EXPECT_GT(ctr(np, RnicCtr::np_cnp_sent), 0u) << all;
      EXPECT_GT(ctr(rp, RnicCtr::rp_cnp_ignored), 0u) << all;
      EXPECT_EQ(ctr(rp, RnicCtr::rp_cnp_handled), 0u) << all;
      EXPECT_EQ(ctr(rp, RnicCtr::rp_rate_cuts), 0u) << all;
      EXPECT_EQ(ctr(rp, RnicCtr::rp_paced_waits), 0u) << all;
      break;
    case Mode::EcnOff:  // Not-ECT frames are never marked
      EXPECT_EQ(ctr(np, RnicCtr::np_ecn_marked_roce_packets), 0u) << all;
      EXPECT_EQ(ctr(rp, RnicCtr::rp_cnp_handled), 0u) << all;
      break;
    case Mode::Delay:  // no marks; A's round trips (its requests' ACKs or READ responses) over target cut A's rate
      EXPECT_EQ(ctr(np, RnicCtr::np_ecn_marked_roce_packets), 0u) << all;
      EXPECT_GT(ctr(h.a(), RnicCtr::rp_delay_cuts), 0u) << all;
      if (kind == Kind::Write) {
        EXPECT_GT(ctr(h.a(), RnicCtr::rp_paced_waits), 0u) << all;
      }
      break;
  }
  if (std::getenv("UROCE_TEST_VERBOSE") != nullptr) std::printf("%s\n", all.c_str());
  // CNPs are never answered: the CNP sender's own counters see none come back.
  EXPECT_EQ(ctr(np, RnicCtr::rp_cnp_handled) + ctr(np, RnicCtr::rp_cnp_ignored), 0u) << all;
}

std::string param_name(const ::testing::TestParamInfo<Param>& i) {
  const char* k = std::get<0>(i.param) == Kind::Write ? "Write" : "Read";
  const char* m = "";
  switch (std::get<1>(i.param)) {
    case Mode::Dcqcn: m = "Dcqcn"; break;
    case Mode::CcNone: m = "CcNone"; break;
    case Mode::EcnOff: m = "EcnOff"; break;
    case Mode::Delay: m = "Delay"; break;
  }
  return std::string(k) + "_" + m;
}

INSTANTIATE_TEST_SUITE_P(Cc, Congested,
                         ::testing::Combine(::testing::Values(Kind::Write, Kind::Read),
                                            ::testing::Values(Mode::Dcqcn, Mode::CcNone, Mode::EcnOff, Mode::Delay)),
                         param_name);

// Path changes (repath, PLB's idle rehash): on a link that marks every
// ECN-capable frame, every round trip of A's QP sees CNPs; with repath on,
// each time it is idle after repath_rounds such rounds it moves to another
// UDP source port (in 0xC000-0xFFFF); never while anything is in flight,
// so nothing is reordered or sent again.  With repath off (the default)
// the port stays.
TEST(Repath, ACongestedQpMovesWhenIdle) {
  for (const bool repath : {true, false}) {
    SCOPED_TRACE(repath ? "repath on" : "repath off");
    HarnessOptions ho;
    drivers::FaultSpec marks;
    marks.ce = 1;
    ho.faults = marks;
    ho.cc_a.repath = repath;
    Harness h(ho);
    ConnOpts o;
    o.timeout = 14;
    Pair p = h.pair(IBV_QPT_RC, o);
    ASSERT_NE(p.qa, nullptr);
    auto sport = [&] { return engine_read(*h.a().engine, [&] { return p.qa->attrs().sport; }); };
    const uint16_t first_port = sport();
    constexpr size_t kMsg = 16 * 1024;
    Buffer a = h.buffer(h.a(), kMsg * 4, IBV_ACCESS_LOCAL_WRITE);
    Buffer b = h.buffer(h.b(), kMsg * 4, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    std::vector<uint16_t> ports{first_port};
    for (int batch = 0; batch < 12; ++batch) {  // four messages, then idle
      fill_pattern(a.bytes(0, a.len), 10 + batch);
      for (int i = 0; i < 4; ++i) {
        ibv_sge s = a.sge(size_t(i) * kMsg, kMsg);
        ibv_send_wr wr = rdma_wr(IBV_WR_RDMA_WRITE, i, {&s, 1}, b.addr(size_t(i) * kMsg), b.rkey());
        ASSERT_EQ(post_send(p.qa, wr), 0);
      }
      const auto wcs = h.wait_wcs(p.scq_a, 4);
      ASSERT_EQ(wcs.size(), 4u) << h.counters();
      for (const ibv_wc& wc : wcs) ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
      EXPECT_EQ(first_diff(b.bytes(0, b.len), a.bytes(0, a.len)), -1) << "batch " << batch;
      if (const uint16_t now = sport(); now != ports.back()) ports.push_back(now);
    }
    const uint64_t changes = h.a().rnic->counters().get(RnicCtr::path_changes);
    EXPECT_EQ(engine_read(*h.a().engine, [&] { return p.qa->cc.path_changes; }), changes);
    if (repath) {
      EXPECT_GE(changes, 2u) << h.counters();
      // Ports seen between batches: each a new one, at most one per change
      // (a paced QP is also idle between its own bursts, inside a batch).
      EXPECT_GE(ports.size(), 3u);
      EXPECT_LE(ports.size(), changes + 1);
      for (uint16_t port : ports) EXPECT_GE(port, 0xC000);
    } else {
      EXPECT_EQ(changes, 0u);
      EXPECT_EQ(ports.size(), 1u);
    }
    EXPECT_GT(engine_read(*h.a().engine, [&] { return p.qa->cc.cnps_rcvd; }), 0u);
    EXPECT_EQ(h.a().rnic->counters().get(RnicCtr::req_retrans_pkts), 0u) << h.counters();
    EXPECT_EQ(h.b().rnic->counters().get(RnicCtr::seq_naks_sent), 0u) << "a path change reordered packets";
  }
}

// The peer dies while the sender is paced (its QP to ERR: it drops what
// comes, as a crashed host's NIC does): the paced QP's retries run out
// (RETRY_EXC_ERR on the WQE under way, the rest flushed), its rate timer
// and pacer are left with nothing to do, and it is destroyed with its
// timers armed or not — under the sanitizers, nothing is touched after.
TEST(PacedQp, PeerDyingMidStreamEndsInRetryExceeded) {
  HarnessOptions ho;
  ho.faults = congested_link();
  Harness h(ho);
  ConnOpts o;
  // ~17 ms: at the 16 ms floor of the adaptive timer (params kRtoMinNs),
  // so that only the peer's death runs the retries out, not a slow turn
  // of the engine under TSan (at ~1 ms a WRITE ended in RETRY_EXC_ERR
  // while the peer still lived).
  o.timeout = 12;
  o.retry_cnt = 2;
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  // WRITEs of 64 KiB, kWindow outstanding, posted for as long as it takes
  // the link's marks to pace the sender (under TSan that is many more
  // than a fixed batch: a batch of 16 could all complete first); then the
  // window is topped up and the peer dies with all of it outstanding.
  constexpr size_t kMsg = 64 * 1024;
  constexpr size_t kWindow = 8;
  Buffer a = h.buffer(h.a(), kMsg * kWindow, IBV_ACCESS_LOCAL_WRITE);
  Buffer b = h.buffer(h.b(), kMsg * kWindow, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  fill_pattern(a.bytes(0, a.len), 3);
  size_t posted = 0;
  auto top_up = [&](size_t completed) {
    for (; posted - completed < kWindow; ++posted) {
      const size_t slot = posted % kWindow;
      ibv_sge s = a.sge(slot * kMsg, kMsg);
      ibv_send_wr wr = rdma_wr(IBV_WR_RDMA_WRITE, uint64_t(posted), {&s, 1}, b.addr(slot * kMsg), b.rkey());
      ASSERT_EQ(post_send(p.qa, wr), 0);
    }
  };
  std::vector<ibv_wc> done;
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (!(engine_read(*h.a().engine, [&] { return p.qa->cc.pacer.pacing(); }) && !done.empty()) && Clock::now() < until) {
    top_up(done.size());
    for (const ibv_wc& wc : h.poll_cq(p.scq_a)) {
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
      done.push_back(wc);
    }
  }
  ASSERT_TRUE(engine_read(*h.a().engine, [&] { return p.qa->cc.pacer.pacing(); })) << h.counters();
  ASSERT_FALSE(done.empty());
  top_up(done.size());
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(p.qb->modify(err, IBV_QP_STATE), 0);
  const std::vector<ibv_wc> rest = h.wait_wcs(p.scq_a, posted - done.size(), std::chrono::seconds(20));
  ASSERT_EQ(rest.size(), posted - done.size()) << h.counters();
  size_t exceeded = 0;
  for (const ibv_wc& wc : rest) {
    if (wc.status == IBV_WC_RETRY_EXC_ERR) ++exceeded;
    else EXPECT_TRUE(wc.status == IBV_WC_WR_FLUSH_ERR || wc.status == IBV_WC_SUCCESS) << wc_status_name(wc.status);
  }
  EXPECT_EQ(exceeded, 1u);
  EXPECT_EQ(qp_state(p.qa), IBV_QPS_ERR);
  EXPECT_GE(ctr(h.a(), RnicCtr::ack_timeouts), uint64_t{o.retry_cnt} + 1);
  for (const ibv_wc& wc : h.collect_for(p.scq_a, std::chrono::milliseconds(20)))
    ADD_FAILURE() << "a completion after the last: " << wc.wr_id << " " << wc_status_name(wc.status);
}

}  // namespace
}  // namespace uroce::rnic::testing
