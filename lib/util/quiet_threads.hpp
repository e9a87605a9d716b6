// Threads of ours never take the program's signals.
//
// A signal sent to a process goes to any one of its threads that does not
// block it.  Were that one of ours (an engine thread, the daemon link's
// event thread, DPDK's threads), the program's handler would run there and
// not on the program's own threads: their blocking calls would not be
// interrupted as the program expects, and a handler that waits (ours for
// the termination signals does, see verbs-shim/device.cpp) would stall the
// engine it waits for.  So every thread we start begins with the
// asynchronous signals blocked: construct a QuietThreads around the
// creation (a new thread inherits its creator's mask); the creating
// thread's own mask is restored when it goes out of scope.
//
// The signals a fault raises in the faulting thread itself (SIGSEGV,
// SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS) stay deliverable: blocking them
// is undefined.  Any thread.
#pragma once

#include <pthread.h>
#include <signal.h>

namespace uroce {

class QuietThreads {
 public:
  QuietThreads() noexcept {
    sigset_t block;
    sigfillset(&block);
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) sigdelset(&block, sig);
    ok_ = pthread_sigmask(SIG_BLOCK, &block, &old_) == 0;
  }
  ~QuietThreads() {
    if (ok_) pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  QuietThreads(const QuietThreads&) = delete;
  QuietThreads& operator=(const QuietThreads&) = delete;

 private:
  sigset_t old_{};
  bool ok_ = false;
};

}  // namespace uroce
