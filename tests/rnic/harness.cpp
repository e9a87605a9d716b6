#include "tests/rnic/harness.hpp"

#include <gtest/gtest.h>
#include <rte_mbuf.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "lib/wire/build.hpp"

namespace uroce::rnic::testing {

using transport::IpAddr;

uint32_t mtu_bytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
  }
  return 0;
}

// ---- Harness -----------------------------------------------------------------------

namespace {
drivers::sim::SimWireConfig wire_config(const HarnessOptions& o) {
  drivers::sim::SimWireConfig c;
  c.link_queue_frames = o.link_queue_frames;
  return c;
}
}  // namespace

Harness::Harness(const HarnessOptions& options)
    : wire_(std::make_unique<drivers::sim::SimWire>(wire_config(options))) {
  // Every port before the first frame (the wire's rule).
  for (Node* n : {&a_, &b_}) {
    auto port = wire_->add_port();
    if (!port) {
      ADD_FAILURE() << "add_port: " << port.error().message;
      return;
    }
    n->port = *port;
  }
  uint32_t lcores = options.engine_lcores;
  if (lcores == 0) {
    const char* env = std::getenv("UROCE_TEST_ENGINE_LCORES");
    lcores = env != nullptr ? static_cast<uint32_t>(std::strtoul(env, nullptr, 10)) : 1;
    // A capture holds lcore 0's frames only (config refuses the pair).
    if (!options.pcap_a.empty() || lcores == 0) lcores = 1;
  }
  make_node(a_, 0, kIpA, 1, options.pcap_a, lcores);
  make_node(b_, 1, kIpB, 2, "", lcores);
  if (!a_.rnic || !b_.rnic) return;
  a_.rnic->set_selective_repeat(options.selective_repeat_a);
  b_.rnic->set_selective_repeat(options.selective_repeat_b);
  a_.rnic->set_spray_ports(options.spray_ports_a);
  a_.rnic->set_cc(options.cc_a);
  b_.rnic->set_cc(options.cc_b);
  if (options.resolve_neighbours) {
    resolve(a_, b_);
    resolve(b_, a_);
  }
  // Faults only once the neighbours are known: the tests are about the
  // transport, not ARP.
  if (options.faults) {
    auto st = wire_->set_all_faults(*options.faults);
    EXPECT_TRUE(st) << st.error().message;
  }
}

Harness::~Harness() {
  for (Node* n : {&a_, &b_}) n->dev.reset();  // clients, RNIC, engine
  wire_.reset();
  memory_.clear();  // last: nothing can write into it any more
}

void Harness::make_node(Node& n, size_t index, uint32_t ip4, uint8_t ip6_last, const std::string& pcap,
                        uint32_t lcores) {
  ASSERT_EQ(n.port->index(), index);
  n.ip4 = ip4;
  n.ip6 = wire::Ipv6Addr{0xfd, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, ip6_last};
  transport::EngineConfig c;
  c.local.mac = n.port->mac();
  c.local.ips = {IpAddr::v4(ip4), IpAddr::v6(n.ip6)};
  c.answer_host = true;
  // 10 ms apart, 50 tries: half a second before "unreachable", so that a
  // peer engine starved of CPU on a loaded machine still answers in time,
  // and an address-resolution timer shorter than that fires first.
  c.neigh.retry_interval_ns = 10'000'000;
  c.neigh.max_requests = 50;
  c.pcap_path = pcap;
  c.progress = transport::ProgressKind::Inline;
  c.rx_burst = 128;  // the receiver keeps up with a sender's full TX batch
  c.lcores = lcores;
  auto dev = transport::Device::assemble(*n.port, "uroce" + std::to_string(index), std::move(c));
  ASSERT_TRUE(dev) << dev.error().message;
  n.dev = std::move(*dev);
  n.engine = &n.dev->engine();
  if (transport::Lcores* l = n.engine->lcores()) l->start({}, {});  // the workers' threads
  n.rnic = &n.dev->rnic();
  int err = 0;
  n.pd = n.rnic->alloc_pd(&err);
  ASSERT_NE(n.pd, nullptr) << "alloc_pd: " << std::strerror(err);
  n.gid_v4 = n.rnic->find_gid(wire::PktDesc::ipv4_mapped(ip4));
  n.gid_v6 = n.rnic->find_gid(n.ip6);
  EXPECT_GE(n.gid_v4, 0) << "no IPv4-mapped GID in " << n.rnic->name() << "'s table";
  EXPECT_GE(n.gid_v6, 0) << "no IPv6 GID in " << n.rnic->name() << "'s table";
}

