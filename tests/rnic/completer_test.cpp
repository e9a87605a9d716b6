// The completer, driven by hand-made responses from the raw peer
// (raw_peer.hpp): coalesced and implied ACKs, go-back-N on a sequence NAK
// and on the local ACK timeout, RNR waits, READ responses with a gap,
// atomic ACKs, duplicates and ghosts, fence and the READ/atomic window.
// IBA 9.7.5.1, 9.7.5.2, 9.7.6.1.
#include <endian.h>
#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "lib/wire/opcode.hpp"
#include "transport/params.hpp"
#include "tests/rnic/raw_peer.hpp"

namespace uroce::rnic::testing {
namespace {

namespace op = wire::op;
using std::chrono::milliseconds;
constexpr uint64_t kRaddr = 0x10000;
constexpr uint32_t kRkey = 0x77;

class Completer : public ::testing::Test {
 protected:
  RawPeer p;
  Cq* scq = nullptr;
  Qp* q = nullptr;

  // The local ACK timeout is long (268 ms) unless a test asks for its own:
  // a test about something else must not see retransmissions because the
  // machine (or a sanitizer build) is slow.
  static ConnOpts quiet() {
    ConnOpts o;
    o.timeout = 16;
    return o;
  }
  void make(uint32_t sq_psn, ConnOpts o = quiet()) {
    scq = p.cq();
    q = p.qp(IBV_QPT_RC, scq, p.cq());
    ASSERT_NE(q, nullptr);
    ASSERT_EQ(p.to_rts(q, sq_psn, 0x222, o), 0);
  }
  Qpn me() const { return q->qpn(); }
  void post(ibv_send_wr wr) { ASSERT_EQ(post_send(q, wr), 0); }
  void send(const Buffer& b, uint64_t wr_id, size_t off, size_t len, unsigned flags = IBV_SEND_SIGNALED) {
    ibv_sge s = b.sge(off, len);
    post(send_wr(IBV_WR_SEND, wr_id, {&s, 1}, flags));
  }
  void read(const Buffer& b, uint64_t wr_id, size_t off, size_t len, unsigned flags = IBV_SEND_SIGNALED) {
    ibv_sge s = b.sge(off, len);
    post(rdma_wr(IBV_WR_RDMA_READ, wr_id, {&s, 1}, kRaddr + off, kRkey, flags));
  }
  // QP `qpn` has sent up to *last: acknowledge what was sent, round after
  // round (at most 8), until `end` is sent; *last is then the newest PSN
  // sent (the caller checks it is `end`).
  void ack_rounds(Qpn qpn, Psn* last, Psn end) {
    for (int round = 0; round < 8 && *last != end; ++round) {
      p.inject(p.ack(qpn, *last));
      auto more = p.wait_frames(1);
      ASSERT_FALSE(more.empty());
      p.run_for(milliseconds(2));
      for (auto& f : p.take()) more.push_back(f);
      *last = more.back().psn();
    }
  }
};

std::vector<uint64_t> ids(const std::vector<ibv_wc>& wcs) {
  std::vector<uint64_t> v;
  for (auto& w : wcs) v.push_back(w.wr_id);
  return v;
}

TEST_F(Completer, CoalescedAckCompletesSeveralWqes) {
  make(0x100);
  Buffer b = p.buffer(3000);
  send(b, 1, 0, 100);
  send(b, 2, 0, 2000);  // two packets: 0x101, 0x102
  send(b, 3, 0, 10);    // 0x103
  ASSERT_EQ(p.wait_frames(4).size(), 4u);
  p.inject(p.ack(me(), Psn(0x101)));  // mid-message: completes only the first
  auto w1 = p.poll_cq(scq);
  ASSERT_EQ(w1.size(), 1u);
  EXPECT_EQ(w1[0].wr_id, 1u);
  p.inject(p.ack(me(), Psn(0x103)));  // one ACK for the rest
  auto w2 = p.wait_wcs(scq, 2);
  EXPECT_EQ(ids(w2), (std::vector<uint64_t>{2, 3}));
  for (auto& w : w2) EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  EXPECT_EQ(p.ctr(RnicCtr::drop_resp_unexpected), 0u);
}

TEST_F(Completer, PsnWrapsAt24Bits) {
  make(0xFFFFFE);
  Buffer b = p.buffer(4096);
  send(b, 1, 0, 4000);  // four packets: FFFFFE FFFFFF 000000 000001
  auto fs = p.wait_frames(4);
  ASSERT_EQ(fs.size(), 4u);
  EXPECT_EQ(fs[2].psn(), Psn(0));
  EXPECT_EQ(fs[3].psn(), Psn(1));
  p.inject(p.ack(me(), Psn(0xFFFFFF)));
  EXPECT_TRUE(p.poll_cq(scq).empty());
  p.inject(p.ack(me(), Psn(1)));
  auto wcs = p.wait_wcs(scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  p.inject(p.ack(me(), Psn(0xFFFFFF)));  // old: a duplicate
  EXPECT_EQ(p.ctr(RnicCtr::drop_resp_unexpected), 1u);
}

TEST_F(Completer, SequenceNakGoesBackNMidMessage) {
  make(0x10);
  const size_t len = 4 * 1024;
  Buffer b = p.buffer(len + 64);
  fill_pattern(b.bytes(0, len), 5);
  ibv_sge s = b.sge(0, len);
  post(rdma_wr(IBV_WR_RDMA_WRITE, 1, {&s, 1}, kRaddr, kRkey));  // 0x10..0x13
  send(b, 2, len, 64);                                           // 0x14
  ASSERT_EQ(p.wait_frames(5).size(), 5u);

  p.inject(p.nak(me(), Psn(0x12), wire::NakCode::PsnSequenceError));
  auto fs = p.wait_frames(3);
  ASSERT_EQ(fs.size(), 3u);
  EXPECT_EQ(fs[0].opcode(), op::RC_WRITE_MIDDLE) << fs[0].name();  // resumes mid-message, no RETH
  EXPECT_EQ(fs[0].psn(), Psn(0x12));
  EXPECT_EQ(first_diff(fs[0].payload(), b.bytes(2048, 1024)), -1);  // at the right offset
  EXPECT_EQ(fs[1].opcode(), op::RC_WRITE_LAST);
  EXPECT_EQ(fs[1].psn(), Psn(0x13));
  EXPECT_EQ(first_diff(fs[1].payload(), b.bytes(3072, 1024)), -1);
  EXPECT_TRUE(fs[1].ack_req());
  EXPECT_EQ(fs[2].opcode(), op::RC_SEND_ONLY);
  EXPECT_EQ(fs[2].psn(), Psn(0x14));
  EXPECT_EQ(p.ctr(RnicCtr::seq_naks_rcvd), 1u);
  EXPECT_EQ(p.ctr(RnicCtr::req_retrans_pkts), 3u);

  p.inject(p.ack(me(), Psn(0x14)));
  auto wcs = p.wait_wcs(scq, 2);
  EXPECT_EQ(ids(wcs), (std::vector<uint64_t>{1, 2}));
}

// The send window under loss (params kMin/kMaxUnackedPsns): a full window
// of a long WRITE, a sequence NAK that halves it (the go-back-N resends half
// as much, its first and last packets asking for an ACK), an ACK that regrows it by
// the PSNs it acknowledges, and a second NAK for the same PSN changes
// nothing (one go-back-N per PSN).
TEST_F(Completer, SequenceNakHalvesTheSendWindowAndAcksRegrowIt) {
  using transport::params::kMaxUnackedPsns;
  ConnOpts o;
  o.timeout = 0;  // infinite: only the NAKs and ACKs below move the window
  p.cc_off();  // the whole window from the start
  make(0x1000, o);
  const uint32_t pkts = kMaxUnackedPsns + 200;
  const size_t len = size_t{pkts} * 1024;
  Buffer b = p.buffer(len);
  ibv_sge s = b.sge(0, len);
  post(rdma_wr(IBV_WR_RDMA_WRITE, 1, {&s, 1}, kRaddr, kRkey));
  auto fs = p.wait_frames(kMaxUnackedPsns);
  ASSERT_EQ(fs.size(), kMaxUnackedPsns);
  p.run_for(milliseconds(5));
  ASSERT_TRUE(p.take().empty()) << "more than a full window outstanding";

  // Lost at 0x1000 + 10: resend from there.  The NAK acknowledges the 10
  // PSNs before it, so the window is half of it plus those 10.
  const uint32_t half = kMaxUnackedPsns / 2 + 10;
  p.inject(p.nak(me(), Psn(0x1000 + 10), wire::NakCode::PsnSequenceError));
  fs = p.wait_frames(half);
  p.run_for(milliseconds(5));
  for (auto& f : p.take()) fs.push_back(f);
  ASSERT_EQ(fs.size(), half) << "a go-back-N after a sequence NAK resends about half the window";
  EXPECT_EQ(fs.front().psn(), Psn(0x1000 + 10));
  EXPECT_TRUE(fs.front().ack_req()) << "the first packet resent asks for an ACK";
  EXPECT_FALSE(fs[1].ack_req());
  EXPECT_EQ(fs.back().psn(), Psn(0x1000 + 10 + half - 1));
  EXPECT_TRUE(fs.back().ack_req()) << "the packet that fills the window asks for an ACK";

  // The same NAK again (duplicated on the wire): no second go-back-N.
  p.inject(p.nak(me(), Psn(0x1000 + 10), wire::NakCode::PsnSequenceError));
  p.run_for(milliseconds(5));
  EXPECT_TRUE(p.take().empty());

  // 100 PSNs acknowledged: the window grows by 100 and slides by 100.
  p.inject(p.ack(me(), Psn(0x1000 + 10 + 99)));
  fs = p.wait_frames(200);
  p.run_for(milliseconds(5));
  for (auto& f : p.take()) fs.push_back(f);
  ASSERT_EQ(fs.size(), 200u);
  EXPECT_EQ(fs.front().psn(), Psn(0x1000 + 10 + half));
  EXPECT_EQ(fs.back().psn(), Psn(0x1000 + 10 + half + 199));

  // Acknowledging what was sent, each time, sends the rest; the WRITE then
  // completes.
  Psn last = fs.back().psn();
  ack_rounds(me(), &last, Psn(0x1000 + pkts - 1));
  ASSERT_EQ(last, Psn(0x1000 + pkts - 1));
  p.inject(p.ack(me(), last));
  auto wcs = p.wait_wcs(scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << wc_status_name(wcs[0].status);
  EXPECT_EQ(q->req.window, kMaxUnackedPsns) << "regrown to the full window";
}

// Under congestion control (the default, DCQCN) a QP's first round trip
// is kInitialUnackedPsns packets, and each PSN acknowledged adds one to
// the window, up to kMaxUnackedPsns: slow start.
TEST_F(Completer, CongestionControlStartsWithTheInitialWindow) {
  using transport::params::kInitialUnackedPsns;
  using transport::params::kMaxUnackedPsns;
  ConnOpts o;
  o.timeout = 0;  // only the ACKs below move the window
  make(0x3000, o);
  const uint32_t pkts = kMaxUnackedPsns * 2;
  const size_t len = size_t{pkts} * 1024;
  Buffer b = p.buffer(len);
  ibv_sge s = b.sge(0, len);
  post(rdma_wr(IBV_WR_RDMA_WRITE, 1, {&s, 1}, kRaddr, kRkey));
  auto fs = p.wait_frames(kInitialUnackedPsns);
  p.run_for(milliseconds(5));
  for (auto& f : p.take()) fs.push_back(f);
  ASSERT_EQ(fs.size(), kInitialUnackedPsns) << "the first round trip";
  EXPECT_TRUE(fs.back().ack_req()) << "the packet that fills the window asks for an ACK";
  // All of it acknowledged: the window doubles and slides.
  p.inject(p.ack(me(), Psn(0x3000 + kInitialUnackedPsns - 1)));
  fs = p.wait_frames(2 * kInitialUnackedPsns);
  p.run_for(milliseconds(5));
  for (auto& f : p.take()) fs.push_back(f);
  ASSERT_EQ(fs.size(), 2 * kInitialUnackedPsns) << "the second round trip";
  EXPECT_EQ(fs.front().psn(), Psn(0x3000 + kInitialUnackedPsns));
  EXPECT_EQ(q->req.window, 2 * kInitialUnackedPsns);
}

// An ACK timeout is the stronger signal: the go-back-N resends only
// kMinUnackedPsns packets, the last asking for an ACK.
TEST_F(Completer, AckTimeoutShrinksTheSendWindowToItsMinimum) {
  using transport::params::kMaxUnackedPsns;
  using transport::params::kMinUnackedPsns;
  ConnOpts o;
  o.timeout = 12;  // ~17 ms: the test checks between two timeouts
  p.cc_off();  // the whole window from the start
  make(0x2000, o);
  const size_t len = size_t{kMaxUnackedPsns} * 1024;
  Buffer b = p.buffer(len);
  ibv_sge s = b.sge(0, len);
  post(rdma_wr(IBV_WR_RDMA_WRITE, 1, {&s, 1}, kRaddr, kRkey));
  ASSERT_EQ(p.wait_frames(kMaxUnackedPsns).size(), kMaxUnackedPsns);
  auto fs = p.wait_frames(kMinUnackedPsns, milliseconds(500));
  p.run_for(milliseconds(2));
  for (auto& f : p.take()) fs.push_back(f);
  ASSERT_EQ(fs.size(), kMinUnackedPsns);
  EXPECT_EQ(fs.front().psn(), Psn(0x2000));
  EXPECT_TRUE(fs.front().ack_req()) << "the oldest PSN, resent, asks for an ACK";
  EXPECT_EQ(fs.back().psn(), Psn(0x2000 + kMinUnackedPsns - 1));
  EXPECT_TRUE(fs.back().ack_req());
  EXPECT_EQ(p.ctr(RnicCtr::ack_timeouts), 1u);
}

// The device's reliable requesters share kMaxUnackedPsns: a second QP with
// packets outstanding halves what each may keep outstanding, the one over
// its share waits for ACKs, and the whole window is back once the other
// has nothing outstanding.
TEST_F(Completer, SendersShareTheOutstandingWindow) {
  using transport::params::kMaxUnackedPsns;
  ConnOpts o;
  o.timeout = 0;  // only the ACKs below move anything
  p.cc_off();  // the whole window from the start
  make(0x1000, o);
  Qp* q2 = p.qp(IBV_QPT_RC, p.cq(), p.cq());
  ASSERT_NE(q2, nullptr);
  ASSERT_EQ(p.to_rts(q2, 0x800000, 0x333, o), 0);
  const uint32_t pkts = kMaxUnackedPsns * 2;
  const size_t len = size_t{pkts} * 1024;
  Buffer b = p.buffer(2 * len);
  ibv_sge s1 = b.sge(0, len);
  post(rdma_wr(IBV_WR_RDMA_WRITE, 1, {&s1, 1}, kRaddr, kRkey));
  ASSERT_EQ(p.wait_frames(kMaxUnackedPsns).size(), kMaxUnackedPsns) << "alone: the whole window";
  p.run_for(milliseconds(5));
  ASSERT_TRUE(p.take().empty());

  // A second sender: each may now have half outstanding.  The first has
  // twice that and sends nothing; the second sends its half, its last
  // packet asking for an ACK.
  ibv_sge s2 = b.sge(len, len);
  ibv_send_wr w2 = rdma_wr(IBV_WR_RDMA_WRITE, 2, {&s2, 1}, kRaddr, kRkey);
  ASSERT_EQ(post_send(q2, w2), 0);
  const uint32_t half = kMaxUnackedPsns / 2;
  auto fs = p.wait_frames(half);
  p.run_for(milliseconds(5));
  for (auto& f : p.take()) fs.push_back(f);
  ASSERT_EQ(fs.size(), half);
  EXPECT_EQ(fs.front().psn(), Psn(0x800000));
  EXPECT_TRUE(fs.back().ack_req());

  // The first QP's oldest 300 PSNs acknowledged: 212 outstanding, so 44
  // more reach its share.
  p.inject(p.ack(me(), Psn(0x1000 + 299)));
  fs = p.wait_frames(half - (kMaxUnackedPsns - 300));
  p.run_for(milliseconds(5));
  for (auto& f : p.take()) fs.push_back(f);
  ASSERT_EQ(fs.size(), half - (kMaxUnackedPsns - 300));
  EXPECT_EQ(fs.front().psn(), Psn(0x1000 + kMaxUnackedPsns));
  EXPECT_TRUE(fs.back().ack_req()) << "the packet that fills the share asks for an ACK";

  // The second QP's WRITE wholly acknowledged (it sends the rest first):
  // the first QP has the whole window again.
  Psn last2 = Psn(0x800000 + half - 1);
  ack_rounds(q2->qpn(), &last2, Psn(0x800000 + pkts - 1));
  ASSERT_EQ(last2, Psn(0x800000 + pkts - 1));
  p.inject(p.ack(q2->qpn(), last2));
  p.run_for(milliseconds(5));
  (void)p.take();
  // Acknowledging what the first QP sent lets it send the rest of its
  // WRITE at once: more than its former share.
  p.inject(p.ack(me(), Psn(0x1000 + kMaxUnackedPsns + 43)));
  const uint32_t rest = pkts - (kMaxUnackedPsns + 44);
  fs = p.wait_frames(rest);
  p.run_for(milliseconds(5));
  for (auto& f : p.take()) fs.push_back(f);
  ASSERT_GT(rest, half);
  EXPECT_EQ(fs.size(), rest) << "alone again: the whole window";
}

TEST_F(Completer, AckTimeoutRetransmitsThenRetryExceeded) {
  ConnOpts o;
  o.timeout = 8;  // 4.096 us * 256 ~ 1 ms
  o.retry_cnt = 2;
  make(0x30, o);
  Buffer b = p.buffer(128);
  send(b, 1, 0, 64);
  send(b, 2, 64, 64);
  ASSERT_EQ(p.wait_frames(2).size(), 2u);
  auto wcs = p.wait_wcs(scq, 2, std::chrono::seconds(2));
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR) << wc_status_name(wcs[0].status);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR) << wc_status_name(wcs[1].status);
  EXPECT_EQ(q->state(), IBV_QPS_ERR);
  auto fs = p.take();  // two retries of both packets, from the oldest PSN
  ASSERT_EQ(fs.size(), 4u);
  EXPECT_EQ(fs[0].psn(), Psn(0x30));
  EXPECT_EQ(fs[1].psn(), Psn(0x31));
  EXPECT_EQ(fs[2].psn(), Psn(0x30));
  EXPECT_EQ(p.ctr(RnicCtr::ack_timeouts), 3u);
  EXPECT_EQ(p.ctr(RnicCtr::retry_exceeded), 1u);
  EXPECT_EQ(p.ctr(RnicCtr::req_retrans_pkts), 4u);
}

TEST_F(Completer, ProgressRestoresTheRetryCount) {
  ConnOpts o;
  o.timeout = 12;  // ~17 ms: room for the test's own steps between timeouts
  o.retry_cnt = 1;
  make(0x30, o);
  Buffer b = p.buffer(128);
  send(b, 1, 0, 64);
  send(b, 2, 64, 64);
  ASSERT_EQ(p.wait_frames(2).size(), 2u);
  // First timeout: one retry used; the ACK of the first then restores it.
  ASSERT_EQ(p.wait_frames(2, milliseconds(500)).size(), 2u);
  p.inject(p.ack(me(), Psn(0x30)));
  ASSERT_EQ(p.wait_wcs(scq, 1).at(0).status, IBV_WC_SUCCESS);
  auto re = p.wait_frames(1, milliseconds(500));  // one more retry of 0x31 is allowed
  ASSERT_EQ(re.size(), 1u);
  EXPECT_EQ(re[0].psn(), Psn(0x31));
  p.inject(p.ack(me(), Psn(0x31)));
  auto wcs = p.wait_wcs(scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
}

TEST_F(Completer, RnrNakWaitsThenRetriesAndGivesUp) {
  ConnOpts o;
  o.rnr_retry = 1;
  make(0x50, o);
  Buffer b = p.buffer(64);
  send(b, 1, 0, 64);
  ASSERT_EQ(p.wait_frames(1).size(), 1u);
  // The timer never fires early, so the resend comes at least 10.24 ms
  // after the NAK however the machine schedules us.
  const auto t0 = Clock::now();
  p.inject(p.rnr_nak(me(), Psn(0x50), 20));  // 10.24 ms
  auto fs = p.wait_frames(1, milliseconds(500));
  const auto waited = Clock::now() - t0;
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].opcode(), op::RC_SEND_ONLY);
  EXPECT_EQ(fs[0].psn(), Psn(0x50));
  EXPECT_GE(waited, std::chrono::microseconds(10'240));
  EXPECT_EQ(p.ctr(RnicCtr::rnr_naks_rcvd), 1u);

  p.inject(p.rnr_nak(me(), Psn(0x50), 1));  // rnr_retry exhausted
  auto wcs = p.wait_wcs(scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RNR_RETRY_EXC_ERR) << wc_status_name(wcs[0].status);
  EXPECT_EQ(q->state(), IBV_QPS_ERR);
  EXPECT_EQ(p.ctr(RnicCtr::rnr_retry_exceeded), 1u);
}

TEST_F(Completer, RnrRetrySevenIsInfinite) {
  ConnOpts o;
  o.rnr_retry = 7;
  make(0x60, o);
  Buffer b = p.buffer(64);
  send(b, 1, 0, 64);
  ASSERT_EQ(p.wait_frames(1).size(), 1u);
  for (int i = 0; i < 10; ++i) {
    p.inject(p.rnr_nak(me(), Psn(0x60), 1));
    auto fs = p.wait_frames(1, milliseconds(100));
    ASSERT_EQ(fs.size(), 1u) << "retry " << i;
    EXPECT_EQ(fs[0].psn(), Psn(0x60));
  }
  p.inject(p.ack(me(), Psn(0x60)));
  auto wcs = p.wait_wcs(scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
}

// retry_cnt 7 is seven retries, as ConnectX counts them (DESIGN.md; only the
// RNR retry count has an "infinite" value): a peer that never answers
// ends the WQE in RETRY_EXC_ERR after exactly seven retransmissions.
TEST_F(Completer, RetryCountSevenIsSevenRetries) {
  ConnOpts o;
  o.timeout = 8;  // ~1 ms
  o.retry_cnt = 7;
  make(0x70, o);
  Buffer b = p.buffer(64);
  send(b, 1, 0, 64);
  ASSERT_EQ(p.wait_frames(1).size(), 1u);
  for (int i = 0; i < 7; ++i) {
    auto fs = p.wait_frames(1, milliseconds(500));
    ASSERT_EQ(fs.size(), 1u) << "retransmission " << i;
    EXPECT_EQ(fs[0].psn(), Psn(0x70));
  }
  auto wcs = p.wait_wcs(scq, 1, milliseconds(500));
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_RETRY_EXC_ERR) << wc_status_name(wcs[0].status);
  EXPECT_TRUE(p.take().empty());  // no eighth
  EXPECT_EQ(p.ctr(RnicCtr::ack_timeouts), 8u);
  EXPECT_EQ(p.ctr(RnicCtr::retry_exceeded), 1u);
  EXPECT_EQ(q->state(), IBV_QPS_ERR);
}

TEST_F(Completer, ReadResponsePlacedAndGapReRequested) {
  make(0x700);
  const size_t len = 2500;
  Buffer dst = p.buffer(len);
  std::vector<uint8_t> data(len);
  fill_pattern(data, 11);
  read(dst, 1, 0, len);
  ASSERT_EQ(p.wait_frames(1).size(), 1u);
  std::span<const uint8_t> d(data);
  p.inject(p.read_resp(op::RC_READ_RESPONSE_FIRST, me(), Psn(0x700), d.subspan(0, 1024)));
  // 0x701 (MIDDLE) is lost; the LAST reveals the gap.
  p.inject(p.read_resp(op::RC_READ_RESPONSE_LAST, me(), Psn(0x702), d.subspan(2048)));
  auto fs = p.wait_frames(1);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].opcode(), op::RC_READ_REQUEST);
  EXPECT_EQ(fs[0].psn(), Psn(0x701));
  EXPECT_EQ(fs[0].desc().reth_va, kRaddr + 1024);  // only what is missing
  EXPECT_EQ(fs[0].desc().reth_len, len - 1024);
  EXPECT_EQ(p.ctr(RnicCtr::drop_resp_out_of_seq), 1u);
  EXPECT_TRUE(p.poll_cq(scq).empty());

