// Seeded fault injection: the model (FaultSpec), its text form (the
// UROCE_FAULTS variable), the per-link engine that applies it
// (FaultInjector, used by the sim wire) and FaultPort, which wraps any
// Port so loss can be injected against a kernel or hardware peer.
//
// ---- UROCE_FAULTS ------------------------------------------------------------
// Comma-separated key=value items; spaces around items are ignored; every
// key at most once; "" means no faults.
//
//   drop=P               drop a frame with probability P               [0, 1]
//   dup=P                deliver a frame twice                         [0, 1]
//   reorder=P            hold a frame back so that 1..reorder_window
//                        later frames overtake it                      [0, 1]
//   reorder_window=N     the most frames that may overtake a held one  1..1024 (8)
//   reorder_hold_us=T    release a held frame after T µs even if fewer
//                        frames came by (keeps the last frame of a
//                        burst from waiting for traffic forever)       (0, 10 s] (1000)
//   corrupt=P            flip corrupt_bits distinct random bits        [0, 1]
//   corrupt_bits=N       bits flipped in a corrupted frame             1..64 (1)
//   delay_us=T           fixed one-way delay                           [0, 10 s] (0)
//   jitter_us=T          extra delay, uniform in [0, T]; never reorders [0, 10 s] (0)
//   rate_mbps=R          bandwidth cap in Mbit/s (frame bytes as the
//                        mbuf holds them, no preamble/IFG/FCS); frames
//                        wait for the link to serialise them; 0 = none  [0, 10^6] (0)
//   ce=P                 mark an ECN-capable IP frame CE (ECN 11) with
//                        probability P, as netem's "ecn"               [0, 1]
//   ecn_mark_us=T        with rate_mbps: mark an ECN-capable frame CE
//                        when it waited longer than T for the link (a
//                        congested switch port's step marking on the
//                        sojourn time, as fq_codel's ce_threshold);
//                        0 = never                                     [0, 10 s] (0)
//                        Not-ECT frames are never marked (nor dropped
//                        for it); the ICRC masks the TOS (A17), so
//                        RoCEv2 frames stay valid
//   dir=rx|tx|both       which way FaultPort applies the faults        (both)
//   seed=S               the PRNG seed, an unsigned 64-bit integer     (1)
//
// Example: UROCE_FAULTS=drop=0.01,reorder=0.01,reorder_window=8,delay_us=50,seed=42
// Errors name the key and the reason: "drop: '1.5' is outside [0, 1]".
//
// ---- determinism ---------------------------------------------------------------
// A frame's fate is a pure function of (seed, stream, n): n counts the
// frames submitted to that injector, the stream tells links and directions
// apart.  Each decision (drop, dup, reorder, corrupt) and each parameter
// (which bits, how many frames overtake, how much jitter) hashes those
// with its own key (the splitmix64 finaliser; counter-based, no library
// distributions), so the same seed gives the same fates for the same
// frame sequence on every build, and turning one fault on never changes
// the choices another makes.  Times depend on the clock: with a manual
// WireClock, whole delivery traces repeat exactly.
//
// ---- the order a frame goes through ---------------------------------------------
//   drop → corrupt → duplicate (the twin is a copy of the corrupted frame)
//   → reorder (the original is held; its twin, if any, goes on) → timing:
//   wait for the link (rate), + delay + jitter, never before the frame
//   ahead of it → the DelayQueue, or queue_full if that is full.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drivers/clock.hpp"
#include "drivers/delay_queue.hpp"
#include "drivers/port.hpp"
#include "drivers/result.hpp"

namespace uroce::drivers {

// ---- the model ------------------------------------------------------------------

enum class FaultDir : uint8_t { kRx = 1, kTx = 2, kBoth = 3 };

inline constexpr bool applies(FaultDir spec, FaultDir d) noexcept {
  return (static_cast<uint8_t>(spec) & static_cast<uint8_t>(d)) != 0;
}

inline constexpr uint32_t kDefaultReorderWindow = 8;
inline constexpr uint32_t kMaxReorderWindow = 1024;
inline constexpr uint64_t kDefaultReorderHoldNs = 1'000'000;  // 1 ms
inline constexpr uint32_t kMaxCorruptBits = 64;
inline constexpr uint64_t kMaxFaultTimeNs = 10'000'000'000;   // 10 s
inline constexpr uint64_t kMaxRateBps = 1'000'000'000'000;    // 1 Tbit/s
inline constexpr uint64_t kDefaultFaultSeed = 1;
inline constexpr std::string_view kFaultsEnv = "UROCE_FAULTS";

struct FaultSpec {
  double drop = 0;
  double dup = 0;
  double reorder = 0;
  uint32_t reorder_window = kDefaultReorderWindow;
  uint64_t reorder_hold_ns = kDefaultReorderHoldNs;
  double corrupt = 0;
  uint32_t corrupt_bits = 1;
  uint64_t delay_ns = 0;
  uint64_t jitter_ns = 0;
  uint64_t rate_bps = 0;  // 0: no cap
  double ce = 0;
  uint64_t ecn_mark_ns = 0;  // 0: no sojourn marking
  FaultDir dir = FaultDir::kBoth;
  uint64_t seed = kDefaultFaultSeed;

