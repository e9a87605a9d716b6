// The rdma_cm model: librdmacm's behaviour (the rdma_cm(7) man pages) over
// each device's IB CM (device_cm.hpp: the CM on the GSI QP), as Linux's
// rdma_cm does it over RoCEv2, so that kernel peers and uroce peers connect
// to each other.
//
//   ids          RdmaId: one per rdma_cm_id; port spaces TCP, UDP, IB; bound
//                to an address and port (port 0 picks one), to a device once
//                an address says which
//   addresses    the device by subnet from its configured addresses; the
//                neighbour through the engine's ARP/ND (ADDR_RESOLVED, or
//                ADDR_ERROR when it does not answer in time)
//   route        the path from the two GIDs (ROUTE_RESOLVED at once)
//   connections  REQ/REP/RTU/DREQ/DREP with the rdma_cm service ID and
//                private-data header; the attached QP moved INIT -> RTR ->
//                RTS from the CM's attributes; UD ids through SIDR
//   multicast    rdma_join_multicast on UD ids as Linux does it for RoCEv2
//                (cma_iboe_join_multicast): the MGID from the group address,
//                Q_Key RDMA_UDP_QKEY, the id's QP attached, MULTICAST_JOIN
//                (or MULTICAST_ERROR) at once; no IGMP, no SA
//   events       per channel: a queue and an eventfd the application polls
//                (blocking, or EAGAIN when it set O_NONBLOCK).  Never
//                raised, because the model cannot have their cause:
//                RDMA_CM_EVENT_ADDR_CHANGE (Linux: a netdev event moves a
//                bound address) — a device's addresses are its
//                configuration, fixed when its engine starts, and nothing
//                changes them while it runs; RDMA_CM_EVENT_DEVICE_REMOVAL
//                (Linux: the ib_device unregisters under live ids) — the
//                drop-in starts every device once and keeps it, and the
//                model, until the process exits (rdmacm_core.cpp), and
//                ~RdmaCm runs only when no id can receive an event
//
// The drop-in librdmacm.so.1 (verbs-shim/rdmacm.cpp) is this class's C ABI;
// it runs inside libibverbs.so.1 next to the engines and the library reaches
// it through its vtable: every public member function is virtual for that
// reason (control path only; nothing here is per packet).
//
// Threads.  Application threads call the public functions.  Each device's
// CM runs in its engine's loop (the MADs, its timers, QP 1's completions);
// calls reach it through Engine::run_sync.  One mutex (`mu_`) guards the
// model's tables, taken once per entry: a consumer call's caller part, or
// from_engine in a device's loop (a consumer call's engine part, through
// on_engine or with_id, or the engine's own work: a CM event, a neighbour
// result, COMM_EST, a timer); it is never held across run_sync, so an
// engine thread may take it.  What a device's engine raises for the model
// inside an entry (the CM reports some events inside the call that causes
// them) is handled when that entry's work is done, in the same entry:
// nothing enters the model twice.  An id's state changes only through
// step() (rdma_cm_state.cpp's table).
#pragma once

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_cma.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "cm/cm.hpp"
#include "cm/cma_hdr.hpp"
#include "cm/device_cm.hpp"
#include "cm/gsi_port.hpp"
#include "transport/event_queue.hpp"
#include "transport/neigh.hpp"
#include "transport/rnic/rnic.hpp"

