#include "drivers/daemon/link.hpp"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "lib/util/quiet_threads.hpp"

namespace uroce::drivers::daemon {

namespace {

Error err(int code, std::string what) { return Error{code, std::move(what) + ": " + std::strerror(code)}; }

}  // namespace

// ---- Region -------------------------------------------------------------------------

Region::~Region() { reset(); }

Region& Region::operator=(Region&& o) noexcept {
  if (this != &o) {
    reset();
    base_ = std::exchange(o.base_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    geo_ = o.geo_;
    wake_fd_ = std::exchange(o.wake_fd_, -1);
    kick_fd_ = std::exchange(o.kick_fd_, -1);
  }
  return *this;
}

void Region::reset() noexcept {
  if (base_ != nullptr) ::munmap(base_, bytes_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (kick_fd_ >= 0) ::close(kick_fd_);
  base_ = nullptr;
  wake_fd_ = kick_fd_ = -1;
}

// ---- Link ---------------------------------------------------------------------------

namespace {

// The links of this process, for the atfork child handler.  Its lock is a
// leaf (nothing else is taken under it), held across fork() by the prepare
// handler so that the child finds the list whole.
std::mutex g_links_mu;
std::vector<Link*>& live_links() {
  static auto* v = new std::vector<Link*>;  // never destroyed: a link may outlive static destruction
  return *v;
}

}  // namespace

void Link::atfork_prepare() noexcept { g_links_mu.lock(); }
void Link::atfork_parent() noexcept { g_links_mu.unlock(); }

void Link::atfork_child() noexcept {
  for (Link* l : live_links()) l->forget_in_child();
  live_links().clear();
  g_links_mu.unlock();
}

void Link::forget_in_child() noexcept {
  gone_reported_.store(true);  // the parent's daemon did not go away
  alive_.store(false, std::memory_order_release);
  for (int* fd : {&ctl_fd_, &ev_fd_, &stop_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  // The events thread is the parent's: there is nothing here to join.  Its
  // handle is moved into an object never destroyed, so that ~Link (should
  // the child destroy the link) neither joins nor terminates.
  if (events_.joinable()) new (std::nothrow) std::thread(std::move(events_));
}

Result<std::shared_ptr<Link>> Link::connect(const std::string& path, std::string_view program) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof sa.sun_path) return Error{ENAMETOOLONG, "uroced socket path too long: " + path};
  std::memcpy(sa.sun_path, path.data(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return err(errno, "socket");
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] { ::pthread_atfork(&atfork_prepare, &atfork_parent, &atfork_child); });
  std::shared_ptr<Link> link(new Link());
  link->ctl_fd_ = fd;
  {
    std::lock_guard lock(g_links_mu);
    live_links().push_back(link.get());
  }
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0)
    return err(errno, "cannot reach uroced at " + path);
  link->stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (link->stop_fd_ < 0) return err(errno, "eventfd");

  HelloReq hello{};
  hello.version = kProtoVersion;
  const size_t n = std::min(program.size(), sizeof hello.program - 1);
  std::memcpy(hello.program, program.data(), n);
  Message rep;
  if (const int rc = link->request(MsgType::Hello, bytes_of(hello), &rep); rc != 0) {
    rep.close_fds();
    if (rc == EPROTO) return Error{EPROTO, "uroced at " + path + " speaks another protocol version"};
    return err(rc, "uroced at " + path + " refused the connection");
  }
  HelloRep hr{};
  const bool shaped = rep.read(&hr, false) && hr.version == kProtoVersion && hr.ndevices <= kMaxDevices &&
                      rep.body.size() == sizeof hr + size_t{hr.ndevices} * sizeof(DeviceDesc) && rep.fds.size() == 1;
  if (!shaped) {
    rep.close_fds();
    return Error{EPROTO, "uroced at " + path + " answered Hello with something that cannot be"};
  }
  link->ev_fd_ = rep.fds[0];
  link->client_id_ = hr.client_id;
  link->devices_.resize(hr.ndevices);
  for (uint32_t i = 0; i < hr.ndevices; ++i) {
    std::memcpy(&link->devices_[i], rep.body.data() + sizeof hr + i * sizeof(DeviceDesc), sizeof(DeviceDesc));
    DeviceDesc& d = link->devices_[i];
    // Strings end inside their fields whatever was sent.
    d.name[sizeof d.name - 1] = d.port[sizeof d.port - 1] = d.driver[sizeof d.driver - 1] = '\0';
    d.netdev[sizeof d.netdev - 1] = '\0';
    if (d.naddrs > kMaxDeviceAddrs) d.naddrs = kMaxDeviceAddrs;
  }
  return link;
}

Link::~Link() {
  {
    std::lock_guard lock(g_links_mu);
    auto& v = live_links();
    v.erase(std::remove(v.begin(), v.end(), this), v.end());
  }
  if (events_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t w = ::write(stop_fd_, &one, sizeof one);
    events_.join();
  }
  for (int fd : {ctl_fd_, ev_fd_, stop_fd_})
    if (fd >= 0) ::close(fd);
}

int Link::request(MsgType type, std::span<const uint8_t> body, Message* reply) {
  if (!alive()) return EIO;  // before the lock: a forked child's may be held by a thread it does not have
  std::lock_guard lock(mu_);
  if (!alive()) return EIO;
  const uint32_t seq = ++seq_;
  if (const int rc = send_message(ctl_fd_, type, 0, seq, 0, body); rc != 0) {
    mark_gone();
    return EIO;
  }
  for (;;) {
    if (const int rc = recv_message(ctl_fd_, reply); rc != 0) {
      mark_gone();
      return EIO;
    }
    if (reply->is_reply() && reply->hdr.seq == seq && reply->type() == type) break;
    reply->close_fds();  // not ours (cannot happen on a well-behaved daemon)
  }
  return reply->hdr.status;
}

void Link::mark_gone() { alive_.store(false, std::memory_order_release); }

void Link::report_gone() {
  // Never under mu_: the handler takes other locks (the rdma_cm model's),
  // which a thread in the middle of a request may hold while it waits here.
  if (!gone_reported_.exchange(true) && handlers_.gone) handlers_.gone();
}

Result<Region> Link::open_device(uint32_t index) {
  const OpenDeviceReq req{index, 0};
  Message rep;
  if (const int rc = request(MsgType::OpenDevice, bytes_of(req), &rep); rc != 0) {
    rep.close_fds();
    return err(rc, "uroced refused device " + std::to_string(index));
  }
  OpenDeviceRep od{};
  ShmGeometry g{};
  if (!rep.read(&od) || rep.fds.size() != 3) {
    rep.close_fds();
    return Error{EPROTO, "uroced answered OpenDevice with something that cannot be"};
  }
  g.slot_bytes = od.slot_bytes;
  g.tx_slots = od.tx_slots;
  g.rx_slots = od.rx_slots;
  struct stat st {};
  if (!g.valid() || od.bytes != g.bytes() || ::fstat(rep.fds[0], &st) != 0 ||
      static_cast<uint64_t>(st.st_size) < od.bytes) {
    rep.close_fds();
    return Error{EPROTO, "uroced's shared region does not have the geometry it announced"};
  }
  void* base = ::mmap(nullptr, od.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, rep.fds[0], 0);
  const int map_err = errno;
  ::close(rep.fds[0]);
  if (base == MAP_FAILED) {
    ::close(rep.fds[1]);
    ::close(rep.fds[2]);
    return err(map_err, "mmap of uroced's shared region");
  }
  Region r(base, od.bytes, g, rep.fds[1], rep.fds[2]);
  if (!shm_header_matches(base, g)) return Error{EPROTO, "uroced's shared region has a header that does not match"};
  return r;
}

int Link::alloc_qpn(uint32_t device, uint32_t* qpn) {
  const QpnReq req{device, 0};
  Message rep;
  const int rc = request(MsgType::AllocQpn, bytes_of(req), &rep);
  rep.close_fds();
  if (rc != 0) return rc;
  QpnRep r{};
  if (!rep.read(&r)) return EIO;
  *qpn = r.qpn;
  return 0;
}

int Link::free_qpn(uint32_t device, uint32_t qpn) {
  const QpnReq req{device, qpn};
  Message rep;
  const int rc = request(MsgType::FreeQpn, bytes_of(req), &rep);
  rep.close_fds();
  return rc;
}

int Link::bind(const BindReq& req, uint16_t* port) {
  Message rep;
  const int rc = request(MsgType::Bind, bytes_of(req), &rep);
  rep.close_fds();
  if (rc != 0) return rc;
  BindRep r{};
  if (!rep.read(&r)) return EIO;
  *port = r.port;
  return 0;
}

int Link::unbind(uint64_t token) {
  const TokenReq req{token, 0, 0};
  Message rep;
  const int rc = request(MsgType::Unbind, bytes_of(req), &rep);
  rep.close_fds();
  return rc;
}

int Link::listen(uint64_t token, bool on) {
  const TokenReq req{token, on ? 1u : 0u, 0};
  Message rep;
  const int rc = request(MsgType::Listen, bytes_of(req), &rep);
  rep.close_fds();
  return rc;
}

void Link::start_events(Handlers h) {
  if (events_.joinable()) return;
  handlers_ = std::move(h);
  if (!alive()) {  // gone before anyone listened
    report_gone();
    return;
  }
  const QuietThreads quiet;  // the program's signals are not this thread's
  events_ = std::thread([this] { events_loop(); });
}

void Link::events_loop() {
  for (;;) {
    pollfd p[2] = {{ev_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents != 0) return;  // the link is being destroyed
    if (p[0].revents == 0) continue;
    Message m;
    const int rc = recv_message(ev_fd_, &m);
    if (rc == EAGAIN || rc == EINTR) continue;
    if (rc != 0) break;  // hung up: the daemon is gone
    m.close_fds();
    if (m.type() == MsgType::QpDump && !m.is_reply()) {
      QpDumpReq q{};
      std::string json = "[]";
      if (m.read(&q) && handlers_.qp_dump) json = handlers_.qp_dump(q.device);
      if (json.size() + sizeof(MsgHeader) > kMaxMessage) {
        // Too many QPs for one answer: the ones that fit (the dump is an
        // array of flat objects, so "},{" only ever separates two).
        const size_t cut = json.rfind("},{", kMaxMessage - sizeof(MsgHeader) - 2);
        json = cut == std::string::npos ? "[]" : json.substr(0, cut + 1) + "]";
      }
      send_message(ev_fd_, MsgType::QpDump, kReply, m.hdr.seq, 0,
                   {reinterpret_cast<const uint8_t*>(json.data()), json.size()});
    }
  }
  mark_gone();
  report_gone();  // from this thread only, holding nothing
}

}  // namespace uroce::drivers::daemon
