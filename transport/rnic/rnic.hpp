// The software RNIC of one engine (one port): device and port attributes,
// the GID table, object creation and the key/QPN tables the engine looks
// up, async events, and the RoceSink the engine hands RoCEv2 packets to.
//
//   RoCEv2 packet -> Rnic::rx_burst, the receive dispatcher (recv.cpp): the
//   QP by QPN in qp_table_, its state, path and P_Key, the frame's ICRC ->
//   request: responder_rx; response: completer_rx
//
// Threads (DESIGN.md "Threads"): control calls (create/destroy/modify) may
// come from any thread.  Each has a caller's part — argument checks that
// need no device state, and slow work such as reading the process's
// mappings — and an engine part that runs inside the engine's loop
// (control(): Engine::run_sync, at once when already there), where every
// table of this class lives.  No lock is held while waiting for it.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "lib/util/counters.hpp"
#include "lib/util/zeroed_array.hpp"
#include "transport/engine.hpp"
#include "transport/event_queue.hpp"
#include "transport/telemetry.hpp"
#include "transport/rnic/mcast.hpp"
#include "transport/rnic/objects.hpp"
#include "transport/rnic/qp.hpp"

namespace uroce::rnic {

// One counter per transport event and drop reason (the engine's own
// counters cover the frames: addresses, unknown QPNs, opcodes, ICRCs).
#define UROCE_RNIC_COUNTERS(X)                                                              \
  X(post_send_not_ready, "send work requests posted in RESET, INIT or RTR: taken and dropped unexecuted, no completion (as ConnectX)") \
  X(req_pkts, "request packets sent")                                                       \
  X(req_retrans_pkts, "request packets sent again (go-back-N)")                             \
  X(resp_pkts, "response packets sent (ACK, NAK, READ response, atomic ACK)")               \
  X(acks_coalesced, "ACKs merged into the QP's previous ACK before it left (not sent)")     \
  X(rx_req_pkts, "request packets received")                                                \
  X(rx_resp_pkts, "response packets received")                                              \
  X(ack_timeouts, "local ACK timeouts")                                                     \
  X(rnr_naks_sent, "RNR NAKs sent (no receive WQE)")                                        \
  X(rnr_naks_rcvd, "RNR NAKs received")                                                     \
  X(seq_naks_sent, "PSN sequence error NAKs sent")                                          \
  X(seq_naks_rcvd, "PSN sequence error NAKs received")                                      \
  X(sr_kept_pkts, "requests past a gap kept for when it fills (selective repeat)")          \
  X(sr_no_room, "requests past a gap not kept (ring or device budget full): NAKed the IBA's way") \
  X(sr_naks_sent, "selective NAKs sent (a gap, what came after it kept)")                   \
  X(sr_naks_rcvd, "selective NAKs received")                                                \
  X(sr_resent_pkts, "request packets sent again because a selective NAK named them")        \
  X(spray_pkts, "request packets sent on a UDP source port other than their QP's (spraying)") \
  X(dup_requests, "duplicate requests received (re-ACKed or replayed)")                     \
  X(retry_exceeded, "QPs that exhausted retry_cnt")                                         \
  X(replay_head_lost, "go-back-N retries started again: the replay's first response was lost") \
  X(rnr_retry_exceeded, "QPs that exhausted rnr_retry")                                     \
  X(drop_qp_state, "dropped: packet for a QP in a state that does not take it")             \
  X(drop_src_addr, "dropped: RC/UC packet from an address other than its QP's path")        \
  X(drop_dst_addr, "dropped: RC/UC packet to an address other than its QP's path")          \
  X(drop_psn_out_of_seq, "dropped: request beyond the expected PSN")                        \
  X(drop_bad_opcode_seq, "dropped: opcode out of sequence within a message")                \
  X(drop_resp_unexpected, "dropped: response for no outstanding request (ghost)")           \
  X(drop_resp_out_of_seq, "dropped: READ response after a gap (the rest is re-requested)")  \
  X(drop_qkey, "dropped: UD/GSI packet with a wrong Q_Key")                                 \
  X(drop_pkey, "dropped: packet with a P_Key we do not hold")                               \
  X(drop_ud_too_long, "dropped: UD/UC message longer than the receive buffer")             \
  X(drop_bad_transport, "dropped: request of another transport than the QP's")             \
  X(drop_bad_length, "dropped: UC/UD packet whose payload breaks the MTU/RETH rules")      \
  X(drop_uc_access, "dropped: UC WRITE refused (R_Key, bounds, rights)")                   \
  X(drop_recv_prot, "dropped: UC/UD message whose receive SGE failed the L_Key check")     \
  X(drop_dup_unknown, "dropped: duplicate READ/atomic not in the responder's result cache") \
  X(drop_resp_backlog, "dropped: request for a QP whose READ response backlog is full")  \
  X(resp_read_restarts, "READ responses cut short by a duplicate READ request, with the requests queued behind them (the requester went back, 9.7.5.1.4)") \
  X(drop_uc_gap, "dropped: UC packet after a PSN gap (rest of the message)")                \
  X(drop_no_recv_ud, "dropped: UD/UC packet with no receive WQE posted")                    \
  X(rem_access_naks, "remote access error NAKs sent")                                       \
  X(rem_inv_req_naks, "invalid request NAKs sent")                                          \
  X(rem_op_naks, "remote operational error NAKs sent")                                      \
  X(inv_rkey_refused, "SEND with Invalidate naming a key that cannot be invalidated (class J: the receive completes in error, no NAK)") \
  X(mw_remote_invalidated, "memory windows invalidated by a peer's SEND with Invalidate") \
  X(flushes_executed, "FLUSH requests carried out (IBA 1.5, global visibility)")            \
  X(xrc_srq_refused, "XRC requests naming no XRC SRQ of the QP's domain (NAKed, A14)")      \
  X(drop_tx_no_neigh, "dropped: request not sent, its destination did not resolve")         \
  X(drop_tx_too_long, "dropped: request frame larger than a buffer")                        \
  X(port_events, "port state changes reported (IBV_EVENT_PORT_ACTIVE / PORT_ERR)")          \
  X(rx_mcast_pkts, "multicast packets received (DestQP 0xFFFFFF)")                         \
  X(rx_mcast_copies, "multicast packets handed to an attached QP (one per QP)")             \
  X(drop_mcast_no_group, "dropped: multicast packet for a group no QP is attached to")      \
  X(drop_mcast_not_ud, "dropped: DestQP 0xFFFFFF on a packet that is not a UD SEND")        \
  X(mcast_self_blocked, "multicast copies kept from their sending QP (BLOCK_SELF_MCAST_LB)") \
  X(cq_overflows, "completions lost to a full CQ (CQ error raised)")                       \
  X(np_ecn_marked_roce_packets, "RoCE packets received with ECN CE (congestion experienced)") \
  X(np_cnp_sent, "CNPs sent for CE-marked packets")                                         \
  X(np_cnp_coalesced, "CE-marked packets a CNP sent within min_time_between_cnps covered") \
  X(np_cnp_failed, "CNPs not sent: no buffer, or the sender did not resolve")              \
  X(rp_cnp_handled, "CNPs received and acted on (DCQCN)")                                   \
  X(rp_cnp_ignored, "CNPs received and ignored (cc = \"none\")")                           \
  X(rp_rate_cuts, "DCQCN rate cuts")                                                        \
  X(rp_delay_cuts, "rate cuts of the delay-based controller (cc = \"delay\")")             \
  X(rp_paced_waits, "times a QP waited for its pacer before a frame")                       \
  X(path_changes, "QPs moved to another UDP source port after congested round trips (repath)")

UROCE_COUNTER_ENUM(RnicCtr, UROCE_RNIC_COUNTERS)
using RnicCounters = CounterSet<RnicCtr, kRnicCtrInfo>;

// An asynchronous event (ibv_get_async_event): the element is a Qp*, Cq*,
// Srq* or the port number, as `type` says.  `context` is that object's
// context (what the application knows it by), taken when the event is
// raised: a reader never dereferences the object, which the application
// may destroy meanwhile (destroy_* also drops its events not yet read, as
// the kernel's uverbs does).
struct AsyncEvent {
  ibv_event_type type = IBV_EVENT_DEVICE_FATAL;
  Qp* qp = nullptr;
  Cq* cq = nullptr;
  Srq* srq = nullptr;
  int port = 0;
  void* context = nullptr;
};

// The IB MTU enum for a byte count: the largest that fits.
constexpr ibv_mtu ib_mtu_for(uint32_t bytes) noexcept {
  if (bytes >= 4096) return IBV_MTU_4096;
  if (bytes >= 2048) return IBV_MTU_2048;
  if (bytes >= 1024) return IBV_MTU_1024;
  if (bytes >= 512) return IBV_MTU_512;
  return IBV_MTU_256;
}

// [engine] Frames to `dgid` need no neighbour resolution on `engine`'s
// device: it is one of the device's addresses (loopback), a multicast GID
// (its group's MAC), or a neighbour already known (a Stale one is
// re-probed meanwhile, NeighTable::lookup).  Rnic::next_hop_known, and
// rdma_resolve_addr's test for an address with no RNIC at hand.
bool next_hop_known(transport::Engine& engine, const wire::Ipv6Addr& dgid);

class Rnic final : public transport::RoceSink {
 public:
  // `name`: "uroce0" ...  The GID table is built from the engine's local
  // addresses (index 0 the IPv6 link-local when there is one, as the
  // kernel orders them, then IPv4-mapped and global IPv6 addresses).
  Rnic(transport::Engine& engine, std::string name);
  ~Rnic() override;
  Rnic(const Rnic&) = delete;
  Rnic& operator=(const Rnic&) = delete;

