// The IB communication manager (IBA chapter 12) for one port: connection
// establishment and release over the GSI QP (REQ/MRA/REJ/REP/RTU/DREQ/
// DREP) and service ID resolution (SIDR_REQ/SIDR_REP).
//
// Shape (STYLE 2, like qp.cpp's modify table): every CmId has a `CmState`;
// everything that can happen to it -- a MAD that refers to it, its timer, a
// consumer call -- is a `CmInput`, and `Cm::step` is the driver: it calls
// the handler the [state][input] table names (kTransitions), which returns
// the next state.  Cells with nothing to do refuse a consumer call
// (EINVAL) or drop the input.  Messages that create ids (REQ, SIDR_REQ)
// are matched to listeners first.
//
// Consumers (the rdma_cm layer) see `CmEvent`s through one callback.
// Events are queued and delivered after the state change that produced
// them, so a callback may call back into the CM (accept, send_rtu,
// disconnect, destroy_id ...).
//
// Thread: one thread drives a Cm (the engine's, or the caller's in inline
// progress mode): on_mad, the timer wheel and the consumer calls.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cm/mad_port.hpp"
#include "cm/msg.hpp"
#include "lib/util/counters.hpp"
#include "lib/util/timer_wheel.hpp"
#include "lib/wire/types.hpp"

