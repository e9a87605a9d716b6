#include "daemon/server.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "cm/device_cm.hpp"
#include "lib/util/log.hpp"
#include "transport/rnic/rnic.hpp"

namespace uroce::daemon {

namespace proto = drivers::daemon;
using nlohmann::json;
using proto::Message;
using proto::MsgType;

namespace {

// epoll tags: the id in the high bits, what it is in the low two.
enum class Tag : uint64_t { Listen = 0, Ctl = 1, Events = 2, Internal = 3 };
constexpr uint64_t tag(ClientId id, Tag t) { return (id << 2) | static_cast<uint64_t>(t); }
constexpr ClientId kStopId = 1;
constexpr ClientId kViolationId = 2;

uint64_t now_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// CAP_NET_RAW in the peer's effective set (/proc/<pid>/status); a process
// whose status cannot be read is privileged only as root.
bool has_net_raw(pid_t pid, uid_t uid) {
  std::ifstream st("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(st, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const uint64_t caps = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (caps & (uint64_t{1} << 13)) != 0;  // CAP_NET_RAW
  }
  return uid == 0;
}

// Whether the peer shares the daemon's scheduling group: the same cgroups
// and the same autogroup (a session's: Linux groups the root cgroup's
// tasks by session).  Busy polling hands the CPU over with sched_yield,
// which passes it only within a group; across groups the scheduler kept a
// polling daemon off its CPU for up to half a second (DESIGN.md "The
// shared device").  Unreadable: not shared.
std::string proc_text(const std::string& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
// "/autogroup-N nice K": the group's name, without its nice value.
std::string autogroup_of(const std::string& proc_dir) {
  const std::string t = proc_text(proc_dir + "/autogroup");
  return t.substr(0, t.find(' '));
}
bool shares_sched_group(pid_t pid) {
  const std::string dir = "/proc/" + std::to_string(pid);
  const std::string cg = proc_text(dir + "/cgroup");
  if (cg.empty() || cg != proc_text("/proc/self/cgroup")) return false;
  // No autogroup file on either side (a kernel without autogroups): the
  // cgroups decide.
  return autogroup_of(dir) == autogroup_of("/proc/self");
}

std::string mac_text(const uint8_t* m) {
  char b[18];
  std::snprintf(b, sizeof b, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  return b;
}

std::string ip_text(const wire::Ipv6Addr& a) {
  const transport::IpAddr ip{a};
  char b[64];
  if (ip.is_v4()) {
    const uint32_t v = ip.as_v4();
    std::snprintf(b, sizeof b, "%u.%u.%u.%u", v >> 24, (v >> 16) & 255, (v >> 8) & 255, v & 255);
    return b;
  }
  std::string s;
  for (int i = 0; i < 16; i += 2) {
    std::snprintf(b, sizeof b, "%s%x", i == 0 ? "" : ":", (a[i] << 8) | a[i + 1]);
    s += b;
  }
  return s;
}

template <class Set>
json counters_json(const Set& set) {
  json o = json::object();
  set.for_each([&](std::string_view name, std::string_view, uint64_t v) { o[std::string(name)] = v; });
  return o;
}

}  // namespace

struct Server::Session {
  ClientId id = 0;
  int ctl = -1;
  int ev = -1;  // our end of the events socketpair
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  bool privileged = false;
  bool same_group = false;  // it shares our scheduling group (shares_sched_group)
  bool hello = false;
  std::string program;
  std::vector<Attachment*> at;  // by device index; nullptr: not opened
};

struct Server::AdminWait {
  ClientId admin = 0;
  Message request;  // the Admin request, answered at the end
  std::map<uint32_t, std::pair<ClientId, uint32_t>> outstanding;  // dump seq -> (client, device)
  json results = json::array();
  uint64_t deadline_ms = 0;
};

Server::Server(ServerConfig cfg, std::vector<DeviceEntry> devices, PortSpace& ports)
    : cfg_(std::move(cfg)), devices_(std::move(devices)), ports_(ports) {}

Server::~Server() {
  for (auto& [id, s] : sessions_) {
    for (size_t d = 0; d < s->at.size(); ++d)
      if (s->at[d] != nullptr) devices_[d].sw->detach(s->at[d]);
    ports_.release(id);
    ::close(s->ctl);
    ::close(s->ev);
  }
  for (int fd : {listen_fd_, epoll_fd_, stop_fd_, violation_fd_})
    if (fd >= 0) ::close(fd);
  if (listen_fd_ >= 0) ::unlink(cfg_.socket_path.c_str());
}

drivers::Status Server::start() {
  auto fail = [](int code, std::string what) {
    return drivers::Error{code, what + ": " + std::strerror(code)};
  };
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (cfg_.socket_path.empty() || cfg_.socket_path.size() >= sizeof sa.sun_path)
    return drivers::Error{ENAMETOOLONG, "socket path empty or too long: " + cfg_.socket_path};
  std::memcpy(sa.sun_path, cfg_.socket_path.data(), cfg_.socket_path.size());
  // Its directory (/run/uroce), readable by everyone who may connect.
  if (const auto slash = cfg_.socket_path.rfind('/'); slash != std::string::npos && slash != 0) {
    const std::string dir = cfg_.socket_path.substr(0, slash);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return fail(errno, "mkdir " + dir);
  }
  // A socket file left by a daemon that died is replaced; a live one is not.
  struct stat st {};
  if (::lstat(cfg_.socket_path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return drivers::Error{EEXIST, cfg_.socket_path + " exists and is not a socket"};
    const int probe = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    const bool live = probe >= 0 && ::connect(probe, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    if (probe >= 0) ::close(probe);
    if (live) return drivers::Error{EADDRINUSE, "another uroced serves " + cfg_.socket_path};
    ::unlink(cfg_.socket_path.c_str());
  }
  listen_fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) return fail(errno, "socket");
  const mode_t old = ::umask(0177);  // no window where the socket is open wider than asked
  const int b = ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  const int bind_err = errno;
  ::umask(old);
  if (b != 0) return fail(bind_err, "bind " + cfg_.socket_path);
  if (cfg_.socket_group && ::chown(cfg_.socket_path.c_str(), static_cast<uid_t>(-1), *cfg_.socket_group) != 0)
    return fail(errno, "chown " + cfg_.socket_path);
  if (::chmod(cfg_.socket_path.c_str(), cfg_.socket_mode) != 0) return fail(errno, "chmod " + cfg_.socket_path);
  if (::listen(listen_fd_, 128) != 0) return fail(errno, "listen");
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  violation_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (epoll_fd_ < 0 || stop_fd_ < 0 || violation_fd_ < 0) return fail(errno, "epoll/eventfd");
  auto add = [&](int fd, uint64_t t) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.u64 = t;
    return ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e);
  };
  if (add(listen_fd_, tag(0, Tag::Listen)) != 0 || add(stop_fd_, tag(kStopId, Tag::Internal)) != 0 ||
      add(violation_fd_, tag(kViolationId, Tag::Internal)) != 0)
    return fail(errno, "epoll_ctl");
  next_id_ = 3;  // 1 and 2 tag the internal fds
  return {};
}

void Server::stop() noexcept {
  stopping_.store(true);
  const uint64_t one = 1;
  if (stop_fd_ >= 0) [[maybe_unused]] ssize_t w = ::write(stop_fd_, &one, sizeof one);
}

void Server::report_violation(ClientId client) noexcept {
  {
    std::lock_guard lock(violations_mu_);
    violations_.push_back(client);
  }
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t w = ::write(violation_fd_, &one, sizeof one);
}

void Server::run() {
  std::array<epoll_event, 64> evs{};
  while (!stopping_.load()) {
    int timeout = -1;
    if (!admin_waits_.empty()) {
      const uint64_t now = now_ms();
      uint64_t soonest = UINT64_MAX;
      for (const auto& w : admin_waits_) soonest = std::min(soonest, w->deadline_ms);
      timeout = soonest <= now ? 0 : static_cast<int>(soonest - now);
    }
    const int n = ::epoll_wait(epoll_fd_, evs.data(), static_cast<int>(evs.size()), timeout);
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < n; ++i) {
      const uint64_t t = evs[i].data.u64;
      const ClientId id = t >> 2;
      switch (static_cast<Tag>(t & 3)) {
        case Tag::Listen:
          accept_one();
          break;
        case Tag::Ctl:
          if (auto it = sessions_.find(id); it != sessions_.end()) on_ctl(*it->second);
          break;
        case Tag::Events:
          if (auto it = sessions_.find(id); it != sessions_.end()) on_events(*it->second);
          break;
        case Tag::Internal: {
          uint64_t v;
          [[maybe_unused]] const ssize_t r = ::read(id == kStopId ? stop_fd_ : violation_fd_, &v, sizeof v);
          if (id == kViolationId) {
            std::vector<ClientId> ended;
            {
              std::lock_guard lock(violations_mu_);
              ended.swap(violations_);
            }
            for (ClientId c : ended) end_session(c, "its shared ring held what cannot be");
          }
          break;
        }
      }
    }
    // QP listings whose time is up answer with what came.
    const uint64_t now = now_ms();
    for (size_t i = 0; i < admin_waits_.size();) {
      if (admin_waits_[i]->outstanding.empty() || admin_waits_[i]->deadline_ms <= now) {
        finish_admin(*admin_waits_[i]);
        admin_waits_.erase(admin_waits_.begin() + static_cast<long>(i));
      } else {
        ++i;
      }
    }
  }
  // Every client sees its sockets hang up (IBV_EVENT_DEVICE_FATAL there).
  std::vector<ClientId> ids;
  for (const auto& [id, s] : sessions_) ids.push_back(id);
  for (ClientId id : ids) end_session(id, "the daemon stops");
}

void Server::accept_one() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    if (sessions_.size() >= cfg_.max_clients) {
      log_line(LogType::Daemon, LogLevel::Warning, "uroced: refusing a client: %u already", cfg_.max_clients);
      ::close(fd);
      continue;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      ::close(fd);
      continue;
    }
    auto s = std::make_unique<Session>();
    s->id = next_id_++;
    s->ctl = fd;
    s->pid = cred.pid;
    s->uid = cred.uid;
    s->gid = cred.gid;
    s->privileged = has_net_raw(cred.pid, cred.uid);
    s->same_group = shares_sched_group(cred.pid);
    s->at.assign(devices_.size(), nullptr);
    epoll_event e{};
    e.events = EPOLLIN | EPOLLRDHUP;
    e.data.u64 = tag(s->id, Tag::Ctl);
    if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &e) != 0) {
      ::close(fd);
      continue;
    }
    sessions_[s->id] = std::move(s);
    nsessions_.store(sessions_.size(), std::memory_order_relaxed);
  }
}

