// Attacks on the RNIC over the sim wire (suite 'security'): a raw peer
// port plays the remote side and the attacker, with hand-made frames whose
// ICRCs are valid, against one RNIC.  Each attack checks the answer the
// RNIC gives (NAK code or silence), the counter that says why, and that
// memory around and inside every MR is untouched (guard bytes on both sides
// of each registration).
//
//   MR lifetime     a WRITE or READ whose MR is deregistered or re-registered
//                   mid-message stops there (remote access NAK)
//   registration    reg_mr refuses memory the process does not have (EFAULT)
//   unmapped memory memory unmapped after registration: remote access error,
//                   the process lives
//   source          RC/UC packets from an address other than the QP's path
//   keys            forged rkeys, another PD's key, bounds at and past the
//                   MR's edges, 64-bit wrap, zero-length with bad keys
//   responses       unsolicited ACKs, READ responses and atomic ACKs
//   PSNs            far outside the window, ahead and behind
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "lib/wire/ext.hpp"
#include "tests/rnic/raw_peer.hpp"
#include "transport/rnic/memory.hpp"
#include "transport/rnic/verbs_newer.hpp"

namespace uroce::rnic::testing {
namespace {

namespace op = wire::op;
using wire::AckType;
using wire::NakCode;

constexpr uint32_t kIpA2 = 0x0A000003;    // a second address of the RNIC (10.0.0.3)
constexpr uint32_t kIpEvil = 0x0A000009;  // the attacker (10.0.0.9)
constexpr uint32_t kSqPsn = 0x1000;
constexpr uint32_t kRqPsn = 0x2000;
constexpr size_t kGuard = 256;            // guard bytes on each side of an MR
constexpr uint8_t kGuardByte = 0xA5;
constexpr uint8_t kFill = 0x11;

constexpr uint8_t nak(NakCode c) { return wire::make_syndrome(AckType::Nak, static_cast<uint8_t>(c)); }
constexpr uint8_t kAck = wire::make_syndrome(AckType::Ack, wire::kAethCreditInvalid);

// Registered memory with guard bytes on both sides, all in one block.
struct Guarded {
  std::vector<uint8_t> block;
  size_t len = 0;
  Mr* mr = nullptr;

  uint8_t* data() { return block.data() + kGuard; }
  uint64_t addr(size_t off = 0) { return reinterpret_cast<uint64_t>(data() + off); }
  uint32_t rkey() const { return mr->rkey.value(); }
  bool guards_intact() const {
    for (size_t i = 0; i < kGuard; ++i)
      if (block[i] != kGuardByte || block[kGuard + len + i] != kGuardByte) return false;
    return true;
  }
  // Every byte of the MR still holds `fill` from `from` on.
  bool untouched(uint8_t fill = kFill, size_t from = 0) const {
    for (size_t i = from; i < len; ++i)
      if (block[kGuard + i] != fill) return false;
    return true;
  }
};

class Attack : public ::testing::Test {
 protected:
  RawPeer peer{drivers::sim::kDefaultSimMtu, {kIpA2}};

  uint64_t ctr(RnicCtr c) const { return peer.ctr(c); }

  Guarded guarded(size_t len, int access, Pd* pd = nullptr) {
    Guarded g;
    g.len = len;
    g.block.assign(len + 2 * kGuard, kGuardByte);
    std::memset(g.data(), kFill, len);
    int err = 0;
    g.mr = peer.rnic().reg_mr(pd != nullptr ? pd : peer.pd(), g.data(), len, g.addr(), access, &err);
    EXPECT_NE(g.mr, nullptr) << std::strerror(err);
    return g;
  }

  // An RC QP in RTS connected to the peer's QP (MTU 1024).
  Qp* rc_qp(ibv_qp_type type = IBV_QPT_RC) {
    cq_ = peer.cq();
    Qp* q = peer.qp(type, cq_, cq_);
    ConnOpts o;
    o.mtu = IBV_MTU_1024;
    EXPECT_EQ(peer.to_rts(q, kSqPsn, kRqPsn, o), 0);
    return q;
  }

  wire::PktDesc write(uint8_t opcode, Qp* q, uint32_t psn_off, uint64_t va, uint32_t rkey, uint32_t dma_len,
                      std::span<const uint8_t> data) {
    wire::PktDesc d = peer.request(opcode, q->qpn(), Psn(kRqPsn + psn_off), data);
    d.reth_va = va;
    d.reth_rkey = Rkey(rkey);
    d.reth_len = dma_len;
    return d;
  }
  wire::PktDesc read(Qp* q, uint32_t psn_off, uint64_t va, uint32_t rkey, uint32_t len) {
    return write(op::RC_READ_REQUEST, q, psn_off, va, rkey, len, {});
  }
  wire::PktDesc atomic(uint8_t opcode, Qp* q, uint32_t psn_off, uint64_t va, uint32_t rkey) {
    wire::PktDesc d = peer.request(opcode, q->qpn(), Psn(kRqPsn + psn_off));
    d.atomic_va = va;
    d.atomic_rkey = Rkey(rkey);
    d.atomic_swap_add = 5;
    d.atomic_compare = 0;
    return d;
  }
  // The acknowledgements (ACK/NAK) among what the RNIC sent.
  std::vector<Frame> acks() {
    std::vector<Frame> out;
    for (Frame& f : peer.take())
      if (f.opcode() == op::RC_ACK) out.push_back(std::move(f));
    return out;
  }
  static uint8_t syndrome(const Frame& f) { return f.desc().aeth_syndrome; }

