// Every opcode and QP type end to end over the sim wire: RC SEND(+IMM),
// WRITE(+IMM), READ, CMP_SWAP, FETCH_ADD; UC SEND(+IMM), WRITE(+IMM); UD
// SEND(+IMM) with the GRH; message sizes around each path MTU up to 1 MiB
// (16 MiB at two MTUs); scatter/gather on both sides; inline data;
// immediate data; the fence; completion fields; IPv6 GIDs; PSN wrap.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <fcntl.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "tests/rnic/harness.hpp"
#include "transport/rnic/limits.hpp"
#include "transport/rnic/verbs_newer.hpp"

namespace uroce::rnic::testing {
namespace {

constexpr int kRemoteAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC;
constexpr size_t kMiB = size_t{1} << 20;

const ibv_mtu kMtus[] = {IBV_MTU_256, IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096};

std::vector<size_t> sizes_for(ibv_mtu mtu, bool big) {
  const size_t m = mtu_bytes(mtu);
  std::vector<size_t> s = {0, 1, m - 1, m, m + 1, 2 * m, 5 * m + 3, kMiB};
  if (big) s.push_back(16 * kMiB);
  return s;
}

// The opcodes a connected QP carries, tested one message at a time.
enum class Op { Send, SendImm, Write, WriteImm, Read };

const char* op_name(Op op) {
  switch (op) {
    case Op::Send: return "Send";
    case Op::SendImm: return "SendImm";
    case Op::Write: return "Write";
    case Op::WriteImm: return "WriteImm";
    case Op::Read: return "Read";
  }
  return "?";
}

ibv_wr_opcode wr_opcode(Op op) {
  switch (op) {
    case Op::Send: return IBV_WR_SEND;
    case Op::SendImm: return IBV_WR_SEND_WITH_IMM;
    case Op::Write: return IBV_WR_RDMA_WRITE;
    case Op::WriteImm: return IBV_WR_RDMA_WRITE_WITH_IMM;
    case Op::Read: return IBV_WR_RDMA_READ;
  }
  return IBV_WR_SEND;
}

ibv_wc_opcode send_wc_opcode(Op op) {
  switch (op) {
    case Op::Send:
    case Op::SendImm: return IBV_WC_SEND;
    case Op::Write:
    case Op::WriteImm: return IBV_WC_RDMA_WRITE;
    case Op::Read: return IBV_WC_RDMA_READ;
  }
  return IBV_WC_SEND;
}

bool consumes_recv(Op op) { return op == Op::Send || op == Op::SendImm || op == Op::WriteImm; }
bool has_imm(Op op) { return op == Op::SendImm || op == Op::WriteImm; }

// (QP type, opcode, MTU)
using OpParam = std::tuple<ibv_qp_type, Op, ibv_mtu>;

class OpSizes : public ::testing::TestWithParam<OpParam> {};

// One message of each size: the bytes arrive exactly, nothing beyond them
// is touched, and both completions carry the right fields.
TEST_P(OpSizes, EverySizeArrivesExactly) {
  const auto [type, op, mtu] = GetParam();
  // 16 MiB only at two MTUs on RC, to stay fast.
  const bool big = type == IBV_QPT_RC && (mtu == IBV_MTU_1024 || mtu == IBV_MTU_4096) && op != Op::SendImm;
  const auto sizes = sizes_for(mtu, big);
  const size_t max = sizes.back();
  constexpr size_t kGuard = 64;

  // A UC sender is not flow-controlled: with its QP on an lcore of its
  // own (engine_lcores 2) a 1 MiB message at MTU 256 (4,096 frames) can be
  // on the wire at once; the link holds it (a switch's buffer per link
  // of that many frames), so that what is tested is each size's bytes,
  // not a race between two threads.
  HarnessOptions ho;
  ho.link_queue_frames = 8192;
  Harness h(ho);
  ConnOpts o;
  o.mtu = mtu;
  Pair p = h.pair(type, o);
  ASSERT_NE(p.qa, nullptr);
  ASSERT_NE(p.qb, nullptr);
  // READ moves B -> A; everything else A -> B.
  Buffer src = h.buffer(op == Op::Read ? h.b() : h.a(), max + kGuard, kRemoteAll);
  Buffer dst = h.buffer(op == Op::Read ? h.a() : h.b(), max + kGuard, kRemoteAll, 0xEE);
  ASSERT_NE(src.mr, nullptr);
  ASSERT_NE(dst.mr, nullptr);
  std::vector<uint8_t> want(max + kGuard, 0xEE);

  uint64_t wr_id = 100;
  for (size_t size : sizes) {
    SCOPED_TRACE(std::string(op_name(op)) + " size " + std::to_string(size));
    fill_pattern(src.bytes(0, size), size + 7);
    const uint32_t imm = htonl(static_cast<uint32_t>(0xA5000000u | size));
    if (consumes_recv(op)) {
      ibv_sge r = dst.sge(0, max);
      ASSERT_EQ(post_recv(p.qb, wr_id, {&r, 1}), 0);
    }
    ibv_sge s = op == Op::Read ? dst.sge(0, size) : src.sge(0, size);
    ibv_send_wr wr = send_wr(wr_opcode(op), wr_id, {&s, size ? 1u : 0u});
    wr.imm_data = imm;
    if (op == Op::Write || op == Op::WriteImm) {
      wr.wr.rdma.remote_addr = dst.addr();
      wr.wr.rdma.rkey = dst.rkey();
    } else if (op == Op::Read) {
      wr.wr.rdma.remote_addr = src.addr();
      wr.wr.rdma.rkey = src.rkey();
    }
    ASSERT_EQ(post_send(p.qa, wr), 0);

    const ibv_wc sw = h.wait_wc(p.scq_a);
    EXPECT_EQ(sw.status, IBV_WC_SUCCESS) << wc_status_name(sw.status);
    EXPECT_EQ(sw.wr_id, wr_id);
    EXPECT_EQ(sw.opcode, send_wc_opcode(op));
    EXPECT_EQ(sw.qp_num, p.qa->qpn().value());
    if (op == Op::Read) {
      EXPECT_EQ(sw.byte_len, size);
    }
    if (consumes_recv(op)) {
      const ibv_wc rw = h.wait_wc(p.rcq_b);
      EXPECT_EQ(rw.status, IBV_WC_SUCCESS) << wc_status_name(rw.status);
      EXPECT_EQ(rw.wr_id, wr_id);
      EXPECT_EQ(rw.opcode, op == Op::WriteImm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV);
      EXPECT_EQ(rw.byte_len, size);
      EXPECT_EQ(rw.qp_num, p.qb->qpn().value());
      EXPECT_EQ((rw.wc_flags & IBV_WC_WITH_IMM) != 0, has_imm(op));
      EXPECT_EQ(rw.wc_flags & IBV_WC_GRH, 0u) << "no GRH flag on a connected QP";
      if (has_imm(op)) {
        EXPECT_EQ(rw.imm_data, imm);
      }
    }
    // The payload, and the guard after it untouched.  (A WRITE_IMM's
    // receive buffer gets nothing: the data went to the RDMA address.)
    std::memcpy(want.data(), src.data(), size);
    // A UC WRITE's completion says the message left, not that it arrived
    // (nothing acknowledges it): every packet A sent is waited for at B
    // before the bytes are compared.  With the receiver's QP on a thread of
    // its own (engine_lcores 2) they may land after the completion.
    if (type == IBV_QPT_UC && !consumes_recv(op)) {
      const bool arrived = h.run_until([&] {
        return h.b().rnic->counters().get(RnicCtr::rx_req_pkts) >= h.a().rnic->counters().get(RnicCtr::req_pkts);
      }, std::chrono::seconds(5));
      EXPECT_TRUE(arrived) << "B took fewer packets than A sent";
      // A query is the control path: B's lcores finish their turn (the
      // last packet placed) before it returns, so the bytes are read
      // after they were written, not while.
      (void)qp_state(p.qb);
    }
    const long d = first_diff(dst.bytes(0, max + kGuard), want);
    EXPECT_EQ(d, -1) << "first wrong byte at " << d;
    std::memset(dst.data(), 0xEE, max + kGuard);
    std::memset(want.data(), 0xEE, size);
    ++wr_id;
    if (::testing::Test::HasFailure()) {
      std::printf("%s", h.counters().c_str());
      break;
    }
  }
  // Nothing else completed.
  EXPECT_TRUE(h.poll_cq(p.scq_a).empty());
  EXPECT_TRUE(h.poll_cq(p.rcq_b).empty());
  EXPECT_EQ(qp_state(p.qa), IBV_QPS_RTS);
  EXPECT_EQ(qp_state(p.qb), IBV_QPS_RTS);
}

std::string op_param_name(const ::testing::TestParamInfo<OpParam>& info) {
  const auto [type, op, mtu] = info.param;
  return std::string(type == IBV_QPT_RC ? "RC_" : "UC_") + op_name(op) + "_" + std::to_string(mtu_bytes(mtu));
}

INSTANTIATE_TEST_SUITE_P(Rc, OpSizes,
                         ::testing::Combine(::testing::Values(IBV_QPT_RC),
                                            ::testing::Values(Op::Send, Op::SendImm, Op::Write, Op::WriteImm,
                                                              Op::Read),
                                            ::testing::ValuesIn(kMtus)),
                         op_param_name);
INSTANTIATE_TEST_SUITE_P(Uc, OpSizes,
                         ::testing::Combine(::testing::Values(IBV_QPT_UC),
                                            ::testing::Values(Op::Send, Op::SendImm, Op::Write, Op::WriteImm),
                                            ::testing::ValuesIn(kMtus)),
                         op_param_name);

// ---- atomics ---------------------------------------------------------------------------

// A stream of SENDs: every message asks for an ACK (AckReq on its last
// packet), and the responder answers a burst of them with fewer ACKs: one
// that has not left yet takes the next one's PSN and MSN (responder
// coalesce_ack).  Every WQE still completes, successfully and in order.
TEST(AckCoalescing, AStreamOfSendsCostsFewerAcksEveryOneCompletes) {
  Harness h;
  Pair p = h.pair(IBV_QPT_RC);
  ASSERT_NE(p.qa, nullptr);
  constexpr uint64_t kN = 32;
  Buffer src = h.buffer(h.a(), 64, kRemoteAll, 0x5A);
  Buffer dst = h.buffer(h.b(), 64 * kN, kRemoteAll);
  for (uint64_t i = 0; i < kN; ++i) {
    ibv_sge r = dst.sge(64 * i, 64);
    ASSERT_EQ(post_recv(p.qb, i, {&r, 1}), 0);
  }
  const uint64_t acks0 = h.b().rnic->counters().get(RnicCtr::resp_pkts);
  ibv_sge s = src.sge(0, 64);
  for (uint64_t i = 0; i < kN; ++i) {
    ibv_send_wr w = send_wr(IBV_WR_SEND, i, {&s, 1});
    ASSERT_EQ(post_send(p.qa, w), 0);
  }
  const auto sent = h.wait_wcs(p.scq_a, kN);
  ASSERT_EQ(sent.size(), kN);
  for (uint64_t i = 0; i < kN; ++i) {
    EXPECT_EQ(sent[i].status, IBV_WC_SUCCESS) << wc_status_name(sent[i].status);
    EXPECT_EQ(sent[i].wr_id, i) << "in order";
  }
  EXPECT_EQ(h.wait_wcs(p.rcq_b, kN).size(), kN);
  const uint64_t acks = h.b().rnic->counters().get(RnicCtr::resp_pkts) - acks0;
  const uint64_t merged = h.b().rnic->counters().get(RnicCtr::acks_coalesced);
  EXPECT_EQ(acks + merged, kN) << "one ACK asked for per message, each sent or merged";
  EXPECT_GE(merged, 1u);
  EXPECT_LT(acks, kN);
  EXPECT_EQ(h.a().rnic->counters().get(RnicCtr::rx_resp_pkts), acks) << "A received the ACKs B sent, no more";
}

TEST(Atomics, CompareSwapAndFetchAdd) {
  Harness h;
  Pair p = h.pair(IBV_QPT_RC);
  ASSERT_NE(p.qa, nullptr);
  Buffer target = h.buffer(h.b(), 64, kRemoteAll);
  Buffer result = h.buffer(h.a(), 64, kRemoteAll, 0xCC);
  uint64_t* t = reinterpret_cast<uint64_t*>(target.data());
  t[1] = 0x1111222233334444ull;
  t[2] = 100;

  // CMP_SWAP that matches: swaps, returns the original.
  ibv_sge s = result.sge(0, 8);
  ibv_send_wr wr = atomic_wr(IBV_WR_ATOMIC_CMP_AND_SWP, 1, &s, target.addr(8), target.rkey(), 0x1111222233334444ull,
                             0x5555666677778888ull);
  ASSERT_EQ(post_send(p.qa, wr), 0);
  ibv_wc wc = h.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.opcode, IBV_WC_COMP_SWAP);
  EXPECT_EQ(wc.byte_len, 8u);
  EXPECT_EQ(wc.wr_id, 1u);
  uint64_t got;
  std::memcpy(&got, result.data(), 8);
  EXPECT_EQ(got, 0x1111222233334444ull);
  EXPECT_EQ(t[1], 0x5555666677778888ull);

