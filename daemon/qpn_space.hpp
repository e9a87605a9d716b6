// The QPN space of one device uroced serves (issue 15): which client owns
// each QPN, so that a packet goes to its QP's process and a client sends
// only from QPs it owns.
//
//   - QPNs 2 .. limit-1 (0 and 1 are the SMI's and the GSI's; the GSI is
//     the daemon's), drawn at random among the free ones, as the in-process
//     RNIC draws them: a QPN tells nothing about its neighbours;
//   - a freed QPN is not handed out again for `quarantine_ns` (a client's
//     exit frees them all): a packet still on its way to a QP that is gone
//     never reaches another process's QP (DESIGN.md "The shared device");
//   - a client owns at most `per_owner` of them, so that one process cannot
//     take the device's whole space.
//
// Threads: the device's engine (the switch reads owner() per packet);
// alloc and free come through Engine::run_sync.  Pure: no I/O.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace uroce::daemon {

template <class Owner>
class QpnSpace {
 public:
  QpnSpace(uint32_t limit, uint64_t quarantine_ns, uint32_t per_owner, uint64_t seed)
      : owner_(limit, nullptr), freed_at_(limit, 0), quarantine_ns_(quarantine_ns), per_owner_(per_owner),
        rng_(seed) {}

  uint32_t limit() const noexcept { return static_cast<uint32_t>(owner_.size()); }

  // A QPN for `o`, or 0 when none may be had (the space, less what is in
  // quarantine, is used up; or `o` holds per_owner already).
  uint32_t alloc(Owner* o, uint32_t owned_now, uint64_t now_ns) {
    if (limit() <= 2 || owned_now >= per_owner_) return 0;
    const uint32_t span = limit() - 2;
    const auto start = static_cast<uint32_t>(rng_() % span);
    for (uint32_t i = 0; i < span; ++i) {
      const uint32_t q = 2 + (start + i) % span;
      if (owner_[q] != nullptr) continue;
      if (freed_at_[q] != 0 && now_ns - freed_at_[q] < quarantine_ns_) continue;
      owner_[q] = o;
      return q;
    }
    return 0;
  }

  // False when `q` is not `o`'s.
  bool free(Owner* o, uint32_t q, uint64_t now_ns) noexcept {
    if (q >= limit() || owner_[q] != o || o == nullptr) return false;
    owner_[q] = nullptr;
    freed_at_[q] = now_ns == 0 ? 1 : now_ns;
    return true;
  }

  // Every QPN of `o`; how many there were.
  uint32_t free_all(Owner* o, uint64_t now_ns) noexcept {
    uint32_t n = 0;
    for (uint32_t q = 2; q < limit(); ++q) n += free(o, q, now_ns) ? 1 : 0;
    return n;
  }

  Owner* owner(uint32_t q) const noexcept { return q < limit() ? owner_[q] : nullptr; }
  bool in_quarantine(uint32_t q, uint64_t now_ns) const noexcept {
    return q < limit() && freed_at_[q] != 0 && now_ns - freed_at_[q] < quarantine_ns_;
  }

 private:
  std::vector<Owner*> owner_;
  std::vector<uint64_t> freed_at_;  // 0: never freed
  uint64_t quarantine_ns_;
  uint32_t per_owner_;
  std::mt19937_64 rng_;
};

}  // namespace uroce::daemon