  // True when the spec changes anything at all.
  bool active() const noexcept {
    return drop > 0 || dup > 0 || reorder > 0 || corrupt > 0 || delay_ns > 0 || jitter_ns > 0 || rate_bps > 0 ||
           ce > 0;
  }
  bool operator==(const FaultSpec&) const = default;
};

// Checks every field against the ranges above.
Status validate(const FaultSpec& spec);

// The UROCE_FAULTS text form, both ways.  to_string lists every key, so
// parse_fault_spec(to_string(s)) == s.
Result<FaultSpec> parse_fault_spec(std::string_view text);
std::string to_string(const FaultSpec& spec);

// UROCE_FAULTS from the environment: nullopt when unset, else the parse.
std::optional<Result<FaultSpec>> fault_spec_from_env();

// ---- counters: one per thing a fault did ----------------------------------------

enum class FaultCounter : uint8_t {
  kDropped,      // drop=
  kDuplicated,   // dup= (twins made)
  kReordered,    // reorder= (frames held back)
  kCorrupted,    // corrupt=
  kDelayed,      // frames given delay or jitter > 0
  kRateLimited,  // frames that waited for the link (rate_mbps)
  kDownDropped,  // lost because a link was down (sim wire)
  kQueueFull,    // lost because the DelayQueue was full
  kNoMbuf,       // copies (twins, flooded frames) the pool could not supply
  kCeMarked,     // ce= and ecn_mark_us= (ECN-capable frames marked CE)
  kCount,
};

inline constexpr std::array<std::string_view, static_cast<size_t>(FaultCounter::kCount)> kFaultCounterNames = {
    "dropped", "duplicated", "reordered", "corrupted", "delayed",
    "rate_limited", "down_dropped", "queue_full", "no_mbuf", "ce_marked",
};

struct FaultCounters {
  std::array<uint64_t, static_cast<size_t>(FaultCounter::kCount)> n{};

  uint64_t& operator[](FaultCounter c) noexcept { return n[static_cast<size_t>(c)]; }
  uint64_t operator[](FaultCounter c) const noexcept { return n[static_cast<size_t>(c)]; }
  FaultCounters& operator+=(const FaultCounters& o) noexcept {
    for (size_t i = 0; i < n.size(); ++i) n[i] += o.n[i];
    return *this;
  }
  // Frames that never arrived (twins that failed are not losses).
  uint64_t lost() const noexcept {
    return (*this)[FaultCounter::kDropped] + (*this)[FaultCounter::kDownDropped] + (*this)[FaultCounter::kQueueFull];
  }
};

// ---- the injector ------------------------------------------------------------------

// Applies one FaultSpec to one direction of one link.  Data-path methods
// never allocate (twins come from the pool passed in) and never throw.
// Not thread-safe; its owner serialises calls.
class FaultInjector {
 public:
  FaultInjector() = default;
  FaultInjector(const FaultInjector&) = delete;
  FaultInjector& operator=(const FaultInjector&) = delete;
  ~FaultInjector() { discard_held(); }

  // Control path.  `stream` tells apart the injectors that share a seed
  // (the links of a wire, the two directions of a FaultPort).  Fails with
  // EBUSY while frames are held: release_all() them first.
  Status configure(const FaultSpec& spec, uint64_t stream);

  const FaultSpec& spec() const noexcept { return spec_; }
  bool active() const noexcept { return active_; }
  uint32_t held() const noexcept { return held_n_; }
  const FaultCounters& counters() const noexcept { return counters_; }

  // Takes `m` through the faults into `out` (or frees it).  `copy_pool`
  // supplies duplicates.
  void submit(rte_mbuf* m, uint64_t now_ns, rte_mempool* copy_pool, DelayQueue& out) noexcept;
  // Sends on held frames whose reorder_hold time has passed.
  void release_expired(uint64_t now_ns, DelayQueue& out) noexcept;
  // Sends on every held frame (before reconfiguring or a clean stop).
  void release_all(uint64_t now_ns, DelayQueue& out) noexcept;
  // Frees every held frame (teardown).
  void discard_held() noexcept;

