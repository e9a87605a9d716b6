// A hostile client of uroced (issue 15, suite daemon): it speaks the
// daemon's protocol itself (drivers/daemon) and tries what a well-behaved
// drop-in never does, then checks, through the daemon's own counters, that
// each attempt was refused and counted, and that the daemon ended it for
// the last one.  The daemon must serve everyone else throughout (the test
// script runs legitimate programs beside it).
//
//   hostile_client SOCKET OWN_IP PEER_IP VICTIM_QPN
//
//   garbage      datagrams that are not messages, requests before Hello,
//                a Hello of another protocol version: the connection ends
//   forgery      on a proper connection, frames into its TX ring:
//                - UD from a QP it does not own (VICTIM_QPN);
//                - a controlled Q_Key (run it as a user without CAP_NET_RAW);
//                - RC to a QP no QP of it claimed (the victim's peer);
//                - a claim for a QPN it does not own;
//                - a CM REQ naming a QP it does not own, and a DREQ naming a
//                  communication ID that is not its own;
//                - RoCEv2 from an address that is not the device's;
//                - UD from its own QP to QP 1 (a MAD around the router)
//   violation    a TX tail beyond what the ring holds: the daemon ends it
//
// Exit 0: every check held; 1: one did not (printed); 2: usage.
#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cm/msg.hpp"
#include "drivers/daemon/link.hpp"
#include "drivers/daemon/msg_socket.hpp"
#include "drivers/daemon/shm_ring.hpp"
#include "lib/wire/build.hpp"
#include "lib/wire/opcode.hpp"

namespace {

using namespace uroce;
namespace d = drivers::daemon;
using nlohmann::json;

int failures = 0;
void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++failures;
}

int raw_connect(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.data(), std::min(path.size(), sizeof sa.sun_path - 1));
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// True when the daemon closed `fd` within a second.
bool closed_by_daemon(int fd) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, 1000) <= 0) return false;
  char b[64];
  return ::recv(fd, b, sizeof b, MSG_DONTWAIT) == 0 || (p.revents & (POLLHUP | POLLERR)) != 0;
}

// The daemon's counters of its first device: set -> name -> value.
json daemon_stats(const std::string& path) {
  const int fd = raw_connect(path);
  if (fd < 0) return json();
  const d::AdminReq req{static_cast<uint32_t>(d::AdminWhat::kStats), 0};
  d::Message rep;
  json out;
  if (d::send_message(fd, d::MsgType::Admin, 0, 1, 0, d::bytes_of(req)) == 0 && d::recv_message(fd, &rep) == 0)
    out = json::parse(std::string(rep.body.begin(), rep.body.end()), nullptr, false);
  rep.close_fds();
  ::close(fd);
  return out.is_array() && !out.empty() ? out[0] : json();
}

uint64_t counter(const json& s, const char* set, const char* name) {
  if (!s.contains(set) || !s[set].contains(name)) return 0;
  return s[set][name].get<uint64_t>();
}

