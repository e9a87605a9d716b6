// Objects: reg_mr's rules and keys, MR translation with 64-bit wrap, the
// R_Key/L_Key checks, CQ ordering, overflow and resize, completion
// channels, SRQ limit and resize, and destroy's EBUSY rules.
#include <poll.h>
#include <sys/mman.h>
#include <unistd.h>

#include <thread>

#include "tests/common/test_util.hpp"
#include "tests/rnic/ctl_fixture.hpp"

namespace uroce::rnic::ctltest {
namespace {

std::vector<uint8_t> g_mem(1 << 16);

TEST_F(Ctl, RegMrRules) {
  int err = 0;
  auto reg = [&](int access, size_t len = 4096) {
    err = 0;
    return rnic->reg_mr(pd, g_mem.data(), len, reinterpret_cast<uint64_t>(g_mem.data()), access, &err);
  };
  // IBA 10.6.3.1: remote write / atomic access need local write.
  EXPECT_EQ(reg(IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(reg(IBV_ACCESS_REMOTE_ATOMIC), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(reg(1 << 14), nullptr);  // not an access bit
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(reg(IBV_ACCESS_LOCAL_WRITE, kMaxMrSize + 1), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(rnic->reg_mr(nullptr, g_mem.data(), 16, 0, 0, &err), nullptr);
  EXPECT_EQ(err, EINVAL);

  Mr* ro = reg(IBV_ACCESS_REMOTE_READ);  // remote read alone is fine
  ASSERT_NE(ro, nullptr);
  Mr* opt = reg(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);  // optional bits are ignored
  ASSERT_NE(opt, nullptr);
  Mr* rw = reg(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  ASSERT_NE(rw, nullptr);

  // lkey == rkey, distinct per MR, never 0.
  for (Mr* m : {ro, opt, rw}) {
    EXPECT_EQ(m->lkey.value(), m->rkey.value());
    EXPECT_NE(m->lkey.value() >> 8, 0u);
  }
  EXPECT_NE(ro->lkey, opt->lkey);
  EXPECT_NE(opt->lkey, rw->lkey);

  // A key does not outlive its registration, even when its slot is reused.
  const uint32_t old_key = ro->lkey.value();
  KeyCheck why = KeyCheck::Ok;
  EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->lookup_lkey(Lkey(old_key), pd, &why); }), ro);
  ASSERT_EQ(rnic->dereg_mr(ro), 0);
  EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->lookup_lkey(Lkey(old_key), pd, &why); }), nullptr);
  EXPECT_EQ(why, KeyCheck::NoKey);
  Mr* again = reg(IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->lkey.value() >> 8, old_key >> 8);  // the same slot
  EXPECT_NE(again->lkey.value(), old_key);           // another key
  EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->lookup_lkey(Lkey(old_key), pd, &why); }), nullptr);
  EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->check_rkey(Rkey(old_key), again->iova, 8, IBV_ACCESS_REMOTE_READ, pd, &why); }), nullptr);
  EXPECT_EQ(why, KeyCheck::NoKey);
  EXPECT_EQ(rnic->dereg_mr(nullptr), EINVAL);
}

