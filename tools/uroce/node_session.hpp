// The two sides of `uroce node`, as engine-thread state machines:
//
//   PingSession  resolves the peer (ARP / ND through the engine), then
//                sends one ping at a time and waits for its pong (or a
//                timeout) before the next: a RoCEv2 UD SEND_ONLY to
//                kNodeQpn, or with `icmp` an ICMP(v6) echo request.
//   EchoSession  answers every ping that reaches kNodeQpn with a pong to
//                the address and MAC it came from.
//
// ICMP echo replies are not RoCE, and the engine hands them to no sink;
// IcmpReplyTap, a Port between the device's port and the engine, shows
// them to the PingSession as they arrive.
//
// Threads: every method marked [engine] runs inside the engine's loop
// (RoceSink, timers, a run_sync); done() may be read from any thread, and
// results() once done() is true (its release/acquire publishes them) or
// the engine has stopped.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "drivers/port.hpp"
#include "lib/util/timer_wheel.hpp"
#include "tools/uroce/node_msg.hpp"
#include "transport/engine.hpp"

namespace uroce::tools {

// Round trips whose RTT is kept for the summary; later ones are counted only.
inline constexpr size_t kMaxRttSamples = 1'000'000;

uint64_t steady_ns() noexcept;

struct PingConfig {
  transport::IpAddr target;
  uint32_t count = 0;        // round trips to make; 0: until stopped
  bool icmp = false;         // ICMP(v6) echo instead of RoCEv2
  uint16_t icmp_id = 0;
  size_t payload = kNodeMsgSize;
  uint64_t timeout_ns = 0;   // per round trip
  uint64_t interval_ns = 0;  // between a pong and the next ping
  uint32_t resolve_tries = 1;  // full ARP/ND probe sequences before giving up
};

struct PingResults {
  bool resolved = false;
  wire::MacAddr peer_mac{};
  uint64_t resolve_ns = 0;
  uint64_t sent = 0;
  uint64_t received = 0;
  uint64_t lost = 0;        // no pong within the timeout
  uint64_t unexpected = 0;  // late, duplicate or foreign pongs
  std::vector<uint64_t> rtt_ns;
  std::string failure;      // why the session ended early
};

class PingSession final : public transport::RoceSink {
 public:
  PingSession(transport::Engine& engine, PingConfig cfg);
  PingSession(const PingSession&) = delete;
  PingSession& operator=(const PingSession&) = delete;

  void start();                                                                  // [engine]
  // Ends the session (done) and cancels its timers; call before it goes
  // away while its engine still runs.
  void stop() { finish("stopped"); }                                            // [engine]
  void rx_burst(transport::Engine& engine, transport::RoceRx* pkts, uint16_t n) override;  // [engine]
  void on_echo_reply(uint16_t id, uint16_t seq, uint64_t now_ns) noexcept;     // [engine]

  bool done() const noexcept { return done_.load(std::memory_order_acquire); }
  const PingResults& results() const noexcept { return res_; }

 private:
  void on_resolved(const transport::IpAddr& ip, bool ok);
  void send_ping();
  rte_mbuf* build_ping(uint32_t seq, uint64_t tx_ns);
  void complete(uint64_t now_ns);
  void next();
  void finish(std::string failure = {});
  static void on_timeout(Timer& t, uint64_t now_ns);
  static void on_interval(Timer& t, uint64_t now_ns);

  transport::Engine& engine_;
  const PingConfig cfg_;
  transport::IpAddr src_;
  std::vector<uint8_t> payload_;
  Timer timeout_{};
  Timer interval_{};
  uint64_t start_ns_ = 0;
  uint32_t resolve_tries_ = 0;
  uint32_t seq_ = 0;       // of the ping in flight
  uint64_t tx_ns_ = 0;
  bool waiting_ = false;   // a ping is in flight
  bool finished_ = false;
  PingResults res_;
  std::atomic<bool> done_{false};
};

class EchoSession final : public transport::RoceSink {
 public:
  // Stops answering (done) after `limit` pongs; 0: never.
  EchoSession(transport::Engine& engine, uint64_t limit);

  void rx_burst(transport::Engine& engine, transport::RoceRx* pkts, uint16_t n) override;  // [engine]

  uint64_t echoed() const noexcept { return echoed_.load(std::memory_order_relaxed); }
  uint64_t ignored() const noexcept { return ignored_.load(std::memory_order_relaxed); }
  bool done() const noexcept { return limit_ != 0 && echoed() >= limit_; }

 private:
  void answer(const transport::RoceRx& rx, const NodeMsg& msg);

  transport::Engine& engine_;
  const uint64_t limit_;
  std::vector<uint8_t> payload_;
  std::atomic<uint64_t> echoed_{0};  // one writer: the engine thread
  std::atomic<uint64_t> ignored_{0};
};

// Forwards everything to `inner`; shows ICMP(v6) echo replies to the
// attached PingSession on their way to the engine.
class IcmpReplyTap final : public drivers::Port {
 public:
  explicit IcmpReplyTap(drivers::Port& inner) : inner_(inner) {}
  void attach(PingSession* s) noexcept { session_ = s; }  // [engine]

  uint16_t rx_burst(rte_mbuf** pkts, uint16_t n) override;
  uint16_t tx_burst(rte_mbuf** pkts, uint16_t n) override { return inner_.tx_burst(pkts, n); }
  wire::MacAddr mac() const override { return inner_.mac(); }
  uint16_t mtu() const override { return inner_.mtu(); }
  bool link_up() const override { return inner_.link_up(); }
  drivers::PortStats stats() const override { return inner_.stats(); }
  rte_mempool* pool() const override { return inner_.pool(); }
  std::string name() const override { return inner_.name(); }
  std::string netdev() const override { return inner_.netdev(); }

 private:
  drivers::Port& inner_;
  PingSession* session_ = nullptr;
};

}  // namespace uroce::tools
