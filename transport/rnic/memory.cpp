// memory: registration checks against the process's mappings and guarded
// accesses to registered memory (memory.hpp has the why).
//
// The guard: each accessor records a sigjmp_buf in a thread-local slot,
// does the access, and clears the slot.  The SIGSEGV/SIGBUS handler, on a
// thread whose slot is set, clears it and jumps back, and the accessor
// returns false.  The handler is installed with SA_NODEFER, so jumping out
// of it leaves no signal blocked (sigsetjmp with savemask 0 saves none: a
// few nanoseconds per access).  Nothing between sigsetjmp and the access
// has a destructor, so the jump skips no C++ cleanup.
#include "transport/rnic/memory.hpp"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

namespace uroce::rnic::memory {
namespace {

// ---- /proc/self/maps ---------------------------------------------------------------

std::string read_maps() {
  std::string out;
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  ::close(fd);
  return out;
}

struct Mapping {
  uint64_t start = 0;
  uint64_t end = 0;
  bool read = false;
  bool write = false;
};

// One line: "start-end perms offset dev inode [path]".
bool parse_line(std::string_view line, Mapping* m) {
  const size_t dash = line.find('-');
  const size_t sp = line.find(' ');
  if (dash == std::string_view::npos || sp == std::string_view::npos || dash > sp || sp + 3 > line.size()) {
    return false;
  }
  const char* p = line.data();
  if (std::from_chars(p, p + dash, m->start, 16).ec != std::errc()) return false;
  if (std::from_chars(p + dash + 1, p + sp, m->end, 16).ec != std::errc()) return false;
  m->read = line[sp + 1] == 'r';
  m->write = line[sp + 2] == 'w';
  return m->end > m->start;
}

// ---- the guard -----------------------------------------------------------------------

struct Guard {
  sigjmp_buf env;
};

// The guard of this thread's access under way, or null.  Touched by the
// accessors before any access, so the handler never makes the first
// access to it (which could allocate the thread's TLS block).
thread_local Guard* t_guard = nullptr;

std::atomic<uint64_t> g_faults{0};
struct sigaction g_prev_segv {};
struct sigaction g_prev_bus {};
std::once_flag g_installed;

// Hand a fault that is not ours to whoever had the signal before us.
void chain(int sig, siginfo_t* info, void* uc) {
  const struct sigaction& prev = sig == SIGSEGV ? g_prev_segv : g_prev_bus;
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, uc);
    return;
  }
  if (prev.sa_handler == SIG_IGN) return;
  if (prev.sa_handler == SIG_DFL) {
    // Back to the default action: returning re-runs the faulting
    // instruction, which now ends the process as it would have without us.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    return;
  }
  prev.sa_handler(sig);
}

void on_fault(int sig, siginfo_t* info, void* uc) {
  Guard* g = t_guard;
  if (g != nullptr) {
    t_guard = nullptr;
    g_faults.fetch_add(1, std::memory_order_relaxed);
    siglongjmp(g->env, 1);
  }
  chain(sig, info, uc);
}

// Keeps the compiler from moving the access across the slot's writes.
inline void fence() noexcept { std::atomic_signal_fence(std::memory_order_seq_cst); }

}  // namespace

int check_mapped(const void* addr, uint64_t len, bool write) noexcept {
  if (len == 0) return 0;
  const auto start = reinterpret_cast<uint64_t>(addr);
  if (start + len < start) return EINVAL;  // wraps (the kernel's ib_umem_get: EINVAL)
  const uint64_t end = start + len;
  try {
    const std::string maps = read_maps();
    uint64_t at = start;  // everything below `at` is known to be mapped with the rights
    size_t pos = 0;
    while (pos < maps.size() && at < end) {
      size_t nl = maps.find('\n', pos);
      if (nl == std::string::npos) nl = maps.size();
      Mapping m;
      const bool ok = parse_line(std::string_view(maps).substr(pos, nl - pos), &m);
      pos = nl + 1;
      if (!ok || m.end <= at) continue;
      if (m.start > at) return EFAULT;  // a hole
      if (!m.read || (write && !m.write)) return EFAULT;
      at = m.end;
    }
    return at >= end ? 0 : EFAULT;
  } catch (...) {
    return ENOMEM;
  }
}

void install() noexcept {
  std::call_once(g_installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_prev_segv);
    sigaction(SIGBUS, &sa, &g_prev_bus);
  });
}

__attribute__((noinline)) bool copy(void* dst, const void* src, size_t n) noexcept {
  if (n == 0) return true;
  Guard g;
  t_guard = nullptr;
  if (sigsetjmp(g.env, 0) != 0) return false;
  t_guard = &g;
  fence();
  std::memcpy(dst, src, n);
  fence();
  t_guard = nullptr;
  return true;
}

__attribute__((noinline)) bool cas64(uint64_t* word, uint64_t compare, uint64_t swap, uint64_t* orig) noexcept {
  Guard g;
  t_guard = nullptr;
  if (sigsetjmp(g.env, 0) != 0) return false;
  t_guard = &g;
  fence();
  uint64_t expected = compare;
  __atomic_compare_exchange_n(word, &expected, swap, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  fence();
  t_guard = nullptr;
  *orig = expected;  // the word's value before: `compare` when it matched
  return true;
}

__attribute__((noinline)) bool fetch_add64(uint64_t* word, uint64_t add, uint64_t* orig) noexcept {
  Guard g;
  t_guard = nullptr;
  if (sigsetjmp(g.env, 0) != 0) return false;
  t_guard = &g;
  fence();
  const uint64_t before = __atomic_fetch_add(word, add, __ATOMIC_SEQ_CST);
  fence();
  t_guard = nullptr;
  *orig = before;
  return true;
}

uint64_t faults() noexcept { return g_faults.load(std::memory_order_relaxed); }

}  // namespace uroce::rnic::memory
