#include "transport/engine.hpp"

#include <pthread.h>
#include <poll.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <rte_mbuf.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <chrono>
#include <cstring>
#include <ctime>

#include "lib/util/quiet_threads.hpp"
#include "lib/util/stamps.hpp"
#include "lib/util/steady_ns.hpp"
#include "lib/wire/eth.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"
#include "transport/params.hpp"

namespace uroce::transport {
namespace {

bool is_group(const wire::MacAddr& m) noexcept { return (m[0] & 0x01) != 0; }

}  // namespace

// Engine::polling_here: which thread runs a turn of which engine, in a
// fixed table a signal handler can scan (no thread-local: a library
// loaded by dlopen, as UCX loads libibverbs, gets its thread-locals
// allocated lazily, by malloc, on a thread's first touch, and an
// initial-exec one made that dlopen fail).  An engine takes a slot for
// its life; engines beyond kPollerSlots have none (their pollers are not
// seen: the termination handler then holds such a thread, at most 1 s).
namespace {
constexpr size_t kPollerSlots = 64;
std::array<std::atomic<bool>, kPollerSlots> g_poller_taken{};
std::array<std::atomic<pthread_t>, kPollerSlots> g_poller{};  // 0: no turn running
}  // namespace

Engine::Engine(drivers::Port& port, EngineConfig cfg)
    : port_(port),
      cfg_(std::move(cfg)),
      now_ns_(steady_ns()),
      wheel_(now_ns_),
      neigh_(wheel_, cfg_.neigh,
             NeighTable::Hooks{
                 [this](const IpAddr& ip) { send_neigh_request(ip); },
                 [this](rte_mbuf* m, const wire::MacAddr& mac) { send_to_mac(m, mac); },
                 [this](rte_mbuf* m) {
                   ctr_.inc(EngineCtr::drop_neigh);
                   rte_pktmbuf_free(m);
                 },
                 [this](const IpAddr& ip, bool ok) {
                   ctr_.inc(ok ? EngineCtr::neigh_resolved : EngineCtr::neigh_failed);
                   if (resolve_hook_) resolve_hook_(ip, ok);
                 },
             }),
      doorbells_(cfg_.doorbell_capacity) {
  for (size_t i = 0; i < kPollerSlots; ++i) {
    bool free = false;
    if (g_poller_taken[i].compare_exchange_strong(free, true)) {
      poller_slot_ = i;
      break;
    }
  }
  tx_.reserve(2 * size_t{cfg_.tx_batch});  // tx_batch kept from a refused flush, then a batch
  loop_.reserve(params::kLoopbackFrames);
  loop_rx_.reserve(params::kLoopbackFrames);
  roce_.resize(cfg_.rx_burst);
}

Engine::~Engine() {
  stop();
  if (poller_slot_ < kPollerSlots) g_poller_taken[poller_slot_].store(false);
  for (int fd : {epoll_fd_, wake_fd_})
    if (fd >= 0) ::close(fd);
  engine_thread_.store(std::this_thread::get_id());  // the loop has stopped: it is ours now
  flush_tx();
  for (rte_mbuf* m : tx_) rte_pktmbuf_free(m);  // the port took no more
  tx_.clear();
  for (rte_mbuf* m : loop_) rte_pktmbuf_free(m);
  loop_.clear();
  capture_.close();
}

drivers::Status Engine::init() {
  if (cfg_.idle_wait && epoll_fd_ < 0) {
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epoll_fd_ < 0 || wake_fd_ < 0) return drivers::Error{errno, "engine: epoll/eventfd for idle_wait"};
    watch_fd(wake_fd_);
    if (port_.wait_fd() >= 0) watch_fd(port_.wait_fd());
  }
  if (!cfg_.pcap_path.empty()) {
    if (auto st = capture_.open(cfg_.pcap_path); !st) return st;
  }
  if (cfg_.announce) {
    std::lock_guard lock(poll_mutex_);
    const std::thread::id previous = engine_thread_.load();
    engine_thread_.store(std::this_thread::get_id());
    announce();
    flush_tx();
    engine_thread_.store(previous);
  }
  return {};
}

uint64_t Engine::realtime_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

bool Engine::on_engine_thread() const noexcept { return engine_thread_.load() == std::this_thread::get_id(); }

// ---- progress ---------------------------------------------------------------

unsigned Engine::poll() {
  const std::thread::id previous = engine_thread_.load();
  engine_thread_.store(std::this_thread::get_id());
  const unsigned work = poll_once();
  engine_thread_.store(previous);
  return work;
}

unsigned Engine::poll_once() {
  now_ns_ = steady_ns();
  last_poll_ns_.store(now_ns_, std::memory_order_relaxed);
  // Application requests first (posts, run_sync calls such as rdma_listen),
  // then the wire and the timers: a request made before this iteration is
  // in effect before anything this iteration receives is handled.
  unsigned work = drain_doorbells();
  if (turn_hook_) work += turn_hook_();
  std::array<rte_mbuf*, 256> pkts;
  const uint16_t burst = cfg_.rx_burst < pkts.size() ? cfg_.rx_burst : static_cast<uint16_t>(pkts.size());
  const uint16_t n = port_.rx_burst(pkts.data(), burst);
  if (n) {
    UROCE_STAMP(Received);
    handle_rx(pkts.data(), n);
    work += n;
  }
  work += drain_loopback();
  work += wheel_.advance(now_ns_);
  if (!kernel_learned_.empty()) {  // rare: isolated ports (EngineConfig::kernel_neigh)
    for (const auto& [ip, mac] : kernel_learned_) neigh_.learn(ip, mac, true, now_ns_);
    work += static_cast<unsigned>(kernel_learned_.size());
    kernel_learned_.clear();
  }
  end_turn_tx();
  // Frames wait for room in the port, or held ACKs for their hold's end
  // (kAckHoldNs): not idle, no nap (an engine thread on a shared core naps
  // as soon as it is idle, and a nap would hold the ACKs to its end).
  if (tx_stalled_ || !tx_.empty()) ++work;
  if (capture_.is_open()) capture_.maybe_flush(realtime_ns());
  if (wake_fd_ >= 0 && std::this_thread::get_id() != thread_.get_id()) wake_if_needed();
  return work;
}

