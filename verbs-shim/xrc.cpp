// The drop-in's XRC verbs (IBA annex A14): domains, XRC SRQs, XRC receive
// QPs and their handles.  XRC send QPs are ordinary QPs with a PD and no
// receive side (qp.cpp); what they send is the requester's (the XRCETH).
//
//   ibv_open_xrcd(3)    a domain per file (its inode) on the device, or an
//                       anonymous one (fd -1); O_CREAT / O_EXCL as the kernel
//                       reads them
//   ibv_create_srq_ex   IBV_SRQT_XRC: domain, CQ and PD
//   ibv_get_srq_num(3)  the number an XRC request's XRCETH names
//   ibv_create_qp_ex    IBV_QPT_XRC_RECV: the domain only
//   ibv_open_qp(3)      another handle on a domain's receive QP; the QP goes
//                       with its last handle
//
// A domain is shared by every context of the process on the device that
// opens the same file; across processes it would be the daemon's (issue 15).
#include <fcntl.h>
#include <sys/stat.h>

#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "verbs-shim/shim.hpp"

namespace uroce::shim {
namespace {

// The handles on each XRC receive QP (its creator's and ibv_open_qp's), so
// that its async events always name a live one.
struct Handles {
  std::mutex mu;
  std::unordered_map<rnic::Qp*, std::vector<Qp*>> by_qp;
};
Handles& handles() noexcept {
  static Handles h;
  return h;
}

// A key for the file `fd` names: its inode and device (never 0).
int file_key(int fd, uint64_t* key) noexcept {
  struct stat st{};
  if (::fstat(fd, &st) != 0) return EBADF;
  *key = (static_cast<uint64_t>(st.st_dev) << 40 ^ static_cast<uint64_t>(st.st_ino)) | 1;
  return 0;
}

// A handle for `impl`, filled as libibverbs fills one, recorded with the
// QP's other handles.
ibv_qp* new_handle(ibv_context* ctx, rnic::Qp* impl, void* qp_context) noexcept {
  auto* qp = new (std::nothrow) Qp{};
  if (qp == nullptr) return nullptr;
  {
    std::lock_guard lock(handles().mu);
    try {
      handles().by_qp[impl].push_back(qp);
    } catch (...) {
      delete qp;
      return nullptr;
    }
  }
  qp->impl = impl;
  qp->ctx = to_ctx(ctx);
  ibv_qp& q = qp->ex.qp_base;
  q.context = ctx;
  q.qp_context = qp_context;
  q.handle = impl->qpn().value();
  q.qp_num = impl->qpn().value();
  q.state = impl->state();
  q.qp_type = IBV_QPT_XRC_RECV;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  own(ctx, Owned::Qp, &q);
  return &q;
}

}  // namespace

ibv_xrcd* open_xrcd_op(ibv_context* ctx, ibv_xrcd_init_attr* attr) noexcept {
  // libibverbs (ibv_cmd_open_xrcd): unknown bits are EOPNOTSUPP; the fd and
  // the flags must both be given.
  if (attr == nullptr) return fail(EINVAL, static_cast<ibv_xrcd*>(nullptr));
  if (attr->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED) return fail(EOPNOTSUPP, static_cast<ibv_xrcd*>(nullptr));
  if ((attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) == 0 || (attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS) == 0)
    return fail(EINVAL, static_cast<ibv_xrcd*>(nullptr));
  if ((attr->oflags & ~(O_CREAT | O_EXCL)) != 0) return fail(EINVAL, static_cast<ibv_xrcd*>(nullptr));
  uint64_t key = 0;  // fd -1: a domain of its own, shared with nobody
  if (attr->fd != -1) {
    if (const int rc = file_key(attr->fd, &key); rc != 0) return fail(rc, static_cast<ibv_xrcd*>(nullptr));
  }
  auto* x = new (std::nothrow) Xrcd{};
  if (x == nullptr) return fail(ENOMEM, static_cast<ibv_xrcd*>(nullptr));
  int err = 0;
  x->impl = rnic_of(ctx).open_xrcd(key, key == 0 || (attr->oflags & O_CREAT) != 0, (attr->oflags & O_EXCL) != 0,
                                   &err);
  if (x->impl == nullptr) {
    delete x;
    return fail(err, static_cast<ibv_xrcd*>(nullptr));
  }
  x->base.context = ctx;
  own(ctx, Owned::Xrcd, &x->base);
  return &x->base;
}

int close_xrcd_op(ibv_xrcd* ibxrcd) noexcept {
  if (ibxrcd == nullptr) return EINVAL;
  Xrcd* x = to_xrcd(ibxrcd);
  ibv_context* ctx = ibxrcd->context;
  const int rc = rnic_of(ctx).close_xrcd(x->impl);
  if (rc != 0) return rc;
  disown(ctx, Owned::Xrcd, ibxrcd);
  delete x;
  return 0;
}

ibv_srq* create_xrc_srq(ibv_context* ctx, ibv_srq_init_attr_ex* attr) noexcept {
  // The kernel's create_srq for IB_SRQT_XRC: a domain and a CQ.
  constexpr uint32_t kNeed = IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  if ((attr->comp_mask & kNeed) != kNeed || attr->xrcd == nullptr || attr->cq == nullptr ||
      attr->xrcd->context != ctx || attr->cq->context != ctx)
    return fail(EINVAL, static_cast<ibv_srq*>(nullptr));
  const rnic::Rnic::XrcSrq xrc{to_xrcd(attr->xrcd)->impl, to_cq(attr->cq)->impl};
  ibv_srq_init_attr init{attr->srq_context, attr->attr};
  ibv_srq* srq = make_srq(attr->pd, &init, &xrc);
  if (srq != nullptr) attr->attr = init.attr;  // the actual sizes, written back
  return srq;
}

int get_srq_num_op(ibv_srq* srq, uint32_t* srq_num) noexcept {
  if (srq == nullptr || srq_num == nullptr) return EINVAL;
  *srq_num = to_srq(srq)->impl->number();
  return 0;
}

ibv_qp* create_xrc_recv_qp(ibv_context* ctx, ibv_qp_init_attr_ex* attr) noexcept {
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) == 0 || attr->xrcd == nullptr || attr->xrcd->context != ctx)
    return fail(EINVAL, static_cast<ibv_qp*>(nullptr));
  ibv_qp_init_attr init{};
  init.qp_type = IBV_QPT_XRC_RECV;
  int err = 0;
  rnic::Qp* impl = rnic_of(ctx).create_qp(nullptr, init, &err, nullptr, to_xrcd(attr->xrcd)->impl);
  if (impl == nullptr) return fail(err, static_cast<ibv_qp*>(nullptr));
  ibv_qp* q = new_handle(ctx, impl, attr->qp_context);
  if (q == nullptr) {
    rnic_of(ctx).destroy_qp(impl);
    return fail(ENOMEM, static_cast<ibv_qp*>(nullptr));
  }
  impl->context = to_qp(q);  // async events find the creator's handle
  attr->cap = impl->cap();   // all zero: it has no queue of its own
  return q;
}

