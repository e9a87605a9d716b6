// Selective repeat's responder side (transport/rnic/reorder.cpp) and
// spraying's, driven by hand-made request packets (the fixture:
// responder_fixture.hpp).
#include "tests/rnic/responder_fixture.hpp"

namespace uroce::rnic::testing {
namespace {

using namespace responder_fixture;  // the fixture's own names

// What a requester offering selective repeat sends past a gap is kept: the
// gap is NAKed once, with the bit and its length; nothing is carried out
// early; the missing packets make all four complete, in order.
TEST_F(Responder, SelectiveKeepsWhatComesAfterAGapAndCarriesItOutInOrder) {
  rnic_->set_selective_repeat(true);
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  Buffer buf = buffer(4 * 256, IBV_ACCESS_LOCAL_WRITE, 0xEE);
  for (uint64_t i = 0; i < 4; ++i) {
    const ibv_sge sge = buf.sge(i * 256, 256);
    ASSERT_EQ(post_recv(q, i, {&sge, 1}), 0);
  }
  auto sr = [&](uint32_t psn, uint64_t seed, bool ack_req) {
    wire::PktDesc d = send(q, op::RC_SEND_ONLY, psn, pattern(100, seed), ack_req);
    d.resv7 = wire::kResv7Selective;
    return d;
  };
  inject(sr(kRqPsn + 2, 3, false));
  inject(sr(kRqPsn + 3, 4, true));  // a gap of two (kRqPsn, kRqPsn + 1): 3 and 4 are kept
  auto rs = responses();
  ASSERT_EQ(rs.size(), 1u) << "one NAK for the gap, nothing for the packet after it";
  EXPECT_EQ(rs[0].syndrome(), nak(NakCode::PsnSequenceError));
  EXPECT_EQ(rs[0].psn(), kRqPsn);
  EXPECT_EQ(wire::BthC(rs[0].bytes.data() + rs[0].pi.bth_off).resv7(), wire::kResv7Selective | 1);
  EXPECT_TRUE(cqes().empty()) << "carried out before the gap filled";
  EXPECT_EQ(rnic_->held_packets(), 2u);
  EXPECT_EQ(rnic_->counters().get(RnicCtr::sr_kept_pkts), 2u);

  inject(sr(kRqPsn, 1, false));
  EXPECT_TRUE(responses().empty()) << "the second missing PSN is NAKed already";
  inject(sr(kRqPsn + 1, 2, false));
  expect_ack(kAckUnlimited, kRqPsn + 3, 4);  // the kept packet with AckReq, now carried out
  auto wcs = cqes();
  ASSERT_EQ(wcs.size(), 4u);
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(wcs[i].wr_id, i);
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
    EXPECT_EQ(first_diff(buf.bytes(i * 256, 100), pattern(100, i + 1)), -1) << "SEND " << i;
  }
  EXPECT_EQ(rnic_->held_packets(), 0u);
}

// A device that keeps says so on its ACKs to a requester that offers
// selective repeat (the requester may then spray), and only to one.
TEST_F(Responder, SelectiveAcksSayTheResponderKeeps) {
  rnic_->set_selective_repeat(true);
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  Buffer buf = buffer(2 * 256, IBV_ACCESS_LOCAL_WRITE);
  for (uint64_t i = 0; i < 2; ++i) {
    const ibv_sge sge = buf.sge(i * 256, 256);
    ASSERT_EQ(post_recv(q, i, {&sge, 1}), 0);
  }
  inject(send(q, op::RC_SEND_ONLY, kRqPsn, pattern(100, 1), true));  // a plain requester's
  auto rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].syndrome(), kAckUnlimited);
  EXPECT_EQ(wire::BthC(rs[0].bytes.data() + rs[0].pi.bth_off).resv7(), 0) << "told a plain requester";
  wire::PktDesc d = send(q, op::RC_SEND_ONLY, kRqPsn + 1, pattern(100, 2), true);
  d.resv7 = wire::kResv7Selective;
  inject(d);
  rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].syndrome(), kAckUnlimited);
  EXPECT_EQ(wire::BthC(rs[0].bytes.data() + rs[0].pi.bth_off).resv7(), wire::kResv7Selective);
}

