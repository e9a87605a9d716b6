// uroced's control plane (issue 15; DESIGN.md "The shared device"): the
// Unix socket every client and tool connects to, one session per client,
// and the requests of drivers/daemon/proto.hpp.
//
//   accept      a connection; its peer's credentials (SO_PEERCRED) say who
//               it is; CAP_NET_RAW (from /proc/<pid>/status) lets it use
//               controlled Q_Keys, as the kernel's uverbs asks
//   Hello       the devices; the events socket (a socketpair) handed over
//   OpenDevice  the client's shared region on a device (Switch::attach)
//   AllocQpn / FreeQpn, Bind / Unbind / Listen
//   Admin       what `uroce dev|client|qp|stats` print (JSON); a QP listing
//               asks every client over its events socket and answers when
//               all have, or after kQpDumpWaitMs with what came
//   hang-up     of either socket, a request that cannot be, or a ring
//               violation the switch reports: the session ends — its
//               attachments detach (farewell DREQs, QPNs into quarantine),
//               its bindings go
//
// Nothing a client sends can stop the server: every length and value is
// checked, a client is never waited for (its events socket is written
// without blocking), and a misbehaving one is dropped.
//
// Threads: run() is the control thread: one epoll loop; it reaches the
// devices' engines through the switches' control calls (run_sync).  A
// switch reports violations from its engine through report_violation()
// (any thread).  stop() from any thread (a signal handler's thread).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "daemon/port_space.hpp"
#include "daemon/switch.hpp"
#include "drivers/daemon/msg_socket.hpp"
#include "drivers/result.hpp"

namespace uroce::daemon {

struct ServerConfig {
  std::string socket_path;        // made (with its directory) at start
  mode_t socket_mode = 0666;      // open to every local user, as rdma-core's udev rules make uverbs devices
  std::optional<gid_t> socket_group;
  uint32_t max_clients = 1024;
};

struct DeviceEntry {
  transport::Device* dev = nullptr;
  Switch* sw = nullptr;
};

class Server {
 public:
  static constexpr int kQpDumpWaitMs = 500;

  Server(ServerConfig cfg, std::vector<DeviceEntry> devices, PortSpace& ports);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Makes and listens on the socket (a stale socket file of a daemon that
  // died is replaced; a live daemon's is EADDRINUSE).
  drivers::Status start();
  // The epoll loop, until stop().  Ends every session before it returns.
  void run();
  void stop() noexcept;
  // A switch found a client's ring impossible: end that client (any thread).
  void report_violation(ClientId client) noexcept;

  size_t sessions() const noexcept { return nsessions_.load(std::memory_order_relaxed); }

 private:
  struct Session;
  struct AdminWait;
  void accept_one();
  void on_ctl(Session& s);
  void on_events(Session& s);
  void end_session(ClientId id, const char* why);
  // One request: the reply's status and body (and fds), or false to drop
  // the client.
  bool handle(Session& s, const drivers::daemon::Message& m);
  bool hello(Session& s, const drivers::daemon::Message& m);
  bool open_device(Session& s, const drivers::daemon::Message& m);
  bool admin(Session& s, const drivers::daemon::Message& m);
  void finish_admin(AdminWait& w);
  void reply(Session& s, const drivers::daemon::Message& req, int status, std::span<const uint8_t> body = {},
             std::span<const int> fds = {});
  std::string devices_json();
  std::string clients_json();
  std::string stats_json();

  ServerConfig cfg_;
  std::vector<DeviceEntry> devices_;
  PortSpace& ports_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int stop_fd_ = -1;       // eventfd: stop()
  int violation_fd_ = -1;  // eventfd: report_violation()
  std::atomic<bool> stopping_{false};
  std::mutex violations_mu_;
  std::vector<ClientId> violations_;
  std::map<ClientId, std::unique_ptr<Session>> sessions_;
  std::atomic<size_t> nsessions_{0};
  ClientId next_id_ = 1;
  std::vector<std::unique_ptr<AdminWait>> admin_waits_;
  uint32_t dump_seq_ = 0;
};

}  // namespace uroce::daemon
