// transport/device: the address plan (DESIGN.md "Addresses", as
// device.hpp defines it) and the EAL options a Config asks for.  Pure.
#include <gtest/gtest.h>

#include "transport/device.hpp"

namespace uroce::transport {
namespace {

config::IpPrefix prefix(std::string_view text) {
  auto p = config::parse_ip_prefix(text);
  EXPECT_TRUE(p) << text;
  return *p;
}

drivers::NetdevAddr netdev_addr(std::string_view text) {
  const config::IpPrefix p = prefix(text);
  drivers::NetdevAddr a;
  a.ipv6 = p.family() == config::IpFamily::kIpv6;
  a.addr = p.addr.bytes;
  a.prefix = p.prefix_len;
  a.link_local = a.ipv6 && a.addr[0] == 0xfe;
  return a;
}

drivers::NetdevInfo veth() {
  drivers::NetdevInfo n;
  n.name = "veth0";
  n.mtu = 1500;
  n.addrs = {netdev_addr("10.0.0.1/24"), netdev_addr("fd00::1/64"), netdev_addr("fe80::1/64")};
  return n;
}

TEST(AddressPlan, NoNetdevUsesTheConfigAndAnswersItself) {
  config::DeviceConfig dev;
  dev.addresses = {prefix("192.168.1.1/24")};
  const AddressPlan plan = plan_addresses(dev, nullptr, false);
  EXPECT_TRUE(plan.answer_host);
  ASSERT_EQ(plan.addresses.size(), 1u);
  EXPECT_EQ(plan.addresses[0], prefix("192.168.1.1/24"));
  EXPECT_TRUE(plan.warnings.empty());
}

TEST(AddressPlan, NoNetdevAndNoAddressWarns) {
  const AddressPlan plan = plan_addresses(config::DeviceConfig{}, nullptr, false);
  EXPECT_TRUE(plan.addresses.empty());
  ASSERT_EQ(plan.warnings.size(), 1u);
  EXPECT_NE(plan.warnings[0].find("no address"), std::string::npos);
}

TEST(AddressPlan, SharedNetdevGivesItsAddressesAndTheKernelAnswers) {
  const drivers::NetdevInfo n = veth();
  const AddressPlan plan = plan_addresses(config::DeviceConfig{}, &n, true);
  EXPECT_FALSE(plan.answer_host);
  ASSERT_EQ(plan.addresses.size(), 3u);
  EXPECT_EQ(plan.addresses[0], prefix("10.0.0.1/24"));
  EXPECT_EQ(plan.addresses[1], prefix("fd00::1/64"));
  EXPECT_EQ(plan.addresses[2], prefix("fe80::1/64"));
  EXPECT_TRUE(plan.warnings.empty());
}

TEST(AddressPlan, ConfigAddsAndOverridesThePrefix) {
  const drivers::NetdevInfo n = veth();
  config::DeviceConfig dev;
  dev.addresses = {prefix("10.0.0.1/16"), prefix("10.9.9.9/24")};
  const AddressPlan plan = plan_addresses(dev, &n, true);
  EXPECT_FALSE(plan.answer_host);
  ASSERT_EQ(plan.addresses.size(), 4u);
  EXPECT_EQ(plan.addresses[0], prefix("10.0.0.1/16"));  // same address: the configured prefix wins
  EXPECT_EQ(plan.addresses[3], prefix("10.9.9.9/24"));  // added after the netdev's
  ASSERT_EQ(plan.warnings.size(), 1u);                  // the kernel answers no ARP for it
  EXPECT_NE(plan.warnings[0].find("10.9.9.9/24"), std::string::npos);
  EXPECT_NE(plan.warnings[0].find("veth0"), std::string::npos);
}

// af_xdp: the netdev's addresses, but the kernel hears nothing.
TEST(AddressPlan, ExclusiveNetdevGivesItsAddressesAndTheEngineAnswers) {
  const drivers::NetdevInfo n = veth();
  config::DeviceConfig dev;
  dev.addresses = {prefix("10.9.9.9/24")};
  const AddressPlan plan = plan_addresses(dev, &n, false);
  EXPECT_TRUE(plan.answer_host);
  ASSERT_EQ(plan.addresses.size(), 4u);
  EXPECT_EQ(plan.addresses[0], prefix("10.0.0.1/24"));
  EXPECT_EQ(plan.addresses[3], prefix("10.9.9.9/24"));
  EXPECT_TRUE(plan.warnings.empty());  // the engine answers for the added one too
}

TEST(EalOptionsFromConfig, MapsEveryKey) {
  config::Config cfg;
  cfg.log = config::LogLevel::kDebug;
  cfg.eal.core = 1;
  cfg.eal.memory_mb = 512;
  cfg.eal.hugepages = config::Hugepages::kNo;
  cfg.eal.telemetry = true;
  cfg.eal.extra = {"--log-level=pmd.net.af_packet:debug"};
  config::DeviceConfig pci;
  pci.devargs = "03:00.0,dv_flow_en=1";
  config::DeviceConfig vdev;
  vdev.devargs = "net_af_packet0,iface=veth0";
  config::DeviceConfig sim;
  sim.kind = config::DeviceKind::kSim;
  cfg.devices = {pci, vdev, sim};

  const drivers::dpdk::EalOptions o = eal_options(cfg);
  EXPECT_EQ(o.memory, drivers::dpdk::EalMemory::kNoHuge);
  EXPECT_EQ(o.memory_mb, 512u);
  EXPECT_EQ(o.core, 1u);
  EXPECT_TRUE(o.telemetry);
  EXPECT_EQ(o.log_level, "debug");
  EXPECT_EQ(o.extra, cfg.eal.extra);
  // PCI devices go on the allow list; vdevs are probed by DpdkPort itself.
  EXPECT_EQ(o.pci, std::vector<std::string>{"03:00.0,dv_flow_en=1"});
  EXPECT_TRUE(o.vdevs.empty());
}

TEST(EalOptionsFromConfig, DefaultsLeaveTheEalsOwn) {
  const drivers::dpdk::EalOptions o = eal_options(config::Config{});
  const drivers::dpdk::EalOptions def;
  EXPECT_EQ(o.memory, drivers::dpdk::EalMemory::kAuto);
  EXPECT_EQ(o.memory_mb, def.memory_mb);
  EXPECT_FALSE(o.core);
  EXPECT_TRUE(o.telemetry);  // the config's default: on (`uroce stats`)
  EXPECT_EQ(o.log_level, "warning");
  EXPECT_TRUE(o.pci.empty());
}

}  // namespace
}  // namespace uroce::transport
