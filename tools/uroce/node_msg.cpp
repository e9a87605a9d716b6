#include "tools/uroce/node_msg.hpp"

#include <cstring>

#include "lib/wire/bytes.hpp"
#include "lib/wire/ipv6.hpp"
#include "lib/wire/opcode.hpp"

namespace uroce::tools {
namespace {

constexpr size_t kMagicOff = 0;
constexpr size_t kVersionOff = 4;
constexpr size_t kKindOff = 5;
constexpr size_t kSeqOff = 8;
constexpr size_t kTxNsOff = 16;
static_assert(kTxNsOff + sizeof(uint64_t) == kNodeMsgSize);

constexpr size_t kUdpBytes = 8;
constexpr size_t kBthDethBytes = 12 + 8;
constexpr size_t kIcrcBytes = 4;

}  // namespace

void write_node_msg(std::span<uint8_t> out, const NodeMsg& msg) noexcept {
  std::memset(out.data(), 0, kNodeMsgSize);
  wire::store_be<uint32_t>(out.data() + kMagicOff, kNodeMagic);
  out[kVersionOff] = kNodeVersion;
  out[kKindOff] = static_cast<uint8_t>(msg.kind);
  wire::store_be<uint32_t>(out.data() + kSeqOff, msg.seq);
  wire::store_be<uint64_t>(out.data() + kTxNsOff, msg.tx_ns);
  for (size_t i = kNodeMsgSize; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i - kNodeMsgSize);
}

std::optional<NodeMsg> read_node_msg(std::span<const uint8_t> p) noexcept {
  if (p.size() < kNodeMsgSize || wire::load_be<uint32_t>(p.data() + kMagicOff) != kNodeMagic ||
      p[kVersionOff] != kNodeVersion) {
    return std::nullopt;
  }
  const uint8_t kind = p[kKindOff];
  if (kind != static_cast<uint8_t>(NodeKind::kPing) && kind != static_cast<uint8_t>(NodeKind::kPong)) {
    return std::nullopt;
  }
  NodeMsg m;
  m.kind = static_cast<NodeKind>(kind);
  m.seq = wire::load_be<uint32_t>(p.data() + kSeqOff);
  m.tx_ns = wire::load_be<uint64_t>(p.data() + kTxNsOff);
  return m;
}

size_t build_node_frame(std::span<uint8_t> out, const NodeFrameAddrs& a, uint32_t seq,
                        std::span<const uint8_t> payload) noexcept {
  wire::PktDesc d;
  d.eth_dst = a.dst_mac;
  d.eth_src = a.local->mac;
  d.vlan_count = a.local->vlan_count;
  d.vlans = a.local->vlans;
  d.l3 = a.dst.is_v4() ? wire::L3::IPv4 : wire::L3::IPv6;
  d.src = a.src.bytes;
  d.dst = a.dst.bytes;
  d.ip_id = static_cast<uint16_t>(seq);
  d.sport = kNodeUdpSrcPort;
  d.opcode = wire::op::UD_SEND_ONLY;
  d.dest_qp = kNodeQpn;
  d.psn = Psn(seq);  // 24 bits: Psn keeps the low ones
  d.deth_qkey = kNodeQkey;
  d.deth_src_qp = kNodeQpn;
  d.payload = payload;
  return wire::build(out, d);
}

size_t max_node_payload(uint16_t mtu) noexcept {
  const size_t headers = wire::Ipv6::kSize + kUdpBytes + kBthDethBytes + kIcrcBytes;
  return mtu > headers ? mtu - headers : 0;
}

}  // namespace uroce::tools
