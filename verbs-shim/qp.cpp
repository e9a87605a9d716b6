// Queue pairs: every QP has the ibv_qp_ex layout; ibv_create_qp_ex with
// send_ops_flags turns on the ibv_wr_* builders, which collect a batch
// between wr_start and wr_complete and post it as one chain.
#include <cerrno>
#include <cstring>
#include <new>

#include "verbs-shim/shim.hpp"

namespace uroce::shim {
namespace {

// The RNIC reads the CQ and SRQ of an ibv_qp_init_attr as its own objects
// (opaque handles), so the application's are swapped for them.
ibv_cq* rnic_handle(ibv_cq* cq) noexcept {
  return cq == nullptr ? nullptr : reinterpret_cast<ibv_cq*>(to_cq(cq)->impl);
}
ibv_srq* rnic_handle(ibv_srq* srq) noexcept {
  return srq == nullptr ? nullptr : reinterpret_cast<ibv_srq*>(to_srq(srq)->impl);
}

// The send opcodes ibv_wr_* can build here: every opcode the RNIC's
// table carries (transport/rnic/wr.hpp).
constexpr uint64_t kSupportedSendOps = rnic::supported_qp_ex_ops();

// The RNIC takes the chain; the engine is woken once.
int post_send_chain(Qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) noexcept {
  const ibv_send_wr* bad_c = nullptr;
  const int rc = qp->impl->post_send(wr, &bad_c);
  if (rc != 0 && bad != nullptr) *bad = const_cast<ibv_send_wr*>(bad_c);
  kick_post(qp->ctx->dev);
  return rc;
}

// ---- the ibv_wr_* builders --------------------------------------------------------------
// Each opcode builder starts a new WR from qpx->wr_id / wr_flags; the
// setters complete the last one.  An error (a builder on a batch that was
// not started, a setter with no WR) is remembered and wr_complete reports it.
WrBatch::Entry* begin_wr(ibv_qp_ex* qpx, ibv_wr_opcode op) noexcept {
  WrBatch& b = *to_qp(qpx)->batch;
  if (!b.open) {
    b.error = b.error != 0 ? b.error : EINVAL;
    return nullptr;
  }
  WrBatch::Entry e;
  e.wr.wr_id = qpx->wr_id;
  e.wr.send_flags = qpx->wr_flags;
  e.wr.opcode = op;
  e.sge_first = b.sges.size();
  e.inline_first = b.inline_bytes.size();
  b.wrs.push_back(e);
  return &b.wrs.back();
}

WrBatch::Entry* last_wr(ibv_qp_ex* qpx) noexcept {
  WrBatch& b = *to_qp(qpx)->batch;
  if (!b.open || b.wrs.empty()) {
    b.error = b.error != 0 ? b.error : EINVAL;
    return nullptr;
  }
  return &b.wrs.back();
}

void wr_rdma(ibv_qp_ex* q, ibv_wr_opcode op, uint32_t rkey, uint64_t addr, __be32 imm) noexcept {
  if (WrBatch::Entry* e = begin_wr(q, op)) {
    e->wr.wr.rdma.rkey = rkey;
    e->wr.wr.rdma.remote_addr = addr;
    e->wr.imm_data = imm;
  }
}

void wr_atomic_cmp_swp(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) noexcept {
  if (WrBatch::Entry* e = begin_wr(q, IBV_WR_ATOMIC_CMP_AND_SWP)) {
    e->wr.wr.atomic = {addr, compare, swap, rkey};
  }
}
void wr_atomic_fetch_add(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t add) noexcept {
  if (WrBatch::Entry* e = begin_wr(q, IBV_WR_ATOMIC_FETCH_AND_ADD)) {
    e->wr.wr.atomic = {addr, add, 0, rkey};
  }
}
void wr_rdma_read(ibv_qp_ex* q, uint32_t rkey, uint64_t addr) noexcept { wr_rdma(q, IBV_WR_RDMA_READ, rkey, addr, 0); }
void wr_rdma_write(ibv_qp_ex* q, uint32_t rkey, uint64_t addr) noexcept {
  wr_rdma(q, IBV_WR_RDMA_WRITE, rkey, addr, 0);
}
void wr_rdma_write_imm(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, __be32 imm) noexcept {
  wr_rdma(q, IBV_WR_RDMA_WRITE_WITH_IMM, rkey, addr, imm);
}
void wr_send(ibv_qp_ex* q) noexcept { begin_wr(q, IBV_WR_SEND); }
// ibv_wr_bind_mw(3): type 2 windows with the caller's key; type 1 through
// ibv_bind_mw only (as rdma-core's providers).
void wr_bind_mw(ibv_qp_ex* q, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) noexcept {
  WrBatch::Entry* e = begin_wr(q, IBV_WR_BIND_MW);
  if (e == nullptr) return;
  if (mw == nullptr || info == nullptr || mw->type != IBV_MW_TYPE_2) {
    WrBatch& b = *to_qp(q)->batch;
    b.error = b.error != 0 ? b.error : EINVAL;
    return;
  }
  e->wr.bind_mw.mw = mw;
  e->wr.bind_mw.rkey = rkey;
  e->wr.bind_mw.bind_info = *info;
}
void wr_local_inv(ibv_qp_ex* q, uint32_t rkey) noexcept {
  if (WrBatch::Entry* e = begin_wr(q, IBV_WR_LOCAL_INV)) e->wr.invalidate_rkey = rkey;
}
void wr_send_imm(ibv_qp_ex* q, __be32 imm) noexcept {
  if (WrBatch::Entry* e = begin_wr(q, IBV_WR_SEND_WITH_IMM)) e->wr.imm_data = imm;
}
void wr_send_inv(ibv_qp_ex* q, uint32_t rkey) noexcept {
  if (WrBatch::Entry* e = begin_wr(q, IBV_WR_SEND_WITH_INV)) e->wr.invalidate_rkey = rkey;
}
void wr_set_ud_addr(ibv_qp_ex* q, ibv_ah* ah, uint32_t remote_qpn, uint32_t remote_qkey) noexcept {
  if (WrBatch::Entry* e = last_wr(q)) e->wr.wr.ud = {ah, remote_qpn, remote_qkey};
}
void wr_set_xrc_srqn(ibv_qp_ex* q, uint32_t remote_srqn) noexcept {
  if (WrBatch::Entry* e = last_wr(q)) e->wr.qp_type.xrc.remote_srqn = remote_srqn;
}
void wr_set_sge_list(ibv_qp_ex* q, size_t n, const ibv_sge* list) noexcept {
  WrBatch::Entry* e = last_wr(q);
  if (e == nullptr) return;
  WrBatch& b = *to_qp(q)->batch;
  e->sge_first = b.sges.size();
  e->is_inline = false;
  b.sges.insert(b.sges.end(), list, list + n);
  e->wr.num_sge = static_cast<int>(n);
}
void wr_set_sge(ibv_qp_ex* q, uint32_t lkey, uint64_t addr, uint32_t length) noexcept {
  const ibv_sge sge{addr, length, lkey};
  wr_set_sge_list(q, 1, &sge);
}
// Inline data is copied at once (the caller may reuse its buffer).
void wr_set_inline_data_list(ibv_qp_ex* q, size_t n, const ibv_data_buf* bufs) noexcept {
  WrBatch::Entry* e = last_wr(q);
  if (e == nullptr) return;
  WrBatch& b = *to_qp(q)->batch;
  e->inline_first = b.inline_bytes.size();
  e->inline_len = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto* p = static_cast<const uint8_t*>(bufs[i].addr);
    b.inline_bytes.insert(b.inline_bytes.end(), p, p + bufs[i].length);
    e->inline_len += bufs[i].length;
  }
  e->is_inline = true;
  e->wr.send_flags |= IBV_SEND_INLINE;
}
void wr_set_inline_data(ibv_qp_ex* q, void* addr, size_t length) noexcept {
  const ibv_data_buf buf{addr, length};
  wr_set_inline_data_list(q, 1, &buf);
}

// ibv_wr_atomic_write(3): the 8 bytes are taken now, as inline data (the
// RNIC keeps them in the WQE).
void wr_atomic_write(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, const void* value) noexcept {
  wr_rdma(q, IBV_WR_ATOMIC_WRITE, rkey, addr, 0);  // a batch not started: noted once, the setter below does nothing more
  const ibv_data_buf buf{const_cast<void*>(value), 8};
  wr_set_inline_data_list(q, 1, &buf);
}

// ibv_wr_flush(3) (rdma-core 45): the RNIC's FLUSH form (rnic::Qp::post_send):
// the range in wr.atomic's address, key and compare_add, the placement
// type and selectivity level in its swap.  post_send checks them.
void wr_flush(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, size_t len, uint8_t type, uint8_t level) noexcept {
  if (WrBatch::Entry* e = begin_wr(q, rnic::verbs_newer::kWrFlush)) {
    e->wr.wr.atomic = {addr, len, uint64_t{type} | uint64_t{level} << 8, rkey};
  }
}

void wr_start(ibv_qp_ex* q) noexcept {
  WrBatch& b = *to_qp(q)->batch;
  b.wrs.clear();
  b.sges.clear();
  b.inline_bytes.clear();
  b.error = 0;
  b.open = true;
}

void wr_abort(ibv_qp_ex* q) noexcept {
  WrBatch& b = *to_qp(q)->batch;
  b.open = false;
  b.wrs.clear();
}

// Links the batch into an ibv_send_wr chain (inline WRs gather from the
// copied bytes) and posts it.
int wr_complete(ibv_qp_ex* q) noexcept {
  Qp* qp = to_qp(q);
  WrBatch& b = *qp->batch;
  if (!b.open) return EINVAL;
  b.open = false;
  if (b.error != 0) return b.error;
  if (b.wrs.empty()) return 0;
  b.chain.resize(b.wrs.size());
  b.inline_sges.resize(b.wrs.size());
  for (size_t i = 0; i < b.wrs.size(); ++i) {
    WrBatch::Entry& e = b.wrs[i];
    ibv_send_wr& wr = b.chain[i];
    wr = e.wr;
    if (e.is_inline) {
      b.inline_sges[i] = {reinterpret_cast<uintptr_t>(b.inline_bytes.data() + e.inline_first),
                          static_cast<uint32_t>(e.inline_len), 0};
      wr.sg_list = &b.inline_sges[i];
      wr.num_sge = e.inline_len == 0 ? 0 : 1;
    } else {
      wr.sg_list = wr.num_sge == 0 ? nullptr : b.sges.data() + e.sge_first;
    }
    wr.next = i + 1 < b.wrs.size() ? &b.chain[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  return post_send_chain(qp, b.chain.data(), &bad);
}

void install_wr_ops(Qp* qp) noexcept {
  ibv_qp_ex& x = qp->ex;
  const uint64_t ops = qp->send_ops;
  if ((ops & IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP) != 0) x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  if ((ops & IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD) != 0) x.wr_atomic_fetch_add = wr_atomic_fetch_add;
  if ((ops & IBV_QP_EX_WITH_ATOMIC_WRITE) != 0) x.wr_atomic_write = wr_atomic_write;
  if ((ops & rnic::verbs_newer::kQpExWithFlush) != 0) qp->wr_flush = wr_flush;
  if ((ops & IBV_QP_EX_WITH_BIND_MW) != 0) x.wr_bind_mw = wr_bind_mw;
  if ((ops & IBV_QP_EX_WITH_LOCAL_INV) != 0) x.wr_local_inv = wr_local_inv;
  if ((ops & IBV_QP_EX_WITH_RDMA_READ) != 0) x.wr_rdma_read = wr_rdma_read;
  if ((ops & IBV_QP_EX_WITH_RDMA_WRITE) != 0) x.wr_rdma_write = wr_rdma_write;
  if ((ops & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM) != 0) x.wr_rdma_write_imm = wr_rdma_write_imm;
  if ((ops & IBV_QP_EX_WITH_SEND) != 0) x.wr_send = wr_send;
  if ((ops & IBV_QP_EX_WITH_SEND_WITH_IMM) != 0) x.wr_send_imm = wr_send_imm;
  if ((ops & IBV_QP_EX_WITH_SEND_WITH_INV) != 0) x.wr_send_inv = wr_send_inv;
  x.wr_set_ud_addr = wr_set_ud_addr;
  x.wr_set_xrc_srqn = wr_set_xrc_srqn;
  x.wr_set_inline_data = wr_set_inline_data;
  x.wr_set_inline_data_list = wr_set_inline_data_list;
  x.wr_set_sge = wr_set_sge;
  x.wr_set_sge_list = wr_set_sge_list;
  x.wr_start = wr_start;
  x.wr_complete = wr_complete;
  x.wr_abort = wr_abort;
}

// Creates the QP (both ibv_create_qp and ibv_create_qp_ex).
ibv_qp* make_qp(ibv_pd* ibpd, ibv_qp_init_attr* init, uint64_t send_ops) noexcept {
  if (ibpd == nullptr || init == nullptr) return fail(EINVAL, static_cast<ibv_qp*>(nullptr));
  // The objects it names, each one of this context's under its handle.
  ibv_context* ctx = ibpd->context;
  const bool named_ok = check_pd(ctx, ibpd) == 0 &&
                        (init->send_cq == nullptr || check_handle(ctx, Owned::Cq, init->send_cq) == 0) &&
                        (init->recv_cq == nullptr || check_handle(ctx, Owned::Cq, init->recv_cq) == 0) &&
                        (init->srq == nullptr || check_handle(ctx, Owned::Srq, init->srq) == 0);
  if (!named_ok) return fail(EINVAL, static_cast<ibv_qp*>(nullptr));
  auto* qp = new (std::nothrow) Qp{};
  if (qp == nullptr) return fail(ENOMEM, static_cast<ibv_qp*>(nullptr));
  if (send_ops != 0) {
    qp->batch = new (std::nothrow) WrBatch{};
    if (qp->batch == nullptr) {
      delete qp;
      return fail(ENOMEM, static_cast<ibv_qp*>(nullptr));
    }
  }
  ibv_qp_init_attr ours = *init;
  ours.send_cq = rnic_handle(init->send_cq);
  ours.recv_cq = rnic_handle(init->recv_cq);
  ours.srq = rnic_handle(init->srq);
  int err = 0;
  qp->impl = rnic_of(ibpd->context).create_qp(to_pd(ibpd)->impl, ours, &err, to_pd(ibpd)->ring_allocator());
  if (qp->impl == nullptr) {
    delete qp->batch;
    delete qp;
    return fail(err, static_cast<ibv_qp*>(nullptr));
  }
  qp->impl->context = qp;  // async events find us
  hold_domain(ibpd);
  qp->ctx = to_ctx(ibpd->context);
  qp->extended = send_ops != 0;
  qp->send_ops = send_ops;
  ibv_qp& q = qp->ex.qp_base;
  q.context = ibpd->context;
  q.qp_context = init->qp_context;
  q.pd = ibpd;
  q.send_cq = init->send_cq;
  q.recv_cq = init->recv_cq;
  q.srq = init->srq;
  q.handle = qp->impl->qpn().value();
  q.qp_num = qp->impl->qpn().value();
  q.state = IBV_QPS_RESET;
  q.qp_type = init->qp_type;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  if (qp->extended) install_wr_ops(qp);
  init->cap = qp->impl->cap();  // the man page: the actual capacities are written back
  own(ibpd->context, Owned::Qp, &q);
  return &q;
}

}  // namespace

// ---- context ops -------------------------------------------------------------------

// ibv_post_send(3).  IBV_WR_FLUSH has no fields in ibv_send_wr: only
// ibv_wr_flush posts it (as rdma-core's providers), so here the chain is
// refused from the first FLUSH on, with nothing of it posted.
int post_send_op(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad) noexcept {
  for (ibv_send_wr* w = wr; w != nullptr; w = w->next) {
    if (w->opcode == rnic::verbs_newer::kWrFlush) {
      if (bad != nullptr) *bad = w;
      return EINVAL;
    }
  }
  return post_send_chain(to_qp(ibqp), wr, bad);
}

int post_recv_op(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad) noexcept {
  const ibv_recv_wr* bad_c = nullptr;
  const int rc = to_qp(ibqp)->impl->post_recv(wr, &bad_c);
  if (rc != 0 && bad != nullptr) *bad = const_cast<ibv_recv_wr*>(bad_c);
  return rc;
}

ibv_qp* create_qp_ex_op(ibv_context* ctx, ibv_qp_init_attr_ex* attr) noexcept {
  if (attr == nullptr) return fail(EINVAL, static_cast<ibv_qp*>(nullptr));
  constexpr uint32_t kKnown = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                              IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  // RSS, TSO, memory windows, vendor extensions: not offered.
  if ((attr->comp_mask & ~kKnown) != 0) return fail(EOPNOTSUPP, static_cast<ibv_qp*>(nullptr));
  // An XRC receive QP has a domain and nothing else (xrc.cpp).
  if (attr->qp_type == IBV_QPT_XRC_RECV) {
    if ((attr->comp_mask & ~(IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_PD)) != 0)
      return fail(EINVAL, static_cast<ibv_qp*>(nullptr));
    return create_xrc_recv_qp(ctx, attr);
  }
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_PD) == 0 || attr->pd == nullptr || attr->pd->context != ctx) {
    return fail(EINVAL, static_cast<ibv_qp*>(nullptr));
  }
  // Of the creation flags only BLOCK_SELF_MCAST_LB (the QP does not get its
  // own multicast sends back); scatter-FCS, CVLAN stripping, padding and
  // source-QPN QPs are for raw Ethernet QPs, which uroce does not offer.
  const uint32_t create_flags = (attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) != 0 ? attr->create_flags : 0;
  if ((create_flags & ~uint32_t{IBV_QP_CREATE_BLOCK_SELF_MCAST_LB}) != 0) {
    return fail(EOPNOTSUPP, static_cast<ibv_qp*>(nullptr));
  }
  uint64_t send_ops = 0;
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0) {
    if ((attr->send_ops_flags & ~kSupportedSendOps) != 0) return fail(EOPNOTSUPP, static_cast<ibv_qp*>(nullptr));
    send_ops = attr->send_ops_flags;
  }
  // The leading fields of ibv_qp_init_attr_ex are ibv_qp_init_attr's.
  ibv_qp_init_attr init{};
  init.qp_context = attr->qp_context;
  init.send_cq = attr->send_cq;
  init.recv_cq = attr->recv_cq;
  init.srq = attr->srq;
  init.cap = attr->cap;
  init.qp_type = attr->qp_type;
  init.sq_sig_all = attr->sq_sig_all;
  ibv_qp* qp = make_qp(attr->pd, &init, send_ops);
  if (qp == nullptr) return nullptr;
  attr->cap = init.cap;
  // Before the application can attach it to a group (the engine reads it).
  to_qp(qp)->impl->block_self_mcast_lb = (create_flags & IBV_QP_CREATE_BLOCK_SELF_MCAST_LB) != 0;
  return qp;
}

}  // namespace uroce::shim

