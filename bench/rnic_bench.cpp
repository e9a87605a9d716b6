// The RNIC on the sim wire, in one process, both engines progressed by the
// benchmark's own thread (inline mode, as UROCE_PROGRESS=inline):
//
//   BM_RcSendPingPong/64      RC SEND round trip (A -> B, B -> A), ns per round trip
//   BM_RcWriteThroughput/65536/MTU  RC WRITE of 64 KiB at path MTU 1024 and 4096
//                             (what a 1500- and a 9000-byte Ethernet MTU carry), 16 in
//                             flight, bytes/s; beside it the memcpy+ICRC bound of the
//                             same bytes (copy into the frame + ICRC at the sender,
//                             ICRC + copy out at the receiver), their ratio (`vs_bound`,
//                             1.0 = the bound) and `ns_per_frame`: both ends' CPU for
//                             one full data frame and its share of the ACKs, the
//                             figure DESIGN.md's cores-per-NIC table is made from
//   BM_RcSendRate/64          64 B SENDs, 64 in flight, messages/s
//
// Each reports `allocs_per_pkt`: heap allocations (malloc and everything
// built on it, operator new included) counted by the hook below while the
// measured loop runs, divided by the packets both RNICs sent.  It must be
// 0: the data path does not allocate.  `--require-zero-allocs` (ours,
// before Google Benchmark's flags) makes the run fail otherwise; the smoke
// test uses it.
#include <benchmark/benchmark.h>
#include <infiniband/verbs.h>
#include <rte_mbuf.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>
#include <vector>

#include "bench/rc_connect.hpp"
#include "drivers/dpdk/eal.hpp"
#include "drivers/sim/sim_wire.hpp"
#include "lib/wire/build.hpp"
#include "lib/wire/icrc.hpp"
#include "transport/device.hpp"
#include "transport/engine.hpp"
#include "transport/rnic/requester.hpp"
#include "transport/rnic/rnic.hpp"

// ---- the allocation hook ------------------------------------------------------------
// glibc lets a program define malloc & co; these forward to glibc's own.
extern "C" {
void* __libc_malloc(size_t n);
void* __libc_calloc(size_t n, size_t m);
void* __libc_realloc(void* p, size_t n);
void* __libc_memalign(size_t align, size_t n);
void __libc_free(void* p);
}