void Server::end_session(ClientId id, const char* why) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  Session& s = *it->second;
  if (s.hello)
    log_line(LogType::Daemon, LogLevel::Info, "uroced: client %llu (%s, pid %d) ends: %s",
             static_cast<unsigned long long>(id), s.program.c_str(), static_cast<int>(s.pid), why);
  for (size_t d = 0; d < s.at.size(); ++d)
    if (s.at[d] != nullptr) devices_[d].sw->detach(s.at[d]);
  ports_.release(id);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s.ctl, nullptr);
  ::close(s.ctl);
  if (s.ev >= 0) {
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s.ev, nullptr);
    ::close(s.ev);
  }
  for (auto& w : admin_waits_) {
    std::erase_if(w->outstanding, [&](const auto& kv) { return kv.second.first == id; });
  }
  std::erase_if(admin_waits_, [&](const auto& w) { return w->admin == id; });
  sessions_.erase(it);
  nsessions_.store(sessions_.size(), std::memory_order_relaxed);
}

void Server::on_ctl(Session& s) {
  const ClientId id = s.id;
  for (;;) {
    Message m;
    const int rc = proto::recv_message(s.ctl, &m, true);
    if (rc == EAGAIN) return;
    if (rc != 0) {
      end_session(id, rc == ECONNRESET ? "it hung up" : "it sent what cannot be a message");
      return;
    }
    const bool ok = !m.is_reply() && handle(s, m);
    m.close_fds();  // a client sends none; any that came are not kept
    if (!ok) {
      end_session(id, "it sent a request that cannot be");
      return;
    }
    if (sessions_.count(id) == 0) return;
  }
}

