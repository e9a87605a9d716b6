// The exported rsocket(7) calls of the drop-in librdmacm.so.1 (stream
// sockets; datagram ones go to rsocket_dgram.cpp): each finds its socket
// and drives rsocket.cpp's machinery.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/rsocket.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <new>

#include "verbs-shim/rsocket_dgram.hpp"
#include "verbs-shim/rsocket_internal.hpp"

#define RDMACM_EXPORT extern "C" __attribute__((visibility("default")))

using namespace uroce::shim::rs;

// ---- the calls ---------------------------------------------------------------------------

namespace dgram = uroce::shim::dgram;

RDMACM_EXPORT int rsocket(int domain, int type, int protocol) noexcept {
  if (domain != AF_INET && domain != AF_INET6) return fail(ENOTSUP, -1);  // AF_IB is not offered
  if (type == SOCK_DGRAM && (protocol == 0 || protocol == IPPROTO_UDP)) return dgram::create(domain);
  if (type != SOCK_STREAM || (protocol != 0 && protocol != IPPROTO_TCP)) return fail(ENOTSUP, -1);
  auto* rs = new (std::nothrow) Rsocket;
  if (rs == nullptr) return fail(ENOMEM, -1);
  if (rdma_create_id(nullptr, &rs->id, rs, RDMA_PS_TCP) != 0) {
    const int e = errno;
    delete rs;
    return fail(e, -1);
  }
  rs->id->route.addr.src_addr.sa_family = static_cast<sa_family_t>(domain);
  return insert(rs);
}

RDMACM_EXPORT int rbind(int socket, const sockaddr* addr, socklen_t addrlen) noexcept {
  if (dgram::Socket* d = dgram::lookup(socket)) return dgram::bind(d, addr, addrlen);
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF, -1);
  std::lock_guard lock(rs->mu);
  if (rdma_bind_addr(rs->id, const_cast<sockaddr*>(addr)) != 0) return -1;
  rs->state = kBound;
  return 0;
}

RDMACM_EXPORT int rlisten(int socket, int backlog) noexcept {
  if (dgram::lookup(socket) != nullptr) return fail(EOPNOTSUPP, -1);  // as listen(2) on UDP
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF, -1);
  std::lock_guard lock(rs->mu);
  if (rs->state == kListening) return 0;
  if (rdma_listen(rs->id, backlog) != 0) return -1;
  rs->state = kListening;
  return 0;
}

