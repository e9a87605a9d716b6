// The librdmacm drop-in in process, as a program built against rdma-core's
// headers uses it: rdma_getaddrinfo's forms, and a client and a server of
// one process connected over 127.0.0.1 and over the device's own address
// (loopback: rdma-core's own tests and fi_pingpong do this); rsockets
// between the two devices.  Two sim devices (sim2.toml); loopback never
// touches their wire.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/tcp.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "signal_wait.hpp"

namespace {

sockaddr_in sin4(const char* ip, uint16_t port) {
  sockaddr_in s{};
  s.sin_family = AF_INET;
  s.sin_port = htons(port);
  inet_pton(AF_INET, ip, &s.sin_addr);
  return s;
}
sockaddr* sa(sockaddr_in& s) { return reinterpret_cast<sockaddr*>(&s); }

TEST(RdmaGetaddrinfo, NodeAndService) {
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_TCP;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo("10.9.0.2", "7471", &hints, &res), 0);
  ASSERT_NE(res, nullptr);
  ASSERT_NE(res->ai_dst_addr, nullptr);
  EXPECT_EQ(res->ai_family, AF_INET);
  EXPECT_EQ(ntohs(reinterpret_cast<sockaddr_in*>(res->ai_dst_addr)->sin_port), 7471);
  EXPECT_EQ(res->ai_src_addr, nullptr);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_RC);
  rdma_freeaddrinfo(res);
  hints.ai_flags = RAI_PASSIVE;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, "7471", &hints, &res), 0);
  ASSERT_NE(res->ai_src_addr, nullptr);
  EXPECT_EQ(res->ai_dst_addr, nullptr);
  rdma_freeaddrinfo(res);
}

// librdmacm: with neither node nor service the hints' addresses and fields
// make the result (pyverbs' rdma_cm tests and fi_pingpong call it so).
TEST(RdmaGetaddrinfo, HintsOnly) {
  sockaddr_in src = sin4("10.9.0.1", 0), dst = sin4("10.9.0.2", 7472);
  rdma_addrinfo hints{};
  hints.ai_port_space = RDMA_PS_UDP;
  hints.ai_qp_type = IBV_QPT_UD;
  hints.ai_src_addr = sa(src);
  hints.ai_src_len = sizeof src;
  hints.ai_dst_addr = sa(dst);
  hints.ai_dst_len = sizeof dst;
  rdma_addrinfo* res = nullptr;
  ASSERT_EQ(rdma_getaddrinfo(nullptr, nullptr, &hints, &res), 0);
  ASSERT_NE(res, nullptr);
  EXPECT_EQ(res->ai_family, AF_INET);
  EXPECT_EQ(res->ai_port_space, RDMA_PS_UDP);
  EXPECT_EQ(res->ai_qp_type, IBV_QPT_UD);
  ASSERT_NE(res->ai_src_addr, nullptr);
  ASSERT_NE(res->ai_dst_addr, nullptr);
  EXPECT_NE(res->ai_src_addr, hints.ai_src_addr) << "a copy, freed by rdma_freeaddrinfo";
  EXPECT_EQ(std::memcmp(res->ai_dst_addr, &dst, sizeof dst), 0);
  EXPECT_EQ(std::memcmp(res->ai_src_addr, &src, sizeof src), 0);
  rdma_freeaddrinfo(res);
  // Nothing at all to go on: EINVAL.
  errno = 0;
  EXPECT_EQ(rdma_getaddrinfo(nullptr, nullptr, nullptr, &res), -1);
  EXPECT_EQ(errno, EINVAL);
}

// The next event on `ch`, which must be `type` (acked); false otherwise.
bool expect_event(rdma_event_channel* ch, rdma_cm_event_type type, rdma_cm_id** id_out = nullptr) {
  rdma_cm_event* ev = nullptr;
  if (rdma_get_cm_event(ch, &ev) != 0) {
    ADD_FAILURE() << "rdma_get_cm_event: " << std::strerror(errno);
    return false;
  }
  const bool ok = ev->event == type;
  EXPECT_EQ(ev->event, type) << rdma_event_str(ev->event) << " status " << ev->status << ", wanted "
                             << rdma_event_str(type);
  if (id_out != nullptr) *id_out = ev->id;
  rdma_ack_cm_event(ev);
  return ok;
}

