// DpdkPort over in-process vdevs (no root, no kernel): net_ring (a
// loopback: RX and TX are one ring) and net_null (a sink and a source);
// and, as root, net_af_packet on a veth of a network namespace of the
// test's own (its kernel ring).  The EAL starts once in
// tests/drivers/main_eal.cpp.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "drivers/dpdk/dpdk_port.hpp"

namespace uroce::drivers::dpdk {
namespace {

constexpr uint16_t kFrameLen = 60;

std::unique_ptr<DpdkPort> open_ok(DpdkPortConfig cfg) {
  auto p = DpdkPort::open(cfg);
  EXPECT_TRUE(p) << p.error().message;
  return p ? std::move(*p) : nullptr;
}

rte_mbuf* frame(rte_mempool* pool, uint8_t tag) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool);
  EXPECT_NE(m, nullptr);
  auto* p = rte_pktmbuf_mtod(m, uint8_t*);
  std::memset(p, tag, kFrameLen);
  m->data_len = kFrameLen;
  m->pkt_len = kFrameLen;
  return m;
}

TEST(DpdkPort, RingLoopbackCarriesFrames) {
  auto port = open_ok({.devargs = "net_ring0"});
  ASSERT_TRUE(port);
  EXPECT_TRUE(port->probed_here());
  EXPECT_EQ(port->driver(), "net_ring");
  EXPECT_EQ(port->netdev_role(), NetdevRole::kNone);
  EXPECT_EQ(port->netdev(), "");
  EXPECT_EQ(port->name(), "net_ring0");
  EXPECT_TRUE(port->link_up());
  EXPECT_EQ(port->mtu(), 1500);
  ASSERT_NE(port->pool(), nullptr);

  constexpr uint16_t kN = 16;
  std::array<rte_mbuf*, kN> out;
  for (uint16_t i = 0; i < kN; ++i) out[i] = frame(port->pool(), static_cast<uint8_t>(i));
  ASSERT_EQ(port->tx_burst(out.data(), kN), kN);
  std::array<rte_mbuf*, kN> in{};
  ASSERT_EQ(port->rx_burst(in.data(), kN), kN);
  for (uint16_t i = 0; i < kN; ++i) {
    EXPECT_EQ(in[i]->data_len, kFrameLen);
    EXPECT_EQ(rte_pktmbuf_mtod(in[i], uint8_t*)[0], i);
  }
  rte_pktmbuf_free_bulk(in.data(), kN);
  const PortStats s = port->stats();
  EXPECT_EQ(s.tx_frames, kN);
  EXPECT_EQ(s.rx_frames, kN);
}

TEST(DpdkPort, NullIsASinkAndASource) {
  auto port = open_ok({.devargs = "net_null0"});
  ASSERT_TRUE(port);
  EXPECT_EQ(port->driver(), "net_null");
  std::array<rte_mbuf*, 8> bufs;
  for (auto& m : bufs) m = frame(port->pool(), 1);
  EXPECT_EQ(port->tx_burst(bufs.data(), bufs.size()), bufs.size());  // freed by the PMD
  EXPECT_EQ(port->rx_burst(bufs.data(), bufs.size()), bufs.size());
  rte_pktmbuf_free_bulk(bufs.data(), bufs.size());
  EXPECT_EQ(port->stats().tx_frames, bufs.size());
}

TEST(DpdkPort, OneEthdevOneOpener) {
  auto first = open_ok({.devargs = "net_ring1"});
  ASSERT_TRUE(first);
  auto second = DpdkPort::open({.devargs = "net_ring1"});
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, EBUSY);
  EXPECT_TRUE(first->link_up());  // the failed open left the first one alone
}

TEST(DpdkPort, ClosingRemovesWhatItProbed) {
  uint16_t id = 0;
  {
    auto port = open_ok({.devargs = "net_ring2"});
    ASSERT_TRUE(port);
    EXPECT_EQ(rte_eth_dev_get_port_by_name("net_ring2", &id), 0);
  }
  EXPECT_NE(rte_eth_dev_get_port_by_name("net_ring2", &id), 0);
  auto again = open_ok({.devargs = "net_ring2"});  // and it can be made again
  EXPECT_TRUE(again);
}

