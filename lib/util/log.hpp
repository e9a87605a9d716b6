// Logging and tracing: one place for the lines the stack writes.
//
// Log lines go through DPDK's logger (rte_log): each layer logs under its
// own type — uroce.engine, uroce.rnic, uroce.cm, uroce.shim — so the EAL's
// own switches select them (--log-level=uroce.cm:debug, or UROCE_LOG /
// `log` in the configuration, which set every type's level).
//
// Trace lines follow one QP or one connection through its life: a QP's
// state changes, its retransmissions, NAKs and RNR NAKs it sends or
// receives, the errors that end it (category `qp`); a connection's CM
// state changes and the MADs that drive them, an rdma_cm id's events
// (category `conn`); the engine thread's progress modes, one line per
// change (category `progress`, transport/progress.hpp).  They are off by default and switched at run time:
//
//   UROCE_TRACE=qp,conn        at start (also: progress, cc, all, none)
//   uroce trace [--pid N] qp=on conn=off
//                              in a running process (DPDK telemetry:
//                              /uroce/trace,qp=on)
//
// A line goes to rte_log's stream (stderr unless the application chose
// another) whatever the log levels, and to the hook when one is set
// (tests, tools that collect them).  A trace point costs
// one relaxed load while its category is off; it formats only when on.
//
// Threads: any.  The hook is called on the thread that traced (the engine
// thread, in practice) and must not block.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace uroce {

// ---- logging ------------------------------------------------------------------------
enum class LogType : uint8_t { Engine, Rnic, Cm, Shim, Daemon };
inline constexpr size_t kNumLogTypes = 5;
enum class LogLevel : uint8_t { Error, Warning, Info, Debug };

void log_line(LogType type, LogLevel level, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
// The most detailed level `type` prints (default: warning, or what the
// EAL's --log-level gave it).  Raises rte_log's global level to it when
// that is lower, leaving the other types where they were.
void log_set_level(LogType type, LogLevel level);

// ---- tracing -----------------------------------------------------------------------
enum class TraceCat : uint8_t { Qp, Conn, Progress, Cc };
inline constexpr size_t kNumTraceCats = 4;
std::string_view trace_cat_name(TraceCat c) noexcept;

namespace trace_detail {
extern std::atomic<uint32_t> g_mask;
}  // namespace trace_detail

inline bool trace_on(TraceCat c) noexcept {
  return (trace_detail::g_mask.load(std::memory_order_relaxed) & (1u << static_cast<unsigned>(c))) != 0;
}
void trace_set(TraceCat c, bool on) noexcept;
// "qp,conn", "all", "none", "qp=on,conn=off": false (nothing changed) on a
// word it does not know.
bool trace_apply(std::string_view spec);
// One line (no newline) per trace point.  Call through UROCE_TRACE.
void trace_emit(TraceCat c, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

using TraceHook = std::function<void(TraceCat, std::string_view line)>;
void set_trace_hook(TraceHook hook);

}  // namespace uroce

// A trace line of category `cat` (TraceCat::Qp / TraceCat::Conn), printf
// style; nothing is evaluated while the category is off.
#define UROCE_TRACE(cat, ...)                                                          \
  do {                                                                                 \
    if (::uroce::trace_on(cat)) ::uroce::trace_emit(cat, __VA_ARGS__); \
  } while (0)