void Harness::resolve(Node& from, Node& to) {
  for (const IpAddr& ip : {IpAddr::v4(to.ip4), IpAddr::v6(to.ip6)}) {
    from.engine->run_sync([&] { from.engine->neighbours().resolve(ip, from.engine->now()); });
    const bool ok = run_until([&] { return from.engine->neighbours().lookup(ip, from.engine->now()) != nullptr; },
                              std::chrono::seconds(2));
    EXPECT_TRUE(ok) << "neighbour resolution failed";
  }
}

unsigned Harness::poll() { return a_.engine->poll() + b_.engine->poll(); }

bool Harness::run_until(const std::function<bool()>& done, Duration limit) {
  const auto end = Clock::now() + limit;
  for (;;) {
    poll();
    if (done()) return true;
    if (Clock::now() >= end) return false;
  }
}

void Harness::run_for(Duration d) {
  const auto end = Clock::now() + d;
  while (Clock::now() < end) poll();
}

// ---- objects -------------------------------------------------------------------------

uint8_t* Harness::memory(size_t len) {
  memory_.push_back(std::make_shared<uint64_t[]>((len + 7) / 8 + 1));
  return reinterpret_cast<uint8_t*>(memory_.back().get());
}

Buffer Harness::buffer(Node& n, size_t len, int access, uint8_t fill) {
  Buffer b;
  memory(len);
  b.mem = memory_.back();
  b.len = len;
  std::memset(b.data(), fill, len + 8);
  int err = 0;
  b.mr = n.rnic->reg_mr(n.pd, b.data(), len, b.addr(), access, &err);
  EXPECT_NE(b.mr, nullptr) << "reg_mr(" << len << "): " << std::strerror(err);
  return b;
}

Cq* Harness::cq(Node& n, int cqe, CompChannel* ch) {
  int err = 0;
  Cq* c = n.rnic->create_cq(cqe, nullptr, ch, 0, &err);
  EXPECT_NE(c, nullptr) << "create_cq(" << cqe << "): " << std::strerror(err);
  return c;
}

Qp* Harness::qp(Node& n, ibv_qp_type type, Cq* scq, Cq* rcq, const QpCaps& caps, Srq* s) {
  ibv_qp_init_attr init{};
  init.send_cq = reinterpret_cast<ibv_cq*>(scq);
  init.recv_cq = reinterpret_cast<ibv_cq*>(rcq);
  init.srq = reinterpret_cast<ibv_srq*>(s);
  init.qp_type = type;
  init.cap.max_send_wr = caps.max_send_wr;
  init.cap.max_recv_wr = s ? 0 : caps.max_recv_wr;
  init.cap.max_send_sge = caps.max_send_sge;
  init.cap.max_recv_sge = s ? 0 : caps.max_recv_sge;
  init.cap.max_inline_data = caps.max_inline_data;
  init.sq_sig_all = 0;
  int err = 0;
  Qp* q = n.rnic->create_qp(n.pd, init, &err);
  EXPECT_NE(q, nullptr) << "create_qp: " << std::strerror(err);
  return q;
}

Srq* Harness::srq(Node& n, uint32_t max_wr, uint32_t max_sge, uint32_t limit) {
  ibv_srq_init_attr init{};
  init.attr.max_wr = max_wr;
  init.attr.max_sge = max_sge;
  init.attr.srq_limit = limit;
  int err = 0;
  Srq* s = n.rnic->create_srq(n.pd, init, &err);
  EXPECT_NE(s, nullptr) << "create_srq: " << std::strerror(err);
  return s;
}

// ---- connection ------------------------------------------------------------------------

ibv_ah_attr Harness::ah_attr(Node& local, Node& remote, bool ipv6) const {
  ibv_ah_attr ah{};
  ah.is_global = 1;
  ah.port_num = kPortNum;
  ah.grh.hop_limit = 64;
  ah.grh.sgid_index = static_cast<uint8_t>(ipv6 ? local.gid_v6 : local.gid_v4);
  const wire::Ipv6Addr d = ipv6 ? remote.ip6 : wire::PktDesc::ipv4_mapped(remote.ip4);
  std::memcpy(ah.grh.dgid.raw, d.data(), d.size());
  return ah;
}

