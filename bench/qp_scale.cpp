// QPs at scale on one device (issue 16's memory target): N RC QPs created
// on one sim device, connected in pairs through the device's loopback, each
// used once (one 64-byte SEND per pair and direction), then destroyed.
// Reports the resident memory each QP costs at the depths given (RSS from
// /proc/self/statm before and after creating them), how long creating,
// connecting and using them took, and whether every message arrived.
//
//   uroce-qp-scale [--qps N] [--send-depth D] [--recv-depth D] [--json]
//
// Defaults: 10,000 QPs, send and receive depth 128 (perftest's default TX
// depth).  Needs the EAL (no root: a sim device in memory).  Exit 0 when
// every QP was created and every message completed.
#include <infiniband/verbs.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/rc_connect.hpp"
#include "lib/config/config.hpp"
#include "lib/config/ip.hpp"
#include "transport/device.hpp"
#include "transport/rnic/qp.hpp"
#include "transport/rnic/rnic.hpp"

namespace {

using namespace uroce;
using Clock = std::chrono::steady_clock;

size_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  unsigned long size = 0, resident = 0;
  const int n = std::fscanf(f, "%lu %lu", &size, &resident);
  std::fclose(f);
  return n == 2 ? resident * static_cast<size_t>(sysconf(_SC_PAGESIZE)) : 0;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Options {
  unsigned qps = 10'000;
  unsigned send_depth = 128;
  unsigned recv_depth = 128;
  bool json = false;
};

bool parse(int argc, char** argv, Options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](unsigned& out) {
      if (i + 1 >= argc) return false;
      out = static_cast<unsigned>(std::strtoul(argv[++i], nullptr, 10));
      return true;
    };
    if (a == "--qps") {
      if (!value(o.qps)) return false;
    } else if (a == "--send-depth") {
      if (!value(o.send_depth)) return false;
    } else if (a == "--recv-depth") {
      if (!value(o.recv_depth)) return false;
    } else if (a == "--json") {
      o.json = true;
    } else {
      return false;
    }
  }
  return o.qps >= 2 && o.qps % 2 == 0 && o.send_depth > 0 && o.recv_depth > 0;
}