uint32_t ip4(const char* text) {
  in_addr a{};
  if (inet_pton(AF_INET, text, &a) != 1) return 0;
  return ntohl(a.s_addr);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s SOCKET OWN_IP PEER_IP VICTIM_QPN\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const uint32_t own = ip4(argv[2]);
  const uint32_t peer = ip4(argv[3]);
  const auto victim = static_cast<uint32_t>(std::strtoul(argv[4], nullptr, 0));
  if (own == 0 || peer == 0) {
    std::fprintf(stderr, "hostile_client: addresses are IPv4 dotted quads\n");
    return 2;
  }

  // ---- garbage on the socket ----
  {
    const int fd = raw_connect(path);
    check(fd >= 0, "connected to " + path);
    const char junk[5] = {1, 2, 3, 4, 5};  // shorter than a message header
    ::send(fd, junk, sizeof junk, MSG_NOSIGNAL);
    check(closed_by_daemon(fd), "a datagram shorter than a header ends the connection");
    ::close(fd);
  }
  {
    const int fd = raw_connect(path);
    const d::QpnReq q{0, 0};
    d::send_message(fd, d::MsgType::AllocQpn, 0, 1, 0, d::bytes_of(q));
    check(closed_by_daemon(fd), "a request before Hello ends the connection");
    ::close(fd);
  }
  {
    const int fd = raw_connect(path);
    d::MsgHeader h{static_cast<uint16_t>(d::MsgType::Hello), 0, 1, 0, 1000};  // says 1000 bytes, sends none
    ::send(fd, &h, sizeof h, MSG_NOSIGNAL);
    check(closed_by_daemon(fd), "a header whose length lies ends the connection");
    ::close(fd);
  }
  {
    const int fd = raw_connect(path);
    d::HelloReq hello{};
    hello.version = d::kProtoVersion + 7;
    d::Message rep;
    d::send_message(fd, d::MsgType::Hello, 0, 1, 0, d::bytes_of(hello));
    const int rc = d::recv_message(fd, &rep);
    check(rc == 0 && rep.hdr.status == EPROTO, "Hello of another protocol version is refused (EPROTO)");
    rep.close_fds();
    ::close(fd);
  }

  // ---- a proper client, then forgeries in its ring ----
  auto link = d::Link::connect(path, "hostile_client");
  check(static_cast<bool>(link), "Hello");
  if (!link) return 1;
  auto region = (*link)->open_device(0);
  check(static_cast<bool>(region), "OpenDevice");
  if (!region) return 1;
  uint32_t mine = 0;
  check((*link)->alloc_qpn(0, &mine) == 0 && mine >= 2, "a QPN of its own");
  const d::DeviceDesc& dev = (*link)->devices()[0];
  auto rings = d::shm_rings(region->base(), region->geometry());
  rings.tx.producer_sync();

  const json before = daemon_stats(path);
  auto send_frame = [&](const wire::PktDesc& pd) {
    std::vector<uint8_t> f(2048);
    const size_t n = wire::build(f, pd);
    if (n == 0) return;
    rings.tx.put(d::RecordKind::kFrame, f.data(), static_cast<uint32_t>(n));
    rings.tx.publish();
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t w = ::write(region->kick_fd(), &one, sizeof one);
  };
  auto base = [&](uint8_t opcode, uint32_t dst_ip, uint32_t dst_qpn) {
    wire::PktDesc pd;
    std::copy(dev.mac, dev.mac + 6, pd.eth_src.begin());
    pd.eth_dst = pd.eth_src;
    pd.src = wire::PktDesc::ipv4_mapped(own);
    pd.dst = wire::PktDesc::ipv4_mapped(dst_ip);
    pd.opcode = opcode;
    pd.dest_qp = Qpn(dst_qpn);
    return pd;
  };
  const std::array<uint8_t, 64> payload{};
  {
    auto pd = base(wire::op::UD_SEND_ONLY, peer, 0x123);
    pd.deth_src_qp = Qpn(victim);  // not ours
    pd.deth_qkey = Qkey(0x1234);
    pd.payload = payload;
    send_frame(pd);
  }
  {
    auto pd = base(wire::op::UD_SEND_ONLY, peer, 0x123);
    pd.deth_src_qp = Qpn(mine);
    pd.deth_qkey = Qkey(0x80000001);  // controlled
    pd.payload = payload;
    send_frame(pd);
  }
  {
    auto pd = base(wire::op::RC_SEND_ONLY, peer, 0x456);  // nothing of ours claimed it
    pd.payload = payload;
    send_frame(pd);
  }
  {
    d::ClaimRecord c{};
    c.qpn = victim;  // not ours
    c.remote_qpn = 0x789;
    const auto g = wire::PktDesc::ipv4_mapped(peer);
    std::copy(g.begin(), g.end(), c.remote_gid);
    rings.tx.put(d::RecordKind::kClaim, &c, sizeof c);
    rings.tx.publish();
  }
  {
    cm::ReqMsg r;
    r.local_comm_id = 0xBAD1;
    r.local_qpn = victim;  // not ours
    const auto mad = cm::build_mad(r, 1);
    auto pd = base(wire::op::UD_SEND_ONLY, peer, 1);
    pd.deth_src_qp = kQp1;
    pd.deth_qkey = kGsiQkey;
    pd.payload = mad;
    send_frame(pd);
    cm::DreqMsg dq;
    dq.local_comm_id = 0xBAD2;  // no connection of ours
    const auto mad2 = cm::build_mad(dq, 2);
    pd.payload = mad2;
    send_frame(pd);
  }
  {
    auto pd = base(wire::op::UD_SEND_ONLY, peer, 1);  // to QP 1, from our own UD QP: around the router
    pd.deth_src_qp = Qpn(mine);
    pd.deth_qkey = kGsiQkey;
    cm::DreqMsg dq;
    const auto mad = cm::build_mad(dq, 3);
    pd.payload = mad;
    send_frame(pd);
  }
  {
    auto pd = base(wire::op::UD_SEND_ONLY, peer, 0x123);
    pd.src = wire::PktDesc::ipv4_mapped(own ^ 0x0000FF00);  // not the device's
    pd.deth_src_qp = Qpn(mine);
    pd.deth_qkey = Qkey(0x1234);
    pd.payload = payload;
    send_frame(pd);
  }
  ::usleep(300000);  // the daemon's next turns
  const json after = daemon_stats(path);
  check(!after.is_null(), "the daemon answers after the forgeries");
  auto grew = [&](const char* set, const char* name) { return counter(after, set, name) > counter(before, set, name); };
  check(grew("switch", "tx_refused_src_qpn"), "UD from a QP not its own: refused (tx_refused_src_qpn)");
  check(getuid() == 0 || grew("switch", "tx_refused_qkey"), "a controlled Q_Key without CAP_NET_RAW: refused (tx_refused_qkey)");
  check(grew("switch", "tx_refused_path"), "RC to a QP nothing of it claimed: refused (tx_refused_path)");
  check(grew("switch", "claims_refused"), "a claim for a QPN not its own: refused (claims_refused)");
  check(counter(after, "switch", "tx_refused_mad") >= counter(before, "switch", "tx_refused_mad") + 3,
        "a REQ for another's QP, a DREQ for no connection of its own, a MAD around QP 1: refused (tx_refused_mad)");
  check(grew("cm_router", "out_refused_qpn"), "the CM router saw the REQ naming another's QP");
  check(grew("switch", "tx_refused_src_ip"), "RoCEv2 from an address not the device's: refused (tx_refused_src_ip)");

  // ---- a ring that cannot be: the daemon ends this client ----
  auto* hdr = d::shm_header(region->base());
  hdr->tx_tail.v.store(hdr->tx_head.v.load() + region->geometry().tx_slots + 5, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w = ::write(region->kick_fd(), &one, sizeof one);
  bool ended = false;
  for (int i = 0; i < 50 && !ended; ++i) {
    ::usleep(100000);
    uint32_t q = 0;
    ended = !(*link)->alive() || (*link)->alloc_qpn(0, &q) != 0;
  }
  check(ended, "an impossible TX tail ends the client");
  const json last = daemon_stats(path);
  check(!last.is_null() && counter(last, "switch", "ring_violations") > counter(before, "switch", "ring_violations"),
        "the daemon counted the violation and still answers");
  std::printf("hostile_client: %s\n", failures == 0 ? "every check held" : "some checks failed");
  return failures == 0 ? 0 : 1;
}
