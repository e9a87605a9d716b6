// What the drop-in's stream rsockets share between rsocket.cpp (a
// socket's resources, posting, completions, connecting and I/O) and
// rsocket_calls.cpp (the exported rsocket(7) calls): librdmacm's rsocket
// wire protocol, the socket, and the helpers the calls use.  See
// rsocket.cpp for the protocol.
#pragma once

#include <fcntl.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace uroce::shim::rs {


// ---- the wire protocol -----------------------------------------------------------------
enum Op : uint32_t { kOpData = 0, kOpWrite = 2, kOpSgl = 4, kOpIomapSgl = 6, kOpCtrl = 7 };
enum Ctrl : uint32_t { kCtrlDisconnect = 0, kCtrlKeepalive = 1, kCtrlShutdown = 2 };
constexpr uint32_t make_msg(uint32_t op, uint32_t data) { return op << 29 | (data & 0x1FFFFFFF); }
constexpr uint32_t msg_op(uint32_t m) { return m >> 29; }
constexpr uint32_t msg_data(uint32_t m) { return m & 0x1FFFFFFF; }

constexpr uint64_t kRecvWrId = uint64_t{1} << 63;  // receive WQEs; send WQEs carry their message
constexpr uint32_t kOlapStart = 2048;               // the first chunk of a send; doubles up to:
constexpr uint32_t kMaxTransfer = 65536;
constexpr uint32_t kSndLowat = 2048;                // a send waits for this much send buffer
constexpr uint32_t kQpMinSize = 16, kQpMaxSize = 0xFFFE;
constexpr uint16_t kCtrlSlots = 4;                  // control messages outstanding
constexpr uint32_t kSglSize = 2;                    // entries of the SGL array the peer writes
constexpr uint8_t kConnVersion = 1;
constexpr uint8_t kFlagNet = 1 << 0;                // the sender is big-endian
constexpr uint8_t kFlagIomap = 1 << 1;
constexpr uint32_t kDefInline = 64, kDefQpSize = 384, kDefMem = 1 << 17;
// A blocking call polls this long before it sleeps on the CQ's channel
// (librdmacm's default polling_time): a reply often comes within it.
constexpr auto kPollBeforeSleep = std::chrono::microseconds(10);

struct WireSge {
  uint64_t addr;
  uint32_t key;
  uint32_t length;
};
static_assert(sizeof(WireSge) == 16);

// One iomap entry: the peer's memory at `sge` stands for [offset, offset+len).
struct WireIomap {
  uint64_t offset;
  WireSge sge;
};
static_assert(sizeof(WireIomap) == 24);

// librdmacm's 8-bit encoding of the iomap size in ConnData: small values as
// they are, larger ones as 0x80 | value >> 8.
constexpr uint32_t iomap_to_scale(uint32_t v) { return v <= 0x80 ? v : 0x80 | (v >> 8); }
constexpr uint32_t iomap_from_scale(uint32_t v) { return v <= 0x80 ? v : (v & 0x7F) << 8; }

struct ConnData {
  uint8_t version;
  uint8_t flags;
  uint16_t credits;  // big-endian
  uint8_t reserved[3];
  uint8_t iomap_scale;
  WireSge target_sgl;  // fields big-endian
  WireSge data_buf;    // fields big-endian
};
static_assert(sizeof(ConnData) == 40);

constexpr bool kHostIsNet = __BYTE_ORDER == __BIG_ENDIAN;

// ---- a socket ----------------------------------------------------------------------------
// States as bits, so that "connected" keeps its read and write halves.
enum : uint32_t {
  kInit = 0,
  kBound = 0x1,
  kListening = 0x2,
  kConnected = 0x100,
  kWritable = 0x200,
  kReadable = 0x400,
  kConnectRdwr = kConnected | kWritable | kReadable,
  kConnectError = 0x800,
  kDisconnected = 0x1000,
  kError = 0x2000,
};

struct RecvMsg {
  uint32_t op;
  uint32_t len;
};

// A riomap() registration: sent to the peer's iomap array at `index` (-1:
// a local mapping, never sent) once `sent`.
struct Mapping {
  uint64_t offset = 0;
  ibv_mr* mr = nullptr;
  int index = -1;
  bool sent = false;
};

