// qp: the QP's control path — creation state, the modify state machine
// (IBA 10.3, ib_modify_qp_is_ok's table), query, post_send / post_recv
// validation — and its engine-side bookkeeping: the error state and
// flushing (IBA 10.3.1.5-7), retiring send WQEs into CQEs, SQ drain.
#include "lib/util/log.hpp"
#include "lib/util/stamps.hpp"
#include "transport/rnic/qp.hpp"

#include <algorithm>

#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <type_traits>

#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "transport/rnic/rnic.hpp"
#include "transport/rnic/verbs_newer.hpp"
#include "transport/rnic/wr.hpp"

namespace uroce::rnic {
namespace {

// ---- the modify table --------------------------------------------------------------
// IBA 10.3.1 (QP state transitions) with the required and optional
// attributes of each transition per service type (IBA 11.2.5.2 and the
// Linux core's ib_modify_qp_is_ok table, which libibverbs applications
// are written against).  C10-11: a modify with a missing required or a
// not-permitted attribute fails and leaves the QP unchanged.

// XRC's two halves (annex A14) have columns of their own, as in the Linux
// core's table: the send QP (INI) requests like RC and takes no responder
// attributes; the receive QP (TGT) responds like RC and needs only a
// timeout and a PSN to be RTS.

struct Transition {
  bool valid = false;
  std::array<int, kNumQpClasses> req{};
  std::array<int, kNumQpClasses> opt{};
};

constexpr int kStates = IBV_QPS_ERR + 1;
using Table = std::array<std::array<Transition, kStates>, kStates>;

constexpr int kRtsOptRC = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
                          IBV_QP_MIN_RNR_TIMER;
constexpr int kRtsOptUC = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE;
constexpr int kRtsOptUD = IBV_QP_CUR_STATE | IBV_QP_QKEY;

constexpr Table make_table() {
  Table t{};
  // any -> RESET, any -> ERR (IBA 10.3.1.1 / 10.3.1.7): nothing but the state.
  for (int s = 0; s < kStates; ++s) {
    t[s][IBV_QPS_RESET].valid = true;
    t[s][IBV_QPS_ERR].valid = true;
  }
  Transition& reset_init = t[IBV_QPS_RESET][IBV_QPS_INIT];
  reset_init.valid = true;
  constexpr int kInitConnected = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  reset_init.req = {kInitConnected, kInitConnected, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
                    IBV_QP_PKEY_INDEX | IBV_QP_QKEY, kInitConnected, kInitConnected};

  Transition& init_init = t[IBV_QPS_INIT][IBV_QPS_INIT];
  init_init.valid = true;
  init_init.opt = {kInitConnected, kInitConnected, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY,
                   IBV_QP_PKEY_INDEX | IBV_QP_QKEY, kInitConnected, kInitConnected};

  Transition& init_rtr = t[IBV_QPS_INIT][IBV_QPS_RTR];
  init_rtr.valid = true;
  constexpr int kRtrPath = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
  constexpr int kRtrResponder = kRtrPath | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  constexpr int kRtrOpt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
  init_rtr.req = {kRtrResponder, kRtrPath, 0, 0, kRtrPath, kRtrResponder};
  init_rtr.opt = {kRtrOpt, kRtrOpt, IBV_QP_PKEY_INDEX | IBV_QP_QKEY, IBV_QP_PKEY_INDEX | IBV_QP_QKEY,
                  kRtrOpt | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER, kRtrOpt};

  Transition& rtr_rts = t[IBV_QPS_RTR][IBV_QPS_RTS];
  rtr_rts.valid = true;
  constexpr int kRtsRequester =
      IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
  rtr_rts.req = {kRtsRequester, IBV_QP_SQ_PSN, IBV_QP_SQ_PSN, IBV_QP_SQ_PSN, kRtsRequester,
                 IBV_QP_TIMEOUT | IBV_QP_SQ_PSN};
  rtr_rts.opt = {kRtsOptRC, kRtsOptUC, kRtsOptUD, kRtsOptUD, kRtsOptUC,
                 kRtsOptRC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC};

  Transition& rts_rts = t[IBV_QPS_RTS][IBV_QPS_RTS];
  rts_rts.valid = true;
  rts_rts.opt = {kRtsOptRC, kRtsOptUC, kRtsOptUD, kRtsOptUD, kRtsOptUC, kRtsOptRC};

  Transition& rts_sqd = t[IBV_QPS_RTS][IBV_QPS_SQD];
  rts_sqd.valid = true;
  rts_sqd.opt = {IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_EN_SQD_ASYNC_NOTIFY,
                 IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_EN_SQD_ASYNC_NOTIFY, IBV_QP_EN_SQD_ASYNC_NOTIFY};

  Transition& sqd_rts = t[IBV_QPS_SQD][IBV_QPS_RTS];
  sqd_rts.valid = true;
  sqd_rts.opt = {kRtsOptRC, kRtsOptUC, kRtsOptUD, kRtsOptUD, kRtsOptUC, kRtsOptRC};

  Transition& sqd_sqd = t[IBV_QPS_SQD][IBV_QPS_SQD];
  sqd_sqd.valid = true;
  constexpr int kSqdRC = IBV_QP_PORT | IBV_QP_AV | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                         IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_ALT_PATH |
                         IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_MIN_RNR_TIMER | IBV_QP_PATH_MIG_STATE;
  sqd_sqd.opt = {kSqdRC,
                 IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PATH_MIG_STATE,
                 IBV_QP_PKEY_INDEX | IBV_QP_QKEY, IBV_QP_PKEY_INDEX | IBV_QP_QKEY, kSqdRC, kSqdRC};

  // SQE -> RTS (IBA 10.3.1.6): UD and UC only (RC never enters SQE).
  Transition& sqe_rts = t[IBV_QPS_SQE][IBV_QPS_RTS];
  sqe_rts.valid = true;
  sqe_rts.opt = {0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS, kRtsOptUD, kRtsOptUD, 0, 0};
  return t;
}

constexpr Table kTable = make_table();

constexpr int kAllMaskBits = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY | IBV_QP_ACCESS_FLAGS |
                             IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY | IBV_QP_AV | IBV_QP_PATH_MTU |
                             IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN |
                             IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_ALT_PATH | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN |
                             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PATH_MIG_STATE | IBV_QP_CAP | IBV_QP_DEST_QPN;

QpClass type_idx(const Qp& qp) noexcept { return qp_class(qp.type(), qp.is_gsi()); }

uint32_t mtu_bytes(ibv_mtu m) noexcept { return 128u << static_cast<unsigned>(m); }  // 1: 256 ... 5: 4096

// Whether this process may set a controlled Q_Key (the most significant
// bit set, IBA 10.2.5: controlled Q_Keys are for privileged consumers).
// Linux's uverbs asks for CAP_NET_RAW (since 6.5); so do we.
bool may_use_controlled_qkey() noexcept {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[CAP_NET_RAW / 32].effective & (1u << (CAP_NET_RAW % 32))) != 0;
}

constexpr uint32_t kControlledQkey = 0x80000000u;

// A FLUSH work request (qp.hpp, post_send): why it is refused, or nullptr
// and its FETH word (IBA 1.5 FETH, as rxe lays it out: the selectivity
// level in bits 5-4, the placement type in bits 3-0).  It carries no data;
// its range is one message's worth at most (so that the RETH's 32-bit DMA
// length holds it); the placement type is GLOBAL and/or PERSISTENT, the
// level RANGE or MR.
const char* flush_refusal(const ibv_send_wr& wr, uint32_t* feth) noexcept {
  if (wr.num_sge != 0 || (wr.send_flags & IBV_SEND_INLINE) != 0) return "FLUSH with data";
  if (wr.wr.atomic.compare_add > kMaxMsgSize) return "FLUSH range above max_msg_sz";
  const uint64_t type = wr.wr.atomic.swap & 0xff;
  const uint64_t level = wr.wr.atomic.swap >> 8;
  // Each must fit its field before the word says whether it is known.
  const uint32_t word = wire::make_feth(static_cast<uint32_t>(type), static_cast<uint32_t>(level));
  if (type > wire::kFethPlacementMask || level > wire::kFethLevelMask || !wire::feth_known(word))
    return "FLUSH placement type or selectivity level";
  *feth = word;
  return nullptr;
}

// The integer an application left in an enum field.  An application may
// put any value there; loading it as the enum type when it is none of the
// enumerators is undefined behaviour, so the bytes are read as the
// underlying integer and range-checked before they become the enum.
template <class E>
long long raw(const E& e) noexcept {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &e, sizeof v);
  return static_cast<long long>(v);
}


}  // namespace

