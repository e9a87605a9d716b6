// A client process's connection to uroced (issue 15): the devices the
// daemon serves, a shared region per device (shm_ring.hpp), and the
// requests that need the daemon's word — a QPN, an rdma_cm binding.
//
//   auto link = Link::connect(socket_path(), "rping");   // Hello
//   auto region = (*link)->open_device(0);               // the rings
//   (*link)->alloc_qpn(0, &qpn);
//
// Threads: requests come from any thread, one at a time (a mutex: a
// request is a send and the wait for its reply, microseconds on this
// host's socket; never made from inside an engine loop).  A thread of the
// link's own reads the events socket: it answers the daemon's QP dumps
// through the handler and reports once, through `gone`, that the daemon
// went away (its socket hung up) — after which every request fails EIO.
//
// fork(): a link belongs to the process that connected.  In a child, every
// link it inherited is closed at once (an atfork handler: the daemon must
// see the parent hang up when the parent dies, whatever the child lives
// on to do), its requests fail EIO and its gone handler never runs; the
// child connects a link of its own (DESIGN.md "The shared device", fork).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "drivers/daemon/msg_socket.hpp"
#include "drivers/daemon/proto.hpp"
#include "drivers/daemon/shm_ring.hpp"
#include "drivers/result.hpp"

namespace uroce::drivers::daemon {

// A device's shared region, mapped, with its wake-up fds.
class Region {
 public:
  Region() = default;
  Region(void* base, size_t bytes, ShmGeometry geo, int wake_fd, int kick_fd) noexcept
      : base_(base), bytes_(bytes), geo_(geo), wake_fd_(wake_fd), kick_fd_(kick_fd) {}
  ~Region();
  Region(Region&& o) noexcept { *this = std::move(o); }
  Region& operator=(Region&& o) noexcept;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  void* base() const noexcept { return base_; }
  size_t bytes() const noexcept { return bytes_; }
  const ShmGeometry& geometry() const noexcept { return geo_; }
  int wake_fd() const noexcept { return wake_fd_; }  // the daemon writes it
  int kick_fd() const noexcept { return kick_fd_; }  // we write it

 private:
  void reset() noexcept;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  ShmGeometry geo_{};
  int wake_fd_ = -1;
  int kick_fd_ = -1;
};

class Link {
 public:
  // Connects to the daemon at `path` and says Hello as `program`.
  // Errors: the socket's (ENOENT, ECONNREFUSED: no daemon there; EACCES),
  // EPROTO (another protocol version, or an answer that cannot be).
  static Result<std::shared_ptr<Link>> connect(const std::string& path, std::string_view program);
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  uint64_t client_id() const noexcept { return client_id_; }
  const std::vector<DeviceDesc>& devices() const noexcept { return devices_; }
  bool alive() const noexcept { return alive_.load(std::memory_order_acquire); }

  // Attaches to device `index`: its shared region, mapped and checked.
  Result<Region> open_device(uint32_t index);
  // 0 or an errno: the daemon's answer, or EIO once it is gone.
  int alloc_qpn(uint32_t device, uint32_t* qpn);
  int free_qpn(uint32_t device, uint32_t qpn);
  int bind(const BindReq& req, uint16_t* port);
  int unbind(uint64_t token);
  int listen(uint64_t token, bool on);

  struct Handlers {
    // The client's QPs on `device` as a JSON array (from the events
    // thread: may wait on the device's engine).
    std::function<std::string(uint32_t device)> qp_dump;
    // Once, when the daemon has gone away (from the events thread, with no
    // lock of the link held: it may make no request, which would fail EIO).
    std::function<void()> gone;
  };
  // Starts the events thread (once).
  void start_events(Handlers h);

 private:
  Link() = default;
  // One request and its reply (status in the reply's header).
  int request(MsgType type, std::span<const uint8_t> body, Message* reply);
  void events_loop();
  void mark_gone();    // requests fail EIO from now on (any thread)
  void forget_in_child() noexcept;  // the atfork child handler: see the header comment
  static void atfork_prepare() noexcept;
  static void atfork_parent() noexcept;
  static void atfork_child() noexcept;
  void report_gone();  // the gone handler, once (the events thread, no lock held)

  int ctl_fd_ = -1;
  int ev_fd_ = -1;
  int stop_fd_ = -1;  // eventfd: stops the events thread
  uint64_t client_id_ = 0;
  std::vector<DeviceDesc> devices_;
  std::mutex mu_;     // one request at a time
  uint32_t seq_ = 0;  // under mu_
  std::atomic<bool> alive_{true};
  std::atomic<bool> gone_reported_{false};
  Handlers handlers_;
  std::thread events_;
};

}  // namespace uroce::drivers::daemon
