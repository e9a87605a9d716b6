#include "transport/progress.hpp"

#include <pthread.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <chrono>
#include <ctime>

#include "lib/util/log.hpp"
#include "lib/util/quiet_threads.hpp"
#include "lib/util/steady_ns.hpp"
#include "transport/engine.hpp"

namespace uroce::transport {

// polling_here: which thread runs a turn of which engine, in a fixed table
// a signal handler can scan (no thread-local: a library loaded by dlopen,
// as UCX loads libibverbs, gets its thread-locals allocated lazily, by
// malloc, on a thread's first touch, and an initial-exec one made that
// dlopen fail).  An engine takes a slot for its life; engines beyond
// kPollerSlots have none (their pollers are not seen: the termination
// handler then holds such a thread, at most 1 s).
namespace {
constexpr size_t kPollerSlots = 64;
std::array<std::atomic<bool>, kPollerSlots> g_poller_taken{};
std::array<std::atomic<pthread_t>, kPollerSlots> g_poller{};  // 0: no turn running

constexpr auto kModeNames = std::to_array<std::string_view>(
    {"Stopped", "Poll", "Yield", "Nap", "Assist", "Doze", "Sleep", "BusyPoll", "GiveWay", "Backstop"});
static_assert(kModeNames.size() == static_cast<size_t>(Progress::Mode::Backstop) + 1);

// The counter each mode's entries are counted under (Stopped: none).
constexpr auto kModeCtr = std::to_array<ProgressCtr>(
    {ProgressCtr::mode_poll, ProgressCtr::mode_poll, ProgressCtr::mode_yield, ProgressCtr::mode_nap,
     ProgressCtr::mode_assist, ProgressCtr::mode_doze, ProgressCtr::mode_sleep, ProgressCtr::mode_busy_poll,
     ProgressCtr::mode_give_way, ProgressCtr::mode_backstop});
static_assert(kModeCtr.size() == kModeNames.size());

bool signed_before(uint64_t a, uint64_t b, uint64_t within) noexcept {
  // a within `within` before b, or after it (clocks sampled by two threads).
  return static_cast<int64_t>(b - a) < static_cast<int64_t>(within);
}

}  // namespace

std::string_view Progress::mode_name(Mode m) noexcept { return kModeNames[static_cast<size_t>(m)]; }

Progress::Progress(Engine& engine) : e_(engine) {
  for (size_t i = 0; i < kPollerSlots; ++i) {
    bool free = false;
    if (g_poller_taken[i].compare_exchange_strong(free, true)) {
      poller_slot_ = i;
      break;
    }
  }
}

Progress::~Progress() {
  stop();
  if (poller_slot_ < kPollerSlots) g_poller_taken[poller_slot_].store(false);
  for (int fd : {epoll_fd_, wake_fd_})
    if (fd >= 0) ::close(fd);
}

drivers::Status Progress::init() {
  trace_name_ = e_.port().name();
  if (e_.config().idle_wait && epoll_fd_ < 0) {
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epoll_fd_ < 0 || wake_fd_ < 0) return drivers::Error{errno, "engine: epoll/eventfd for idle_wait"};
    watch_fd(wake_fd_);
    if (e_.port().wait_fd() >= 0) watch_fd(e_.port().wait_fd());
  }
  return {};
}

// ---- the loop's identity ------------------------------------------------------------

unsigned Progress::poll() {
  const std::thread::id previous = engine_thread_.load();
  engine_thread_.store(std::this_thread::get_id());
  const unsigned work = e_.poll_once();
  engine_thread_.store(previous);
  return work;
}

void Progress::as_loop(const std::function<void()>& f) {
  std::lock_guard lock(poll_mutex_);
  const std::thread::id previous = engine_thread_.load();
  engine_thread_.store(std::this_thread::get_id());
  f();
  engine_thread_.store(previous);
}

