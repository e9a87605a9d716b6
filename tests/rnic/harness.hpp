// The end-to-end harness: two engines, each with its Rnic, joined by the
// sim wire in one process, progressed inline by the test's own loop (every
// wait polls both engines).  Helpers create the verbs objects through the
// public API in transport/rnic/, connect RC/UC pairs (RESET -> INIT -> RTR
// -> RTS with GIDs from each device's table), make UD QPs and AHs, and
// wait for completions with a deadline.
//
// Nothing here reaches inside the RNIC: what a test sees is what a verbs
// application would see (plus the counters, which users see too).
#pragma once

#include <infiniband/verbs.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "drivers/fault.hpp"
#include "drivers/sim/sim_wire.hpp"
#include "transport/device.hpp"
#include "transport/engine.hpp"
#include "transport/rnic/rnic.hpp"

namespace uroce::rnic::testing {

using Clock = std::chrono::steady_clock;
using Duration = std::chrono::nanoseconds;

inline constexpr uint32_t kIpA = 0x0A000001;  // 10.0.0.1
inline constexpr uint32_t kIpB = 0x0A000002;  // 10.0.0.2
inline constexpr Duration kDeadline = std::chrono::seconds(20);
inline constexpr uint32_t kUdQkey = 0x11111111;  // as ibv_ud_pingpong
inline constexpr uint32_t kGrhBytes = 40;        // a UD receive buffer starts with the GRH

// The bytes of an IBV_MTU_* value.
uint32_t mtu_bytes(ibv_mtu mtu);

// One end: a sim port and the device on it (its engine, its RNIC), and one PD.
struct Node {
  drivers::sim::SimPort* port = nullptr;
  std::unique_ptr<transport::Device> dev;  // engine and RNIC over `port` (Device::assemble)
  transport::Engine* engine = nullptr;     // dev's
  Rnic* rnic = nullptr;                    // dev's
  Pd* pd = nullptr;
  uint32_t ip4 = 0;
  wire::Ipv6Addr ip6{};
  int gid_v4 = -1;  // GID index of ::ffff:ip4
  int gid_v6 = -1;  // GID index of ip6
};

struct HarnessOptions {
  std::string pcap_a;                   // capture of node A's traffic (EngineConfig::pcap_path)
  std::optional<drivers::FaultSpec> faults;  // on every link
  bool resolve_neighbours = true;       // ARP/ND both ways before the test starts
  // The switch's buffer per link (frames); past it the wire drops
  // (queue_full), as a switch would.
  uint32_t link_queue_frames = drivers::sim::kDefaultLinkQueueFrames;
  // Which RNICs offer selective repeat (Rnic::set_selective_repeat).
  bool selective_repeat_a = false;
  bool selective_repeat_b = false;
  uint32_t spray_ports_a = 1;  // Rnic::set_spray_ports
  // Each RNIC's congestion control (Rnic::set_cc); the default: ECN on, DCQCN.
  config::CcConfig cc_a;
  config::CcConfig cc_b;
  // Engine lcores of each device (EngineConfig::lcores): lcore 0 runs
  // inline in the test's loop as always, the others on threads of their
  // own.  0: UROCE_TEST_ENGINE_LCORES, else 1 (the e2e suites run again
  // with it set: meson's suite "lcores").
  uint32_t engine_lcores = 0;
};

// What connect() sets on a QP.
struct ConnOpts {
  ibv_mtu mtu = IBV_MTU_1024;
  uint8_t timeout = 10;      // 4.096 us * 2^10 ~ 4.2 ms
  uint8_t retry_cnt = 7;     // seven retries (only rnr_retry 7 is infinite)
  uint8_t rnr_retry = 7;     // infinite
  uint8_t min_rnr_timer = 1; // 0.01 ms (IBA table 45)
  uint8_t max_rd_atomic = 16;
  uint8_t max_dest_rd_atomic = 16;
  int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  uint32_t psn_a = 0x123456;  // A's sq_psn == B's rq_psn
  uint32_t psn_b = 0xFFFFF0;  // B's sq_psn: wraps the 24-bit PSN soon
  bool ipv6 = false;          // GIDs from the IPv6 addresses
};

struct QpCaps {
  uint32_t max_send_wr = 512;
  uint32_t max_recv_wr = 512;
  uint32_t max_send_sge = 16;
  uint32_t max_recv_sge = 16;
  uint32_t max_inline_data = 256;
};

// Memory registered on one node.  8-byte aligned (atomics).  The bytes
// belong to the Harness and outlive its RNICs: a packet still in flight at
// teardown never lands in freed memory.
struct Buffer {
  std::shared_ptr<uint64_t[]> mem;  // shared with the Harness, which frees it last
  size_t len = 0;
  Mr* mr = nullptr;

