// The frames of the wire-limit benchmark: Ethernet / IPv4 / UDP to 4791 /
// a 12-byte BTH-like header / magic, sequence number, timestamp.  Raw
// frames with no RDMA semantics: nothing checks an ICRC, and the BTH
// opcode (from the manufacturer-specific range, IBA 9.2.1) only says which
// step of the benchmark's own little protocol the frame is.
//
//  offset  bytes  field
//   0      14     Ethernet: dst kNotOurMac (or --to-mac), src the port's MAC, IPv4
//  14      20     IPv4: no options, DF, TTL 64, kSenderIp -> kResponderIp (or
//                 --from-ip -> --to-ip)
//  34       8     UDP: kSrcPort -> 4791, checksum 0 (allowed over IPv4)
//  42      12     BTH: opcode = FrameKind, P_Key 0xFFFF, DestQP kDestQp, PSN = seq
//  54       2     magic kMagic
//  56       4     sequence number
//  60       4     timestamp: the sender's TSC, low 32 bits
//  64             padding up to the frame size (zeros)
//
// 64 bytes is the smallest frame (without FCS), so the fields after the BTH
// share 10 bytes: the magic is 16 bits and the timestamp 32 (it wraps after
// 2^32 TSC ticks, over a second, far beyond any round trip we accept).
// Receivers filter on EtherType, IPv4 protocol, UDP port 4791, the magic
// and a known opcode, so the kernel's own frames (ARP, IPv6 ND) are ignored.
//
// Pure functions over bytes; no DPDK here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "lib/wire/eth.hpp"
#include "lib/wire/types.hpp"

namespace uroce::bench::wire_limit {

enum class FrameKind : uint8_t {
  kHello = 0xC0,     // initiator: are you there?
  kHelloAck = 0xC1,  // responder: yes
  kRequest = 0xC2,   // ping -> pong, or tx -> rx data
  kReply = 0xC3,     // pong -> ping: the request turned around
  kDone = 0xC4,      // initiator finished; seq/timestamp carry a 64-bit count
  kDoneAck = 0xC5,   // responder: stopping now
  kCompanion = 0xC6, // goes ahead of a request or reply in its burst (--companions), dropped
};

inline constexpr size_t kEthOffset = 0;
inline constexpr size_t kIpv4Offset = 14;
inline constexpr size_t kUdpOffset = 34;
inline constexpr size_t kBthOffset = 42;
inline constexpr size_t kMagicOffset = 54;
inline constexpr size_t kSeqOffset = 56;
inline constexpr size_t kTscOffset = 60;
inline constexpr size_t kMinFrameBytes = 64;
// The IPv4 total length is 16 bits; anything larger than a jumbo frame
// also outgrows every wire we run on.
inline constexpr size_t kMaxFrameBytes = 9014;

inline constexpr uint16_t kMagic = 0x574C;  // "WL"
inline constexpr uint16_t kSrcPort = 0xC000;
inline constexpr Qpn kDestQp{0x000100};  // not QP0/QP1, so nothing reads it as a MAD
inline constexpr uint32_t kSenderIp = 0x0A2F5B01;     // 10.47.91.1
inline constexpr uint32_t kResponderIp = 0x0A2F5B02;  // 10.47.91.2
// Locally administered and owned by no interface: on a veth the kernel
// marks frames to it PACKET_OTHERHOST and drops them right after the
// packet sockets have their copy (research/dpdk.md §3.1).
inline constexpr wire::MacAddr kNotOurMac{0x02, 0x00, 0x00, 0x57, 0x4C, 0xFF};

// Where an initiator's frames go.  The defaults reach no host: the kernel
// drops them as PACKET_OTHERHOST.  --to-mac, --from-ip and --to-ip name
// the peer's own interface instead, so that its kernel handles every frame
// as it handles uroce's on a shared netdev (IP input, a route lookup, the
// UDP 4791 socket that --claim-udp holds as uroce does).
struct Addressing {
  wire::MacAddr dst = kNotOurMac;
  uint32_t src_ip = kSenderIp;
  uint32_t dst_ip = kResponderIp;
};

struct FrameInfo {
  FrameKind kind;
  uint32_t seq;
  uint32_t tsc;
};

// Writes a complete kRequest frame of `len` bytes (kMinFrameBytes ..
// kMaxFrameBytes) from `src` to `to` into `p`; seq and timestamp are 0.
void write_frame(uint8_t* p, size_t len, const wire::MacAddr& src, const Addressing& to) noexcept;

// The per-frame fields: opcode, PSN, sequence number, timestamp.
void stamp(uint8_t* p, FrameKind kind, uint32_t seq, uint32_t tsc) noexcept;

// Just the timestamp: the last write before a frame goes out.
void set_timestamp(uint8_t* p, uint32_t tsc) noexcept;

// The fields of one of our frames, or nothing for any other frame.
std::optional<FrameInfo> classify(const uint8_t* p, size_t len) noexcept;

// Makes a received frame the answer to it, in place: source MAC `own`,
// destination the request's source when the request was addressed to
// `own` (else as it came: kNotOurMac), IPv4 addresses swapped (the header
// checksum does not change), opcode `kind`; sequence number and timestamp
// stay as they came.
void turn_around(uint8_t* p, FrameKind kind, const wire::MacAddr& own) noexcept;

// A 64-bit count split over the sequence number and timestamp of a kDone.
constexpr uint64_t join_count(uint32_t seq, uint32_t tsc) noexcept {
  return (uint64_t{tsc} << 32) | seq;
}
constexpr uint32_t count_low(uint64_t n) noexcept { return static_cast<uint32_t>(n); }
constexpr uint32_t count_high(uint64_t n) noexcept { return static_cast<uint32_t>(n >> 32); }

}  // namespace uroce::bench::wire_limit
