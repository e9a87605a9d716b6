// RoCEv2 multicast end to end (transport/rnic/mcast.hpp): node A sends UD
// SENDs to a group (DestQP 0xFFFFFF, the group's MAC, no neighbour
// resolution); node B has several UD QPs attached, and each gets its own
// copy in its own receive WQE.  Detach, Q_Key, destroy and the limits.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "tests/rnic/harness.hpp"
#include "transport/rnic/limits.hpp"
#include "transport/rnic/mcast.hpp"

namespace uroce::rnic::testing {
namespace {

constexpr int kLocalWrite = IBV_ACCESS_LOCAL_WRITE;
constexpr uint32_t kMsg = 200;
constexpr uint32_t kRecvLen = kGrhBytes + 256;

// ::ffff:239.1.2.3, as rdma_cm maps an IPv4 group for RoCEv2.
wire::Ipv6Addr v4_group(uint8_t last = 3) { return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, last}; }
// ff0e::1234 (global scope).
wire::Ipv6Addr v6_group() { return {0xff, 0x0e, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34}; }

// An AH from `n` to the group: global, from the GID of the group's family.
ibv_ah_attr group_path(const Node& n, const wire::Ipv6Addr& mgid) {
  ibv_ah_attr a{};
  a.is_global = 1;
  a.port_num = 1;
  a.grh.sgid_index = static_cast<uint8_t>(wire::is_ipv4_mapped(mgid) ? n.gid_v4 : n.gid_v6);
  a.grh.hop_limit = 64;
  std::memcpy(a.grh.dgid.raw, mgid.data(), 16);
  return a;
}

struct Receiver {
  Cq* cq = nullptr;
  Qp* qp = nullptr;
  Buffer buf;
};

class Mcast : public ::testing::Test {
 protected:
  // One sender on A; `n` receivers on B, each a UD QP in RTS with `qkey`
  // and one receive WQE posted per expected message.
  void SetUp() override {
    scq_ = h_.cq(h_.a());
    sender_ = h_.qp(h_.a(), IBV_QPT_UD, scq_, scq_);
    ASSERT_NE(sender_, nullptr);
    ASSERT_EQ(h_.ud_ready(sender_), 0);
    src_ = h_.buffer(h_.a(), kMsg, kLocalWrite);
    fill_pattern(src_.bytes(0, kMsg), 7);
  }

  Receiver receiver(uint32_t qkey = kUdQkey, int recvs = 4) { return receiver_on(h_.b(), qkey, recvs); }
  Receiver receiver_on(Node& n, uint32_t qkey = kUdQkey, int recvs = 4) {
    Receiver r;
    r.cq = h_.cq(n);
    r.qp = h_.qp(n, IBV_QPT_UD, r.cq, r.cq);
    EXPECT_NE(r.qp, nullptr);
    if (r.qp == nullptr) return r;
    EXPECT_EQ(h_.ud_ready(r.qp, qkey), 0);
    r.buf = h_.buffer(n, kRecvLen * static_cast<size_t>(recvs), kLocalWrite);
    for (int i = 0; i < recvs; ++i) {
      ibv_sge sge = r.buf.sge(kRecvLen * static_cast<size_t>(i), kRecvLen);
      EXPECT_EQ(post_recv(r.qp, static_cast<uint64_t>(i), {&sge, 1}), 0);
    }
    return r;
  }

  // One SEND to the group; its send completion must succeed.
  void send(const wire::Ipv6Addr& mgid, uint32_t qkey = kUdQkey, uint64_t wr_id = 1) {
    int err = 0;
    Ah* ah = h_.a().rnic->create_ah(h_.a().pd, group_path(h_.a(), mgid), &err);
    ASSERT_NE(ah, nullptr) << err;
    ibv_sge s = src_.sge(0, kMsg);
    ibv_send_wr wr = send_wr(IBV_WR_SEND, wr_id, {&s, 1});
    wr.wr.ud.ah = &ah->ibv;
    wr.wr.ud.remote_qpn = kMulticastQpn;
    wr.wr.ud.remote_qkey = qkey;
    ASSERT_EQ(post_send(sender_, wr), 0);
    const ibv_wc wc = h_.wait_wc(scq_);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
    EXPECT_EQ(wc.wr_id, wr_id);
    EXPECT_EQ(h_.a().rnic->destroy_ah(ah), 0);
  }