Ah* Harness::ah(Node& local, Node& remote, bool ipv6) {
  int err = 0;
  Ah* h = local.rnic->create_ah(local.pd, ah_attr(local, remote, ipv6), &err);
  EXPECT_NE(h, nullptr) << "create_ah: " << std::strerror(err);
  return h;
}

int Harness::to_rts(Qp* q, Node& local, Node& remote, Qpn remote_qpn, uint32_t sq_psn, uint32_t rq_psn,
                    const ConnOpts& o) {
  return qp_to_rts(q, ah_attr(local, remote, o.ipv6), remote_qpn.value(), sq_psn, rq_psn, o);
}

int Harness::connect(Qp* qa, Qp* qb, const ConnOpts& o) {
  if (int rc = to_rts(qa, a_, b_, qb->qpn(), o.psn_a, o.psn_b, o)) return rc;
  return to_rts(qb, b_, a_, qa->qpn(), o.psn_b, o.psn_a, o);
}

Pair Harness::pair(ibv_qp_type type, const ConnOpts& o, const QpCaps& caps, int cqe) {
  Pair p;
  p.scq_a = cq(a_, cqe);
  p.rcq_a = cq(a_, cqe);
  p.scq_b = cq(b_, cqe);
  p.rcq_b = cq(b_, cqe);
  if (!p.scq_a || !p.rcq_a || !p.scq_b || !p.rcq_b) return p;
  p.qa = qp(a_, type, p.scq_a, p.rcq_a, caps);
  p.qb = qp(b_, type, p.scq_b, p.rcq_b, caps);
  if (!p.qa || !p.qb) return p;
  const int rc = connect(p.qa, p.qb, o);
  EXPECT_EQ(rc, 0) << "connect: " << std::strerror(rc);
  EXPECT_EQ(p.qa->state(), IBV_QPS_RTS);
  EXPECT_EQ(p.qb->state(), IBV_QPS_RTS);
  return p;
}

int Harness::ud_ready(Qp* q, uint32_t qkey, uint32_t sq_psn) { return qp_ud_ready(q, qkey, sq_psn); }

// ---- completions ------------------------------------------------------------------------

std::vector<ibv_wc> Harness::poll_cq(Cq* c) {
  poll();
  std::vector<ibv_wc> out;
  ibv_wc wc[32];
  for (;;) {
    const int n = c->poll(32, wc);
    EXPECT_GE(n, 0) << "Cq::poll: " << std::strerror(-n);
    if (n <= 0) break;
    out.insert(out.end(), wc, wc + n);
  }
  return out;
}

std::vector<ibv_wc> Harness::wait_wcs(Cq* c, size_t n, Duration limit) {
  std::vector<ibv_wc> out;
  const auto end = Clock::now() + limit;
  ibv_wc wc[32];
  while (out.size() < n) {
    poll();
    const int want = static_cast<int>(std::min<size_t>(32, n - out.size()));
    const int got = c->poll(want, wc);
    if (got < 0) {
      ADD_FAILURE() << "Cq::poll: " << std::strerror(-got);
      break;
    }
    out.insert(out.end(), wc, wc + got);
    if (got == 0 && Clock::now() >= end) break;
  }
  return out;
}

ibv_wc Harness::wait_wc(Cq* c, Duration limit) {
  auto v = wait_wcs(c, 1, limit);
  if (v.empty()) {
    ADD_FAILURE() << "no completion within the deadline";
    ibv_wc wc{};
    wc.status = IBV_WC_GENERAL_ERR;
    wc.wr_id = ~uint64_t{0};
    return wc;
  }
  return v[0];
}

std::vector<ibv_wc> Harness::collect_for(Cq* c, Duration d) {
  std::vector<ibv_wc> out;
  const auto end = Clock::now() + d;
  ibv_wc wc[32];
  while (Clock::now() < end) {
    poll();
    const int got = c->poll(32, wc);
    if (got > 0) out.insert(out.end(), wc, wc + got);
  }
  return out;
}

