// The memory a queue's ring lives in: a QP's send and receive rings, an
// SRQ's, a CQ's.  From the heap, or from the application's own allocator
// when the queue was made under a parent domain that has one
// (ibv_alloc_parent_domain(3): "provider memory allocations will use this
// function"; it may answer IBV_ALLOCATOR_USE_DEFAULT, or NULL for an error).
//
// Threads: a RingBlock is made and destroyed by application threads, never
// in the engine's loop: the allocator is the application's code (a Python
// callback under pyverbs needs its interpreter lock, which the thread
// waiting on the engine may hold).  Rnic::create_* allocate before they
// enter the loop; destroy_* and resizes free after they leave it.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <type_traits>

namespace uroce::rnic {

// A parent domain's allocator (ibv_parent_domain_init_attr).
struct RingAllocator {
  void* (*alloc)(ibv_pd* pd, void* pd_context, size_t size, size_t alignment, uint64_t resource_type) = nullptr;
  void (*free)(ibv_pd* pd, void* pd_context, void* ptr, uint64_t resource_type) = nullptr;
  ibv_pd* pd = nullptr;      // the parent domain, as the application knows it
  void* context = nullptr;   // its pd_context
};

// The resource_type the allocator is told (ibv_alloc_parent_domain(3):
// the driver id in the upper 32 bits, a code of the provider's below).
// uroce answers to the kernel's RDMA_DRIVER_RXE id, as it stands in for rxe.
inline constexpr uint64_t kRdmaDriverRxe = 13;
enum class RingUse : uint64_t {
  QpSend = kRdmaDriverRxe << 32 | 1,
  QpRecv = kRdmaDriverRxe << 32 | 2,
  Cq = kRdmaDriverRxe << 32 | 3,
  Srq = kRdmaDriverRxe << 32 | 4,
};

// One block of ring memory, 64-byte aligned.  Its bytes are not zeroed by
// the heap path (a CQ's entries are written before they are read, and a
// large ring is touched only as it fills); the queues construct what they
// keep in it.
class RingBlock {
 public:
  static constexpr size_t kAlign = 64;     // asked for (a cache line)
  static constexpr size_t kMinAlign = 16;  // taken from an allocator (what the entries need)
  RingBlock() = default;
  RingBlock(RingBlock&& o) noexcept { *this = static_cast<RingBlock&&>(o); }
  RingBlock& operator=(RingBlock&& o) noexcept;
  RingBlock(const RingBlock&) = delete;
  RingBlock& operator=(const RingBlock&) = delete;
  ~RingBlock() { release(); }

  // 0, or ENOMEM (the heap's or the allocator's failure).  `a` may be null
  // (the heap); it is copied.
  static int allocate(size_t bytes, const RingAllocator* a, RingUse use, RingBlock* out) noexcept;
  uint8_t* data() const noexcept { return p_; }
  size_t size() const noexcept { return n_; }
  // The allocator it was asked of (nullptr: the heap), for the next block
  // of the same queue (a resize).
  const RingAllocator* allocator() const noexcept { return has_alloc_ ? &a_ : nullptr; }
  void release() noexcept;

 private:
  uint8_t* p_ = nullptr;
  size_t n_ = 0;
  bool app_ = false;
  bool has_alloc_ = false;
  RingAllocator a_{};
  RingUse use_ = RingUse::Cq;
};

// Carves typed arrays out of a block, each 64-byte aligned, in order.
class RingLayout {
 public:
  template <class T>
  size_t add(size_t n) noexcept {
    static_assert(std::is_trivially_destructible_v<T> && alignof(T) <= RingBlock::kMinAlign);
    const size_t at = bytes_;
    bytes_ += round_up(n * sizeof(T));
    return at;
  }
  size_t bytes() const noexcept { return bytes_ == 0 ? RingBlock::kAlign : bytes_; }
  // `n` value-initialised T at `at` (from add) of `b`.
  template <class T>
  static std::span<T> construct(RingBlock& b, size_t at, size_t n) noexcept {
    T* p = reinterpret_cast<T*>(b.data() + at);
    for (size_t i = 0; i < n; ++i) new (p + i) T{};
    return {p, n};
  }
  // `n` T at `at`, not initialised (implicit-lifetime types only: written
  // before they are read).
  template <class T>
  static std::span<T> view(RingBlock& b, size_t at, size_t n) noexcept {
    static_assert(std::is_trivially_copyable_v<T>);
    return {std::launder(reinterpret_cast<T*>(b.data() + at)), n};
  }

 private:
  static size_t round_up(size_t n) noexcept { return (n + RingBlock::kAlign - 1) / RingBlock::kAlign * RingBlock::kAlign; }
  size_t bytes_ = 0;
};

}  // namespace uroce::rnic
