// Congestion control settings of a device (DESIGN.md "Congestion control"):
// ECN on data packets, the notification point (CNPs sent for CE marks) and
// the reaction point (DCQCN: a QP's rate cut on CNPs and recovered).
//
// Plain values: lib/config reads them ([[device]] ecn, cc and its
// [device.dcqcn] table), transport/cc runs them.  Every default is
// ConnectX's factory value (NVConfig / DOCA "DCQCN CC Parameters", names in
// the comments), so that uroce's flows share a fabric fairly with
// ConnectX's; the reaction point's algorithm is local policy (IBA Annex A17,
// CA17-45/46 leave the amounts outside the specification).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace uroce::config {

// How a QP's send rate is controlled.  kDcqcn: cut on CNPs and recovered,
// as ConnectX does; kDelay: DCQCN as well, and the rate also follows the
// round-trip time (for networks that drop and delay but never mark ECN);
// kNone: CNPs received are counted and ignored.
enum class CcMode : uint8_t { kDcqcn, kDelay, kNone };

struct DcqcnConfig {
  // Reaction point (rate limiter of the sending QP).
  uint32_t rpg_time_reset_us = 300;      // RPG_TIME_RESET: rate-increase timer period
  uint32_t rpg_byte_reset = 32767;       // RPG_BYTE_RESET: rate-increase byte counter, in 64-byte units
  uint32_t rpg_threshold = 1;            // RPG_THRESHOLD: increase stages before additive/hyper increase
  uint32_t rpg_max_rate_mbps = 0;        // RPG_MAX_RATE: 0 = the port's speed
  uint32_t rpg_ai_rate_mbps = 5;         // RPG_AI_RATE: additive-increase step of the target
  uint32_t rpg_hai_rate_mbps = 50;       // RPG_HAI_RATE: hyper-increase step
  uint32_t rpg_gd = 11;                  // RPG_GD: a cut is rate * alpha / 2^rpg_gd (alpha in 1/1024)
  uint32_t rpg_min_dec_fac = 50;         // RPG_MIN_DEC_FAC: one cut leaves at least this % of the rate
  uint32_t rpg_min_rate_mbps = 1;        // RPG_MIN_RATE: the floor
  uint32_t rate_to_set_on_first_cnp_mbps = 0;  // RATE_TO_SET_ON_FIRST_CNP: 0 = unchanged
  uint32_t dce_tcp_g = 1019;             // DCE_TCP_G: alpha keeps g/1024 of itself per period
  uint32_t dce_tcp_rtt_us = 1;           // DCE_TCP_RTT: alpha update period
  uint32_t rate_reduce_monitor_period_us = 4;  // RATE_REDUCE_MONITOR_PERIOD: at most one cut per period
  uint32_t initial_alpha_value = 1023;   // INITIAL_ALPHA_VALUE: alpha on the first CNP (/1024)
  bool clamp_tgt_rate = false;           // CLAMP_TGT_RATE: target := rate on every cut
  bool clamp_tgt_rate_after_time_inc = true;  // CLAMP_TGT_RATE_AFTER_TIME_INC
  // Notification point (CNPs this device sends).
  uint32_t min_time_between_cnps_us = 4; // MIN_TIME_BETWEEN_CNPS: per QP
  uint32_t cnp_dscp = 48;                // CNP_DSCP
  uint32_t cnp_802p_prio = 6;            // CNP_802P_PRIO: the CNP's VLAN priority (tagged devices)

  friend bool operator==(const DcqcnConfig&, const DcqcnConfig&) = default;
};

// The delay-based controller (cc = "delay"; transport/cc/delay.hpp), in
// the family of TIMELY and Swift: the round trip the requester measures
// on its ACKs against a target.
struct DelayConfig {
  uint32_t target_us = 100;       // the round trip it aims for (this host's loop and the path's base included)
  uint32_t ai_mbps = 50;          // added per round trip at or under the target
  uint32_t beta_pct = 80;         // over it: rate *= 1 - beta * (rtt - target) / rtt ...
  uint32_t max_mdf_pct = 50;      // ... by at most this much at a time, at most once per round trip
  uint32_t min_rate_mbps = 10;    // the floor
  uint32_t max_rate_mbps = 0;     // 0: the port's speed

  friend bool operator==(const DelayConfig&, const DelayConfig&) = default;
};

struct CcConfig {
  bool ecn = true;             // data packets leave ECN-capable, ECT(0) (A17.3.1.1.3)
  CcMode mode = CcMode::kDcqcn;
  // Path changes (Google's PLB): a reliable QP whose last `repath_rounds`
  // round trips each saw congestion (a CNP, a delay cut) moves to another
  // UDP source port, the ECMP entropy of every switch on the way, the next
  // time nothing of it is in flight (so no packet of the new path can pass
  // one of the old: the peer sees no reordering).
  bool repath = false;
  uint32_t repath_rounds = 3;
  DcqcnConfig dcqcn;
  DelayConfig delay;

