// PD, MR, completion channel, CQ (always ibv_cq_ex-headed), SRQ and AH:
// libibverbs' conventions around the RNIC's objects.  The CQ's poll and
// notify and the SRQ's post are context ops that inline code calls.
#include <endian.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "lib/util/log.hpp"
#include "lib/wire/ipv6.hpp"
#include "transport/device.hpp"
#include "verbs-shim/shim.hpp"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

namespace uroce::shim {
namespace {

// The man page's access bits; IBV_ACCESS_OPTIONAL_RANGE (bits 20-29, e.g.
// RELAXED_ORDERING) are hints a device may ignore, and uroce does.
int mr_access(unsigned int access) noexcept { return static_cast<int>(access & ~IBV_ACCESS_OPTIONAL_RANGE); }

// ---- ibv_cq_ex polling -------------------------------------------------------------
// The current completion is in Cq::cur; status and wr_id are also stored in
// the ibv_cq_ex, where the application reads them directly.
int cq_poll_one(Cq* cq, bool start) noexcept {
  kick(cq->ctx->dev);
  const int n = cq->impl->poll(1, &cq->cur, &cq->cur_ts, &cq->cur_wall_ns);
  if (start) cq->ctx->dev->tdev->cq_polled(n == 0);  // a batch's end is no spin
  if (n < 0) return -n;
  if (n == 0) return ENOENT;
  cq->ex.status = cq->cur.status;
  cq->ex.wr_id = cq->cur.wr_id;
  return 0;
}

int cq_start_poll(ibv_cq_ex* ex, ibv_poll_cq_attr* attr) noexcept {
  if (attr != nullptr && attr->comp_mask != 0) return EINVAL;
  return cq_poll_one(to_cq(ex), true);
}
int cq_next_poll(ibv_cq_ex* ex) noexcept { return cq_poll_one(to_cq(ex), false); }
void cq_end_poll(ibv_cq_ex*) noexcept {}
ibv_wc_opcode cq_read_opcode(ibv_cq_ex* ex) noexcept { return to_cq(ex)->cur.opcode; }
uint32_t cq_read_vendor_err(ibv_cq_ex* ex) noexcept { return to_cq(ex)->cur.vendor_err; }
uint32_t cq_read_byte_len(ibv_cq_ex* ex) noexcept { return to_cq(ex)->cur.byte_len; }
__be32 cq_read_imm_data(ibv_cq_ex* ex) noexcept { return to_cq(ex)->cur.imm_data; }
uint32_t cq_read_qp_num(ibv_cq_ex* ex) noexcept { return to_cq(ex)->cur.qp_num; }
uint32_t cq_read_src_qp(ibv_cq_ex* ex) noexcept { return to_cq(ex)->cur.src_qp; }
unsigned int cq_read_wc_flags(ibv_cq_ex* ex) noexcept { return to_cq(ex)->cur.wc_flags; }
uint32_t cq_read_slid(ibv_cq_ex* ex) noexcept { return to_cq(ex)->cur.slid; }
uint8_t cq_read_sl(ibv_cq_ex* ex) noexcept { return to_cq(ex)->cur.sl; }
uint8_t cq_read_dlid_path_bits(ibv_cq_ex* ex) noexcept { return to_cq(ex)->cur.dlid_path_bits; }
uint64_t cq_read_completion_ts(ibv_cq_ex* ex) noexcept { return to_cq(ex)->cur_ts; }
uint64_t cq_read_completion_wallclock_ns(ibv_cq_ex* ex) noexcept { return to_cq(ex)->cur_wall_ns; }

// The completion fields an ibv_cq_ex can report here: everything in ibv_wc,
// and when each completion was written, on the device clock
// (rnic::Rnic::kHcaCoreClockKhz) and the wall clock.
constexpr uint64_t kTimestampWcFlags =
    IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
constexpr uint64_t kSupportedWcFlags = IBV_WC_STANDARD_FLAGS | kTimestampWcFlags;

Cq* make_cq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* channel, uint32_t comp_vector,
            uint64_t wc_flags, ibv_pd* parent_domain, int* err) noexcept {
  if (ctx == nullptr || cqe <= 0 || comp_vector >= static_cast<uint32_t>(ctx->num_comp_vectors)) {
    *err = EINVAL;
    return nullptr;
  }
  auto* cq = new (std::nothrow) Cq{};
  if (cq == nullptr) {
    *err = ENOMEM;
    return nullptr;
  }
  rnic::CompChannel* ch = channel == nullptr ? nullptr : to_channel(channel)->impl;
  const rnic::RingAllocator* alloc = parent_domain != nullptr ? to_pd(parent_domain)->ring_allocator() : nullptr;
  cq->impl = rnic_of(ctx).create_cq(cqe, cq, ch, static_cast<int>(comp_vector), err, alloc);
  if (cq->impl == nullptr) {
    delete cq;
    return nullptr;
  }
  cq->parent_domain = parent_domain;
  hold_domain(parent_domain);
  cq->ctx = to_ctx(ctx);
  cq->wc_flags = wc_flags;
  ibv_cq_ex& ex = cq->ex;
  ex.context = ctx;
  ex.channel = channel;
  ex.cq_context = cq_context;
  ex.cqe = static_cast<int>(cq->impl->capacity());
  pthread_mutex_init(&ex.mutex, nullptr);
  pthread_cond_init(&ex.cond, nullptr);
  ex.start_poll = cq_start_poll;
  ex.next_poll = cq_next_poll;
  ex.end_poll = cq_end_poll;
  ex.read_opcode = cq_read_opcode;
  ex.read_vendor_err = cq_read_vendor_err;
  ex.read_byte_len = cq_read_byte_len;
  ex.read_imm_data = cq_read_imm_data;
  ex.read_qp_num = cq_read_qp_num;
  ex.read_src_qp = cq_read_src_qp;
  ex.read_wc_flags = cq_read_wc_flags;
  ex.read_slid = cq_read_slid;
  ex.read_sl = cq_read_sl;
  ex.read_dlid_path_bits = cq_read_dlid_path_bits;
  if ((wc_flags & kTimestampWcFlags) != 0) {
    cq->impl->enable_timestamps();
    ex.read_completion_ts = cq_read_completion_ts;
    ex.read_completion_wallclock_ns = cq_read_completion_wallclock_ns;
  }
  if (channel != nullptr) {
    pthread_mutex_lock(&ctx->mutex);
    ++channel->refcnt;
    pthread_mutex_unlock(&ctx->mutex);
  }
  own(ctx, Owned::Cq, &cq->ex);
  return cq;
}

}  // namespace

