// The drop-in's process: its end (exit, termination signals), its forks
// and the daemon that goes away (process.hpp).
#include "verbs-shim/process.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cerrno>
#include <ctime>
#include <new>
#include <thread>

#include "lib/util/log.hpp"
#include "lib/util/quiet_threads.hpp"
#include "transport/device.hpp"
#include "transport/rnic/rnic.hpp"
#include "verbs-shim/shim.hpp"

namespace uroce::shim {

ProcessState& process() noexcept {
  static ProcessState* const p = new ProcessState;  // never destroyed (process.hpp)
  return *p;
}

namespace {

// At exit the engines keep running this long before the ports close, so
// that what the program's last verbs queued — the ACK of its last receive,
// a final UD send — reaches the wire and the peer (like a socket's linger).
// Without it a peer that exits first loses that frame (seen over memif:
// the survivor's retry counter runs out, or a UD peer waits forever).
constexpr auto kExitLinger = std::chrono::milliseconds(100);
constexpr auto kLingerStep = std::chrono::microseconds(50);
// ... and, past the linger, until the DREQs sent at exit are answered
// (their peers then see DISCONNECTED at once), at most this long: a peer
// that is gone never answers.
constexpr auto kExitDrepWait = std::chrono::milliseconds(500);

// Exit with the program's threads still running.  exit() takes the
// handlers (atexit and static destructors) off one list one at a time, so
// a second thread calling exit() meanwhile runs the ones still listed
// concurrently with the first.  rping does this: its CM thread exits when
// the event channel it waits on is destroyed at the end of main.  That
// thread then tore down the device list and the registry (engines, ports,
// the EAL) while the main thread was still in the linger below (SIGSEGV
// in linger_at_exit, about one run in five under load).
//
// So the teardown belongs to one thread, the first to reach one of our
// two handlers: linger_at_exit, then exit_gate (registered just before it,
// so it runs right after).  On the owner the gate shuts the registry down
// before any other handler can; any other thread that reaches either waits
// there until the owner's _exit ends the process.  The device list is never
// destroyed, so a late reader never finds it freed.
// One sequentially consistent compare-exchange decides the owner
// (ProcessState::exit_owner); nothing else is published through it.

// Claims the teardown for this thread, or parks it for good if another
// thread has it.
void claim_exit() {
  pthread_t none = 0;
  const pthread_t self = pthread_self();
  if (process().exit_owner.compare_exchange_strong(none, self) || pthread_equal(none, self)) return;
  for (;;) ::pause();
}

// What a process does before it ends, by exit() or by a termination
// signal: DREQs (or the DREPs a peer waits for) for every connection still
// up, then the engines run on for the linger and until those DREQs are
// answered (at most kExitDrepWait), so the frames reach the wire and the
// peers' programs see DISCONNECTED, as they would from the kernel.
void disconnect_and_linger() {
  rdmacm_at_exit();
  const auto start = std::chrono::steady_clock::now();
  for (unsigned i = 0;; ++i) {
    const auto now = std::chrono::steady_clock::now();
    if (now - start >= kExitLinger) {
      // Past the linger: only the DREPs are worth waiting for (asked now and
      // then: each question is a trip through the engines).
      if (now - start >= kExitDrepWait) break;
      if (i % 64 == 0 && rdmacm_disconnects_pending() == 0) break;
    }
    bool drove = false;
    for (IbvDevice* d : devices()) drove |= d->inline_progress && d->tdev->progress();
    if (!drove) std::this_thread::sleep_for(kLingerStep);
  }
}

void linger_at_exit() {
  adopt_fork();  // a child's exit never touches its parent's devices
  claim_exit();
  disconnect_and_linger();
}

// ---- termination signals ------------------------------------------------------------
// SIGINT, SIGTERM and SIGHUP end a program without exit(), so without the
// linger above: its peers would never learn that its connections are gone
// (a kernel RNIC sends the DREQs of a closed process; nothing else would).
// Where the program left such a signal's default action in place, we take
// it: the handler wakes a watcher thread (a pipe: the only work a handler
// may do), which disconnects and lingers, then restores the default action
// and raises the signal again, so the process ends as it would have, by
// that signal.  A second signal meanwhile ends it at once.  A program that
// handles the signal itself keeps its handler (and usually exits, which
// runs linger_at_exit).  SIGKILL cannot be caught: uroced handles that.
//
// Meanwhile the program must not run on as if nothing had happened: with
// the default action it would be gone, so it never sees the signal.  A
// handler that returned would cut short the call the thread was blocked
// in (poll, epoll_wait, sleep, sem_wait: EINTR whatever SA_RESTART says),
// and the program would act on that: udpong's server took the EINTR of
// its poll for an error and exited 255, not by the signal.  So the thread
// the signal interrupted stays in the handler until the watcher ends the
// process, at most kTermHoldSeconds, then ends it itself.  One exception: a
// thread interrupted inside an engine's loop iteration returns at once
// (Progress::polling_here), since the engines must run for the linger; it
// was in our code, not in a call of the program's, so no EINTR reaches
// the program.  Our own threads never take these signals (QuietThreads).
constexpr std::array<int, 3> kTermSignals = {SIGINT, SIGTERM, SIGHUP};
// Twice the watcher's whole linger (disconnect_and_linger ends by
// kExitDrepWait), in whole seconds; a watcher that waits on a lock the
// held thread owns is not waited for longer.
constexpr time_t kTermHoldSeconds = std::chrono::ceil<std::chrono::seconds>(2 * kExitDrepWait).count();
static_assert(kTermHoldSeconds >= 1);

// Ends the process by `sig`, from its handler: the handler has SA_NODEFER,
// so the signal is delivered inside raise().
void die_by(int sig) {
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void on_term_signal(int sig) {
  const int saved_errno = errno;
  if (::getpid() != process().term_pid || process().terminating.exchange(true)) {
    die_by(sig);
    return;
  }
  const auto b = static_cast<uint8_t>(sig);
  [[maybe_unused]] const ssize_t n = ::write(process().term_pipe[1], &b, 1);
  if (!transport::Progress::polling_here()) {
    timespec until{};
    ::clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += kTermHoldSeconds;
    while (::clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, nullptr) == EINTR) {
    }
    die_by(sig);
  }
  errno = saved_errno;
}

void term_watcher() {
  uint8_t b = 0;
  while (::read(process().term_pipe[0], &b, 1) != 1) {
    if (errno != EINTR) return;
  }
  const int sig = b;
  disconnect_and_linger();
  ::signal(sig, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);
}

void take_term_signals() {
  if (::pipe2(process().term_pipe, O_CLOEXEC) != 0) return;
  process().term_pid = ::getpid();
  bool any = false;
  for (int sig : kTermSignals) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0) continue;
    if ((old.sa_flags & SA_SIGINFO) != 0 || old.sa_handler != SIG_DFL) continue;  // the program's own
    struct sigaction sa {};
    sa.sa_handler = on_term_signal;
    sa.sa_flags = SA_RESTART | SA_NODEFER;  // NODEFER: die_by, and a second signal while one is held
    sigemptyset(&sa.sa_mask);
    any |= sigaction(sig, &sa, nullptr) == 0;
  }
  if (!any) return;
  try {
    // The watcher blocks the signals, so that the handler runs on a
    // program thread (never on the thread it must wake).
    const QuietThreads quiet;
    std::thread(term_watcher).detach();
  } catch (...) {
    for (int sig : kTermSignals) ::signal(sig, SIG_DFL);  // no watcher: nobody to wake
  }
}

