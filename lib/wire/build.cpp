#include "lib/wire/build.hpp"

#include <cstring>

#include "lib/wire/bth.hpp"
#include "lib/wire/ext.hpp"
#include "lib/wire/icrc.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/opcode.hpp"

namespace uroce::wire {
namespace {

size_t l2_len(const PktDesc& d) noexcept { return Eth::kSize + d.vlan_count * Vlan::kSize; }

size_t l3_hdr_len(const PktDesc& d) noexcept {
  return d.l3 == L3::IPv6 ? Ipv6::kSize : Ipv4::kMinSize + d.ip_options.size();
}

size_t transport_hdr_len(const PktDesc& d) noexcept {
  const OpcodeInfo& op = opcode_info(d.opcode);
  return op.valid ? op.hdr_len : Bth::kSize;
}

uint32_t v4(const Ipv6Addr& a) noexcept { return load_be<uint32_t>(a.data() + 12); }

Ipv6Addr addr4(uint32_t a) noexcept { return PktDesc::ipv4_mapped(a); }

void write_ext(uint8_t* bth, const OpcodeInfo& op, const PktDesc& d) noexcept {
  if (op.has(kHdrRdeth)) {
    Rdeth h(bth + op.offset(kHdrRdeth));
    h.set_resv8(d.rdeth_resv);
    h.set_number(d.rdeth_eecnxt);
  }
  if (op.has(kHdrDeth)) {
    Deth h(bth + op.offset(kHdrDeth));
    h.set_qkey(d.deth_qkey);
    h.set_resv8(d.deth_resv);
    h.set_src_qp(d.deth_src_qp);
  }
  if (op.has(kHdrXrceth)) {
    XrcEth h(bth + op.offset(kHdrXrceth));
    h.set_resv8(d.xrceth_resv);
    h.set_number(d.xrceth_srq);
  }
  if (op.has(kHdrFeth)) Feth(bth + op.offset(kHdrFeth)).set_word(d.feth);
  if (op.has(kHdrReth)) {
    Reth h(bth + op.offset(kHdrReth));
    h.set_va(d.reth_va);
    h.set_rkey(d.reth_rkey);
    h.set_dma_len(d.reth_len);
  }
  if (op.has(kHdrAtomicEth)) {
    AtomicEth h(bth + op.offset(kHdrAtomicEth));
    h.set_va(d.atomic_va);
    h.set_rkey(d.atomic_rkey);
    h.set_swap_add(d.atomic_swap_add);
    h.set_compare(d.atomic_compare);
  }
  if (op.has(kHdrAeth)) {
    Aeth h(bth + op.offset(kHdrAeth));
    h.set_syndrome(d.aeth_syndrome);
    h.set_msn(d.aeth_msn);
  }
  if (op.has(kHdrAtomicAckEth)) AtomicAckEth(bth + op.offset(kHdrAtomicAckEth)).set_orig(d.atomic_ack_orig);
  if (op.has(kHdrImmDt)) ImmDt(bth + op.offset(kHdrImmDt)).set_imm(d.imm);
  if (op.has(kHdrIeth)) Ieth(bth + op.offset(kHdrIeth)).set_rkey(d.ieth_rkey);
}

void read_ext(const uint8_t* bth, const OpcodeInfo& op, PktDesc& d) noexcept {
  if (op.has(kHdrRdeth)) {
    RdethC h(bth + op.offset(kHdrRdeth));
    d.rdeth_resv = h.resv8();
    d.rdeth_eecnxt = h.number();
  }
  if (op.has(kHdrDeth)) {
    DethC h(bth + op.offset(kHdrDeth));
    d.deth_qkey = h.qkey();
    d.deth_resv = h.resv8();
    d.deth_src_qp = h.src_qp();
  }
  if (op.has(kHdrXrceth)) {
    XrcEthC h(bth + op.offset(kHdrXrceth));
    d.xrceth_resv = h.resv8();
    d.xrceth_srq = h.number();
  }
  if (op.has(kHdrFeth)) d.feth = FethC(bth + op.offset(kHdrFeth)).word();
  if (op.has(kHdrReth)) {
    RethC h(bth + op.offset(kHdrReth));
    d.reth_va = h.va();
    d.reth_rkey = h.rkey();
    d.reth_len = h.dma_len();
  }
  if (op.has(kHdrAtomicEth)) {
    AtomicEthC h(bth + op.offset(kHdrAtomicEth));
    d.atomic_va = h.va();
    d.atomic_rkey = h.rkey();
    d.atomic_swap_add = h.swap_add();
    d.atomic_compare = h.compare();
  }
  if (op.has(kHdrAeth)) {
    AethC h(bth + op.offset(kHdrAeth));
    d.aeth_syndrome = h.syndrome();
    d.aeth_msn = h.msn();
  }
  if (op.has(kHdrAtomicAckEth)) d.atomic_ack_orig = AtomicAckEthC(bth + op.offset(kHdrAtomicAckEth)).orig();
  if (op.has(kHdrImmDt)) d.imm = ImmDtC(bth + op.offset(kHdrImmDt)).imm();
  if (op.has(kHdrIeth)) d.ieth_rkey = IethC(bth + op.offset(kHdrIeth)).rkey();
}

}  // namespace

uint8_t pad_for(const PktDesc& d, size_t payload_len) noexcept {
  if (d.pad) return *d.pad & 0x3;
  return static_cast<uint8_t>((4 - (payload_len & 3)) & 3);
}

size_t header_len(const PktDesc& d) noexcept {
  return l2_len(d) + l3_hdr_len(d) + Udp::kSize + transport_hdr_len(d);
}

size_t frame_len(const PktDesc& d, size_t payload_len) noexcept {
  return header_len(d) + payload_len + pad_for(d, payload_len) + kIcrcSize + d.eth_trailer.size();
}

size_t write_headers(uint8_t* out, const PktDesc& d, size_t payload_len) noexcept {
  const OpcodeInfo& op = opcode_info(d.opcode);
  const uint8_t pad = pad_for(d, payload_len);
  const size_t udp_len = Udp::kSize + transport_hdr_len(d) + payload_len + pad + kIcrcSize;

  Eth eth(out);
  eth.set_dst(d.eth_dst);
  eth.set_src(d.eth_src);
  size_t off = Eth::kSize - 2;  // where the next EtherType/TPID goes
  for (uint8_t i = 0; i < d.vlan_count; ++i) {
    store_be<uint16_t>(out + off, d.vlans[i].tpid);
    store_be<uint16_t>(out + off + 2, d.vlans[i].tci);
    off += Vlan::kSize;
  }
  store_be<uint16_t>(out + off, d.l3 == L3::IPv6 ? kEtherTypeIpv6 : kEtherTypeIpv4);
  off += 2;

  uint8_t* ip = out + off;
  const size_t ip_hl = l3_hdr_len(d);
  if (d.l3 == L3::IPv6) {
    Ipv6 h(ip);
    h.set_vtcfl(d.tos, d.flow_label);
    h.set_payload_len(static_cast<uint16_t>(udp_len));
    h.set_next_header(kIpProtoUdp);
    h.set_hop_limit(d.ttl);
    h.set_src(d.src);
    h.set_dst(d.dst);
  } else {
    Ipv4 h(ip);
    h.set_version_ihl(static_cast<uint8_t>(ip_hl / 4));
    h.set_tos(d.tos);
    h.set_total_len(static_cast<uint16_t>(ip_hl + udp_len));
    h.set_id(d.ip_id);
    h.set_flags_frag(d.ip_flags_frag);
    h.set_ttl(d.ttl);
    h.set_protocol(kIpProtoUdp);
    h.set_src(v4(d.src));
    h.set_dst(v4(d.dst));
    if (!d.ip_options.empty()) std::memcpy(ip + Ipv4::kMinSize, d.ip_options.data(), d.ip_options.size());
    if (d.ip_checksum) {
      h.set_checksum(*d.ip_checksum);
    } else {
      h.update_checksum();
    }
  }

  Udp udp(ip + ip_hl);
  udp.set_src_port(d.sport);
  udp.set_dst_port(d.dport);
  udp.set_length(static_cast<uint16_t>(udp_len));
  udp.set_checksum(d.udp_checksum);

  uint8_t* bth_p = ip + ip_hl + Udp::kSize;
  Bth bth(bth_p);
  bth.set_opcode(d.opcode);
  bth_p[1] = 0;
  bth.set_se(d.se);
  bth.set_mig(d.mig);
  bth.set_pad_count(pad);
  bth.set_tver(d.tver);
  bth.set_pkey(d.pkey);
  bth.set_resv8a(d.resv8a);
  bth.set_dest_qp(d.dest_qp);
  bth_p[8] = 0;
  bth.set_ack_req(d.ack_req);
  bth.set_resv7(d.resv7);
  bth.set_psn(d.psn);
  if (op.valid) write_ext(bth_p, op, d);
  return static_cast<size_t>(bth_p - out) + transport_hdr_len(d);
}

size_t finish(uint8_t* frame, const PktDesc& d, size_t payload_len) noexcept {
  const size_t hdr = header_len(d);
  const uint8_t pad = pad_for(d, payload_len);
  uint8_t* p = frame + hdr + payload_len;
  if (d.pad_bytes.size() == pad) {
    if (pad) std::memcpy(p, d.pad_bytes.data(), pad);
  } else {
    std::memset(p, 0, pad);
  }
  p += pad;
  const size_t l3 = l2_len(d);
  const uint32_t crc = icrc(frame + l3, l3_hdr_len(d), d.l3 == L3::IPv6, static_cast<size_t>(p - (frame + l3)));
  store_icrc(p, crc);
  p += kIcrcSize;
  if (!d.eth_trailer.empty()) {
    std::memcpy(p, d.eth_trailer.data(), d.eth_trailer.size());
    p += d.eth_trailer.size();
  }
  return static_cast<size_t>(p - frame);
}

size_t build(std::span<uint8_t> out, const PktDesc& d) noexcept {
  if (d.l3 == L3::None || d.vlan_count > d.vlans.size()) return 0;
  if (d.l3 == L3::IPv4 && (d.ip_options.size() % 4 != 0 || d.ip_options.size() > 40)) return 0;
  const size_t total = frame_len(d, d.payload.size());
  if (total > out.size() || total > 0xFFFF) return 0;
  const size_t hdr = write_headers(out.data(), d, d.payload.size());
  if (!d.payload.empty()) std::memcpy(out.data() + hdr, d.payload.data(), d.payload.size());
  return finish(out.data(), d, d.payload.size());
}

PktDesc describe(const uint8_t* f, const PktInfo& pi) noexcept {
  PktDesc d;
  EthC eth(f);
  d.eth_dst = eth.dst();
  d.eth_src = eth.src();
  d.vlan_count = pi.vlan_count;
  d.vlans = pi.vlans;
  d.l3 = pi.l3;
  const uint8_t* ip = f + pi.l3_off;
  if (pi.l3 == L3::IPv6) {
    Ipv6C h(ip);
    d.tos = h.traffic_class();
    d.flow_label = h.flow_label();
    d.ttl = h.hop_limit();
    d.src = h.src();
    d.dst = h.dst();
  } else {
    Ipv4C h(ip);
    d.tos = h.tos();
    d.ip_id = h.id();
    d.ip_flags_frag = h.flags_frag();
    d.ttl = h.ttl();
    d.ip_checksum = h.checksum();
    d.ip_options = std::span<const uint8_t>(ip + Ipv4::kMinSize, pi.l3_hdr_len - Ipv4::kMinSize);
    d.src = addr4(h.src());
    d.dst = addr4(h.dst());
  }
  UdpC udp(f + pi.l4_off);
  d.sport = udp.src_port();
  d.dport = udp.dst_port();
  d.udp_checksum = udp.checksum();
  const uint8_t* bth_p = f + pi.bth_off;
  BthC bth(bth_p);
  d.opcode = bth.opcode();
  d.se = bth.se();
  d.mig = bth.mig();
  d.pad = bth.pad_count();
  d.tver = bth.tver();
  d.pkey = bth.pkey();
  d.resv8a = bth.resv8a();
  d.dest_qp = bth.dest_qp();
  d.ack_req = bth.ack_req();
  d.resv7 = bth.resv7();
  d.psn = bth.psn();
  const OpcodeInfo& op = opcode_info(d.opcode);
  if (op.valid) read_ext(bth_p, op, d);
  d.payload = std::span<const uint8_t>(f + pi.payload_off, pi.payload_len);
  d.pad_bytes = std::span<const uint8_t>(f + pi.payload_off + pi.payload_len, pi.pad);
  d.eth_trailer = std::span<const uint8_t>(f + pi.l3_end, pi.frame_len - pi.l3_end);
  return d;
}

}  // namespace uroce::wire
