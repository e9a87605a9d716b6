// mr: memory regions and memory windows (IBA 10.6) — registration,
// re-registration and deregistration, window allocation, binding and
// invalidation — and the engine's key lookups every remote and local
// access goes through (IBA 9.7.5.1.3, 10.6.3, 10.6.7.3).
#include <endian.h>
#include <sys/mman.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>

#include "lib/util/spin_guard.hpp"
#include "transport/rnic/memory.hpp"
#include "transport/rnic/rnic.hpp"
#include "transport/rnic/rnic_internal.hpp"
#include "transport/rnic/verbs_newer.hpp"

namespace uroce::rnic {
namespace {

using detail::owns;
using detail::set_err;
using detail::unbind;

// Access bits reg_mr knows; the optional range (IBV_ACCESS_OPTIONAL_RANGE)
// is ignored, as libibverbs lets providers do.  FLUSH to global visibility
// is offered; FLUSH to persistence is not (no memory here is known to be
// persistent): as the kernel's ib_check_mr_access, a right the device
// lacks is EOPNOTSUPP.
constexpr int kMrAccessKnown = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                               IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
                               IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | verbs_newer::kAccessFlushGlobal;

// The access bits of a registration (reg_mr, rereg_mr): 0, EOPNOTSUPP or
// EINVAL.  IBA 10.6.3.1 (access rights), ibv_reg_mr(3): remote write or
// atomic access needs local write.
int check_mr_access(int access) noexcept {
  if (access & verbs_newer::kAccessFlushPersistent) return EOPNOTSUPP;
  if ((access & ~kMrAccessKnown) ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)))
    return EINVAL;
  return 0;
}

bool is_implicit_odp(const void* addr, uint64_t length, int access) noexcept {
  return addr == nullptr && length == SIZE_MAX && (access & IBV_ACCESS_ON_DEMAND) != 0 &&
         (access & IBV_ACCESS_ZERO_BASED) == 0;
}

}  // namespace

// ---- MR translation ------------------------------------------------------------------------------

uint8_t* Mr::translate(uint64_t va, uint64_t len) const noexcept {
  // Never form va + len or iova + length: either may wrap past 2^64
  // (an MR may end exactly at the top of the address space).
  if (va < iova) return nullptr;
  const uint64_t off = va - iova;
  if (off > length || len > length - off) return nullptr;
  // In integers: an implicit ODP MR's `addr` is null (rnic.hpp, reg_mr).
  return reinterpret_cast<uint8_t*>(reinterpret_cast<uintptr_t>(addr) + off);
}

// ---- MR ------------------------------------------------------------------------------------

Mr* Rnic::reg_mr(Pd* pd, void* addr, size_t length, uint64_t iova, int access, int* err) {
  access &= ~IBV_ACCESS_OPTIONAL_RANGE;
  // The caller's part: the arguments, and the memory (a read of the
  // process's mappings, kept off the engine's loop).
  // Implicit ODP (ibv_reg_mr(3)): addr NULL, length SIZE_MAX and
  // IBV_ACCESS_ON_DEMAND register the whole address space, addressed by
  // virtual address; every access is guarded (memory.hpp) as for any MR.
  const bool implicit = is_implicit_odp(addr, length, access);
  if (const int rc = check_mr_access(access); rc != 0) {
    set_err(err, rc);
    return nullptr;
  }
  if (!implicit && (length > kMaxMrSize || (addr == nullptr && length != 0))) {
    set_err(err, EINVAL);
    return nullptr;
  }
  if (const int rc = check_memory(addr, length, access); rc != 0) {
    set_err(err, rc);
    return nullptr;
  }
  auto mr = std::make_unique<Mr>();
  mr->addr = static_cast<uint8_t*>(addr);
  mr->length = length;
  mr->iova = (access & IBV_ACCESS_ZERO_BASED) || implicit ? 0 : iova;
  mr->access = access;
  // The engine's part: the PD, a key, the tables.
  return control([&]() -> Mr* {
    uint32_t key = 0;
    if (!key_for(pd, &key, err)) return nullptr;
    const uint32_t idx = key >> 8;
    mr->pd = pd;  // lkey == rkey
    mr->lkey = Lkey(key);
    mr->rkey = Rkey(key);
    Mr* p = mr.get();
    if (mrs_.size() <= idx) mrs_.resize(idx + 1);
    mrs_[idx] = std::move(mr);
    ++live_mrs_;
    pd->users.fetch_add(1);
    key_table_[idx] = p;
    return p;
  });
}