// ---- SendQueue ----------------------------------------------------------------------

struct SendQueue::Layout {
  RingLayout l;  // first: the offsets below are taken from it in order
  size_t slots, ring, sges, inl;
  Layout(uint32_t capacity, uint32_t max_sge, uint32_t max_inline) noexcept
      : slots(std::bit_ceil(std::max<uint32_t>(capacity, 1))),
        ring(l.add<SendWqe>(slots)),
        sges(l.add<ibv_sge>(slots * max_sge)),
        inl(l.add<uint8_t>(slots * max_inline)) {}
};

size_t SendQueue::bytes(uint32_t capacity, uint32_t max_sge, uint32_t max_inline) noexcept {
  return Layout(capacity, max_sge, max_inline).l.bytes();
}

void SendQueue::init(uint32_t capacity, uint32_t max_sge, uint32_t max_inline, RingBlock&& mem) noexcept {
  const Layout lay(capacity, max_sge, max_inline);
  mem_ = static_cast<RingBlock&&>(mem);
  capacity_ = capacity;
  ring_ = RingLayout::construct<SendWqe>(mem_, lay.ring, lay.slots);
  sges_ = RingLayout::construct<ibv_sge>(mem_, lay.sges, lay.slots * max_sge);
  inline_bytes_ = RingLayout::construct<uint8_t>(mem_, lay.inl, lay.slots * max_inline);
  for (size_t i = 0; i < ring_.size(); ++i) {
    ring_[i].sge = max_sge != 0 ? &sges_[i * max_sge] : nullptr;
    ring_[i].inline_data = max_inline != 0 ? &inline_bytes_[i * max_inline] : nullptr;
  }
  head_.store(0, std::memory_order_relaxed);
  tail_.store(0, std::memory_order_release);
}

