// The EAL argument vector for each kind of host, without starting the EAL.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "drivers/dpdk/eal.hpp"

namespace uroce::drivers::dpdk {
namespace {

using Args = std::vector<std::string>;

HostInfo no_hugepages() { return HostInfo{.hugetlbfs_mounted = false, .free_hugepages = 0, .lowest_cpu = 3, .pid = 4242}; }
HostInfo with_hugepages() { return HostInfo{.hugetlbfs_mounted = true, .free_hugepages = 256, .lowest_cpu = 0, .pid = 7}; }

bool has(const Args& a, const std::string& s) { return std::find(a.begin(), a.end(), s) != a.end(); }

TEST(EalArgs, NoHugepagesMeansNoHugeNoShconfAndMemory) {
  const Args a = eal_args(EalOptions{}, no_hugepages());
  const Args expected{"uroce", "--no-huge", "--no-shconf", "-m", "256", "--file-prefix=uroce-4242",
                      "--no-pci", "--log-level=warning", "--log-level=lib.telemetry:error", "-l", "3"};
  EXPECT_EQ(a, expected);
}

TEST(EalArgs, HugepagesMeanInMemory) {
  const Args a = eal_args(EalOptions{}, with_hugepages());
  const Args expected{"uroce", "--in-memory", "--file-prefix=uroce-7", "--no-pci", "--log-level=warning",
                      "--log-level=lib.telemetry:error", "-l", "0"};
  EXPECT_EQ(a, expected);
}

TEST(EalArgs, AutoNeedsHugetlbfsAndFreePages) {
  HostInfo mounted_but_empty = with_hugepages();
  mounted_but_empty.free_hugepages = 0;
  HostInfo pages_but_unmounted = with_hugepages();
  pages_but_unmounted.hugetlbfs_mounted = false;
  EXPECT_FALSE(use_hugepages(EalOptions{}, mounted_but_empty));
  EXPECT_FALSE(use_hugepages(EalOptions{}, pages_but_unmounted));
  EXPECT_TRUE(use_hugepages(EalOptions{}, with_hugepages()));
  EXPECT_FALSE(use_hugepages(EalOptions{.memory = EalMemory::kNoHuge}, with_hugepages()));
  EXPECT_TRUE(use_hugepages(EalOptions{.memory = EalMemory::kHugepages}, no_hugepages()));
}

TEST(EalArgs, EveryOption) {
  EalOptions o;
  o.memory = EalMemory::kNoHuge;
  o.memory_mb = 512;
  o.core = 1;
  o.telemetry = false;
  o.log_level = "*:debug";
  o.file_prefix = "mine";
  o.pci = {"0000:03:00.0"};
  o.vdevs = {"net_af_packet0,iface=veth0", "net_ring0"};
  o.extra = {"--iova-mode=va", "--huge-worker-stack"};
  const Args expected{"uroce", "--no-huge", "--no-shconf", "-m", "512", "--file-prefix=mine", "-a", "0000:03:00.0",
                      "--no-telemetry", "--log-level=*:debug", "-l", "1", "--vdev=net_af_packet0,iface=veth0",
                      "--vdev=net_ring0", "--iova-mode=va", "--huge-worker-stack"};
  EXPECT_EQ(eal_args(o, with_hugepages()), expected);
}

TEST(EalArgs, TelemetryOnByDefault) {
  const Args a = eal_args(EalOptions{}, no_hugepages());
  EXPECT_FALSE(has(a, "--no-telemetry"));
}

// At the default levels nothing of the stack reaches a program's stderr:
// telemetry's warning about its legacy socket stays quiet; asked for info
// or debug, it is printed like everything else.
TEST(EalArgs, TelemetryNoteQuietUnlessAskedFor) {
  EXPECT_TRUE(has(eal_args(EalOptions{.log_level = "error"}, no_hugepages()), "--log-level=lib.telemetry:error"));
  EXPECT_FALSE(has(eal_args(EalOptions{.log_level = "info"}, no_hugepages()), "--log-level=lib.telemetry:error"));
  EXPECT_FALSE(has(eal_args(EalOptions{.log_level = "debug"}, no_hugepages()), "--log-level=lib.telemetry:error"));
}

TEST(EalArgs, CoreFallsBackToZeroWithoutAffinity) {
  HostInfo h = no_hugepages();
  h.lowest_cpu.reset();
  const Args a = eal_args(EalOptions{}, h);
  const auto l = std::find(a.begin(), a.end(), "-l");
  ASSERT_NE(l, a.end());
  EXPECT_EQ(*(l + 1), "0");
}

TEST(EalArgs, ProbeHostSeesThisProcess) {
  const HostInfo h = probe_host();
  EXPECT_GT(h.pid, 0);
  EXPECT_TRUE(h.lowest_cpu.has_value());
}

}  // namespace
}  // namespace uroce::drivers::dpdk
