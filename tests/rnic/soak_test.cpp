// The loss soak (suite stress): random SEND / WRITE / READ / CMP_SWAP /
// FETCH_ADD with random sizes and SGE lists on several RC QPs at once,
// over a sim wire that drops, duplicates and reorders (1% and 5% loss).
// Every byte is checked at its destination against a model of the
// responder's memory, every completion must come exactly once and in
// posting order, and no QP may leave RTS.
//
// Reproducible: the operations come from a seeded PRNG and each link's
// fault fates from the wire's seed (both printed; UROCE_SOAK_SEED sets
// them).  UROCE_SOAK_OPS sets the operations per loss rate (default
// 100,000).  Timing (ACK timeouts) runs on the real clock, so which
// frames a fault hits can differ between runs; the check cannot.
//
// Ordering hazard the test respects, as applications must: a READ that is
// retried after its response was lost is executed again (IBA 9.7.5.1.4),
// so an operation that writes memory an outstanding READ covers is
// posted with IBV_SEND_FENCE.
#include <gtest/gtest.h>

#include <tuple>

#include <algorithm>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "tests/rnic/harness.hpp"

namespace uroce::rnic::testing {
namespace {

constexpr int kRemoteAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;
constexpr int kQps = 4;
constexpr uint32_t kWindow = 32;            // outstanding operations per QP
constexpr size_t kMaxMsg = 32 * 1024;       // per operation
constexpr size_t kRegion = 1 << 20;         // B's RDMA region per QP
constexpr size_t kAtomicWords = 64;         // B's atomic words per QP
constexpr size_t kSource = 2 << 20;         // A's read-only source bytes

uint64_t env_u64(const char* name, uint64_t dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 0) : dflt;
}

enum class Kind : uint8_t { Send, Write, Read, CmpSwap, FetchAdd };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Send: return "SEND";
    case Kind::Write: return "WRITE";
    case Kind::Read: return "READ";
    case Kind::CmpSwap: return "CMP_SWAP";
    case Kind::FetchAdd: return "FETCH_ADD";
  }
  return "?";
}

struct Op {
  uint64_t id = 0;
  Kind kind = Kind::Send;
  size_t len = 0;
  size_t remote_off = 0;       // WRITE/READ: into the region; atomics: word index
  uint32_t slot = 0;           // READ/atomic result slot, SEND receive slot
  std::vector<uint8_t> expect; // READ: the bytes; SEND: the message
  uint64_t expect_orig = 0;    // atomics: the value before
  std::vector<ibv_sge> sges;   // READ: where the result goes
};

struct QpRun {
  Pair p;
  Buffer sink;     // A: READ/atomic results, kWindow slots of kMaxMsg
  Buffer region;   // B: RDMA target + atomic words after it
  Buffer recv;     // B: receive slots, kWindow of kMaxMsg
  std::vector<uint8_t> model;  // what `region` must hold
  std::deque<Op> outstanding;  // posted, not yet completed (send side)
  std::deque<Op> sends;        // SENDs whose receive completion is due
  uint64_t next_id = 0;
  uint64_t posted = 0;
  uint64_t done = 0;
};

class Soak {
 public:
  Soak(double loss, uint64_t seed, uint64_t ops, bool selective)
      : seed_(seed), ops_(ops), no_read_(env_u64("UROCE_SOAK_NO_READ", 0) != 0), rng_(seed) {
    drivers::FaultSpec f;
    f.drop = loss;
    f.dup = 0.005;
    f.reorder = 0.01;
    f.reorder_window = 8;
    f.reorder_hold_ns = 200'000;
    f.seed = seed;
    HarnessOptions o;
    o.faults = f;
    o.selective_repeat_a = o.selective_repeat_b = selective;
    // Room for every QP's whole window (kMaxUnackedPsns each) and the READ
    // responses: the soak is about random loss, not switch-buffer
    // overflow (which e2e-ops' 1 MiB READs meet with the default buffer).
    o.link_queue_frames = 4096;
    h_ = std::make_unique<Harness>(o);
  }

