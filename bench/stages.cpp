// Where a message's time goes (issue 16's per-stage breakdown, issue 43's
// for WRITE and READ): one RC QP pair between two devices of this process,
// a 64-byte ping-pong of SENDs, or of WRITEs with immediate (the
// receiver's CQE ends the path), or READs one after another; for each ping
// the stack's own stage stamps (lib/util/stamps.hpp) are armed before the
// post and read once the poll that ends its path returned the CQE (the
// receiver's; a READ's own).  Prints each stage's median, 10th and 90th
// percentile in nanoseconds, and the median time from the post to the
// poll (one way; a READ's whole round trip).
//
//   uroce-stages [--iters N] [--size BYTES] [--op send|write|read] [--json]
//
// The devices: the first two of the configuration (UROCE_CONFIG and the
// other variables, as every uroce program reads them; UROCE_PROGRESS
// chooses the progress mode), else two sim devices on one in-memory wire.
// bench/run uses a veth pair whose two ends this one process opens, so
// that every stamp, both sides', comes from one clock.  The pong and the
// ACKs run with the stamps disarmed; a ping whose stamps are out of order
// (a frame other than the ping reached a point first: an ARP, a late ACK)
// is counted and left out.
#include <infiniband/verbs.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "bench/rc_connect.hpp"
#include "lib/config/config.hpp"
#include "lib/config/ip.hpp"
#include "lib/util/stamps.hpp"
#include "transport/device.hpp"
#include "transport/rnic/qp.hpp"
#include "transport/rnic/rnic.hpp"

namespace {

using namespace uroce;
using stamps::kPoints;

enum class Op : uint8_t { Send, Write, Read };
inline constexpr Op kOps[] = {Op::Send, Op::Write, Op::Read};

// What both sides' MR and QP allow: the peer's WRITE and READ.
constexpr int kAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

struct Options {
  unsigned iters = 20'000;
  unsigned warmup = 1'000;
  uint32_t size = 64;
  Op op = Op::Send;
  bool json = false;
};

const char* op_name(Op op) {
  switch (op) {
    case Op::Send: return "send";
    case Op::Write: return "write";
    case Op::Read: return "read";
  }
  return "?";
}

// The name of the stage that ends at `point` for `op` (a READ's Checked ->
// Placed is its whole response leg: stamps.hpp).
std::string stage_label(Op op, size_t point) {
  if (op == Op::Read && point == static_cast<size_t>(stamps::Point::Placed)) return "response (back to the requester)";
  return std::string(stamps::stage_name(point));
}

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](auto& out) {
      if (i + 1 >= argc) return false;
      out = static_cast<std::remove_reference_t<decltype(out)>>(std::strtoul(argv[++i], nullptr, 10));
      return true;
    };
    if (a == "--iters") {
      if (!value(o.iters) || o.iters == 0) return false;
    } else if (a == "--size") {
      if (!value(o.size) || o.size == 0 || o.size > 4096) return false;
    } else if (a == "--op") {
      if (i + 1 >= argc) return false;
      const std::string v = argv[++i];
      const auto* op = std::find_if(std::begin(kOps), std::end(kOps), [&](Op k) { return v == op_name(k); });
      if (op == std::end(kOps)) return false;
      o.op = *op;
    } else if (a == "--json") {
      o.json = true;
    } else {
      return false;
    }
  }
  return true;
}

int fail(const std::string& what, int err = 0) {
  std::fprintf(stderr, "uroce-stages: %s%s%s\n", what.c_str(), err ? ": " : "", err ? std::strerror(err) : "");
  return 1;
}

config::Config sim_pair() {
  config::Config cfg;
  cfg.progress = config::Progress::kInline;
  for (int i = 0; i < 2; ++i) {
    config::DeviceConfig d;
    d.name = "stage" + std::to_string(i);
    d.kind = config::DeviceKind::kSim;
    d.addresses.push_back(*config::parse_ip_prefix(i == 0 ? "10.77.0.1/24" : "10.77.0.2/24"));
    cfg.devices.push_back(d);
  }
  return cfg;
}

