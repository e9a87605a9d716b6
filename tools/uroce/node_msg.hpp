// The test traffic of `uroce node`: a small message carried as the payload
// of a RoCEv2 UD SEND_ONLY (BTH + DETH) to a fixed test QP, built with
// lib/wire's builder, so every frame is a valid RoCEv2 packet (ICRC
// included) that tshark decodes and `uroce pcap-check` verifies.
//
// The message, big-endian, kNodeMsgSize bytes, then filler up to the
// payload size asked for (byte i of the filler is i mod 256):
//
//   offset  size  field
//        0     4  magic    kNodeMagic ("URND")
//        4     1  version  kNodeVersion
//        5     1  kind     NodeKind (1 ping, 2 pong)
//        6     2  reserved 0
//        8     4  seq      round-trip number; also the BTH PSN (mod 2^24)
//                          and, with --icmp, the ICMP echo sequence (mod 2^16)
//       12     4  reserved 0
//       16     8  tx_ns    the pinger's clock when it sent the ping; the
//                          echo copies it back unchanged
//
// The same message is the data of ICMP echo requests (--icmp), which the
// peer's kernel or engine echoes back as they are.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "lib/wire/build.hpp"
#include "lib/wire/types.hpp"
#include "lib/wire/udp.hpp"
#include "transport/hoststack.hpp"
#include "transport/neigh.hpp"

namespace uroce::tools {

inline constexpr uint32_t kNodeMagic = 0x55524E44;  // "URND"
inline constexpr uint8_t kNodeVersion = 1;
inline constexpr size_t kNodeMsgSize = 24;
// The test QP both sides attach; below the engine's default max_qpn (2^16).
inline constexpr Qpn kNodeQpn{0xC0DE};
inline constexpr Qkey kNodeQkey{0x4E4F4445};  // "NODE"; a non-controlled Q_Key (high bit clear)
// A17.2.3: one UDP source port per QP, in 0xC000-0xFFFF.
inline constexpr uint16_t kRoceSrcPortSpan = 0x4000;
inline constexpr uint16_t kNodeUdpSrcPort =
    static_cast<uint16_t>(wire::kRoceSrcPortMin + kNodeQpn.value() % kRoceSrcPortSpan);

enum class NodeKind : uint8_t { kPing = 1, kPong = 2 };

struct NodeMsg {
  NodeKind kind = NodeKind::kPing;
  uint32_t seq = 0;
  uint64_t tx_ns = 0;
};

// Writes `msg` and the filler into `out` (all of it; at least kNodeMsgSize).
void write_node_msg(std::span<uint8_t> out, const NodeMsg& msg) noexcept;
// The message at the start of `payload`, if it is one (magic, version, kind).
std::optional<NodeMsg> read_node_msg(std::span<const uint8_t> payload) noexcept;

// Addresses of one RoCEv2 test frame.
struct NodeFrameAddrs {
  const transport::LocalAddrs* local = nullptr;  // source MAC and VLAN tags
  wire::MacAddr dst_mac{};                       // zero: filled in by Engine::send_to
  transport::IpAddr src;
  transport::IpAddr dst;
};

// A UD SEND_ONLY to kNodeQpn carrying `payload`.  Returns the frame
// length, or 0 when `out` is too small.
size_t build_node_frame(std::span<uint8_t> out, const NodeFrameAddrs& a, uint32_t seq,
                        std::span<const uint8_t> payload) noexcept;

// The largest payload a frame of IP MTU `mtu` carries (IPv6 headers, the
// larger, assumed).
size_t max_node_payload(uint16_t mtu) noexcept;

}  // namespace uroce::tools
