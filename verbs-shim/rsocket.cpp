// rsockets (rsocket(7)) in the drop-in librdmacm.so.1: stream sockets over
// RC QPs, on librdmacm's own rsocket wire protocol so that rstream and
// other rsocket programs talk to librdmacm peers (kernel rxe, hardware).
// Built on this library's rdma_cm calls and the drop-in's verbs, as
// librdmacm builds its rsockets on its own.
//
// The protocol (librdmacm's rsocket.c is its only description):
//   connection  rdma_cm over RDMA_PS_TCP; REQ and REP carry a 40-byte
//               ConnData: version 1, flags (byte order, iomap), the
//               receive credits (the receive queue's depth), the sender's
//               SGL array to be written with buffer updates, and the first
//               half of its receive buffer
//   data        RDMA WRITE with immediate into the peer's receive buffer
//               at the SGE it last granted; the immediate is op:3 | len:29
//               (op 0: data); each consumes one receive WQE there
//   credits     op 4 (SGL): a WRITE with immediate of a 16-byte SGE (the
//               next free half of the receive buffer) into the peer's SGL
//               array, or a bare immediate, both carrying the sequence
//               number up to which the peer may send
//   control     op 7: disconnect (0), keepalive (1), shutdown (2), as bare
//               immediates; at most kCtrlSlots outstanding
//   iomap       riomap: a 24-byte entry (offset, SGE) written with
//               immediate op 6 into the peer's iomap array (sized by its
//               RDMA_IOMAPSIZE, announced in its ConnData); riowrite: plain
//               RDMA WRITEs into the entry covering the offset, no receive
//               consumed, the peer notices by polling its memory
// Datagram sockets (SOCK_DGRAM, udpong's UD protocol) are
// rsocket_dgram.cpp's: every call on one goes there.  Connecting and accepting complete before the call
// returns, also on a non-blocking socket (0 rather than EINPROGRESS, which
// a non-blocking connect may do).  A socket is one thread's at a time for
// sending and one for receiving, as librdmacm's locks allow; rpoll and
// rselect take rsockets and ordinary fds together.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <rdma/rsocket.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "verbs-shim/rsocket_dgram.hpp"

#define RDMACM_EXPORT extern "C" __attribute__((visibility("default")))

#include "verbs-shim/rsocket_internal.hpp"

namespace uroce::shim::rs {

std::mutex g_mu;
std::map<int, Rsocket*>& table() {
  static std::map<int, Rsocket*> t;
  return t;
}

Rsocket* lookup(int fd) {
  std::lock_guard lock(g_mu);
  auto it = table().find(fd);
  return it != table().end() ? it->second : nullptr;
}

int insert(Rsocket* rs) {
  rs->index = rs->id->channel->fd;
  std::lock_guard lock(g_mu);
  table()[rs->index] = rs;
  return rs->index;
}

void* alloc_buf(size_t len) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, std::max<size_t>(len, 1)) != 0) return nullptr;
  std::memset(p, 0, len);
  return p;
}

// ---- resources --------------------------------------------------------------------------

void free_resources(Rsocket* rs) {
  if (rs->id != nullptr && rs->id->qp != nullptr) rdma_destroy_qp(rs->id);
  for (ibv_mr* mr : {rs->smr, rs->rmr, rs->tmr})
    if (mr != nullptr) ibv_dereg_mr(mr);
  rs->smr = rs->rmr = rs->tmr = nullptr;
  for (Mapping& m : rs->maps) ibv_dereg_mr(m.mr);
  rs->maps.clear();
  if (rs->cq != nullptr) {
    if (rs->unacked_events != 0) ibv_ack_cq_events(rs->cq, rs->unacked_events);
    ibv_destroy_cq(rs->cq);
  }
  if (rs->channel != nullptr) ibv_destroy_comp_channel(rs->channel);
  rs->cq = nullptr;
  rs->channel = nullptr;
  std::free(rs->sbuf);
  std::free(rs->rbuf);
  std::free(rs->target_sgl);
  rs->sbuf = rs->rbuf = nullptr;
  rs->target_sgl = nullptr;
}