bool SendQueue::full() const noexcept {
  return tail_.load(std::memory_order_relaxed) - head_.load(std::memory_order_acquire) >= capacity_;
}

void SendQueue::clear() noexcept {
  head_.store(0, std::memory_order_relaxed);
  tail_.store(0, std::memory_order_release);
}

// ---- Qp ----------------------------------------------------------------------------------

ibv_qp_cap Qp::effective_caps(const ibv_qp_init_attr& init) noexcept {
  ibv_qp_cap cap = init.cap;
  if (init.qp_type == IBV_QPT_XRC_RECV) return ibv_qp_cap{};  // no queue of its own (annex A14)
  if (init.srq != nullptr || init.qp_type == IBV_QPT_XRC_SEND) {
    cap.max_recv_wr = 0;
    cap.max_recv_sge = 0;
  }
  // Inline data: at least what the send SGEs would occupy in a WQE, as rxe
  // sizes it (rxe_init_sq) and reports it back; programs count on it
  // (rdma_xclient sends 16 bytes inline on a QP asked for 0 and 1 SGE).
  cap.max_inline_data = std::min(
      kMaxInlineData, std::max(cap.max_inline_data, cap.max_send_sge * static_cast<uint32_t>(sizeof(ibv_sge))));
  return cap;
}

Qp::Qp(Rnic& rnic, Pd* pd, Qpn qpn, const ibv_qp_init_attr& init, Rings&& rings, Xrcd* xrcd)
    : rnic_(rnic),
      engine_(&rnic.engine_for(qpn)),
      pd_(pd),
      xrcd_(xrcd),
      qpn_(qpn),
      type_(init.qp_type),
      send_cq_(init.qp_type == IBV_QPT_XRC_RECV ? nullptr : reinterpret_cast<Cq*>(init.send_cq)),
      recv_cq_(init.qp_type == IBV_QPT_XRC_SEND || init.qp_type == IBV_QPT_XRC_RECV
                   ? nullptr
                   : reinterpret_cast<Cq*>(init.recv_cq)),
      srq_(init.qp_type == IBV_QPT_RC || init.qp_type == IBV_QPT_UC || init.qp_type == IBV_QPT_UD
               ? reinterpret_cast<Srq*>(init.srq)
               : nullptr),
      sq_sig_all_(init.sq_sig_all != 0),
      cap_(effective_caps(init)) {
  context = init.qp_context;
  // The SRQ WQE the responder holds (responder.cpp take_wqe): an XRC
  // receive QP's may come from any SRQ of its domain.
  if (srq_ != nullptr) resp.srq_sges.resize(srq_->rq().max_sge());
  if (type_ == IBV_QPT_XRC_RECV) resp.srq_sges.resize(kMaxSrqSge);
  sq.init(cap_.max_send_wr, cap_.max_send_sge, cap_.max_inline_data, static_cast<RingBlock&&>(rings.send));
  rq.init(cap_.max_recv_wr, cap_.max_recv_sge, static_cast<RingBlock&&>(rings.recv));
  // UDP source port per QP (A17.4.3 leaves it free; 0xC000-0xFFFF as rxe,
  // spread by a multiplicative hash of the QPN so that ECMP spreads QPs).
  attrs_.sport = static_cast<uint16_t>(0xC000u | (((qpn.value() * 0x61C88647u) >> 18) & 0x3FFFu));
  if (is_gsi()) attrs_.qkey = kGsiQkey;  // IBA 13.4.6.1: QP1's Q_Key is fixed
  // Each role's timers belong to this QP for its whole life.
  requester_bind(*this);
  completer_bind(*this);
  responder_bind(*this);
}

Qp::~Qp() = default;