namespace uroce::cm {

// IBA 12.9.6 (figure 140/141 state diagrams), the names Linux uses.
#define UROCE_CM_STATES(X) \
  X(Idle)                  \
  X(Listen)                \
  X(ReqSent)               \
  X(ReqRcvd)               \
  X(MraReqSent)            \
  X(MraReqRcvd)            \
  X(RepSent)               \
  X(RepRcvd)               \
  X(MraRepSent)            \
  X(MraRepRcvd)            \
  X(Established)           \
  X(DreqSent)              \
  X(DreqRcvd)              \
  X(TimeWait)              \
  X(SidrReqSent)           \
  X(SidrReqRcvd)

enum class CmState : uint8_t {
#define X(n) n,
  UROCE_CM_STATES(X)
#undef X
};
inline constexpr size_t kNumCmStates = 0
#define X(n) +1
    UROCE_CM_STATES(X)
#undef X
    ;
std::string_view cm_state_name(CmState s) noexcept;

// Everything that drives a CmId's state machine.
#define UROCE_CM_INPUTS(X)                                             \
  X(Connect)     /* consumer: send a REQ */                            \
  X(Listen)      /* consumer: listen on a service ID */                \
  X(SidrResolve) /* consumer: send a SIDR_REQ */                       \
  X(Accept)      /* consumer: answer a REQ with a REP */               \
  X(Reject)      /* consumer: answer a REQ or REP with a REJ */        \
  X(SendMra)     /* consumer: MRA a REQ or REP */                      \
  X(SendRtu)     /* consumer: answer a REP with an RTU */              \
  X(CommEst)     /* consumer: data arrived before the RTU (12.9.6) */  \
  X(Disconnect)  /* consumer: DREQ, or DREP to a DREQ */               \
  X(SidrReply)   /* consumer: answer a SIDR_REQ */                     \
  X(Destroy)     /* consumer: the id is being destroyed */             \
  X(Drop)        /* consumer: forget a REQ unanswered (backlog full) */ \
  X(RecvReq)                                                           \
  X(RecvMra)                                                           \
  X(RecvRej)                                                           \
  X(RecvRep)                                                           \
  X(RecvRtu)                                                           \
  X(RecvDreq)                                                          \
  X(RecvDrep)                                                          \
  X(RecvSidrReq)                                                       \
  X(RecvSidrRep)                                                       \
  X(Stale)       /* a new REQ reused this connection's QPN (12.9) */         \
  X(Timeout)

enum class CmInput : uint8_t {
#define X(n) n,
  UROCE_CM_INPUTS(X)
#undef X
};
std::string_view cm_input_name(CmInput i) noexcept;
inline constexpr size_t kNumCmInputs = 0
#define X(n) +1
    UROCE_CM_INPUTS(X)
#undef X
    ;

// What an input is: a consumer call, a message from the wire, or an event
// of the CM's own (a timer, a stale connection found).
enum class CmInputClass : uint8_t { Call, Message, Event };
constexpr CmInputClass input_class(CmInput i) noexcept {
  switch (i) {
    case CmInput::Connect: case CmInput::Listen: case CmInput::SidrResolve: case CmInput::Accept:
    case CmInput::Reject: case CmInput::SendMra: case CmInput::SendRtu: case CmInput::CommEst:
    case CmInput::Disconnect: case CmInput::SidrReply: case CmInput::Destroy: case CmInput::Drop:
      return CmInputClass::Call;
    case CmInput::RecvReq: case CmInput::RecvMra: case CmInput::RecvRej: case CmInput::RecvRep:
    case CmInput::RecvRtu: case CmInput::RecvDreq: case CmInput::RecvDrep: case CmInput::RecvSidrReq:
    case CmInput::RecvSidrRep:
      return CmInputClass::Message;
    case CmInput::Stale: case CmInput::Timeout:
      return CmInputClass::Event;
  }
  return CmInputClass::Event;
}

#define UROCE_CM_EVENTS(X)                                                         \
  X(ReqReceived)      /* passive: a REQ for a listener; new id, listen_id set */   \
  X(MraReceived)      /* the peer needs more time (service_timeout) */             \
  X(RepReceived)      /* active: send_rtu (or reject) next */                      \
  X(Established)      /* RTU sent (active) / RTU or first data (passive) */        \
  X(RejReceived)      /* reason, ARI, private data */                              \
  X(DreqReceived)     /* the peer disconnects; call disconnect() to answer */      \
  X(DrepReceived)     /* our DREQ was answered; timewait follows */                \
  X(TimewaitExit)                                                                  \
  X(ReqTimeout)       /* active: no REP after the retries; REJ(timeout) sent */    \
  X(RepTimeout)       /* passive: no RTU after the retries; REJ(timeout) sent */   \
  X(DreqTimeout)      /* no DREP after the retries; timewait follows */            \
  X(SidrReqReceived)  /* passive: new id, listen_id set; call sidr_reply() */      \
  X(SidrRepReceived)  /* status, qpn, qkey, private data */                        \
  X(SidrTimeout)

enum class CmEventType : uint8_t {
#define X(n) n,
  UROCE_CM_EVENTS(X)
#undef X
};
std::string_view cm_event_name(CmEventType e) noexcept;

#define UROCE_CM_COUNTERS(X)                                                       \
  X(rx_mads, "CM MADs received")                                                   \
  X(tx_mads, "CM MADs sent (retransmissions included)")                            \
  X(tx_errors, "MADs the port refused to send")                                    \
  X(rx_short, "dropped: MAD shorter than 256 bytes")                               \
  X(rx_bad_base_version, "dropped: MAD base version other than 1")                 \
  X(rx_not_cm, "dropped: management class other than CM (0x07)")                  \
  X(rx_bad_class_version, "dropped: CM class version other than 2")                \
  X(rx_bad_method, "dropped: MAD method other than Send")                          \
  X(rx_unsupported_attr, "dropped: CM attribute not handled (ClassPortInfo, ...)")  \
  X(rx_lap_dropped, "dropped: LAP (no alternate path on RoCE, as Linux's ib_cm)")  \
  X(rx_apr_dropped, "dropped: APR (no alternate path on RoCE, as Linux's ib_cm)")  \
  X(rx_unknown_id, "dropped: no connection with that communication ID")            \
  X(req_dropped, "REQs forgotten unanswered (listen backlog full; the peer retries)") \
  X(rx_unexpected, "dropped: message not expected in the connection's state")      \
  X(rx_bad_qpn, "dropped: DREQ naming another QPN")                                \
  X(rx_dup_req, "duplicate REQs")                                                  \
  X(rx_dup_rep, "duplicate REPs")                                                  \
  X(rx_dup_dreq, "duplicate DREQs")                                                \
  X(retransmits, "REQ/REP/DREQ/SIDR_REQ retransmissions")                          \
  X(timeouts, "transactions that exhausted their retries")                         \
  X(rej_no_listener, "REJ sent: invalid service ID")                               \
  X(req_before_listen, "REQs/SIDR_REQs for no listener in the start-up grace, forgotten (the peer retries)") \
  X(rej_transport, "REJ sent: unsupported transport service type")                 \
  X(rej_stale, "REJ sent: stale connection")                                       \
  X(rej_stale_rep, "REJ sent to a REP: stale connection (its ID or QPN in use)")    \
  X(drep_unknown, "DREP sent for a DREQ of a connection that ended lately, to its peer") \
  X(rx_dreq_unknown, "dropped: DREQ for no connection we had with its sender (unanswered)") \
  X(rx_wrong_source, "dropped: message for a connection from an address other than its peer's") \
  X(req_flood_dropped, "REQs/SIDR_REQs forgotten: too many requests waiting for an answer")  \
  X(timewait_evicted, "connections taken out of TimeWait early (TimeWait table full)")       \
  X(sidr_no_listener, "SIDR_REP sent: service ID not supported")

UROCE_COUNTER_ENUM(CmCtr, UROCE_CM_COUNTERS)
using CmCounters = CounterSet<CmCtr, kCmCtrInfo>;

// Defaults are those of Linux's rdma_cm (cma.c): CM response timeout 20
// (4.3 s), 15 CM retries, RoCE packet lifetime 16 (268 ms).
inline constexpr uint8_t kDefaultCmResponseTimeout = 20;
inline constexpr uint8_t kDefaultMaxCmRetries = 15;
inline constexpr uint8_t kDefaultPacketLifetime = 16;

struct CmConfig {
  uint64_t ca_guid = 0;          // this port's CA (node) GUID
  uint64_t seed = 0;             // communication IDs and TIDs; 0: random_device
  // Added twice to every response timeout (the path's packet lifetime,
  // IBA 12.9); Linux uses 4.096 us * 2^16 on RoCE.
  uint64_t packet_life_ns = cm_timeout_ns(kDefaultPacketLifetime);
  // TimeWait length; 0: the local ACK timeout of the connection plus twice
  // the packet lifetime (IBA 12.9, TimeWait: stale packets die first).
  uint64_t timewait_ns = 0;
  // Bounds on what a remote sender can make us keep (each past its bound
  // is counted): passive connections and SIDR requests not yet answered
  // (a REQ past it is forgotten unanswered, so a real peer's retry is taken
  // later, as for a full listen backlog); connections in TimeWait (past it
  // the oldest leaves early); and the ended connections remembered so that
  // a late DREQ from their peer still gets its DREP.
  uint32_t max_pending_requests = 4096;
  uint32_t max_timewait = 8192;
  uint32_t ended_memory = 4096;
  // For this long after the CM starts, a REQ or SIDR_REQ for a service
  // nobody listens on is forgotten unanswered (the peer retries) instead
  // of rejected: the program that brought the device up is still on its
  // way to rdma_listen (the device starts inside it, ~0.6 s of EAL start;
  // a kernel device is up long before).  0: reject at once, as ib_cm.
  uint64_t no_listener_grace_ns = 0;
};

// The path of a connection (what rdma_resolve_route produces).
struct CmPath {
  std::array<uint8_t, 16> local_gid{};
  std::array<uint8_t, 16> remote_gid{};
  uint16_t local_lid = 0xFFFF;   // RoCE: Linux sends the permissive LID
  uint16_t remote_lid = 0xFFFF;
  uint16_t pkey = 0xFFFF;
  uint8_t mtu = IBV_MTU_1024;    // enum ibv_mtu
  uint32_t flow_label = 0;
  uint8_t traffic_class = 0;
  uint8_t hop_limit = 64;
  uint8_t sl = 0;
  uint8_t packet_rate = 0;
  uint8_t local_ack_timeout = 19; // 4.096 us * 2^19 = 2.1 s (Linux RoCE)
};

struct ConnectParams {
  MadAddr dest;                  // the peer's GSI QP
  uint64_t service_id = 0;
  CmPath path;
  CmTransport transport = CmTransport::RC;
  Qpn qpn;
  Psn starting_psn;
  uint32_t qkey = 0;             // UD only; 0 for RC/UC
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t remote_cm_response_timeout = kDefaultCmResponseTimeout;
  uint8_t local_cm_response_timeout = kDefaultCmResponseTimeout;
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  uint8_t max_cm_retries = kDefaultMaxCmRetries;
  bool srq = false;
  bool flow_control = false;
  std::span<const uint8_t> private_data;  // <= 92 bytes (rdma_cm: header + 56)
};

struct AcceptParams {
  Qpn qpn;
  Psn starting_psn;
  uint32_t qkey = 0;
  uint8_t responder_resources = 0;
  uint8_t initiator_depth = 0;
  uint8_t target_ack_delay = 0;
  uint8_t rnr_retry_count = 7;   // what the active side's QP uses (table 110)
  bool srq = false;
  bool flow_control = false;
  std::span<const uint8_t> private_data;  // <= 196 bytes
};

struct SidrParams {
  MadAddr dest;
  uint64_t service_id = 0;
  uint16_t pkey = 0xFFFF;
  uint8_t timeout = kDefaultCmResponseTimeout;  // 4.096 us * 2^timeout per try
  uint8_t max_retries = kDefaultMaxCmRetries;
  std::span<const uint8_t> private_data;  // <= 216 bytes (rdma_cm: header + 180)
};

struct SidrReplyParams {
  SidrStatus status = SidrStatus::Success;
  Qpn qpn;
  uint32_t qkey = 0;
  std::span<const uint8_t> additional_info;  // <= 72 bytes
  std::span<const uint8_t> private_data;     // <= 136 bytes
};

struct CmId;

struct CmEvent {
  CmEventType type{};
  CmId* id = nullptr;
  CmId* listen_id = nullptr;             // ReqReceived, SidrReqReceived
  const ReqMsg* req = nullptr;           // ReqReceived: the REQ (valid while the id lives)
  const RepMsg* rep = nullptr;           // RepReceived
  uint16_t reason = 0;                   // RejReceived (RejReason)
  uint8_t message_rejected = 0;          // RejReceived (CmMsgRef)
  uint8_t service_timeout = 0;           // MraReceived
  SidrStatus sidr_status = SidrStatus::Success;
  Qpn sidr_qpn;                          // SidrRepReceived
  uint32_t sidr_qkey = 0;
  uint64_t service_id = 0;               // ReqReceived, SidrReqReceived, SidrRepReceived
  std::array<uint8_t, 72> ari{};         // RejReceived ARI, SidrRepReceived additional info
  uint8_t ari_len = 0;
  std::array<uint8_t, 224> pdata{};      // private data as received (its full field)
  uint8_t pdata_len = 0;

