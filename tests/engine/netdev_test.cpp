#include "drivers/netdev.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace uroce::drivers {
namespace {

TEST(Netdev, LoopbackHasItsAddress) {
  std::string err;
  auto lo = query_netdev("lo", &err);
  ASSERT_TRUE(lo.has_value()) << err;
  EXPECT_GT(lo->ifindex, 0);
  EXPECT_GT(lo->mtu, 0u);
  bool found = false;
  for (const auto& a : lo->addrs) {
    if (!a.ipv6 && a.addr[12] == 127 && a.addr[15] == 1) {
      found = true;
      EXPECT_EQ(a.prefix, 8);
    }
  }
  EXPECT_TRUE(found) << "127.0.0.1/8 not reported on lo";
}

TEST(Netdev, MissingDeviceIsAnError) {
  std::string err;
  EXPECT_FALSE(query_netdev("no-such-dev0", &err).has_value());
  EXPECT_NE(err.find("no-such-dev0"), std::string::npos);
}

TEST(Netdev, ClaimHoldsPort4791AndCoexists) {
  Udp4791Claim a, b;
  std::string err;
  ASSERT_TRUE(a.open(&err)) << err;
  ASSERT_TRUE(b.open(&err)) << err;  // SO_REUSEPORT: a second process/port too
  EXPECT_TRUE(a.claimed_v4());
  // A datagram to 127.0.0.1:4791 is absorbed, not refused: a connected
  // sender would see ECONNREFUSED on its next call if ICMP port-unreachable
  // had come back.
  const int s = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(s, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(4791);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(s, reinterpret_cast<sockaddr*>(&to), sizeof to), 0);
  const char msg[16] = {};
  EXPECT_EQ(::send(s, msg, sizeof msg, 0), static_cast<ssize_t>(sizeof msg));
  ::usleep(20'000);
  EXPECT_EQ(::send(s, msg, sizeof msg, 0), static_cast<ssize_t>(sizeof msg));
  ::close(s);
}

}  // namespace
}  // namespace uroce::drivers