// One side: device, PD, CQ, buffer, RC QP.
struct Side {
  transport::Device* dev = nullptr;
  rnic::Pd* pd = nullptr;
  rnic::Cq* cq = nullptr;
  rnic::Mr* mr = nullptr;
  rnic::Qp* qp = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(8192, 0);
  ibv_gid gid{};

  int open(transport::Device* d) {
    dev = d;
    rnic::Rnic& r = d->rnic();
    int err = 0;
    if ((pd = r.alloc_pd(&err)) == nullptr) return err;
    if ((cq = r.create_cq(64, nullptr, nullptr, 0, &err)) == nullptr) return err;
    mr = r.reg_mr(pd, buf.data(), buf.size(), reinterpret_cast<uintptr_t>(buf.data()), kAccess, &err);
    if (mr == nullptr) return err;
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = reinterpret_cast<ibv_cq*>(cq);
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = init.cap.max_recv_wr = 16;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    if ((qp = r.create_qp(pd, init, &err)) == nullptr) return err;
    return r.query_gid(1, 0, &gid) == 0 ? 0 : EINVAL;
  }

  int connect(const Side& peer) {
    bench::RcPath path;
    path.access = kAccess;
    return bench::connect_rc(*qp, peer.qp->qpn().value(), peer.gid, path);
  }

  int post_recv() {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data()), 4096, mr->lkey.value()};
    ibv_recv_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_recv_wr* bad = nullptr;
    return qp->post_recv(&wr, &bad);
  }

  // A SEND from the second half of the buffer; a WRITE with immediate from
  // there into the peer's first half; a READ of the peer's second half into
  // this first half.
  int post_send(Op op, uint32_t len, const Side& peer) {
    const bool read = op == Op::Read;
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data() + (read ? 0 : 4096)), len, mr->lkey.value()};
    ibv_send_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = op == Op::Send ? IBV_WR_SEND : op == Op::Write ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uintptr_t>(peer.buf.data() + (read ? 4096 : 0));
    wr.wr.rdma.rkey = peer.mr->rkey.value();
    const ibv_send_wr* bad = nullptr;
    return qp->post_send(&wr, &bad);
  }
};

// Polls `cq` for one completion, driving both devices' loops as a program
// polling through the verbs would (inline progress: the loop runs here;
// engine threads: this thread assists).  False after 5 s or on an error.
bool wait_one(Side& a, Side& b, rnic::Cq* cq) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  ibv_wc wc{};
  for (unsigned spin = 0;; ++spin) {
    a.dev->progress();
    b.dev->progress();
    if (cq->poll(1, &wc) == 1) return wc.status == IBV_WC_SUCCESS;
    if ((spin & 1023) == 0 && std::chrono::steady_clock::now() > deadline) return false;
  }
}

double percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr, "usage: uroce-stages [--iters N] [--size BYTES (1-4096)] [--op send|write|read] [--json]\n");
    return 2;
  }
  config::Config cfg;
  if (std::getenv("UROCE_CONFIG") != nullptr || std::getenv("UROCE_DEVICE") != nullptr) {
    auto loaded = config::load_config(config::process_env());
    if (!loaded) return fail(loaded.error().message());
    cfg = std::move(*loaded);
  } else {
    cfg = sim_pair();
  }
  if (cfg.devices.size() < 2) return fail("the configuration names fewer than two devices");
  const std::string name_a = cfg.devices[0].name, name_b = cfg.devices[1].name;
  const bool inline_progress = cfg.progress == config::Progress::kInline;
  transport::Devices devs;
  if (auto st = devs.configure(std::move(cfg)); !st) return fail("configure", st.error().code);
  Side a, b;
  for (auto [side, name] : {std::pair{&a, &name_a}, std::pair{&b, &name_b}}) {
    auto opened = devs.open(*name);
    if (!opened) return fail(*name + ": " + opened.error().message);
    if (int err = side->open(*opened)) return fail("set-up on " + *name, err);
  }
  if (int err = a.connect(b)) return fail("connect", err);
  if (int err = b.connect(a)) return fail("connect", err);

  std::vector<std::vector<double>> stage(kPoints);
  std::vector<double> one_way;
  const double ns_per_tick = 1e9 / static_cast<double>(stamps::tsc_hz());
  unsigned unordered = 0;
  const bool is_read = o.op == Op::Read;
  for (unsigned i = 0; i < o.warmup + o.iters; ++i) {
    if (!is_read && (b.post_recv() || a.post_recv())) return fail("post_recv");
    const bool measured = i >= o.warmup;
    if (measured) stamps::arm();
    if (int err = a.post_send(o.op, o.size, b)) return fail("post_send", err);
    // A READ's path ends at its own CQE; the others' at the receiver's.
    if (!wait_one(a, b, is_read ? a.cq : b.cq)) return fail(is_read ? "the READ did not complete" : "the ping did not arrive");
    if (measured) {
      stamps::disarm();
      const stamps::Snapshot s = stamps::snapshot();
      bool ordered = true;
      for (size_t p = 0; p < kPoints; ++p) ordered = ordered && s[p] != 0 && (p == 0 || s[p] >= s[p - 1]);
      if (!ordered) {
        ++unordered;
      } else {
        for (size_t p = 1; p < kPoints; ++p) stage[p].push_back(static_cast<double>(s[p] - s[p - 1]) * ns_per_tick);
        one_way.push_back(static_cast<double>(s[kPoints - 1] - s[0]) * ns_per_tick);
      }
    }
    if (is_read) continue;
    if (!wait_one(a, b, a.cq)) return fail("the ping's completion");
    if (b.post_send(o.op, o.size, a)) return fail("post_send");
    if (!wait_one(a, b, a.cq) || !wait_one(a, b, b.cq)) return fail("the pong");
  }

  const size_t kept = one_way.size();
  if (o.json) {
    std::printf("{\"size\": %u, \"op\": \"%s\", \"progress\": \"%s\", \"pings\": %u, \"kept\": %zu, "
                "\"one_way_ns\": %.0f, \"stages\": [",
                o.size, op_name(o.op), inline_progress ? "inline" : "thread", o.iters, kept, percentile(one_way, 0.5));
    for (size_t p = 1; p < kPoints; ++p) {
      std::printf("%s{\"stage\": \"%s\", \"p10_ns\": %.0f, \"p50_ns\": %.0f, \"p90_ns\": %.0f}", p > 1 ? ", " : "",
                  stage_label(o.op, p).c_str(), percentile(stage[p], 0.1), percentile(stage[p], 0.5),
                  percentile(stage[p], 0.9));
    }
    std::printf("]}\n");
  } else {
    std::printf("%u-byte RC %s, %s progress: %zu of %u pings kept (%u out of order)\n", o.size, op_name(o.op),
                inline_progress ? "inline" : "thread", kept, o.iters, unordered);
    std::printf("| stage | p10 ns | median ns | p90 ns |\n|---|---:|---:|---:|\n");
    for (size_t p = 1; p < kPoints; ++p) {
      std::printf("| %s | %.0f | %.0f | %.0f |\n", stage_label(o.op, p).c_str(),
                  percentile(stage[p], 0.1), percentile(stage[p], 0.5), percentile(stage[p], 0.9));
    }
    std::printf("| post to poll (%s) | %.0f | %.0f | %.0f |\n", is_read ? "round trip" : "one way",
                percentile(one_way, 0.1), percentile(one_way, 0.5), percentile(one_way, 0.9));
  }
  return kept > 0 ? 0 : 1;
}
