// The responder driven by hand-made request packets (suite 'protocol'):
// SEND, the PSN rules, READ, atomics, the access table, WRITE, UC, SRQ,
// UD, congestion control.  The fixture and how it drives the device:
// responder_fixture.hpp; selective repeat and spraying: reorder_test.cpp.
#include "tests/rnic/responder_fixture.hpp"

namespace uroce::rnic::testing {
namespace {

using namespace responder_fixture;  // the fixture's own names

// ---- SEND --------------------------------------------------------------------------------------

TEST_F(Responder, SendScattersIntoSeveralSges) {
  ConnOpts o;
  o.mtu = IBV_MTU_256;
  Qp* q = make_qp(IBV_QPT_RC, o);
  ASSERT_NE(q, nullptr);
  Buffer buf = buffer(4096, IBV_ACCESS_LOCAL_WRITE, 0xEE);
  // Three SGEs out of order in the buffer: 100 + 60 + 1000 bytes.
  const ibv_sge sges[] = {buf.sge(2000, 100), buf.sge(100, 60), buf.sge(3000, 1000)};
  ASSERT_EQ(post_recv(q, 7, sges), 0);

  const auto msg = pattern(600, 1);  // FIRST 256, MIDDLE 256, LAST_IMM 88
  const std::vector<uint8_t> p0(msg.begin(), msg.begin() + 256), p1(msg.begin() + 256, msg.begin() + 512),
      p2(msg.begin() + 512, msg.end());
  inject(send(q, op::RC_SEND_FIRST, kRqPsn, p0));
  inject(send(q, op::RC_SEND_MIDDLE, kRqPsn + 1, p1));
  EXPECT_TRUE(responses().empty()) << "no AckReq: the ACK is coalesced";
  auto last = send(q, op::RC_SEND_LAST_IMM, kRqPsn + 2, p2, true);
  last.imm = 0xCAFEF00D;
  last.se = true;
  inject(last);
  expect_ack(kAckUnlimited, kRqPsn + 2, 1);

  EXPECT_EQ(first_diff(buf.bytes(2000, 100), {msg.data(), 100}), -1);
  EXPECT_EQ(first_diff(buf.bytes(100, 60), {msg.data() + 100, 60}), -1);
  EXPECT_EQ(first_diff(buf.bytes(3000, 440), {msg.data() + 160, 440}), -1);
  EXPECT_EQ(buf.data()[3440], 0xEE) << "written past the message";
  EXPECT_EQ(buf.data()[2100], 0xEE);

  auto wcs = cqes();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].wr_id, 7u);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(wcs[0].byte_len, 600u);
  EXPECT_EQ(wcs[0].qp_num, q->qpn().value());
  EXPECT_EQ(wcs[0].src_qp, kPeerQpn);
  EXPECT_TRUE(wcs[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(be32toh(wcs[0].imm_data), 0xCAFEF00Du);
}

// SEND with Invalidate naming an MR: the data lands, but an MR from
// ibv_reg_mr cannot be invalidated remotely (rxe_invalidate_mr refuses it;
// only type 2 memory windows can, e2e_mw_test.cpp): the
// receive completes with REM_INV_REQ_ERR, the QP goes to ERR with no NAK
// (IBA 9.9.6.3 class J: the requester hears nothing), and a registered MR
// named by the IETH stays valid.
TEST_F(Responder, SendWithInvalidateOfARegisteredMrIsRefused) {
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  Buffer buf = buffer(256, IBV_ACCESS_LOCAL_WRITE);
  Buffer target = buffer(64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  const ibv_sge sge = buf.sge(0, 256);
  ASSERT_EQ(post_recv(q, 1, {&sge, 1}), 0);
  auto d = send(q, op::RC_SEND_ONLY_INV, kRqPsn, pattern(32, 2), true);
  d.ieth_rkey = Rkey(target.rkey());
  inject(d);
  EXPECT_TRUE(responses().empty()) << "class J: no NAK";
  auto wcs = cqes();
  ASSERT_GE(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_INV_REQ_ERR) << wc_status_name(wcs[0].status);
  EXPECT_EQ(q->state(), IBV_QPS_ERR);
  EXPECT_EQ(ctr(RnicCtr::inv_rkey_refused), 1u);
  EXPECT_EQ(ctr(RnicCtr::rem_inv_req_naks), 0u);
  KeyCheck why{};
  EXPECT_NE(test::in_loop(rnic().engine(), [&] { return rnic().check_rkey(Rkey(target.rkey()), target.addr(), 64, IBV_ACCESS_REMOTE_WRITE, pd_, &why); }), nullptr)
      << "the MR must stay valid";
}

// A key that names nothing: refused the same way (rxe: "No MR for key").
TEST_F(Responder, SendWithInvalidateOfAnUnknownKeyIsRefused) {
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  Buffer buf = buffer(256, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge sge = buf.sge(0, 256);
  ASSERT_EQ(post_recv(q, 1, {&sge, 1}), 0);
  auto d = send(q, op::RC_SEND_ONLY_INV, kRqPsn, pattern(32, 2), true);
  d.ieth_rkey = Rkey(0x1234);
  inject(d);
  EXPECT_TRUE(responses().empty()) << "class J: no NAK";
  auto wcs = cqes();
  ASSERT_GE(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_REM_INV_REQ_ERR) << wc_status_name(wcs[0].status);
  EXPECT_EQ(q->state(), IBV_QPS_ERR);
}

TEST_F(Responder, RnrNakCarriesTheTimerThenSucceeds) {
  ConnOpts o;
  o.min_rnr_timer = 14;
  Qp* q = make_qp(IBV_QPT_RC, o);
  ASSERT_NE(q, nullptr);
  const auto data = pattern(100, 3);
  inject(send(q, op::RC_SEND_ONLY, kRqPsn, data, true));
  expect_ack(wire::make_syndrome(AckType::RnrNak, 14), kRqPsn, 0);
  EXPECT_EQ(ctr(RnicCtr::rnr_naks_sent), 1u);
  EXPECT_TRUE(cqes().empty());

  Buffer buf = buffer(128, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge sge = buf.sge(0, 128);
  ASSERT_EQ(post_recv(q, 9, {&sge, 1}), 0);
  inject(send(q, op::RC_SEND_ONLY, kRqPsn, data, true));  // the retry: same PSN
  expect_ack(kAckUnlimited, kRqPsn, 1);
  auto wcs = cqes();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 9u);
  EXPECT_EQ(first_diff(buf.bytes(0, 100), data), -1);
  EXPECT_EQ(q->state(), IBV_QPS_RTS);
}

TEST_F(Responder, SendLongerThanTheReceiveIsLocalLengthError) {
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  Buffer buf = buffer(64, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge sge = buf.sge(0, 64);
  ASSERT_EQ(post_recv(q, 1, {&sge, 1}), 0);
  inject(send(q, op::RC_SEND_ONLY, kRqPsn, pattern(65, 4), true));
  expect_ack(nak(NakCode::InvalidRequest), kRqPsn);
  auto wcs = cqes();
  ASSERT_GE(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(q->state(), IBV_QPS_ERR);
}

TEST_F(Responder, ReceiveSgeWithoutLocalWriteIsProtectionError) {
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  Buffer buf = buffer(64, IBV_ACCESS_REMOTE_READ);  // no LOCAL_WRITE
  const ibv_sge sge = buf.sge(0, 64);
  ASSERT_EQ(post_recv(q, 1, {&sge, 1}), 0);
  inject(send(q, op::RC_SEND_ONLY, kRqPsn, pattern(16, 5), true));
  expect_ack(nak(NakCode::RemoteOperationalError), kRqPsn);
  auto wcs = cqes();
  ASSERT_GE(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(q->state(), IBV_QPS_ERR);
}

// ---- PSN rules ---------------------------------------------------------------------------------

TEST_F(Responder, PsnSequenceNakOncePerGap) {
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  Buffer mem = buffer(64, kRemoteAll);
  auto w = [&](uint32_t psn) {
    return write(q, op::RC_WRITE_ONLY, psn, mem.addr(), mem.rkey(), 4, {1, 2, 3, 4}, true);
  };
  inject(w(kRqPsn + 2));
  inject(w(kRqPsn + 3));
  inject(w(kRqPsn + 4));
  expect_ack(nak(NakCode::PsnSequenceError), kRqPsn, 0);
  EXPECT_EQ(ctr(RnicCtr::seq_naks_sent), 1u);
  EXPECT_EQ(ctr(RnicCtr::drop_psn_out_of_seq), 3u);

  inject(w(kRqPsn));  // the expected PSN: executed, the gap is over
  expect_ack(kAckUnlimited, kRqPsn, 1);
  inject(w(kRqPsn + 5));  // a new gap: a new NAK
  inject(w(kRqPsn + 6));
  expect_ack(nak(NakCode::PsnSequenceError), kRqPsn + 1, 1);
  EXPECT_EQ(ctr(RnicCtr::seq_naks_sent), 2u);
  EXPECT_EQ(q->state(), IBV_QPS_RTS);
}

TEST_F(Responder, PsnWrapsAt24Bits) {
  Qp* q = make_qp(IBV_QPT_RC, {}, 0xFFFFFE);
  ASSERT_NE(q, nullptr);
  Buffer mem = buffer(64, kRemoteAll);
  for (uint32_t i = 0; i < 3; ++i) {
    const uint32_t psn = (0xFFFFFE + i) & Psn::kMask;
    inject(write(q, op::RC_WRITE_ONLY, psn, mem.addr(i * 8), mem.rkey(), 8, std::vector<uint8_t>(8, uint8_t(i + 1)),
                 true));
    expect_ack(kAckUnlimited, psn, static_cast<int>(i + 1));
  }
  EXPECT_EQ(mem.data()[16], 3);
  // 0xFFFFFF is now behind the expected PSN 1: a duplicate, re-ACKed at 0.
  inject(write(q, op::RC_WRITE_ONLY, 0xFFFFFF, mem.addr(8), mem.rkey(), 8, std::vector<uint8_t>(8, 0x55), true));
  expect_ack(kAckUnlimited, 0, 3);
  EXPECT_EQ(mem.data()[8], 2) << "a duplicate WRITE was executed again";
  EXPECT_EQ(ctr(RnicCtr::dup_requests), 1u);
}

TEST_F(Responder, DuplicateSendIsReAckedWithoutASecondCqe) {
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  Buffer buf = buffer(256, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge s1 = buf.sge(0, 128), s2 = buf.sge(128, 128);
  ASSERT_EQ(post_recv(q, 1, {&s1, 1}), 0);
  ASSERT_EQ(post_recv(q, 2, {&s2, 1}), 0);
  const auto a = pattern(50, 6), b = pattern(60, 7);
  inject(send(q, op::RC_SEND_ONLY, kRqPsn, a, true));
  expect_ack(kAckUnlimited, kRqPsn, 1);
  inject(send(q, op::RC_SEND_ONLY, kRqPsn, b, true));  // a duplicate (its bytes differ on purpose)
  expect_ack(kAckUnlimited, kRqPsn, 1);
  EXPECT_EQ(ctr(RnicCtr::dup_requests), 1u);
  auto wcs = cqes();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(first_diff(buf.bytes(0, 50), a), -1);
  EXPECT_EQ(buf.data()[128], 0) << "the duplicate consumed a receive";

  inject(send(q, op::RC_SEND_ONLY, kRqPsn + 1, b, true));
  expect_ack(kAckUnlimited, kRqPsn + 1, 2);
  wcs = cqes();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 2u);
  EXPECT_EQ(first_diff(buf.bytes(128, 60), b), -1);
}

TEST_F(Responder, OpcodeOutOfSequenceIsInvalidRequest) {
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  Buffer buf = buffer(256, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge s = buf.sge(0, 256);
  ASSERT_EQ(post_recv(q, 1, {&s, 1}), 0);
  inject(send(q, op::RC_SEND_MIDDLE, kRqPsn, pattern(1024, 8)));
  expect_ack(nak(NakCode::InvalidRequest), kRqPsn);
  EXPECT_EQ(ctr(RnicCtr::rem_inv_req_naks), 1u);
  EXPECT_EQ(q->state(), IBV_QPS_ERR);
  auto wcs = cqes();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_WR_FLUSH_ERR);
}

// ---- READ --------------------------------------------------------------------------------------

TEST_F(Responder, ReadIsSegmentedByMtuAndReexecutedWhenDuplicated) {
  ConnOpts o;
  o.mtu = IBV_MTU_256;
  Qp* q = make_qp(IBV_QPT_RC, o);
  ASSERT_NE(q, nullptr);
  Buffer mem = buffer(1000, kRemoteAll);
  const auto v1 = pattern(1000, 9);
  std::memcpy(mem.data(), v1.data(), 1000);

  auto check = [&](const std::vector<Resp>& rs, uint32_t psn0, std::vector<uint8_t> ops, size_t off,
                   const std::vector<uint8_t>& want) {
    ASSERT_EQ(rs.size(), ops.size());
    std::vector<uint8_t> got;
    for (size_t i = 0; i < rs.size(); ++i) {
      EXPECT_EQ(rs[i].opcode(), ops[i]) << i;
      EXPECT_EQ(rs[i].psn(), (psn0 + i) & Psn::kMask);
      if (rs[i].has_aeth()) {
        EXPECT_EQ(rs[i].syndrome(), kAckUnlimited);
        EXPECT_EQ(rs[i].msn(), 1u);
      }
      auto p = rs[i].payload();
      got.insert(got.end(), p.begin(), p.end());
    }
    EXPECT_EQ(first_diff(got, {want.data() + off, want.size() - off}), -1);
    EXPECT_EQ(got.size(), want.size() - off);
  };
  const std::vector<uint8_t> full = {op::RC_READ_RESPONSE_FIRST, op::RC_READ_RESPONSE_MIDDLE,
                                     op::RC_READ_RESPONSE_MIDDLE, op::RC_READ_RESPONSE_LAST};
  inject(read(q, kRqPsn, mem.addr(), mem.rkey(), 1000));
  check(responses(), kRqPsn, full, 0, v1);

  // Executed again, not replayed: the memory changed in between.
  const auto v2 = pattern(1000, 10);
  std::memcpy(mem.data(), v2.data(), 1000);
  inject(read(q, kRqPsn, mem.addr(), mem.rkey(), 1000));
  check(responses(), kRqPsn, full, 0, v2);

  // From the middle: the requester asks again for what it lacks from PSN+2.
  inject(read(q, kRqPsn + 2, mem.addr(512), mem.rkey(), 488));
  check(responses(), kRqPsn + 2, {op::RC_READ_RESPONSE_MIDDLE, op::RC_READ_RESPONSE_LAST}, 512, v2);
  EXPECT_EQ(ctr(RnicCtr::dup_requests), 2u);

  // The expected PSN moved past the response: the next request is PSN+4.
  Buffer rbuf = buffer(64, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge s = rbuf.sge(0, 64);
  ASSERT_EQ(post_recv(q, 1, {&s, 1}), 0);
  inject(send(q, op::RC_SEND_ONLY, kRqPsn + 4, pattern(8, 11), true));
  expect_ack(kAckUnlimited, kRqPsn + 4, 2);
}

TEST_F(Responder, LongReadStreamsInOrderAndLaterRequestsWait) {
  Qp* q = make_qp(IBV_QPT_RC);  // MTU 1024
  constexpr uint32_t kLen = 4 << 20, kPkts = kLen / 1024;
  Buffer mem = buffer(kLen + 64, kRemoteAll);
  const auto data = pattern(kLen, 22);
  std::memcpy(mem.data(), data.data(), kLen);
  inject(read(q, kRqPsn, mem.addr(), mem.rkey(), kLen));
  // Arrives while the response streams: answered after its last packet.
  inject(write(q, op::RC_WRITE_ONLY, kRqPsn + kPkts, mem.addr(kLen), mem.rkey(), 4, {1, 2, 3, 4}, true));
  auto rs = responses();
  ASSERT_EQ(rs.size(), kPkts + 1);
  std::vector<uint8_t> got;
  got.reserve(kLen);
  for (uint32_t i = 0; i < kPkts; ++i) {
    ASSERT_EQ(rs[i].psn(), (kRqPsn + i) & Psn::kMask);
    ASSERT_EQ(rs[i].pi.op().op, wire::Operation::ReadResponse);
    auto p = rs[i].payload();
    got.insert(got.end(), p.begin(), p.end());
  }
  EXPECT_EQ(rs.front().opcode(), op::RC_READ_RESPONSE_FIRST);
  EXPECT_EQ(rs[kPkts - 1].opcode(), op::RC_READ_RESPONSE_LAST);
  EXPECT_EQ(first_diff(got, data), -1);
  EXPECT_EQ(rs[kPkts].opcode(), op::RC_ACK);
  EXPECT_EQ(rs[kPkts].psn(), kRqPsn + kPkts);
  EXPECT_EQ(rs[kPkts].msn(), 2u);
  EXPECT_EQ(mem.data()[kLen + 3], 4);
  EXPECT_EQ(ctr(RnicCtr::drop_resp_backlog), 0u);
}

// After a loss the requester goes back (go-back-N) and asks again from the
// first response it lacks: that duplicate READ must not wait behind the
// response still streaming and the requests queued after it, which the
// requester would discard (it takes responses in PSN order) and asks for
// again anyway.  The stream is cut short, the queue dropped, the
// duplicate answered at once (9.7.5.1.4); the dropped request is served
// when it comes again.
TEST_F(Responder, DuplicateReadCutsTheStreamInProgressShort) {
  Qp* q = make_qp(IBV_QPT_RC);  // MTU 1024
  constexpr uint32_t kLen = 4 << 20, kPkts = kLen / 1024, kFrom = 10;
  Buffer mem = buffer(kLen + 64, kRemoteAll);
  const auto data = pattern(kLen, 23);
  std::memcpy(mem.data(), data.data(), kLen);
  inject(read(q, kRqPsn, mem.addr(), mem.rkey(), kLen));
  // Queued behind the stream; then the requester goes back to PSN + kFrom.
  inject(read(q, kRqPsn + kPkts, mem.addr(), mem.rkey(), 64));
  inject(read(q, kRqPsn + kFrom, mem.addr(kFrom * 1024), mem.rkey(), kLen - kFrom * 1024));
  auto rs = responses();
  EXPECT_EQ(ctr(RnicCtr::resp_read_restarts), 1u);
  // The first stream's packets in order up to where it was cut, then the
  // duplicate's, from PSN + kFrom to the end; nothing for the dropped READ.
  ASSERT_GT(rs.size(), kPkts - kFrom);
  const size_t cut = rs.size() - (kPkts - kFrom);
  ASSERT_GT(cut, kFrom) << "the first stream had sent past the duplicate's PSN";
  ASSERT_LT(cut, size_t{kPkts}) << "the first stream ran to its end";
  for (size_t i = 0; i < cut; ++i) ASSERT_EQ(rs[i].psn(), (kRqPsn + i) & Psn::kMask) << i;
  std::vector<uint8_t> got;
  for (size_t i = cut; i < rs.size(); ++i) {
    ASSERT_EQ(rs[i].psn(), (kRqPsn + kFrom + (i - cut)) & Psn::kMask) << i;
    ASSERT_EQ(rs[i].pi.op().op, wire::Operation::ReadResponse) << i;
    auto p = rs[i].payload();
    got.insert(got.end(), p.begin(), p.end());
  }
  EXPECT_EQ(rs[cut].opcode(), op::RC_READ_RESPONSE_MIDDLE);  // a replay from inside the message
  EXPECT_EQ(rs.back().opcode(), op::RC_READ_RESPONSE_LAST);
  EXPECT_EQ(first_diff(got, {data.data() + kFrom * 1024, kLen - kFrom * 1024}), -1);
  // The dropped request, sent again, is answered as new.
  inject(read(q, kRqPsn + kPkts, mem.addr(), mem.rkey(), 64));
  rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].opcode(), op::RC_READ_RESPONSE_ONLY);
  EXPECT_EQ(rs[0].psn(), (kRqPsn + kPkts) & Psn::kMask);
  EXPECT_EQ(ctr(RnicCtr::drop_resp_backlog), 0u);
}

// The requester's go-back-N sends again every request after the one it
// went back to; the duplicates of later READs (executed before) must wait
// behind the replay the first duplicate started, not cut it short in turn.
TEST_F(Responder, LaterDuplicateReadWaitsBehindTheReplay) {
  Qp* q = make_qp(IBV_QPT_RC);  // MTU 1024
  constexpr uint32_t kLen = 1 << 20, kPkts = kLen / 1024, kFrom = 10;
  Buffer mem = buffer(kLen, kRemoteAll);
  const auto data = pattern(kLen, 24);
  std::memcpy(mem.data(), data.data(), kLen);
  const uint32_t a = kRqPsn, b = kRqPsn + kPkts;
  inject(read(q, a, mem.addr(), mem.rkey(), kLen));
  ASSERT_EQ(responses().size(), kPkts);  // A answered in full
  inject(read(q, b, mem.addr(), mem.rkey(), kLen));  // B streams
  // The requester lost A's PSN a + kFrom: it asks again from there, then
  // sends B again.
  inject(read(q, a + kFrom, mem.addr(kFrom * 1024), mem.rkey(), kLen - kFrom * 1024));
  inject(read(q, b, mem.addr(), mem.rkey(), kLen));
  auto rs = responses();
  EXPECT_EQ(ctr(RnicCtr::resp_read_restarts), 1u) << "only A's duplicate cuts a stream short";
  // B's first stream up to where A's duplicate cut it, then A from a + kFrom
  // to its end, then B again in full.
  size_t i = 0;
  while (i < rs.size() && distance(Psn(rs[i].psn()), Psn(b)) >= 0) ++i;
  const size_t cut = i;
  ASSERT_GT(cut, 0u);
  ASSERT_LT(cut, size_t{kPkts});
  ASSERT_EQ(rs.size(), cut + (kPkts - kFrom) + kPkts);
  for (uint32_t k = 0; k < kPkts - kFrom; ++k) ASSERT_EQ(rs[cut + k].psn(), (a + kFrom + k) & Psn::kMask) << k;
  std::vector<uint8_t> got;
  for (uint32_t k = 0; k < kPkts; ++k) {
    const Resp& r = rs[cut + (kPkts - kFrom) + k];
    ASSERT_EQ(r.psn(), (b + k) & Psn::kMask) << k;
    auto p = r.payload();
    got.insert(got.end(), p.begin(), p.end());
  }
  EXPECT_EQ(first_diff(got, data), -1);
}

TEST_F(Responder, ZeroLengthReadIsOneEmptyResponse) {
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  inject(read(q, kRqPsn, 0, 0xDEAD, 0));  // no key needed (IBA 9.4.5)
  auto rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].opcode(), op::RC_READ_RESPONSE_ONLY);
  EXPECT_EQ(rs[0].psn(), kRqPsn);
  EXPECT_EQ(rs[0].pi.payload_len, 0u);
  EXPECT_EQ(rs[0].msn(), 1u);
  Buffer mem = buffer(64, kRemoteAll);
  inject(write(q, op::RC_WRITE_ONLY, kRqPsn + 1, mem.addr(), mem.rkey(), 4, {9, 9, 9, 9}, true));
  expect_ack(kAckUnlimited, kRqPsn + 1, 2);
}

TEST_F(Responder, ReadWithoutResponderResourcesIsInvalidRequest) {
  ConnOpts o;
  o.max_dest_rd_atomic = 0;
  Qp* q = make_qp(IBV_QPT_RC, o);
  ASSERT_NE(q, nullptr);
  Buffer mem = buffer(64, kRemoteAll);
  inject(read(q, kRqPsn, mem.addr(), mem.rkey(), 8));
  expect_ack(nak(NakCode::InvalidRequest), kRqPsn);
}

// ---- atomics -----------------------------------------------------------------------------------

TEST_F(Responder, DuplicateAtomicIsReplayedNotReexecuted) {
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  Buffer mem = buffer(64, kRemoteAll);
  uint64_t* word = reinterpret_cast<uint64_t*>(mem.data() + 8);
  *word = 10;
  inject(atomic(q, op::RC_FETCH_ADD, kRqPsn, mem.addr(8), mem.rkey(), 5));
  auto rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].opcode(), op::RC_ATOMIC_ACK);
  EXPECT_EQ(rs[0].orig(), 10u);
  EXPECT_EQ(rs[0].msn(), 1u);
  EXPECT_EQ(*word, 15u);

  inject(atomic(q, op::RC_FETCH_ADD, kRqPsn, mem.addr(8), mem.rkey(), 5));
  rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].opcode(), op::RC_ATOMIC_ACK);
  EXPECT_EQ(rs[0].orig(), 10u) << "the duplicate was not answered from the cache";
  EXPECT_EQ(*word, 15u) << "the duplicate was executed again";