  // The device's own engine (lcore 0): control verbs, the CM, the host
  // stack.  A QP's data path runs on Qp::engine().
  transport::Engine& engine() noexcept { return engine_; }
  // Engines on several lcores (transport/lcores.hpp): the engine whose loop
  // runs QP `qpn`: QP 0 and 1 (the CM's) lcore 0's, every other QPN's
  // lcore qpn % lcores (QPNs are drawn at random: the lcores share them
  // evenly).  The device's own engine with one lcore.
  transport::Engine& engine_for(Qpn qpn) noexcept {
    if (lcores_ == nullptr || qpn.value() < 2) return engine_;
    return lcores_->engine(qpn.value() % lcores_->size());
  }
  // More than one lcore: what QPs of several lcores share takes its lock.
  bool multi_lcore() const noexcept { return lcores_ != nullptr; }
  // Whether the calling thread runs some lcore's loop of this device (the
  // [engine] assertions of what any lcore's data path may call).
  bool on_an_engine() const noexcept {
    if (lcores_ == nullptr) return engine_.on_engine_thread();
    for (unsigned i = 0; i < lcores_->size(); ++i)
      if (lcores_->engine(i).on_engine_thread()) return true;
    return false;
  }
  const std::string& name() const noexcept { return name_; }
  uint64_t node_guid() const noexcept;  // from the MAC (EUI-64), as rxe; host order (device_attr() has it big-endian)
  // The port's active MTU in bytes (the largest IB MTU that fits the
  // Ethernet MTU with the RoCEv2 headers, as rxe derives it).
  uint32_t active_mtu_bytes() const noexcept;

