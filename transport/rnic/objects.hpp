// The software RNIC's objects: PD, MR, CQ (+ completion channel), SRQ, AH
// and the device (Rnic) that owns them.  The QP is in qp.hpp.
//
// The API speaks libibverbs' own structures (ibv_qp_attr, ibv_send_wr,
// ibv_wc ...) so that verbs-shim/ wraps it one to one and every enum value
// and attribute mask is the man pages' by construction.  Errors are the
// errno values the man pages name, returned as positive ints (0: success).
//
// Threads (DESIGN.md "Threads"): control-path calls (create/destroy/modify/
// query) come from any application thread and do their work inside the
// engine's loop (Engine::run_sync), holding no lock while they wait.
// Data-path calls (post_*, poll, notify) touch only the object's rings and
// locks (see each class).  Functions marked [engine] run inside the
// engine's loop only.
#pragma once

#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "lib/wire/ipv6.hpp"
#include "lib/wire/types.hpp"
#include "transport/event_queue.hpp"
#include "transport/neigh.hpp"
#include "transport/rnic/limits.hpp"
#include "transport/rnic/ring_memory.hpp"

namespace uroce::transport {
class Engine;
}

namespace uroce::rnic {

using uroce::Lkey;
using uroce::Psn;
using uroce::Qkey;
using uroce::Qpn;
using uroce::Rkey;

class Rnic;
class Qp;

// ---- PD ----------------------------------------------------------------------------
class Pd {
 public:
  explicit Pd(Rnic& rnic, uint32_t handle) : rnic_(rnic), handle_(handle) {}
  Rnic& rnic() const noexcept { return rnic_; }
  uint32_t handle() const noexcept { return handle_; }
  // Objects created on this PD (MR, QP, SRQ, AH); dealloc fails with EBUSY
  // while non-zero.
  std::atomic<uint32_t> users{0};

 private:
  Rnic& rnic_;
  uint32_t handle_;
};

// ---- XRC domain --------------------------------------------------------------------
// An XRC domain (IBA annex A14; ibv_open_xrcd(3)): what XRC SRQs and XRC
// receive QPs belong to.  A request arriving at an XRC receive QP names,
// in its XRCETH, an SRQ of the QP's domain; no other SRQ can be reached
// through it.  Opened by file (its inode) or anonymously; every open of the
// same file on this device is a handle on the same domain (`opens`).
class Xrcd {
 public:
  Xrcd(uint32_t handle, uint64_t inode) : handle_(handle), inode_(inode) {}
  uint32_t handle() const noexcept { return handle_; }
  uint64_t inode() const noexcept { return inode_; }  // 0: opened without a file
  std::atomic<uint32_t> users{0};  // XRC SRQs and XRC receive QPs in it
  uint32_t opens = 0;              // handles (control path, under run_sync)

 private:
  uint32_t handle_;
  uint64_t inode_;
};

// ---- MR ----------------------------------------------------------------------------
// Registered over memory of this process: [addr, addr+length) as seen by the
// application, addressed remotely by iova (== addr unless reg_mr_iova).
// lkey == rkey (an index into the Rnic's key table plus a random 8-bit key
// that differs from the index's previous one, as rxe does).
//
// Lifetime (DESIGN.md "What every error path does"): the engine looks a key
// up again for every packet; deregistration removes it from the key table
// inside the engine's loop, so no packet is placed after dereg_mr returns.
// `epoch` changes on every re-registration: a multi-packet message that
// began under another epoch fails (remote access error) instead of
// continuing into memory the MR no longer describes.
class Mr {
 public:
  Pd* pd = nullptr;
  uint8_t* addr = nullptr;
  uint64_t length = 0;
  uint64_t iova = 0;
  int access = 0;  // IBV_ACCESS_*
  Lkey lkey{};
  Rkey rkey{};
  uint32_t epoch = 0;             // [engine] written under run_sync by rereg_mr
  std::atomic<bool> valid{true};  // false once deregistered (engine sees it)
  uint32_t mw_binds = 0;          // [engine] memory windows bound to it: dereg/rereg EBUSY

