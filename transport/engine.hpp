// The engine: the software NIC's poll loop (DESIGN.md "A packet's way in").
//
//   doorbells -> Port RX burst -> parse once (lib/wire) -> MAC filter ->
//     RoCEv2 to one of our addresses: the transport's RoceSink, one call
//             per burst; the sink (the RNIC's receive dispatcher,
//             transport/rnic/recv.cpp) looks the QP up, checks it, and asks
//             the engine to finish the frame's checks (accept_roce: opcode
//             known, ICRC) or to count why it drops it (drop)
//     ARP / ICMP / ND: the host stack (answered here on ports with no
//             kernel netdev), the neighbour table learns
//     anything else: counted and dropped
//   -> timers (one clock sample per iteration) -> TX flush
//
// Every dropped frame is counted under exactly one reason, in the engine's
// counters (frame-level reasons, whoever found them).
//
// Who runs the loop, and what its thread does when idle, is Progress's
// (transport/progress.hpp): this file is the loop and nothing of that
// policy.
//
// Threads (DESIGN.md "Threads"): a turn runs on one thread at a time, the
// loop's thread for that turn.  Functions marked [engine] must be called
// from inside the loop (a RoceSink, a timer, a doorbell callback, a
// run_sync function); they assert it in debug builds (UROCE_ASSERT_ENGINE).
// Application threads only ring doorbells and call `run_sync`, holding no
// lock the loop takes while they wait.
#pragma once

#include <boost/lockfree/queue.hpp>

#include <array>
#include <cassert>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "drivers/capture.hpp"
#include "drivers/port.hpp"
#include "lib/util/counters.hpp"
#include "lib/util/steady_ns.hpp"
#include "lib/util/timer_wheel.hpp"
#include "lib/wire/pkt.hpp"
#include "transport/hoststack.hpp"
#include "transport/lcores.hpp"
#include "transport/neigh.hpp"
#include "transport/params.hpp"
#include "transport/progress.hpp"

// In a function that must run inside `engine`'s loop: asserts it (debug
// builds; NDEBUG removes it).
#define UROCE_ASSERT_ENGINE(engine) assert((engine).on_engine_thread())