// A server and a client of this process: listen on `listen_ip`, connect to
// `connect_ip`, one SEND each way... through the drop-ins' C ABI.
// `src_ip`: the client's source (null: none given).  With two devices in
// one process, a destination one device owns is reached from the other
// over the wire unless the source names the owner (cm/rdma_cm.cpp
// dev_for_dst); 127.0.0.1 always binds the first device.
void connect_in_process(const char* listen_ip, const char* connect_ip, uint16_t port, const char* src_ip = nullptr) {
  rdma_event_channel* sch = rdma_create_event_channel();
  rdma_event_channel* cch = rdma_create_event_channel();
  ASSERT_NE(sch, nullptr);
  ASSERT_NE(cch, nullptr);
  rdma_cm_id* listener = nullptr;
  ASSERT_EQ(rdma_create_id(sch, &listener, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in laddr = sin4(listen_ip, port);
  ASSERT_EQ(rdma_bind_addr(listener, sa(laddr)), 0) << listen_ip << ": " << std::strerror(errno);
  ASSERT_EQ(rdma_listen(listener, 4), 0);

  rdma_cm_id* client = nullptr;
  ASSERT_EQ(rdma_create_id(cch, &client, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in caddr = sin4(connect_ip, port);
  sockaddr_in src = sin4(src_ip != nullptr ? src_ip : "0.0.0.0", 0);
  ASSERT_EQ(rdma_resolve_addr(client, src_ip != nullptr ? sa(src) : nullptr, sa(caddr), 2000), 0);
  ASSERT_TRUE(expect_event(cch, RDMA_CM_EVENT_ADDR_RESOLVED));
  ASSERT_EQ(rdma_resolve_route(client, 2000), 0);
  ASSERT_TRUE(expect_event(cch, RDMA_CM_EVENT_ROUTE_RESOLVED));
  ASSERT_NE(client->verbs, nullptr);
  // The id reports the addresses it was given.
  EXPECT_EQ(std::memcmp(&reinterpret_cast<sockaddr_in*>(rdma_get_peer_addr(client))->sin_addr, &caddr.sin_addr, 4), 0);

  ibv_qp_init_attr qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.cap = {8, 8, 1, 1, 0};
  ASSERT_EQ(rdma_create_qp(client, nullptr, &qa), 0) << std::strerror(errno);
  ASSERT_EQ(rdma_connect(client, nullptr), 0);
  rdma_cm_id* server = nullptr;
  ASSERT_TRUE(expect_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST, &server));
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->verbs, client->verbs) << "one device";
  ibv_qp_init_attr sa_attr{};  // not qa: rdma_create_qp wrote the client's CQs into it
  sa_attr.qp_type = IBV_QPT_RC;
  sa_attr.cap = {8, 8, 1, 1, 0};
  ASSERT_EQ(rdma_create_qp(server, nullptr, &sa_attr), 0) << std::strerror(errno);
  std::string rbuf(64, '\0');
  ibv_mr* rmr = rdma_reg_msgs(server, rbuf.data(), rbuf.size());
  ASSERT_NE(rmr, nullptr);
  ASSERT_EQ(rdma_post_recv(server, nullptr, rbuf.data(), rbuf.size(), rmr), 0);
  ASSERT_EQ(rdma_accept(server, nullptr), 0);
  ASSERT_TRUE(expect_event(cch, RDMA_CM_EVENT_ESTABLISHED));
  ASSERT_TRUE(expect_event(sch, RDMA_CM_EVENT_ESTABLISHED));

  // 16 bytes inline on a QP asked for max_inline_data 0 and one SGE
  // (rdma_xclient does it; rxe allows the SGE's room).
  char msg[16] = "over loopback!";
  ASSERT_EQ(rdma_post_send(client, nullptr, msg, sizeof msg, nullptr, IBV_SEND_INLINE | IBV_SEND_SIGNALED), 0)
      << std::strerror(errno);
  ibv_wc wc{};
  ASSERT_EQ(rdma_get_send_comp(client, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  ASSERT_EQ(rdma_get_recv_comp(server, &wc), 1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
  EXPECT_EQ(wc.byte_len, sizeof msg);
  EXPECT_STREQ(rbuf.c_str(), "over loopback!");

  ASSERT_EQ(rdma_disconnect(client), 0);
  ASSERT_TRUE(expect_event(sch, RDMA_CM_EVENT_DISCONNECTED));
  ASSERT_EQ(rdma_disconnect(server), 0);
  ASSERT_TRUE(expect_event(cch, RDMA_CM_EVENT_DISCONNECTED));
  rdma_dereg_mr(rmr);
  rdma_destroy_qp(server);
  rdma_destroy_qp(client);
  EXPECT_EQ(rdma_destroy_id(server), 0);
  EXPECT_EQ(rdma_destroy_id(client), 0);
  EXPECT_EQ(rdma_destroy_id(listener), 0);
  rdma_destroy_event_channel(sch);
  rdma_destroy_event_channel(cch);
}

TEST(RdmaCmLoopback, Localhost) { connect_in_process("127.0.0.1", "127.0.0.1", 7480); }
TEST(RdmaCmLoopback, WildcardListenerLocalhostClient) { connect_in_process("0.0.0.0", "127.0.0.1", 7481); }
TEST(RdmaCmLoopback, TheDevicesOwnAddress) { connect_in_process("10.9.0.1", "10.9.0.1", 7482, "10.9.0.1"); }
// A listener bound to 127.0.0.1 is a wildcard (Linux's cma_any_addr): it
// hears a client of the device's own address, and binding it leaves
// id->verbs NULL, which libfabric's verbs provider reads as "pick one of
// the device's addresses" (kernel 6.1 with rxe does the same).
TEST(RdmaCmLoopback, LocalhostListenerDeviceAddressClient) {
  connect_in_process("127.0.0.1", "10.9.0.1", 7483, "10.9.0.1");
}
TEST(RdmaCmLoopback, BindLocalhostBindsNoDevice) {
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in lo = sin4("127.0.0.1", 7484);
  ASSERT_EQ(rdma_bind_addr(id, sa(lo)), 0) << std::strerror(errno);
  EXPECT_EQ(id->verbs, nullptr);
  const auto* local = reinterpret_cast<const sockaddr_in*>(rdma_get_local_addr(id));
  EXPECT_EQ(local->sin_addr.s_addr, lo.sin_addr.s_addr);
  EXPECT_EQ(rdma_get_src_port(id), htons(7484));
  rdma_cm_id* other = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &other, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in own = sin4("10.9.0.1", 7484);
  EXPECT_EQ(rdma_bind_addr(other, sa(own)), -1);
  EXPECT_EQ(errno, EADDRNOTAVAIL);
  EXPECT_EQ(rdma_destroy_id(other), 0);
  EXPECT_EQ(rdma_destroy_id(id), 0);
}

// An id bound to a device has the device's PD at once, before any QP
// (librdmacm's ucma_get_device sets id->pd; pyverbs' PD(cmid) reads it to
// make AHs and external QPs), the same PD for every id on the device; an
// id bound to no device (127.0.0.1) has none.
TEST(RdmaCmIds, ABoundIdHasTheDevicesPd) {
  rdma_cm_id* a = nullptr;
  rdma_cm_id* b = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &a, nullptr, RDMA_PS_UDP), 0);
  ASSERT_EQ(rdma_create_id(nullptr, &b, nullptr, RDMA_PS_TCP), 0);
  EXPECT_EQ(a->pd, nullptr);
  sockaddr_in own = sin4("10.9.0.1", 7485);
  ASSERT_EQ(rdma_bind_addr(a, sa(own)), 0) << std::strerror(errno);
  ASSERT_NE(a->verbs, nullptr);
  ASSERT_NE(a->pd, nullptr);
  EXPECT_EQ(a->pd->context, a->verbs);
  own.sin_port = htons(7486);
  ASSERT_EQ(rdma_bind_addr(b, sa(own)), 0) << std::strerror(errno);
  EXPECT_EQ(b->pd, a->pd);
  ibv_ah_attr ah{};  // to 10.9.0.2 from our 10.9.0.1 (RoCE v2, IPv4-mapped GIDs)
  ah.is_global = 1;
  ah.port_num = 1;
  ah.grh.hop_limit = 64;
  const uint8_t peer[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 9, 0, 2};
  std::memcpy(ah.grh.dgid.raw, peer, 16);
  for (int i = 0; i < 16; ++i) {
    ibv_gid g{};
    if (ibv_query_gid(a->verbs, 1, i, &g) == 0 && g.raw[10] == 0xff && g.raw[12] == 10 && g.raw[15] == 1) {
      ah.grh.sgid_index = static_cast<uint8_t>(i);
      break;
    }
  }
  ibv_ah* made = ibv_create_ah(a->pd, &ah);
  EXPECT_NE(made, nullptr) << std::strerror(errno);
  if (made != nullptr) {
    EXPECT_EQ(ibv_destroy_ah(made), 0);
  }
  rdma_cm_id* lo = nullptr;
  ASSERT_EQ(rdma_create_id(nullptr, &lo, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in l = sin4("127.0.0.1", 7487);
  ASSERT_EQ(rdma_bind_addr(lo, sa(l)), 0) << std::strerror(errno);
  EXPECT_EQ(lo->pd, nullptr);
  EXPECT_EQ(rdma_destroy_id(lo), 0);
  EXPECT_EQ(rdma_destroy_id(b), 0);
  EXPECT_EQ(rdma_destroy_id(a), 0);
}

// A signal whose handler lacks SA_RESTART ends a blocked rdma_get_cm_event
// with EINTR, as librdmacm's read(2) on the kernel's rdma_cm fd does; with
// SA_RESTART the wait goes on and returns the event that comes later.  In
// both progress modes (meson runs this binary with UROCE_PROGRESS=inline as
// well).
TEST(RdmaCmEvents, SignalInterruptsABlockedWait) {
  rdma_event_channel* ch = rdma_create_event_channel();
  ASSERT_NE(ch, nullptr);
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  sockaddr_in dst = sin4("10.9.0.2", 7484);
  auto resolve = [&] { EXPECT_EQ(rdma_resolve_addr(id, nullptr, sa(dst), 2000), 0) << std::strerror(errno); };
  rdma_cm_event* ev = nullptr;
  auto get = [&] { return rdma_get_cm_event(ch, &ev); };
  uroce_test::SignalledWait w = uroce_test::signalled_wait(false, get, resolve);
  ASSERT_TRUE(w.installed);
  ASSERT_EQ(w.rc, -1) << "no event came within 100 ms: the signal must end the wait";
  EXPECT_EQ(w.err, EINTR);
  EXPECT_EQ(w.signals, 1);

  w = uroce_test::signalled_wait(true, get, resolve);
  ASSERT_TRUE(w.installed);
  ASSERT_EQ(w.rc, 0) << std::strerror(w.err);
  EXPECT_EQ(w.signals, 1);
  EXPECT_EQ(ev->event, RDMA_CM_EVENT_ADDR_RESOLVED) << rdma_event_str(ev->event);
  rdma_ack_cm_event(ev);
  EXPECT_EQ(rdma_destroy_id(id), 0);
  rdma_destroy_event_channel(ch);
}


// ---- rsockets ----------------------------------------------------------------------------

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 31 + seed);
  return v;
}

// A connected pair: the server on uroce1 (10.9.0.2) accepts in a thread of
// its own while the client connects from uroce0.
struct RsPair {
  int client = -1, server = -1;
  // `iomap`: both ends offer that many iomap entries (RDMA_IOMAPSIZE).
  explicit RsPair(uint16_t port, int iomap = 0) {
    const int lfd = rsocket(AF_INET, SOCK_STREAM, 0);
    EXPECT_GE(lfd, 0) << std::strerror(errno);
    if (iomap != 0) {
      EXPECT_EQ(rsetsockopt(lfd, SOL_RDMA, RDMA_IOMAPSIZE, &iomap, sizeof iomap), 0);
    }
    sockaddr_in l = sin4("10.9.0.2", port);
    EXPECT_EQ(rbind(lfd, sa(l), sizeof l), 0) << std::strerror(errno);
    EXPECT_EQ(rlisten(lfd, 1), 0) << std::strerror(errno);
    std::thread acceptor([&] {
      sockaddr_in peer{};
      socklen_t len = sizeof peer;
      server = raccept(lfd, sa(peer), &len);
      EXPECT_GE(server, 0) << std::strerror(errno);
      char ip[32];
      inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof ip);
      EXPECT_STREQ(ip, "10.9.0.1");
    });
    client = rsocket(AF_INET, SOCK_STREAM, 0);
    EXPECT_GE(client, 0);
    if (iomap != 0) {
      EXPECT_EQ(rsetsockopt(client, SOL_RDMA, RDMA_IOMAPSIZE, &iomap, sizeof iomap), 0);
    }
    sockaddr_in d = sin4("10.9.0.2", port);
    EXPECT_EQ(rconnect(client, sa(d), sizeof d), 0) << std::strerror(errno);
    acceptor.join();
    EXPECT_EQ(rclose(lfd), 0);
  }
  ~RsPair() {
    if (client >= 0) rclose(client);
    if (server >= 0) rclose(server);
  }
};

// A megabyte each way (more than a receive buffer: the grants cycle), read
// with MSG_WAITALL, with iovecs and a peek; the peer's shutdown is the
// reader's end of file.
TEST(Rsocket, StreamBothWaysPeekAndEndOfFile) {
  RsPair p(7490);
  ASSERT_GE(p.server, 0);
  const std::vector<uint8_t> out = pattern(1 << 20, 3);
  std::thread echo([&] {
    std::vector<uint8_t> in(out.size());
    EXPECT_EQ(rrecv(p.server, in.data(), in.size(), MSG_WAITALL), static_cast<ssize_t>(in.size()));
    EXPECT_EQ(in, out);
    EXPECT_EQ(rsend(p.server, in.data(), in.size(), 0), static_cast<ssize_t>(in.size()));
    uint8_t b = 0;
    EXPECT_EQ(rrecv(p.server, &b, 1, 0), 0) << "the client's shutdown: end of file";
  });
  EXPECT_EQ(rsend(p.client, out.data(), out.size(), 0), static_cast<ssize_t>(out.size()));
  std::vector<uint8_t> back(out.size());
  uint8_t peek[16] = {};
  ASSERT_EQ(rrecv(p.client, peek, sizeof peek, MSG_PEEK | MSG_WAITALL), static_cast<ssize_t>(sizeof peek));
  EXPECT_EQ(std::memcmp(peek, out.data(), sizeof peek), 0);
  size_t got = 0;
  while (got < back.size()) {
    iovec v[2] = {{back.data() + got, std::min<size_t>(1000, back.size() - got)}, {nullptr, 0}};
    v[1] = {back.data() + got + v[0].iov_len, std::min<size_t>(70000, back.size() - got - v[0].iov_len)};
    const ssize_t n = rreadv(p.client, v, 2);
    ASSERT_GT(n, 0) << std::strerror(errno);
    got += static_cast<size_t>(n);
  }
  EXPECT_EQ(back, out);
  EXPECT_EQ(rshutdown(p.client, SHUT_RDWR), 0);
  echo.join();
}

// Non-blocking reads and rpoll over an rsocket and a pipe together.
TEST(Rsocket, NonBlockingAndPoll) {
  RsPair p(7491);
  ASSERT_GE(p.server, 0);
  ASSERT_EQ(rfcntl(p.client, F_SETFL, O_NONBLOCK), 0);
  EXPECT_EQ(rfcntl(p.client, F_GETFL), O_NONBLOCK);
  char buf[64];
  errno = 0;
  EXPECT_EQ(rrecv(p.client, buf, sizeof buf, 0), -1);
  EXPECT_TRUE(errno == EAGAIN || errno == EWOULDBLOCK) << errno;
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pollfd fds[2] = {{p.client, POLLIN, 0}, {pipefd[0], POLLIN, 0}};
  EXPECT_EQ(rpoll(fds, 2, 50), 0) << "nothing to read yet";
  pollfd w{p.client, POLLOUT, 0};
  EXPECT_EQ(rpoll(&w, 1, 0), 1);
  EXPECT_NE(w.revents & POLLOUT, 0);
  ASSERT_EQ(rsend(p.server, "ten bytes!", 10, 0), 10);
  EXPECT_EQ(rpoll(fds, 2, 5000), 1);
  EXPECT_NE(fds[0].revents & POLLIN, 0);
  EXPECT_EQ(fds[1].revents, 0);
  EXPECT_EQ(rrecv(p.client, buf, sizeof buf, 0), 10);
  EXPECT_EQ(std::memcmp(buf, "ten bytes!", 10), 0);
  ASSERT_EQ(write(pipefd[1], "x", 1), 1);
  EXPECT_EQ(rpoll(fds, 2, 1000), 1);
  EXPECT_NE(fds[1].revents & POLLIN, 0);
  close(pipefd[0]);
  close(pipefd[1]);
}

// riomap/riowrite: the server offers a buffer at offset 4096; the client's
// riowrite lands there directly (no receive on the server), in pieces that
// cross nothing else; a write past the mapping is short; riounmap forgets.
TEST(Rsocket, IomapDirectPlacement) {
  RsPair p(7492, 2);
  ASSERT_GE(p.server, 0);
  int got = 0;
  socklen_t len = sizeof got;
  EXPECT_EQ(rgetsockopt(p.client, SOL_RDMA, RDMA_IOMAPSIZE, &got, &len), 0);
  EXPECT_EQ(got, 2);
  std::vector<uint8_t> target(256 * 1024, 0);
  ASSERT_EQ(riomap(p.server, target.data(), target.size(), PROT_WRITE, 0, 4096), 4096);
  // The mapping reaches the client ahead of the server's next message.
  ASSERT_EQ(rsend(p.server, "go", 2, 0), 2);
  char go[2];
  ASSERT_EQ(rrecv(p.client, go, 2, MSG_WAITALL), 2);
  const std::vector<uint8_t> data = pattern(200 * 1024, 9);
  EXPECT_EQ(riowrite(p.client, data.data(), data.size(), 4096 + 1000, 0), data.size());
  // A message after the writes: they were placed before it (in order).
  ASSERT_EQ(rsend(p.client, "done", 4, 0), 4);
  char done[4];
  ASSERT_EQ(rrecv(p.server, done, 4, MSG_WAITALL), 4);
  EXPECT_EQ(std::memcmp(target.data() + 1000, data.data(), data.size()), 0);
  EXPECT_EQ(target[999], 0);
  // Past the mapping's end: only what fits.
  EXPECT_EQ(riowrite(p.client, data.data(), data.size(), 4096 + target.size() - 100, 0), 100u);
  EXPECT_EQ(riowrite(p.client, data.data(), 10, 1, 0), 0u) << "no mapping covers offset 1";
  EXPECT_EQ(riounmap(p.server, target.data(), target.size()), 0);
  errno = 0;
  EXPECT_EQ(riounmap(p.server, target.data(), target.size()), -1);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(riomap(p.server, target.data(), 64, PROT_READ, 0, -1), -1) << "only PROT_WRITE (or none)";
  EXPECT_EQ(errno, EINVAL);
}

TEST(Rsocket, OptionsAndRefusals) {
  errno = 0;
  EXPECT_EQ(rsocket(AF_INET, SOCK_SEQPACKET, 0), -1) << "stream and datagram rsockets only (RsocketDgram below)";
  EXPECT_EQ(errno, ENOTSUP);
  EXPECT_EQ(rsocket(AF_UNIX, SOCK_STREAM, 0), -1);
  errno = 0;
  sockaddr_in any = sin4("10.9.0.1", 0);
  EXPECT_EQ(rbind(12345, sa(any), sizeof any), -1);
  EXPECT_EQ(errno, EBADF);

  const int fd = rsocket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  int v = 1 << 16;
  EXPECT_EQ(rsetsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v), 0);
  int got = 0;
  socklen_t len = sizeof got;
  EXPECT_EQ(rgetsockopt(fd, SOL_SOCKET, SO_RCVBUF, &got, &len), 0);
  EXPECT_EQ(got, 1 << 17) << "doubled, as librdmacm (and Linux) keep it";
  v = 128;
  EXPECT_EQ(rsetsockopt(fd, SOL_RDMA, RDMA_INLINE, &v, sizeof v), 0);
  EXPECT_EQ(rgetsockopt(fd, SOL_RDMA, RDMA_INLINE, &got, &len), 0);
  EXPECT_EQ(got, 128);
  v = 1;
  EXPECT_EQ(rsetsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &v, sizeof v), 0);
  EXPECT_EQ(rgetsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &got, &len), 0);
  EXPECT_EQ(got, 1);
  // Nobody listens on this port of uroce1: the connection is refused, and
  // SO_ERROR says so once.
  sockaddr_in d = sin4("10.9.0.2", 7499);
  errno = 0;
  EXPECT_EQ(rconnect(fd, sa(d), sizeof d), -1);
  EXPECT_EQ(errno, ECONNREFUSED);
  EXPECT_EQ(rgetsockopt(fd, SOL_SOCKET, SO_ERROR, &got, &len), 0);
  EXPECT_EQ(got, ECONNREFUSED);
  EXPECT_EQ(rgetsockopt(fd, SOL_SOCKET, SO_ERROR, &got, &len), 0);
  EXPECT_EQ(got, 0);
  char b = 0;
  errno = 0;
  EXPECT_EQ(rsend(fd, &b, 1, 0), -1);
  EXPECT_EQ(errno, ENOTCONN);
  errno = 0;
  EXPECT_EQ(riomap(fd, &b, 1, PROT_WRITE, 0, 0), -1) << "not connected";
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(rclose(fd), 0);
  EXPECT_EQ(rclose(fd), EBADF) << "closed already";
}

}  // namespace