bool Progress::polling_here() noexcept {
  const pthread_t self = pthread_self();
  for (const auto& p : g_poller) {
    const pthread_t t = p.load(std::memory_order_relaxed);
    if (t != 0 && pthread_equal(t, self)) return true;
  }
  return false;
}

unsigned Progress::turn_locked() {
  const std::thread::id previous = engine_thread_.load();
  engine_thread_.store(std::this_thread::get_id());
  // The slot is this engine's and the lock makes us its only writer: plain
  // stores, no read-modify-write on the path every CQ poll takes.
  std::atomic<pthread_t>* slot = poller_slot_ < kPollerSlots ? &g_poller[poller_slot_] : nullptr;
  if (slot != nullptr) slot->store(pthread_self(), std::memory_order_relaxed);
  const unsigned work = e_.poll_once();
  if (slot != nullptr) slot->store(0, std::memory_order_relaxed);
  engine_thread_.store(previous);
  return work;
}

int Progress::poll_if_free(uint64_t* clock) {
  std::unique_lock lock(poll_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return -1;
  const unsigned work = turn_locked();
  if (clock != nullptr) *clock = e_.now();  // under the lock: every poller writes it
  return static_cast<int>(work);
}

void Progress::turn_begins(uint64_t now) noexcept {
  assert(on_engine_thread());
  last_poll_ns_.store(now, std::memory_order_relaxed);
  if (wake_fd_ >= 0) seen_rung_ = rung_.load(std::memory_order_acquire);  // what is rung after this wakes us
  // The posts left for this turn (post_kick): their doorbells are rung
  // before they count, so those counted now are in the queue.  Stored
  // only when set: the line is the posters'.  A count that arrives after
  // the look costs one turn more, never a post.
  if (post_batch_.deferred.load(std::memory_order_relaxed) != 0) {
    post_batch_.deferred.store(0, std::memory_order_seq_cst);
  }
}

void Progress::turn_ended() noexcept {
  assert(on_engine_thread());
  if (wake_fd_ >= 0 && std::this_thread::get_id() != thread_.get_id()) wake_if_needed();
}

// ---- the modes ----------------------------------------------------------------------

void Progress::enter(Mode m, uint64_t idle_ns) noexcept {
  const Mode was = mode_.load(std::memory_order_relaxed);
  if (was == m) return;
  mode_.store(m, std::memory_order_relaxed);
  ctr_.inc(kModeCtr[static_cast<size_t>(m)]);
  UROCE_TRACE(TraceCat::Progress, "progress %s: %.*s -> %.*s (idle %llu us)", trace_name_.c_str(),
              static_cast<int>(mode_name(was).size()), mode_name(was).data(), static_cast<int>(mode_name(m).size()),
              mode_name(m).data(), static_cast<unsigned long long>(idle_ns / 1000));
}

void Progress::start(std::function<void()> on_start, std::function<void()> on_exit) {
  if (running_.exchange(true)) return;
  std::atomic<bool> started{false};
  const QuietThreads quiet;  // the program's signals are not the engine's
  thread_ = std::thread([this, &started, on_start = std::move(on_start), on_exit = std::move(on_exit)] {
    if (on_start) on_start();
    engine_thread_.store(std::this_thread::get_id());  // before start() returns
    started.store(true, std::memory_order_release);  // `started` is not touched after this
    engine_thread_main();
    if (on_exit) on_exit();
  });
  while (!started.load(std::memory_order_acquire)) std::this_thread::yield();
}

void Progress::engine_thread_main() {
  uint64_t idle_since = 0;       // 0: the last turn did work
  uint64_t clock = steady_ns();  // this thread's latest clock sample
  bool taken = false;  // an assist nap ended on a frame the application left to us
  while (running_.load(std::memory_order_relaxed)) {
    if (!post_batch_.on_call.load(std::memory_order_relaxed)) {
      post_batch_.on_call.store(true, std::memory_order_relaxed);
    }
    // Signed: an application thread may have stamped after our sample.
    if (const uint64_t assist = assist_ns_.load(std::memory_order_relaxed);
        signed_before(assist, clock, params::kAssistHoldNs)) {
      // An application thread drives the loop (try_progress from its poll
      // calls): stay off the core it needs, unless a frame comes that it
      // left to us.
      enter(Mode::Assist, 0);
      taken = assist_nap(assist);
      clock = steady_ns();
      if (!taken) continue;
    }
    unsigned work;
    {
      // Never blocks on the lock: an application thread that holds it is
      // running a turn, and had this thread slept on it, every unlock of
      // that thread would be a futex wake-up across CPUs (a system call and
      // an inter-processor interrupt).  Give way instead.  Except for a
      // frame the application left to us (assist_nap): it holds the loop
      // for one turn at most and then goes to spin on memory, and a yield
      // would hand it the core for the rest of its scheduler slice, with
      // the frame still waiting.
      std::unique_lock lock(poll_mutex_, std::defer_lock);
      if (taken) {
        lock.lock();
        taken = false;
      } else if (!lock.try_lock()) {
        enter(Mode::GiveWay, 0);
        ctr_.inc(ProgressCtr::loop_busy);
        sched_yield();
        clock = steady_ns();
        idle_since = 0;
        continue;
      }
      work = turn_locked();
      engine_thread_.store(std::this_thread::get_id());  // turn_locked restored the previous: ours
      clock = e_.now();  // read under the lock: callers' turns write it too
    }
    step(after_turn_mode(work, clock, idle_since), clock, idle_since);
  }
  // Posts left for a turn of this thread (post_kick) leave before it ends:
  // a program that posts and exits has its frames sent, as when each post
  // ran its own turn.  The same look as leave_call's.
  post_batch_.on_call.store(false, std::memory_order_seq_cst);
  if (post_batch_.deferred.load(std::memory_order_seq_cst) != 0) {
    std::lock_guard lock(poll_mutex_);
    e_.poll_once();
  }
  enter(Mode::Stopped, 0);
  engine_thread_.store(std::thread::id{});
}

Progress::Mode Progress::after_turn_mode(unsigned work, uint64_t clock, uint64_t& idle_since) noexcept {
  if (work != 0) {
    idle_since = 0;
    return Mode::Poll;
  }
  if (idle_since == 0) idle_since = clock;
  const uint64_t idle = clock - idle_since;
  const EngineConfig& cfg = e_.config();
  if (!cfg.idle_wait || epoll_fd_ < 0) {
    // Spin, then yield, then nap.  A yield only helps while whoever shares
    // the core yields back; one that spins on memory never does (Yield's
    // stall check), and on such a shared core the spin too is its loss.
    const bool shared = static_cast<int64_t>(core_shared_until_ - clock) > 0;
    if (idle < params::kIdleSpinNs && !shared) return Mode::Poll;
    if (idle >= params::kIdleYieldNs || shared) return Mode::Nap;
    return Mode::Yield;
  }
  // Polling for a spinning client: the core goes to whoever shares it at
  // once, not after a spin (on a small machine that is the client).
  const bool keep = idle_hooks_.keep_polling && idle_hooks_.keep_polling();
  if (keep != polling_) set_polling(keep);
  if (keep) return Mode::BusyPoll;
  // At a real-time priority it never spins: its yield passes only to its
  // own priority, and frames a few microseconds apart (a stream) would keep
  // the spin from ending, the thread on its CPU and every program off it.
  const uint64_t spin_ns = cfg.realtime_priority > 0 ? 0
                           : cfg.idle_spin_ns != 0  ? cfg.idle_spin_ns
                                                    : params::kIdleWaitSpinNs;
  if (idle < spin_ns) return Mode::Yield;
  // While an application thread drives the loop (it polls a CQ), the
  // engine thread stays out of its way: a nap, not a sleep the port's
  // producer would end on every frame (each such wake takes the loop's
  // lock, and a thread preempted holding it stalls the application's polls
  // for a scheduler slice).
  if (signed_before(assist_ns_.load(std::memory_order_relaxed), clock, params::kAssistActiveNs)) return Mode::Doze;
  return Mode::Sleep;
}

// The driver: one step of the mode the thread is in.
void Progress::step(Mode m, uint64_t clock, uint64_t& idle_since) noexcept {
  enter(m, idle_since == 0 ? 0 : clock - idle_since);
  switch (m) {
    case Mode::Poll:
      return;
    case Mode::Yield:
      step_yield(clock);
      return;
    case Mode::Nap:
      step_nap();
      return;
    case Mode::Doze: {
      constexpr timespec kNap{0, params::kAssistNapNs};
      nanosleep(&kNap, nullptr);
      return;
    }
    case Mode::Sleep:
      step_sleep(idle_since);
      return;
    case Mode::BusyPoll:
      ctr_.inc(ProgressCtr::busy_polls);
      sched_yield();  // a thread that shares the core (the spinning client's, on a small machine) runs now
      return;
    case Mode::Stopped:
    case Mode::Assist:
    case Mode::GiveWay:
    case Mode::Backstop:
      return;  // entered before a turn, not after one
  }
}

// A yield that came back after a scheduler slice marks the core shared for
// a while (without idle_wait), and meanwhile the thread naps instead: a
// sleeper that wakes, its nap over or a frame come, preempts the spinning
// thread, where a yielder waits the slice out.  The hold doubles while the
// yields that end it stall again (kCoreSharedHold*), so a core shared for
// good loses a slice ever more rarely, and one shared for a moment soon
// yields again.  Under idle_wait the yield is the spin before a sleep,
// which gives way to a thread that shares the core (a client's engine
// thread: its own application's), unchecked.
void Progress::step_yield(uint64_t clock) noexcept {
  sched_yield();
  if (e_.config().idle_wait && epoll_fd_ >= 0) return;
  const uint64_t after = steady_ns();
  if (after - clock < params::kYieldStallNs) return;
  // A stall within kCoreSharedHoldMaxNs of the last hold's end doubles the
  // hold: quick yields between two stalls say nothing (the spinning thread
  // was elsewhere for a moment).
  const bool again = core_shared_hold_ != 0 && after - core_shared_until_ < params::kCoreSharedHoldMaxNs;
  core_shared_hold_ = again ? std::min(2 * core_shared_hold_, params::kCoreSharedHoldMaxNs) : params::kCoreSharedHoldMinNs;
  core_shared_until_ = after + core_shared_hold_;
  ctr_.inc(ProgressCtr::yield_stalls);
}

// kIdleNapNs, off call, which a frame ends early where the port has a wait
// fd: the thread then takes it at once (a wake-up preempts the thread that
// shares the core).  Doorbells wait out the nap.
void Progress::step_nap() noexcept {
  if (!leave_call()) return;
  if (nap_on_port(params::kIdleNapNs)) ctr_.inc(ProgressCtr::nap_woken);
}

void Progress::set_polling(bool on) noexcept {
  polling_ = on;
  const int rt = e_.config().realtime_priority;
  if (rt <= 0) return;
  // Polling at a real-time priority would starve every normal thread on
  // this core (sched_yield passes only to threads of the same priority).
  sched_param sp{};
  sp.sched_priority = on ? 0 : rt;
  pthread_setschedparam(pthread_self(), on ? SCHED_OTHER : SCHED_FIFO, &sp);
}

void Progress::watch_fd(int fd) {
  if (epoll_fd_ < 0 || fd < 0) return;
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = fd;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e);
}

