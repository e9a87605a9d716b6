#include "drivers/daemon/msg_socket.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace uroce::drivers::daemon {

void Message::close_fds() noexcept {
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  fds.clear();
}

int send_message(int fd, const MsgHeader& hdr, std::span<const uint8_t> body, std::span<const int> fds,
                 bool nonblocking) noexcept {
  if (sizeof hdr + body.size() > kMaxMessage || fds.size() > kMaxFds) return EMSGSIZE;
  iovec iov[2] = {{const_cast<MsgHeader*>(&hdr), sizeof hdr},
                  {const_cast<uint8_t*>(body.data()), body.size()}};
  msghdr mh{};
  mh.msg_iov = iov;
  mh.msg_iovlen = body.empty() ? 1 : 2;
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * kMaxFds)];
  if (!fds.empty()) {
    std::memset(ctl, 0, sizeof ctl);
    mh.msg_control = ctl;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  const int flags = MSG_NOSIGNAL | (nonblocking ? MSG_DONTWAIT : 0);
  for (;;) {
    const ssize_t n = ::sendmsg(fd, &mh, flags);
    if (n >= 0) return static_cast<size_t>(n) == sizeof hdr + body.size() ? 0 : EMSGSIZE;
    if (errno == EINTR) continue;
    return errno;
  }
}

int send_message(int fd, MsgType type, uint16_t flags, uint32_t seq, int32_t status, std::span<const uint8_t> body,
                 std::span<const int> fds, bool nonblocking) noexcept {
  const MsgHeader hdr{static_cast<uint16_t>(type), flags, seq, status, static_cast<uint32_t>(body.size())};
  return send_message(fd, hdr, body, fds, nonblocking);
}

int recv_message(int fd, Message* out, bool nonblocking) noexcept {
  out->fds.clear();
  const int dontwait = nonblocking ? MSG_DONTWAIT : 0;
  // The datagram's length first (MSG_TRUNC reports it whole), so that the
  // body gets exactly its room.
  MsgHeader hdr{};
  ssize_t n;
  for (;;) {
    n = ::recv(fd, &hdr, sizeof hdr, MSG_PEEK | MSG_TRUNC | dontwait);
    if (n >= 0 || errno != EINTR) break;
  }
  if (n < 0) return errno;
  const size_t total = static_cast<size_t>(n);
  out->body.resize(total > sizeof hdr && total <= kMaxMessage ? total - sizeof hdr : 0);
  iovec iov[2] = {{&hdr, sizeof hdr}, {out->body.data(), out->body.size()}};
  msghdr mh{};
  mh.msg_iov = iov;
  mh.msg_iovlen = out->body.empty() ? 1 : 2;
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int) * kMaxFds)];
  mh.msg_control = ctl;
  mh.msg_controllen = sizeof ctl;
  for (;;) {
    n = ::recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | dontwait);
    if (n >= 0 || errno != EINTR) break;
  }
  if (n < 0) return errno;
  // Whatever fds came are ours to close, even when the message is refused.
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < k; ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      out->fds.push_back(f);
    }
  }
  if (n == 0) {
    out->close_fds();
    return ECONNRESET;
  }
  const bool cut = (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  if (cut || total > kMaxMessage || static_cast<size_t>(n) < sizeof hdr ||
      hdr.body_len != static_cast<size_t>(n) - sizeof hdr || out->fds.size() > kMaxFds) {
    out->close_fds();
    return EPROTO;
  }
  out->hdr = hdr;
  return 0;
}

std::string socket_path() {
  const char* v = std::getenv(std::string(kEnvSocket).c_str());
  return v != nullptr && *v != '\0' ? std::string(v) : std::string(kDefaultSocket);
}

std::optional<std::string> client_socket(std::string_view device_var, std::string_view config_var) {
  auto set = [](std::string_view name) {
    const char* v = std::getenv(std::string(name).c_str());
    return v != nullptr && *v != '\0';
  };
  if (set(device_var)) return std::nullopt;
  if (set(kEnvSocket)) return socket_path();
  if (set(config_var)) return std::nullopt;
  struct stat st {};
  const std::string def(kDefaultSocket);
  if (::stat(def.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return def;
  return std::nullopt;
}

}  // namespace uroce::drivers::daemon