  // CMP_SWAP that does not match: memory unchanged, original returned.
  s = result.sge(8, 8);
  wr = atomic_wr(IBV_WR_ATOMIC_CMP_AND_SWP, 2, &s, target.addr(8), target.rkey(), 1, 2);
  ASSERT_EQ(post_send(p.qa, wr), 0);
  wc = h.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  std::memcpy(&got, result.data() + 8, 8);
  EXPECT_EQ(got, 0x5555666677778888ull);
  EXPECT_EQ(t[1], 0x5555666677778888ull);

  // FETCH_ADD, several in a row (each returns the value before it).
  for (uint64_t i = 0; i < 10; ++i) {
    s = result.sge(16 + 8 * (i % 4), 8);
    wr = atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 10 + i, &s, target.addr(16), target.rkey(), 7, 0);
    ASSERT_EQ(post_send(p.qa, wr), 0);
    wc = h.wait_wc(p.scq_a);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.opcode, IBV_WC_FETCH_ADD);
    EXPECT_EQ(wc.wr_id, 10 + i);
    std::memcpy(&got, result.data() + 16 + 8 * (i % 4), 8);
    EXPECT_EQ(got, 100 + 7 * i);
  }
  EXPECT_EQ(t[2], 170u);
  // Wrap-around of the 64-bit add.
  t[3] = ~uint64_t{0};
  s = result.sge(48, 8);
  wr = atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, 30, &s, target.addr(24), target.rkey(), 2, 0);
  ASSERT_EQ(post_send(p.qa, wr), 0);
  EXPECT_EQ(h.wait_wc(p.scq_a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(t[3], 1u);
  EXPECT_EQ(t[0], 0u) << "the word before the target is untouched";
  EXPECT_EQ(t[4], 0u) << "the word after the target is untouched";
}

// ATOMIC WRITE (IBA 1.5): 8 bytes stored in one piece, from an SGE or
// inline (kept in the WQE even with max_inline_data 0), completed as
// IBV_WC_ATOMIC_WRITE; the post rules: RC only, exactly 8 bytes.
TEST(Atomics, AtomicWrite) {
  Harness h;
  QpCaps caps;
  caps.max_inline_data = 0;
  Pair p = h.pair(IBV_QPT_RC, {}, caps);
  ASSERT_NE(p.qa, nullptr);
  Buffer target = h.buffer(h.b(), 64, kRemoteAll);
  Buffer src = h.buffer(h.a(), 64, kRemoteAll);
  const uint64_t v1 = 0x0102030405060708ull;
  std::memcpy(src.data(), &v1, 8);
  ibv_sge s = src.sge(0, 8);
  ibv_send_wr wr = rdma_wr(IBV_WR_ATOMIC_WRITE, 1, {&s, 1}, target.addr(8), target.rkey());
  ASSERT_EQ(post_send(p.qa, wr), 0);
  ibv_wc wc = h.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_EQ(std::memcmp(target.data() + 8, &v1, 8), 0);  // the bytes in the order given
  // Inline: the value is taken at post time.
  uint64_t v2 = 0xA1A2A3A4A5A6A7A8ull;
  ibv_sge in{reinterpret_cast<uint64_t>(&v2), 8, 0};
  wr = rdma_wr(IBV_WR_ATOMIC_WRITE, 2, {&in, 1}, target.addr(16), target.rkey(), IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  ASSERT_EQ(post_send(p.qa, wr), 0);
  v2 = 0;
  wc = h.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.opcode, IBV_WC_ATOMIC_WRITE);
  uint64_t got = 0;
  std::memcpy(&got, target.data() + 16, 8);
  EXPECT_EQ(got, 0xA1A2A3A4A5A6A7A8ull);
  for (size_t i : {0, 24, 32}) EXPECT_EQ(target.data()[i], 0) << "byte " << i << " untouched";
  // Misaligned: the responder refuses it and stores nothing.
  wr = rdma_wr(IBV_WR_ATOMIC_WRITE, 4, {&s, 1}, target.addr(36), target.rkey());
  ASSERT_EQ(post_send(p.qa, wr), 0);
  wc = h.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_REM_INV_REQ_ERR) << wc_status_name(wc.status);
  for (size_t i = 32; i < 48; ++i) EXPECT_EQ(target.data()[i], 0) << "byte " << i;
  // Not 8 bytes: the send queue takes it, and it completes with a local
  // length error, nothing sent (as ConnectX).
  Pair p2 = h.pair(IBV_QPT_RC);
  ASSERT_NE(p2.qa, nullptr);
  ibv_sge nine = src.sge(0, 9);
  wr = rdma_wr(IBV_WR_ATOMIC_WRITE, 3, {&nine, 1}, target.addr(8), target.rkey(), IBV_SEND_SIGNALED);
  ASSERT_EQ(post_send(p2.qa, wr), 0);
  wc = h.wait_wc(p2.scq_a);
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_LEN_ERR) << wc_status_name(wc.status);
  EXPECT_EQ(std::memcmp(target.data() + 8, &v1, 8), 0) << "the first value stays";
  // UC has no ATOMIC WRITE: taken, completed with a local QP operation error.
  Pair u = h.pair(IBV_QPT_UC);
  ASSERT_NE(u.qa, nullptr);
  wr = rdma_wr(IBV_WR_ATOMIC_WRITE, 5, {&s, 1}, target.addr(8), target.rkey(), IBV_SEND_SIGNALED);
  ASSERT_EQ(post_send(u.qa, wr), 0);
  wc = h.wait_wc(u.scq_a);
  EXPECT_EQ(wc.wr_id, 5u);
  EXPECT_EQ(wc.status, IBV_WC_LOC_QP_OP_ERR) << wc_status_name(wc.status);
}