namespace uroce::transport {

#define UROCE_ENGINE_COUNTERS(X)                                                        \
  X(rx_frames, "frames received from the port")                                         \
  X(rx_bytes, "bytes received from the port")                                           \
  X(tx_frames, "frames the port took")                                                  \
  X(tx_bytes, "bytes the port took")                                                    \
  X(rx_roce, "RoCEv2 packets the transport took (ICRC verified)")                       \
  X(rx_arp, "ARP frames received")                                                      \
  X(rx_icmp, "ICMP frames received")                                                    \
  X(rx_icmp6, "ICMPv6 frames received (neighbour discovery included)")                  \
  X(tx_arp_request, "ARP requests sent (gratuitous included)")                          \
  X(tx_arp_reply, "ARP replies sent")                                                   \
  X(tx_icmp_reply, "ICMP echo replies sent")                                            \
  X(tx_nd_solicit, "IPv6 neighbour solicitations sent")                                 \
  X(tx_nd_advert, "IPv6 neighbour advertisements sent")                                 \
  X(tx_icmp6_reply, "ICMPv6 echo replies sent")                                         \
  X(neigh_resolved, "neighbours resolved")                                              \
  X(neigh_failed, "neighbour resolutions that timed out")                               \
  X(doorbells, "doorbells rung by application threads")                                 \
  X(drop_not_our_mac, "dropped: unicast frame for another MAC address")                 \
  X(drop_not_our_ip, "dropped: RoCEv2 packet for an IP address that is not ours")       \
  X(drop_malformed, "dropped: malformed frame (the parse_* counters say why)")          \
  X(drop_unknown_qpn, "dropped: RoCEv2 packet for a QP that does not exist")            \
  X(drop_unknown_opcode, "dropped: RoCEv2 packet with a reserved or unsupported opcode") \
  X(drop_icrc, "dropped: RoCEv2 packet whose ICRC does not verify")                     \
  X(drop_other_ipv4, "dropped: IPv4 that is neither RoCEv2 nor ICMP")                   \
  X(drop_other_ipv6, "dropped: IPv6 that is neither RoCEv2 nor ICMPv6")                 \
  X(drop_other_ethertype, "dropped: another EtherType (RoCEv1, LLDP ...)")              \
  X(drop_host_ignored, "dropped: ARP/ICMP not addressed to us or not answerable")       \
  X(drop_no_mbuf, "dropped: no buffer to build a frame")                                \
  X(drop_tx_full, "dropped: the port did not take a frame")                             \
  X(tx_deferred, "frames the port refused that waited for the next flush")              \
  X(tx_acks_behind, "held ACKs sent behind requests that joined them")                  \
  X(drop_neigh, "dropped: frame queued for a neighbour that did not resolve")            \
  X(loopback, "frames to this device's own addresses, looped back (never on the wire)") \
  X(drop_loopback_full, "dropped: the loopback queue was full (kLoopbackFrames)")   \
  X(tx_bursts, "tx_bursts the port took frames from (tx_frames / tx_bursts: frames per burst)") \
  X(lane_handoffs, "RoCEv2 packets handed to the lcore of their QP (engine_lcores > 1)") \
  X(drop_lane_full, "dropped: the hand-off ring of the packet's lcore was full (engine_lcores > 1)")

UROCE_COUNTER_ENUM(EngineCtr, UROCE_ENGINE_COUNTERS)
using EngineCounters = CounterSet<EngineCtr, kEngineCtrInfo>;

class Engine;

// What a frame handed to the engine is, as its sender knows from building
// it (never found out again by parsing it): what the ACK hold
// (EngineConfig::ack_hold_ns) and the requests that may pass held ACKs
// (Engine::requests_before_held_acks) go by.
enum class TxKind : uint8_t {
  Other,    // anything else: responses, requests that complete a receive at the peer, ARP ...
  Ack,      // an RC ACK
  Request,  // a request that completes no receive at the peer (WRITE, READ request, atomic ...)
};
constexpr TxKind tx_kind(uint8_t opcode) noexcept {
  if (opcode == wire::op::RC_ACK) return TxKind::Ack;
  const wire::OpcodeInfo& op = wire::opcode_info(opcode);
  return op.valid && op.request && !op.consumes_rwqe ? TxKind::Request : TxKind::Other;
}

// One received RoCEv2 packet to one of our addresses, parsed.
struct RoceRx {
  rte_mbuf* m;
  wire::PktInfo info;
  // Another lcore of the device received it and handed it here (its QP is
  // this lcore's): a multicast packet so received goes to this lcore's
  // members only (transport/lcores.hpp).
  bool handed = false;
};

// The transport's entry point: one virtual call per burst, not per packet.
// The sink owns the mbufs it is handed: it finds the packet's QP (or drops
// it: Engine::drop with drop_unknown_qpn), then has the engine check the
// frame itself (Engine::accept_roce) before it acts on it.
class RoceSink {
 public:
  virtual ~RoceSink() = default;
  virtual void rx_burst(Engine& engine, RoceRx* pkts, uint16_t n) = 0;
  // [engine] Whether a QP of this device is attached to multicast group
  // `mgid` (one call per multicast frame sent: its loopback copy).
  virtual bool mcast_member(const wire::Ipv6Addr& /*mgid*/) const noexcept { return false; }
};

struct EngineConfig {
  LocalAddrs local;               // MAC, addresses and VLAN tags of this device
  bool answer_host = true;        // answer ARP/ICMP/ND ourselves (no kernel netdev)
  bool announce = true;           // gratuitous ARP / unsolicited NA at start
  NeighConfig neigh;
  uint32_t max_qpn = 1u << 16;    // the RNIC allocates QPNs below this (its O(1) table)
  uint16_t rx_burst = 32;
  uint16_t tx_batch = 64;
  // A turn that ends with only ACKs to send holds them this long for the
  // next turns (IBA 9.7.5.1.1 lets a responder coalesce ACKs): the
  // application's response to the message just delivered (ib_send_lat's
  // pong) then leaves in the same tx_burst instead of waiting behind the
  // ACK's (on af_packet a system call that runs the veth delivery).  0:
  // every turn flushes.  transport::Device sets params::kAckHoldNs.
  uint64_t ack_hold_ns = 0;
  // A post that follows the previous post call's end within this leaves
  // its doorbell for the next turn (post_kick).  0: every post runs its
  // turn.  transport::Device sets params::kPostBatchGapNs.
  uint64_t post_batch_gap_ns = 0;
  uint32_t doorbell_capacity = 4096;
  std::string pcap_path;          // empty: no capture
  ProgressKind progress = ProgressKind::Thread;
  // Ports whose ARP/ND replies reach only the kernel (an mlx5 port in flow
  // isolation): asked on every resolution attempt; returns the kernel's
  // entry, or nullopt after making the kernel resolve it.  Control path
  // (a system call per attempt).  Empty: the engine's own ARP/ND alone.
  std::function<std::optional<wire::MacAddr>(const IpAddr&)> kernel_neigh;
  // The gateway for an off-link destination (NeighTable::Hooks::next_hop):
  // for ports that share a kernel interface, the kernel's route through
  // it, so that a peer behind a router is reached as rxe reaches it.
  // Control path (a system call per new destination).  Empty: on the link.
  std::function<std::optional<IpAddr>(const IpAddr&)> next_hop;
  // The port delivers frames to the device's own addresses (a client of
  // uroced: the daemon loops them back, possibly to another process's QP,
  // and makes the multicast copies for every process): send_to sends them
  // to the port addressed to our own MAC, and send_multicast makes no
  // copy of its own.  False: the engine loops them back itself (rxe's way).
  bool port_loopback = false;
  // An idle engine thread sleeps instead of napping: on the port's wait
  // fd (Port::wait_fd), its own wake eventfd (doorbells, run_sync) and the
  // fds a layer above watches (watch_fd), until the next timer.  A frame
  // or a doorbell then wakes it at once (the kernel's wake-up preempts a
  // spinning thread), where a nap made it wait out the nap or a scheduler
  // slice.  uroced and its clients (DESIGN.md "The shared device").
  bool idle_wait = false;
  uint64_t idle_spin_ns = 0;  // idle_wait: spin this long before sleeping (0: params::kIdleWaitSpinNs)
  // The engine thread's SCHED_FIFO priority while it may sleep (0:
  // SCHED_OTHER throughout).  While IdleHooks::keep_polling holds it
  // SCHED_OTHER and it yields between idle turns: a thread at a real-time
  // priority that polls would keep every normal thread off its core.
  int realtime_priority = 0;
  // Engine threads (lcores) of the device, 1..kMaxEngineLcores: this
  // engine is lcore 0 and makes the others at init (transport/lcores.hpp;
  // configuration `engine_lcores`).  They need engine threads (not inline
  // progress), and transmit through one SharedTxPort.
  unsigned lcores = 1;
};

class Engine {
 public:
  struct Doorbell {
    void (*fn)(Engine&, void* ctx) = nullptr;
    void* ctx = nullptr;
  };