void Server::on_events(Session& s) {
  const ClientId id = s.id;
  for (;;) {
    Message m;
    const int rc = proto::recv_message(s.ev, &m, true);
    if (rc == EAGAIN) return;
    if (rc != 0) {
      end_session(id, rc == ECONNRESET ? "it hung up" : "it sent what cannot be a message");
      return;
    }
    m.close_fds();
    if (m.type() != MsgType::QpDump || !m.is_reply()) continue;  // nothing else is asked of it
    for (auto& w : admin_waits_) {
      auto o = w->outstanding.find(m.hdr.seq);
      if (o == w->outstanding.end() || o->second.first != id) continue;
      const uint32_t dev = o->second.second;
      w->outstanding.erase(o);
      json qps = json::parse(std::string(m.body.begin(), m.body.end()), nullptr, false);
      if (!qps.is_array()) qps = json::array();
      // The daemon's own view beside what the client says: which QPNs it
      // owns here and what each claimed.
      json owned = json::array();
      if (dev < devices_.size() && s.at[dev] != nullptr) {
        for (const Switch::QpOwned& q : devices_[dev].sw->owned_by(s.at[dev])) {
          json o2 = {{"qpn", q.qpn}};
          if (q.claimed) o2["claim"] = {{"gid", ip_text(q.path.gid)}, {"qpn", q.path.qpn}};
          owned.push_back(o2);
        }
      }
      w->results.push_back({{"client", id},
                            {"pid", s.pid},
                            {"program", s.program},
                            {"device", dev < devices_.size() ? devices_[dev].dev->name() : ""},
                            {"qps", qps},
                            {"daemon_view", owned}});
    }
  }
}