// A key for a new MR or window: the table index, and a random key byte
// that differs from the index's previous one, so that a stale key misses
// (IBA 10.6.3.3) and a live one cannot be guessed from its neighbours.
// Freed indexes are reused oldest first, so a key's slot comes back as late
// as it can.
bool Rnic::take_key(uint32_t* key) {
  UROCE_ASSERT_ENGINE(engine_);
  uint32_t idx = 0;
  if (!free_keys_.empty()) {
    idx = free_keys_.front();
    free_keys_.pop_front();
  } else if (next_key_ < kMaxMr) {
    idx = next_key_++;
  } else {
    return false;
  }
  uint8_t b;
  do {
    b = static_cast<uint8_t>(rng_());
  } while (b == last_key_byte_[idx]);
  last_key_byte_[idx] = b;
  *key = (idx << 8) | b;
  return true;
}

bool Rnic::key_for(const Pd* pd, uint32_t* key, int* err) {
  UROCE_ASSERT_ENGINE(engine_);
  if (pd == nullptr || !owns(pds_, pd)) {
    set_err(err, EINVAL);
    return false;
  }
  if (!take_key(key)) {
    set_err(err, ENOMEM);
    return false;
  }
  return true;
}

// ---- memory windows --------------------------------------------------------------------

Mw* Rnic::alloc_mw(Pd* pd, ibv_mw_type type, int* err) {
  return control([&]() -> Mw* {
    if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
      set_err(err, EINVAL);
      return nullptr;
    }
    uint32_t key = 0;
    if (!key_for(pd, &key, err)) return nullptr;
    const uint32_t idx = key >> 8;
    if (mws_.size() <= idx) mws_.resize(std::max<size_t>(idx + 1, mws_.size() * 2));
    auto mw = std::make_unique<Mw>();
    mw->pd = pd;
    mw->type = type;
    mw->rkey = Rkey(key);
    mw->ibv.rkey = mw->rkey.value();
    mw->ibv.handle = mw->rkey.value();
    mw->ibv.type = type;
    pd->users.fetch_add(1);
    mws_[idx] = std::move(mw);
    return mws_[idx].get();
  });
}

namespace detail {
void unbind(Mw& mw) noexcept {
  if (mw.mr != nullptr) --mw.mr->mw_binds;
  mw.mr = nullptr;
  mw.bound = false;
  mw.length = 0;
  mw.access = 0;
  mw.qp = nullptr;
  ++mw.epoch;
}
}  // namespace detail

int Rnic::dealloc_mw(Mw* mw) {
  return control([&]() -> int {
    // Found by address, never by reading *mw: a window freed before (or
    // not this device's) is EINVAL, as for the other objects.
    const auto it = std::find_if(mws_.begin(), mws_.end(), [mw](const auto& p) { return p.get() == mw; });
    if (mw == nullptr || it == mws_.end()) return EINVAL;
    const auto idx = static_cast<uint32_t>(it - mws_.begin());
    unbind(*mw);
    mw->pd->users.fetch_sub(1);
    mws_[idx].reset();
    free_keys_.push_back(idx);
    return 0;
  });
}

Mw* Rnic::mw_by_key(Rkey rkey) noexcept {
  assert(on_an_engine());
  const uint32_t idx = rkey.value() >> 8;
  Mw* mw = idx < mws_.size() ? mws_[idx].get() : nullptr;
  return mw != nullptr && mw->rkey == rkey ? mw : nullptr;
}