void Engine::end_turn_tx() noexcept {
  if (tx_.empty()) return;
  if (cfg_.ack_hold_ns != 0 && tx_only_acks()) {
    if (ack_hold_since_ == 0) ack_hold_since_ = now_ns_;
    if (now_ns_ - ack_hold_since_ < cfg_.ack_hold_ns) return;
  }
  flush_tx();
}

// Held ACKs (end_turn_tx) that requests have joined leave behind them.
// An ACK acknowledges the peer's request stream, a request belongs to ours:
// two PSN spaces with no order between them (IBA 9.7.1), and the peer's
// requester ignores where its ACKs fall among our requests.  Where the
// peer's application waits for its own completion before it reads memory
// our request wrote (ib_write_lat, RDMA-write protocols), the request then
// arrives while that application still polls its CQ: the poll that
// completes its WQE has already placed our data, so no engine thread of
// the peer has to run for it.  Responses (READ responses, atomic ACKs)
// never move: they share the peer's request stream with the ACKs.
// Nor does anything move past them when a request would complete a receive
// at the peer (a SEND, a WRITE with immediate): the peer's send completion
// must come before the receive completion of what we posted after it, as
// on every RNIC, which acknowledges a request before its application can
// answer.  Programs count on that order: perftest 4.5 waits on one
// completion channel for its send CQ's event, then its receive CQ's (one
// event each) and polled the send CQ empty when the receive's came first
// (ib_send_lat -e: an error status read from an unwritten wc, or a hang).
bool Engine::requests_before_held_acks() noexcept {
  if (tx_acks_ == 0 || tx_acks_ >= tx_.size() || tx_captured_ != 0) return false;
  for (size_t i = tx_acks_; i < tx_.size(); ++i) {
    const rte_mbuf* m = tx_[i];
    const wire::PktInfo pi = wire::parse({rte_pktmbuf_mtod(m, const uint8_t*), m->data_len});
    if (pi.cls != wire::FrameClass::RoceV2) return false;
    const wire::OpcodeInfo& op = wire::opcode_info(pi.opcode);
    if (!op.request || op.consumes_rwqe) return false;
  }
  std::rotate(tx_.begin(), tx_.begin() + static_cast<std::ptrdiff_t>(tx_acks_), tx_.end());
  ctr_.add(EngineCtr::tx_acks_behind, tx_acks_);
  return true;
}

bool Engine::tx_only_acks() noexcept {
  for (; tx_acks_ < tx_.size(); ++tx_acks_) {
    const rte_mbuf* m = tx_[tx_acks_];
    const wire::PktInfo pi = wire::parse({rte_pktmbuf_mtod(m, const uint8_t*), m->data_len});
    if (pi.cls != wire::FrameClass::RoceV2 || pi.opcode != wire::op::RC_ACK) return false;
  }
  return true;
}

void Engine::start(std::function<void()> on_start, std::function<void()> on_exit) {
  if (running_.exchange(true)) return;
  std::atomic<bool> started{false};
  const QuietThreads quiet;  // the program's signals are not the engine's
  thread_ = std::thread([this, &started, on_start = std::move(on_start), on_exit = std::move(on_exit)] {
    if (on_start) on_start();
    engine_thread_.store(std::this_thread::get_id());  // before start() returns
    started.store(true, std::memory_order_release);  // `started` is not touched after this
    uint64_t idle_since = 0;    // 0: the last iteration did work
    uint64_t clock = steady_ns();  // this thread's latest clock sample
    bool taken = false;  // an assist nap ended on a frame the application left to us
    while (running_.load(std::memory_order_relaxed)) {
      if (!post_batch_.on_call.load(std::memory_order_relaxed)) {
        post_batch_.on_call.store(true, std::memory_order_relaxed);
      }
      // Signed: an application thread may have stamped after our sample.
      if (const uint64_t assist = assist_ns_.load(std::memory_order_relaxed);
          static_cast<int64_t>(clock - assist) < static_cast<int64_t>(params::kAssistHoldNs)) {
        // An application thread is driving the loop (try_progress from its
        // poll calls): stay off the core it needs, unless a frame comes
        // that it left to us (assist_nap).
        taken = assist_nap(assist);
        clock = steady_ns();
        if (!taken) continue;
      }
      unsigned work;
      {
        // Never blocks on the lock: an application thread that holds it is
        // running a turn (try_progress), and had this thread slept on it,
        // every unlock of that thread would be a futex wake-up across CPUs
        // (a system call and an inter-processor interrupt; measured: 27,000
        // futex calls in 100,000 ib_send_bw messages).  Give way instead.
        // Except for a frame the application left to us (assist_nap): it
        // holds the loop for one turn at most and then goes to spin on
        // memory, and a yield would hand it the core for the rest of its
        // scheduler slice, milliseconds, with the frame still waiting.
        std::unique_lock lock(poll_mutex_, std::defer_lock);
        if (taken) {
          lock.lock();
          taken = false;
        } else if (!lock.try_lock()) {
          ctr_.inc(EngineCtr::loop_busy);
          sched_yield();
          clock = steady_ns();
          idle_since = 0;
          continue;
        }
        engine_thread_.store(std::this_thread::get_id());
        work = poll_once();
        clock = now_ns_;  // read under the lock: callers' polls write it too
      }
      after_turn(work, clock, idle_since);
    }
    // Posts left for a turn of this thread (post_kick) leave before it
    // ends: a program that posts and exits has its frames sent, as when
    // each post ran its own turn.  The same look as leave_call's.
    post_batch_.on_call.store(false, std::memory_order_seq_cst);
    if (post_batch_.deferred.load(std::memory_order_seq_cst) != 0) {
      std::lock_guard lock(poll_mutex_);
      poll_once();
    }
    engine_thread_.store(std::thread::id{});
    if (on_exit) on_exit();
  });
  while (!started.load(std::memory_order_acquire)) std::this_thread::yield();
}