  void run() {
    ConnOpts co;
    co.mtu = IBV_MTU_1024;
    // ~4 ms: tail losses recover quickly, and a go-back-N of a full window
    // still gets its ACKs back within it on an ASan build.  ThreadSanitizer
    // slows the engine more than that: scripts/tsan sets
    // UROCE_SOAK_TIMEOUT (the IBA exponent, 4.096 us << n) higher.
    co.timeout = static_cast<uint8_t>(std::min<uint64_t>(env_u64("UROCE_SOAK_TIMEOUT", 10), 31));
    // Seven retries; progress restores them, so only eight timeouts in a
    // row with nothing acknowledged end a QP, which these loss rates never
    // cause (a QP that ends fails the test).
    co.retry_cnt = 7;
    co.rnr_retry = 7;  // infinite
    co.max_rd_atomic = 16;
    co.max_dest_rd_atomic = 16;
    QpCaps caps;
    caps.max_send_wr = 2 * kWindow;
    caps.max_recv_wr = 2 * kWindow;
    caps.max_send_sge = 4;
    caps.max_recv_sge = 4;
    source_ = h_->buffer(h_->a(), kSource, kRemoteAll);
    fill_pattern(source_.bytes(0, kSource), seed_);
    for (int i = 0; i < kQps; ++i) {
      QpRun& q = qps_[i];
      q.p = h_->pair(IBV_QPT_RC, co, caps, 4 * kWindow);
      ASSERT_NE(q.p.qa, nullptr);
      q.sink = h_->buffer(h_->a(), kWindow * kMaxMsg, kRemoteAll);
      q.region = h_->buffer(h_->b(), kRegion + 8 * kAtomicWords, kRemoteAll);
      fill_pattern(q.region.bytes(0, q.region.len), seed_ + 100 + i);
      q.model.assign(q.region.data(), q.region.data() + q.region.len);
      q.recv = h_->buffer(h_->b(), kWindow * kMaxMsg, kRemoteAll);
    }
    const auto t0 = Clock::now();
    auto last_progress = t0;
    uint64_t total_done = 0;
    const uint64_t per_qp = (ops_ + kQps - 1) / kQps;
    while (total_done < per_qp * kQps) {
      for (QpRun& q : qps_) {
        while (q.outstanding.size() < kWindow && q.posted < per_qp) {
          post_one(q);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
      h_->poll();
      uint64_t got = 0;
      for (QpRun& q : qps_) {
        got += reap(q);
        if (::testing::Test::HasFatalFailure()) return;
      }
      total_done += got;
      const auto now = Clock::now();
      if (got) {
        last_progress = now;
      } else if (now - last_progress > std::chrono::seconds(10)) {
        FAIL() << "no completion for 10 s; " << total_done << " of " << per_qp * kQps << " done\n" << h_->counters();
      }
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    // Straggling receive completions.
    for (QpRun& q : qps_) {
      h_->run_until(
          [&] {
            reap(q);
            return q.sends.empty();
          },
          std::chrono::seconds(5));
      EXPECT_TRUE(q.sends.empty()) << q.sends.size() << " receive completions missing";
    }
    // Nothing more may complete; memory equals the model; every QP in RTS.
    h_->run_for(std::chrono::milliseconds(20));
    for (int i = 0; i < kQps; ++i) {
      QpRun& q = qps_[i];
      EXPECT_TRUE(h_->poll_cq(q.p.scq_a).empty()) << "extra send completions on QP " << i;
      EXPECT_TRUE(h_->poll_cq(q.p.rcq_b).empty()) << "extra receive completions on QP " << i;
      const long d = first_diff(q.region.bytes(0, q.region.len), q.model);
      EXPECT_EQ(d, -1) << "QP " << i << ": the responder's memory differs from the model at " << d;
      EXPECT_EQ(q.p.qa->state(), IBV_QPS_RTS);
      EXPECT_EQ(q.p.qb->state(), IBV_QPS_RTS);
    }
    const auto& ca = h_->a().rnic->counters();
    const auto& cb = h_->b().rnic->counters();
    const auto wf = h_->wire().counters();
    std::printf(
        "soak loss=%.0f%% seed=%" PRIu64 ": %" PRIu64 " ops (%" PRIu64 " bytes) in %.1f s (%.0f ops/s); wire dropped %" PRIu64
        " duplicated %" PRIu64 " reordered %" PRIu64 " queue_full %" PRIu64 "; retransmitted %" PRIu64
        " packets, %" PRIu64 " ACK timeouts, %" PRIu64 " seq NAKs, %" PRIu64 " duplicate requests\n",
        loss_pct(), seed_, total_done, bytes_, secs, total_done / secs, wf[drivers::FaultCounter::kDropped],
        wf[drivers::FaultCounter::kDuplicated], wf[drivers::FaultCounter::kReordered],
        wf[drivers::FaultCounter::kQueueFull], ca.get(RnicCtr::req_retrans_pkts) + cb.get(RnicCtr::req_retrans_pkts),
        ca.get(RnicCtr::ack_timeouts), ca.get(RnicCtr::seq_naks_rcvd), cb.get(RnicCtr::dup_requests));
    EXPECT_GE(total_done, ops_);
    EXPECT_GT(wf[drivers::FaultCounter::kDropped], 0u) << "the wire lost nothing: the soak proved nothing";
  }

  double loss_pct() const { return loss_ * 100; }
  void set_loss(double l) { loss_ = l; }

 private:
  uint64_t rnd(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng_); }

  size_t rnd_len() {
    const uint64_t r = rnd(100);
    if (r < 10) return rnd(2);                   // 0 or 1 byte
    if (r < 55) return 2 + rnd(1023);            // one packet
    if (r < 90) return 1025 + rnd(8 * 1024);     // a few packets
    return 1 + rnd(kMaxMsg);                     // up to 32 packets
  }

  // A random SGE list of `len` bytes from the source area; appends the bytes.
  std::vector<ibv_sge> gather(size_t len, std::vector<uint8_t>* bytes) {
    std::vector<ibv_sge> out;
    const size_t pieces = len == 0 ? 0 : 1 + rnd(std::min<size_t>(4, len));
    size_t left = len;
    for (size_t i = 0; i < pieces; ++i) {
      const size_t n = i + 1 == pieces ? left : 1 + rnd(left - (pieces - i - 1));
      const size_t off = rnd(kSource - n + 1);
      out.push_back(source_.sge(off, n));
      if (bytes) bytes->insert(bytes->end(), source_.data() + off, source_.data() + off + n);
      left -= n;
    }
    return out;
  }

  // `len` bytes of `buf` at `base` as 1-4 contiguous SGEs.
  std::vector<ibv_sge> scatter(const Buffer& buf, size_t base, size_t len) {
    std::vector<ibv_sge> out;
    const size_t pieces = len == 0 ? 1 : 1 + rnd(std::min<size_t>(4, len));
    size_t left = len, off = base;
    for (size_t i = 0; i < pieces; ++i) {
      const size_t n = i + 1 == pieces ? left : 1 + rnd(left - (pieces - i - 1));
      out.push_back(buf.sge(off, n));
      off += n;
      left -= n;
    }
    return out;
  }

  bool overlaps_outstanding_read(const QpRun& q, size_t off, size_t len) const {
    for (const Op& o : q.outstanding) {
      if (o.kind == Kind::Read && off < o.remote_off + o.len && o.remote_off < off + len) return true;
      if ((o.kind == Kind::CmpSwap || o.kind == Kind::FetchAdd) && len && off >= kRegion &&
          off == kRegion + 8 * o.remote_off) {
        return true;
      }
    }
    return false;
  }

  void post_one(QpRun& q) {
    Op op;
    op.id = (uint64_t{static_cast<uint32_t>(&q - qps_)} << 56) | q.next_id++;
    op.slot = static_cast<uint32_t>(q.posted % kWindow);
    uint64_t r = rnd(100);
    if (no_read_ && r >= 60 && r < 85) r = rnd(60);  // READ's share goes to SEND/WRITE
    op.kind = r < 30 ? Kind::Send : r < 60 ? Kind::Write : r < 85 ? Kind::Read : r < 93 ? Kind::FetchAdd : Kind::CmpSwap;
    ibv_send_wr wr{};
    std::vector<ibv_sge> sges;
    unsigned flags = IBV_SEND_SIGNALED;
    switch (op.kind) {
      case Kind::Send: {
        op.len = rnd_len();
        sges = gather(op.len, &op.expect);
        // The receive: kMaxMsg at this slot, in 1-4 SGEs.
        auto rs = scatter(q.recv, size_t{op.slot} * kMaxMsg, kMaxMsg);
        ASSERT_EQ(post_recv(q.p.qb, op.id, rs), 0);
        wr = send_wr(IBV_WR_SEND, op.id, sges, flags);
        q.sends.push_back(op);
        break;
      }
      case Kind::Write: {
        op.len = rnd_len();
        std::vector<uint8_t> bytes;
        sges = gather(op.len, &bytes);
        op.remote_off = rnd(kRegion - op.len + 1);
        if (overlaps_outstanding_read(q, op.remote_off, op.len)) flags |= IBV_SEND_FENCE;
        if (op.len != 0) std::memcpy(q.model.data() + op.remote_off, bytes.data(), op.len);  // bytes may be empty (null)
        wr = rdma_wr(IBV_WR_RDMA_WRITE, op.id, sges, q.region.addr(op.remote_off), q.region.rkey(), flags);
        break;
      }
      case Kind::Read: {
        op.len = rnd_len();
        op.remote_off = rnd(kRegion - op.len + 1);
        op.expect.assign(q.model.begin() + op.remote_off, q.model.begin() + op.remote_off + op.len);
        op.sges = scatter(q.sink, size_t{op.slot} * kMaxMsg, op.len);
        if (op.len == 0) op.sges.clear();
        sges = op.sges;
        wr = rdma_wr(IBV_WR_RDMA_READ, op.id, sges, q.region.addr(op.remote_off), q.region.rkey(), flags);
        break;
      }
      case Kind::FetchAdd:
      case Kind::CmpSwap: {
        op.len = 8;
        op.remote_off = rnd(kAtomicWords);
        const size_t at = kRegion + 8 * op.remote_off;
        if (overlaps_outstanding_read(q, at, 8)) flags |= IBV_SEND_FENCE;
        uint64_t cur;
        std::memcpy(&cur, q.model.data() + at, 8);
        op.expect_orig = cur;
        sges = {q.sink.sge(size_t{op.slot} * kMaxMsg, 8)};
        op.sges = sges;
        uint64_t next = cur;
        if (op.kind == Kind::FetchAdd) {
          const uint64_t add = rng_();
          next = cur + add;
          wr = atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, op.id, &sges[0], q.region.addr(at), q.region.rkey(), add, 0,
                         flags);
        } else {
          const bool match = rnd(2) == 0;
          const uint64_t cmp = match ? cur : cur ^ (1 + rnd(1000));
          const uint64_t swap = rng_();
          if (match) next = swap;
          wr = atomic_wr(IBV_WR_ATOMIC_CMP_AND_SWP, op.id, &sges[0], q.region.addr(at), q.region.rkey(), cmp, swap,
                         flags);
        }
        std::memcpy(q.model.data() + at, &next, 8);
        break;
      }
    }
    wr.sg_list = sges.empty() ? nullptr : sges.data();
    wr.num_sge = static_cast<int>(sges.size());
    // Poison the result slot so a READ that writes nothing is caught.
    if (op.kind != Kind::Send && op.kind != Kind::Write) {
      std::memset(q.sink.data() + size_t{op.slot} * kMaxMsg, 0xA5, std::max<size_t>(op.len, 8));
    }
    const int rc = post_send(q.p.qa, wr);
    ASSERT_EQ(rc, 0) << "post_send: " << std::strerror(rc) << " (seed " << seed_ << ")";
    bytes_ += op.len;
    ++q.posted;
    q.outstanding.push_back(std::move(op));
  }

  // Checks every completion the QP's CQs hold; returns the send-side count.
  uint64_t reap(QpRun& q) {
    ibv_wc wc[32];
    uint64_t n_done = 0;
    for (;;) {
      const int n = q.p.scq_a->poll(32, wc);
      if (n <= 0) break;
      for (int i = 0; i < n; ++i) {
        if (q.outstanding.empty()) {
          ADD_FAILURE() << "completion wr_id " << wc[i].wr_id << " with nothing outstanding (seed " << seed_ << ")";
          continue;
        }
        const Op& op = q.outstanding.front();
        EXPECT_EQ(wc[i].wr_id, op.id) << "completions out of order or repeated (seed " << seed_ << ")";
        EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS)
            << wc_status_name(wc[i].status) << " for QP " << (op.id >> 56) << " op " << (op.id & 0xFFFFFFFFFFFFFFull)
            << " (" << kind_name(op.kind) << ", " << op.len << " bytes) (seed " << seed_ << ")";
        if (wc[i].status == IBV_WC_SUCCESS && wc[i].wr_id == op.id) check_done(q, op);
        q.outstanding.pop_front();
        ++n_done;
        ++q.done;
      }
    }
    for (;;) {
      const int n = q.p.rcq_b->poll(32, wc);
      if (n <= 0) break;
      for (int i = 0; i < n; ++i) {
        if (q.sends.empty()) {
          ADD_FAILURE() << "receive completion " << wc[i].wr_id << " for no SEND (seed " << seed_ << ")";
          continue;
        }
        const Op& op = q.sends.front();
        EXPECT_EQ(wc[i].wr_id, op.id) << "receive completions out of order or repeated (seed " << seed_ << ")";
        EXPECT_EQ(wc[i].status, IBV_WC_SUCCESS) << wc_status_name(wc[i].status) << " (seed " << seed_ << ")";
        EXPECT_EQ(wc[i].byte_len, op.len) << "(seed " << seed_ << ")";
        const long d = first_diff(q.recv.bytes(size_t{op.slot} * kMaxMsg, op.len), op.expect);
        EXPECT_EQ(d, -1) << "SEND " << op.id << " of " << op.len << " bytes wrong at " << d << " (seed " << seed_
                         << ")";
        q.sends.pop_front();
      }
    }
    if (::testing::Test::HasFailure() && ++failures_ > 20) {
      ADD_FAILURE() << "stopping after repeated failures (seed " << seed_ << ")\n" << h_->counters();
      std::fflush(stdout);
      std::_Exit(1);
    }
    return n_done;
  }