 private:
  enum class Stream : uint8_t {
    kDrop, kDup, kReorder, kCorrupt,      // decisions
    kCorruptBit, kReorderDepth, kJitter,  // parameters
    kCe,                                  // a decision added later: after them, so their keys stay
    kCount,
  };
  struct Chance {  // a probability as an integer threshold on 64 random bits
    uint64_t threshold = 0;
    bool always = false;
    bool never() const noexcept { return threshold == 0 && !always; }
  };
  struct Held {
    rte_mbuf* m;
    uint64_t seq;          // submit order; a frame overtakes this one if it is newer
    uint32_t remaining;    // newer frames still to go by before release
    uint64_t deadline_ns;  // released by then at the latest
  };

  static Chance chance(double p) noexcept;
  uint64_t draw(Stream s, uint64_t seq, uint64_t j = 0) const noexcept;
  bool roll(Stream s, uint64_t seq, Chance c) const noexcept;
  uint64_t uniform(Stream s, uint64_t seq, uint64_t j, uint64_t bound) const noexcept;  // [0, bound)

  void corrupt(rte_mbuf* m, uint64_t seq) noexcept;
  static bool mark_ce(rte_mbuf* m) noexcept;
  void hold(rte_mbuf* m, uint64_t seq, uint64_t now_ns) noexcept;
  void emit(rte_mbuf* m, uint64_t seq, uint64_t copy, uint64_t now_ns, DelayQueue& out) noexcept;
  void schedule(rte_mbuf* m, uint64_t seq, uint64_t copy, uint64_t now_ns, DelayQueue& out) noexcept;
  void pass_held(uint64_t seq) noexcept;
  void release_ready(uint64_t now_ns, DelayQueue& out) noexcept;

  FaultSpec spec_;
  bool active_ = false;
  std::array<uint64_t, static_cast<size_t>(Stream::kCount)> keys_{};
  Chance drop_, dup_, reorder_, corrupt_, ce_;
  uint64_t next_seq_ = 0;
  uint64_t link_free_ns_ = 0;  // when the link finishes the frame it is sending (rate cap)
  uint64_t last_due_ns_ = 0;   // due times never decrease: jitter does not reorder
  std::vector<Held> held_;     // capacity reorder_window, sized by configure()
  uint32_t held_n_ = 0;
  FaultCounters counters_;
};

// ---- FaultPort ------------------------------------------------------------------------

struct FaultPortConfig {
  uint32_t queue_frames = 1024;       // per direction; frames beyond it are queue_full
  const WireClock* clock = nullptr;   // null: steady_clock
};

// Wraps a Port (not owned; it must outlive the FaultPort) and applies a
// FaultSpec on receive, transmit or both (spec.dir).  Like the port it
// wraps, it is driven by one thread.  A direction without faults passes
// bursts straight through, back-pressure included.  With faults, tx_burst
// takes every frame; delayed frames go out on a later tx_burst or
// rx_burst (the engine's poll loop calls rx_burst every iteration).
class FaultPort final : public Port {
 public:
  static Result<std::unique_ptr<FaultPort>> create(Port& inner, const FaultSpec& spec,
                                                   const FaultPortConfig& config = {});
  ~FaultPort() override;

  uint16_t rx_burst(rte_mbuf** pkts, uint16_t n) override;
  uint16_t tx_burst(rte_mbuf** pkts, uint16_t n) override;

  wire::MacAddr mac() const override { return inner_.mac(); }
  uint16_t mtu() const override { return inner_.mtu(); }
  bool link_up() const override { return inner_.link_up(); }
  // The inner port's, with injected losses added to rx_dropped/tx_dropped.
  PortStats stats() const override;
  rte_mempool* pool() const override { return inner_.pool(); }
  std::string name() const override { return inner_.name() + "+faults"; }
  std::string netdev() const override { return inner_.netdev(); }

  const FaultSpec& spec() const noexcept { return spec_; }
  const FaultCounters& counters(FaultDir d) const noexcept;  // kRx or kTx
  uint32_t queued(FaultDir d) const noexcept;                // frames held or waiting, kRx or kTx

 private:
  static constexpr uint64_t kRxStream = 1;
  static constexpr uint64_t kTxStream = 2;
  static constexpr uint16_t kBurst = 32;

  FaultPort(Port& inner, const FaultSpec& spec, const FaultPortConfig& config);
  uint64_t now_ns() const noexcept { return clock_->now_ns(); }
  void flush_tx(uint64_t now_ns) noexcept;
  void pull_rx(uint64_t now_ns) noexcept;

  Port& inner_;
  FaultSpec spec_;
  WireClock own_clock_;
  const WireClock* clock_;
  FaultInjector rx_, tx_;
  DelayQueue rx_q_, tx_q_;
};

}  // namespace uroce::drivers
