// srq: receive queues — a QP's own and a shared receive queue's — and
// SRQs (objects.hpp, IBA 10.2.9).
#include "transport/rnic/objects.hpp"

#include <cassert>
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
      multi_lcore_(rnic.multi_lcore()),
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
  assert(rnic_.on_an_engine());
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