  // The host address of [va, va+len) if it lies inside the MR (64-bit wrap
  // included); nullptr otherwise.  `va` is an iova (remote) or an address
  // (local, where iova == addr).
  uint8_t* translate(uint64_t va, uint64_t len) const noexcept;
};

// Why a key lookup failed: the responder NAKs remote access errors, the
// requester completes local ones with LOC_PROT_ERR.  WrongQp: a type 2
// memory window used through another QP than the one it was bound by.
enum class KeyCheck : uint8_t { Ok, NoKey, WrongPd, WrongQp, NoAccess, OutOfBounds };

// ---- MW ----------------------------------------------------------------------------
// A memory window (IBA 10.6.7; ibv_alloc_mw(3), ibv_bind_mw(3)): part of an
// MR, with remote rights of its own, named by an R_Key from the MRs' key
// space (the same table index never names both).
//   Type 1: bound by ibv_bind_mw (a BIND_MW work request the library posts)
//           and rebound at will; until bound it covers nothing.
//   Type 2 (2B, as rxe): bound by an IBV_WR_BIND_MW with an R_Key of the
//           application's choice (same index, ibv_inc_rkey); usable only
//           through the QP that bound it; must be invalidated (LOCAL_INV, or
//           a peer's SEND with Invalidate) before it is bound again.
// The binding is the engine's: written by the requester (bind, local
// invalidate), the responder (remote invalidate) and dealloc_mw inside the
// loop; `epoch` changes with each, so a message that began under one binding
// does not continue under the next (as Mr::epoch).  `ibv` comes first (as
// Ah): the ibv_mw* of a work request is `&mw->ibv`.
class Mw {
 public:
  ibv_mw ibv{};
  Pd* pd = nullptr;
  ibv_mw_type type = IBV_MW_TYPE_1;
  Rkey rkey{};            // [engine] the current R_Key
  bool bound = false;     // [engine] type 2: VALID rather than FREE
  Mr* mr = nullptr;       // [engine] the MR it covers part of (nullptr: nothing)
  uint64_t va = 0;        // [engine] its first byte, in the MR's iova space
  uint64_t length = 0;    // [engine]
  int access = 0;         // [engine] IBV_ACCESS_REMOTE_* granted
  bool zero_based = false;
  const class Qp* qp = nullptr;  // [engine] type 2: the QP that bound it
  uint32_t epoch = 0;     // [engine]
  static Mw* from_ibv(ibv_mw* m) noexcept { return reinterpret_cast<Mw*>(m); }
};

// ---- completion channel ------------------------------------------------------------
// An eventfd the application polls (ibv_get_cq_event reads it).  Events are
// queued in order; `get_event` pops one (blocking or not).
class CompChannel {
 public:
  CompChannel() = default;
  CompChannel(const CompChannel&) = delete;
  CompChannel& operator=(const CompChannel&) = delete;
  bool valid() const noexcept { return q_.valid(); }
  int fd() const noexcept { return q_.fd(); }
  // [engine] a CQ armed with req_notify got its event.
  void notify(class Cq* cq) { q_.push(cq); }
  // Application: the next event's CQ (blocks unless the fd is O_NONBLOCK;
  // EAGAIN when non-blocking and none).
  int get_event(class Cq** cq) { return q_.take(cq); }
  std::atomic<uint32_t> users{0};  // CQs attached; destroy fails with EBUSY
  // Control path: a CQ attaches (room for its event, so that notify never
  // allocates) or detaches (its undelivered events are dropped).
  void attach() { q_.reserve(users.load() + 1); }
  void detach(class Cq* cq) {
    q_.remove_if([cq](class Cq* c) { return c == cq; });
  }

 private:
  transport::EventQueue<class Cq*> q_;
};

// ---- CQ ----------------------------------------------------------------------------
// A ring of ibv_wc.  Producer: the engine (one thread).  Consumers:
// application threads under `poll_mu_`.  Memory ordering: the engine writes
// an entry, then publishes tail_ with release; pollers read tail_ with
// acquire, copy entries, then publish head_ with release; the engine reads
// head_ with acquire to see free slots.  Overflow (no free slot) sets the
// CQ in error and raises IBV_EVENT_CQ_ERR; the entry is dropped, never
// written over an unread one.
class Cq {
 public:
  // `mem`: bytes(capacity) of ring memory (ring_memory.hpp).
  static size_t bytes(uint32_t capacity) noexcept;
  Cq(Rnic& rnic, uint32_t capacity, void* context, CompChannel* channel, RingBlock&& mem);
  ~Cq();
  Rnic& rnic() const noexcept { return rnic_; }
  void* context() const noexcept { return context_; }
  CompChannel* channel() const noexcept { return channel_; }
  uint32_t capacity() const noexcept { return capacity_; }  // usable entries (ibv cqe)

