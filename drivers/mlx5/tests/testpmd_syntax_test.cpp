// dpdk-testpmd reads every rule's text (FlowRule::to_string), so the rules
// can be tried by hand on real hardware as printed.
//
// testpmd runs on a net_null port, which has no rte_flow: a command testpmd
// parses reaches the PMD and draws exactly one "Caught PMD error" line; a
// command it cannot parse is dropped without a word (in --cmdline-file
// mode).  So the rules parse when the complaints number the rules; a
// deliberately broken rule shows that a parse failure is seen.
//
// Usage: mlx5_testpmd_test <path of dpdk-testpmd, or "" when it is absent>
// (exit 77, a skip, when it is absent).
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "drivers/mlx5/flow_rules.hpp"

namespace uroce::drivers::mlx5 {
namespace {

std::string g_testpmd;  // from argv

constexpr const char* kComplaint = "Caught PMD error";
constexpr int kMemoryMb = 256;      // testpmd's default pools need more than 128
constexpr int kTotalMbufs = 2048;

// The lowest CPU this process may run on: testpmd's two lcores (main and
// one forwarding core, which it insists on) both go there.
int lowest_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &set)) return cpu;
    }
  }
  return 0;
}

// Where testpmd's EAL puts its runtime directory (as drivers/dpdk/eal.cpp
// finds it): removed after each run, the prefix being ours alone.
std::filesystem::path runtime_dir(const std::string& prefix) {
  std::filesystem::path base = "/tmp/dpdk";
  if (geteuid() == 0) {
    base = "/var/run/dpdk";
  } else if (const char* xdg = std::getenv("XDG_RUNTIME_DIR")) {
    base = std::filesystem::path(xdg) / "dpdk";
  }
  return base / prefix;
}

// Runs testpmd on `commands` (one per line) and returns how many of them
// reached the PMD; -1 when testpmd could not be run.
int commands_reaching_the_pmd(const std::vector<std::string>& commands, std::string* output) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string tag = "uroce-mlx5-testpmd-" + std::to_string(getpid());
  const auto cmd_file = dir / (tag + ".cmds");
  {
    std::ofstream f(cmd_file);
    for (const auto& c : commands) f << c << '\n';
  }
  const std::string cpu = std::to_string(lowest_cpu());
  const std::string cmd = "'" + g_testpmd + "' --no-huge --no-shconf --no-pci --no-telemetry" +
                          " --file-prefix=" + tag + " --lcores=0@" + cpu + ",1@" + cpu +
                          " -m " + std::to_string(kMemoryMb) + " --vdev=net_null0 --log-level=error" +
                          " -- -i --total-num-mbufs=" + std::to_string(kTotalMbufs) +
                          " --cmdline-file='" + cmd_file.string() + "' </dev/null 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  int complaints = 0;
  char line[4096];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    output->append(line);
    if (std::string_view(line).find(kComplaint) != std::string_view::npos) ++complaints;
  }
  const int status = pclose(p);
  std::error_code ec;
  std::filesystem::remove(cmd_file, ec);
  std::filesystem::remove_all(runtime_dir(tag), ec);
  return status == 0 ? complaints : -1;
}

std::vector<std::string> every_rule(const FlowRuleSet& set, uint16_t port) {
  std::vector<std::string> out;
  for (const auto& g : set.groups) {
    for (const auto& c : g.choices) {
      for (const auto& r : c.rules) out.push_back(r.to_string(port));
    }
  }
  return out;
}

void expect_all_parse(const FlowPolicy& policy) {
  const auto rules = every_rule(make_rule_set(policy), 0);
  std::string output;
  const int reached = commands_reaching_the_pmd(rules, &output);
  ASSERT_GE(reached, 0) << "testpmd failed:\n" << output;
  if (reached == static_cast<int>(rules.size())) return;
  // Find the ones testpmd did not take, one run each.
  for (const auto& r : rules) {
    std::string one;
    EXPECT_EQ(commands_reaching_the_pmd({r}, &one), 1) << "testpmd does not parse: " << r << "\n" << one;
  }
  FAIL() << reached << " of " << rules.size() << " rules reached the PMD:\n" << output;
}

TEST(Testpmd, ParsesEveryRuleOfAVlanPolicyWithArpAndNd) {
  FlowPolicy p;
  p.ipv4 = {0x0A000001, 0xC0A80A0B};
  p.ipv6 = {wire::Ipv6Addr{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
            wire::Ipv6Addr{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55}};
  p.vlan = 100;
  p.rx_queue = 0;
  p.steer_arp = true;
  p.steer_nd = true;
  expect_all_parse(p);
}

TEST(Testpmd, ParsesEveryRuleOfAnUntaggedPortGivenEntirely) {
  FlowPolicy p;
  p.match_dst_ip = false;
  p.steer_arp = true;
  p.steer_nd = true;
  expect_all_parse(p);
}

TEST(Testpmd, ABrokenRuleIsSeen) {
  FlowPolicy p;
  p.ipv4 = {0x0A000001};
  auto rules = every_rule(make_rule_set(p), 0);
  ASSERT_EQ(rules.size(), 1u);
  rules.push_back("flow create 0 ingress pattern eth / ipv4 destination is 10.0.0.1 / end actions queue index 0 / end");
  std::string output;
  EXPECT_EQ(commands_reaching_the_pmd(rules, &output), 1) << output;
}

}  // namespace
}  // namespace uroce::drivers::mlx5

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc < 2 || argv[1][0] == '\0') {
    std::printf("skipped: dpdk-testpmd is not installed (Debian: dpdk)\n");
    return 77;
  }
  uroce::drivers::mlx5::g_testpmd = argv[1];
  return RUN_ALL_TESTS();
}