using namespace uroce;
using namespace uroce::shim;

UROCE_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) noexcept { return make_qp(pd, init, 0); }

UROCE_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* ibqp) noexcept {
  if (ibqp == nullptr) return nullptr;
  Qp* qp = to_qp(ibqp);
  return qp->extended ? &qp->ex : nullptr;
}

UROCE_EXPORT int ibv_modify_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) noexcept {
  if (ibqp == nullptr || attr == nullptr) return EINVAL;
  if (const int rc = check_handle(ibqp->context, Owned::Qp, ibqp); rc != 0) return rc;
  const int rc = to_qp(ibqp)->impl->modify(*attr, mask);
  if (rc == 0 && (mask & IBV_QP_STATE) != 0) ibqp->state = attr->qp_state;
  return rc;
}

UROCE_EXPORT int ibv_query_qp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) noexcept {
  if (ibqp == nullptr || attr == nullptr || init == nullptr) return EINVAL;
  if (const int rc = check_handle(ibqp->context, Owned::Qp, ibqp); rc != 0) return rc;
  const int rc = to_qp(ibqp)->impl->query(attr, mask, init);
  if (rc != 0) return rc;
  // The RNIC knows its own objects; the application knows these.
  init->qp_context = ibqp->qp_context;
  init->send_cq = ibqp->send_cq;
  init->recv_cq = ibqp->recv_cq;
  init->srq = ibqp->srq;
  init->qp_type = ibqp->qp_type;
  ibqp->state = attr->qp_state;
  return 0;
}