void Server::reply(Session& s, const Message& req, int status, std::span<const uint8_t> body,
                   std::span<const int> fds) {
  // The client waits for this; a client that does not read fails its own
  // request (the send would block: dropped, and the client ended).
  if (proto::send_message(s.ctl, req.type(), proto::kReply, req.hdr.seq, status, body, fds, true) != 0)
    report_violation(s.id);
}

bool Server::handle(Session& s, const Message& m) {
  switch (m.type()) {
    case MsgType::Hello:
      return hello(s, m);
    case MsgType::Admin:
      return admin(s, m);
    case MsgType::OpenDevice:
      return s.hello && open_device(s, m);
    case MsgType::AllocQpn:
    case MsgType::FreeQpn: {
      proto::QpnReq q{};
      if (!s.hello || !m.read(&q)) return false;
      if (q.device >= devices_.size() || s.at[q.device] == nullptr) {
        reply(s, m, ENODEV);
        return true;
      }
      Switch& sw = *devices_[q.device].sw;
      if (m.type() == MsgType::FreeQpn) {
        reply(s, m, sw.free_qpn(s.at[q.device], q.qpn));
        return true;
      }
      proto::QpnRep r{};
      const int rc = sw.alloc_qpn(s.at[q.device], &r.qpn);
      reply(s, m, rc, rc == 0 ? proto::bytes_of(r) : std::span<const uint8_t>{});
      return true;
    }
    case MsgType::Bind: {
      proto::BindReq b{};
      if (!s.hello || !m.read(&b)) return false;
      transport::IpAddr ip;
      std::copy(b.ip, b.ip + 16, ip.bytes.begin());
      // Any address, or a loopback one, binds every device (Linux's
      // cma_any_addr / cma_loopback_addr view, cm/rdma_cm_internal.hpp).
      const bool v4 = ip.is_v4();
      const bool any = v4 ? ip.as_v4() == 0 : ip.bytes == wire::Ipv6Addr{};
      const bool loop = v4 ? (ip.as_v4() >> 24) == 127 : ip.bytes == wire::Ipv6Addr{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
      proto::BindRep r{};
      const int rc = ports_.bind(s.id, b.token, b.ps, ip, any || loop, b.port, b.reuseaddr != 0, b.afonly != 0, &r.port);
      reply(s, m, rc, rc == 0 ? proto::bytes_of(r) : std::span<const uint8_t>{});
      return true;
    }
    case MsgType::Unbind:
    case MsgType::Listen: {
      proto::TokenReq t{};
      if (!s.hello || !m.read(&t)) return false;
      reply(s, m, m.type() == MsgType::Unbind ? ports_.unbind(s.id, t.token) : ports_.listen(s.id, t.token, t.on != 0));
      return true;
    }
    case MsgType::QpDump:
      return false;  // the daemon asks this; a client does not
  }
  return false;  // a type that does not exist
}

bool Server::hello(Session& s, const Message& m) {
  proto::HelloReq h{};
  if (s.hello || !m.read(&h)) return false;
  if (h.version != proto::kProtoVersion) {
    reply(s, m, EPROTO);
    return true;
  }
  h.program[sizeof h.program - 1] = '\0';
  s.program = h.program;
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) != 0) {
    reply(s, m, errno);
    return true;
  }
  s.ev = pair[0];
  epoll_event e{};
  e.events = EPOLLIN | EPOLLRDHUP;
  e.data.u64 = tag(s.id, Tag::Events);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, s.ev, &e);
  // The client's end blocks: its events thread waits in poll, its replies
  // are small.
  const int flags = ::fcntl(pair[1], F_GETFL);
  ::fcntl(pair[1], F_SETFL, flags & ~O_NONBLOCK);

  std::vector<uint8_t> body(sizeof(proto::HelloRep) + devices_.size() * sizeof(proto::DeviceDesc));
  proto::HelloRep r{};
  r.version = proto::kProtoVersion;
  r.ndevices = static_cast<uint32_t>(devices_.size());
  r.client_id = s.id;
  std::memcpy(body.data(), &r, sizeof r);
  for (size_t i = 0; i < devices_.size(); ++i) {
    const transport::Device& d = *devices_[i].dev;
    const transport::DeviceInfo& info = d.info();
    proto::DeviceDesc desc{};
    auto put = [](char* dst, size_t cap, const std::string& v) {
      std::memcpy(dst, v.data(), std::min(cap - 1, v.size()));
    };
    put(desc.name, sizeof desc.name, info.name);
    put(desc.port, sizeof desc.port, info.port);
    put(desc.driver, sizeof desc.driver, info.driver);
    put(desc.netdev, sizeof desc.netdev, info.netdev);
    std::copy(info.mac.begin(), info.mac.end(), desc.mac);
    desc.mtu = info.mtu;
    desc.max_qpn = devices_[i].dev->engine().config().max_qpn;
    if (info.local.vlan_count > 0) desc.vlan = info.local.vlans[0].tci & 0x0FFF;
    for (const config::IpPrefix& a : info.addresses) {
      if (desc.naddrs == proto::kMaxDeviceAddrs) break;
      proto::AddrDesc& ad = desc.addrs[desc.naddrs++];
      std::copy(a.addr.bytes.begin(), a.addr.bytes.end(), ad.ip);
      ad.prefix = a.prefix_len;
    }
    std::memcpy(body.data() + sizeof r + i * sizeof desc, &desc, sizeof desc);
  }
  s.hello = true;
  const int fds[1] = {pair[1]};
  reply(s, m, 0, body, fds);
  ::close(pair[1]);
  log_line(LogType::Daemon, LogLevel::Info, "uroced: client %llu is %s (pid %d, uid %u%s%s)",
           static_cast<unsigned long long>(s.id), s.program.c_str(), static_cast<int>(s.pid),
           static_cast<unsigned>(s.uid), s.privileged ? ", CAP_NET_RAW" : "",
           s.same_group ? ", our scheduling group" : "");
  return true;
}

