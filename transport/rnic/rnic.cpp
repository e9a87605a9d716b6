// rnic: the device — attributes, the port and its GID table, object
// creation and destruction (with the man pages' errnos), the key and QPN
// tables the engine looks up, async events, doorbells, and the RoCE sink
// that hands each received packet to its QP's responder or completer.
#include "transport/rnic/rnic.hpp"

#include <arpa/inet.h>
#include <endian.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "lib/util/steady_ns.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"
#include "transport/params.hpp"
#include "transport/rnic/memory.hpp"
#include "transport/rnic/rnic_internal.hpp"
#include "transport/telemetry.hpp"
#include "transport/rnic/tx.hpp"
#include "transport/rnic/verbs_newer.hpp"

namespace uroce::rnic {
namespace {

using detail::erase_owned;
using detail::owns;
using detail::set_err;
using detail::take_owned;
using detail::unbind;

// rxe's RXE_MAX_HDR_LENGTH: the Ethernet MTU less this is what a RoCEv2
// payload may use (IPv6 40 + UDP 8 + BTH 12 + the largest extended
// headers + ICRC, rounded).
constexpr uint32_t kRoceHdrAllowance = 80;


using wire::is_ipv4_mapped;

bool is_link_local(const wire::Ipv6Addr& a) noexcept { return a[0] == 0xfe && (a[1] & 0xc0) == 0x80; }

bool is_zero(const wire::Ipv6Addr& a) noexcept {
  return std::all_of(a.begin(), a.end(), [](uint8_t b) { return b == 0; });
}

using transport::params::kLinkPollNs;

}  // namespace

// ---- the device ----------------------------------------------------------------------

Rnic::Rnic(transport::Engine& engine, std::string name)
    : engine_(engine),
      lcores_(engine.lcores()),
      name_(std::move(name)),
      key_table_(kMaxMr),
      last_key_byte_(kMaxMr),
      rng_((uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()),
      qp_table_(kMaxQp),
      srq_table_(kMaxSrq + 1) {
  // The GID table (as the kernel fills rxe's from the netdev): the IPv6
  // link-local address first, then every address in the device's order,
  // IPv4 as ::ffff:a.b.c.d; all RoCE v2.
  const auto& ips = engine_.config().local.ips;
  for (const auto& ip : ips)
    if (is_link_local(ip.bytes) && gids_.size() < kMaxGid) gids_.push_back(ip.bytes);
  for (const auto& ip : ips)
    if (!is_link_local(ip.bytes) && gids_.size() < kMaxGid) gids_.push_back(ip.bytes);

  // Device attributes: rxe's (rxe_param.h) through limits.hpp, so that
  // what is reported is what create_* and post_* enforce.
  ibv_device_attr& a = dev_attr_;
  std::snprintf(a.fw_ver, sizeof a.fw_ver, "0.1.0");
  a.node_guid = htobe64(node_guid());
  a.sys_image_guid = a.node_guid;
  a.max_mr_size = kMaxMrSize;
  a.page_size_cap = 0xfffff000u;  // any 4 KiB multiple, as rxe
  a.vendor_id = kVendorId;
  a.vendor_part_id = kVendorPartId;
  a.hw_ver = 0;
  a.max_qp = static_cast<int>(std::min<uint32_t>(kMaxQp, engine_.config().max_qpn));
  a.max_qp_wr = static_cast<int>(kMaxQpWr);
  // Memory windows type 1 and 2B with local and remote invalidation (as
  // rxe; MEM_MGT_EXTENSIONS is what programs test for SEND with
  // Invalidate and LOCAL_INV); XRC (annex A14).
  a.device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_SYS_IMAGE_GUID |
                       IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_MEM_MGT_EXTENSIONS |
                       IBV_DEVICE_XRC;
  a.max_sge = static_cast<int>(kMaxSge);
  a.max_sge_rd = static_cast<int>(kMaxSgeRd);
  a.max_cq = static_cast<int>(kMaxCq);
  a.max_cqe = static_cast<int>(kMaxCqe);
  a.max_mr = static_cast<int>(kMaxMr - 1);  // key index 0 is never used
  a.max_pd = static_cast<int>(kMaxPd);
  a.max_qp_rd_atom = static_cast<int>(kMaxQpRdAtom);
  a.max_ee_rd_atom = 0;
  a.max_res_rd_atom = static_cast<int>(kMaxQpRdAtom * 1024);
  a.max_qp_init_rd_atom = static_cast<int>(kMaxQpRdAtom);
  a.max_ee_init_rd_atom = 0;
  a.atomic_cap = IBV_ATOMIC_HCA;  // atomic with respect to each other across QPs (one engine, CPU atomics)
  a.max_ee = 0;
  a.max_rdd = 0;
  a.max_mw = static_cast<int>(kMaxMr - 1);  // windows and MRs share the key space
  a.max_raw_ipv6_qp = 0;
  a.max_raw_ethy_qp = 0;
  a.max_mcast_grp = static_cast<int>(kMaxMcastGrp);
  a.max_mcast_qp_attach = static_cast<int>(kMaxMcastQpAttach);
  a.max_total_mcast_qp_attach = static_cast<int>(kMaxTotalMcastQpAttach);
  a.max_ah = static_cast<int>(kMaxAh);
  a.max_fmr = 0;
  a.max_map_per_fmr = 0;
  a.max_srq = static_cast<int>(kMaxSrq);
  a.max_srq_wr = static_cast<int>(kMaxSrqWr);
  a.max_srq_sge = static_cast<int>(kMaxSrqSge);
  a.max_pkeys = kMaxPkeys;
  a.local_ca_ack_delay = 15;  // as rxe
  a.phys_port_cnt = 1;

  memory::install();  // remote accesses to memory unmapped since registration fail, not crash
  transport::telemetry_register_set(name_, "rnic", this, [this](const transport::CounterVisitor& f) {
    ctr_.for_each([&](std::string_view n, std::string_view, uint64_t v) { f(n, v); });
    f("mem_faults", memory::faults());  // process-wide: accesses that found memory unmapped (memory.hpp)
  });
  transport::telemetry_register_table(name_, "qps", this, [this] {
    std::vector<transport::TableRow> rows;
    for (const QpSnapshot& q : qp_snapshots()) rows.push_back(qp_row(q));
    return rows;
  });
  if (lcores_ != nullptr) ctr_.set_shared(true);  // several lcores count
  engine_.run_sync([this] {
    for (unsigned i = 1; lcores_ != nullptr && i < lcores_->size(); ++i) lcores_->engine(i).set_roce_sink(this);
    engine_.set_roce_sink(this);
    link_up_ = engine_.port().link_up();
    link_timer_.cb = on_link_poll;
    link_timer_.owner = this;
    engine_.timers().arm(link_timer_, engine_.now() + kLinkPollNs);
  });
}

Rnic::~Rnic() {
  transport::telemetry_unregister_set(name_, "rnic", this);
  transport::telemetry_unregister_table(name_, "qps", this);  // waits out a reader (before the run_sync below)
  engine_.run_sync([this] {
    for (unsigned i = 1; lcores_ != nullptr && i < lcores_->size(); ++i) lcores_->engine(i).set_roce_sink(nullptr);
    engine_.set_roce_sink(nullptr);
    engine_.timers().cancel(link_timer_);
    for (auto& qp : qps_) {
      qp_table_[qp->qpn().value()] = nullptr;
      sender_reset(*qp, qp->engine());    // the requester's and the completer's timers
      responder_stop(*qp, qp->engine());  // the responder's
    }
  });
  // Doorbells queued before the call above ran before it (the queue is
  // FIFO); one still pending was queued later: let it run (it finds the
  // QP detached and does nothing harmful) before the QPs go.
  for (auto& qp : qps_)
    while (qp->doorbell_pending.load(std::memory_order_acquire)) engine_.run_sync([] {});
  qps_.clear();
  ahs_.clear();
  srqs_.clear();
  xrcds_.clear();
  cqs_.clear();
  channels_.clear();
  mws_.clear();
  mrs_.clear();
  pds_.clear();
}

uint64_t Rnic::node_guid() const noexcept {
  // EUI-64 from the MAC (IEEE; the universal/local bit inverted), as rxe.
  const wire::MacAddr m = engine_.config().local.mac;
  return (uint64_t{static_cast<uint8_t>(m[0] ^ 0x02)} << 56) | (uint64_t{m[1]} << 48) | (uint64_t{m[2]} << 40) |
         (uint64_t{0xff} << 32) | (uint64_t{0xfe} << 24) | (uint64_t{m[3]} << 16) | (uint64_t{m[4]} << 8) |
         uint64_t{m[5]};
}

uint32_t Rnic::active_mtu_bytes() const noexcept {
  const uint32_t eth = engine_.port().mtu();
  const uint32_t room = eth > kRoceHdrAllowance ? eth - kRoceHdrAllowance : 0;
  return 128u << static_cast<unsigned>(ib_mtu_for(room));
}

int Rnic::query_port(uint8_t port, ibv_port_attr* out) const {
  if (port != kPortNum || out == nullptr) return EINVAL;
  *out = ibv_port_attr{};
  const bool up = engine_.port().link_up();
  out->state = up ? IBV_PORT_ACTIVE : IBV_PORT_DOWN;
  out->max_mtu = IBV_MTU_4096;
  out->active_mtu = ib_mtu_for(active_mtu_bytes());
  out->gid_tbl_len = static_cast<int>(kMaxGid);
  out->port_cap_flags = IBV_PORT_CM_SUP;  // as rxe
  out->max_msg_sz = kMaxMsgSize;
  out->bad_pkey_cntr = 0;
  out->qkey_viol_cntr = 0;
  out->pkey_tbl_len = kMaxPkeys;
  out->lid = 0;
  out->sm_lid = 0;
  out->lmc = 0;
  out->max_vl_num = 1;
  out->sm_sl = 0;
  out->subnet_timeout = 0;
  out->init_type_reply = 0;
  out->active_width = 1;   // 1X
  out->active_speed = 32;  // EDR (25 Gb/s per lane)
  out->phys_state = up ? 5 : 3;  // LinkUp : Disabled
  out->link_layer = IBV_LINK_LAYER_ETHERNET;
  out->flags = 0;
  out->port_cap_flags2 = 0;
  return 0;
}

size_t Rnic::gid_count() const noexcept { return gids_.size(); }

int Rnic::query_gid(uint8_t port, int index, ibv_gid* gid) const {
  if (port != kPortNum || index < 0 || static_cast<uint32_t>(index) >= kMaxGid || gid == nullptr) return EINVAL;
  std::memset(gid->raw, 0, sizeof gid->raw);  // an empty entry reads as zeros
  if (static_cast<size_t>(index) < gids_.size()) std::memcpy(gid->raw, gids_[index].data(), 16);
  return 0;
}

int Rnic::query_gid_type(uint8_t port, int index, int* type) const {
  if (port != kPortNum || index < 0 || static_cast<size_t>(index) >= gids_.size() || type == nullptr) return EINVAL;
  *type = IBV_GID_TYPE_ROCE_V2;
  return 0;
}

int Rnic::query_pkey(uint8_t port, int index, uint16_t* pkey) const {
  if (port != kPortNum || index != 0 || pkey == nullptr) return EINVAL;
  *pkey = kDefaultPkey.value();
  return 0;
}

int Rnic::find_gid(const wire::Ipv6Addr& addr) const noexcept {
  for (size_t i = 0; i < gids_.size(); ++i)
    if (gids_[i] == addr) return static_cast<int>(i);
  return -1;
}

int Rnic::resolve_path(const ibv_ah_attr& attr, AhAttr* out) const {
  // RoCE carries the GRH's addresses in the IP header (IBA A17.4): the
  // path must be global, from one of our GIDs, to a GID of the same
  // family.
  if (!attr.is_global || attr.port_num != kPortNum) return EINVAL;
  if (attr.grh.sgid_index >= gids_.size()) return EINVAL;
  wire::Ipv6Addr dgid;
  std::memcpy(dgid.data(), attr.grh.dgid.raw, 16);
  const wire::Ipv6Addr& sgid = gids_[attr.grh.sgid_index];
  if (is_zero(dgid) || is_ipv4_mapped(dgid) != is_ipv4_mapped(sgid)) return EINVAL;
  if (out != nullptr) {
    out->attr = attr;
    out->dgid = dgid;
    out->sgid = sgid;
    out->ipv4 = is_ipv4_mapped(sgid);
    out->traffic_class = attr.grh.traffic_class;
    // A unicast path's hop limit is the route's, whatever the program
    // asked (Linux's ib_resolve_eth_dmac overwrites grh.hop_limit with
    // the route's for every RoCE modify_qp and create_ah: ibv_rc_pingpong's
    // hop limit 1 crosses routers on rxe and ConnectX); a multicast one
    // keeps the program's, as there.
    constexpr uint8_t kRouteHopLimit = 64;  // Linux's ip_default_ttl / hop_limit
    out->hop_limit = is_multicast_gid(dgid) && attr.grh.hop_limit != 0 ? attr.grh.hop_limit : kRouteHopLimit;
    out->flow_label = attr.grh.flow_label & 0xFFFFFu;
  }
  return 0;
}

bool next_hop_known(transport::Engine& engine, const wire::Ipv6Addr& dgid) {
  if (is_multicast_gid(dgid)) return true;  // the group's MAC (mcast.hpp), no ARP/ND
  const transport::IpAddr ip = transport::IpAddr::v6(dgid);
  return engine.config().local.owns(ip) || engine.neighbours().lookup(ip, engine.now()) != nullptr;
}

int Rnic::await_neighbour(const ibv_ah_attr& attr) {
  enum class Look : uint8_t { Ready, Waiting, Failed, NoRoom };
  const bool in_loop = transport::Progress::polling_here() || engine_.on_engine_thread();
  const uint64_t until = steady_ns() + transport::params::kPathResolveNs;
  bool asked = false;
  for (;;) {
    const Look look = control([&]() -> Look {
      AhAttr path;
      if (resolve_path(attr, &path) != 0 || next_hop_known(path.dgid)) return Look::Ready;
      const transport::IpAddr ip = transport::IpAddr::v6(path.dgid);
      transport::NeighTable& neigh = engine_.neighbours();
      if (!asked) {  // starts a probe, or starts over one that failed before
        asked = true;
        neigh.resolve(ip, engine_.now());
        return next_hop_known(path.dgid) ? Look::Ready : Look::Waiting;
      }
      const auto st = neigh.state(ip);
      if (!st) return Look::NoRoom;  // the table refused the entry (full)
      return *st == transport::NeighState::Failed ? Look::Failed : Look::Waiting;
    });
    if (look == Look::Ready || in_loop) return 0;
    if (look == Look::NoRoom) return ENOMEM;
    // Linux's answer when the neighbour does not answer in time.
    if (look == Look::Failed || static_cast<int64_t>(until - steady_ns()) <= 0) return ETIMEDOUT;
    // The reply is the loop's to receive: our turn when nobody else runs
    // it (inline progress), else a short sleep while the engine thread does.
    if (!engine_.progress().try_progress(transport::Progress::Assist::Once))
      std::this_thread::sleep_for(std::chrono::nanoseconds(transport::params::kPathResolvePollNs));
  }
}

// ---- PD ------------------------------------------------------------------------------------

Rnic::Usage Rnic::usage() {
  return control([&] {
    Usage u;
    u.pds = pds_.size();
    u.mrs = static_cast<size_t>(std::count_if(mrs_.begin(), mrs_.end(), [](const auto& m) { return m != nullptr; }));
    u.channels = channels_.size();
    u.cqs = cqs_.size();
    u.srqs = srqs_.size();
    u.qps = qps_.size();
    u.ahs = ahs_.size();
    u.xrcds = xrcds_.size();
    return u;
  });
}

Pd* Rnic::alloc_pd(int* err) {
  return control([&]() -> Pd* {
    if (pds_.size() >= kMaxPd) {
      set_err(err, ENOMEM);
      return nullptr;
    }
    pds_.push_back(std::make_unique<Pd>(*this, next_pd_++));
    return pds_.back().get();
  });
}

int Rnic::dealloc_pd(Pd* pd) {
  return control([&]() -> int {
    if (pd == nullptr || !owns(pds_, pd)) return EINVAL;
    if (pd->users.load() != 0) return EBUSY;  // ibv_dealloc_pd(3): objects still use it
    erase_owned(pds_, pd);
    return 0;
  });
}

Pd* Rnic::import_pd(uint32_t handle) {
  return control([&]() -> Pd* {
    for (auto& p : pds_) {
      if (p->handle() == handle) {
        p->users.fetch_add(1);
        return p.get();
      }
    }
    return nullptr;
  });
}

void Rnic::release_pd(Pd* pd) {
  control([&]() -> int {
    if (owns(pds_, pd)) pd->users.fetch_sub(1);
    return 0;
  });
}

Mr* Rnic::find_mr(uint32_t handle, const Pd* pd) {
  return control([&]() -> Mr* {
    const uint32_t idx = handle >> 8;
    Mr* mr = idx < key_table_.size() ? key_table_[idx] : nullptr;
    if (mr == nullptr || mr->lkey.value() != handle || mr->pd != pd || !mr->valid.load(std::memory_order_acquire))
      return nullptr;
    return mr;
  });
}

// ---- completion channels and CQs ------------------------------------------------------------

CompChannel* Rnic::create_comp_channel(int* err) {
  return control([&]() -> CompChannel* {
    auto ch = std::make_unique<CompChannel>();
    if (!ch->valid()) {
      set_err(err, errno != 0 ? errno : EMFILE);
      return nullptr;
    }
    channels_.push_back(std::move(ch));
    return channels_.back().get();
  });
}

int Rnic::destroy_comp_channel(CompChannel* ch) {
  return control([&]() -> int {
    if (ch == nullptr || !owns(channels_, ch)) return EINVAL;
    if (ch->users.load() != 0) return EBUSY;  // ibv_destroy_comp_channel(3)
    erase_owned(channels_, ch);
    return 0;
  });
}

Cq* Rnic::create_cq(int cqe, void* context, CompChannel* ch, int comp_vector, int* err,
                     const RingAllocator* alloc) {
  // ibv_create_cq(3): EINVAL for cqe outside 1..max_cqe or a comp_vector
  // beyond num_comp_vectors (1).
  if (cqe < 1 || static_cast<uint32_t>(cqe) > kMaxCqe || comp_vector != 0) {
    set_err(err, EINVAL);
    return nullptr;
  }
  RingBlock mem;
  if (RingBlock::allocate(Cq::bytes(static_cast<uint32_t>(cqe)), alloc, RingUse::Cq, &mem) != 0) {
    set_err(err, ENOMEM);
    return nullptr;
  }
  return control([&]() -> Cq* {
    if (ch != nullptr && !owns(channels_, ch)) {
      set_err(err, EINVAL);
      return nullptr;
    }
    if (cqs_.size() >= kMaxCq) {
      set_err(err, ENOMEM);
      return nullptr;
    }
    cqs_.push_back(std::make_unique<Cq>(*this, static_cast<uint32_t>(cqe), context, ch, std::move(mem)));
    if (ch != nullptr) {
      ch->attach();
      ch->users.fetch_add(1);
    }
    return cqs_.back().get();
  });
}

int Rnic::destroy_cq(Cq* cq) {
  std::unique_ptr<Cq> gone;  // destroyed here, after the loop let go of it
  return control([&]() -> int {
    if (cq == nullptr || !owns(cqs_, cq)) return EINVAL;
    if (cq->users.load() != 0) return EBUSY;  // ibv_destroy_cq(3): a QP or SRQ uses it
    if (CompChannel* ch = cq->channel()) {
      ch->detach(cq);
      ch->users.fetch_sub(1);
    }
    async_.remove_if([cq](const AsyncEvent& e) { return e.cq == cq; });
    gone = take_owned(cqs_, cq);
    return 0;
  });
}

// ---- SRQ -------------------------------------------------------------------------------------

Srq* Rnic::create_srq(Pd* pd, const ibv_srq_init_attr& init, int* err, const RingAllocator* alloc,
                      const XrcSrq* xrc) {
  const ibv_srq_attr& a = init.attr;
  if (a.max_wr == 0 || a.max_wr > kMaxSrqWr || a.max_sge > kMaxSrqSge || a.srq_limit > a.max_wr) {
    set_err(err, EINVAL);
    return nullptr;
  }
  RingBlock mem;
  if (RingBlock::allocate(RecvQueue::bytes(a.max_wr, a.max_sge), alloc, RingUse::Srq, &mem) != 0) {
    set_err(err, ENOMEM);
    return nullptr;
  }
  return control([&]() -> Srq* {
    if (pd == nullptr || !owns(pds_, pd) ||
        (xrc != nullptr && (xrc->xrcd == nullptr || !owns(xrcds_, xrc->xrcd) || xrc->cq == nullptr ||
                            !owns(cqs_, xrc->cq)))) {
      set_err(err, EINVAL);
      return nullptr;
    }
    // A number no live SRQ has, searched from where the last one was
    // found: a number is not given again soon after its SRQ went, so that
    // a late XRC request for it finds nothing rather than its heir.
    uint32_t srqn = 0;
    for (uint32_t i = 0; i < kMaxSrq && srqn == 0; ++i) {
      const uint32_t cand = 1 + (next_srqn_ - 1 + i) % kMaxSrq;
      if (srq_table_[cand] == nullptr) srqn = cand;
    }
    if (srqn == 0) {
      set_err(err, ENOMEM);
      return nullptr;
    }
    next_srqn_ = srqn % kMaxSrq + 1;
    Xrcd* xrcd = xrc != nullptr ? xrc->xrcd : nullptr;
    Cq* cq = xrc != nullptr ? xrc->cq : nullptr;
    srqs_.push_back(std::make_unique<Srq>(*this, pd, a, init.srq_context, std::move(mem), srqn, xrcd, cq));
    pd->users.fetch_add(1);
    if (xrcd != nullptr) xrcd->users.fetch_add(1);
    if (cq != nullptr) cq->users.fetch_add(1);
    srq_table_[srqn] = srqs_.back().get();
    return srqs_.back().get();
  });
}

int Rnic::destroy_srq(Srq* srq) {
  std::unique_ptr<Srq> gone;  // destroyed here, after the loop let go of it
  return control([&]() -> int {
    if (srq == nullptr || !owns(srqs_, srq)) return EINVAL;
    if (srq->users.load() != 0) return EBUSY;
    srq->pd()->users.fetch_sub(1);
    if (srq->xrcd() != nullptr) {
      srq->xrcd()->users.fetch_sub(1);
      // The domain's receive QPs let go of it (a message that named it).
      for (auto& qp : qps_)
        if (qp->xrcd() == srq->xrcd()) responder_forget_srq(*qp, srq);
    }
    if (srq->cq() != nullptr) srq->cq()->users.fetch_sub(1);
    srq_table_[srq->number()] = nullptr;
    async_.remove_if([srq](const AsyncEvent& e) { return e.srq == srq; });
    gone = take_owned(srqs_, srq);
    return 0;
  });
}

// ---- XRC domain --------------------------------------------------------------------------------

Xrcd* Rnic::open_xrcd(uint64_t inode, bool create, bool exclusive, int* err) {
  return control([&]() -> Xrcd* {
    Xrcd* found = nullptr;
    if (inode != 0)
      for (auto& x : xrcds_)
        if (x->inode() == inode) found = x.get();
    if (found != nullptr ? exclusive : !create) {
      set_err(err, EINVAL);
      return nullptr;
    }
    if (found == nullptr) {
      if (xrcds_.size() >= kMaxXrcd) {
        set_err(err, ENOMEM);
        return nullptr;
      }
      xrcds_.push_back(std::make_unique<Xrcd>(next_xrcd_++, inode));
      found = xrcds_.back().get();
    }
    ++found->opens;
    return found;
  });
}

int Rnic::close_xrcd(Xrcd* xrcd) {
  return control([&]() -> int {
    if (xrcd == nullptr || !owns(xrcds_, xrcd)) return EINVAL;
    if (xrcd->opens == 1 && xrcd->users.load() != 0) return EBUSY;
    if (--xrcd->opens == 0) erase_owned(xrcds_, xrcd);
    return 0;
  });
}

Qp* Rnic::open_xrc_qp(Xrcd* xrcd, Qpn qpn, int* err) {
  return control([&]() -> Qp* {
    Qp* qp = qpn.value() < qp_table_.size() ? qp_table_[qpn.value()] : nullptr;
    if (xrcd == nullptr || !owns(xrcds_, xrcd) || qp == nullptr || qp->type() != IBV_QPT_XRC_RECV ||
        qp->xrcd() != xrcd) {
      set_err(err, EINVAL);
      return nullptr;
    }
    ++qp->handles;
    return qp;
  });
}

// ---- QP ----------------------------------------------------------------------------------------

int Rnic::qp_rings(const ibv_qp_init_attr& init, const RingAllocator* alloc, Qp::Rings* rings) {
  // The caps bound the memory: checked here, before it is allocated (the
  // rest of the request is checked in the loop, make_qp).
  const ibv_qp_cap& asked = init.cap;
  if (asked.max_send_wr > kMaxQpWr || asked.max_send_sge > kMaxSge || asked.max_inline_data > kMaxInlineData ||
      (init.srq == nullptr && (asked.max_recv_wr > kMaxQpWr || asked.max_recv_sge > kMaxSge)))
    return EINVAL;
  const ibv_qp_cap c = Qp::effective_caps(init);
  if (RingBlock::allocate(SendQueue::bytes(c.max_send_wr, c.max_send_sge, c.max_inline_data), alloc,
                          RingUse::QpSend, &rings->send) != 0 ||
      RingBlock::allocate(RecvQueue::bytes(c.max_recv_wr, c.max_recv_sge), alloc, RingUse::QpRecv, &rings->recv) != 0)
    return ENOMEM;
  return 0;
}

bool Rnic::qp_init_ok(Pd* pd, const ibv_qp_init_attr& init, Xrcd* xrcd) const {
  UROCE_ASSERT_ENGINE(engine_);
  auto* scq = reinterpret_cast<Cq*>(init.send_cq);
  auto* rcq = reinterpret_cast<Cq*>(init.recv_cq);
  auto* srq = reinterpret_cast<Srq*>(init.srq);
  const ibv_qp_cap& c = init.cap;
  // An XRC receive QP has its domain and nothing else (annex A14).
  if (init.qp_type == IBV_QPT_XRC_RECV) return xrcd != nullptr && owns(xrcds_, xrcd);
  // ibv_create_qp(3): EINVAL for a bad PD/CQ/SRQ or a capability above
  // the device's; receive capabilities do not apply with an SRQ, nor to an
  // XRC send QP, which has no receive side (its receive CQ and SRQ are not
  // read).
  const bool receives = init.qp_type != IBV_QPT_XRC_SEND;
  if (pd == nullptr || !owns(pds_, pd) || scq == nullptr || !owns(cqs_, scq) || c.max_send_wr > kMaxQpWr ||
      c.max_send_sge > kMaxSge || c.max_inline_data > kMaxInlineData)
    return false;
  if (!receives) return true;
  return rcq != nullptr && owns(cqs_, rcq) && (srq == nullptr || (owns(srqs_, srq) && srq->xrcd() == nullptr)) &&
         (srq != nullptr || (c.max_recv_wr <= kMaxQpWr && c.max_recv_sge <= kMaxSge));
}

Qp* Rnic::make_qp(Pd* pd, const ibv_qp_init_attr& init, uint32_t qpn, Qp::Rings& rings, int* err, Xrcd* xrcd) {
  if (!qp_init_ok(pd, init, xrcd)) {
    set_err(err, EINVAL);
    return nullptr;
  }
  if (qp_table_[qpn] != nullptr) {
    set_err(err, EBUSY);
    return nullptr;
  }
  auto qp = std::make_unique<Qp>(*this, pd, Qpn(qpn), init, std::move(rings), xrcd);
  Qp* p = qp.get();
  qp_table_[qpn] = p;
  qps_.push_back(std::move(qp));
  // What it uses is held (EBUSY on their destroy) until it goes.
  if (p->pd() != nullptr) p->pd()->users.fetch_add(1);
  if (p->send_cq() != nullptr) p->send_cq()->users.fetch_add(1);
  if (p->recv_cq() != nullptr) p->recv_cq()->users.fetch_add(1);
  if (p->srq() != nullptr) p->srq()->users.fetch_add(1);
  if (p->xrcd() != nullptr) p->xrcd()->users.fetch_add(1);
  return p;
}

Qp* Rnic::create_qp(Pd* pd, const ibv_qp_init_attr& init, int* err, const RingAllocator* alloc, Xrcd* xrcd) {
  Qp::Rings rings;
  if (const int rc = qp_rings(init, alloc, &rings); rc != 0) {
    set_err(err, rc);
    return nullptr;
  }
  const bool known_type = init.qp_type == IBV_QPT_RC || init.qp_type == IBV_QPT_UC || init.qp_type == IBV_QPT_UD ||
                          init.qp_type == IBV_QPT_XRC_SEND || init.qp_type == IBV_QPT_XRC_RECV;
  if (shared() && known_type) {
    // A shared device's QPNs are the daemon's (SharedDevice): asked here,
    // in the caller's thread, given back if the QP is not made.
    uint32_t qpn = 0;
    if (const int rc = shared_.alloc_qpn(&qpn); rc != 0) {
      set_err(err, rc);
      return nullptr;
    }
    Qp* qp = control([&]() -> Qp* {
      if (qpn < 2 || qpn >= qp_table_.size()) {
        set_err(err, EIO);  // a daemon that cannot be right
        return nullptr;
      }
      return make_qp(pd, init, qpn, rings, err, xrcd);
    });
    if (qp == nullptr) shared_.free_qpn(qpn);
    return qp;
  }
  return control([&]() -> Qp* {
    if (init.qp_type != IBV_QPT_RC && init.qp_type != IBV_QPT_UC && init.qp_type != IBV_QPT_UD &&
        init.qp_type != IBV_QPT_XRC_SEND && init.qp_type != IBV_QPT_XRC_RECV) {
      // A type verbs knows and this device does not do (raw packet, driver
      // QPs): EOPNOTSUPP, as rxe answers; anything else: EINVAL.
      const bool known = init.qp_type == IBV_QPT_RAW_PACKET || init.qp_type == IBV_QPT_DRIVER;
      set_err(err, known ? EOPNOTSUPP : EINVAL);
      return nullptr;
    }
    // QPNs 2 .. limit-1, never a live one, from a random place in the range:
    // a QPN tells an observer nothing about its neighbours, and a late packet
    // for a destroyed QP is unlikely to hit its heir.
    const uint32_t limit = std::min<uint32_t>(kMaxQp, engine_.config().max_qpn);
    if (limit <= 2) {
      set_err(err, ENOMEM);
      return nullptr;
    }
    uint32_t qpn = 0;
    const uint32_t span = limit - 2;
    const auto start = static_cast<uint32_t>(rng_() % span);
    for (uint32_t i = 0; i < span; ++i) {
      const uint32_t cand = 2 + (start + i) % span;
      if (qp_table_[cand] == nullptr) {
        qpn = cand;
        break;
      }
    }
    if (qpn == 0) {
      set_err(err, ENOMEM);
      return nullptr;
    }
    return make_qp(pd, init, qpn, rings, err, xrcd);
  });
}

Qp* Rnic::create_gsi_qp(Pd* pd, const ibv_qp_init_attr& init, int* err) {
  ibv_qp_init_attr ud = init;
  ud.qp_type = IBV_QPT_UD;
  Qp::Rings rings;
  if (const int rc = qp_rings(ud, nullptr, &rings); rc != 0) {
    set_err(err, rc);
    return nullptr;
  }
  return control([&]() -> Qp* {
    if (qp_table_[kQp1.value()] != nullptr) {
      set_err(err, EBUSY);
      return nullptr;
    }
    return make_qp(pd, ud, kQp1.value(), rings, err);
  });
}

int Rnic::destroy_qp(Qp* qp, void* other_handle) {
  // Not from the engine's loop: a doorbell of the QP may be queued there,
  // and this waits for it to have run.
  bool last = true;
  int rc = control([&]() -> int {
    if (qp == nullptr || !owns(qps_, qp)) return EINVAL;
    if (qp->handles > 1) {  // an XRC receive QP others opened (open_xrc_qp): one handle less
      --qp->handles;
      if (other_handle != nullptr) qp->context = other_handle;
      last = false;
      return 0;
    }
    qp_table_[qp->qpn().value()] = nullptr;
    {
      // As uverbs does for a QP destroyed while attached; a group it was
      // the last member of is left (SharedDevice::mcast).
      std::vector<wire::Ipv6Addr> groups;
      if (shared_.mcast) groups = mcast_.groups_of(qp);
      mcast_.detach_all(qp);
      for (const wire::Ipv6Addr& g : groups) mcast_changed(g, true);
    }
    if (qp->claim) {
      if (shared_.unclaim) shared_.unclaim(qp->qpn().value());
      qp->claim.reset();
    }
    // Type 2 windows bound through it are invalidated: nothing reaches
    // them any more (and a QP later made at the same address is not it).
    for (auto& mw : mws_)
      if (mw != nullptr && mw->qp == qp) unbind(*mw);
    sender_reset(*qp, qp->engine());    // the requester's and the completer's timers
    responder_stop(*qp, qp->engine());  // the responder's, and a READ response still streaming
    return 0;
  });
  if (rc != 0 || !last) return rc;
  // A doorbell queued after the call above still points at the QP.
  while (qp->doorbell_pending.load(std::memory_order_acquire)) engine_.run_sync([] {});
  std::unique_ptr<Qp> gone;  // destroyed here, after the loop let go of it
  return control([&]() -> int {
    if (qp->pd() != nullptr) qp->pd()->users.fetch_sub(1);
    if (qp->send_cq() != nullptr) qp->send_cq()->users.fetch_sub(1);
    if (qp->recv_cq() != nullptr) qp->recv_cq()->users.fetch_sub(1);
    if (qp->srq() != nullptr) qp->srq()->users.fetch_sub(1);
    if (qp->xrcd() != nullptr) qp->xrcd()->users.fetch_sub(1);
    async_.remove_if([qp](const AsyncEvent& e) { return e.qp == qp; });
    gone = take_owned(qps_, qp);
    return 0;
  });
  if (rc == 0 && shared() && gone && !gone->is_gsi()) shared_.free_qpn(gone->qpn().value());
  return rc;
}

// ---- AH ----------------------------------------------------------------------------------------

Ah* Rnic::create_ah(Pd* pd, const ibv_ah_attr& attr, int* err) {
  return control([&]() -> Ah* {
    AhAttr path;
    if (pd == nullptr || !owns(pds_, pd) || resolve_path(attr, &path) != 0) {
      set_err(err, EINVAL);
      return nullptr;
    }
    if (ahs_.size() >= kMaxAh) {
      set_err(err, ENOMEM);
      return nullptr;
    }
    // Its next hop starts resolving now (Linux resolves it inside
    // create_ah), not at the first send, which would wait for it.
    if (!next_hop_known(path.dgid)) engine_.neighbours().resolve(transport::IpAddr::v6(path.dgid), engine_.now());
    auto ah = std::make_unique<Ah>();
    ah->pd = pd;
    ah->path = path;
    ahs_.push_back(std::move(ah));
    pd->users.fetch_add(1);
    return ahs_.back().get();
  });
}

int Rnic::destroy_ah(Ah* ah) {
  return control([&]() -> int {
    if (ah == nullptr || !owns(ahs_, ah)) return EINVAL;
    ah->pd->users.fetch_sub(1);
    erase_owned(ahs_, ah);
    return 0;
  });
}

// ---- multicast ---------------------------------------------------------------------------------

int Rnic::attach_mcast(Qp* qp, const wire::Ipv6Addr& mgid) {
  return control([&]() -> int {
    // Linux's ib_attach_mcast: a UD QP and a multicast GID, else EINVAL.
    if (qp == nullptr || !owns(qps_, qp) || qp->type() != IBV_QPT_UD || qp->is_gsi()) return EINVAL;
    const bool had = mcast_.find(mgid) != nullptr;
    const int rc = mcast_.attach(mgid, qp);
    if (rc == 0) mcast_changed(mgid, had);
    return rc;
  });
}

int Rnic::detach_mcast(Qp* qp, const wire::Ipv6Addr& mgid) {
  return control([&]() -> int {
    if (qp == nullptr || !owns(qps_, qp) || qp->type() != IBV_QPT_UD || qp->is_gsi() || !is_multicast_gid(mgid))
      return EINVAL;
    const int rc = mcast_.detach(mgid, qp);
    if (rc == 0) mcast_changed(mgid, true);
    return rc;
  });
}

void Rnic::mcast_changed(const wire::Ipv6Addr& mgid, bool had_group) noexcept {
  UROCE_ASSERT_ENGINE(engine_);
  if (!shared_.mcast) return;
  const bool has = mcast_.find(mgid) != nullptr;
  if (has != had_group) shared_.mcast(mgid, has);
}

void Rnic::update_claim(Qp& qp) noexcept {
  UROCE_ASSERT_ENGINE(engine_);
  if (!shared_.claim) return;
  const ibv_qp_state s = qp.state();
  const bool holds = qp.connected() && s != IBV_QPS_RESET && s != IBV_QPS_INIT;
  if (holds) {
    const Qp::Claim want{qp.attrs().path.dgid, qp.attrs().dest_qp_num & 0xFFFFFF};
    if (qp.claim != want) {
      shared_.claim(qp.qpn().value(), want.gid, want.qpn);
      qp.claim = want;
    }
  } else if (qp.claim) {
    shared_.unclaim(qp.qpn().value());
    qp.claim.reset();
  }
}

void Rnic::device_fatal() {
  bool first = false;
  engine_.run_sync([&] {
    if (dead_) return;
    dead_ = first = true;
    for (const auto& q : qps_)
      if (!q->is_gsi() && q->state() != IBV_QPS_RESET && q->state() != IBV_QPS_ERR) q->to_error(false);
  });
  if (first) {
    AsyncEvent ev;
    ev.type = IBV_EVENT_DEVICE_FATAL;
    ev.port = kPortNum;
    raise(ev);
  }
}

std::vector<Rnic::QpSnapshot> Rnic::qp_snapshots() {
  std::vector<QpSnapshot> out;
  engine_.run_sync([&] {
    out.reserve(qps_.size());
    for (const auto& q : qps_) {
      QpSnapshot s;
      s.qpn = q->qpn().value();
      s.type = q->type();
      s.state = q->state();
      s.sq_psn = q->req.next_psn.value();
      s.rq_psn = q->resp.epsn.value();
      s.dest_qp_num = q->attrs().dest_qp_num;
      s.dgid = q->attrs().path.dgid;
      s.send_posted = q->sq.tail() - q->sq.head();
      if (q->srq() == nullptr) s.recv_posted = q->rq.size();
      const QpCc& c = q->cc;
      s.sport = q->attrs().sport;
      s.rate_bps = cc_rate_bps(c);
      s.dcqcn_target_bps = c.rp.active() ? c.rp.target_bps() : 0;
      s.alpha = c.rp.alpha();
      s.srtt_ns = q->comp.srtt_ns;
      s.last_rtt_ns = c.delay.last_rtt_ns();
      s.cnps_sent = c.cnps_sent;
      s.cnps_rcvd = c.cnps_rcvd;
      s.path_changes = c.path_changes;
      s.tally = q->tally;
      // Selective repeat is per NAK: in use once the peer said it keeps
      // (an ACK or a NAK with the bit), answered a gap selectively or this
      // end did; offered while none of that happened.
      const bool offered = q->reliable() && selective_repeat_;
      const bool in_use = q->req.peer_keeps || q->tally.sr_naks_rcvd != 0 || q->tally.sr_naks_sent != 0;
      s.recovery = !offered  ? "go-back-N"
                   : !in_use ? "selective (offered)"
                   : requester_sprays(*q) ? "selective, sprayed"
                                          : "selective";
      out.push_back(s);
    }
  });
  return out;
}

std::vector<transport::TableCell> Rnic::qp_row(const QpSnapshot& q) {
  using transport::TableCell;
  const char* type = q.type == IBV_QPT_RC         ? "RC"
                     : q.type == IBV_QPT_UC       ? "UC"
                     : q.type == IBV_QPT_UD       ? "UD"
                     : q.type == IBV_QPT_XRC_SEND ? "XRC_SEND"
                     : q.type == IBV_QPT_XRC_RECV ? "XRC_RECV"
                                                  : "?";
  char gid[INET6_ADDRSTRLEN] = "";
  if (is_ipv4_mapped(q.dgid)) {
    inet_ntop(AF_INET, q.dgid.data() + 12, gid, sizeof gid);
  } else {
    inet_ntop(AF_INET6, q.dgid.data(), gid, sizeof gid);
  }
  auto num = [](std::string_view name, uint64_t v) { return TableCell{name, v, {}, false}; };
  auto text = [](std::string_view name, std::string v) { return TableCell{name, 0, std::move(v), true}; };
  return {
      num("qpn", q.qpn),
      text("type", type),
      text("state", qp_state_name(q.state)),
      num("sq_psn", q.sq_psn),
      num("rq_psn", q.rq_psn),
      num("dest_qpn", q.dest_qp_num),
      text("dest_gid", gid),
      num("send_posted", q.send_posted),
      num("recv_posted", q.recv_posted),
      num("udp_sport", q.sport),
      num("rate_bps", q.rate_bps),
      num("dcqcn_target_bps", q.dcqcn_target_bps),
      num("alpha_1024", q.alpha),
      num("srtt_ns", q.srtt_ns),
      num("last_rtt_ns", q.last_rtt_ns),
      num("cnps_sent", q.cnps_sent),
      num("cnps_rcvd", q.cnps_rcvd),
      num("path_changes", q.path_changes),
      text("recovery", q.recovery),
      num("retrans_pkts", q.tally.retrans_pkts),
      num("sr_resent_pkts", q.tally.sr_resent_pkts),
      num("ack_timeouts", q.tally.ack_timeouts),
      num("sr_naks_rcvd", q.tally.sr_naks_rcvd),
      num("sr_naks_sent", q.tally.sr_naks_sent),
  };
}

// ---- [engine] lookups (MR and window keys: mr.cpp) -----------------------------------------

Qp* Rnic::qp_by_num(Qpn qpn) noexcept {
  assert(on_an_engine());
  return qpn.value() < qp_table_.size() ? qp_table_[qpn.value()] : nullptr;
}

// ---- async events ---------------------------------------------------------------------------------

void Rnic::raise(const AsyncEvent& event) noexcept {
  AsyncEvent ev = event;
  if (ev.qp != nullptr) {
    ev.context = ev.qp->context;
  } else if (ev.cq != nullptr) {
    ev.context = ev.cq->context();
  } else if (ev.srq != nullptr) {
    ev.context = ev.srq->context();
  }
  if (async_sink_ != nullptr) {
    async_sink_(async_sink_arg_, ev);
    return;
  }
  async_.push(ev);
}

void Rnic::on_link_poll(Timer& t, uint64_t now_ns) {
  Rnic& rnic = t.owner_as<Rnic>();
  UROCE_ASSERT_ENGINE(rnic.engine_);
  const bool up = rnic.engine_.port().link_up();
  if (up != rnic.link_up_) {
    // The port's state follows the link (query_port): ACTIVE when it comes
    // up, DOWN when it goes; the application hears of either once.
    rnic.link_up_ = up;
    AsyncEvent ev;
    ev.type = up ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR;
    ev.port = kPortNum;
    rnic.ctr_.inc(RnicCtr::port_events);
    rnic.raise(ev);
  }
  rnic.engine_.timers().arm(t, now_ns + kLinkPollNs);
}

int Rnic::get_async_event(AsyncEvent* ev) { return async_.take(ev); }

// ---- doorbells ----------------------------------------------------------------------------------------

void Rnic::ring_sq(Qp& qp) noexcept {
  // One doorbell per QP in the engine's queue at a time: the poster that
  // sets the flag queues it; the engine clears it before it runs, so a
  // post after that queues a new one and nothing is missed.
  if (qp.doorbell_pending.exchange(true, std::memory_order_acq_rel)) return;
  const transport::Engine::Doorbell d{[](transport::Engine& engine, void* ctx) {
                                        auto* q = static_cast<Qp*>(ctx);
                                        q->doorbell_pending.store(false, std::memory_order_release);
                                        q->doorbell(engine);
                                      },
                                      &qp};
  transport::Engine& engine = qp.engine();
  while (!engine.ring(d)) {
    if (engine.on_engine_thread()) {  // the queue is full and we are the loop: run it now
      qp.doorbell_pending.store(false, std::memory_order_release);
      qp.doorbell(engine);
      return;
    }
    if (&engine != &engine_ || !engine.progress().try_progress()) std::this_thread::yield();
  }
}

}  // namespace uroce::rnic
