// Configurations that load: a full file, the environment alone, the
// environment over a file, defaults, and render -> parse round trips.
#include <gtest/gtest.h>

#include <string>

#include "lib/config/config.hpp"

namespace uroce::config {
namespace {

using EnvMap = std::map<std::string, std::string, std::less<>>;

Config parse_ok(std::string_view text, EnvMap env = {}) {
  auto r = parse_config(text, "t.toml", env_from_map(std::move(env)));
  EXPECT_TRUE(r.ok()) << r.error().message();
  return r.ok() ? *r : Config{};
}

IpPrefix prefix(std::string_view text) {
  auto r = parse_ip_prefix(text);
  EXPECT_TRUE(r.ok()) << r.error();
  return r.ok() ? *r : IpPrefix{};
}

IpAddr addr(std::string_view text) {
  auto r = parse_ip_address(text);
  EXPECT_TRUE(r.ok()) << r.error();
  return r.ok() ? *r : IpAddr{};
}

constexpr std::string_view kFullFile = R"(
progress = "inline"
log = "debug"
pcap = "/tmp/all.pcap"

[eal]
core = 3
memory_mb = 512
extra = ["--log-level=lib.eal:debug", "-a", "0000:03:00.0"]
hugepages = "no"
telemetry = true

[[device]]
name = "left"
devargs = "net_af_packet0,iface=veth0"
addresses = ["10.0.0.1/24", "fd00::1/64"]
mac = "02:AB:cd:00:00:01"
mtu = 1500
gids = ["fe80::1", "10.0.0.1"]
pcap = "/tmp/left.pcap"
faults = "drop=0.01,seed=7"
vlan = 0
loss_recovery = "selective"
spray_ports = 8
ecn = false
cc = "none"
repath = true
repath_rounds = 5

[device.dcqcn]
rpg_time_reset_us = 50
clamp_tgt_rate = true
cnp_dscp = 26

[device.delay]
target_us = 40

[[device]]
devargs = "net_memif0,role=server,socket=/run/x.sock,socket-abstract=no"
addresses = ["192.168.1.2/30"]
vlan = 4094
mtu = 9000

[[device]]
kind = "sim"

[[device]]
devargs = "0000:03:00.0"
)";

Config full_expected() {
  Config c;
  c.progress = Progress::kInline;
  c.log = LogLevel::kDebug;
  c.pcap = "/tmp/all.pcap";
  c.eal.core = 3;
  c.eal.memory_mb = 512;
  c.eal.extra = {"--log-level=lib.eal:debug", "-a", "0000:03:00.0"};
  c.eal.hugepages = Hugepages::kNo;
  c.eal.telemetry = true;

  DeviceConfig left;
  left.name = "left";
  left.devargs = "net_af_packet0,iface=veth0";
  left.addresses = {prefix("10.0.0.1/24"), prefix("fd00::1/64")};
  left.mac = wire::MacAddr{0x02, 0xab, 0xcd, 0x00, 0x00, 0x01};
  left.mtu = 1500;
  left.gids = {addr("fe80::1"), addr("10.0.0.1")};
  left.pcap = "/tmp/left.pcap";
  left.faults = "drop=0.01,seed=7";
  left.vlan = 0;
  left.loss_recovery = LossRecovery::kSelective;
  left.spray_ports = 8;
  left.cc.ecn = false;
  left.cc.mode = CcMode::kNone;
  left.cc.repath = true;
  left.cc.repath_rounds = 5;
  left.cc.dcqcn.rpg_time_reset_us = 50;
  left.cc.dcqcn.clamp_tgt_rate = true;
  left.cc.dcqcn.cnp_dscp = 26;
  left.cc.delay.target_us = 40;

  DeviceConfig memif;
  memif.name = "uroce0";  // the first unused default name
  memif.devargs = "net_memif0,role=server,socket=/run/x.sock,socket-abstract=no";
  memif.addresses = {prefix("192.168.1.2/30")};
  memif.vlan = 4094;
  memif.mtu = 9000;

  DeviceConfig sim;
  sim.name = "uroce1";
  sim.kind = DeviceKind::kSim;

  DeviceConfig pci;
  pci.name = "uroce2";
  pci.devargs = "0000:03:00.0";

  c.devices = {left, memif, sim, pci};
  return c;
}

TEST(GoodConfig, FullFileParsesToExpectedValues) {
  const Config got = parse_ok(kFullFile);
  const Config want = full_expected();
  ASSERT_EQ(got.devices.size(), want.devices.size());
  for (size_t i = 0; i < want.devices.size(); ++i) EXPECT_EQ(got.devices[i], want.devices[i]) << "device " << i;
  EXPECT_EQ(got.eal, want.eal);
  EXPECT_EQ(got, want);
}

TEST(GoodConfig, AddressesKeepFamilyBytesAndPrefix) {
  const Config c = parse_ok(kFullFile);
  const DeviceConfig& left = c.devices.at(0);
  ASSERT_EQ(left.addresses.size(), 2u);
  const IpPrefix& v4 = left.addresses[0];
  EXPECT_EQ(v4.family(), IpFamily::kIpv4);
  EXPECT_EQ(v4.prefix_len, 24);
  EXPECT_EQ(v4.addr.bytes, (std::array<uint8_t, 16>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}));
  EXPECT_EQ(v4.addr.ipv4_octets(), (std::array<uint8_t, 4>{10, 0, 0, 1}));
  const IpPrefix& v6 = left.addresses[1];
  EXPECT_EQ(v6.family(), IpFamily::kIpv6);
  EXPECT_EQ(v6.prefix_len, 64);
  EXPECT_EQ(v6.addr.bytes, (std::array<uint8_t, 16>{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}));
}