RDMACM_EXPORT int raccept(int socket, sockaddr* addr, socklen_t* addrlen) noexcept {
  if (dgram::lookup(socket) != nullptr) return fail(EOPNOTSUPP, -1);
  Rsocket* ls = lookup(socket);
  if (ls == nullptr) return fail(EBADF, -1);
  rdma_cm_id* cid = nullptr;
  uint32_t sbuf, rbuf, inl, sq, rq, iomap;
  int fd_flags;
  {
    std::lock_guard lock(ls->mu);
    if (ls->state != kListening) return fail(EINVAL, -1);
    const int fl = fcntl(ls->id->channel->fd, F_GETFL);
    fcntl(ls->id->channel->fd, F_SETFL, (ls->fd_flags & O_NONBLOCK) != 0 ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
    if (rdma_get_request(ls->id, &cid) != 0) return -1;  // EAGAIN when non-blocking and none waits
    sbuf = ls->sbuf_size;
    rbuf = ls->rbuf_size;
    inl = ls->sq_inline;
    sq = ls->sq_size;
    rq = ls->rq_size;
    iomap = ls->target_iomap_size;
    fd_flags = ls->fd_flags;
  }
  auto* rs = new (std::nothrow) Rsocket;
  if (rs == nullptr) {
    rdma_reject(cid, nullptr, 0);
    rdma_destroy_id(cid);
    return fail(ENOMEM, -1);
  }
  rs->id = cid;
  rs->id->context = rs;
  rs->sbuf_size = sbuf;
  rs->rbuf_size = rbuf;
  rs->sq_inline = inl;
  rs->sq_size = sq;
  rs->rq_size = rq;
  rs->target_iomap_size = iomap;
  rs->fd_flags = fd_flags;
  insert(rs);
  const rdma_cm_event* ev = cid->event;
  const rdma_conn_param req = ev->param.conn;
  if (create_ep(rs) != 0 || !save_conn_data(rs, req.private_data, req.private_data_len)) {
    const int e = errno != 0 ? errno : ENOTSUP;
    rdma_reject(cid, nullptr, 0);
    destroy(rs);
    return fail(e, -1);
  }
  const ConnData c = conn_data(rs);
  rdma_conn_param p = req;  // the request's resources and retry counts, our ConnData
  p.private_data = &c;
  p.private_data_len = sizeof c;
  if (rdma_accept(cid, &p) != 0) {
    const int e = errno;
    destroy(rs);
    return fail(e, -1);
  }
  rs->state = kConnectRdwr;
  if (addr != nullptr && addrlen != nullptr) rgetpeername(rs->index, addr, addrlen);
  return rs->index;
}

RDMACM_EXPORT int rconnect(int socket, const sockaddr* addr, socklen_t addrlen) noexcept {
  if (dgram::Socket* d = dgram::lookup(socket)) return dgram::connect(d, addr, addrlen);
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF, -1);
  std::lock_guard lock(rs->mu);
  if ((rs->state & kConnected) != 0) return fail(EISCONN, -1);
  if (rs->state != kInit && rs->state != kBound) return fail(EINVAL, -1);
  // The connection is made before this returns, also on a non-blocking
  // socket: its rdma_cm calls wait for their events meanwhile.
  const int fd = rs->id->channel->fd;
  const int fl = fcntl(fd, F_GETFL);
  fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  const int rc = do_connect(rs, addr);
  const int e = errno;
  fcntl(fd, F_SETFL, fl);
  if (rc != 0) {
    rs->err = e;
    rs->state = kConnectError;
    return fail(e, -1);
  }
  return 0;
}

RDMACM_EXPORT ssize_t rsend(int socket, const void* buf, size_t len, int flags) noexcept {
  if (dgram::Socket* d = dgram::lookup(socket)) {
    const iovec v{const_cast<void*>(buf), len};
    return dgram::sendmsg(d, &v, 1, flags, nullptr, 0);
  }
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF, ssize_t{-1});
  return send_bytes(rs, static_cast<const uint8_t*>(buf), len, flags);
}

RDMACM_EXPORT ssize_t rrecv(int socket, void* buf, size_t len, int flags) noexcept {
  if (dgram::Socket* d = dgram::lookup(socket)) {
    const iovec v{buf, len};
    return dgram::recvmsg(d, &v, 1, flags, nullptr, nullptr);
  }
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF, ssize_t{-1});
  return recv_bytes(rs, static_cast<uint8_t*>(buf), len, flags);
}

RDMACM_EXPORT ssize_t rsendto(int socket, const void* buf, size_t len, int flags, const sockaddr* to,
                              socklen_t tolen) noexcept {
  if (dgram::Socket* d = dgram::lookup(socket)) {
    const iovec v{const_cast<void*>(buf), len};
    return dgram::sendmsg(d, &v, 1, flags, to, tolen);
  }
  return rsend(socket, buf, len, flags);  // a stream socket ignores the address (as send(2) on TCP)
}

RDMACM_EXPORT ssize_t rrecvfrom(int socket, void* buf, size_t len, int flags, sockaddr* src,
                                socklen_t* srclen) noexcept {
  if (dgram::Socket* d = dgram::lookup(socket)) {
    const iovec v{buf, len};
    return dgram::recvmsg(d, &v, 1, flags, src, srclen);
  }
  const ssize_t n = rrecv(socket, buf, len, flags);
  if (n >= 0 && src != nullptr && srclen != nullptr) rgetpeername(socket, src, srclen);
  return n;
}

RDMACM_EXPORT ssize_t rread(int socket, void* buf, size_t count) noexcept { return rrecv(socket, buf, count, 0); }
RDMACM_EXPORT ssize_t rwrite(int socket, const void* buf, size_t count) noexcept {
  return rsend(socket, buf, count, 0);
}