// ---- context ops -------------------------------------------------------------------

int poll_cq_op(ibv_cq* ibcq, int n, ibv_wc* wc) noexcept {
  Cq* cq = to_cq(ibcq);
  kick(cq->ctx->dev);
  const int got = cq->impl->poll(n, wc);
  cq->ctx->dev->tdev->cq_polled(got == 0);
  return got;
}

int req_notify_cq_op(ibv_cq* ibcq, int solicited_only) noexcept {
  return to_cq(ibcq)->impl->req_notify(solicited_only != 0);
}

ibv_cq_ex* create_cq_ex_op(ibv_context* ctx, ibv_cq_init_attr_ex* attr) noexcept {
  if (attr == nullptr) return fail(EINVAL, static_cast<ibv_cq_ex*>(nullptr));
  if ((attr->comp_mask & ~(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) != 0) {
    return fail(EINVAL, static_cast<ibv_cq_ex*>(nullptr));
  }
  if ((attr->wc_flags & ~kSupportedWcFlags) != 0) {
    return fail(EOPNOTSUPP, static_cast<ibv_cq_ex*>(nullptr));  // no CVLAN, flow tag, TM info
  }
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) != 0 &&
      (attr->flags & ~static_cast<uint32_t>(IBV_CREATE_CQ_ATTR_SINGLE_THREADED)) != 0) {
    return fail(EOPNOTSUPP, static_cast<ibv_cq_ex*>(nullptr));
  }
  // IBV_CQ_INIT_ATTR_MASK_PD: a parent domain of this context, whose
  // allocator the ring comes from (a plain PD is refused, as mlx5 does).
  ibv_pd* parent_domain = nullptr;
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) != 0) {
    parent_domain = attr->parent_domain;
    if (parent_domain == nullptr || parent_domain->context != ctx || !to_pd(parent_domain)->parent)
      return fail(EINVAL, static_cast<ibv_cq_ex*>(nullptr));
  }
  int err = 0;
  Cq* cq = make_cq(ctx, static_cast<int>(attr->cqe), attr->cq_context, attr->channel, attr->comp_vector,
                   attr->wc_flags, parent_domain, &err);
  if (cq == nullptr) return fail(err, static_cast<ibv_cq_ex*>(nullptr));
  return &cq->ex;
}

// ibv_query_rt_values_ex(3): the device clock now (Rnic::device_clock_ns),
// as mlx5 gives it: the ticks in raw_clock.tv_nsec, tv_sec 0.
int query_rt_values_op(ibv_context*, ibv_values_ex* values) noexcept {
  if (values == nullptr) return EINVAL;
  if ((values->comp_mask & ~uint32_t{IBV_VALUES_MASK_RAW_CLOCK}) != 0) return EINVAL;
  uint32_t filled = 0;
  if ((values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) != 0) {
    values->raw_clock.tv_sec = 0;
    values->raw_clock.tv_nsec = static_cast<long>(rnic::Rnic::device_clock_ns());
    filled |= IBV_VALUES_MASK_RAW_CLOCK;
  }
  values->comp_mask = filled;
  return 0;
}