int Qp::check_modify(const ibv_qp_attr& attr, int mask) const {
  const ibv_qp_state cur = state();
  if (mask & ~kAllMaskBits) return EINVAL;                             // an unknown bit
  if ((mask & IBV_QP_STATE) && (raw(attr.qp_state) < IBV_QPS_RESET || raw(attr.qp_state) > IBV_QPS_ERR))
    return EINVAL;
  if ((mask & IBV_QP_CUR_STATE) && raw(attr.cur_qp_state) != cur) return EINVAL;  // the caller's view is stale
  const ibv_qp_state next = (mask & IBV_QP_STATE) ? attr.qp_state : cur;
  const Transition& tr = kTable[cur][next];
  if (!tr.valid) return EINVAL;
  const QpClass t = type_idx(*this);
  const int required = tr.req[t];
  const int optional = tr.opt[t];
  if ((mask & required) != required) return EINVAL;                    // a required attribute is missing
  if (mask & ~(required | optional | IBV_QP_STATE)) return EINVAL;     // an attribute not permitted here

  // The values (IBA 11.2.5.2 / ibv_modify_qp(3)).
  if ((mask & IBV_QP_PKEY_INDEX) && attr.pkey_index >= kMaxPkeys) return EINVAL;
  if ((mask & IBV_QP_PORT) && attr.port_num != kPortNum) return EINVAL;
  if ((mask & IBV_QP_PATH_MTU) && (raw(attr.path_mtu) < IBV_MTU_256 || raw(attr.path_mtu) > IBV_MTU_4096))
    return EINVAL;
  if ((mask & IBV_QP_TIMEOUT) && attr.timeout > 31) return EINVAL;         // 5 bits (IBA 9.7.6.1.3)
  if ((mask & IBV_QP_RETRY_CNT) && attr.retry_cnt > 7) return EINVAL;      // 3 bits
  if ((mask & IBV_QP_RNR_RETRY) && attr.rnr_retry > 7) return EINVAL;      // 3 bits, 7 = infinite
  if ((mask & IBV_QP_MIN_RNR_TIMER) && attr.min_rnr_timer > 31) return EINVAL;  // IBA table 45
  if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr.max_rd_atomic > kMaxQpRdAtom) return EINVAL;
  if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr.max_dest_rd_atomic > kMaxQpRdAtom) return EINVAL;
  if ((mask & IBV_QP_DEST_QPN) && attr.dest_qp_num > Qpn::kMask) return EINVAL;
  if ((mask & IBV_QP_PATH_MIG_STATE) && raw(attr.path_mig_state) > IBV_MIG_ARMED) return EINVAL;
  if ((mask & IBV_QP_QKEY) && !is_gsi() && (attr.qkey & kControlledQkey) != 0 && !may_use_controlled_qkey())
    return EPERM;
  AhAttr path;
  if ((mask & IBV_QP_AV) && rnic_.resolve_path(attr.ah_attr, &path) != 0) return EINVAL;
  if (mask & IBV_QP_ALT_PATH) {
    if (attr.alt_port_num != kPortNum || attr.alt_pkey_index >= kMaxPkeys || attr.alt_timeout > 31) return EINVAL;
    if (rnic_.resolve_path(attr.alt_ah_attr, &path) != 0) return EINVAL;
  }
  return 0;
}

void Qp::apply_modify(const ibv_qp_attr& attr, int mask) {
  transport::Engine& engine = *engine_;  // the QP's lcore (the control path holds the device exclusive)
  UROCE_ASSERT_ENGINE(engine);
  const ibv_qp_state cur = state();
  const ibv_qp_state next = (mask & IBV_QP_STATE) ? attr.qp_state : cur;
  if (next != cur)
    UROCE_TRACE(TraceCat::Qp, "qp 0x%06x: %s -> %s (ibv_modify_qp)", qpn_.value(), qp_state_name(cur),
                qp_state_name(next));

  if (mask & IBV_QP_PKEY_INDEX) attrs_.pkey_index = attr.pkey_index;
  if ((mask & IBV_QP_QKEY) && !is_gsi()) attrs_.qkey = attr.qkey;
  if (mask & IBV_QP_AV) rnic_.resolve_path(attr.ah_attr, &attrs_.path);
  if (mask & IBV_QP_PATH_MTU) {
    attrs_.path_mtu = attr.path_mtu;
    attrs_.pmtu_bytes = mtu_bytes(attr.path_mtu);
  }
  if (mask & IBV_QP_TIMEOUT) attrs_.timeout = attr.timeout;
  if (mask & IBV_QP_RETRY_CNT) attrs_.retry_cnt = attr.retry_cnt;
  if (mask & IBV_QP_RNR_RETRY) attrs_.rnr_retry = attr.rnr_retry;
  if (mask & IBV_QP_MIN_RNR_TIMER) attrs_.min_rnr_timer = attr.min_rnr_timer;
  if (mask & IBV_QP_MAX_QP_RD_ATOMIC) attrs_.max_rd_atomic = attr.max_rd_atomic;
  if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) attrs_.max_dest_rd_atomic = attr.max_dest_rd_atomic;
  if (mask & IBV_QP_RQ_PSN) attrs_.rq_psn = attr.rq_psn & Psn::kMask;
  if (mask & IBV_QP_SQ_PSN) attrs_.sq_psn = attr.sq_psn & Psn::kMask;
  if (mask & IBV_QP_DEST_QPN) attrs_.dest_qp_num = attr.dest_qp_num;
  if (mask & IBV_QP_ACCESS_FLAGS) attrs_.qp_access_flags = attr.qp_access_flags;
  if (mask & IBV_QP_PATH_MIG_STATE) attrs_.path_mig_state = attr.path_mig_state;

  switch (next) {
    case IBV_QPS_RESET: {
      // IBA 10.3.1.1: back to the state of a new QP; the queues are
      // emptied without completions.
      std::scoped_lock lock(sq.post_mu, rq.post_mu);
      state_.store(IBV_QPS_RESET, std::memory_order_release);
      sq.clear();
      if (srq_ == nullptr) rq.clear();
      sender_reset(*this, engine);
      responder_reset(*this);
      // Completions of this QP still in its CQs go too (mlx5 cleans its
      // CQs on the move to RESET): a QP brought back from ERR through
      // RESET to RTS does not hand its new user the old flush errors.
      if (send_cq_ != nullptr) send_cq_->clean(qpn_);
      if (recv_cq_ != nullptr && recv_cq_ != send_cq_) recv_cq_->clean(qpn_);
      req.wqe_idx = 0;
      comp.wqe_idx = 0;
      attrs_.sqd_notify = false;
      attrs_.sq_draining = 0;
      return;
    }
    case IBV_QPS_INIT:
      if (cur == IBV_QPS_RESET) {
        sender_reset(*this, engine);
        responder_reset(*this);
      }
      state_.store(IBV_QPS_INIT, std::memory_order_release);
      return;
    case IBV_QPS_RTR:
      // The responder starts at rq_psn (IBA 9.7.4.1.1) with a result cache
      // of max_dest_rd_atomic entries for duplicate READ/atomics (9.7.5.1.4).
      resp.results.assign(attrs_.max_dest_rd_atomic, RdAtomicResult{});
      resp.results_next = 0;
      responder_reset(*this);
      comm_est = false;
      state_.store(IBV_QPS_RTR, std::memory_order_release);
      return;
    case IBV_QPS_RTS:
      if (cur == IBV_QPS_RTR) sender_reset(*this, engine);  // next_psn = sq_psn, retry counters
      attrs_.sqd_notify = false;
      attrs_.sq_draining = 0;
      state_.store(IBV_QPS_RTS, std::memory_order_release);
      if (cur == IBV_QPS_SQD || cur == IBV_QPS_SQE) requester_run(engine, *this);  // resume what waited
      return;
    case IBV_QPS_SQD:
      if (cur == IBV_QPS_RTS) {
        // IBA 10.3.1.4: stop starting new WQEs, finish the started ones,
        // then (if asked) the affiliated SQ-drained event (IBA 11.6.3.2).
        attrs_.sqd_notify = (mask & IBV_QP_EN_SQD_ASYNC_NOTIFY) && attr.en_sqd_async_notify;
        attrs_.sq_draining = 1;
      }
      state_.store(IBV_QPS_SQD, std::memory_order_release);
      check_drained();
      return;
    case IBV_QPS_ERR:
      to_error(false);
      return;
    case IBV_QPS_SQE:
    case IBV_QPS_UNKNOWN:
      return;  // not reachable: check_modify refused it
  }
}

