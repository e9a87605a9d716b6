// Lcores: a device's engine on more than one core (EngineConfig::lcores,
// the configuration's `engine_lcores`; DESIGN.md "More than one engine
// core").
//
// Lcore 0 is the device's Engine as with one core: it owns the port's
// receive queue, the host stack, the neighbour table, the CM, every
// control verb and the QPs of lcore 0.  Lcores 1..N-1 are engines of
// their own (a TimerWheel, a doorbell ring, a TX queue and a thread
// each) over a LanePort: their "port" receives the frames another lcore
// handed them (Lcores::hand_off: a RoCEv2 packet for one of their QPs)
// and transmits to the device's port.  The RNIC gives each QP to an
// lcore by its QPN (Rnic::lcore_of) and hands each packet to its QP's
// lcore; a QP's state, timers and frames are that lcore's alone.
//
// Threading rule (DESIGN.md "Threads"), kept by this class:
//   - the data path of a QP runs on its lcore's thread only;
//   - the control path (every Rnic::control call, on lcore 0's loop)
//     runs exclusive: Lcores::Exclusive parks every other lcore at the
//     start of its next turn (checkpoint) and holds it there until the
//     control function returns, so that a control function may touch any
//     QP, timer, table or TX queue as with one core;
//   - what two lcores' data paths share (a CQ several QPs complete to, an
//     SRQ, memory windows, the RNIC's counters) has its own lock or
//     atomic, taken only on a device with more than one lcore;
//   - a worker never waits for lcore 0 (no run_sync): what it needs of
//     lcore 0's state it asks through a ring (send_via_control) or a
//     doorbell.
#pragma once

#include <boost/lockfree/queue.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "drivers/port.hpp"
#include "drivers/result.hpp"
#include "transport/neigh.hpp"

namespace uroce::transport {

class Engine;
enum class TxKind : uint8_t;

// A frame a worker asks lcore 0 to send (Lcores::send_via_control).
struct ControlTx {
  rte_mbuf* m;
  IpAddr dst;
  TxKind kind;
};

inline constexpr unsigned kMaxEngineLcores = 8;
// Frames that may wait in one lcore's hand-off ring (a power of two).
inline constexpr unsigned kLaneRingFrames = 4096;

// A port shared by several engines' TX: one tx_burst at a time (a
// mutex per burst, uncontended unless two lcores flush at once).  Every
// engine of a device with more than one lcore transmits through it.
class SharedTxPort final : public drivers::Port {
 public:
  explicit SharedTxPort(drivers::Port& inner) : inner_(inner) {}
  uint16_t rx_burst(rte_mbuf** pkts, uint16_t n) override { return inner_.rx_burst(pkts, n); }
  uint16_t tx_burst(rte_mbuf** pkts, uint16_t n) override {
    std::lock_guard lock(mu_);
    return inner_.tx_burst(pkts, n);
  }
  wire::MacAddr mac() const override { return inner_.mac(); }
  uint16_t mtu() const override { return inner_.mtu(); }
  bool link_up() const override { return inner_.link_up(); }
  drivers::PortStats stats() const override { return inner_.stats(); }
  rte_mempool* pool() const override { return inner_.pool(); }
  std::string name() const override { return inner_.name(); }
  std::string netdev() const override { return inner_.netdev(); }
  int wait_fd() const override { return inner_.wait_fd(); }
  bool prepare_wait() override { return inner_.prepare_wait(); }
  void end_wait() override { inner_.end_wait(); }
  bool nap_prepares() const override { return inner_.nap_prepares(); }

 private:
  drivers::Port& inner_;
  std::mutex mu_;
};

// A worker lcore's port: rx_burst takes what other lcores handed it,
// tx_burst goes to the device's (shared) port.  wait_fd is an eventfd
// that a hand-off writes while the worker naps or sleeps on it, so that a
// frame for one of its QPs ends the nap at once, as a frame on a real
// port does.
class LanePort final : public drivers::Port {
 public:
  LanePort(drivers::Port& tx, unsigned index);
  ~LanePort() override;
  LanePort(const LanePort&) = delete;
  LanePort& operator=(const LanePort&) = delete;
  bool ok() const noexcept { return wake_fd_ >= 0; }

  // Any thread: hand frames to this lane (multi-producer); returns how
  // many it took (the caller keeps the rest).
  unsigned push(rte_mbuf* const* pkts, unsigned n) noexcept;
  // Any thread: end the lane's nap or sleep now (the control path's
  // Exclusive, which needs every lane at its checkpoint).
  void wake() noexcept;
  // Any thread: wake() if the lane's thread waits on its eventfd now (a
  // doorbell for one of its QPs, Engine::ring).
  void wake_if_waiting() noexcept;

