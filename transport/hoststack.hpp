// What the engine answers and sends itself besides RoCE: ARP (RFC 826),
// ICMP echo (RFC 792), IPv6 neighbour discovery (RFC 4861) and ICMPv6 echo
// (RFC 4443).  Pure frame-in / frame-out functions over byte buffers: the
// engine owns the buffers, the neighbour table and the decision to answer
// (only on ports with no kernel netdev; with a netdev the kernel answers).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "lib/wire/eth.hpp"
#include "lib/wire/pkt.hpp"
#include "transport/neigh.hpp"

namespace uroce::transport {

// The port's own identity as the host stack needs it.
struct LocalAddrs {
  wire::MacAddr mac{};
  std::vector<IpAddr> ips;  // IPv4-mapped and IPv6
  uint8_t vlan_count = 0;   // tags to put on frames we originate
  std::array<wire::VlanTag, 2> vlans{};

  bool owns(const IpAddr& ip) const noexcept;
  // The address of ours to send from towards `dst` (same family; an IPv6
  // link-local destination prefers a link-local source).
  std::optional<IpAddr> source_for(const IpAddr& dst) const noexcept;
};

// Something a received frame told us about a neighbour.
struct Learned {
  IpAddr ip;
  wire::MacAddr mac{};
  bool solicited = false;  // a reply to us (creates an entry) or overheard
};

// What to do with a received non-RoCE frame.
struct HostAction {
  size_t reply_len = 0;            // > 0: send `reply_len` bytes written to `out`
  std::optional<Learned> learned;  // feed to the neighbour table
  enum class Kind : uint8_t {
    None, ArpRequest, ArpReply, IcmpEcho, NdSolicit, NdAdvert, Icmp6Echo, NotForUs, Ignored,
  } kind = Kind::None;
};

// Inspect `frame` (parsed as `info`) and, if it is ARP/ICMP/ND for one of
// our addresses, write the answer to `out` (capacity `cap`, at least the
// frame's length).  `answer` false: only learn (a kernel netdev answers).
HostAction handle_host_frame(std::span<const uint8_t> frame, const wire::PktInfo& info,
                             const LocalAddrs& local, bool answer, uint8_t* out, size_t cap) noexcept;

// Frames we originate.  Each returns the frame length written to `out`
// (which must hold at least 128 bytes).
size_t build_arp_request(uint8_t* out, const LocalAddrs& local, const IpAddr& src, const IpAddr& target) noexcept;
size_t build_gratuitous_arp(uint8_t* out, const LocalAddrs& local, const IpAddr& ip) noexcept;
size_t build_neighbor_solicit(uint8_t* out, const LocalAddrs& local, const IpAddr& src, const IpAddr& target) noexcept;
size_t build_unsolicited_na(uint8_t* out, const LocalAddrs& local, const IpAddr& ip) noexcept;
// An ICMP(v6) echo request, for tests and `uroce ping`.
size_t build_echo_request(uint8_t* out, const LocalAddrs& local, const wire::MacAddr& dst_mac, const IpAddr& src,
                          const IpAddr& dst, uint16_t id, uint16_t seq, std::span<const uint8_t> data) noexcept;

}  // namespace uroce::transport
