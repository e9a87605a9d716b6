#include "drivers/dpdk/eal.hpp"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_mempool.h>
#include <rte_memzone.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <chrono>
#include <thread>

#include "lib/util/quiet_threads.hpp"

namespace uroce::drivers::dpdk {

static_assert(kMbufHeadroom == RTE_PKTMBUF_HEADROOM, "kDefaultDataRoom assumes DPDK's headroom");
static_assert(kDefaultPoolCache <= RTE_MEMPOOL_CACHE_MAX_SIZE);

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kProgramName = "uroce";
constexpr std::string_view kPrefixStem = "uroce-";
constexpr std::string_view kTelemetrySocket = "dpdk_telemetry.v2";
constexpr std::string_view kQuietTelemetry = "--log-level=lib.telemetry:error";
constexpr const char* kProcMounts = "/proc/mounts";
constexpr const char* kProcMeminfo = "/proc/meminfo";
constexpr const char* kSysHugepages = "/sys/kernel/mm/hugepages";
// DPDK refuses a cache larger than n / 1.5 (CALC_CACHE_FLUSHTHRESH).
constexpr uint32_t kCacheFlushNum = 2;
constexpr uint32_t kCacheFlushDen = 3;

// ---- probing the host -------------------------------------------------------

bool hugetlbfs_mounted() {
  std::ifstream in(kProcMounts);
  std::string dev, dir, type;
  std::string rest;
  while (in >> dev >> dir >> type) {
    if (type == "hugetlbfs") return true;
    std::getline(in, rest);
  }
  return false;
}

uint64_t read_u64(const fs::path& p) {
  std::ifstream in(p);
  uint64_t v = 0;
  in >> v;
  return in ? v : 0;
}

// Free hugepages of every size; /proc/meminfo knows only the default size.
uint64_t free_hugepages() {
  std::error_code ec;
  uint64_t total = 0;
  bool any = false;
  for (const auto& e : fs::directory_iterator(kSysHugepages, ec)) {
    total += read_u64(e.path() / "free_hugepages");
    any = true;
  }
  if (any) return total;
  std::ifstream in(kProcMeminfo);
  std::string key;
  uint64_t v = 0;
  while (in >> key) {
    if (key == "HugePages_Free:" && in >> v) return v;
    std::getline(in, key);
  }
  return 0;
}

std::optional<unsigned> lowest_allowed_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return std::nullopt;
  for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) return cpu;
  }
  return std::nullopt;
}

// ---- runtime directories ---------------------------------------------------

// Where EAL puts runtime directories (eal_create_runtime_dir in 22.11).
fs::path runtime_base() {
  if (geteuid() == 0) return "/var/run/dpdk";
  if (const char* xdg = std::getenv("XDG_RUNTIME_DIR")) return fs::path(xdg) / "dpdk";
  return "/tmp/dpdk";
}

// Removes the files (telemetry socket, config) in one runtime directory,
// then the directory.  Never recurses: EAL puts no subdirectories there.
void remove_runtime_dir(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_directory(ec)) fs::remove(e.path(), ec);
  }
  fs::remove(dir, ec);
}

std::optional<int> prefix_pid(std::string_view name) {
  if (!name.starts_with(kPrefixStem)) return std::nullopt;
  name.remove_prefix(kPrefixStem.size());
  int pid = 0;
  auto [end, err] = std::from_chars(name.data(), name.data() + name.size(), pid);
  if (err != std::errc() || end != name.data() + name.size() || pid <= 0) return std::nullopt;
  return pid;
}

// Runtime directories of uroce processes that died without eal_shutdown.
void sweep_stale_runtime_dirs(int own_pid) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(runtime_base(), ec)) {
    const auto pid = prefix_pid(e.path().filename().native());
    if (!pid || *pid == own_pid || !e.is_directory(ec)) continue;
    if (kill(*pid, 0) == -1 && errno == ESRCH) remove_runtime_dir(e.path());
  }
}

// ---- the once-only state -----------------------------------------------------

struct EalState {
  std::once_flag once;
  std::optional<Result<EalInfo>> result;
  std::vector<std::string> argv_storage;  // EAL may keep pointers into argv
  bool owns_runtime_dir = false;          // the prefix is uroce-<our pid>
  std::atomic<bool> running{false};
  std::mutex shutdown_mutex;
  std::atomic<int64_t> deferred_close_ns{-1};  // steady clock of the last note_deferred_close, -1: none
};