ibv_qp* open_qp_op(ibv_context* ctx, ibv_qp_open_attr* attr) noexcept {
  // libibverbs (ibv_cmd_open_qp): the number, the domain and the type.
  if (attr == nullptr) return fail(EINVAL, static_cast<ibv_qp*>(nullptr));
  if (attr->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED) return fail(EOPNOTSUPP, static_cast<ibv_qp*>(nullptr));
  constexpr uint32_t kNeed = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  if ((attr->comp_mask & kNeed) != kNeed || attr->xrcd == nullptr || attr->xrcd->context != ctx ||
      attr->qp_type != IBV_QPT_XRC_RECV)
    return fail(EINVAL, static_cast<ibv_qp*>(nullptr));
  int err = 0;
  rnic::Qp* impl = rnic_of(ctx).open_xrc_qp(to_xrcd(attr->xrcd)->impl, Qpn(attr->qp_num & Qpn::kMask), &err);
  if (impl == nullptr) return fail(err, static_cast<ibv_qp*>(nullptr));
  void* qp_context = (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) != 0 ? attr->qp_context : nullptr;
  ibv_qp* q = new_handle(ctx, impl, qp_context);
  if (q == nullptr) {
    rnic_of(ctx).destroy_qp(impl);  // the handle open_xrc_qp added
    return fail(ENOMEM, static_cast<ibv_qp*>(nullptr));
  }
  return q;
}

void* forget_xrc_handle(Qp* qp) noexcept {
  std::lock_guard lock(handles().mu);
  auto it = handles().by_qp.find(qp->impl);
  if (it == handles().by_qp.end()) return nullptr;
  std::vector<Qp*>& v = it->second;
  std::erase(v, qp);
  if (v.empty()) {
    handles().by_qp.erase(it);
    return nullptr;
  }
  return v.front();
}

}  // namespace uroce::shim
