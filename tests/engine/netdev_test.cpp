#include "drivers/netdev.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <net/if.h>
#include <sched.h>

#include <cstdlib>
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


// The kernel's neighbour table through netlink, in a network namespace of
// the test's own (a death-test child, so the test process keeps its own):
// a veth pair, a permanent entry found with its MAC, an unknown address not
// found, and kernel_solicit making the kernel start resolving one.
int kernel_neighbour_checks() {
  if (::unshare(CLONE_NEWNET) != 0) return 10;
  if (std::system("ip link add un0 type veth peer name un1 && ip link set un0 up && ip link set un1 up && "
                  "ip addr add 10.77.0.1/24 dev un0 && "
                  "ip neigh replace 10.77.0.2 lladdr 02:00:00:77:00:02 dev un0 nud permanent && "
                  "ip -6 addr add fd77::1/64 dev un0 nodad && "
                  "ip -6 neigh replace fd77::2 lladdr 02:00:00:77:00:06 dev un0 nud permanent") != 0) {
    return 11;
  }
  const int ifindex = static_cast<int>(if_nametoindex("un0"));
  if (ifindex == 0) return 12;
  wire::Ipv6Addr v4{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 2};
  auto mac = kernel_neighbour(ifindex, v4);
  if (!mac || *mac != wire::MacAddr{2, 0, 0, 0x77, 0, 2}) return 13;
  if (!kernel_neighbour(0, v4)) return 14;  // any interface
  wire::Ipv6Addr v6{0xfd, 0x77, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  mac = kernel_neighbour(ifindex, v6);
  if (!mac || *mac != wire::MacAddr{2, 0, 0, 0x77, 0, 6}) return 15;
  wire::Ipv6Addr unknown{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 77, 0, 3};
  if (kernel_neighbour(ifindex, unknown)) return 16;
  // The kernel now has an entry for it (incomplete, so still not usable).
  if (!kernel_solicit(ifindex, unknown)) return 17;
  if (kernel_neighbour(ifindex, unknown)) return 18;
  if (std::system("ip neigh show 10.77.0.3 dev un0 | grep -q 10.77.0.3") != 0) return 19;
  return 0;
}

TEST(NetdevDeathTest, KernelNeighbourTable) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a network namespace)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(kernel_neighbour_checks()), ::testing::ExitedWithCode(0), "")
      << "exit codes: 10 unshare, 11 ip setup, 13 IPv4 entry, 14 any-interface lookup, 15 IPv6 entry, "
         "16 unknown address found, 17 solicit failed, 18 incomplete entry reported usable, 19 no entry after solicit";
}

// The kernel's route through an interface (kernel_gateway), in a
// namespace of the test's own: an on-link address has no gateway, one
// behind a route has the route's, the default route's gateway answers for
// the rest, IPv6 likewise, and asking through an interface with no route
// there answers nothing.
int kernel_gateway_checks() {
  if (::unshare(CLONE_NEWNET) != 0) return 10;
  if (std::system("ip link add un0 type veth peer name un1 && ip link set un0 up && ip link set un1 up && "
                  "ip link add un2 type veth peer name un3 && ip link set un2 up && ip link set un3 up && "
                  "ip addr add 10.78.0.1/24 dev un0 && ip addr add 10.79.0.1/24 dev un2 && "
                  "ip route add 10.80.0.0/16 via 10.78.0.254 dev un0 && "
                  "ip route add default via 10.78.0.253 dev un0 && "
                  "ip -6 addr add fd78::1/64 dev un0 nodad && "
                  "ip -6 route add fd80::/48 via fd78::fe dev un0") != 0) {
    return 11;
  }
  const int un0 = static_cast<int>(if_nametoindex("un0"));
  const int un2 = static_cast<int>(if_nametoindex("un2"));
  if (un0 == 0 || un2 == 0) return 12;
  auto v4 = [](uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    return wire::Ipv6Addr{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
  };
  if (kernel_gateway(un0, v4(10, 78, 0, 9))) return 13;  // on the link
  if (kernel_gateway(un0, v4(10, 80, 3, 4)) != v4(10, 78, 0, 254)) return 14;
  if (kernel_gateway(un0, v4(192, 0, 2, 1)) != v4(10, 78, 0, 253)) return 15;  // the default route
  const wire::Ipv6Addr far6{0xfd, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const wire::Ipv6Addr gw6{0xfd, 0x78, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xfe};
  if (kernel_gateway(un0, far6) != gw6) return 16;
  if (kernel_gateway(un2, v4(10, 80, 3, 4))) return 17;  // no route through un2 to there
  return 0;
}

TEST(NetdevDeathTest, KernelGateway) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (a network namespace)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(kernel_gateway_checks()), ::testing::ExitedWithCode(0), "")
      << "exit codes: 10 unshare, 11 ip setup, 13 on-link address given a gateway, 14 a route's gateway, "
         "15 the default route's, 16 IPv6, 17 a gateway through an interface with no route";
}

}  // namespace
}  // namespace uroce::drivers
