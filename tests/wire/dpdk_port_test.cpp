// DpdkPort over in-process vdevs (no root, no kernel): net_ring (a
// loopback: RX and TX are one ring) and net_null (a sink and a source).
// The EAL starts once in tests/drivers/main_eal.cpp.
#include <gtest/gtest.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <array>
#include <cstring>
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

}  // namespace
}  // namespace uroce::drivers::dpdk
