#include "lib/util/log.hpp"

#include <rte_log.h>

#include <array>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace uroce {
namespace trace_detail {
std::atomic<uint32_t> g_mask{0};
}  // namespace trace_detail

namespace {

constexpr std::array<const char*, kNumLogTypes> kLogTypeNames = {"uroce.engine", "uroce.rnic", "uroce.cm",
                                                                   "uroce.shim", "uroce.daemon"};
constexpr std::array<std::string_view, kNumTraceCats> kTraceCatNames = {"qp", "conn", "progress", "cc"};
constexpr size_t kLineMax = 512;  // longer trace lines are cut
constexpr std::string_view kTraceEnv = "UROCE_TRACE";

constexpr uint32_t rte_level(LogLevel l) noexcept {
  switch (l) {
    case LogLevel::Error: return RTE_LOG_ERR;
    case LogLevel::Warning: return RTE_LOG_WARNING;
    case LogLevel::Info: return RTE_LOG_INFO;
    case LogLevel::Debug: return RTE_LOG_DEBUG;
  }
  return RTE_LOG_ERR;
}

// The rte_log types, registered on first use (rte_log works before the
// EAL starts: lines go to stderr until then).  Log types default to
// WARNING.
const std::array<int, kNumLogTypes>& log_types() {
  static const std::array<int, kNumLogTypes> t = [] {
    std::array<int, kNumLogTypes> r{};
    for (size_t i = 0; i < kNumLogTypes; ++i) r[i] = rte_log_register_type_and_pick_level(kLogTypeNames[i], RTE_LOG_WARNING);
    return r;
  }();
  return t;
}

std::mutex g_hook_mu;
TraceHook g_hook;  // under g_hook_mu

void vlog(int type, uint32_t level, const char* prefix, const char* fmt, va_list ap) {
  char line[kLineMax];
  std::vsnprintf(line, sizeof line, fmt, ap);
  if (type >= 0) rte_log(level, static_cast<uint32_t>(type), "%s: %s\n", prefix, line);
}

// UROCE_TRACE at start, once per process (transport/telemetry.cpp serves
// /uroce/trace).
[[maybe_unused]] const bool g_started = [] {
  if (const char* v = std::getenv(std::string(kTraceEnv).c_str()); v != nullptr && !trace_apply(v))
    std::fprintf(stderr, "uroce: %s=%s: expected a list of qp, conn, all, none (each may end in =on or =off)\n",
                 kTraceEnv.data(), v);
  return true;
}();

}  // namespace

std::string_view trace_cat_name(TraceCat c) noexcept { return kTraceCatNames[static_cast<size_t>(c)]; }

void log_set_level(LogType type, LogLevel level) {
  const uint32_t want = rte_level(level);
  if (rte_log_get_global_level() < want) {
    // Keep every other type where it is: its own level now does the limiting.
    for (size_t t = 0; t < RTE_LOGTYPE_FIRST_EXT_ID + 1024; ++t) {
      const int cur = rte_log_get_level(static_cast<uint32_t>(t));
      if (cur < 0) continue;
      if (static_cast<uint32_t>(cur) > rte_log_get_global_level())
        rte_log_set_level(static_cast<uint32_t>(t), rte_log_get_global_level());
    }
    rte_log_set_global_level(want);
  }
  rte_log_set_level(static_cast<uint32_t>(log_types()[static_cast<size_t>(type)]), want);
}

void log_line(LogType type, LogLevel level, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vlog(log_types()[static_cast<size_t>(type)], rte_level(level), kLogTypeNames[static_cast<size_t>(type)], fmt, ap);
  va_end(ap);
}

void trace_set(TraceCat c, bool on) noexcept {
  const uint32_t bit = 1u << static_cast<unsigned>(c);
  if (on) {
    trace_detail::g_mask.fetch_or(bit, std::memory_order_relaxed);
  } else {
    trace_detail::g_mask.fetch_and(~bit, std::memory_order_relaxed);
  }
}

bool trace_apply(std::string_view spec) {
  // Parse all first: a bad word changes nothing.
  uint32_t set = 0, clear = 0;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    std::string_view word = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    if (word.empty()) continue;
    bool on = true;
    if (const size_t eq = word.find('='); eq != std::string_view::npos) {
      const std::string_view v = word.substr(eq + 1);
      if (v == "on" || v == "1") {
        on = true;
      } else if (v == "off" || v == "0") {
        on = false;
      } else {
        return false;
      }
      word = word.substr(0, eq);
    }
    uint32_t bits = 0;
    if (word == "all") {
      bits = (1u << kNumTraceCats) - 1;
    } else if (word == "none") {
      bits = (1u << kNumTraceCats) - 1;
      on = !on;
    } else {
      for (size_t i = 0; i < kNumTraceCats; ++i)
        if (word == kTraceCatNames[i]) bits = 1u << i;
      if (bits == 0) return false;
    }
    if (on) {
      set |= bits;
      clear &= ~bits;
    } else {
      clear |= bits;
      set &= ~bits;
    }
  }
  uint32_t cur = trace_detail::g_mask.load(std::memory_order_relaxed);
  while (!trace_detail::g_mask.compare_exchange_weak(cur, (cur | set) & ~clear, std::memory_order_relaxed)) {
  }
  return true;
}

void trace_emit(TraceCat c, const char* fmt, ...) {
  char line[kLineMax];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  // Straight to rte_log's stream: switching the category on is the filter
  // (the EAL's global log level, often WARNING, would drop INFO lines).
  if (FILE* f = rte_log_get_stream(); f != nullptr) {
    std::fprintf(f, "uroce.trace.%s: %s\n", kTraceCatNames[static_cast<size_t>(c)].data(), line);
    std::fflush(f);
  }
  std::lock_guard lock(g_hook_mu);
  if (g_hook) g_hook(c, line);
}

void set_trace_hook(TraceHook hook) {
  std::lock_guard lock(g_hook_mu);
  g_hook = std::move(hook);
}

}  // namespace uroce