  inject(atomic(q, op::RC_COMPARE_SWAP, kRqPsn + 1, mem.addr(8), mem.rkey(), 99, 15));
  rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].orig(), 15u);
  EXPECT_EQ(*word, 99u);
  inject(atomic(q, op::RC_COMPARE_SWAP, kRqPsn + 1, mem.addr(8), mem.rkey(), 99, 15));
  rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].orig(), 15u);
  EXPECT_EQ(*word, 99u);

  // A duplicate whose result is unknown (never executed here) is dropped.
  inject(atomic(q, op::RC_FETCH_ADD, kRqPsn - 5, mem.addr(8), mem.rkey(), 1));
  EXPECT_TRUE(responses().empty());
  EXPECT_EQ(ctr(RnicCtr::drop_dup_unknown), 1u);
  EXPECT_EQ(*word, 99u);
}

TEST_F(Responder, MisalignedAtomicIsInvalidRequest) {
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  Buffer mem = buffer(64, kRemoteAll, 0x11);
  inject(atomic(q, op::RC_FETCH_ADD, kRqPsn, mem.addr(4), mem.rkey(), 1));
  expect_ack(nak(NakCode::InvalidRequest), kRqPsn);
  EXPECT_EQ(q->state(), IBV_QPS_ERR);
  EXPECT_EQ(std::count(mem.data(), mem.data() + 64, 0x11), 64);
}