void Engine::after_turn(unsigned work, uint64_t clock, uint64_t& idle_since) noexcept {
  if (work != 0) {
    idle_since = 0;
    return;
  }
  if (idle_since == 0) idle_since = clock;
  if (!cfg_.idle_wait || epoll_fd_ < 0) {
    idle_backoff(clock, clock - idle_since);
    return;
  }
  // Polling for a spinning client: the core goes to whoever shares it at
  // once, not after a spin (on a small machine that is the client).
  if (busy_poll()) return;
  // At a real-time priority it never spins: its yield passes only to its
  // own priority, and frames a few microseconds apart (a stream) would
  // keep the spin from ending, the thread on its CPU and every program off
  // it.  It sleeps at once; a frame or a kick wakes it at once.
  const uint64_t spin_ns = cfg_.realtime_priority > 0 ? 0
                           : cfg_.idle_spin_ns != 0  ? cfg_.idle_spin_ns
                                                     : params::kIdleWaitSpinNs;
  if (clock - idle_since >= spin_ns) {
    // While an application thread drives the loop (it polls a CQ), the
    // engine thread stays out of its way: a nap, not a sleep the port's
    // producer would end on every frame (each such wake takes the loop's
    // lock, and a thread preempted holding it stalls the application's
    // polls for a scheduler slice).
    if (static_cast<int64_t>(clock - assist_ns_.load(std::memory_order_relaxed)) <
        static_cast<int64_t>(params::kAssistActiveNs)) {
      constexpr timespec kNap{0, params::kAssistNapNs};
      nanosleep(&kNap, nullptr);
      return;
    }
    if (!leave_call()) return;
    wait_idle();
    idle_since = 0;  // woken: spin again before the next sleep
    return;
  }
  // The spin before a sleep gives way to a thread that shares the core
  // (a client's engine thread: its own application's).
  sched_yield();
}

bool Engine::busy_poll() noexcept {
  const bool keep = idle_hooks_.keep_polling && idle_hooks_.keep_polling();
  if (keep != polling_) set_polling(keep);
  if (!keep) return false;
  ctr_.inc(EngineCtr::busy_polls);
  sched_yield();  // a thread that shares the core (the spinning client's, on a small machine) runs now
  return true;
}

void Engine::set_polling(bool on) noexcept {
  polling_ = on;
  if (cfg_.realtime_priority <= 0) return;
  // Polling at a real-time priority would starve every normal thread on
  // this core (sched_yield passes only to threads of the same priority).
  sched_param sp{};
  sp.sched_priority = on ? 0 : cfg_.realtime_priority;
  pthread_setschedparam(pthread_self(), on ? SCHED_OTHER : SCHED_FIFO, &sp);
}

void Engine::watch_fd(int fd) {
  if (epoll_fd_ < 0 || fd < 0) return;
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = fd;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e);
}

void Engine::unwatch_fd(int fd) {
  if (epoll_fd_ >= 0 && fd >= 0) ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
}

void Engine::wait_idle() noexcept {
  uint64_t wait_ns = params::kIdleWaitMaxNs;
  {
    // The loop's state is read under its lock: an application thread may
    // be running a turn (try_progress).
    std::unique_lock lock(poll_mutex_, std::try_to_lock);
    if (!lock.owns_lock()) return;  // someone else drives the loop now
    sleeping_.store(true, std::memory_order_seq_cst);
    bool sleep = rung_.load(std::memory_order_seq_cst) == seen_rung_ && loop_.empty() && tx_.empty();
    // Each party's "tell me" goes first, then its look (ports, the layer above).
    if (sleep) sleep = port_.prepare_wait();
    if (sleep && idle_hooks_.prepare) sleep = idle_hooks_.prepare();
    if (!sleep) {
      port_.end_wait();
      if (idle_hooks_.end) idle_hooks_.end();
      sleeping_.store(false, std::memory_order_relaxed);
      return;
    }
    const uint64_t now = steady_ns();
    const uint64_t next = wheel_.next_deadline_hint();
    if (next != UINT64_MAX) wait_ns = next <= now ? 0 : std::min(next - now, wait_ns);
    sleep_until_.store(now + wait_ns, std::memory_order_seq_cst);
  }
  const timespec ts{static_cast<time_t>(wait_ns / 1'000'000'000), static_cast<long>(wait_ns % 1'000'000'000)};
  std::array<epoll_event, 16> evs;
  const int n = ::epoll_pwait2(epoll_fd_, evs.data(), static_cast<int>(evs.size()), &ts, nullptr);
  ctr_.inc(EngineCtr::idle_sleeps);
  if (n > 0) ctr_.inc(EngineCtr::idle_woken);
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.fd != wake_fd_) continue;
    uint64_t v;
    [[maybe_unused]] const ssize_t r = ::read(wake_fd_, &v, sizeof v);
  }
  std::lock_guard lock(poll_mutex_);
  port_.end_wait();
  if (idle_hooks_.end) idle_hooks_.end();
  sleeping_.store(false, std::memory_order_relaxed);
}