  std::span<const uint8_t> private_data() const noexcept { return {pdata.data(), pdata_len}; }
};

using CmEventHandler = std::function<void(const CmEvent&)>;

// One connection, listen or SIDR endpoint.  Owned by its Cm; valid from
// create_id() until destroy_id() (a destroyed id may linger inside the CM,
// e.g. in TimeWait, but delivers no more events).
struct CmId {
  void* context = nullptr;
  CmState state = CmState::Idle;
  bool active = false;        // sent the REQ / SIDR_REQ
  bool destroyed = false;

  uint32_t local_id = 0;      // our communication ID (random, unique, non-zero)
  uint32_t remote_id = 0;
  uint64_t remote_ca_guid = 0;
  uint64_t service_id = 0;
  uint64_t service_mask = ~uint64_t{0};  // Listen
  MadAddr peer;
  CmTransport transport = CmTransport::RC;
  Qpn local_qpn;
  Qpn remote_qpn;

  ReqMsg req;                 // as sent (active) or received (passive)
  RepMsg rep;                 // as received (active) or sent (passive)
  uint8_t responder_resources = 0;  // negotiated, for init_qp_attr
  uint8_t initiator_depth = 0;

  // Transactions: the TID of the current exchange and the last message
  // we sent, kept for retransmission and for answering duplicates.
  uint64_t tid = 0;
  MadBuf last_sent{};
  bool has_last_sent = false;
  MadBuf mra_sent{};
  bool has_mra_sent = false;
  uint8_t retries = 0;        // retransmissions done in this transaction
  uint8_t max_retries = 0;
  uint64_t timeout_ns = 0;    // response timeout of this connection
  Timer timer;