TEST(DpdkPort, SeveralPortsAtOnce) {
  auto a = open_ok({.devargs = "net_ring3"});
  auto b = open_ok({.devargs = "net_ring4"});
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->port_id(), b->port_id());
  EXPECT_NE(a->pool(), b->pool());
  rte_mbuf* m = frame(a->pool(), 7);
  ASSERT_EQ(a->tx_burst(&m, 1), 1);
  rte_mbuf* got = nullptr;
  EXPECT_EQ(b->rx_burst(&got, 1), 0);  // separate loopbacks
  ASSERT_EQ(a->rx_burst(&got, 1), 1);
  rte_pktmbuf_free(got);
}

TEST(DpdkPort, MtuAndMacWithoutAPmdOperationAreCarried) {
  const wire::MacAddr mac{0x02, 0, 0, 0, 0x12, 0x34};
  auto port = open_ok({.devargs = "net_ring5", .mtu = 9000, .mac = mac});
  ASSERT_TRUE(port);
  EXPECT_EQ(port->mtu(), 9000);
  EXPECT_EQ(port->mac(), mac);
}

TEST(DpdkPort, MtuBeyondOneMbufFails) {
  auto port = DpdkPort::open({.devargs = "net_ring6", .mtu = 9300});
  ASSERT_FALSE(port);
  EXPECT_NE(port.error().message.find("rte_eth_dev_set_mtu"), std::string::npos) << port.error().message;
}

TEST(DpdkPort, UsesAGivenPool) {
  auto pool = create_pktmbuf_pool({.mbufs = 1023});
  ASSERT_TRUE(pool) << pool.error().message;
  {
    auto port = open_ok({.devargs = "net_ring7", .pool = *pool});
    ASSERT_TRUE(port);
    EXPECT_EQ(port->pool(), *pool);
  }
  rte_mempool_free(*pool);  // still ours after the port closed
}

TEST(DpdkPort, ErrorsNameTheDevice) {
  auto bad = DpdkPort::open({.devargs = "net_nosuchpmd0,x=1"});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("rte_vdev_init(net_nosuchpmd0"), std::string::npos) << bad.error().message;
  auto no_iface = DpdkPort::open({.devargs = "net_af_packet9,iface=uroce-no-such-if"});
  ASSERT_FALSE(no_iface);
  EXPECT_NE(no_iface.error().message.find("net_af_packet9"), std::string::npos) << no_iface.error().message;
  auto empty = DpdkPort::open({.devargs = ""});
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, EINVAL);
}