// Implicit ODP (ibv_reg_mr(3)): NULL and SIZE_MAX with IBV_ACCESS_ON_DEMAND
// register the whole address space by virtual address; the same
// arguments without ON_DEMAND (or zero-based) are an ordinary bad range.
TEST_F(Ctl, ImplicitOdpMr) {
  int err = 0;
  EXPECT_EQ(rnic->reg_mr(pd, nullptr, SIZE_MAX, 0, IBV_ACCESS_LOCAL_WRITE, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(rnic->reg_mr(pd, nullptr, SIZE_MAX, 0, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_ZERO_BASED, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  EXPECT_EQ(rnic->reg_mr(pd, nullptr, SIZE_MAX - 1, 0, IBV_ACCESS_ON_DEMAND, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  Mr* all = rnic->reg_mr(pd, nullptr, SIZE_MAX, 0,
                         IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &err);
  ASSERT_NE(all, nullptr);
  const uint64_t va = reinterpret_cast<uint64_t>(g_mem.data());
  KeyCheck why = KeyCheck::Ok;
  EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->check_rkey(Rkey(all->rkey.value()), va, 64, IBV_ACCESS_REMOTE_WRITE, pd, &why); }), g_mem.data());
  EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->check_rkey(Rkey(all->rkey.value()), UINT64_MAX - 8, 8, IBV_ACCESS_REMOTE_WRITE, pd, &why); }),
            reinterpret_cast<uint8_t*>(UINT64_MAX - 8));  // in bounds; the access itself is guarded
  EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->check_rkey(Rkey(all->rkey.value()), UINT64_MAX - 8, 9, IBV_ACCESS_REMOTE_WRITE, pd, &why); }), nullptr);
  EXPECT_EQ(why, KeyCheck::OutOfBounds);
  EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->check_rkey(Rkey(all->rkey.value()), va, 8, IBV_ACCESS_REMOTE_READ, pd, &why); }), nullptr);
  EXPECT_EQ(why, KeyCheck::NoAccess);  // the rights still count
  // Dropping ON_DEMAND would make it an ordinary MR over unmapped memory.
  EXPECT_NE(rnic->rereg_mr(all, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE), 0);
  EXPECT_EQ(rnic->dereg_mr(all), 0);
}

// ibv_advise_mr(3), with the kernel mlx5 driver's errnos.
TEST_F(Ctl, AdviseMrRules) {
  int err = 0;
  const uint64_t va = reinterpret_cast<uint64_t>(g_mem.data());
  Mr* odp = rnic->reg_mr(pd, g_mem.data(), 8192, va, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE, &err);
  Mr* odp_ro = rnic->reg_mr(pd, g_mem.data(), 8192, va, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_REMOTE_READ, &err);
  Mr* pinned = rnic->reg_mr(pd, g_mem.data(), 8192, va, IBV_ACCESS_LOCAL_WRITE, &err);
  ASSERT_TRUE(odp && odp_ro && pinned);
  Pd* other = rnic->alloc_pd(&err);
  ASSERT_NE(other, nullptr);
  auto advise = [&](Pd* p, uint32_t advice, uint32_t flags, Mr* mr, uint64_t addr, uint32_t len) {
    ibv_sge s{addr, len, mr->lkey.value()};
    return rnic->advise_mr(p, advice, flags, &s, 1);
  };
  constexpr uint32_t kFlush = IBV_ADVISE_MR_FLAG_FLUSH;
  for (uint32_t advice : {IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                          IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT}) {
    EXPECT_EQ(advise(pd, advice, kFlush, odp, va, 8192), 0) << advice;
    EXPECT_EQ(advise(pd, advice, 0, odp, va + 100, 1000), 0) << advice;
    EXPECT_EQ(advise(pd, advice, kFlush, odp, va + 8000, 193), EFAULT) << advice;  // past the MR
    EXPECT_EQ(advise(pd, advice, kFlush, pinned, va, 64), ENOENT) << advice;      // not ODP
    EXPECT_EQ(advise(other, advice, kFlush, odp, va, 64), ENOENT) << advice;      // another PD's
    EXPECT_EQ(advise(pd, advice, kFlush | 2, odp, va, 64), EINVAL) << advice;
  }
  EXPECT_EQ(advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, kFlush, odp_ro, va, 64), 0);
  EXPECT_EQ(advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, kFlush, odp_ro, va, 64), EPERM);
  EXPECT_EQ(advise(pd, 7, kFlush, odp, va, 64), EOPNOTSUPP);
  ibv_sge none{};
  EXPECT_EQ(rnic->advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &none, 0), EINVAL);
  EXPECT_EQ(rnic->advise_mr(nullptr, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &none, 1), EINVAL);
  // A list is all or nothing in its checks: one bad key fails the call.
  ibv_sge two[2] = {{va, 64, odp->lkey.value()}, {va, 64, pinned->lkey.value()}};
  EXPECT_EQ(rnic->advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, kFlush, two, 2), ENOENT);
  for (Mr* m : {odp, odp_ro, pinned}) EXPECT_EQ(rnic->dereg_mr(m), 0);
  EXPECT_EQ(rnic->dealloc_pd(other), 0);
}