  // Application side.  `ts` / `wall_ns` (n entries each, optional): each
  // completion's timestamps (valid once enable_timestamps was called).
  int poll(int n, ibv_wc* out, uint64_t* ts = nullptr, uint64_t* wall_ns = nullptr);  // number polled, or -errno
  // Control path, before any QP uses the CQ: stamp every entry
  // (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP[_WALLCLOCK]).
  void enable_timestamps() noexcept { timestamps_.store(true, std::memory_order_relaxed); }
  int req_notify(bool solicited_only);       // 0 or errno
  int resize(uint32_t cqe);                  // 0 or errno (EINVAL when below the entries in use, ENOMEM)
  // [engine] Removes the entries of QP `qpn` not yet polled, keeping the
  // others in order (under the poll lock: bounded work).
  void clean(Qpn qpn);

  // [engine] false when the CQ overflowed: the entry is dropped, counted
  // (cq_overflows) and IBV_EVENT_CQ_ERR raised here; callers need not count.  `solicited`: the completion of a message
  // with the SE bit (wakes a solicited-only request).
  bool push(const ibv_wc& wc, bool solicited = false) noexcept;

  // [engine] Called on the engine thread after each entry is published:
  // how an engine-side consumer (the GSI port, cm/gsi_port.hpp) learns of
  // completions without polling.  Set on the engine before the CQ is used.
  using PushHook = void (*)(void* arg) noexcept;
  void set_push_hook(PushHook hook, void* arg) noexcept {
    hook_ = hook;
    hook_arg_ = arg;
  }

  std::atomic<uint32_t> users{0};  // QPs and SRQs using it; destroy fails with EBUSY
  bool overflowed() const noexcept { return overflow_.load(std::memory_order_acquire); }

 private:
  Rnic& rnic_;
  void* context_;
  CompChannel* channel_;
  uint32_t capacity_;
  // capacity_ + 1 slots, left uninitialised: a large CQ (libfabric's rxm
  // asks for 2^18 entries) costs address space, and memory only as it fills.
  // One slot is a cache line: the completion and, on a CQ that stamps them,
  // its device-clock and wall-clock times.
  struct Cqe {
    ibv_wc wc;
    uint64_t ts;
    uint64_t wall_ns;
  };
  static_assert(sizeof(Cqe) == 64);
  RingBlock mem_;
  Cqe* ring_;  // in mem_
  std::atomic<bool> timestamps_{false};
  uint32_t slots_;
  alignas(64) std::atomic<uint32_t> head_{0};  // next to poll
  alignas(64) std::atomic<uint32_t> tail_{0};  // next to fill
  std::mutex poll_mu_;
  // 0: not armed; 1: next completion; 2: solicited only.
  std::atomic<uint8_t> armed_{0};
  std::atomic<bool> overflow_{false};
  std::atomic_flag push_lock_ = ATOMIC_FLAG_INIT;  // push's (SpinGuard), with several lcores
  PushHook hook_ = nullptr;  // engine-only
  void* hook_arg_ = nullptr;
};

// ---- receive WQEs (RQ and SRQ) -----------------------------------------------------
// Its SGEs live in the queue's side array, max_sge per slot (the QP's or
// SRQ's cap, not the device's: a slot costs what the queue asked for).
struct RecvWqe {
  uint64_t wr_id = 0;
  uint32_t num_sge = 0;
  uint64_t total_len = 0;  // sum of the SGE lengths
  ibv_sge* sge = nullptr;  // num_sge of them
};

// Copies `from` into `to`, keeping `to`'s own SGE storage (room for
// from.num_sge).
inline void copy_recv_wqe(RecvWqe& to, const RecvWqe& from) noexcept {
  to.wr_id = from.wr_id;
  to.num_sge = from.num_sge;
  to.total_len = from.total_len;
  std::copy_n(from.sge, from.num_sge, to.sge);
}

// A ring of RecvWqe.  Producers: application threads under `post_mu_`
// (validated before they are written).  Consumer: the engine.  Ordering as
// the CQ's: writer fills the slot, then tail_ release; reader acquires.
class RecvQueue {
 public:
  // The ring memory for `capacity` usable entries of `max_sge` SGEs
  // (ring_memory.hpp), then the queue in it.
  static size_t bytes(uint32_t capacity, uint32_t max_sge) noexcept;
  void init(uint32_t capacity, uint32_t max_sge, RingBlock&& mem) noexcept;
  uint32_t capacity() const noexcept { return capacity_; }
  uint32_t max_sge() const noexcept { return max_sge_; }
  // Application: the number of WQEs in the queue (for SRQ limit and query).
  uint32_t size() const noexcept;
  bool full() const noexcept;
  // Under post_mu_, after !full(), with n <= max_sge.
  void push(uint64_t wr_id, const ibv_sge* sge, uint32_t n) noexcept;
  // [engine]
  RecvWqe* front() noexcept;             // nullptr when empty
  void pop() noexcept;
  // Control path, with post_mu held and the engine not reading (run_sync):
  // drop every entry / change the capacity keeping the entries, in `mem`
  // (bytes(capacity, max_sge())), handing the old memory back in `old` to
  // be freed outside the loop (false when they would not fit: `mem` stays).
  void clear() noexcept;
  bool resize(uint32_t capacity, RingBlock& mem, RingBlock* old) noexcept;
  const RingBlock& memory() const noexcept { return mem_; }
  std::mutex post_mu;