ibv_wc_status Rnic::bind_mw(Qp& qp, const SendWqe& w) noexcept {
  UROCE_ASSERT_ENGINE(qp.engine());
  const SpinGuard only_us(mw_lock());
  // IBA 10.6.7.2 (C10-72 .. C10-76) as rxe checks them; any failure is a
  // memory window bind error and leaves the window as it was.
  // The window pointer is the application's: it is used only once the
  // table says it is a live window of this device (a freed or foreign one
  // is a bind error, never dereferenced).
  const uint32_t idx = w.mw_index;
  if (w.mw == nullptr || idx >= mws_.size() || mws_[idx].get() != w.mw) return IBV_WC_MW_BIND_ERR;
  Mw* mw = w.mw;
  if (mw->pd != qp.pd()) return IBV_WC_MW_BIND_ERR;
  if ((w.rkey.value() >> 8) != idx) return IBV_WC_MW_BIND_ERR;   // a window keeps its index
  if (mw->type == IBV_MW_TYPE_2 && mw->bound) return IBV_WC_MW_BIND_ERR;  // invalidate first
  constexpr uint32_t kRemote = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  constexpr uint32_t kKnown = kRemote | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED;
  if ((w.bind_access & ~kKnown) != 0) return IBV_WC_MW_BIND_ERR;
  const bool zero_based = (w.bind_access & IBV_ACCESS_ZERO_BASED) != 0;
  if (zero_based && mw->type == IBV_MW_TYPE_1) return IBV_WC_MW_BIND_ERR;  // as rxe
  Mr* mr = nullptr;
  if (w.bind_has_mr) {
    KeyCheck why{};
    mr = lookup_lkey(Lkey(w.bind_lkey), qp.pd(), &why);  // C10-74: the MR is on the QP's PD
    if (mr == nullptr) return IBV_WC_MW_BIND_ERR;
    if ((mr->access & IBV_ACCESS_MW_BIND) == 0) return IBV_WC_MW_BIND_ERR;  // C10-75
    // C10-72: remote write or atomic through the window needs local write on the MR.
    if ((w.bind_access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) != 0 &&
        (mr->access & IBV_ACCESS_LOCAL_WRITE) == 0)
      return IBV_WC_MW_BIND_ERR;
    if (mr->translate(w.remote_addr, w.bind_length) == nullptr) return IBV_WC_MW_BIND_ERR;  // C10-76
  } else if (w.bind_length != 0) {
    return IBV_WC_MW_BIND_ERR;  // a length with no MR to take it from
  }
  // A type 2 window is bound to some memory or not at all: a zero-length
  // bind is refused (ConnectX; invalidation is how it is unbound), where
  // a type 1 window's zero-length bind unbinds it (IBA 10.6.7.2.1).
  if (mw->type == IBV_MW_TYPE_2 && w.bind_length == 0) return IBV_WC_MW_BIND_ERR;
  unbind(*mw);
  if (mr != nullptr) ++mr->mw_binds;
  mw->mr = mr;
  mw->va = w.remote_addr;
  mw->length = w.bind_length;
  mw->access = static_cast<int>(w.bind_access & kRemote);
  mw->zero_based = zero_based;
  mw->bound = true;
  mw->qp = mw->type == IBV_MW_TYPE_2 ? &qp : nullptr;
  mw->rkey = w.rkey;
  return IBV_WC_SUCCESS;
}

ibv_wc_status Rnic::local_invalidate(Qp& qp, Rkey rkey) noexcept {
  UROCE_ASSERT_ENGINE(qp.engine());
  const SpinGuard only_us(mw_lock());
  // IBA 10.6.7.2.5: only a bound type 2 window (this device has no
  // fast-registered MRs) of the QP's PD; else, as rxe, a local QP
  // operation error.  A window bound through another QP (type 2B is the
  // QP's) is a memory window error, as on ConnectX.
  Mw* mw = mw_by_key(rkey);
  if (mw == nullptr || mw->type != IBV_MW_TYPE_2 || !mw->bound || mw->pd != qp.pd()) return IBV_WC_LOC_QP_OP_ERR;
  if (mw->qp != &qp) return IBV_WC_MW_BIND_ERR;
  unbind(*mw);
  return IBV_WC_SUCCESS;
}

