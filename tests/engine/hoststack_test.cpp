#include "transport/hoststack.hpp"

#include <gtest/gtest.h>

#include <array>

#include "lib/wire/arp.hpp"
#include "lib/wire/icmp.hpp"
#include "lib/wire/ipv6.hpp"

namespace uroce::transport {
namespace {

using namespace wire;
using Kind = HostAction::Kind;

IpAddr v6(std::initializer_list<uint8_t> tail_be) {
  Ipv6Addr a{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 16 - tail_be.size();
  for (uint8_t b : tail_be) a[i++] = b;
  return IpAddr::v6(a);
}

struct Hosts : ::testing::Test {
  LocalAddrs a, b;
  std::array<uint8_t, 256> f1{}, f2{};
  void SetUp() override {
    a.mac = {2, 0, 0, 0, 0, 0xa};
    b.mac = {2, 0, 0, 0, 0, 0xb};
    a.ips = {IpAddr::v4(0x0A000001), v6({1})};
    b.ips = {IpAddr::v4(0x0A000002), v6({2})};
  }
  HostAction deliver(const uint8_t* frame, size_t len, const LocalAddrs& to, uint8_t* out, bool answer = true) {
    std::span<const uint8_t> s(frame, len);
    return handle_host_frame(s, parse(s), to, answer, out, 256);
  }
};

TEST_F(Hosts, ArpRequestAnsweredAndLearnedBothWays) {
  const size_t n = build_arp_request(f1.data(), a, a.ips[0], b.ips[0]);
  EXPECT_EQ(n, kEthMinFrame);
  HostAction at_b = deliver(f1.data(), n, b, f2.data());
  EXPECT_EQ(at_b.kind, Kind::ArpRequest);
  ASSERT_TRUE(at_b.learned);
  EXPECT_EQ(at_b.learned->ip, a.ips[0]);
  EXPECT_EQ(at_b.learned->mac, a.mac);
  ASSERT_GT(at_b.reply_len, 0u);
  ArpC reply(f2.data() + Eth::kSize);
  EXPECT_EQ(reply.op(), kArpOpReply);
  EXPECT_EQ(EthC(f2.data()).dst(), a.mac);
  HostAction at_a = deliver(f2.data(), at_b.reply_len, a, f1.data());
  EXPECT_EQ(at_a.kind, Kind::ArpReply);
  ASSERT_TRUE(at_a.learned);
  EXPECT_TRUE(at_a.learned->solicited);
  EXPECT_EQ(at_a.learned->mac, b.mac);
  EXPECT_EQ(at_a.reply_len, 0u);
}

TEST_F(Hosts, ArpForSomeoneElseOnlyUpdates) {
  LocalAddrs c = b;
  c.ips = {IpAddr::v4(0x0A000003)};
  const size_t n = build_arp_request(f1.data(), a, a.ips[0], b.ips[0]);
  HostAction at_c = deliver(f1.data(), n, c, f2.data());
  EXPECT_EQ(at_c.kind, Kind::NotForUs);
  EXPECT_EQ(at_c.reply_len, 0u);
  ASSERT_TRUE(at_c.learned);
  EXPECT_FALSE(at_c.learned->solicited);
}

TEST_F(Hosts, NoAnswerWhenKernelAnswers) {
  const size_t n = build_arp_request(f1.data(), a, a.ips[0], b.ips[0]);
  HostAction at_b = deliver(f1.data(), n, b, f2.data(), /*answer=*/false);
  EXPECT_EQ(at_b.reply_len, 0u);
  EXPECT_TRUE(at_b.learned);
}

TEST_F(Hosts, IcmpEchoV4) {
  const std::array<uint8_t, 5> data{1, 2, 3, 4, 5};
  const size_t n = build_echo_request(f1.data(), a, b.mac, a.ips[0], b.ips[0], 7, 9, data);
  HostAction at_b = deliver(f1.data(), n, b, f2.data());
  EXPECT_EQ(at_b.kind, Kind::IcmpEcho);
  ASSERT_GT(at_b.reply_len, 0u);
  const PktInfo pi = parse({f2.data(), at_b.reply_len});
  ASSERT_EQ(pi.cls, FrameClass::ICMPv4);
  IcmpC icmp(f2.data() + pi.l4_off);
  EXPECT_EQ(icmp.type(), kIcmpEchoReply);
  EXPECT_EQ(icmp.rest(), (7u << 16) | 9u);
  EXPECT_EQ(icmp4_checksum(f2.data() + pi.l4_off, pi.l3_end - pi.l4_off), 0);
  EXPECT_EQ(f2[pi.l4_off + 8 + 4], 5);
  // A corrupted request is ignored.
  f1[Eth::kSize + 20 + 8 + 2] ^= 0xff;  // a data byte inside the ICMP message
  EXPECT_EQ(deliver(f1.data(), n, b, f2.data()).reply_len, 0u);
}

TEST_F(Hosts, NeighborSolicitAdvertAndEchoV6) {
  const size_t n = build_neighbor_solicit(f1.data(), a, a.ips[1], b.ips[1]);
  EXPECT_EQ(EthC(f1.data()).dst(), (MacAddr{0x33, 0x33, 0xff, 0, 0, 2}));
  HostAction at_b = deliver(f1.data(), n, b, f2.data());
  EXPECT_EQ(at_b.kind, Kind::NdSolicit);
  ASSERT_TRUE(at_b.learned);
  EXPECT_EQ(at_b.learned->mac, a.mac);
  ASSERT_GT(at_b.reply_len, 0u);
  HostAction at_a = deliver(f2.data(), at_b.reply_len, a, f1.data());
  EXPECT_EQ(at_a.kind, Kind::NdAdvert);
  ASSERT_TRUE(at_a.learned);
  EXPECT_TRUE(at_a.learned->solicited);
  EXPECT_EQ(at_a.learned->ip, b.ips[1]);
  EXPECT_EQ(at_a.learned->mac, b.mac);

  const std::array<uint8_t, 3> data{9, 8, 7};
  const size_t e = build_echo_request(f1.data(), a, b.mac, a.ips[1], b.ips[1], 1, 2, data);
  HostAction echo = deliver(f1.data(), e, b, f2.data());
  EXPECT_EQ(echo.kind, Kind::Icmp6Echo);
  ASSERT_GT(echo.reply_len, 0u);
  const PktInfo pi = parse({f2.data(), echo.reply_len});
  Ipv6C ip(f2.data() + pi.l3_off);
  EXPECT_EQ(icmp6_checksum(ip.src(), ip.dst(), f2.data() + pi.l4_off, pi.l3_end - pi.l4_off), 0);
  EXPECT_EQ(IcmpC(f2.data() + pi.l4_off).type(), kIcmp6EchoReply);
  EXPECT_EQ(IpAddr::v6(ip.dst()), a.ips[1]);
}

TEST_F(Hosts, VlanTagsAreKeptOnReplies) {
  a.vlan_count = 1;
  a.vlans[0] = VlanTag{kEtherTypeVlan, 100};
  const size_t n = build_arp_request(f1.data(), a, a.ips[0], b.ips[0]);
  HostAction at_b = deliver(f1.data(), n, b, f2.data());
  ASSERT_GT(at_b.reply_len, 0u);
  const PktInfo pi = parse({f2.data(), at_b.reply_len});
  EXPECT_EQ(pi.vlan_count, 1);
  EXPECT_EQ(pi.vlans[0].tci, 100);
}

}  // namespace
}  // namespace uroce::transport