// net_af_packet on one end of a veth in a network namespace of the
// test's own; frames are sent into the other end by a packet socket.  The
// calling thread goes back to its namespace at the end.
class AfPacketVeth : public ::testing::Test {
 protected:
  static constexpr uint16_t kEtherType = 0x88b5;  // IEEE local experimental
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (a network namespace, a veth)";
    home_ns_ = ::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(home_ns_, 0) << std::strerror(errno);
    if (::unshare(CLONE_NEWNET) != 0) GTEST_SKIP() << "no network namespace of our own: " << std::strerror(errno);
    // No IPv6 on the new links: no DAD or MLD frame in the ring, only ours.
    ASSERT_EQ(std::system("sysctl -qw net.ipv6.conf.default.disable_ipv6=1 net.ipv6.conf.all.disable_ipv6=1 && "
                          "ip link add uroce-ra type veth peer name uroce-rb && "
                          "ip link set uroce-ra up && ip link set uroce-rb up"),
              0);
    tx_ = far_end_socket(0);
    ASSERT_GE(tx_, 0) << std::strerror(errno);
  }
  void TearDown() override {
    port_.reset();
    if (tx_ >= 0) ::close(tx_);
    if (home_ns_ >= 0) {
      EXPECT_EQ(::setns(home_ns_, CLONE_NEWNET), 0) << std::strerror(errno);  // the veth goes with its namespace
      ::close(home_ns_);
    }
  }
  // A packet socket bound to `iface` for `protocol` (0: it sends only); -1
  // on failure.
  static int packet_socket(const char* iface, uint16_t protocol, int flags) {
    const int fd = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC | flags, htons(protocol));
    if (fd < 0) return -1;
    sockaddr_ll ll{};
    ll.sll_family = AF_PACKET;
    ll.sll_protocol = htons(protocol);
    ll.sll_ifindex = static_cast<int>(::if_nametoindex(iface));
    if (ll.sll_ifindex > 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&ll), sizeof ll) == 0) return fd;
    ::close(fd);
    return -1;
  }
  // The inodes of the packet sockets that receive every protocol on
  // `iface` (/proc/net/packet: sk RefCnt Type Proto Iface R Rmem User Inode).
  static std::vector<unsigned long> receivers(const char* iface) {
    const std::string ifindex = std::to_string(::if_nametoindex(iface));
    std::ifstream table("/proc/thread-self/net/packet");
    std::string line;
    std::getline(table, line);
    std::vector<unsigned long> all_protocols;
    while (std::getline(table, line)) {
      std::istringstream in(line);
      std::string sk, refs, type, proto, ifi, r, rmem, user;
      unsigned long inode = 0;
      in >> sk >> refs >> type >> proto >> ifi >> r >> rmem >> user >> inode;
      if (ifi == ifindex && proto == "0003") all_protocols.push_back(inode);
    }
    return all_protocols;
  }
  // receivers() once a port's retired PMD socket has left: the kernel
  // releases it on a thread of the port's a few RCU grace periods after
  // open returns (retire_packet_socket), within a second.
  static std::vector<unsigned long> settled_receivers(const char* iface) {
    std::vector<unsigned long> all_protocols = receivers(iface);
    for (int i = 0; i < 100 && all_protocols.size() > 1; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      all_protocols = receivers(iface);
    }
    return all_protocols;
  }
  // The mempools of the process.
  static unsigned mempools() {
    unsigned n = 0;
    rte_mempool_walk([](rte_mempool*, void* arg) { ++*static_cast<unsigned*>(arg); }, &n);
    return n;
  }
  // A packet socket on the veth's far end for our EtherType; -1 on failure.
  static int far_end_socket(int flags) { return packet_socket("uroce-rb", kEtherType, flags); }
  // Frame number `seq` of our EtherType (broadcast) in the kFrameLen bytes at `f`.
  static void stamp(uint8_t* f, uint32_t seq) {
    std::memset(f, 0xff, 6);
    f[12] = kEtherType >> 8;
    f[13] = kEtherType & 0xff;
    std::memcpy(f + 14, &seq, sizeof seq);
  }
  // The number of a frame of ours, nullopt for any other frame.
  static std::optional<uint32_t> seq_of(const uint8_t* f, size_t len) {
    if (len < 18 || f[12] != (kEtherType >> 8) || f[13] != (kEtherType & 0xff)) return std::nullopt;
    uint32_t seq = 0;
    std::memcpy(&seq, f + 14, sizeof seq);
    return seq;
  }
  // Frames of our EtherType, numbered from `first`.
  void send(uint32_t first, uint32_t n) {
    std::array<uint8_t, kFrameLen> f{};
    for (uint32_t i = first; i < first + n; ++i) {
      stamp(f.data(), i);
      ASSERT_EQ(::send(tx_, f.data(), f.size(), 0), static_cast<ssize_t>(f.size())) << std::strerror(errno);
    }
  }
  // Polls the port dry; how many of our frames it held, each checked to
  // come in order from `first`.
  uint32_t drain(uint32_t first) {
    uint32_t ours = 0;
    std::array<rte_mbuf*, 32> in{};
    for (uint16_t n; (n = port_->rx_burst(in.data(), in.size())) > 0;) {
      for (uint16_t k = 0; k < n; ++k) {
        if (const auto seq = seq_of(rte_pktmbuf_mtod(in[k], const uint8_t*), in[k]->data_len)) {
          EXPECT_EQ(*seq, first + ours);
          ++ours;
        }
      }
      rte_pktmbuf_free_bulk(in.data(), n);
    }
    return ours;
  }
  int home_ns_ = -1;
  int tx_ = -1;
  std::unique_ptr<DpdkPort> port_;
};