  // ---- queries ----
  const ibv_device_attr& device_attr() const noexcept { return dev_attr_; }
  int query_port(uint8_t port, ibv_port_attr* out) const;
  int query_gid(uint8_t port, int index, ibv_gid* gid) const;          // EINVAL past the table
  int query_gid_type(uint8_t port, int index, int* type) const;         // IBV_GID_TYPE_ROCE_V2
  int query_pkey(uint8_t port, int index, uint16_t* pkey) const;
  size_t gid_count() const noexcept;

  // How many objects of each kind the RNIC holds now (control path: a leak
  // check for tests and tools).
  struct Usage {
    size_t pds = 0, mrs = 0, channels = 0, cqs = 0, srqs = 0, qps = 0, ahs = 0, xrcds = 0;
  };
  Usage usage();
  // [engine] Reliable requesters (RC, XRC) with packets outstanding; they
  // share params::kMaxUnackedPsns (requester.cpp, send_window).  Each QP
  // counts once, while ReqState::active says so.
  uint32_t active_senders() const noexcept { return active_senders_.load(std::memory_order_relaxed); }
  void sender_active(bool on) noexcept {
    if (on) {
      active_senders_.fetch_add(1, std::memory_order_relaxed);
    } else {
      active_senders_.fetch_sub(1, std::memory_order_relaxed);
    }
  }
  // Selective repeat (DESIGN.md "Loss recovery"): this device's reliable
  // requests offer it, and its responders keep what arrives after a gap
  // from a requester that offers it.  Set once, before any QP exists.
  void set_selective_repeat(bool on) noexcept { selective_repeat_ = on; }
  // Spraying (DESIGN.md "Spraying"): a reliable QP whose peer keeps
  // packets after gaps spreads its requests over this many UDP source
  // ports (1: its own only, the default).  Set once, before any QP exists.
  void set_spray_ports(uint32_t n) noexcept { spray_ports_ = n; }
  uint32_t spray_ports() const noexcept { return spray_ports_; }
  // Congestion control (cc.hpp): ECN, the CNPs sent, DCQCN's parameters.
  // Set once, before any QP exists.
  void set_cc(const config::CcConfig& c) noexcept { cc_ = c; }
  const config::CcConfig& cc() const noexcept { return cc_; }
  bool selective_repeat() const noexcept { return selective_repeat_; }
  // [engine] Request packets the device's responders hold after a gap,
  // all QPs together (at most params::kSrHoldDeviceMax).
  uint32_t held_packets() const noexcept { return held_packets_.load(std::memory_order_relaxed); }
  void add_held(int32_t n) noexcept { held_packets_.fetch_add(static_cast<uint32_t>(n), std::memory_order_relaxed); }
  // The GID index holding `addr`, or -1.
  int find_gid(const wire::Ipv6Addr& addr) const noexcept;
  // A QP's / AH's path from ibv_ah_attr (is_global and a valid sgid_index
  // required on RoCE): EINVAL when the attribute cannot be a RoCEv2 path.
  int resolve_path(const ibv_ah_attr& attr, AhAttr* out) const;
  // The next hop of path `attr` resolved (Linux's modify_qp resolves a
  // connected QP's destination MAC before it returns): ETIMEDOUT when the
  // neighbour does not answer within params::kPathResolveNs (or its
  // probes fail sooner), ENOMEM when the neighbour table is full.  0 at
  // once for our own addresses, a multicast GID, a path that is not one
  // (modify's checks answer for it), and inside an engine's loop (the
  // connection manager's modify: the resolution starts, nobody waits).
  // Any thread; the caller's turns run the loop meanwhile under inline
  // progress.
  int await_neighbour(const ibv_ah_attr& attr);
  // [engine] rnic::next_hop_known on this device's engine.
  bool next_hop_known(const wire::Ipv6Addr& dgid) { return rnic::next_hop_known(engine_, dgid); }