bool Server::open_device(Session& s, const Message& m) {
  proto::OpenDeviceReq q{};
  if (!m.read(&q)) return false;
  if (q.device >= devices_.size()) {
    reply(s, m, ENODEV);
    return true;
  }
  if (s.at[q.device] != nullptr) {
    reply(s, m, EBUSY);
    return true;
  }
  Switch& sw = *devices_[q.device].sw;
  auto a = sw.attach(s.id, s.privileged, s.same_group);
  if (!a) {
    log_line(LogType::Daemon, LogLevel::Warning, "uroced: client %llu: %s", static_cast<unsigned long long>(s.id),
             a.error().message.c_str());
    reply(s, m, a.error().code != 0 ? a.error().code : ENOMEM);
    return true;
  }
  s.at[q.device] = a->at;
  proto::OpenDeviceRep r{};
  r.bytes = sw.geometry().bytes();
  r.slot_bytes = sw.geometry().slot_bytes;
  r.tx_slots = sw.geometry().tx_slots;
  r.rx_slots = sw.geometry().rx_slots;
  const int fds[3] = {a->region_fd, a->wake_fd, a->kick_fd};
  reply(s, m, 0, proto::bytes_of(r), fds);
  for (int fd : fds) ::close(fd);
  return true;
}

// ---- admin --------------------------------------------------------------------------