// A turn an application thread ran while the engine thread sleeps may
// have left frames held (ACKs) or armed a timer sooner than the sleep
// ends: wake the thread.
void Engine::wake_if_needed() noexcept {
  if (wake_fd_ < 0 || !sleeping_.load(std::memory_order_seq_cst)) return;
  if (tx_.empty() && wheel_.next_deadline_hint() >= sleep_until_.load(std::memory_order_relaxed)) return;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t w = ::write(wake_fd_, &one, sizeof one);
}

// An idle engine thread gives its core away by degrees (params.hpp):
// spin, then yield, then nap.  A yield only helps while whoever shares the
// core yields back (an application polling a CQ drives the loop itself
// and leaves it at once).  One that spins on memory never does (ib_write_lat
// waits for the peer's WRITE that way): after a yield it keeps the core
// for its whole scheduler slice, milliseconds, and only this thread can
// deliver the data it waits for.  So a yield that came back after a slice
// marks the core shared for a while, and meanwhile the thread naps
// instead (idle_nap): a sleeper that wakes, its nap over or a frame come,
// preempts the spinning thread, where a yielder waits the slice out.  The
// hold doubles while the yields that end it stall again (kCoreSharedHold*),
// so a core shared for good loses a slice ever more rarely, and one shared
// for a moment soon yields again.
void Engine::idle_backoff(uint64_t clock, uint64_t idle_ns) noexcept {
  const bool shared = static_cast<int64_t>(core_shared_until_ - clock) > 0;
  // On a shared core the spin too is the spinner's loss: it waits out our
  // spin (20 us a message, ib_write_lat -c UC) where a nap hands it the core
  // at once and a frame still ends the nap.
  if (idle_ns < params::kIdleSpinNs && !shared) return;
  if (idle_ns >= params::kIdleYieldNs || shared) {
    if (leave_call()) idle_nap();
    return;
  }
  sched_yield();
  const uint64_t after = steady_ns();
  if (after - clock < params::kYieldStallNs) return;
  // A stall within kCoreSharedHoldMaxNs of the last hold's end doubles the
  // hold: quick yields between two stalls say nothing (the spinning
  // thread was elsewhere for a moment).
  const bool again = core_shared_hold_ != 0 && after - core_shared_until_ < params::kCoreSharedHoldMaxNs;
  core_shared_hold_ = again ? std::min(2 * core_shared_hold_, params::kCoreSharedHoldMaxNs) : params::kCoreSharedHoldMinNs;
  core_shared_until_ = after + core_shared_hold_;
  ctr_.inc(EngineCtr::yield_stalls);
}

// kIdleNapNs, which a frame ends early where the port has a wait fd: the
// thread then takes it at once (a wake-up preempts the thread that
// shares the core).  Doorbells wait out the nap.
void Engine::idle_nap() noexcept {
  if (nap_on_port(params::kIdleNapNs)) ctr_.inc(EngineCtr::nap_woken);
}

// The nap while an application thread drives the loop (its CQ polls run
// the turns).  An application that polled through the last nap polls on
// and takes what comes: a plain nap.  One that did not may have gone
// elsewhere, to spin on memory for the peer's WRITE after its send
// completion (ib_write_lat -c UC, qperf's rc_rdma_write_poll_lat), and
// only this thread delivers that WRITE: a frame ends this nap (the
// port's wait fd), and unless the application polled meanwhile the
// thread takes it at once.  A nanosleep here held such a frame for the
// rest of the nap, which the kernel's 50 us timer slack stretched to
// ~70 us: that was ib_write_lat -c UC's typical latency.
bool Engine::assist_nap(uint64_t assist_seen) noexcept {
  ctr_.inc(EngineCtr::assist_naps);
  if (assist_polls_on_) {
    // It polled through the last nap, and will take what comes: a frame
    // that woke us would only cost it the wake-up (on a core it shares
    // with us, its poll waits out our turn; ib_write_lat RC 64 B typical
    // ~6 -> ~12 us when every assist nap ended on a frame).
    //
    // A client of uroced (idle_wait): a nap it spins through (a poll every
    // kAssistSpinPollNs at least) makes the next one twice as long: every
    // wake-up of ours takes a CPU from a spinning thread, and such a
    // client has two per end (params::kAssistNapMaxNs).  One that polls
    // now and then (after each completion event) keeps the short nap,
    // which ends soon after it goes back to wait for the next event.  A
    // longer nap is off call, so that a post meanwhile runs its own turn
    // (a write to the shared ring, no system call) instead of leaving its
    // doorbell to us for that long; with a doorbell already left, the nap
    // is the short one.  In-process the nap stays short: a post's own
    // turn there is a sendto, and its batching needs us on call.
    const uint64_t calls = assist_calls_.load(std::memory_order_relaxed);
    const bool long_nap = assist_nap_ns_ > params::kAssistNapNs && leave_call();
    const timespec nap{0, long_nap ? assist_nap_ns_ : params::kAssistNapNs};
    nanosleep(&nap, nullptr);
    assist_polls_on_ = assist_ns_.load(std::memory_order_relaxed) != assist_seen;
    const uint64_t polls = assist_calls_.load(std::memory_order_relaxed) - calls;
    const bool spun = polls * params::kAssistSpinPollNs >= static_cast<uint64_t>(nap.tv_nsec);
    assist_nap_ns_ = cfg_.idle_wait && spun ? std::min(nap.tv_nsec * 2, params::kAssistNapMaxNs)
                                            : params::kAssistNapNs;
    return false;
  }
  assist_nap_ns_ = params::kAssistNapNs;
  const bool frame = nap_on_port(params::kAssistNapNs);
  assist_polls_on_ = assist_ns_.load(std::memory_order_relaxed) != assist_seen;
  if (!frame || assist_polls_on_) return false;
  ctr_.inc(EngineCtr::assist_nap_frames);
  return true;
}