int fail(const char* what, int err) {
  std::fprintf(stderr, "uroce-qp-scale: %s: %s\n", what, std::strerror(err));
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::fprintf(stderr, "usage: uroce-qp-scale [--qps N (even)] [--send-depth D] [--recv-depth D] [--json]\n");
    return 2;
  }
  config::Config cfg;
  cfg.progress = config::Progress::kInline;  // this thread drives the engine
  config::DeviceConfig dev;
  dev.name = "scale0";
  dev.kind = config::DeviceKind::kSim;
  dev.addresses.push_back(*config::parse_ip_prefix("10.88.0.1/24"));
  cfg.devices = {dev};
  transport::Devices devs;
  if (auto st = devs.configure(std::move(cfg)); !st) return fail("configure", st.error().code);
  auto opened = devs.open("scale0");
  if (!opened) {
    std::fprintf(stderr, "uroce-qp-scale: %s\n", opened.error().message.c_str());
    return 1;
  }
  transport::Device& d = **opened;
  rnic::Rnic& r = d.rnic();
  int err = 0;
  rnic::Pd* pd = r.alloc_pd(&err);
  if (pd == nullptr) return fail("alloc_pd", err);
  // One CQ per 1,000 QPs (a CQ holds at most kMaxCqe entries).
  constexpr unsigned kQpsPerCq = 1000;
  std::vector<rnic::Cq*> cqs;
  for (unsigned i = 0; i < (o.qps + kQpsPerCq - 1) / kQpsPerCq; ++i) {
    rnic::Cq* cq = r.create_cq(static_cast<int>(kQpsPerCq * 2), nullptr, nullptr, 0, &err);
    if (cq == nullptr) return fail("create_cq", err);
    cqs.push_back(cq);
  }
  std::vector<uint8_t> buf(size_t{o.qps} * 128, 0);
  rnic::Mr* mr = r.reg_mr(pd, buf.data(), buf.size(), reinterpret_cast<uintptr_t>(buf.data()),
                          IBV_ACCESS_LOCAL_WRITE, &err);
  if (mr == nullptr) return fail("reg_mr", err);
  ibv_gid gid{};
  if (r.query_gid(1, 0, &gid) != 0) return fail("query_gid", EINVAL);

  const size_t rss0 = rss_bytes();
  auto t = Clock::now();
  std::vector<rnic::Qp*> qps;
  qps.reserve(o.qps);
  for (unsigned i = 0; i < o.qps; ++i) {
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = reinterpret_cast<ibv_cq*>(cqs[i / kQpsPerCq]);
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = o.send_depth;
    init.cap.max_recv_wr = o.recv_depth;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    rnic::Qp* qp = r.create_qp(pd, init, &err);
    if (qp == nullptr) return fail(("create_qp #" + std::to_string(i)).c_str(), err);
    qps.push_back(qp);
  }
  const double create_ms = ms_since(t);
  const size_t rss1 = rss_bytes();

  // Pairs (2k, 2k+1), each to the other through the device's loopback.
  t = Clock::now();
  for (unsigned i = 0; i < o.qps; ++i) {
    if ((err = bench::connect_rc(*qps[i], qps[i ^ 1u]->qpn().value(), gid)) != 0) return fail("connect", err);
  }
  const double connect_ms = ms_since(t);

  // Each QP: one receive posted, one 64-byte SEND to its peer.
  t = Clock::now();
  for (unsigned i = 0; i < o.qps; ++i) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data() + size_t{i} * 128), 64, mr->lkey.value()};
    ibv_recv_wr rw{};
    rw.wr_id = i;
    rw.sg_list = &sge;
    rw.num_sge = 1;
    const ibv_recv_wr* bad_r = nullptr;
    if ((err = qps[i]->post_recv(&rw, &bad_r)) != 0) return fail("post_recv", err);
  }
  for (unsigned i = 0; i < o.qps; ++i) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(buf.data() + size_t{i} * 128 + 64), 64, mr->lkey.value()};
    ibv_send_wr sw{};
    sw.wr_id = i;
    sw.sg_list = &sge;
    sw.num_sge = 1;
    sw.opcode = IBV_WR_SEND;
    sw.send_flags = IBV_SEND_SIGNALED;
    const ibv_send_wr* bad_s = nullptr;
    if ((err = qps[i]->post_send(&sw, &bad_s)) != 0) return fail("post_send", err);
    if (i % 64 == 63) d.progress();  // drive the loop as we go, as a program polling would
  }
  // Every QP: its send's completion and its receive's.
  size_t done = 0, errors = 0;
  const size_t want = size_t{o.qps} * 2;
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  std::vector<ibv_wc> wc(256);
  while (done < want && Clock::now() < deadline) {
    d.progress();
    for (rnic::Cq* cq : cqs) {
      const int n = cq->poll(static_cast<int>(wc.size()), wc.data());
      for (int k = 0; k < n; ++k) errors += wc[static_cast<size_t>(k)].status != IBV_WC_SUCCESS;
      if (n > 0) done += static_cast<size_t>(n);
    }
  }
  const double use_ms = ms_since(t);
  const size_t rss2 = rss_bytes();

  t = Clock::now();
  for (rnic::Qp* qp : qps) (void)r.destroy_qp(qp);
  const double destroy_ms = ms_since(t);
  const rnic::Rnic::Usage left = r.usage();

  const double per_qp = static_cast<double>(rss1 - std::min(rss1, rss0)) / o.qps;
  const double per_qp_used = static_cast<double>(rss2 - std::min(rss2, rss0)) / o.qps;
  const bool ok = done == want && errors == 0 && left.qps == 0;
  if (o.json) {
    std::printf(
        "{\"qps\": %u, \"send_depth\": %u, \"recv_depth\": %u, \"bytes_per_qp_created\": %.0f, "
        "\"bytes_per_qp_used\": %.0f, \"create_ms\": %.1f, \"connect_ms\": %.1f, \"use_ms\": %.1f, "
        "\"destroy_ms\": %.1f, \"completions\": %zu, \"expected\": %zu, \"errors\": %zu, \"qps_left\": %zu}\n",
        o.qps, o.send_depth, o.recv_depth, per_qp, per_qp_used, create_ms, connect_ms, use_ms, destroy_ms, done, want,
        errors, left.qps);
  } else {
    std::printf("%u RC QPs on one device, send/recv depth %u/%u:\n", o.qps, o.send_depth, o.recv_depth);
    std::printf("  memory: %.0f bytes per QP created, %.0f per QP once used (RSS %.1f -> %.1f -> %.1f MiB)\n", per_qp,
                per_qp_used, rss0 / 1048576.0, rss1 / 1048576.0, rss2 / 1048576.0);
    std::printf("  time: create %.1f ms, connect %.1f ms, one SEND each way per pair %.1f ms, destroy %.1f ms\n",
                create_ms, connect_ms, use_ms, destroy_ms);
    std::printf("  completions %zu of %zu, %zu in error; QPs left after destroy: %zu\n", done, want, errors, left.qps);
  }
  return ok ? 0 : 1;
}
