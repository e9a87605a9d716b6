// objects: MR translation, CQs, receive queues and
// SRQs.  The PD and the AH are plain data (objects.hpp); their life is in
// rnic.cpp.
#include "transport/rnic/objects.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>

#include "lib/util/stamps.hpp"
#include "transport/engine.hpp"
#include "transport/rnic/rnic.hpp"

namespace uroce::rnic {
namespace {

uint32_t ring_slots(uint32_t capacity) { return std::bit_ceil(std::max<uint32_t>(capacity, 1)); }

}  // namespace

// ---- MR ------------------------------------------------------------------------------

uint8_t* Mr::translate(uint64_t va, uint64_t len) const noexcept {
  // Never form va + len or iova + length: either may wrap past 2^64
  // (an MR may end exactly at the top of the address space).
  if (va < iova) return nullptr;
  const uint64_t off = va - iova;
  if (off > length || len > length - off) return nullptr;
  // In integers: an implicit ODP MR's `addr` is null (rnic.hpp, reg_mr).
  return reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(addr) + off);
}

// ---- CQ ------------------------------------------------------------------------------------

size_t Cq::bytes(uint32_t capacity) noexcept { return (size_t{capacity} + 1) * sizeof(Cqe); }

Cq::Cq(Rnic& rnic, uint32_t capacity, void* context, CompChannel* channel, RingBlock&& mem)
    : rnic_(rnic), context_(context), channel_(channel), capacity_(capacity),
      mem_(static_cast<RingBlock&&>(mem)),
      ring_(RingLayout::view<Cqe>(mem_, 0, capacity + 1).data()),
      slots_(capacity + 1) {}

Cq::~Cq() = default;

bool Cq::push(const ibv_wc& wc, bool solicited) noexcept {
  UROCE_ASSERT_ENGINE(rnic_.engine());
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
  UROCE_ASSERT_ENGINE(rnic_.engine());
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

// ---- receive queues -------------------------------------------------------------------------

struct RecvQueue::Layout {
  RingLayout l;  // first: the offsets below are taken from it in order
  size_t slots, ring, sges;
  Layout(uint32_t capacity, uint32_t max_sge) noexcept
      : slots(ring_slots(capacity)), ring(l.add<RecvWqe>(slots)), sges(l.add<ibv_sge>(slots * max_sge)) {}
};

size_t RecvQueue::bytes(uint32_t capacity, uint32_t max_sge) noexcept {
  return Layout(capacity, std::max<uint32_t>(max_sge, 1)).l.bytes();
}

void RecvQueue::init(uint32_t capacity, uint32_t max_sge, RingBlock&& mem) noexcept {
  capacity_ = capacity;
  max_sge_ = std::max<uint32_t>(max_sge, 1);
  const Layout lay(capacity, max_sge_);
  mem_ = static_cast<RingBlock&&>(mem);
  ring_ = RingLayout::construct<RecvWqe>(mem_, lay.ring, lay.slots);
  sges_ = RingLayout::construct<ibv_sge>(mem_, lay.sges, lay.slots * max_sge_);
  for (size_t i = 0; i < ring_.size(); ++i) ring_[i].sge = &sges_[i * max_sge_];
  head_.store(0, std::memory_order_relaxed);
  tail_.store(0, std::memory_order_release);
}

uint32_t RecvQueue::size() const noexcept {
  return tail_.load(std::memory_order_acquire) - head_.load(std::memory_order_acquire);
}

bool RecvQueue::full() const noexcept { return size() >= capacity_; }

void RecvQueue::push(uint64_t wr_id, const ibv_sge* sge, uint32_t n) noexcept {
  const uint32_t tail = tail_.load(std::memory_order_relaxed);
  RecvWqe& slot = ring_[tail & (ring_.size() - 1)];
  slot.wr_id = wr_id;
  slot.num_sge = n;
  slot.total_len = 0;
  for (uint32_t i = 0; i < n; ++i) {
    slot.sge[i] = sge[i];
    slot.total_len += sge[i].length;
  }
  tail_.store(tail + 1, std::memory_order_release);  // publishes the WQE to the engine
}

RecvWqe* RecvQueue::front() noexcept {
  const uint32_t head = head_.load(std::memory_order_relaxed);
  if (head == tail_.load(std::memory_order_acquire)) return nullptr;
  return &ring_[head & (ring_.size() - 1)];
}

void RecvQueue::pop() noexcept {
  head_.store(head_.load(std::memory_order_relaxed) + 1, std::memory_order_release);  // frees the slot
}

void RecvQueue::clear() noexcept { head_.store(tail_.load(std::memory_order_acquire), std::memory_order_release); }

bool RecvQueue::resize(uint32_t capacity, RingBlock& mem, RingBlock* old) noexcept {
  const uint32_t head = head_.load(std::memory_order_relaxed);
  const uint32_t used = tail_.load(std::memory_order_relaxed) - head;
  if (used > capacity) return false;
  const Layout lay(capacity, max_sge_);
  const std::span<RecvWqe> ring = RingLayout::construct<RecvWqe>(mem, lay.ring, lay.slots);
  const std::span<ibv_sge> sges = RingLayout::construct<ibv_sge>(mem, lay.sges, lay.slots * max_sge_);
  for (size_t i = 0; i < ring.size(); ++i) ring[i].sge = &sges[i * max_sge_];
  for (uint32_t i = 0; i < used; ++i) copy_recv_wqe(ring[i], ring_[(head + i) & (ring_.size() - 1)]);
  *old = static_cast<RingBlock&&>(mem_);
  mem_ = static_cast<RingBlock&&>(mem);
  ring_ = ring;
  sges_ = sges;
  capacity_ = capacity;
  head_.store(0, std::memory_order_relaxed);
  tail_.store(used, std::memory_order_release);
  return true;
}

// ---- SRQ --------------------------------------------------------------------------------------

Srq::Srq(Rnic& rnic, Pd* pd, const ibv_srq_attr& attr, void* context, RingBlock&& mem, uint32_t number, Xrcd* xrcd,
         Cq* cq)
    : rnic_(rnic),
      pd_(pd),
      context_(context),
      number_(number),
      xrcd_(xrcd),
      cq_(cq),
      max_sge_(attr.max_sge),
      limit_(attr.srq_limit) {
  rq_.init(attr.max_wr, attr.max_sge, static_cast<RingBlock&&>(mem));
}

Srq::~Srq() = default;

int Srq::post_recv(const ibv_recv_wr* wr, const ibv_recv_wr** bad) {
  std::lock_guard lock(rq_.post_mu);
  for (; wr != nullptr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > max_sge_) {
      if (bad) *bad = wr;
      return EINVAL;
    }
    if (rq_.full()) {
      if (bad) *bad = wr;
      return ENOMEM;
    }
    rq_.push(wr->wr_id, wr->sg_list, static_cast<uint32_t>(wr->num_sge));
  }
  return 0;
}