  Engine(drivers::Port& port, EngineConfig cfg);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Opens the capture file; announces our addresses.  Control path.
  drivers::Status init();

  // ---- progress (transport/progress.hpp) -------------------------------------
  // Who runs the loop and the idle policy of the thread that does.
  Progress& progress() noexcept { return progress_; }
  // One turn on the calling thread (tests and tools that drive the loop
  // themselves); the engine thread (Progress::start) and the end of it.
  unsigned poll() { return progress_.poll(); }
  // With several lcores, start and stop run every lcore's thread.
  void start(std::function<void()> on_start = {}, std::function<void()> on_exit = {}) {
    if (lcores_) lcores_->start(on_start, on_exit);
    progress_.start(std::move(on_start), std::move(on_exit));
  }
  void stop() {  // joins the engine thread or the backstop
    if (lcores_) lcores_->stop();
    progress_.stop();
  }
  bool on_engine_thread() const noexcept { return progress_.on_engine_thread(); }

  // ---- lcores (transport/lcores.hpp) -------------------------------------------
  // This engine's lcore (0: the device's own engine) and the device's
  // lcores (null: one lcore).  Any thread; fixed once init() returned.
  unsigned lcore() const noexcept { return lcore_; }
  Lcores* lcores() const noexcept { return group_; }
  // The calling thread holds the device exclusive (Lcores::Exclusive).
  bool exclusive_here() const noexcept { return group_ != nullptr && group_->exclusive_here(); }
  // Lcores::Exclusive, with this (worker) engine parked: its clock sample
  // brought to now, so that a control function arming its timers (an
  // ACK timer at modify, a flush) arms them from now, not from the turn
  // before a nap.
  void resync_clock() noexcept { now_ns_ = steady_ns(); }
  // Lcores: a worker engine's place among them (before init).
  void join_lcores(Lcores* group, unsigned index, LanePort* lane) noexcept {
    group_ = group;
    lcore_ = index;
    lane_ = lane;
  }

