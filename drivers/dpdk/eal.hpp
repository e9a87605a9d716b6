// DPDK's EAL, started once per process (DESIGN.md "Process and threading
// model"; research/dpdk.md §2).
//
// rte_eal_init can run once per process: a second call fails with EALREADY,
// even after rte_eal_cleanup.  eal_init() therefore runs it at most once
// (std::call_once) and hands every later caller the first call's result,
// whatever options they pass.  It is lazy and thread-safe, so the first
// verbs or rdma_cm call of any thread may start it.
//
// Several uroce processes coexist on one machine because each one gets:
//   - a runtime directory of its own: --file-prefix=uroce-<pid>;
//   - no shared config files: with no hugepages (no hugetlbfs mounted, or
//     none free) `--no-huge --no-shconf -m <memory_mb>`; with hugepages
//     `--in-memory` (which cannot be combined with --no-huge);
//   - `--no-pci` unless PCI devices are listed (then `-a <addr>` each).
//
// Telemetry (default on) listens on <runtime dir>/dpdk_telemetry.v2, a
// SOCK_SEQPACKET Unix socket.  It works with --no-shconf (tested:
// tests/drivers/eal_test.cpp asks it for /eal/params) and, as DPDK starts
// it the same way, with --in-memory (not tested here: no hugepages).
// Reach a process with `dpdk-telemetry.py -f uroce-<pid>`.  Were two
// processes to share a prefix, DPDK 22.11.11 would give the second one
// dpdk_telemetry.v2:1 (dpdk-telemetry.py -i 1); the per-process prefix
// keeps every uroce process on the plain name, which EalInfo reports.
//
// rte_eal_init pins the calling thread to the chosen core.  A library
// started lazily from an application thread should not do that to the
// application, so eal_init restores the caller's CPU affinity afterwards
// (EalOptions::restore_affinity).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drivers/result.hpp"

struct rte_mempool;