TEST(GoodConfig, Ipv4GidIsIpv4Mapped) {
  const Config c = parse_ok(kFullFile);
  const std::vector<IpAddr>& gids = c.devices.at(0).gids;
  ASSERT_EQ(gids.size(), 2u);
  EXPECT_EQ(gids[0].bytes, (std::array<uint8_t, 16>{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(gids[1].bytes, (std::array<uint8_t, 16>{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}));
}

TEST(GoodConfig, EmptyFileGivesDefaults) {
  const Config c = parse_ok("");
  EXPECT_TRUE(c.devices.empty());
  EXPECT_EQ(c.progress, Progress::kThread);
  EXPECT_EQ(c.log, LogLevel::kWarning);
  EXPECT_FALSE(c.pcap.has_value());
  EXPECT_EQ(c.eal, EalConfig{});
  EXPECT_EQ(c.eal.hugepages, Hugepages::kAuto);
  EXPECT_TRUE(c.eal.telemetry);  // on unless the file says otherwise: `uroce stats` needs no configuration
}

TEST(GoodConfig, UnsetDeviceKeysStayUnset) {
  const Config c = parse_ok("[[device]]\ndevargs = \"net_ring0\"\n");
  ASSERT_EQ(c.devices.size(), 1u);
  const DeviceConfig& d = c.devices[0];
  EXPECT_EQ(d.name, "uroce0");
  EXPECT_EQ(d.kind, DeviceKind::kDpdk);
  EXPECT_TRUE(d.addresses.empty());
  EXPECT_FALSE(d.mac.has_value());
  EXPECT_FALSE(d.mtu.has_value());
  EXPECT_TRUE(d.gids.empty());
  EXPECT_FALSE(d.pcap.has_value());
  EXPECT_FALSE(d.faults.has_value());
  EXPECT_FALSE(d.vlan.has_value());
}

TEST(GoodConfig, DefaultNamesSkipNamesInUse) {
  const Config c = parse_ok(
      "[[device]]\ndevargs = \"net_ring0\"\n"
      "[[device]]\ndevargs = \"net_ring1\"\nname = \"uroce0\"\n"
      "[[device]]\ndevargs = \"net_ring2\"\n");
  ASSERT_EQ(c.devices.size(), 3u);
  EXPECT_EQ(c.devices[0].name, "uroce1");
  EXPECT_EQ(c.devices[1].name, "uroce0");
  EXPECT_EQ(c.devices[2].name, "uroce2");
}

TEST(GoodConfig, InlineTablesWork) {
  const Config c = parse_ok("eal = { core = 1 }\ndevice = [{ devargs = \"net_tap0,iface=tap0\" }]\n");
  EXPECT_EQ(c.eal.core, 1);
  ASSERT_EQ(c.devices.size(), 1u);
  EXPECT_EQ(c.devices[0].devargs, "net_tap0,iface=tap0");
}

TEST(GoodConfig, CapturePathFallsBackToGlobal) {
  const Config c = parse_ok(
      "pcap = \"/tmp/all.pcap\"\n"
      "[[device]]\ndevargs = \"net_ring0\"\npcap = \"/tmp/own.pcap\"\n"
      "[[device]]\ndevargs = \"net_ring1\"\n");
  EXPECT_EQ(capture_path(c, c.devices[0]), "/tmp/own.pcap");
  EXPECT_EQ(capture_path(c, c.devices[1]), "/tmp/all.pcap");
  const Config none = parse_ok("[[device]]\ndevargs = \"net_ring0\"\n");
  EXPECT_FALSE(capture_path(none, none.devices[0]).has_value());
}

// ---- the environment -------------------------------------------------------------

TEST(EnvConfig, DeviceAndIpAloneAreACompleteConfiguration) {
  const Config c = parse_ok("", {{"UROCE_DEVICE", "net_af_packet0,iface=veth0"}, {"UROCE_IP", "10.0.0.1/24"}});
  Config want;
  DeviceConfig dev;
  dev.name = "uroce0";
  dev.devargs = "net_af_packet0,iface=veth0";
  dev.addresses = {prefix("10.0.0.1/24")};
  want.devices = {dev};
  EXPECT_EQ(c, want);
}

// engine_lcores (DESIGN.md "More than one engine core"): from the file
// and from UROCE_ENGINE_LCORES, which overrides it; rendered back.
TEST(GoodConfig, EngineLcoresFromFileAndEnv) {
  const Config c = parse_ok("[[device]]\ndevargs = \"net_ring0\"\nengine_lcores = 3\n");
  ASSERT_EQ(c.devices.size(), 1u);
  EXPECT_EQ(c.devices[0].engine_lcores, 3u);
  EXPECT_NE(render_config(c).find("engine_lcores = 3"), std::string::npos);
  const Config e = parse_ok("[[device]]\ndevargs = \"net_ring0\"\nengine_lcores = 3\n", {{"UROCE_ENGINE_LCORES", "2"}});
  EXPECT_EQ(e.devices.at(0).engine_lcores, 2u);
  EXPECT_EQ(parse_ok("[[device]]\ndevargs = \"net_ring0\"\n").devices.at(0).engine_lcores, 1u);
}

TEST(EnvConfig, EveryVariableWithoutAFile) {
  const Config c = parse_ok("", {{"UROCE_DEVICE", "net_memif0,role=client"},
                                 {"UROCE_IP", "10.0.0.2/24, fd00::2/64"},
                                 {"UROCE_MAC", "02:00:00:00:00:02"},
                                 {"UROCE_MTU", "4000"},
                                 {"UROCE_FAULTS", "drop=0.5"},
                                 {"UROCE_LOSS_RECOVERY", "selective"},
                                 {"UROCE_ECN", "off"},
                                 {"UROCE_CC", "none"},
                                 {"UROCE_PCAP", "/tmp/env.pcap"},
                                 {"UROCE_PROGRESS", "inline"},
                                 {"UROCE_LOG", "info"}});
  ASSERT_EQ(c.devices.size(), 1u);
  const DeviceConfig& d = c.devices[0];
  EXPECT_EQ(d.name, "uroce0");
  EXPECT_EQ(d.devargs, "net_memif0,role=client");
  EXPECT_EQ(d.addresses, (std::vector<IpPrefix>{prefix("10.0.0.2/24"), prefix("fd00::2/64")}));
  EXPECT_EQ(d.mac, (wire::MacAddr{0x02, 0, 0, 0, 0, 0x02}));
  EXPECT_EQ(d.mtu, 4000);
  EXPECT_EQ(d.faults, "drop=0.5");
  EXPECT_EQ(d.loss_recovery, LossRecovery::kSelective);
  EXPECT_FALSE(d.cc.ecn);
  EXPECT_EQ(d.cc.mode, CcMode::kNone);
  EXPECT_EQ(c.pcap, "/tmp/env.pcap");
  EXPECT_EQ(c.progress, Progress::kInline);
  EXPECT_EQ(c.log, LogLevel::kInfo);
}

// uroced's device comes from the daemon, not a file: the variables that
// say how it behaves apply to it with the same checks.
TEST(EnvConfig, DeviceVariablesApplyToADeviceFromElsewhere) {
  DeviceConfig d;
  d.name = "uroce0";
  const auto applied = apply_device_env(env_from_map({{"UROCE_FAULTS", "drop=0.25"},
                                                      {"UROCE_LOSS_RECOVERY", "selective"},
                                                      {"UROCE_ECN", "off"},
                                                      {"UROCE_CC", "delay"},
                                                      {"UROCE_MTU", "4000"}}),
                                        d);
  ASSERT_TRUE(applied) << applied.error().message();
  EXPECT_EQ(d.faults, "drop=0.25");
  EXPECT_EQ(d.loss_recovery, LossRecovery::kSelective);
  EXPECT_FALSE(d.cc.ecn);
  EXPECT_EQ(d.cc.mode, CcMode::kDelay);
  EXPECT_FALSE(d.mtu.has_value()) << "UROCE_MTU is what the device is, not how it behaves: not applied here";

  DeviceConfig bad;
  const auto refused = apply_device_env(env_from_map({{"UROCE_CC", "dctcp"}}), bad);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("UROCE_CC"), std::string::npos) << refused.error().message();
  EXPECT_EQ(bad.cc.mode, DeviceConfig{}.cc.mode);
}

constexpr std::string_view kTwoDevices = R"(
progress = "thread"
log = "error"
pcap = "/tmp/file-all.pcap"

[[device]]
name = "first"
kind = "sim"
addresses = ["10.1.0.1/16", "10.2.0.1/16"]
mac = "02:00:00:00:00:aa"
mtu = 1500
faults = "dup=0.1"
pcap = "/tmp/file-first.pcap"
vlan = 7

[[device]]
name = "second"
devargs = "net_tap0,iface=tap0"
addresses = ["10.3.0.1/16"]
mtu = 1500
pcap = "/tmp/file-second.pcap"
)";

TEST(EnvConfig, OverridesTheFile) {
  const Config file = parse_ok(kTwoDevices);
  const Config c = parse_ok(kTwoDevices, {{"UROCE_DEVICE", "net_af_packet0,iface=veth0"},
                                          {"UROCE_IP", "192.168.0.1/24"},
                                          {"UROCE_MAC", "02:00:00:00:00:bb"},
                                          {"UROCE_MTU", "9000"},
                                          {"UROCE_FAULTS", "reorder=0.2"},
                                          {"UROCE_PCAP", "/tmp/env.pcap"},
                                          {"UROCE_PROGRESS", "inline"},
                                          {"UROCE_LOG", "debug"}});
  ASSERT_EQ(c.devices.size(), 2u);
  const DeviceConfig& first = c.devices[0];
  EXPECT_EQ(first.name, "first");
  EXPECT_EQ(first.kind, DeviceKind::kDpdk) << "UROCE_DEVICE makes the device a DPDK one";
  EXPECT_EQ(first.devargs, "net_af_packet0,iface=veth0");
  EXPECT_EQ(first.addresses, (std::vector<IpPrefix>{prefix("192.168.0.1/24")})) << "UROCE_IP replaces the list";
  EXPECT_EQ(first.mac, (wire::MacAddr{0x02, 0, 0, 0, 0, 0xbb}));
  EXPECT_EQ(first.mtu, 9000);
  EXPECT_EQ(first.faults, "reorder=0.2");
  EXPECT_EQ(first.vlan, 7) << "no variable for it: the file's value stays";
  EXPECT_FALSE(first.pcap.has_value()) << "UROCE_PCAP wins over the device's own pcap";
  EXPECT_EQ(capture_path(c, first), "/tmp/env.pcap");
  EXPECT_EQ(c.pcap, "/tmp/env.pcap");
  EXPECT_EQ(c.progress, Progress::kInline);
  EXPECT_EQ(c.log, LogLevel::kDebug);

  // The second device only loses its own pcap.
  DeviceConfig second = file.devices[1];
  second.pcap.reset();
  EXPECT_EQ(c.devices[1], second);
  EXPECT_EQ(capture_path(c, c.devices[1]), "/tmp/env.pcap");
}

TEST(EnvConfig, EmptyValuesCountAsUnset) {
  const Config file = parse_ok(kTwoDevices);
  const Config c = parse_ok(kTwoDevices, {{"UROCE_DEVICE", ""},
                                          {"UROCE_IP", ""},
                                          {"UROCE_MAC", ""},
                                          {"UROCE_MTU", ""},
                                          {"UROCE_FAULTS", ""},
                                          {"UROCE_PCAP", ""},
                                          {"UROCE_PROGRESS", ""},
                                          {"UROCE_LOG", ""}});
  EXPECT_EQ(c, file);
}

TEST(EnvConfig, DeviceFillsInMissingDevargs) {
  const Config c = parse_ok("[[device]]\naddresses = [\"10.0.0.1/24\"]\n", {{"UROCE_DEVICE", "net_ring0"}});
  ASSERT_EQ(c.devices.size(), 1u);
  EXPECT_EQ(c.devices[0].devargs, "net_ring0");
  EXPECT_EQ(c.devices[0].addresses, (std::vector<IpPrefix>{prefix("10.0.0.1/24")}));
}

TEST(EnvConfig, UnrelatedVariablesAreIgnored) {
  const Config c = parse_ok("", {{"UROCE_SOMETHING", "x"}, {"PATH", "/bin"}});
  EXPECT_EQ(c, Config{});
}

// ---- render -> parse ------------------------------------------------------------------

void expect_round_trip(const Config& c) {
  const std::string text = render_config(c);
  auto back = parse_config(text, "rendered.toml", env_from_map({}));
  ASSERT_TRUE(back.ok()) << back.error().message() << "\n" << text;
  EXPECT_EQ(*back, c) << text;
}

TEST(RenderConfig, FullFileRoundTrips) { expect_round_trip(full_expected()); }

TEST(RenderConfig, DefaultsRoundTrip) { expect_round_trip(Config{}); }

TEST(RenderConfig, EnvironmentResultRoundTrips) {
  expect_round_trip(parse_ok(kTwoDevices, {{"UROCE_IP", "10.9.0.1/8,fd00:9::1/48"}, {"UROCE_MTU", "1280"}}));
}

TEST(RenderConfig, StringsNeedingEscapesRoundTrip) {
  Config c;
  c.pcap = "/tmp/with \"quotes\" and \\ back\tslash/\u00e9t\u00e9.pcap";
  c.eal.extra = {"--vdev=net_ring0", "a\nb"};
  DeviceConfig d;
  d.name = "x";
  d.kind = DeviceKind::kSim;
  d.faults = "";
  d.gids = {addr("::ffff:10.0.0.7"), addr("2001:db8::1")};
  c.devices = {d};
  expect_round_trip(c);
}

TEST(RenderConfig, ShowsKeysInDocumentedOrder) {
  Config c;
  c.pcap = "/tmp/a.pcap";
  c.eal.core = 2;
  DeviceConfig d;
  d.name = "uroce0";
  d.devargs = "net_tap0,iface=tap0";
  d.addresses = {prefix("10.0.0.1/24")};
  d.mac = wire::MacAddr{0x02, 0, 0, 0, 0, 0x01};
  d.mtu = 1500;
  d.vlan = 5;
  d.gids = {addr("10.0.0.1")};
  c.devices = {d};
  EXPECT_EQ(render_config(c),
            "progress = \"thread\"\n"
            "log = \"warning\"\n"
            "pcap = \"/tmp/a.pcap\"\n"
            "\n"
            "[eal]\n"
            "core = 2\n"
            "hugepages = \"auto\"\n"
            "telemetry = true\n"
            "\n"
            "[[device]]\n"
            "name = \"uroce0\"\n"
            "kind = \"dpdk\"\n"
            "devargs = \"net_tap0,iface=tap0\"\n"
            "addresses = [\"10.0.0.1/24\"]\n"
            "mac = \"02:00:00:00:00:01\"\n"
            "mtu = 1500\n"
            "vlan = 5\n"
            "gids = [\"10.0.0.1\"]\n");
}

}  // namespace
}  // namespace uroce::config