// Datagram rsockets (rsocket_dgram.cpp) without traffic: what a UDP socket
// would answer.  Their rendezvous needs an address the kernel owns, which
// the sim devices' are not; the apps suite carries udpong between two
// namespaces.
TEST(RsocketDgram, CallsAndRefusals) {
  EXPECT_EQ(rsocket(AF_INET, SOCK_DGRAM, IPPROTO_TCP), -1);
  EXPECT_EQ(errno, ENOTSUP);
  const int s = rsocket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(s, 0) << std::strerror(errno);
  EXPECT_EQ(rlisten(s, 1), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(raccept(s, nullptr, nullptr), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  char buf[16] = {};
  EXPECT_EQ(rsend(s, buf, sizeof buf, 0), -1) << "no peer: nowhere to send";
  EXPECT_EQ(errno, EDESTADDRREQ);
  sockaddr_in peer{};
  socklen_t len = sizeof peer;
  EXPECT_EQ(rgetpeername(s, reinterpret_cast<sockaddr*>(&peer), &len), -1);
  EXPECT_EQ(errno, ENOTCONN);
  EXPECT_EQ(riomap(s, buf, sizeof buf, PROT_WRITE, 0, -1), -1);
  EXPECT_EQ(errno, EOPNOTSUPP);
  int v = 4096;
  ASSERT_EQ(rsetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, sizeof v), 0);
  v = 0;
  len = sizeof v;
  ASSERT_EQ(rgetsockopt(s, SOL_SOCKET, SO_RCVBUF, &v, &len), 0);
  EXPECT_EQ(v, 8192) << "twice the size asked, as librdmacm";
  ASSERT_EQ(rfcntl(s, F_SETFL, O_NONBLOCK), 0);
  EXPECT_NE(rfcntl(s, F_GETFL) & O_NONBLOCK, 0);
  EXPECT_EQ(rrecv(s, buf, sizeof buf, 0), -1) << "non-blocking, nothing received";
  EXPECT_EQ(errno, EAGAIN);
  sockaddr_in lo = sin4("127.0.0.1", 7488);
  ASSERT_EQ(rbind(s, reinterpret_cast<sockaddr*>(&lo), sizeof lo), 0) << std::strerror(errno);
  sockaddr_in me{};
  len = sizeof me;
  ASSERT_EQ(rgetsockname(s, reinterpret_cast<sockaddr*>(&me), &len), 0);
  EXPECT_EQ(me.sin_port, lo.sin_port);
  pollfd p{s, POLLIN, 0};
  EXPECT_EQ(rpoll(&p, 1, 5), 0) << "nothing to read: the wait runs out";
  EXPECT_EQ(rshutdown(s, SHUT_RDWR), 0);
  EXPECT_EQ(rclose(s), 0);
  EXPECT_EQ(rrecv(s, buf, sizeof buf, 0), -1);
  EXPECT_EQ(errno, EBADF);
}
