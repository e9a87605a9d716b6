// The requester, seen from the wire: what one RNIC emits for each kind of
// work request (RC, UC, UD), checked field by field on frames the raw peer
// collects (raw_peer.hpp).  IBA 9.7.4 / 9.8 / 9.9, table 38.
#include <endian.h>
#include <gtest/gtest.h>

#include <vector>

#include "lib/wire/opcode.hpp"
#include "lib/wire/udp.hpp"
#include "transport/params.hpp"
#include "tests/rnic/raw_peer.hpp"
#include "transport/rnic/requester.hpp"

namespace uroce::rnic::testing {
namespace {

namespace op = wire::op;
constexpr uint64_t kRaddr = 0x7f00'1234'5000ull;
constexpr uint32_t kRkey = 0xabcdef12;

class Requester : public ::testing::Test {
 protected:
  RawPeer p;
  Cq* scq = nullptr;
  Cq* rcq = nullptr;
  Qp* q = nullptr;
  Qpn peer{RawPeer::kPeerQpn};

  void make(ibv_qp_type type, uint32_t sq_psn, ConnOpts o = {}) {
    scq = p.cq();
    rcq = p.cq();
    q = p.qp(type, scq, rcq);
    ASSERT_NE(q, nullptr);
    if (type == IBV_QPT_UD) {
      ASSERT_EQ(p.ud_ready(q, kUdQkey, sq_psn), 0);
    } else {
      // The raw peer never acknowledges: with an ACK timeout a slow run
      // (a sanitizer, a busy machine) would see retransmissions among the
      // frames a test counts.  No test here is about retransmission.
      o.timeout = 0;  // infinite (IBA 9.7.6.1.3)
      ASSERT_EQ(p.to_rts(q, sq_psn, 0x111, o), 0);
    }
  }
  void post(ibv_send_wr wr) { ASSERT_EQ(post_send(q, wr), 0); }
};

// Every frame: UDP to 4791 from the QP's port in 0xC000-0xFFFF, checksum
// 0 (A17.4.3), a valid ICRC, our peer's QPN.
void expect_common(const Frame& f, Qpn dest) {
  EXPECT_TRUE(f.icrc_ok()) << f.name();
  EXPECT_EQ(f.udp().dst_port(), wire::kRoceV2Port);
  EXPECT_GE(f.udp().src_port(), 0xC000);
  EXPECT_EQ(f.udp().checksum(), 0);
  EXPECT_EQ(f.desc().dest_qp, dest);
}

class RequesterMtu : public Requester, public ::testing::WithParamInterface<ibv_mtu> {};

TEST_P(RequesterMtu, SendIsSegmentedByPathMtu) {
  const ibv_mtu mtu = GetParam();
  const uint32_t m = mtu_bytes(mtu);
  ConnOpts o;
  o.mtu = mtu;
  make(IBV_QPT_RC, 0x1000, o);
  const size_t len = 3 * m + 100;
  Buffer b = p.buffer(len);
  fill_pattern(b.bytes(0, len), m);
  ibv_sge sge = b.sge(0, len);
  post(send_wr(IBV_WR_SEND, 7, {&sge, 1}));

  auto fs = p.wait_frames(4);
  ASSERT_EQ(fs.size(), 4u);
  const uint8_t want_op[] = {op::RC_SEND_FIRST, op::RC_SEND_MIDDLE, op::RC_SEND_MIDDLE, op::RC_SEND_LAST};
  std::vector<uint8_t> got;
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    expect_common(fs[i], peer);
    EXPECT_EQ(fs[i].opcode(), want_op[i]) << fs[i].name();
    EXPECT_EQ(fs[i].psn(), Psn(0x1000 + static_cast<uint32_t>(i)));
    EXPECT_EQ(fs[i].payload().size(), i < 3 ? m : 100u);
    EXPECT_EQ(fs[i].ack_req(), i == 3);  // AckReq on the last packet only
    EXPECT_FALSE(fs[i].desc().se);
    EXPECT_EQ(fs[i].udp().src_port(), fs[0].udp().src_port());  // one flow per QP
    got.insert(got.end(), fs[i].payload().begin(), fs[i].payload().end());
  }
  EXPECT_EQ(first_diff(got, b.bytes(0, len)), -1);
  EXPECT_EQ(p.ctr(RnicCtr::req_pkts), 4u);