EalState& state() {
  static EalState s;
  return s;
}

std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  return s;
}

Result<EalInfo> start(const EalOptions& o) {
  const HostInfo host = probe_host();
  EalInfo info;
  info.args = eal_args(o, host);
  info.hugepages = use_hugepages(o, host);
  auto& st = state();
  st.owns_runtime_dir = o.file_prefix.empty();
  if (st.owns_runtime_dir) sweep_stale_runtime_dirs(host.pid);

  st.argv_storage = info.args;
  std::vector<char*> argv;
  for (auto& a : st.argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  cpu_set_t caller_cpus;
  const bool have_cpus = pthread_getaffinity_np(pthread_self(), sizeof caller_cpus, &caller_cpus) == 0;
  int rc = 0;
  {
    // DPDK's threads (interrupts, multi-process, telemetry) are started
    // here: they inherit a mask that keeps the program's signals off them.
    const QuietThreads quiet;
    rc = rte_eal_init(static_cast<int>(argv.size() - 1), argv.data());
  }
  if (rc < 0) {
    const int err = rte_errno;
    return Error{err, "rte_eal_init failed: " + std::string(rte_strerror(err)) + " (" + joined(info.args) + ")"};
  }
  if (o.restore_affinity && have_cpus) pthread_setaffinity_np(pthread_self(), sizeof caller_cpus, &caller_cpus);

  info.runtime_dir = rte_eal_get_runtime_dir();
  if (o.telemetry) info.telemetry_socket = (fs::path(info.runtime_dir) / kTelemetrySocket).native();
  info.main_lcore = rte_get_main_lcore();
  st.running.store(true, std::memory_order_release);
  return info;
}

}  // namespace

HostInfo probe_host() {
  HostInfo h;
  h.hugetlbfs_mounted = hugetlbfs_mounted();
  h.free_hugepages = free_hugepages();
  h.lowest_cpu = lowest_allowed_cpu();
  h.pid = static_cast<int>(getpid());
  return h;
}

bool use_hugepages(const EalOptions& o, const HostInfo& host) {
  switch (o.memory) {
    case EalMemory::kNoHuge: return false;
    case EalMemory::kHugepages: return true;
    case EalMemory::kAuto: return host.hugetlbfs_mounted && host.free_hugepages > 0;
  }
  return false;
}

std::vector<std::string> eal_args(const EalOptions& o, const HostInfo& host) {
  std::vector<std::string> a{std::string(kProgramName)};
  if (use_hugepages(o, host)) {
    a.emplace_back("--in-memory");
  } else {
    a.insert(a.end(), {"--no-huge", "--no-shconf", "-m", std::to_string(o.memory_mb)});
  }
  a.push_back("--file-prefix=" +
              (o.file_prefix.empty() ? std::string(kPrefixStem) + std::to_string(host.pid) : o.file_prefix));
  if (o.pci.empty()) a.emplace_back("--no-pci");
  for (const auto& dev : o.pci) a.insert(a.end(), {"-a", dev});
  if (!o.telemetry) a.emplace_back("--no-telemetry");
  if (!o.log_level.empty()) a.push_back("--log-level=" + o.log_level);
  // Telemetry's start-up note ("No legacy callbacks, legacy socket not
  // created") is a warning about an interface uroce never uses: at the
  // default levels the stack prints nothing on a program's stderr, as a
  // kernel provider would.  At info or debug it shows; `extra` overrides.
  if (o.log_level.empty() || o.log_level == "warning" || o.log_level == "error") {
    a.emplace_back(kQuietTelemetry);
  }
  a.insert(a.end(), {"-l", std::to_string(o.core.value_or(host.lowest_cpu.value_or(0)))});
  for (const auto& v : o.vdevs) a.push_back("--vdev=" + v);
  a.insert(a.end(), o.extra.begin(), o.extra.end());
  return a;
}

const Result<EalInfo>& eal_init(const EalOptions& options) {
  auto& st = state();
  std::call_once(st.once, [&] { st.result.emplace(start(options)); });
  return *st.result;
}

bool eal_running() noexcept { return state().running.load(std::memory_order_acquire); }