  // ---- objects (any thread; errno in *err on failure; destroy_qp not from
  // the engine's loop) ----
  Pd* alloc_pd(int* err);
  int dealloc_pd(Pd* pd);                   // EBUSY while in use
  // Importing (ibv_import_pd(3), ibv_import_mr(3)): the live PD with this
  // handle, held (Pd::users) until release_pd; the live MR whose handle
  // (its L_Key) this is, on `pd`.  nullptr when there is none.
  Pd* import_pd(uint32_t handle);
  void release_pd(Pd* pd);
  Mr* find_mr(uint32_t handle, const Pd* pd);
  Mr* reg_mr(Pd* pd, void* addr, size_t length, uint64_t iova, int access, int* err);
  int rereg_mr(Mr* mr, int flags, Pd* pd, void* addr, size_t length, int access);
  int dereg_mr(Mr* mr);
  // ibv_advise_mr(3): prefetch ranges of on-demand (ODP) MRs of `pd`.
  // IBV_ADVISE_MR_ADVICE_PREFETCH / _WRITE make the pages present (readable
  // / writable, MADV_POPULATE_*); _NO_FAULT has nothing to do in software.
  // Errors as the kernel's mlx5: EINVAL bad PD, flags or empty list;
  // EOPNOTSUPP unknown advice; ENOENT an lkey that is not an ODP MR of `pd`;
  // EPERM PREFETCH_WRITE on an MR without local write; EFAULT a range
  // outside its MR, or (with IBV_ADVISE_MR_FLAG_FLUSH) pages that could not
  // be made present.  Without FLUSH prefetching stays best-effort.
  int advise_mr(Pd* pd, uint32_t advice, uint32_t flags, const ibv_sge* sg_list, uint32_t num_sge);
  // What on-demand paging covers: every MR may be ODP (nothing is ever
  // pinned; memory.hpp guards every access), implicit ODP included, for
  // each operation RC, UC and UD carry (rxe's, plus implicit).
  static ibv_odp_caps odp_caps() noexcept;
  // The device clock completion timestamps count (Cq::enable_timestamps):
  // CLOCK_MONOTONIC in nanoseconds, i.e. 1 GHz (query_device_ex's
  // hca_core_clock, in kHz).
  static constexpr uint64_t kHcaCoreClockKhz = 1'000'000;
  static uint64_t device_clock_ns() noexcept;  // its value now (any thread)
  // Memory windows (objects.hpp Mw): type 1 or 2 (else EINVAL), on this
  // device's PD.  dealloc_mw unbinds it first: no access through its key
  // succeeds once it returns.
  Mw* alloc_mw(Pd* pd, ibv_mw_type type, int* err);
  int dealloc_mw(Mw* mw);
  CompChannel* create_comp_channel(int* err);
  int destroy_comp_channel(CompChannel* ch);  // EBUSY while a CQ uses it
  // The queues' ring memory comes from `alloc` when given (a parent
  // domain's allocator, ring_memory.hpp), else from the heap; either way
  // it is allocated and freed in the calling thread, never in the loop.
  Cq* create_cq(int cqe, void* context, CompChannel* ch, int comp_vector, int* err,
                const RingAllocator* alloc = nullptr);
  int destroy_cq(Cq* cq);                   // EBUSY while a QP/SRQ uses it
  // `xrc`: an XRC SRQ (IBV_SRQT_XRC) of that domain whose receives
  // complete on that CQ; both must be this device's.
  struct XrcSrq {
    Xrcd* xrcd = nullptr;
    Cq* cq = nullptr;
  };
  Srq* create_srq(Pd* pd, const ibv_srq_init_attr& init, int* err, const RingAllocator* alloc = nullptr,
                  const XrcSrq* xrc = nullptr);
  int destroy_srq(Srq* srq);  // EBUSY while a QP uses it
  // XRC domains (ibv_open_xrcd(3)).  `inode` names the file the domain
  // belongs to (0: an anonymous domain, which needs `create`); opening a
  // file's domain again gives the same Xrcd (Xrcd::opens).  EINVAL: the
  // file has no domain and `create` is false, or it has one and `exclusive`
  // is true (the kernel's answers); ENOMEM past the limit.
  Xrcd* open_xrcd(uint64_t inode, bool create, bool exclusive, int* err);
  // One handle less; the domain goes with the last.  EBUSY when that last
  // handle would leave SRQs or receive QPs in it.
  int close_xrcd(Xrcd* xrcd);
  // ibv_open_qp(3): another handle on the XRC receive QP `qpn` of `xrcd`
  // (EINVAL when it is not one); destroy_qp removes a handle.
  Qp* open_xrc_qp(Xrcd* xrcd, Qpn qpn, int* err);
  // init.send_cq / recv_cq / srq carry this API's Cq* / Srq*
  // (reinterpret_cast), not libibverbs objects.  The QP's caps are
  // Qp::cap().  RC, UC, UD; XRC send QPs (a PD and a send CQ; receive
  // fields ignored) and XRC receive QPs (`xrcd`; no PD, CQ or caps).
  Qp* create_qp(Pd* pd, const ibv_qp_init_attr& init, int* err, const RingAllocator* alloc = nullptr,
                Xrcd* xrcd = nullptr);
  // The GSI QP (QPN 1) for the connection manager: UD semantics, Q_Key
  // 0x80010000 (IBA 13.4.6.1).  EBUSY when it exists.
  Qp* create_gsi_qp(Pd* pd, const ibv_qp_init_attr& init, int* err);
  // An XRC receive QP with other handles (open_xrc_qp) loses one and
  // stays; `other_handle` (when given) becomes its context, so that its
  // async events name a handle still open.
  int destroy_qp(Qp* qp, void* other_handle = nullptr);
  Ah* create_ah(Pd* pd, const ibv_ah_attr& attr, int* err);  // wr.ud.ah = &ah->ibv
  int destroy_ah(Ah* ah);
  // Multicast (ibv_attach_mcast(3) / ibv_detach_mcast(3), mcast.hpp): a UD
  // QP of ours to the group `mgid`.  EINVAL: not a UD QP of this device,
  // not a multicast GID, or (detach) not attached; ENOMEM past the limits.
  // destroy_qp detaches the QP from every group.
  int attach_mcast(Qp* qp, const wire::Ipv6Addr& mgid);
  int detach_mcast(Qp* qp, const wire::Ipv6Addr& mgid);