namespace uroce::cm {

class RdmaCm;

// What a device's engine raises for the rdma_cm model besides CM events:
// a neighbour's resolution (rdma_resolve_addr) and first data on a passive
// QP before the RTU (COMM_EST, IBA 12.9.6; the QP by address, compared,
// never followed).
struct Resolved {
  transport::IpAddr ip;
  bool ok = false;
};
struct CommEst {
  const rnic::Qp* qp = nullptr;
};
using EngineInput = std::variant<Resolved, CommEst>;
struct RdmaDev;

// One address of a device, with its prefix (which subnet it reaches).
struct RdmaCmAddr {
  transport::IpAddr ip;
  uint8_t prefix_len = 0;  // of the 32 bits of IPv4, of the 128 of IPv6
};

// A device as the model needs it.
struct RdmaCmDevice {
  DeviceCm* cm = nullptr;         // the device's IB CM; the model is its consumer (start)
  rnic::Rnic* rnic = nullptr;     // cm's RNIC
  ibv_context* verbs = nullptr;   // what id->verbs shows (the drop-in's context); opaque here
  std::vector<RdmaCmAddr> addresses;
  bool inline_progress = false;   // UROCE_PROGRESS=inline: waits drive the engine
};

struct RdmaCmOptions {
  // CM response timeout (4.096 us * 2^t) and retries on every connection;
  // Linux's rdma_cm: 20 (4.3 s) and 15.
  uint8_t cm_response_timeout = kDefaultCmResponseTimeout;
  uint8_t max_cm_retries = kDefaultMaxCmRetries;
};

// rdma_cm_event with its private data kept inside.
struct RdmaEvent {
  rdma_cm_event_type type = RDMA_CM_EVENT_ADDR_RESOLVED;
  int status = 0;
  struct RdmaId* id = nullptr;
  struct RdmaId* listen_id = nullptr;
  bool ud = false;                    // which of `conn` / `ud_param` applies
  rdma_conn_param conn{};             // private_data: null (point it at pdata)
  rdma_ud_param ud_param{};           // private_data: null (point it at pdata)
  std::array<uint8_t, 256> pdata{};
  uint8_t pdata_len = 0;
};

// An event channel: events queued in order, one eventfd count per event.
// rdma_create_event_channel(3): the events of the ids on it.
struct RdmaChannel {
  transport::EventQueue<RdmaEvent> q;
};

enum class RdmaIdState : uint8_t {
  Idle,           // created
  AddrBound,      // rdma_bind_addr
  AddrQuery,      // rdma_resolve_addr under way
  AddrResolved,
  RouteResolved,  // rdma_resolve_route: RoCE has no SA, so it completes at once
  Connect,        // REQ / SIDR_REQ sent
  Listen,
  ConnectRequest, // passive: CONNECT_REQUEST reported, not yet accepted
  Accepting,      // passive: REP / SIDR_REP sent
  Connected,      // ESTABLISHED
  Disconnected,   // DISCONNECTED reported
  Failed,         // REJECTED / UNREACHABLE / CONNECT_ERROR reported, or rdma_reject
  kCount
};
std::string_view rdma_id_state_name(RdmaIdState s) noexcept;

// What moves an id from state to state (rdma_cm_state.cpp's table):
// the consumer's calls, checked in their caller part and applied when
// their engine part succeeds, and what the CM and the address resolution
// report.  An input the id's state does not allow is refused: a call
// fails EINVAL, an event is ignored (Linux's cma_ib_handler ignores a CM
// event unless the id is connecting or connected).
enum class RdmaIdInput : uint8_t {
  // the consumer's
  Bind,            // rdma_bind_addr, or the implicit bind of listen/resolve_addr
  SetAddrOption,   // RDMA_OPTION_ID_REUSEADDR / AFONLY: before the bind
  ResolveAddr,     // rdma_resolve_addr
  ResolveRoute,    // rdma_resolve_route, ROUTE_RESOLVED reported
  RouteError,      // rdma_resolve_route, ROUTE_ERROR reported
  Listen,          // rdma_listen (again on a listener: its backlog)
  JoinMulticast,   // rdma_join_multicast (UD)
  Connect,         // rdma_connect: REQ sent
  ConnectUd,       // rdma_connect on a UD id: SIDR_REQ sent
  Accept,          // rdma_accept: REP sent
  AcceptUd,        // rdma_accept on a UD id: SIDR_REP sent
  Reject,          // rdma_reject
  Establish,       // rdma_establish: RTU sent after CONNECT_RESPONSE
  Disconnect,      // rdma_disconnect (the state changes with DISCONNECTED)
  // what is reported
  AddrResolved,    // ADDR_RESOLVED
  AddrError,       // ADDR_ERROR
  ConnectRequest,  // CONNECT_REQUEST: a new passive id
  ConnectResponse, // CONNECT_RESPONSE: a REP for an id with no QP
  Established,     // ESTABLISHED (REP with RTU sent, RTU or first data, SIDR_REP)
  Rejected,        // REJECTED
  ConnectError,    // CONNECT_ERROR: our QP could not follow the REP
  Unreachable,     // UNREACHABLE: a timeout, or a SIDR_REP refusing
  Disconnected,    // DISCONNECTED: DREQ, DREP or the DREQ's timeout
  kCount
};
std::string_view rdma_id_input_name(RdmaIdInput in) noexcept;
// Whether an id in state `s` takes `in`.
bool rdma_id_allows(RdmaIdState s, RdmaIdInput in) noexcept;
// The state `in` leads to from `s` (which allows it).
RdmaIdState rdma_id_next(RdmaIdState s, RdmaIdInput in) noexcept;

// One multicast group an id joined (rdma_join_multicast).
struct RdmaMcast {
  transport::IpAddr group;            // the address the application gave
  wire::Ipv6Addr mgid{};              // ::ffff:a.b.c.d or the IPv6 group itself
  void* context = nullptr;            // the JOIN/ERROR event's param.ud.private_data (librdmacm)
  bool send_only = false;             // RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER: the QP is not attached
  bool attached = false;              // the id's QP is attached to mgid
};

// One rdma_cm_id.  Fields the C layer reads directly (it has no other way
// across the library boundary than the vtable) are public; the model
// writes them before it reports the event that makes them valid.
struct RdmaId {
  void* user = nullptr;               // the C layer's rdma_cm_id (null until it sees the id)
  RdmaChannel* channel = nullptr;
  rdma_port_space ps = RDMA_PS_TCP;
  ibv_qp_type qp_type = IBV_QPT_RC;
  RdmaIdState state = RdmaIdState::Idle;
  sockaddr_storage src{};             // our address and port (port in network order)
  sockaddr_storage dst{};
  ibv_context* verbs = nullptr;       // the bound device's, once there is one
  bool route_valid = false;
  CmPath path;                        // valid from ROUTE_RESOLVED (and on passive ids)
  int sgid_index = -1;
  RdmaId* listen_parent = nullptr;    // a passive id: the listener it came from