  uint8_t* data() const noexcept { return reinterpret_cast<uint8_t*>(mem.get()); }
  uint64_t addr(size_t off = 0) const noexcept { return reinterpret_cast<uint64_t>(data() + off); }
  uint32_t lkey() const noexcept { return mr->lkey.value(); }
  uint32_t rkey() const noexcept { return mr->rkey.value(); }
  ibv_sge sge(size_t off, size_t n) const noexcept {
    return ibv_sge{addr(off), static_cast<uint32_t>(n), lkey()};
  }
  std::span<uint8_t> bytes(size_t off, size_t n) const noexcept { return {data() + off, n}; }
};

// A connected pair of QPs, each with its own send and receive CQ.
struct Pair {
  Qp* qa = nullptr;
  Qp* qb = nullptr;
  Cq* scq_a = nullptr;
  Cq* rcq_a = nullptr;
  Cq* scq_b = nullptr;
  Cq* rcq_b = nullptr;
};

class Harness {
 public:
  explicit Harness(const HarnessOptions& options = {});
  ~Harness();
  Harness(const Harness&) = delete;
  Harness& operator=(const Harness&) = delete;

  Node& a() noexcept { return a_; }
  Node& b() noexcept { return b_; }
  drivers::sim::SimWire& wire() noexcept { return *wire_; }

  // ---- progress ----
  unsigned poll();  // one iteration of each engine
  bool run_until(const std::function<bool()>& done, Duration limit = kDeadline);
  void run_for(Duration d);

  // ---- objects (they ADD_FAILURE and return null on error) ----
  Buffer buffer(Node& n, size_t len, int access, uint8_t fill = 0);
  // `len` zeroed bytes, 8-byte aligned, freed after the RNICs.
  uint8_t* memory(size_t len);
  Cq* cq(Node& n, int cqe = 1024, CompChannel* ch = nullptr);
  Qp* qp(Node& n, ibv_qp_type type, Cq* scq, Cq* rcq, const QpCaps& caps = {}, Srq* srq = nullptr);
  Srq* srq(Node& n, uint32_t max_wr, uint32_t max_sge = 16, uint32_t limit = 0);

  // ---- connection ----
  // The path to `remote` as a QP or AH wants it (is_global, sgid_index).
  ibv_ah_attr ah_attr(Node& local, Node& remote, bool ipv6 = false) const;
  Ah* ah(Node& local, Node& remote, bool ipv6 = false);
  // RESET -> INIT -> RTR -> RTS of one RC/UC QP; returns the first error.
  int to_rts(Qp* q, Node& local, Node& remote, Qpn remote_qpn, uint32_t sq_psn, uint32_t rq_psn,
             const ConnOpts& o);
  int connect(Qp* qa, Qp* qb, const ConnOpts& o = {});
  // Creates CQs and QPs of `type` on both nodes and connects them.
  Pair pair(ibv_qp_type type, const ConnOpts& o = {}, const QpCaps& caps = {}, int cqe = 1024);
  // A UD QP to RTS with this Q_Key.
  int ud_ready(Qp* q, uint32_t qkey = kUdQkey, uint32_t sq_psn = 0);

