// DelayQueue: frames on their way through a faulty link, each with the
// time it is due.  A FIFO: due times are non-decreasing from head to tail
// (FaultInjector makes them so), so the head is always the next frame due.
//
// Fixed capacity, chosen on the control path; push and pop never
// allocate.  Not thread-safe: its owner serialises access (FaultPort runs
// on the one thread that drives it; the sim wire holds the link's mutex).
#pragma once

#include <rte_mbuf.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdint>
#include <limits>
#include <vector>

namespace uroce::drivers {

class DelayQueue {
 public:
  static constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

  DelayQueue() = default;
  DelayQueue(const DelayQueue&) = delete;
  DelayQueue& operator=(const DelayQueue&) = delete;
  ~DelayQueue() { clear(); }

  // Control path: holds up to `capacity` frames (rounded up to a power of
  // two).  Frees whatever the queue held.
  void reset(uint32_t capacity) {
    clear();
    slots_.assign(std::bit_ceil(std::max<uint32_t>(capacity, 1)), Slot{});
    mask_ = static_cast<uint32_t>(slots_.size() - 1);
  }

  uint32_t capacity() const noexcept { return static_cast<uint32_t>(slots_.size()); }
  uint32_t size() const noexcept { return tail_ - head_; }
  bool empty() const noexcept { return head_ == tail_; }
  bool full() const noexcept { return size() == capacity(); }
  uint64_t next_due() const noexcept { return empty() ? kNever : slots_[head_ & mask_].due; }

  bool push(rte_mbuf* m, uint64_t due_ns) noexcept {
    if (full()) return false;
    assert(empty() || due_ns >= slots_[(tail_ - 1) & mask_].due);
    slots_[tail_++ & mask_] = Slot{m, due_ns};
    return true;
  }

  // Copies up to `n` frames due at `now_ns` into `out` without removing
  // them; consume() removes them once the caller has handed them on.
  uint16_t peek_due(uint64_t now_ns, rte_mbuf** out, uint16_t n) const noexcept {
    uint16_t k = 0;
    for (uint32_t i = head_; k < n && i != tail_ && slots_[i & mask_].due <= now_ns; ++i) out[k++] = slots_[i & mask_].m;
    return k;
  }
  void consume(uint16_t k) noexcept {
    assert(k <= size());
    head_ += k;
  }
  uint16_t pop_due(uint64_t now_ns, rte_mbuf** out, uint16_t n) noexcept {
    const uint16_t k = peek_due(now_ns, out, n);
    consume(k);
    return k;
  }

  // Frees every frame; returns how many there were.
  uint32_t clear() noexcept {
    const uint32_t n = size();
    for (; head_ != tail_; ++head_) rte_pktmbuf_free(slots_[head_ & mask_].m);
    return n;
  }

 private:
  struct Slot {
    rte_mbuf* m = nullptr;
    uint64_t due = 0;
  };
  std::vector<Slot> slots_;
  uint32_t mask_ = 0;
  uint32_t head_ = 0;  // free-running indices; size = tail - head (mod 2^32)
  uint32_t tail_ = 0;
};

}  // namespace uroce::drivers