  // ---- the model's own (under RdmaCm::mu_) ----
  RdmaDev* dev = nullptr;
  rnic::Qp* qp = nullptr;
  uint32_t qpn = 0;                   // qp's number (RdmaCm::qp_to_error: is qp still alive?)
  CmId* cm_id = nullptr;
  bool bound = false;                 // holds (ps, port) in the port table
  uint8_t tos = 0;
  std::optional<uint8_t> ack_timeout;
  bool reuseaddr = false;
  bool afonly = false;
  int backlog = 0;
  int pending_requests = 0;           // listener: CONNECT_REQUESTs queued, not yet retrieved
  uint32_t qkey = RDMA_UDP_QKEY;      // UD ids
  uint32_t rep_psn = 0;               // a passive id: its REP's Starting PSN, chosen with the request
                                      // (init_qp_attr's RTR rq_psn before rdma_accept, as Linux's seq_num)
  uint8_t responder_resources = 0;    // negotiated (conn params)
  uint8_t initiator_depth = 0;
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  bool disconnect_reported = false;
  bool removal_reported = false;      // DEVICE_REMOVAL (device_removed)
  bool destroyed = false;
  uint64_t addr_deadline_ns = 0;
  Timer addr_timer;
  // Accounting for rdma_destroy_id: events handed out vs acknowledged.
  uint32_t events_reported = 0;
  uint32_t events_acked = 0;
  std::vector<RdmaMcast> mcasts;      // groups joined, in join order
};

class RdmaCm {
 public:
  RdmaCm(std::vector<RdmaCmDevice> devices, RdmaCmOptions options = {});
  virtual ~RdmaCm();
  RdmaCm(const RdmaCm&) = delete;
  RdmaCm& operator=(const RdmaCm&) = delete;

  // Becomes the consumer of every device's CM; 0 or an errno (EINVAL: a
  // device without its CM; EBUSY: another consumer has it).
  virtual int start();

  // ---- channels ----
  virtual RdmaChannel* create_channel();               // null and errno
  virtual int destroy_channel(RdmaChannel* ch);        // EBUSY while ids use it
  // The next event (blocking unless the fd is O_NONBLOCK: EAGAIN).  Counts
  // as reported on its id (CONNECT_REQUEST: on the listener).
  virtual int get_event(RdmaChannel* ch, RdmaEvent* out);
  virtual void ack_event(const RdmaEvent& ev);