bool Rnic::remote_invalidate(Qp& qp, Rkey rkey) noexcept {
  UROCE_ASSERT_ENGINE(qp.engine());
  const SpinGuard only_us(mw_lock());
  Mw* mw = mw_by_key(rkey);
  if (mw == nullptr || mw->type != IBV_MW_TYPE_2 || !mw->bound || mw->pd != qp.pd() || mw->qp != &qp) return false;
  unbind(*mw);
  return true;
}

int Rnic::check_memory(const void* addr, uint64_t length, int access) {
  // ibv_reg_mr(3) on a kernel device: the pages are pinned, writable when
  // any access may write them (the kernel's ib_access_writable), and a
  // range the process has not mapped so is refused with EFAULT.  With
  // IBV_ACCESS_ON_DEMAND nothing is pinned; an access to a missing page
  // fails when it happens (memory.hpp's guard).
  if ((access & IBV_ACCESS_ON_DEMAND) != 0) return 0;
  constexpr int kWritable =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;
  return memory::check_mapped(addr, length, (access & kWritable) != 0);
}

int Rnic::rereg_mr(Mr* mr, int flags, Pd* pd, void* addr, size_t length, int access) {
  return control([&]() -> int {
    if (mr == nullptr) return EINVAL;
    const uint32_t idx = mr->lkey.value() >> 8;
    if (idx >= mrs_.size() || mrs_[idx].get() != mr) return EINVAL;
    if (mr->mw_binds != 0) return EBUSY;  // windows bound to it describe the registration as it is
    constexpr int kKnown = IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
    if (flags == 0 || (flags & ~kKnown)) return EINVAL;
    if ((flags & IBV_REREG_MR_CHANGE_PD) && (pd == nullptr || !owns(pds_, pd))) return EINVAL;
    if (flags & IBV_REREG_MR_CHANGE_ACCESS) {
      access &= ~IBV_ACCESS_OPTIONAL_RANGE;
      if (const int rc = check_mr_access(access); rc != 0) return rc;
    }
    if ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (length > kMaxMrSize || (addr == nullptr && length != 0)))
      return EINVAL;
    // The memory as it will be registered, with the rights it will have.
    const bool translation = (flags & IBV_REREG_MR_CHANGE_TRANSLATION) != 0;
    const int new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? access : mr->access;
    if (const int rc = check_memory(translation ? addr : mr->addr, translation ? length : mr->length, new_access);
        rc != 0)
      return rc;
    {
      if (flags & IBV_REREG_MR_CHANGE_PD) {
        mr->pd->users.fetch_sub(1);
        pd->users.fetch_add(1);
        mr->pd = pd;
      }
      if (flags & IBV_REREG_MR_CHANGE_ACCESS) mr->access = access;
      if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
        mr->addr = static_cast<uint8_t*>(addr);
        mr->length = length;
        mr->iova = reinterpret_cast<uint64_t>(addr);
      }
      // A message under way under the old registration does not continue
      // under the new one (the responder compares epochs per packet).
      ++mr->epoch;
    }
    return 0;
  });
}

int Rnic::dereg_mr(Mr* mr) {
  return control([&]() -> int {
    if (mr == nullptr) return EINVAL;
    const uint32_t idx = mr->lkey.value() >> 8;
    if (idx >= mrs_.size() || mrs_[idx].get() != mr) return EINVAL;
    if (mr->mw_binds != 0) return EBUSY;  // ibv_dereg_mr(3): memory windows are bound to it
    key_table_[idx] = nullptr;
    mr->valid.store(false, std::memory_order_release);
    mr->pd->users.fetch_sub(1);
    mrs_[idx].reset();
    free_keys_.push_back(idx);  // reused after every index freed before it
    --live_mrs_;
    return 0;
  });
}

