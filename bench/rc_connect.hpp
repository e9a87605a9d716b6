// One RC QP of a bench program to RTS against `dest_qpn` at `dgid`, PSNs 0
// and retries as perftest's defaults (timeout 14, retry and RNR retry 7);
// path MTU, access, READ/atomic depth and source GID as RcPath says (by
// default MTU 1024, local write, one READ/atomic in flight each way, GID 0).
// 0 or the failing modify's errno.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "transport/rnic/qp.hpp"

namespace uroce::bench {

struct RcPath {
  ibv_mtu mtu = IBV_MTU_1024;
  int access = IBV_ACCESS_LOCAL_WRITE;
  uint8_t rd_atomic = 1;  // max_rd_atomic and max_dest_rd_atomic
  uint8_t sgid_index = 0;
};

inline int connect_rc(rnic::Qp& qp, uint32_t dest_qpn, const ibv_gid& dgid, const RcPath& p = {}) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = p.access;
  if (int err = qp.modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) return err;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = p.mtu;
  a.dest_qp_num = dest_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = p.rd_atomic;
  a.min_rnr_timer = 1;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.dgid = dgid;
  a.ah_attr.grh.hop_limit = 64;
  a.ah_attr.grh.sgid_index = p.sgid_index;
  if (int err = qp.modify(a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return err;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = p.rd_atomic;
  return qp.modify(a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC);
}

}  // namespace uroce::bench
