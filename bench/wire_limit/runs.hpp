// The four modes, each a loop over one started Endpoint, and what they
// measure.  They run on the process's one lcore; the data path allocates
// nothing (samples are reserved before the first round trip).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include <rte_mbuf.h>

#include "bench/wire_limit/endpoint.hpp"
#include "bench/wire_limit/options.hpp"

namespace uroce::bench::wire_limit {

// ---- tunables -------------------------------------------------------------
// How long an initiator says hello before it decides no responder runs.
inline constexpr double kGreetSeconds = 10.0;

// Nearest-rank percentiles of round-trip times, in nanoseconds.
struct LatencySummary {
  uint64_t samples = 0;
  double min_ns = 0;
  double median_ns = 0;
  double p90_ns = 0;
  double p99_ns = 0;
  double p999_ns = 0;
  double max_ns = 0;
  double mean_ns = 0;
};

// Sorts `ticks` (TSC ticks) in place.
LatencySummary summarize(std::span<uint64_t> ticks, uint64_t tsc_hz);

struct PingResult {
  uint64_t companions = 0;   // kCompanion frames received (the responder's --companions)
  LatencySummary rtt;
  uint64_t attempts = 0;     // measured round trips tried
  uint64_t lost = 0;         // no reply within the timeout (then the next seq)
  uint64_t warmup_lost = 0;
  uint64_t stale = 0;        // replies to an earlier, timed-out seq, and other strays
  uint64_t foreign = 0;      // not our frames (kernel ARP, ND, ...)
  double seconds = 0;        // measured phase
  double round_trips_per_s = 0;
  bool done_acked = false;
};

// Pong and rx: the responder's loop.
struct ResponderResult {
  uint64_t companions = 0;   // kCompanion frames received (the initiator's --companions)
  uint64_t requests = 0;     // kRequest frames received (pong: and echoed)
  uint64_t echo_failed = 0;  // pong: replies the wire would not take
  uint64_t foreign = 0;
  uint64_t unexpected = 0;   // ours, but not for a responder
  bool greeted = false;      // a kHello came
  bool done = false;         // the initiator said kDone
  std::optional<uint64_t> peer_sent;  // rx: what the tx side says it sent
  double seconds = 0;        // first to last request
  double frames_per_s = 0;   // rx: requests / seconds
  // --duplex: the stream this end sent back, from the hello to the done.
  uint64_t sent = 0;
  double tx_seconds = 0;
  double tx_frames_per_s = 0;
};

struct TxResult {
  uint64_t sent = 0;
  uint64_t busy_polls = 0;   // tx_bursts that took less than offered (the rest is retried)
  uint64_t pool_empty = 0;   // bursts skipped for want of mbufs
  double seconds = 0;
  double frames_per_s = 0;
  bool done_acked = false;
  // --duplex: the rx end's stream, received here (first to last frame).
  uint64_t received = 0;
  double rx_seconds = 0;
  double rx_frames_per_s = 0;
};

// The sending half of a stream: a burst of fresh requests per step, the
// frames the wire refused last time at its head, so back-pressure (memif)
// costs no sequence numbers.
class Sender {
 public:
  explicit Sender(const Endpoint& ep) noexcept : ep_(ep) {}
  ~Sender() { rte_pktmbuf_free_bulk(bufs_, pending_); }
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  void step(uint32_t tsc) noexcept;  // offers one burst to the wire
  uint64_t sent = 0;
  uint64_t busy_polls = 0;
  uint64_t pool_empty = 0;

 private:
  const Endpoint& ep_;
  rte_mbuf* bufs_[kMaxBurst];
  uint16_t pending_ = 0;
  uint32_t seq_ = 0;
};

// A run that could not start (no responder answered) is an Error.
drivers::Result<PingResult> run_ping(const Endpoint& ep, const Options& o);
drivers::Result<TxResult> run_tx(const Endpoint& ep, const Options& o);
// echo: pong (turn requests around) or rx (count and drop them).
ResponderResult run_responder(const Endpoint& ep, const Options& o, bool echo);

}  // namespace uroce::bench::wire_limit
