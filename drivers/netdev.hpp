// The kernel network device behind a port (af_packet, tap, mlx5
// bifurcated): its MAC, MTU and addresses, which become the uroce
// device's GIDs as rxe does it; and the UDP 4791 claim that keeps the
// kernel from answering RoCE frames with ICMP port-unreachable.
//
// Control path only (system calls).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lib/wire/eth.hpp"
#include "lib/wire/ipv6.hpp"

namespace uroce::drivers {

struct NetdevAddr {
  bool ipv6 = false;
  wire::Ipv6Addr addr{};  // IPv4 as ::ffff:a.b.c.d
  uint8_t prefix = 0;     // prefix length in the address's own family
  bool link_local = false;
};

struct NetdevInfo {
  std::string name;
  int ifindex = 0;
  wire::MacAddr mac{};
  unsigned mtu = 0;
  bool up = false;
  std::vector<NetdevAddr> addrs;
};

// Reads the device from the calling thread's network namespace.  Returns
// nullopt and sets `err` when it does not exist.
std::optional<NetdevInfo> query_netdev(const std::string& name, std::string* err);

// The kernel's neighbour entry for `ip` (IPv4 as ::ffff:a.b.c.d) on
// interface `ifindex` (0: any), read with a netlink RTM_GETNEIGH dump: the
// MAC when the entry is usable (reachable, stale, delay, probe, permanent
// or noarp), nullopt otherwise.  For ports whose ARP/ND replies reach the
// kernel only (an mlx5 port in flow isolation shares them with the kernel
// stack, which keeps them).
std::optional<wire::MacAddr> kernel_neighbour(int ifindex, const wire::Ipv6Addr& ip);

// The gateway of the kernel's route to `dst` (IPv4 as ::ffff:a.b.c.d)
// through interface `ifindex` (0: any), as `ip route get DST oif IF`
// answers it: nullopt when the route has none (the destination is on the
// link) or there is no route.  A netlink RTM_GETROUTE request.
std::optional<wire::Ipv6Addr> kernel_gateway(int ifindex, const wire::Ipv6Addr& dst);

// Make the kernel resolve `ip` on `ifindex`: one empty UDP datagram to its
// discard port (9) sent through the kernel's stack bound to that device.
// False when it could not be sent (no route, no such device).
bool kernel_solicit(int ifindex, const wire::Ipv6Addr& ip);

// A bound UDP socket on port 4791 (IPv4 and IPv6) that is never read: the
// kernel then delivers RoCE frames it sees to a socket instead of sending
// ICMP port-unreachable.  SO_REUSEPORT lets several uroce processes in one
// namespace hold it.  Closed on destruction.
class Udp4791Claim {
 public:
  Udp4791Claim() = default;
  ~Udp4791Claim();
  Udp4791Claim(const Udp4791Claim&) = delete;
  Udp4791Claim& operator=(const Udp4791Claim&) = delete;
  Udp4791Claim(Udp4791Claim&& o) noexcept;
  Udp4791Claim& operator=(Udp4791Claim&& o) noexcept;

  // Returns false and sets `err` when neither family could be bound.
  bool open(std::string* err);
  bool claimed_v4() const noexcept { return fd4_ >= 0; }
  bool claimed_v6() const noexcept { return fd6_ >= 0; }

 private:
  void close_all() noexcept;
  int fd4_ = -1;
  int fd6_ = -1;
};

}  // namespace uroce::drivers
