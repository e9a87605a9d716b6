// drivers/dpdk/devargs: the devargs text and the af_packet ring geometry
// DpdkPort derives from a kernel MTU (pure; no EAL).
#include <gtest/gtest.h>

#include "drivers/dpdk/devargs.hpp"

namespace uroce::drivers::dpdk {
namespace {

constexpr uint32_t kPage = 4096;
constexpr uint32_t kMaxFramesz = 9216 + kAfPacketFrameOverhead;  // the default data room's

TEST(Devargs, SplitsNameAndItems) {
  auto d = parse_devargs("net_af_packet0,iface=veth0,qdisc_bypass=0,flag");
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->name, "net_af_packet0");
  ASSERT_EQ(d->args.size(), 3u);
  EXPECT_EQ(d->get("iface"), "veth0");
  EXPECT_EQ(d->get("qdisc_bypass"), "0");
  EXPECT_EQ(d->get("flag"), "");
  EXPECT_FALSE(d->get("framesz"));
  EXPECT_EQ(d->args_text(), "iface=veth0,qdisc_bypass=0,flag");
  EXPECT_EQ(d->text(), "net_af_packet0,iface=veth0,qdisc_bypass=0,flag");
}

TEST(Devargs, KeepsCommasInsideBrackets) {
  auto d = parse_devargs("0000:03:00.0,representor=[0,2-3],dv_flow_en=1");
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_EQ(d->name, "0000:03:00.0");
  EXPECT_EQ(d->get("representor"), "[0,2-3]");
  EXPECT_EQ(d->get("dv_flow_en"), "1");
}

TEST(Devargs, NameOnly) {
  auto d = parse_devargs("net_ring0");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->name, "net_ring0");
  EXPECT_TRUE(d->args.empty());
  EXPECT_EQ(d->text(), "net_ring0");
}

TEST(Devargs, RejectsMissingNameOrKey) {
  EXPECT_FALSE(parse_devargs(""));
  EXPECT_FALSE(parse_devargs(",iface=x"));
  auto d = parse_devargs("net_tap0,=x");
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message.find("no key"), std::string::npos);
}

TEST(Devargs, PciAddresses) {
  EXPECT_TRUE(is_pci_address("0000:03:00.0"));
  EXPECT_TRUE(is_pci_address("03:00.1"));
  EXPECT_TRUE(is_pci_address("0000:AB:1f.7"));
  EXPECT_FALSE(is_pci_address("0000:03:00.8"));
  EXPECT_FALSE(is_pci_address("net_tap0"));
  EXPECT_FALSE(is_pci_address("zz:00.0"));
  EXPECT_FALSE(is_pci_address("000:03:00.0"));
  EXPECT_EQ(canonical_pci_address("03:00.0"), "0000:03:00.0");
  EXPECT_EQ(canonical_pci_address("0000:AB:00.1"), "0000:ab:00.1");
}

TEST(Devargs, VdevDrivers) {
  EXPECT_EQ(vdev_driver("net_af_packet12"), "net_af_packet");
  EXPECT_EQ(vdev_driver("net_tap"), "net_tap");
  EXPECT_TRUE(is_af_packet("net_af_packet0"));
  EXPECT_TRUE(is_af_packet("eth_af_packet3"));
  EXPECT_FALSE(is_af_packet("net_af_xdp0"));
}

TEST(AfPacketRing, DefaultsCarryStandardMtu) {
  EXPECT_FALSE(af_packet_ring_for_mtu(1500, kPage, kMaxFramesz));
  // 2048 - 32 ring header - 18 Ethernet/VLAN = 1998.
  EXPECT_EQ(af_packet_mtu_limit(kAfPacketDefaultFramesz), 1998u);
  EXPECT_FALSE(af_packet_ring_for_mtu(1998, kPage, kMaxFramesz));
  EXPECT_TRUE(af_packet_ring_for_mtu(1999, kPage, kMaxFramesz));
}

// research/dpdk.md §3.1 measured MTU 9000 with this geometry.
TEST(AfPacketRing, JumboGeometry) {
  const auto r = af_packet_ring_for_mtu(9000, kPage, kMaxFramesz);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->framesz, 9216u);  // 9000 + 18 + 32 = 9050, rounded up to 1 KiB
  EXPECT_EQ(r->blocksz, 36864u);  // lcm(9216, 4096): four frames, back to back
  EXPECT_EQ(r->framecnt, kAfPacketDefaultFramecnt);
}