  // ---- [engine] lookups ----
  // The MR for a local key with this PD; `check` why not.
  Mr* lookup_lkey(Lkey lkey, const Pd* pd, KeyCheck* check) noexcept;
  // The host address for a remote access [va, va+len) under `rkey` with
  // every bit of `need` (IBV_ACCESS_REMOTE_*) granted and the QP's PD;
  // nullptr and `check` when refused (IBA 9.7.5.1.3 / C9-88).  `epoch`
  // receives the MR's epoch (Mr::epoch): a message that spans packets
  // compares it on each one.
  // The R_Key may name a memory window: then also its binding, and (type 2)
  // `qp` must be the QP that bound it.
  uint8_t* check_rkey(Rkey rkey, uint64_t va, uint64_t len, int need, const Pd* pd, KeyCheck* check,
                      uint32_t* epoch = nullptr, const Qp* qp = nullptr) noexcept;
  // [engine] The same checks for a whole region (a FLUSH at the MR level,
  // IBA 1.5): the key, PD, QP and rights, no range.  False and `check`
  // when refused.
  bool check_rkey_region(Rkey rkey, int need, const Pd* pd, KeyCheck* check, const Qp* qp) noexcept;
  // [engine] The local memory operations a send queue carries (IBA 10.6.7,
  // 10.6.6): bind a window as `w` says, or invalidate the window `rkey`
  // names.  IBV_WC_SUCCESS, or the status the WQE completes with (the QP
  // then goes to ERR).
  ibv_wc_status bind_mw(Qp& qp, const SendWqe& w) noexcept;
  ibv_wc_status local_invalidate(Qp& qp, Rkey rkey) noexcept;
  // [engine] A SEND with Invalidate's R_Key (IBA 10.6.7.2.6): true when it
  // named a bound type 2 window of `qp`'s PD bound through `qp`, now
  // invalidated.
  bool remote_invalidate(Qp& qp, Rkey rkey) noexcept;
  Qp* qp_by_num(Qpn qpn) noexcept;  // [engine]
  // [engine] The SRQ with this number (Srq::number), or nullptr.
  Srq* srq_by_num(uint32_t srqn) noexcept {
    assert(on_an_engine());  // the table changes on the control path only
    return srqn < srq_table_.size() ? srq_table_[srqn] : nullptr;
  }

