// The application's memory as the RNIC reaches it (DESIGN.md "Memory a
// remote peer reaches").
//
// A kernel RNIC pins what ibv_reg_mr registers: the call fails with EFAULT
// for a range the process has not mapped with the rights asked for, and
// the pages stay put until deregistration, whatever the process does to
// its mappings meanwhile.  A user-space engine can pin nothing.  Two
// mechanisms stand in for it:
//
//   check_mapped   at registration (reg_mr, rereg_mr): every page of the
//                  range is mapped, readable, and writable when the access
//                  flags let anyone write it; else EFAULT, as the kernel.
//                  One read of /proc/self/maps per registration.
//   copy / cas64 / fetch_add64
//                  every access the engine makes to registered memory.
//                  Memory the application unmapped (or truncated, for a
//                  file mapping) after registering it faults; a
//                  process-wide SIGSEGV/SIGBUS handler turns a fault inside
//                  one of these calls into a `false` return, so the access
//                  ends in a remote access error for the peer (or a local
//                  protection error for our own work request) instead of
//                  killing the process.  A fault anywhere else goes to the
//                  handler that was installed before ours (or the default
//                  action), unchanged.
//
// What this cannot do that pinning does: memory unmapped and then mapped
// again at the same address by something else is reached through the new
// mapping (the kernel would reach the old pages).  Deregister before you
// unmap, as the verbs man pages ask.
//
// Threads: install() any thread (once per process); the accessors on any
// thread (the engine's, in practice), each guarding only its own thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace uroce::rnic::memory {

// 0 when [addr, addr+len) is mapped with read (and, if `write`, write)
// rights; EFAULT when some page is not; EINVAL when the range wraps past
// the end of the address space.  A zero length is always 0.
int check_mapped(const void* addr, uint64_t len, bool write) noexcept;

// Installs the fault handler (idempotent).  Until it is installed the
// accessors below fault like plain memcpy.
void install() noexcept;

// `n` bytes from `src` to `dst`; false when either side faulted (part of
// the bytes may have been copied).
bool copy(void* dst, const void* src, size_t n) noexcept;
// The 8-byte atomics of IBA 9.4.5 on a word of registered memory: false
// when it faulted (nothing was changed).  `orig` receives the word's value
// before the operation.
bool cas64(uint64_t* word, uint64_t compare, uint64_t swap, uint64_t* orig) noexcept;
bool fetch_add64(uint64_t* word, uint64_t add, uint64_t* orig) noexcept;
// ATOMIC WRITE (IBA 1.5): `value` stored as one 64-bit write; false when it
// faulted (nothing was changed).
bool store64(uint64_t* word, uint64_t value) noexcept;

// Faults turned into errors since the process started (all threads).
uint64_t faults() noexcept;

}  // namespace uroce::rnic::memory
