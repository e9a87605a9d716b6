// Datagram rsockets (rsocket(7), SOCK_DGRAM) in the drop-in librdmacm: UD
// QPs behind a kernel UDP socket, on librdmacm's own datagram protocol
// (udpong's), beside the stream rsockets of rsocket.cpp, which hands every
// call on a datagram socket to the functions here.
//
// The protocol (librdmacm's rsocket.c is its only description):
//   socket      every rsocket has a kernel UDP socket, which is also its
//               number; rbind binds it.  Each local source address gets a
//               UD QP, its rdma_cm id bound (RDMA_PS_UDP) to that address
//               and the UDP socket's port.
//   rendezvous  a datagram to a peer whose QP is not known yet goes over
//               UDP, behind a 16-byte (IPv6: 28) header: tag 0x55555555,
//               IP version, op (0 data, 7 control), header length, the
//               sender's QPN (big-endian, 24 bits) and its IP address.  The
//               receiver answers data with a control header of its own over
//               UDP, learns the sender's QP (an AH through rdma_cm's route
//               to the sender's address) and takes the data as received
//               from that address.
//   data        once a peer's QPN and AH are known: a UD SEND with Q_Key
//               RDMA_UDP_QKEY whose payload is an 8-byte (IPv6: 24) header
//               — version, length, the sender's UDP port and IP address,
//               which the receiver's rrecvfrom reports — then the data
// A datagram whose header and data exceed the UD path MTU (or a 2 KiB
// buffer slot) is refused with EMSGSIZE, as a UDP socket refuses one that
// exceeds its limit.  Received datagrams beyond the receive queue's depth
// are dropped, as UDP drops them.  The rendezvous needs the kernel to own
// the address (af_packet and af_xdp ports, uroced's on such ports).
// Peers (by UDP address) are learnt from whoever sends, so what a socket
// keeps of them is bounded: at most 1,024 (the least recently used goes,
// unless a call holds it or it is the connected one), their paths resolved
// through rdma_cm without blocking the caller (events on a channel of the
// socket; datagrams go over UDP meanwhile), at most 8 at a time, a failed
// one not retried for a second.  librdmacm resolves in a service thread
// and keeps every peer.
// Threads: one mutex per socket; a blocking call releases it while it
// sleeps on the socket's epoll fd (the UDP socket, every QP's CQ channel
// and the rdma_cm channel).
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

namespace uroce::shim::dgram {

struct Socket;

// The datagram socket numbered `fd`, or null.
Socket* lookup(int fd) noexcept;

// rsocket(domain, SOCK_DGRAM): the socket's number, or -1 and errno.
int create(int domain) noexcept;
int bind(Socket* s, const sockaddr* addr, socklen_t len) noexcept;
int connect(Socket* s, const sockaddr* addr, socklen_t len) noexcept;
// `to` null: the connected peer (EDESTADDRREQ without one).
ssize_t sendmsg(Socket* s, const iovec* iov, int iovcnt, int flags, const sockaddr* to, socklen_t tolen) noexcept;
ssize_t recvmsg(Socket* s, const iovec* iov, int iovcnt, int flags, sockaddr* from, socklen_t* fromlen) noexcept;
int close(Socket* s) noexcept;
int getsockname(Socket* s, sockaddr* addr, socklen_t* len) noexcept;
int getpeername(Socket* s, sockaddr* addr, socklen_t* len) noexcept;
int setsockopt(Socket* s, int level, int name, const void* val, socklen_t len) noexcept;
int getsockopt(Socket* s, int level, int name, void* val, socklen_t* len) noexcept;
int get_flags(Socket* s) noexcept;
int set_flags(Socket* s, int flags) noexcept;

// rpoll: readiness now (the UDP socket and the CQs processed, no wait).
short revents(Socket* s, short events) noexcept;
// The fd to sleep on (every CQ armed first), and after it woke, the events
// read so that it is quiet again.
int arm_fd(Socket* s) noexcept;
void consume(Socket* s) noexcept;

}  // namespace uroce::shim::dgram