 private:
  friend class Cm;
  class Cm* cm_ = nullptr;
  bool indexed_remote_ = false;
};

class Cm {
 public:
  using Clock = std::function<uint64_t()>;

  Cm(MadPort& port, TimerWheel& wheel, Clock clock, CmConfig config, CmEventHandler handler);
  ~Cm();
  Cm(const Cm&) = delete;
  Cm& operator=(const Cm&) = delete;

  // [engine] Events wait while held (nested holds count): the consumer is
  // in the middle of work of its own (an entry of the rdma_cm model) and
  // takes the events its calls raised when that work is done, at the last
  // release.  Destroyed ids are kept until their events are delivered.
  void hold_events() noexcept { ++held_; }
  void release_events() {
    if (--held_ == 0) deliver();
  }

  // ---- consumer calls: 0 or -errno (EINVAL: wrong state or argument,
  // EADDRINUSE: service ID already listened on, ENOMEM: no free ID).
  CmId* create_id(void* context = nullptr);
  void destroy_id(CmId* id);
  // Forget a REQ the consumer cannot take (a full listen backlog) without
  // answering it, and destroy the id: the active side's retransmitted REQ
  // then arrives as a new one.  Linux's ib_cm does this when the rdma_cm
  // consumer refuses a REQ with ENOMEM ("do not reject, allow future
  // retries").  Only in REQ received; elsewhere it is destroy_id().
  void drop_request(CmId* id);
  int listen(CmId* id, uint64_t service_id, uint64_t service_mask = ~uint64_t{0});
  int connect(CmId* id, const ConnectParams& p);
  int accept(CmId* id, const AcceptParams& p);
  int reject(CmId* id, RejReason reason, std::span<const uint8_t> private_data = {},
             std::span<const uint8_t> ari = {});
  int send_mra(CmId* id, uint8_t service_timeout, std::span<const uint8_t> private_data = {});
  int send_rtu(CmId* id, std::span<const uint8_t> private_data = {});
  int established(CmId* id);  // ib_cm_notify(IB_EVENT_COMM_EST)
  int disconnect(CmId* id, std::span<const uint8_t> private_data = {});
  int sidr_resolve(CmId* id, const SidrParams& p);
  int sidr_reply(CmId* id, const SidrReplyParams& p);