  // ---- from application threads ---------------------------------------------
  // Ask the loop to call fn(engine, ctx) soon (lock-free; false when full).
  bool ring(Doorbell d) noexcept;
  // Run `fn` inside the loop and wait for it (directly when already there).
  void run_sync(const std::function<void()>& fn) { progress_.run_sync(fn); }

  // ---- [engine] ---------------------------------------------------------------
  uint64_t now() const noexcept { return now_ns_; }  // this iteration's clock sample
  static uint64_t realtime_ns() noexcept;            // CLOCK_REALTIME now (captures, CQE wall clock); any thread
  TimerWheel& timers() noexcept { return wheel_; }
  NeighTable& neighbours() noexcept { return neigh_; }
  rte_mbuf* alloc() noexcept;                       // counts drop_no_mbuf on failure
  void send(rte_mbuf* m, TxKind kind = TxKind::Other) noexcept;  // a complete frame
  // A frame whose Ethernet destination is filled in once `dst` resolves.
  // A frame to one of the device's own addresses never reaches the wire:
  // it is received on the loop's next turn, as rxe loops back (loopback).
  // `kind`: what the frame is (TxKind), as its sender knows it.
  bool send_to(const IpAddr& dst, rte_mbuf* m, TxKind kind = TxKind::Other) noexcept;
  // send_to for a path that sends many frames (a QP's, an AH's): `hop`
  // remembers where the last frame to `dst` went — loopback, or the MAC the
  // neighbour table gave — and the next frame to the same `dst` goes there
  // without a table lookup while NeighTable::generation() is unchanged.
  bool send_to(const IpAddr& dst, rte_mbuf* m, NextHop& hop, TxKind kind = TxKind::Other) noexcept;
  // A frame to multicast group `mgid` (its Ethernet destination the group's
  // MAC): to the wire, and a copy looped back when a QP of this device is
  // attached to the group (multicast loopback, as the host's IP stack gives
  // rxe and as ConnectX does unless a QP blocks it).
  void send_multicast(const wire::Ipv6Addr& mgid, rte_mbuf* m) noexcept;
  // Hands the queued frames to the port.  Frames the port does not take
  // (its ring is full) stay queued, in order, up to tx_batch of them, for
  // the next flush; past that they are dropped (drop_tx_full).
  void flush_tx() noexcept;
  // The port refused frames at the last flush and some still wait: the
  // RNIC's bulk senders (READ response streams, the requester) pause
  // rather than produce frames the port would drop (the loss would be
  // at the tail of a burst, where only the peer's ACK timeout finds it).
  bool tx_stalled() const noexcept { return tx_stalled_; }
  // [engine] Counts the flushes (each hands the queued frames to the
  // port).  A frame send() queued during generation `gen` that is still in
  // the queue (`waiting`) has not reached the port, and its buffer is the
  // queue's: its sender may still rewrite it (the responder's coalesced
  // ACK).  A frame that went elsewhere (looped back, waiting for its
  // neighbour) is never `waiting`.
  uint64_t tx_generation() const noexcept { return tx_gen_; }
  bool waiting(const rte_mbuf* m, uint64_t gen) const noexcept {
    if (gen != tx_gen_) return false;
    for (const rte_mbuf* q : tx_)
      if (q == m) return true;
    return false;
  }
  // [engine] flush_tx until the port has taken every frame kept (not
  // tx_stalled()) or `max_ns` passed, yielding between tries (the port's
  // consumer, on another thread, makes room); true when none is kept.  For
  // a port whose next write outside the frames must follow them (uroced's
  // claim records: a QP's last ACK before its unclaim).
  bool drain_tx(uint64_t max_ns) noexcept;
  static void set_frame_len(rte_mbuf* m, size_t len) noexcept;