// ---- what a context owns -------------------------------------------------------------

// Every object a context made, by kind, with the handle it was given: the
// uverbs idr of the kernel, where a verb on an object names it by handle
// and a handle the context does not hold is ENOENT.
struct ContextObjects {
  std::mutex mu;
  std::array<std::unordered_map<void*, uint32_t>, static_cast<size_t>(Owned::kCount)> sets;
  uint32_t next_handle = 1;  // for the kinds whose handle is the context's to give (CQ, SRQ, AH)
};

ContextObjects* new_context_objects() noexcept { return new (std::nothrow) ContextObjects{}; }

namespace {
// The handle field of an object's ABI structure, or null for the kinds that
// have none (channels, thread domains, XRC domains).
uint32_t* handle_field(Owned kind, void* obj) noexcept {
  switch (kind) {
    case Owned::Pd:
    case Owned::ParentDomain:
    case Owned::ImportedPd: return &static_cast<ibv_pd*>(obj)->handle;
    case Owned::Mr:
    case Owned::ImportedMr: return &static_cast<ibv_mr*>(obj)->handle;
    case Owned::Mw: return &static_cast<ibv_mw*>(obj)->handle;
    case Owned::Cq: return &static_cast<ibv_cq*>(obj)->handle;
    case Owned::Srq: return &static_cast<ibv_srq*>(obj)->handle;
    case Owned::Qp: return &static_cast<ibv_qp*>(obj)->handle;
    case Owned::Ah: return &static_cast<ibv_ah*>(obj)->handle;
    case Owned::Xrcd:
    case Owned::Channel:
    case Owned::Td:
    case Owned::kCount: break;
  }
  return nullptr;
}
}  // namespace

void own(ibv_context* ctx, Owned kind, void* obj) noexcept {
  ContextObjects* o = to_ctx(ctx)->objects;
  if (o == nullptr || obj == nullptr) return;
  try {
    std::lock_guard lock(o->mu);
    uint32_t* h = handle_field(kind, obj);
    if (h != nullptr && *h == 0) *h = o->next_handle++;  // a kind whose handle is the context's to give
    o->sets[static_cast<size_t>(kind)][obj] = h != nullptr ? *h : 0;
  } catch (...) {
    // No memory for the record: the object works, only close_device will not free it.
  }
}

void disown(ibv_context* ctx, Owned kind, void* obj) noexcept {
  ContextObjects* o = to_ctx(ctx)->objects;
  if (o == nullptr) return;
  std::lock_guard lock(o->mu);
  o->sets[static_cast<size_t>(kind)].erase(obj);
}

namespace {
int find_handle(ibv_context* ctx, Owned kind, void* obj, bool take) noexcept {
  if (ctx == nullptr || obj == nullptr) return EINVAL;
  ContextObjects* o = to_ctx(ctx)->objects;
  if (o == nullptr) return ENOENT;
  std::lock_guard lock(o->mu);
  auto& set = o->sets[static_cast<size_t>(kind)];
  const auto it = set.find(obj);
  if (it == set.end()) return ENOENT;
  const uint32_t* h = handle_field(kind, obj);
  if (h != nullptr && *h != it->second) return ENOENT;
  if (take) set.erase(it);
  return 0;
}
}  // namespace

int check_handle(ibv_context* ctx, Owned kind, void* obj) noexcept { return find_handle(ctx, kind, obj, false); }
int take_handle(ibv_context* ctx, Owned kind, void* obj) noexcept { return find_handle(ctx, kind, obj, true); }

namespace {

int destroy_owned(Owned kind, void* obj) noexcept {
  switch (kind) {
    case Owned::ImportedMr: ibv_unimport_mr(static_cast<ibv_mr*>(obj)); return 0;
    case Owned::ImportedPd: ibv_unimport_pd(static_cast<ibv_pd*>(obj)); return 0;
    case Owned::Qp: return ibv_destroy_qp(static_cast<ibv_qp*>(obj));
    case Owned::Srq: return ibv_destroy_srq(static_cast<ibv_srq*>(obj));
    case Owned::Xrcd: return close_xrcd_op(static_cast<ibv_xrcd*>(obj));
    case Owned::Ah: return ibv_destroy_ah(static_cast<ibv_ah*>(obj));
    case Owned::Mw: return dealloc_mw_op(static_cast<ibv_mw*>(obj));
    case Owned::Mr: return ibv_dereg_mr(static_cast<ibv_mr*>(obj));
    case Owned::Cq: return ibv_destroy_cq(static_cast<ibv_cq*>(obj));
    case Owned::Channel: return ibv_destroy_comp_channel(static_cast<ibv_comp_channel*>(obj));  // its CQs went just before
    case Owned::ParentDomain: return ibv_dealloc_pd(static_cast<ibv_pd*>(obj));  // its queues went before
    case Owned::Td: return dealloc_td_op(static_cast<ibv_td*>(obj));
    case Owned::Pd: return ibv_dealloc_pd(static_cast<ibv_pd*>(obj));
    case Owned::kCount: break;
  }
  return EINVAL;
}

}  // namespace

