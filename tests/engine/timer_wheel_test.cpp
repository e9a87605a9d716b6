#include "lib/util/timer_wheel.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

namespace uroce {
namespace {

struct Probe {
  Timer timer;
  uint64_t fired_at = 0;
  int fired = 0;
};

void record(Timer& t, uint64_t now) {
  auto& p = t.owner_as<Probe>();
  p.fired_at = now;
  ++p.fired;
}

TEST(TimerWheel, FiresAtOrAfterDeadlineAtEveryLevel) {
  const uint64_t deltas[] = {0, 1, 999, 1000, 1001, 255'000, 256'000, 257'000, 65'535'000,
                             65'536'000, 70'000'000, 16'000'000'000ull, 17'000'000'000ull,
                             4'300'000'000'000ull, 9'000'000'000'000ull};
  for (uint64_t d : deltas) {
    const uint64_t start = 123'456'789;
    TimerWheel w(start);
    Probe p;
    p.timer.cb = record;
    p.timer.owner = &p;
    w.arm(p.timer, start + d);
    EXPECT_TRUE(p.timer.armed());
    if (d > 1000) {
      w.advance(start + d - 1000);  // one tick early: must not fire
      EXPECT_EQ(p.fired, 0) << "delta " << d;
    }
    w.advance(start + d + 1000);
    EXPECT_EQ(p.fired, 1) << "delta " << d;
    EXPECT_GE(p.fired_at, start + d);
    EXPECT_FALSE(p.timer.armed());
    EXPECT_EQ(w.armed_count(), 0u);
  }
}

TEST(TimerWheel, CancelAndRearm) {
  TimerWheel w(0);
  Probe a, b;
  a.timer.cb = b.timer.cb = record;
  a.timer.owner = &a;
  b.timer.owner = &b;
  w.arm(a.timer, 5'000);
  w.arm(b.timer, 300'000);
  w.cancel(a.timer);
  EXPECT_FALSE(a.timer.armed());
  w.arm(b.timer, 10'000);  // re-arm moves it
  EXPECT_EQ(w.armed_count(), 1u);
  w.advance(20'000);
  EXPECT_EQ(a.fired, 0);
  EXPECT_EQ(b.fired, 1);
  w.advance(1'000'000);
  EXPECT_EQ(b.fired, 1);
}

TEST(TimerWheel, CallbackMayRearmItself) {
  TimerWheel w(0);
  struct Periodic {
    Timer timer;
    TimerWheel* w;
    int count = 0;
  } p;
  p.w = &w;
  p.timer.owner = &p;
  p.timer.cb = [](Timer& t, uint64_t now) {
    auto& self = t.owner_as<Periodic>();
    if (++self.count < 10) self.w->arm(t, now + 100'000);
  };
  w.arm(p.timer, 100'000);
  for (uint64_t now = 0; now <= 2'000'000; now += 7'000) w.advance(now);
  EXPECT_EQ(p.count, 10);
}

// A callback may cancel or re-arm other timers of the very slot being
// expired (a QP's kick firing re-arms the same QP's rate timer, due in the
// same tick): each of the others fires once or not at all as the callback
// left it, none is walked twice, and the wheel's count stays right.  (The
// walk used to follow links the callback had rewritten: the QPs' timers of
// one tick, re-armed inside it, made a cycle and the engine spun forever.)
TEST(TimerWheel, CallbackMayCancelAndRearmOthersOfItsSlot) {
  for (unsigned level_ticks : {0u, 300u, 70'000u}) {  // expired at level 0, or cascaded down from 1 and 2 first
    SCOPED_TRACE(level_ticks);
    TimerWheel w(0);
    struct Node {
      Timer timer;
      TimerWheel* w = nullptr;
      std::vector<Node*> cancel, rearm;
      int fired = 0;
    };
    std::vector<Node> n(8);
    const uint64_t due = uint64_t{level_ticks} * 1000 + 5'000;
    for (auto& x : n) {
      x.w = &w;
      x.timer.owner = &x;
      x.timer.cb = [](Timer& t, uint64_t now) {
        auto& self = t.owner_as<Node>();
        if (++self.fired > 1) return;  // acts on its first firing only: the chain ends
        for (Node* o : self.cancel) self.w->cancel(o->timer);
        for (Node* o : self.rearm) self.w->arm(o->timer, now + 50'000);
      };
    }
    // All eight in one slot; whichever fires first cancels two and re-arms two others.
    for (auto& x : n) {
      x.cancel = {&n[(&x - n.data() + 1) % 8], &n[(&x - n.data() + 2) % 8]};
      x.rearm = {&n[(&x - n.data() + 3) % 8], &n[(&x - n.data() + 4) % 8]};
      w.arm(x.timer, due);
    }
    for (uint64_t now = 0; now <= due + 1'000'000; now += 1'000) w.advance(now);  // each acts once: 8 x 50 us at most
    int total = 0;
    for (const auto& x : n) {
      EXPECT_LE(x.fired, 3);
      total += x.fired;
      EXPECT_FALSE(x.timer.armed());
    }
    EXPECT_GT(total, 0);
    EXPECT_EQ(w.armed_count(), 0u);
  }
}

// Random deadlines against a reference: every timer fires exactly once, no
// earlier than its deadline and within one tick plus the advance step.
TEST(TimerWheel, RandomAgainstReference) {
  const uint64_t seed = 20261121;
  std::mt19937_64 rng(seed);
  TimerWheel w(0);
  std::vector<Probe> probes(5000);
  std::vector<uint64_t> deadline(probes.size());
  for (size_t i = 0; i < probes.size(); ++i) {
    probes[i].timer.cb = record;
    probes[i].timer.owner = &probes[i];
    const int scale = static_cast<int>(rng() % 4);
    const uint64_t span = scale == 0 ? 300'000 : scale == 1 ? 80'000'000 : scale == 2 ? 20'000'000'000ull : 5'000'000;
    deadline[i] = rng() % span;
    w.arm(probes[i].timer, deadline[i]);
  }
  // Cancel a tenth of them.
  for (size_t i = 0; i < probes.size(); i += 10) w.cancel(probes[i].timer);
  uint64_t now = 0;
  const uint64_t step = 3'333;
  while (w.armed_count() > 0) {
    now += step + (rng() % 3) * 1'000'000;  // some long gaps
    w.advance(now);
  }
  for (size_t i = 0; i < probes.size(); ++i) {
    if (i % 10 == 0) {
      EXPECT_EQ(probes[i].fired, 0) << "seed " << seed << " timer " << i;
      continue;
    }
    ASSERT_EQ(probes[i].fired, 1) << "seed " << seed << " timer " << i;
    EXPECT_GE(probes[i].fired_at, deadline[i]) << "seed " << seed << " timer " << i;
  }
}

// A loop that sleeps until next_deadline_hint() (uroced's idle engine):
// the hint is never later than a pending deadline, every timer fires
// within a tick of it, and a lone far timer costs a handful of wake-ups,
// not one per level-0 turn.
TEST(TimerWheel, SleepingUntilTheHintMissesNothing) {
  const uint64_t seed = 20261127;
  std::mt19937_64 rng(seed);
  const uint64_t start = 987'654'321;
  TimerWheel w(start);
  std::vector<Probe> probes(3000);
  std::vector<uint64_t> deadline(probes.size());
  for (size_t i = 0; i < probes.size(); ++i) {
    probes[i].timer.cb = record;
    probes[i].timer.owner = &probes[i];
    const int scale = static_cast<int>(rng() % 4);
    const uint64_t span = scale == 0 ? 200'000 : scale == 1 ? 50'000'000 : scale == 2 ? 30'000'000'000ull : 5'000'000;
    deadline[i] = start + rng() % span;
    w.arm(probes[i].timer, deadline[i]);
  }
  uint64_t now = start;
  size_t wakes = 0;
  while (w.armed_count() > 0) {
    uint64_t earliest = UINT64_MAX;
    for (size_t i = 0; i < probes.size(); ++i)
      if (probes[i].fired == 0 && deadline[i] < earliest) earliest = deadline[i];
    const uint64_t hint = w.next_deadline_hint();
    ASSERT_LE(hint, (earliest + 999) / 1000 * 1000) << "seed " << seed << " at " << now;
    now = std::max(now, hint);
    w.advance(now);
    ASSERT_LT(++wakes, 40'000u) << "seed " << seed;
  }
  for (size_t i = 0; i < probes.size(); ++i) {
    ASSERT_EQ(probes[i].fired, 1) << "seed " << seed << " timer " << i;
    EXPECT_GE(probes[i].fired_at, deadline[i]) << "seed " << seed << " timer " << i;
    EXPECT_LE(probes[i].fired_at, deadline[i] + 1000) << "seed " << seed << " timer " << i;
  }

  // One timer an hour away: a wake-up per level on the way down.
  TimerWheel far(start);
  Probe p;
  p.timer.cb = record;
  p.timer.owner = &p;
  far.arm(p.timer, start + 3'600'000'000'000ull);
  now = start;
  wakes = 0;
  while (p.fired == 0 && wakes < 1000) {
    now = std::max(now, far.next_deadline_hint());
    far.advance(now);
    ++wakes;
  }
  EXPECT_EQ(p.fired, 1);
  EXPECT_LE(wakes, 2 * TimerWheel::kLevels) << "wake-ups for one far timer";
  EXPECT_EQ(far.next_deadline_hint(), UINT64_MAX);
}

TEST(TimerWheel, LongIdleGapIsCheap) {
  TimerWheel w(0);
  Probe p;
  p.timer.cb = record;
  p.timer.owner = &p;
  w.arm(p.timer, 3'600'000'000'000ull);  // one hour
  // One call jumps an hour of 1 µs ticks (3.6e9) without visiting each.
  w.advance(3'600'000'000'000ull);
  EXPECT_EQ(p.fired, 1);
}

}  // namespace
}  // namespace uroce