// The ring holds far more than the PMD's 512 frames while nobody polls
// (a receiver off its CPU), and what it has no room for is counted in
// rx_dropped, frame for frame (DPDK 22.11's PMD counts none of it).
TEST_F(AfPacketVeth, TheRingHoldsWhatArrivesWhileNobodyPollsAndCountsWhatItDrops) {
  port_ = open_ok({.devargs = "net_af_packet7,iface=uroce-ra"});
  ASSERT_TRUE(port_);
  EXPECT_NE(port_->name().find("framecnt=" + std::to_string(kAfPacketRingFrames)), std::string::npos)
      << port_->name();
  EXPECT_EQ(port_->stats().rx_dropped, 0u);

  constexpr uint32_t kHeld = 3000;  // six PMD rings' worth, within ours
  send(0, kHeld);
  EXPECT_EQ(drain(0), kHeld);
  EXPECT_EQ(port_->stats().rx_dropped, 0u);

  constexpr uint32_t kOver = kAfPacketRingFrames + 1500;
  send(kHeld, kOver);
  EXPECT_EQ(drain(kHeld), kAfPacketRingFrames);  // the ring full: the oldest kept
  EXPECT_EQ(port_->stats().rx_dropped, kOver - kAfPacketRingFrames);
  EXPECT_EQ(port_->stats().rx_dropped, kOver - kAfPacketRingFrames);  // reading does not lose or double the count

  send(kHeld + kOver, 10);  // and the port goes on
  EXPECT_EQ(drain(kHeld + kOver), 10u);
}

// What the port sends reaches the far end whole and in order, leaves no
// copy in its own ring (it bypasses the qdisc, and so the netdev's taps),
// and is counted; a frame the link cannot carry is
// dropped and counted, never handed back as unsent (tx_burst would offer
// it again forever).
TEST_F(AfPacketVeth, SendsInOrderSeesNoneOfItsOwnAndDropsWhatTheLinkCannotCarry) {
  port_ = open_ok({.devargs = "net_af_packet10,iface=uroce-ra"});
  ASSERT_TRUE(port_);
  const int rx = far_end_socket(SOCK_NONBLOCK);
  ASSERT_GE(rx, 0) << std::strerror(errno);

  constexpr uint16_t kN = 200;  // several of sendmmsg's batches
  std::array<rte_mbuf*, kN> out{};
  for (uint16_t i = 0; i < kN; ++i) {
    out[i] = frame(port_->pool(), 0);
    stamp(rte_pktmbuf_mtod(out[i], uint8_t*), i);
  }
  uint16_t sent = 0;
  for (int tries = 0; sent < kN && tries < 1000; ++tries) {
    sent = static_cast<uint16_t>(sent + port_->tx_burst(out.data() + sent, static_cast<uint16_t>(kN - sent)));
  }
  ASSERT_EQ(sent, kN);
  uint32_t got = 0;
  std::array<uint8_t, 2048> buf{};
  for (ssize_t len; (len = ::recv(rx, buf.data(), buf.size(), 0)) > 0;) {
    ASSERT_EQ(len, kFrameLen);
    EXPECT_EQ(seq_of(buf.data(), static_cast<size_t>(len)), got);
    ++got;
  }
  ::close(rx);
  EXPECT_EQ(got, kN);
  EXPECT_EQ(drain(0), 0u);  // nothing of its own came back
  PortStats s = port_->stats();
  EXPECT_EQ(s.tx_frames, kN);
  EXPECT_EQ(s.tx_bytes, uint64_t{kN} * kFrameLen);
  EXPECT_EQ(s.tx_dropped, 0u);

  // Longer than the veth's MTU allows: taken, dropped, counted.
  rte_mbuf* big = rte_pktmbuf_alloc(port_->pool());
  ASSERT_NE(big, nullptr);
  ASSERT_NE(rte_pktmbuf_append(big, 1600), nullptr);
  std::memset(rte_pktmbuf_mtod(big, uint8_t*), 0xff, 1600);
  EXPECT_EQ(port_->tx_burst(&big, 1), 1);
  s = port_->stats();
  EXPECT_EQ(s.tx_dropped, 1u);
  EXPECT_EQ(s.tx_frames, kN);
}