void close_context_objects(ibv_context* ctx) noexcept {
  ContextObjects* o = to_ctx(ctx)->objects;
  if (o == nullptr) return;
  for (size_t k = 0; k < static_cast<size_t>(Owned::kCount); ++k) {
    std::vector<void*> left;
    {
      std::lock_guard lock(o->mu);
      try {
        for (const auto& [obj, handle] : o->sets[k]) left.push_back(obj);
      } catch (...) {
        continue;
      }
    }
    for (void* obj : left) {
      if (const int rc = destroy_owned(static_cast<Owned>(k), obj); rc != 0)
        log_line(LogType::Shim, LogLevel::Warning, "ibv_close_device: an object the program left could not be freed: %s",
                 std::strerror(rc));
    }
  }
  to_ctx(ctx)->objects = nullptr;
  delete o;
}

int post_srq_recv_op(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad) noexcept {
  const ibv_recv_wr* bad_c = nullptr;
  const int rc = to_srq(ibsrq)->impl->post_recv(wr, &bad_c);
  if (rc != 0 && bad != nullptr) *bad = const_cast<ibv_recv_wr*>(bad_c);
  return rc;
}

}  // namespace uroce::shim

using namespace uroce;
using namespace uroce::shim;

// ---- PD --------------------------------------------------------------------------------

UROCE_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) noexcept {
  if (context == nullptr) return fail(EINVAL, static_cast<ibv_pd*>(nullptr));
  auto* pd = new (std::nothrow) Pd{};
  if (pd == nullptr) return fail(ENOMEM, static_cast<ibv_pd*>(nullptr));
  int err = 0;
  pd->impl = rnic_of(context).alloc_pd(&err);
  if (pd->impl == nullptr) {
    delete pd;
    return fail(err, static_cast<ibv_pd*>(nullptr));
  }
  pd->base.context = context;
  pd->base.handle = pd->impl->handle();
  own(context, Owned::Pd, &pd->base);
  return &pd->base;
}

// The destroy verbs return an errno and leave it in errno too, as
// libibverbs' commands do (the failed write(2) or ioctl(2) set it).
UROCE_EXPORT int ibv_dealloc_pd(ibv_pd* ibpd) noexcept {
  if (ibpd == nullptr) return fail(EINVAL, EINVAL);
  Pd* pd = to_pd(ibpd);
  if (const int rc = check_handle(ibpd->context, pd_kind(pd), ibpd); rc != 0) return fail(rc, rc);
  if (pd->parent) {
    const int rc = dealloc_parent_domain(pd);
    return rc == 0 ? 0 : fail(rc, rc);
  }
  if (pd->imported) {  // the handle only (import.cpp): the PD is its own context's
    ibv_unimport_pd(ibpd);
    return 0;
  }
  const int rc = rnic_of(ibpd->context).dealloc_pd(pd->impl);
  if (rc != 0) return fail(rc, rc);
  disown(ibpd->context, Owned::Pd, ibpd);
  delete pd;
  return 0;
}

// ---- MR --------------------------------------------------------------------------------

UROCE_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* ibpd, void* addr, size_t length, uint64_t iova,
                                      unsigned int access) noexcept {
  if (ibpd == nullptr) return fail(EINVAL, static_cast<ibv_mr*>(nullptr));
  if (const int rc = check_pd(ibpd->context, ibpd); rc != 0) return fail(rc, static_cast<ibv_mr*>(nullptr));
  auto* mr = new (std::nothrow) Mr{};
  if (mr == nullptr) return fail(ENOMEM, static_cast<ibv_mr*>(nullptr));
  int err = 0;
  Pd* pd = to_pd(ibpd);
  mr->impl = rnic_of(ibpd->context).reg_mr(pd->impl, addr, length, iova, mr_access(access), &err);
  if (mr->impl == nullptr) {
    delete mr;
    return fail(err, static_cast<ibv_mr*>(nullptr));
  }
  mr->base.context = ibpd->context;
  mr->base.pd = ibpd;
  mr->base.addr = addr;
  mr->base.length = length;
  mr->base.handle = mr->impl->lkey.value();
  mr->base.lkey = mr->impl->lkey.value();
  mr->base.rkey = mr->impl->rkey.value();
  own(ibpd->context, Owned::Mr, &mr->base);
  return &mr->base;
}

// ---- memory windows ------------------------------------------------------------------
// AHs' way: rnic::Mw begins with the ibv_mw the application holds.

