// The queue pair: its attributes, its state machine (IBA 10.3, the
// ibv_modify_qp man page), its send and receive queues, and the state of
// its three engine-side roles:
//
//   requester (requester.cpp)  SQ WQEs -> request packets
//   completer (completer.cpp)  ACK/NAK/READ responses/atomic ACKs -> send CQEs, retransmission
//   responder (responder.cpp)  request packets -> memory, receive CQEs, ACK/NAK/READ responses
//
// Threads (DESIGN.md "Threads").  Application threads post under
// sq.post_mu / rq.post_mu (one lock per queue, so several threads may post
// to one QP; held only to fill a slot, never while waiting for the engine)
// and then ring the engine's doorbell; modify and query run inside the
// engine's loop (Engine::run_sync), which serialises them.  Everything in
// `req`, `comp`, `resp`, the attributes and the WQEs' progress fields is
// the engine's.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "lib/util/timer_wheel.hpp"
#include "transport/rnic/cc.hpp"
#include "transport/rnic/completer.hpp"
#include "transport/rnic/objects.hpp"
#include "transport/rnic/wr.hpp"
#include "transport/rnic/requester.hpp"
#include "transport/rnic/responder.hpp"
#include "transport/rnic/ring_memory.hpp"
#include "transport/rnic/sge.hpp"

namespace uroce::rnic {

// ---- send WQEs ---------------------------------------------------------------------
// Where a send WQE is in its life (engine only).
enum class WqeState : uint8_t {
  Posted,     // not yet started by the requester
  Sending,    // some packets sent
  Sent,       // every packet sent, waiting for the ACK / READ response / atomic ACK
  Done,       // acknowledged (or, UD/UC, sent); its CQE may be written
  Error,      // completed in error; the QP goes to ERR
};

struct SendWqe {
  // From the ibv_send_wr, validated at post time.
  uint64_t wr_id = 0;
  ibv_wr_opcode opcode = IBV_WR_SEND;
  uint32_t send_flags = 0;          // IBV_SEND_*
  uint32_t imm_data = 0;            // network order, as in ibv_send_wr (also invalidate_rkey)
  uint64_t remote_addr = 0;         // RDMA / atomic
  Rkey rkey{};                      // RDMA / atomic / FLUSH: the remote key; BIND_MW: the new one
  uint64_t compare_add = 0;         // atomic; an inline ATOMIC WRITE's 8 bytes
  uint64_t swap = 0;
  AhAttr ud_path{};                 // UD: copied from the AH at post time
  Qpn remote_qpn{};                 // UD
  uint32_t remote_qkey = 0;         // UD
  uint32_t remote_srqn = 0;         // XRC send QP: the SRQ its XRCETH names (wr.qp_type.xrc.remote_srqn)
  uint32_t num_sge = 0;
  ibv_sge* sge = nullptr;           // the queue's side array: max_send_sge per slot (unused when inline)
  uint64_t length = 0;              // total message bytes
  uint8_t* inline_data = nullptr;   // IBV_SEND_INLINE: the bytes, copied at post time (max_inline_data per slot)
  // IBV_WR_BIND_MW (wr.bind_mw): the window, its new R_Key (in `rkey`), and
  // the binding: the MR by its L_Key (read from the ibv_mr at post time),
  // `remote_addr` and `bind_length` in the MR, `bind_access`.
  Mw* mw = nullptr;
  uint32_t mw_index = 0;            // its key index, from ibv_mw.rkey (Rnic::bind_mw checks it)
  bool bind_has_mr = false;
  uint32_t bind_lkey = 0;
  uint64_t bind_length = 0;
  uint32_t bind_access = 0;
  // FLUSH (IBA 1.5; verbs_newer::kWrFlush): the range's length (the RETH's
  // DMA length; `length` stays 0, no payload) and the FETH word (selectivity
  // level and placement type).
  uint32_t flush_len = 0;
  uint32_t feth = 0;

  // Progress (engine only; requester and completer).
  WqeState state = WqeState::Posted;
  Psn first_psn{};
  Psn last_psn{};
  uint64_t sent = 0;                // payload bytes segmented so far (requester)
  SgeCursor cursor;                 // the requester's gather position (sge.hpp)
  uint64_t read_done = 0;           // READ response bytes placed (completer)
  uint64_t atomic_orig = 0;         // the atomic ACK's original value
  ibv_wc_status status = IBV_WC_SUCCESS;
  // Taken at post time although the QP cannot carry it out (Qp::post_send):
  // the requester completes it with this status when it reaches it.
  ibv_wc_status post_error = IBV_WC_SUCCESS;