  // ---- async events ----
  // Where the events go instead of the device's own queue (the drop-in:
  // each to the queue of the context that owns its object, and an event of
  // the port or the device to every context, as the kernel gives each
  // uverbs file its own).  Called on the thread that raised the event (the
  // engine's, in practice); must not block.  Set before any object exists.
  using AsyncSink = void (*)(void* arg, const AsyncEvent& ev) noexcept;
  // Adaptive retransmission (on by default; params::kRtoMinNs): off, the
  // local ACK timer is the programmed timeout exactly (IBA 9.7.6.1.3).
  // Control path, before traffic.
  void set_adaptive_retransmission(bool on) noexcept { adaptive_rto_ = on; }
  bool adaptive_retransmission() const noexcept { return adaptive_rto_; }
  void set_async_sink(AsyncSink sink, void* arg) noexcept {
    async_sink_ = sink;
    async_sink_arg_ = arg;
  }
  int async_fd() const noexcept { return async_.fd(); }
  void raise(const AsyncEvent& ev) noexcept;   // any thread
  int get_async_event(AsyncEvent* ev);          // blocks unless async_fd is O_NONBLOCK (EAGAIN)

  // ---- doorbells ----
  // Application: wake the requester of `qp` (after post_send).
  void ring_sq(Qp& qp) noexcept;

  // ---- the engine's RoceSink: the receive dispatcher (recv.cpp) ----
  void rx_burst(transport::Engine& engine, transport::RoceRx* pkts, uint16_t n) override;
  bool mcast_member(const wire::Ipv6Addr& mgid) const noexcept override {
    assert(on_an_engine());  // the table changes on the control path only
    return mcast_.find(mgid) != nullptr;
  }
  // [engine] Called on a connected QP's first request since RTR (IBA
  // 11.6.3.1, communication established), after the application's async
  // event: the connection manager's view of it (it stands for a late RTU).
  void set_comm_est_hook(std::function<void(Qp&)> f) { comm_est_hook_ = std::move(f); }

  RnicCounters& counters() noexcept { return ctr_; }
  const RnicCounters& counters() const noexcept { return ctr_; }