int Srq::modify(const ibv_srq_attr& attr, int mask) {
  if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  // IBA 10.2.9.2 / 11.2.3.4: the limit must not exceed the queue size.
  if ((mask & IBV_SRQ_MAX_WR) && (attr.max_wr == 0 || attr.max_wr > kMaxSrqWr)) return EINVAL;
  // A resize's ring is allocated, and the old one freed, here in the
  // caller's thread (ring_memory.hpp).
  RingBlock mem, old;
  if ((mask & IBV_SRQ_MAX_WR) &&
      RingBlock::allocate(RecvQueue::bytes(attr.max_wr, rq_.max_sge()), rq_.memory().allocator(), RingUse::Srq,
                          &mem) != 0)
    return ENOMEM;
  int rc = 0;
  // In the engine's loop (nothing is popped meanwhile), holding the
  // posters' lock there: a poster holds it only to fill a slot.
  rnic_.engine().run_sync([&] {
    std::lock_guard lock(rq_.post_mu);
    const uint32_t max_wr = (mask & IBV_SRQ_MAX_WR) ? attr.max_wr : rq_.capacity();
    if ((mask & IBV_SRQ_LIMIT) && attr.srq_limit > max_wr) {
      rc = EINVAL;
      return;
    }
    // Resize (device cap SRQ_RESIZE): never below the WQEs queued now.
    if ((mask & IBV_SRQ_MAX_WR) && !rq_.resize(attr.max_wr, mem, &old)) {
      rc = EINVAL;
      return;
    }
    if (mask & IBV_SRQ_LIMIT) limit_.store(attr.srq_limit, std::memory_order_release);  // 0 disarms
  });
  return rc;
}

int Srq::query(ibv_srq_attr* attr) const {
  attr->max_wr = rq_.capacity();
  attr->max_sge = max_sge_;
  attr->srq_limit = limit_.load(std::memory_order_acquire);
  return 0;
}

void Srq::after_pop() noexcept {
  UROCE_ASSERT_ENGINE(rnic_.engine());
  const uint32_t limit = limit_.load(std::memory_order_acquire);
  if (limit == 0 || rq_.size() >= limit) return;
  // IBA 10.2.9.2 (SRQ limit): the event fires once, then the limit is
  // disarmed until the application sets it again (ibv_modify_srq(3)).
  uint32_t expect = limit;
  if (!limit_.compare_exchange_strong(expect, 0, std::memory_order_acq_rel)) return;
  AsyncEvent ev;
  ev.type = IBV_EVENT_SRQ_LIMIT_REACHED;
  ev.srq = this;
  rnic_.raise(ev);
}

}  // namespace uroce::rnic