int Qp::modify(const ibv_qp_attr& attr, int mask) {
  // The whole modify is the engine's: modifies of one QP (from any thread,
  // the connection manager's included) are serialised by its loop.
  int rc = 0;
  if ((mask & IBV_QP_AV) && connected()) {
    // A valid modify with a path resolves its next hop first, as Linux's
    // modify_qp does for RoCE (Rnic::await_neighbour); an invalid one
    // fails on its attributes without waiting.
    rnic_.engine().run_sync([&] { rc = check_modify(attr, mask); });
    if (rc == 0) rc = rnic_.await_neighbour(attr.ah_attr);
    if (rc != 0) return rc;
  }
  rnic_.engine().run_sync([&] {
    rc = check_modify(attr, mask);
    if (rc == 0) {
      apply_modify(attr, mask);
      rnic_.update_claim(*this);
    }
  });
  return rc;
}

int Qp::query(ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) const {
  // The attributes are the engine's: read them in its loop.
  rnic_.engine().run_sync([&] { query_engine(attr, mask, init); });
  return 0;
}

void Qp::query_engine(ibv_qp_attr* attr, int /*mask*/, ibv_qp_init_attr* init) const {
  // Every attribute, whatever the mask asks (as rxe does).
  if (attr != nullptr) {
    *attr = ibv_qp_attr{};
    attr->qp_state = state();
    attr->cur_qp_state = attr->qp_state;
    attr->path_mtu = attrs_.path_mtu;
    attr->path_mig_state = attrs_.path_mig_state;
    attr->qkey = attrs_.qkey;
    attr->rq_psn = attrs_.rq_psn;
    attr->sq_psn = attrs_.sq_psn;
    attr->dest_qp_num = attrs_.dest_qp_num;
    attr->qp_access_flags = attrs_.qp_access_flags;
    attr->cap = cap_;
    attr->ah_attr = attrs_.path.attr;
    attr->pkey_index = attrs_.pkey_index;
    attr->en_sqd_async_notify = attrs_.sqd_notify ? 1 : 0;
    attr->sq_draining = attr->qp_state == IBV_QPS_SQD ? attrs_.sq_draining : 0;
    attr->max_rd_atomic = attrs_.max_rd_atomic;
    attr->max_dest_rd_atomic = attrs_.max_dest_rd_atomic;
    attr->min_rnr_timer = attrs_.min_rnr_timer;
    attr->port_num = kPortNum;
    attr->timeout = attrs_.timeout;
    attr->retry_cnt = attrs_.retry_cnt;
    attr->rnr_retry = attrs_.rnr_retry;
  }
  if (init != nullptr) {
    // The CQ/SRQ members carry this API's Cq*/Srq* (the caller's copy may
    // replace them with its own handles).
    *init = ibv_qp_init_attr{};
    init->qp_context = context;
    init->send_cq = reinterpret_cast<ibv_cq*>(send_cq_);
    init->recv_cq = reinterpret_cast<ibv_cq*>(recv_cq_);
    init->srq = reinterpret_cast<ibv_srq*>(srq_);
    init->cap = cap_;
    init->qp_type = type_;
    init->sq_sig_all = sq_sig_all_ ? 1 : 0;
  }
}

