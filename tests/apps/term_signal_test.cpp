// A program that gets SIGTERM (or SIGINT, SIGHUP) with the default action
// in place ends by that signal, as it would without uroce, and never sees
// it: the shim's handler sends the DREQs of its connections first
// (verbs-shim/device.cpp), but the call the program was blocked in must not
// return EINTR meanwhile.  (udpong's server took such an EINTR of its poll
// for an error and exited 255.)  A program with a handler of its own keeps
// it, and one that reads the signal from a signalfd gets it.
//
// Each case runs this executable again as a child (`child MODE`) with the
// devices of sim2.toml, waits for it to say "ready", signals it, and looks
// at how it ended and what it printed.
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace {

constexpr int kChildWaitS = 20;  // how long a child's blocking call waits (it should never return)

// ---- the child ------------------------------------------------------------------------

volatile sig_atomic_t g_handled = 0;

void say(const char* s) {
  [[maybe_unused]] const ssize_t n = ::write(1, s, std::strlen(s));
}

void report_return(const char* what, int rc, int err) {
  char line[128];
  std::snprintf(line, sizeof line, "%s returned %d (%s)\n", what, rc, std::strerror(err));
  say(line);
}

// Opens the first device, a PD and a CQ: the engines run.
ibv_cq* open_device() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr || n == 0) return nullptr;
  ibv_context* ctx = ibv_open_device(list[0]);
  if (ctx == nullptr || ibv_alloc_pd(ctx) == nullptr) return nullptr;
  return ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
}

void* poll_stdin(void*) {
  pollfd p{0, POLLIN, 0};
  const int rc = ::poll(&p, 1, kChildWaitS * 1000);
  report_return("poll", rc, errno);
  std::_Exit(3);
}

int child(std::string_view mode) {
  if (mode == "own-handler") {
    struct sigaction sa {};
    sa.sa_handler = [](int) { g_handled = 1; };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
  }
  ibv_cq* cq = open_device();
  if (cq == nullptr) {
    say("no device\n");
    return 2;
  }
  if (mode == "poll" || mode == "own-handler") {
    say("ready\n");
    pollfd p{0, POLLIN, 0};
    const int rc = ::poll(&p, 1, kChildWaitS * 1000);
    if (g_handled != 0) {
      say("handled\n");
      return 7;
    }
    report_return("poll", rc, errno);
    return 3;
  }
  if (mode == "sleep") {
    say("ready\n");
    const timespec t{kChildWaitS, 0};
    const int rc = ::nanosleep(&t, nullptr);
    report_return("nanosleep", rc, errno);
    return 3;
  }
  if (mode == "busy") {  // polls the CQ: the signal usually finds the thread inside the engine
    say("ready\n");
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(kChildWaitS);
    ibv_wc wc{};
    while (std::chrono::steady_clock::now() < end) ibv_poll_cq(cq, 1, &wc);
    say("busy loop ended\n");
    return 3;
  }
  if (mode == "signalfd") {  // blocks SIGTERM only now, with the engines running, and reads it from a signalfd
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    const int fd = signalfd(-1, &set, 0);
    say("ready\n");
    pollfd p{fd, POLLIN, 0};
    signalfd_siginfo si{};
    if (fd >= 0 && ::poll(&p, 1, kChildWaitS * 1000) == 1 && ::read(fd, &si, sizeof si) == sizeof si &&
        si.ssi_signo == SIGTERM) {
      say("signalfd SIGTERM\n");
      return 7;
    }
    return 3;
  }
  if (mode == "threads") {  // three threads of the program blocked in poll
    pthread_t t[2];
    for (auto& th : t) pthread_create(&th, nullptr, poll_stdin, nullptr);
    say("ready\n");
    poll_stdin(nullptr);
  }
  say("unknown mode\n");
  return 2;
}

// ---- the parent -----------------------------------------------------------------------

struct Ended {
  bool ended = false;  // within the wait
  int status = 0;      // waitpid's
  std::string out;     // everything the child printed
  double seconds = 0;  // from the signal to its end
};

class TermSignal : public ::testing::TestWithParam<int> {};