  // ---- a device shared with other processes (uroced, issue 15) ----
  // The daemon owns the device's QPN space and the wire: QPNs come from it
  // and go back to it, and it learns — in order with the QP's frames
  // (drivers/daemon/daemon_port.hpp) — what each connected QP may send to
  // and which multicast groups this process is in.  Set before any QP.
  struct SharedDevice {
    std::function<int(uint32_t* qpn)> alloc_qpn;  // caller's thread: 0 or an errno
    std::function<void(uint32_t qpn)> free_qpn;   // caller's thread
    // [engine] A connected QP (RC, UC, XRC) reached RTR with this
    // destination, or changed it; and it let its destination go (RESET,
    // destroyed).
    std::function<void(uint32_t qpn, const wire::Ipv6Addr& dgid, uint32_t dqpn)> claim;
    std::function<void(uint32_t qpn)> unclaim;
    // [engine] The first QP of this device joined group `mgid`, or the
    // last one left it.
    std::function<void(const wire::Ipv6Addr& mgid, bool join)> mcast;
  };
  void set_shared(SharedDevice s) { shared_ = std::move(s); }
  bool shared() const noexcept { return static_cast<bool>(shared_.alloc_qpn); }
  // [engine] The QP's claim follows its state and destination (modify).
  void update_claim(Qp& qp) noexcept;

  // The device is gone for good (the daemon serving it went away): every
  // QP to ERR (its work completes with flush errors) and
  // IBV_EVENT_DEVICE_FATAL raised, as a provider reports a dead device.
  // Control path; once.
  void device_fatal();

  // Every QP now (control path, inside the loop): for `uroce qp`.
  struct QpSnapshot {
    uint32_t qpn = 0;
    ibv_qp_type type = IBV_QPT_RC;
    ibv_qp_state state = IBV_QPS_RESET;
    uint32_t sq_psn = 0;         // the next PSN the requester sends
    uint32_t rq_psn = 0;         // the next PSN the responder expects
    uint32_t dest_qp_num = 0;
    wire::Ipv6Addr dgid{};       // connected QPs: the destination
    uint32_t send_posted = 0;    // send WQEs not yet completed
    uint32_t recv_posted = 0;    // receive WQEs waiting (own RQ)
    // Congestion control and loss recovery (issue 42).
    uint16_t sport = 0;          // its UDP source port: its path
    uint64_t rate_bps = 0;       // paced at (0: not held back)
    uint64_t dcqcn_target_bps = 0;  // DCQCN's target while it holds the QP
    uint32_t alpha = 0;          // DCQCN's alpha, 1024ths
    uint64_t srtt_ns = 0;        // the requester's round-trip estimate (0: no sample)
    uint64_t last_rtt_ns = 0;    // the latest sample the delay controller took
    uint64_t cnps_sent = 0;
    uint64_t cnps_rcvd = 0;
    uint32_t path_changes = 0;
    const char* recovery = "";   // "go-back-N", "selective", "selective (offered)"
    Qp::Tally tally;
  };
  std::vector<QpSnapshot> qp_snapshots();
  // One QP's row, in `uroce qp`'s columns and order: the daemon's dump and
  // the in-process telemetry table (/uroce/qps) both print it.
  static std::vector<transport::TableCell> qp_row(const QpSnapshot& q);