ibv_mw* shim::alloc_mw_op(ibv_pd* ibpd, ibv_mw_type type) noexcept {
  if (ibpd == nullptr) return fail(EINVAL, static_cast<ibv_mw*>(nullptr));
  if (const int rc = check_pd(ibpd->context, ibpd); rc != 0) return fail(rc, static_cast<ibv_mw*>(nullptr));
  int err = 0;
  rnic::Mw* mw = rnic_of(ibpd->context).alloc_mw(to_pd(ibpd)->impl, type, &err);
  if (mw == nullptr) return fail(err, static_cast<ibv_mw*>(nullptr));
  mw->ibv.context = ibpd->context;
  mw->ibv.pd = ibpd;
  own(ibpd->context, Owned::Mw, &mw->ibv);
  return &mw->ibv;
}

// The window is the RNIC's object, as an AH (ibv_destroy_ah).
int shim::dealloc_mw_op(ibv_mw* ibmw) noexcept {
  if (ibmw == nullptr) return fail(EINVAL, EINVAL);
  ibv_context* context = ibmw->context;
  if (const int rc = take_handle(context, Owned::Mw, ibmw); rc != 0) return fail(rc, rc);
  const int rc = rnic_of(context).dealloc_mw(rnic::Mw::from_ibv(ibmw));
  if (rc != 0) {
    own(context, Owned::Mw, ibmw);
    return fail(rc, rc);
  }
  return 0;
}

// ibv_bind_mw(3), type 1: a BIND_MW work request on `qp` with the next key
// of the window (ibv_inc_rkey), which mw->rkey shows at once; the binding
// itself happens when the send queue reaches it, and a failure completes
// the request with IBV_WC_MW_BIND_ERR (the key then names nothing, as with
// rxe: "the user has to undo this").
int shim::bind_mw_op(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) noexcept {
  if (qp == nullptr || mw == nullptr || bind == nullptr || mw->type != IBV_MW_TYPE_1) return EINVAL;
  if ((bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED) != 0) return EINVAL;
  ibv_send_wr wr{};
  wr.wr_id = bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = bind->send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = bind->bind_info;
  ibv_send_wr* bad = nullptr;
  const int rc = post_send_op(qp, &wr, &bad);
  if (rc == 0) mw->rkey = wr.bind_mw.rkey;
  return rc;
}

int shim::advise_mr_op(ibv_pd* ibpd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list,
                       uint32_t num_sge) noexcept {
  if (ibpd == nullptr) return EINVAL;
  return rnic_of(ibpd->context).advise_mr(to_pd(ibpd)->impl, advice, flags, sg_list, num_sge);
}

UROCE_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) noexcept {
  return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<uintptr_t>(addr), static_cast<unsigned int>(access));
}

UROCE_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) noexcept {
  return ibv_reg_mr_iova2(pd, addr, length, iova, static_cast<unsigned int>(access));
}

// dma-buf memory belongs to a kernel device: nothing here can map it.
UROCE_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd*, uint64_t, size_t, uint64_t, int, int) noexcept {
  return fail(EOPNOTSUPP, static_cast<ibv_mr*>(nullptr));
}

UROCE_EXPORT int ibv_rereg_mr(ibv_mr* ibmr, int flags, ibv_pd* ibpd, void* addr, size_t length,
                              int access) noexcept {
  if (ibmr == nullptr || flags == 0 || (flags & ~(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD |
                                                  IBV_REREG_MR_CHANGE_ACCESS)) != 0) {
    return IBV_REREG_MR_ERR_INPUT;
  }
  if ((flags & IBV_REREG_MR_CHANGE_PD) != 0 && ibpd == nullptr) return IBV_REREG_MR_ERR_INPUT;
  Mr* mr = to_mr(ibmr);
  rnic::Pd* pd = (flags & IBV_REREG_MR_CHANGE_PD) != 0 ? to_pd(ibpd)->impl : nullptr;
  const int rc = rnic_of(ibmr->context).rereg_mr(mr->impl, flags, pd, addr, length, mr_access(static_cast<unsigned>(access)));
  if (rc != 0) {
    errno = rc;
    return IBV_REREG_MR_ERR_INPUT;
  }
  if ((flags & IBV_REREG_MR_CHANGE_PD) != 0) ibmr->pd = ibpd;
  if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0) {
    ibmr->addr = addr;
    ibmr->length = length;
  }
  ibmr->lkey = mr->impl->lkey.value();
  ibmr->rkey = mr->impl->rkey.value();
  return 0;
}