  p.inject(p.read_resp(op::RC_READ_RESPONSE_FIRST, me(), Psn(0x701), d.subspan(1024, 1024)));
  p.inject(p.read_resp(op::RC_READ_RESPONSE_LAST, me(), Psn(0x702), d.subspan(2048)));
  auto wcs = p.wait_wcs(scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(first_diff(dst.bytes(0, len), data), -1);
}

// rxe replays a READ re-requested from its middle by continuing the
// message (MIDDLE/LAST at the re-request's PSN), not with a new FIRST.
TEST_F(Completer, ReadReplayMayContinueWithMiddleAndLast) {
  make(0x7F0);
  const size_t len = 3 * 1024;
  Buffer dst = p.buffer(len);
  std::vector<uint8_t> data(len);
  fill_pattern(data, 12);
  std::span<const uint8_t> d(data);
  read(dst, 1, 0, len);
  ASSERT_EQ(p.wait_frames(1).size(), 1u);
  p.inject(p.read_resp(op::RC_READ_RESPONSE_FIRST, me(), Psn(0x7F0), d.subspan(0, 1024)));
  p.inject(p.read_resp(op::RC_READ_RESPONSE_LAST, me(), Psn(0x7F2), d.subspan(2048)));  // 0x7F1 lost
  auto fs = p.wait_frames(1);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].psn(), Psn(0x7F1));
  p.inject(p.read_resp(op::RC_READ_RESPONSE_MIDDLE, me(), Psn(0x7F1), d.subspan(1024, 1024)));
  p.inject(p.read_resp(op::RC_READ_RESPONSE_LAST, me(), Psn(0x7F2), d.subspan(2048)));
  auto wcs = p.wait_wcs(scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(first_diff(dst.bytes(0, len), data), -1);
  EXPECT_EQ(p.ctr(RnicCtr::drop_bad_opcode_seq), 0u);
}

// A long READ response overflows a receive ring: the re-request's answer
// can lose its head as well.  Its first surviving packet (a PSN at or
// below one seen since the rewind) starts the next re-request at once;
// the rest of the old response (rising PSNs) does not.
TEST_F(Completer, ReplayWhoseHeadIsLostIsReRequestedWithoutATimeout) {
  make(0x900);
  const size_t len = 4 * 1024;
  Buffer dst = p.buffer(len);
  std::vector<uint8_t> data(len);
  fill_pattern(data, 13);
  std::span<const uint8_t> d(data);
  read(dst, 1, 0, len);
  ASSERT_EQ(p.wait_frames(1).size(), 1u);
  auto resp = [&](uint8_t opc, unsigned i) { return p.read_resp(opc, me(), Psn(0x900 + i), d.subspan(i * 1024, 1024)); };
  p.inject(resp(op::RC_READ_RESPONSE_FIRST, 0));
  p.inject(resp(op::RC_READ_RESPONSE_MIDDLE, 2));  // 1 lost: re-request from 1
  p.inject(resp(op::RC_READ_RESPONSE_LAST, 3));    // the old response's tail
  auto fs = p.wait_frames(1);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].psn(), Psn(0x901));
  p.run_for(milliseconds(2));
  EXPECT_TRUE(p.take().empty()) << "the old response's tail started a second re-request";
  // The replay: 1 lost again, 2 arrives (below 3, seen since the rewind).
  p.inject(resp(op::RC_READ_RESPONSE_MIDDLE, 2));
  fs = p.wait_frames(1);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].opcode(), op::RC_READ_REQUEST);
  EXPECT_EQ(fs[0].psn(), Psn(0x901));
  EXPECT_EQ(fs[0].desc().reth_len, len - 1024);
  EXPECT_EQ(p.ctr(RnicCtr::replay_head_lost), 1u);
  EXPECT_EQ(p.ctr(RnicCtr::ack_timeouts), 0u);
  p.inject(resp(op::RC_READ_RESPONSE_MIDDLE, 3));  // the rest of that replay: no third one
  p.run_for(milliseconds(2));
  EXPECT_TRUE(p.take().empty());
  for (unsigned i = 1; i < 4; ++i) p.inject(resp(i == 3 ? op::RC_READ_RESPONSE_LAST : op::RC_READ_RESPONSE_MIDDLE, i));
  auto wcs = p.wait_wcs(scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(first_diff(dst.bytes(0, len), data), -1);
  EXPECT_EQ(q->state(), IBV_QPS_RTS);
}