  void set_roce_sink(RoceSink* sink) noexcept { sink_ = sink; }
  // [engine] For the sink: the frame's last checks — its opcode is one we
  // know, its ICRC verifies (STYLE 7: after the QP and its keys) — counted
  // rx_roce when they pass; when not, counted under the reason and freed.
  bool accept_roce(const RoceRx& pkt) noexcept;
  // [engine] For the sink: drop a frame (freed), counted under `why`.
  void drop(rte_mbuf* m, EngineCtr why) noexcept;

  // Callback for neighbour resolution results (rdma_resolve_addr).
  void set_resolve_hook(std::function<void(const IpAddr&, bool)> f) { resolve_hook_ = std::move(f); }
  // [engine] Work of a layer above that has no doorbell of its own, run
  // once per turn after the doorbells, before the port's receive burst;
  // returns how much it did (0: idle).  uroced's switch drains its
  // clients' rings here (daemon/switch.hpp).  Set before the loop runs.
  void set_turn_hook(std::function<unsigned()> f) { turn_hook_ = std::move(f); }

  // ---- counters (any thread) -------------------------------------------------
  const EngineCounters& counters() const noexcept { return ctr_; }
  EngineCounters& counters_mut() noexcept { return ctr_; }  // [engine] a sink's own counts
  // A counter of the whole device: this engine's, and on lcore 0 of
  // several every lcore's (counters() is this lcore's alone).  Any thread.
  uint64_t total(EngineCtr c) const noexcept {
    uint64_t v = ctr_.get(c);
    if (lcores_)
      for (unsigned l = 1; l < lcores_->size(); ++l) v += lcores_->engine(l).counters().get(c);
    return v;
  }
  uint64_t parse_errors(wire::ParseError e) const noexcept {
    return parse_err_[static_cast<size_t>(e)].load(std::memory_order_relaxed);
  }
  // f(name, help, value) over every counter, parse reasons included.
  void for_each_counter(const std::function<void(std::string_view, std::string_view, uint64_t)>& f) const;

  drivers::Port& port() noexcept { return port_; }
  const EngineConfig& config() const noexcept { return cfg_; }

 // [engine] Nothing waits in the loopback queue or to be sent (Progress:
  // whether the engine thread may sleep, or must wake).
  bool nothing_queued() const noexcept { return loop_.empty() && tx_.empty(); }
  bool nothing_to_send() const noexcept { return tx_.empty(); }

