// The one walker over a scatter/gather list (IBA 10.6.3: every SGE's L_Key
// names an MR of the QP's PD that covers it with the rights the access
// needs).  The requester gathers a message's payload from it, the completer
// scatters READ responses and atomic results into it, the responder
// scatters received SENDs into a receive WQE's list.  Every byte moves
// through the memory guard (memory.hpp), and every SGE's key is looked up
// as it is now (a deregistered MR fails the copy).
//
// [engine] only: it reads the Rnic's key table.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <span>

namespace uroce::rnic {

class Rnic;
class Pd;

// Where a walk stopped: message offset `at` is byte `off` of sge[idx].  A
// copy that starts at `at` continues from here (O(1) per packet whatever
// the list's length); a copy elsewhere (go-back-N) seeks first.
struct SgeCursor {
  uint32_t idx = 0;
  uint64_t off = 0;
  uint64_t at = 0;
};

// Gather `len` bytes of the list, from message offset `at`, into `dst`; or
// scatter `len` bytes from `src` into the list there.  Each SGE touched is
// checked: an MR of `pd`, covering it, granting every bit of `need`
// (IBV_ACCESS_LOCAL_WRITE for a scatter).  False when one fails or the
// list ends first; then part of the bytes may have moved.  `cursor`, when
// given, is where the walk starts (it seeks when its `at` differs) and is
// left where it ended (where it began, on failure).
bool sge_gather(Rnic& rnic, const Pd* pd, std::span<const ibv_sge> sges, uint64_t at, uint8_t* dst, uint64_t len,
                int need, SgeCursor* cursor = nullptr) noexcept;
bool sge_scatter(Rnic& rnic, const Pd* pd, std::span<const ibv_sge> sges, uint64_t at, const uint8_t* src,
                 uint64_t len, int need, SgeCursor* cursor = nullptr) noexcept;

}  // namespace uroce::rnic
