// Progress: who runs the engine's loop, and what a thread that runs it for
// good does when there is nothing to do (DESIGN.md "Progress").
//
// The engine (engine.hpp) is the loop: Engine::poll_once is one turn.
// This class owns everything around it:
//
//   - the loop's lock and its identity: one thread at a time runs a turn
//     (the engine thread, an application thread assisting it from a poll
//     or a post, inline progress's callers, the backstop), and that thread
//     is "the engine thread" for the turn (on_engine_thread, the
//     [engine] assertions);
//   - the engine thread (start/stop) and inline progress's backstop;
//   - the idle policy of those threads, a state machine: one Mode at a
//     time, a step per mode, a trace line per transition
//     (UROCE_TRACE=progress), every parameter in params.hpp;
//   - how application threads drive the loop: try_progress (a CQ poll's
//     assist), post_kick (a post's turn, or its batch), run_sync (a control
//     verb waits for its engine part), Sleeper (a blocking event wait under
//     inline progress).
//
// Modes of a thread that runs the loop for good (the engine thread, or the
// backstop while a Sleeper waits); `idle` is how long its turns found no
// work:
//
//   mode      entered when                                  does, until
//   Poll      a turn did work, or idle < the spin           the next turn at once
//             (kIdleSpinNs; kIdleWaitSpinNs under
//             idle_wait, where the spin yields: Yield)
//   Yield     idle < kIdleYieldNs (idle_wait: < its spin)   sched_yield between turns; one that
//                                                           comes back after kYieldStallNs marks
//                                                           the core shared (kCoreSharedHold*)
//   Nap       idle >= kIdleYieldNs, or the core is shared   off call, kIdleNapNs naps a frame on
//             (no idle_wait)                                the port's wait fd ends
//   Assist    an application thread polled within           naps before its turn (assist_nap:
//             kAssistHoldNs (try_progress(Hold))            kAssistNapNs, doubling to
//                                                           kAssistNapMaxNs under idle_wait)
//   Doze      idle_wait, past the spin, an application      one kAssistNapNs nanosleep, on call
//             drove the loop within kAssistActiveNs
//   Sleep     idle_wait, past the spin                      off call, epoll on the port, the wake
//                                                           fd and watched fds, until a frame, a
//                                                           doorbell or the next timer
//                                                           (kIdleWaitMaxNs at most)
//   BusyPoll  idle_wait and IdleHooks::keep_polling         a turn, then sched_yield, at
//                                                           SCHED_OTHER
//   GiveWay   another thread holds the loop                 sched_yield (never sleeps on the lock)
//   Backstop  inline progress, no Sleeper waiting           a turn when no thread ran one for
//                                                           kInlineBackstopNs
//
// Threads: the engine thread and the backstop call only the private steps;
// application threads call try_progress, post_kick, run_sync and make
// Sleepers; any thread reads on_call, mode and the counters.  Shared
// fields say who writes them and their memory order below.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "drivers/result.hpp"
#include "lib/util/counters.hpp"
#include "transport/params.hpp"

namespace uroce::transport {

class Engine;

// Who drives the loop: a thread of the engine's own, or the application's
// threads from their verbs calls (UROCE_PROGRESS=inline).
enum class ProgressKind : uint8_t { Thread, Inline };

#define UROCE_PROGRESS_COUNTERS(X)                                                                 \
  X(loop_busy, "times the engine thread found an application thread running the loop")            \
  X(idle_sleeps, "times the idle engine thread slept (EngineConfig::idle_wait)")                   \
  X(idle_woken, "of those, sleeps a frame, a doorbell or a watched fd ended early")               \
  X(busy_polls, "times the idle engine thread polled on for a spinning client (keep_polling)")    \
  X(nap_woken, "times a frame ended the idle engine thread's nap early (the port's wait fd)")     \
  X(yield_stalls, "times an idle engine thread's sched_yield came back after a scheduler slice (it naps a while instead)") \
  X(off_call, "times the engine thread went off call to nap or sleep (posts meanwhile run their own turns)") \
  X(assist_naps, "times the engine thread napped for an application thread driving the loop")     \
  X(assist_nap_frames, "of those, naps a frame ended that the application left to the engine thread (it stopped polling)") \
  X(mode_poll, "times the loop's own thread entered mode Poll (progress.hpp)")                     \
  X(mode_yield, "times it entered mode Yield")                                                     \
  X(mode_nap, "times it entered mode Nap")                                                         \
  X(mode_assist, "times it entered mode Assist")                                                   \
  X(mode_doze, "times it entered mode Doze")                                                       \
  X(mode_sleep, "times it entered mode Sleep")                                                     \
  X(mode_busy_poll, "times it entered mode BusyPoll")                                              \
  X(mode_give_way, "times it entered mode GiveWay")                                               \
  X(mode_backstop, "times it entered mode Backstop")

UROCE_COUNTER_ENUM(ProgressCtr, UROCE_PROGRESS_COUNTERS)
using ProgressCounters = CounterSet<ProgressCtr, kProgressCtrInfo>;

class Progress {
 public:
  enum class Mode : uint8_t { Stopped, Poll, Yield, Nap, Assist, Doze, Sleep, BusyPoll, GiveWay, Backstop };
  static std::string_view mode_name(Mode m) noexcept;