// Geometry given in the devargs decides, the PMD's 512 frames included.
TEST_F(AfPacketVeth, DevargsGeometryDecides) {
  port_ = open_ok({.devargs = "net_af_packet8,iface=uroce-ra,framecnt=512"});
  ASSERT_TRUE(port_);
  send(0, 600);
  EXPECT_EQ(drain(0), 512u);
  EXPECT_EQ(port_->stats().rx_dropped, 88u);
}


// The port receives on a ring of its own, in no fanout group (each frame
// would cost the kernel a flow hash), and the PMD's socket is gone from
// the netdev, so each frame is taken once: one socket of every protocol
// on the near end, and it is the one the port waits on.
TEST_F(AfPacketVeth, ReceivesOnARingOfItsOwnAndThePmdSocketIsGone) {
  port_ = open_ok({.devargs = "net_af_packet11,iface=uroce-ra"});
  ASSERT_TRUE(port_);
  EXPECT_TRUE(port_->own_packet_path());
  const int fd = port_->wait_fd();
  ASSERT_GE(fd, 0);
  int fanout = -1;
  socklen_t len = sizeof fanout;
  ASSERT_EQ(::getsockopt(fd, SOL_PACKET, PACKET_FANOUT, &fanout, &len), 0) << std::strerror(errno);
  EXPECT_EQ(fanout, 0) << "the receiving socket is in a fanout group";
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  const std::vector<unsigned long> all_protocols = settled_receivers("uroce-ra");
  ASSERT_EQ(all_protocols.size(), 1u) << "the PMD's socket still receives beside ours";
  EXPECT_EQ(all_protocols[0], st.st_ino);

  send(0, 100);
  EXPECT_EQ(drain(0), 100u);  // each once, in order
  const PortStats s = port_->stats();
  EXPECT_EQ(s.rx_frames, 100u);
  EXPECT_EQ(s.rx_bytes, 100u * kFrameLen);
  EXPECT_EQ(s.rx_dropped, 0u);
}

// The kernel takes an 802.1Q tag out of a received frame before the
// packet sockets see it; the port puts it back where it was (the engine
// parses tags itself), and the frame is as it was on the wire.
TEST_F(AfPacketVeth, AReceivedVlanTagIsPutBack) {
  port_ = open_ok({.devargs = "net_af_packet12,iface=uroce-ra"});
  ASSERT_TRUE(port_);
  std::array<uint8_t, kFrameLen + 4> f{};
  std::memset(f.data(), 0xff, 6);
  for (size_t i = 6; i < 12; ++i) f[i] = static_cast<uint8_t>(0x10 + i);
  const std::array<uint8_t, 6> tag_and_type{0x81, 0x00, 0x20, 0x07, kEtherType >> 8, kEtherType & 0xff};  // PCP 1, VID 7
  std::memcpy(f.data() + 12, tag_and_type.data(), tag_and_type.size());
  for (size_t i = 18; i < f.size(); ++i) f[i] = static_cast<uint8_t>(i);
  ASSERT_EQ(::send(tx_, f.data(), f.size(), 0), static_cast<ssize_t>(f.size())) << std::strerror(errno);
  std::array<rte_mbuf*, 8> in{};
  uint16_t n = 0;
  for (int tries = 0; n == 0 && tries < 1000; ++tries) n = port_->rx_burst(in.data(), in.size());
  ASSERT_EQ(n, 1);
  ASSERT_EQ(in[0]->data_len, f.size());
  EXPECT_EQ(std::memcmp(rte_pktmbuf_mtod(in[0], const uint8_t*), f.data(), f.size()), 0);
  rte_pktmbuf_free(in[0]);
}