// ---- the access table --------------------------------------------------------------------------

TEST_F(Responder, RemoteAccessViolationsAreNakedAndTouchNothing) {
  constexpr size_t kLen = 256;
  int err = 0;
  Pd* other_pd = rnic().alloc_pd(&err);
  ASSERT_NE(other_pd, nullptr);
  auto other_mem = std::make_unique<uint64_t[]>(kLen / 8);
  Mr* other_mr = rnic().reg_mr(other_pd, other_mem.get(), kLen, reinterpret_cast<uint64_t>(other_mem.get()),
                               kRemoteAll, &err);
  ASSERT_NE(other_mr, nullptr);

  Buffer full = buffer(kLen, kRemoteAll, 0x5A);
  Buffer ro = buffer(kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, 0x5A);
  Buffer wo = buffer(kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0x5A);
  Buffer gone = buffer(kLen, kRemoteAll, 0x5A);
  const uint32_t gone_rkey = gone.rkey();
  ASSERT_EQ(rnic().dereg_mr(gone.mr), 0);

  enum Kind { kRead, kWrite, kAtomic };
  struct Case {
    const char* what;
    Kind kind;
    uint64_t va;
    uint32_t rkey;
    uint32_t len;
  };
  const uint32_t bad = full.rkey() ^ 0x00ABCD00;
  const Case cases[] = {
      {"read: bad rkey", kRead, full.addr(), bad, 16},
      {"read: offset past the end", kRead, full.addr(kLen), full.rkey(), 8},
      {"read: length past the end", kRead, full.addr(8), full.rkey(), kLen},
      {"read: va wraps 2^64", kRead, ~uint64_t{0} - 7, full.rkey(), 64},
      {"read: va below the MR", kRead, full.addr() - 8, full.rkey(), 16},
      {"read: no REMOTE_READ", kRead, wo.addr(), wo.rkey(), 16},
      {"read: deregistered", kRead, gone.addr(), gone_rkey, 16},
      {"read: another PD", kRead, reinterpret_cast<uint64_t>(other_mem.get()), other_mr->rkey.value(), 16},
      {"write: bad rkey", kWrite, full.addr(), bad, 16},
      {"write: offset past the end", kWrite, full.addr(kLen - 8), full.rkey(), 16},
      {"write: va wraps 2^64", kWrite, ~uint64_t{0} - 7, full.rkey(), 16},
      {"write: no REMOTE_WRITE", kWrite, ro.addr(), ro.rkey(), 16},
      {"write: deregistered", kWrite, gone.addr(), gone_rkey, 16},
      {"write: another PD", kWrite, reinterpret_cast<uint64_t>(other_mem.get()), other_mr->rkey.value(), 16},
      {"atomic: bad rkey", kAtomic, full.addr(), bad, 8},
      {"atomic: past the end", kAtomic, full.addr(kLen), full.rkey(), 8},
      {"atomic: no REMOTE_ATOMIC", kAtomic, wo.addr(), wo.rkey(), 8},
      {"atomic: deregistered", kAtomic, gone.addr(), gone_rkey, 8},
      {"atomic: another PD", kAtomic, reinterpret_cast<uint64_t>(other_mem.get()), other_mr->rkey.value(), 8},
  };
  const std::vector<uint8_t> before(full.data(), full.data() + kLen);
  uint64_t naks = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Qp* q = make_qp(IBV_QPT_RC);  // each violation ends its QP
    ASSERT_NE(q, nullptr);
    switch (c.kind) {
      case kRead: inject(read(q, kRqPsn, c.va, c.rkey, c.len)); break;
      case kWrite:
        inject(write(q, op::RC_WRITE_ONLY, kRqPsn, c.va, c.rkey, c.len, std::vector<uint8_t>(c.len, 0xFF), true));
        break;
      case kAtomic: inject(atomic(q, op::RC_FETCH_ADD, kRqPsn, c.va, c.rkey, 1)); break;
    }
    expect_ack(nak(NakCode::RemoteAccessError), kRqPsn);
    EXPECT_EQ(ctr(RnicCtr::rem_access_naks), ++naks);
    EXPECT_EQ(q->state(), IBV_QPS_ERR);
    for (const Buffer* b : {&full, &ro, &wo, &gone}) {
      EXPECT_EQ(first_diff(b->bytes(0, kLen), before), -1);
    }
    EXPECT_EQ(std::count(reinterpret_cast<uint8_t*>(other_mem.get()),
                         reinterpret_cast<uint8_t*>(other_mem.get()) + kLen, 0), static_cast<long>(kLen));
  }
}

