#include "lib/util/timer_wheel.hpp"

#include <limits>

namespace uroce {
namespace {

constexpr uint64_t kMaxDelta = (uint64_t{1} << (TimerWheel::kLevels * TimerWheel::kSlotBits)) - 1;

}  // namespace

void TimerWheel::push(Timer& t, unsigned level, unsigned index) noexcept {
  Level& lv = levels_[level];
  Timer*& head = lv.slots[index];
  t.prev_ = nullptr;
  t.next_ = head;
  if (head) head->prev_ = &t;
  head = &t;
  t.slot_ = &head;
  t.level_ = static_cast<uint8_t>(level);
  t.index_ = static_cast<uint8_t>(index);
  lv.occupied[index / 64] |= uint64_t{1} << (index % 64);
}

void TimerWheel::unlink(Timer& t) noexcept {
  if (t.prev_) {
    t.prev_->next_ = t.next_;
  } else {
    *t.slot_ = t.next_;
  }
  if (t.next_) t.next_->prev_ = t.prev_;
  if (*t.slot_ == nullptr && t.level_ != kPendingLevel) {  // a slot of the wheel emptied
    levels_[t.level_].occupied[t.index_ / 64] &= ~(uint64_t{1} << (t.index_ % 64));
  }
  t.prev_ = t.next_ = nullptr;
  t.slot_ = nullptr;
}

void TimerWheel::file(Timer& t) noexcept {
  // Fire no earlier than the deadline: round the deadline up to a tick.
  uint64_t tick = t.deadline_ns / tick_ns_ + (t.deadline_ns % tick_ns_ != 0);
  if (tick < now_tick_) tick = now_tick_;
  if (tick - now_tick_ > kMaxDelta) tick = now_tick_ + kMaxDelta;  // re-filed when reached
  const uint64_t delta = tick - now_tick_;
  unsigned level = 0;
  while (level + 1 < kLevels && delta >= (uint64_t{1} << shift(level + 1))) ++level;
  push(t, level, static_cast<unsigned>((tick >> shift(level)) & (kSlots - 1)));
}

unsigned TimerWheel::next_occupied(unsigned level, unsigned from) const noexcept {
  const Level& lv = levels_[level];
  for (unsigned w = from / 64; w < lv.occupied.size(); ++w) {
    uint64_t bits = lv.occupied[w];
    if (w == from / 64) bits &= ~uint64_t{0} << (from % 64);
    if (bits) return w * 64 + static_cast<unsigned>(std::countr_zero(bits));
  }
  return kSlots;
}

// The slot's timers move to a local list first, each still armed and
// pointing at that list, so that a callback may cancel or re-arm any of
// them (another timer of the same tick, say) and the walk only ever takes
// the list's current head: nothing it holds is walked twice or lost, and
// nothing a callback pushes into the (now empty) slot is touched.
unsigned TimerWheel::expire_slot(unsigned level, unsigned index, uint64_t now_ns) noexcept {
  Level& lv = levels_[level];
  Timer* pending = lv.slots[index];
  lv.slots[index] = nullptr;
  lv.occupied[index / 64] &= ~(uint64_t{1} << (index % 64));
  for (Timer* t = pending; t != nullptr; t = t->next_) {
    t->slot_ = &pending;
    t->level_ = kPendingLevel;
  }
  unsigned fired = 0;
  while (pending != nullptr) {
    Timer& t = *pending;
    pending = t.next_;
    if (pending != nullptr) pending->prev_ = nullptr;
    t.prev_ = t.next_ = nullptr;
    t.slot_ = nullptr;
    if (level == 0 && t.deadline_ns <= now_ns) {
      --armed_;
      ++fired;
      t.cb(t, now_ns);  // may re-arm t or arm and cancel any other timer
    } else {
      file(t);          // cascade down (or a clamped far deadline)
    }
  }
  return fired;
}

unsigned TimerWheel::advance(uint64_t now_ns) noexcept {
  const uint64_t target = now_ns / tick_ns_;
  unsigned fired = 0;
  while (now_tick_ <= target) {
    const unsigned idx = static_cast<unsigned>(now_tick_ & (kSlots - 1));
    const uint64_t boundary = (now_tick_ | (kSlots - 1)) + 1;
    const unsigned n = next_occupied(0, idx);
    const uint64_t next_tick = n < kSlots ? now_tick_ - idx + n : boundary;
    if (next_tick > target) {
      now_tick_ = target + 1;
    } else {
      now_tick_ = next_tick;
      if (n < kSlots) {
        ++now_tick_;
        fired += expire_slot(0, n, now_ns);
      }
    }
    if (now_tick_ == boundary) {
      // Crossing a level-0 rotation: bring the due slot of each higher
      // level down, from level 1 up while the lower index wrapped to 0.
      for (unsigned lvl = 1; lvl < kLevels; ++lvl) {
        const unsigned i = static_cast<unsigned>((now_tick_ >> shift(lvl)) & (kSlots - 1));
        fired += expire_slot(lvl, i, now_ns);
        if (i != 0) break;
      }
    }
  }
  return fired;
}

uint64_t TimerWheel::next_deadline_hint() const noexcept {
  if (armed_ == 0) return std::numeric_limits<uint64_t>::max();
  const unsigned idx = static_cast<unsigned>(now_tick_ & (kSlots - 1));
  if (const unsigned n = next_occupied(0, idx); n < kSlots) return (now_tick_ - idx + n) * tick_ns_;
  // Level 0 holds nothing before the next rotation.  A slot of level L
  // holds ticks of one block of 2^shift(L) ticks (file() puts a tick at
  // most one rotation of level L ahead), and comes down when that block
  // begins: the earliest such beginning is a lower bound on every
  // deadline left, and the time to look again.
  uint64_t best = next_occupied(0, 0) < kSlots ? (now_tick_ | (kSlots - 1)) + 1 : UINT64_MAX;
  for (unsigned lvl = 1; lvl < kLevels; ++lvl) {
    const unsigned cur = static_cast<unsigned>((now_tick_ >> shift(lvl)) & (kSlots - 1));
    const uint64_t rotation = uint64_t{1} << shift(lvl + 1);  // ticks per turn of this level
    const uint64_t base = now_tick_ & ~(rotation - 1);       // this turn's first tick
    unsigned i = cur + 1 < kSlots ? next_occupied(lvl, cur + 1) : kSlots;
    uint64_t start = 0;
    if (i < kSlots) {
      start = base + (uint64_t{i} << shift(lvl));
    } else if ((i = next_occupied(lvl, 0)) < kSlots) {
      start = base + rotation + (uint64_t{i} << shift(lvl));  // at or before the current slot: next turn
    } else {
      continue;
    }
    if (start < best) best = start;
  }
  return best == UINT64_MAX ? std::numeric_limits<uint64_t>::max() : best * tick_ns_;
}

}  // namespace uroce