  // The QP attributes for moving the connection's QP to INIT, RTR or RTS
  // (ib_cm_init_qp_attr): QPN, PSNs, path, rd/atomic depths, retry
  // counts, timeouts.  `mask` gets the ibv_qp_attr_mask bits set.
  int init_qp_attr(const CmId* id, ibv_qp_state state, ibv_qp_attr& attr, int& mask) const;

  // Takes over a connection another CM ran and can no longer end (uroced:
  // a client process that went away, DESIGN.md "The shared device"): an
  // Established id with these communication IDs, peer and QPNs, whose
  // destroy_id() then ends it as the IBA says (DREQ and its retries, the
  // DREP, TimeWait).  nullptr when `local_id` is 0 or live here.
  struct Adopted {
    uint32_t local_id = 0;
    uint32_t remote_id = 0;
    uint64_t remote_ca_guid = 0;
    MadAddr peer;
    Qpn local_qpn;
    Qpn remote_qpn;
  };
  CmId* adopt_established(const Adopted& a);

  // ---- from the wire: one received MAD (a GSI UD SEND's payload).
  void on_mad(const MadAddr& from, std::span<const uint8_t> mad);

  const CmCounters& counters() const noexcept { return ctr_; }
  const CmConfig& config() const noexcept { return cfg_; }
  size_t id_count() const noexcept { return ids_.size(); }
  // Connections indexed by their peer (CA GUID + comm ID, CA GUID + QPN):
  // 0 once every connection has ended (a leak check for tests).
  size_t remote_index_size() const noexcept { return by_remote_id_.size() + by_remote_qpn_.size(); }
  // What the bounds of CmConfig limit (tests, `uroce stats`).
  // (Any thread: gauges, relaxed.)
  size_t pending_requests() const noexcept { return pending_.load(std::memory_order_relaxed); }
  size_t timewait_count() const noexcept { return timewait_gauge_.load(std::memory_order_relaxed); }
  size_t ended_count() const noexcept { return ended_.size(); }  // the CM's thread
  CmId* find(uint32_t local_id) const noexcept;
  size_t count_in(CmState s) const noexcept;  // ids in that state