  EXPECT_TRUE(p.poll_cq(scq).empty());  // RC: nothing completes before the ACK
  p.inject(p.ack(Qpn(q->qpn()), Psn(0x1003)));
  auto wcs = p.wait_wcs(scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS) << wc_status_name(wcs[0].status);
  EXPECT_EQ(wcs[0].wr_id, 7u);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_SEND);
}

INSTANTIATE_TEST_SUITE_P(Mtus, RequesterMtu,
                         ::testing::Values(IBV_MTU_256, IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096));

TEST_F(Requester, WriteWithImmCarriesRethFirstAndImmLast) {
  make(IBV_QPT_RC, 0x20);
  const size_t len = 2 * 1024 + 10;
  Buffer b = p.buffer(len);
  fill_pattern(b.bytes(0, len), 3);
  ibv_sge sge = b.sge(0, len);
  ibv_send_wr wr = rdma_wr(IBV_WR_RDMA_WRITE_WITH_IMM, 1, {&sge, 1}, kRaddr, kRkey,
                           IBV_SEND_SIGNALED | IBV_SEND_SOLICITED);
  wr.imm_data = htobe32(0x11223344);
  post(wr);
  auto fs = p.wait_frames(3);
  ASSERT_EQ(fs.size(), 3u);
  EXPECT_EQ(fs[0].opcode(), op::RC_WRITE_FIRST);
  EXPECT_EQ(fs[1].opcode(), op::RC_WRITE_MIDDLE);
  EXPECT_EQ(fs[2].opcode(), op::RC_WRITE_LAST_IMM);
  const auto d0 = fs[0].desc();
  EXPECT_EQ(d0.reth_va, kRaddr);
  EXPECT_EQ(d0.reth_rkey, Rkey(kRkey));
  EXPECT_EQ(d0.reth_len, len);  // the whole message (IBA 9.3.3)
  EXPECT_FALSE(fs[1].op().has(wire::kHdrReth));
  EXPECT_EQ(fs[2].desc().imm, 0x11223344u);
  EXPECT_FALSE(fs[0].desc().se);
  EXPECT_TRUE(fs[2].desc().se);  // IBV_SEND_SOLICITED: SE on the last packet
  EXPECT_TRUE(fs[2].ack_req());
  for (auto& f : fs) expect_common(f, peer);
}

TEST_F(Requester, ReadRequestConsumesOnePsnPerResponsePacket) {
  make(IBV_QPT_RC, 0x500);
  const size_t len = 2 * 1024 + 512;
  Buffer dst = p.buffer(len);
  Buffer src = p.buffer(16);
  ibv_sge sge = dst.sge(0, len);
  post(rdma_wr(IBV_WR_RDMA_READ, 1, {&sge, 1}, kRaddr, kRkey));
  ibv_sge s2 = src.sge(0, 16);
  post(send_wr(IBV_WR_SEND, 2, {&s2, 1}));
  auto fs = p.wait_frames(2);
  ASSERT_EQ(fs.size(), 2u);
  EXPECT_EQ(fs[0].opcode(), op::RC_READ_REQUEST);
  EXPECT_EQ(fs[0].psn(), Psn(0x500));
  EXPECT_TRUE(fs[0].ack_req());
  EXPECT_EQ(fs[0].payload().size(), 0u);
  EXPECT_EQ(fs[0].desc().reth_len, len);
  EXPECT_EQ(fs[0].desc().reth_va, kRaddr);
  EXPECT_EQ(fs[1].opcode(), op::RC_SEND_ONLY);
  EXPECT_EQ(fs[1].psn(), Psn(0x503));  // ceil(2560 / 1024) = 3 PSNs for the READ
}

