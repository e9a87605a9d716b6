// Fuzz target: a device's receive path — the engine's parse and checks, the
// receive dispatch, the responder and the completer — with live QPs in every
// state.  One device (engine + RNIC on a sim port), a second sim port as
// the sender:
//
//   RC QPs in RESET, INIT, RTR, RTS, SQD and ERR, an RC QP on an SRQ, a UC
//   and a UD QP, the GSI QP; receives posted; MRs with guard bytes on both
//   sides (every right; read-only; another PD's; one whose second page was
//   unmapped after registration); a SEND, a READ and an atomic outstanding
//   on the RC QP in RTS, so that responses meet a completer with work.
//   The device offers selective repeat: a request with the BTH's selective
//   bit past the expected PSN is kept (transport/rnic/reorder.cpp) and a
//   NAK with it makes the requester resend; frames without the bit take
//   the IBA's paths as on any device.  Congestion control runs as by
//   default (ECN, DCQCN): a CE mark on a valid packet sends a CNP, and a
//   CNP (opcode 0x81) for one of the QPs starts or cuts its rate.
//
// An input is [flags] then frames, each [length: 2 bytes, big-endian]
// [bytes].  flags bit 0: make each RoCEv2 frame's ICRC right (else most
// frames stop at the ICRC check); bit 1: address it from the peer to us
// (Ethernet destination, IPv4 source and destination), as the connected
// QPs' path expects; bit 2: a DestQP or R_Key below 256 picks one of ours
// (ours are random).  Every input starts from the same state.
//
// Nothing may crash or trip a sanitizer, and no byte outside an MR may
// change (checked after every input).
#include <sys/mman.h>
#include <unistd.h>

#include <rte_mbuf.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "drivers/dpdk/eal.hpp"
#include "drivers/sim/sim_wire.hpp"
#include "lib/wire/bth.hpp"
#include "lib/wire/build.hpp"
#include "lib/wire/eth.hpp"
#include "lib/wire/ext.hpp"
#include "lib/wire/pkt.hpp"
#include "transport/device.hpp"
#include "transport/engine.hpp"
#include "transport/rnic/qp.hpp"
#include "transport/rnic/rnic.hpp"

namespace {

using namespace uroce;
using namespace uroce::rnic;

constexpr uint32_t kIpUs = 0x0A000001;
constexpr uint32_t kIpPeer = 0x0A000002;
constexpr uint32_t kPeerQpn = 0xABCD;
constexpr uint32_t kUdQkey = 0x11111111;
constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0xA5;
constexpr size_t kMaxFrames = 16;
constexpr int kAllAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

struct Region {
  std::vector<uint8_t> block;  // guard, the MR's bytes, guard
  size_t len = 0;
  Mr* mr = nullptr;
  uint8_t* data() { return block.data() + kGuard; }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (block[i] != kGuardByte || block[kGuard + len + i] != kGuardByte) return false;
    return true;
  }
};

struct Slot {
  Qp* qp = nullptr;
  ibv_qp_state target = IBV_QPS_RESET;
};

struct World {
  drivers::sim::SimWire wire;
  drivers::sim::SimPort* port = nullptr;
  drivers::sim::SimPort* peer = nullptr;
  std::unique_ptr<transport::Device> dev;  // engine and RNIC over port
  transport::Engine* engine = nullptr;
  Rnic* rnic = nullptr;
  Pd* pd = nullptr;
  Pd* other_pd = nullptr;
  Cq* cq = nullptr;
  Srq* srq = nullptr;
  std::vector<Region> regions;
  std::vector<Slot> slots;
  Ah* ah = nullptr;
  Mr* holed = nullptr;  // over two pages, the second unmapped since
  // Memory windows over part of region 0: type 1, and type 2 bound
  // through the RC QP in RTS (a fuzzed SEND with Invalidate may unbind
  // it; reset_world binds it again).  Their keys are among the R_Keys.
  Mw* windows[2] = {nullptr, nullptr};
  ibv_mr window_mr{};  // what a bind names the MR by (its lkey)
  int gid = -1;
};