// What the host's own stack sends on the netdev (its ARP and ICMP answers,
// its TCP) reaches the port, as it reached the PMD's socket: the engine's
// capture shows both sides of the host's conversations (interop's
// rxe-peer counts the kernel's echo replies in it).
TEST_F(AfPacketVeth, WhatTheHostSendsOnTheNetdevReachesThePort) {
  port_ = open_ok({.devargs = "net_af_packet13,iface=uroce-ra"});
  ASSERT_TRUE(port_);
  const int host = packet_socket("uroce-ra", 0, 0);
  ASSERT_GE(host, 0) << std::strerror(errno);
  const int far = far_end_socket(SOCK_NONBLOCK);
  ASSERT_GE(far, 0) << std::strerror(errno);
  std::array<uint8_t, kFrameLen> f{};
  stamp(f.data(), 42);
  ASSERT_EQ(::send(host, f.data(), f.size(), 0), static_cast<ssize_t>(f.size())) << std::strerror(errno);
  std::array<uint8_t, 2048> buf{};
  ssize_t got = -1;
  for (int tries = 0; got < 0 && tries < 1000; ++tries) got = ::recv(far, buf.data(), buf.size(), 0);
  ::close(far);
  ::close(host);
  ASSERT_EQ(got, kFrameLen);
  EXPECT_EQ(drain(42), 1u);
}

// A netdev that goes down and up again (the kernel unhooks its packet
// sockets while it is down): the port receives again once it is up, and
// what came before is still there in order.
TEST_F(AfPacketVeth, ReceivesAgainAfterTheLinkWentDownAndUp) {
  port_ = open_ok({.devargs = "net_af_packet14,iface=uroce-ra"});
  ASSERT_TRUE(port_);
  send(0, 10);
  EXPECT_EQ(drain(0), 10u);
  ASSERT_EQ(std::system("ip link set uroce-ra down && ip link set uroce-ra up"), 0);
  for (int tries = 0; !port_->link_up() && tries < 2000; ++tries) ::usleep(1000);
  ASSERT_TRUE(port_->link_up());
  send(10, 10);
  uint32_t got = 0;
  for (int tries = 0; got < 10 && tries < 1000; ++tries) {
    got += drain(10 + got);
    if (got < 10) ::usleep(1000);
  }
  EXPECT_EQ(got, 10u);
}

// An af_packet port's open makes its pool and its receive ring beside the
// PMD's probe (start-up, issue 13).  An open that fails after that (the
// ethdev is another port's, the netdev does not exist) leaves neither
// behind, and the port that was there first receives as before.
TEST_F(AfPacketVeth, AnOpenThatFailsLeavesNoPoolOrRingBehind) {
  port_ = open_ok({.devargs = "net_af_packet15,iface=uroce-ra"});
  ASSERT_TRUE(port_);
  const std::vector<unsigned long> before = settled_receivers("uroce-ra");
  ASSERT_EQ(before.size(), 1u);
  const unsigned pools = mempools();

  auto taken = DpdkPort::open({.devargs = "net_af_packet15,iface=uroce-ra"});
  ASSERT_FALSE(taken);
  EXPECT_EQ(taken.error().code, EBUSY);
  auto missing = DpdkPort::open({.devargs = "net_af_packet16,iface=uroce-no-such-if"});
  ASSERT_FALSE(missing);

  EXPECT_EQ(mempools(), pools);
  EXPECT_EQ(receivers("uroce-ra"), before);  // closed with the failed port, at once
  send(0, 10);
  EXPECT_EQ(drain(0), 10u);
}

}  // namespace
}  // namespace uroce::drivers::dpdk
