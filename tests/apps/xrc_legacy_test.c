/* The older verbs API's XRC calls (uroce/xrc_legacy.h) through the drop-in
 * libibverbs.so.1, in C, on the two sim devices of sim2.toml: device 1
 * receives with the legacy calls only (domain, XRC SRQ, receive QP brought
 * to RTR by ibv_modify_xrc_rcv_qp, registrations), device 0 sends from an
 * IBV_QPT_XRC QP with the remote SRQ number in each work request.
 *
 * Exit 0 when every check holds; each failure is printed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <uroce/xrc_legacy.h>

static int failures;

#define CHECK(cond)                                                     \
  do {                                                                  \
    if (!(cond)) {                                                      \
      fprintf(stderr, "FAIL %s:%d: %s (errno %d)\n", __FILE__, __LINE__, \
              #cond, errno);                                            \
      ++failures;                                                       \
    }                                                                   \
  } while (0)
#define REQUIRE(cond)                                                     \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "FAIL %s:%d: %s (errno %d)\n", __FILE__, __LINE__, \
              #cond, errno);                                              \
      return 1;                                                           \
    }                                                                     \
  } while (0)

enum { kPort = 1, kGidIndex = 0, kBuf = 4096 };

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One completion from `cq` within 10 s; 0 when none came. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc) {
  const double end = now_s() + 10;
  while (now_s() < end) {
    const int n = ibv_poll_cq(cq, 1, wc);
    if (n != 0) return n;
  }
  return 0;
}

static struct ibv_ah_attr path_to(struct ibv_context *to) {
  struct ibv_ah_attr ah;
  memset(&ah, 0, sizeof ah);
  ah.is_global = 1;
  ah.port_num = kPort;
  ah.grh.hop_limit = 64;
  ah.grh.sgid_index = kGidIndex;
  ibv_query_gid(to, kPort, kGidIndex, &ah.grh.dgid);
  return ah;
}

int main(void) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  REQUIRE(list != NULL && n == 2);
  struct ibv_context *snd = ibv_open_device(list[0]);
  struct ibv_context *rcv = ibv_open_device(list[1]);
  REQUIRE(snd != NULL && rcv != NULL);

  /* Domains: anonymous, and by file (O_CREAT, O_EXCL, none without it). */
  struct ibv_xrc_domain *d = ibv_open_xrc_domain(rcv, -1, O_CREAT);
  REQUIRE(d != NULL);
  CHECK(d->context == rcv);
  char file[] = "/tmp/uroce-xrc-legacy.XXXXXX";
  const int fd = mkstemp(file);
  REQUIRE(fd >= 0);
  unlink(file);
  errno = 0;
  CHECK(ibv_open_xrc_domain(rcv, fd, 0) == NULL && errno == EINVAL);
  struct ibv_xrc_domain *fd1 = ibv_open_xrc_domain(rcv, fd, O_CREAT);
  CHECK(fd1 != NULL);
  struct ibv_xrc_domain *fd2 = ibv_open_xrc_domain(rcv, fd, 0);
  CHECK(fd2 != NULL);
  errno = 0;
  CHECK(ibv_open_xrc_domain(rcv, fd, O_CREAT | O_EXCL) == NULL && errno == EINVAL);
  CHECK(ibv_close_xrc_domain(fd2) == 0);
  CHECK(ibv_close_xrc_domain(fd1) == 0);
  close(fd);

  /* The receive side. */
  struct ibv_pd *rpd = ibv_alloc_pd(rcv);
  struct ibv_cq *rcq = ibv_create_cq(rcv, 16, NULL, NULL, 0);
  REQUIRE(rpd != NULL && rcq != NULL);
  static char rbuf[kBuf];
  struct ibv_mr *rmr = ibv_reg_mr(rpd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(rmr != NULL);
  struct ibv_srq_init_attr sa;
  memset(&sa, 0, sizeof sa);
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  struct ibv_srq *srq = ibv_create_xrc_srq(rpd, d, rcq, &sa);
  REQUIRE(srq != NULL);
  uint32_t srqn = 0;
  REQUIRE(ibv_get_srq_num(srq, &srqn) == 0);

  struct ibv_xrc_rcv_qp_init_attr ra;
  memset(&ra, 0, sizeof ra);
  CHECK(ibv_create_xrc_rcv_qp(&ra, &(uint32_t){0}) == EINVAL); /* no domain */
  ra.xrc_domain = d;
  uint32_t rqpn = 0;
  REQUIRE(ibv_create_xrc_rcv_qp(&ra, &rqpn) == 0);
  CHECK(ibv_reg_xrc_rcv_qp(d, rqpn) == 0);      /* a second registration */
  CHECK(ibv_reg_xrc_rcv_qp(d, 0xABCDEF) != 0);  /* no such QP */

  /* The send side: an XRC send QP. */
  struct ibv_pd *spd = ibv_alloc_pd(snd);
  struct ibv_cq *scq = ibv_create_cq(snd, 16, NULL, NULL, 0);
  REQUIRE(spd != NULL && scq != NULL);
  static char sbuf[kBuf] = "through the older XRC API";
  struct ibv_mr *smr = ibv_reg_mr(spd, sbuf, sizeof sbuf, IBV_ACCESS_LOCAL_WRITE);
  REQUIRE(smr != NULL);
  struct ibv_qp_init_attr qa;
  memset(&qa, 0, sizeof qa);
  qa.qp_type = IBV_QPT_XRC;
  qa.send_cq = scq;
  qa.recv_cq = scq;
  qa.cap.max_send_wr = 4;
  qa.cap.max_send_sge = 1;
  struct ibv_qp *sqp = ibv_create_qp(spd, &qa);
  REQUIRE(sqp != NULL);

  /* The receive QP to RTR only (OFED: it need not be RTS to receive). */
  struct ibv_qp_attr m;
  memset(&m, 0, sizeof m);
  m.qp_state = IBV_QPS_INIT;
  m.port_num = kPort;
  m.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  CHECK(ibv_modify_xrc_rcv_qp(d, rqpn, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  memset(&m, 0, sizeof m);
  m.qp_state = IBV_QPS_RTR;
  m.path_mtu = IBV_MTU_1024;
  m.dest_qp_num = sqp->qp_num;
  m.rq_psn = 0x200;
  m.min_rnr_timer = 12;
  m.ah_attr = path_to(snd);
  CHECK(ibv_modify_xrc_rcv_qp(d, rqpn, &m,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0);
  memset(&m, 0, sizeof m);
  m.qp_state = IBV_QPS_INIT;
  m.port_num = kPort;
  CHECK(ibv_modify_qp(sqp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
  memset(&m, 0, sizeof m);
  m.qp_state = IBV_QPS_RTR;
  m.path_mtu = IBV_MTU_1024;
  m.dest_qp_num = rqpn;
  m.rq_psn = 0x200;
  m.ah_attr = path_to(rcv);
  CHECK(ibv_modify_qp(sqp, &m, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN) == 0);
  memset(&m, 0, sizeof m);
  m.qp_state = IBV_QPS_RTS;
  m.timeout = 14;
  m.retry_cnt = 7;
  m.rnr_retry = 7;
  m.sq_psn = 0x200;
  CHECK(ibv_modify_qp(sqp, &m,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                          IBV_QP_MAX_QP_RD_ATOMIC) == 0);

  struct ibv_sge rs = {(uintptr_t)rbuf, kBuf, rmr->lkey};
  struct ibv_recv_wr rw, *rbad = NULL;
  memset(&rw, 0, sizeof rw);
  rw.wr_id = 7;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  CHECK(ibv_post_srq_recv(srq, &rw, &rbad) == 0);
  const uint32_t len = (uint32_t)strlen(sbuf) + 1;
  struct ibv_sge ss = {(uintptr_t)sbuf, len, smr->lkey};
  struct ibv_send_wr sw, *sbad = NULL;
  memset(&sw, 0, sizeof sw);
  sw.wr_id = 8;
  sw.sg_list = &ss;
  sw.num_sge = 1;
  sw.opcode = IBV_WR_SEND;
  sw.send_flags = IBV_SEND_SIGNALED;
  sw.qp_type.xrc.remote_srqn = srqn;
  CHECK(ibv_post_send(sqp, &sw, &sbad) == 0);
  struct ibv_wc wc;
  CHECK(poll_one(scq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 8);
  CHECK(poll_one(rcq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 7);
  CHECK(wc.qp_num == rqpn && wc.byte_len == len);
  CHECK(strcmp(rbuf, "through the older XRC API") == 0);

  struct ibv_qp_attr qat;
  struct ibv_qp_init_attr qia;
  CHECK(ibv_query_xrc_rcv_qp(d, rqpn, &qat, IBV_QP_STATE | IBV_QP_DEST_QPN, &qia) == 0);
  CHECK(qat.qp_state == IBV_QPS_RTR && qat.dest_qp_num == sqp->qp_num);
  CHECK(qia.qp_type == IBV_QPT_XRC_RECV);

  /* Registrations: the QP stays until the last one goes. */
  CHECK(ibv_close_xrc_domain(d) == EBUSY);
  CHECK(ibv_unreg_xrc_rcv_qp(d, rqpn) == 0);
  CHECK(ibv_query_xrc_rcv_qp(d, rqpn, &qat, IBV_QP_STATE, &qia) == 0);
  CHECK(ibv_unreg_xrc_rcv_qp(d, rqpn) == 0);
  CHECK(ibv_query_xrc_rcv_qp(d, rqpn, &qat, IBV_QP_STATE, &qia) != 0); /* gone */
  CHECK(ibv_unreg_xrc_rcv_qp(d, rqpn) == EINVAL);                      /* not registered */

  CHECK(ibv_destroy_qp(sqp) == 0);
  CHECK(ibv_destroy_srq(srq) == 0);
  CHECK(ibv_close_xrc_domain(d) == 0);
  CHECK(ibv_dereg_mr(smr) == 0 && ibv_dereg_mr(rmr) == 0);
  CHECK(ibv_destroy_cq(scq) == 0 && ibv_destroy_cq(rcq) == 0);
  CHECK(ibv_dealloc_pd(spd) == 0 && ibv_dealloc_pd(rpd) == 0);
  CHECK(ibv_close_device(snd) == 0 && ibv_close_device(rcv) == 0);
  ibv_free_device_list(list);
  if (failures == 0) printf("xrc_legacy_test: all checks passed\n");
  return failures == 0 ? 0 : 1;
}
