// Engine lcores (transport/lcores.hpp; issue 43 part 3): two devices on the
// sim wire in one process, each with N engine threads, 8 RC QP pairs
// driven by one application thread (this one): the aggregate message rate
// of 64 B WRITEs and the goodput of 64 KiB WRITEs, with 1 and 2 lcores in
// the same run, in turns (1 2 1 2 ...), and each thread's CPU while it ran.
//
//   uroce-lcores-bench [--lcores "1 2"] [--qps 8] [--seconds 2] [--rounds 2] [--csv FILE]
//
// Prints one line per run and, per lcore count, the median of its rounds
// and its ratio to the first count's.  The CPU columns are each thread's
// share of a core over the measured interval (utime + stime from
// /proc/self/task): `app` is this thread, `engines` every other thread of
// the process (the engine threads of both devices), so that a machine
// with fewer cores than threads shows where it stops.
#include <dirent.h>
#include <unistd.h>
#include <sys/syscall.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/rc_connect.hpp"
#include "drivers/dpdk/eal.hpp"
#include "drivers/sim/sim_wire.hpp"
#include "lib/wire/build.hpp"
#include "transport/device.hpp"
#include "transport/engine.hpp"
#include "transport/rnic/rnic.hpp"

namespace {

using namespace uroce;
using rnic::Cq;
using rnic::Qp;
using transport::IpAddr;

constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
constexpr uint32_t kIpA = 0x0A000001, kIpB = 0x0A000002;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "uroce-lcores-bench: %s\n", what.c_str());
  std::exit(1);
}

// CPU ticks (utime + stime) of each thread of this process.
std::map<long, uint64_t> thread_ticks() {
  std::map<long, uint64_t> out;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/stat");
    std::string line;
    std::getline(f, line);
    const size_t rp = line.rfind(')');
    if (rp == std::string::npos) continue;
    std::istringstream rest(line.substr(rp + 2));
    std::string field;
    uint64_t ut = 0, st = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) ut = std::strtoull(field.c_str(), nullptr, 10);
      if (i == 15) st = std::strtoull(field.c_str(), nullptr, 10);
    }
    out[std::atol(e->d_name)] = ut + st;
  }
  closedir(d);
  return out;
}

struct Node {
  drivers::sim::SimPort* port = nullptr;
  std::unique_ptr<transport::Device> dev;
  rnic::Rnic* rnic = nullptr;
  rnic::Pd* pd = nullptr;
  uint32_t ip = 0;
};

struct RunResult {
  double msgs_per_s = 0;
  double mb_per_s = 0;
  double app_cpu = 0;      // this thread, cores
  double engines_cpu = 0;  // every other thread, cores
  unsigned threads = 0;    // other threads that used CPU
};

class Rig {
 public:
  Rig(unsigned lcores, unsigned qps, size_t msg, uint32_t depth) : msg_(msg), depth_(depth) {
    for (Node* n : {&a_, &b_}) {
      auto p = wire_.add_port();
      if (!p) fail("add_port: " + p.error().message);
      n->port = *p;
    }
    make(a_, kIpA, lcores);
    make(b_, kIpB, lcores);
    resolve(a_, b_);
    resolve(b_, a_);
    buf_a_.assign(msg_ * depth_, 0x5a);
    buf_b_.assign(msg_ * depth_ * qps, 0);
    int err = 0;
    mr_a_ = a_.rnic->reg_mr(a_.pd, buf_a_.data(), buf_a_.size(), reinterpret_cast<uint64_t>(buf_a_.data()), kAccess,
                            &err);
    mr_b_ = b_.rnic->reg_mr(b_.pd, buf_b_.data(), buf_b_.size(), reinterpret_cast<uint64_t>(buf_b_.data()), kAccess,
                            &err);
    if (mr_a_ == nullptr || mr_b_ == nullptr) fail("reg_mr");
    for (unsigned i = 0; i < qps; ++i) {
      Cq* ca = cq(a_);
      Cq* cb = cq(b_);
      Qp* qa = qp(a_, ca);
      Qp* qb = qp(b_, cb);
      rts(qa, a_, b_, qb->qpn());
      rts(qb, b_, a_, qa->qpn());
      qps_.push_back({qa, ca, i});
    }
  }