// FLUSH (IBA 1.5) end to end, as ibv_wr_flush posts it (wr.atomic: the
// range, its length in compare_add, type | level << 8 in swap): after a
// WRITE, at the RANGE and the MR level, completed as IBV_WC_FLUSH with no
// bytes; the peer's refusals as completion errors; the post rules (RC
// only, no data, a placement type and a level it knows, one message's
// length at most).
ibv_send_wr flush_wr(uint64_t wr_id, uint64_t addr, uint32_t rkey, uint64_t len, uint8_t type, uint8_t level) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.opcode = verbs_newer::kWrFlush;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.atomic = {addr, len, uint64_t{type} | uint64_t{level} << 8, rkey};
  return wr;
}

TEST(Flush, AfterAWriteAtBothLevels) {
  namespace v = verbs_newer;
  Harness h;
  ConnOpts o;
  o.access |= v::kAccessFlushGlobal;
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  Buffer target = h.buffer(h.b(), 4096, kRemoteAll | v::kAccessFlushGlobal);
  Buffer src = h.buffer(h.a(), 4096, kRemoteAll, 0x3C);
  ibv_sge s = src.sge(0, 4096);
  ibv_send_wr w = rdma_wr(IBV_WR_RDMA_WRITE, 1, {&s, 1}, target.addr(0), target.rkey(), 0);
  ibv_send_wr f = flush_wr(2, target.addr(0), target.rkey(), 4096, v::kFlushGlobal, v::kFlushRange);
  w.next = &f;
  ASSERT_EQ(post_send(p.qa, w), 0);
  ibv_wc wc = h.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.wr_id, 2u);
  EXPECT_EQ(wc.opcode, v::kWcFlush);
  EXPECT_EQ(wc.byte_len, 0u);
  for (size_t i = 0; i < 4096; ++i) ASSERT_EQ(target.data()[i], 0x3C) << "byte " << i << " before the FLUSH completed";
  f = flush_wr(3, 0, target.rkey(), 0, v::kFlushGlobal, v::kFlushMr);
  ASSERT_EQ(post_send(p.qa, f), 0);
  wc = h.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  EXPECT_EQ(wc.opcode, v::kWcFlush);
  EXPECT_EQ(h.b().rnic->counters().get(RnicCtr::flushes_executed), 2u);

  // Refused at post: nothing posted.
  struct Bad {
    const char* what;
    ibv_send_wr wr;
  };
  ibv_sge one = src.sge(0, 8);
  Bad bad[] = {
      {"no placement type", flush_wr(4, target.addr(0), target.rkey(), 8, 0, v::kFlushRange)},
      {"unknown placement type", flush_wr(4, target.addr(0), target.rkey(), 8, 4, v::kFlushRange)},
      {"selectivity level 2", flush_wr(4, target.addr(0), target.rkey(), 8, v::kFlushGlobal, 2)},
      {"past max_msg_sz", flush_wr(4, target.addr(0), target.rkey(), uint64_t{kMaxMsgSize} + 1, v::kFlushGlobal,
                                   v::kFlushRange)},
      {"with data", flush_wr(4, target.addr(0), target.rkey(), 8, v::kFlushGlobal, v::kFlushRange)},
  };
  bad[4].wr.sg_list = &one;
  bad[4].wr.num_sge = 1;
  for (Bad& b : bad) EXPECT_EQ(post_send(p.qa, b.wr), EINVAL) << b.what;
  Pair u = h.pair(IBV_QPT_UC);
  ASSERT_NE(u.qa, nullptr);
  f = flush_wr(5, target.addr(0), target.rkey(), 8, v::kFlushGlobal, v::kFlushRange);
  ASSERT_EQ(post_send(u.qa, f), 0) << "UC has no FLUSH: taken, and it completes in error";
  const ibv_wc uwc = h.wait_wc(u.scq_a);
  EXPECT_EQ(uwc.wr_id, 5u);
  EXPECT_EQ(uwc.status, IBV_WC_LOC_QP_OP_ERR) << wc_status_name(uwc.status);
  EXPECT_EQ(h.b().rnic->counters().get(RnicCtr::flushes_executed), 2u);
}