  // ---- ids (0 or an errno, as the man pages name them) ----
  virtual int create_id(RdmaChannel* ch, void* user, rdma_port_space ps, ibv_qp_type qp_type, RdmaId** out);
  // Blocks until every reported event of the id has been acknowledged.
  virtual int destroy_id(RdmaId* id);
  virtual int migrate_id(RdmaId* id, RdmaChannel* ch);
  virtual int bind_addr(RdmaId* id, const sockaddr* addr);
  virtual int resolve_addr(RdmaId* id, const sockaddr* src, const sockaddr* dst, int timeout_ms);
  virtual int resolve_route(RdmaId* id, int timeout_ms);
  virtual int listen(RdmaId* id, int backlog);
  virtual int connect(RdmaId* id, const rdma_conn_param* param);
  virtual int accept(RdmaId* id, const rdma_conn_param* param);
  virtual int reject(RdmaId* id, const void* pdata, uint8_t len);
  virtual int disconnect(RdmaId* id);
  // The process is exiting: every connection still up is disconnected
  // (DREQ, or the DREP a peer's DREQ waits for), as the kernel does when it
  // destroys a closed process's ids; the caller then drives the loop a
  // little while so the messages leave.  A peer whose DREQ came after we
  // were gone would otherwise retry into silence (rxe's perftest -R).
  void disconnect_all();
  // Connections whose DREQ (ours) waits for its DREP: what exit waits for,
  // a bounded time, so that the peer's programs see DISCONNECTED.
  size_t disconnects_pending();
  virtual int establish(RdmaId* id);                   // rdma_establish: the RTU after CONNECT_RESPONSE
  virtual int notify(RdmaId* id, ibv_event_type ev);   // IBV_EVENT_COMM_EST
  virtual int set_option(RdmaId* id, int level, int name, const void* val, size_t len);
  virtual int init_qp_attr(RdmaId* id, ibv_qp_attr* attr, int* mask);

  // The QP an application created on the id's device (rdma_create_qp):
  // moved to INIT (RC/UC) or to RTS with the id's Q_Key (UD), then used by
  // connect/accept.  detach_qp before the QP is destroyed.
  virtual int attach_qp(RdmaId* id, rnic::Qp* qp);
  virtual void detach_qp(RdmaId* id);

  // The device behind a verbs context (null: none of ours).
  virtual rnic::Rnic* rnic_of(ibv_context* verbs);
  virtual std::vector<ibv_context*> contexts();

  // Drives inline-progress engines once (blocking waits call it).
  virtual void progress();
  // One count from ch's fd; `drive`: this blocking wait is all that
  // would run the inline-progress engines (their backstops do meanwhile).
  int wait_count(RdmaChannel* ch, bool drive);

  // rdma_join_multicast_ex(3) on a UD id (RDMA_PS_UDP / RDMA_PS_IPOIB)
  // bound to a device (ADDR_BOUND or ADDR_RESOLVED): `addr` an IPv4 or
  // IPv6 multicast address of the id's family, `join_flags`
  // RDMA_MC_JOIN_FLAG_*.  The id's QP (unless send-only) is attached, then
  // MULTICAST_JOIN is queued with param.ud (AH to the MGID, QPN 0xFFFFFF,
  // the Q_Key, private_data = context), or MULTICAST_ERROR when the attach
  // fails.  EINVAL for a bad id, state, address or flags.
  virtual int join_multicast(RdmaId* id, const sockaddr* addr, int join_flags, void* context);
  // rdma_leave_multicast(3): detaches the QP; EADDRNOTAVAIL when the id
  // did not join `addr`.  destroy_id leaves every group.
  virtual int leave_multicast(RdmaId* id, const sockaddr* addr);