// ---- WRITE -------------------------------------------------------------------------------------

TEST_F(Responder, WriteWithImmediateWaitsForAReceiveAndWritesOnce) {
  ConnOpts o;
  o.mtu = IBV_MTU_256;
  Qp* q = make_qp(IBV_QPT_RC, o);
  ASSERT_NE(q, nullptr);
  Buffer mem = buffer(512, kRemoteAll);
  const auto data = pattern(300, 12);
  inject(write(q, op::RC_WRITE_FIRST, kRqPsn, mem.addr(100), mem.rkey(), 300, {data.begin(), data.begin() + 256}));
  const std::vector<uint8_t> tail(data.begin() + 256, data.end());  // outlives `last`'s span
  auto last = send(q, op::RC_WRITE_LAST_IMM, kRqPsn + 1, tail, true);
  last.imm = 0x01020304;
  inject(last);
  expect_ack(wire::make_syndrome(AckType::RnrNak, 1), kRqPsn + 1, 0);
  EXPECT_EQ(first_diff(mem.bytes(100, 256), {data.data(), 256}), -1);
  EXPECT_EQ(mem.data()[356], 0) << "the LAST's bytes were written before the RNR NAK";

  Buffer rb = buffer(16, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge s = rb.sge(0, 16);
  ASSERT_EQ(post_recv(q, 77, {&s, 1}), 0);
  inject(last);
  expect_ack(kAckUnlimited, kRqPsn + 1, 1);
  EXPECT_EQ(first_diff(mem.bytes(100, 300), data), -1);
  auto wcs = cqes();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 77u);
  EXPECT_EQ(wcs[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(wcs[0].byte_len, 300u);
  EXPECT_TRUE(wcs[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(be32toh(wcs[0].imm_data), 0x01020304u);
}

// A WRITE with immediate refused at its R_Key takes the receive WQE it
// would have completed and completes it with a local access error (the
// responder's view, as ConnectX), besides the NAK: the receiving
// application learns of it before the flush of the rest.
TEST_F(Responder, RefusedWriteWithImmediateCompletesItsReceiveInError) {
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  Buffer mem = buffer(64, kRemoteAll, 0x5A);
  ASSERT_EQ(post_recv(q, 1, {}), 0);
  ASSERT_EQ(post_recv(q, 2, {}), 0);
  auto w = write(q, op::RC_WRITE_ONLY_IMM, kRqPsn, mem.addr(), 0xDEADBEEF, 8, std::vector<uint8_t>(8, 0xFF), true);
  w.imm = 0xBADDCAFE;
  inject(w);
  expect_ack(nak(NakCode::RemoteAccessError), kRqPsn);
  auto wcs = cqes();
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_ACCESS_ERR) << wc_status_name(wcs[0].status);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, IBV_WC_WR_FLUSH_ERR) << wc_status_name(wcs[1].status);
  EXPECT_EQ(q->state(), IBV_QPS_ERR);
  for (size_t i = 0; i < 64; ++i) ASSERT_EQ(mem.data()[i], 0x5A) << i;

  // Refused at the FIRST packet of a longer WRITE (which does not say
  // whether an immediate follows): the same.
  Qp* q2 = make_qp(IBV_QPT_RC);
  ASSERT_NE(q2, nullptr);
  ASSERT_EQ(post_recv(q2, 3, {}), 0);
  inject(write(q2, op::RC_WRITE_FIRST, kRqPsn, mem.addr(), 0xDEADBEEF, 4096, std::vector<uint8_t>(1024, 0xFF)));
  expect_ack(nak(NakCode::RemoteAccessError), kRqPsn);
  wcs = cqes();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 3u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_ACCESS_ERR) << wc_status_name(wcs[0].status);
}

TEST_F(Responder, WritePayloadLongerThanRethIsInvalidRequest) {
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  Buffer mem = buffer(64, kRemoteAll);
  inject(write(q, op::RC_WRITE_ONLY, kRqPsn, mem.addr(), mem.rkey(), 8, std::vector<uint8_t>(12, 1), true));
  expect_ack(nak(NakCode::InvalidRequest), kRqPsn);
  EXPECT_EQ(std::count(mem.data(), mem.data() + 64, 0), 64);
}

// ---- UC ----------------------------------------------------------------------------------------

TEST_F(Responder, UcGapDropsTheRestOfTheMessage) {
  ConnOpts o;
  o.mtu = IBV_MTU_256;
  Qp* q = make_qp(IBV_QPT_UC, o);
  ASSERT_NE(q, nullptr);
  Buffer buf = buffer(1024, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge s = buf.sge(0, 1024);
  ASSERT_EQ(post_recv(q, 5, {&s, 1}), 0);
  const auto d = pattern(256, 13);
  inject(send(q, op::UC_SEND_FIRST, kRqPsn, d));
  // kRqPsn+1 lost.
  inject(send(q, op::UC_SEND_MIDDLE, kRqPsn + 2, d));
  inject(send(q, op::UC_SEND_LAST, kRqPsn + 3, {d.begin(), d.begin() + 10}));
  EXPECT_EQ(ctr(RnicCtr::drop_uc_gap), 2u);
  EXPECT_TRUE(cqes().empty());
  EXPECT_TRUE(responses().empty()) << "UC sends no ACK";

  const auto e = pattern(40, 14);
  inject(send(q, op::UC_SEND_ONLY, kRqPsn + 4, e));
  auto wcs = cqes();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 5u);
  EXPECT_EQ(wcs[0].byte_len, 40u);
  EXPECT_EQ(first_diff(buf.bytes(0, 40), e), -1);
  EXPECT_EQ(q->state(), IBV_QPS_RTS);
}

TEST_F(Responder, UcRefusedWriteDropsTheMessageOnly) {
  ConnOpts o;
  o.mtu = IBV_MTU_256;
  Qp* q = make_qp(IBV_QPT_UC, o);
  ASSERT_NE(q, nullptr);
  Buffer mem = buffer(1024, kRemoteAll, 0x33);
  const auto d = pattern(256, 16);
  inject(write(q, op::UC_WRITE_FIRST, kRqPsn, mem.addr(), mem.rkey() ^ 0x100, 512, d));
  inject(send(q, op::UC_WRITE_LAST, kRqPsn + 1, d));
  EXPECT_EQ(ctr(RnicCtr::drop_uc_access), 1u);
  EXPECT_EQ(ctr(RnicCtr::drop_uc_gap), 1u);
  EXPECT_EQ(std::count(mem.data(), mem.data() + 1024, 0x33), 1024);
  EXPECT_TRUE(responses().empty());
  EXPECT_EQ(q->state(), IBV_QPS_RTS);
  inject(write(q, op::UC_WRITE_ONLY, kRqPsn + 2, mem.addr(8), mem.rkey(), 100, {d.begin(), d.begin() + 100}));
  EXPECT_EQ(first_diff(mem.bytes(8, 100), {d.data(), 100}), -1);
}

TEST_F(Responder, UcNewFirstAbandonsTheUnfinishedMessage) {
  ConnOpts o;
  o.mtu = IBV_MTU_256;
  Qp* q = make_qp(IBV_QPT_UC, o);
  ASSERT_NE(q, nullptr);
  Buffer buf = buffer(1024, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge s = buf.sge(0, 1024);
  ASSERT_EQ(post_recv(q, 1, {&s, 1}), 0);
  inject(send(q, op::UC_SEND_FIRST, kRqPsn, pattern(256, 17)));
  const auto e = pattern(30, 18);
  inject(send(q, op::UC_SEND_ONLY, kRqPsn + 1, e));
  EXPECT_EQ(ctr(RnicCtr::drop_bad_opcode_seq), 1u);
  auto wcs = cqes();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].byte_len, 30u);
  EXPECT_EQ(first_diff(buf.bytes(0, 30), e), -1);
}