std::string Server::devices_json() {
  json out = json::array();
  for (const DeviceEntry& e : devices_) {
    const transport::DeviceInfo& info = e.dev->info();
    const Switch::Sizes sz = e.sw->sizes();
    json addrs = json::array();
    for (const config::IpPrefix& a : info.addresses)
      addrs.push_back(ip_text(a.addr.bytes) + "/" + std::to_string(a.prefix_len));
    const drivers::PortStats ps = e.dev->port().stats();
    out.push_back({{"name", info.name},
                   {"port", info.port},
                   {"driver", info.driver},
                   {"netdev", info.netdev},
                   {"mac", mac_text(info.mac.data())},
                   {"mtu", info.mtu},
                   {"active_mtu", e.dev->rnic().active_mtu_bytes()},
                   {"link", e.dev->port().link_up() ? "up" : "down"},
                   {"addresses", addrs},
                   {"ingress_filter", info.ingress_filter},
                   {"clients", sz.clients},
                   {"qpns", sz.qpns},
                   {"claims", sz.claims},
                   {"mcast_groups", sz.groups},
                   {"cm_connections", sz.connections},
                   {"cm_pending", sz.pending},
                   {"port_stats",
                    {{"rx_frames", ps.rx_frames}, {"rx_bytes", ps.rx_bytes}, {"tx_frames", ps.tx_frames},
                     {"tx_bytes", ps.tx_bytes}, {"rx_dropped", ps.rx_dropped}, {"tx_dropped", ps.tx_dropped}}}});
  }
  return out.dump();
}

