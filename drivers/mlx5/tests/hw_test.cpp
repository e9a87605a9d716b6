// On a ConnectX port through the mlx5 PMD: flow isolation, the rule sets
// install and come out again, the ARP/ND fallbacks, rollback when the
// hardware refuses a rule.  No traffic is sent; the rules match only
// addresses from test ranges (198.18.0.0/15, RFC 2544; a ULA), so the
// kernel's own traffic is untouched while the test runs.
//
// Runs when the machine has a ConnectX device (PCI vendor 0x15b3) in
// Ethernet mode and DPDK has the mlx5 PMD; otherwise exits 77 (skip) and
// says why.  UROCE_MLX5_DEVARGS picks the device and its options
// ("0000:03:00.0,dv_flow_en=1"); default: the first ConnectX Ethernet
// function.  The mlx5 PMD needs CAP_NET_RAW and CAP_NET_ADMIN (root).
#include <gtest/gtest.h>
#include <rte_build_config.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mempool.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "drivers/dpdk/eal.hpp"
#include "drivers/mlx5/flow_apply.hpp"
#include "drivers/mlx5/tests/fake_flow_api.hpp"

namespace uroce::drivers::mlx5 {
namespace {

namespace dpdk = uroce::drivers::dpdk;
namespace fs = std::filesystem;
using testing::CountingApi;

constexpr std::string_view kMellanoxVendor = "0x15b3";
constexpr std::string_view kEthernetClassPrefix = "0x0200";  // PCI class: network, Ethernet
constexpr const char* kPciDevices = "/sys/bus/pci/devices";
constexpr int kCapNetAdmin = 12;
constexpr int kCapNetRaw = 13;
constexpr uint16_t kRxDesc = 512;
constexpr uint16_t kTxDesc = 512;
constexpr uint16_t kQueues = 1;
constexpr uint16_t kBadQueue = 1000;  // beyond any queue the port has

constexpr Ipv4Addr kTestIp4 = 0xC6120001;  // 198.18.0.1
constexpr wire::Ipv6Addr kTestIp6 = {0xfd, 0x00, 0x00, 0x75, 0x72, 0x6f, 0x63, 0x65,
                                     0, 0, 0, 0, 0, 0, 0x7e, 0x57};  // fd00:75:726f:6365::7e57
constexpr uint16_t kTestVlan = 3999;

// ---- what main() found and set up -------------------------------------------------------
struct Hw {
  std::string devargs;
  uint16_t port = 0;
  rte_mempool* pool = nullptr;
};
Hw g_hw;

std::string read_line(const fs::path& p) {
  std::ifstream f(p);
  std::string s;
  std::getline(f, s);
  return s;
}

struct PciScan {
  std::vector<std::string> connectx;  // every 0x15b3 function
  std::vector<std::string> ethernet;  // those in Ethernet mode
};

PciScan scan_pci() {
  PciScan scan;
  std::error_code ec;
  for (const auto& dev : fs::directory_iterator(kPciDevices, ec)) {
    if (read_line(dev.path() / "vendor") != kMellanoxVendor) continue;
    const std::string addr = dev.path().filename().string();
    scan.connectx.push_back(addr);
    if (read_line(dev.path() / "class").starts_with(kEthernetClassPrefix)) scan.ethernet.push_back(addr);
  }
  std::sort(scan.connectx.begin(), scan.connectx.end());
  std::sort(scan.ethernet.begin(), scan.ethernet.end());
  return scan;
}

bool has_net_caps() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);) {
    if (line.starts_with("CapEff:")) {
      const uint64_t caps = std::strtoull(line.c_str() + sizeof "CapEff:", nullptr, 16);
      return ((caps >> kCapNetAdmin) & 1) != 0 && ((caps >> kCapNetRaw) & 1) != 0;
    }
  }
  return false;
}

// Why the mlx5 PMD is unavailable, or empty when it is there.
std::string mlx5_pmd_missing() {
#ifndef RTE_NET_MLX5
  return "this DPDK was built without the mlx5 PMD";
#else
  const fs::path plugin = fs::path(RTE_EAL_PMD_PATH) / "librte_net_mlx5.so";
  if (!fs::exists(plugin)) return plugin.string() + " is missing (Debian: librte-net-mlx5-23)";
  return {};
#endif
}