  // A READ or an atomic: held against max_rd_atomic, acknowledged by its
  // response rather than an ACK.
  bool rd_atomic() const noexcept { return wr_info(opcode).rd_atomic; }
  // Where IBV_SEND_INLINE bytes are kept: the slot's inline room, or for an
  // ATOMIC WRITE (which needs none) its 8 bytes in compare_add, as given.
  uint8_t* inline_bytes() noexcept {
    return opcode == IBV_WR_ATOMIC_WRITE ? reinterpret_cast<uint8_t*>(&compare_add) : inline_data;
  }
  // A local memory operation (bind, local invalidate): carried out by the
  // requester in send-queue order, no packet, no PSN.
  bool local_op() const noexcept { return wr_info(opcode).local; }
};

// Free-running SQ indexes (SendQueue): `a` comes before `b`.
constexpr bool sq_before(uint32_t a, uint32_t b) noexcept { return static_cast<int32_t>(a - b) < 0; }

// A ring of SendWqe.  Slots [head, tail) are posted and not yet completed.
// Producer: application threads under post_mu (tail_, release).  Consumer:
// the engine: the requester walks from `req.wqe_idx`; the completer retires
// from head_ (release, so that posters see the freed slot).
class SendQueue {
 public:
  // The ring memory for these caps (ring_memory.hpp), then the queue in
  // it: slots sized by the QP's caps, max_sge SGEs and max_inline bytes each.
  static size_t bytes(uint32_t capacity, uint32_t max_sge, uint32_t max_inline) noexcept;
  void init(uint32_t capacity, uint32_t max_sge, uint32_t max_inline, RingBlock&& mem) noexcept;
  uint32_t capacity() const noexcept { return capacity_; }
  bool full() const noexcept;
  SendWqe& slot(uint32_t idx) noexcept { return ring_[idx % ring_.size()]; }
  const SendWqe& slot(uint32_t idx) const noexcept { return ring_[idx % ring_.size()]; }
  // Application, under post_mu: the slot to fill, then publish().
  SendWqe& next_free() noexcept { return slot(tail_.load(std::memory_order_relaxed)); }
  void publish() noexcept { tail_.store(tail_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
  // Engine.
  uint32_t head() const noexcept { return head_.load(std::memory_order_relaxed); }
  uint32_t tail() const noexcept { return tail_.load(std::memory_order_acquire); }
  void retire() noexcept { head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_release); }
  // Control path (->RESET, under run_sync with post_mu held): empty, indexes from 0.
  void clear() noexcept;
  std::mutex post_mu;

 private:
  uint32_t capacity_ = 0;
  struct Layout;
  RingBlock mem_;              // what the three below live in
  std::span<SendWqe> ring_;    // a power of two >= capacity_ slots; indexes are free-running uint32_t
  std::span<ibv_sge> sges_;    // max_sge per slot
  std::span<uint8_t> inline_bytes_;  // max_inline per slot
  alignas(64) std::atomic<uint32_t> head_{0};
  alignas(64) std::atomic<uint32_t> tail_{0};
};

// ---- what a QP does in each state ----------------------------------------------------
// IBA 10.3.1 (the QP states): one row per state, so that the data path
// asks the table instead of listing states.
struct StateCaps {
  bool takes_requests = false;   // the responder runs (RTR and later, 10.3.1.2)
  bool takes_responses = false;  // the completer has something outstanding (RTS, SQD)
  bool sends = false;            // the requester runs (RTS; SQD finishes started WQEs)
  bool accepts_sends = false;    // post_send takes work (RTS, SQD; SQE/ERR flush it)
};

constexpr StateCaps state_caps(ibv_qp_state s) noexcept {
  switch (s) {
    case IBV_QPS_RTR: return {true, false, false, false};
    case IBV_QPS_RTS: return {true, true, true, true};
    case IBV_QPS_SQD: return {true, true, true, true};
    case IBV_QPS_SQE: return {true, false, false, true};
    case IBV_QPS_ERR: return {false, false, false, true};
    case IBV_QPS_RESET:
    case IBV_QPS_INIT:
    case IBV_QPS_UNKNOWN:
      break;
  }
  return {};
}

// "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" (trace lines).
constexpr const char* qp_state_name(ibv_qp_state s) noexcept {
  switch (s) {
    case IBV_QPS_RESET: return "RESET";
    case IBV_QPS_INIT: return "INIT";
    case IBV_QPS_RTR: return "RTR";
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_SQD: return "SQD";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_ERR: return "ERR";
    case IBV_QPS_UNKNOWN: break;
  }
  return "UNKNOWN";
}

// ---- the QP ------------------------------------------------------------------------
class Qp {
 public:
  // The capabilities a QP made with `init` has (what query reports): with
  // an SRQ no receive queue of its own; inline room at least what the send
  // SGEs would occupy.
  static ibv_qp_cap effective_caps(const ibv_qp_init_attr& init) noexcept;
  // Its ring memory (ring_memory.hpp), allocated by the caller for
  // effective_caps(init): SendQueue::bytes, RecvQueue::bytes.
  struct Rings {
    RingBlock send, recv;
  };
  // XRC (annex A14): an XRC send QP (IBV_QPT_XRC_SEND) has a PD and a
  // send CQ and no receive side; an XRC receive QP (IBV_QPT_XRC_RECV) has
  // only its domain `xrcd`: no PD, no CQ, no queue of its own.
  Qp(Rnic& rnic, Pd* pd, Qpn qpn, const ibv_qp_init_attr& init, Rings&& rings, Xrcd* xrcd = nullptr);
  ~Qp();
  Qp(const Qp&) = delete;
  Qp& operator=(const Qp&) = delete;