// Responses already in flight when a go-back-N starts (later ACKs past a
// READ whose response was lost) must not start one retry each.
TEST_F(Completer, OneGoBackNPerPsn) {
  ConnOpts o;
  o.timeout = 0;
  o.retry_cnt = 1;
  make(0x800, o);
  Buffer b = p.buffer(64);
  read(b, 1, 0, 8);     // 0x800
  send(b, 2, 16, 8);    // 0x801
  send(b, 3, 24, 8);    // 0x802
  send(b, 4, 32, 8);    // 0x803
  ASSERT_EQ(p.wait_frames(4).size(), 4u);
  p.inject(p.ack(me(), Psn(0x801)));  // the READ response was lost: go back to 0x800
  auto re = p.wait_frames(4);
  ASSERT_EQ(re.size(), 4u);
  EXPECT_EQ(re[0].opcode(), op::RC_READ_REQUEST);
  p.inject(p.ack(me(), Psn(0x802)));  // still from before the rewind
  p.inject(p.ack(me(), Psn(0x803)));
  p.run_for(milliseconds(2));
  EXPECT_TRUE(p.take().empty()) << "a second go-back-N for the same PSN";
  EXPECT_EQ(q->state(), IBV_QPS_RTS);  // and no retry consumed: retry_cnt 1 would have failed it
  std::vector<uint8_t> data(8, 9);
  p.inject(p.read_resp(op::RC_READ_RESPONSE_ONLY, me(), Psn(0x800), data));
  p.inject(p.ack(me(), Psn(0x803)));
  auto wcs = p.wait_wcs(scq, 4);
  EXPECT_EQ(ids(wcs), (std::vector<uint64_t>{1, 2, 3, 4}));
  for (auto& w : wcs) EXPECT_EQ(w.status, IBV_WC_SUCCESS) << wc_status_name(w.status);
}