TEST(Flush, PeerRefusalsCompleteInError) {
  namespace v = verbs_newer;
  struct Case {
    const char* what;
    int qp_access;   // the responder QP's
    int mr_access;   // the target MR's
    uint64_t off;
    uint64_t len;
    uint8_t type;
    ibv_wc_status status;
  };
  const Case cases[] = {
      {"QP without the flush right", kRemoteAll & ~IBV_ACCESS_LOCAL_WRITE, kRemoteAll | v::kAccessFlushGlobal, 0, 8,
       v::kFlushGlobal, IBV_WC_REM_INV_REQ_ERR},
      {"MR without the flush right", (kRemoteAll & ~IBV_ACCESS_LOCAL_WRITE) | v::kAccessFlushGlobal, kRemoteAll, 0,
       8, v::kFlushGlobal, IBV_WC_REM_ACCESS_ERR},
      {"range past the MR", (kRemoteAll & ~IBV_ACCESS_LOCAL_WRITE) | v::kAccessFlushGlobal,
       kRemoteAll | v::kAccessFlushGlobal, 60, 8, v::kFlushGlobal, IBV_WC_REM_ACCESS_ERR},
      {"persistence", (kRemoteAll & ~IBV_ACCESS_LOCAL_WRITE) | v::kAccessFlushGlobal,
       kRemoteAll | v::kAccessFlushGlobal, 0, 8, v::kFlushPersistent, IBV_WC_REM_INV_REQ_ERR},
  };
  for (const Case& c : cases) {
    Harness h;
    ConnOpts o;
    o.access = c.qp_access;
    Pair p = h.pair(IBV_QPT_RC, o);
    ASSERT_NE(p.qa, nullptr) << c.what;
    Buffer target = h.buffer(h.b(), 64, c.mr_access);
    ibv_send_wr f = flush_wr(7, target.addr(c.off), target.rkey(), c.len, c.type, v::kFlushRange);
    ASSERT_EQ(post_send(p.qa, f), 0) << c.what;
    const ibv_wc wc = h.wait_wc(p.scq_a);
    EXPECT_EQ(wc.status, c.status) << c.what << ": " << wc_status_name(wc.status);
    EXPECT_EQ(wc.wr_id, 7u) << c.what;
    EXPECT_EQ(h.b().rnic->counters().get(RnicCtr::flushes_executed), 0u) << c.what;
  }
}

// Many atomics in flight at once (up to max_rd_atomic), all executed once.
TEST(Atomics, PipelinedFetchAddExecutesEachOnce) {
  Harness h;
  ConnOpts o;
  o.max_rd_atomic = 8;
  o.max_dest_rd_atomic = 8;
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  Buffer target = h.buffer(h.b(), 8, kRemoteAll);
  constexpr int kN = 100;
  Buffer result = h.buffer(h.a(), 8 * kN, kRemoteAll);
  for (int i = 0; i < kN; ++i) {
    ibv_sge s = result.sge(8 * i, 8);
    ibv_send_wr wr = atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, i, &s, target.addr(), target.rkey(), 1, 0);
    ASSERT_EQ(post_send(p.qa, wr), 0);
  }
  const auto wcs = h.wait_wcs(p.scq_a, kN);
  ASSERT_EQ(wcs.size(), size_t{kN});
  for (int i = 0; i < kN; ++i) {
    EXPECT_EQ(wcs[i].wr_id, uint64_t(i)) << "completions in order";
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS);
    uint64_t got;
    std::memcpy(&got, result.data() + 8 * i, 8);
    EXPECT_EQ(got, uint64_t(i));
  }
  uint64_t final_value;
  std::memcpy(&final_value, target.data(), 8);
  EXPECT_EQ(final_value, uint64_t{kN});
}

// ---- UD ----------------------------------------------------------------------------------

class UdSend : public ::testing::TestWithParam<std::tuple<bool, bool>> {};  // (imm, ipv6)

std::string ud_param_name(const ::testing::TestParamInfo<std::tuple<bool, bool>>& i) {
  return std::string(std::get<0>(i.param) ? "Imm" : "NoImm") + (std::get<1>(i.param) ? "_IPv6" : "_IPv4");
}