// Prefetching memory that is not mapped fails synchronously (FLUSH) and is
// best-effort otherwise.
TEST_F(Ctl, AdvisePrefetchOfUnmappedMemory) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* m = static_cast<uint8_t*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(m, MAP_FAILED);
  int err = 0;
  Mr* all = rnic->reg_mr(pd, nullptr, SIZE_MAX, 0, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE, &err);
  ASSERT_NE(all, nullptr);
  ASSERT_EQ(munmap(m + page, page), 0);
  ibv_sge ok{reinterpret_cast<uint64_t>(m), static_cast<uint32_t>(page), all->lkey.value()};
  ibv_sge gone{reinterpret_cast<uint64_t>(m + page), 64, all->lkey.value()};
  EXPECT_EQ(rnic->advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &ok, 1), 0);
  EXPECT_EQ(rnic->advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &gone, 1), EFAULT);
  EXPECT_EQ(rnic->advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &gone, 1), 0);
  EXPECT_EQ(rnic->advise_mr(pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, IBV_ADVISE_MR_FLAG_FLUSH, &gone, 1), 0);
  EXPECT_EQ(rnic->dereg_mr(all), 0);
  munmap(m, page);
}

TEST_F(Ctl, MrTranslateWrapsAt64Bits) {
  int err = 0;
  const uint64_t top = 0xFFFFFFFFFFFFF000ull;  // the MR ends exactly at 2^64
  Mr* mr = rnic->reg_mr(pd, g_mem.data(), 4096, top, IBV_ACCESS_LOCAL_WRITE, &err);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->translate(top, 4096), g_mem.data());
  EXPECT_EQ(mr->translate(top + 4088, 8), g_mem.data() + 4088);
  EXPECT_EQ(mr->translate(top + 4096 - 1, 1), g_mem.data() + 4095);
  EXPECT_EQ(mr->translate(top + 1, 4096), nullptr);              // one past the end
  EXPECT_EQ(mr->translate(0xFFFFFFFFFFFFFFF0ull, 0x20), nullptr);  // va + len wraps to 0x10
  EXPECT_EQ(mr->translate(top, ~uint64_t{0}), nullptr);
  EXPECT_EQ(mr->translate(top - 1, 1), nullptr);                 // before the start
  EXPECT_EQ(mr->translate(0, 8), nullptr);
  EXPECT_EQ(mr->translate(top + 4096 - 8, 0), g_mem.data() + 4088);  // zero length inside

  Mr* low = rnic->reg_mr(pd, g_mem.data(), 100, 1000, IBV_ACCESS_LOCAL_WRITE, &err);
  ASSERT_NE(low, nullptr);
  EXPECT_EQ(low->translate(1000, 100), g_mem.data());
  EXPECT_EQ(low->translate(1050, 51), nullptr);
  EXPECT_EQ(low->translate(1099, 1), g_mem.data() + 99);
  EXPECT_EQ(low->translate(999, 2), nullptr);
}

