// DCQCN's reaction point and the pacer (transport/cc): the arithmetic of
// each rule of dcqcn.hpp, at ConnectX's defaults, with hand-computed values.
#include <gtest/gtest.h>

#include <cstdint>

#include "lib/config/cc.hpp"
#include "transport/cc/dcqcn.hpp"
#include "transport/cc/delay.hpp"
#include "transport/cc/pacer.hpp"

namespace uroce::cc {
namespace {

constexpr uint64_t kPort = 25'000'000'000ull;
constexpr uint64_t kUs = 1000;
constexpr uint64_t kT0 = 1'000'000'000;  // any start time

Dcqcn fresh(const config::DcqcnConfig& p = {}) {
  Dcqcn d;
  d.reset(p, kPort);
  return d;
}

TEST(Dcqcn, StartsInactiveAtThePortRate) {
  const Dcqcn d = fresh();
  EXPECT_FALSE(d.active());
  EXPECT_EQ(d.rate_bps(), kPort);
  EXPECT_EQ(d.max_bps(), kPort);
  EXPECT_EQ(d.deadline(), 0u);
}

TEST(Dcqcn, MaxRateFromConfigWhenSet) {
  config::DcqcnConfig p;
  p.rpg_max_rate_mbps = 1000;
  EXPECT_EQ(fresh(p).max_bps(), 1'000'000'000u);
}

// The first CNP starts the periods and sets alpha; it cuts nothing (the
// rate stays: rate_to_set_on_first_cnp is 0).
TEST(Dcqcn, FirstCnpStartsWithoutACut) {
  Dcqcn d = fresh();
  d.on_cnp(kT0);
  EXPECT_TRUE(d.active());
  EXPECT_EQ(d.alpha(), 1023u);
  EXPECT_EQ(d.rate_bps(), kPort);
  EXPECT_EQ(d.cuts(), 0u);
  EXPECT_EQ(d.deadline(), kT0 + 300 * kUs);  // the increase timer; no cut pending
}

TEST(Dcqcn, FirstCnpSetsTheConfiguredRate) {
  config::DcqcnConfig p;
  p.rate_to_set_on_first_cnp_mbps = 2000;
  Dcqcn d = fresh(p);
  d.on_cnp(kT0);
  EXPECT_EQ(d.rate_bps(), 2'000'000'000u);
  EXPECT_EQ(d.target_bps(), 2'000'000'000u);
}

// alpha in 2^-20 units, as the reaction point holds it: one update.
uint64_t update(uint64_t a, bool cnp) { return a * 1019 / 1024 + (cnp ? uint64_t{5} << 10 : 0); }

// A second CNP at t0+1.5 µs falls in the first monitor period: the cut
// comes at its end (t0+4 µs), with alpha as it is then: the update at
// t0+1 µs decays, the one at t0+2 µs takes the CNP, t0+3 and t0+4 decay.
TEST(Dcqcn, CutAtTheMonitorBoundaryWithTheAlphaOfThatMoment) {
  Dcqcn d = fresh();
  d.on_cnp(kT0);
  d.on_cnp(kT0 + 1500);
  EXPECT_EQ(d.deadline(), kT0 + 4 * kUs);
  d.advance(kT0 + 4 * kUs);
  const uint64_t a = update(update(update(update(uint64_t{1023} << 10, false), true), false), false);
  EXPECT_EQ(d.alpha_fine(), a);
  EXPECT_EQ(d.alpha(), a >> 10);
  // cut = min(rate * alpha >> rpg_gd, rate * 50%), alpha in 1024ths
  const uint64_t cut = std::min<uint64_t>((kPort * a) >> (11 + 10), kPort / 2);
  EXPECT_EQ(d.rate_bps(), kPort - cut);
  EXPECT_EQ(d.cuts(), 1u);
  EXPECT_EQ(d.target_bps(), kPort);  // no stage passed: the target is not clamped
  EXPECT_EQ(d.deadline(), kT0 + 4 * kUs + 300 * kUs);  // the increase timer restarted at the cut
}

TEST(Dcqcn, AtMostOneCutPerMonitorPeriod) {
  Dcqcn d = fresh();
  d.on_cnp(kT0);
  for (uint64_t t = 500; t < 4 * kUs; t += 500) d.on_cnp(kT0 + t);
  d.advance(kT0 + 4 * kUs);
  EXPECT_EQ(d.cuts(), 1u);
  d.advance(kT0 + 8 * kUs);  // no CNP in the next period: no cut
  EXPECT_EQ(d.cuts(), 1u);
}

TEST(Dcqcn, CutNeverBelowMinDecFacNorMinRate) {
  config::DcqcnConfig p;
  p.rpg_gd = 1;               // alpha/2 >> 1: the alpha cut would take all of it
  p.rpg_min_dec_fac = 50;
  Dcqcn d = fresh(p);
  d.on_cnp(kT0);
  d.on_cnp(kT0 + 100);
  d.advance(kT0 + 4 * kUs);
  EXPECT_EQ(d.rate_bps(), kPort / 2);  // the min_dec_fac cap (the alpha cut would be ~all of it)
  uint64_t t = kT0 + 4 * kUs;
  for (int i = 0; i < 60; ++i) {       // many cuts: down to the floor and no further
    t += 4 * kUs;
    d.on_cnp(t - 100);
    d.advance(t);
  }
  EXPECT_EQ(d.rate_bps(), 1'000'000u);  // rpg_min_rate 1 Mb/s
}

// Fast recovery: T=0 -> rate to the midpoint of rate and target, target
// kept; additive from T >= threshold; hyper once both stages pass it.
TEST(Dcqcn, IncreaseStages) {
  config::DcqcnConfig p;
  p.rpg_byte_reset = 1000;  // 64 000 bytes per byte stage
  Dcqcn d = fresh(p);
  d.on_cnp(kT0);
  d.on_cnp(kT0 + 100);
  d.advance(kT0 + 4 * kUs);
  const uint64_t r1 = d.rate_bps();
  const uint64_t cut_at = kT0 + 4 * kUs;
  // First timer expiry: fast recovery (T was 0 when it fired).
  d.advance(cut_at + 300 * kUs);
  EXPECT_EQ(d.time_stage(), 1u);
  EXPECT_EQ(d.target_bps(), kPort);
  EXPECT_EQ(d.rate_bps(), (r1 + kPort + 1) / 2);
  EXPECT_EQ(d.cuts(), 1u);
  // A CNP now clamps the target to the rate (a timer stage passed, clamp_tgt_rate_after_time_inc).
  const uint64_t before_cut = d.rate_bps();
  d.on_cnp(cut_at + 301 * kUs);
  d.advance(cut_at + 304 * kUs);
  EXPECT_EQ(d.cuts(), 2u);
  EXPECT_EQ(d.target_bps(), before_cut);
  const uint64_t r2 = d.rate_bps();
  const uint64_t cut2 = cut_at + 304 * kUs;
  d.advance(cut2 + 300 * kUs);  // T=0: fast recovery toward the clamped target
  EXPECT_EQ(d.rate_bps(), (r2 + before_cut + 1) / 2);
  EXPECT_EQ(d.target_bps(), before_cut);
  d.advance(cut2 + 600 * kUs);  // T=1 >= threshold 1: additive, +5 Mb/s
  EXPECT_EQ(d.target_bps(), before_cut + 5'000'000u);
  // Byte stages: 2 of them (BC 0 -> additive since T=2; then BC=1: still max >= 1 additive).
  const uint64_t t2 = d.target_bps();
  d.on_sent(cut2 + 601 * kUs, 64'000);
  EXPECT_EQ(d.byte_stage(), 1u);
  EXPECT_EQ(d.target_bps(), t2 + 5'000'000u);
  d.on_sent(cut2 + 602 * kUs, 64'000);
  EXPECT_EQ(d.byte_stage(), 2u);
  EXPECT_EQ(d.target_bps(), t2 + 10'000'000u);
  // Now T=2 and BC=2, both above threshold 1: hyper, +50 Mb/s.
  d.on_sent(cut2 + 603 * kUs, 64'000);
  EXPECT_EQ(d.target_bps(), t2 + 60'000'000u);
}

TEST(Dcqcn, AlphaDecaysWithoutCnps) {
  Dcqcn d = fresh();
  d.on_cnp(kT0);
  d.advance(kT0 + 10 * kUs);
  uint64_t a = uint64_t{1023} << 10;
  for (int i = 0; i < 10; ++i) a = update(a, false);
  EXPECT_EQ(d.alpha_fine(), a);
  // With a CNP in every period alpha climbs back toward 1023.
  for (uint64_t t = 11; t < 400; ++t) {
    d.on_cnp(kT0 + t * kUs - 500);
    d.advance(kT0 + t * kUs);
  }
  EXPECT_GT(d.alpha(), 1010u);
}

// Left alone it recovers to the port rate and leaves DCQCN; the next CNP
// is a first one again.
TEST(Dcqcn, RecoversAndLeaves) {
  Dcqcn d = fresh();
  d.on_cnp(kT0);
  d.on_cnp(kT0 + 100);
  d.advance(kT0 + 4 * kUs);
  ASSERT_LT(d.rate_bps(), kPort);
  d.advance(kT0 + 1'000'000'000);  // a second later, in one call
  EXPECT_FALSE(d.active());
  EXPECT_EQ(d.rate_bps(), kPort);
  EXPECT_EQ(d.deadline(), 0u);
  d.on_cnp(kT0 + 1'000'000'001);
  EXPECT_TRUE(d.active());
  EXPECT_EQ(d.alpha(), 1023u);
  EXPECT_EQ(d.rate_bps(), kPort);
}

TEST(Pacer, OffAtTheMaximum) {
  Pacer p;
  p.set_rate(kPort, kPort, 16384);
  EXPECT_FALSE(p.pacing());
  p.spend(kT0, 1'000'000);
  EXPECT_EQ(p.wait(kT0), 0u);
}

TEST(Pacer, SpacesFramesAtItsRateAfterItsBurst) {
  Pacer p;
  p.set_rate(1'000'000'000, kPort, 4000);  // 1 Gb/s: 8 ns per byte; burst 4000 B = 32 µs
  ASSERT_TRUE(p.pacing());
  uint64_t now = kT0;
  int sent_at_once = 0;
  while (p.wait(now) == 0 && sent_at_once < 100) {
    p.spend(now, 1000);
    ++sent_at_once;
  }
  EXPECT_EQ(sent_at_once, 5);  // the 32 µs burst, and the frame that crosses it
  EXPECT_EQ(p.wait(now), 8'000u);
  now += p.wait(now);
  EXPECT_EQ(p.wait(now), 0u);
  p.spend(now, 1000);
  EXPECT_EQ(p.wait(now), 8'000u);  // one frame per 8 µs from here on
}

// The delay-based controller: additive at or under the target, a cut
// proportional to the excess over it, at most max_mdf and once per RTT.
TEST(DelayCc, FollowsTheRoundTrip) {
  config::DelayConfig p;  // target 100 µs, ai 50 Mb/s, beta 80%, max_mdf 50%, min 10 Mb/s
  DelayCc d;
  d.reset(p, kPort);
  EXPECT_FALSE(d.active());
  d.on_rtt(kT0, 80 * kUs);  // under the target at the maximum: stays there
  EXPECT_EQ(d.rate_bps(), kPort);
  d.on_rtt(kT0, 200 * kUs);  // 100 over 200: 80% * 1/2 = 40% off
  EXPECT_EQ(d.rate_bps(), kPort * 60 / 100);
  EXPECT_TRUE(d.active());
  d.on_rtt(kT0 + 100 * kUs, 200 * kUs);  // within the round trip of the last cut: nothing
  EXPECT_EQ(d.rate_bps(), kPort * 60 / 100);
  d.on_rtt(kT0 + 5'000 * kUs, 10'000 * kUs);  // a round trip of 10 ms: 5 ms after the cut is too soon
  EXPECT_EQ(d.rate_bps(), kPort * 60 / 100);
  d.on_rtt(kT0 + 20'000 * kUs, 10'000 * kUs);  // far over: capped at max_mdf 50%
  EXPECT_EQ(d.rate_bps(), kPort * 30 / 100);
  d.on_rtt(kT0 + 20'100 * kUs, 50 * kUs);  // under: +50 Mb/s
  EXPECT_EQ(d.rate_bps(), kPort * 30 / 100 + 50'000'000);
  EXPECT_EQ(d.cuts(), 2u);
  for (int i = 0; i < 100; ++i) d.on_rtt(kT0 + 2'000'000 * kUs * (i + 1), 1'000'000 * kUs);  // floor
  EXPECT_EQ(d.rate_bps(), 10'000'000u);
}

}  // namespace
}  // namespace uroce::cc