void Progress::unwatch_fd(int fd) {
  if (epoll_fd_ >= 0 && fd >= 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

void Progress::step_sleep(uint64_t& idle_since) noexcept {
  if (!leave_call()) return;
  idle_since = 0;  // woken (or not asleep at all): spin again before the next sleep
  uint64_t wait_ns = params::kIdleWaitMaxNs;
  drivers::Port& port = e_.port();
  {
    // The loop's state is read under its lock: an application thread may
    // be running a turn (try_progress).
    std::unique_lock lock(poll_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return;  // someone else drives the loop now
    sleeping_.store(true, std::memory_order_seq_cst);
    bool sleep = rung_.load(std::memory_order_seq_cst) == seen_rung_ && e_.nothing_queued();
    // Each party's "tell me" goes first, then its look (ports, the layer above).
    if (sleep) sleep = port.prepare_wait();
    if (sleep && idle_hooks_.prepare) sleep = idle_hooks_.prepare();
    if (!sleep) {
      port.end_wait();
      if (idle_hooks_.end) idle_hooks_.end();
      sleeping_.store(false, std::memory_order_relaxed);
      return;
    }
    const uint64_t now = steady_ns();
    const uint64_t next = e_.timers().next_deadline_hint();
    if (next != UINT64_MAX) wait_ns = next <= now ? 0 : std::min(next - now, wait_ns);
    sleep_until_.store(now + wait_ns, std::memory_order_seq_cst);
  }
  const timespec ts{static_cast<time_t>(wait_ns / 1'000'000'000), static_cast<long>(wait_ns % 1'000'000'000)};
  std::array<epoll_event, 16> evs;
  const int n = ::epoll_pwait2(epoll_fd_, evs.data(), static_cast<int>(evs.size()), &ts, nullptr);
  ctr_.inc(ProgressCtr::idle_sleeps);
  if (n > 0) ctr_.inc(ProgressCtr::idle_woken);
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.fd != wake_fd_) continue;
    uint64_t v;
    [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &v, sizeof v);
  }
  std::lock_guard lock(poll_mutex_);
  port.end_wait();
  if (idle_hooks_.end) idle_hooks_.end();
  sleeping_.store(false, std::memory_order_relaxed);
}

// A turn an application thread ran while the engine thread sleeps may have
// left frames held (ACKs) or armed a timer sooner than the sleep ends:
// wake the thread.
void Progress::wake_if_needed() noexcept {
  if (wake_fd_ < 0 || !sleeping_.load(std::memory_order_seq_cst)) return;
  if (e_.nothing_to_send() && e_.timers().next_deadline_hint() >= sleep_until_.load(std::memory_order_relaxed)) return;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t w = ::write(wake_fd_, &one, sizeof one);
}

void Progress::rung() noexcept {
  if (wake_fd_ < 0) return;
  rung_.fetch_add(1, std::memory_order_seq_cst);
  if (sleeping_.load(std::memory_order_seq_cst)) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t w = ::write(wake_fd_, &one, sizeof one);
  }
}