TEST_F(Ctl, CheckRkeyAccessTable) {
  int err = 0;
  Pd* other = rnic->alloc_pd(&err);
  ASSERT_NE(other, nullptr);
  const uint64_t va = 0x10000;
  struct Case {
    int access;
    KeyCheck read, write, atomic;
  };
  const Case cases[] = {
      {0, KeyCheck::NoAccess, KeyCheck::NoAccess, KeyCheck::NoAccess},
      {IBV_ACCESS_LOCAL_WRITE, KeyCheck::NoAccess, KeyCheck::NoAccess, KeyCheck::NoAccess},
      {IBV_ACCESS_REMOTE_READ, KeyCheck::Ok, KeyCheck::NoAccess, KeyCheck::NoAccess},
      {IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, KeyCheck::NoAccess, KeyCheck::Ok, KeyCheck::NoAccess},
      {IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC, KeyCheck::NoAccess, KeyCheck::NoAccess, KeyCheck::Ok},
      {IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
       KeyCheck::Ok, KeyCheck::Ok, KeyCheck::Ok},
  };
  for (const Case& c : cases) {
    Mr* mr = rnic->reg_mr(pd, g_mem.data(), 256, va, c.access, &err);
    ASSERT_NE(mr, nullptr);
    const uint32_t key = mr->rkey.value();
    const std::pair<int, KeyCheck> needs[] = {
        {IBV_ACCESS_REMOTE_READ, c.read}, {IBV_ACCESS_REMOTE_WRITE, c.write}, {IBV_ACCESS_REMOTE_ATOMIC, c.atomic}};
    for (const auto& [need, want] : needs) {
      KeyCheck why = KeyCheck::Ok;
      uint8_t* p = test::in_loop(rnic->engine(), [&] { return rnic->check_rkey(Rkey(key), va + 8, 8, need, pd, &why); });
      EXPECT_EQ(why, want) << "access " << c.access << " need " << need;
      EXPECT_EQ(p, want == KeyCheck::Ok ? g_mem.data() + 8 : nullptr);
    }
    if (c.read == KeyCheck::Ok) {
      KeyCheck why = KeyCheck::Ok;
      EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->check_rkey(Rkey(key), va, 8, IBV_ACCESS_REMOTE_READ, other, &why); }), nullptr);
      EXPECT_EQ(why, KeyCheck::WrongPd);
      EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->check_rkey(Rkey(key), va + 250, 8, IBV_ACCESS_REMOTE_READ, pd, &why); }), nullptr);
      EXPECT_EQ(why, KeyCheck::OutOfBounds);
      EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->check_rkey(Rkey(key), va - 1, 8, IBV_ACCESS_REMOTE_READ, pd, &why); }), nullptr);
      EXPECT_EQ(why, KeyCheck::OutOfBounds);
      EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->check_rkey(Rkey(key), va, 256, IBV_ACCESS_REMOTE_READ, pd, &why); }), g_mem.data());
      EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->check_rkey(Rkey(key ^ 0x1), va, 8, IBV_ACCESS_REMOTE_READ, pd, &why); }), nullptr);  // wrong key byte
      EXPECT_EQ(why, KeyCheck::NoKey);
      EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->check_rkey(Rkey(0xFFFFFF00u), va, 8, IBV_ACCESS_REMOTE_READ, pd, &why); }), nullptr);
      EXPECT_EQ(why, KeyCheck::NoKey);
    }
    KeyCheck why = KeyCheck::Ok;
    EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->lookup_lkey(Lkey(key), other, &why); }), nullptr);
    EXPECT_EQ(why, KeyCheck::WrongPd);
    EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->lookup_lkey(Lkey(key), pd, &why); }), mr);
    EXPECT_EQ(why, KeyCheck::Ok);
    ASSERT_EQ(rnic->dereg_mr(mr), 0);
  }
}

TEST_F(Ctl, RereqMr) {
  int err = 0;
  Mr* mr = rnic->reg_mr(pd, g_mem.data(), 256, 0x1000, IBV_ACCESS_LOCAL_WRITE, &err);
  ASSERT_NE(mr, nullptr);
  KeyCheck why;
  EXPECT_EQ(test::in_loop(rnic->engine(), [&] { return rnic->check_rkey(Rkey(mr->rkey.value()), 0x1000, 8, IBV_ACCESS_REMOTE_READ, pd, &why); }), nullptr);
  EXPECT_EQ(rnic->rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_REMOTE_READ), 0);
  EXPECT_NE(test::in_loop(rnic->engine(), [&] { return rnic->check_rkey(Rkey(mr->rkey.value()), 0x1000, 8, IBV_ACCESS_REMOTE_READ, pd, &why); }), nullptr);
  EXPECT_EQ(rnic->rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_REMOTE_WRITE), EINVAL);
  Pd* other = rnic->alloc_pd(&err);
  EXPECT_EQ(rnic->rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, other, nullptr, 0, 0), 0);
  EXPECT_EQ(mr->pd, other);
  EXPECT_EQ(rnic->dealloc_pd(other), EBUSY);
  EXPECT_EQ(rnic->dealloc_pd(pd), 0);
  EXPECT_EQ(rnic->dereg_mr(mr), 0);
  EXPECT_EQ(rnic->dealloc_pd(other), 0);
}