// ---- SRQ ---------------------------------------------------------------------------------------

TEST_F(Responder, SrqMessagesOfTwoQpsInterleave) {
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 8;
  sa.attr.max_sge = 2;
  int err = 0;
  Srq* srq = rnic().create_srq(pd_, sa, &err);
  ASSERT_NE(srq, nullptr);
  ConnOpts o;
  o.mtu = IBV_MTU_256;
  Qp* q1 = make_qp(IBV_QPT_RC, o, kRqPsn, srq);
  Cq* rcq1 = rcq_;
  Qp* q2 = make_qp(IBV_QPT_RC, o, kRqPsn, srq);
  Cq* rcq2 = rcq_;
  ASSERT_TRUE(q1 && q2);
  Buffer buf = buffer(2048, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge s1 = buf.sge(0, 1024), s2 = buf.sge(1024, 1024);
  ASSERT_EQ(post_srq_recv(srq, 1, {&s1, 1}), 0);
  ASSERT_EQ(post_srq_recv(srq, 2, {&s2, 1}), 0);
  const auto a = pattern(300, 19), b = pattern(20, 20);
  const std::vector<uint8_t> a0(a.begin(), a.begin() + 256), a1(a.begin() + 256, a.end());
  inject(send(q1, op::RC_SEND_FIRST, kRqPsn, a0));
  inject(send(q2, op::RC_SEND_ONLY, kRqPsn, b, true));  // takes the next SRQ WQE
  inject(send(q1, op::RC_SEND_LAST, kRqPsn + 1, a1, true));
  auto w1 = cqes(rcq1), w2 = cqes(rcq2);
  ASSERT_EQ(w1.size(), 1u);
  ASSERT_EQ(w2.size(), 1u);
  EXPECT_EQ(w1[0].wr_id, 1u);
  EXPECT_EQ(w1[0].byte_len, 300u);
  EXPECT_EQ(w2[0].wr_id, 2u);
  EXPECT_EQ(first_diff(buf.bytes(0, 300), a), -1);
  EXPECT_EQ(first_diff(buf.bytes(1024, 20), b), -1);
}

// ---- UD ----------------------------------------------------------------------------------------

class ResponderUd : public Responder, public ::testing::WithParamInterface<bool> {};

TEST_P(ResponderUd, GrhSrcQpAndQkey) {
  ConnOpts o;
  o.ipv6 = GetParam();
  Qp* q = make_qp(IBV_QPT_UD, o);
  ASSERT_NE(q, nullptr);
  Buffer buf = buffer(512, IBV_ACCESS_LOCAL_WRITE, 0xEE);
  const ibv_sge s1 = buf.sge(0, 200), s2 = buf.sge(256, 100);
  ASSERT_EQ(post_recv(q, 1, {&s1, 1}), 0);
  ASSERT_EQ(post_recv(q, 2, {&s2, 1}), 0);
  const auto data = pattern(100, 15);

  auto ud = [&](uint32_t qkey) {
    auto d = send(q, op::UD_SEND_ONLY, 0x33, data);
    d.deth_qkey = Qkey(qkey);
    d.deth_src_qp = Qpn(0x55);
    return d;
  };
  inject(ud(kUdQkey ^ 1));  // wrong Q_Key (IBA 10.2.5): dropped
  EXPECT_EQ(ctr(RnicCtr::drop_qkey), 1u);
  EXPECT_TRUE(cqes().empty());

  const auto frame = inject(ud(kUdQkey));
  const wire::PktInfo pi = wire::parse(frame);
  auto wcs = cqes();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].byte_len, 140u);
  EXPECT_EQ(wcs[0].src_qp, 0x55u);
  EXPECT_TRUE(wcs[0].wc_flags & IBV_WC_GRH);
  if (GetParam()) {
    EXPECT_EQ(first_diff(buf.bytes(0, 40), {frame.data() + pi.l3_off, 40}), -1);
  } else {
    EXPECT_EQ(std::count(buf.data(), buf.data() + 20, 0), 20);
    EXPECT_EQ(first_diff(buf.bytes(20, 20), {frame.data() + pi.l3_off, 20}), -1);
  }
  EXPECT_EQ(first_diff(buf.bytes(40, 100), data), -1);
  EXPECT_EQ(buf.data()[140], 0xEE);

  // 100 bytes + the GRH area do not fit 100 bytes: the message is dropped
  // (IBA class D) and the receive WQE stays for the next one, unwritten.
  inject(ud(kUdQkey));
  EXPECT_TRUE(cqes().empty());
  EXPECT_EQ(ctr(RnicCtr::drop_ud_too_long), 1u);
  EXPECT_EQ(buf.data()[256 + 40], 0xEE);
  EXPECT_EQ(q->state(), IBV_QPS_RTS);
  EXPECT_TRUE(responses().empty());
  // The next message that fits takes that WQE.
  auto small = send(q, op::UD_SEND_ONLY, 0x34, pattern(50, 16));
  small.deth_qkey = Qkey(kUdQkey);
  small.deth_src_qp = Qpn(0x55);
  inject(small);
  wcs = cqes();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 2u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wcs[0].byte_len, 90u);
}