// ---- posting --------------------------------------------------------------------------------

// A send WR against its row (wr.hpp) and the QP: 0 and the message's
// length (and a FLUSH's FETH word), or the errno post_send returns and why
// (the trace's reason).  Every check a WR meets is here, once.  As on an
// RNIC, the post refuses only what does not fit the send queue's slot (an
// opcode that is none, num_sge or inline bytes past the caps, a bind with
// no window, a FLUSH it cannot encode, a length past max_msg_sz); a WR the
// queue can hold but the QP cannot carry out — an opcode its service type
// does not offer, a UD message longer than the path MTU or with an AH of
// another PD, an atomic whose result buffer is not 8 bytes — is accepted
// and completes in error when the requester reaches it (`post_error`:
// IBV_WC_LOC_QP_OP_ERR, IBV_WC_LOC_LEN_ERR), as ConnectX completes it.
int Qp::check_send_wr(const ibv_send_wr& wr, const WrInfo& op, SendWrFacts& out) const {
  const auto refuse = [&out](int rc, const char* why) {
    out.why = why;
    return rc;
  };
  out.post_error = IBV_WC_SUCCESS;
  const auto doom = [&out](ibv_wc_status st) {
    if (out.post_error == IBV_WC_SUCCESS) out.post_error = st;
  };
  if (!op.valid) return refuse(EINVAL, "opcode");
  if (!wr_allowed(op, qp_class(type_, is_gsi()))) doom(IBV_WC_LOC_QP_OP_ERR);  // IBA 11.4.1.1, table 86
  if (!op.local && (wr.num_sge < 0 || static_cast<uint32_t>(wr.num_sge) > cap_.max_send_sge))
    return refuse(EINVAL, "num_sge");
  const bool inl = (wr.send_flags & IBV_SEND_INLINE) != 0;
  if (inl && !op.inline_ok) return refuse(EINVAL, "inline with nothing to send");
  if (op.remote == WrRemote::Bind && wr.bind_mw.mw == nullptr) return refuse(EINVAL, "BIND_MW without a window");
  if (op.remote == WrRemote::Flush) {
    if (const char* why = flush_refusal(wr, &out.feth); why != nullptr) return refuse(EINVAL, why);
  }
  out.length = 0;
  if (!op.local)  // a bind or local invalidate carries no data (its SGE list is not read)
    for (int i = 0; i < wr.num_sge; ++i) out.length += wr.sg_list[i].length;
  if (op.exact_len != 0 && out.length != op.exact_len) doom(IBV_WC_LOC_LEN_ERR);
  // An inline ATOMIC WRITE keeps its 8 bytes in the WQE itself, so it
  // needs no inline room (ibv_wr_atomic_write passes them this way).
  if (inl && op.exact_len == 0 && out.length > cap_.max_inline_data)
    return refuse(EINVAL, "inline length above max_inline_data");
  if (op.atomic && out.length != kAtomicLen) doom(IBV_WC_LOC_LEN_ERR);  // IBA 9.4.5: a 64-bit result buffer
  out.ah = nullptr;
  if (type_ == IBV_QPT_UD || is_gsi()) {
    out.ah = wr.wr.ud.ah != nullptr ? Ah::from_ibv(wr.wr.ud.ah) : nullptr;
    if (out.ah == nullptr) return refuse(EINVAL, "address handle");
    if (out.ah->pd != pd_) doom(IBV_WC_LOC_QP_OP_ERR);  // IBA 10.2.2: an AH of the QP's PD
    if (out.length > rnic_.active_mtu_bytes()) doom(IBV_WC_LOC_LEN_ERR);  // IBA 9.9: one packet
  } else if (out.length > kMaxMsgSize) {
    return refuse(EINVAL, "message above max_msg_sz");
  }
  return 0;
}