void destroy(Rsocket* rs) {
  {
    std::lock_guard lock(g_mu);
    table().erase(rs->index);
  }
  free_resources(rs);
  if (rs->id != nullptr) rdma_destroy_id(rs->id);
  delete rs;
}

int post_recv(Rsocket* rs) {
  ibv_recv_wr wr{};
  wr.wr_id = kRecvWrId;
  ibv_recv_wr* bad = nullptr;
  const int rc = ibv_post_recv(rs->id->qp, &wr, &bad);
  return rc == 0 ? 0 : fail(rc, -1);
}

// The QP (RC, every WQE signaled), its CQ and channel, the buffers and their
// registrations, and the receive WQEs (librdmacm's rs_create_ep).
int create_ep(Rsocket* rs) {
  rs->sq_size = std::clamp(rs->sq_size, kQpMinSize, kQpMaxSize);
  rs->rq_size = std::clamp(rs->rq_size, kQpMinSize, kQpMaxSize);
  ibv_context* verbs = rs->id->verbs;
  rs->channel = ibv_create_comp_channel(verbs);
  if (rs->channel == nullptr) return -1;
  rs->cq = ibv_create_cq(verbs, static_cast<int>(rs->sq_size + rs->rq_size), rs, rs->channel, 0);
  if (rs->cq == nullptr) return -1;
  if ((rs->fd_flags & O_NONBLOCK) != 0) fcntl(rs->channel->fd, F_SETFL, O_NONBLOCK);
  ibv_qp_init_attr qa{};
  qa.qp_context = rs;
  qa.send_cq = rs->cq;
  qa.recv_cq = rs->cq;
  qa.qp_type = IBV_QPT_RC;
  qa.sq_sig_all = 1;
  qa.cap.max_send_wr = rs->sq_size;
  qa.cap.max_recv_wr = rs->rq_size;
  qa.cap.max_send_sge = 2;
  qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = rs->sq_inline;
  if (rdma_create_qp(rs->id, nullptr, &qa) != 0) return -1;
  rs->sq_inline = qa.cap.max_inline_data;
  ibv_pd* pd = rs->id->pd;
  // The send buffer, with room behind it for control messages' SGEs when
  // they cannot go inline.
  const size_t sbuf_total = rs->sbuf_size + sizeof(WireSge) * kCtrlSlots;
  rs->sbuf = static_cast<uint8_t*>(alloc_buf(sbuf_total));
  rs->rbuf = static_cast<uint8_t*>(alloc_buf(rs->rbuf_size));
  const size_t target_len = sizeof(WireSge) * kSglSize + sizeof(WireIomap) * rs->target_iomap_size;
  rs->target_sgl = static_cast<WireSge*>(alloc_buf(target_len));
  if (rs->sbuf == nullptr || rs->rbuf == nullptr || rs->target_sgl == nullptr) return fail(ENOMEM, -1);
  rs->target_iomap = reinterpret_cast<WireIomap*>(rs->target_sgl + kSglSize);
  rs->iomaps.assign(rs->target_iomap_size, WireIomap{});
  rs->smr = ibv_reg_mr(pd, rs->sbuf, sbuf_total, IBV_ACCESS_LOCAL_WRITE);
  rs->rmr = ibv_reg_mr(pd, rs->rbuf, rs->rbuf_size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  rs->tmr = ibv_reg_mr(pd, rs->target_sgl, target_len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (rs->smr == nullptr || rs->rmr == nullptr || rs->tmr == nullptr) return -1;
  rs->ssgl[0].addr = rs->ssgl[1].addr = reinterpret_cast<uintptr_t>(rs->sbuf);
  rs->ssgl[0].lkey = rs->ssgl[1].lkey = rs->smr->lkey;
  rs->sbuf_bytes_avail = rs->sbuf_size;
  // The first half of the receive buffer goes to the peer with the
  // connection; the second is granted as soon as the connection is up.
  rs->rbuf_free_offset = rs->rbuf_size / 2;
  rs->rbuf_bytes_avail = rs->rbuf_size / 2;
  rs->sqe_avail = rs->sq_size - rs->ctrl_max_seqno;
  rs->rseq_comp = static_cast<uint16_t>(rs->rq_size / 2);
  rs->rmsg.assign(rs->rq_size + 1, RecvMsg{});
  for (uint32_t i = 0; i < rs->rq_size; ++i)
    if (post_recv(rs) != 0) return -1;
  ibv_req_notify_cq(rs->cq, 0);
  rs->cq_armed = true;
  return 0;
}

ConnData conn_data(const Rsocket* rs) {
  ConnData c{};
  c.version = kConnVersion;
  c.flags = kFlagIomap | (kHostIsNet ? kFlagNet : 0);
  c.credits = htobe16(static_cast<uint16_t>(rs->rq_size));
  c.iomap_scale = static_cast<uint8_t>(iomap_to_scale(rs->target_iomap_size));
  c.target_sgl = {htobe64(reinterpret_cast<uintptr_t>(rs->target_sgl)), htobe32(rs->tmr->rkey), htobe32(kSglSize)};
  c.data_buf = {htobe64(reinterpret_cast<uintptr_t>(rs->rbuf)), htobe32(rs->rmr->rkey), htobe32(rs->rbuf_size / 2)};
  return c;
}

// The peer's ConnData: where our buffer grants go, its first grant, and
// how many messages we may send.  False: not a version we speak.
bool save_conn_data(Rsocket* rs, const void* pdata, uint8_t len) {
  if (pdata == nullptr || len < sizeof(ConnData)) return false;
  ConnData c;
  std::memcpy(&c, pdata, sizeof c);
  if (c.version != kConnVersion) return false;
  rs->remote_sgl = {be64toh(c.target_sgl.addr), be32toh(c.target_sgl.key), be32toh(c.target_sgl.length)};
  rs->remote_sge = 1;  // entry 0 is what the connection granted
  rs->swap_sgl = ((c.flags & kFlagNet) != 0) != kHostIsNet;
  rs->remote_iomap = {};
  if ((c.flags & kFlagIomap) != 0)  // its iomap array follows its SGL array
    rs->remote_iomap = {rs->remote_sgl.addr + sizeof(WireSge) * rs->remote_sgl.length, rs->remote_sgl.key,
                        iomap_from_scale(c.iomap_scale)};
  rs->grants[0] = {be64toh(c.data_buf.addr), be32toh(c.data_buf.key), be32toh(c.data_buf.length)};
  rs->grant_slot = 1;
  rs->target_sge = 0;
  rs->sseq_comp = be16toh(c.credits);
  return true;
}

// ---- posting ----------------------------------------------------------------------------

int post_write(Rsocket* rs, ibv_sge* sgl, int nsge, uint32_t msg, unsigned flags, uint64_t addr, uint32_t rkey,
               bool with_imm) {
  ibv_send_wr wr{};
  wr.wr_id = msg;
  wr.sg_list = sgl;
  wr.num_sge = nsge;
  wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = flags;
  wr.imm_data = htobe32(msg);
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(rs->id->qp, &wr, &bad);
  return rc == 0 ? 0 : fail(rc, -1);
}

// A bare control message: a zero-length WRITE with its immediate.
int post_msg(Rsocket* rs, uint32_t msg) { return post_write(rs, nullptr, 0, msg, 0, 0, 0, true); }

// `len` bytes of data into the peer's current grant.
int write_data(Rsocket* rs, ibv_sge* sgl, int nsge, uint32_t len, unsigned flags) {
  ++rs->sseq_no;
  --rs->sqe_avail;
  rs->sbuf_bytes_avail -= len;
  WireSge& t = rs->grants[rs->target_sge];
  const uint64_t addr = t.addr;
  const uint32_t rkey = t.key;
  t.addr += len;
  t.length -= len;
  if (t.length == 0 && ++rs->target_sge == kSglSize) rs->target_sge = 0;
  return post_write(rs, sgl, nsge, make_msg(kOpData, len), flags, addr, rkey, true);
}

bool ctrl_avail(const Rsocket* rs) { return rs->ctrl_seqno != rs->ctrl_max_seqno; }

// Grant the peer the next free half of our receive buffer, or (none free)
// just more messages.
void send_credits(Rsocket* rs) {
  ++rs->ctrl_seqno;
  rs->rseq_comp = static_cast<uint16_t>(rs->rseq_no + rs->rq_size / 2);
  const uint32_t msg = make_msg(kOpSgl, static_cast<uint16_t>(rs->rseq_no + rs->rq_size));
  if (rs->rbuf_bytes_avail < rs->rbuf_size / 2) {
    post_msg(rs, msg);
    return;
  }
  WireSge g{reinterpret_cast<uintptr_t>(rs->rbuf + rs->rbuf_free_offset), rs->rmr->rkey, rs->rbuf_size / 2};
  if (rs->swap_sgl) g = {__builtin_bswap64(g.addr), __builtin_bswap32(g.key), __builtin_bswap32(g.length)};
  ibv_sge sge{};
  unsigned flags = IBV_SEND_INLINE;
  if (rs->sq_inline < sizeof g) {  // through the control area behind the send buffer
    auto* slot = reinterpret_cast<WireSge*>(rs->sbuf + rs->sbuf_size) + (rs->ctrl_seqno & (kCtrlSlots - 1));
    *slot = g;
    sge = {reinterpret_cast<uintptr_t>(slot), sizeof g, rs->smr->lkey};
    flags = 0;
  } else {
    sge = {reinterpret_cast<uintptr_t>(&g), sizeof g, 0};
  }
  post_write(rs, &sge, 1, msg, flags, rs->remote_sgl.addr + rs->remote_sge * sizeof(WireSge), rs->remote_sgl.key,
             true);
  rs->rbuf_bytes_avail -= rs->rbuf_size / 2;
  rs->rbuf_free_offset += rs->rbuf_size / 2;
  if (rs->rbuf_free_offset >= rs->rbuf_size) rs->rbuf_free_offset = 0;
  if (++rs->remote_sge == rs->remote_sgl.length) rs->remote_sge = 0;
}

void update_credits(Rsocket* rs) {
  const bool want = rs->rbuf_bytes_avail >= rs->rbuf_size / 2 ||
                    static_cast<int16_t>(static_cast<uint16_t>(rs->rseq_no - rs->rseq_comp)) >= 0;
  if (want && ctrl_avail(rs) && (rs->state & kConnected) != 0) send_credits(rs);
}

// ---- completions ------------------------------------------------------------------------

// Everything the CQ holds: received messages into the queue, grants and
// controls applied, send buffer and slots given back; receive WQEs reposted.
int poll_cq(Rsocket* rs) {
  ibv_wc wc{};
  int got;
  uint32_t received = 0;
  while ((got = ibv_poll_cq(rs->cq, 1, &wc)) > 0) {
    if ((wc.wr_id & kRecvWrId) != 0) {
      if (wc.status != IBV_WC_SUCCESS) continue;  // flushed: the connection is going
      ++received;
      const uint32_t msg = (wc.wc_flags & IBV_WC_WITH_IMM) != 0 ? be32toh(wc.imm_data) : 0;
      switch (msg_op(msg)) {
        case kOpSgl:
          // A grant came with it (16 bytes written) or only credits (none).
          if (wc.byte_len == sizeof(WireSge)) {
            rs->grants[rs->grant_slot] = rs->target_sgl[rs->grant_slot];
            rs->grant_slot = (rs->grant_slot + 1) % kSglSize;
          }
          rs->sseq_comp = static_cast<uint16_t>(msg_data(msg));
          break;
        case kOpIomapSgl:
          if (msg_data(msg) < rs->iomaps.size()) rs->iomaps[msg_data(msg)] = rs->target_iomap[msg_data(msg)];
          break;
        case kOpWrite:
          break;
        case kOpCtrl:
          if (msg_data(msg) == kCtrlDisconnect) {
            rs->state = kDisconnected;
            return 0;
          }
          if (msg_data(msg) == kCtrlShutdown) {
            if ((rs->state & kWritable) == 0) {
              rs->state = kDisconnected;
              return 0;
            }
            rs->state &= ~kReadable;
          }
          break;
        default:
          rs->rmsg[rs->rmsg_tail] = {msg_op(msg), msg_data(msg)};
          if (++rs->rmsg_tail == rs->rq_size + 1) rs->rmsg_tail = 0;
          break;
      }
    } else {
      const auto msg = static_cast<uint32_t>(wc.wr_id);
      switch (msg_op(msg)) {
        case kOpSgl:
          ++rs->ctrl_max_seqno;
          break;
        case kOpCtrl:
          ++rs->ctrl_max_seqno;
          if (msg_data(msg) == kCtrlDisconnect) rs->state = kDisconnected;
          break;
        case kOpIomapSgl:
          ++rs->sqe_avail;
          rs->sbuf_bytes_avail += sizeof(WireIomap);
          break;
        default:
          ++rs->sqe_avail;
          rs->sbuf_bytes_avail += msg_data(msg);
          break;
      }
      if (wc.status != IBV_WC_SUCCESS && (rs->state & kConnected) != 0) {
        rs->state = kError;
        rs->err = EIO;
      }
    }
  }
  int rc = 0;
  if ((rs->state & kConnected) != 0) {
    for (; received > 0 && rc == 0; --received) rc = post_recv(rs);
    if (rc != 0) {
      rs->state = kError;
      rs->err = errno;
    }
  }
  return rc;
}

bool can_send(const Rsocket* rs) {
  return rs->sqe_avail != 0 && rs->sbuf_bytes_avail >= kSndLowat && rs->sseq_no != rs->sseq_comp &&
         rs->grants[rs->target_sge].length != 0;
}
bool have_rdata(const Rsocket* rs) { return rs->rmsg_head != rs->rmsg_tail; }
bool conn_can_send(const Rsocket* rs) { return can_send(rs) || (rs->state & kWritable) == 0; }
bool conn_have_rdata(const Rsocket* rs) { return have_rdata(rs) || (rs->state & kReadable) == 0; }
bool conn_can_send_ctrl(const Rsocket* rs) { return ctrl_avail(rs) || (rs->state & kConnected) == 0; }
bool conn_all_sends_done(const Rsocket* rs) {
  return static_cast<int>(rs->ctrl_max_seqno) - static_cast<int>(rs->ctrl_seqno) + static_cast<int>(rs->sqe_avail) ==
             static_cast<int>(rs->sq_size) ||
         (rs->state & kConnected) == 0;
}

// Wait for the CQ's next event (the CQ armed): read it from the channel.
// Called with rs->mu held; releases it while it sleeps.
int wait_cq_event(Rsocket* rs, std::unique_lock<std::mutex>& lock) {
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  lock.unlock();
  const int rc = ibv_get_cq_event(rs->channel, &cq, &ctx);
  lock.lock();
  if (rc != 0) {
    if (errno != EAGAIN && errno != EINTR) rs->state = kError;
    return -1;
  }
  ++rs->unacked_events;
  rs->cq_armed = false;
  return 0;
}

// ---- connecting -------------------------------------------------------------------------

int do_connect(Rsocket* rs, const sockaddr* addr) {
  constexpr int kResolveMs = 2000;
  auto* dst = const_cast<sockaddr*>(addr);
  if (rdma_resolve_addr(rs->id, nullptr, dst, kResolveMs) != 0 || rdma_resolve_route(rs->id, kResolveMs) != 0 ||
      create_ep(rs) != 0)
    return -1;
  const ConnData c = conn_data(rs);
  rdma_conn_param p{};
  p.private_data = &c;
  p.private_data_len = sizeof c;
  p.flow_control = 1;
  p.retry_count = 7;
  p.rnr_retry_count = 7;
  if (rdma_connect(rs->id, &p) != 0) return -1;
  const rdma_cm_event* ev = rs->id->event;
  if (ev == nullptr || !save_conn_data(rs, ev->param.conn.private_data, ev->param.conn.private_data_len))
    return fail(ENOTSUP, -1);
  rs->state = kConnectRdwr;
  return 0;
}

// The connection is over: the QP to ERR, so that its receives flush and a
// thread asleep on the CQ wakes (librdmacm's ucma_shutdown); the DREQ goes
// when the id is destroyed.
void qp_to_error(Rsocket* rs) {
  if (rs->id->qp == nullptr) return;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ibv_modify_qp(rs->id->qp, &a, IBV_QP_STATE);
  if (rs->cq != nullptr) ibv_req_notify_cq(rs->cq, 0);
}

// ---- I/O ------------------------------------------------------------------------------

// Where `len` bytes at `src` go from: inline from the caller's memory, or
// copied into the send ring (one SGE, or two where it wraps).  The WQE
// posted next takes `sgl`, `nsge` and `flags`.
struct Staged {
  ibv_sge inline_sge{};
  ibv_sge* sgl = nullptr;
  int nsge = 0;
  unsigned flags = 0;
};
Staged stage(Rsocket* rs, const void* src, uint32_t len) {
  Staged st;
  const auto* bytes = static_cast<const uint8_t*>(src);
  const auto to_end = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(rs->sbuf + rs->sbuf_size) - rs->ssgl[0].addr);
  if (len <= rs->sq_inline) {
    st.inline_sge = {reinterpret_cast<uintptr_t>(src), len, 0};
    st.sgl = &st.inline_sge;
    st.nsge = 1;
    st.flags = IBV_SEND_INLINE;
  } else if (len <= to_end) {
    std::memcpy(reinterpret_cast<void*>(rs->ssgl[0].addr), bytes, len);
    rs->ssgl[0].length = len;
    st.sgl = rs->ssgl;
    st.nsge = 1;
  } else {  // wraps: the end of the send ring, then its start
    rs->ssgl[0].length = to_end;
    std::memcpy(reinterpret_cast<void*>(rs->ssgl[0].addr), bytes, to_end);
    rs->ssgl[1].length = len - to_end;
    std::memcpy(rs->sbuf, bytes + to_end, rs->ssgl[1].length);
    st.sgl = rs->ssgl;
    st.nsge = 2;
  }
  return st;
}
// After the WQE of a staged copy was posted: the ring's next free byte.
void advance_ring(Rsocket* rs, const Staged& st, uint32_t len) {
  if ((st.flags & IBV_SEND_INLINE) != 0) return;
  const auto base = reinterpret_cast<uintptr_t>(rs->sbuf);
  if (st.nsge == 2) {
    rs->ssgl[0].addr = base + rs->ssgl[1].length;
  } else {
    const uintptr_t next = rs->ssgl[0].addr + len;
    rs->ssgl[0].addr = next < base + rs->sbuf_size ? next : base;
  }
}

// Wait (or not) until a message may go; 0, or -1 and errno.
int wait_can_send(Rsocket* rs, std::unique_lock<std::mutex>& lock, int flags) {
  if (can_send(rs)) return 0;
  if (process_cq(rs, lock, nonblocking(*rs, flags), conn_can_send) != 0) return -1;
  return (rs->state & kWritable) != 0 ? 0 : fail(ECONNRESET, -1);
}

// The riomap() registrations the peer has not heard of yet, each into its
// iomap array at its index (librdmacm's rs_send_iomaps).
int send_iomaps(Rsocket* rs, std::unique_lock<std::mutex>& lock, int flags) {
  for (Mapping& m : rs->maps) {
    if (m.sent || m.index < 0) continue;
    if (wait_can_send(rs, lock, flags) != 0) return -1;
    WireIomap e{m.offset, {reinterpret_cast<uintptr_t>(m.mr->addr), m.mr->rkey, static_cast<uint32_t>(m.mr->length)}};
    if (rs->swap_sgl)
      e = {__builtin_bswap64(e.offset),
           {__builtin_bswap64(e.sge.addr), __builtin_bswap32(e.sge.key), __builtin_bswap32(e.sge.length)}};
    ++rs->sseq_no;  // it takes a receive of the peer's, as a data message
    --rs->sqe_avail;
    rs->sbuf_bytes_avail -= sizeof e;
    const Staged st = stage(rs, &e, sizeof e);
    const int rc = post_write(rs, st.sgl, st.nsge, make_msg(kOpIomapSgl, static_cast<uint32_t>(m.index)), st.flags,
                              rs->remote_iomap.addr + static_cast<uint64_t>(m.index) * sizeof e,
                              rs->remote_iomap.key, true);
    advance_ring(rs, st, sizeof e);
    if (rc != 0) return rc;
    m.sent = true;
  }
  rs->iomap_pending = false;
  return 0;
}

// Sends `len` bytes from `buf`: as data messages into the peer's receive
// buffer (`offset` < 0), or by riowrite straight into its iomap at
// `offset` (until the offset leaves every entry).
ssize_t send_bytes(Rsocket* rs, const uint8_t* buf, size_t len, int flags, int64_t offset) {
  std::unique_lock lock(rs->mu);
  size_t left = len;
  uint32_t olen = kOlapStart;
  int rc = 0;
  if ((rs->state & kConnected) == 0) return fail((rs->state & kDisconnected) != 0 ? EPIPE : ENOTCONN, ssize_t{-1});
  if (rs->iomap_pending && send_iomaps(rs, lock, flags) != 0) return -1;
  const WireIomap* iom = nullptr;
  while (left > 0) {
    if (offset >= 0 && (iom == nullptr || static_cast<uint64_t>(offset) >= iom->offset + iom->sge.length)) {
      iom = nullptr;
      for (uint32_t i = 0; i < rs->iomaps.size() && iom == nullptr; ++i) {
        const WireIomap& e = rs->iomaps[i];
        if (static_cast<uint64_t>(offset) >= e.offset && static_cast<uint64_t>(offset) < e.offset + e.sge.length)
          iom = &e;
      }
      if (iom == nullptr) break;  // no mapping covers it: what was written so far
    }
    if ((rc = wait_can_send(rs, lock, flags)) != 0) break;
    uint32_t xfer = left > olen ? olen : static_cast<uint32_t>(left);
    if (olen < left && olen < kMaxTransfer) olen <<= 1;
    xfer = std::min(xfer, rs->sbuf_bytes_avail);
    xfer = offset < 0 ? std::min(xfer, rs->grants[rs->target_sge].length)
                      : static_cast<uint32_t>(std::min<uint64_t>(xfer, iom->offset + iom->sge.length - offset));
    const Staged st = stage(rs, buf, xfer);
    if (offset < 0) {
      rc = write_data(rs, st.sgl, st.nsge, xfer, st.flags);
    } else {  // direct placement: no receive consumed, no sequence taken
      --rs->sqe_avail;
      rs->sbuf_bytes_avail -= xfer;
      rc = post_write(rs, st.sgl, st.nsge, make_msg(kOpWrite, xfer), st.flags,
                      iom->sge.addr + (static_cast<uint64_t>(offset) - iom->offset), iom->sge.key, false);
      offset += xfer;
    }
    advance_ring(rs, st, xfer);
    if (rc != 0) break;
    left -= xfer;
    buf += xfer;
  }
  if (rc != 0 && left == len) return -1;
  return static_cast<ssize_t>(len - left);
}

// Copies up to `len` bytes of received data out; `consume` false: MSG_PEEK.
size_t copy_out(Rsocket* rs, uint8_t* buf, size_t len, bool consume) {
  size_t left = len;
  uint32_t head = rs->rmsg_head, offset = rs->rbuf_offset;
  while (left > 0 && head != rs->rmsg_tail) {
    RecvMsg& m = rs->rmsg[head];
    uint32_t take;
    if (left < m.len) {
      take = static_cast<uint32_t>(left);
      if (consume) m.len -= take;
    } else {
      take = m.len;
      if (++head == rs->rq_size + 1) head = 0;
      if (consume) ++rs->rseq_no;
    }
    for (uint32_t n = take; n > 0;) {  // the data may wrap at the buffer's end
      const uint32_t chunk = std::min(n, rs->rbuf_size - offset);
      std::memcpy(buf, rs->rbuf + offset, chunk);
      offset = offset + chunk == rs->rbuf_size ? 0 : offset + chunk;
      buf += chunk;
      n -= chunk;
      if (consume) rs->rbuf_bytes_avail += chunk;
    }
    left -= take;
  }
  if (consume) {
    rs->rmsg_head = head;
    rs->rbuf_offset = offset;
  }
  return len - left;
}

ssize_t recv_bytes(Rsocket* rs, uint8_t* buf, size_t len, int flags) {
  std::unique_lock lock(rs->mu);
  if ((rs->state & (kConnected | kDisconnected | kError)) == 0) return fail(ENOTCONN, ssize_t{-1});
  size_t done = 0;
  int rc = 0;
  do {
    if (!have_rdata(rs)) {
      rc = process_cq(rs, lock, nonblocking(*rs, flags), conn_have_rdata);
      if (rc != 0) break;
    }
    if ((flags & MSG_PEEK) != 0) {
      done = copy_out(rs, buf, len, false);
      break;
    }
    done += copy_out(rs, buf + done, len - done, true);
  } while (done < len && (flags & MSG_WAITALL) != 0 && (rs->state & kReadable) != 0);
  update_credits(rs);
  if (rc != 0 && done == 0) return -1;
  return static_cast<ssize_t>(done);
}

// Readiness of one rsocket for rpoll (the CQ processed, not waiting).
short revents_of(Rsocket* rs, short events) {
  std::unique_lock lock(rs->mu);
  if (rs->state == kListening) {
    pollfd p{rs->id->channel->fd, events, 0};
    ::poll(&p, 1, 0);
    return p.revents;
  }
  if ((rs->state & (kConnected | kDisconnected | kError)) == 0)
    return rs->state == kConnectError ? static_cast<short>((events & (POLLIN | POLLOUT)) | POLLERR) : 0;
  process_cq(rs, lock, true, [events](const Rsocket* r) {
    return ((events & POLLIN) != 0 && conn_have_rdata(r)) || ((events & POLLOUT) != 0 && can_send(r));
  });
  short r = 0;
  if ((events & POLLIN) != 0 && conn_have_rdata(rs)) r |= POLLIN;
  if ((events & POLLOUT) != 0 && can_send(rs)) r |= POLLOUT;
  // The peer's disconnect is a hang-up once its data has been read, as a
  // TCP socket after the FIN (librdmacm raises POLLHUP at once, and a
  // reader that takes it for an error, as rstream does, loses the data
  // still queued: rstream -T a failed one run in three over memif so).
  if ((rs->state & kConnected) == 0 && !have_rdata(rs)) r |= (rs->state & kDisconnected) != 0 ? POLLHUP : POLLERR;
  return r;
}

// The fd to sleep on for an rsocket (its CQ's channel, armed first; a
// listener's CM channel), or -1.
int arm_fd(Rsocket* rs) {
  std::lock_guard lock(rs->mu);
  if (rs->state == kListening) return rs->id->channel->fd;
  if (rs->cq == nullptr || (rs->state & kConnected) == 0) return -1;
  if (!rs->cq_armed) {
    ibv_req_notify_cq(rs->cq, 0);
    rs->cq_armed = true;
  }
  return rs->channel->fd;
}

// The event that woke the fd: read it so that the channel is quiet again.
void consume_event(Rsocket* rs) {
  std::unique_lock lock(rs->mu);
  if (rs->cq == nullptr || !rs->cq_armed) return;
  const int flags = fcntl(rs->channel->fd, F_GETFL);
  fcntl(rs->channel->fd, F_SETFL, flags | O_NONBLOCK);
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  if (ibv_get_cq_event(rs->channel, &cq, &ctx) == 0) {
    ++rs->unacked_events;
    rs->cq_armed = false;
  }
  fcntl(rs->channel->fd, F_SETFL, flags);
}

}  // namespace uroce::shim::rs