  // ---- verbs (application threads) ----
  // 0, or EINVAL (EPERM: a controlled Q_Key without CAP_NET_RAW) leaving
  // the QP unchanged.
  int modify(const ibv_qp_attr& attr, int mask);
  int query(ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) const;
  // FLUSH (verbs_newer::kWrFlush; ibv_send_wr has no fields of its own for
  // it) comes as the drop-in's ibv_wr_flush builds it: wr.atomic.remote_addr
  // and .rkey name the range, .compare_add is its length, .swap the
  // placement type (bits 7-0) and the selectivity level (bits 15-8).
  int post_send(const ibv_send_wr* wr, const ibv_send_wr** bad);
  int post_recv(const ibv_recv_wr* wr, const ibv_recv_wr** bad);

  // ---- identity and configuration (read by the engine; written by modify under run_sync)
  Rnic& rnic() const noexcept { return rnic_; }
  // The engine whose loop runs this QP's data path: its lcore's
  // (Rnic::lcore_of; the device's own engine with one lcore).  Fixed at
  // creation.
  transport::Engine& engine() const noexcept { return *engine_; }
  Pd* pd() const noexcept { return pd_; }  // nullptr: an XRC receive QP
  Qpn qpn() const noexcept { return qpn_; }
  ibv_qp_type type() const noexcept { return type_; }
  bool is_gsi() const noexcept { return qpn_ == kQp1; }
  // The reliable connected service: RC, and XRC (annex A14: XRC is RC's
  // transport with the receive side in a domain's SRQs).
  bool reliable() const noexcept {
    return type_ == IBV_QPT_RC || type_ == IBV_QPT_XRC_SEND || type_ == IBV_QPT_XRC_RECV;
  }
  bool connected() const noexcept { return reliable() || type_ == IBV_QPT_UC; }
  Xrcd* xrcd() const noexcept { return xrcd_; }  // XRC receive QP: its domain
  // ibv_open_qp(3): the handles on an XRC receive QP (its creator's
  // included); destroy_qp removes one, and the QP goes with the last.
  uint32_t handles = 1;  // control path, under run_sync
  Cq* send_cq() const noexcept { return send_cq_; }  // nullptr: an XRC receive QP
  Cq* recv_cq() const noexcept { return recv_cq_; }  // nullptr: XRC (an XRC SRQ has its own)
  Srq* srq() const noexcept { return srq_; }
  bool sq_sig_all() const noexcept { return sq_sig_all_; }
  void* context = nullptr;  // ibv_qp's qp_context, for async events
  // IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: the QP does not receive the
  // multicast messages it sent itself (Rnic::mcast_rx).  Set at creation,
  // before the QP can be attached to a group.
  bool block_self_mcast_lb = false;

  ibv_qp_state state() const noexcept { return state_.load(std::memory_order_acquire); }

  // The attributes as last set by modify (ibv_qp_attr fields).
  struct Attrs {
    uint32_t qkey = 0;
    uint32_t rq_psn = 0, sq_psn = 0;
    uint32_t dest_qp_num = 0;
    int qp_access_flags = 0;
    ibv_mtu path_mtu = IBV_MTU_1024;
    uint32_t pmtu_bytes = 1024;
    uint16_t pkey_index = 0;
    uint8_t max_rd_atomic = 0;       // requester: outstanding READ/atomics
    uint8_t max_dest_rd_atomic = 0;  // responder: its result cache
    uint8_t min_rnr_timer = 0;       // the RNR NAK's timer code (IBA table 45)
    uint8_t timeout = 0;             // local ACK timeout: 4.096 us * 2^timeout (0: infinite)
    uint8_t retry_cnt = 0;
    uint8_t rnr_retry = 0;           // 7: infinite
    uint8_t sq_draining = 0;         // SQD: started WQEs still outstanding (query)
    bool sqd_notify = false;         // en_sqd_async_notify: raise SQ_DRAINED once drained
    ibv_mig_state path_mig_state = IBV_MIG_MIGRATED;
    AhAttr path{};                   // RC/UC primary path
    uint16_t sport = 0xC000;         // UDP source port (0xC000-0xFFFF)
  };
  const Attrs& attrs() const noexcept { return attrs_; }
  // [engine] A path change (cc.cpp, repath): another UDP source port.
  void set_sport(uint16_t sport) noexcept { attrs_.sport = sport; }