World* g = nullptr;

void die(const char* what) {
  std::fprintf(stderr, "fuzz-rx: %s\n", what);
  std::abort();
}

ibv_ah_attr path() {
  ibv_ah_attr a{};
  a.is_global = 1;
  a.port_num = kPortNum;
  a.grh.hop_limit = 64;
  a.grh.sgid_index = static_cast<uint8_t>(g->gid);
  const wire::Ipv6Addr d = wire::PktDesc::ipv4_mapped(kIpPeer);
  std::memcpy(a.grh.dgid.raw, d.data(), d.size());
  return a;
}

int modify(Qp* q, ibv_qp_state s) {
  ibv_qp_attr a{};
  a.qp_state = s;
  int mask = IBV_QP_STATE;
  const bool ud = q->type() == IBV_QPT_UD || q->is_gsi();
  switch (s) {
    case IBV_QPS_INIT:
      a.pkey_index = 0;
      a.port_num = kPortNum;
      mask |= IBV_QP_PKEY_INDEX;
      if (!q->is_gsi()) mask |= IBV_QP_PORT;
      if (ud) {
        a.qkey = q->is_gsi() ? rnic::kGsiQkey : kUdQkey;
        mask |= IBV_QP_QKEY;
      } else {
        a.qp_access_flags = kAllAccess;
        mask |= IBV_QP_ACCESS_FLAGS;
      }
      break;
    case IBV_QPS_RTR:
      if (ud) break;
      a.path_mtu = IBV_MTU_1024;
      a.dest_qp_num = kPeerQpn;
      a.rq_psn = 0;
      a.ah_attr = path();
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (q->type() == IBV_QPT_RC) {
        a.max_dest_rd_atomic = 4;
        a.min_rnr_timer = 1;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      }
      break;
    case IBV_QPS_RTS:
      a.sq_psn = 0;
      mask |= IBV_QP_SQ_PSN;
      if (q->type() == IBV_QPT_RC && !q->is_gsi()) {
        a.timeout = 1;  // the shortest timer, so that retries run too
        a.retry_cnt = 2;
        a.rnr_retry = 2;
        a.max_rd_atomic = 4;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
      }
      break;
    case IBV_QPS_SQD:
    case IBV_QPS_ERR:
    case IBV_QPS_RESET:
    case IBV_QPS_SQE:
    case IBV_QPS_UNKNOWN:
      break;
  }
  return q->modify(a, mask);
}

// RESET, then up the states to `target`.
void bring_to(Qp* q, ibv_qp_state target) {
  if (modify(q, IBV_QPS_RESET) != 0) die("modify to RESET");
  if (target == IBV_QPS_RESET) return;
  const ibv_qp_state path[] = {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD};
  if (target == IBV_QPS_ERR) {
    if (modify(q, IBV_QPS_ERR) != 0) die("modify to ERR");
    return;
  }
  for (ibv_qp_state s : path) {
    if (modify(q, s) != 0) die("modify up");
    if (s == target) return;
  }
}

Region& region(size_t len, int access, Pd* pd) {
  Region& r = g->regions.emplace_back();
  r.len = len;
  r.block.assign(len + 2 * kGuard, kGuardByte);
  std::memset(r.data(), 0, len);
  int err = 0;
  r.mr = g->rnic->reg_mr(pd, r.data(), len, reinterpret_cast<uint64_t>(r.data()), access, &err);
  if (r.mr == nullptr) die("reg_mr");
  return r;
}

void drain_peer() {
  rte_mbuf* m[64];
  uint16_t n;
  while ((n = g->peer->rx_burst(m, 64)) > 0) rte_pktmbuf_free_bulk(m, n);
}

void poll(unsigned n) {
  for (unsigned i = 0; i < n; ++i) {
    g->engine->poll();
    drain_peer();
  }
}