RDMACM_EXPORT ssize_t rsendmsg(int socket, const msghdr* msg, int flags) noexcept {
  if (msg == nullptr) return fail(EINVAL, ssize_t{-1});
  if (dgram::Socket* d = dgram::lookup(socket))  // one datagram of every iovec
    return dgram::sendmsg(d, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags,
                          static_cast<const sockaddr*>(msg->msg_name), msg->msg_namelen);
  ssize_t total = 0;
  for (size_t i = 0; i < msg->msg_iovlen; ++i) {
    const iovec& v = msg->msg_iov[i];
    const ssize_t n = rsend(socket, v.iov_base, v.iov_len, flags);
    if (n < 0) return total > 0 ? total : n;
    total += n;
    if (static_cast<size_t>(n) < v.iov_len) break;
  }
  return total;
}

RDMACM_EXPORT ssize_t rrecvmsg(int socket, msghdr* msg, int flags) noexcept {
  if (msg == nullptr) return fail(EINVAL, ssize_t{-1});
  if (dgram::Socket* d = dgram::lookup(socket))
    return dgram::recvmsg(d, msg->msg_iov, static_cast<int>(msg->msg_iovlen), flags,
                          static_cast<sockaddr*>(msg->msg_name), msg->msg_name != nullptr ? &msg->msg_namelen : nullptr);
  ssize_t total = 0;
  for (size_t i = 0; i < msg->msg_iovlen; ++i) {
    const iovec& v = msg->msg_iov[i];
    // After the first bytes, take only what is there (a short read, as recvmsg).
    const ssize_t n = rrecv(socket, v.iov_base, v.iov_len, total > 0 ? flags | MSG_DONTWAIT : flags);
    if (n < 0) return total > 0 ? total : n;
    total += n;
    if (static_cast<size_t>(n) < v.iov_len) break;
  }
  return total;
}

RDMACM_EXPORT ssize_t rwritev(int socket, const iovec* iov, int iovcnt) noexcept {
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(iov);
  m.msg_iovlen = static_cast<size_t>(std::max(iovcnt, 0));
  return rsendmsg(socket, &m, 0);
}
RDMACM_EXPORT ssize_t rreadv(int socket, const iovec* iov, int iovcnt) noexcept {
  msghdr m{};
  m.msg_iov = const_cast<iovec*>(iov);
  m.msg_iovlen = static_cast<size_t>(std::max(iovcnt, 0));
  return rrecvmsg(socket, &m, 0);
}

RDMACM_EXPORT int rshutdown(int socket, int how) noexcept {
  if (dgram::lookup(socket) != nullptr) return 0;  // nothing to tell a datagram peer
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF, -1);
  std::unique_lock lock(rs->mu);
  if ((rs->state & kConnected) == 0) {
    if ((rs->state & kDisconnected) != 0) qp_to_error(rs);
    return 0;
  }
  uint32_t ctrl;
  if (how == SHUT_RDWR) {
    ctrl = kCtrlDisconnect;
    rs->state &= ~(kReadable | kWritable);
  } else if (how == SHUT_WR) {
    rs->state &= ~kWritable;
    ctrl = (rs->state & kReadable) != 0 ? kCtrlShutdown : kCtrlDisconnect;
  } else {
    rs->state &= ~kReadable;
    if ((rs->state & kWritable) != 0) return 0;
    ctrl = kCtrlDisconnect;
  }
  int rc = 0;
  if (!ctrl_avail(rs)) rc = process_cq(rs, lock, false, conn_can_send_ctrl);
  if (rc == 0 && (rs->state & kConnected) != 0 && ctrl_avail(rs)) {
    ++rs->ctrl_seqno;
    rc = post_msg(rs, make_msg(kOpCtrl, ctrl));
  }
  if ((rs->state & kConnected) != 0) process_cq(rs, lock, false, conn_all_sends_done);
  if ((rs->state & kDisconnected) != 0) qp_to_error(rs);
  return rc;
}

RDMACM_EXPORT int rclose(int socket) noexcept {
  if (dgram::Socket* d = dgram::lookup(socket)) return dgram::close(d);
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return EBADF;  // librdmacm's answer: the value, not -1 and errno
  {
    std::lock_guard lock(rs->mu);
    rs->fd_flags &= ~O_NONBLOCK;
    if (rs->channel != nullptr) fcntl(rs->channel->fd, F_SETFL, 0);
  }
  if ((rs->state & kConnected) != 0) rshutdown(socket, SHUT_RDWR);
  destroy(rs);  // destroying a connected id sends its DREQ (as the kernel's rdma_cm)
  return 0;
}