TEST_F(Completer, AtomicAckWritesTheOriginalValue) {
  make(0x900);
  Buffer r = p.buffer(8);
  ibv_sge s = r.sge(0, 8);
  post(atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 4, &s, kRaddr, kRkey, 1, 0));
  ASSERT_EQ(p.wait_frames(1).size(), 1u);
  p.inject(p.atomic_ack(me(), Psn(0x900), 0x0102030405060708ull));
  auto wcs = p.wait_wcs(scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_FETCH_ADD);
  uint64_t v;
  std::memcpy(&v, r.data(), 8);
  EXPECT_EQ(v, 0x0102030405060708ull);  // host order
}

TEST_F(Completer, ReadResponseImpliesAckOfEarlierSends) {
  make(0xA00);
  Buffer b = p.buffer(64);
  send(b, 1, 0, 16);     // 0xA00
  read(b, 2, 32, 8);     // 0xA01
  ASSERT_EQ(p.wait_frames(2).size(), 2u);
  std::vector<uint8_t> data(8, 0x5C);
  p.inject(p.read_resp(op::RC_READ_RESPONSE_ONLY, me(), Psn(0xA01), data));
  auto wcs = p.wait_wcs(scq, 2);
  EXPECT_EQ(ids(wcs), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(b.data()[32], 0x5C);
}

TEST_F(Completer, AckPastALostReadResponseReRequestsTheRead) {
  make(0xB00);
  Buffer b = p.buffer(64);
  read(b, 1, 0, 8);   // 0xB00
  send(b, 2, 16, 8);  // 0xB01
  ASSERT_EQ(p.wait_frames(2).size(), 2u);
  p.inject(p.ack(me(), Psn(0xB01)));  // the READ response never came: implied NAK
  auto fs = p.wait_frames(2);
  ASSERT_GE(fs.size(), 1u);
  EXPECT_EQ(fs[0].opcode(), op::RC_READ_REQUEST);
  EXPECT_EQ(fs[0].psn(), Psn(0xB00));
}

TEST_F(Completer, DuplicateAndGhostResponsesAreDroppedAndCounted) {
  make(0xC00);
  Buffer b = p.buffer(64);
  send(b, 1, 0, 16);
  ASSERT_EQ(p.wait_frames(1).size(), 1u);
  p.inject(p.ack(me(), Psn(0xC00)));
  ASSERT_EQ(p.wait_wcs(scq, 1).size(), 1u);
  p.inject(p.ack(me(), Psn(0xC00)));                      // duplicate
  p.inject(p.ack(me(), Psn(0xC80)));                      // never sent: ghost
  std::vector<uint8_t> data(8);
  p.inject(p.read_resp(op::RC_READ_RESPONSE_ONLY, me(), Psn(0xC01), data));  // nothing outstanding
  p.inject(p.atomic_ack(me(), Psn(0xBFF), 1));            // old
  EXPECT_EQ(p.ctr(RnicCtr::drop_resp_unexpected), 4u);
  EXPECT_TRUE(p.poll_cq(scq).empty());
  EXPECT_EQ(q->state(), IBV_QPS_RTS);
}

TEST_F(Completer, FenceWaitsForEarlierReads) {
  ConnOpts o;
  o.timeout = 0;  // no retransmission to confuse with the fenced SEND
  make(0xD00, o);
  Buffer b = p.buffer(64);
  read(b, 1, 0, 8);
  send(b, 2, 16, 8, IBV_SEND_SIGNALED | IBV_SEND_FENCE);
  auto fs = p.wait_frames(1);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].opcode(), op::RC_READ_REQUEST);
  p.run_for(milliseconds(2));
  auto early = p.take();
  EXPECT_TRUE(early.empty()) << "the fenced SEND went before the READ completed: " << early[0].name();
  std::vector<uint8_t> data(8, 1);
  p.inject(p.read_resp(op::RC_READ_RESPONSE_ONLY, me(), Psn(0xD00), data));
  auto after = p.wait_frames(1);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].opcode(), op::RC_SEND_ONLY);
  EXPECT_EQ(after[0].psn(), Psn(0xD01));
}

