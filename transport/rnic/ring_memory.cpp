// Ring memory from the heap or a parent domain's allocator (ring_memory.hpp).
#include "transport/rnic/ring_memory.hpp"

#include <cerrno>
#include <cstdlib>

namespace uroce::rnic {

RingBlock& RingBlock::operator=(RingBlock&& o) noexcept {
  if (this != &o) {
    release();
    p_ = o.p_;
    n_ = o.n_;
    app_ = o.app_;
    has_alloc_ = o.has_alloc_;
    a_ = o.a_;
    use_ = o.use_;
    o.p_ = nullptr;
    o.n_ = 0;
    o.app_ = false;
  }
  return *this;
}

int RingBlock::allocate(size_t bytes, const RingAllocator* a, RingUse use, RingBlock* out) noexcept {
  out->release();
  const size_t n = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = nullptr;
  bool app = false;
  if (a != nullptr && a->alloc != nullptr) {
    p = a->alloc(a->pd, a->context, n, kAlign, static_cast<uint64_t>(use));
    if (p == nullptr) return ENOMEM;  // the allocator's error
    // IBV_ALLOCATOR_USE_DEFAULT: the heap after all.
    app = p != IBV_ALLOCATOR_USE_DEFAULT;
    if (app && reinterpret_cast<uintptr_t>(p) % kMinAlign != 0) {
      // Not even the alignment the rings' entries need: given back, refused.
      if (a->free != nullptr) a->free(a->pd, a->context, p, static_cast<uint64_t>(use));
      return ENOMEM;
    }
    if (!app) p = nullptr;
  }
  if (!app) {
    p = std::aligned_alloc(kAlign, n);
    if (p == nullptr) return ENOMEM;
  }
  out->p_ = static_cast<uint8_t*>(p);
  out->n_ = n;
  out->app_ = app;
  out->has_alloc_ = a != nullptr && a->alloc != nullptr;
  out->a_ = out->has_alloc_ ? *a : RingAllocator{};
  out->use_ = use;
  return 0;
}

void RingBlock::release() noexcept {
  if (p_ == nullptr) return;
  if (app_) {
    if (a_.free != nullptr) a_.free(a_.pd, a_.context, p_, static_cast<uint64_t>(use_));
  } else {
    std::free(p_);
  }
  p_ = nullptr;
  n_ = 0;
  app_ = false;
}

}  // namespace uroce::rnic