  // The receiver got exactly one message, from the sender, with the GRH.
  void expect_one(Receiver& r, uint64_t slot) {
    const ibv_wc wc = h_.wait_wc(r.cq);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
    EXPECT_EQ(wc.opcode, IBV_WC_RECV);
    EXPECT_EQ(wc.wr_id, slot);
    EXPECT_EQ(wc.byte_len, kGrhBytes + kMsg);
    EXPECT_EQ(wc.qp_num, r.qp->qpn().value());
    EXPECT_EQ(wc.src_qp, sender_->qpn().value());
    EXPECT_TRUE(wc.wc_flags & IBV_WC_GRH);
    EXPECT_EQ(first_diff(r.buf.bytes(kRecvLen * slot + kGrhBytes, kMsg), src_.bytes(0, kMsg)), -1);
  }

  void expect_none(Receiver& r) { EXPECT_TRUE(h_.collect_for(r.cq, std::chrono::milliseconds(50)).empty()); }

  uint64_t b_ctr(RnicCtr c) { return h_.b().rnic->counters().get(c); }

  Harness h_{HarnessOptions{.resolve_neighbours = false}};  // a group needs no ARP
  Cq* scq_ = nullptr;
  Qp* sender_ = nullptr;
  Buffer src_;
};

TEST(McastAddr, GroupMacAndGidRules) {
  EXPECT_TRUE(is_multicast_gid(v4_group()));
  EXPECT_TRUE(is_multicast_gid(v6_group()));
  EXPECT_FALSE(is_multicast_gid({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}));
  EXPECT_FALSE(is_multicast_gid({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 240, 0, 0, 1}));
  EXPECT_FALSE(is_multicast_gid({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}));
  // RFC 1112: the low 23 bits (239.129.2.3 and 239.1.2.3 share a MAC).
  const auto m4 = multicast_mac({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 129, 2, 3});
  ASSERT_TRUE(m4.has_value());
  EXPECT_EQ(*m4, (wire::MacAddr{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}));
  const auto m6 = multicast_mac(v6_group());
  ASSERT_TRUE(m6.has_value());
  EXPECT_EQ(*m6, (wire::MacAddr{0x33, 0x33, 0x00, 0x00, 0x12, 0x34}));
  EXPECT_FALSE(multicast_mac({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}).has_value());
}

TEST_F(Mcast, EveryAttachedQpGetsItsOwnCopy) {
  std::vector<Receiver> rs;
  for (int i = 0; i < 3; ++i) rs.push_back(receiver());
  Receiver outsider = receiver();  // on B, not attached
  for (Receiver& r : rs) ASSERT_EQ(h_.b().rnic->attach_mcast(r.qp, v4_group()), 0);
  const auto arp_before = h_.a().engine->total(transport::EngineCtr::tx_arp_request);
  send(v4_group());
  for (Receiver& r : rs) expect_one(r, 0);
  expect_none(outsider);
  EXPECT_EQ(b_ctr(RnicCtr::rx_mcast_pkts), 1u);
  EXPECT_EQ(b_ctr(RnicCtr::rx_mcast_copies), 3u);
  // The group's MAC, no neighbour: A never asked for one.
  EXPECT_EQ(h_.a().engine->total(transport::EngineCtr::tx_arp_request), arp_before);
  EXPECT_EQ(h_.b().engine->total(transport::EngineCtr::drop_not_our_mac), 0u);
  // A second message uses each QP's next WQE.
  send(v4_group(), kUdQkey, 2);
  for (Receiver& r : rs) expect_one(r, 1);
}

// Multicast loopback: a QP of the sending device attached to the group
// gets the message too (a copy looped back; the wire carries one frame),
// as rxe's host IP stack and ConnectX give it; a QP of that device not
// attached gets nothing, and a device with no member loops nothing back.
TEST_F(Mcast, LoopedBackToTheSendersOwnMembers) {
  Receiver local = receiver_on(h_.a());
  Receiver local_outsider = receiver_on(h_.a());
  Receiver remote = receiver();
  ASSERT_EQ(h_.a().rnic->attach_mcast(local.qp, v4_group()), 0);
  ASSERT_EQ(h_.b().rnic->attach_mcast(remote.qp, v4_group()), 0);
  const uint64_t tx0 = h_.a().engine->total(transport::EngineCtr::tx_frames);
  send(v4_group());
  expect_one(local, 0);
  expect_one(remote, 0);
  expect_none(local_outsider);
  EXPECT_EQ(h_.a().engine->total(transport::EngineCtr::loopback), 1u);
  EXPECT_EQ(h_.a().engine->total(transport::EngineCtr::tx_frames), tx0 + 1) << "one frame on the wire";
  // Detached: nothing loops back any more (no copy, nothing dropped).
  ASSERT_EQ(h_.a().rnic->detach_mcast(local.qp, v4_group()), 0);
  send(v4_group(), kUdQkey, 2);
  expect_one(remote, 1);
  expect_none(local);
  EXPECT_EQ(h_.a().engine->total(transport::EngineCtr::loopback), 1u);
  EXPECT_EQ(h_.a().rnic->counters().get(RnicCtr::drop_mcast_no_group), 0u);
}

// A member sending to its own group gets its message back, as any member
// of the sending device does; unless it was created with
// IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, which keeps only its own copy away
// (the device's other members still get theirs).
TEST_F(Mcast, SelfLoopbackUnlessBlocked) {
  for (const bool block : {false, true}) {
    SCOPED_TRACE(block ? "blocked" : "not blocked");
    Receiver self = receiver_on(h_.a());  // sends too
    Receiver other = receiver_on(h_.a());
    self.qp->block_self_mcast_lb = block;
    ASSERT_EQ(h_.a().rnic->attach_mcast(self.qp, v4_group(4)), 0);
    ASSERT_EQ(h_.a().rnic->attach_mcast(other.qp, v4_group(4)), 0);
    const uint64_t blocked0 = h_.a().rnic->counters().get(RnicCtr::mcast_self_blocked);
    int err = 0;
    Ah* ah = h_.a().rnic->create_ah(h_.a().pd, group_path(h_.a(), v4_group(4)), &err);
    ASSERT_NE(ah, nullptr) << err;
    ibv_sge sge = src_.sge(0, kMsg);
    ibv_send_wr wr = send_wr(IBV_WR_SEND, 9, {&sge, 1});
    wr.wr.ud.ah = &ah->ibv;
    wr.wr.ud.remote_qpn = kMulticastQpn;
    wr.wr.ud.remote_qkey = kUdQkey;
    wr.send_flags = 0;  // unsignalled: self's CQ holds only what it receives
    ASSERT_EQ(post_send(self.qp, wr), 0);
    const ibv_wc got = h_.wait_wc(other.cq);
    EXPECT_EQ(got.status, IBV_WC_SUCCESS);
    EXPECT_EQ(got.src_qp, self.qp->qpn().value());
    const auto own = h_.collect_for(self.cq, std::chrono::milliseconds(50));
    if (block) {
      EXPECT_TRUE(own.empty()) << "its own message came back";
      EXPECT_EQ(h_.a().rnic->counters().get(RnicCtr::mcast_self_blocked), blocked0 + 1);
    } else {
      ASSERT_EQ(own.size(), 1u);
      EXPECT_EQ(own[0].opcode, IBV_WC_RECV);
      EXPECT_EQ(own[0].src_qp, self.qp->qpn().value());
      EXPECT_EQ(h_.a().rnic->counters().get(RnicCtr::mcast_self_blocked), blocked0);
    }
    EXPECT_EQ(h_.a().rnic->destroy_ah(ah), 0);
    ASSERT_EQ(h_.a().rnic->detach_mcast(self.qp, v4_group(4)), 0);
    ASSERT_EQ(h_.a().rnic->detach_mcast(other.qp, v4_group(4)), 0);
  }
}

TEST_F(Mcast, Ipv6Group) {
  Receiver r1 = receiver();
  Receiver r2 = receiver();
  ASSERT_EQ(h_.b().rnic->attach_mcast(r1.qp, v6_group()), 0);
  ASSERT_EQ(h_.b().rnic->attach_mcast(r2.qp, v6_group()), 0);
  send(v6_group());
  expect_one(r1, 0);
  expect_one(r2, 0);
}

TEST_F(Mcast, DetachStopsDelivery) {
  Receiver r1 = receiver();
  Receiver r2 = receiver();
  ASSERT_EQ(h_.b().rnic->attach_mcast(r1.qp, v4_group()), 0);
  ASSERT_EQ(h_.b().rnic->attach_mcast(r2.qp, v4_group()), 0);
  ASSERT_EQ(h_.b().rnic->detach_mcast(r1.qp, v4_group()), 0);
  send(v4_group());
  expect_one(r2, 0);
  expect_none(r1);
  // The last one out removes the group: the next packet has none.
  ASSERT_EQ(h_.b().rnic->detach_mcast(r2.qp, v4_group()), 0);
  send(v4_group(), kUdQkey, 2);
  h_.run_until([&] { return b_ctr(RnicCtr::drop_mcast_no_group) == 1; });
  EXPECT_EQ(b_ctr(RnicCtr::drop_mcast_no_group), 1u);
  expect_none(r1);
  expect_none(r2);
  // Detaching again: not attached.
  EXPECT_EQ(h_.b().rnic->detach_mcast(r2.qp, v4_group()), EINVAL);
}

TEST_F(Mcast, OtherGroupNotDelivered) {
  Receiver r = receiver();
  ASSERT_EQ(h_.b().rnic->attach_mcast(r.qp, v4_group(3)), 0);
  send(v4_group(4));
  h_.run_until([&] { return b_ctr(RnicCtr::drop_mcast_no_group) == 1; });
  EXPECT_EQ(b_ctr(RnicCtr::drop_mcast_no_group), 1u);
  expect_none(r);
}

TEST_F(Mcast, QkeyCheckedPerQp) {
  Receiver good = receiver(kUdQkey);
  Receiver other = receiver(kUdQkey + 1);
  ASSERT_EQ(h_.b().rnic->attach_mcast(good.qp, v4_group()), 0);
  ASSERT_EQ(h_.b().rnic->attach_mcast(other.qp, v4_group()), 0);
  send(v4_group());
  expect_one(good, 0);
  expect_none(other);
  EXPECT_EQ(b_ctr(RnicCtr::drop_qkey), 1u);
  EXPECT_EQ(b_ctr(RnicCtr::rx_mcast_copies), 2u);
}

TEST_F(Mcast, NoReceiveWqeDropsOnlyThatCopy) {
  Receiver fed = receiver(kUdQkey, 1);
  Receiver empty = receiver(kUdQkey, 0);
  ASSERT_EQ(h_.b().rnic->attach_mcast(fed.qp, v4_group()), 0);
  ASSERT_EQ(h_.b().rnic->attach_mcast(empty.qp, v4_group()), 0);
  send(v4_group());
  expect_one(fed, 0);
  h_.run_until([&] { return b_ctr(RnicCtr::drop_no_recv_ud) == 1; });
  EXPECT_EQ(b_ctr(RnicCtr::drop_no_recv_ud), 1u);
}

TEST_F(Mcast, DestroyedQpLeavesItsGroups) {
  Receiver gone = receiver();
  Receiver stays = receiver();
  ASSERT_EQ(h_.b().rnic->attach_mcast(gone.qp, v4_group()), 0);
  ASSERT_EQ(h_.b().rnic->attach_mcast(stays.qp, v4_group()), 0);
  ASSERT_EQ(h_.b().rnic->destroy_qp(gone.qp), 0);
  send(v4_group());
  expect_one(stays, 0);
  EXPECT_EQ(b_ctr(RnicCtr::rx_mcast_copies), 1u);
}

TEST_F(Mcast, AttachRules) {
  Rnic& rb = *h_.b().rnic;
  // The limits query_device reports (those of rxe).
  EXPECT_EQ(rb.device_attr().max_mcast_grp, static_cast<int>(kMaxMcastGrp));
  EXPECT_EQ(rb.device_attr().max_mcast_qp_attach, static_cast<int>(kMaxMcastQpAttach));
  EXPECT_EQ(rb.device_attr().max_total_mcast_qp_attach, static_cast<int>(kMaxTotalMcastQpAttach));
  Receiver r = receiver();
  // Not a multicast GID; not a UD QP; a QP of another device.
  EXPECT_EQ(rb.attach_mcast(r.qp, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2}), EINVAL);
  Cq* cq = h_.cq(h_.b());
  Qp* rc = h_.qp(h_.b(), IBV_QPT_RC, cq, cq);
  ASSERT_NE(rc, nullptr);
  EXPECT_EQ(rb.attach_mcast(rc, v4_group()), EINVAL);
  EXPECT_EQ(rb.attach_mcast(sender_, v4_group()), EINVAL);
  EXPECT_EQ(rb.detach_mcast(r.qp, v4_group()), EINVAL);  // never attached
  // Attaching twice is one attachment.
  EXPECT_EQ(rb.attach_mcast(r.qp, v4_group()), 0);
  EXPECT_EQ(rb.attach_mcast(r.qp, v4_group()), 0);
  EXPECT_EQ(rb.detach_mcast(r.qp, v4_group()), 0);
  EXPECT_EQ(rb.detach_mcast(r.qp, v4_group()), EINVAL);
}

