// A fault guard: SIGSEGV/SIGBUS inside a guarded region returns to the
// region's start (the region then reports failure) instead of killing the
// process.  Two users: the RNIC's accesses to registered memory the
// application may have unmapped (transport/rnic/memory.hpp), and bursts on a
// memif port whose peer may unmap the shared regions under it (DPDK 22.11's
// memif disconnect, research/dpdk.md 3.4; drivers/dpdk/dpdk_port.cpp).
//
// How: a region records a sigjmp_buf in a thread-local slot, runs, and
// clears the slot.  The process-wide handler, on a thread whose slot is
// set, clears it and jumps back.  It is installed with SA_NODEFER, so
// jumping out of it leaves no signal blocked (sigsetjmp with savemask 0
// saves none: a few nanoseconds per region).  A fault anywhere else goes to
// the handler installed before ours (or the default action), unchanged.
//
//   fault_guard::Guard g;                      // in the function that runs the
//   if (sigsetjmp(g.env, 0) != 0) return false;  // region (its frame must stay)
//   fault_guard::enter(&g);
//   ... access ...
//   fault_guard::leave();
//
// Nothing between sigsetjmp and leave() may own a destructor: the jump
// skips C++ cleanup.  run() wraps a function call in a region.
//
// Threads: install() any thread, once per process (idempotent); regions on
// any thread, each guarding only its own.
#pragma once

#include <setjmp.h>

#include <atomic>
#include <cstdint>

namespace uroce::fault_guard {

struct Guard {
  sigjmp_buf env;
};

namespace detail {
extern thread_local Guard* t_guard;
}  // namespace detail

// Installs the handler (idempotent).  Until then regions fault like any code.
void install() noexcept;

inline void enter(Guard* g) noexcept {
  detail::t_guard = nullptr;  // touch the TLS slot first: the handler never makes its first access
  std::atomic_signal_fence(std::memory_order_seq_cst);
  detail::t_guard = g;
  std::atomic_signal_fence(std::memory_order_seq_cst);
}
inline void leave() noexcept {
  std::atomic_signal_fence(std::memory_order_seq_cst);
  detail::t_guard = nullptr;
}

// fn(arg) in a region: false when it faulted (it did not finish).
bool run(void (*fn)(void*), void* arg) noexcept;

// Faults turned into failures since the process started (all threads).
uint64_t faults() noexcept;

}  // namespace uroce::fault_guard
