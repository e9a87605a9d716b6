// The tcx ingress filter that spares the kernel's stack our RoCE frames
// (drivers/ingress_filter.hpp): what its program drops, run by the kernel
// on frames (BPF_PROG_TEST_RUN); and on a live interface, that the stack
// no longer receives what it drops, that packet sockets still do, and
// that the stack receives it again once the filter is gone.  Needs root
// (CAP_BPF, CAP_NET_ADMIN, a network namespace of its own) and, for the
// live part, Linux 6.6's tcx: skipped with the reason otherwise.
#include "drivers/ingress_filter.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace uroce::drivers {
namespace {

wire::Ipv6Addr v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, a, b, c, d};
}
wire::Ipv6Addr v6(uint16_t first, uint16_t last) {
  wire::Ipv6Addr a{};
  a[0] = static_cast<uint8_t>(first >> 8);
  a[1] = static_cast<uint8_t>(first);
  a[14] = static_cast<uint8_t>(last >> 8);
  a[15] = static_cast<uint8_t>(last);
  return a;
}

void put16(std::vector<uint8_t>& f, size_t at, uint16_t v) {
  f[at] = static_cast<uint8_t>(v >> 8);
  f[at + 1] = static_cast<uint8_t>(v);
}

// Ethernet + IPv4 (20 bytes) + UDP + 16 bytes of payload.
std::vector<uint8_t> udp4(const wire::Ipv6Addr& dst, uint16_t dport) {
  std::vector<uint8_t> f(14 + 20 + 8 + 16, 0);
  put16(f, 12, 0x0800);
  f[14] = 0x45;
  put16(f, 16, static_cast<uint16_t>(f.size() - 14));
  put16(f, 20, 0x4000);  // DF
  f[22] = 64;
  f[23] = 17;
  std::memcpy(&f[26], &v4(10, 0, 0, 9)[12], 4);
  std::memcpy(&f[30], &dst[12], 4);
  put16(f, 34, 49152);
  put16(f, 36, dport);
  put16(f, 38, static_cast<uint16_t>(f.size() - 34));
  return f;
}

// Ethernet + IPv6 + UDP + 16 bytes of payload.
std::vector<uint8_t> udp6(const wire::Ipv6Addr& dst, uint16_t dport) {
  std::vector<uint8_t> f(14 + 40 + 8 + 16, 0);
  put16(f, 12, 0x86dd);
  f[14] = 0x60;
  put16(f, 18, 8 + 16);
  f[20] = 17;
  f[21] = 64;
  f[22] = 0xfd;  // source fd00::9
  f[37] = 9;
  std::memcpy(&f[38], dst.data(), 16);
  put16(f, 54, 49152);
  put16(f, 56, dport);
  put16(f, 58, 8 + 16);
  return f;
}

class IngressProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<wire::Ipv6Addr> ours = {v4(10, 0, 0, 1), v6(0xfd00, 1), v4(192, 168, 7, 200)};
    const std::vector<bpf_insn> prog = roce_ingress_program(ours);
    auto fd = load_sched_cls(prog);
    if (!fd && (fd.error().code == EPERM || fd.error().code == ENOSYS)) {
      GTEST_SKIP() << "cannot load BPF programs here: " << fd.error().message;
    }
    ASSERT_TRUE(fd) << fd.error().message;
    fd_ = *fd;
  }
  void TearDown() override {
    if (fd_ >= 0) ::close(fd_);
  }
  int run(const std::vector<uint8_t>& frame) {
    auto rc = test_run_sched_cls(fd_, frame);
    EXPECT_TRUE(rc) << rc.error().message;
    return rc ? *rc : 0;
  }
  int fd_ = -1;
};

TEST_F(IngressProgram, DropsRoceToEachOfOurAddresses) {
  EXPECT_EQ(run(udp4(v4(10, 0, 0, 1), 4791)), kTcxDrop);
  // An address whose top bit is set: the compare is a 32-bit one.
  EXPECT_EQ(run(udp4(v4(192, 168, 7, 200), 4791)), kTcxDrop);
  EXPECT_EQ(run(udp6(v6(0xfd00, 1), 4791)), kTcxDrop);
}

TEST_F(IngressProgram, PassesEverythingElseOn) {
  EXPECT_EQ(run(udp4(v4(10, 0, 0, 2), 4791)), kTcxNext);        // not our address
  EXPECT_EQ(run(udp4(v4(192, 168, 7, 201), 4791)), kTcxNext);
  EXPECT_EQ(run(udp4(v4(10, 0, 0, 1), 4792)), kTcxNext);        // another port
  EXPECT_EQ(run(udp6(v6(0xfd00, 2), 4791)), kTcxNext);          // last word differs
  EXPECT_EQ(run(udp6(v6(0xfd01, 1), 4791)), kTcxNext);          // first word differs
  EXPECT_EQ(run(udp6(v6(0xfd00, 1), 4790)), kTcxNext);
  // An IPv4-mapped IPv6 destination is not our IPv4 address on the wire.
  EXPECT_EQ(run(udp6(v4(10, 0, 0, 1), 4791)), kTcxNext);

  auto tcp = udp4(v4(10, 0, 0, 1), 4791);
  tcp[23] = 6;
  EXPECT_EQ(run(tcp), kTcxNext);
  auto options = udp4(v4(10, 0, 0, 1), 4791);
  options[14] = 0x46;  // the UDP header is not where a 20-byte header puts it
  EXPECT_EQ(run(options), kTcxNext);
  auto fragment = udp4(v4(10, 0, 0, 1), 4791);
  put16(fragment, 20, 0x2000);  // more fragments: reassembly needs them all
  EXPECT_EQ(run(fragment), kTcxNext);
  put16(fragment, 20, 0x0010);  // a later fragment: bytes 36-37 are payload
  EXPECT_EQ(run(fragment), kTcxNext);
  auto tagged = udp4(v4(10, 0, 0, 1), 4791);
  put16(tagged, 12, 0x8100);
  EXPECT_EQ(run(tagged), kTcxNext);
  auto arp = udp4(v4(10, 0, 0, 1), 4791);
  put16(arp, 12, 0x0806);
  EXPECT_EQ(run(arp), kTcxNext);
  // Shorter than the loads: passed, not ended inside a load.
  auto runt = udp4(v4(10, 0, 0, 1), 4791);
  runt.resize(37);
  EXPECT_EQ(run(runt), kTcxNext);
  auto runt6 = udp6(v6(0xfd00, 1), 4791);
  runt6.resize(57);
  EXPECT_EQ(run(runt6), kTcxNext);
}