// Fills `w` from a checked WR: the remote side as its row names it, the
// data (inline bytes copied now: the application may reuse its buffers as
// soon as post_send returns, ibv_post_send(3)), and the WQE's state as
// posted.  What the requester sets when it starts the WQE (PSNs, cursor)
// it sets there.
void Qp::fill_send_wqe(SendWqe& w, const ibv_send_wr& wr, const WrInfo& op, const SendWrFacts& f) const {
  w.wr_id = wr.wr_id;
  w.opcode = wr.opcode;
  w.send_flags = wr.send_flags;
  w.imm_data = wr.imm_data;
  w.remote_addr = 0;
  w.rkey = Rkey{};
  w.compare_add = 0;
  w.swap = 0;
  w.flush_len = 0;
  w.feth = f.feth;
  w.mw = nullptr;
  switch (op.remote) {
    case WrRemote::None:
      break;
    case WrRemote::Rdma:
      w.remote_addr = wr.wr.rdma.remote_addr;
      w.rkey = Rkey(wr.wr.rdma.rkey);
      break;
    case WrRemote::Atomic:
      w.remote_addr = wr.wr.atomic.remote_addr;
      w.rkey = Rkey(wr.wr.atomic.rkey);
      w.compare_add = wr.wr.atomic.compare_add;
      w.swap = wr.wr.atomic.swap;
      break;
    case WrRemote::Flush:
      w.remote_addr = wr.wr.atomic.remote_addr;
      w.rkey = Rkey(wr.wr.atomic.rkey);
      w.flush_len = static_cast<uint32_t>(wr.wr.atomic.compare_add);
      break;
    case WrRemote::Bind: {
      // Checked when the requester reaches it (Rnic::bind_mw); the MR is
      // named by its L_Key, read now from the application's ibv_mr.  The
      // window's key index comes from its current R_Key (its upper 24
      // bits, which no bind changes), read here in the poster's thread as
      // an RNIC's provider writes it into the WQE; the handle is the
      // kernel's and plays no part in the data path.  The engine checks
      // that index's window is this one before it touches it.
      // The new R_Key: the window's own index (its upper 24 bits) and the
      // key byte the consumer asks for (IBA 10.6.7.2.1: the consumer owns
      // only the key's low 8 bits; ibv_inc_rkey(3)).  A type 2 window's
      // ibv_mw shows it from now on, as providers write it at post time.
      const ibv_mw_bind_info& b = wr.bind_mw.bind_info;
      w.mw = Mw::from_ibv(wr.bind_mw.mw);
      w.mw_index = wr.bind_mw.mw->rkey >> 8;
      w.rkey = Rkey((w.mw_index << 8) | (wr.bind_mw.rkey & 0xFFu));
      if (wr.bind_mw.mw->type == IBV_MW_TYPE_2) wr.bind_mw.mw->rkey = w.rkey.value();
      w.bind_has_mr = b.mr != nullptr;
      w.bind_lkey = b.mr != nullptr ? b.mr->lkey : 0;
      w.remote_addr = b.addr;
      w.bind_length = b.length;
      w.bind_access = b.mw_access_flags;
      break;
    }
  }
  // Annex A14: the SRQ number goes in every request's XRCETH.
  w.remote_srqn = type_ == IBV_QPT_XRC_SEND ? wr.qp_type.xrc.remote_srqn & Qpn::kMask : 0;
  if (f.ah != nullptr) {
    w.ud_path = f.ah->path;
    w.remote_qpn = Qpn(wr.wr.ud.remote_qpn & Qpn::kMask);
    w.remote_qkey = wr.wr.ud.remote_qkey;
  }
  w.length = f.length;
  w.num_sge = 0;
  if ((wr.send_flags & IBV_SEND_INLINE) != 0) {
    uint8_t* dst = w.inline_bytes();
    uint64_t off = 0;
    for (int i = 0; i < wr.num_sge; ++i) {
      const ibv_sge& s = wr.sg_list[i];
      if (s.length) std::memcpy(dst + off, reinterpret_cast<const void*>(s.addr), s.length);
      off += s.length;
    }
  } else if (!op.local) {
    w.num_sge = static_cast<uint32_t>(wr.num_sge);
    for (uint32_t i = 0; i < w.num_sge; ++i) w.sge[i] = wr.sg_list[i];
  }
  w.state = WqeState::Posted;
  w.status = IBV_WC_SUCCESS;
  w.post_error = f.post_error;
}

int Qp::post_send(const ibv_send_wr* wr, const ibv_send_wr** bad) {
  UROCE_STAMP(PostBegin);
  int rc = 0;
  SendWrFacts facts;
  bool posted = false;
  {
    std::lock_guard lock(sq.post_mu);
    for (; wr != nullptr; wr = wr->next) {
      const WrInfo& op = wr_info(raw(wr->opcode));
      if ((rc = check_send_wr(*wr, op, facts)) != 0) break;
      // IBA 10.3.1 (table of states): work requests are carried out in RTS
      // and SQD (SQD queues them), and in SQE/ERR complete flushed
      // (10.3.1.6-7).  C10-96 has RESET, INIT and RTR refuse them; as most
      // RNICs (ConnectX) they are taken and dropped unexecuted instead, with
      // no completion (the send queue of a QP not yet ready to send is
      // reset when it becomes so).
      if (!state_caps(state()).accepts_sends) {
        rnic_.counters().inc(RnicCtr::post_send_not_ready);
        continue;
      }
      if (sq.full()) {
        rc = ENOMEM;
        facts.why = "send queue full";
        break;
      }
      fill_send_wqe(sq.next_free(), *wr, op, facts);
      sq.publish();
      posted = true;
    }
  }
  if (rc != 0) {
    UROCE_TRACE(TraceCat::Qp, "qp 0x%06x: post_send wr_id 0x%llx refused, errno %d (%s)", qpn_.value(),
                static_cast<unsigned long long>(wr->wr_id), rc, facts.why);
    if (bad != nullptr) *bad = wr;
  }
  if (posted) {
    UROCE_STAMP(Posted);
    rnic_.ring_sq(*this);
  }
  return rc;
}