std::optional<uint16_t> find_mlx5_port() {
  uint16_t port;
  RTE_ETH_FOREACH_DEV(port) {
    rte_eth_dev_info info{};
    if (rte_eth_dev_info_get(port, &info) == 0 && std::string_view(info.driver_name).find("mlx5") != std::string_view::npos) {
      return port;
    }
  }
  return std::nullopt;
}

// ---- tests ---------------------------------------------------------------------------

FlowPolicy test_policy() {
  FlowPolicy p;
  p.ipv4 = {kTestIp4};
  p.ipv6 = {kTestIp6};
  return p;
}

void expect_removed(InstalledFlows& flows, const CountingApi& api) {
  const auto st = flows.remove();
  EXPECT_TRUE(st.ok()) << st.error().message;
  EXPECT_TRUE(api.calls.live.empty());
  EXPECT_EQ(api.calls.creates, api.calls.destroys);
}

TEST(Mlx5, RoceRulesGoInAndComeOut) {
  CountingApi api(rte_flow_api());
  auto flows = install_flow_rules(g_hw.port, test_policy(), api);
  ASSERT_TRUE(flows.ok()) << flows.error().message;
  EXPECT_EQ(flows->size(), 2u);
  EXPECT_EQ(flows->scope_of(RuleKind::kRoce), Scope::kDestinationAddress);
  expect_removed(*flows, api);
}

TEST(Mlx5, RoceRulesInAVlan) {
  CountingApi api(rte_flow_api());
  auto p = test_policy();
  p.vlan = kTestVlan;
  auto flows = install_flow_rules(g_hw.port, p, api);
  ASSERT_TRUE(flows.ok()) << flows.error().message;
  EXPECT_EQ(flows->size(), 2u);
  expect_removed(*flows, api);
}

// Whether the PMD matches the ARP target depends on the DPDK version and
// the flow engine (dv_flow_en); either answer is fine, a half-done install
// is not.  No coarse fallback here: it would take all ARP from the kernel.
TEST(Mlx5, ArpByTargetInstallsOrIsRefusedCleanly) {
  CountingApi api(rte_flow_api());
  auto p = test_policy();
  p.steer_arp = true;
  p.coarse_fallback = false;
  auto flows = install_flow_rules(g_hw.port, p, api);
  if (flows.ok()) {
    std::printf("note: this PMD matches the ARP target address (arp_eth_ipv4 tpa)\n");
    EXPECT_EQ(flows->scope_of(RuleKind::kArp), Scope::kTargetAddress);
    expect_removed(*flows, api);
    return;
  }
  std::printf("note: this PMD refuses arp_eth_ipv4: %s\n", flows.error().message.c_str());
  EXPECT_NE(flows.error().message.find("arp_eth_ipv4 tpa is 198.18.0.1"), std::string::npos)
      << flows.error().message;
  EXPECT_NE(flows.error().code, 0);
  EXPECT_TRUE(api.calls.live.empty()) << "the roce rules were rolled back";
  EXPECT_EQ(api.calls.creates, api.calls.destroys);
}

// The ND fallback only takes NS for our test address's solicited-node
// group, which no kernel address shares unless its low 24 bits are 00:7e:57.
TEST(Mlx5, NdInstallsByTargetOrByDestination) {
  CountingApi api(rte_flow_api());
  auto p = test_policy();
  p.steer_nd = true;
  auto flows = install_flow_rules(g_hw.port, p, api);
  ASSERT_TRUE(flows.ok()) << flows.error().message;
  const auto scope = flows->scope_of(RuleKind::kNd);
  ASSERT_TRUE(scope.has_value());
  std::printf("note: ND rules by %s\n", std::string(to_string(*scope)).c_str());
  expect_removed(*flows, api);
}

TEST(Mlx5, ARefusedRuleRollsBackTheRulesBeforeIt) {
  CountingApi api(rte_flow_api());
  FlowRuleSet set = make_rule_set(test_policy());
  FlowRuleGroup bad = set.groups.at(0);  // the same roce rules, to a queue that does not exist
  for (auto& choice : bad.choices) {
    for (auto& rule : choice.rules) rule.actions = {QueueAction{kBadQueue}};
  }
  set.groups.push_back(bad);
  auto flows = apply_rule_set(g_hw.port, set, api);
  ASSERT_FALSE(flows.ok()) << "queue " << kBadQueue << " was accepted";
  EXPECT_NE(flows.error().message.find("queue index " + std::to_string(kBadQueue)), std::string::npos)
      << flows.error().message;
  EXPECT_EQ(api.calls.creates, 2) << "the good group went in";
  EXPECT_EQ(api.calls.destroys, 2) << "and came out again";
  EXPECT_TRUE(api.calls.live.empty());
}