  // Keeps `depth` WRITEs in flight on every QP for `seconds`.
  RunResult run(double seconds) {
    for (auto& q : qps_)
      for (uint32_t k = 0; k < depth_; ++k) post(q);
    // warm-up
    drain_for(0.2);
    const auto t0 = std::chrono::steady_clock::now();
    const auto ticks0 = thread_ticks();
    const uint64_t done0 = done_;
    drain_for(seconds);
    const auto ticks1 = thread_ticks();
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    RunResult r;
    r.msgs_per_s = static_cast<double>(done_ - done0) / el;
    r.mb_per_s = r.msgs_per_s * static_cast<double>(msg_) / 1e6;
    const long me = static_cast<long>(syscall(SYS_gettid));
    const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
    for (const auto& [tid, t1] : ticks1) {
      const auto it = ticks0.find(tid);
      const double cores = static_cast<double>(t1 - (it == ticks0.end() ? 0 : it->second)) / hz / el;
      if (tid == me) {
        r.app_cpu = cores;
      } else if (cores > 0.01) {
        r.engines_cpu += cores;
        ++r.threads;
      }
    }
    // Let what is in flight finish before the devices go.
    drain_for(0.1, /*repost=*/false);
    return r;
  }

 private:
  struct QpRun {
    Qp* qp;
    Cq* cq;
    unsigned index;
  };

