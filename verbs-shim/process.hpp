// The drop-in's process (DESIGN.md "Process lifetime"): one object,
// ProcessState, holds what lives as long as the process image, and
// process.cpp does what the process's end and its forks need:
//
//   exit()               DREQs for the connections still up, a linger so
//                        that the last frames reach the peers, then the
//                        engines stop and the ports close, on one thread
//   SIGINT/TERM/HUP      (default action only) the same, by a watcher
//                        thread, then the signal again
//   fork()               the child abandons its parent's devices and starts
//                        its own on first use
//   uroced going away    every device it served is dead (DEVICE_FATAL)
//
// Never freed, on purpose: the ProcessState and every registry in it are
// made once and never destroyed.
//   - exit() runs the atexit handlers and static destructors while other
//     threads of the program still run (rping's CM thread, which calls
//     exit() itself; a thread blocked in a verb), and they may still look
//     a device, a context or the rdma_cm model up;
//   - a child of fork() has one thread and none of the engine, link or
//     telemetry threads its parent's registries are served by, and any of
//     their locks may be held for good: the child abandons what it
//     inherited (never run, never freed: a destructor would join threads
//     the child does not have) and starts its own.
// The registries of the layers below follow the same rule for the same
// reasons, each said where it is: transport::Devices (renew_after_fork,
// Teardown::Exit), drivers::daemon::Link's list of links; and the
// librdmacm.so.1 half (verbs-shim/rdmacm.cpp's live channels,
// rsocket_dgram.cpp's socket table).  LeakSanitizer runs over uroce's own
// test programs only (scripts/sanitize; the drop-ins' programs run with
// detect_leaks=0), where none of these is made.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <mutex>
#include <vector>

namespace uroce::cm {
class RdmaCm;
}

namespace uroce::shim {

struct IbvDevice;
struct Context;

struct ProcessState {
  // ---- the device list (device.cpp) -------------------------------------------
  // ibv_get_device_list's devices, each pointing at its transport::Device.
  // Made anew (empty) in a child of fork on its first call; a thread of the
  // program may read the list during exit.
  std::mutex mu;                     // the list and the flags below; remade in a child of fork
  std::vector<IbvDevice*> devices;
  bool started = false;              // ibv_get_device_list brought the devices up
  bool hooks = false;                // the exit, signal and fork handlers are in place (once per image)
  bool daemon_client = false;        // the devices that came up are uroced's
  bool parent_in_process = false;    // a child of a process with in-process devices: none here
  std::atomic<bool> forked{false};   // fork() happened since the devices started (adopt_fork)

  // ---- contexts (import.cpp) ---------------------------------------------------
  // Every open context, found again by its cmd_fd (ibv_import_device);
  // contexts may close during exit.
  std::mutex contexts_mu;
  std::vector<Context*> contexts;

  // ---- the rdma_cm model (rdmacm_core.cpp) ------------------------------------------
  // Started on first use over every device; engines call into it until the
  // process is gone, and a half-started one may still be referred to.
  std::atomic<cm::RdmaCm*> rdmacm{nullptr};
  std::mutex rdmacm_mu;              // starting it; remade in a child of fork
  bool rdmacm_tried = false;         // under rdmacm_mu: started, or failed to

  // ---- the end of the process (process.cpp) ---------------------------------------
  // The thread that tears down at exit (0: none yet); glibc's pthread_t is
  // a pointer.  One sequentially consistent compare-exchange decides it.
  std::atomic<pthread_t> exit_owner{0};
  // Termination signals: the handler writes the signal to the pipe, the
  // watcher thread of process `term_pid` reads it.
  int term_pipe[2] = {-1, -1};
  std::atomic<bool> terminating{false};
  pid_t term_pid = 0;
};

// The process's state: made on first use, never destroyed.
ProcessState& process() noexcept;

// Called with ProcessState::mu held by the first ibv_get_device_list (once
// per process image): the exit handlers, the termination signals a program
// left to their default action, the fork handler.
void install_process_hooks();
// The daemon serving this process's devices went away (the link's events
// thread): every device it served is dead.
void daemon_gone();
// With ProcessState::mu held: a child of fork() abandons its parent's
// devices, registry and rdma_cm model (adopt_fork).
void adopt_fork_locked();

}  // namespace uroce::shim