// Spraying (DESIGN.md "Spraying"): packets of a sprayed requester that
// arrive past a gap are kept, but the gap is NAKed only once
// kSprayReorderPkts packets past it are kept; what fills a gap before
// that was reordering, never NAKed.
TEST_F(Responder, SprayedGapIsNakedOnlyOnceFarEnoughBehind) {
  rnic_->set_selective_repeat(true);
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  constexpr uint32_t kTol = transport::params::kSprayReorderPkts;
  constexpr uint32_t kN = kTol + 6;  // PSNs 0 .. kTol + 5, one 32-byte WRITE each
  Buffer mem = buffer(kN * 32, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, 0xEE);
  auto sprayed = [&](uint32_t i) {
    wire::PktDesc d = write(q, op::RC_WRITE_ONLY, kRqPsn + i, mem.addr(i * 32), mem.rkey(), 32, pattern(32, i + 1));
    d.resv7 = wire::kResv7Selective | wire::kResv7Sprayed;
    return d;
  };
  auto placed = [&](uint32_t i) { return first_diff(mem.bytes(i * 32, 32), pattern(32, i + 1)) == -1; };
  // PSN 0 overtaken by 1..3, then arrives: reordering, no NAK.
  for (uint32_t i = 1; i <= 3; ++i) inject(sprayed(i));
  EXPECT_TRUE(responses().empty()) << "a reordered packet NAKed";
  EXPECT_FALSE(placed(1)) << "placed before the gap filled";
  inject(sprayed(0));
  EXPECT_TRUE(responses().empty());
  for (uint32_t i = 0; i <= 3; ++i) EXPECT_TRUE(placed(i)) << "WRITE " << i;
  // PSNs 4 and 5 lost: nothing is NAKed while fewer than kTol packets
  // past them are kept; the kTol-th NAKs both, one run.
  for (uint32_t i = 6; i < 6 + kTol - 1; ++i) inject(sprayed(i));
  EXPECT_TRUE(responses().empty()) << "NAKed before the tolerance";
  inject(sprayed(6 + kTol - 1));
  auto rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].syndrome(), nak(NakCode::PsnSequenceError));
  EXPECT_EQ(rs[0].psn(), kRqPsn + 4);
  EXPECT_EQ(wire::BthC(rs[0].bytes.data() + rs[0].pi.bth_off).resv7(), wire::kResv7Selective | 1) << "two PSNs long";
  EXPECT_FALSE(placed(6));
  // The resends fill the gap: everything kept is carried out, in order.
  inject(sprayed(4));
  inject(sprayed(5));
  EXPECT_TRUE(responses().empty()) << "no AckReq asked";
  for (uint32_t i = 4; i < kN; ++i) EXPECT_TRUE(placed(i)) << "WRITE " << i;
  EXPECT_EQ(rnic_->held_packets(), 0u);
  EXPECT_EQ(rnic_->counters().get(RnicCtr::sr_naks_sent), 1u);
}

// The same gap from a requester that does not offer it (no bit): the
// IBA's way, one plain NAK and the packet dropped.
TEST_F(Responder, SelectiveDeviceAnswersAPlainRequesterTheIbasWay) {
  rnic_->set_selective_repeat(true);
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  inject(send(q, op::RC_SEND_ONLY, kRqPsn + 1, pattern(100, 1)));
  auto rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(rs[0].syndrome(), nak(NakCode::PsnSequenceError));
  EXPECT_EQ(rs[0].psn(), kRqPsn);
  EXPECT_EQ(wire::BthC(rs[0].bytes.data() + rs[0].pi.bth_off).resv7(), 0) << "a NAK with the bit to a plain peer";
  EXPECT_EQ(rnic_->held_packets(), 0u);
}

// A device that does not offer it keeps nothing, whatever the bit says.
TEST_F(Responder, PlainDeviceIgnoresTheSelectiveBit) {
  Qp* q = make_qp(IBV_QPT_RC);
  ASSERT_NE(q, nullptr);
  wire::PktDesc d = send(q, op::RC_SEND_ONLY, kRqPsn + 1, pattern(100, 1));
  d.resv7 = wire::kResv7Selective;
  inject(d);
  auto rs = responses();
  ASSERT_EQ(rs.size(), 1u);
  EXPECT_EQ(wire::BthC(rs[0].bytes.data() + rs[0].pi.bth_off).resv7(), 0);
  EXPECT_EQ(rnic_->held_packets(), 0u);
}

// A kept request whose PSN a READ then takes for its responses (a peer
// that numbers a request inside a READ's range) is passed, never carried
// out, and the device's count goes back to 0: no packet stays kept.
TEST_F(Responder, KeptRequestInsideAReadsRangeIsDroppedWhenPassed) {
  rnic_->set_selective_repeat(true);
  ConnOpts o;
  o.mtu = IBV_MTU_256;
  Qp* q = make_qp(IBV_QPT_RC, o);
  ASSERT_NE(q, nullptr);
  Buffer src = buffer(1024, kRemoteAll, 0x5A);
  Buffer rbuf = buffer(256, IBV_ACCESS_LOCAL_WRITE, 0xEE);
  const ibv_sge sge = rbuf.sge(0, 256);
  ASSERT_EQ(post_recv(q, 1, {&sge, 1}), 0);
  wire::PktDesc inside = send(q, op::RC_SEND_ONLY, kRqPsn + 2, pattern(50, 9), true);
  inside.resv7 = wire::kResv7Selective;
  inject(inside);
  (void)responses();  // its selective NAK
  EXPECT_EQ(rnic_->held_packets(), 1u);
  wire::PktDesc rd = read(q, kRqPsn, src.addr(0), src.rkey(), 1024);  // 4 responses: kRqPsn .. kRqPsn + 3
  rd.resv7 = wire::kResv7Selective;
  inject(rd);
  auto rs = responses();
  EXPECT_EQ(rs.size(), 4u) << "the READ's responses, nothing of the passed SEND";
  EXPECT_EQ(rnic_->held_packets(), 0u) << "a packet stayed kept";
  EXPECT_TRUE(cqes().empty()) << "the passed SEND was carried out";
}
}  // namespace
}  // namespace uroce::rnic::testing