  // ---- completions ----
  // Everything the CQ holds now (polls both engines once first).
  std::vector<ibv_wc> poll_cq(Cq* cq);
  // Until `n` completions are collected or the deadline; returns what came.
  std::vector<ibv_wc> wait_wcs(Cq* cq, size_t n, Duration limit = kDeadline);
  // One completion, or a failed assertion (status IBV_WC_GENERAL_ERR).
  ibv_wc wait_wc(Cq* cq, Duration limit = kDeadline);
  // Polls for `d` and returns whatever arrived (to check nothing does).
  std::vector<ibv_wc> collect_for(Cq* cq, Duration d);

  // Every non-zero counter of both nodes (engine and RNIC) and of the wire.
  std::string counters() const;

 private:
  void make_node(Node& n, size_t index, uint32_t ip4, uint8_t ip6_last, const std::string& pcap, uint32_t lcores);
  void resolve(Node& from, Node& to);

  std::unique_ptr<drivers::sim::SimWire> wire_;
  Node a_, b_;
  std::vector<std::shared_ptr<uint64_t[]>> memory_;
};

// ---- QP state ----------------------------------------------------------------------
// RESET -> INIT -> RTR -> RTS of one RC/UC QP towards `dest_qpn` over
// `path`; returns the first modify's error.
int qp_to_rts(Qp* q, const ibv_ah_attr& path, uint32_t dest_qpn, uint32_t sq_psn, uint32_t rq_psn,
              const ConnOpts& o);
// A UD QP to RTS with this Q_Key.
int qp_ud_ready(Qp* q, uint32_t qkey, uint32_t sq_psn);

// The QP's state as ibv_query_qp(3) reports it (the control path: with
// several lcores, after the QP's lcore finished its turn).
ibv_qp_state qp_state(Qp* q);

// A value of a QP's engine-side state read inside the device's loop (the
// control path: with several lcores every lcore is parked meanwhile), as
// a tool such as `uroce qp` reads it.
template <class F>
auto engine_read(transport::Engine& e, F f) -> decltype(f()) {
  decltype(f()) v{};
  e.run_sync([&] { v = f(); });
  return v;
}

// ---- work requests -----------------------------------------------------------------

int post_send(Qp* q, ibv_send_wr& wr);
int post_recv(Qp* q, ibv_recv_wr& wr);
int post_recv(Qp* q, uint64_t wr_id, std::span<const ibv_sge> sges);
int post_srq_recv(Srq* s, uint64_t wr_id, std::span<const ibv_sge> sges);

ibv_send_wr send_wr(ibv_wr_opcode op, uint64_t wr_id, std::span<ibv_sge> sges,
                    unsigned flags = IBV_SEND_SIGNALED);
ibv_send_wr rdma_wr(ibv_wr_opcode op, uint64_t wr_id, std::span<ibv_sge> sges, uint64_t raddr, uint32_t rkey,
                    unsigned flags = IBV_SEND_SIGNALED);
ibv_send_wr atomic_wr(ibv_wr_opcode op, uint64_t wr_id, ibv_sge* sge, uint64_t raddr, uint32_t rkey,
                      uint64_t compare_add, uint64_t swap, unsigned flags = IBV_SEND_SIGNALED);

// ---- data ----------------------------------------------------------------------------

// Deterministic bytes for (seed, offset).
void fill_pattern(std::span<uint8_t> out, uint64_t seed);
// The first offset where `got` differs from `want`, or -1.
long first_diff(std::span<const uint8_t> got, std::span<const uint8_t> want);

const char* wc_status_name(ibv_wc_status s);

// ---- the test binary's arguments (main_rnic.cpp) ---------------------------------------
// `--uroce=PATH`: the uroce tool (pcap-check); empty when not given.
const std::string& uroce_tool_path();

}  // namespace uroce::rnic::testing