 private:
  struct Input;

  // The driver and the [state][input] table of handlers (cm.cpp).
  using Handler = CmState (Cm::*)(CmId&, Input&);
  using Transitions = std::array<std::array<Handler, kNumCmInputs>, kNumCmStates>;
  static constexpr Transitions make_transitions();
  static const Transitions kTransitions;
  void step(CmId& id, Input& in);
  int consumer_call(CmId* id, Input& in);

  // The cells that do something (cm.cpp, "the transitions").
  CmState stay(CmId& id, Input& in);
  CmState to_idle(CmId& id, Input& in);
  CmState established_h(CmId& id, Input& in);
  CmState idle_listen(CmId& id, Input& in);
  CmState idle_sidr_resolve(CmId& id, Input& in);
  CmState idle_sidr_req(CmId& id, Input& in);
  CmState idle_dreq(CmId& id, Input& in);
  CmState listen_destroy(CmId& id, Input& in);
  CmState req_sent_mra(CmId& id, Input& in);
  CmState req_timeout(CmId& id, Input& in);
  CmState req_sent_destroy(CmId& id, Input& in);
  CmState reject_req(CmId& id, Input& in);
  CmState reject_rep(CmId& id, Input& in);
  CmState mra_req(CmId& id, Input& in);
  CmState mra_rep(CmId& id, Input& in);
  CmState dup_req_count(CmId& id, Input& in);
  CmState dup_req_mra(CmId& id, Input& in);
  CmState dup_req_resend(CmId& id, Input& in);
  CmState drop_req(CmId& id, Input& in);
  CmState rep_sent_mra(CmId& id, Input& in);
  CmState rep_timeout(CmId& id, Input& in);
  CmState send_rtu_h(CmId& id, Input& in);
  CmState dup_rep_count(CmId& id, Input& in);
  CmState dup_rep_mra(CmId& id, Input& in);
  CmState established_dup_rep(CmId& id, Input& in);
  CmState established_rej(CmId& id, Input& in);
  CmState dreq_sent_drep(CmId& id, Input& in);
  CmState dreq_sent_dreq(CmId& id, Input& in);
  CmState dreq_timeout(CmId& id, Input& in);
  CmState dreq_rcvd_destroy(CmId& id, Input& in);
  CmState dup_dreq_count(CmId& id, Input& in);
  CmState timewait_exit(CmId& id, Input& in);
  CmState timewait_dreq(CmId& id, Input& in);
  CmState timewait_req(CmId& id, Input& in);
  CmState sidr_rep(CmId& id, Input& in);
  CmState sidr_timeout(CmId& id, Input& in);
  CmState sidr_reply_h(CmId& id, Input& in);

  // Shared pieces of handlers.
  CmState ignore(CmId& id, Input& in);
  CmState bad_call(CmId& id, Input& in);
  CmState do_connect(CmId& id, Input& in);
  CmState do_accept(CmId& id, Input& in);
  CmState do_reject(CmId& id, Input& in, CmMsgRef what);
  CmState do_send_mra(CmId& id, Input& in, CmMsgRef what, CmState next);
  CmState do_send_dreq(CmId& id, Input& in);
  CmState do_send_drep(CmId& id, Input& in);
  CmState rx_req_new(CmId& id, Input& in);
  CmState rx_rep(CmId& id, Input& in);
  CmState rx_rej(CmId& id, Input& in);
  CmState rx_mra(CmId& id, Input& in, CmMsgRef expect, CmState next);
  CmState rx_dreq(CmId& id, Input& in);
  CmState enter_established(CmId& id);
  CmState enter_timewait(CmId& id);
  CmState retransmit_or(CmId& id, CmState resend_state, CmEventType give_up);
  CmState destroy_connected(CmId& id, Input& in);