bool Engine::nap_on_port(long ns) noexcept {
  const timespec nap{0, ns};
  if (const int fd = port_.wait_fd(); fd >= 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (::ppoll(&pfd, 1, &nap, nullptr) <= 0) return false;
    if (pfd.revents & POLLIN) return true;
    // An error on the socket (its link went away) would end every nap at
    // once: nap without it.
  }
  nanosleep(&nap, nullptr);
  return false;
}

void Engine::start_backstop(uint64_t period_ns, std::function<void()> on_start, std::function<void()> on_exit) {
  if (running_.load() || backstop_running_.exchange(true)) return;
  const QuietThreads quiet;
  backstop_ = std::thread([this, period_ns, on_start = std::move(on_start), on_exit = std::move(on_exit)] {
    if (on_start) on_start();
    uint64_t idle_since = 0;  // while a Sleeper waits: 0 after an iteration that did work
    while (backstop_running_.load(std::memory_order_relaxed)) {
      if (sleepers_.load(std::memory_order_acquire) != 0) {
        // A thread sleeps on an event: be its engine thread.
        uint64_t clock = 0;
        const int work = poll_if_free(&clock);
        if (work < 0) {  // another thread is polling: stay close
          idle_since = 0;
          std::this_thread::yield();
          continue;
        }
        after_turn(static_cast<unsigned>(work), clock, idle_since);
        continue;
      }
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
    if (on_exit) on_exit();
  });
}

Engine::Sleeper::Sleeper(Engine& e) noexcept : e_(e) {
  if (e_.sleepers_.fetch_add(1, std::memory_order_acq_rel) == 0) {
    std::lock_guard lock(e_.backstop_mu_);  // not lost between the backstop's check and its wait
    e_.backstop_cv_.notify_all();
  }
}

Engine::Sleeper::~Sleeper() { e_.sleepers_.fetch_sub(1, std::memory_order_acq_rel); }

void Engine::stop() {
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

bool Engine::polling_here() noexcept {
  const pthread_t self = pthread_self();
  for (const auto& p : g_poller) {
    const pthread_t t = p.load(std::memory_order_relaxed);
    if (t != 0 && pthread_equal(t, self)) return true;
  }
  return false;
}

int Engine::poll_if_free(uint64_t* clock) {
  std::unique_lock lock(poll_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return -1;
  const std::thread::id previous = engine_thread_.load();
  engine_thread_.store(std::this_thread::get_id());
  // The slot is this engine's and the lock makes us its only writer: plain
  // stores, no read-modify-write on the path every CQ poll takes.
  std::atomic<pthread_t>* slot = poller_slot_ < kPollerSlots ? &g_poller[poller_slot_] : nullptr;
  if (slot != nullptr) slot->store(pthread_self(), std::memory_order_relaxed);
  const unsigned work = poll_once();
  if (slot != nullptr) slot->store(0, std::memory_order_relaxed);
  engine_thread_.store(previous);
  if (clock != nullptr) *clock = now_ns_;  // under the lock: every poller writes it
  return static_cast<int>(work);
}

bool Engine::try_progress(Assist how) {
  // With an engine thread, a caller that will keep coming assists: the
  // thread backs off while such callers keep coming (lowest latency on few
  // cores, DESIGN.md "Progress").
  const bool assist = how == Assist::Hold && running_.load(std::memory_order_relaxed);
  uint64_t clock = 0;
  if (poll_if_free(&clock) < 0) {
    if (assist) note_assist(steady_ns());
    return false;
  }
  if (assist) note_assist(clock);  // the poll's own clock sample
  return true;
}

void Engine::note_assist(uint64_t clock) noexcept {
  assist_ns_.store(clock, std::memory_order_relaxed);
  // Counted only where assist_nap reads it (a client of uroced); a plain
  // load and store: no locked instruction on every CQ poll.
  if (cfg_.idle_wait) {
    assist_calls_.store(assist_calls_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
}

void Engine::post_kick() noexcept {
  if (running_.load(std::memory_order_relaxed)) {
    const uint64_t now = steady_ns();
    // The count goes first, the look after: an engine thread leaving the
    // call between the two sees the count (leave_call) and stays.
    if (now - post_batch_.end_ns.load(std::memory_order_relaxed) < cfg_.post_batch_gap_ns &&
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

bool Engine::leave_call() noexcept {
  post_batch_.on_call.store(false, std::memory_order_seq_cst);
  if (post_batch_.deferred.load(std::memory_order_seq_cst) == 0) {
    ctr_.inc(EngineCtr::off_call);
    return true;
  }
  post_batch_.on_call.store(true, std::memory_order_relaxed);
  return false;
}

bool Engine::ring(Doorbell d) noexcept {
  if (!doorbells_.bounded_push(d)) return false;
  if (wake_fd_ >= 0) {
    rung_.fetch_add(1, std::memory_order_seq_cst);
    if (sleeping_.load(std::memory_order_seq_cst)) {
      const uint64_t one = 1;
      [[maybe_unused]] const ssize_t w = ::write(wake_fd_, &one, sizeof one);
    }
  }
  return true;
}

unsigned Engine::drain_doorbells() {
  if (wake_fd_ >= 0) seen_rung_ = rung_.load(std::memory_order_acquire);  // what is rung after this wakes us
  // The posts left for this turn (post_kick): their doorbells are rung
  // before they count, so those counted now are in the queue below.
  // Stored only when set: the line is the posters'.  A count that arrives
  // after the look costs one turn more, never a post.
  if (post_batch_.deferred.load(std::memory_order_relaxed) != 0) {
    post_batch_.deferred.store(0, std::memory_order_seq_cst);
  }
  unsigned n = 0;
  Doorbell d;
  // Bounded: callbacks that ring again run on the next iteration.
  for (uint32_t i = 0; i < cfg_.doorbell_capacity && doorbells_.pop(d); ++i) {
    ++n;
    d.fn(*this, d.ctx);
  }
  if (n) ctr_.add(EngineCtr::doorbells, n);
  return n;
}

void Engine::run_sync(const std::function<void()>& fn) {
  if (on_engine_thread()) {
    fn();
    return;
  }
  struct Call {
    const std::function<void()>* fn;
    std::atomic<bool> done{false};
  } call{&fn};
  const Doorbell d{[](Engine&, void* ctx) {
                     auto* c = static_cast<Call*>(ctx);
                     (*c->fn)();
                     c->done.store(true, std::memory_order_release);  // pairs with the acquire below
                   },
                   &call};
  while (!ring(d)) std::this_thread::yield();
  while (!call.done.load(std::memory_order_acquire)) {
    if (!try_progress()) std::this_thread::yield();
  }
}

// ---- receive ------------------------------------------------------------------

bool Engine::accept_mac(const uint8_t* frame) const noexcept {
  const wire::MacAddr dst = wire::EthC(frame).dst();
  return dst == cfg_.local.mac || is_group(dst);
}

bool Engine::accept_roce_dst(const uint8_t* frame, const wire::PktInfo& pi) const noexcept {
  IpAddr dst;
  if (pi.l3 == wire::L3::IPv4) {
    dst = IpAddr::v4(wire::Ipv4C(frame + pi.l3_off).dst());
    if ((dst.as_v4() >> 28) == 0xE) return true;  // multicast (UD multicast groups)
  } else {
    dst = IpAddr::v6(wire::Ipv6C(frame + pi.l3_off).dst());
    if (dst.bytes[0] == 0xff) return true;
  }
  return cfg_.local.owns(dst);
}

void Engine::count_drop(const wire::PktInfo& pi) {
  switch (pi.cls) {
    case wire::FrameClass::Malformed:
      ctr_.inc(EngineCtr::drop_malformed);
      parse_err_[static_cast<size_t>(pi.error)].fetch_add(1, std::memory_order_relaxed);
      return;
    case wire::FrameClass::OtherIPv4:
      ctr_.inc(EngineCtr::drop_other_ipv4);
      return;
    case wire::FrameClass::OtherIPv6:
      ctr_.inc(EngineCtr::drop_other_ipv6);
      return;
    case wire::FrameClass::OtherEther:
      ctr_.inc(EngineCtr::drop_other_ethertype);
      return;
    case wire::FrameClass::RoceV2:
    case wire::FrameClass::ARP:
    case wire::FrameClass::ICMPv4:
    case wire::FrameClass::ICMPv6:
      return;  // counted where they are handled
  }
}

void Engine::handle_rx(rte_mbuf** pkts, uint16_t n, bool looped) {
  const bool capture = capture_.is_open() && !looped;
  const uint64_t rt = capture ? realtime_ns() : 0;
  uint16_t nroce = 0;
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = pkts[i];
    bytes += m->pkt_len;
    if (capture) capture_.write(m, rt);
    const uint8_t* f = rte_pktmbuf_mtod(m, const uint8_t*);
    // Frames are single-segment on every port we build (mbufs sized for
    // the largest frame); parse the first segment.
    const wire::PktInfo pi = wire::parse({f, m->data_len});
    if (pi.cls != wire::FrameClass::Malformed && !accept_mac(f)) {
      ctr_.inc(EngineCtr::drop_not_our_mac);
      rte_pktmbuf_free(m);
      continue;
    }
    switch (pi.cls) {
      case wire::FrameClass::RoceV2:
        break;
      case wire::FrameClass::ARP:
      case wire::FrameClass::ICMPv4:
      case wire::FrameClass::ICMPv6:
        handle_host(m, pi);
        continue;
      case wire::FrameClass::OtherIPv4:
      case wire::FrameClass::OtherIPv6:
      case wire::FrameClass::OtherEther:
      case wire::FrameClass::Malformed:
        count_drop(pi);
        rte_pktmbuf_free(m);
        continue;
    }
    // RoCEv2 (STYLE 7's order): the address here; the QP, its state and
    // keys in the sink; then the opcode and the ICRC (accept_roce).
    if (!accept_roce_dst(f, pi)) {
      ctr_.inc(EngineCtr::drop_not_our_ip);
      rte_pktmbuf_free(m);
      continue;
    }
    if (sink_ == nullptr) {
      ctr_.inc(EngineCtr::drop_unknown_qpn);  // nothing on this engine has QPs
      rte_pktmbuf_free(m);
      continue;
    }
    roce_[nroce++] = RoceRx{m, pi};
  }
  if (!looped) {
    ctr_.add(EngineCtr::rx_frames, n);
    ctr_.add(EngineCtr::rx_bytes, bytes);
  }
  if (nroce) sink_->rx_burst(*this, roce_.data(), nroce);
}

bool Engine::accept_roce(const RoceRx& pkt) noexcept {
  if (!pkt.info.opcode_known) {
    drop(pkt.m, EngineCtr::drop_unknown_opcode);
    return false;
  }
  if (!wire::verify_icrc(rte_pktmbuf_mtod(pkt.m, const uint8_t*), pkt.info)) {
    drop(pkt.m, EngineCtr::drop_icrc);
    return false;
  }
  ctr_.inc(EngineCtr::rx_roce);
  return true;
}

void Engine::drop(rte_mbuf* m, EngineCtr why) noexcept {
  ctr_.inc(why);
  rte_pktmbuf_free(m);
}

void Engine::handle_host(rte_mbuf* m, const wire::PktInfo& pi) {
  switch (pi.cls) {
    case wire::FrameClass::ARP: ctr_.inc(EngineCtr::rx_arp); break;
    case wire::FrameClass::ICMPv4: ctr_.inc(EngineCtr::rx_icmp); break;
    case wire::FrameClass::ICMPv6: ctr_.inc(EngineCtr::rx_icmp6); break;
    case wire::FrameClass::RoceV2:
    case wire::FrameClass::OtherIPv4:
    case wire::FrameClass::OtherIPv6:
    case wire::FrameClass::OtherEther:
    case wire::FrameClass::Malformed:
      break;
  }
  const uint8_t* f = rte_pktmbuf_mtod(m, const uint8_t*);
  rte_mbuf* reply = cfg_.answer_host ? alloc() : nullptr;
  uint8_t* out = reply ? rte_pktmbuf_mtod(reply, uint8_t*) : nullptr;
  const size_t cap = reply ? rte_pktmbuf_tailroom(reply) : 0;
  const HostAction act = handle_host_frame({f, m->data_len}, pi, cfg_.local, reply != nullptr, out, cap);
  if (act.learned) neigh_.learn(act.learned->ip, act.learned->mac, act.learned->solicited, now_ns_);
  using Kind = HostAction::Kind;
  if (act.reply_len && reply) {
    set_frame_len(reply, act.reply_len);
    switch (act.kind) {
      case Kind::ArpRequest: ctr_.inc(EngineCtr::tx_arp_reply); break;
      case Kind::IcmpEcho: ctr_.inc(EngineCtr::tx_icmp_reply); break;
      case Kind::NdSolicit: ctr_.inc(EngineCtr::tx_nd_advert); break;
      case Kind::Icmp6Echo: ctr_.inc(EngineCtr::tx_icmp6_reply); break;
      case Kind::None: case Kind::ArpReply: case Kind::NdAdvert: case Kind::NotForUs: case Kind::Ignored:
        break;
    }
    send(reply);
  } else {
    if (reply) rte_pktmbuf_free(reply);
    if (act.kind == Kind::NotForUs || act.kind == Kind::Ignored) ctr_.inc(EngineCtr::drop_host_ignored);
  }
  rte_pktmbuf_free(m);
}

// ---- transmit -------------------------------------------------------------------

rte_mbuf* Engine::alloc() noexcept {
  rte_mbuf* m = rte_pktmbuf_alloc(port_.pool());
  if (!m) ctr_.inc(EngineCtr::drop_no_mbuf);
  return m;
}

void Engine::send(rte_mbuf* m) noexcept {
  UROCE_ASSERT_ENGINE(*this);
  tx_.push_back(m);  // capacity reserved: 2 * tx_batch
  if (tx_.size() >= cfg_.tx_batch) flush_tx_keeping(true);
}

bool Engine::send_to(const IpAddr& dst, rte_mbuf* m) noexcept {
  if (cfg_.local.owns(dst)) {
    if (!cfg_.port_loopback) return loop_back(m);
    send_to_mac(m, cfg_.local.mac);
    return true;
  }
  return neigh_.send(dst, m, now_ns_);
}

bool Engine::send_to(const IpAddr& dst, rte_mbuf* m, NextHop& hop) noexcept {
  UROCE_ASSERT_ENGINE(*this);
  if (hop.generation != neigh_.generation() || hop.ip != dst.bytes) {
    if (cfg_.local.owns(dst)) {  // our own addresses do not change while the engine runs
      hop = NextHop{neigh_.generation(), dst.bytes, {}, true};
    } else if (const wire::MacAddr* mac = neigh_.lookup(dst, now_ns_)) {
      hop = NextHop{neigh_.generation(), dst.bytes, *mac, false};
    } else {
      return neigh_.send(dst, m, now_ns_);  // unresolved: queued (or refused) there
    }
  }
  if (hop.loopback) {
    if (!cfg_.port_loopback) return loop_back(m);
    send_to_mac(m, cfg_.local.mac);
    return true;
  }
  send_to_mac(m, hop.mac);
  return true;
}

void Engine::send_to_mac(rte_mbuf* m, const wire::MacAddr& mac) noexcept {
  wire::Eth(rte_pktmbuf_mtod(m, uint8_t*)).set_dst(mac);
  send(m);
}

// Loopback (rxe's rxe_loopback, hardware's internal loopback): a frame to
// our own address goes to our own receive path, addressed to our MAC, on
// the loop's next turn (never inside the send: the sender may be the
// responder or the completer in the middle of a packet).
bool Engine::loop_back(rte_mbuf* m) noexcept {
  UROCE_ASSERT_ENGINE(*this);
  if (loop_.size() == loop_.capacity()) {
    ctr_.inc(EngineCtr::drop_loopback_full);
    rte_pktmbuf_free(m);
    return false;
  }
  wire::Eth(rte_pktmbuf_mtod(m, uint8_t*)).set_dst(cfg_.local.mac);
  loop_.push_back(m);
  ctr_.inc(EngineCtr::loopback);
  return true;
}

void Engine::send_multicast(const wire::Ipv6Addr& mgid, rte_mbuf* m) noexcept {
  UROCE_ASSERT_ENGINE(*this);
  if (!cfg_.port_loopback && sink_ != nullptr && sink_->mcast_member(mgid)) {
    if (rte_mbuf* copy = rte_pktmbuf_copy(m, port_.pool(), 0, UINT32_MAX); copy != nullptr) {
      loop_back(copy);
    } else {
      ctr_.inc(EngineCtr::drop_no_mbuf);
    }
  }
  send(m);
}

// [engine] Receives the frames looped back since the last turn; what they
// cause (ACKs, responses) is looped on the following turn.
unsigned Engine::drain_loopback() {
  if (loop_.empty()) return 0;
  loop_rx_.swap(loop_);
  // In bursts of rx_burst, as from the port (roce_ holds one burst).
  const size_t n = loop_rx_.size();
  for (size_t at = 0; at < n;) {
    const auto k = static_cast<uint16_t>(std::min<size_t>(n - at, std::max<uint16_t>(cfg_.rx_burst, 1)));
    handle_rx(loop_rx_.data() + at, k, true);
    at += k;
  }
  loop_rx_.clear();
  return static_cast<unsigned>(n);
}

void Engine::flush_tx() noexcept { flush_tx_keeping(false); }

// `keep_acks` (a flush in the middle of a turn, send() at tx_batch): held
// ACKs that requests joined stay queued behind those requests, for the
// turn's last flush.  A long message spans several flushes; its peer, which
// returns from its CQ poll on our ACK, then has every packet of the message
// before it, not all but the last (ib_write_lat 64 KiB waited for the
// peer's engine thread for the rest: ~2 ms, a scheduler slice).
void Engine::flush_tx_keeping(bool keep_acks) noexcept {
  UROCE_ASSERT_ENGINE(*this);
  if (tx_.empty()) return;
  const size_t tail = requests_before_held_acks() && keep_acks ? tx_acks_ : 0;  // the ACKs now at the end
  const size_t out = tx_.size() - tail;
  if (capture_.is_open()) {
    const uint64_t rt = realtime_ns();
    for (size_t i = tx_captured_; i < out; ++i) capture_.write(tx_[i], rt);
  }
  uint64_t bytes = 0;
  for (size_t i = 0; i < out; ++i) bytes += tx_[i]->pkt_len;
  const uint16_t n = static_cast<uint16_t>(out);
  ++tx_gen_;  // no frame queued so far may be rewritten: the port has it, or it is kept and captured
  const uint16_t sent = port_.tx_burst(tx_.data(), n);
  if (sent != 0) UROCE_STAMP(Sent);
  // What the port refused waits for the next flush, the oldest first;
  // beyond tx_batch frames it is dropped.
  const uint16_t keep = static_cast<uint16_t>(std::min<uint32_t>(n - sent, cfg_.tx_batch));
  for (uint16_t i = sent; i < n; ++i) bytes -= tx_[i]->pkt_len;
  for (uint16_t i = static_cast<uint16_t>(sent + keep); i < n; ++i) rte_pktmbuf_free(tx_[i]);
  tx_acks_ = keep == 0 ? tail : 0;  // the held ACKs lead the queue again, unless refused frames do
  if (tail == 0) ack_hold_since_ = 0;  // else the held ACKs' hold goes on
  if (n - sent > keep) ctr_.add(EngineCtr::drop_tx_full, n - sent - keep);
  if (keep != 0) ctr_.add(EngineCtr::tx_deferred, keep);
  ctr_.add(EngineCtr::tx_frames, sent);
  ctr_.add(EngineCtr::tx_bytes, bytes);
  if (sent != 0) ctr_.inc(EngineCtr::tx_bursts);
  // Kept frames first (captured), then the held ACKs (not yet).
  std::copy(tx_.begin() + sent, tx_.begin() + sent + keep, tx_.begin());
  std::copy(tx_.begin() + static_cast<std::ptrdiff_t>(out), tx_.end(), tx_.begin() + keep);
  tx_.resize(keep + tail);
  tx_stalled_ = keep != 0;
  tx_captured_ = keep;
}

bool Engine::drain_tx(uint64_t max_ns) noexcept {
  flush_tx();
  if (!tx_stalled_) return true;
  const uint64_t until = steady_ns() + max_ns;
  while (tx_stalled_ && static_cast<int64_t>(until - steady_ns()) > 0) {
    sched_yield();
    flush_tx();
  }
  return !tx_stalled_;
}

void Engine::set_frame_len(rte_mbuf* m, size_t len) noexcept {
  m->data_len = static_cast<uint16_t>(len);
  m->pkt_len = static_cast<uint32_t>(len);
}

bool Engine::send_built(EngineCtr ctr, const std::function<size_t(uint8_t*)>& build) {
  rte_mbuf* m = alloc();
  if (!m) return false;
  set_frame_len(m, build(rte_pktmbuf_mtod(m, uint8_t*)));
  ctr_.inc(ctr);
  send(m);
  return true;
}

void Engine::send_neigh_request(const IpAddr& ip) {
  const auto src = cfg_.local.source_for(ip);
  if (!src) return;  // no address of that family: the request times out
  if (cfg_.kernel_neigh) {
    // Learned on the next iteration, not from inside the table's probe.
    if (const auto mac = cfg_.kernel_neigh(ip)) kernel_learned_.emplace_back(ip, *mac);
  }
  if (ip.is_v4()) {
    send_built(EngineCtr::tx_arp_request, [&](uint8_t* out) { return build_arp_request(out, cfg_.local, *src, ip); });
  } else {
    send_built(EngineCtr::tx_nd_solicit,
               [&](uint8_t* out) { return build_neighbor_solicit(out, cfg_.local, *src, ip); });
  }
}

void Engine::announce() {
  for (const IpAddr& ip : cfg_.local.ips) {
    const bool sent =
        ip.is_v4()
            ? send_built(EngineCtr::tx_arp_request,
                         [&](uint8_t* out) { return build_gratuitous_arp(out, cfg_.local, ip); })
            : send_built(EngineCtr::tx_nd_advert,
                         [&](uint8_t* out) { return build_unsolicited_na(out, cfg_.local, ip); });
    if (!sent) return;
  }
}

void Engine::for_each_counter(const std::function<void(std::string_view, std::string_view, uint64_t)>& f) const {
  ctr_.for_each(f);
  for (size_t i = 1; i < wire::kNumParseErrors; ++i) {
    const auto e = static_cast<wire::ParseError>(i);
    f(wire::parse_error_name(e), wire::parse_error_text(e), parse_errors(e));
  }
}

}  // namespace uroce::transport