TEST_F(Requester, AtomicsCarryAtomicEth) {
  make(IBV_QPT_RC, 0x10);
  Buffer r = p.buffer(16);
  ibv_sge s0 = r.sge(0, 8), s1 = r.sge(8, 8);
  post(atomic_wr(IBV_WR_ATOMIC_CMP_AND_SWP, 1, &s0, kRaddr, kRkey, 0x1111, 0x2222));
  post(atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 2, &s1, kRaddr + 8, kRkey, 5, 0));
  auto fs = p.wait_frames(2);
  ASSERT_EQ(fs.size(), 2u);
  EXPECT_EQ(fs[0].opcode(), op::RC_COMPARE_SWAP);
  EXPECT_EQ(fs[0].psn(), Psn(0x10));
  auto d = fs[0].desc();
  EXPECT_EQ(d.atomic_va, kRaddr);
  EXPECT_EQ(d.atomic_rkey, Rkey(kRkey));
  EXPECT_EQ(d.atomic_compare, 0x1111u);
  EXPECT_EQ(d.atomic_swap_add, 0x2222u);
  EXPECT_TRUE(fs[0].ack_req());
  EXPECT_EQ(fs[1].opcode(), op::RC_FETCH_ADD);
  EXPECT_EQ(fs[1].psn(), Psn(0x11));
  EXPECT_EQ(fs[1].desc().atomic_swap_add, 5u);
  EXPECT_EQ(fs[1].desc().atomic_va, kRaddr + 8);
}

TEST_F(Requester, AckReqOnLastAndEvery64Packets) {
  p.cc_off();  // the whole window from the start
  ConnOpts o;
  o.mtu = IBV_MTU_256;
  make(IBV_QPT_RC, 0xFFFFF0, o);  // crosses the 24-bit wrap on the way
  const size_t n = 150;
  Buffer b = p.buffer(n * 256);
  ibv_sge sge = b.sge(0, n * 256);
  post(send_wr(IBV_WR_SEND, 1, {&sge, 1}));
  auto fs = p.wait_frames(n);
  ASSERT_EQ(fs.size(), n);
  for (size_t i = 0; i < n; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(fs[i].psn(), Psn(0xFFFFF0) + static_cast<uint32_t>(i));
    EXPECT_EQ(fs[i].ack_req(), i == 63 || i == 127 || i == n - 1);
  }
}

// AckReq on a message's last packet only where an ACK is due: a signaled
// WQE, a READ or atomic, the last WQE the SQ holds.  An unsignaled message
// that another follows at once leaves the ask to that one, so a burst
// costs the responder one ACK, not one per message.
TEST_F(Requester, ABurstOfUnsignaledMessagesAsksOnlyWhereAnAckIsDue) {
  make(IBV_QPT_RC, 0x200);
  Buffer b = p.buffer(64);
  ibv_sge sge = b.sge(0, 64);
  post(send_wr(IBV_WR_SEND, 1, {&sge, 1}, 0));
  post(rdma_wr(IBV_WR_RDMA_WRITE, 2, {&sge, 1}, kRaddr, kRkey, 0));
  post(send_wr(IBV_WR_SEND, 3, {&sge, 1}, IBV_SEND_SIGNALED));
  post(send_wr(IBV_WR_SEND, 4, {&sge, 1}, 0));
  post(rdma_wr(IBV_WR_RDMA_READ, 5, {&sge, 1}, kRaddr, kRkey, 0));
  post(send_wr(IBV_WR_SEND, 6, {&sge, 1}, 0));
  post(send_wr(IBV_WR_SEND, 7, {&sge, 1}, 0));  // the SQ's last
  auto fs = p.wait_frames(7);
  ASSERT_EQ(fs.size(), 7u);
  const bool want[] = {false, false, true, false, true, false, true};
  for (size_t i = 0; i < 7; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(fs[i].psn(), Psn(0x200 + static_cast<uint32_t>(i)));
    EXPECT_EQ(fs[i].ack_req(), want[i]) << fs[i].name();
  }
  // Posted one at a time, each is the SQ's last when it goes: each asks.
  for (uint64_t id = 8; id < 11; ++id) {
    post(send_wr(IBV_WR_SEND, id, {&sge, 1}, 0));
    auto one = p.wait_frames(1);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_TRUE(one[0].ack_req()) << "WQE " << id;
  }
}

TEST_F(Requester, InlineSendTakesTheBytesAtPostTime) {
  make(IBV_QPT_RC, 0x40);
  uint8_t bytes[40];
  for (uint8_t i = 0; i < 40; ++i) bytes[i] = i;
  ibv_sge sge{reinterpret_cast<uint64_t>(bytes), 40, 0};  // inline: no L_Key needed
  post(send_wr(IBV_WR_SEND, 1, {&sge, 1}, IBV_SEND_SIGNALED | IBV_SEND_INLINE));
  std::memset(bytes, 0xEE, sizeof bytes);
  auto fs = p.wait_frames(1);
  ASSERT_EQ(fs.size(), 1u);
  EXPECT_EQ(fs[0].opcode(), op::RC_SEND_ONLY);
  ASSERT_EQ(fs[0].payload().size(), 40u);
  for (uint8_t i = 0; i < 40; ++i) EXPECT_EQ(fs[0].payload()[i], i);
}