  // A port space shared with other processes (uroced, issue 15; DESIGN.md
  // "The shared device"): the daemon grants every binding (conflicts across
  // processes, ephemeral ports) and learns which ids listen, so that the
  // requests for them come to this process.  `token` names an id.  Set
  // before any id binds.
  struct PortArbiter {
    std::function<int(uint64_t token, int ps, const transport::IpAddr& ip, uint16_t port, bool reuseaddr,
                      bool afonly, uint16_t* granted)>
        bind;
    std::function<void(uint64_t token)> unbind;
    std::function<int(uint64_t token, bool on)> listen;
  };
  void set_port_arbiter(PortArbiter a);
  // The device of `rnic` went away (the daemon serving it stopped): every
  // id on it gets RDMA_CM_EVENT_DEVICE_REMOVAL, once, as rdma_cm reports a
  // device unplugged.
  void device_removed(const rnic::Rnic* rnic);

  // Counters of one device's CM and GSI port, for tests and tools.
  const CmCounters* cm_counters(size_t dev) const;
  const GsiCounters* gsi_counters(size_t dev) const;

  // What the model's tables hold now, summed over the devices: a leak
  // check for tests and tools (all zero once every id and channel is
  // destroyed and every connection's TimeWait has ended).
  struct Usage {
    size_t ids = 0;          // RdmaIds (active, passive, listening)
    size_t channels = 0;
    size_t bound_ports = 0;  // (port space, port) entries of the port table
    size_t cm_ids = 0;       // the CMs' ids (connections, listens, SIDR)
    size_t cm_peers = 0;     // the CMs' peer indexes (Cm::remote_index_size)
    size_t cm_listens = 0;   // one CM listen per (device, service ID)
    size_t accepting = 0;    // passive ids waiting for the RTU
    size_t resolving = 0;    // ids waiting for a neighbour
  };
  Usage usage();

 private:
  friend struct RdmaDev;
  RdmaDev* dev_for_addr(const transport::IpAddr& ip);
  static transport::IpAddr gid_ip(const RdmaDev& d, const transport::IpAddr& ip);
  RdmaDev* dev_for_dst(const transport::IpAddr& dst, const RdmaDev* prefer_not_owner);
  int bind_locked(RdmaId* id, const sockaddr* addr);
  void unbind_locked(RdmaId* id);
  void queue_event(RdmaId* id, RdmaEvent ev);          // under mu_
  void on_cm_event(RdmaDev& d, const CmEvent& ev);     // [engine] under mu_ (from_engine)
  void on_req(RdmaDev& d, const CmEvent& ev, bool sidr);
  RdmaId* listener_for(RdmaDev& d, uint64_t service_id, const std::optional<CmaHdr>& hdr);
  void update_cm_listens(RdmaDev& d, rdma_port_space ps, uint16_t port);  // [engine]
  void on_rep(RdmaId& id, const CmEvent& ev);
  void on_resolved(RdmaDev& d, const transport::IpAddr& ip, bool ok);  // [engine] under mu_ (from_engine)
  void addr_done(RdmaId& id, bool ok, int status);
  void qp_to_error(RdmaId& id);
  int modify_connected_qp(RdmaId& id);                 // INIT -> INIT -> RTR -> RTS from the CM
  int fill_attr(RdmaId& id, ibv_qp_state st, ibv_qp_attr& attr, int& mask);
  void on_comm_est(RdmaDev& d, const rnic::Qp* qp);    // [engine] first data before the RTU (IBA 12.9.6)
  // Runs f() in d's engine loop with mu_ held (never call with mu_ held:
  // the engine thread may be waiting for it).
  template <class F>
  void on_engine(RdmaDev& d, F&& f);
  // [engine] How d's loop enters the model (a consumer call's engine part,
  // CM events, neighbour results, COMM_EST, timers): mu_ for the entry,
  // and what the engine raises for the model inside it handled after it
  // (rdma_cm_internal.hpp).
  template <class F>
  void from_engine(RdmaDev& d, F&& f);
  // A consumer call's engine part on `id`: the id's device found under the
  // lock, then in its loop `f(dev, in)` once the id still lives and its
  // state takes the input `input(id)` names; EINVAL otherwise.  One
  // lookup, one state check, in the loop that acts on it.
  template <class I, class F>
  int with_id(RdmaId* id, I&& input, F&& f);
  // [engine] What d's engine raised for the model, entered once per input
  // (from_engine) or, inside an entry, after it.
  void raise(RdmaDev& d, const EngineInput& in);
  void handle(RdmaDev& d, const EngineInput& in);  // [engine] under mu_
  // The id's state machine's driver (under mu_): `in` moves the id, traced
  // as `conn`; false, and nothing changes, when its state does not take it.
  bool step(RdmaId& id, RdmaIdInput in);
  static void on_addr_timer(Timer& t, uint64_t now_ns);