// Assist's step, the nap while an application thread drives the loop (its
// CQ polls run the turns).  An application that polled through the last
// nap polls on and takes what comes: a plain nap.  One that did not may
// have gone elsewhere, to spin on memory for the peer's WRITE after its
// send completion, and only this thread delivers that WRITE: a frame ends
// this nap (the port's wait fd), and unless the application polled
// meanwhile the thread takes it at once.
bool Progress::assist_nap(uint64_t assist_seen) noexcept {
  ctr_.inc(ProgressCtr::assist_naps);
  if (assist_polls_on_) {
    // It polled through the last nap, and will take what comes: a frame
    // that woke us would only cost it the wake-up.
    //
    // A client of uroced (idle_wait): a nap it spins through (a poll every
    // kAssistSpinPollNs at least) makes the next one twice as long: every
    // wake-up of ours takes a CPU from a spinning thread, and such a client
    // has two per end (params::kAssistNapMaxNs).  One that polls now and
    // then (after each completion event) keeps the short nap.  A longer
    // nap is off call, so that a post meanwhile runs its own turn (a write
    // to the shared ring) instead of leaving its doorbell to us for that
    // long; with a doorbell already left, the nap is the short one.
    // In-process the nap stays short: a post's own turn there is a
    // sendto, and its batching needs us on call.
    const uint64_t calls = assist_calls_.load(std::memory_order_relaxed);
    const bool long_nap = assist_nap_ns_ > params::kAssistNapNs && leave_call();
    const timespec nap{0, long_nap ? assist_nap_ns_ : params::kAssistNapNs};
    nanosleep(&nap, nullptr);
    assist_polls_on_ = assist_ns_.load(std::memory_order_relaxed) != assist_seen;
    const uint64_t polls = assist_calls_.load(std::memory_order_relaxed) - calls;
    const bool spun = polls * params::kAssistSpinPollNs >= static_cast<uint64_t>(nap.tv_nsec);
    assist_nap_ns_ = e_.config().idle_wait && spun ? std::min(nap.tv_nsec * 2, params::kAssistNapMaxNs)
                                                   : params::kAssistNapNs;
    return false;
  }
  assist_nap_ns_ = params::kAssistNapNs;
  const bool frame = nap_on_port(params::kAssistNapNs);
  assist_polls_on_ = assist_ns_.load(std::memory_order_relaxed) != assist_seen;
  if (!frame || assist_polls_on_) return false;
  ctr_.inc(ProgressCtr::assist_nap_frames);
  return true;
}