namespace uroce::drivers::dpdk {

// ---- tunables -------------------------------------------------------------
// EAL memory with --no-huge, in MB.  DPDK's own default (64 MB) holds no
// jumbo pool; 256 MB holds several 4095-mbuf pools of kDefaultDataRoom.
inline constexpr uint32_t kDefaultNoHugeMemoryMb = 256;
// One frame per mbuf, never a chain, on every wire we use: the largest
// jumbo frame (9216 bytes covers MTU 9000 + Ethernet + VLAN with room to
// spare, and any RoCE MTU-4096 frame: 4096 + ~100 bytes of headers), plus
// the headroom the requester writes headers into.  A 4095-mbuf pool of
// these takes about 38 MB.
inline constexpr uint16_t kMaxFrameBytes = 9216;
inline constexpr uint16_t kMbufHeadroom = 128;  // == RTE_PKTMBUF_HEADROOM (asserted in eal.cpp)
inline constexpr uint16_t kDefaultDataRoom = kMaxFrameBytes + kMbufHeadroom;
inline constexpr uint32_t kDefaultPoolMbufs = 4095;     // 2^n - 1 suits the mempool ring
inline constexpr uint32_t kDefaultPoolCache = 256;      // per lcore; <= RTE_MEMPOOL_CACHE_MAX_SIZE
// research/dpdk.md §3.4: memif's interrupt thread still runs deferred
// unregistrations after rte_eth_dev_close; rte_eal_cleanup must wait.
inline constexpr std::chrono::milliseconds kTeardownSettle{200};

enum class EalMemory : uint8_t {
  kAuto,       // hugepages if hugetlbfs is mounted and some are free, else none
  kNoHuge,     // --no-huge --no-shconf -m <memory_mb>
  kHugepages,  // --in-memory
};

struct EalOptions {
  EalMemory memory = EalMemory::kAuto;
  uint32_t memory_mb = kDefaultNoHugeMemoryMb;  // -m; used with --no-huge only
  std::optional<unsigned> core;                 // -l <core>; default: lowest CPU we may run on
  bool telemetry = true;                        // false: --no-telemetry
  std::string log_level = "warning";            // --log-level=<this>: "debug", "*:error", "pmd.net.*:info"
  std::string file_prefix;                      // default "uroce-<pid>"
  std::vector<std::string> pci;                 // -a <each>; empty: --no-pci
  std::vector<std::string> vdevs;               // --vdev=<each>: "net_af_packet0,iface=veth0"
  std::vector<std::string> extra;               // appended last, verbatim
  bool restore_affinity = true;                 // undo rte_eal_init's pinning of the caller
};

// What eal_args() needs to know about the machine; probe_host() reads it.
struct HostInfo {
  bool hugetlbfs_mounted = false;    // a hugetlbfs line in /proc/mounts
  uint64_t free_hugepages = 0;       // summed over page sizes
  std::optional<unsigned> lowest_cpu;  // in this thread's affinity mask
  int pid = 0;
};

HostInfo probe_host();

// True when `o` and `host` call for --in-memory rather than --no-huge.
bool use_hugepages(const EalOptions& o, const HostInfo& host);

// The argument vector eal_init passes to rte_eal_init, argv[0] included.
// Pure: no I/O, so unit tests check it for any host.
std::vector<std::string> eal_args(const EalOptions& o, const HostInfo& host);

struct EalInfo {
  std::vector<std::string> args;  // as passed to rte_eal_init
  std::string runtime_dir;        // /var/run/dpdk/uroce-<pid> (root)
  std::string telemetry_socket;   // empty when telemetry is off
  unsigned main_lcore = 0;
  bool hugepages = false;
};

// Starts the EAL the first time; returns the first call's result every time.
// The error's code is rte_errno (or EINVAL for an unusable option).
const Result<EalInfo>& eal_init(const EalOptions& options = {});

// True once eal_init has succeeded (and eal_shutdown has not run).
bool eal_running() noexcept;

struct PoolOptions {
  std::string_view name_prefix = "uroce";  // the pool is "<prefix>_<n>", n unique in the process
  uint32_t mbufs = kDefaultPoolMbufs;
  uint16_t data_room = kDefaultDataRoom;   // headroom included, as DPDK counts it
  uint32_t cache = kDefaultPoolCache;      // clamped to what DPDK allows for `mbufs`
  uint16_t priv_size = 0;
  // Objects may straddle pages (RTE_MEMPOOL_F_NO_IOVA_CONTIG): only for a
  // PMD that copies frames by virtual address (af_packet).  Packed, a
  // 1500-byte link's mbufs share pages, and making the pool faults in
  // 40% fewer of them (without hugepages an object otherwise takes a page
  // of its own: one fault per mbuf).
  bool packed = false;
  // One object per page, the first on a page boundary, all in one block
  // of memory (net_af_xdp: see page_frames_pktmbuf_pool in eal.cpp).
  // data_room must make an object exactly a page; ignored with `packed`.
  bool page_frames = false;
};

// The data room (headroom included) that makes a page_frames pool's
// object exactly one page.  Needs a running EAL.
uint16_t page_frame_data_room(uint16_t priv_size) noexcept;

// rte_pktmbuf_pool_create under a name no other pool of this process has
// (with `packed`, the same steps with RTE_MEMPOOL_F_NO_IOVA_CONTIG).
// Control path; needs a running EAL.  Free with rte_mempool_free.
Result<rte_mempool*> create_pktmbuf_pool(const PoolOptions& options = {});

struct ShutdownOptions {
  std::chrono::milliseconds settle = kTeardownSettle;
  bool cleanup = true;  // false: stop and close the ports, skip rte_eal_cleanup
};

// A port whose PMD leaves work to the EAL's interrupt thread (memif) was
// closed now: eal_shutdown waits until `settle` after the last such close.
// Any thread.
void note_deferred_close() noexcept;

// Stops and closes every ethdev port, waits `settle` when one was a memif
// port (still open, or closed within `settle`: note_deferred_close) so
// memif's interrupt thread finishes its deferred work, then rte_eal_cleanup and removes the
// runtime directory if it is our own (the default uroce-<pid> prefix; a
// chosen prefix may be shared, so its directory is left alone).  The
// directories of uroce processes that died without this are swept by the
// next eal_init.  Runs once; later calls, or a call with no EAL, are
// no-ops.  Free mempools before it; no port may be used after it.
Status eal_shutdown(const ShutdownOptions& options = {});

}  // namespace uroce::drivers::dpdk
