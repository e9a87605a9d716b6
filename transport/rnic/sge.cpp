// sge: the scatter/gather walker (sge.hpp).
#include "transport/rnic/sge.hpp"

#include <cassert>
#include <algorithm>

#include "transport/rnic/memory.hpp"
#include "transport/rnic/rnic.hpp"

namespace uroce::rnic {
namespace {

SgeCursor seek(std::span<const ibv_sge> sges, uint64_t at) noexcept {
  SgeCursor c;
  uint64_t in = at;
  while (c.idx < sges.size() && in >= sges[c.idx].length) {
    in -= sges[c.idx].length;
    ++c.idx;
  }
  c.off = in;
  c.at = at;
  return c;
}

// The walk: `move(host, n)` copies n bytes at the host address of the
// current SGE piece and advances the caller's buffer.
template <class Move>
bool walk(Rnic& rnic, const Pd* pd, std::span<const ibv_sge> sges, uint64_t at, uint64_t len, int need,
          SgeCursor* cursor, Move&& move) noexcept {
  if (len == 0) return true;
  SgeCursor c = cursor != nullptr && cursor->at == at ? *cursor : seek(sges, at);
  const SgeCursor start = c;
  while (len > 0 && c.idx < sges.size()) {
    const ibv_sge& s = sges[c.idx];
    if (c.off >= s.length) {  // this SGE is done (or empty): the next
      ++c.idx;
      c.off = 0;
      continue;
    }
    const uint64_t n = std::min<uint64_t>(len, s.length - c.off);
    KeyCheck why{};
    Mr* mr = rnic.lookup_lkey(Lkey(s.lkey), pd, &why);
    uint8_t* host = mr != nullptr && (mr->access & need) == need ? mr->translate(s.addr + c.off, n) : nullptr;
    if (host == nullptr || !move(host, n)) {
      if (cursor != nullptr) *cursor = start;
      return false;
    }
    len -= n;
    c.off += n;
    c.at += n;
  }
  if (cursor != nullptr) *cursor = len == 0 ? c : start;
  return len == 0;
}

}  // namespace

bool sge_gather(Rnic& rnic, const Pd* pd, std::span<const ibv_sge> sges, uint64_t at, uint8_t* dst, uint64_t len,
                int need, SgeCursor* cursor) noexcept {
  assert(rnic.on_an_engine());
  return walk(rnic, pd, sges, at, len, need, cursor, [&dst](uint8_t* host, uint64_t n) {
    const bool ok = memory::copy(dst, host, n);
    dst += n;
    return ok;
  });
}

bool sge_scatter(Rnic& rnic, const Pd* pd, std::span<const ibv_sge> sges, uint64_t at, const uint8_t* src,
                 uint64_t len, int need, SgeCursor* cursor) noexcept {
  assert(rnic.on_an_engine());
  return walk(rnic, pd, sges, at, len, need, cursor, [&src](uint8_t* host, uint64_t n) {
    const bool ok = memory::copy(host, src, n);
    src += n;
    return ok;
  });
}

}  // namespace uroce::rnic