std::string Harness::counters() const {
  std::string out;
  for (const Node* n : {&a_, &b_}) {
    if (!n->engine || !n->rnic) continue;
    out += n->rnic->name() + ":";
    n->engine->for_each_counter([&](std::string_view name, std::string_view, uint64_t v) {
      if (v) out += " " + std::string(name) + "=" + std::to_string(v);
    });
    n->rnic->counters().for_each([&](std::string_view name, std::string_view, uint64_t v) {
      if (v) out += " " + std::string(name) + "=" + std::to_string(v);
    });
    const auto ps = n->port->stats();
    out += " | port rx=" + std::to_string(ps.rx_frames) + " tx=" + std::to_string(ps.tx_frames) +
           " rx_dropped=" + std::to_string(ps.rx_dropped) + " tx_dropped=" + std::to_string(ps.tx_dropped);
    out += "\n";
  }
  const auto w = wire_->counters();
  out += "wire:";
  for (size_t i = 0; i < w.n.size(); ++i) {
    if (w.n[i]) out += " " + std::string(drivers::kFaultCounterNames[i]) + "=" + std::to_string(w.n[i]);
  }
  return out + "\n";
}

// ---- QP state ---------------------------------------------------------------------------

int qp_to_rts(Qp* q, const ibv_ah_attr& path, uint32_t dest_qpn, uint32_t sq_psn, uint32_t rq_psn,
              const ConnOpts& o) {
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_INIT;
  at.pkey_index = 0;
  at.port_num = kPortNum;
  at.qp_access_flags = o.access;
  int rc = q->modify(at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc) return rc;

  at = {};
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = o.mtu;
  at.dest_qp_num = dest_qpn;
  at.rq_psn = rq_psn;
  at.ah_attr = path;
  int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  // The reliable service's attributes, each for the half that uses them
  // (an XRC receive QP responds, an XRC send QP requests).
  const bool responds = q->type() == IBV_QPT_RC || q->type() == IBV_QPT_XRC_RECV;
  const bool requests = q->type() == IBV_QPT_RC || q->type() == IBV_QPT_XRC_SEND;
  if (responds) {
    at.max_dest_rd_atomic = o.max_dest_rd_atomic;
    at.min_rnr_timer = o.min_rnr_timer;
    mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  }
  rc = q->modify(at, mask);
  if (rc) return rc;

  at = {};
  at.qp_state = IBV_QPS_RTS;
  at.sq_psn = sq_psn;
  mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
  if (requests) {
    at.timeout = o.timeout;
    at.retry_cnt = o.retry_cnt;
    at.rnr_retry = o.rnr_retry;
    at.max_rd_atomic = o.max_rd_atomic;
    mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
  } else if (responds) {
    at.timeout = o.timeout;
    mask |= IBV_QP_TIMEOUT;
  }
  return q->modify(at, mask);
}


int qp_ud_ready(Qp* q, uint32_t qkey, uint32_t sq_psn) {
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_INIT;
  at.pkey_index = 0;
  at.port_num = kPortNum;
  at.qkey = qkey;
  int rc = q->modify(at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  if (rc) return rc;
  at = {};
  at.qp_state = IBV_QPS_RTR;
  rc = q->modify(at, IBV_QP_STATE);
  if (rc) return rc;
  at = {};
  at.qp_state = IBV_QPS_RTS;
  at.sq_psn = sq_psn;
  return q->modify(at, IBV_QP_STATE | IBV_QP_SQ_PSN);
}

// ---- work requests ----------------------------------------------------------------------

int post_send(Qp* q, ibv_send_wr& wr) {
  const ibv_send_wr* bad = nullptr;
  return q->post_send(&wr, &bad);
}

int post_recv(Qp* q, ibv_recv_wr& wr) {
  const ibv_recv_wr* bad = nullptr;
  return q->post_recv(&wr, &bad);
}

int post_recv(Qp* q, uint64_t wr_id, std::span<const ibv_sge> sges) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = const_cast<ibv_sge*>(sges.data());
  wr.num_sge = static_cast<int>(sges.size());
  return post_recv(q, wr);
}

int post_srq_recv(Srq* s, uint64_t wr_id, std::span<const ibv_sge> sges) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = const_cast<ibv_sge*>(sges.data());
  wr.num_sge = static_cast<int>(sges.size());
  const ibv_recv_wr* bad = nullptr;
  return s->post_recv(&wr, &bad);
}

