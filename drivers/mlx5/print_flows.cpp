// uroce-mlx5-flows: prints the rules uroce would install on a ConnectX port,
// as dpdk-testpmd commands, so they can be tried by hand (README.md here).
//
//   uroce-mlx5-flows [--port N] [--queue N] [--vlan VID] [--arp] [--nd]
//                    [--all] [--no-fallback] [ADDRESS...]
//
// Exit status: 0, or 2 for a usage error (with the reason on stderr).
#include <arpa/inet.h>

#include <charconv>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "drivers/mlx5/flow_rules.hpp"

namespace {

using uroce::drivers::mlx5::FlowPolicy;

constexpr int kUsageError = 2;
constexpr const char* kUsage =
    "usage: uroce-mlx5-flows [--port N] [--queue N] [--vlan VID] [--arp] [--nd]\n"
    "                        [--all] [--no-fallback] [ADDRESS...]\n"
    "Prints, as dpdk-testpmd commands, the rte_flow rules uroce installs for\n"
    "these IPv4/IPv6 addresses on an mlx5 port in flow isolation mode.\n"
    "  --port N       testpmd port id (default 0)\n"
    "  --queue N      RX queue the rules steer to (default 0)\n"
    "  --vlan VID     match inside this 802.1Q VLAN\n"
    "  --arp, --nd    also steer ARP / IPv6 neighbour discovery for the addresses\n"
    "                 (only when the kernel netdev does not own them)\n"
    "  --all          match every RoCEv2 (and ARP/ND) frame, not the addresses\n"
    "  --no-fallback  no coarse rules for a PMD that cannot match ARP/ND targets\n";

std::optional<uint16_t> parse_u16(std::string_view s) {
  uint16_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

bool add_address(FlowPolicy& p, const std::string& text) {
  in_addr v4{};
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) {
    p.ipv4.push_back(ntohl(v4.s_addr));
    return true;
  }
  uroce::wire::Ipv6Addr v6{};
  if (inet_pton(AF_INET6, text.c_str(), v6.data()) == 1) {
    p.ipv6.push_back(v6);
    return true;
  }
  return false;
}

int usage_error(const std::string& why) {
  std::fprintf(stderr, "uroce-mlx5-flows: %s\n%s", why.c_str(), kUsage);
  return kUsageError;
}

}  // namespace

int main(int argc, char** argv) {
  FlowPolicy policy;
  uint16_t port = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (arg == "--arp") {
      policy.steer_arp = true;
    } else if (arg == "--nd") {
      policy.steer_nd = true;
    } else if (arg == "--all") {
      policy.match_dst_ip = false;
    } else if (arg == "--no-fallback") {
      policy.coarse_fallback = false;
    } else if (arg == "--port" || arg == "--queue" || arg == "--vlan") {
      const auto v = has_value ? parse_u16(argv[i + 1]) : std::nullopt;
      if (!v) return usage_error(std::string(arg) + " needs a number from 0 to 65535");
      ++i;
      if (arg == "--port") port = *v;
      if (arg == "--queue") policy.rx_queue = *v;
      if (arg == "--vlan") policy.vlan = *v;
    } else if (arg.starts_with("-")) {
      return usage_error("unknown option " + std::string(arg));
    } else if (!add_address(policy, argv[i])) {
      return usage_error("'" + std::string(arg) + "' is not an IPv4 or IPv6 address");
    }
  }
  if (auto st = uroce::drivers::mlx5::check_policy(policy); !st) return usage_error(st.error().message);
  std::fputs(make_rule_set(policy).to_string(port).c_str(), stdout);
  return 0;
}