ibv_wc wc_with(uint64_t id) {
  ibv_wc wc{};
  wc.wr_id = id;
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_RECV;
  return wc;
}

TEST_F(Ctl, CqOrderOverflowAndResize) {
  Cq* c = cq(5);
  EXPECT_EQ(c->capacity(), 5u);
  uint64_t next = 0;
  uint64_t want = 0;
  // Wrap the ring several times with uneven polls: strict FIFO.
  for (int round = 0; round < 7; ++round) {
    for (int i = 0; i < 3 + round % 3; ++i) ASSERT_TRUE(test::in_loop(rnic->engine(), [&] { return c->push(wc_with(next++)); }));
    ibv_wc out[8];
    const int n = c->poll(2, out);
    ASSERT_EQ(n, 2);
    for (int i = 0; i < n; ++i) EXPECT_EQ(out[i].wr_id, want++);
    const int m = c->poll(8, out);
    for (int i = 0; i < m; ++i) EXPECT_EQ(out[i].wr_id, want++);
  }
  EXPECT_EQ(want, next);
  EXPECT_EQ(c->poll(-1, nullptr), -EINVAL);

  // Exactly `cqe` entries fit; the next is dropped, counted, CQ_ERR raised once.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(test::in_loop(rnic->engine(), [&] { return c->push(wc_with(100 + i)); }));
  EXPECT_FALSE(test::in_loop(rnic->engine(), [&] { return c->push(wc_with(105)); }));
  EXPECT_FALSE(test::in_loop(rnic->engine(), [&] { return c->push(wc_with(106)); }));
  EXPECT_TRUE(c->overflowed());
  EXPECT_EQ(rnic->counters().get(RnicCtr::cq_overflows), 2u);
  AsyncEvent ev;
  ASSERT_TRUE(next_event(&ev));
  EXPECT_EQ(ev.type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.cq, c);
  EXPECT_FALSE(next_event(&ev));

  // Resize keeps the entries in order; never below those in use.
  EXPECT_EQ(c->resize(4), EINVAL);
  EXPECT_EQ(c->resize(0), EINVAL);
  ASSERT_EQ(c->resize(9), 0);
  EXPECT_EQ(c->capacity(), 9u);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(test::in_loop(rnic->engine(), [&] { return c->push(wc_with(105 + i)); }));
  EXPECT_FALSE(test::in_loop(rnic->engine(), [&] { return c->push(wc_with(200)); }));
  auto all = drain(c);
  ASSERT_EQ(all.size(), 9u);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i].wr_id, 100 + i);
}