namespace {
// The id's peer or local address into the caller's buffer (truncated to
// *addrlen, which then says the full length, as getpeername(2)).
int copy_addr(int socket, sockaddr* addr, socklen_t* addrlen, bool peer) {
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF, -1);
  if (addr == nullptr || addrlen == nullptr) return fail(EINVAL, -1);
  const sockaddr* a = peer ? rdma_get_peer_addr(rs->id) : rdma_get_local_addr(rs->id);
  const socklen_t len = a->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  std::memcpy(addr, a, std::min(*addrlen, len));
  *addrlen = len;
  return 0;
}
}  // namespace

RDMACM_EXPORT int rgetpeername(int socket, sockaddr* addr, socklen_t* addrlen) noexcept {
  if (dgram::Socket* d = dgram::lookup(socket)) return dgram::getpeername(d, addr, addrlen);
  return copy_addr(socket, addr, addrlen, true);
}
RDMACM_EXPORT int rgetsockname(int socket, sockaddr* addr, socklen_t* addrlen) noexcept {
  if (dgram::Socket* d = dgram::lookup(socket)) return dgram::getsockname(d, addr, addrlen);
  return copy_addr(socket, addr, addrlen, false);
}

RDMACM_EXPORT int rsetsockopt(int socket, int level, int optname, const void* optval, socklen_t optlen) noexcept {
  if (dgram::Socket* d = dgram::lookup(socket)) return dgram::setsockopt(d, level, optname, optval, optlen);
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF, -1);
  if (optval == nullptr || optlen < static_cast<socklen_t>(sizeof(int))) return fail(EINVAL, -1);
  std::lock_guard lock(rs->mu);
  const int v = *static_cast<const int*>(optval);
  const bool unopened = rs->sbuf == nullptr;
  auto flag = [](uint32_t& set, int name, bool on) { set = on ? set | (1u << name) : set & ~(1u << name); };
  switch (level) {
    case SOL_SOCKET:
      switch (optname) {
        case SO_REUSEADDR: flag(rs->so_opts, optname, v != 0); return 0;
        case SO_KEEPALIVE: flag(rs->so_opts, optname, v != 0); return 0;
        case SO_OOBINLINE: flag(rs->so_opts, optname, v != 0); return 0;
        case SO_RCVBUF:
          if (unopened) rs->rbuf_size = static_cast<uint32_t>(v) << 1;
          return 0;
        case SO_SNDBUF:
          if (unopened) rs->sbuf_size = std::max(static_cast<uint32_t>(v) << 1, kSndLowat << 1);
          return 0;
        case SO_LINGER:
          // Stored inverted, as librdmacm: the default (0) is "on".
          if (optlen < static_cast<socklen_t>(sizeof(linger))) return fail(EINVAL, -1);
          flag(rs->so_opts, optname, static_cast<const linger*>(optval)->l_onoff == 0);
          return 0;
        default: break;
      }
      break;
    case IPPROTO_TCP:
      switch (optname) {
        case TCP_NODELAY: flag(rs->tcp_opts, optname, v != 0); return 0;
        case TCP_MAXSEG: case TCP_KEEPCNT: case TCP_KEEPINTVL: return 0;  // a reliable connection
        case TCP_KEEPIDLE:
          if (v <= 0) return fail(EINVAL, -1);
          rs->keepalive_time = v;
          return 0;
        default: break;
      }
      break;
    case IPPROTO_IPV6:
      if (optname == IPV6_V6ONLY) {
        flag(rs->ipv6_opts, optname, v != 0);
        return 0;
      }
      break;
    case SOL_RDMA:
      if (!unopened || (rs->state & kConnected) != 0) return fail(EINVAL, -1);  // sizes are fixed once connecting
      switch (optname) {
        case RDMA_SQSIZE: rs->sq_size = std::min(static_cast<uint32_t>(v), kQpMaxSize); return 0;
        case RDMA_RQSIZE: rs->rq_size = std::min(static_cast<uint32_t>(v), kQpMaxSize); return 0;
        case RDMA_INLINE: rs->sq_inline = std::min(static_cast<uint32_t>(v), kQpMaxSize); return 0;
        case RDMA_IOMAPSIZE:  // as librdmacm: what its 8-bit encoding can say
          rs->target_iomap_size = iomap_from_scale(iomap_to_scale(static_cast<uint32_t>(v)));
          return 0;
        case RDMA_ROUTE: return 0;  // RoCE: the route comes from the address
        default: break;
      }
      break;
    default: break;
  }
  return fail(ENOTSUP, -1);
}