  void make(Node& n, uint32_t ip, unsigned lcores) {
    n.ip = ip;
    transport::EngineConfig c;
    c.local.mac = n.port->mac();
    c.local.ips = {IpAddr::v4(ip)};
    c.progress = transport::ProgressKind::Thread;
    c.rx_burst = 128;
    c.lcores = lcores;
    auto dev = transport::Device::assemble(*n.port, ip == kIpA ? "uroce0" : "uroce1", std::move(c));
    if (!dev) fail("device: " + dev.error().message);
    n.dev = std::move(*dev);
    n.dev->engine().start();
    n.rnic = &n.dev->rnic();
    int err = 0;
    n.pd = n.rnic->alloc_pd(&err);
    if (n.pd == nullptr) fail("alloc_pd");
  }
  static void resolve(Node& from, Node& to) {
    transport::Engine& e = from.dev->engine();
    const IpAddr ip = IpAddr::v4(to.ip);
    e.run_sync([&] { e.neighbours().resolve(ip, e.now()); });
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    for (;;) {
      bool known = false;
      e.run_sync([&] { known = e.neighbours().lookup(ip, e.now()) != nullptr; });
      if (known) return;
      if (std::chrono::steady_clock::now() > end) fail("neighbour resolution");
      usleep(1000);
    }
  }
  Cq* cq(Node& n) {
    int err = 0;
    Cq* c = n.rnic->create_cq(static_cast<int>(4 * depth_), nullptr, nullptr, 0, &err);
    if (c == nullptr) fail("create_cq");
    return c;
  }
  Qp* qp(Node& n, Cq* c) {
    ibv_qp_init_attr init{};
    init.send_cq = reinterpret_cast<ibv_cq*>(c);
    init.recv_cq = reinterpret_cast<ibv_cq*>(c);
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = depth_;
    init.cap.max_recv_wr = 1;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    int err = 0;
    Qp* q = n.rnic->create_qp(n.pd, init, &err);
    if (q == nullptr) fail("create_qp");
    return q;
  }
  void rts(Qp* q, Node& local, Node& remote, rnic::Qpn rqpn) {
    ibv_gid dgid{};
    const auto d = wire::PktDesc::ipv4_mapped(remote.ip);
    std::memcpy(dgid.raw, d.data(), 16);
    const bench::RcPath path{
        .mtu = IBV_MTU_1024,
        .access = kAccess,
        .rd_atomic = 16,
        .sgid_index = static_cast<uint8_t>(local.rnic->find_gid(wire::PktDesc::ipv4_mapped(local.ip))),
    };
    if (bench::connect_rc(*q, rqpn.value(), dgid, path) != 0) fail("INIT/RTR/RTS");
  }
  void post(QpRun& q) {
    ibv_sge s{reinterpret_cast<uint64_t>(buf_a_.data()), static_cast<uint32_t>(msg_), mr_a_->lkey.value()};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.sg_list = &s;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(buf_b_.data()) + q.index * msg_ * depth_;
    wr.wr.rdma.rkey = mr_b_->rkey.value();
    const ibv_send_wr* bad = nullptr;
    if (q.qp->post_send(&wr, &bad) != 0) fail("post_send");
  }
  void drain_for(double seconds, bool repost = true) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    ibv_wc wc[32];
    while (std::chrono::steady_clock::now() < end) {
      for (auto& q : qps_) {
        const int n = q.cq->poll(32, wc);
        for (int i = 0; i < n; ++i) {
          if (wc[i].status != IBV_WC_SUCCESS) fail("completion status " + std::to_string(static_cast<int>(wc[i].status)));
          ++done_;
          if (repost) post(q);
        }
      }
    }
  }

  drivers::sim::SimWire wire_;
  Node a_, b_;
  size_t msg_;
  uint32_t depth_;
  std::vector<uint8_t> buf_a_, buf_b_;
  rnic::Mr* mr_a_ = nullptr;
  rnic::Mr* mr_b_ = nullptr;
  std::vector<QpRun> qps_;
  uint64_t done_ = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<unsigned> lcores = {1, 2};
  unsigned qps = 8, rounds = 2;
  double seconds = 2;
  std::string csv;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) fail(a + " needs a value");
      return argv[++i];
    };
    if (a == "--lcores") {
      lcores.clear();
      std::istringstream s(next());
      for (unsigned v; s >> v;) lcores.push_back(v);
    } else if (a == "--qps") {
      qps = static_cast<unsigned>(std::stoul(next()));
    } else if (a == "--seconds") {
      seconds = std::stod(next());
    } else if (a == "--rounds") {
      rounds = static_cast<unsigned>(std::stoul(next()));
    } else if (a == "--csv") {
      csv = next();
    } else {
      fail("unknown argument " + a);
    }
  }
  drivers::dpdk::EalOptions eal;
  eal.memory = drivers::dpdk::EalMemory::kNoHuge;
  eal.memory_mb = 512;
  eal.telemetry = false;
  eal.log_level = "error";
  if (!drivers::dpdk::eal_init(eal)) fail("EAL did not start");
  struct Shape {
    const char* name;
    size_t msg;
    uint32_t depth;
  };
  const Shape shapes[] = {{"write-64B", 64, 64}, {"write-64KiB", 65536, 8}};
  std::FILE* out = csv.empty() ? nullptr : std::fopen(csv.c_str(), "w");
  if (out) std::fprintf(out, "shape,lcores,round,msgs_per_s,mb_per_s,app_cores,engine_cores,engine_threads\n");
  std::printf("%-12s %6s %5s %14s %10s %9s %12s %8s\n", "shape", "lcores", "round", "msgs/s", "MB/s", "app cpu",
              "engines cpu", "threads");
  for (const Shape& sh : shapes) {
    std::map<unsigned, std::vector<double>> rate;
    for (unsigned r = 0; r < rounds; ++r) {
      for (unsigned n : lcores) {
        RunResult res;
        {
          Rig rig(n, qps, sh.msg, sh.depth);
          res = rig.run(seconds);
        }
        rate[n].push_back(res.msgs_per_s);
        std::printf("%-12s %6u %5u %14.0f %10.1f %9.2f %12.2f %8u\n", sh.name, n, r, res.msgs_per_s, res.mb_per_s,
                    res.app_cpu, res.engines_cpu, res.threads);
        if (out)
          std::fprintf(out, "%s,%u,%u,%.0f,%.1f,%.2f,%.2f,%u\n", sh.name, n, r, res.msgs_per_s, res.mb_per_s,
                       res.app_cpu, res.engines_cpu, res.threads);
      }
    }
    const double base = median(rate[lcores.front()]);
    for (unsigned n : lcores)
      std::printf("%-12s lcores %u: median %.0f msgs/s, %.2fx of %u lcore(s)\n", sh.name, n, median(rate[n]),
                  base > 0 ? median(rate[n]) / base : 0.0, lcores.front());
  }
  if (out) std::fclose(out);
  (void)drivers::dpdk::eal_shutdown();
  return 0;
}
