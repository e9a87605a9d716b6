// memory: registration checks against the process's mappings and guarded
// accesses to registered memory (memory.hpp has the why).
//
// Each accessor is a fault_guard region (lib/util/fault_guard.hpp): a
// fault inside it makes it return false.
#include "transport/rnic/memory.hpp"

#include "lib/util/fault_guard.hpp"

#include <fcntl.h>
#include <setjmp.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
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

std::atomic<uint64_t> g_faults{0};  // of these accessors only (fault_guard counts every user's)

bool counted_fault() noexcept {
  g_faults.fetch_add(1, std::memory_order_relaxed);
  return false;
}

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

void install() noexcept { fault_guard::install(); }

__attribute__((noinline)) bool copy(void* dst, const void* src, size_t n) noexcept {
  if (n == 0) return true;
  fault_guard::Guard g;
  if (sigsetjmp(g.env, 0) != 0) return counted_fault();
  fault_guard::enter(&g);
  std::memcpy(dst, src, n);
  fault_guard::leave();
  return true;
}

__attribute__((noinline)) bool cas64(uint64_t* word, uint64_t compare, uint64_t swap, uint64_t* orig) noexcept {
  fault_guard::Guard g;
  if (sigsetjmp(g.env, 0) != 0) return counted_fault();
  fault_guard::enter(&g);
  uint64_t expected = compare;
  __atomic_compare_exchange_n(word, &expected, swap, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  fault_guard::leave();
  *orig = expected;  // the word's value before: `compare` when it matched
  return true;
}

__attribute__((noinline)) bool fetch_add64(uint64_t* word, uint64_t add, uint64_t* orig) noexcept {
  fault_guard::Guard g;
  if (sigsetjmp(g.env, 0) != 0) return counted_fault();
  fault_guard::enter(&g);
  const uint64_t before = __atomic_fetch_add(word, add, __ATOMIC_SEQ_CST);
  fault_guard::leave();
  *orig = before;
  return true;
}

__attribute__((noinline)) bool store64(uint64_t* word, uint64_t value) noexcept {
  fault_guard::Guard g;
  if (sigsetjmp(g.env, 0) != 0) return counted_fault();
  fault_guard::enter(&g);
  __atomic_store_n(word, value, __ATOMIC_SEQ_CST);
  fault_guard::leave();
  return true;
}

uint64_t faults() noexcept { return g_faults.load(std::memory_order_relaxed); }

}  // namespace uroce::rnic::memory