TEST_P(UdSend, DeliversWithGrh) {
  const auto [imm, ipv6] = GetParam();
  Harness h;
  Cq* scq = h.cq(h.a());
  Cq* rcq = h.cq(h.b());
  Cq* other = h.cq(h.a());
  Cq* other_b = h.cq(h.b());
  Qp* qa = h.qp(h.a(), IBV_QPT_UD, scq, other);
  Qp* qb = h.qp(h.b(), IBV_QPT_UD, other_b, rcq);
  ASSERT_TRUE(qa && qb);
  ASSERT_EQ(h.ud_ready(qa), 0);
  ASSERT_EQ(h.ud_ready(qb), 0);
  Ah* ah = h.ah(h.a(), h.b(), ipv6);
  ASSERT_NE(ah, nullptr);

  ibv_port_attr pa{};
  ASSERT_EQ(h.a().rnic->query_port(kPortNum, &pa), 0);
  const size_t mtu = mtu_bytes(pa.active_mtu);
  ASSERT_GT(mtu, 0u);
  Buffer src = h.buffer(h.a(), mtu, kRemoteAll);
  Buffer dst = h.buffer(h.b(), mtu + kGrhBytes + 64, kRemoteAll, 0xEE);
  uint64_t id = 1;
  for (size_t size : {size_t{0}, size_t{1}, size_t{100}, mtu - 1, mtu}) {
    SCOPED_TRACE("size " + std::to_string(size));
    fill_pattern(src.bytes(0, size), size);
    std::memset(dst.data(), 0xEE, dst.len);
    ibv_sge r = dst.sge(0, mtu + kGrhBytes);
    ASSERT_EQ(post_recv(qb, id, {&r, 1}), 0);
    ibv_sge s = src.sge(0, size);
    ibv_send_wr wr = send_wr(imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, id, {&s, size ? 1u : 0u});
    wr.imm_data = htonl(0xBEEF0000u + static_cast<uint32_t>(size));
    wr.wr.ud.ah = &ah->ibv;
    wr.wr.ud.remote_qpn = qb->qpn().value();
    wr.wr.ud.remote_qkey = kUdQkey;
    ASSERT_EQ(post_send(qa, wr), 0);
    const ibv_wc sw = h.wait_wc(scq);
    EXPECT_EQ(sw.status, IBV_WC_SUCCESS) << wc_status_name(sw.status);
    EXPECT_EQ(sw.opcode, IBV_WC_SEND);
    EXPECT_EQ(sw.wr_id, id);
    const ibv_wc rw = h.wait_wc(rcq);
    EXPECT_EQ(rw.status, IBV_WC_SUCCESS) << wc_status_name(rw.status);
    EXPECT_EQ(rw.opcode, IBV_WC_RECV);
    EXPECT_EQ(rw.wr_id, id);
    EXPECT_EQ(rw.byte_len, size + kGrhBytes);
    EXPECT_EQ(rw.src_qp, qa->qpn().value());
    EXPECT_EQ(rw.qp_num, qb->qpn().value());
    EXPECT_NE(rw.wc_flags & IBV_WC_GRH, 0u);
    EXPECT_EQ((rw.wc_flags & IBV_WC_WITH_IMM) != 0, imm);
    if (imm) {
      EXPECT_EQ(rw.imm_data, wr.imm_data);
    }
    EXPECT_EQ(rw.pkey_index, 0u);
    // sl names the network header as ConnectX's CQE does (RoCEv2: 0x8, plus
    // L3 type 1 IPv6 / 2 IPv4); UCX's ud_verbs depends on it.
    EXPECT_EQ(rw.sl, ipv6 ? 0x9 : 0xA);
    // The GRH: IPv6 header, or for IPv4 the IPv4 header in its last 20 bytes.
    const uint8_t* g = dst.data();
    if (ipv6) {
      EXPECT_EQ(g[0] >> 4, 6);
      EXPECT_EQ(std::memcmp(g + 8, h.a().ip6.data(), 16), 0) << "SGID";
      EXPECT_EQ(std::memcmp(g + 24, h.b().ip6.data(), 16), 0) << "DGID";
    } else {
      for (int i = 0; i < 20; ++i) EXPECT_EQ(g[i], 0) << "GRH byte " << i;
      EXPECT_EQ(g[20] >> 4, 4);
      uint32_t sip, dip;
      std::memcpy(&sip, g + 20 + 12, 4);
      std::memcpy(&dip, g + 20 + 16, 4);
      EXPECT_EQ(ntohl(sip), h.a().ip4);
      EXPECT_EQ(ntohl(dip), h.b().ip4);
    }
    EXPECT_EQ(first_diff(dst.bytes(kGrhBytes, size), src.bytes(0, size)), -1);
    EXPECT_EQ(dst.data()[kGrhBytes + size], 0xEE) << "nothing beyond the message";
    ++id;
  }
}

INSTANTIATE_TEST_SUITE_P(Ud, UdSend, ::testing::Combine(::testing::Bool(), ::testing::Bool()),
                         ud_param_name);

// A UD datagram with the wrong Q_Key is dropped and counted (IBA 10.2.5 / C10-15).
TEST(Ud, WrongQkeyDropped) {
  Harness h;
  Cq* ca = h.cq(h.a());
  Cq* cb = h.cq(h.b());
  Qp* qa = h.qp(h.a(), IBV_QPT_UD, ca, ca);
  Qp* qb = h.qp(h.b(), IBV_QPT_UD, cb, cb);
  ASSERT_TRUE(qa && qb);
  ASSERT_EQ(h.ud_ready(qa), 0);
  ASSERT_EQ(h.ud_ready(qb), 0);
  Ah* ah = h.ah(h.a(), h.b());
  Buffer src = h.buffer(h.a(), 64, kRemoteAll);
  Buffer dst = h.buffer(h.b(), 256, kRemoteAll);
  ibv_sge r = dst.sge(0, 256);
  ASSERT_EQ(post_recv(qb, 1, {&r, 1}), 0);
  ibv_sge s = src.sge(0, 64);
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 1, {&s, 1});
  wr.wr.ud.ah = &ah->ibv;
  wr.wr.ud.remote_qpn = qb->qpn().value();
  wr.wr.ud.remote_qkey = kUdQkey + 1;
  ASSERT_EQ(post_send(qa, wr), 0);
  EXPECT_EQ(h.wait_wc(ca).status, IBV_WC_SUCCESS);
  EXPECT_TRUE(h.collect_for(cb, std::chrono::milliseconds(50)).empty());
  EXPECT_EQ(h.b().rnic->counters().get(RnicCtr::drop_qkey), 1u);
  // The right Q_Key then gets through into the same receive.
  wr.wr.ud.remote_qkey = kUdQkey;
  wr.wr_id = 2;
  ASSERT_EQ(post_send(qa, wr), 0);
  EXPECT_EQ(h.wait_wc(ca).wr_id, 2u);
  const ibv_wc rw = h.wait_wc(cb);
  EXPECT_EQ(rw.status, IBV_WC_SUCCESS);
  EXPECT_EQ(rw.wr_id, 1u);
}

// ---- scatter/gather ------------------------------------------------------------------

// Several SGEs from several MRs on both sides, odd lengths that straddle
// packet boundaries.
TEST(ScatterGather, SendGathersAndReceiveScatters) {
  Harness h;
  ConnOpts o;
  o.mtu = IBV_MTU_256;
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  const std::vector<size_t> gather = {1, 255, 3, 700, 0, 129, 1000};
  const std::vector<size_t> scatter = {17, 513, 2, 1000, 600};
  std::vector<Buffer> gbufs, sbufs;
  std::vector<ibv_sge> gs, ss;
  std::vector<uint8_t> msg;
  for (size_t i = 0; i < gather.size(); ++i) {
    gbufs.push_back(h.buffer(h.a(), gather[i] + 16, kRemoteAll));
    fill_pattern(gbufs.back().bytes(0, gather[i] + 16), 50 + i);
    gs.push_back(gbufs.back().sge(5, gather[i]));  // an offset into the MR
    msg.insert(msg.end(), gbufs.back().data() + 5, gbufs.back().data() + 5 + gather[i]);
  }
  size_t cap = 0;
  for (size_t i = 0; i < scatter.size(); ++i) {
    sbufs.push_back(h.buffer(h.b(), scatter[i] + 16, kRemoteAll, 0xEE));
    ss.push_back(sbufs.back().sge(3, scatter[i]));
    cap += scatter[i];
  }
  ASSERT_GE(cap, msg.size());
  ASSERT_EQ(post_recv(p.qb, 9, ss), 0);
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 9, gs);
  ASSERT_EQ(post_send(p.qa, wr), 0);
  EXPECT_EQ(h.wait_wc(p.scq_a).status, IBV_WC_SUCCESS);
  const ibv_wc rw = h.wait_wc(p.rcq_b);
  EXPECT_EQ(rw.status, IBV_WC_SUCCESS);
  EXPECT_EQ(rw.byte_len, msg.size());
  size_t off = 0;
  for (size_t i = 0; i < scatter.size(); ++i) {
    const uint8_t* d = sbufs[i].data();
    EXPECT_EQ(d[0], 0xEE);
    EXPECT_EQ(d[2], 0xEE);
    const size_t n = std::min(scatter[i], msg.size() - off);
    EXPECT_EQ(first_diff({d + 3, n}, {msg.data() + off, n}), -1) << "SGE " << i;
    for (size_t k = 3 + n; k < scatter[i] + 16; ++k) {
      ASSERT_EQ(d[k], 0xEE) << "SGE " << i << " byte " << k << " beyond the message";
    }
    off += n;
  }
}