void build_world() {
  g = new World;
  auto a = g->wire.add_port();
  auto b = g->wire.add_port();
  if (!a || !b) die("sim ports");
  g->port = *a;
  g->peer = *b;
  transport::EngineConfig c;
  c.local.mac = g->port->mac();
  c.local.ips = {transport::IpAddr::v4(kIpUs)};
  c.announce = false;
  c.progress = transport::ProgressKind::Inline;
  auto dev = transport::Device::assemble(*g->port, "uroce0", std::move(c));
  if (!dev) die("device assembly");
  g->dev = std::move(*dev);
  g->engine = &g->dev->engine();
  g->rnic = &g->dev->rnic();
  g->rnic->set_selective_repeat(true);
  g->engine->neighbours().add_static(transport::IpAddr::v4(kIpPeer), g->peer->mac());
  int err = 0;
  g->pd = g->rnic->alloc_pd(&err);
  g->other_pd = g->rnic->alloc_pd(&err);
  g->cq = g->rnic->create_cq(4096, nullptr, nullptr, 0, &err);
  g->gid = g->rnic->find_gid(wire::PktDesc::ipv4_mapped(kIpUs));
  if (g->pd == nullptr || g->other_pd == nullptr || g->cq == nullptr || g->gid < 0) die("objects");
  ibv_srq_init_attr si{};
  si.attr.max_wr = 64;
  si.attr.max_sge = 2;
  g->srq = g->rnic->create_srq(g->pd, si, &err);
  if (g->srq == nullptr) die("srq");
  region(64 * 1024, kAllAccess | IBV_ACCESS_MW_BIND, g->pd);  // 0: receives, remote everything, windows
  region(4096, IBV_ACCESS_REMOTE_READ, g->pd);             // 1: read-only
  region(4096, kAllAccess, g->other_pd);                   // 2: another PD's
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* m = static_cast<uint8_t*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (m == MAP_FAILED) die("mmap");
  g->holed = g->rnic->reg_mr(g->pd, m, 2 * page, reinterpret_cast<uint64_t>(m), kAllAccess, &err);
  if (g->holed == nullptr) die("reg_mr holed");
  munmap(m + page, page);
  g->ah = g->rnic->create_ah(g->pd, path(), &err);
  if (g->ah == nullptr) die("ah");

  auto make = [&](ibv_qp_type type, ibv_qp_state target, bool on_srq) {
    ibv_qp_init_attr init{};
    init.send_cq = reinterpret_cast<ibv_cq*>(g->cq);
    init.recv_cq = reinterpret_cast<ibv_cq*>(g->cq);
    init.srq = on_srq ? reinterpret_cast<ibv_srq*>(g->srq) : nullptr;
    init.qp_type = type;
    init.cap.max_send_wr = 64;
    init.cap.max_recv_wr = 64;
    init.cap.max_send_sge = 2;
    init.cap.max_recv_sge = 2;
    init.cap.max_inline_data = 64;
    Qp* q = g->rnic->create_qp(g->pd, init, &err);
    if (q == nullptr) die("create_qp");
    g->slots.push_back(Slot{q, target});
  };
  for (ibv_qp_state s : {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_SQD, IBV_QPS_ERR})
    make(IBV_QPT_RC, s, false);
  make(IBV_QPT_RC, IBV_QPS_RTS, true);
  make(IBV_QPT_UC, IBV_QPS_RTS, false);
  make(IBV_QPT_UD, IBV_QPS_RTS, false);
  ibv_qp_init_attr gi{};
  gi.send_cq = reinterpret_cast<ibv_cq*>(g->cq);
  gi.recv_cq = reinterpret_cast<ibv_cq*>(g->cq);
  gi.cap.max_send_wr = 16;
  gi.cap.max_recv_wr = 16;
  gi.cap.max_send_sge = 1;
  gi.cap.max_recv_sge = 1;
  Qp* gsi = g->rnic->create_gsi_qp(g->pd, gi, &err);
  if (gsi == nullptr) die("gsi qp");
  g->slots.push_back(Slot{gsi, IBV_QPS_RTS});
  g->windows[0] = g->rnic->alloc_mw(g->pd, IBV_MW_TYPE_1, &err);
  g->windows[1] = g->rnic->alloc_mw(g->pd, IBV_MW_TYPE_2, &err);
  if (g->windows[0] == nullptr || g->windows[1] == nullptr) die("alloc_mw");
}