  // With idle_wait: more fds that end the engine thread's sleep (readable),
  // and a layer's part in deciding to sleep: `prepare` (false: work is
  // waiting, do not sleep; it also tells its producers to wake us) and
  // `end` after the sleep.  `keep_polling`: asked when the thread would
  // sleep; true: somebody waits on this loop with a spinning thread of its
  // own, so poll on (BusyPoll).  Set before the loop runs, or inside it.
  struct IdleHooks {
    std::function<bool()> prepare;
    std::function<void()> end;
    std::function<bool()> keep_polling;
  };

  explicit Progress(Engine& engine);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // The wake fd and epoll set of idle_wait.  Control path, before start().
  drivers::Status init();

  // ---- the loop's identity ----------------------------------------------------
  // One turn on the calling thread, which is the loop's for its duration
  // (no lock: the caller knows nobody else runs it: tests, tools).
  unsigned poll();
  // Runs f as the loop's thread, under the loop's lock (control path:
  // the engine's start-up announcements, its last flush).
  void as_loop(const std::function<void()>& f);
  // Also true on the thread that holds the device exclusive (an engine on
  // several lcores: Lcores::Exclusive), for every lcore's engine.
  bool on_engine_thread() const noexcept;
  // Whether the calling thread is inside some engine's turn right now (an
  // assisting application thread included).  No lock, no allocation, no
  // thread-local: a signal handler may ask (verbs-shim/process.cpp).
  static bool polling_here() noexcept;

  // ---- the threads that run the loop for good ----------------------------------
  // A dedicated engine thread.  on_start runs first on that thread (start
  // returns once it has), on_exit last; e.g. registering the thread with
  // the EAL, which run_sync cannot do (it may run its function on the
  // calling thread).
  void start(std::function<void()> on_start = {}, std::function<void()> on_exit = {});
  // Inline progress's backstop: a thread that runs one turn only when no
  // thread has for `period_ns`, so that a program that spins on memory
  // between calls (ib_write_lat) still gets its data, a period late at
  // most; while a Sleeper waits it runs the loop as an engine thread.
  void start_backstop(uint64_t period_ns, std::function<void()> on_start = {}, std::function<void()> on_exit = {});
  // Joins the engine thread or the backstop.
  void stop();
  bool running() const noexcept { return running_.load(std::memory_order_relaxed); }
  // The mode of the thread that runs the loop for good (Stopped: none).
  // Any thread; a hint that may change at once.
  Mode mode() const noexcept { return mode_.load(std::memory_order_relaxed); }

  // A thread about to block in read(2) on an event fd (a CQ channel, the
  // rdma_cm channel, the async fd) under inline progress: nobody would run
  // the loop that produces its event, so the backstop runs it as an engine
  // thread would until the last such thread leaves.  The thread blocks in
  // the kernel, where a signal interrupts it (EINTR) as with any RDMA
  // device; spinning in the library would swallow the signal.
  class Sleeper {
   public:
    explicit Sleeper(Progress& p) noexcept;
    ~Sleeper();
    Sleeper(const Sleeper&) = delete;
    Sleeper& operator=(const Sleeper&) = delete;

   private:
    Progress& p_;
  };

  // ---- application threads -------------------------------------------------------
  // One turn if no other thread runs one.  Inline mode: how the loop runs.
  // With an engine thread: an application thread assisting it.  Hold: the
  // caller will keep calling (it polls a CQ or waits for an event), so the
  // engine thread stays off the core while such calls keep coming (Assist).
  // Once: a single call (a post), after which the caller may not call again
  // for a long time (ib_write_lat spins on memory).
  enum class Assist : uint8_t { Hold, Once };
  bool try_progress(Assist how = Assist::Hold);
  // After an application thread rang a post's doorbell: a turn for it now,
  // or, for a post that follows the last within
  // EngineConfig::post_batch_gap_ns while the engine thread is on call (it
  // polls, yields, or naps for an assisting caller), none: the doorbell
  // waits for the next turn, which the caller's next poll, the engine
  // thread (at the latest as it ends) or the kPostBatchMax'th such post
  // runs, so that a burst of posts leaves in one tx_burst.
  void post_kick() noexcept;
  // Whether the engine thread is on call now (post_kick).  Any thread.
  bool on_call() const noexcept { return post_batch_.on_call.load(std::memory_order_relaxed); }
  // Run `fn` inside the loop and wait for it (at once when already there).
  // The caller holds no lock the loop takes (DESIGN.md "Threads").
  void run_sync(const std::function<void()>& fn);

  // ---- idle_wait -------------------------------------------------------------------
  void watch_fd(int fd);
  void unwatch_fd(int fd);
  void set_idle_hooks(IdleHooks h) { idle_hooks_ = std::move(h); }