 private:
  struct Layout;
  uint32_t capacity_ = 0;
  uint32_t max_sge_ = 1;
  RingBlock mem_;                // what the two below live in
  std::span<RecvWqe> ring_;      // a power of two >= capacity_ slots; free-running indexes
  std::span<ibv_sge> sges_;      // max_sge_ per slot
  alignas(64) std::atomic<uint32_t> head_{0};
  alignas(64) std::atomic<uint32_t> tail_{0};
};

// ---- SRQ ---------------------------------------------------------------------------
// Every SRQ has a number (ibv_get_srq_num(3)), by which an XRC request's
// XRCETH names it (Rnic::srq_by_num).  An XRC SRQ (IBV_SRQT_XRC) belongs
// to a domain and has a CQ of its own: its receive completions go there,
// whichever XRC receive QP took the message; its PD is the one the
// requests' R_Keys are checked against (annex A14).
class Srq {
 public:
  // `mem`: RecvQueue::bytes(attr.max_wr, attr.max_sge) of ring memory.
  Srq(Rnic& rnic, Pd* pd, const ibv_srq_attr& attr, void* context, RingBlock&& mem, uint32_t number,
      Xrcd* xrcd = nullptr, Cq* cq = nullptr);
  ~Srq();
  Pd* pd() const noexcept { return pd_; }
  void* context() const noexcept { return context_; }
  uint32_t number() const noexcept { return number_; }
  Xrcd* xrcd() const noexcept { return xrcd_; }  // nullptr: a basic SRQ
  Cq* cq() const noexcept { return cq_; }        // XRC: where its receives complete
  int post_recv(const ibv_recv_wr* wr, const ibv_recv_wr** bad);
  int modify(const ibv_srq_attr& attr, int mask);  // IBV_SRQ_MAX_WR (resize: EINVAL/ENOSYS), IBV_SRQ_LIMIT
  int query(ibv_srq_attr* attr) const;
  RecvQueue& rq() noexcept { return rq_; }
  // [engine] after a pop: raises IBV_EVENT_SRQ_LIMIT_REACHED once when the
  // queue drops below an armed limit (and disarms it, IBA 10.2.9.2).
  void after_pop() noexcept;
  std::atomic<uint32_t> users{0};  // QPs; destroy fails with EBUSY
  // [engine] A receive WQE's take (front, copy, pop, after_pop) is one
  // step under this lock (SpinGuard): with several lcores their QPs share
  // the SRQ; with one, null and nothing is taken.
  std::atomic_flag* take_lock() noexcept { return multi_lcore_ ? &take_lock_ : nullptr; }

 private:
  Rnic& rnic_;
  bool multi_lcore_ = false;
  std::atomic_flag take_lock_ = ATOMIC_FLAG_INIT;
  Pd* pd_;
  void* context_;
  uint32_t number_;
  Xrcd* xrcd_;
  Cq* cq_;
  uint32_t max_sge_;
  std::atomic<uint32_t> limit_{0};
  RecvQueue rq_;
};

// ---- AH ----------------------------------------------------------------------------
// The destination of a UD send (and the primary path of a connected QP).
struct AhAttr {
  ibv_ah_attr attr{};
  // Resolved from attr.grh: the IP addresses to put on the wire.
  wire::Ipv6Addr dgid{};   // ::ffff:a.b.c.d for IPv4
  wire::Ipv6Addr sgid{};   // from the GID table at sgid_index
  bool ipv4 = true;
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 64;
  uint32_t flow_label = 0;
  // Where this path's frames went last (engine thread only; tx_out).
  mutable transport::NextHop next_hop{};
};

// `ibv` comes first: the ibv_ah* of a UD work request (wr.ud.ah) is
// `&ah->ibv` (== reinterpret_cast<ibv_ah*>(ah)); from_ibv() goes back.
// The shim may fill ibv's context/pd/handle and hand &ibv to applications.
class Ah {
 public:
  ibv_ah ibv{};
  Pd* pd = nullptr;
  AhAttr path;
  static Ah* from_ibv(ibv_ah* a) noexcept { return reinterpret_cast<Ah*>(a); }
};

}  // namespace uroce::rnic