TEST_F(Ctl, CompletionChannelWakesPoll) {
  int err = 0;
  CompChannel* ch = rnic->create_comp_channel(&err);
  ASSERT_NE(ch, nullptr);
  Cq* c = cq(16, ch);
  Cq* other = cq(16);
  EXPECT_EQ(other->req_notify(false), EINVAL);  // no channel to notify through
  auto readable = [&](int ms) {
    pollfd p{ch->fd(), POLLIN, 0};
    return ::poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
  };

  // Not armed: a completion makes no event.
  ASSERT_TRUE(test::in_loop(rnic->engine(), [&] { return c->push(wc_with(1)); }));
  EXPECT_FALSE(readable(0));

  // Armed: a thread blocked in poll() on the fd wakes up.
  ASSERT_EQ(c->req_notify(false), 0);
  bool woke = false;
  std::thread waiter([&] { woke = readable(5000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(test::in_loop(rnic->engine(), [&] { return c->push(wc_with(2)); }));
  waiter.join();
  EXPECT_TRUE(woke);
  Cq* got = nullptr;
  ASSERT_EQ(ch->get_event(&got), 0);
  EXPECT_EQ(got, c);
  EXPECT_FALSE(readable(0));
  // One event per arming.
  ASSERT_TRUE(test::in_loop(rnic->engine(), [&] { return c->push(wc_with(3)); }));
  EXPECT_FALSE(readable(0));

  // Non-blocking fd: EAGAIN when none.
  const int fl = fcntl(ch->fd(), F_GETFL);
  fcntl(ch->fd(), F_SETFL, fl | O_NONBLOCK);
  EXPECT_EQ(ch->get_event(&got), EAGAIN);

  // Solicited only: a plain completion does not wake; a solicited or an
  // unsuccessful one does.
  ASSERT_EQ(c->req_notify(true), 0);
  ASSERT_TRUE(test::in_loop(rnic->engine(), [&] { return c->push(wc_with(4)); }));
  EXPECT_FALSE(readable(0));
  ASSERT_TRUE(test::in_loop(rnic->engine(), [&] { return c->push(wc_with(5), true); }));
  EXPECT_TRUE(readable(0));
  ASSERT_EQ(ch->get_event(&got), 0);
  ASSERT_EQ(c->req_notify(true), 0);
  ibv_wc bad = wc_with(6);
  bad.status = IBV_WC_REM_ACCESS_ERR;
  ASSERT_TRUE(test::in_loop(rnic->engine(), [&] { return c->push(bad); }));
  ASSERT_EQ(ch->get_event(&got), 0);
  EXPECT_EQ(got, c);

  // Two CQs on one channel: events in the order they came.
  Cq* c2 = cq(16, ch);
  ASSERT_EQ(c2->req_notify(false), 0);
  ASSERT_EQ(c->req_notify(false), 0);
  ASSERT_TRUE(test::in_loop(rnic->engine(), [&] { return c2->push(wc_with(7)); }));
  ASSERT_TRUE(test::in_loop(rnic->engine(), [&] { return c->push(wc_with(8)); }));
  ASSERT_EQ(ch->get_event(&got), 0);
  EXPECT_EQ(got, c2);
  ASSERT_EQ(ch->get_event(&got), 0);
  EXPECT_EQ(got, c);
  EXPECT_EQ(ch->get_event(&got), EAGAIN);

  // A destroyed CQ's undelivered event goes with it.
  ASSERT_EQ(c2->req_notify(false), 0);
  ASSERT_TRUE(test::in_loop(rnic->engine(), [&] { return c2->push(wc_with(9)); }));
  EXPECT_EQ(rnic->destroy_comp_channel(ch), EBUSY);
  ASSERT_EQ(rnic->destroy_cq(c2), 0);
  EXPECT_FALSE(readable(0));
  EXPECT_EQ(ch->get_event(&got), EAGAIN);
  ASSERT_EQ(rnic->destroy_cq(c), 0);
  EXPECT_EQ(rnic->destroy_comp_channel(ch), 0);
}

TEST_F(Ctl, SrqLimitAndResize) {
  int err = 0;
  ibv_srq_init_attr si{};
  si.attr.max_wr = 8;
  si.attr.max_sge = 2;
  si.attr.srq_limit = 9;  // above max_wr
  EXPECT_EQ(rnic->create_srq(pd, si, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  si.attr.srq_limit = 0;
  si.attr.max_wr = kMaxSrqWr + 1;
  EXPECT_EQ(rnic->create_srq(pd, si, &err), nullptr);
  EXPECT_EQ(err, EINVAL);
  si.attr.max_wr = 8;
  si.attr.max_sge = kMaxSrqSge + 1;
  EXPECT_EQ(rnic->create_srq(pd, si, &err), nullptr);
  si.attr.max_sge = 2;
  Srq* srq = rnic->create_srq(pd, si, &err);
  ASSERT_NE(srq, nullptr);

  ibv_recv_wr w{};
  const ibv_recv_wr* bad = nullptr;
  for (uint64_t i = 0; i < 4; ++i) {
    w.wr_id = i;
    ASSERT_EQ(srq->post_recv(&w, &bad), 0);
  }
  ibv_srq_attr a{};
  a.srq_limit = 9;
  EXPECT_EQ(srq->modify(a, IBV_SRQ_LIMIT), EINVAL);
  a.srq_limit = 3;
  ASSERT_EQ(srq->modify(a, IBV_SRQ_LIMIT), 0);
  ibv_srq_attr q{};
  ASSERT_EQ(srq->query(&q), 0);
  EXPECT_EQ(q.srq_limit, 3u);
  EXPECT_EQ(q.max_wr, 8u);
  EXPECT_EQ(q.max_sge, 2u);

  AsyncEvent ev;
  auto take = [&] {
    node->engine->run_sync([&] {
      srq->rq().pop();
      srq->after_pop();
    });
  };
  take();  // 3 left: not below the limit
  EXPECT_FALSE(next_event(&ev));
  take();  // 2 left: below, the event, once (IBA 10.2.9.2), and disarmed
  ASSERT_TRUE(next_event(&ev));
  EXPECT_EQ(ev.type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(ev.srq, srq);
  take();
  EXPECT_FALSE(next_event(&ev));
  ASSERT_EQ(srq->query(&q), 0);
  EXPECT_EQ(q.srq_limit, 0u);

  // Resize keeps the queued WQEs, never below them.
  a.max_wr = 16;
  ASSERT_EQ(srq->modify(a, IBV_SRQ_MAX_WR), 0);
  ASSERT_EQ(srq->query(&q), 0);
  EXPECT_EQ(q.max_wr, 16u);
  EXPECT_EQ(srq->rq().size(), 1u);
  EXPECT_EQ(srq->rq().front()->wr_id, 3u);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(srq->post_recv(&w, &bad), 0);
  a.max_wr = 3;
  EXPECT_EQ(srq->modify(a, IBV_SRQ_MAX_WR), EINVAL);
  EXPECT_EQ(srq->modify(a, 1 << 5), EINVAL);
}

TEST_F(Ctl, DestroyBusyRules) {
  int err = 0;
  CompChannel* ch = rnic->create_comp_channel(&err);
  Cq* c = cq(8, ch);
  ibv_srq_init_attr si{};
  si.attr.max_wr = 4;
  si.attr.max_sge = 1;
  Srq* srq = rnic->create_srq(pd, si, &err);
  ASSERT_NE(srq, nullptr);
  Mr* mr = rnic->reg_mr(pd, g_mem.data(), 64, 0, 0, &err);
  ASSERT_NE(mr, nullptr);
  Qp* q = qp(IBV_QPT_RC, c, c, srq);
  ASSERT_NE(q, nullptr);

  EXPECT_EQ(rnic->dealloc_pd(pd), EBUSY);
  EXPECT_EQ(rnic->destroy_cq(c), EBUSY);
  EXPECT_EQ(rnic->destroy_srq(srq), EBUSY);
  EXPECT_EQ(rnic->destroy_comp_channel(ch), EBUSY);

  ASSERT_EQ(rnic->destroy_qp(q), 0);
  EXPECT_EQ(rnic->dealloc_pd(pd), EBUSY);  // the MR and the SRQ
  EXPECT_EQ(rnic->destroy_srq(srq), 0);
  EXPECT_EQ(rnic->dereg_mr(mr), 0);
  EXPECT_EQ(rnic->dealloc_pd(pd), 0);
  EXPECT_EQ(rnic->destroy_comp_channel(ch), EBUSY);  // the CQ
  EXPECT_EQ(rnic->destroy_cq(c), 0);
  EXPECT_EQ(rnic->destroy_comp_channel(ch), 0);
  EXPECT_EQ(rnic->destroy_cq(c), EINVAL);  // gone
  EXPECT_EQ(rnic->destroy_qp(q), EINVAL);
}

}  // namespace
}  // namespace uroce::rnic::ctltest
