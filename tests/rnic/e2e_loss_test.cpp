// One fault at a time, one opcode at a time, on one RC QP: a stream of
// messages over a wire that only drops, only duplicates, only reorders or
// only corrupts.  Each completes once, in order, with the right bytes, and
// the QP stays in RTS.  (The soak mixes everything; these say which
// combination breaks.)  Each runs with go-back-N, with selective repeat
// (both RNICs offering it: kept packets, selective NAKs, resends), and with
// only one end offering it, which must leave both on go-back-N (no
// connection half upgraded: DESIGN.md "Loss recovery on a lossy link"),
// and with both offering it and the requester spraying over 4 UDP source
// ports (DESIGN.md "Spraying"), which the responder must take without
// NAKing what was only reordered, and toward a plain responder must not
// start at all.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "tests/rnic/harness.hpp"

namespace uroce::rnic::testing {
namespace {

constexpr int kRemoteAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;

enum class Fault { Drop, Dup, Reorder, Corrupt };
enum class Kind { Send, Write, Read, FetchAdd };

const char* fault_name(Fault f) {
  switch (f) {
    case Fault::Drop: return "Drop";
    case Fault::Dup: return "Dup";
    case Fault::Reorder: return "Reorder";
    case Fault::Corrupt: return "Corrupt";
  }
  return "?";
}
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Send: return "Send";
    case Kind::Write: return "Write";
    case Kind::Read: return "Read";
    case Kind::FetchAdd: return "FetchAdd";
  }
  return "?";
}

drivers::FaultSpec spec_for(Fault f) {
  drivers::FaultSpec s;
  s.seed = 99;
  switch (f) {
    case Fault::Drop: s.drop = 0.03; break;
    case Fault::Dup: s.dup = 0.05; break;
    case Fault::Reorder:
      s.reorder = 0.05;
      s.reorder_window = 6;
      s.reorder_hold_ns = 200'000;
      break;
    case Fault::Corrupt: s.corrupt = 0.03; break;
  }
  return s;
}

// The requester is A, the responder B.
enum class Recovery { GoBackN, Selective, RequesterOnly, ResponderOnly, Sprayed, SprayedToPlain };

using Param = std::tuple<Fault, Kind, Recovery>;
class OneFault : public ::testing::TestWithParam<Param> {};