  void check_done(QpRun& q, const Op& op) {
    switch (op.kind) {
      case Kind::Send:
      case Kind::Write: return;
      case Kind::Read: {
        std::vector<uint8_t> got;
        for (const auto& s : op.sges) {
          const uint8_t* p = reinterpret_cast<const uint8_t*>(s.addr);
          got.insert(got.end(), p, p + s.length);
        }
        got.resize(op.len);
        const long d = first_diff(got, op.expect);
        EXPECT_EQ(d, -1) << "READ " << op.id << " of " << op.len << " bytes at " << op.remote_off << " wrong at " << d
                         << " (seed " << seed_ << ")";
        return;
      }
      case Kind::CmpSwap:
      case Kind::FetchAdd: {
        uint64_t got;
        std::memcpy(&got, q.sink.data() + size_t{op.slot} * kMaxMsg, 8);
        EXPECT_EQ(got, op.expect_orig) << "atomic " << op.id << " returned the wrong original (seed " << seed_ << ")";
        return;
      }
    }
  }

  uint64_t seed_;
  uint64_t ops_;
  bool no_read_;  // UROCE_SOAK_NO_READ=1: leave READs out (to tell a READ problem from the rest)
  double loss_ = 0;
  std::mt19937_64 rng_;
  std::unique_ptr<Harness> h_;
  Buffer source_;
  QpRun qps_[kQps];
  uint64_t bytes_ = 0;
  int failures_ = 0;
};

// The loss rate, and whether both RNICs offer selective repeat.
class SoakTest : public ::testing::TestWithParam<std::tuple<double, bool>> {};

TEST_P(SoakTest, RandomOpsUnderLoss) {
  const auto [loss, selective] = GetParam();
  const uint64_t seed = env_u64("UROCE_SOAK_SEED", 20240601) + static_cast<uint64_t>(loss * 1000);
  const uint64_t ops = env_u64("UROCE_SOAK_OPS", 100000);
  std::printf("soak: loss %.0f%%, seed %" PRIu64 " (UROCE_SOAK_SEED), %" PRIu64 " operations\n", loss * 100, seed, ops);
  SCOPED_TRACE("seed " + std::to_string(seed));
  Soak s(loss, seed, ops, selective);
  s.set_loss(loss);
  s.run();
}

INSTANTIATE_TEST_SUITE_P(Loss, SoakTest, ::testing::Combine(::testing::Values(0.01, 0.05), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<double, bool>>& i) {
                           return "Loss" + std::to_string(static_cast<int>(std::get<0>(i.param) * 100)) + "pct" +
                                  (std::get<1>(i.param) ? "_Selective" : "");
                         });

}  // namespace
}  // namespace uroce::rnic::testing