RDMACM_EXPORT int rgetsockopt(int socket, int level, int optname, void* optval, socklen_t* optlen) noexcept {
  if (dgram::Socket* d = dgram::lookup(socket)) return dgram::getsockopt(d, level, optname, optval, optlen);
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF, -1);
  if (optval == nullptr || optlen == nullptr || *optlen < static_cast<socklen_t>(sizeof(int)))
    return fail(EINVAL, -1);
  std::lock_guard lock(rs->mu);
  int* out = static_cast<int*>(optval);
  auto put = [&](int v) {
    *out = v;
    *optlen = sizeof(int);
    return 0;
  };
  switch (level) {
    case SOL_SOCKET:
      switch (optname) {
        case SO_REUSEADDR: case SO_KEEPALIVE: case SO_OOBINLINE: return put((rs->so_opts >> optname) & 1);
        case SO_RCVBUF: return put(static_cast<int>(rs->rbuf_size));
        case SO_SNDBUF: return put(static_cast<int>(rs->sbuf_size));
        case SO_ERROR: {
          const int e = rs->err;
          rs->err = 0;
          return put(e);
        }
        case SO_LINGER:
          if (*optlen < static_cast<socklen_t>(sizeof(linger))) return fail(EINVAL, -1);
          *static_cast<linger*>(optval) = {((rs->so_opts >> optname) & 1) == 0, 0};
          *optlen = sizeof(linger);
          return 0;
        default: break;
      }
      break;
    case IPPROTO_TCP:
      switch (optname) {
        case TCP_NODELAY: return put((rs->tcp_opts >> optname) & 1);
        case TCP_KEEPIDLE: return put(rs->keepalive_time);
        case TCP_KEEPCNT: case TCP_KEEPINTVL: return put(1);
        case TCP_MAXSEG: return put(2048);
        default: break;
      }
      break;
    case IPPROTO_IPV6:
      if (optname == IPV6_V6ONLY) return put((rs->ipv6_opts >> optname) & 1);
      break;
    case SOL_RDMA:
      switch (optname) {
        case RDMA_SQSIZE: return put(static_cast<int>(rs->sq_size));
        case RDMA_RQSIZE: return put(static_cast<int>(rs->rq_size));
        case RDMA_INLINE: return put(static_cast<int>(rs->sq_inline));
        case RDMA_IOMAPSIZE: return put(static_cast<int>(rs->target_iomap_size));
        default: break;
      }
      break;
    default: break;
  }
  return fail(ENOTSUP, -1);
}

RDMACM_EXPORT int rfcntl(int socket, int cmd, ...) noexcept {
  if (dgram::Socket* d = dgram::lookup(socket)) {
    if (cmd == F_GETFL) return dgram::get_flags(d);
    if (cmd != F_SETFL) return fail(ENOTSUP, -1);
    va_list ap;
    va_start(ap, cmd);
    const int arg = va_arg(ap, int);
    va_end(ap);
    return dgram::set_flags(d, arg);
  }
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF, -1);
  std::lock_guard lock(rs->mu);
  switch (cmd) {
    case F_GETFL: return rs->fd_flags;
    case F_SETFL: {
      va_list ap;
      va_start(ap, cmd);
      const int arg = va_arg(ap, int);
      va_end(ap);
      const int nb = arg & O_NONBLOCK;
      for (int fd : {rs->id->channel->fd, rs->channel != nullptr ? rs->channel->fd : -1}) {
        if (fd < 0) continue;
        const int fl = fcntl(fd, F_GETFL);
        fcntl(fd, F_SETFL, nb != 0 ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
      }
      rs->fd_flags = arg;
      return 0;
    }
    default: return fail(ENOTSUP, -1);
  }
}