TEST_F(Mcast, QpsPerGroupLimit) {
  Rnic& rb = *h_.b().rnic;
  std::vector<Qp*> qps;
  Cq* cq = h_.cq(h_.b());
  for (uint32_t i = 0; i <= kMaxMcastQpAttach; ++i) {
    Qp* q = h_.qp(h_.b(), IBV_QPT_UD, cq, cq, QpCaps{.max_send_wr = 1, .max_recv_wr = 1});
    ASSERT_NE(q, nullptr);
    qps.push_back(q);
  }
  for (uint32_t i = 0; i < kMaxMcastQpAttach; ++i) ASSERT_EQ(rb.attach_mcast(qps[i], v4_group()), 0) << i;
  EXPECT_EQ(rb.attach_mcast(qps.back(), v4_group()), ENOMEM);
  // Another group still takes it; and a place freed in the first is reusable.
  EXPECT_EQ(rb.attach_mcast(qps.back(), v4_group(9)), 0);
  ASSERT_EQ(rb.detach_mcast(qps[0], v4_group()), 0);
  EXPECT_EQ(rb.attach_mcast(qps.back(), v4_group()), 0);
}

TEST_F(Mcast, GroupLimit) {
  Rnic& rb = *h_.b().rnic;
  Receiver r = receiver();
  wire::Ipv6Addr g = v6_group();
  for (uint32_t i = 0; i < kMaxMcastGrp; ++i) {
    g[14] = static_cast<uint8_t>(i >> 8);
    g[15] = static_cast<uint8_t>(i);
    ASSERT_EQ(rb.attach_mcast(r.qp, g), 0) << i;
  }
  g[13] = 1;  // one more group
  EXPECT_EQ(rb.attach_mcast(r.qp, g), ENOMEM);
  // An existing group still takes another QP.
  Receiver r2 = receiver();
  g[13] = 0;
  EXPECT_EQ(rb.attach_mcast(r2.qp, g), 0);
}

}  // namespace
}  // namespace uroce::rnic::testing