uint64_t Rnic::device_clock_ns() noexcept {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(t.tv_nsec);
}

ibv_odp_caps Rnic::odp_caps() noexcept {
  ibv_odp_caps c{};
  c.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
  c.per_transport_caps.rc_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                                     IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV |
                                     verbs_newer::kOdpSupportAtomicWrite | verbs_newer::kOdpSupportFlush;
  c.per_transport_caps.uc_odp_caps =
      IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_SRQ_RECV;
  c.per_transport_caps.ud_odp_caps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
  return c;
}

int Rnic::advise_mr(Pd* pd, uint32_t advice, uint32_t flags, const ibv_sge* sg_list, uint32_t num_sge) {
  if (flags & ~uint32_t{IBV_ADVISE_MR_FLAG_FLUSH}) return EINVAL;
  if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
      advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
    return EOPNOTSUPP;
  if (num_sge == 0 || sg_list == nullptr) return EINVAL;
  const bool write = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
  // The caller's part copies the list; the engine's checks every key (the
  // key table is the engine's) and hands back the host ranges.
  std::vector<ibv_sge> sges(sg_list, sg_list + num_sge);
  std::vector<std::pair<uint8_t*, uint32_t>> ranges;
  ranges.reserve(num_sge);
  const int rc = control([&]() -> int {
    if (pd == nullptr || !owns(pds_, pd)) return EINVAL;
    for (const ibv_sge& s : sges) {
      KeyCheck why{};
      const Mr* mr = lookup_lkey(Lkey(s.lkey), pd, &why);
      if (mr == nullptr || (mr->access & IBV_ACCESS_ON_DEMAND) == 0) return ENOENT;
      if (write && (mr->access & IBV_ACCESS_LOCAL_WRITE) == 0) return EPERM;
      uint8_t* p = mr->translate(s.addr, s.length);
      if (p == nullptr) return EFAULT;
      ranges.emplace_back(p, s.length);
    }
    return 0;
  });
  if (rc != 0 || advice == IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT) return rc;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  for (const auto& [p, len] : ranges) {
    if (len == 0) continue;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
    const uintptr_t end = reinterpret_cast<uintptr_t>(p) + len;  // translate() ruled out a wrap
    // MADV_POPULATE_* (Linux 5.14) faults the pages in as an access would;
    // EINVAL from an older kernel or a special mapping: nothing to prefetch.
    if (::madvise(reinterpret_cast<void*>(begin), end - begin, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) !=
            0 &&
        errno != EINVAL && (flags & IBV_ADVISE_MR_FLAG_FLUSH))
      return EFAULT;
  }
  return 0;
}

// ---- [engine] lookups ---------------------------------------------------------------------------

Mr* Rnic::lookup_lkey(Lkey lkey, const Pd* pd, KeyCheck* check) noexcept {
  assert(on_an_engine());
  const uint32_t idx = lkey.value() >> 8;
  Mr* mr = idx < key_table_.size() ? key_table_[idx] : nullptr;
  KeyCheck r = KeyCheck::Ok;
  if (mr == nullptr || mr->lkey != lkey || !mr->valid.load(std::memory_order_acquire)) {
    r = KeyCheck::NoKey;
  } else if (mr->pd != pd) {
    r = KeyCheck::WrongPd;  // IBA 10.6.3.2: an L_Key is usable only by QPs of its PD
  }
  if (check != nullptr) *check = r;
  return r == KeyCheck::Ok ? mr : nullptr;
}

namespace {
// An MR's R_Key checks short of the range: the key as registered now, the
// PD, the rights.
KeyCheck mr_key_check(const Mr* mr, Rkey rkey, int need, const Pd* pd) noexcept {
  if (mr == nullptr || mr->rkey != rkey || !mr->valid.load(std::memory_order_acquire)) return KeyCheck::NoKey;
  if (mr->pd != pd) return KeyCheck::WrongPd;
  if ((mr->access & need) != need) return KeyCheck::NoAccess;
  return KeyCheck::Ok;
}
}  // namespace

