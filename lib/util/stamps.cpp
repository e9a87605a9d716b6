#include "lib/util/stamps.hpp"

#include <rte_cycles.h>

namespace uroce::stamps {

namespace detail {
std::atomic<bool> g_armed{false};
}

namespace {
std::array<std::atomic<uint64_t>, kPoints> g_first{};

constexpr std::array<std::string_view, kPoints> kPointNames = {
    "post_begin", "posted", "picked", "built", "sealed", "sent",
    "received", "classified", "checked", "placed", "completed", "polled",
};
constexpr std::array<std::string_view, kPoints> kStageNames = {
    "", "post", "doorbell", "build", "icrc", "tx", "wire", "rx", "parse", "place", "cqe", "poll",
};
}  // namespace

std::string_view stage_name(size_t point) noexcept { return point < kPoints ? kStageNames[point] : ""; }
std::string_view point_name(Point p) noexcept { return kPointNames[static_cast<size_t>(p)]; }

void record(Point p) noexcept {
  std::atomic<uint64_t>& slot = g_first[static_cast<size_t>(p)];
  if (slot.load(std::memory_order_relaxed) != 0) return;
  uint64_t none = 0;
  slot.compare_exchange_strong(none, rte_rdtsc(), std::memory_order_relaxed);
}

void arm() noexcept {
  for (auto& s : g_first) s.store(0, std::memory_order_relaxed);
  detail::g_armed.store(true, std::memory_order_seq_cst);
}

void disarm() noexcept { detail::g_armed.store(false, std::memory_order_seq_cst); }

Snapshot snapshot() noexcept {
  Snapshot out{};
  for (size_t i = 0; i < kPoints; ++i) out[i] = g_first[i].load(std::memory_order_relaxed);
  return out;
}

uint64_t tsc_hz() noexcept { return rte_get_tsc_hz(); }

}  // namespace uroce::stamps