// rpoll(3): the rsockets among `fds` by their state and CQs, the others by
// poll(2); with nothing ready, every rsocket's CQ is armed and the thread
// sleeps in poll(2) on their channels and the other fds together.
RDMACM_EXPORT int rpoll(pollfd* fds, nfds_t nfds, int timeout) noexcept {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout < 0 ? 0 : timeout);
  std::vector<Rsocket*> rss(nfds, nullptr);
  std::vector<dgram::Socket*> dss(nfds, nullptr);
  std::vector<pollfd> sleep(nfds);
  for (nfds_t i = 0; i < nfds; ++i) {
    dss[i] = dgram::lookup(fds[i].fd);
    if (dss[i] == nullptr) rss[i] = lookup(fds[i].fd);
  }
  auto ours = [&](nfds_t i) { return rss[i] != nullptr || dss[i] != nullptr; };
  for (;;) {
    int ready = 0;
    bool others = false;
    for (nfds_t i = 0; i < nfds; ++i) {
      fds[i].revents = 0;
      if (dss[i] != nullptr) {
        fds[i].revents = dgram::revents(dss[i], fds[i].events);
      } else if (rss[i] != nullptr) {
        fds[i].revents = revents_of(rss[i], fds[i].events);
      } else {
        others = true;
      }
    }
    if (others) {  // the ordinary fds, without waiting
      for (nfds_t i = 0; i < nfds; ++i) sleep[i] = {ours(i) ? -1 : fds[i].fd, fds[i].events, 0};
      if (::poll(sleep.data(), nfds, 0) < 0) return -1;
      for (nfds_t i = 0; i < nfds; ++i)
        if (!ours(i)) fds[i].revents = sleep[i].revents;
    }
    for (nfds_t i = 0; i < nfds; ++i) ready += fds[i].revents != 0;
    if (ready > 0 || timeout == 0) return ready;
    int wait_ms = -1;
    if (timeout > 0) {
      // Rounded up: a wait of less than a millisecond left is still a wait
      // (truncated, rpoll(..., 1) returned at once and udpong resent
      // every datagram in a tight loop).
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
      if (left <= 0) return 0;
      wait_ms = static_cast<int>((left + 999) / 1000);
    }
    for (nfds_t i = 0; i < nfds; ++i)
      sleep[i] = {dss[i] != nullptr   ? dgram::arm_fd(dss[i])
                  : rss[i] != nullptr ? arm_fd(rss[i])
                                      : fds[i].fd,
                  ours(i) ? short{POLLIN} : fds[i].events, 0};
    // A completion between the check above and the arming would raise no
    // event: look once more before sleeping.
    bool now_ready = false;
    for (nfds_t i = 0; i < nfds && !now_ready; ++i) {
      if (dss[i] != nullptr) now_ready = dgram::revents(dss[i], fds[i].events) != 0;
      if (rss[i] != nullptr) now_ready = revents_of(rss[i], fds[i].events) != 0;
    }
    if (now_ready) continue;
    const int n = ::poll(sleep.data(), nfds, wait_ms);
    if (n < 0) return -1;
    for (nfds_t i = 0; i < nfds; ++i) {
      if (dss[i] != nullptr && sleep[i].revents != 0) dgram::consume(dss[i]);
      if (rss[i] != nullptr && sleep[i].revents != 0 && rss[i]->state != kListening) consume_event(rss[i]);
    }
  }
}