std::string read_some(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return {};
  char buf[256];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

// Starts `child MODE`, waits for "ready", sends `sig` 200 ms later and
// waits (at most 10 s) for the child to end.
Ended run_child(const char* mode, int sig) {
  Ended e;
  int in[2], out[2];
  if (::pipe(in) != 0 || ::pipe(out) != 0) return e;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::close(in[1]);
    ::close(out[0]);
    ::execl("/proc/self/exe", "term_signal_child", "child", mode, static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  const auto start = std::chrono::steady_clock::now();
  while (e.out.find("ready\n") == std::string::npos &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(30)) {
    const std::string s = read_some(out[0], 1000);
    e.out += s;
    if (s.empty() && ::waitpid(pid, &e.status, WNOHANG) == pid) {
      e.ended = true;
      break;
    }
  }
  if (!e.ended) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const auto signalled = std::chrono::steady_clock::now();
    ::kill(pid, sig);
    while (std::chrono::steady_clock::now() - signalled < std::chrono::seconds(10)) {
      if (::waitpid(pid, &e.status, WNOHANG) == pid) {
        e.ended = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
    if (!e.ended) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &e.status, 0);
    }
  }
  for (std::string s; !(s = read_some(out[0], 100)).empty();) e.out += s;
  ::close(in[1]);
  ::close(out[0]);
  return e;
}

void expect_died_by(const Ended& e, int sig) {
  ASSERT_TRUE(e.ended) << "still running 10 s after the signal; printed: " << e.out;
  EXPECT_TRUE(WIFSIGNALED(e.status) && WTERMSIG(e.status) == sig)
      << "ended by " << (WIFSIGNALED(e.status) ? WTERMSIG(e.status) : 0) << ", exit "
      << (WIFEXITED(e.status) ? WEXITSTATUS(e.status) : -1) << "; printed: " << e.out;
  EXPECT_EQ(e.out, "ready\n") << "the program saw the signal";
}

TEST_P(TermSignal, ProgramBlockedInPollEndsByTheSignal) { expect_died_by(run_child("poll", GetParam()), GetParam()); }

TEST_P(TermSignal, ProgramBlockedInNanosleepEndsByTheSignal) {
  expect_died_by(run_child("sleep", GetParam()), GetParam());
}

TEST_P(TermSignal, ProgramPollingItsCqEndsByTheSignal) { expect_died_by(run_child("busy", GetParam()), GetParam()); }

TEST_P(TermSignal, ProgramWithThreadsInPollEndsByTheSignal) {
  expect_died_by(run_child("threads", GetParam()), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Signals, TermSignal, ::testing::Values(SIGTERM, SIGINT, SIGHUP),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(i.param == SIGTERM ? "SIGTERM" : i.param == SIGINT ? "SIGINT" : "SIGHUP");
                         });

// The shim takes a signal only where the default action was in place.
TEST(TermSignalOwnHandler, AProgramsOwnHandlerRunsAndItsCallReturnsEintr) {
  const Ended e = run_child("own-handler", SIGTERM);
  ASSERT_TRUE(e.ended) << e.out;
  EXPECT_TRUE(WIFEXITED(e.status) && WEXITSTATUS(e.status) == 7) << "printed: " << e.out;
  EXPECT_EQ(e.out, "ready\nhandled\n");
}

// A program that blocks SIGTERM and reads it from a signalfd gets it even
// when it blocks it only after the devices started: no thread of ours
// takes it instead (they block every asynchronous signal).  (sigwait would
// not tell: the kernel gives a signal to the thread that waits for it.)
TEST(TermSignalOwnHandler, AProgramsSignalfdGetsTheSignal) {
  const Ended e = run_child("signalfd", SIGTERM);
  ASSERT_TRUE(e.ended) << e.out;
  EXPECT_TRUE(WIFEXITED(e.status) && WEXITSTATUS(e.status) == 7)
      << "ended by " << (WIFSIGNALED(e.status) ? WTERMSIG(e.status) : 0) << "; printed: " << e.out;
  EXPECT_EQ(e.out, "ready\nsignalfd SIGTERM\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string_view(argv[1]) == "child") return child(argv[2]);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