namespace {

// rte_pktmbuf_pool_create's steps (DPDK's rte_mbuf.c) with the mempool
// flags given and `populate(mp)` (0 or a negative errno) in place of
// rte_mempool_populate_default.  Null and rte_errno on failure.
template <class Populate>
rte_mempool* pktmbuf_pool_by_steps(const char* name, uint32_t n, uint32_t cache, uint16_t priv_size,
                                   uint16_t data_room, unsigned flags, Populate&& populate) {
  const uint32_t elt_size = sizeof(rte_mbuf) + priv_size + data_room;
  rte_mempool* mp = rte_mempool_create_empty(name, n, elt_size, cache, sizeof(rte_pktmbuf_pool_private),
                                             SOCKET_ID_ANY, flags);
  if (mp == nullptr) return nullptr;
  int rc = rte_mempool_set_ops_byname(mp, rte_mbuf_best_mempool_ops(), nullptr);
  if (rc == 0) {
    rte_pktmbuf_pool_private priv{};
    priv.mbuf_data_room_size = data_room;
    priv.mbuf_priv_size = priv_size;
    rte_pktmbuf_pool_init(mp, &priv);
    rc = populate(mp);
  }
  if (rc != 0) {
    rte_mempool_free(mp);
    rte_errno = -rc;
    return nullptr;
  }
  rte_mempool_obj_iter(mp, rte_pktmbuf_init, nullptr);
  return mp;
}

// RTE_MEMPOOL_F_NO_IOVA_CONTIG, populated as rte_pktmbuf_pool_create does.
rte_mempool* packed_pktmbuf_pool(const char* name, uint32_t n, uint32_t cache, uint16_t priv_size,
                                 uint16_t data_room) {
  return pktmbuf_pool_by_steps(name, n, cache, priv_size, data_room, RTE_MEMPOOL_F_NO_IOVA_CONTIG,
                               [](rte_mempool* mp) {
                                 const int rc = rte_mempool_populate_default(mp);
                                 return rc < 0 ? rc : 0;
                               });
}

// Objects laid out by us (no page-boundary moves) and of exactly the size
// asked (no padding to spread them over memory channels).
constexpr unsigned kPageFrameFlags = RTE_MEMPOOL_F_NO_IOVA_CONTIG | RTE_MEMPOOL_F_NO_SPREAD;

size_t page_size() noexcept {
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<size_t>(page) : 4096;
}

// A pool for net_af_xdp.  DPDK 22.11's af_xdp PMD makes its UMEM of the
// pool's memory as if the objects lay back to back from the first memory
// chunk's start: populated_size objects times the object size, from that
// chunk's page.  rte_pktmbuf_pool_create does not lay them out so: without
// hugepages each object must not cross a 4 KiB page, and an object of a
// page's size that starts off a page boundary is moved to the next one,
// so every object moves, and the last ~64 of a 4,095-object pool lie past
// the UMEM's end (measured: 263 KB past it).  A frame in one of those is
// an invalid descriptor to the kernel, which drops it without a word
// (XDP_STATISTICS tx_invalid_descs; sendto returns 0), and the mempool's
// cache hands the same mbuf back for the resend: ib_send_bw over af_xdp
// ended in RETRY_EXC_ERR in about 1 run in 3.  Here the objects are laid
// out from a page-aligned block of exactly `n` pages, one page each, so
// that the UMEM covers every one and no frame crosses a page.
rte_mempool* page_frames_pktmbuf_pool(const char* name, uint32_t n, uint32_t cache, uint16_t priv_size,
                                      uint16_t data_room) {
  const size_t page = page_size();
  if (rte_mempool_calc_obj_size(sizeof(rte_mbuf) + priv_size + data_room, kPageFrameFlags, nullptr) != page) {
    rte_errno = EINVAL;  // the caller's data room does not make a page (page_frame_data_room)
    return nullptr;
  }
  return pktmbuf_pool_by_steps(name, n, cache, priv_size, data_room, kPageFrameFlags, [&](rte_mempool* mp) {
    const std::string mz_name = std::string("MPF_") + name;
    const rte_memzone* mz =
        rte_memzone_reserve_aligned(mz_name.c_str(), size_t{n} * page, SOCKET_ID_ANY, 0, static_cast<unsigned>(page));
    if (mz == nullptr) return -rte_errno;
    const int rc = rte_mempool_populate_iova(
        mp, static_cast<char*>(mz->addr), mz->iova, mz->len,
        [](rte_mempool_memhdr*, void* opaque) { rte_memzone_free(static_cast<const rte_memzone*>(opaque)); },
        const_cast<rte_memzone*>(mz));
    if (rc < 0) rte_memzone_free(mz);  // no chunk took it: ours to free
    return rc < 0 ? rc : (mp->populated_size == n ? 0 : -ENOMEM);
  });
}

}  // namespace