  std::vector<std::unique_ptr<RdmaDev>> devs_;
  RdmaCmOptions opt_;
  std::mutex mu_;                       // taken once per entry (on_engine, from_engine, a consumer call)
  std::condition_variable acked_;
  std::set<RdmaId*> ids_;
  std::set<RdmaChannel*> channels_;
  std::map<std::pair<int, uint16_t>, std::vector<RdmaId*>> ports_;  // (ps, port) -> bound ids
  uint32_t next_port_ = 0;
  PortArbiter arbiter_;  // set_port_arbiter
};

// Per device: its CM (the device's; this model its consumer once started)
// and what the model keeps about it.
struct RdmaDev {
  RdmaCm* model = nullptr;
  size_t index = 0;
  RdmaCmDevice cfg;
  Cm* cm = nullptr;                   // cfg.cm's, from start() on
  std::vector<RdmaId*> accepting;     // passive ids waiting for the RTU (first data counts)
  // One CM listen per service ID; the listening RdmaId for a REQ is found
  // from the port table by the destination address in its rdma_cm header
  // (several ids may listen on one port with different addresses).
  std::map<uint64_t, CmId*> cm_listens;
  std::multimap<std::array<uint8_t, 16>, RdmaId*> resolving;  // neighbour -> ids waiting
  // [engine] Inside an entry of the model from this device's loop
  // (RdmaCm::from_engine), and what the engine raised meanwhile.
  bool in_entry = false;
  std::deque<EngineInput> later;
  transport::Engine& engine() const { return cfg.rnic->engine(); }
};

// Helpers shared with the C layer and tests.
std::optional<transport::IpAddr> ip_of(const sockaddr* sa);
uint16_t port_of(const sockaddr* sa);  // host order
socklen_t sockaddr_len(const sockaddr* sa);
constexpr const char* rdma_event_name(rdma_cm_event_type t) noexcept {
  switch (t) {
    case RDMA_CM_EVENT_ADDR_RESOLVED: return "RDMA_CM_EVENT_ADDR_RESOLVED";
    case RDMA_CM_EVENT_ADDR_ERROR: return "RDMA_CM_EVENT_ADDR_ERROR";
    case RDMA_CM_EVENT_ROUTE_RESOLVED: return "RDMA_CM_EVENT_ROUTE_RESOLVED";
    case RDMA_CM_EVENT_ROUTE_ERROR: return "RDMA_CM_EVENT_ROUTE_ERROR";
    case RDMA_CM_EVENT_CONNECT_REQUEST: return "RDMA_CM_EVENT_CONNECT_REQUEST";
    case RDMA_CM_EVENT_CONNECT_RESPONSE: return "RDMA_CM_EVENT_CONNECT_RESPONSE";
    case RDMA_CM_EVENT_CONNECT_ERROR: return "RDMA_CM_EVENT_CONNECT_ERROR";
    case RDMA_CM_EVENT_UNREACHABLE: return "RDMA_CM_EVENT_UNREACHABLE";
    case RDMA_CM_EVENT_REJECTED: return "RDMA_CM_EVENT_REJECTED";
    case RDMA_CM_EVENT_ESTABLISHED: return "RDMA_CM_EVENT_ESTABLISHED";
    case RDMA_CM_EVENT_DISCONNECTED: return "RDMA_CM_EVENT_DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return "RDMA_CM_EVENT_DEVICE_REMOVAL";
    case RDMA_CM_EVENT_MULTICAST_JOIN: return "RDMA_CM_EVENT_MULTICAST_JOIN";
    case RDMA_CM_EVENT_MULTICAST_ERROR: return "RDMA_CM_EVENT_MULTICAST_ERROR";
    case RDMA_CM_EVENT_ADDR_CHANGE: return "RDMA_CM_EVENT_ADDR_CHANGE";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "RDMA_CM_EVENT_TIMEWAIT_EXIT";
  }
  return "UNKNOWN EVENT";
}

}  // namespace uroce::cm