  friend bool operator==(const CcConfig&, const CcConfig&) = default;
};

// The keys of a parameter table ([device.dcqcn], [device.delay]): name,
// member, range.  One table each for the reader, the writer and the
// documentation.
template <class C>
struct ParamKey {
  std::string_view name;
  uint32_t C::*u32 = nullptr;  // an integer key
  bool C::*flag = nullptr;     // a boolean key
  uint32_t lo = 0;
  uint32_t hi = 0;
};
using DcqcnKey = ParamKey<DcqcnConfig>;
using DelayKey = ParamKey<DelayConfig>;

inline constexpr uint32_t kMaxRateMbps = 400'000;  // beyond any port uroce drives

inline constexpr std::array kDcqcnKeys{
    DcqcnKey{"rpg_time_reset_us", &DcqcnConfig::rpg_time_reset_us, nullptr, 1, 1'000'000},
    DcqcnKey{"rpg_byte_reset", &DcqcnConfig::rpg_byte_reset, nullptr, 1, 1u << 24},
    DcqcnKey{"rpg_threshold", &DcqcnConfig::rpg_threshold, nullptr, 1, 31},
    DcqcnKey{"rpg_max_rate_mbps", &DcqcnConfig::rpg_max_rate_mbps, nullptr, 0, kMaxRateMbps},
    DcqcnKey{"rpg_ai_rate_mbps", &DcqcnConfig::rpg_ai_rate_mbps, nullptr, 1, kMaxRateMbps},
    DcqcnKey{"rpg_hai_rate_mbps", &DcqcnConfig::rpg_hai_rate_mbps, nullptr, 1, kMaxRateMbps},
    DcqcnKey{"rpg_gd", &DcqcnConfig::rpg_gd, nullptr, 1, 15},
    DcqcnKey{"rpg_min_dec_fac", &DcqcnConfig::rpg_min_dec_fac, nullptr, 1, 100},
    DcqcnKey{"rpg_min_rate_mbps", &DcqcnConfig::rpg_min_rate_mbps, nullptr, 1, kMaxRateMbps},
    DcqcnKey{"rate_to_set_on_first_cnp_mbps", &DcqcnConfig::rate_to_set_on_first_cnp_mbps, nullptr, 0, kMaxRateMbps},
    DcqcnKey{"dce_tcp_g", &DcqcnConfig::dce_tcp_g, nullptr, 0, 1023},
    DcqcnKey{"dce_tcp_rtt_us", &DcqcnConfig::dce_tcp_rtt_us, nullptr, 1, 1'000'000},
    DcqcnKey{"rate_reduce_monitor_period_us", &DcqcnConfig::rate_reduce_monitor_period_us, nullptr, 1, 1'000'000},
    DcqcnKey{"initial_alpha_value", &DcqcnConfig::initial_alpha_value, nullptr, 0, 1023},
    DcqcnKey{"clamp_tgt_rate", nullptr, &DcqcnConfig::clamp_tgt_rate, 0, 1},
    DcqcnKey{"clamp_tgt_rate_after_time_inc", nullptr, &DcqcnConfig::clamp_tgt_rate_after_time_inc, 0, 1},
    DcqcnKey{"min_time_between_cnps_us", &DcqcnConfig::min_time_between_cnps_us, nullptr, 0, 1'000'000},
    DcqcnKey{"cnp_dscp", &DcqcnConfig::cnp_dscp, nullptr, 0, 63},
    DcqcnKey{"cnp_802p_prio", &DcqcnConfig::cnp_802p_prio, nullptr, 0, 7},
};

inline constexpr std::array kDelayKeys{
    DelayKey{"target_us", &DelayConfig::target_us, nullptr, 1, 1'000'000},
    DelayKey{"ai_mbps", &DelayConfig::ai_mbps, nullptr, 1, kMaxRateMbps},
    DelayKey{"beta_pct", &DelayConfig::beta_pct, nullptr, 1, 100},
    DelayKey{"max_mdf_pct", &DelayConfig::max_mdf_pct, nullptr, 1, 99},
    DelayKey{"min_rate_mbps", &DelayConfig::min_rate_mbps, nullptr, 1, kMaxRateMbps},
    DelayKey{"max_rate_mbps", &DelayConfig::max_rate_mbps, nullptr, 0, kMaxRateMbps},
};

}  // namespace uroce::config