TEST_F(Requester, UcWriteCompletesWhenSentWithoutAckReq) {
  make(IBV_QPT_UC, 0x77);
  const size_t len = 1500;
  Buffer b = p.buffer(len);
  ibv_sge sge = b.sge(0, len);
  post(rdma_wr(IBV_WR_RDMA_WRITE, 9, {&sge, 1}, kRaddr, kRkey));
  auto fs = p.wait_frames(2);
  ASSERT_EQ(fs.size(), 2u);
  EXPECT_EQ(fs[0].opcode(), op::UC_WRITE_FIRST);
  EXPECT_EQ(fs[1].opcode(), op::UC_WRITE_LAST);
  EXPECT_FALSE(fs[0].ack_req());
  EXPECT_FALSE(fs[1].ack_req());
  EXPECT_EQ(fs[1].psn(), Psn(0x78));
  auto wcs = p.wait_wcs(scq, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].wr_id, 9u);
}

TEST_F(Requester, UdSendCarriesDethAndQkeyRule) {
  make(IBV_QPT_UD, 0x33);
  Ah* ah = p.ah();
  ASSERT_NE(ah, nullptr);
  Buffer b = p.buffer(100);
  fill_pattern(b.bytes(0, 100), 9);
  ibv_sge sge = b.sge(0, 100);
  ibv_send_wr wr = send_wr(IBV_WR_SEND_WITH_IMM, 1, {&sge, 1});
  wr.imm_data = htobe32(0xCAFE);
  wr.wr.ud.ah = reinterpret_cast<ibv_ah*>(ah);
  wr.wr.ud.remote_qpn = 0x4242;
  wr.wr.ud.remote_qkey = 0x1234;
  post(wr);
  wr.wr_id = 2;
  wr.opcode = IBV_WR_SEND;
  wr.wr.ud.remote_qkey = 0x80000000;  // high bit: the QP's own Q_Key (C10-15)
  post(wr);
  auto fs = p.wait_frames(2);
  ASSERT_EQ(fs.size(), 2u);
  EXPECT_EQ(fs[0].opcode(), op::UD_SEND_ONLY_IMM);
  EXPECT_EQ(fs[1].opcode(), op::UD_SEND_ONLY);
  for (auto& f : fs) {
    expect_common(f, Qpn(0x4242));
    EXPECT_FALSE(f.ack_req());
    EXPECT_EQ(f.desc().deth_src_qp, q->qpn());
    EXPECT_EQ(f.payload().size(), 100u);
  }
  EXPECT_EQ(fs[0].desc().deth_qkey, Qkey(0x1234));
  EXPECT_EQ(fs[1].desc().deth_qkey, Qkey(kUdQkey));
  EXPECT_EQ(fs[0].desc().imm, 0xCAFEu);
  EXPECT_EQ(fs[1].psn(), fs[0].psn() + 1);
  EXPECT_EQ(first_diff(fs[0].payload(), b.bytes(0, 100)), -1);
  auto wcs = p.wait_wcs(scq, 2);  // UD: done once sent
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[1].wr_id, 2u);
}

TEST_F(Requester, BadLkeyFailsWithLocalProtectionError) {
  make(IBV_QPT_RC, 0x90);
  Buffer b = p.buffer(64);
  ibv_sge bad = b.sge(0, 64);
  bad.lkey ^= 0x5A5A00;  // no such key
  ibv_sge good = b.sge(0, 64);
  post(send_wr(IBV_WR_SEND, 1, {&bad, 1}));
  post(send_wr(IBV_WR_SEND, 2, {&good, 1}));
  auto wcs = p.wait_wcs(scq, 2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR) << wc_status_name(wcs[0].status);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR) << wc_status_name(wcs[1].status);
  EXPECT_EQ(q->state(), IBV_QPS_ERR);
  EXPECT_TRUE(p.take().empty());

  // A READ into memory without local write goes out (its buffer is written
  // only when the response comes, as on an RNIC), and its response then
  // fails with the local protection error, the memory unwritten.
  make(IBV_QPT_RC, 0x90);
  Buffer ro = p.buffer(64, 0);
  ibv_sge s = ro.sge(0, 64);
  post(rdma_wr(IBV_WR_RDMA_READ, 3, {&s, 1}, kRaddr, kRkey));
  auto req = p.wait_frames(1);
  ASSERT_EQ(req.size(), 1u);
  EXPECT_EQ(req[0].opcode(), wire::op::RC_READ_REQUEST);
  const std::vector<uint8_t> data(64, 0x77);
  p.inject(p.read_resp(wire::op::RC_READ_RESPONSE_ONLY, Qpn(q->qpn()), Psn(0x90), data));
  auto w2 = p.wait_wcs(scq, 1);
  ASSERT_EQ(w2.size(), 1u);
  EXPECT_EQ(w2[0].status, IBV_WC_LOC_PROT_ERR) << wc_status_name(w2[0].status);
  EXPECT_EQ(ro.data()[0], 0) << "nothing written";
}

