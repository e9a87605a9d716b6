// DPDK devargs as text ("net_af_packet0,iface=veth0,framesz=4096",
// "0000:03:00.0,dv_flow_en=1") and the decisions DpdkPort takes from them
// before a device exists: which bus it is on, and the af_packet ring
// geometry a kernel MTU needs.  Pure functions: no EAL, no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "drivers/result.hpp"

namespace uroce::drivers::dpdk {

struct Devargs {
  std::string name;                                       // "net_af_packet0", "0000:03:00.0"
  std::vector<std::pair<std::string, std::string>> args;  // in order; a bare key has an empty value

  // The value of `key`, if present (the first one).
  std::optional<std::string_view> get(std::string_view key) const noexcept;
  bool has(std::string_view key) const noexcept { return get(key).has_value(); }
  // "k=v,k2=v2" (what rte_vdev_init takes) and "name,k=v,…".
  std::string args_text() const;
  std::string text() const;
};

// Splits at top-level commas: a value may hold commas inside [...]
// ("representor=[0,2-3]").  Fails on an empty name or an empty item.
Result<Devargs> parse_devargs(std::string_view text);

// "0000:03:00.0" (domain:bus:device.function) or "03:00.0".
bool is_pci_address(std::string_view name) noexcept;
// The canonical form DPDK names PCI devices by: "0000:03:00.0".
std::string canonical_pci_address(std::string_view name);

// The driver a vdev name asks for: "net_af_packet0" -> "net_af_packet".
std::string_view vdev_driver(std::string_view name) noexcept;
bool is_af_packet(std::string_view name) noexcept;  // net_af_packet<N> or its alias eth_af_packet<N>

// ---- net_af_packet ring geometry (research/dpdk.md §3.1) ------------------------
// TPACKET_V2 keeps a 32-byte header in every ring frame: the largest frame
// the port sends or receives is framesz - 32 (larger TX frames are dropped
// silently, only oerrors counts them).
inline constexpr uint32_t kAfPacketFrameOverhead = 32;
inline constexpr uint32_t kAfPacketDefaultFramesz = 2048;
inline constexpr uint32_t kAfPacketDefaultFramecnt = 512;
// The receive ring uroce asks for: the kernel drops what arrives while the
// ring is full, and at 0.3 M frames/s the PMD's 512 are 2 ms, less than
// one scheduler slice of a receiver off its CPU (a UC stream, which nothing
// resends, then lost a third of its frames beside one busy process).  4096
// are about 14 ms.  The PMD gives its TX ring the same geometry.
inline constexpr uint32_t kAfPacketRingFrames = 4096;
// ... but no ring larger than this: 4096 frames at a 1500-byte MTU, about
// 1800 of a 9000-byte link's (the kernel's memory, twice: RX and TX).
inline constexpr uint32_t kAfPacketRingMaxBytes = 16u << 20;
inline constexpr uint32_t kAfPacketFrameAlign = 16;  // the kernel: framesz a multiple of it
// Our choice: framesz a multiple of 1 KiB, so a block of lcm(framesz, page)
// holds at most four frames.
inline constexpr uint32_t kAfPacketFrameQuantum = 1024;
// Ethernet header plus one 802.1Q tag beyond the IP MTU.
inline constexpr uint32_t kEthOverheadBytes = 18;

struct AfPacketRing {
  uint32_t blocksz = 0;
  uint32_t framesz = 0;
  uint32_t framecnt = 0;
  friend bool operator==(const AfPacketRing&, const AfPacketRing&) = default;
};

// The ring that carries frames of IP MTU `mtu` in at least `frames`
// frames (fewer where they would pass kAfPacketRingMaxBytes, never fewer
// than the PMD's 512), or nullopt when the driver's defaults (framesz
// 2048, framecnt 512) already do.  framesz is at most
// `max_framesz` (the RX queue refuses frames larger than its mbufs:
// framesz - 32 <= data room), so a larger MTU gets the largest ring
// allowed (af_packet_mtu_limit tells what it carries).  The rules:
//   the kernel: blocksz a multiple of `page_size`, framesz a multiple of
//     16 and <= blocksz, framecnt a multiple of blocksz / framesz;
//   the PMD: it addresses frame i at i * framesz, as if frames were back
//     to back, so blocksz must be a multiple of framesz (no gap at the end
//     of a block) — else frames are silently lost.
std::optional<AfPacketRing> af_packet_ring_for_mtu(uint32_t mtu, uint32_t page_size, uint32_t max_framesz,
                                                   uint32_t frames = kAfPacketDefaultFramecnt) noexcept;

// The largest IP MTU a ring of `framesz` carries.
uint32_t af_packet_mtu_limit(uint32_t framesz) noexcept;

}  // namespace uroce::drivers::dpdk