TEST(AfPacketRing, CappedByTheMbufs) {
  const auto r = af_packet_ring_for_mtu(9000, kPage, 5000 + kAfPacketFrameOverhead);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->framesz, 4096u);
  EXPECT_LT(af_packet_mtu_limit(r->framesz), 9000u);  // the port reports what it carries
}

// A larger ring asked for (every port's kAfPacketRingFrames): the default
// frame at a standard MTU, the jumbo frame at 9000, the frame count rounded
// up to whole blocks, never below the PMD's own and, for large frames,
// only as many as kAfPacketRingMaxBytes holds.
TEST(AfPacketRing, MoreFramesWhenAsked) {
  const auto r = af_packet_ring_for_mtu(1500, kPage, kMaxFramesz, kAfPacketRingFrames);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->framesz, kAfPacketDefaultFramesz);
  EXPECT_EQ(r->blocksz, kPage);
  EXPECT_EQ(r->framecnt, 4096u);
  const auto m = af_packet_ring_for_mtu(2000, kPage, kMaxFramesz, 4097);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->framesz, 3072u);
  EXPECT_EQ(m->framecnt, 4100u);  // four frames a block, 12.6 MB
  const auto j = af_packet_ring_for_mtu(9000, kPage, kMaxFramesz, kAfPacketRingFrames);
  ASSERT_TRUE(j);
  EXPECT_EQ(j->framesz, 9216u);
  EXPECT_EQ(j->framecnt, 1820u);  // 16 MiB / 9216, four frames a block
  EXPECT_FALSE(af_packet_ring_for_mtu(1500, kPage, kMaxFramesz, 100));
  EXPECT_EQ(af_packet_ring_for_mtu(9000, kPage, kMaxFramesz, 100)->framecnt, kAfPacketDefaultFramecnt);
}

// The cap never takes a ring below the PMD's 512 frames, whatever the frame.
TEST(AfPacketRing, TheCapKeepsThePmdsOwnCount) {
  const auto r = af_packet_ring_for_mtu(60000, kPage, 64 * 1024, kAfPacketRingFrames);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->framesz, 60416u);  // 16 MiB holds 277 of them
  EXPECT_EQ(r->framecnt, kAfPacketDefaultFramecnt);
  for (uint32_t mtu = 256; mtu <= 9000; mtu += 251) {
    SCOPED_TRACE(mtu);
    const auto a = af_packet_ring_for_mtu(mtu, kPage, kMaxFramesz, kAfPacketRingFrames);
    ASSERT_TRUE(a);
    EXPECT_GE(a->framecnt, kAfPacketDefaultFramecnt);
    EXPECT_LE(uint64_t{a->framecnt} * a->framesz, uint64_t{kAfPacketRingMaxBytes} + a->blocksz);
  }
}

// Every MTU gets a geometry the kernel and the PMD accept, that carries it.
TEST(AfPacketRing, EveryMtuMeetsTheRules) {
  for (uint32_t mtu = 256; mtu <= 9000; ++mtu) {
    const auto r = af_packet_ring_for_mtu(mtu, kPage, kMaxFramesz);
    if (!r) {
      EXPECT_GE(af_packet_mtu_limit(kAfPacketDefaultFramesz), mtu);
      continue;
    }
    SCOPED_TRACE(mtu);
    EXPECT_EQ(r->framesz % kAfPacketFrameAlign, 0u);
    EXPECT_LE(r->framesz, r->blocksz);
    EXPECT_LE(r->framesz, kMaxFramesz);
    EXPECT_EQ(r->blocksz % kPage, 0u);
    EXPECT_EQ(r->blocksz % r->framesz, 0u);  // the PMD's back-to-back layout
    EXPECT_LE(r->blocksz / r->framesz, 4u);
    EXPECT_EQ(r->framecnt % (r->blocksz / r->framesz), 0u);
    EXPECT_GE(af_packet_mtu_limit(r->framesz), mtu);
  }
}

}  // namespace
}  // namespace uroce::drivers::dpdk