RDMACM_EXPORT int rselect(int nfds, fd_set* readfds, fd_set* writefds, fd_set* exceptfds, timeval* timeout) noexcept {
  std::vector<pollfd> p;
  for (int fd = 0; fd < nfds; ++fd) {
    short ev = 0;
    if (readfds != nullptr && FD_ISSET(fd, readfds)) ev |= POLLIN;
    if (writefds != nullptr && FD_ISSET(fd, writefds)) ev |= POLLOUT;
    if (exceptfds != nullptr && FD_ISSET(fd, exceptfds)) ev |= POLLPRI;
    if (ev != 0) p.push_back({fd, ev, 0});
  }
  const int ms = timeout == nullptr ? -1 : static_cast<int>(timeout->tv_sec * 1000 + timeout->tv_usec / 1000);
  const int rc = rpoll(p.data(), p.size(), ms);
  if (rc < 0) return rc;
  if (readfds != nullptr) FD_ZERO(readfds);
  if (writefds != nullptr) FD_ZERO(writefds);
  if (exceptfds != nullptr) FD_ZERO(exceptfds);
  int count = 0;
  for (const pollfd& q : p) {
    if (readfds != nullptr && (q.revents & (POLLIN | POLLHUP | POLLERR)) != 0) {
      FD_SET(q.fd, readfds);
      ++count;
    }
    if (writefds != nullptr && (q.revents & (POLLOUT | POLLERR)) != 0) {
      FD_SET(q.fd, writefds);
      ++count;
    }
    if (exceptfds != nullptr && (q.revents & POLLPRI) != 0) {
      FD_SET(q.fd, exceptfds);
      ++count;
    }
  }
  return count;
}

// riomap(3): `buf` registered for the peer to write (PROT_WRITE: into an
// entry of its iomap, sent before the next send or riowrite) or kept local;
// `offset` -1 maps it at its own address.  EINVAL before the connection or
// for other protections, ENOMEM when the peer's iomap is full.
RDMACM_EXPORT off_t riomap(int socket, void* buf, size_t len, int prot, int, off_t offset) noexcept {
  if (dgram::lookup(socket) != nullptr) return fail(EOPNOTSUPP, off_t{-1});  // a stream socket's
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF, off_t{-1});
  std::lock_guard lock(rs->mu);
  if ((rs->state & kConnected) == 0 || rs->tmr == nullptr || (prot & ~(PROT_WRITE | PROT_NONE)) != 0)
    return fail(EINVAL, off_t{-1});
  Mapping m;
  int access = IBV_ACCESS_LOCAL_WRITE;
  if ((prot & PROT_WRITE) != 0) {
    for (uint32_t i = 0; i < rs->remote_iomap.length && m.index < 0; ++i)
      if (std::none_of(rs->maps.begin(), rs->maps.end(), [i](const Mapping& x) { return x.index == static_cast<int>(i); }))
        m.index = static_cast<int>(i);
    if (m.index < 0) return fail(ENOMEM, off_t{-1});
    access |= IBV_ACCESS_REMOTE_WRITE;
  }
  m.mr = ibv_reg_mr(rs->id->pd, buf, len, access);
  if (m.mr == nullptr) return -1;
  m.offset = offset == -1 ? reinterpret_cast<uintptr_t>(buf) : static_cast<uint64_t>(offset);
  m.sent = m.index < 0;
  rs->maps.push_back(m);
  rs->iomap_pending = rs->iomap_pending || m.index >= 0;
  return static_cast<off_t>(m.offset);
}

RDMACM_EXPORT int riounmap(int socket, void* buf, size_t len) noexcept {
  if (dgram::lookup(socket) != nullptr) return fail(EOPNOTSUPP, -1);
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return fail(EBADF, -1);
  std::lock_guard lock(rs->mu);
  auto it = std::find_if(rs->maps.begin(), rs->maps.end(),
                         [&](const Mapping& m) { return m.mr->addr == buf && m.mr->length == len; });
  if (it == rs->maps.end()) return fail(EINVAL, -1);
  ibv_dereg_mr(it->mr);
  rs->maps.erase(it);
  return 0;
}

// riowrite(3): straight into the peer's memory its riomap offered at
// `offset`; what was written (short when the offset leaves its mappings).
RDMACM_EXPORT size_t riowrite(int socket, const void* buf, size_t count, off_t offset, int flags) noexcept {
  if (dgram::lookup(socket) != nullptr) return static_cast<size_t>(fail(EOPNOTSUPP, -1));
  Rsocket* rs = lookup(socket);
  if (rs == nullptr) return static_cast<size_t>(fail(EBADF, -1));
  if (offset < 0) return static_cast<size_t>(fail(EINVAL, -1));
  return static_cast<size_t>(send_bytes(rs, static_cast<const uint8_t*>(buf), count, flags, offset));
}