  uint16_t rx_burst(rte_mbuf** pkts, uint16_t n) override;
  uint16_t tx_burst(rte_mbuf** pkts, uint16_t n) override { return tx_.tx_burst(pkts, n); }
  wire::MacAddr mac() const override { return tx_.mac(); }
  uint16_t mtu() const override { return tx_.mtu(); }
  bool link_up() const override { return tx_.link_up(); }
  drivers::PortStats stats() const override { return {}; }
  rte_mempool* pool() const override { return tx_.pool(); }
  std::string name() const override;
  int wait_fd() const override { return wake_fd_; }
  bool prepare_wait() override;
  void end_wait() override;
  bool nap_prepares() const override { return true; }

 private:
  drivers::Port& tx_;
  unsigned index_;
  // Boost.Lockfree rather than an rte_ring: its atomics are C++'s, which
  // ThreadSanitizer follows (the frame's bytes are published by the push).
  boost::lockfree::queue<rte_mbuf*, boost::lockfree::fixed_sized<true>> ring_{kLaneRingFrames};
  int wake_fd_ = -1;
  // The wait protocol: pushers count pushed_ then read waiting_; the lane
  // sets waiting_ then compares pushed_ with what it took (seq_cst both
  // ways: one of the two sees the other).
  std::atomic<uint64_t> pushed_{0};
  uint64_t taken_ = 0;                // [the lane's thread]
  std::atomic<bool> waiting_{false};  // the lane's thread is about to wait on wake_fd_
};

class Lcores {
 public:
  // The worker engines 1..n-1 of `control` (lcore 0), over `tx` (the
  // device's port, SharedTxPort when it is not safe for several senders).
  Lcores(Engine& control, drivers::Port& tx, unsigned n);
  ~Lcores();
  Lcores(const Lcores&) = delete;
  Lcores& operator=(const Lcores&) = delete;
  drivers::Status init();

  unsigned size() const noexcept { return n_; }
  Engine& engine(unsigned i) noexcept;  // 0: the control engine

  // Start and stop the workers' threads (on_start/on_exit as Engine::start).
  void start(const std::function<void()>& on_start, const std::function<void()>& on_exit);
  void stop();

  // [any lcore's loop] Hand a received frame to lcore `to`, whose QP it
  // is for; false when its ring is full (the caller drops and counts it).
  bool hand_off(unsigned to, rte_mbuf* m) noexcept;
  // [lcore 0's loop] What workers handed lcore 0 (frames their loopback
  // made for its QPs); workers read theirs as their port's receive.
  uint16_t take_handed(rte_mbuf** pkts, uint16_t n) noexcept { return ports_[0]->rx_burst(pkts, n); }

  // ---- exclusivity (the control path) -------------------------------------------
  // [a worker's loop] At the start of each turn: parks while lcore 0 holds
  // the device exclusive.
  void checkpoint(unsigned me) noexcept {
    Lane& l = lanes_[me];
    l.running.store(true, std::memory_order_seq_cst);
    if (want_.load(std::memory_order_seq_cst)) park(l);
  }
  // Every other lcore parked while it lives (nests on one thread).
  class Exclusive {
   public:
    explicit Exclusive(Lcores* l) noexcept;
    ~Exclusive();
    Exclusive(const Exclusive&) = delete;
    Exclusive& operator=(const Exclusive&) = delete;

   private:
    Lcores* l_;
  };
  // Whether the calling thread holds the device exclusive now.
  bool exclusive_here() const noexcept { return holder_.load(std::memory_order_acquire) == std::this_thread::get_id(); }

  // ---- what workers ask of lcore 0 ----------------------------------------------
  // [a worker's loop] A frame to `dst` whose next hop the worker does not
  // know (NeighTable::peek): lcore 0 sends it (resolving, queueing or
  // dropping it as its send_to does).  False: the ring is full (dropped,
  // the caller counts it).
  bool send_via_control(const IpAddr& dst, rte_mbuf* m, TxKind kind) noexcept;
  // [lcore 0's loop] Sends what workers asked it to; returns how many.
  unsigned drain_control_tx() noexcept;

 private:
  struct alignas(64) Lane {
    std::atomic<bool> running{false};  // outside checkpoint (between its first turn and its stop)
  };
  void park(Lane& l) noexcept;

  Engine& control_;
  drivers::Port& tx_;
  unsigned n_;
  std::vector<std::unique_ptr<LanePort>> ports_;    // [i]: lcore i's hand-off ring (a worker's port)
  std::vector<std::unique_ptr<Engine>> workers_;    // [i - 1]
  std::unique_ptr<Lane[]> lanes_;
  alignas(64) std::atomic<bool> want_{false};
  std::atomic<std::thread::id> holder_{};
  unsigned depth_ = 0;  // [holder] nested Exclusive scopes
  std::mutex excl_mu_;  // one holder at a time (lcore 0's loop and threads that run its turns)
  boost::lockfree::queue<ControlTx, boost::lockfree::fixed_sized<true>> control_tx_{kLaneRingFrames};  // workers -> lcore 0
};

}  // namespace uroce::transport