 private:
  transport::Engine& engine_;
  transport::Lcores* const lcores_;  // the device's lcores; null: one
  std::string name_;
  ibv_device_attr dev_attr_{};
  std::vector<wire::Ipv6Addr> gids_;
  RnicCounters ctr_;
  // A control verb's engine part: `f` inside the engine's loop (at once
  // when already there); its result.  Every table below is the engine's.
  template <class F>
  auto control(F&& f) -> decltype(f()) {
    decltype(f()) r{};
    engine_.run_sync([&] { r = f(); });
    return r;
  }
  // Objects, owned here.
  std::vector<std::unique_ptr<Pd>> pds_;
  std::vector<std::unique_ptr<Mr>> mrs_;        // index = key >> 8
  std::vector<std::unique_ptr<CompChannel>> channels_;
  std::vector<std::unique_ptr<Cq>> cqs_;
  std::vector<std::unique_ptr<Srq>> srqs_;
  std::vector<std::unique_ptr<Qp>> qps_;
  std::vector<std::unique_ptr<Ah>> ahs_;
  std::atomic<uint32_t> active_senders_{0};  // every lcore's loop: see active_senders()
  bool selective_repeat_ = false;
  uint32_t spray_ports_ = 1;
  config::CcConfig cc_{};
  std::atomic<uint32_t> held_packets_{0};    // every lcore's loop: see held_packets()
  std::vector<std::unique_ptr<Xrcd>> xrcds_;
  uint32_t next_xrcd_ = 1;
  ZeroedArray<Mr*> key_table_;                  // index = key >> 8 (kMaxMr)
  std::vector<std::unique_ptr<Mw>> mws_;        // index = key >> 8 (sized on the first MW)
  ZeroedArray<uint8_t> last_key_byte_;          // per index: the key byte of its last registration
  std::deque<uint32_t> free_keys_;              // key indexes to reuse, oldest freed first
  uint32_t next_key_ = 1;                       // next never-used key index (0 is never a key)
  std::mt19937_64 rng_;                         // key bytes, QPNs (seeded from the OS)
  uint32_t live_mrs_ = 0;
  ZeroedArray<Qp*> qp_table_;                   // by QPN, the one QP table (engine reads; written under run_sync)
  ZeroedArray<Srq*> srq_table_;                 // by SRQ number (engine reads; written under run_sync)
  uint32_t next_srqn_ = 1;                      // where the search for a free number starts (0 is never one)
  McastTable mcast_;
  void mcast_rx(transport::Engine& engine, transport::RoceRx& pkt) noexcept;  // [engine]
  void comm_est(Qp& qp) noexcept;                                              // [the QP's engine]
  std::function<void(Qp&)> comm_est_hook_;                                     // [engine]
  // COMM_EST of other lcores' QPs, for lcore 0's CM (recv.cpp).
  boost::lockfree::queue<uint32_t, boost::lockfree::fixed_sized<true>> comm_est_q_{1024};
  void drain_comm_est() noexcept;  // [engine]
  // [any lcore's loop] Hands a frame to `to`, the lcore of its QP.
  void hand_off(transport::Engine& from, transport::Engine& to, rte_mbuf* m) noexcept;
  Qp* make_qp(Pd* pd, const ibv_qp_init_attr& init, uint32_t qpn, Qp::Rings& rings, int* err,
              Xrcd* xrcd = nullptr);
  // [engine] Whether `init` (with `pd`, `xrcd`) names objects of this
  // device as its QP type needs them, within the device's caps.
  bool qp_init_ok(Pd* pd, const ibv_qp_init_attr& init, Xrcd* xrcd) const;
  // The ring memory of a QP made with `init` (caller's thread): 0, EINVAL
  // (caps above the device's), ENOMEM.
  static int qp_rings(const ibv_qp_init_attr& init, const RingAllocator* alloc, Qp::Rings* rings);
  bool take_key(uint32_t* key);  // [engine] a new MR/MW key; false when none is left
  // [engine] what an MR and a window begin with: the PD is one of this
  // device's (else EINVAL) and a new key (else ENOMEM), errno in *err.
  bool key_for(const Pd* pd, uint32_t* key, int* err);
  Mw* mw_by_key(Rkey rkey) noexcept;
  // Memory windows are bound and invalidated by the data path of any QP
  // of their PD, and checked by any other's: with several lcores a window
  // is read and written under mw_lock() (SpinGuard, held for one check or
  // bind; null with one lcore).  MRs change only on the control path.
  std::atomic_flag mw_lock_ = ATOMIC_FLAG_INIT;
  std::atomic_flag* mw_lock() noexcept { return lcores_ != nullptr ? &mw_lock_ : nullptr; }
  uint8_t* check_mw_rkey(const Mw& mw, Rkey rkey, uint64_t va, uint64_t len, int need, const Pd* pd,
                         KeyCheck* check, uint32_t* epoch, const Qp* qp) noexcept;
  // 0, or the errno reg_mr/rereg_mr give for memory not mapped as `access` needs.
  static int check_memory(const void* addr, uint64_t length, int access);
  uint32_t next_pd_ = 1;
  transport::EventQueue<AsyncEvent> async_;  // ibv_get_async_event(3), without a sink
  bool adaptive_rto_ = true;
  AsyncSink async_sink_ = nullptr;
  void* async_sink_arg_ = nullptr;
  // [engine] The port's link as last reported: a timer samples it every
  // kLinkPollNs and raises IBV_EVENT_PORT_ACTIVE / IBV_EVENT_PORT_ERR on a
  // change (IBA 11.6.3.3, unaffiliated port events).
  static void on_link_poll(Timer& t, uint64_t now_ns);
  Timer link_timer_{};
  bool link_up_ = false;
  SharedDevice shared_;
  bool dead_ = false;  // [engine] device_fatal() ran
  // [engine] A group's first QP came or its last went (SharedDevice::mcast).
  void mcast_changed(const wire::Ipv6Addr& mgid, bool had_group) noexcept;
};

}  // namespace uroce::rnic
