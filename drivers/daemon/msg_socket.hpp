// Messages over a SOCK_SEQPACKET Unix socket (proto.hpp): one MsgHeader
// and its body per datagram, file descriptors beside it (SCM_RIGHTS).
// Both sides use these; nothing here trusts what it receives beyond the
// datagram's own length.
#pragma once

#include <cstdint>
#include <span>
#include <optional>
#include <string>
#include <vector>

#include "drivers/daemon/proto.hpp"

namespace uroce::drivers::daemon {

inline constexpr size_t kMaxFds = 4;

// A received message: its header, its body, the fds that came with it
// (owned by the caller: close them).
struct Message {
  MsgHeader hdr{};
  std::vector<uint8_t> body;
  std::vector<int> fds;

  MsgType type() const noexcept { return static_cast<MsgType>(hdr.type); }
  bool is_reply() const noexcept { return (hdr.flags & kReply) != 0; }
  // The body as T when it is exactly that long (variable parts: at least).
  template <class T>
  bool read(T* out, bool exact = true) const noexcept;
  void close_fds() noexcept;
};

// Sends one message; 0 or an errno (EPIPE/ECONNRESET: the peer is gone).
// MSG_NOSIGNAL: a peer that went away is an error, not a SIGPIPE.
// `nonblocking`: EAGAIN instead of waiting when the peer's queue is full
// (the daemon never waits for a client).
int send_message(int fd, const MsgHeader& hdr, std::span<const uint8_t> body, std::span<const int> fds = {},
                 bool nonblocking = false) noexcept;
int send_message(int fd, MsgType type, uint16_t flags, uint32_t seq, int32_t status, std::span<const uint8_t> body,
                 std::span<const int> fds = {}, bool nonblocking = false) noexcept;

// Receives one message: 0; ECONNRESET when the peer closed; EPROTO when the
// datagram is shorter than a header, its body_len disagrees with its
// length, or it was cut (longer than kMaxMessage) or carried more fds than
// kMaxFds (the ones that came are closed); EAGAIN on a non-blocking socket
// with nothing queued; another errno from recvmsg.
int recv_message(int fd, Message* out, bool nonblocking = false) noexcept;

template <class T>
bool Message::read(T* out, bool exact) const noexcept {
  if (exact ? body.size() != sizeof(T) : body.size() < sizeof(T)) return false;
  __builtin_memcpy(out, body.data(), sizeof(T));
  return true;
}

// The bytes of a trivially copyable value (a body).
template <class T>
std::span<const uint8_t> bytes_of(const T& v) noexcept {
  return {reinterpret_cast<const uint8_t*>(&v), sizeof v};
}

// The socket path: UROCE_SOCKET, else the default.
std::string socket_path();

// Whether a program is a client of uroced, and at which socket (the
// drop-in's rule, DESIGN.md "The shared device"): UROCE_DEVICE asks for an
// in-process device; UROCE_SOCKET names the daemon's socket; UROCE_CONFIG
// asks for the devices of that file, in-process; otherwise the daemon's
// default socket, when it is there.  `device_var`, `config_var`: the
// configuration's variable names (lib/config).
std::optional<std::string> client_socket(std::string_view device_var, std::string_view config_var);

}  // namespace uroce::drivers::daemon
