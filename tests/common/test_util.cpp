#include "tests/common/test_util.hpp"

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "lib/wire/ipv4.hpp"
#include "lib/wire/opcode.hpp"

namespace uroce::test {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    t[i] = c;
  }
  return t;
}

constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

}  // namespace

Bytes from_hex(std::string_view hex) {
  Bytes out;
  int hi = -1;
  for (char c : hex) {
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') continue;
    const int v = hex_digit(c);
    if (v < 0) throw std::invalid_argument("from_hex: not a hex digit");
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<uint8_t>(hi << 4 | v));
      hi = -1;
    }
  }
  if (hi >= 0) throw std::invalid_argument("from_hex: odd number of digits");
  return out;
}

std::string to_hex(std::span<const uint8_t> b) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(b.size() * 2);
  for (uint8_t x : b) {
    s.push_back(kDigits[x >> 4]);
    s.push_back(kDigits[x & 15]);
  }
  return s;
}

uint64_t test_seed(uint64_t fallback) {
  const char* env = std::getenv("UROCE_SEED");
  if (env == nullptr || *env == '\0') return fallback;
  if (std::string_view(env) == "random") {
    return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
           std::random_device{}();
  }
  return std::strtoull(env, nullptr, 0);
}

Bytes Rng::bytes(size_t n) {
  Bytes b(n);
  size_t i = 0;
  while (i + 8 <= n) {
    const uint64_t v = g_();
    for (int k = 0; k < 8; ++k) b[i++] = static_cast<uint8_t>(v >> (8 * k));
  }
  while (i < n) b[i++] = static_cast<uint8_t>(g_());
  return b;
}

uint32_t ref_crc32(uint32_t crc, std::span<const uint8_t> b) {
  crc = ~crc;
  for (uint8_t x : b) crc = kCrcTable[(crc ^ x) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

bool icrc_masked_bit(size_t off, unsigned bit, size_t ip_hdr_len, bool ipv6) {
  if (off < ip_hdr_len) {
    if (ipv6) {
      // byte 0: version(7:4) | traffic class high nibble(3:0)
      if (off == 0) return bit >= 4;
      // byte 1: traffic class low nibble | flow label high nibble; 2-3: flow label
      if (off == 1 || off == 2 || off == 3) return true;
      return off == 7;  // hop limit
    }
    return off == 1 || off == 8 || off == 10 || off == 11;  // TOS, TTL, checksum
  }
  const size_t udp = off - ip_hdr_len;
  if (udp == 6 || udp == 7) return true;  // UDP checksum
  return udp == 8 + 4;                    // BTH Resv8a
}

Bytes ref_icrc_input(std::span<const uint8_t> frame, size_t l3_off, size_t ip_hdr_len, bool ipv6,
                     size_t icrc_off) {
  Bytes in(8, 0xFF);
  const size_t pseudo_end = l3_off + ip_hdr_len + 8 + 12;
  for (size_t i = l3_off; i < icrc_off; ++i) {
    uint8_t b = frame[i];
    if (i < pseudo_end) {
      for (unsigned bit = 0; bit < 8; ++bit) {
        if (icrc_masked_bit(i - l3_off, bit, ip_hdr_len, ipv6)) b = static_cast<uint8_t>(b | (0x80u >> bit));
      }
    }
    in.push_back(b);
  }
  return in;
}

uint32_t ref_icrc(std::span<const uint8_t> frame, size_t l3_off, size_t ip_hdr_len, bool ipv6,
                  size_t icrc_off) {
  return ref_crc32(0, ref_icrc_input(frame, l3_off, ip_hdr_len, ipv6, icrc_off));
}

OwnedDesc& OwnedDesc::operator=(const OwnedDesc& o) {
  if (this == &o) return *this;
  d = o.d;
  payload = o.payload;
  pad_bytes = o.pad_bytes;
  trailer = o.trailer;
  ip_options = o.ip_options;
  rebind();
  return *this;
}

void OwnedDesc::rebind() {
  d.payload = payload;
  d.pad_bytes = pad_bytes;
  d.eth_trailer = trailer;
  d.ip_options = ip_options;
}

OwnedDesc random_desc(Rng& rng, const RandomSpec& spec) {
  using namespace uroce::wire;
  OwnedDesc o;
  PktDesc& d = o.d;
  for (auto& b : d.eth_dst) b = rng.u8();
  for (auto& b : d.eth_src) b = rng.u8();
  d.vlan_count = spec.vlans;
  for (uint8_t i = 0; i < spec.vlans; ++i) {
    // An outer S-tag in front of a C-tag, or C-tags only.
    const bool s_tag = spec.vlans == 2 && i == 0 && rng.coin();
    d.vlans[i] = VlanTag{s_tag ? kEtherTypeQinQ : kEtherTypeVlan, rng.u16()};
  }
  d.l3 = spec.l3;
  d.tos = rng.u8();
  d.ttl = rng.u8();
  d.ip_id = rng.u16();
  d.ip_flags_frag = rng.coin() ? kIpv4FlagDf : 0;
  if (rng.coin()) d.ip_checksum = rng.u16();  // else computed
  d.flow_label = rng.u32() & 0xFFFFF;
  if (spec.l3 == L3::IPv4) {
    d.src = PktDesc::ipv4_mapped(rng.u32());
    d.dst = PktDesc::ipv4_mapped(rng.u32());
    if (spec.ip_options) o.ip_options = rng.bytes(4 * rng.range(1, 10));
  } else {
    for (auto& b : d.src) b = rng.u8();
    for (auto& b : d.dst) b = rng.u8();
  }
  d.sport = rng.u16();
  d.dport = kRoceV2Port;
  d.udp_checksum = rng.u16();
  d.opcode = spec.opcode;
  d.se = rng.coin();
  d.mig = rng.coin();
  d.tver = 0;
  d.pkey = Pkey(rng.u16());
  d.resv8a = rng.u8();
  d.dest_qp = Qpn(rng.u32());
  d.ack_req = rng.coin();
  d.resv7 = rng.u8() & 0x7F;
  d.psn = Psn(rng.u32());
  d.rdeth_resv = rng.u8();
  d.rdeth_eecnxt = rng.u32() & 0xFFFFFF;
  d.deth_qkey = Qkey(rng.u32());
  d.deth_resv = rng.u8();
  d.deth_src_qp = Qpn(rng.u32());
  d.xrceth_resv = rng.u8();
  d.xrceth_srq = rng.u32() & 0xFFFFFF;
  d.feth = rng.u32();
  d.reth_va = rng.u64();
  d.reth_rkey = Rkey(rng.u32());
  d.reth_len = rng.u32();
  d.atomic_va = rng.u64();
  d.atomic_rkey = Rkey(rng.u32());
  d.atomic_swap_add = rng.u64();
  d.atomic_compare = rng.u64();
  d.aeth_syndrome = rng.u8();
  d.aeth_msn = Msn(rng.u32());
  d.atomic_ack_orig = rng.u64();
  d.imm = rng.u32();
  d.ieth_rkey = Rkey(rng.u32());
  o.payload = rng.bytes(spec.payload_len);
  if (spec.random_pad_bytes) o.pad_bytes = rng.bytes(pad_for(d, spec.payload_len));
  if (spec.trailer) o.trailer = rng.bytes(rng.range(1, 8));
  o.rebind();
  return o;
}

Bytes build_frame(const wire::PktDesc& d) {
  Bytes out(wire::frame_len(d, d.payload.size()));
  const size_t n = wire::build(out, d);
  out.resize(n);
  return out;
}

}  // namespace uroce::test