TEST(ScatterGather, WriteGathersAndReadScatters) {
  Harness h;
  ConnOpts o;
  o.mtu = IBV_MTU_512;
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  Buffer remote = h.buffer(h.b(), 8192, kRemoteAll, 0xEE);
  Buffer local = h.buffer(h.a(), 8192, kRemoteAll);
  fill_pattern(local.bytes(0, 8192), 3);
  // WRITE from 4 pieces of A's buffer, out of order, into one range of B.
  std::vector<ibv_sge> g = {local.sge(4000, 1000), local.sge(1, 511), local.sge(7000, 1), local.sge(100, 1500)};
  std::vector<uint8_t> msg;
  for (const auto& s : g) msg.insert(msg.end(), local.data() + (s.addr - local.addr()), local.data() + (s.addr - local.addr()) + s.length);
  ibv_send_wr wr = rdma_wr(IBV_WR_RDMA_WRITE, 1, g, remote.addr(333), remote.rkey());
  ASSERT_EQ(post_send(p.qa, wr), 0);
  EXPECT_EQ(h.wait_wc(p.scq_a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(first_diff(remote.bytes(333, msg.size()), msg), -1);
  EXPECT_EQ(remote.data()[332], 0xEE);
  EXPECT_EQ(remote.data()[333 + msg.size()], 0xEE);

  // READ it back into 3 other pieces of a fresh buffer.
  Buffer back = h.buffer(h.a(), 8192, kRemoteAll, 0x11);
  std::vector<ibv_sge> sc = {back.sge(5000, 7), back.sge(10, 2000), back.sge(3000, msg.size() - 2007)};
  wr = rdma_wr(IBV_WR_RDMA_READ, 2, sc, remote.addr(333), remote.rkey());
  ASSERT_EQ(post_send(p.qa, wr), 0);
  const ibv_wc wc = h.wait_wc(p.scq_a);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, msg.size());
  std::vector<uint8_t> got;
  for (const auto& s : sc) got.insert(got.end(), back.data() + (s.addr - back.addr()), back.data() + (s.addr - back.addr()) + s.length);
  EXPECT_EQ(first_diff(got, msg), -1);
  EXPECT_EQ(back.data()[4999], 0x11);
  EXPECT_EQ(back.data()[5007], 0x11);
  EXPECT_EQ(back.data()[9], 0x11);
  EXPECT_EQ(back.data()[2010], 0x11);
}

// ---- inline ----------------------------------------------------------------------------

// Inline data is copied at post time: the buffer may change (and need not
// be registered) right after post_send returns.
TEST(Inline, CopiedAtPostTime) {
  Harness h;
  QpCaps caps;
  caps.max_inline_data = 256;
  Pair p = h.pair(IBV_QPT_RC, {}, caps);
  ASSERT_NE(p.qa, nullptr);
  Buffer dst = h.buffer(h.b(), 1024, kRemoteAll, 0xEE);
  std::vector<uint8_t> plain(256);
  fill_pattern(plain, 77);
  const std::vector<uint8_t> want = plain;
  // SEND inline (lkey 0: not looked up).
  ibv_sge r = dst.sge(0, 512);
  ASSERT_EQ(post_recv(p.qb, 1, {&r, 1}), 0);
  ibv_sge s{reinterpret_cast<uint64_t>(plain.data()), 200, 0};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 1, {&s, 1}, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  ASSERT_EQ(post_send(p.qa, wr), 0);
  std::fill(plain.begin(), plain.end(), 0);
  EXPECT_EQ(h.wait_wc(p.scq_a).status, IBV_WC_SUCCESS);
  const ibv_wc rw = h.wait_wc(p.rcq_b);
  EXPECT_EQ(rw.status, IBV_WC_SUCCESS);
  EXPECT_EQ(rw.byte_len, 200u);
  EXPECT_EQ(first_diff(dst.bytes(0, 200), {want.data(), 200}), -1);
  // WRITE inline from two SGEs.
  plain = want;
  ibv_sge two[2] = {{reinterpret_cast<uint64_t>(plain.data()), 100, 0},
                    {reinterpret_cast<uint64_t>(plain.data() + 150), 106, 0}};
  wr = rdma_wr(IBV_WR_RDMA_WRITE, 2, two, dst.addr(600), dst.rkey(), IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  ASSERT_EQ(post_send(p.qa, wr), 0);
  std::fill(plain.begin(), plain.end(), 0);
  EXPECT_EQ(h.wait_wc(p.scq_a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(first_diff(dst.bytes(600, 100), {want.data(), 100}), -1);
  EXPECT_EQ(first_diff(dst.bytes(700, 106), {want.data() + 150, 106}), -1);
  EXPECT_EQ(dst.data()[806], 0xEE);
  // Past max_inline_data: EINVAL.
  ibv_sge big{reinterpret_cast<uint64_t>(plain.data()), static_cast<uint32_t>(p.qa->cap().max_inline_data + 1), 0};
  wr = send_wr(IBV_WR_SEND, 3, {&big, 1}, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  EXPECT_EQ(post_send(p.qa, wr), EINVAL);
}

// A send WQE's slot is free when its CQE is published: a program that
// posts again as soon as it polls a completion finds room even at
// max_send_wr 1 (qperf's latency tests).  The CQ's push hook runs right
// after the entry is published, on the engine, and looks at the SQ then.
struct PushProbe {
  Qp* qp = nullptr;
  int pushes = 0;
  int sq_full_at_push = 0;
};
void probe_push(void* arg) noexcept {
  auto* p = static_cast<PushProbe*>(arg);
  ++p->pushes;
  if (p->qp->sq.full()) ++p->sq_full_at_push;
}

TEST(SendQueue, SlotFreeBeforeItsCompletionIsSeen) {
  Harness h;
  QpCaps caps;
  caps.max_send_wr = 1;
  Pair p = h.pair(IBV_QPT_RC, {}, caps);
  ASSERT_NE(p.qa, nullptr);
  PushProbe probe{p.qa};
  h.a().engine->run_sync([&] { p.scq_a->set_push_hook(&probe_push, &probe); });
  Buffer src = h.buffer(h.a(), 64, kRemoteAll, 0x11);
  Buffer dst = h.buffer(h.b(), 64, kRemoteAll, 0);
  for (uint64_t i = 0; i < 4; ++i) {
    ibv_sge s = src.sge(0, 64);
    ibv_send_wr wr = i % 2 ? rdma_wr(IBV_WR_RDMA_READ, i, {&s, 1}, dst.addr(), dst.rkey())
                           : rdma_wr(IBV_WR_RDMA_WRITE, i, {&s, 1}, dst.addr(), dst.rkey());
    ASSERT_EQ(post_send(p.qa, wr), 0) << "post " << i;
    const ibv_wc wc = h.wait_wc(p.scq_a);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << wc_status_name(wc.status);
  }
  h.a().engine->run_sync([&] { p.scq_a->set_push_hook(nullptr, nullptr); });
  EXPECT_EQ(probe.pushes, 4);
  EXPECT_EQ(probe.sq_full_at_push, 0) << "a CQE was visible while its WQE still held the only slot";
}

// max_inline_data is at least what the send SGEs occupy (16 bytes each), as
// rxe sizes and reports it: a QP asked for 0 bytes and 1 SGE takes 16 bytes
// inline (rdma_xclient does), not 17.
TEST(Inline, AtLeastTheSgesRoom) {
  Harness h;
  QpCaps caps;
  caps.max_inline_data = 0;
  caps.max_send_sge = 1;
  Pair p = h.pair(IBV_QPT_RC, {}, caps);
  ASSERT_NE(p.qa, nullptr);
  EXPECT_EQ(p.qa->cap().max_inline_data, 16u);
  Buffer dst = h.buffer(h.b(), 64, kRemoteAll, 0xEE);
  std::vector<uint8_t> plain(17);
  fill_pattern(plain, 78);
  ibv_sge r = dst.sge(0, 64);
  ASSERT_EQ(post_recv(p.qb, 1, {&r, 1}), 0);
  ibv_sge s{reinterpret_cast<uint64_t>(plain.data()), 16, 0};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 1, {&s, 1}, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  ASSERT_EQ(post_send(p.qa, wr), 0);
  EXPECT_EQ(h.wait_wc(p.scq_a).status, IBV_WC_SUCCESS);
  const ibv_wc wc = h.wait_wc(p.rcq_b);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, 16u);
  EXPECT_EQ(first_diff(dst.bytes(0, 16), {plain.data(), 16}), -1);
  s.length = 17;
  wr = send_wr(IBV_WR_SEND, 2, {&s, 1}, IBV_SEND_SIGNALED | IBV_SEND_INLINE);
  EXPECT_EQ(post_send(p.qa, wr), EINVAL);
}

// ---- fence and ordering ------------------------------------------------------------------

// READ into L, then a fenced WRITE from L: the WRITE carries what the READ
// brought (IBA 10.8.3.3: the fenced WQE waits for earlier READ/atomics).
TEST(Fence, WriteAfterReadSeesTheReadDone) {
  Harness h;
  ConnOpts o;
  o.mtu = IBV_MTU_1024;
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  constexpr size_t kLen = 64 * 1024;
  Buffer r1 = h.buffer(h.b(), kLen, kRemoteAll);
  Buffer r2 = h.buffer(h.b(), kLen, kRemoteAll, 0xEE);
  Buffer l = h.buffer(h.a(), kLen, kRemoteAll, 0x00);
  fill_pattern(r1.bytes(0, kLen), 99);
  for (int round = 0; round < 5; ++round) {
    std::memset(l.data(), round, kLen);
    std::memset(r2.data(), 0xEE, kLen);
    ibv_sge s = l.sge(0, kLen);
    ibv_send_wr rd = rdma_wr(IBV_WR_RDMA_READ, 1, {&s, 1}, r1.addr(), r1.rkey(), 0);
    ibv_send_wr wr = rdma_wr(IBV_WR_RDMA_WRITE, 2, {&s, 1}, r2.addr(), r2.rkey(), IBV_SEND_SIGNALED | IBV_SEND_FENCE);
    rd.next = &wr;
    ASSERT_EQ(post_send(p.qa, rd), 0);
    const ibv_wc wc = h.wait_wc(p.scq_a);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 2u);
    EXPECT_EQ(first_diff(r2.bytes(0, kLen), r1.bytes(0, kLen)), -1) << "round " << round;
  }
}

// A long mixed stream on one QP: completions come in posting order, each
// once; unsignaled WQEs produce none.
TEST(Ordering, MixedStreamCompletesInOrder) {
  Harness h;
  ConnOpts o;
  o.mtu = IBV_MTU_1024;
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  Buffer a = h.buffer(h.a(), 1 << 20, kRemoteAll);
  Buffer b = h.buffer(h.b(), 1 << 20, kRemoteAll);
  fill_pattern(a.bytes(0, a.len), 1);
  fill_pattern(b.bytes(0, b.len), 2);
  constexpr int kN = 400;
  std::vector<uint64_t> signaled;
  int recvs = 0;
  int posted = 0;
  while (posted < kN) {
    const int kind = posted % 5;
    const size_t len = 1 + (posted * 997) % 5000;
    const size_t off = (posted * 4096) % ((1 << 20) - 8192);
    ibv_sge s = a.sge(off, len);
    ibv_sge at = a.sge(off & ~size_t{7}, 8);  // the atomic's result: the WR points at it until posted
    const unsigned flags = posted % 3 ? IBV_SEND_SIGNALED : 0;
    ibv_send_wr wr{};
    switch (kind) {
      case 0:
      case 1: {
        ibv_sge r = b.sge(off, 8192);
        ASSERT_EQ(post_recv(p.qb, posted, {&r, 1}), 0);
        ++recvs;
        wr = send_wr(IBV_WR_SEND, posted, {&s, 1}, flags);
        break;
      }
      case 2: wr = rdma_wr(IBV_WR_RDMA_WRITE, posted, {&s, 1}, b.addr(off), b.rkey(), flags); break;
      case 3: wr = rdma_wr(IBV_WR_RDMA_READ, posted, {&s, 1}, b.addr(off), b.rkey(), flags); break;
      default:
        wr = atomic_wr(IBV_WR_ATOMIC_FETCH_AND_ADD, posted, &at, b.addr(off & ~size_t{7}), b.rkey(), 1, 0, flags);
        break;
    }
    if (flags) signaled.push_back(posted);
    ASSERT_EQ(post_send(p.qa, wr), 0);
    ++posted;
    if (posted % 64 == 0) h.run_for(std::chrono::milliseconds(1));  // kN stays below the SQ's 512
  }
  const auto wcs = h.wait_wcs(p.scq_a, signaled.size());
  ASSERT_EQ(wcs.size(), signaled.size());
  for (size_t i = 0; i < wcs.size(); ++i) {
    EXPECT_EQ(wcs[i].wr_id, signaled[i]) << i;
    EXPECT_EQ(wcs[i].status, IBV_WC_SUCCESS) << i;
  }
  const auto rw = h.wait_wcs(p.rcq_b, recvs);
  EXPECT_EQ(rw.size(), size_t(recvs));
  EXPECT_TRUE(h.collect_for(p.scq_a, std::chrono::milliseconds(20)).empty()) << "no extra completions";
}

// ---- paths -----------------------------------------------------------------------------

// GIDs from the IPv6 addresses: RC over IPv6.
TEST(Paths, RcOverIpv6) {
  Harness h;
  ConnOpts o;
  o.ipv6 = true;
  o.mtu = IBV_MTU_4096;
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  Buffer src = h.buffer(h.a(), 100000, kRemoteAll);
  Buffer dst = h.buffer(h.b(), 100000, kRemoteAll);
  fill_pattern(src.bytes(0, src.len), 5);
  ibv_sge r = dst.sge(0, dst.len);
  ASSERT_EQ(post_recv(p.qb, 1, {&r, 1}), 0);
  ibv_sge s = src.sge(0, src.len);
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 1, {&s, 1});
  ASSERT_EQ(post_send(p.qa, wr), 0);
  EXPECT_EQ(h.wait_wc(p.scq_a).status, IBV_WC_SUCCESS);
  const ibv_wc rw = h.wait_wc(p.rcq_b);
  EXPECT_EQ(rw.status, IBV_WC_SUCCESS);
  EXPECT_EQ(rw.byte_len, src.len);
  EXPECT_EQ(first_diff(dst.bytes(0, dst.len), src.bytes(0, src.len)), -1);
  // READ back over the same path.
  Buffer back = h.buffer(h.a(), 100000, kRemoteAll);
  ibv_sge bs = back.sge(0, back.len);
  wr = rdma_wr(IBV_WR_RDMA_READ, 2, {&bs, 1}, dst.addr(), dst.rkey());
  ASSERT_EQ(post_send(p.qa, wr), 0);
  EXPECT_EQ(h.wait_wc(p.scq_a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(first_diff(back.bytes(0, back.len), src.bytes(0, src.len)), -1);
}

// Both PSNs start just below 2^24: every message crosses the wrap.
TEST(Paths, PsnWrap) {
  Harness h;
  ConnOpts o;
  o.mtu = IBV_MTU_256;
  o.psn_a = 0xFFFFFA;
  o.psn_b = 0xFFFFFE;
  Pair p = h.pair(IBV_QPT_RC, o);
  ASSERT_NE(p.qa, nullptr);
  Buffer a = h.buffer(h.a(), 8192, kRemoteAll);
  Buffer b = h.buffer(h.b(), 8192, kRemoteAll);
  fill_pattern(a.bytes(0, 8192), 8);
  fill_pattern(b.bytes(0, 8192), 9);
  std::vector<uint8_t> from_b(b.data(), b.data() + 8192);
  ibv_sge s = a.sge(0, 4096);
  ibv_send_wr wr = rdma_wr(IBV_WR_RDMA_WRITE, 1, {&s, 1}, b.addr(4096), b.rkey());
  ASSERT_EQ(post_send(p.qa, wr), 0);
  EXPECT_EQ(h.wait_wc(p.scq_a).status, IBV_WC_SUCCESS);
  EXPECT_EQ(first_diff(b.bytes(4096, 4096), a.bytes(0, 4096)), -1);
  // B reads A (B's requester wraps), then sends to A.
  ibv_sge bs = b.sge(0, 4096);
  wr = rdma_wr(IBV_WR_RDMA_READ, 2, {&bs, 1}, a.addr(4096), a.rkey());
  ASSERT_EQ(post_send(p.qb, wr), 0);
  EXPECT_EQ(h.wait_wc(p.scq_b).status, IBV_WC_SUCCESS);
  EXPECT_EQ(first_diff(b.bytes(0, 4096), a.bytes(4096, 4096)), -1);
  ibv_sge r = a.sge(0, 4096);
  ASSERT_EQ(post_recv(p.qa, 3, {&r, 1}), 0);
  wr = send_wr(IBV_WR_SEND, 3, {&bs, 1});
  ASSERT_EQ(post_send(p.qb, wr), 0);
  EXPECT_EQ(h.wait_wc(p.scq_b).status, IBV_WC_SUCCESS);
  EXPECT_EQ(h.wait_wc(p.rcq_a).byte_len, 4096u);
}

// sq_sig_all and unsignaled sends: one CQE per signaled WQE only.
TEST(Completions, UnsignaledProduceNoCqe) {
  Harness h;
  Pair p = h.pair(IBV_QPT_RC);
  ASSERT_NE(p.qa, nullptr);
  Buffer a = h.buffer(h.a(), 64, kRemoteAll);
  Buffer b = h.buffer(h.b(), 64, kRemoteAll);
  ibv_sge s = a.sge(0, 64);
  for (int i = 0; i < 10; ++i) {
    ibv_send_wr wr = rdma_wr(IBV_WR_RDMA_WRITE, i, {&s, 1}, b.addr(), b.rkey(), i == 9 ? IBV_SEND_SIGNALED : 0);
    ASSERT_EQ(post_send(p.qa, wr), 0);
  }
  const auto wcs = h.wait_wcs(p.scq_a, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 9u);
  EXPECT_TRUE(h.collect_for(p.scq_a, std::chrono::milliseconds(20)).empty());
}

// Solicited event: a CQ armed for solicited completions only gets its
// channel event from a SEND with IBV_SEND_SOLICITED.
TEST(Completions, SolicitedEventOnChannel) {
  Harness h;
  int err = 0;
  CompChannel* ch = h.b().rnic->create_comp_channel(&err);
  ASSERT_NE(ch, nullptr);
  Cq* scq_a = h.cq(h.a());
  Cq* rcq_a = h.cq(h.a());
  Cq* scq_b = h.cq(h.b());
  Cq* rcq_b = h.cq(h.b(), 64, ch);
  Qp* qa = h.qp(h.a(), IBV_QPT_RC, scq_a, rcq_a);
  Qp* qb = h.qp(h.b(), IBV_QPT_RC, scq_b, rcq_b);
  ASSERT_EQ(h.connect(qa, qb), 0);
  Buffer a = h.buffer(h.a(), 64, kRemoteAll);
  Buffer b = h.buffer(h.b(), 64 * 4, kRemoteAll);
  for (int i = 0; i < 4; ++i) {
    ibv_sge r = b.sge(64 * i, 64);
    ASSERT_EQ(post_recv(qb, i, {&r, 1}), 0);
  }
  const int fl = fcntl(ch->fd(), F_GETFL);
  ASSERT_EQ(fcntl(ch->fd(), F_SETFL, fl | O_NONBLOCK), 0);
  ASSERT_EQ(rcq_b->req_notify(true), 0);
  ibv_sge s = a.sge(0, 16);
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 0, {&s, 1});
  ASSERT_EQ(post_send(qa, wr), 0);
  EXPECT_EQ(h.wait_wcs(rcq_b, 1).size(), 1u);
  Cq* evcq = nullptr;
  EXPECT_EQ(ch->get_event(&evcq), EAGAIN) << "an unsolicited SEND raises no solicited-only event";
  wr.wr_id = 1;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
  ASSERT_EQ(post_send(qa, wr), 0);
  EXPECT_EQ(h.wait_wcs(rcq_b, 1).size(), 1u);
  // The event follows the CQE (a worker lcore raises it just after).
  EXPECT_TRUE(h.run_until([&] { return ch->get_event(&evcq) == 0; }, std::chrono::seconds(2)));
  EXPECT_EQ(evcq, rcq_b);
  // Not re-armed: no further event.
  wr.wr_id = 2;
  ASSERT_EQ(post_send(qa, wr), 0);
  EXPECT_EQ(h.wait_wcs(rcq_b, 1).size(), 1u);
  EXPECT_EQ(ch->get_event(&evcq), EAGAIN);
  // Armed for any completion: the next one raises it.
  ASSERT_EQ(rcq_b->req_notify(false), 0);
  wr.wr_id = 3;
  wr.send_flags = IBV_SEND_SIGNALED;
  ASSERT_EQ(post_send(qa, wr), 0);
  EXPECT_EQ(h.wait_wcs(rcq_b, 1).size(), 1u);
  // The event follows the CQE (a worker lcore raises it just after).
  EXPECT_TRUE(h.run_until([&] { return ch->get_event(&evcq) == 0; }, std::chrono::seconds(2)));
  EXPECT_EQ(h.wait_wcs(scq_a, 4).size(), 4u);
}

}  // namespace
}  // namespace uroce::rnic::testing