INSTANTIATE_TEST_SUITE_P(Ip, ResponderUd, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) { return p.param ? "IPv6" : "IPv4"; });

TEST_F(Responder, GsiTakesOnlyTheGsiQkey) {
  Qp* q = make_qp(IBV_QPT_UD, {}, 0, nullptr, true);
  ASSERT_NE(q, nullptr);
  ASSERT_EQ(q->qpn(), kQp1);
  Buffer buf = buffer(512, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge s = buf.sge(0, 512);
  ASSERT_EQ(post_recv(q, 1, {&s, 1}), 0);
  const auto mad = pattern(256, 21);
  auto d = send(q, op::UD_SEND_ONLY, 0, mad);
  d.deth_src_qp = Qpn(1);
  d.deth_qkey = Qkey(kUdQkey);
  inject(d);
  EXPECT_EQ(ctr(RnicCtr::drop_qkey), 1u);
  EXPECT_TRUE(cqes().empty());
  d.deth_qkey = uroce::kGsiQkey;  // 0x80010000 (IBA 13.4.6.1)
  inject(d);
  auto wcs = cqes();
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].byte_len, 256u + 40u);
  EXPECT_EQ(wcs[0].src_qp, 1u);
  EXPECT_EQ(first_diff(buf.bytes(40, 256), mad), -1);
}