TEST_P(OneFault, StreamCompletesExactly) {
  const auto [fault, kind, recovery] = GetParam();
  HarnessOptions ho;
  ho.faults = spec_for(fault);
  const bool sprayed = recovery == Recovery::Sprayed || recovery == Recovery::SprayedToPlain;
  ho.selective_repeat_a = recovery == Recovery::Selective || recovery == Recovery::RequesterOnly || sprayed;
  ho.selective_repeat_b =
      recovery == Recovery::Selective || recovery == Recovery::ResponderOnly || recovery == Recovery::Sprayed;
  if (sprayed) ho.spray_ports_a = 4;
  Harness h(ho);
  ConnOpts o;
  o.mtu = IBV_MTU_1024;
  o.timeout = 8;  // ~1 ms
  o.retry_cnt = 7;
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  constexpr int kOps = 300;
  constexpr int kWindow = 16;
  constexpr size_t kSlot = 8192;
  Buffer a = h.buffer(h.a(), kSlot * kWindow, kRemoteAll);
  Buffer b = h.buffer(h.b(), kSlot * kWindow, kRemoteAll);
  fill_pattern(a.bytes(0, a.len), 1);
  fill_pattern(b.bytes(0, b.len), 2);
  std::vector<uint8_t> b_model(b.data(), b.data() + b.len);
  uint64_t counter = 0;  // FETCH_ADD target value
  std::memset(b.data(), 0, 8);
  int posted = 0, done = 0, recvs_done = 0;
  std::vector<size_t> lens(kOps);
  const auto t0 = Clock::now();
  while (done < kOps && Clock::now() - t0 < std::chrono::seconds(30)) {
    while (posted < kOps && posted - done < kWindow) {
      const int slot = posted % kWindow;
      const size_t len = 1 + (static_cast<size_t>(posted) * 2654435761u) % (kSlot - 1);
      lens[posted] = len;
      ibv_sge s = a.sge(size_t(slot) * kSlot, len);
      ibv_send_wr wr{};
      switch (kind) {
        case Kind::Send: {
          ibv_sge r = b.sge(size_t(slot) * kSlot, kSlot);
          ASSERT_EQ(post_recv(p.qb, posted, {&r, 1}), 0);
          wr = send_wr(IBV_WR_SEND, posted, {&s, 1});
          break;
        }
        case Kind::Write: wr = rdma_wr(IBV_WR_RDMA_WRITE, posted, {&s, 1}, b.addr(size_t(slot) * kSlot), b.rkey()); break;
        case Kind::Read:
          std::memset(a.data() + size_t(slot) * kSlot, 0xA5, len);
          wr = rdma_wr(IBV_WR_RDMA_READ, posted, {&s, 1}, b.addr(size_t(slot) * kSlot), b.rkey());
          break;
        case Kind::FetchAdd: {
          s.length = 8;
          wr = atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, posted, &s, b.addr(), b.rkey(), 3, 0);
          break;
        }
      }
      ASSERT_EQ(post_send(p.qa, wr), 0);
      ++posted;
    }
    for (const ibv_wc& wc : h.poll_cq(p.scq_a)) {
      ASSERT_EQ(wc.wr_id, uint64_t(done)) << "out of order or repeated\n" << h.counters();
      ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status) << " at op " << done << "\n" << h.counters();
      const size_t slot_off = size_t(done % kWindow) * kSlot;
      if (kind == Kind::Read) {
        EXPECT_EQ(first_diff(a.bytes(slot_off, lens[done]), b.bytes(slot_off, lens[done])), -1) << "op " << done;
      } else if (kind == Kind::FetchAdd) {
        uint64_t got;
        std::memcpy(&got, a.data() + slot_off, 8);
        EXPECT_EQ(got, counter) << "op " << done;
        counter += 3;
      } else if (kind == Kind::Write) {
        EXPECT_EQ(first_diff(b.bytes(slot_off, lens[done]), a.bytes(slot_off, lens[done])), -1) << "op " << done;
      }
      ++done;
    }
    if (kind == Kind::Send) {
      for (const ibv_wc& wc : h.poll_cq(p.rcq_b)) {
        ASSERT_EQ(wc.wr_id, uint64_t(recvs_done)) << "receive out of order or repeated";
        ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
        const size_t slot_off = size_t(recvs_done % kWindow) * kSlot;
        EXPECT_EQ(wc.byte_len, lens[recvs_done]);
        EXPECT_EQ(first_diff(b.bytes(slot_off, lens[recvs_done]), a.bytes(slot_off, lens[recvs_done])), -1);
        ++recvs_done;
      }
    }
  }
  EXPECT_EQ(done, kOps) << h.counters();
  if (kind == Kind::Send) {
    auto rest = h.wait_wcs(p.rcq_b, kOps - recvs_done);
    EXPECT_EQ(recvs_done + static_cast<int>(rest.size()), kOps);
  }
  if (kind == Kind::FetchAdd) {
    uint64_t final_value;
    std::memcpy(&final_value, b.data(), 8);
    EXPECT_EQ(final_value, 3u * kOps) << "an atomic executed twice or not at all";
  }
  EXPECT_TRUE(h.collect_for(p.scq_a, std::chrono::milliseconds(20)).empty()) << "extra completions";
  EXPECT_EQ(qp_state(p.qa), IBV_QPS_RTS);
  EXPECT_EQ(qp_state(p.qb), IBV_QPS_RTS);
  // Selective repeat is in use only where both ends offer it, and then a
  // dropped request is resent alone (a gap NAKed selectively, no rewind).
  const std::string ctr = h.counters();
  const bool both_offer = recovery == Recovery::Selective || recovery == Recovery::Sprayed;
  if (!both_offer) {
    EXPECT_EQ(ctr.find(" sr_"), std::string::npos) << "selective repeat without both ends offering it";
  } else if (fault == Fault::Drop && kind != Kind::Read && kind != Kind::FetchAdd) {
    EXPECT_NE(ctr.find(" sr_naks_rcvd="), std::string::npos) << "no selective NAK under 3% loss";
  }
  // Spraying starts once the responder said it keeps, and only then.
  if (recovery == Recovery::Sprayed) {
    EXPECT_NE(ctr.find(" spray_pkts="), std::string::npos) << "nothing sprayed";
  } else {
    EXPECT_EQ(ctr.find(" spray_pkts="), std::string::npos) << "sprayed toward a responder that does not keep";
  }
  // Reordering shallower than the responder's tolerance (this wire lets
  // at most 6 frames overtake a held one) is not loss: a sprayed stream's
  // responder NAKs nothing.  (Selective without spraying NAKs every such
  // gap at once; that is what the tolerance is for.)
  if (recovery == Recovery::Sprayed && fault == Fault::Reorder) {
    EXPECT_EQ(ctr.find(" sr_naks_sent="), std::string::npos) << "reordering NAKed as loss";
  }
  if (HasFailure()) std::printf("%s", ctr.c_str());
}