bool Progress::on_engine_thread() const noexcept {
  return engine_thread_.load() == std::this_thread::get_id() || e_.exclusive_here();
}

bool Progress::nap_on_port(long ns) noexcept {
  const timespec nap{0, ns};
  drivers::Port& port = e_.port();
  if (port.nap_prepares()) {  // a lane of an engine on several lcores (lcores.hpp)
    if (!port.prepare_wait()) {
      port.end_wait();
      return true;  // a frame is there already
    }
    pollfd pfd{port.wait_fd(), POLLIN, 0};
    const int r = ::ppoll(&pfd, 1, &nap, nullptr);
    port.end_wait();
    return r > 0;
  }
  if (const int fd = port.wait_fd(); fd >= 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (::ppoll(&pfd, 1, &nap, nullptr) <= 0) return false;
    if (pfd.revents & POLLIN) return true;
    // An error on the socket (its link went away) would end every nap at
    // once: nap without it.
  }
  nanosleep(&nap, nullptr);
  return false;
}

// ---- inline progress's backstop ----------------------------------------------------------

void Progress::start_backstop(uint64_t period_ns, std::function<void()> on_start, std::function<void()> on_exit) {
  if (running_.load() || backstop_running_.exchange(true)) return;
  const QuietThreads quiet;
  backstop_ = std::thread([this, period_ns, on_start = std::move(on_start), on_exit = std::move(on_exit)] {
    if (on_start) on_start();
    backstop_main(period_ns);
    if (on_exit) on_exit();
  });
}