TEST_F(Requester, SqdStopsAtAMessageBoundary) {
  make(IBV_QPT_UC, 0x10);
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_SQD;
  ASSERT_EQ(q->modify(at, IBV_QP_STATE), 0);
  Buffer b = p.buffer(64);
  ibv_sge sge = b.sge(0, 64);
  post(send_wr(IBV_WR_SEND, 1, {&sge, 1}));
  p.run_for(std::chrono::milliseconds(2));
  EXPECT_TRUE(p.take().empty());  // queued, not started
  at.qp_state = IBV_QPS_RTS;
  ASSERT_EQ(q->modify(at, IBV_QP_STATE), 0);
  EXPECT_EQ(p.wait_frames(1).size(), 1u);
}

TEST(Timers, AckTimeoutAndRnrTables) {
  EXPECT_EQ(transport::params::ack_timeout_ns(0), 0u);  // infinite
  EXPECT_EQ(transport::params::ack_timeout_ns(1), 8192u);
  EXPECT_EQ(transport::params::ack_timeout_ns(10), 4096u << 10);
  EXPECT_EQ(transport::params::rnr_timer_ns(0), 655'360'000u);
  EXPECT_EQ(transport::params::rnr_timer_ns(1), 10'000u);
  EXPECT_EQ(transport::params::rnr_timer_ns(14), 1'280'000u);
  EXPECT_EQ(transport::params::rnr_timer_ns(25), 61'440'000u);
  EXPECT_EQ(transport::params::rnr_timer_ns(31), 491'520'000u);
}

}  // namespace
}  // namespace uroce::rnic::testing

namespace uroce::rnic::testing {
namespace {

// A figure, not a check (run with --gtest_also_run_disabled_tests): RC
// WRITE goodput between two engines on the sim wire, one thread polling
// both, and the requester's share of the packets.
TEST(RequesterFigure, DISABLED_RcWriteGoodput) {
  Harness h;
  ConnOpts o;
  o.mtu = IBV_MTU_4096;
  Pair pr = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(pr.qa, nullptr);
  constexpr size_t kMsg = 1 << 20;
  constexpr int kMsgs = 256;
  Buffer src = h.buffer(h.a(), kMsg, IBV_ACCESS_LOCAL_WRITE);
  Buffer dst = h.buffer(h.b(), kMsg, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  const auto t0 = Clock::now();
  int posted = 0, done = 0;
  while (done < kMsgs) {
    while (posted < kMsgs && posted - done < 8) {
      ibv_sge s = src.sge(0, kMsg);
      ibv_send_wr wr = rdma_wr(IBV_WR_RDMA_WRITE, static_cast<uint64_t>(posted), {&s, 1}, dst.addr(), dst.rkey());
      ASSERT_EQ(post_send(pr.qa, wr), 0);
      ++posted;
    }
    for (const ibv_wc& wc : h.poll_cq(pr.scq_a)) {
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
      ++done;
    }
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::printf("RC WRITE 1 MiB x %d, MTU 4096: %.2f Gbit/s goodput, %.0f us per MiB\n", kMsgs,
              kMsgs * kMsg * 8 / s / 1e9, s / kMsgs * 1e6);
  std::printf("req_pkts %lu retrans %lu\n", static_cast<unsigned long>(h.a().rnic->counters().get(RnicCtr::req_pkts)),
              static_cast<unsigned long>(h.a().rnic->counters().get(RnicCtr::req_retrans_pkts)));
}

}  // namespace
}  // namespace uroce::rnic::testing