  // Capacities as created (ibv_qp_cap; the post_* limits).
  const ibv_qp_cap& cap() const noexcept { return cap_; }

  SendQueue sq;
  RecvQueue rq;     // unused with an SRQ

  // ---- engine-side role state (engine only) ----
  ReqState req;
  CompState comp;
  RespState resp;
  QpCc cc;          // congestion control: ECN's answer and this QP's rate (cc.hpp)
  // Loss recovery, per QP since its creation (the device's counters sum
  // them): for `uroce qp` and the daemon's views.
  struct Tally {
    uint64_t retrans_pkts = 0;     // request packets sent again by go-back-N
    uint64_t sr_resent_pkts = 0;   // ... because a selective NAK named them
    uint64_t ack_timeouts = 0;     // local ACK timer expiries
    uint64_t sr_naks_rcvd = 0;     // selective NAKs the requester took
    uint64_t sr_naks_sent = 0;     // selective NAKs the responder sent
  } tally;

  // ---- [engine] ----
  // Move to ERR (async IBV_EVENT_QP_FATAL when `fatal`) and flush: every
  // outstanding send WQE and every posted receive completes with
  // WR_FLUSH_ERR, in order, on its CQ; later posts complete likewise.
  void to_error(bool fatal) noexcept;
  // SQ error (IBA 10.3.1.6): RC/UC/UD send side failed; SQE for UD/UC,
  // ERR for RC.
  void send_error() noexcept;
  // SQD: raise SQ_DRAINED once nothing started is outstanding (after the
  // completer retired WQEs).
  void check_drained() noexcept;
  // The next receive WQE (QP's RQ or its SRQ); nullptr when none (RNR).
  RecvWqe* recv_front() noexcept;
  void recv_pop() noexcept;
  // [engine] The doorbell (Rnic::ring_sq): run the requester, or flush
  // what was posted to a QP in ERR/SQE.
  void doorbell(transport::Engine& engine) noexcept;

  // One pending doorbell per QP: set by the poster that queues it, cleared
  // by the engine when it runs (Rnic::ring_sq).
  std::atomic<bool> doorbell_pending{false};
  // [engine] COMM_EST raised for this connection (recv.cpp; cleared at RTR).
  bool comm_est = false;
  // [engine] On a device shared through uroced: the destination this QP
  // claimed (Rnic::SharedDevice::claim), while it holds one.
  struct Claim {
    wire::Ipv6Addr gid{};
    uint32_t qpn = 0;
    friend bool operator==(const Claim&, const Claim&) = default;
  };
  std::optional<Claim> claim;

 private:
  // post_send's two halves (qp.cpp): what checking a WR learned, then the
  // WQE filled from it.
  struct SendWrFacts {
    uint64_t length = 0;       // the message's bytes
    uint32_t feth = 0;         // FLUSH: its FETH word
    Ah* ah = nullptr;          // UD/GSI: the WR's address handle
    ibv_wc_status post_error = IBV_WC_SUCCESS;  // accepted, but completes with this (SendWqe::post_error)
    const char* why = nullptr; // a refusal's reason (trace)
  };
  int check_send_wr(const ibv_send_wr& wr, const WrInfo& op, SendWrFacts& out) const;
  void fill_send_wqe(SendWqe& w, const ibv_send_wr& wr, const WrInfo& op, const SendWrFacts& f) const;
  int check_modify(const ibv_qp_attr& attr, int mask) const;
  void query_engine(ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) const;  // [engine]
  void apply_modify(const ibv_qp_attr& attr, int mask);  // [engine]
  void flush_recv() noexcept;
  friend class Rnic;

  Rnic& rnic_;
  transport::Engine* engine_;
  Pd* pd_;
  Xrcd* xrcd_;
  Qpn qpn_;
  ibv_qp_type type_;
  Cq* send_cq_;
  Cq* recv_cq_;
  Srq* srq_;
  bool sq_sig_all_;
  ibv_qp_cap cap_{};
  Attrs attrs_{};
  std::atomic<ibv_qp_state> state_{IBV_QPS_RESET};
};

}  // namespace uroce::rnic
