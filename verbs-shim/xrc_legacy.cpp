// The older verbs API's XRC calls (include/uroce/xrc_legacy.h), mapped
// onto rdma-core's XRC verbs (xrc.cpp).  A domain is an ibv_xrcd; a receive
// QP is known by its domain and number, and each registration of this
// process with it is one handle (ibv_create_qp_ex's, then ibv_open_qp's),
// kept here until ibv_unreg_xrc_rcv_qp destroys it: the QP goes with its
// last handle, as OFED's went with its last registered process.
#include <infiniband/verbs.h>

#include <cerrno>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "verbs-shim/include/uroce/xrc_legacy.h"
#include "verbs-shim/shim.hpp"

namespace {

ibv_xrcd* xrcd_of(ibv_xrc_domain* d) noexcept { return reinterpret_cast<ibv_xrcd*>(d); }

// The handles of each receive QP, by (domain, QP number).
struct Registry {
  std::mutex mu;
  std::map<std::pair<ibv_xrcd*, uint32_t>, std::vector<ibv_qp*>> qps;
};
Registry& registry() noexcept {
  static Registry r;
  return r;
}

// Records `qp` as one more registration; false (the handle destroyed) when
// it cannot be recorded.
bool record(ibv_xrcd* x, ibv_qp* qp) noexcept {
  try {
    std::lock_guard lock(registry().mu);
    registry().qps[{x, qp->qp_num}].push_back(qp);
    return true;
  } catch (...) {
    ibv_destroy_qp(qp);
    return false;
  }
}

// A handle on the receive QP `qpn` of `x`: a registered one, or a new
// one the caller destroys (`temporary`).  nullptr and errno when the domain
// has no such QP.
ibv_qp* handle(ibv_xrcd* x, uint32_t qpn, bool* temporary) noexcept {
  {
    std::lock_guard lock(registry().mu);
    auto it = registry().qps.find({x, qpn});
    if (it != registry().qps.end() && !it->second.empty()) {
      *temporary = false;
      return it->second.front();
    }
  }
  ibv_qp_open_attr oa{};
  oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  oa.qp_num = qpn;
  oa.xrcd = x;
  oa.qp_type = IBV_QPT_XRC_RECV;
  *temporary = true;
  return ibv_open_qp(x->context, &oa);
}

}  // namespace

UROCE_EXPORT ibv_xrc_domain* ibv_open_xrc_domain(ibv_context* context, int fd, int oflag) noexcept {
  if (context == nullptr) return uroce::shim::fail(EINVAL, static_cast<ibv_xrc_domain*>(nullptr));
  ibv_xrcd_init_attr a{};
  a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  a.fd = fd;
  a.oflags = oflag;
  return reinterpret_cast<ibv_xrc_domain*>(ibv_open_xrcd(context, &a));
}

UROCE_EXPORT int ibv_close_xrc_domain(ibv_xrc_domain* d) noexcept {
  if (d == nullptr) return EINVAL;
  return ibv_close_xrcd(xrcd_of(d));
}

UROCE_EXPORT ibv_srq* ibv_create_xrc_srq(ibv_pd* pd, ibv_xrc_domain* d, ibv_cq* cq,
                                         ibv_srq_init_attr* init) noexcept {
  if (pd == nullptr || d == nullptr || cq == nullptr || init == nullptr)
    return uroce::shim::fail(EINVAL, static_cast<ibv_srq*>(nullptr));
  ibv_srq_init_attr_ex a{};
  a.srq_context = init->srq_context;
  a.attr = init->attr;
  a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
  a.srq_type = IBV_SRQT_XRC;
  a.pd = pd;
  a.xrcd = xrcd_of(d);
  a.cq = cq;
  ibv_srq* srq = ibv_create_srq_ex(pd->context, &a);
  if (srq != nullptr) init->attr = a.attr;  // the actual sizes, written back
  return srq;
}

UROCE_EXPORT int ibv_create_xrc_rcv_qp(ibv_xrc_rcv_qp_init_attr* init, uint32_t* qpn) noexcept {
  if (init == nullptr || init->xrc_domain == nullptr || qpn == nullptr) return EINVAL;
  ibv_xrcd* x = xrcd_of(init->xrc_domain);
  ibv_qp_init_attr_ex a{};
  a.qp_context = init->attr.qp_context;
  a.qp_type = IBV_QPT_XRC_RECV;
  a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  a.xrcd = x;
  ibv_qp* qp = ibv_create_qp_ex(x->context, &a);
  if (qp == nullptr) return errno != 0 ? errno : ENOMEM;
  if (!record(x, qp)) return ENOMEM;
  *qpn = qp->qp_num;
  return 0;
}

UROCE_EXPORT int ibv_reg_xrc_rcv_qp(ibv_xrc_domain* d, uint32_t qpn) noexcept {
  if (d == nullptr) return EINVAL;
  ibv_xrcd* x = xrcd_of(d);
  ibv_qp_open_attr oa{};
  oa.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  oa.qp_num = qpn;
  oa.xrcd = x;
  oa.qp_type = IBV_QPT_XRC_RECV;
  ibv_qp* qp = ibv_open_qp(x->context, &oa);
  if (qp == nullptr) return errno != 0 ? errno : EINVAL;
  return record(x, qp) ? 0 : ENOMEM;
}

UROCE_EXPORT int ibv_unreg_xrc_rcv_qp(ibv_xrc_domain* d, uint32_t qpn) noexcept {
  if (d == nullptr) return EINVAL;
  ibv_qp* qp = nullptr;
  {
    std::lock_guard lock(registry().mu);
    auto it = registry().qps.find({xrcd_of(d), qpn});
    if (it == registry().qps.end() || it->second.empty()) return EINVAL;  // not registered
    qp = it->second.back();
    it->second.pop_back();
    if (it->second.empty()) registry().qps.erase(it);
  }
  return ibv_destroy_qp(qp);
}

UROCE_EXPORT int ibv_modify_xrc_rcv_qp(ibv_xrc_domain* d, uint32_t qpn, ibv_qp_attr* attr, int mask) noexcept {
  if (d == nullptr || attr == nullptr) return EINVAL;
  bool temporary = false;
  ibv_qp* qp = handle(xrcd_of(d), qpn, &temporary);
  if (qp == nullptr) return errno != 0 ? errno : EINVAL;
  const int rc = ibv_modify_qp(qp, attr, mask);
  if (temporary) ibv_destroy_qp(qp);
  return rc;
}

UROCE_EXPORT int ibv_query_xrc_rcv_qp(ibv_xrc_domain* d, uint32_t qpn, ibv_qp_attr* attr, int mask,
                                      ibv_qp_init_attr* init) noexcept {
  if (d == nullptr || attr == nullptr || init == nullptr) return EINVAL;
  bool temporary = false;
  ibv_qp* qp = handle(xrcd_of(d), qpn, &temporary);
  if (qp == nullptr) return errno != 0 ? errno : EINVAL;
  const int rc = ibv_query_qp(qp, attr, mask, init);
  if (temporary) ibv_destroy_qp(qp);
  return rc;
}