UROCE_EXPORT int ibv_dereg_mr(ibv_mr* ibmr) noexcept {
  if (ibmr == nullptr) return fail(EINVAL, EINVAL);
  Mr* mr = to_mr(ibmr);
  if (const int rc = check_handle(ibmr->context, mr->imported ? Owned::ImportedMr : Owned::Mr, ibmr); rc != 0)
    return fail(rc, rc);
  if (mr->imported) {  // the handle only (import.cpp): the MR is its own context's
    ibv_unimport_mr(ibmr);
    return 0;
  }
  const int rc = rnic_of(ibmr->context).dereg_mr(mr->impl);
  if (rc != 0) return fail(rc, rc);
  disown(ibmr->context, Owned::Mr, ibmr);
  delete mr;
  return 0;
}

// ---- completion channel ---------------------------------------------------------------

UROCE_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) noexcept {
  if (context == nullptr) return fail(EINVAL, static_cast<ibv_comp_channel*>(nullptr));
  auto* ch = new (std::nothrow) Channel{};
  if (ch == nullptr) return fail(ENOMEM, static_cast<ibv_comp_channel*>(nullptr));
  int err = 0;
  ch->impl = rnic_of(context).create_comp_channel(&err);
  if (ch->impl == nullptr) {
    delete ch;
    return fail(err, static_cast<ibv_comp_channel*>(nullptr));
  }
  ch->base.context = context;
  ch->base.fd = ch->impl->fd();
  ch->base.refcnt = 0;
  own(context, Owned::Channel, &ch->base);
  return &ch->base;
}

UROCE_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) noexcept {
  if (channel == nullptr) return EINVAL;
  ibv_context* context = channel->context;
  pthread_mutex_lock(&context->mutex);
  const bool busy = channel->refcnt != 0;
  pthread_mutex_unlock(&context->mutex);
  if (busy) return EBUSY;
  Channel* ch = to_channel(channel);
  const int rc = rnic_of(context).destroy_comp_channel(ch->impl);
  if (rc != 0) return rc;
  disown(context, Owned::Channel, channel);
  delete ch;
  return 0;
}

// ---- CQ --------------------------------------------------------------------------------

UROCE_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                                   int comp_vector) noexcept {
  if (comp_vector < 0) return fail(EINVAL, static_cast<ibv_cq*>(nullptr));
  int err = 0;
  Cq* cq = make_cq(context, cqe, cq_context, channel, static_cast<uint32_t>(comp_vector), IBV_WC_STANDARD_FLAGS, nullptr,
                   &err);
  if (cq == nullptr) return fail(err, static_cast<ibv_cq*>(nullptr));
  return abi(cq);
}

UROCE_EXPORT int ibv_resize_cq(ibv_cq* ibcq, int cqe) noexcept {
  if (ibcq == nullptr || cqe <= 0) return EINVAL;
  Cq* cq = to_cq(ibcq);
  const int rc = cq->impl->resize(static_cast<uint32_t>(cqe));
  if (rc == 0) ibcq->cqe = static_cast<int>(cq->impl->capacity());
  return rc;
}

UROCE_EXPORT int ibv_destroy_cq(ibv_cq* ibcq) noexcept {
  if (ibcq == nullptr) return fail(EINVAL, EINVAL);
  if (const int rc = check_handle(ibcq->context, Owned::Cq, ibcq); rc != 0) return fail(rc, rc);
  Cq* cq = to_cq(ibcq);
  ibv_comp_channel* channel = ibcq->channel;
  ibv_context* context = ibcq->context;
  const int rc = rnic_of(context).destroy_cq(cq->impl);
  if (rc != 0) return fail(rc, rc);
  drop_async_events(cq->ctx, cq);
  if (channel != nullptr) {
    pthread_mutex_lock(&context->mutex);
    --channel->refcnt;
    pthread_mutex_unlock(&context->mutex);
  }
  disown(context, Owned::Cq, ibcq);
  release_domain(cq->parent_domain);
  pthread_cond_destroy(&ibcq->cond);
  pthread_mutex_destroy(&ibcq->mutex);
  delete cq;
  return 0;
}

UROCE_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq_out, void** cq_context) noexcept {
  if (channel == nullptr || cq_out == nullptr || cq_context == nullptr) return fail(EINVAL, -1);
  Channel* ch = to_channel(channel);
  rnic::Cq* rcq = nullptr;
  const int rc = wait_event(ctx_dev(channel->context), channel->fd, [&] { return ch->impl->get_event(&rcq); });
  if (rc != 0) return fail(rc, -1);
  Cq* cq = static_cast<Cq*>(rcq->context());
  *cq_out = abi(cq);
  *cq_context = cq->ex.cq_context;
  return 0;
}