  Cq* cq_ = nullptr;
};

std::vector<uint8_t> bytes(size_t n, uint8_t v) { return std::vector<uint8_t>(n, v); }

// ---- MR lifetime --------------------------------------------------------------------

TEST_F(Attack, WriteStopsAtDeregistration) {
  Qp* q = rc_qp();
  Guarded g = guarded(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  const auto chunk = bytes(1024, 0x77);
  peer.inject(write(op::RC_WRITE_FIRST, q, 0, g.addr(), g.rkey(), 3072, chunk));
  EXPECT_EQ(std::memcmp(g.data(), chunk.data(), 1024), 0);  // the first packet landed
  (void)acks();                                              // and was acknowledged
  ASSERT_EQ(peer.rnic().dereg_mr(g.mr), 0);
  // The rest of the message after ibv_dereg_mr returned: nothing lands.
  peer.inject(write(op::RC_WRITE_MIDDLE, q, 1, 0, 0, 0, chunk));
  peer.inject(write(op::RC_WRITE_LAST, q, 2, 0, 0, 0, chunk));
  EXPECT_TRUE(g.untouched(kFill, 1024));
  EXPECT_TRUE(g.guards_intact());
  const auto a = acks();
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(syndrome(a.front()), nak(NakCode::RemoteAccessError));
  EXPECT_EQ(a.front().psn().value(), kRqPsn + 1);  // the first packet the MR was gone for
  EXPECT_EQ(ctr(RnicCtr::rem_access_naks), 1u);
  EXPECT_EQ(q->state(), IBV_QPS_ERR);
}

TEST_F(Attack, WriteStopsAtReregistration) {
  Qp* q = rc_qp();
  Guarded g = guarded(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  const auto chunk = bytes(1024, 0x77);
  peer.inject(write(op::RC_WRITE_FIRST, q, 0, g.addr(), g.rkey(), 3072, chunk));
  (void)acks();
  // Same keys, same rights, same memory: still another registration.
  ASSERT_EQ(peer.rnic().rereg_mr(g.mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0,
                                 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE),
            0);
  peer.inject(write(op::RC_WRITE_MIDDLE, q, 1, 0, 0, 0, chunk));
  peer.inject(write(op::RC_WRITE_LAST, q, 2, 0, 0, 0, chunk));
  EXPECT_TRUE(g.untouched(kFill, 1024));
  EXPECT_TRUE(g.guards_intact());
  const auto a = acks();
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(syndrome(a.front()), nak(NakCode::RemoteAccessError));
  // A new message under the new registration is fine.
  Qp* q2 = rc_qp();
  peer.inject(write(op::RC_WRITE_ONLY, q2, 0, g.addr(), g.rkey(), 16, bytes(16, 0x55)));
  EXPECT_EQ(g.data()[0], 0x55);
  ASSERT_EQ(peer.rnic().dereg_mr(g.mr), 0);
}

// A memory window invalidated in the middle of a WRITE through it: the
// rest of the message is refused (IBA 10.6.7.2.5), as for an MR
// deregistered under it; dealloc_mw likewise.
TEST_F(Attack, WriteStopsAtWindowInvalidation) {
  for (const bool dealloc : {false, true}) {
    Qp* q = rc_qp();
    Guarded g = guarded(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
    int err = 0;
    Mw* mw = peer.rnic().alloc_mw(peer.pd(), IBV_MW_TYPE_2, &err);
    ASSERT_NE(mw, nullptr);
    const uint32_t key = (mw->rkey.value() & ~0xFFu) | ((mw->rkey.value() + 1) & 0xFFu);
    ibv_mr abi{};
    abi.lkey = g.mr->lkey.value();
    ibv_send_wr bind{};
    bind.opcode = IBV_WR_BIND_MW;
    bind.send_flags = IBV_SEND_SIGNALED;
    bind.bind_mw.mw = &mw->ibv;
    bind.bind_mw.rkey = key;
    bind.bind_mw.bind_info = {&abi, g.addr(), 4096, IBV_ACCESS_REMOTE_WRITE};
    ASSERT_EQ(post_send(q, bind), 0);
    auto wcs = peer.wait_wcs(cq_, 1);
    ASSERT_EQ(wcs.size(), 1u);
    ASSERT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    const auto chunk = bytes(1024, 0x77);
    peer.inject(write(op::RC_WRITE_FIRST, q, 0, g.addr(), key, 3072, chunk));
    EXPECT_EQ(std::memcmp(g.data(), chunk.data(), 1024), 0);  // the first packet landed
    (void)acks();
    if (dealloc) {
      ASSERT_EQ(peer.rnic().dealloc_mw(mw), 0);
    } else {
      ibv_send_wr inv{};
      inv.opcode = IBV_WR_LOCAL_INV;
      inv.send_flags = IBV_SEND_SIGNALED;
      inv.invalidate_rkey = key;
      ASSERT_EQ(post_send(q, inv), 0);
      wcs = peer.wait_wcs(cq_, 1);
      ASSERT_EQ(wcs.size(), 1u);
      ASSERT_EQ(wcs[0].status, IBV_WC_SUCCESS);
    }
    peer.inject(write(op::RC_WRITE_MIDDLE, q, 1, 0, 0, 0, chunk));
    peer.inject(write(op::RC_WRITE_LAST, q, 2, 0, 0, 0, chunk));
    EXPECT_TRUE(g.untouched(kFill, 1024)) << (dealloc ? "dealloc" : "local invalidate");
    EXPECT_TRUE(g.guards_intact());
    const auto a = acks();
    ASSERT_FALSE(a.empty());
    EXPECT_EQ(syndrome(a.front()), nak(NakCode::RemoteAccessError));
    if (!dealloc) {
      ASSERT_EQ(peer.rnic().dealloc_mw(mw), 0);
    }
    ASSERT_EQ(peer.rnic().dereg_mr(g.mr), 0);
  }
}

TEST_F(Attack, ReadResponseStopsAtDeregistration) {
  Qp* q = rc_qp();
  // 256 response packets at MTU 1024: more than one burst (kRespBudget).
  Guarded g = guarded(256 * 1024, IBV_ACCESS_REMOTE_READ);
  peer.inject(read(q, 0, g.addr(), g.rkey(), 256 * 1024), false);
  peer.poll(1);  // the request and the first burst
  ASSERT_EQ(peer.rnic().dereg_mr(g.mr), 0);
  peer.run_for(std::chrono::milliseconds(20));
  size_t responses = 0;
  std::vector<Frame> naks;
  for (Frame& f : peer.take()) {
    if (f.op().op == wire::Operation::ReadResponse) ++responses;
    if (f.opcode() == op::RC_ACK) naks.push_back(std::move(f));
  }
  EXPECT_GT(responses, 0u);
  EXPECT_LT(responses, 256u);
  ASSERT_EQ(naks.size(), 1u);
  EXPECT_EQ(syndrome(naks[0]), nak(NakCode::RemoteAccessError));
  EXPECT_EQ(naks[0].psn().value(), kRqPsn + responses);  // where the stream stopped
  EXPECT_EQ(q->state(), IBV_QPS_ERR);
}

// ---- registration ---------------------------------------------------------------------

TEST_F(Attack, RegistrationRefusesMemoryTheProcessDoesNotHave) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* m = static_cast<uint8_t*>(mmap(nullptr, 16 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  int err = 0;
  Rnic& r = peer.rnic();
  auto reg = [&](void* a, size_t len, int access) {
    err = 0;
    Mr* mr = r.reg_mr(peer.pd(), a, len, reinterpret_cast<uint64_t>(a), access, &err);
    if (mr != nullptr) {
      EXPECT_EQ(r.dereg_mr(mr), 0);
    }
    return mr != nullptr;
  };
  // 1 TiB over 64 KiB (the attack): EFAULT, as the kernel.
  EXPECT_FALSE(reg(m, uint64_t{1} << 40, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ));
  EXPECT_EQ(err, EFAULT);
  EXPECT_TRUE(reg(m, 16 * page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  // A hole in the middle.
  ASSERT_EQ(munmap(m + 8 * page, page), 0);
  EXPECT_FALSE(reg(m, 16 * page, IBV_ACCESS_REMOTE_READ));
  EXPECT_EQ(err, EFAULT);
  EXPECT_TRUE(reg(m, 8 * page, IBV_ACCESS_REMOTE_READ));
  // Read-only memory: readable registrations only.
  ASSERT_EQ(mprotect(m, page, PROT_READ), 0);
  EXPECT_TRUE(reg(m, page, IBV_ACCESS_REMOTE_READ));
  for (int access : {int{IBV_ACCESS_LOCAL_WRITE}, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC}) {
    EXPECT_FALSE(reg(m, page, access)) << access;
    EXPECT_EQ(err, EFAULT);
  }
  // No access at all (a guard page).
  ASSERT_EQ(mprotect(m + page, page, PROT_NONE), 0);
  EXPECT_FALSE(reg(m + page, page, 0));
  EXPECT_EQ(err, EFAULT);
  // Past the end of the address space.
  EXPECT_FALSE(reg(reinterpret_cast<void*>(~uintptr_t{0} - 100), 4096, 0));
  EXPECT_EQ(err, EINVAL);
  // On-demand paging pins nothing: the check is the access's (below).
  EXPECT_TRUE(reg(m + 8 * page, page, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE));
  // rereg_mr checks what it will register.
  Mr* mr = r.reg_mr(peer.pd(), m + 2 * page, page, reinterpret_cast<uint64_t>(m + 2 * page), IBV_ACCESS_REMOTE_READ,
                    &err);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(r.rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, m + 8 * page, page, 0), EFAULT);
  EXPECT_EQ(r.rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, m + 2 * page, 2 * page, 0), 0);
  EXPECT_EQ(r.dereg_mr(mr), 0);
  munmap(m, 16 * page);
}

// ---- memory unmapped after registration ------------------------------------------------

TEST_F(Attack, UnmappedAfterRegistrationIsARemoteAccessError) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* m = static_cast<uint8_t*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  int err = 0;
  Mr* mr = peer.rnic().reg_mr(
      peer.pd(), m, 2 * page, reinterpret_cast<uint64_t>(m),
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC, &err);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(munmap(m + page, page), 0);  // the application's mistake, not the peer's
  const uint64_t gone = reinterpret_cast<uint64_t>(m + page);
  const uint64_t faults = memory::faults();
  const uint32_t rkey = mr->rkey.value();
  using Make = std::function<wire::PktDesc(Qp*)>;
  const auto payload = bytes(64, 1);
  std::vector<std::pair<const char*, Make>> cases;
  cases.emplace_back("READ", Make([&](Qp* q) { return read(q, 0, gone, rkey, 64); }));
  cases.emplace_back("WRITE", Make([&](Qp* q) { return write(op::RC_WRITE_ONLY, q, 0, gone, rkey, 64, payload); }));
  cases.emplace_back("CMP_SWAP", Make([&](Qp* q) { return atomic(op::RC_COMPARE_SWAP, q, 0, gone, rkey); }));
  cases.emplace_back("FETCH_ADD", Make([&](Qp* q) { return atomic(op::RC_FETCH_ADD, q, 0, gone, rkey); }));
  for (auto& [what, make] : cases) {
    Qp* q = rc_qp();
    peer.inject(make(q));
    const auto a = acks();
    ASSERT_EQ(a.size(), 1u) << what;
    EXPECT_EQ(syndrome(a[0]), nak(NakCode::RemoteAccessError)) << what;
    EXPECT_EQ(q->state(), IBV_QPS_ERR) << what;
  }
  EXPECT_EQ(memory::faults(), faults + cases.size());
  // The page that is still there still works.
  Qp* q = rc_qp();
  peer.inject(write(op::RC_WRITE_ONLY, q, 0, reinterpret_cast<uint64_t>(m), rkey, 8, bytes(8, 9)));
  EXPECT_EQ(m[0], 9);
  EXPECT_EQ(peer.rnic().dereg_mr(mr), 0);
  munmap(m, page);
}

// ATOMIC WRITE from a peer (IBA 1.5): only as the rules allow; a
// duplicate is re-acknowledged and not stored again.
TEST_F(Attack, AtomicWriteRules) {
  Guarded g = guarded(64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  Guarded ro = guarded(64, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE);
  const auto value = bytes(16, 0x5A);  // outlives each PktDesc, which points at it
  auto aw = [&](Qp* q, uint32_t psn_off, uint64_t va, uint32_t rkey, uint32_t dma_len, size_t payload) {
    return write(op::RC_ATOMIC_WRITE, q, psn_off, va, rkey, dma_len, std::span(value).first(payload));
  };
  struct Case {
    const char* what;
    uint64_t va;
    uint32_t rkey, dma_len;
    size_t payload;
    uint8_t nak;
  };
  const Case cases[] = {
      {"misaligned", g.addr() + 4, g.rkey(), 8, 8, nak(NakCode::InvalidRequest)},
      {"RETH length 16", g.addr(), g.rkey(), 16, 16, nak(NakCode::InvalidRequest)},
      {"payload 4", g.addr(), g.rkey(), 8, 4, nak(NakCode::InvalidRequest)},
      {"no write right", ro.addr(), ro.rkey(), 8, 8, nak(NakCode::RemoteAccessError)},
      {"past the MR", g.addr() + 64, g.rkey(), 8, 8, nak(NakCode::RemoteAccessError)},
  };
  for (const Case& c : cases) {
    Qp* q = rc_qp();
    peer.inject(aw(q, 0, c.va, c.rkey, c.dma_len, c.payload));
    const auto a = acks();
    ASSERT_EQ(a.size(), 1u) << c.what;
    EXPECT_EQ(syndrome(a[0]), c.nak) << c.what;
  }
  EXPECT_TRUE(g.untouched());
  EXPECT_TRUE(ro.untouched());
  EXPECT_TRUE(g.guards_intact());
  // The QP's own enables count too (IBA 9.7.5.1.3): no remote write, no ATOMIC WRITE.
  Qp* q = rc_qp();
  ibv_qp_attr qa{};
  qa.qp_access_flags = IBV_ACCESS_REMOTE_READ;
  ASSERT_EQ(q->modify(qa, IBV_QP_ACCESS_FLAGS), 0);
  peer.inject(aw(q, 0, g.addr(), g.rkey(), 8, 8));
  auto a = acks();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(syndrome(a[0]), nak(NakCode::InvalidRequest));
  EXPECT_TRUE(g.untouched());
  // A good one lands; its duplicate (the same PSN again, after the
  // application changed the word) is ACKed and does not store again.
  q = rc_qp();
  peer.inject(aw(q, 0, g.addr() + 8, g.rkey(), 8, 8));
  for (size_t i = 8; i < 16; ++i) EXPECT_EQ(g.data()[i], 0x5A) << i;
  g.data()[8] = 1;
  (void)acks();
  peer.inject(aw(q, 0, g.addr() + 8, g.rkey(), 8, 8));
  a = acks();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(syndrome(a[0]), kAck);
  EXPECT_EQ(g.data()[8], 1) << "the duplicate was stored again";
  EXPECT_TRUE(g.guards_intact());
}

// FLUSH from a peer (IBA 1.5, rxe's rules): the QP must enable and the MR
// grant the placement type's flush right; at the RANGE level the range
// lies in the MR, at the MR level the RETH's address and length are not
// read; a FETH with no placement type, an unknown one, a selectivity level
// past MR or reserved bits is an invalid request; persistence is never
// granted here.  A good FLUSH is ACKed and counted; its duplicate is
// re-ACKed and not carried out again.  Nothing in memory changes.
TEST_F(Attack, FlushRules) {
  namespace v = verbs_newer;
  constexpr int kQpFlush = IBV_ACCESS_REMOTE_WRITE | v::kAccessFlushGlobal;
  Guarded g = guarded(64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | v::kAccessFlushGlobal);
  Guarded plain = guarded(64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  int err = 0;
  std::vector<uint8_t> pm(64);
  EXPECT_EQ(peer.rnic().reg_mr(peer.pd(), pm.data(), pm.size(), reinterpret_cast<uint64_t>(pm.data()),
                               v::kAccessFlushPersistent, &err),
            nullptr);
  EXPECT_EQ(err, EOPNOTSUPP) << "no memory here is known to be persistent";
  auto flush_qp = [&](int access) {
    Qp* q = rc_qp();
    ibv_qp_attr qa{};
    qa.qp_access_flags = static_cast<unsigned>(access);
    EXPECT_EQ(q->modify(qa, IBV_QP_ACCESS_FLAGS), 0);
    return q;
  };
  auto flush = [&](Qp* q, uint32_t psn_off, uint32_t feth, uint64_t va, uint32_t rkey, uint32_t len) {
    wire::PktDesc d = write(op::RC_FLUSH, q, psn_off, va, rkey, len, {});
    d.feth = feth;
    return d;
  };
  constexpr uint32_t kGlobalRange = v::kFlushGlobal;
  constexpr uint32_t kGlobalMr = v::kFlushMr << 4 | v::kFlushGlobal;
  struct Case {
    const char* what;
    int qp_access;
    uint32_t feth;
    uint64_t va;
    uint32_t rkey, len;
    uint8_t answer;
  };
  const Case cases[] = {
      {"range inside the MR", kQpFlush, kGlobalRange, g.addr(8), g.rkey(), 32, kAck},
      {"zero-length range at the MR's end", kQpFlush, kGlobalRange, g.addr(64), g.rkey(), 0, kAck},
      {"MR level, address and length ignored", kQpFlush, kGlobalMr, 0xdead0000, g.rkey(), 1u << 30, kAck},
      {"range past the MR", kQpFlush, kGlobalRange, g.addr(32), g.rkey(), 33, nak(NakCode::RemoteAccessError)},
      {"MR without the flush right", kQpFlush, kGlobalRange, plain.addr(), plain.rkey(), 8,
       nak(NakCode::RemoteAccessError)},
      {"MR level, MR without the flush right", kQpFlush, kGlobalMr, plain.addr(), plain.rkey(), 0,
       nak(NakCode::RemoteAccessError)},
      {"forged key", kQpFlush, kGlobalMr, g.addr(), g.rkey() ^ 0x80, 8, nak(NakCode::RemoteAccessError)},
      {"QP without the flush right", IBV_ACCESS_REMOTE_WRITE, kGlobalRange, g.addr(), g.rkey(), 8,
       nak(NakCode::InvalidRequest)},
      {"persistence (no QP grants it here)", kQpFlush, v::kFlushPersistent, g.addr(), g.rkey(), 8,
       nak(NakCode::InvalidRequest)},
      {"persistence, QP and MR levels", kQpFlush | v::kAccessFlushPersistent, v::kFlushPersistent, g.addr(),
       g.rkey(), 8, nak(NakCode::RemoteAccessError)},
      {"no placement type", kQpFlush, 0, g.addr(), g.rkey(), 8, nak(NakCode::InvalidRequest)},
      {"unknown placement type", kQpFlush, 0x4 | v::kFlushGlobal, g.addr(), g.rkey(), 8,
       nak(NakCode::InvalidRequest)},
      {"selectivity level 2", kQpFlush, 2u << 4 | v::kFlushGlobal, g.addr(), g.rkey(), 8,
       nak(NakCode::InvalidRequest)},
      {"reserved bits", kQpFlush, 0x100 | v::kFlushGlobal, g.addr(), g.rkey(), 8, nak(NakCode::InvalidRequest)},
  };
  uint64_t executed = 0;
  for (const Case& c : cases) {
    Qp* q = flush_qp(c.qp_access);
    peer.inject(flush(q, 0, c.feth, c.va, c.rkey, c.len));
    const auto a = acks();
    ASSERT_EQ(a.size(), 1u) << c.what;
    EXPECT_EQ(syndrome(a[0]), c.answer) << c.what;
    if (c.answer == kAck) ++executed;
    EXPECT_EQ(ctr(RnicCtr::flushes_executed), executed) << c.what;
  }
  // A duplicate (the same PSN again) is re-ACKed, not carried out again;
  // the next PSN is.
  Qp* q = flush_qp(kQpFlush);
  peer.inject(flush(q, 0, kGlobalRange, g.addr(), g.rkey(), 64));
  (void)acks();
  peer.inject(flush(q, 0, kGlobalRange, g.addr(), g.rkey(), 64));
  auto a = acks();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(syndrome(a[0]), kAck);
  EXPECT_EQ(ctr(RnicCtr::flushes_executed), executed + 1) << "the duplicate ran again";
  peer.inject(flush(q, 1, kGlobalMr, 0, g.rkey(), 0));
  a = acks();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(syndrome(a[0]), kAck);
  EXPECT_EQ(ctr(RnicCtr::flushes_executed), executed + 2);
  EXPECT_TRUE(g.untouched());
  EXPECT_TRUE(plain.untouched());
  EXPECT_TRUE(g.guards_intact());
  EXPECT_TRUE(plain.guards_intact());
}

// An implicit ODP MR grants the whole address space, so a peer can name
// any address with it; one that is not mapped is a remote access error,
// never a crash (IBA 9.7.5.1.3; memory.hpp's guard).
TEST_F(Attack, ImplicitOdpToUnmappedAddressIsARemoteAccessError) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* m = static_cast<uint8_t*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  ASSERT_EQ(munmap(m + page, page), 0);
  int err = 0;
  Mr* mr = peer.rnic().reg_mr(peer.pd(), nullptr, SIZE_MAX, 0,
                              IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                  IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
                              &err);
  ASSERT_NE(mr, nullptr);
  const uint32_t rkey = mr->rkey.value();
  const auto payload = bytes(64, 1);
  using Make = std::function<wire::PktDesc(Qp*, uint64_t)>;
  std::vector<std::pair<const char*, Make>> cases;
  cases.emplace_back("READ", Make([&](Qp* q, uint64_t va) { return read(q, 0, va, rkey, 64); }));
  cases.emplace_back("WRITE", Make([&](Qp* q, uint64_t va) {
                       return write(op::RC_WRITE_ONLY, q, 0, va, rkey, 64, payload);
                     }));
  cases.emplace_back("FETCH_ADD", Make([&](Qp* q, uint64_t va) { return atomic(op::RC_FETCH_ADD, q, 0, va, rkey); }));
  for (uint64_t va : {reinterpret_cast<uint64_t>(m + page), uint64_t{0}, uint64_t{0x10}}) {
    for (auto& [what, make] : cases) {
      Qp* q = rc_qp();
      peer.inject(make(q, va));
      const auto a = acks();
      ASSERT_EQ(a.size(), 1u) << what << " at " << va;
      EXPECT_EQ(syndrome(a[0]), nak(NakCode::RemoteAccessError)) << what << " at " << va;
    }
  }
  // A mapped address works through the same key.
  Qp* q = rc_qp();
  peer.inject(write(op::RC_WRITE_ONLY, q, 0, reinterpret_cast<uint64_t>(m), rkey, 8, bytes(8, 9)));
  EXPECT_EQ(m[0], 9);
  EXPECT_EQ(peer.rnic().dereg_mr(mr), 0);
  munmap(m, page);
}

TEST_F(Attack, LocalGatherFromUnmappedMemoryFailsTheWorkRequest) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* m = static_cast<uint8_t*>(mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  int err = 0;
  Mr* mr = peer.rnic().reg_mr(peer.pd(), m, page, reinterpret_cast<uint64_t>(m), IBV_ACCESS_LOCAL_WRITE, &err);
  ASSERT_NE(mr, nullptr);
  ASSERT_EQ(munmap(m, page), 0);
  Qp* q = rc_qp();
  ibv_sge sge{reinterpret_cast<uint64_t>(m), 64, mr->lkey.value()};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 7, {&sge, 1});
  ASSERT_EQ(post_send(q, wr), 0);
  const auto wcs = peer.wait_wcs(cq_, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_TRUE(peer.take().empty());  // nothing went out in its place
  EXPECT_EQ(peer.rnic().dereg_mr(mr), 0);
}

// ---- source addresses --------------------------------------------------------------------

TEST_F(Attack, RcPacketsFromAnotherAddressAreDropped) {
  Qp* q = rc_qp();
  Guarded g = guarded(256, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  // A WRITE with everything right (QPN, PSN, R_Key) but its source.
  const auto payload = bytes(64, 0x66);  // outlives `d`, which points at it
  wire::PktDesc d = write(op::RC_WRITE_ONLY, q, 0, g.addr(), g.rkey(), 64, payload);
  d.src = wire::PktDesc::ipv4_mapped(kIpEvil);
  peer.inject(d);
  EXPECT_TRUE(g.untouched());
  EXPECT_TRUE(peer.take().empty());  // not even a NAK to the forged source
  EXPECT_EQ(ctr(RnicCtr::drop_src_addr), 1u);
  // To another address of ours than the path's: dropped as well.
  d.src = wire::PktDesc::ipv4_mapped(kIpB);
  d.dst = wire::PktDesc::ipv4_mapped(kIpA2);
  peer.inject(d);
  EXPECT_TRUE(g.untouched());
  EXPECT_EQ(ctr(RnicCtr::drop_dst_addr), 1u);
  // A forged ACK for what the QP sent does not complete it either.
  Guarded local = guarded(64, IBV_ACCESS_LOCAL_WRITE);
  ibv_sge sge{local.addr(), 64, local.mr->lkey.value()};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 1, {&sge, 1});
  ASSERT_EQ(post_send(q, wr), 0);
  peer.poll();
  wire::PktDesc ack = peer.ack(Qpn(q->qpn()), Psn(kSqPsn));
  ack.src = wire::PktDesc::ipv4_mapped(kIpEvil);
  peer.inject(ack);
  EXPECT_TRUE(peer.poll_cq(cq_).empty());
  EXPECT_EQ(ctr(RnicCtr::drop_src_addr), 2u);
  // The real peer's packet still goes through.
  d.dst = wire::PktDesc::ipv4_mapped(kIpA);
  peer.inject(d);
  EXPECT_EQ(g.data()[0], 0x66);
  EXPECT_TRUE(g.guards_intact());
}

TEST_F(Attack, ControlledQkeyNeedsPrivilege) {
  Cq* c = peer.cq();
  Qp* q = peer.qp(IBV_QPT_UD, c, c);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = kPortNum;
  a.qkey = 0x80000001u;
  const int rc = q->modify(a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
  // Tests run as root (CAP_NET_RAW): allowed; a user without it: EPERM.
  if (geteuid() == 0) {
    EXPECT_EQ(rc, 0);
  } else {
    EXPECT_EQ(rc, EPERM);
  }
}

// ---- keys and bounds ------------------------------------------------------------------------

TEST_F(Attack, ForgedKeysAndBoundsAreRemoteAccessErrors) {
  Guarded g = guarded(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                IBV_ACCESS_REMOTE_ATOMIC);
  int err = 0;
  Pd* other_pd = peer.rnic().alloc_pd(&err);
  ASSERT_NE(other_pd, nullptr);
  Guarded other = guarded(4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, other_pd);
  const uint32_t key = g.rkey();
  const uint64_t base = g.addr();
  struct Case {
    const char* what;
    uint64_t va;
    uint32_t rkey;
    uint32_t len;
  };
  const Case cases[] = {
      {"wrong key byte", base, key ^ 0x01, 64},
      {"unused index", base, (0x3FFFFu << 8) | (key & 0xFF), 64},
      {"key 0", base, 0, 64},
      {"another PD's key", other.addr(), other.rkey(), 64},
      {"one byte before", base - 1, key, 64},
      {"one byte past the end", base + 4096 - 63, key, 64},
      {"starts at the end", base + 4096, key, 1},
      {"64-bit wrap", ~uint64_t{0} - 15, key, 64},
      {"length runs past the end", base + 8, key, 0x7FFFFFF0u},  // under the 2^31 DMA limit
  };
  for (const Case& c : cases) {
    for (bool is_read : {false, true}) {
      Qp* q = rc_qp();
      // The RETH names the whole range; a WRITE's first packet is checked
      // against all of it, whatever it carries itself.
      const uint32_t carried = std::min<uint32_t>(c.len, 64);
      peer.inject(is_read ? read(q, 0, c.va, c.rkey, c.len)
                          : write(carried == c.len ? op::RC_WRITE_ONLY : op::RC_WRITE_FIRST, q, 0, c.va,
                                  c.rkey, c.len, bytes(carried == c.len ? carried : 1024, 0x99)));
      const auto a = acks();
      ASSERT_EQ(a.size(), 1u) << c.what << (is_read ? " READ" : " WRITE");
      EXPECT_EQ(syndrome(a[0]), nak(NakCode::RemoteAccessError)) << c.what << (is_read ? " READ" : " WRITE");
    }
    const uint64_t va = c.va & ~uint64_t{7};
    if (c.rkey == key && va >= base && va - base + 8 <= 4096) continue;  // a legal atomic: not an attack
    Qp* q = rc_qp();
    peer.inject(atomic(op::RC_FETCH_ADD, q, 0, va, c.rkey));
    const auto a = acks();
    ASSERT_EQ(a.size(), 1u) << c.what << " atomic";
    EXPECT_EQ(syndrome(a[0]), nak(NakCode::RemoteAccessError)) << c.what << " atomic";
  }
  EXPECT_TRUE(g.untouched());
  EXPECT_TRUE(g.guards_intact());
  EXPECT_TRUE(other.untouched());
  EXPECT_TRUE(other.guards_intact());
  // The edges themselves are inside: the first and the last byte.
  Qp* q = rc_qp();
  peer.inject(write(op::RC_WRITE_ONLY, q, 0, base, key, 1, bytes(1, 0x42)));
  peer.inject(write(op::RC_WRITE_ONLY, q, 1, base + 4095, key, 1, bytes(1, 0x43)));
  EXPECT_EQ(g.data()[0], 0x42);
  EXPECT_EQ(g.data()[4095], 0x43);
  EXPECT_TRUE(g.guards_intact());
}

TEST_F(Attack, ZeroLengthWithBadKeysTouchesNothing) {
  // IBA 9.4.4 / 9.4.5: a zero-length RDMA WRITE or READ carries no data and
  // needs no valid key; it must not reach memory either way.
  Qp* q = rc_qp();
  Guarded g = guarded(64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  peer.inject(write(op::RC_WRITE_ONLY, q, 0, 0xDEAD0000, 0x12345678, 0, {}));
  peer.inject(read(q, 1, 0xDEAD0000, 0x12345678, 0));
  std::vector<Frame> f = peer.take();
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[0].opcode(), op::RC_ACK);
  EXPECT_EQ(syndrome(f[0]), kAck);
  EXPECT_EQ(f[1].opcode(), op::RC_READ_RESPONSE_ONLY);
  EXPECT_EQ(f[1].payload().size(), 0u);
  EXPECT_TRUE(g.untouched());
  EXPECT_TRUE(g.guards_intact());
}

// ---- responses nobody asked for --------------------------------------------------------------

TEST_F(Attack, UnsolicitedResponsesAreDropped) {
  Qp* q = rc_qp();
  const Qpn qpn = q->qpn();
  const auto data = bytes(64, 3);
  peer.inject(peer.ack(qpn, Psn(kSqPsn)));
  peer.inject(peer.nak(qpn, Psn(kSqPsn), NakCode::RemoteAccessError));
  peer.inject(peer.read_resp(op::RC_READ_RESPONSE_ONLY, qpn, Psn(kSqPsn), data));
  peer.inject(peer.atomic_ack(qpn, Psn(kSqPsn), 7));
  peer.inject(peer.ack(qpn, Psn(kSqPsn + 0x400000)));
  EXPECT_EQ(ctr(RnicCtr::drop_resp_unexpected), 5u);
  EXPECT_EQ(q->state(), IBV_QPS_RTS);  // a forged NAK did not fail it
  EXPECT_TRUE(peer.poll_cq(cq_).empty());
  // The QP still works: a SEND goes out and its real ACK completes it.
  Guarded local = guarded(64, IBV_ACCESS_LOCAL_WRITE);
  ibv_sge sge{local.addr(), 64, local.mr->lkey.value()};
  ibv_send_wr wr = send_wr(IBV_WR_SEND, 9, {&sge, 1});
  ASSERT_EQ(post_send(q, wr), 0);
  const auto out = peer.wait_frames(1);
  ASSERT_EQ(out.size(), 1u);
  peer.inject(peer.ack(qpn, out[0].psn()));
  const auto wcs = peer.wait_wcs(cq_, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
}

// ---- PSNs ------------------------------------------------------------------------------------

TEST_F(Attack, PsnsFarFromTheWindowExecuteNothing) {
  Qp* q = rc_qp();
  Guarded g = guarded(256, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  // Ahead (within the forward half of the PSN space): a sequence NAK, once.
  for (uint32_t ahead : {2u, 0x1000u, 0x3FFFFFu}) {
    peer.inject(write(op::RC_WRITE_ONLY, q, ahead, g.addr(), g.rkey(), 64, bytes(64, 0x31)));
  }
  auto a = acks();
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(syndrome(a[0]), nak(NakCode::PsnSequenceError));
  EXPECT_EQ(a[0].psn().value(), kRqPsn);
  EXPECT_TRUE(g.untouched());
  // Behind (the duplicate half): re-acknowledged, never executed (C9-105).
  for (uint32_t behind : {1u, 0x1000u, 0x400000u}) {
    peer.inject(write(op::RC_WRITE_ONLY, q, (Psn::kMask + 1 - behind) & Psn::kMask, g.addr(), g.rkey(), 64,
                      bytes(64, 0x32)));
  }
  EXPECT_TRUE(g.untouched());
  EXPECT_TRUE(g.guards_intact());
  EXPECT_EQ(ctr(RnicCtr::dup_requests), 3u);
  EXPECT_EQ(q->state(), IBV_QPS_RTS);
}

// XRC (annex A14): a message keeps the SRQ its first packet named.  A
// later packet naming another SRQ of the domain, or an SRQ destroyed since,
// is an invalid request: NAK, the receive QP to ERR; the WQE the message
// held completes in error on its own SRQ's CQ (or, its SRQ gone, nowhere);
// nothing lands in the other SRQ's buffers.
TEST_F(Attack, XrcMessagesKeepTheirSrq) {
  Rnic& rn = peer.rnic();
  int err = 0;
  Xrcd* x = rn.open_xrcd(0, true, false, &err);
  ASSERT_NE(x, nullptr);
  Cq* cq1 = peer.cq();
  Cq* cq2 = peer.cq();
  auto srq = [&](Cq* cq) {
    ibv_srq_init_attr init{};
    init.attr.max_wr = 8;
    init.attr.max_sge = 1;
    const Rnic::XrcSrq xrc{x, cq};
    Srq* s = rn.create_srq(peer.pd(), init, &err, nullptr, &xrc);
    EXPECT_NE(s, nullptr);
    return s;
  };
  auto recv_qp = [&]() {
    ibv_qp_init_attr init{};
    init.qp_type = IBV_QPT_XRC_RECV;
    Qp* q = rn.create_qp(nullptr, init, &err, nullptr, x);
    EXPECT_NE(q, nullptr);
    EXPECT_EQ(qp_to_rts(q, peer.ah_attr(), RawPeer::kPeerQpn, kSqPsn, kRqPsn, ConnOpts{}), 0);
    return q;
  };
  auto send = [&](uint8_t code, Qp* q, uint32_t psn_off, const Srq* to, std::span<const uint8_t> data) {
    wire::PktDesc d = peer.request(static_cast<uint8_t>(op::kXrcBase | code), q->qpn(), Psn(kRqPsn + psn_off), data);
    d.xrceth_srq = to->number();
    return d;
  };
  auto xrc_acks = [&] {
    std::vector<Frame> out;
    for (Frame& f : peer.take())
      if (f.opcode() == (op::kXrcBase | op::kAck)) out.push_back(std::move(f));
    return out;
  };
  Srq* s1 = srq(cq1);
  Srq* s2 = srq(cq2);
  Guarded b1 = guarded(4096, IBV_ACCESS_LOCAL_WRITE);
  Guarded b2 = guarded(4096, IBV_ACCESS_LOCAL_WRITE);
  const ibv_sge g1{b1.addr(), 4096, b1.mr->lkey.value()};
  const ibv_sge g2{b2.addr(), 4096, b2.mr->lkey.value()};
  ASSERT_EQ(post_srq_recv(s1, 1, {&g1, 1}), 0);
  ASSERT_EQ(post_srq_recv(s2, 2, {&g2, 1}), 0);
  const auto chunk = bytes(1024, 0x77);

  // FIRST names s1, LAST names s2.
  Qp* q = recv_qp();
  peer.inject(send(op::kSendFirst, q, 0, s1, chunk));
  peer.inject(send(op::kSendLast, q, 1, s2, chunk));
  auto a = xrc_acks();
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(syndrome(a.back()), nak(NakCode::InvalidRequest));
  EXPECT_EQ(a.back().psn().value(), kRqPsn + 1);
  EXPECT_EQ(q->state(), IBV_QPS_ERR);
  EXPECT_EQ(ctr(RnicCtr::xrc_srq_refused), 1u);
  const auto w1 = peer.poll_cq(cq1);
  ASSERT_EQ(w1.size(), 1u) << "s1's WQE completes, in error, on s1's CQ";
  EXPECT_EQ(w1[0].wr_id, 1u);
  EXPECT_NE(w1[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(peer.poll_cq(cq2).empty());
  EXPECT_TRUE(b2.untouched());
  EXPECT_TRUE(b1.untouched(kFill, 1024)) << "only the FIRST packet landed";
  EXPECT_TRUE(b1.guards_intact() && b2.guards_intact());

  // FIRST names s2, which is then destroyed; the rest names its number.
  Qp* q2 = recv_qp();
  peer.inject(send(op::kSendFirst, q2, 0, s2, chunk));
  const uint32_t gone = s2->number();
  ASSERT_EQ(rn.destroy_srq(s2), 0);
  wire::PktDesc last = peer.request(static_cast<uint8_t>(op::kXrcBase | op::kSendLast), q2->qpn(),
                                    Psn(kRqPsn + 1), chunk);
  last.xrceth_srq = gone;
  peer.inject(last);
  a = xrc_acks();
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(syndrome(a.back()), nak(NakCode::InvalidRequest));
  EXPECT_EQ(q2->state(), IBV_QPS_ERR);
  EXPECT_EQ(ctr(RnicCtr::xrc_srq_refused), 2u);
  EXPECT_TRUE(peer.poll_cq(cq2).empty()) << "its SRQ is gone: nothing completes";
  EXPECT_TRUE(b2.untouched(kFill, 1024));
  EXPECT_TRUE(b2.guards_intact());
}

}  // namespace
}  // namespace uroce::rnic::testing