// Binds each window that is not bound (at build, and after a fuzzed SEND
// with Invalidate took the type 2 one), through the RC QP in RTS.
void bind_windows() {
  Qp* rts = nullptr;
  for (Slot& s : g->slots)
    if (s.qp->type() == IBV_QPT_RC && s.target == IBV_QPS_RTS && s.qp->srq() == nullptr && !s.qp->is_gsi()) rts = s.qp;
  if (rts == nullptr) die("no RTS RC QP");
  Region& r = g->regions[0];
  g->window_mr.lkey = r.mr->lkey.value();
  for (Mw* mw : g->windows) {
    if (mw->bound) continue;
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_BIND_MW;
    wr.bind_mw.mw = &mw->ibv;
    wr.bind_mw.rkey = (mw->rkey.value() & ~0xFFu) | ((mw->rkey.value() + 1) & 0xFFu);
    wr.bind_mw.bind_info = {&g->window_mr, reinterpret_cast<uint64_t>(r.data()) + 4096, 8192,
                            IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC};
    const ibv_send_wr* bad = nullptr;
    if (rts->post_send(&wr, &bad) != 0) die("post BIND_MW");
    for (int i = 0; i < 100 && !mw->bound; ++i) poll(1);
    if (!mw->bound) die("bind_mw");
  }
}

// Every QP back to its state, receives posted, work outstanding on the RC
// QP in RTS; the CQ emptied.
void reset_world() {
  Region& mem = g->regions[0];
  for (Slot& s : g->slots) bring_to(s.qp, s.target);
  bind_windows();
  ibv_wc wc[64];
  poll(2);
  while (g->cq->poll(64, wc) > 0) {
  }
  uint64_t off = 0;
  auto recv_sge = [&](uint32_t len) {
    ibv_sge sge{reinterpret_cast<uint64_t>(mem.data() + off), len, mem.mr->lkey.value()};
    off = (off + len) % (32 * 1024);
    return sge;
  };
  for (Slot& s : g->slots) {
    if (s.qp->srq() != nullptr || s.target == IBV_QPS_RESET) continue;
    for (int i = 0; i < 4; ++i) {
      ibv_sge sge = recv_sge(s.qp->type() == IBV_QPT_UD || s.qp->is_gsi() ? 1100 : 2048);
      ibv_recv_wr wr{};
      wr.sg_list = &sge;
      wr.num_sge = 1;
      const ibv_recv_wr* bad = nullptr;
      s.qp->post_recv(&wr, &bad);
    }
  }
  while (g->srq->rq().size() < 8) {
    ibv_sge sge = recv_sge(2048);
    ibv_recv_wr wr{};
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_recv_wr* bad = nullptr;
    if (g->srq->post_recv(&wr, &bad) != 0) break;
  }
  // Outstanding work on the RC QP in RTS (slot 3): a SEND, a READ, an atomic.
  Qp* rc = g->slots[3].qp;
  ibv_sge s1{reinterpret_cast<uint64_t>(mem.data() + 40000), 3000, mem.mr->lkey.value()};
  ibv_sge s2{reinterpret_cast<uint64_t>(mem.data() + 44000), 2500, mem.mr->lkey.value()};
  ibv_sge s3{reinterpret_cast<uint64_t>(mem.data() + 48000), 8, mem.mr->lkey.value()};
  ibv_send_wr w[3]{};
  w[0].opcode = IBV_WR_SEND;
  w[0].sg_list = &s1;
  w[0].num_sge = 1;
  w[0].send_flags = IBV_SEND_SIGNALED;
  w[1].opcode = IBV_WR_RDMA_READ;
  w[1].sg_list = &s2;
  w[1].num_sge = 1;
  w[1].wr.rdma.remote_addr = 0x100000;
  w[1].wr.rdma.rkey = 0x1234;
  w[2].opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  w[2].sg_list = &s3;
  w[2].num_sge = 1;
  w[2].wr.atomic.remote_addr = 0x200000;
  w[2].wr.atomic.rkey = 0x1234;
  w[2].wr.atomic.compare_add = 1;
  w[0].next = &w[1];
  w[1].next = &w[2];
  const ibv_send_wr* bad = nullptr;
  rc->post_send(w, &bad);
  poll(2);
}

