// The delay-based controller (cc = "delay"; DESIGN.md "Congestion
// control"), in the family of TIMELY and Swift, for networks that drop and
// delay but never mark ECN: a QP's rate follows the round trip its
// requester measures on ACKs (one timed packet at a time, Karn's rule;
// completer_rtt_sample).
//
//   rtt <= target   rate += ai (one sample per round trip: additive per RTT)
//   rtt >  target   rate *= 1 - min(beta * (rtt - target) / rtt, max_mdf),
//                   at most once per round trip (the last cut's effect is
//                   not measured before then); never below min_rate
//
// At the maximum rate it is inactive and costs nothing.  Pure state and
// arithmetic, as dcqcn.hpp: the caller passes the time and the samples.
#pragma once

#include <algorithm>
#include <cstdint>

#include "lib/config/cc.hpp"

namespace uroce::cc {

class DelayCc {
 public:
  void reset(const config::DelayConfig& p, uint64_t port_bps) noexcept {
    *this = DelayCc{};
    max_ = p.max_rate_mbps != 0 ? uint64_t{p.max_rate_mbps} * kBpsPerMbps : port_bps;
    min_ = std::min(max_, uint64_t{p.min_rate_mbps} * kBpsPerMbps);
    ai_ = uint64_t{p.ai_mbps} * kBpsPerMbps;
    target_ns_ = uint64_t{p.target_us} * kNsPerUs;
    beta_pct_ = std::min<uint32_t>(p.beta_pct, 100);
    max_mdf_pct_ = std::min<uint32_t>(p.max_mdf_pct, 99);
    rate_ = max_;
  }

  // A round-trip sample of `rtt_ns` taken at `now`.
  void on_rtt(uint64_t now, uint64_t rtt_ns) noexcept {
    last_rtt_ns_ = rtt_ns;
    if (rtt_ns <= target_ns_) {
      rate_ = std::min(max_, rate_ + ai_);
      return;
    }
    if (cut_once_ && now - last_cut_ns_ < rtt_ns) return;  // once per round trip
    const uint64_t over = rtt_ns - target_ns_;
    const uint64_t pct_x100 = std::min<uint64_t>(beta_pct_ * over * 100 / rtt_ns, uint64_t{max_mdf_pct_} * 100);
    rate_ = std::max(min_, rate_ - rate_ * pct_x100 / 10'000);
    last_cut_ns_ = now;
    cut_once_ = true;
    ++cuts_;
  }

  bool active() const noexcept { return rate_ < max_; }
  uint64_t rate_bps() const noexcept { return rate_; }
  uint64_t max_bps() const noexcept { return max_; }
  uint64_t last_rtt_ns() const noexcept { return last_rtt_ns_; }
  uint64_t cuts() const noexcept { return cuts_; }

 private:
  static constexpr uint64_t kBpsPerMbps = 1'000'000;
  static constexpr uint64_t kNsPerUs = 1000;
  uint64_t max_ = 0, min_ = 0, ai_ = 0, target_ns_ = 0;
  uint32_t beta_pct_ = 0, max_mdf_pct_ = 0;
  uint64_t rate_ = 0;
  uint64_t last_cut_ns_ = 0;
  bool cut_once_ = false;
  uint64_t last_rtt_ns_ = 0;
  uint64_t cuts_ = 0;
};

}  // namespace uroce::cc