UROCE_EXPORT int ibv_destroy_qp(ibv_qp* ibqp) noexcept {
  if (ibqp == nullptr) return fail(EINVAL, EINVAL);
  if (const int rc = check_handle(ibqp->context, Owned::Qp, ibqp); rc != 0) return fail(rc, rc);
  Qp* qp = to_qp(ibqp);
  void* other = ibqp->qp_type == IBV_QPT_XRC_RECV ? forget_xrc_handle(qp) : nullptr;
  const int rc = rnic_of(ibqp->context).destroy_qp(qp->impl, other);
  if (rc != 0) return fail(rc, rc);
  forget_destroyed(ibqp, Owned::Qp, qp);
  delete qp->batch;
  delete qp;
  return 0;
}

// RoCEv2 multicast on UD QPs (transport/rnic/mcast.hpp): the GID is the
// group's (IPv4-mapped or IPv6 multicast); the LID means nothing on RoCE
// and is ignored, as Linux does for an Ethernet port.
UROCE_EXPORT int ibv_attach_mcast(ibv_qp* ibqp, const ibv_gid* gid, uint16_t /*lid*/) noexcept {
  if (ibqp == nullptr || gid == nullptr) return EINVAL;
  wire::Ipv6Addr mgid;
  std::memcpy(mgid.data(), gid->raw, mgid.size());
  return rnic_of(ibqp->context).attach_mcast(to_qp(ibqp)->impl, mgid);
}
UROCE_EXPORT int ibv_detach_mcast(ibv_qp* ibqp, const ibv_gid* gid, uint16_t /*lid*/) noexcept {
  if (ibqp == nullptr || gid == nullptr) return EINVAL;
  wire::Ipv6Addr mgid;
  std::memcpy(mgid.data(), gid->raw, mgid.size());
  return rnic_of(ibqp->context).detach_mcast(to_qp(ibqp)->impl, mgid);
}

// Enhanced connection establishment: no options to negotiate.
UROCE_EXPORT int ibv_set_ece(ibv_qp*, ibv_ece*) noexcept { return EOPNOTSUPP; }
UROCE_EXPORT int ibv_query_ece(ibv_qp*, ibv_ece*) noexcept { return EOPNOTSUPP; }

// The responder places every packet's payload in PSN order, so data is
// written in order for every operation (v44: flags must be 0).
UROCE_EXPORT int ibv_query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode, uint32_t flags) noexcept {
  return qp != nullptr && flags == 0 ? 1 : 0;
}