// Upstream's event accounting: applications ack every event they got
// before destroying the CQ.
UROCE_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) noexcept {
  if (cq == nullptr) return;
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

// ---- SRQ -------------------------------------------------------------------------------

UROCE_EXPORT ibv_srq* ibv_create_srq(ibv_pd* ibpd, ibv_srq_init_attr* init) noexcept {
  return make_srq(ibpd, init, nullptr);
}

ibv_srq* shim::make_srq(ibv_pd* ibpd, ibv_srq_init_attr* init, const rnic::Rnic::XrcSrq* xrc) noexcept {
  if (ibpd == nullptr || init == nullptr) return fail(EINVAL, static_cast<ibv_srq*>(nullptr));
  if (const int rc = check_pd(ibpd->context, ibpd); rc != 0) return fail(rc, static_cast<ibv_srq*>(nullptr));
  auto* srq = new (std::nothrow) Srq{};
  if (srq == nullptr) return fail(ENOMEM, static_cast<ibv_srq*>(nullptr));
  ibv_srq_init_attr ours = *init;
  ours.srq_context = srq;  // the RNIC's context is ours; the application's stays in ibv_srq
  int err = 0;
  srq->impl =
      rnic_of(ibpd->context).create_srq(to_pd(ibpd)->impl, ours, &err, to_pd(ibpd)->ring_allocator(), xrc);
  if (srq->impl == nullptr) {
    delete srq;
    return fail(err, static_cast<ibv_srq*>(nullptr));
  }
  hold_domain(ibpd);
  srq->ctx = to_ctx(ibpd->context);
  ibv_srq& s = srq->base;
  s.context = ibpd->context;
  s.srq_context = init->srq_context;
  s.pd = ibpd;
  pthread_mutex_init(&s.mutex, nullptr);
  pthread_cond_init(&s.cond, nullptr);
  // The man page: the actual sizes are written back.
  ibv_srq_attr actual{};
  if (srq->impl->query(&actual) == 0) {
    init->attr.max_wr = actual.max_wr;
    init->attr.max_sge = actual.max_sge;
  }
  own(ibpd->context, Owned::Srq, &s);
  return &s;
}

// ibv_create_srq_ex(3): libibverbs' inline answers the plain basic SRQ
// itself (ibv_create_srq); what reaches here names a type or a field more.
// A basic SRQ with any of the known fields is still one.  An XRC SRQ
// (xrc.cpp) needs its domain, its CQ and a PD, as the kernel asks; tag
// matching SRQs are not offered (EOPNOTSUPP); anything else is EINVAL.
ibv_srq* shim::create_srq_ex_op(ibv_context* ctx, ibv_srq_init_attr_ex* attr) noexcept {
  constexpr uint32_t kKnown = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                              IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
  if (attr == nullptr || (attr->comp_mask & ~kKnown) != 0) return fail(EINVAL, static_cast<ibv_srq*>(nullptr));
  const ibv_srq_type type = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) != 0 ? attr->srq_type : IBV_SRQT_BASIC;
  if (type == IBV_SRQT_TM || (attr->comp_mask & IBV_SRQ_INIT_ATTR_TM) != 0)
    return fail(EOPNOTSUPP, static_cast<ibv_srq*>(nullptr));
  if ((type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC) || (attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) == 0 ||
      attr->pd == nullptr || attr->pd->context != ctx)
    return fail(EINVAL, static_cast<ibv_srq*>(nullptr));
  if (type == IBV_SRQT_XRC) return create_xrc_srq(ctx, attr);
  if ((attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) != 0) return fail(EINVAL, static_cast<ibv_srq*>(nullptr));
  ibv_srq_init_attr init{attr->srq_context, attr->attr};
  ibv_srq* srq = ibv_create_srq(attr->pd, &init);
  if (srq != nullptr) attr->attr = init.attr;  // the actual sizes, written back
  return srq;
}

UROCE_EXPORT int ibv_modify_srq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask) noexcept {
  if (ibsrq == nullptr || attr == nullptr) return EINVAL;
  return to_srq(ibsrq)->impl->modify(*attr, mask);
}

UROCE_EXPORT int ibv_query_srq(ibv_srq* ibsrq, ibv_srq_attr* attr) noexcept {
  if (ibsrq == nullptr || attr == nullptr) return EINVAL;
  return to_srq(ibsrq)->impl->query(attr);
}

UROCE_EXPORT int ibv_destroy_srq(ibv_srq* ibsrq) noexcept {
  if (ibsrq == nullptr) return fail(EINVAL, EINVAL);
  if (const int rc = check_handle(ibsrq->context, Owned::Srq, ibsrq); rc != 0) return fail(rc, rc);
  Srq* srq = to_srq(ibsrq);
  const int rc = rnic_of(ibsrq->context).destroy_srq(srq->impl);
  if (rc != 0) return fail(rc, rc);
  forget_destroyed(ibsrq, Owned::Srq, srq);
  delete srq;
  return 0;
}

// ---- AH --------------------------------------------------------------------------------