  // Receive path.
  void rx_req(const MadAddr& from, const uint8_t* mad);
  void rx_sidr_req(const MadAddr& from, const uint8_t* mad);
  void rx_to_id(const MadAddr& from, const uint8_t* mad, CmInput kind, uint32_t local_id);
  void rx_rej_lookup(const MadAddr& from, const uint8_t* mad);
  void rx_dreq_unknown(const MadAddr& from, const uint8_t* mad);
  // Whether `from` may speak for `id` (the connection's peer); counts when not.
  bool from_peer(const CmId& id, const MadAddr& from);
  // The bounds of CmConfig.
  bool pending_full();
  void note_state(CmId& id, CmState prev);
  void remember_ended(const CmId& id);

  // Sending.
  void send_mad(const MadAddr& to, const MadBuf& mad);
  void send_stored(CmId& id);  // last_sent
  template <class M>
  void send_new(CmId& id, const M& m, uint64_t tid, bool keep);
  void send_rej_stateless(const MadAddr& to, uint64_t tid, uint32_t remote_id, RejReason r,
                          CmMsgRef what);
  void arm(CmId& id, uint64_t after_ns);
  void disarm(CmId& id);
  static void on_timer(Timer& t, uint64_t now_ns);

  // Ids and indexes.
  uint32_t new_comm_id();
  uint64_t new_tid();
  CmId* listener_for(uint64_t service_id) const noexcept;
  void index_remote(CmId& id);
  void unindex_remote(CmId& id);
  CmId* by_remote(uint64_t guid, uint32_t remote_id) const noexcept;
  CmId* by_remote_qpn(uint64_t guid, Qpn qpn) const noexcept;

  // Events.
  CmEvent& post(CmId& id, CmEventType t);
  void deliver();
  void reap();

  MadPort& port_;
  TimerWheel& wheel_;
  Clock clock_;
  CmConfig cfg_;
  CmEventHandler handler_;
  CmCounters ctr_;
  std::mt19937_64 rng_;
  uint32_t tid_low_ = 0;
  uint64_t started_ns_ = 0;  // the clock when constructed (no_listener_grace_ns)
  bool in_listen_grace() const { return clock_() - started_ns_ < cfg_.no_listener_grace_ns; }

  std::unordered_map<uint32_t, std::unique_ptr<CmId>> ids_;
  std::vector<CmId*> listeners_;
  std::map<std::pair<uint64_t, uint32_t>, CmId*> by_remote_id_;   // (CA GUID, remote comm ID)
  std::map<std::pair<uint64_t, uint32_t>, CmId*> by_remote_qpn_;  // (CA GUID, remote QPN)
  std::map<std::pair<std::array<uint8_t, 16>, uint32_t>, CmId*> sidr_in_;  // (peer GID, request ID)
  std::deque<CmEvent> events_;
  bool delivering_ = false;
  unsigned held_ = 0;  // hold_events

  // Passive ids not yet answered (ReqRcvd, MraReqSent, SidrReqRcvd).
  // Written by the CM's thread only (relaxed), read by telemetry.
  std::atomic<size_t> pending_{0};
  // Ids in TimeWait, oldest first; its size mirrored for readers.
  std::deque<CmId*> timewait_;
  std::atomic<size_t> timewait_gauge_{0};
  // Connections that ended: (our comm ID) -> (their comm ID, their GID),
  // oldest first in ended_order_.
  struct Ended {
    uint32_t remote_id = 0;
    std::array<uint8_t, 16> gid{};
  };
  std::unordered_map<uint32_t, Ended> ended_;
  std::deque<uint32_t> ended_order_;
};

}  // namespace uroce::cm