namespace {
std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_allocs{0};
bool g_require_zero = false;
bool g_saw_allocs = false;

inline void count_alloc() noexcept {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

extern "C" {
void* malloc(size_t n) {
  count_alloc();
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t m) {
  count_alloc();
  return __libc_calloc(n, m);
}
void* realloc(void* p, size_t n) {
  count_alloc();
  return __libc_realloc(p, n);
}
void* memalign(size_t align, size_t n) {
  count_alloc();
  return __libc_memalign(align, n);
}
void* aligned_alloc(size_t align, size_t n) {
  count_alloc();
  return __libc_memalign(align, n);
}
int posix_memalign(void** out, size_t align, size_t n) {
  count_alloc();
  void* p = __libc_memalign(align, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void free(void* p) { __libc_free(p); }
}

namespace uroce::rnic::bench {
namespace {

using transport::Engine;
using transport::IpAddr;

constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

struct Node {
  drivers::sim::SimPort* port = nullptr;
  std::unique_ptr<transport::Device> dev;  // engine and RNIC over `port`
  Engine* engine = nullptr;
  Rnic* rnic = nullptr;
  Pd* pd = nullptr;
  uint32_t ip = 0;
};

// Two nodes on the sim wire, one RC pair.
class Bed {
 public:
  Bed() {
    for (Node* n : {&a_, &b_}) {
      auto p = wire_.add_port();
      if (!p) fail("add_port");
      n->port = *p;
    }
    make(a_, 0x0A000001);
    make(b_, 0x0A000002);
    resolve(a_, b_);
    resolve(b_, a_);
  }
  ~Bed() {
    a_.dev.reset();
    b_.dev.reset();
  }

  static void fail(const char* what) {
    std::fprintf(stderr, "rnic_bench: %s failed\n", what);
    std::exit(1);
  }

  Node& a() { return a_; }
  Node& b() { return b_; }
  void poll() {
    a_.engine->poll();
    b_.engine->poll();
  }
  uint64_t packets() const {
    uint64_t n = 0;
    for (const Node* x : {&a_, &b_}) {
      n += x->rnic->counters().get(RnicCtr::req_pkts) + x->rnic->counters().get(RnicCtr::resp_pkts);
    }
    return n;
  }

  Mr* reg(Node& n, void* p, size_t len) {
    int err = 0;
    Mr* mr = n.rnic->reg_mr(n.pd, p, len, reinterpret_cast<uint64_t>(p), kAccess, &err);
    if (!mr) fail("reg_mr");
    return mr;
  }
  Cq* cq(Node& n, int cqe) {
    int err = 0;
    Cq* c = n.rnic->create_cq(cqe, nullptr, nullptr, 0, &err);
    if (!c) fail("create_cq");
    return c;
  }

  struct Pair {
    Qp* qa;
    Qp* qb;
    Cq* cqa;
    Cq* cqb;
  };
  Pair pair(ibv_mtu mtu, uint32_t depth) {
    Pair p{};
    p.cqa = cq(a_, static_cast<int>(4 * depth));
    p.cqb = cq(b_, static_cast<int>(4 * depth));
    p.qa = qp(a_, p.cqa, depth);
    p.qb = qp(b_, p.cqb, depth);
    rts(p.qa, a_, b_, p.qb->qpn(), mtu);
    rts(p.qb, b_, a_, p.qa->qpn(), mtu);
    return p;
  }

 private:
  void make(Node& n, uint32_t ip) {
    n.ip = ip;
    transport::EngineConfig c;
    c.local.mac = n.port->mac();
    c.local.ips = {IpAddr::v4(ip)};
    c.progress = transport::ProgressKind::Inline;
    c.rx_burst = 128;
    c.neigh.retry_interval_ns = 10'000'000;
    auto dev = transport::Device::assemble(*n.port, ip == 0x0A000001 ? "uroce0" : "uroce1", std::move(c));
    if (!dev) fail("device assembly");
    n.dev = std::move(*dev);
    n.engine = &n.dev->engine();
    n.rnic = &n.dev->rnic();
    int err = 0;
    n.pd = n.rnic->alloc_pd(&err);
    if (!n.pd) fail("alloc_pd");
  }
  void resolve(Node& from, Node& to) {
    const IpAddr ip = IpAddr::v4(to.ip);
    from.engine->run_sync([&] { from.engine->neighbours().resolve(ip, from.engine->now()); });
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (from.engine->neighbours().lookup(ip, from.engine->now()) == nullptr) {
      poll();
      if (std::chrono::steady_clock::now() > end) fail("neighbour resolution");
    }
  }
  Qp* qp(Node& n, Cq* c, uint32_t depth) {
    ibv_qp_init_attr init{};
    init.send_cq = reinterpret_cast<ibv_cq*>(c);
    init.recv_cq = reinterpret_cast<ibv_cq*>(c);
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = depth;
    init.cap.max_recv_wr = depth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.cap.max_inline_data = 64;
    int err = 0;
    Qp* q = n.rnic->create_qp(n.pd, init, &err);
    if (!q) fail("create_qp");
    return q;
  }
  void rts(Qp* q, Node& local, Node& remote, Qpn rqpn, ibv_mtu mtu) {
    ibv_gid dgid{};
    const auto d = wire::PktDesc::ipv4_mapped(remote.ip);
    std::memcpy(dgid.raw, d.data(), 16);
    const uroce::bench::RcPath path{
        .mtu = mtu,
        .access = kAccess,
        .rd_atomic = 16,
        .sgid_index = static_cast<uint8_t>(local.rnic->find_gid(wire::PktDesc::ipv4_mapped(local.ip))),
    };
    if (uroce::bench::connect_rc(*q, rqpn.value(), dgid, path) != 0) fail("INIT/RTR/RTS");
  }

  drivers::sim::SimWire wire_;
  Node a_, b_;
};

int post_recv(Qp* q, uint64_t id, ibv_sge* s) {
  ibv_recv_wr wr{};
  wr.wr_id = id;
  wr.sg_list = s;
  wr.num_sge = 1;
  const ibv_recv_wr* bad = nullptr;
  return q->post_recv(&wr, &bad);
}

int post_send(Qp* q, ibv_wr_opcode op, uint64_t id, ibv_sge* s, uint64_t raddr = 0, uint32_t rkey = 0,
              unsigned flags = IBV_SEND_SIGNALED) {
  ibv_send_wr wr{};
  wr.wr_id = id;
  wr.opcode = op;
  wr.sg_list = s;
  wr.num_sge = 1;
  wr.send_flags = flags;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  const ibv_send_wr* bad = nullptr;
  return q->post_send(&wr, &bad);
}

// Wait for one completion on `c`, polling both engines; aborts the run on
// an error status.
void wait_one(Bed& bed, Cq* c, benchmark::State& state) {
  ibv_wc wc;
  for (;;) {
    bed.poll();
    const int n = c->poll(1, &wc);
    if (n == 1) {
      if (wc.status != IBV_WC_SUCCESS) state.SkipWithError("completion in error");
      return;
    }
  }
}

// Starts counting allocations and packets; `finish` reports them.
struct AllocWindow {
  Bed& bed;
  uint64_t pkts0;
  explicit AllocWindow(Bed& b) : bed(b), pkts0(b.packets()) {
    g_allocs.store(0);
    g_counting.store(true);
  }
  void finish(benchmark::State& state) {
    g_counting.store(false);
    const uint64_t allocs = g_allocs.load();
    const uint64_t pkts = bed.packets() - pkts0;
    state.counters["allocs"] = static_cast<double>(allocs);
    state.counters["allocs_per_pkt"] = pkts ? static_cast<double>(allocs) / static_cast<double>(pkts) : 0.0;
    state.counters["pkts"] = static_cast<double>(pkts);
    if (allocs) g_saw_allocs = true;
  }
};

void BM_RcSendPingPong(benchmark::State& state) {
  const size_t len = static_cast<size_t>(state.range(0));
  std::vector<uint8_t> ba(4096), bb(4096);  // before the Bed: they outlive its RNICs
  Bed bed;
  auto p = bed.pair(IBV_MTU_1024, 64);
  Mr* ma = bed.reg(bed.a(), ba.data(), ba.size());
  Mr* mb = bed.reg(bed.b(), bb.data(), bb.size());
  ibv_sge sa{reinterpret_cast<uint64_t>(ba.data()), static_cast<uint32_t>(len), ma->lkey.value()};
  ibv_sge ra{reinterpret_cast<uint64_t>(ba.data() + 2048), 2048, ma->lkey.value()};
  ibv_sge sb{reinterpret_cast<uint64_t>(bb.data()), static_cast<uint32_t>(len), mb->lkey.value()};
  ibv_sge rb{reinterpret_cast<uint64_t>(bb.data() + 2048), 2048, mb->lkey.value()};
  for (int i = 0; i < 32; ++i) {
    post_recv(p.qa, 0, &ra);
    post_recv(p.qb, 0, &rb);
  }
  auto round = [&] {
    // A's SEND completes (ACK) and B receives; B answers; A receives.
    post_send(p.qa, IBV_WR_SEND, 1, &sa);
    wait_one(bed, p.cqb, state);  // B's receive
    post_recv(p.qb, 0, &rb);
    post_send(p.qb, IBV_WR_SEND, 2, &sb);
    // A: its send completion and its receive (two CQEs on one CQ), B: its send completion.
    wait_one(bed, p.cqa, state);
    wait_one(bed, p.cqa, state);
    post_recv(p.qa, 0, &ra);
    wait_one(bed, p.cqb, state);
  };
  for (int i = 0; i < 100; ++i) round();  // warm up
  AllocWindow w(bed);
  for (auto _ : state) round();
  w.finish(state);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetLabel("one round trip = two SENDs + their ACKs");
}
BENCHMARK(BM_RcSendPingPong)->Arg(64)->Unit(benchmark::kNanosecond)->UseRealTime();

// The bound: the same bytes copied into frames with the ICRC computed,
// then the ICRC verified and the payload copied out (one message in frames
// of `mtu` bytes).  ns per message.
double copy_icrc_bound_ns(size_t msg, size_t mtu) {
  wire::PktDesc d;
  d.src = wire::PktDesc::ipv4_mapped(0x0A000001);
  d.dst = wire::PktDesc::ipv4_mapped(0x0A000002);
  d.sport = 0xC000;
  d.opcode = wire::op::RC_WRITE_MIDDLE;
  d.dest_qp = Qpn(0x11);
  d.psn = Psn(1);
  d.pkey = kDefaultPkey;
  std::vector<uint8_t> src(msg), dst(msg), payload(mtu);
  std::memset(src.data(), 0x5A, msg);
  d.payload = payload;
  std::vector<uint8_t> frame(wire::frame_len(d, mtu));
  wire::build(frame, d);
  const size_t hl = wire::frame_len(d, mtu) - mtu - wire::kIcrcSize;
  const size_t ip_off = 14;
  const size_t covered = frame.size() - ip_off - wire::kIcrcSize;
  auto once = [&] {
    uint32_t sum = 0;
    for (size_t off = 0; off < msg; off += mtu) {
      std::memcpy(frame.data() + hl, src.data() + off, mtu);
      const uint32_t c = wire::icrc(frame.data() + ip_off, 20, false, covered);
      wire::store_icrc(frame.data() + frame.size() - 4, c);
      sum += wire::icrc(frame.data() + ip_off, 20, false, covered) == wire::load_icrc(frame.data() + frame.size() - 4);
      std::memcpy(dst.data() + off, frame.data() + hl, mtu);
    }
    benchmark::DoNotOptimize(sum);
    benchmark::ClobberMemory();
  };
  for (int i = 0; i < 50; ++i) once();
  constexpr int kReps = 400;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kReps; ++i) once();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / kReps;
}

void BM_RcWriteThroughput(benchmark::State& state) {
  const size_t len = static_cast<size_t>(state.range(0));
  const size_t mtu = static_cast<size_t>(state.range(1));
  constexpr uint32_t kInFlight = 16;
  std::vector<uint8_t> ba(len * kInFlight, 0x11), bb(len * kInFlight);  // outlive the Bed's RNICs
  Bed bed;
  auto p = bed.pair(mtu == 1024 ? IBV_MTU_1024 : IBV_MTU_4096, 64);
  Mr* ma = bed.reg(bed.a(), ba.data(), ba.size());
  Mr* mb = bed.reg(bed.b(), bb.data(), bb.size());
  uint32_t inflight = 0;
  uint64_t posted = 0;
  ibv_wc wc[1];
  auto post_one = [&] {
    const size_t slot = posted % kInFlight;
    ibv_sge s{reinterpret_cast<uint64_t>(ba.data() + slot * len), static_cast<uint32_t>(len), ma->lkey.value()};
    if (post_send(p.qa, IBV_WR_RDMA_WRITE, posted, &s, reinterpret_cast<uint64_t>(bb.data() + slot * len),
                  mb->rkey.value()) == 0) {
      ++inflight;
      ++posted;
    }
  };
  auto step = [&](uint64_t* completed) {
    while (inflight < kInFlight) post_one();
    // One completion at a time: a benchmark iteration is one message.
    int n = p.cqa->poll(1, wc);
    if (n == 0) {
      bed.poll();
      n = p.cqa->poll(1, wc);
    }
    if (n > 0) {
      if (wc[0].status != IBV_WC_SUCCESS) state.SkipWithError("WRITE failed");
      --inflight;
      ++*completed;
    }
  };
  uint64_t warm = 0;
  while (warm < 200) step(&warm);
  AllocWindow w(bed);
  uint64_t completed = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    // One iteration = one 64 KiB message completed.
    const uint64_t target = completed + 1;
    while (completed < target) step(&completed);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  w.finish(state);
  state.SetBytesProcessed(static_cast<int64_t>(completed * len));
  const double ns_per_msg = secs * 1e9 / static_cast<double>(completed);
  const double bound = copy_icrc_bound_ns(len, mtu);
  state.counters["bound_ns_per_msg"] = bound;
  state.counters["ns_per_msg"] = ns_per_msg;
  state.counters["ns_per_frame"] = ns_per_msg / static_cast<double>((len + mtu - 1) / mtu);
  state.counters["vs_bound"] = bound / ns_per_msg;  // 1.0: as fast as copying and checksumming
  state.counters["Gbit_s"] = static_cast<double>(completed * len) * 8 / secs / 1e9;
}
BENCHMARK(BM_RcWriteThroughput)->Args({64 * 1024, 1024})->Args({64 * 1024, 4096})->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_RcSendRate(benchmark::State& state) {
  const size_t len = static_cast<size_t>(state.range(0));
  constexpr uint32_t kInFlight = 64;
  std::vector<uint8_t> ba(4096), bb(kInFlight * 2 * 128);  // outlive the Bed's RNICs
  Bed bed;
  auto p = bed.pair(IBV_MTU_1024, 256);
  Mr* ma = bed.reg(bed.a(), ba.data(), ba.size());
  Mr* mb = bed.reg(bed.b(), bb.data(), bb.size());
  ibv_sge s{reinterpret_cast<uint64_t>(ba.data()), static_cast<uint32_t>(len), ma->lkey.value()};
  uint64_t recv_posted = 0;
  auto post_r = [&] {
    ibv_sge r{reinterpret_cast<uint64_t>(bb.data() + (recv_posted % (2 * kInFlight)) * 128), 128,
              mb->lkey.value()};
    if (post_recv(p.qb, recv_posted, &r) == 0) ++recv_posted;
  };
  for (uint32_t i = 0; i < 2 * kInFlight; ++i) post_r();
  uint32_t inflight = 0;
  uint64_t id = 0;
  ibv_wc wc[64];
  auto step = [&](uint64_t* completed) {
    while (inflight < kInFlight && post_send(p.qa, IBV_WR_SEND, id, &s) == 0) {
      ++inflight;
      ++id;
    }
    int n = p.cqa->poll(1, wc);
    if (n == 0) {
      bed.poll();
      const int r = p.cqb->poll(64, wc);
      for (int i = 0; i < r; ++i) post_r();
      n = p.cqa->poll(1, wc);
    }
    if (n > 0) {
      if (wc[0].status != IBV_WC_SUCCESS) state.SkipWithError("SEND failed");
      --inflight;
      ++*completed;
    }
  };
  uint64_t warm = 0;
  while (warm < 1000) step(&warm);
  AllocWindow w(bed);
  uint64_t completed = 0;
  for (auto _ : state) {
    const uint64_t target = completed + 1;
    while (completed < target) step(&completed);
  }
  w.finish(state);
  state.SetItemsProcessed(static_cast<int64_t>(completed));
}
BENCHMARK(BM_RcSendRate)->Arg(64)->Unit(benchmark::kNanosecond)->UseRealTime();

}  // namespace
}  // namespace uroce::rnic::bench

int main(int argc, char** argv) {
  // Our own flag first, then Google Benchmark's.
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--require-zero-allocs") {
      g_require_zero = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 2;
  uroce::drivers::dpdk::EalOptions eal;
  eal.memory = uroce::drivers::dpdk::EalMemory::kNoHuge;
  eal.memory_mb = 512;
  eal.telemetry = false;
  eal.log_level = "error";
  if (!uroce::drivers::dpdk::eal_init(eal)) {
    std::fprintf(stderr, "EAL did not start\n");
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  (void)uroce::drivers::dpdk::eal_shutdown();
  if (g_require_zero && g_saw_allocs) {
    std::fprintf(stderr, "rnic_bench: heap allocations on the data path (allocs_per_pkt > 0)\n");
    return 1;
  }
  return 0;
}