struct Rsocket {
  int index = -1;  // the socket number: its rdma_cm id's channel fd
  rdma_cm_id* id = nullptr;
  uint32_t state = kInit;
  int err = 0;
  int fd_flags = 0;  // O_NONBLOCK
  uint32_t so_opts = 0, tcp_opts = 0, ipv6_opts = 0;
  int keepalive_time = 7200;
  // Sizes (rsetsockopt before connecting).
  uint32_t sbuf_size = kDefMem, rbuf_size = kDefMem, sq_inline = kDefInline;
  uint32_t sq_size = kDefQpSize, rq_size = kDefQpSize;
  // Resources, once connecting.
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  uint8_t* sbuf = nullptr;
  uint8_t* rbuf = nullptr;
  WireSge* target_sgl = nullptr;  // the peer's buffer grants, written by the peer
  WireIomap* target_iomap = nullptr;  // the peer's iomap entries, behind them (same block)
  uint32_t target_iomap_size = 0;     // RDMA_IOMAPSIZE
  // What the peer wrote there, copied once its write's completion was
  // polled (the memory is the peer's to write until then; reading it
  // earlier would race with the engine placing it): the grants we send into
  // and the iomap entries riowrite uses.  `grant_slot`: where its next
  // grant lands (the connection data filled slot 0).
  WireSge grants[kSglSize]{};
  std::vector<WireIomap> iomaps;
  uint32_t grant_slot = 1;
  ibv_mr* smr = nullptr;
  ibv_mr* rmr = nullptr;
  ibv_mr* tmr = nullptr;
  bool swap_sgl = false;
  bool cq_armed = false;
  uint32_t unacked_events = 0;
  // Sending.
  uint16_t sseq_no = 0, sseq_comp = 0;  // data messages sent / allowed
  uint32_t sqe_avail = 0;
  uint32_t sbuf_bytes_avail = 0;
  uint16_t ctrl_seqno = 0, ctrl_max_seqno = kCtrlSlots;
  ibv_sge ssgl[2]{};
  uint32_t target_sge = 0;
  WireSge remote_sgl{};  // the peer's SGL array, where our grants go
  uint32_t remote_sge = 0;
  WireSge remote_iomap{};  // the peer's iomap array (length: entries)
  std::vector<Mapping> maps;
  bool iomap_pending = false;
  // Receiving.
  uint16_t rseq_no = 0, rseq_comp = 0;
  uint32_t rbuf_offset = 0, rbuf_free_offset = 0, rbuf_bytes_avail = 0;
  std::vector<RecvMsg> rmsg;
  uint32_t rmsg_head = 0, rmsg_tail = 0;
  std::mutex mu;  // one call at a time; released while a blocking call waits
};

template <class T>
T fail(int err, T ret) {
  errno = err;
  return ret;
}

inline bool nonblocking(const Rsocket& rs, int flags) {
  return (rs.fd_flags & O_NONBLOCK) != 0 || (flags & MSG_DONTWAIT) != 0;
}

// ---- rsocket.cpp ----------------------------------------------------------------------------
int arm_fd(Rsocket* rs);
ConnData conn_data(const Rsocket* rs);
void consume_event(Rsocket* rs);
int create_ep(Rsocket* rs);
bool ctrl_avail(const Rsocket* rs);
bool conn_can_send_ctrl(const Rsocket* rs);
bool conn_all_sends_done(const Rsocket* rs);
void destroy(Rsocket* rs);
int do_connect(Rsocket* rs, const sockaddr* addr);
int insert(Rsocket* rs);
Rsocket* lookup(int fd);
void qp_to_error(Rsocket* rs);
ssize_t recv_bytes(Rsocket* rs, uint8_t* buf, size_t len, int flags);
short revents_of(Rsocket* rs, short events);
bool save_conn_data(Rsocket* rs, const void* pdata, uint8_t len);
ssize_t send_bytes(Rsocket* rs, const uint8_t* buf, size_t len, int flags, int64_t offset = -1);
void update_credits(Rsocket* rs);
int poll_cq(Rsocket* rs);
int wait_cq_event(Rsocket* rs, std::unique_lock<std::mutex>& lock);
int post_msg(Rsocket* rs, uint32_t msg);
int post_write(Rsocket* rs, ibv_sge* sgl, int nsge, uint32_t msg, unsigned flags, uint64_t addr, uint32_t rkey,
               bool with_imm);
void* alloc_buf(size_t len);
void free_resources(Rsocket* rs);
int post_recv(Rsocket* rs);

// Until `test` holds: grants out, the CQ polled, and (blocking) a wait for
// its next completion (librdmacm's rs_process_cq).  0, or -1 with errno
// (EWOULDBLOCK when non-blocking and not yet).
template <class Test>
int process_cq(Rsocket* rs, std::unique_lock<std::mutex>& lock, bool nonblock, Test test) {
  int rc;
  const auto spin_until = std::chrono::steady_clock::now() + kPollBeforeSleep;
  for (;;) {
    update_credits(rs);
    rc = poll_cq(rs);
    if (test(rs)) {
      rc = 0;
      break;
    }
    if (rc != 0) break;
    if (nonblock) {
      rc = fail(EWOULDBLOCK, -1);
      break;
    }
    if (std::chrono::steady_clock::now() < spin_until) continue;
    if (!rs->cq_armed) {
      ibv_req_notify_cq(rs->cq, 0);
      rs->cq_armed = true;
      continue;  // poll again: a completion may have come before the arming
    }
    update_credits(rs);
    if ((rc = wait_cq_event(rs, lock)) != 0) break;
  }
  update_credits(rs);
  return rc;
}

}  // namespace uroce::shim::rs
