// cq: completion queues (objects.hpp): the ring of ibv_wc the engine
// produces and application threads poll, its arm and its events.
#include "transport/rnic/objects.hpp"

#include <cassert>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "lib/util/spin_guard.hpp"
#include "lib/util/stamps.hpp"
#include "transport/engine.hpp"
#include "transport/rnic/rnic.hpp"

namespace uroce::rnic {
// ---- CQ ------------------------------------------------------------------------------------

size_t Cq::bytes(uint32_t capacity) noexcept { return (size_t{capacity} + 1) * sizeof(Cqe); }

Cq::Cq(Rnic& rnic, uint32_t capacity, void* context, CompChannel* channel, RingBlock&& mem)
    : rnic_(rnic), context_(context), channel_(channel), capacity_(capacity),
      mem_(static_cast<RingBlock&&>(mem)),
      ring_(RingLayout::view<Cqe>(mem_, 0, capacity + 1).data()),
      slots_(capacity + 1) {}

Cq::~Cq() = default;

// With several lcores, QPs of two lcores may complete to one CQ: each
// push under push_lock_ (a spinlock, uncontended unless they do, the cost
// an RNIC pays in hardware); with one, the engine is the only producer.
bool Cq::push(const ibv_wc& wc, bool solicited) noexcept {
  assert(rnic_.on_an_engine());
  const SpinGuard only_us(rnic_.multi_lcore() ? &push_lock_ : nullptr);
  const uint32_t size = slots_;
  const uint32_t tail = tail_.load(std::memory_order_relaxed);
  const uint32_t next = tail + 1 == size ? 0 : tail + 1;
  if (next == head_.load(std::memory_order_acquire)) {
    // A CQ overrun is a CQ error (IBA 11.4.2, ibv_create_cq(3): the
    // affiliated IBV_EVENT_CQ_ERR); the entry is not written over an
    // unread one.  Raised once per overrun episode.
    rnic_.counters().inc(RnicCtr::cq_overflows);
    if (!overflow_.exchange(true, std::memory_order_acq_rel)) {
      AsyncEvent ev;
      ev.type = IBV_EVENT_CQ_ERR;
      ev.cq = this;
      rnic_.raise(ev);
    }
    return false;
  }
  Cqe& e = ring_[tail];
  e.wc = wc;
  if (timestamps_.load(std::memory_order_relaxed)) {
    // When the entry is written, as hardware stamps its CQEs: the device
    // clock (Rnic::device_clock_ns) and the wall clock.
    e.ts = Rnic::device_clock_ns();
    e.wall_ns = transport::Engine::realtime_ns();
  }
  // Publishes the entry to pollers.  Completion event (IBA 11.4.2.2,
  // ibv_req_notify_cq(3)): armed for the next completion, or for a
  // solicited one (the SE bit); an unsuccessful completion also wakes a
  // solicited-only request, as the man page says.
  // The tail's store and the arm's load here, the arm's store in
  // req_notify and the tail's load in poll are sequentially consistent:
  // with release/acquire alone the CPU may read the arm before the entry
  // is visible (x86 lets a load pass an earlier store) while the
  // application arms and polls the CQ empty, and the event is lost (the
  // arm-then-poll pattern then sleeps for ever; seen as a 5 s wait in
  // apps-verbs).  On x86 this costs the store's xchg; the loads are plain.
  tail_.store(next, std::memory_order_seq_cst);
  const uint8_t armed = armed_.load(std::memory_order_seq_cst);
  if (armed != 0 && (armed == 1 || solicited || wc.status != IBV_WC_SUCCESS)) {
    uint8_t expect = armed;
    if (armed_.compare_exchange_strong(expect, 0, std::memory_order_acq_rel) && channel_ != nullptr) {
      channel_->notify(this);
    }
  }
  if (hook_ != nullptr) hook_(hook_arg_);
  return true;
}

int Cq::poll(int n, ibv_wc* out, uint64_t* ts, uint64_t* wall_ns) {
  if (n < 0) return -EINVAL;
  std::lock_guard lock(poll_mu_);
  const uint32_t size = slots_;
  uint32_t head = head_.load(std::memory_order_relaxed);
  const uint32_t tail = tail_.load(std::memory_order_seq_cst);  // after a req_notify's arm (push)
  int got = 0;
  while (got < n && head != tail) {
    const Cqe& e = ring_[head];
    if (ts != nullptr) ts[got] = e.ts;
    if (wall_ns != nullptr) wall_ns[got] = e.wall_ns;
    out[got++] = e.wc;
    head = head + 1 == size ? 0 : head + 1;
  }
  if (got) {
    head_.store(head, std::memory_order_release);  // frees the slots for the engine
    UROCE_STAMP(Polled);
  }
  return got;
}

void Cq::clean(Qpn qpn) {
  assert(rnic_.on_an_engine());
  std::lock_guard lock(poll_mu_);
  const uint32_t size = slots_;
  const uint32_t head = head_.load(std::memory_order_relaxed);
  const uint32_t tail = tail_.load(std::memory_order_relaxed);  // ours: the engine fills it
  auto prev = [size](uint32_t i) { return i == 0 ? size - 1 : i - 1; };
  // From the newest back to the oldest, kept entries slide towards the
  // tail; the head then moves past what was removed.
  uint32_t keep = tail;
  for (uint32_t i = tail; i != head;) {
    i = prev(i);
    if (ring_[i].wc.qp_num == qpn.value()) continue;
    keep = prev(keep);
    if (keep != i) ring_[keep] = ring_[i];
  }
  head_.store(keep, std::memory_order_release);
}

int Cq::req_notify(bool solicited_only) {
  if (channel_ == nullptr) return EINVAL;  // nothing to notify through
  // A later "next" request widens an armed "solicited" one, never narrows it.
  uint8_t want = solicited_only ? 2 : 1;
  uint8_t cur = armed_.load(std::memory_order_acquire);
  // Sequentially consistent against push (see there).  An arm that is
  // already as wide is stored again, so the caller's next poll still
  // comes after a store of ours in that order.
  while (!armed_.compare_exchange_weak(cur, cur == 1 && want == 2 ? cur : want, std::memory_order_seq_cst)) {
  }
  return 0;
}

int Cq::resize(uint32_t cqe) {
  if (cqe < 1 || cqe > kMaxCqe) return EINVAL;
  // The new ring is allocated, and the old one freed, here in the caller's
  // thread (ring_memory.hpp), through the allocator the CQ was made with.
  RingBlock mem;
  if (RingBlock::allocate(bytes(cqe), mem_.allocator(), RingUse::Cq, &mem) != 0) return ENOMEM;
  RingBlock old;
  int rc = 0;
  // In the engine's loop (no completion is pushed meanwhile), holding the
  // pollers' lock there: a poller holds it only to copy entries out, never
  // while it waits for the engine.
  rnic_.engine().run_sync([&] {
    std::lock_guard lock(poll_mu_);
    const uint32_t size = slots_;
    const uint32_t head = head_.load(std::memory_order_relaxed);
    const uint32_t tail = tail_.load(std::memory_order_relaxed);
    const uint32_t used = tail >= head ? tail - head : size - head + tail;
    if (used > cqe) {
      rc = EINVAL;
      return;
    }
    Cqe* ring = RingLayout::view<Cqe>(mem, 0, cqe + 1).data();
    for (uint32_t i = 0; i < used; ++i) ring[i] = ring_[(head + i) % size];
    ring_ = ring;
    old = static_cast<RingBlock&&>(mem_);
    mem_ = static_cast<RingBlock&&>(mem);
    slots_ = cqe + 1;
    capacity_ = cqe;
    head_.store(0, std::memory_order_relaxed);
    tail_.store(used, std::memory_order_release);
    overflow_.store(false, std::memory_order_release);
  });
  return rc;
}

}  // namespace uroce::rnic
