// The packet builder: writes every header of a RoCEv2 frame from a
// description, then the payload, pad and ICRC.  `describe()` is the inverse:
// it reads a parsed packet back into a description, so that
// build(describe(parse(f))) == f for every valid packet.
//
// For the data path, `write_headers()` writes only the headers (into mbuf
// headroom, in front of a payload that is already in place) and
// `finish()` writes pad and ICRC after it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "lib/wire/eth.hpp"
#include "lib/wire/ipv6.hpp"
#include "lib/wire/pkt.hpp"
#include "lib/wire/types.hpp"
#include "lib/wire/udp.hpp"

namespace uroce::wire {

struct PktDesc {
  // Ethernet
  MacAddr eth_dst{};
  MacAddr eth_src{};
  uint8_t vlan_count = 0;
  std::array<VlanTag, 2> vlans{};

  // IP
  L3 l3 = L3::IPv4;
  uint8_t tos = 0;                  // IPv4 TOS / IPv6 traffic class
  uint8_t ttl = 64;                 // IPv4 TTL / IPv6 hop limit (A17.4.2)
  uint16_t ip_id = 0;
  uint16_t ip_flags_frag = 0x4000;  // DF (A17.4.1)
  std::optional<uint16_t> ip_checksum;  // empty: computed
  std::span<const uint8_t> ip_options;  // IPv4 options, a multiple of 4 bytes
  uint32_t flow_label = 0;          // IPv6
  Ipv6Addr src{};                   // IPv4 addresses as ::ffff:a.b.c.d
  Ipv6Addr dst{};

  // UDP
  uint16_t sport = kRoceSrcPortMin;
  uint16_t dport = kRoceV2Port;
  uint16_t udp_checksum = 0;        // RoCEv2 sends 0 (A17.4.3)

  // BTH
  uint8_t opcode = 0;
  bool se = false;
  bool mig = false;
  std::optional<uint8_t> pad;       // empty: aligns the payload to 4 bytes
  uint8_t tver = 0;
  Pkey pkey = kDefaultPkey;
  uint8_t resv8a = 0;
  Qpn dest_qp{};
  bool ack_req = false;
  uint8_t resv7 = 0;
  Psn psn{};

  // Extended headers, used when the opcode has them.
  uint8_t rdeth_resv = 0;
  uint32_t rdeth_eecnxt = 0;
  Qkey deth_qkey{};
  uint8_t deth_resv = 0;
  Qpn deth_src_qp{};
  uint8_t xrceth_resv = 0;
  uint32_t xrceth_srq = 0;
  uint32_t feth = 0;
  uint64_t reth_va = 0;
  Rkey reth_rkey{};
  uint32_t reth_len = 0;
  uint64_t atomic_va = 0;
  Rkey atomic_rkey{};
  uint64_t atomic_swap_add = 0;
  uint64_t atomic_compare = 0;
  uint8_t aeth_syndrome = 0;
  Msn aeth_msn{};
  uint64_t atomic_ack_orig = 0;
  uint32_t imm = 0;
  Rkey ieth_rkey{};

  // Payload, pad bytes (zeros when empty) and Ethernet trailer (bytes
  // after the IP packet, such as padding to 60 bytes; none when empty).
  std::span<const uint8_t> payload;
  std::span<const uint8_t> pad_bytes;
  std::span<const uint8_t> eth_trailer;

  static Ipv6Addr ipv4_mapped(uint32_t a) noexcept {
    return {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, static_cast<uint8_t>(a >> 24),
            static_cast<uint8_t>(a >> 16), static_cast<uint8_t>(a >> 8), static_cast<uint8_t>(a)};
  }
};

// Bytes from the frame start to the payload, for `d`'s opcode.
size_t header_len(const PktDesc& d) noexcept;
// The whole frame's length for a payload of `payload_len` bytes.
size_t frame_len(const PktDesc& d, size_t payload_len) noexcept;
// The pad the BTH will carry for `payload_len` bytes.
uint8_t pad_for(const PktDesc& d, size_t payload_len) noexcept;

// Write the headers for a payload of `payload_len` bytes at `out`; returns
// the header length.  Lengths and the IPv4 checksum are filled in.
size_t write_headers(uint8_t* out, const PktDesc& d, size_t payload_len) noexcept;

// With headers and payload in place at `frame`, write pad, ICRC and
// trailer; returns the frame length.
size_t finish(uint8_t* frame, const PktDesc& d, size_t payload_len) noexcept;

// Headers, payload, pad, ICRC and trailer into `out`.  Returns the frame
// length, or 0 when `cap` is too small or the description cannot be built.
size_t build(std::span<uint8_t> out, const PktDesc& d) noexcept;

// Read a parsed RoCEv2 packet back into a description.  The spans point
// into `frame`.
PktDesc describe(const uint8_t* frame, const PktInfo& info) noexcept;

}  // namespace uroce::wire