uint16_t page_frame_data_room(uint16_t priv_size) noexcept {
  const auto page = static_cast<uint32_t>(page_size());
  const uint32_t fixed = sizeof(rte_mbuf) + priv_size;
  uint32_t room = page > fixed ? page - fixed : 0;
  room -= room % RTE_CACHE_LINE_SIZE;
  while (room > RTE_PKTMBUF_HEADROOM && rte_mempool_calc_obj_size(fixed + room, kPageFrameFlags, nullptr) > page) {
    room -= RTE_CACHE_LINE_SIZE;
  }
  return static_cast<uint16_t>(std::min<uint32_t>(room, UINT16_MAX));
}

Result<rte_mempool*> create_pktmbuf_pool(const PoolOptions& o) {
  if (!eal_running()) return Error{ENODEV, "create_pktmbuf_pool: the EAL is not running"};
  static std::atomic<uint32_t> next_id{0};
  const std::string name =
      std::string(o.name_prefix) + "_" + std::to_string(next_id.fetch_add(1, std::memory_order_relaxed));
  if (name.size() >= RTE_MEMPOOL_NAMESIZE) {
    return Error{ENAMETOOLONG, "create_pktmbuf_pool: name '" + name + "' longer than " +
                                   std::to_string(RTE_MEMPOOL_NAMESIZE - 1) + " characters"};
  }
  const uint32_t cache = std::min(o.cache, o.mbufs * kCacheFlushNum / kCacheFlushDen);
  rte_mempool* mp =
      o.packed        ? packed_pktmbuf_pool(name.c_str(), o.mbufs, cache, o.priv_size, o.data_room)
      : o.page_frames ? page_frames_pktmbuf_pool(name.c_str(), o.mbufs, cache, o.priv_size, o.data_room)
                      : rte_pktmbuf_pool_create(name.c_str(), o.mbufs, cache, o.priv_size, o.data_room, SOCKET_ID_ANY);
  if (mp == nullptr) {
    const int err = rte_errno;
    std::ostringstream msg;
    msg << "rte_pktmbuf_pool_create(" << name << ", " << o.mbufs << " mbufs of " << o.data_room
        << " B) failed: " << rte_strerror(err);
    return Error{err, msg.str()};
  }
  return mp;
}

void note_deferred_close() noexcept {
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  state().deferred_close_ns.store(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count(),
                                  std::memory_order_release);
}

Status eal_shutdown(const ShutdownOptions& o) {
  auto& st = state();
  std::lock_guard lock(st.shutdown_mutex);
  if (!st.running.load(std::memory_order_acquire)) return {};
  uint16_t port = 0;
  RTE_ETH_FOREACH_DEV(port) {
    rte_eth_dev_info info{};
    const bool memif = rte_eth_dev_info_get(port, &info) == 0 && info.driver_name != nullptr &&
                       std::string_view(info.driver_name) == "net_memif";
    rte_eth_dev_stop(port);  // fails harmlessly on a port that never started
    rte_eth_dev_close(port);
    if (memif) note_deferred_close();
  }
  // Only memif defers work to its interrupt thread; every other program
  // exits without the wait.  A memif port closed here or earlier
  // (DpdkPort::close) gets the rest of its settle time: the thread may
  // still be at it, and rte_eal_cleanup under it crashes (seen once a
  // port's close got fast).
  if (const int64_t at = st.deferred_close_ns.load(std::memory_order_acquire); at >= 0) {
    const std::chrono::steady_clock::time_point until{std::chrono::nanoseconds(at) + o.settle};
    std::this_thread::sleep_until(until);
  }
  st.running.store(false, std::memory_order_release);
  if (o.cleanup) {
    if (const int rc = rte_eal_cleanup(); rc < 0) {
      return Error{-rc, "rte_eal_cleanup failed: " + std::string(rte_strerror(-rc))};
    }
  }
  if (st.owns_runtime_dir) remove_runtime_dir(st.result->value().runtime_dir);
  return {};
}

}  // namespace uroce::drivers::dpdk
