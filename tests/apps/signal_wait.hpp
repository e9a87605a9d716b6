// The signal tests' scaffolding (verbs_abi_test, rdmacm_abi_test): a
// blocking wait on this thread while another thread sends it SIGUSR1.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <functional>
#include <thread>

namespace uroce_test {

struct SignalledWait {
  bool installed = false;  // the handler was installed
  int rc = 0;              // what the wait returned
  int err = 0;             // errno right after it
  int signals = 0;         // how often the handler ran
};

// Runs `wait` on this thread; 100 ms in, another thread sends it SIGUSR1,
// whose handler is installed with SA_RESTART (`restart`) or without.
// `event` makes what the wait waits for: with `restart`, 100 ms after the
// signal; without, only if the wait has not returned 3 s after it (the
// signal should have ended it: the caller's expectations then fail
// instead of the test hanging).  The old action is restored.
inline SignalledWait signalled_wait(bool restart, const std::function<int()>& wait,
                                    const std::function<void()>& event) {
  static std::atomic<int> count{0};
  struct sigaction act {}, old {};
  act.sa_handler = [](int) { count.fetch_add(1); };
  sigemptyset(&act.sa_mask);
  act.sa_flags = restart ? SA_RESTART : 0;
  SignalledWait r;
  r.installed = sigaction(SIGUSR1, &act, &old) == 0;
  if (!r.installed) return r;
  count = 0;
  const pthread_t self = pthread_self();
  std::atomic<bool> returned{false};
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    pthread_kill(self, SIGUSR1);
    if (restart) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      event();
      return;
    }
    for (int i = 0; i < 300 && !returned.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!returned.load()) event();
  });
  errno = 0;
  r.rc = wait();
  r.err = errno;
  returned = true;
  t.join();
  r.signals = count.load();
  sigaction(SIGUSR1, &old, nullptr);
  return r;
}

}  // namespace uroce_test
