// DCQCN's reaction point: one sending QP's rate, cut when CNPs come back
// and recovered when they stop (IBA Annex A17 CA17-45/46 ask for a cut and
// a recovery and leave the amounts to the implementation; this follows
// ConnectX's algorithm and parameters, DESIGN.md "Congestion control").
//
// Pure state and arithmetic: the caller passes the time (ns) and the bytes
// sent, arms one timer at `deadline()`, and reads `rate_bps()` for its
// pacer.  No allocation, no clock of its own, no floating point.
//
//   first CNP      alpha := initial_alpha; rate := rate_to_set_on_first_cnp
//                  (0: unchanged); the three periods start; no cut yet
//   every alpha period (dce_tcp_rtt)
//                  alpha := alpha*g/1024 + (1024-g if a CNP came in it)
//   every monitor period (rate_reduce_monitor_period), if a CNP came in it:
//                  target := rate when clamped (clamp_tgt_rate, or a byte
//                  stage passed, or clamp_after_time_inc and a timer stage);
//                  rate -= min(rate*alpha >> gd, rate*(100-min_dec_fac)%);
//                  rate >= min_rate; stages and byte counter cleared; the
//                  increase timer starts again
//   every time_reset (T stage) and every byte_reset*64 bytes (BC stage):
//                  target += hai if min(T,BC) > threshold, else += ai if
//                  max(T,BC) >= threshold (else fast recovery: target kept);
//                  target <= max; rate := (rate + target) / 2
//   back at max    rate and target at the maximum: the QP leaves DCQCN (no
//                  timer, no pacing); its next CNP is a first one again.
//
// Periods are evaluated lazily: whatever call comes first after a boundary
// (a CNP, a send, the timer) applies every boundary passed since, in order.
#pragma once

#include <cstdint>

#include "lib/config/cc.hpp"

namespace uroce::cc {

class Dcqcn {
 public:
  // At the maximum rate, inactive.  `port_bps`: the port's speed, the
  // maximum when rpg_max_rate is 0.
  void reset(const config::DcqcnConfig& p, uint64_t port_bps) noexcept;

  // A CNP for this QP at `now`.
  void on_cnp(uint64_t now) noexcept;
  // `bytes` sent at `now` (the byte counter's stages).
  void on_sent(uint64_t now, uint32_t bytes) noexcept;
  // Apply every period boundary up to `now` (the timer's callback).
  void advance(uint64_t now) noexcept;
  // When the timer should next fire: the increase timer's expiry or a
  // pending cut's monitor boundary; 0 when inactive.
  uint64_t deadline() const noexcept;

  bool active() const noexcept { return active_; }
  uint64_t rate_bps() const noexcept { return rate_; }
  uint64_t target_bps() const noexcept { return target_; }
  uint64_t max_bps() const noexcept { return max_; }
  uint32_t alpha() const noexcept { return static_cast<uint32_t>(alpha_ >> 10); }  // /1024
  uint64_t alpha_fine() const noexcept { return alpha_; }  // /2^20
  uint32_t time_stage() const noexcept { return t_stage_; }
  uint32_t byte_stage() const noexcept { return bc_stage_; }
  uint64_t cuts() const noexcept { return cuts_; }

 private:
  void advance_alpha(uint64_t upto) noexcept;
  void advance_cut(uint64_t now) noexcept;
  void advance_increase(uint64_t now) noexcept;
  void cut(uint64_t at) noexcept;
  void increase() noexcept;
  void maybe_leave() noexcept;

  config::DcqcnConfig p_{};
  uint64_t max_ = 0;      // bit/s
  uint64_t min_ = 0;
  uint64_t ai_ = 0;
  uint64_t hai_ = 0;
  uint64_t alpha_period_ = 1000;   // ns
  uint64_t monitor_period_ = 4000;
  uint64_t increase_period_ = 300'000;
  uint64_t byte_reset_ = 0;        // bytes

  bool active_ = false;
  uint64_t rate_ = 0;
  uint64_t target_ = 0;
  uint64_t alpha_ = 0;             // /2^20 (dcqcn.cpp: 1024ths with 10 more bits)
  bool alpha_cnp_ = false;         // a CNP in the current alpha period
  bool cut_cnp_ = false;           // a CNP in the current monitor period
  uint64_t alpha_next_ = 0;        // next boundaries (ns)
  uint64_t monitor_next_ = 0;
  uint64_t increase_next_ = 0;
  uint32_t t_stage_ = 0;
  uint32_t bc_stage_ = 0;
  uint64_t bytes_ = 0;             // since the last byte stage
  uint64_t cuts_ = 0;
};

}  // namespace uroce::cc