TEST(IngressFilter, NoAddressesIsAnError) {
  RoceIngressFilter f;
  EXPECT_FALSE(f.attach(1, {}));
  EXPECT_FALSE(f.attached());
}

// A UDP datagram to 127.0.0.1:4791 on a private loopback: the stack's
// socket gets it unless the filter is attached; a packet socket on lo
// gets it either way.
class IngressLive : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::unshare(CLONE_NEWNET) != 0) GTEST_SKIP() << "no network namespace of our own: " << std::strerror(errno);
    const int s = ::socket(AF_INET, SOCK_DGRAM, 0);
    ASSERT_GE(s, 0);
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    ASSERT_EQ(::ioctl(s, SIOCGIFFLAGS, &ifr), 0);
    ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP);
    ASSERT_EQ(::ioctl(s, SIOCSIFFLAGS, &ifr), 0);
    ::close(s);
    lo_ = static_cast<int>(::if_nametoindex("lo"));
    ASSERT_GT(lo_, 0);

    udp_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0);
    ASSERT_GE(udp_, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(4791);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(udp_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::connect(udp_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);  // sends to itself

    // ETH_P_ALL, as the af_packet PMD binds: the taps that run before tc
    // ingress (a socket bound to one protocol is a handler after it).
    pkt_ = ::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, htons(ETH_P_ALL));
    ASSERT_GE(pkt_, 0);
    sockaddr_ll ll{};
    ll.sll_family = AF_PACKET;
    ll.sll_protocol = htons(ETH_P_ALL);
    ll.sll_ifindex = lo_;
    ASSERT_EQ(::bind(pkt_, reinterpret_cast<sockaddr*>(&ll), sizeof ll), 0);
  }
  void TearDown() override {
    if (udp_ >= 0) ::close(udp_);
    if (pkt_ >= 0) ::close(pkt_);
  }
  // Sends one datagram; what each socket got of it.
  struct Seen {
    bool stack = false;
    bool tap = false;
  };
  Seen send_one() {
    drain(pkt_);
    const char msg[16] = "uroce";
    EXPECT_EQ(::send(udp_, msg, sizeof msg, 0), static_cast<ssize_t>(sizeof msg));
    Seen seen;
    pollfd p{pkt_, POLLIN, 0};
    if (::poll(&p, 1, 200) == 1) seen.tap = drain_incoming(pkt_) > 0;
    pollfd u{udp_, POLLIN, 0};
    if (::poll(&u, 1, 200) == 1) seen.stack = drain(udp_) > 0;
    return seen;
  }
  // Packets the tap saw arriving (lo's taps also copy what leaves).
  static int drain_incoming(int fd) {
    char buf[2048];
    int n = 0;
    sockaddr_ll from{};
    socklen_t len = sizeof from;
    while (::recvfrom(fd, buf, sizeof buf, 0, reinterpret_cast<sockaddr*>(&from), &len) > 0) {
      if (from.sll_pkttype == PACKET_HOST && from.sll_protocol == htons(ETH_P_IP)) ++n;
      len = sizeof from;
    }
    return n;
  }
  static int drain(int fd) {
    char buf[2048];
    int n = 0;
    while (::recv(fd, buf, sizeof buf, 0) > 0) ++n;
    return n;
  }
  int lo_ = 0;
  int udp_ = -1;
  int pkt_ = -1;
};

TEST_F(IngressLive, TheStackMissesWhatTheFilterDropsAndPacketSocketsStillSeeIt) {
  Seen before = send_one();
  EXPECT_TRUE(before.stack);
  EXPECT_TRUE(before.tap);

  RoceIngressFilter f;
  const wire::Ipv6Addr ours[] = {v4(127, 0, 0, 1)};
  Status st = f.attach(lo_, ours);
  if (!st && (st.error().code == EINVAL || st.error().code == EPERM)) {
    GTEST_SKIP() << "no tcx ingress here: " << st.error().message;
  }
  ASSERT_TRUE(st) << st.error().message;
  ASSERT_TRUE(f.attached());
  Seen during = send_one();
  EXPECT_FALSE(during.stack);
  EXPECT_TRUE(during.tap);

  // Another address on the same port: the stack keeps it.
  RoceIngressFilter other;
  const wire::Ipv6Addr not_lo[] = {v4(10, 0, 0, 1)};
  f.detach();
  ASSERT_TRUE(other.attach(lo_, not_lo));
  EXPECT_TRUE(send_one().stack);

  // The filter goes with its object: the stack hears 4791 again.
  other.detach();
  Seen after = send_one();
  EXPECT_TRUE(after.stack);
  EXPECT_TRUE(after.tap);
}

}  // namespace
}  // namespace uroce::drivers