void exit_gate() {
  adopt_fork();
  claim_exit();
  // Engines stopped and ports closed here, once; the RNICs stay for the
  // program's threads still running (Teardown::Exit).
  transport::Devices::instance().shutdown(transport::Devices::Teardown::Exit);
}

// The atfork child handler: the one thread of the child.  Only marks the
// fork (adopt_fork does the rest, at the next call); the device list's lock
// is made anew, since a thread the child does not have may have held it.
void on_fork_child() noexcept {
  ProcessState& p = process();
  new (&p.mu) std::mutex;
  if (p.started) p.forked.store(true, std::memory_order_release);
}

}  // namespace

void install_process_hooks() {
  ProcessState& p = process();
  if (p.hooks) return;
  p.hooks = true;
  // Registered after the registry exists, so they run before it is torn
  // down at exit: the linger first, then the gate (see exit_gate).
  std::atexit(exit_gate);
  std::atexit(linger_at_exit);
  take_term_signals();
  ::pthread_atfork(nullptr, nullptr, &on_fork_child);
}

// The daemon went away: every device it served is dead (its port down for
// good, IBV_EVENT_DEVICE_FATAL, QPs flushed; RDMA_CM_EVENT_DEVICE_REMOVAL
// on the rdma_cm ids), as with a device unplugged under a kernel driver.
// Never a hang: whatever waits for a completion or an event gets one.
void daemon_gone() {
  log_line(LogType::Shim, LogLevel::Error, "uroced went away: its devices are gone");
  for (IbvDevice* d : devices()) {
    if (auto* p = d->tdev->daemon_port()) p->mark_gone();
  }
  for (IbvDevice* d : devices()) {
    d->rnic().device_fatal();
    rdmacm_device_removed(&d->rnic());
  }
}

void adopt_fork_locked() {
  ProcessState& p = process();
  if (!p.forked.exchange(false, std::memory_order_acq_rel)) return;
  // The parent's IbvDevices, registry (engines, ports, RNICs) and rdma_cm
  // model stay in memory, unreachable from here on: whatever the child
  // inherited that points at them finds them, but nothing runs them.  The
  // parent's uroced link closed in the child at the fork (Link).
  p.devices.clear();
  rdmacm_forget_after_fork();
  (void)transport::Devices::renew_after_fork();
  p.started = false;
  if (!p.daemon_client) p.parent_in_process = true;
}

// Whether the drop-in's own handler took a termination signal and the
// process is on its way out (librdmacm.so.1's waits keep waiting then, for
// the watcher that ends it, instead of returning the EINTR the handler
// caused: a program that installed no handler never sees one).
UROCE_EXPORT bool uroce_exiting() noexcept { return process().terminating.load(std::memory_order_acquire); }

void adopt_fork() noexcept {
  ProcessState& p = process();
  if (!p.forked.load(std::memory_order_acquire)) return;
  std::lock_guard lock(p.mu);
  adopt_fork_locked();
}

std::vector<IbvDevice*>& devices() noexcept { return process().devices; }

}  // namespace uroce::shim