// A message that left its AckReq to the one after it (unsignaled, not the
// SQ's last), then the QP goes to SQD before that one starts: the drain
// needs an ACK nothing asked for.  The requester resends what is
// unacknowledged, asking, and the drain ends on the peer's ACK.
TEST_F(Completer, SqdAfterAMessageThatLeftItsAskResendsItAsking) {
  ConnOpts o;
  o.timeout = 0;  // no ACK timeout: without the resend the drain never ends
  make(0xE00, o);
  Buffer b = p.buffer(64);
  read(b, 1, 0, 8);
  send(b, 2, 16, 8, 0);                  // unsignaled, the fenced SEND follows it
  send(b, 3, 32, 8, IBV_SEND_SIGNALED | IBV_SEND_FENCE);  // waits for the READ
  auto fs = p.wait_frames(2);
  ASSERT_EQ(fs.size(), 2u);
  EXPECT_EQ(fs[0].opcode(), op::RC_READ_REQUEST);
  EXPECT_EQ(fs[1].opcode(), op::RC_SEND_ONLY);
  EXPECT_FALSE(fs[1].ack_req()) << "another message followed it in the SQ";
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_SQD;
  ASSERT_EQ(q->modify(at, IBV_QP_STATE), 0);
  std::vector<uint8_t> data(8, 1);
  p.inject(p.read_resp(op::RC_READ_RESPONSE_ONLY, me(), Psn(0xE00), data));
  auto again = p.wait_frames(1);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].opcode(), op::RC_SEND_ONLY);
  EXPECT_EQ(again[0].psn(), Psn(0xE01));
  EXPECT_TRUE(again[0].ack_req());
  p.run_for(milliseconds(2));
  EXPECT_TRUE(p.take().empty()) << "SQD: the fenced SEND does not start";
  ibv_qp_attr got{};
  ASSERT_EQ(q->query(&got, 0, nullptr), 0);
  EXPECT_EQ(got.sq_draining, 1);
  p.inject(p.ack(me(), Psn(0xE01)));
  ASSERT_EQ(q->query(&got, 0, nullptr), 0);
  EXPECT_EQ(got.sq_draining, 0) << "drained on the ACK";
  auto wcs = p.wait_wcs(scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
}