 private:
  friend class Progress;  // runs the turns
  unsigned poll_once();   // one turn; the caller (Progress) has made its thread the loop's
  void end_turn_tx() noexcept;  // flush_tx, unless holding ACKs (EngineConfig::ack_hold_ns)
  bool tx_only_acks() noexcept;
  bool requests_before_held_acks() noexcept;  // flush_tx: see engine.cpp; true when it moved the ACKs
  void flush_tx_keeping(bool keep_acks) noexcept;  // flush_tx; see engine.cpp
  // `looped`: frames from the loopback queue (not counted as received from
  // the port, not captured).
  // `handed`: frames another lcore received for this one's QPs (RoceRx::handed).
  void handle_rx(rte_mbuf** pkts, uint16_t n, bool looped = false, bool handed = false);
  bool loop_back(rte_mbuf* m) noexcept;
  unsigned drain_loopback();
  bool accept_mac(const uint8_t* frame) const noexcept;
  bool accept_roce_dst(const uint8_t* frame, const wire::PktInfo& pi) const noexcept;
  void handle_host(rte_mbuf* m, const wire::PktInfo& pi);
  void count_drop(const wire::PktInfo& pi);
  void send_neigh_request(const IpAddr& ip);
  // Fills the Ethernet destination, sends.
  void send_to_mac(rte_mbuf* m, const wire::MacAddr& mac, TxKind kind = TxKind::Other) noexcept;
  // Control path (ARP/ND we originate): allocate a buffer, let `build(out)`
  // write a frame and return its length, count it under `ctr`, queue it.
  // False when no buffer could be had.
  bool send_built(EngineCtr ctr, const std::function<size_t(uint8_t*)>& build);
  void announce();
  unsigned drain_doorbells();

  std::unique_ptr<SharedTxPort> shared_tx_;  // lcores > 1: every lcore's TX (before port_)
  drivers::Port& port_;
  EngineConfig cfg_;
  EngineCounters ctr_;
  std::array<std::atomic<uint64_t>, wire::kNumParseErrors> parse_err_{};
  uint64_t now_ns_ = 0;
  TimerWheel wheel_;
  NeighTable neigh_;
  drivers::Capture capture_;
  RoceSink* sink_ = nullptr;
  std::vector<rte_mbuf*> tx_;
  std::vector<TxKind> tx_kind_; // each queued frame's kind, in step with tx_
  size_t tx_acks_ = 0;          // leading frames of tx_ known to be ACKs
  bool tx_stalled_ = false;     // see tx_stalled()
  uint64_t tx_gen_ = 0;         // see tx_generation()
  size_t tx_captured_ = 0;      // leading frames of tx_ already written to the capture
  uint64_t ack_hold_since_ = 0; // when tx_ began holding only ACKs; 0: not holding
  std::vector<rte_mbuf*> loop_;      // frames to our own addresses, received next turn
  std::vector<rte_mbuf*> loop_rx_;   // the turn's batch of them (swapped with loop_)
  std::vector<RoceRx> roce_;
  boost::lockfree::queue<Doorbell, boost::lockfree::fixed_sized<true>> doorbells_;
  std::function<void(const IpAddr&, bool)> resolve_hook_;
  std::function<unsigned()> turn_hook_;
  std::vector<std::pair<IpAddr, wire::MacAddr>> kernel_learned_;  // learned next iteration
  Lcores* group_ = nullptr;           // the device's lcores (lcore 0: lcores_.get()); null: one
  unsigned lcore_ = 0;
  LanePort* lane_ = nullptr;          // a worker's port (its hand-off queue)
  bool worker() const noexcept { return lcore_ != 0; }
  bool send_to_worker(const IpAddr& dst, rte_mbuf* m, NextHop* hop, TxKind kind) noexcept;
  std::unique_ptr<Lcores> lcores_;    // lcore 0 of several: the workers (stopped before progress_)
  Progress progress_{*this};  // last: its threads stop before anything above goes
};

}  // namespace uroce::transport