const char* recovery_suffix(Recovery r) {
  switch (r) {
    case Recovery::GoBackN: return "";
    case Recovery::Selective: return "_Selective";
    case Recovery::RequesterOnly: return "_SelectiveRequesterOnly";
    case Recovery::ResponderOnly: return "_SelectiveResponderOnly";
    case Recovery::Sprayed: return "_Sprayed";
    case Recovery::SprayedToPlain: return "_SprayedToPlain";
  }
  return "?";
}

std::string param_name(const ::testing::TestParamInfo<Param>& i) {
  return std::string(fault_name(std::get<0>(i.param))) + "_" + kind_name(std::get<1>(i.param)) +
         recovery_suffix(std::get<2>(i.param));
}

INSTANTIATE_TEST_SUITE_P(Faults, OneFault,
                         ::testing::Combine(::testing::Values(Fault::Drop, Fault::Dup, Fault::Reorder, Fault::Corrupt),
                                            ::testing::Values(Kind::Send, Kind::Write, Kind::Read, Kind::FetchAdd),
                                            ::testing::Values(Recovery::GoBackN, Recovery::Selective,
                                                              Recovery::RequesterOnly, Recovery::ResponderOnly,
                                                              Recovery::Sprayed, Recovery::SprayedToPlain)),
                         param_name);

// Go-back-N inside multi-SGE messages: every message gathers from 7 SGEs
// whose bounds do not line up with the MTU (the requester's gather cursor
// continues packet to packet and seeks back on a rewind); with 3% of the
// frames dropped the bytes still arrive exactly, in order.
TEST(GatherCursor, MultiSgeSendsSurviveLoss) {
  HarnessOptions ho;
  ho.faults = spec_for(Fault::Drop);
  Harness h(ho);
  ConnOpts o;
  o.mtu = IBV_MTU_256;
  o.timeout = 8;
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  constexpr size_t kSges = 7;
  constexpr size_t kSgeLen[kSges] = {1, 300, 77, 1024, 0, 513, 2000};
  size_t total = 0;
  for (size_t n : kSgeLen) total += n;
  constexpr int kMsgs = 40;
  Buffer a = h.buffer(h.a(), total * kMsgs, kRemoteAll);
  Buffer b = h.buffer(h.b(), total * kMsgs, kRemoteAll);
  fill_pattern(a.bytes(0, a.len), 5);
  for (int m = 0; m < kMsgs; ++m) {
    ibv_sge r = b.sge(total * m, total);
    ASSERT_EQ(post_recv(p.qb, m, {&r, 1}), 0);
  }
  for (int m = 0; m < kMsgs; ++m) {
    // The message's bytes in SGE order, each SGE from a scattered piece of
    // A's buffer: message m's SGE i takes the i-th piece of slot m.
    ibv_sge s[kSges];
    size_t off = total * m;
    for (size_t i = 0; i < kSges; ++i) {
      s[i] = a.sge(off, kSgeLen[i]);
      off += kSgeLen[i];
    }
    ibv_send_wr wr = send_wr(IBV_WR_SEND, m, {s, kSges});
    ASSERT_EQ(post_send(p.qa, wr), 0);
  }
  const auto sw = h.wait_wcs(p.scq_a, kMsgs);
  ASSERT_EQ(sw.size(), static_cast<size_t>(kMsgs));
  const auto rw = h.wait_wcs(p.rcq_b, kMsgs);
  ASSERT_EQ(rw.size(), static_cast<size_t>(kMsgs));
  for (int m = 0; m < kMsgs; ++m) {
    EXPECT_EQ(sw[m].status, IBV_WC_SUCCESS) << wc_status_name(sw[m].status);
    EXPECT_EQ(rw[m].wr_id, static_cast<uint64_t>(m));
    EXPECT_EQ(rw[m].byte_len, total);
  }
  EXPECT_EQ(first_diff(b.bytes(0, b.len), a.bytes(0, a.len)), -1);
  EXPECT_GT(h.a().rnic->counters().get(RnicCtr::req_retrans_pkts), 0u) << "no go-back-N happened";
}

}  // namespace
}  // namespace uroce::rnic::testing
