// A hierarchical timer wheel for a poll loop (STYLE 11).
//
// - Arm and cancel are O(1): a timer is an intrusive node (no allocation)
//   linked into one slot's list.
// - The loop reads the clock once per iteration and calls `advance(now)`,
//   which fires every timer whose deadline is <= now.  Empty slots are
//   skipped with a per-level occupancy bitmap, so a long idle gap costs a
//   few bit scans, not one step per tick.
// - Four levels of 256 slots; with the default 1 µs tick they cover
//   256 µs, 65.5 ms, 16.8 s and 71.6 min.  Later deadlines wait in the top
//   level and are re-filed when their slot comes round (so any deadline
//   works).  A timer fires no earlier than its deadline and at most one
//   tick late (plus the loop's own latency).
//
// Thread: the wheel belongs to the thread that drives the engine; it is
// not thread-safe.
#pragma once

#include <array>
#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>

namespace uroce {

class TimerWheel;

// Embed one in the object that owns the timeout (a QP, a CM id, a
// neighbour entry) and point `owner` at that object; the callback receives
// the node and finds its owner there.
struct Timer {
  using Callback = void (*)(Timer&, uint64_t now_ns);

  Callback cb = nullptr;
  void* owner = nullptr;
  uint64_t deadline_ns = 0;

  template <class T>
  T& owner_as() const noexcept { return *static_cast<T*>(owner); }

  bool armed() const noexcept { return slot_ != nullptr; }

 private:
  friend class TimerWheel;
  Timer* prev_ = nullptr;
  Timer* next_ = nullptr;
  Timer** slot_ = nullptr;  // head pointer of the list holding this timer
  uint8_t level_ = 0;
  uint8_t index_ = 0;
};

class TimerWheel {
 public:
  static constexpr unsigned kLevels = 4;
  static constexpr unsigned kSlotBits = 8;
  static constexpr unsigned kSlots = 1u << kSlotBits;

  explicit TimerWheel(uint64_t now_ns, uint64_t tick_ns = 1000) noexcept
      : tick_ns_(tick_ns), now_tick_(now_ns / tick_ns) {}

  TimerWheel(const TimerWheel&) = delete;
  TimerWheel& operator=(const TimerWheel&) = delete;

  // (Re)arm `t` to fire at `deadline_ns` (a past deadline fires on the
  // next advance).
  void arm(Timer& t, uint64_t deadline_ns) noexcept {
    if (t.armed()) cancel(t);
    t.deadline_ns = deadline_ns;
    file(t);
    ++armed_;
  }

  void cancel(Timer& t) noexcept {
    if (!t.armed()) return;
    unlink(t);
    --armed_;
  }

  // Fire every timer due at or before `now_ns`; returns how many fired.
  // Callbacks may arm and cancel timers, themselves included.
  unsigned advance(uint64_t now_ns) noexcept;

  size_t armed_count() const noexcept { return armed_; }
  uint64_t tick_ns() const noexcept { return tick_ns_; }

  // The earliest time at which something may fire (for a thread that
  // wants to sleep); UINT64_MAX when nothing is armed.
  uint64_t next_deadline_hint() const noexcept;

 private:
  struct Level {
    std::array<Timer*, kSlots> slots{};
    std::array<uint64_t, kSlots / 64> occupied{};
  };

  static constexpr unsigned shift(unsigned level) noexcept { return level * kSlotBits; }
  // level_ of a timer on expire_slot's local list (not in any slot).
  static constexpr uint8_t kPendingLevel = 0xFF;

  void file(Timer& t) noexcept;
  void unlink(Timer& t) noexcept;
  void push(Timer& t, unsigned level, unsigned index) noexcept;
  // Move every timer of the slot at (level, index) down, or fire it.
  unsigned expire_slot(unsigned level, unsigned index, uint64_t now_ns) noexcept;
  // Next occupied slot index in `level` at or after `from` (cyclic
  // distance < kSlots); returns kSlots when the level is empty.
  unsigned next_occupied(unsigned level, unsigned from) const noexcept;

  uint64_t tick_ns_;
  uint64_t now_tick_;  // every slot before this tick has been processed
  size_t armed_ = 0;
  std::array<Level, kLevels> levels_{};
};

}  // namespace uroce