UROCE_EXPORT ibv_ah* ibv_create_ah(ibv_pd* ibpd, ibv_ah_attr* attr) noexcept {
  if (ibpd == nullptr || attr == nullptr) return fail(EINVAL, static_cast<ibv_ah*>(nullptr));
  if (const int rc = check_pd(ibpd->context, ibpd); rc != 0) return fail(rc, static_cast<ibv_ah*>(nullptr));
  int err = 0;
  rnic::Ah* ah = rnic_of(ibpd->context).create_ah(to_pd(ibpd)->impl, *attr, &err);
  if (ah == nullptr) return fail(err, static_cast<ibv_ah*>(nullptr));
  ah->ibv.context = ibpd->context;
  ah->ibv.pd = ibpd;
  own(ibpd->context, Owned::Ah, &ah->ibv);
  return &ah->ibv;
}

// The AH is the RNIC's object (no shim wrapper): its record goes first
// (take_handle), so that an AH another thread makes at the freed address
// keeps its own.
UROCE_EXPORT int ibv_destroy_ah(ibv_ah* ah) noexcept {
  if (ah == nullptr) return fail(EINVAL, EINVAL);
  ibv_context* context = ah->context;
  if (const int rc = take_handle(context, Owned::Ah, ah); rc != 0) return fail(rc, rc);
  const int rc = rnic_of(context).destroy_ah(rnic::Ah::from_ibv(ah));
  if (rc != 0) {
    own(context, Owned::Ah, ah);
    return fail(rc, rc);
  }
  return 0;
}

// The address of the sender of a UD completion, from the 40-byte GRH area
// at the head of its receive buffer (IBV_WC_GRH).  On RoCEv2 that area
// holds an IPv6 header, or 20 unused bytes and then the IPv4 header
// (research/abi-shim.md §8).
UROCE_EXPORT int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                                     ibv_ah_attr* ah_attr) noexcept {
  if (context == nullptr || wc == nullptr || ah_attr == nullptr) return fail(EINVAL, -1);
  std::memset(ah_attr, 0, sizeof *ah_attr);
  ah_attr->dlid = wc->slid;
  ah_attr->sl = wc->sl;
  ah_attr->src_path_bits = wc->dlid_path_bits;
  ah_attr->port_num = port_num;
  if ((wc->wc_flags & IBV_WC_GRH) == 0 || grh == nullptr) return 0;  // no GRH: a local-only address
  constexpr size_t kIpv4Offset = 20;        // the IPv4 header sits in the GRH area's last 20 bytes
  constexpr uint8_t kIpVersion4 = 4, kIpVersion6 = 6;
  constexpr size_t kIpv4Tos = 1, kIpv4Src = 12, kIpv4Dst = 16;
  constexpr uint8_t kMappedPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  const auto* raw = reinterpret_cast<const uint8_t*>(grh);
  wire::Ipv6Addr local{};
  ah_attr->is_global = 1;
  ah_attr->grh.hop_limit = 0xFF;
  if ((raw[0] >> 4) == kIpVersion6) {
    const uint32_t vtf = be32toh(grh->version_tclass_flow);
    std::memcpy(ah_attr->grh.dgid.raw, grh->sgid.raw, sizeof grh->sgid.raw);
    std::memcpy(local.data(), grh->dgid.raw, local.size());
    ah_attr->grh.traffic_class = static_cast<uint8_t>(vtf >> 20);
    ah_attr->grh.flow_label = vtf & 0xFFFFF;
  } else if ((raw[kIpv4Offset] >> 4) == kIpVersion4) {
    const uint8_t* ip = raw + kIpv4Offset;
    std::memcpy(ah_attr->grh.dgid.raw, kMappedPrefix, sizeof kMappedPrefix);
    std::memcpy(ah_attr->grh.dgid.raw + sizeof kMappedPrefix, ip + kIpv4Src, 4);
    std::memcpy(local.data(), kMappedPrefix, sizeof kMappedPrefix);
    std::memcpy(local.data() + sizeof kMappedPrefix, ip + kIpv4Dst, 4);
    ah_attr->grh.traffic_class = ip[kIpv4Tos];
  } else {
    return fail(EINVAL, -1);
  }
  const int idx = rnic_of(context).find_gid(local);
  if (idx < 0) return fail(ENOENT, -1);  // addressed to a GID we do not hold
  ah_attr->grh.sgid_index = static_cast<uint8_t>(idx);
  return 0;
}

UROCE_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) noexcept {
  if (pd == nullptr) return fail(EINVAL, static_cast<ibv_ah*>(nullptr));
  ibv_ah_attr attr{};
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr) != 0) return nullptr;
  return ibv_create_ah(pd, &attr);
}

// The Ethernet address behind a GID comes from the engine's neighbour
// table when a packet is sent; there is no synchronous lookup to offer.
UROCE_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context*, ibv_ah_attr*, uint8_t*, uint16_t*) noexcept {
  return EOPNOTSUPP;
}
