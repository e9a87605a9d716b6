// Parse once: `parse()` walks a received frame a single time and fills a
// `PktInfo` that travels with the buffer.  Validation order (STYLE 7):
// lengths and headers here; QP, state and keys in the transport; the ICRC
// last, before dispatch (`verify_icrc`).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "lib/wire/eth.hpp"
#include "lib/wire/ipv6.hpp"
#include "lib/wire/opcode.hpp"
#include "lib/wire/types.hpp"

namespace uroce::wire {

enum class L3 : uint8_t { None, IPv4, IPv6 };

// What a frame is, once parsed.
enum class FrameClass : uint8_t {
  RoceV2,     // UDP to port 4791 with a BTH: `PktInfo` describes it fully
  ARP,
  ICMPv4,
  ICMPv6,     // includes IPv6 neighbour discovery
  OtherIPv4,  // IPv4 that is not UDP/4791 or ICMP (TCP, other UDP …)
  OtherIPv6,
  OtherEther, // another EtherType (RoCEv1, LLDP …)
  Malformed,  // see `ParseError`
};

// Why a frame was malformed.  One counter per reason (STYLE 13).
#define UROCE_PARSE_ERRORS(X)                                                 \
  X(None, "none")                                                             \
  X(EthTruncated, "frame shorter than an Ethernet header")                    \
  X(FrameTooLong, "frame longer than 65535 bytes")                            \
  X(VlanTruncated, "802.1Q tag truncated")                                    \
  X(TooManyVlanTags, "more than two 802.1Q tags")                             \
  X(ArpTruncated, "ARP payload truncated")                                    \
  X(Ipv4Truncated, "IPv4 header truncated")                                   \
  X(Ipv4BadVersion, "IPv4 EtherType with an IP version other than 4")         \
  X(Ipv4BadIhl, "IPv4 header length below 20 or past the frame")             \
  X(Ipv4BadTotalLen, "IPv4 total length shorter than its header or past the frame") \
  X(Ipv4Fragment, "IPv4 fragment")                                            \
  X(Ipv6Truncated, "IPv6 header truncated")                                   \
  X(Ipv6BadVersion, "IPv6 EtherType with an IP version other than 6")         \
  X(Ipv6BadPayloadLen, "IPv6 payload length past the frame")                  \
  X(UdpTruncated, "UDP header truncated")                                     \
  X(UdpBadLength, "UDP length disagrees with the IP length")                  \
  X(BthTruncated, "UDP payload too short for a BTH and ICRC")                 \
  X(BthBadTver, "BTH transport version other than 0")                         \
  X(ExtTruncated, "packet too short for its opcode's extended headers")       \
  X(PadTooLong, "pad count larger than the payload")

enum class ParseError : uint8_t {
#define X(name, text) name,
  UROCE_PARSE_ERRORS(X)
#undef X
};

inline constexpr size_t kNumParseErrors = 0
#define X(name, text) +1
    UROCE_PARSE_ERRORS(X)
#undef X
    ;

std::string_view parse_error_name(ParseError e) noexcept;   // "ipv4_bad_ihl"
std::string_view parse_error_text(ParseError e) noexcept;   // a sentence
std::string_view frame_class_name(FrameClass c) noexcept;

struct VlanTag {
  uint16_t tpid = kEtherTypeVlan;
  uint16_t tci = 0;
  friend bool operator==(const VlanTag&, const VlanTag&) = default;
};

// The result of parsing one frame.  Offsets are from the frame's first byte.
struct PktInfo {
  FrameClass cls = FrameClass::Malformed;
  ParseError error = ParseError::None;
  L3 l3 = L3::None;
  uint8_t vlan_count = 0;
  std::array<VlanTag, 2> vlans{};
  uint16_t ethertype = 0;     // the innermost EtherType
  uint16_t frame_len = 0;
  uint16_t l3_off = 0;        // IP (or ARP) header
  uint16_t l3_hdr_len = 0;    // IP header length, options included
  uint16_t l3_end = 0;        // end of the IP packet; bytes after it are Ethernet padding
  uint8_t l4_proto = 0;
  uint16_t l4_off = 0;        // UDP header
  // RoCEv2 only:
  uint16_t bth_off = 0;
  uint16_t payload_off = 0;   // after BTH and extended headers
  uint16_t payload_len = 0;   // data bytes, pad excluded
  uint16_t icrc_off = 0;
  uint8_t opcode = 0;
  uint8_t pad = 0;
  bool opcode_known = false;  // false: headers after the BTH are not known
  Qpn dest_qp{};
  Psn psn{};

  const OpcodeInfo& op() const noexcept { return opcode_info(opcode); }
  // Offset of an extended header from the frame start (only if present).
  uint16_t ext_off(Hdr h) const noexcept { return static_cast<uint16_t>(bth_off + op().offset(h)); }
  bool is_roce() const noexcept { return cls == FrameClass::RoceV2; }
};

// Parse `frame` in one pass.  Never reads past `frame.size()`.
PktInfo parse(std::span<const uint8_t> frame) noexcept;

// A parsed IP frame's source and destination addresses as GIDs (on
// RoCEv2 the GRH's SGID and DGID are the IP addresses, IPv4 ones mapped,
// IBA A17.4).  `pi.l3` must be IPv4 or IPv6.
Ipv6Addr src_gid(const uint8_t* frame, const PktInfo& pi) noexcept;
Ipv6Addr dst_gid(const uint8_t* frame, const PktInfo& pi) noexcept;

// The ECN field (RFC 3168) of a parsed IP frame's TOS / traffic class.
// RoCEv2 congestion management reads CE as the IBA's FECN (A17.9.3).
enum class Ecn : uint8_t { NotEct = 0, Ect1 = 1, Ect0 = 2, Ce = 3 };
Ecn ecn(const uint8_t* frame, const PktInfo& pi) noexcept;

// Recompute the ICRC of a parsed RoCEv2 packet and compare it with the one
// it carries.
uint32_t compute_icrc(const uint8_t* frame, const PktInfo& info) noexcept;
bool verify_icrc(const uint8_t* frame, const PktInfo& info) noexcept;

}  // namespace uroce::wire