// The harness's rewrites of one frame (see the top of the file).
void shape(uint8_t* f, size_t n, uint8_t flags) {
  wire::PktInfo pi = wire::parse({f, n});
  if ((flags & 2) != 0 && pi.cls != wire::FrameClass::Malformed && n >= wire::Eth::kSize) {
    wire::Eth(f).set_dst(g->port->mac());
    if (pi.l3 == wire::L3::IPv4 && size_t{pi.l3_off} + 20 <= n) {
      wire::store_be<uint32_t>(f + pi.l3_off + 12, kIpPeer);
      wire::store_be<uint32_t>(f + pi.l3_off + 16, kIpUs);
    }
  }
  if (!pi.is_roce()) return;
  if ((flags & 4) != 0) {
    wire::Bth bth(f + pi.bth_off);
    if (pi.dest_qp.value() < 256) bth.set_dest_qp(g->slots[pi.dest_qp.value() % g->slots.size()].qp->qpn());
    if (pi.opcode_known) {
      const wire::OpcodeInfo& op = pi.op();
      auto key_of = [&](uint32_t k) {
        const size_t nr = g->regions.size() + 3;
        const size_t i = k % nr;
        if (i < g->regions.size()) return g->regions[i].mr->rkey;
        if (i == g->regions.size()) return g->holed->rkey;
        return g->windows[i - g->regions.size() - 1]->rkey;
      };
      if (op.has(wire::kHdrReth)) {
        wire::Reth r(f + pi.ext_off(wire::kHdrReth));
        if (r.rkey().value() < 256) r.set_rkey(key_of(r.rkey().value()));
      }
      if (op.has(wire::kHdrAtomicEth)) {
        wire::AtomicEth a(f + pi.ext_off(wire::kHdrAtomicEth));
        if (a.rkey().value() < 256) a.set_rkey(key_of(a.rkey().value()));
      }
    }
  }
  if ((flags & 1) != 0 && size_t{pi.icrc_off} + 4 <= n) {
    pi = wire::parse({f, n});
    const uint32_t icrc = wire::compute_icrc(f, pi);
    for (int i = 0; i < 4; ++i) f[pi.icrc_off + i] = static_cast<uint8_t>(icrc >> (8 * i));  // LSB first
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  drivers::dpdk::EalOptions eal;
  eal.memory = drivers::dpdk::EalMemory::kNoHuge;
  eal.memory_mb = 256;
  eal.telemetry = false;
  eal.log_level = "error";
  if (!drivers::dpdk::eal_init(eal)) die("EAL did not start");
  build_world();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  reset_world();
  const uint8_t flags = data[0];
  size_t at = 1;
  for (size_t k = 0; k < kMaxFrames && at + 2 <= size; ++k) {
    size_t len = (size_t{data[at]} << 8) | data[at + 1];
    at += 2;
    len = std::min(len, size - at);
    len = std::min<size_t>(len, drivers::dpdk::kMaxFrameBytes);
    rte_mbuf* m = rte_pktmbuf_alloc(g->peer->pool());
    if (m == nullptr) die("mbuf");
    uint8_t* f = rte_pktmbuf_mtod(m, uint8_t*);
    std::memcpy(f, data + at, len);
    at += len;
    shape(f, len, flags);
    m->data_len = static_cast<uint16_t>(len);
    m->pkt_len = static_cast<uint32_t>(len);
    if (g->peer->tx_burst(&m, 1) != 1) rte_pktmbuf_free(m);
    poll(2);
  }
  poll(4);
  for (const Region& r : g->regions)
    if (!r.guards_intact()) die("bytes outside an MR changed");
  return 0;
}
