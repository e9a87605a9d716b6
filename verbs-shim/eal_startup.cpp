// Three of the drop-in's static EAL's start-up costs, taken out (issue 13:
// a device usable within 100 ms of the first call).  The drop-in links DPDK
// statically and these calls cross objects of librte_eal.a, so
// `-Wl,--wrap=...` (verbs-shim/meson.build) sends them here.
//
// eal_cpu_socket_id: rte_eal_cpu_init asks the NUMA node of every possible
// lcore (RTE_MAX_LCORE, 128) by probing /sys/devices/system/node/node<n>/
// cpu<c> for each of RTE_MAX_NUMA_NODES nodes: about 4,000 sysfs path
// walks on a 2-CPU machine, a quarter of the start-up's CPU time here.  A
// CPU with no /sys/devices/system/cpu/cpu<c> is on no node, and the real
// function answers 0 for it after all its probes: answered at once here;
// a CPU that exists gets the real function.
//
// eal_cpu_detected: whether a CPU is there (its topology/core_id file),
// asked by rte_eal_cpu_init of every id up to CPU_SETSIZE (1,024 more path
// walks).  No id past the last one /sys/devices/system/cpu/possible lists
// can be there: answered at once; the others get the real function.
//
// get_tsc_freq: the TSC's frequency without the EAL's 100 ms nap.
// DPDK 22.11's EAL asks CPUID first (get_tsc_freq_arch: Intel's leaves
// 0x15/0x16, or an MSR); where that says nothing — AMD, most VMs, this
// machine — its Linux get_tsc_freq() sleeps 100 ms against
// CLOCK_MONOTONIC_RAW (research/dpdk.md: about 100 of the 111-160 ms of
// rte_eal_init): that nap alone is the whole budget.  Instead:
//   1. the kernel's own calibrated figure, as perf reads it: a perf event's
//      user page carries time_mult/time_shift (ns = cycles * mult >> shift)
//      when the TSC is the clock source (cap_user_time).  Not asked under a
//      hypervisor (CPUID.1:ECX bit 31): x86 sets cap_user_time only when
//      the scheduler's clock is the native TSC, which a guest's is not (KVM's
//      paravirtual clock), and the process's first perf event costs 7-18 ms
//      here (the kernel switches perf on) for a page that says nothing;
//   2. otherwise a 5 ms measurement against CLOCK_MONOTONIC_RAW, rounded to
//      10 MHz as DPDK rounds its own (the timers need no better);
//   3. otherwise DPDK's own function.
#include <cpuid.h>
#include <linux/perf_event.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// CPUID.1:ECX bit 31, which hypervisors set for their guests.
bool under_hypervisor() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  return (ecx & (1u << 31)) != 0;
}

uint64_t tsc_from_perf() {
  if (under_hypervisor()) return 0;
  perf_event_attr attr{};
  attr.size = sizeof attr;
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_DUMMY;
  attr.disabled = 1;
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  const long fd = syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
  if (fd < 0) return 0;  // perf_event_paranoid, seccomp: measure instead
  const long page = sysconf(_SC_PAGESIZE);
  void* p = mmap(nullptr, static_cast<size_t>(page), PROT_READ, MAP_SHARED, static_cast<int>(fd), 0);
  uint64_t hz = 0;
  if (p != MAP_FAILED) {
    const auto* pc = static_cast<const volatile perf_event_mmap_page*>(p);
    if (pc->cap_user_time && pc->time_mult != 0) {
      // cycles * mult >> shift = ns, so Hz = 1e9 * 2^shift / mult.
      hz = static_cast<uint64_t>((static_cast<unsigned __int128>(1'000'000'000) << pc->time_shift) / pc->time_mult);
    }
    munmap(p, static_cast<size_t>(page));
  }
  close(static_cast<int>(fd));
  return hz;
}

// The highest CPU id in /sys/devices/system/cpu/possible ("0-1",
// "0-3,8-11"), or -1 when it cannot be read.
long last_possible_cpu() {
  FILE* f = std::fopen("/sys/devices/system/cpu/possible", "re");
  if (f == nullptr) return -1;
  char buf[256] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  if (!ok) return -1;
  long last = -1;
  for (const char* p = buf; *p != '\0';) {
    if (*p >= '0' && *p <= '9') {
      char* end = nullptr;
      last = std::strtol(p, &end, 10);
      p = end;
    } else {
      ++p;
    }
  }
  return last;
}

uint64_t ns_raw() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC_RAW, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(t.tv_nsec);
}

uint64_t tsc_measured() {
  constexpr uint64_t kNs = 5'000'000;
  constexpr uint64_t k10MHz = 10'000'000;
  const uint64_t t0 = ns_raw();
  const uint64_t c0 = __rdtsc();
  const timespec nap{0, static_cast<long>(kNs)};
  nanosleep(&nap, nullptr);
  const uint64_t t1 = ns_raw();
  const uint64_t c1 = __rdtsc();
  if (t1 <= t0 || c1 <= c0) return 0;
  const uint64_t hz = static_cast<uint64_t>(static_cast<unsigned __int128>(c1 - c0) * 1'000'000'000u / (t1 - t0));
  return (hz + k10MHz / 2) / k10MHz * k10MHz;
}

}  // namespace

extern "C" int __real_eal_cpu_detected(unsigned lcore_id);

extern "C" int __wrap_eal_cpu_detected(unsigned lcore_id) {
  static const long last = last_possible_cpu();
  if (last >= 0 && lcore_id > static_cast<unsigned long>(last)) return 0;
  return __real_eal_cpu_detected(lcore_id);
}

extern "C" unsigned __real_eal_cpu_socket_id(unsigned lcore_id);

extern "C" unsigned __wrap_eal_cpu_socket_id(unsigned lcore_id) {
  char path[64];
  std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%u", lcore_id);
  if (access(path, F_OK) != 0) return 0;
  return __real_eal_cpu_socket_id(lcore_id);
}

extern "C" uint64_t __real_get_tsc_freq(void);

extern "C" uint64_t __wrap_get_tsc_freq(void) {
  if (const uint64_t hz = tsc_from_perf(); hz != 0) return hz;
  if (const uint64_t hz = tsc_measured(); hz != 0) return hz;
  return __real_get_tsc_freq();
}