ibv_send_wr send_wr(ibv_wr_opcode op, uint64_t wr_id, std::span<ibv_sge> sges, unsigned flags) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<int>(sges.size());
  wr.send_flags = flags;
  return wr;
}

ibv_send_wr rdma_wr(ibv_wr_opcode op, uint64_t wr_id, std::span<ibv_sge> sges, uint64_t raddr, uint32_t rkey,
                    unsigned flags) {
  ibv_send_wr wr = send_wr(op, wr_id, sges, flags);
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  return wr;
}

ibv_send_wr atomic_wr(ibv_wr_opcode op, uint64_t wr_id, ibv_sge* sge, uint64_t raddr, uint32_t rkey,
                      uint64_t compare_add, uint64_t swap, unsigned flags) {
  ibv_send_wr wr = send_wr(op, wr_id, {sge, 1}, flags);
  wr.wr.atomic.remote_addr = raddr;
  wr.wr.atomic.rkey = rkey;
  wr.wr.atomic.compare_add = compare_add;
  wr.wr.atomic.swap = swap;
  return wr;
}

// ---- data ---------------------------------------------------------------------------------

void fill_pattern(std::span<uint8_t> out, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  size_t i = 0;
  while (i < out.size()) {
    // splitmix64
    x += 0x9E3779B97F4A7C15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const size_t k = std::min<size_t>(8, out.size() - i);
    std::memcpy(out.data() + i, &z, k);
    i += k;
  }
}

ibv_qp_state qp_state(Qp* q) {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (const int rc = q->query(&attr, IBV_QP_STATE, &init); rc != 0) {
    ADD_FAILURE() << "query_qp: " << std::strerror(rc);
    return IBV_QPS_UNKNOWN;
  }
  return attr.qp_state;
}

long first_diff(std::span<const uint8_t> got, std::span<const uint8_t> want) {
  const size_t n = std::min(got.size(), want.size());
  if (n == 0 || std::memcmp(got.data(), want.data(), n) == 0) {  // (an empty span's data() may be null)
    return got.size() == want.size() ? -1 : static_cast<long>(n);
  }
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != want[i]) return static_cast<long>(i);
  }
  return static_cast<long>(n);
}

const char* wc_status_name(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_SUCCESS: return "SUCCESS";
    case IBV_WC_LOC_LEN_ERR: return "LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR: return "LOC_QP_OP_ERR";
    case IBV_WC_LOC_EEC_OP_ERR: return "LOC_EEC_OP_ERR";
    case IBV_WC_LOC_PROT_ERR: return "LOC_PROT_ERR";
    case IBV_WC_WR_FLUSH_ERR: return "WR_FLUSH_ERR";
    case IBV_WC_MW_BIND_ERR: return "MW_BIND_ERR";
    case IBV_WC_BAD_RESP_ERR: return "BAD_RESP_ERR";
    case IBV_WC_LOC_ACCESS_ERR: return "LOC_ACCESS_ERR";
    case IBV_WC_REM_INV_REQ_ERR: return "REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR: return "REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR: return "REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR: return "RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR_RETRY_EXC_ERR";
    case IBV_WC_LOC_RDD_VIOL_ERR: return "LOC_RDD_VIOL_ERR";
    case IBV_WC_REM_INV_RD_REQ_ERR: return "REM_INV_RD_REQ_ERR";
    case IBV_WC_REM_ABORT_ERR: return "REM_ABORT_ERR";
    case IBV_WC_INV_EECN_ERR: return "INV_EECN_ERR";
    case IBV_WC_INV_EEC_STATE_ERR: return "INV_EEC_STATE_ERR";
    case IBV_WC_FATAL_ERR: return "FATAL_ERR";
    case IBV_WC_RESP_TIMEOUT_ERR: return "RESP_TIMEOUT_ERR";
    case IBV_WC_GENERAL_ERR: return "GENERAL_ERR";
    case IBV_WC_TM_ERR: return "TM_ERR";
    case IBV_WC_TM_RNDV_INCOMPLETE: return "TM_RNDV_INCOMPLETE";
  }
  return "?";
}

}  // namespace uroce::rnic::testing
