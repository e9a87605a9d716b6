// The installer against a real ethdev without rte_flow: DPDK's net_null.
// Isolation and every rule must fail cleanly (ENOSYS: the PMD has no flow
// ops), say why, create nothing and leave the port working.
//
// main() starts the EAL once for the process (no hugepages, no PCI, no
// telemetry, one net_null vdev).
#include <gtest/gtest.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <cerrno>
#include <cstdio>
#include <string>

#include "drivers/dpdk/eal.hpp"
#include "drivers/mlx5/flow_apply.hpp"
#include "drivers/mlx5/tests/fake_flow_api.hpp"

namespace uroce::drivers::mlx5 {
namespace {

namespace dpdk = uroce::drivers::dpdk;
using testing::CountingApi;

constexpr const char* kVdev = "net_null0";
constexpr uint16_t kRxDesc = 128;
constexpr uint16_t kTxDesc = 128;
constexpr uint32_t kPoolMbufs = 511;
constexpr uint16_t kBurst = 8;

// net_null has no rte_flow: ethdev answers ENOSYS.  ENOTSUP is what a PMD
// with rte_flow says for a rule it cannot do; accept either, nothing else.
bool is_not_supported(int code) { return code == ENOSYS || code == ENOTSUP; }

FlowPolicy sample_policy() {
  FlowPolicy p;
  p.ipv4 = {0x0A000001};
  p.ipv6 = {wire::Ipv6Addr{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
  p.vlan = 100;
  p.steer_arp = true;
  p.steer_nd = true;
  return p;
}

class NullPort : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(rte_eth_dev_get_port_by_name(kVdev, &port_), 0) << kVdev << " was not probed";
    auto pool = dpdk::create_pktmbuf_pool({.name_prefix = "mlx5null", .mbufs = kPoolMbufs});
    ASSERT_TRUE(pool.ok()) << pool.error().message;
    pool_ = *pool;
  }
  static void TearDownTestSuite() {
    if (started_) {
      rte_eth_dev_stop(port_);
      started_ = false;
    }
    rte_eth_dev_close(port_);
    rte_mempool_free(pool_);
  }

  // Configured and started as an engine would, but isolation first.
  static void start_port() {
    if (started_) return;
    rte_eth_conf conf{};
    ASSERT_EQ(rte_eth_dev_configure(port_, 1, 1, &conf), 0);
    ASSERT_EQ(rte_eth_rx_queue_setup(port_, 0, kRxDesc, rte_eth_dev_socket_id(port_), nullptr, pool_), 0);
    ASSERT_EQ(rte_eth_tx_queue_setup(port_, 0, kTxDesc, rte_eth_dev_socket_id(port_), nullptr), 0);
    ASSERT_EQ(rte_eth_dev_start(port_), 0);
    started_ = true;
  }

  static inline uint16_t port_ = 0;
  static inline rte_mempool* pool_ = nullptr;
  static inline bool started_ = false;
};

TEST_F(NullPort, IsolationIsRefusedWithTheReason) {
  CountingApi api(rte_flow_api());
  const auto st = enable_isolation(port_, api);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(is_not_supported(st.error().code)) << st.error().code << ": " << st.error().message;
  EXPECT_NE(st.error().message.find("rte_flow_isolate on port " + std::to_string(port_) + ": "),
            std::string::npos)
      << st.error().message;
  EXPECT_EQ(api.calls.isolates, 1);
}

TEST_F(NullPort, EveryRuleIsRefusedAndNothingIsCreated) {
  start_port();
  CountingApi api(rte_flow_api());
  const auto policy = sample_policy();
  auto flows = install_flow_rules(port_, policy, api);
  ASSERT_FALSE(flows.ok()) << "net_null has no rte_flow; " << flows->size() << " rules went in";
  const Error& e = flows.error();
  std::printf("net_null refuses: %s\n", e.message.c_str());
  EXPECT_TRUE(is_not_supported(e.code)) << e.code << ": " << e.message;
  // The first rule tried is the first roce rule, and the message shows it
  // the way testpmd takes it.
  const std::string first = make_rule_set(policy).groups.at(0).choices.at(0).rules.at(0).to_string(port_);
  EXPECT_NE(e.message.find("roce rules (destination address): rte_flow_validate on port " +
                           std::to_string(port_) + ": "),
            std::string::npos)
      << e.message;
  EXPECT_NE(e.message.find("(errno " + std::to_string(e.code) + ")"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("`" + first + "`"), std::string::npos) << e.message;
  EXPECT_EQ(api.calls.validates, 1) << "stopped at the first refusal";
  EXPECT_EQ(api.calls.creates, 0);
  EXPECT_EQ(api.calls.destroys, 0);
  EXPECT_TRUE(api.calls.live.empty());
}

TEST_F(NullPort, PortStillWorksAfterTheRefusals) {
  start_port();
  CountingApi api(rte_flow_api());
  (void)enable_isolation(port_, api);
  ASSERT_FALSE(install_flow_rules(port_, sample_policy(), api).ok());
  rte_mbuf* pkts[kBurst];
  const uint16_t n = rte_eth_rx_burst(port_, 0, pkts, kBurst);
  EXPECT_GT(n, 0) << "net_null makes frames on every receive";
  rte_pktmbuf_free_bulk(pkts, n);
}

TEST(NoPort, AnUnknownPortIsRefused) {
  CountingApi api(rte_flow_api());
  FlowPolicy p;
  p.ipv4 = {0x0A000001};
  constexpr uint16_t kUnusedPort = RTE_MAX_ETHPORTS - 1;
  auto flows = install_flow_rules(kUnusedPort, p, api);
  ASSERT_FALSE(flows.ok());
  EXPECT_EQ(flows.error().code, ENODEV) << flows.error().message;
  const auto st = enable_isolation(kUnusedPort, api);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, ENODEV) << st.error().message;
  EXPECT_EQ(api.calls.creates, 0);
}

}  // namespace
}  // namespace uroce::drivers::mlx5

int main(int argc, char** argv) {
  namespace dpdk = uroce::drivers::dpdk;
  ::testing::InitGoogleTest(&argc, argv);
  dpdk::EalOptions eal;
  eal.memory = dpdk::EalMemory::kNoHuge;
  eal.memory_mb = 128;
  eal.telemetry = false;
  eal.log_level = "error";
  eal.vdevs = {uroce::drivers::mlx5::kVdev};
  const auto& started = dpdk::eal_init(eal);
  if (!started) {
    std::fprintf(stderr, "EAL did not start: %s\n", started.error().message.c_str());
    return 1;
  }
  const int rc = RUN_ALL_TESTS();
  if (auto st = dpdk::eal_shutdown(); !st) {
    std::fprintf(stderr, "eal_shutdown: %s\n", st.error().message.c_str());
    return 1;
  }
  return rc;
}