void Progress::backstop_main(uint64_t period_ns) {
  uint64_t idle_since = 0;  // while a Sleeper waits: 0 after a turn that did work
  while (backstop_running_.load(std::memory_order_relaxed)) {
    if (sleepers_.load(std::memory_order_acquire) != 0) {
      // A thread sleeps on an event: be its engine thread.
      uint64_t clock = 0;
      const int work = poll_if_free(&clock);
      if (work < 0) {  // another thread is polling: stay close
        enter(Mode::GiveWay, 0);
        idle_since = 0;
        std::this_thread::yield();
        continue;
      }
      step(after_turn_mode(static_cast<unsigned>(work), clock, idle_since), clock, idle_since);
      continue;
    }
    enter(Mode::Backstop, 0);
    idle_since = 0;
    {
      std::unique_lock lock(backstop_mu_);
      backstop_cv_.wait_for(lock, std::chrono::nanoseconds(period_ns), [this] {
        return sleepers_.load(std::memory_order_relaxed) != 0 || !backstop_running_.load(std::memory_order_relaxed);
      });
    }
    const uint64_t since = steady_ns() - last_poll_ns_.load(std::memory_order_relaxed);
    if (static_cast<int64_t>(since) >= static_cast<int64_t>(period_ns)) poll_if_free();
  }
  enter(Mode::Stopped, 0);
}

