// DCQCN's reaction point (dcqcn.hpp has the rules).
#include "transport/cc/dcqcn.hpp"

#include <algorithm>

namespace uroce::cc {
namespace {

constexpr uint64_t kBpsPerMbps = 1'000'000;
constexpr uint64_t kNsPerUs = 1000;
// alpha is a fraction of 1024 as ConnectX states it (INITIAL_ALPHA_VALUE,
// DCE_TCP_G), held with 10 more bits: in 1024ths alone a CNP in every
// period could not raise it (floor(a*1019/1024) + 5 == a for every a from
// 820 up), so its rise would stop wherever it was.
constexpr uint32_t kAlphaOne = 1024;
constexpr uint32_t kAlphaFrac = 10;
constexpr uint64_t kAlphaMaxFine = (uint64_t{1023} << kAlphaFrac) | ((uint64_t{1} << kAlphaFrac) - 1);
constexpr uint64_t kByteUnit = 64;    // RPG_BYTE_RESET counts 64-byte units

}  // namespace

void Dcqcn::reset(const config::DcqcnConfig& p, uint64_t port_bps) noexcept {
  *this = Dcqcn{};
  p_ = p;
  max_ = p.rpg_max_rate_mbps != 0 ? uint64_t{p.rpg_max_rate_mbps} * kBpsPerMbps : port_bps;
  min_ = std::min(max_, uint64_t{p.rpg_min_rate_mbps} * kBpsPerMbps);
  ai_ = uint64_t{p.rpg_ai_rate_mbps} * kBpsPerMbps;
  hai_ = uint64_t{p.rpg_hai_rate_mbps} * kBpsPerMbps;
  alpha_period_ = std::max<uint64_t>(1, uint64_t{p.dce_tcp_rtt_us} * kNsPerUs);
  monitor_period_ = std::max<uint64_t>(1, uint64_t{p.rate_reduce_monitor_period_us} * kNsPerUs);
  increase_period_ = std::max<uint64_t>(1, uint64_t{p.rpg_time_reset_us} * kNsPerUs);
  byte_reset_ = std::max<uint64_t>(1, uint64_t{p.rpg_byte_reset} * kByteUnit);
  rate_ = target_ = max_;
}

void Dcqcn::on_cnp(uint64_t now) noexcept {
  if (!active_) {
    // The first CNP (or the first since the QP was back at its maximum):
    // alpha starts high, the rate is set if so configured, and the periods
    // start now.  This CNP itself cuts nothing (its flags stay clear).
    active_ = true;
    alpha_ = std::min<uint64_t>(uint64_t{p_.initial_alpha_value} << kAlphaFrac, kAlphaMaxFine);
    if (p_.rate_to_set_on_first_cnp_mbps != 0) {
      rate_ = target_ = std::clamp(uint64_t{p_.rate_to_set_on_first_cnp_mbps} * kBpsPerMbps, min_, max_);
    }
    alpha_cnp_ = cut_cnp_ = false;
    alpha_next_ = now + alpha_period_;
    monitor_next_ = now + monitor_period_;
    increase_next_ = now + increase_period_;
    t_stage_ = bc_stage_ = 0;
    bytes_ = 0;
    return;
  }
  advance(now);
  if (!active_) {  // the periods up to now brought it back to the maximum
    on_cnp(now);
    return;
  }
  alpha_cnp_ = true;
  if (!cut_cnp_ && monitor_next_ <= now) {  // the monitor period this CNP falls in ends at the next boundary
    monitor_next_ += ((now - monitor_next_) / monitor_period_ + 1) * monitor_period_;
  }
  cut_cnp_ = true;
}

void Dcqcn::on_sent(uint64_t now, uint32_t bytes) noexcept {
  if (!active_) return;
  advance(now);
  if (!active_) return;
  bytes_ += bytes;
  while (active_ && bytes_ >= byte_reset_) {
    bytes_ -= byte_reset_;
    increase();  // the stage counts after the increase it causes
    ++bc_stage_;
    maybe_leave();
  }
}

void Dcqcn::advance(uint64_t now) noexcept {
  // The boundaries in time order, so that a cut sees the alpha of its
  // moment and an increase the stages of its moment.  Monitor boundaries
  // matter only with a CNP in their period (on_cnp aligns monitor_next_).
  constexpr uint64_t kNever = ~uint64_t{0};
  while (active_) {
    const uint64_t next = std::min(cut_cnp_ ? monitor_next_ : kNever, increase_next_);
    advance_alpha(std::min(now, next));
    if (next > now) break;
    if (cut_cnp_ && monitor_next_ == next) advance_cut(next);
    if (increase_next_ == next && active_) advance_increase(next);
  }
}

// Every alpha period boundary up to `upto`: the first takes the flag, the
// rest decay (g/1024 each; the integer reaches 0 within about 2,800
// periods, where the loop stops).
void Dcqcn::advance_alpha(uint64_t upto) noexcept {
  if (alpha_next_ > upto) return;
  const uint64_t periods = (upto - alpha_next_) / alpha_period_ + 1;
  const uint32_t g = std::min(p_.dce_tcp_g, kAlphaOne);
  uint64_t a = alpha_ * g / kAlphaOne + (alpha_cnp_ ? uint64_t{kAlphaOne - g} << kAlphaFrac : 0);
  alpha_cnp_ = false;
  for (uint64_t i = 1; i < periods && a != 0; ++i) a = a * g / kAlphaOne;
  alpha_ = std::min(a, kAlphaMaxFine);
  alpha_next_ += periods * alpha_period_;
}

// The monitor boundary at `at` closes a period with a CNP in it: the cut.
void Dcqcn::advance_cut(uint64_t at) noexcept {
  cut_cnp_ = false;
  cut(at);
  monitor_next_ = at + monitor_period_;
}

void Dcqcn::cut(uint64_t at) noexcept {
  const bool clamp = p_.clamp_tgt_rate || bc_stage_ > 0 || (p_.clamp_tgt_rate_after_time_inc && t_stage_ > 0);
  if (clamp) target_ = rate_;
  const uint64_t by_alpha = (rate_ * alpha_) >> (p_.rpg_gd + kAlphaFrac);
  const uint64_t by_floor = rate_ * (100 - std::min<uint32_t>(p_.rpg_min_dec_fac, 100)) / 100;
  rate_ = std::max(min_, rate_ - std::min(by_alpha, by_floor));
  t_stage_ = bc_stage_ = 0;
  bytes_ = 0;
  increase_next_ = at + increase_period_;  // the increase timer starts again
  ++cuts_;
}

void Dcqcn::advance_increase(uint64_t at) noexcept {
  increase();
  ++t_stage_;
  increase_next_ = at + increase_period_;
  maybe_leave();
}

void Dcqcn::increase() noexcept {
  const uint32_t th = p_.rpg_threshold;
  if (std::min(t_stage_, bc_stage_) > th) {
    target_ += hai_;                       // hyper increase
  } else if (std::max(t_stage_, bc_stage_) >= th) {
    target_ += ai_;                        // additive increase
  }                                        // else fast recovery: toward the target kept
  target_ = std::min(target_, max_);
  rate_ = (rate_ + target_ + 1) / 2;       // rounded up: reaches the target
}

// Back at the maximum with the target there: no limit left to keep.
void Dcqcn::maybe_leave() noexcept {
  if (rate_ >= max_ && target_ >= max_ && !cut_cnp_) {
    rate_ = target_ = max_;
    active_ = false;
  }
}

uint64_t Dcqcn::deadline() const noexcept {
  if (!active_) return 0;
  return cut_cnp_ ? std::min(monitor_next_, increase_next_) : increase_next_;
}

}  // namespace uroce::cc