uint8_t* Rnic::check_rkey(Rkey rkey, uint64_t va, uint64_t len, int need, const Pd* pd, KeyCheck* check,
                          uint32_t* epoch, const Qp* qp) noexcept {
  assert(on_an_engine());
  // IBA 9.7.5.1.3 / C9-88 (memory access validation): the R_Key names a
  // valid MR of the QP's PD that grants the access, and the whole range
  // lies inside it; otherwise a remote access error, and nothing moves.
  const uint32_t idx = rkey.value() >> 8;
  Mr* mr = idx < key_table_.size() ? key_table_[idx] : nullptr;
  if (mr == nullptr && idx < mws_.size() && mws_[idx] != nullptr) {
    const SpinGuard only_us(mw_lock());
    return check_mw_rkey(*mws_[idx], rkey, va, len, need, pd, check, epoch, qp);
  }
  KeyCheck r = mr_key_check(mr, rkey, need, pd);
  uint8_t* p = nullptr;
  if (r == KeyCheck::Ok && (p = mr->translate(va, len)) == nullptr) r = KeyCheck::OutOfBounds;
  if (check != nullptr) *check = r;
  if (r != KeyCheck::Ok) return nullptr;
  if (epoch != nullptr) *epoch = mr->epoch;
  return p;
}

bool Rnic::check_rkey_region(Rkey rkey, int need, const Pd* pd, KeyCheck* check, const Qp* qp) noexcept {
  assert(on_an_engine());
  const uint32_t idx = rkey.value() >> 8;
  const Mr* mr = idx < key_table_.size() ? key_table_[idx] : nullptr;
  if (mr == nullptr && idx < mws_.size() && mws_[idx] != nullptr) {
    // A window: its own checks at its first byte (its rights decide).
    const SpinGuard only_us(mw_lock());
    const Mw& mw = *mws_[idx];
    check_mw_rkey(mw, rkey, mw.zero_based ? 0 : mw.va, 0, need, pd, check, nullptr, qp);
    return *check == KeyCheck::Ok;
  }
  *check = mr_key_check(mr, rkey, need, pd);
  return *check == KeyCheck::Ok;
}

uint8_t* Rnic::check_mw_rkey(const Mw& mw, Rkey rkey, uint64_t va, uint64_t len, int need, const Pd* pd,
                             KeyCheck* check, uint32_t* epoch, const Qp* qp) noexcept {
  assert(on_an_engine());  // under mw_lock()
  // IBA 10.6.7.3 (window access validation): the key as bound now, the
  // QP's PD, a type 2 window's own QP, the window's rights and bounds, and
  // then the MR's own translation.
  KeyCheck r = KeyCheck::Ok;
  uint8_t* p = nullptr;
  if (mw.rkey != rkey || !mw.bound || mw.mr == nullptr) {
    r = KeyCheck::NoKey;
  } else if (mw.pd != pd) {
    r = KeyCheck::WrongPd;
  } else if (mw.type == IBV_MW_TYPE_2 && mw.qp != qp) {
    r = KeyCheck::WrongQp;
  } else if ((mw.access & need) != need) {
    r = KeyCheck::NoAccess;
  } else {
    // The offset into the window, without forming va + len (64-bit wrap).
    const uint64_t base = mw.zero_based ? 0 : mw.va;
    const uint64_t off = va - base;
    if (va < base || off > mw.length || len > mw.length - off || (p = mw.mr->translate(mw.va + off, len)) == nullptr)
      r = KeyCheck::OutOfBounds;
  }
  if (check != nullptr) *check = r;
  if (r != KeyCheck::Ok) return nullptr;
  if (epoch != nullptr) *epoch = mw.epoch;
  return p;
}

}  // namespace uroce::rnic