// ---- set-up ---------------------------------------------------------------------------

constexpr int kSkip = 77;

// Returns 0 when the port is up, kSkip or 1 otherwise (and says why).
int bring_up() {
  const PciScan scan = scan_pci();
  if (scan.connectx.empty()) {
    std::printf("skipped: no ConnectX (mlx5) device on this machine\n");
    return kSkip;
  }
  if (const std::string why = mlx5_pmd_missing(); !why.empty()) {
    std::printf("skipped: ConnectX device %s found, but no mlx5 PMD: %s\n", scan.connectx[0].c_str(), why.c_str());
    return kSkip;
  }
  if (const char* env = std::getenv("UROCE_MLX5_DEVARGS"); env != nullptr && *env != '\0') {
    g_hw.devargs = env;
  } else if (!scan.ethernet.empty()) {
    g_hw.devargs = scan.ethernet[0];
  } else {
    std::printf("skipped: ConnectX device %s is not in Ethernet mode (PCI class 0x0200); "
                "set UROCE_MLX5_DEVARGS to use it anyway\n", scan.connectx[0].c_str());
    return kSkip;
  }
  if (!has_net_caps()) {
    std::printf("skipped: the mlx5 PMD needs CAP_NET_RAW and CAP_NET_ADMIN (run as root)\n");
    return kSkip;
  }

  dpdk::EalOptions eal;
  eal.telemetry = false;
  eal.log_level = "error";
  eal.pci = {g_hw.devargs};
  if (const auto& started = dpdk::eal_init(eal); !started) {
    std::fprintf(stderr, "EAL did not start with -a %s: %s\n", g_hw.devargs.c_str(), started.error().message.c_str());
    return 1;
  }
  const auto port = find_mlx5_port();
  if (!port) {
    std::fprintf(stderr, "the mlx5 PMD did not probe %s (is mlx5_core its kernel driver?)\n", g_hw.devargs.c_str());
    return 1;
  }
  g_hw.port = *port;
  // Without isolation the started port would take the kernel's unicast
  // traffic: never start it then.
  if (auto st = enable_isolation(g_hw.port); !st) {
    std::fprintf(stderr, "flow isolation refused, not starting the port: %s\n", st.error().message.c_str());
    return 1;
  }

  auto pool = dpdk::create_pktmbuf_pool({.name_prefix = "mlx5hw"});
  if (!pool) {
    std::fprintf(stderr, "mbuf pool: %s\n", pool.error().message.c_str());
    return 1;
  }
  g_hw.pool = *pool;
  rte_eth_conf conf{};
  const int socket = rte_eth_dev_socket_id(g_hw.port);
  int rc = rte_eth_dev_configure(g_hw.port, kQueues, kQueues, &conf);
  if (rc == 0) rc = rte_eth_rx_queue_setup(g_hw.port, 0, kRxDesc, socket, nullptr, g_hw.pool);
  if (rc == 0) rc = rte_eth_tx_queue_setup(g_hw.port, 0, kTxDesc, socket, nullptr);
  if (rc == 0) rc = rte_eth_dev_start(g_hw.port);
  if (rc != 0) {
    std::fprintf(stderr, "port %u (%s) did not start: %s\n", g_hw.port, g_hw.devargs.c_str(), rte_strerror(-rc));
    return 1;
  }
  std::printf("testing port %u: %s\n", g_hw.port, g_hw.devargs.c_str());
  return 0;
}

int tear_down() {
  if (rte_eth_dev_is_valid_port(g_hw.port)) {
    rte_eth_dev_stop(g_hw.port);
    rte_eth_dev_close(g_hw.port);
  }
  rte_mempool_free(g_hw.pool);
  if (auto st = dpdk::eal_shutdown(); !st) {
    std::fprintf(stderr, "eal_shutdown: %s\n", st.error().message.c_str());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace uroce::drivers::mlx5

int main(int argc, char** argv) {
  namespace mlx5 = uroce::drivers::mlx5;
  ::testing::InitGoogleTest(&argc, argv);
  if (const int rc = mlx5::bring_up(); rc != 0) {
    if (uroce::drivers::dpdk::eal_running()) (void)mlx5::tear_down();
    return rc;
  }
  const int rc = RUN_ALL_TESTS();
  const int down = mlx5::tear_down();
  return rc != 0 ? rc : down;
}