std::string Server::clients_json() {
  json out = json::array();
  for (const auto& [id, s] : sessions_) {
    if (!s->hello) continue;
    json devs = json::array();
    for (size_t d = 0; d < s->at.size(); ++d) {
      const Attachment* at = s->at[d];
      if (at == nullptr) continue;
      devs.push_back({{"device", devices_[d].dev->name()},
                      {"qpns", at->qpns},
                      {"rx_frames", at->rx_frames.load(std::memory_order_relaxed)},
                      {"rx_dropped", at->rx_dropped.load(std::memory_order_relaxed)},
                      {"tx_frames", at->tx_frames.load(std::memory_order_relaxed)},
                      {"tx_refused", at->tx_refused.load(std::memory_order_relaxed)}});
    }
    size_t bindings = 0;
    for (const PortSpace::Binding& b : ports_.bindings()) bindings += b.client == id ? 1 : 0;
    out.push_back({{"id", id},
                   {"pid", s->pid},
                   {"uid", s->uid},
                   {"program", s->program},
                   {"cap_net_raw", s->privileged},
                   {"devices", devs},
                   {"rdma_cm_bindings", bindings}});
  }
  return out.dump();
}

std::string Server::stats_json() {
  json out = json::array();
  for (const DeviceEntry& e : devices_) {
    json engine = json::object();
    e.dev->engine().for_each_counter(
        [&](std::string_view name, std::string_view, uint64_t v) { engine[std::string(name)] = v; });
    const auto* cm = e.dev->client<cm::DeviceCm>();
    out.push_back({{"device", e.dev->name()},
                   {"engine", engine},
                   {"switch", counters_json(e.sw->counters())},
                   {"cm_router", counters_json(e.sw->router_counters())},
                   {"cm", cm != nullptr ? counters_json(cm->cm().counters()) : json::object()},
                   {"gsi", cm != nullptr ? counters_json(cm->gsi().counters()) : json::object()}});
  }
  return out.dump();
}

bool Server::admin(Session& s, const Message& m) {
  proto::AdminReq a{};
  if (!m.read(&a)) return false;
  std::string text;
  switch (static_cast<proto::AdminWhat>(a.what)) {
    case proto::AdminWhat::kDevices: text = devices_json(); break;
    case proto::AdminWhat::kClients: text = clients_json(); break;
    case proto::AdminWhat::kStats: text = stats_json(); break;
    case proto::AdminWhat::kQps: {
      auto w = std::make_unique<AdminWait>();
      w->admin = s.id;
      w->request.hdr = m.hdr;
      w->deadline_ms = now_ms() + kQpDumpWaitMs;
      for (auto& [id, c] : sessions_) {
        if (c->ev < 0) continue;
        for (size_t d = 0; d < c->at.size(); ++d) {
          if (c->at[d] == nullptr) continue;
          const proto::QpDumpReq q{static_cast<uint32_t>(d), 0};
          const uint32_t seq = ++dump_seq_;
          if (proto::send_message(c->ev, MsgType::QpDump, 0, seq, 0, proto::bytes_of(q), {}, true) == 0)
            w->outstanding[seq] = {id, static_cast<uint32_t>(d)};
        }
      }
      admin_waits_.push_back(std::move(w));
      return true;
    }
    default:
      reply(s, m, EINVAL);
      return true;
  }
  if (text.size() + sizeof(proto::MsgHeader) > proto::kMaxMessage) text = R"({"error":"too large"})";
  reply(s, m, 0, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  return true;
}

void Server::finish_admin(AdminWait& w) {
  auto it = sessions_.find(w.admin);
  if (it == sessions_.end()) return;
  json out = {{"clients", w.results}, {"unanswered", w.outstanding.size()}};
  std::string text = out.dump();
  if (text.size() + sizeof(proto::MsgHeader) > proto::kMaxMessage) {
    // Too many QPs for one answer: what fits, and that it was cut.
    json cut = {{"clients", json::array()}, {"unanswered", w.outstanding.size()}, {"truncated", true}};
    for (const json& c : w.results) {
      cut["clients"].push_back(c);
      if (cut.dump().size() + sizeof(proto::MsgHeader) > proto::kMaxMessage) {
        cut["clients"].erase(cut["clients"].size() - 1);
        break;
      }
    }
    text = cut.dump();
  }
  reply(*it->second, w.request, 0, {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

}  // namespace uroce::daemon
