// The QP state machine (IBA 10.3.1, C10-11): every transition with its
// required and optional attributes per service type, and every kind of
// bad modify refused with EINVAL leaving the QP as it was.
#include "tests/common/raw_enum.hpp"
#include "tests/rnic/ctl_fixture.hpp"

namespace uroce::rnic::ctltest {
namespace {

struct TypeCase {
  const char* name;
  ibv_qp_type type;
  bool gsi;
};
const TypeCase kTypes[] = {{"RC", IBV_QPT_RC, false}, {"UC", IBV_QPT_UC, false}, {"UD", IBV_QPT_UD, false},
                           {"GSI", IBV_QPT_UD, true}};

struct Modify : Ctl {
  Qp* make(const TypeCase& t) {
    if (!t.gsi) return qp(t.type);
    Cq* c = cq();
    int err = 0;
    return rnic->create_gsi_qp(pd, init_attr(IBV_QPT_UD, c, c), &err);
  }
  // A snapshot of what query shows, to prove a refused modify changed nothing.
  static std::vector<uint8_t> snapshot(const Qp* q) {
    ibv_qp_attr a{};
    ibv_qp_init_attr i{};
    q->query(&a, ~0, &i);
    std::vector<uint8_t> v(sizeof a);
    std::memcpy(v.data(), &a, sizeof a);
    return v;
  }
  // Each required bit removed, then one bit that is not permitted added:
  // all EINVAL, the QP unchanged.
  void expect_strict(Qp* q, const ibv_qp_attr& a, int required, int permitted, const char* what) {
    const auto before = snapshot(q);
    for (int bit = 1; bit <= IBV_QP_DEST_QPN; bit <<= 1) {
      if ((required & bit) && bit != IBV_QP_STATE) {
        EXPECT_EQ(q->modify(a, required & ~bit), EINVAL) << what << ": without required bit 0x" << std::hex << bit;
        EXPECT_EQ(snapshot(q), before) << what;
      }
      if (!((required | permitted) & bit)) {
        EXPECT_EQ(q->modify(a, required | bit), EINVAL) << what << ": with extra bit 0x" << std::hex << bit;
        EXPECT_EQ(snapshot(q), before) << what;
      }
    }
    EXPECT_EQ(q->modify(a, required | (1 << 30)), EINVAL) << what << ": unknown bit";
    EXPECT_EQ(snapshot(q), before) << what;
  }
};

// The full walk of every type with exactly the required attributes; each
// step checked strictly (missing and extra bits) before it is taken.
TEST_F(Modify, EveryTransitionEveryType) {
  for (const TypeCase& t : kTypes) {
    SCOPED_TRACE(t.name);
    Qp* q = make(t);
    ASSERT_NE(q, nullptr);
    const bool ud = t.type == IBV_QPT_UD;
    const bool rc = t.type == IBV_QPT_RC && !t.gsi;
    ibv_qp_attr a{};
    a.port_num = 1;
    a.qkey = t.gsi ? kGsiQkey : 0x1234;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    a.path_mtu = IBV_MTU_2048;
    a.dest_qp_num = 0x77;
    a.rq_psn = 0x1000;
    a.sq_psn = 0x2000;
    a.ah_attr = ah_attr();
    a.max_dest_rd_atomic = 3;
    a.max_rd_atomic = 2;
    a.min_rnr_timer = 5;
    a.timeout = 8;
    a.retry_cnt = 6;
    a.rnr_retry = 7;

    // RESET -> INIT
    a.qp_state = IBV_QPS_INIT;
    int req = IBV_QP_STATE | IBV_QP_PKEY_INDEX |
              (t.gsi ? IBV_QP_QKEY : ud ? IBV_QP_PORT | IBV_QP_QKEY : IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    expect_strict(q, a, req, 0, "RESET->INIT");
    ASSERT_EQ(q->modify(a, req), 0);
    EXPECT_EQ(q->state(), IBV_QPS_INIT);

    // INIT -> INIT: all optional
    int opt = IBV_QP_PKEY_INDEX | (t.gsi ? IBV_QP_QKEY : ud ? IBV_QP_PORT | IBV_QP_QKEY : IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    expect_strict(q, a, IBV_QP_STATE, opt, "INIT->INIT");
    ASSERT_EQ(q->modify(a, IBV_QP_STATE | opt), 0);
    ASSERT_EQ(q->modify(a, opt), 0);  // no state bit: INIT->INIT too
    EXPECT_EQ(q->state(), IBV_QPS_INIT);

    // INIT -> RTR
    a.qp_state = IBV_QPS_RTR;
    req = IBV_QP_STATE;
    if (!ud) req |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (rc) req |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    opt = ud ? IBV_QP_PKEY_INDEX | IBV_QP_QKEY : IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
    expect_strict(q, a, req, opt, "INIT->RTR");
    ASSERT_EQ(q->modify(a, req), 0);
    EXPECT_EQ(q->state(), IBV_QPS_RTR);
    if (!ud) {
      EXPECT_EQ(q->attrs().rq_psn, 0x1000u);
      EXPECT_EQ(q->resp.epsn, Psn(0x1000));  // responder_reset: epsn = rq_psn
      EXPECT_EQ(q->attrs().pmtu_bytes, 2048u);
    }
    if (rc) {
      EXPECT_EQ(q->resp.results.size(), 3u);  // max_dest_rd_atomic
    }

    // RTR -> RTR is no transition
    EXPECT_EQ(q->modify(a, IBV_QP_STATE), EINVAL);
    EXPECT_EQ(q->modify(a, IBV_QP_PKEY_INDEX), EINVAL);

    // RTR -> RTS
    a.qp_state = IBV_QPS_RTS;
    req = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (rc) req |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    const int rts_opt = ud ? IBV_QP_CUR_STATE | IBV_QP_QKEY
                       : rc ? IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
                                  IBV_QP_MIN_RNR_TIMER
                            : IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE;
    a.cur_qp_state = IBV_QPS_RTR;
    a.path_mig_state = IBV_MIG_MIGRATED;
    a.alt_ah_attr = ah_attr();
    a.alt_port_num = 1;
    expect_strict(q, a, req, rts_opt, "RTR->RTS");
    ASSERT_EQ(q->modify(a, req | IBV_QP_CUR_STATE), 0);
    EXPECT_EQ(q->state(), IBV_QPS_RTS);
    EXPECT_EQ(q->attrs().sq_psn, 0x2000u);
    EXPECT_EQ(q->req.next_psn, Psn(0x2000));  // sender_reset: next_psn = sq_psn
    if (rc) {
      EXPECT_EQ(q->attrs().timeout, 8);
      EXPECT_EQ(q->attrs().retry_cnt, 6);
      EXPECT_EQ(q->attrs().max_rd_atomic, 2);
    }

    // RTS -> RTS
    a.cur_qp_state = IBV_QPS_RTS;
    expect_strict(q, a, IBV_QP_STATE, rts_opt, "RTS->RTS");
    ASSERT_EQ(q->modify(a, IBV_QP_STATE | rts_opt), 0);
    EXPECT_EQ(q->state(), IBV_QPS_RTS);

    // RTS -> SQD
    a.qp_state = IBV_QPS_SQD;
    a.en_sqd_async_notify = 0;
    expect_strict(q, a, IBV_QP_STATE, IBV_QP_EN_SQD_ASYNC_NOTIFY, "RTS->SQD");
    ASSERT_EQ(q->modify(a, IBV_QP_STATE), 0);
    EXPECT_EQ(q->state(), IBV_QPS_SQD);

    // SQD -> SQD
    const int sqd_opt = ud ? IBV_QP_PKEY_INDEX | IBV_QP_QKEY
                        : rc ? IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                   IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_ALT_PATH |
                                   IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_MIN_RNR_TIMER |
                                   IBV_QP_PATH_MIG_STATE
                             : IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX |
                                   IBV_QP_PATH_MIG_STATE;
    expect_strict(q, a, IBV_QP_STATE, sqd_opt, "SQD->SQD");
    ASSERT_EQ(q->modify(a, IBV_QP_STATE | sqd_opt), 0);
    EXPECT_EQ(q->state(), IBV_QPS_SQD);

    // SQD -> RTS
    a.qp_state = IBV_QPS_RTS;
    a.cur_qp_state = IBV_QPS_SQD;
    expect_strict(q, a, IBV_QP_STATE, rts_opt, "SQD->RTS");
    ASSERT_EQ(q->modify(a, IBV_QP_STATE | IBV_QP_CUR_STATE), 0);
    EXPECT_EQ(q->state(), IBV_QPS_RTS);

    // RTS -> ERR -> ERR -> RESET -> ERR -> RESET
    EXPECT_EQ(modify_state(q, IBV_QPS_ERR), 0);
    EXPECT_EQ(q->state(), IBV_QPS_ERR);
    a.qp_state = IBV_QPS_ERR;
    expect_strict(q, a, IBV_QP_STATE, 0, "ERR->ERR");
    EXPECT_EQ(modify_state(q, IBV_QPS_ERR), 0);
    EXPECT_EQ(modify_state(q, IBV_QPS_RTS), EINVAL);
    EXPECT_EQ(modify_state(q, IBV_QPS_RESET), 0);
    EXPECT_EQ(q->state(), IBV_QPS_RESET);
    EXPECT_EQ(modify_state(q, IBV_QPS_ERR), 0);
    EXPECT_EQ(modify_state(q, IBV_QPS_RESET), 0);
    EXPECT_EQ(modify_state(q, IBV_QPS_RESET), 0);  // RESET -> RESET
    // RESET skips nothing: RTR and RTS are not reachable from it.
    EXPECT_EQ(modify_state(q, IBV_QPS_RTR), EINVAL);
    EXPECT_EQ(modify_state(q, IBV_QPS_RTS), EINVAL);
    EXPECT_EQ(modify_state(q, IBV_QPS_SQD), EINVAL);
    EXPECT_EQ(modify_state(q, IBV_QPS_SQE), EINVAL);  // only the QP itself enters SQE
    EXPECT_EQ(q->state(), IBV_QPS_RESET);
  }
}

TEST_F(Modify, SqeToRtsForUdAndUc) {
  for (const TypeCase& t : {kTypes[1], kTypes[2]}) {
    SCOPED_TRACE(t.name);
    Qp* q = make(t);
    ready(q);
    node->engine->run_sync([&] { q->send_error(); });  // a send failed (IBA 10.3.1.6)
    EXPECT_EQ(q->state(), IBV_QPS_SQE);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.cur_qp_state = IBV_QPS_RTS;  // a stale view
    EXPECT_EQ(q->modify(a, IBV_QP_STATE | IBV_QP_CUR_STATE), EINVAL);
    EXPECT_EQ(q->state(), IBV_QPS_SQE);
    a.cur_qp_state = IBV_QPS_SQE;
    EXPECT_EQ(q->modify(a, IBV_QP_STATE | IBV_QP_CUR_STATE), 0);
    EXPECT_EQ(q->state(), IBV_QPS_RTS);
  }
  Qp* rc = qp(IBV_QPT_RC);
  ready(rc);
  node->engine->run_sync([&] { rc->send_error(); });
  EXPECT_EQ(rc->state(), IBV_QPS_ERR);  // RC: the whole QP
}

TEST_F(Modify, BadValuesLeaveTheQpUnchanged) {
  Qp* q = qp(IBV_QPT_RC);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  const int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  a.pkey_index = 1;  // one P_Key only
  EXPECT_EQ(q->modify(a, init_mask), EINVAL);
  a.pkey_index = 0;
  a.port_num = 2;
  EXPECT_EQ(q->modify(a, init_mask), EINVAL);
  a.port_num = 0;
  EXPECT_EQ(q->modify(a, init_mask), EINVAL);
  a.port_num = 1;
  uroce::testing::set_raw(a.qp_state, 9u);
  EXPECT_EQ(q->modify(a, init_mask), EINVAL);
  EXPECT_EQ(q->state(), IBV_QPS_RESET);
  ASSERT_EQ(to_init(q), 0);

  auto rtr = [&] {
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RTR;
    r.path_mtu = IBV_MTU_1024;
    r.dest_qp_num = 5;
    r.rq_psn = 0x33;
    r.ah_attr = ah_attr();
    r.max_dest_rd_atomic = 1;
    r.min_rnr_timer = 1;
    return r;
  };
  const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  auto refuse = [&](const char* what, auto&& change) {
    ibv_qp_attr r = rtr();
    change(r);
    ibv_qp_attr before{};
    q->query(&before, ~0, nullptr);
    EXPECT_EQ(q->modify(r, rtr_mask), EINVAL) << what;
    ibv_qp_attr after{};
    q->query(&after, ~0, nullptr);
    EXPECT_EQ(std::memcmp(&before, &after, sizeof before), 0) << what;
    EXPECT_EQ(q->state(), IBV_QPS_INIT) << what;
  };
  refuse("path_mtu 0", [](ibv_qp_attr& r) { uroce::testing::set_raw(r.path_mtu, 0u); });
  refuse("path_mtu 6", [](ibv_qp_attr& r) { uroce::testing::set_raw(r.path_mtu, 6u); });
  refuse("max_dest_rd_atomic", [](ibv_qp_attr& r) { r.max_dest_rd_atomic = kMaxQpRdAtom + 1; });
  refuse("min_rnr_timer 32", [](ibv_qp_attr& r) { r.min_rnr_timer = 32; });
  refuse("dest_qp_num 25 bits", [](ibv_qp_attr& r) { r.dest_qp_num = 1u << 24; });
  refuse("not global", [](ibv_qp_attr& r) { r.ah_attr.is_global = 0; });
  refuse("sgid_index", [](ibv_qp_attr& r) { r.ah_attr.grh.sgid_index = 7; });
  refuse("ah port", [](ibv_qp_attr& r) { r.ah_attr.port_num = 0; });
  refuse("family", [](ibv_qp_attr& r) { std::memcpy(r.ah_attr.grh.dgid.raw, kPeerUla.data(), 16); });
  ibv_qp_attr r = rtr();
  ASSERT_EQ(q->modify(r, rtr_mask), 0);

  ibv_qp_attr s{};
  s.qp_state = IBV_QPS_RTS;
  s.sq_psn = 0x1234567;  // 24 bits kept
  s.timeout = 14;
  s.retry_cnt = 7;
  s.rnr_retry = 7;
  s.max_rd_atomic = 1;
  const int rts_mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                       IBV_QP_MAX_QP_RD_ATOMIC;
  for (auto [what, field, bad] : {std::tuple{"timeout", &ibv_qp_attr::timeout, 32},
                                  std::tuple{"retry_cnt", &ibv_qp_attr::retry_cnt, 8},
                                  std::tuple{"rnr_retry", &ibv_qp_attr::rnr_retry, 8},
                                  std::tuple{"max_rd_atomic", &ibv_qp_attr::max_rd_atomic, 129}}) {
    ibv_qp_attr x = s;
    x.*field = static_cast<uint8_t>(bad);
    EXPECT_EQ(q->modify(x, rts_mask), EINVAL) << what;
    EXPECT_EQ(q->state(), IBV_QPS_RTR) << what;
  }
  ibv_qp_attr x = s;
  x.cur_qp_state = IBV_QPS_INIT;  // mismatch
  EXPECT_EQ(q->modify(x, rts_mask | IBV_QP_CUR_STATE), EINVAL);
  x.cur_qp_state = IBV_QPS_RTR;
  EXPECT_EQ(q->modify(x, rts_mask | IBV_QP_CUR_STATE), 0);
  EXPECT_EQ(q->attrs().sq_psn, 0x234567u);

  // query reports what was set.
  ibv_qp_attr got{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(q->query(&got, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(got.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(got.path_mtu, IBV_MTU_1024);
  EXPECT_EQ(got.dest_qp_num, 5u);
  EXPECT_EQ(got.rq_psn, 0x33u);
  EXPECT_EQ(got.timeout, 14);
  EXPECT_EQ(got.port_num, 1);
  EXPECT_EQ(got.ah_attr.grh.sgid_index, ah_attr().grh.sgid_index);
  EXPECT_EQ(init.qp_type, IBV_QPT_RC);
  EXPECT_EQ(init.cap.max_send_wr, 8u);
}

TEST_F(Modify, SqDrainedEvent) {
  Qp* q = qp(IBV_QPT_RC);
  ready(q);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_SQD;
  a.en_sqd_async_notify = 1;
  ASSERT_EQ(q->modify(a, IBV_QP_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY), 0);
  AsyncEvent ev;
  ASSERT_TRUE(next_event(&ev));  // nothing outstanding: drained at once
  EXPECT_EQ(ev.type, IBV_EVENT_SQ_DRAINED);
  EXPECT_EQ(ev.qp, q);
  EXPECT_FALSE(next_event(&ev));  // once
  ibv_qp_attr got{};
  q->query(&got, 0, nullptr);
  EXPECT_EQ(got.sq_draining, 0);
  // Without the notify bit: no event.
  ASSERT_EQ(modify_state(q, IBV_QPS_RTS), 0);
  ASSERT_EQ(modify_state(q, IBV_QPS_SQD), 0);
  EXPECT_FALSE(next_event(&ev));
}

TEST_F(Modify, ErrorFlushesInOrder) {
  Cq* scq = cq();
  Cq* rcq = cq();
  Qp* q = qp(IBV_QPT_RC, scq, rcq);
  ready(q);
  std::vector<uint8_t> buf(64);
  int err = 0;
  Mr* mr = rnic->reg_mr(pd, buf.data(), buf.size(), reinterpret_cast<uint64_t>(buf.data()), IBV_ACCESS_LOCAL_WRITE,
                        &err);
  ASSERT_NE(mr, nullptr);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), 16, mr->lkey.value()};
  for (uint64_t id = 1; id <= 3; ++id) {
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.opcode = IBV_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = id == 2 ? 0 : IBV_SEND_SIGNALED;  // flushes complete whatever the flags
    const ibv_send_wr* bad = nullptr;
    ASSERT_EQ(q->post_send(&wr, &bad), 0);
  }
  for (uint64_t id = 10; id <= 11; ++id) {
    ibv_recv_wr wr{};
    wr.wr_id = id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    const ibv_recv_wr* bad = nullptr;
    ASSERT_EQ(q->post_recv(&wr, &bad), 0);
  }
  poll();
  ASSERT_EQ(modify_state(q, IBV_QPS_ERR), 0);
  auto s = drain(scq);
  ASSERT_EQ(s.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(s[i].wr_id, i + 1);
    EXPECT_EQ(s[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(s[i].qp_num, q->qpn().value());
  }
  auto r = drain(rcq);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].wr_id, 10u);
  EXPECT_EQ(r[1].wr_id, 11u);
  EXPECT_EQ(r[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(r[1].qp_num, q->qpn().value());

  // Posts in ERR are accepted and flushed.
  ibv_send_wr wr{};
  wr.wr_id = 7;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const ibv_send_wr* bad = nullptr;
  ASSERT_EQ(q->post_send(&wr, &bad), 0);
  ibv_recv_wr rw{};
  rw.wr_id = 12;
  const ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(q->post_recv(&rw, &rbad), 0);
  poll();
  s = drain(scq);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].wr_id, 7u);
  EXPECT_EQ(s[0].status, IBV_WC_WR_FLUSH_ERR);
  r = drain(rcq);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wr_id, 12u);

  // ->RESET empties the queues without completions.
  ASSERT_EQ(modify_state(q, IBV_QPS_RESET), 0);
  EXPECT_EQ(q->sq.head(), q->sq.tail());
  EXPECT_EQ(q->rq.size(), 0u);
  poll();
  EXPECT_TRUE(drain(scq).empty());
}

TEST_F(Modify, SrqQpToErrorRaisesLastWqeReached) {
  int err = 0;
  ibv_srq_init_attr si{};
  si.attr.max_wr = 4;
  si.attr.max_sge = 1;
  Srq* srq = rnic->create_srq(pd, si, &err);
  ASSERT_NE(srq, nullptr);
  std::vector<uint8_t> buf(64);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), 16, 0};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  const ibv_recv_wr* bad = nullptr;
  ASSERT_EQ(srq->post_recv(&wr, &bad), 0);
  Cq* c = cq();
  Qp* q = qp(IBV_QPT_RC, c, c, srq);
  ready(q);
  ASSERT_EQ(modify_state(q, IBV_QPS_ERR), 0);
  AsyncEvent ev;
  ASSERT_TRUE(next_event(&ev));
  EXPECT_EQ(ev.type, IBV_EVENT_QP_LAST_WQE_REACHED);
  EXPECT_EQ(ev.qp, q);
  EXPECT_EQ(srq->rq().size(), 1u);  // the SRQ's WQEs are not flushed
  EXPECT_TRUE(drain(c).empty());
}

TEST_F(Modify, FatalErrorRaisesQpFatal) {
  Qp* q = qp(IBV_QPT_RC);
  ready(q);
  node->engine->run_sync([&] { q->to_error(true); });
  AsyncEvent ev;
  ASSERT_TRUE(next_event(&ev));
  EXPECT_EQ(ev.type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(ev.qp, q);
  EXPECT_EQ(q->state(), IBV_QPS_ERR);
}

}  // namespace
}  // namespace uroce::rnic::ctltest