int Qp::post_recv(const ibv_recv_wr* wr, const ibv_recv_wr** bad) {
  int rc = 0;
  bool posted = false;
  bool flush = false;
  {
    std::lock_guard lock(rq.post_mu);
    for (; wr != nullptr; wr = wr->next) {
      // ibv_post_recv(3): a QP on an SRQ takes no receives of its own, nor
      // does an XRC QP (its domain's SRQs do); ERR flushes them (10.3.1.7).
      // In RESET they are taken and kept, as ConnectX takes them (IBA
      // 10.3.1.1 lets a QP in RESET refuse them; rxe does).
      const ibv_qp_state st = state();
      if (srq_ != nullptr || recv_cq_ == nullptr || st == IBV_QPS_UNKNOWN) {
        rc = EINVAL;
        break;
      }
      if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > cap_.max_recv_sge) {
        rc = EINVAL;
        break;
      }
      if (rq.full()) {
        rc = ENOMEM;
        break;
      }
      rq.push(wr->wr_id, wr->sg_list, static_cast<uint32_t>(wr->num_sge));
      posted = true;
      if (st == IBV_QPS_ERR) flush = true;
    }
  }
  if (rc != 0 && bad != nullptr) *bad = wr;
  if (posted && (flush || state() == IBV_QPS_ERR)) rnic_.ring_sq(*this);
  return rc;
}

// ---- [engine] ---------------------------------------------------------------------------------

void Qp::doorbell(transport::Engine& engine) noexcept {
  UROCE_ASSERT_ENGINE(engine);
  switch (state()) {
    case IBV_QPS_RTS:
    case IBV_QPS_SQD:
      requester_run(engine, *this);
      return;
    case IBV_QPS_SQE:
      completer_flush(*this);
      return;
    case IBV_QPS_ERR:
      completer_flush(*this);
      flush_recv();
      return;
    case IBV_QPS_RESET:
    case IBV_QPS_INIT:
    case IBV_QPS_RTR:
    case IBV_QPS_UNKNOWN:
      return;
  }
}

void Qp::to_error(bool fatal) noexcept {
  UROCE_ASSERT_ENGINE(*engine_);
  const bool was_err = state() == IBV_QPS_ERR;
  if (!was_err)
    UROCE_TRACE(TraceCat::Qp, "qp 0x%06x: %s -> ERR%s", qpn_.value(), qp_state_name(state()),
                fatal ? " (fatal)" : "");
  state_.store(IBV_QPS_ERR, std::memory_order_release);
  completer_stop(*this, *engine_);
  completer_flush(*this);
  if (!was_err) responder_flush(*this);
  flush_recv();
  if (was_err) return;
  if (fatal) {
    AsyncEvent ev;
    ev.type = IBV_EVENT_QP_FATAL;  // IBA 11.6.3.1: local work queue catastrophic error
    ev.qp = this;
    rnic_.raise(ev);
  }
  if (srq_ != nullptr || type_ == IBV_QPT_XRC_RECV) {
    // IBA 10.3.1.7 / 11.6.3.1: a QP on an SRQ (an XRC receive QP: on its domain's) in ERR consumes no more
    // receive WQEs: the last-WQE-reached event tells the application.
    AsyncEvent ev;
    ev.type = IBV_EVENT_QP_LAST_WQE_REACHED;
    ev.qp = this;
    rnic_.raise(ev);
  }
}

void Qp::send_error() noexcept {
  // IBA 10.3.1.6: an RC send-side error takes the whole QP to ERR; UD and
  // UC go to SQE, where the receive side keeps working.
  if (reliable()) {
    to_error(false);
    return;
  }
  UROCE_TRACE(TraceCat::Qp, "qp 0x%06x: %s -> SQE", qpn_.value(), qp_state_name(state()));
  state_.store(IBV_QPS_SQE, std::memory_order_release);
  completer_flush(*this);
}

void Qp::flush_recv() noexcept {
  if (srq_ != nullptr || recv_cq_ == nullptr) return;  // SRQ WQEs belong to the SRQ, not to this QP; XRC has none
  while (RecvWqe* w = rq.front()) {
    ibv_wc wc{};
    wc.wr_id = w->wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = qpn_.value();
    rq.pop();  // free before its CQE is seen (as the completer does)
    recv_cq_->push(wc);
  }
}

void Qp::check_drained() noexcept {
  if (state() != IBV_QPS_SQD || attrs_.sq_draining == 0) return;
  // Drained once no started WQE is outstanding: the oldest one (if any)
  // has not been started (WQEs start in order).
  const uint32_t head = sq.head();
  if (head != sq.tail() && sq.slot(head).state != WqeState::Posted) return;
  attrs_.sq_draining = 0;
  if (!attrs_.sqd_notify) return;
  attrs_.sqd_notify = false;
  AsyncEvent ev;
  ev.type = IBV_EVENT_SQ_DRAINED;  // IBA 11.6.3.2 (affiliated, asynchronous)
  ev.qp = this;
  rnic_.raise(ev);
}

RecvWqe* Qp::recv_front() noexcept { return srq_ != nullptr ? srq_->rq().front() : rq.front(); }

void Qp::recv_pop() noexcept {
  if (srq_ != nullptr) {
    srq_->rq().pop();
    srq_->after_pop();
  } else {
    rq.pop();
  }
}

}  // namespace uroce::rnic