// ---- congestion control (cc.hpp): the notification point's CNPs, the reaction point ---------

// The IP TOS / traffic class of a frame B sent.
uint8_t tos_of(const Resp& r) {
  const uint8_t* l3 = r.bytes.data() + r.pi.l3_off;
  return r.pi.l3 == wire::L3::IPv4 ? wire::Ipv4C(l3).tos() : wire::Ipv6C(l3).traffic_class();
}

// A CNP, field by field as IBA Annex A17 (A17.9.3 Figure 6) and ConnectX
// have it, toward `dest_qp` from the QP whose UDP source port is `sport`.
void expect_cnp(const Resp& c, uint32_t dest_qp, uint16_t sport, bool ipv6) {
  ASSERT_EQ(c.opcode(), wire::kCnpOpcode);
  const uint8_t* bth = c.bytes.data() + c.pi.bth_off;
  EXPECT_EQ(bth[1], 0x00);                       // SE 0, M 0, PadCnt 0, TVer 0
  EXPECT_EQ(wire::BthC(bth).pkey(), kDefaultPkey);  // the marked packet's P_Key
  EXPECT_EQ(bth[4], 0x40);                       // F 0, B (BECN) 1, reserved 0
  EXPECT_EQ(wire::BthC(bth).dest_qp(), Qpn(dest_qp));
  EXPECT_EQ(bth[8], 0x00);                       // A 0, reserved 0
  EXPECT_EQ(c.psn(), 0u);
  EXPECT_EQ(c.payload(), std::vector<uint8_t>(16, 0));  // 16 reserved bytes of zero
  EXPECT_EQ(c.pi.pad, 0);
  EXPECT_EQ(tos_of(c), 48 << 2);                 // DSCP 48, Not-ECT
  const wire::UdpC udp(c.bytes.data() + c.pi.l4_off);
  EXPECT_EQ(udp.dst_port(), wire::kRoceV2Port);
  EXPECT_EQ(udp.src_port(), sport);
  EXPECT_EQ(udp.checksum(), 0);
  EXPECT_EQ(udp.length(), 8 + 12 + 16 + 4);
  if (!ipv6) {
    const wire::Ipv4C ip(c.bytes.data() + c.pi.l3_off);
    EXPECT_EQ(ip.total_len(), 60);
    EXPECT_EQ(ip.flags_frag(), 0x4000);          // DF
    EXPECT_EQ(ip.ttl(), 64);
  }
}

TEST_F(Responder, CeMarkedRequestIsAnsweredWithOneCnpPerInterval) {
  config::CcConfig cc;
  cc.dcqcn.min_time_between_cnps_us = 1'000'000;  // the second mark falls inside it
  rnic().set_cc(cc);
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  Buffer buf = buffer(256, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge sg = buf.sge(0, 64);
  ASSERT_EQ(post_recv(q, 1, {&sg, 1}), 0);
  ASSERT_EQ(post_recv(q, 2, {&sg, 1}), 0);
  auto d = send(q, op::RC_SEND_ONLY, kRqPsn, pattern(32, 1), true);
  d.tos = 0x02 | 0x01;  // CE
  inject(d);
  auto rs = responses();
  ASSERT_EQ(rs.size(), 2u);
  const Resp* ack = rs[0].opcode() == op::RC_ACK ? &rs[0] : &rs[1];
  const Resp* cnp = rs[0].opcode() == op::RC_ACK ? &rs[1] : &rs[0];
  EXPECT_EQ(ack->opcode(), op::RC_ACK);
  EXPECT_EQ(tos_of(*ack) & 0x03, 0);  // ACKs leave Not-ECT
  expect_cnp(*cnp, kPeerQpn, q->attrs().sport, false);
  EXPECT_EQ(ctr(RnicCtr::np_ecn_marked_roce_packets), 1u);
  EXPECT_EQ(ctr(RnicCtr::np_cnp_sent), 1u);
  EXPECT_EQ(q->cc.cnps_sent, 1u);

  // Within min_time_between_cnps: counted, covered by the CNP sent.
  auto d2 = send(q, op::RC_SEND_ONLY, kRqPsn + 1, pattern(32, 2), true);
  d2.tos = 0x03;
  inject(d2);
  rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].opcode(), op::RC_ACK);
  EXPECT_EQ(ctr(RnicCtr::np_ecn_marked_roce_packets), 2u);
  EXPECT_EQ(ctr(RnicCtr::np_cnp_coalesced), 1u);
  EXPECT_EQ(ctr(RnicCtr::np_cnp_sent), 1u);
  // An ECT packet that was not marked asks for nothing.
  auto d3 = send(q, op::RC_SEND_ONLY, kRqPsn + 2, pattern(8, 3), true);
  d3.tos = 0x02;
  ASSERT_EQ(post_recv(q, 3, {&sg, 1}), 0);
  inject(d3);
  EXPECT_EQ(responses().size(), 1u);
  EXPECT_EQ(ctr(RnicCtr::np_ecn_marked_roce_packets), 2u);
}

