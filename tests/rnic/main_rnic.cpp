// main() of the RNIC test binaries: GoogleTest's flags, then ours
// (`--uroce=PATH`), then the EAL, started once for the whole binary (no
// hugepages, memory for the sim wire's two jumbo pools per test).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <string_view>

#include "drivers/dpdk/eal.hpp"
#include "tests/rnic/harness.hpp"

namespace dpdk = uroce::drivers::dpdk;

namespace {
std::string g_uroce;
}  // namespace

const std::string& uroce::rnic::testing::uroce_tool_path() { return g_uroce; }

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    constexpr std::string_view kUroce = "--uroce=";
    if (arg.starts_with(kUroce)) {
      g_uroce = arg.substr(kUroce.size());
    } else {
      std::fprintf(stderr, "unknown argument: %s\n", argv[i]);
      return 2;
    }
  }
  dpdk::EalOptions eal;
  eal.memory = dpdk::EalMemory::kNoHuge;
  eal.memory_mb = 512;
  eal.telemetry = false;
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
