// tx: the path part of every packet the transport sends (requester,
// responder and completer share it).  The headers themselves are written
// by lib/wire's builder (tx.hpp's tx_send).
#include "transport/rnic/tx.hpp"

#include "lib/wire/eth.hpp"
#include "transport/rnic/mcast.hpp"

namespace uroce::rnic {

void tx_fill_path(const transport::Engine& engine, const AhAttr& path, uint16_t sport, wire::PktDesc& d) noexcept {
  const transport::LocalAddrs& local = engine.config().local;
  d.eth_src = local.mac;
  d.vlan_count = local.vlan_count;
  d.vlans = local.vlans;
  // RoCEv2 (IBA A17.4): the GRH's fields become the IP header's.
  d.l3 = path.ipv4 ? wire::L3::IPv4 : wire::L3::IPv6;
  d.tos = path.traffic_class;
  d.ttl = path.hop_limit;             // TTL / hop limit (A17.4.2)
  d.flow_label = path.flow_label & 0xFFFFFu;
  d.ip_flags_frag = 0x4000;           // DF (A17.4.1)
  d.src = path.sgid;
  d.dst = path.dgid;
  d.sport = sport;
  d.udp_checksum = 0;                 // A17.4.3
  d.pkey = kDefaultPkey;              // the one P_Key we hold (index 0)
}

bool tx_out(transport::Engine& engine, const AhAttr& path, rte_mbuf* m, transport::TxKind kind) noexcept {
  if (const auto mac = multicast_mac(path.dgid)) {
    wire::Eth(rte_pktmbuf_mtod(m, uint8_t*)).set_dst(*mac);
    engine.send_multicast(path.dgid, m);
    return true;
  }
  return engine.send_to(transport::IpAddr::v6(path.dgid), m, path.next_hop, kind);
}

}  // namespace uroce::rnic
