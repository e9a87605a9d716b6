/* uroce: the XRC calls of the older verbs API (OFED 1.5's libibverbs, named
 * in verbs(7)), for programs written against it.  uroce's libibverbs.so.1
 * exports them (version node UROCE_XRC_LEGACY_1) and maps them onto
 * rdma-core's XRC verbs, which it implements too:
 *
 *   ibv_open_xrc_domain    ibv_open_xrcd: a domain per file (fd, O_CREAT,
 *                          O_EXCL) or anonymous (fd -1)
 *   ibv_create_xrc_srq     ibv_create_srq_ex with IBV_SRQT_XRC; the SRQ's
 *                          number (OFED's srq->xrc_srq_num) is
 *                          ibv_get_srq_num's
 *   ibv_create_xrc_rcv_qp  ibv_create_qp_ex with IBV_QPT_XRC_RECV; the
 *                          caller is registered with the QP
 *   ibv_reg_xrc_rcv_qp /   one registration more / less (ibv_open_qp /
 *   ibv_unreg_xrc_rcv_qp   ibv_destroy_qp of a handle); the QP goes with
 *                          the last
 *   ibv_modify_xrc_rcv_qp, ibv_modify_qp / ibv_query_qp on the receive QP
 *   ibv_query_xrc_rcv_qp   named by its domain and number
 *
 * The send side is rdma-core's: an IBV_QPT_XRC_SEND QP (IBV_QPT_XRC below),
 * whose work requests name the remote SRQ in wr.qp_type.xrc.remote_srqn
 * (where OFED's ibv_send_wr had xrc_remote_srq_num).  Every call returns 0
 * or a positive errno value, or NULL with errno set, as OFED documented. */
#ifndef UROCE_XRC_LEGACY_H
#define UROCE_XRC_LEGACY_H

#include <infiniband/verbs.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#define UROCE_XRC_NOTHROW noexcept
#else
#define UROCE_XRC_NOTHROW
#endif

/* A domain handle.  It is the library's struct ibv_xrcd, whose first
 * member is the context, as OFED's struct ibv_xrc_domain began. */
struct ibv_xrc_domain {
	struct ibv_context *context;
};

/* OFED 1.5's ibv_qp_init_attr ended with the domain; rdma-core's has no
 * such field, so ibv_create_xrc_rcv_qp takes the two together (the domain
 * at the offset OFED's layout put it).  Only the domain is read. */
struct ibv_xrc_rcv_qp_init_attr {
	struct ibv_qp_init_attr attr;
	struct ibv_xrc_domain *xrc_domain;
};

/* OFED's QP type for the send side of XRC. */
#define IBV_QPT_XRC IBV_QPT_XRC_SEND

struct ibv_xrc_domain *ibv_open_xrc_domain(struct ibv_context *context, int fd, int oflag) UROCE_XRC_NOTHROW;
int ibv_close_xrc_domain(struct ibv_xrc_domain *d) UROCE_XRC_NOTHROW;
struct ibv_srq *ibv_create_xrc_srq(struct ibv_pd *pd, struct ibv_xrc_domain *xrc_domain, struct ibv_cq *xrc_cq,
				   struct ibv_srq_init_attr *srq_init_attr) UROCE_XRC_NOTHROW;
int ibv_create_xrc_rcv_qp(struct ibv_xrc_rcv_qp_init_attr *init_attr, uint32_t *xrc_rcv_qpn) UROCE_XRC_NOTHROW;
int ibv_modify_xrc_rcv_qp(struct ibv_xrc_domain *xrc_domain, uint32_t xrc_qp_num, struct ibv_qp_attr *attr,
			  int attr_mask) UROCE_XRC_NOTHROW;
int ibv_query_xrc_rcv_qp(struct ibv_xrc_domain *xrc_domain, uint32_t xrc_qp_num, struct ibv_qp_attr *attr,
			 int attr_mask, struct ibv_qp_init_attr *init_attr) UROCE_XRC_NOTHROW;
int ibv_reg_xrc_rcv_qp(struct ibv_xrc_domain *xrc_domain, uint32_t xrc_qp_num) UROCE_XRC_NOTHROW;
int ibv_unreg_xrc_rcv_qp(struct ibv_xrc_domain *xrc_domain, uint32_t xrc_qp_num) UROCE_XRC_NOTHROW;

#ifdef __cplusplus
}
#endif

#endif /* UROCE_XRC_LEGACY_H */
