// main() for driver tests that need DPDK: the EAL can start once per
// process, so it starts here, before any test, through the same helper
// the engine uses (no hugepages, telemetry on, a runtime dir of our own).
#include <gtest/gtest.h>

#include <cstdio>

#include "drivers/dpdk/eal.hpp"
#include "tests/drivers/eal_env.hpp"

namespace dpdk = uroce::drivers::dpdk;

namespace {
cpu_set_t g_cpus_before_eal;
}

const cpu_set_t& uroce::drivers::testing::cpus_before_eal() { return g_cpus_before_eal; }

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  CPU_ZERO(&g_cpus_before_eal);
  sched_getaffinity(0, sizeof g_cpus_before_eal, &g_cpus_before_eal);
  dpdk::EalOptions eal;
  eal.memory = dpdk::EalMemory::kNoHuge;
  eal.log_level = "error";
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