Progress::Sleeper::Sleeper(Progress& p) noexcept : p_(p) {
  if (p_.sleepers_.fetch_add(1, std::memory_order_acq_rel) == 0) {
    std::lock_guard lock(p_.backstop_mu_);  // not lost between the backstop's check and its wait
    p_.backstop_cv_.notify_all();
  }
}

Progress::Sleeper::~Sleeper() { p_.sleepers_.fetch_sub(1, std::memory_order_acq_rel); }

void Progress::stop() {
  if (backstop_running_.exchange(false)) {
    {
      std::lock_guard lock(backstop_mu_);
      backstop_cv_.notify_all();
    }
    if (backstop_.joinable()) backstop_.join();
  }
  if (!running_.exchange(false)) return;
  if (thread_.joinable()) thread_.join();
}

// ---- application threads --------------------------------------------------------------

bool Progress::try_progress(Assist how) {
  // With an engine thread, a caller that will keep coming assists: the
  // thread backs off while such callers keep coming (Assist).
  const bool assist = how == Assist::Hold && running_.load(std::memory_order_relaxed);
  uint64_t clock = 0;
  if (poll_if_free(&clock) < 0) {
    if (assist) note_assist(steady_ns());
    return false;
  }
  if (assist) note_assist(clock);  // the turn's own clock sample
  return true;
}

void Progress::note_assist(uint64_t clock) noexcept {
  assist_ns_.store(clock, std::memory_order_relaxed);
  // Counted only where assist_nap reads it (a client of uroced); a plain
  // load and store: no locked instruction on every CQ poll.
  if (e_.config().idle_wait) {
    assist_calls_.store(assist_calls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
}

void Progress::post_kick() noexcept {
  if (running_.load(std::memory_order_relaxed)) {
    const uint64_t now = steady_ns();
    // The count goes first, the look after: an engine thread leaving the
    // call between the two sees the count (leave_call) and stays.
    if (now - post_batch_.end_ns.load(std::memory_order_relaxed) < e_.config().post_batch_gap_ns &&
        post_batch_.deferred.fetch_add(1, std::memory_order_seq_cst) + 1 < params::kPostBatchMax &&
        post_batch_.on_call.load(std::memory_order_seq_cst)) {
      post_batch_.end_ns.store(now, std::memory_order_relaxed);
      return;
    }
  }
  try_progress(Assist::Once);
  // From the end of the call: a turn's tx_burst takes longer than the gap.
  post_batch_.end_ns.store(steady_ns(), std::memory_order_relaxed);
}

bool Progress::leave_call() noexcept {
  post_batch_.on_call.store(false, std::memory_order_seq_cst);
  if (post_batch_.deferred.load(std::memory_order_seq_cst) == 0) {
    ctr_.inc(ProgressCtr::off_call);
    return true;
  }
  post_batch_.on_call.store(true, std::memory_order_relaxed);
  return false;
}

// With several lcores (lcores.hpp) every control function runs on lcore
// 0's loop with the device exclusive (the other lcores parked), whichever
// lcore's engine it was asked of.
void Progress::run_sync(const std::function<void()>& fn) {
  Lcores* group = e_.lcores();
  if (group != nullptr && e_.lcore() != 0) {
    group->engine(0).progress().run_sync(fn);
    return;
  }
  if (on_engine_thread()) {
    const Lcores::Exclusive only_us(group);
    fn();
    return;
  }
  struct Call {
    const std::function<void()>* fn;
    Lcores* group;
    std::atomic<bool> done{false};
  } call{&fn, group};
  const Engine::Doorbell d{[](Engine&, void* ctx) {
                             auto* c = static_cast<Call*>(ctx);
                             {
                               const Lcores::Exclusive only_us(c->group);
                               (*c->fn)();
                             }
                             c->done.store(true, std::memory_order_release);  // pairs with the acquire below
                           },
                           &call};
  while (!e_.ring(d)) std::this_thread::yield();
  while (!call.done.load(std::memory_order_acquire)) {
    if (!try_progress()) std::this_thread::yield();
  }
}

}  // namespace uroce::transport
