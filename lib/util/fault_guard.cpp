// The fault guard's handler (fault_guard.hpp has the how and why).
#include "lib/util/fault_guard.hpp"

#include <signal.h>

#include <mutex>

namespace uroce::fault_guard {
namespace detail {
thread_local Guard* t_guard = nullptr;
}  // namespace detail

namespace {

std::atomic<uint64_t> g_faults{0};
struct sigaction g_prev_segv {};
struct sigaction g_prev_bus {};
std::once_flag g_installed;

// Hand a fault that is not ours to whoever had the signal before us.
void chain(int sig, siginfo_t* info, void* uc) {
  const struct sigaction& prev = sig == SIGSEGV ? g_prev_segv : g_prev_bus;
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, info, uc);
    return;
  }
  if (prev.sa_handler == SIG_IGN) return;
  if (prev.sa_handler == SIG_DFL) {
    // Back to the default action: returning re-runs the faulting
    // instruction, which now ends the process as it would have without us.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    return;
  }
  prev.sa_handler(sig);
}

void on_fault(int sig, siginfo_t* info, void* uc) {
  Guard* g = detail::t_guard;
  if (g != nullptr) {
    detail::t_guard = nullptr;
    g_faults.fetch_add(1, std::memory_order_relaxed);
    siglongjmp(g->env, 1);
  }
  chain(sig, info, uc);
}

}  // namespace

void install() noexcept {
  std::call_once(g_installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_prev_segv);
    sigaction(SIGBUS, &sa, &g_prev_bus);
  });
}

__attribute__((noinline)) bool run(void (*fn)(void*), void* arg) noexcept {
  Guard g;
  if (sigsetjmp(g.env, 0) != 0) return false;
  enter(&g);
  fn(arg);
  leave();
  return true;
}

uint64_t faults() noexcept { return g_faults.load(std::memory_order_relaxed); }

}  // namespace uroce::fault_guard