TEST_F(Completer, MaxRdAtomicBoundsOutstandingReads) {
  ConnOpts o;
  o.max_rd_atomic = 2;
  o.timeout = 0;  // no local ACK timer: nothing but the window decides here
  make(0xE00, o);
  Buffer b = p.buffer(64);
  read(b, 1, 0, 8);
  read(b, 2, 8, 8);
  read(b, 3, 16, 8);
  auto fs = p.wait_frames(3, milliseconds(20));
  ASSERT_EQ(fs.size(), 2u);
  EXPECT_EQ(fs[1].psn(), Psn(0xE01));
  std::vector<uint8_t> data(8, 2);
  p.inject(p.read_resp(op::RC_READ_RESPONSE_ONLY, me(), Psn(0xE00), data));
  auto more = p.wait_frames(1);
  ASSERT_EQ(more.size(), 1u);
  EXPECT_EQ(more[0].opcode(), op::RC_READ_REQUEST);
  EXPECT_EQ(more[0].psn(), Psn(0xE02));
}

TEST_F(Completer, RemoteErrorNaksFailTheWqeAndFlushTheRest) {
  struct Case {
    wire::NakCode code;
    ibv_wc_status want;
  };
  for (const Case c : {Case{wire::NakCode::RemoteAccessError, IBV_WC_REM_ACCESS_ERR},
                       Case{wire::NakCode::InvalidRequest, IBV_WC_REM_INV_REQ_ERR},
                       Case{wire::NakCode::RemoteOperationalError, IBV_WC_REM_OP_ERR}}) {
    SCOPED_TRACE(wc_status_name(c.want));
    make(0xF00);
    Buffer b = p.buffer(64);
    send(b, 1, 0, 8);
    ibv_sge s = b.sge(8, 8);
    post(rdma_wr(IBV_WR_RDMA_WRITE, 2, {&s, 1}, kRaddr, kRkey));
    send(b, 3, 16, 8);
    ASSERT_EQ(p.wait_frames(3).size(), 3u);
    p.inject(p.nak(me(), Psn(0xF01), c.code));  // implies the ACK of 0xF00
    auto wcs = p.wait_wcs(scq, 3);
    ASSERT_EQ(wcs.size(), 3u);
    EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(wcs[1].status, c.want) << wc_status_name(wcs[1].status);
    EXPECT_EQ(wcs[2].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(q->state(), IBV_QPS_ERR);
  }
}

}  // namespace
}  // namespace uroce::rnic::testing