  // ---- the loop's side (Engine::poll_once and Engine::ring) -------------------------
  // [engine] A turn begins at `now`: its doorbells are drained next.
  void turn_begins(uint64_t now) noexcept;
  // [engine] The turn is over; a turn another thread ran while the engine
  // thread sleeps may have left frames held or armed a sooner timer.
  void turn_ended() noexcept;
  // [any thread] A doorbell was pushed: wake a sleeping engine thread.
  void rung() noexcept;

  const ProgressCounters& counters() const noexcept { return ctr_; }

 private:
  // The engine thread's loop and the backstop's.
  void engine_thread_main();
  void backstop_main(uint64_t period_ns);
  // One turn unless another thread runs one: its work, or -1 when busy;
  // `clock` gets the turn's time sample.
  int poll_if_free(uint64_t* clock = nullptr);
  unsigned turn_locked();  // a turn as the loop's thread; the caller holds poll_mutex_

  // The idle policy: the mode after a turn that did `work`, and its step.
  Mode after_turn_mode(unsigned work, uint64_t clock, uint64_t& idle_since) noexcept;
  void step(Mode m, uint64_t clock, uint64_t& idle_since) noexcept;
  void enter(Mode m, uint64_t idle_ns) noexcept;  // the transition: counter, trace
  void step_yield(uint64_t clock) noexcept;
  void step_nap() noexcept;
  void step_sleep(uint64_t& idle_since) noexcept;
  bool step_busy_poll() noexcept;
  bool assist_nap(uint64_t assist_seen) noexcept;  // Assist's step; true: take a frame now
  bool nap_on_port(long ns) noexcept;               // true: a frame ended it
  void set_polling(bool on) noexcept;
  // Before the thread gives its core away: false (and still on call) when
  // a post left its doorbell for a turn meanwhile.
  bool leave_call() noexcept;
  void wake_if_needed() noexcept;
  void note_assist(uint64_t clock) noexcept;  // [application thread] try_progress(Hold)

  Engine& e_;
  std::string trace_name_;  // the port's name, in trace lines
  ProgressCounters ctr_;
  std::atomic<Mode> mode_{Mode::Stopped};  // written by the loop's own thread only

  // The loop's lock (held for a turn) and its thread for the turn.
  std::mutex poll_mutex_;
  std::atomic<std::thread::id> engine_thread_{};
  size_t poller_slot_ = SIZE_MAX;  // polling_here's table (progress.cpp); SIZE_MAX: none

  std::thread thread_;
  std::atomic<bool> running_{false};
  std::atomic<bool> backstop_running_{false};
  std::thread backstop_;
  std::atomic<unsigned> sleepers_{0};  // Sleeper objects alive
  std::mutex backstop_mu_;             // with backstop_cv_: wakes the backstop's wait early
  std::condition_variable backstop_cv_;
  std::atomic<uint64_t> last_poll_ns_{0};  // when the latest turn began (the backstop reads it)

  // idle_wait: the engine thread's sleep.  rung() bumps rung_ and, when the
  // thread sleeps (or is about to), writes wake_fd_; the thread sets
  // sleeping_ then compares rung_ with what its last turn drained (seq_cst
  // both ways: one of the two sees the other).
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> sleeping_{false};
  std::atomic<uint64_t> sleep_until_{0};  // when the engine thread's sleep ends
  std::atomic<uint64_t> rung_{0};
  uint64_t seen_rung_ = 0;  // [engine]
  IdleHooks idle_hooks_;
  bool polling_ = false;  // [loop thread] BusyPoll holds it at SCHED_OTHER

  // [loop thread: the engine thread, or the backstop] Until when the core
  // counts as shared with a thread that does not yield back, and the
  // latest such hold (0: no yield has stalled yet).
  uint64_t core_shared_until_ = 0;
  uint64_t core_shared_hold_ = 0;

  // Assist: when an application thread last called try_progress(Hold)
  // while the engine thread runs, and (idle_wait) how many such calls
  // (approximate: racing application threads may lose a count).  Relaxed:
  // hints the engine thread reads.
  std::atomic<uint64_t> assist_ns_{0};
  std::atomic<uint64_t> assist_calls_{0};
  bool assist_polls_on_ = false;              // [loop thread] the application polled through the last assist nap
  long assist_nap_ns_ = params::kAssistNapNs;  // [loop thread] the next nap it is expected to poll through

  // post_kick's batching, on a cache line of its own (posters write it;
  // the engine thread's turns only read it unless posts were left).
  // deferred: posts whose doorbells wait for the next turn; end_ns: when
  // the latest post call ended; on_call: the engine thread runs a turn
  // soon.  seq_cst on both sides: the thread or the poster sees the other.
  struct alignas(64) PostBatch {
    std::atomic<uint32_t> deferred{0};
    std::atomic<bool> on_call{false};
    std::atomic<uint64_t> end_ns{0};
  };
  PostBatch post_batch_;
};

}  // namespace uroce::transport