// A CNP goes out for every mark once the interval passed (0: every one).
TEST_F(Responder, CnpIntervalZeroAnswersEveryMark) {
  config::CcConfig cc;
  cc.dcqcn.min_time_between_cnps_us = 0;
  rnic().set_cc(cc);
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  Buffer buf = buffer(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  for (uint32_t i = 0; i < 3; ++i) {
    auto d = write(q, op::RC_WRITE_ONLY, kRqPsn + i, buf.addr(), buf.rkey(), 16, pattern(16, i), i == 2);
    d.tos = 0x03;
    inject(d);
  }
  const auto rs = responses();
  EXPECT_EQ(std::count_if(rs.begin(), rs.end(), [](const Resp& r) { return r.opcode() == wire::kCnpOpcode; }), 3);
  EXPECT_EQ(ctr(RnicCtr::np_cnp_sent), 3u);
}

// UD: the CNP goes to the DETH's source QP at the packet's source address.
TEST_P(ResponderUd, CeMarkedSendIsAnsweredTowardItsSource) {
  ConnOpts o;
  o.ipv6 = GetParam();
  Qp* q = make_qp(IBV_QPT_UD, o);
  ASSERT_NE(q, nullptr);
  Buffer buf = buffer(512, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge s1 = buf.sge(0, 200);
  ASSERT_EQ(post_recv(q, 1, {&s1, 1}), 0);
  auto d = send(q, op::UD_SEND_ONLY, 0x33, pattern(64, 5));
  d.deth_qkey = Qkey(kUdQkey);
  d.deth_src_qp = Qpn(kPeerQpn);
  d.tos = 0x03;
  inject(d);
  EXPECT_EQ(cqes().size(), 1u);
  const auto rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  expect_cnp(rs[0], kPeerQpn, q->attrs().sport, GetParam());
  EXPECT_EQ(wire::dst_gid(rs[0].bytes.data(), rs[0].pi), GetParam() ? kPeerIp6 : wire::PktDesc::ipv4_mapped(kPeerIp4));
}

// READ responses are data: ECT(0) with `ecn` on, Not-ECT with it off.
TEST_F(Responder, ReadResponsesLeaveEct0UnlessEcnIsOff) {
  for (const bool ecn : {true, false}) {
    SCOPED_TRACE(ecn ? "ecn on" : "ecn off");
    config::CcConfig cc;
    cc.ecn = ecn;
    rnic().set_cc(cc);
    ConnOpts o;
    o.mtu = IBV_MTU_256;
    Qp* q = make_qp(IBV_QPT_RC, o);
    ASSERT_NE(q, nullptr);
    Buffer buf = buffer(600, IBV_ACCESS_REMOTE_READ, 0x5A);
    inject(read(q, kRqPsn, buf.addr(), buf.rkey(), 600));
    const auto rs = responses();
    ASSERT_EQ(rs.size(), 3u);
    for (const Resp& r : rs) EXPECT_EQ(tos_of(r) & 0x03, ecn ? 0x02 : 0x00);
  }
}

// A CNP toward one of our QPs: the first starts DCQCN at the port's rate,
// a second inside the monitor period cuts the rate at its end; the QP's
// sends are paced from then on.
TEST_F(Responder, CnpFromThePathCutsTheQpsRate) {
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  inject(cnp(q));
  EXPECT_EQ(ctr(RnicCtr::rp_cnp_handled), 1u);
  EXPECT_TRUE(q->cc.rp.active());
  EXPECT_EQ(q->cc.rp.rate_bps(), kPortSpeedBps);
  EXPECT_TRUE(responses().empty());  // a CNP is answered by nothing
  inject(cnp(q));
  std::this_thread::sleep_for(std::chrono::microseconds(20));
  for (int i = 0; i < 4; ++i) engine_->poll();  // the monitor boundary's timer
  EXPECT_EQ(ctr(RnicCtr::rp_cnp_handled), 2u);
  EXPECT_EQ(ctr(RnicCtr::rp_rate_cuts), 1u);
  EXPECT_LT(q->cc.rp.rate_bps(), kPortSpeedBps);
  EXPECT_GE(q->cc.rp.rate_bps(), kPortSpeedBps / 2);  // min_dec_fac: at most half in one cut
  EXPECT_TRUE(q->cc.pacer.pacing());
  EXPECT_EQ(q->cc.cnps_rcvd, 2u);
  EXPECT_EQ(q->state(), IBV_QPS_RTS);
}

// Hostile CNPs from the path itself (a peer, or anyone who can forge its
// address): a flood holds the QP at DCQCN's floor, never below it and
// never out of RTS, and once the CNPs stop the increase stages bring it
// back to the maximum, where the pacer is off again.
TEST_F(Responder, CnpFloodFromThePathHoldsTheFloorAndRecovers) {
  config::CcConfig cc;
  cc.dcqcn.rate_reduce_monitor_period_us = 1;
  cc.dcqcn.dce_tcp_rtt_us = 200;  // every alpha period sees CNPs: alpha stays near 1, each cut halves
  cc.dcqcn.rpg_min_rate_mbps = 100;
  // The increase timer longer than a sleep's overshoot between two CNPs
  // (a cut restarts it), its steps large enough to recover in ~50 stages.
  cc.dcqcn.rpg_time_reset_us = 1000;
  cc.dcqcn.rpg_ai_rate_mbps = 1000;
  rnic().set_cc(cc);
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  constexpr uint64_t kFloorBps = 100'000'000;
  uint64_t lowest = ~uint64_t{0};
  for (int i = 0; i < 400; ++i) {
    inject(cnp(q));
    std::this_thread::sleep_for(std::chrono::microseconds(5));
    engine_->poll();  // the monitor boundaries' cuts
    lowest = std::min(lowest, q->cc.rp.rate_bps());
  }
  EXPECT_EQ(ctr(RnicCtr::rp_cnp_handled), 400u);
  EXPECT_GT(ctr(RnicCtr::rp_rate_cuts), 10u);
  EXPECT_EQ(lowest, kFloorBps) << "the flood reaches the floor and goes no lower";
  EXPECT_TRUE(q->cc.pacer.pacing());
  EXPECT_EQ(q->state(), IBV_QPS_RTS);
  EXPECT_TRUE(responses().empty());  // nothing answers a CNP
  // Quiet now: timer stages only (no bytes sent), back to the maximum.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (q->cc.rp.active() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    engine_->poll();
  }
  EXPECT_FALSE(q->cc.rp.active()) << "rate " << q->cc.rp.rate_bps();
  EXPECT_EQ(q->cc.rp.rate_bps(), kPortSpeedBps);
  EXPECT_FALSE(q->cc.pacer.pacing());
}

// A CNP from an address other than the QP's path is dropped (anyone could
// otherwise slow any QP down); with cc "none" CNPs are counted, ignored.
TEST_F(Responder, CnpOffPathIsDroppedAndCcNoneIgnoresCnps) {
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  wire::PktDesc d = req(q, wire::kCnpOpcode, 0);
  d.payload = payloads_.emplace_back(16, 0);
  d.src = wire::PktDesc::ipv4_mapped(kPeerIp4 + 7);
  inject(d);
  EXPECT_EQ(ctr(RnicCtr::drop_src_addr), 1u);
  EXPECT_EQ(ctr(RnicCtr::rp_cnp_handled), 0u);
  EXPECT_FALSE(q->cc.rp.active());

  config::CcConfig none;
  none.mode = config::CcMode::kNone;
  rnic().set_cc(none);
  Qp* q2 = make_qp(IBV_QPT_RC);
  ASSERT_NE(q2, nullptr);
  wire::PktDesc c = req(q2, wire::kCnpOpcode, 0);
  c.payload = payloads_.emplace_back(16, 0);
  inject(c);
  inject(c);
  EXPECT_EQ(ctr(RnicCtr::rp_cnp_ignored), 2u);
  EXPECT_EQ(ctr(RnicCtr::rp_cnp_handled), 0u);
  EXPECT_FALSE(q2->cc.rp.active());
  EXPECT_FALSE(q2->cc.pacer.pacing());
}

}  // namespace
}  // namespace uroce::rnic::testing
