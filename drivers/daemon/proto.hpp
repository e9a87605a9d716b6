// What a client process and uroced say over the daemon's Unix socket
// (issue 15; DESIGN.md "The shared device").
//
// Two SOCK_SEQPACKET connections per client, one message per datagram:
//   control  the one the client opens: requests and their replies, one at a
//            time (a request waits for its reply)
//   events   a socketpair the daemon makes and hands over in the Hello
//            reply: what the daemon starts (a QP dump for `uroce qp`), and
//            how each side learns that the other is gone (POLLHUP)
// File descriptors travel as SCM_RIGHTS beside a reply: the events socket
// (Hello), a device's shared-memory region and its two wake-up eventfds
// (OpenDevice).
//
// Every message is a MsgHeader and its body; bodies are fixed layouts of
// fixed-size integers (both ends are the same build: Hello refuses another
// protocol version) followed, for some, by a variable part whose length
// the header gives.  The daemon checks every length and value it receives
// and drops a client that sends what cannot be (DESIGN.md: a client that
// misbehaves never takes the daemon down).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace uroce::drivers::daemon {

inline constexpr uint32_t kProtoVersion = 1;
// The socket, unless UROCE_SOCKET names another (the daemon and the
// libraries read the same variable).
inline constexpr std::string_view kDefaultSocket = "/run/uroce/uroced.sock";
inline constexpr std::string_view kEnvSocket = "UROCE_SOCKET";
// A datagram, either way: below the kernel's default socket send buffer
// (net.core.wmem_default, 208 KiB), which bounds a SOCK_SEQPACKET datagram.
inline constexpr size_t kMaxMessage = 192 * 1024;
inline constexpr uint32_t kMaxDevices = 16;
inline constexpr uint32_t kMaxDeviceAddrs = 16;

#define UROCE_DAEMON_MSGS(X)                                                                \
  X(Hello, 1, "client: protocol version; reply: the devices, the events socket")            \
  X(OpenDevice, 2, "client: attach to a device; reply: its shared region and wake fds")    \
  X(AllocQpn, 3, "client: a QPN for a new QP; reply: the number")                          \
  X(FreeQpn, 4, "client: a QPN its QP no longer uses")                                     \
  X(Bind, 5, "client: an rdma_cm id's (port space, address, port); reply: the port")       \
  X(Unbind, 6, "client: that binding is gone")                                             \
  X(Listen, 7, "client: the binding listens (REQs for it come to this client)")           \
  X(Admin, 8, "a tool: what the daemon serves (AdminWhat); reply: JSON")                   \
  X(QpDump, 9, "daemon (events): the client's QPs, for `uroce qp`; reply: JSON")

enum class MsgType : uint16_t {
#define X(name, num, text) name = num,
  UROCE_DAEMON_MSGS(X)
#undef X
};

constexpr std::string_view msg_name(MsgType t) noexcept {
  switch (t) {
#define X(name, num, text) \
  case MsgType::name:      \
    return #name;
    UROCE_DAEMON_MSGS(X)
#undef X
  }
  return "unknown";
}

struct MsgHeader {
  uint16_t type;     // MsgType
  uint16_t flags;    // kReply on replies
  uint32_t seq;      // a reply carries its request's
  int32_t status;    // replies: 0 or an errno
  uint32_t body_len; // bytes after this header
};
static_assert(sizeof(MsgHeader) == 16);
inline constexpr uint16_t kReply = 1;

// ---- Hello --------------------------------------------------------------------------
struct HelloReq {
  uint32_t version;  // kProtoVersion
  uint32_t reserved;
  char program[64];  // the client's name (argv[0]'s last part), for `uroce client`
};
static_assert(sizeof(HelloReq) == 72);

struct AddrDesc {
  uint8_t ip[16];  // IPv4-mapped for IPv4
  uint8_t prefix;  // in the address's own family (/24 for IPv4)
  uint8_t reserved[3];
};
static_assert(sizeof(AddrDesc) == 20);

struct DeviceDesc {
  char name[64];     // "uroce0"
  char port[128];    // the daemon's port, as probed
  char driver[32];   // "net_af_packet"
  char netdev[32];   // the kernel netdev behind it, if any
  uint8_t mac[6];
  uint16_t mtu;      // IP MTU
  uint32_t max_qpn;  // QPNs are below this
  uint32_t naddrs;
  AddrDesc addrs[kMaxDeviceAddrs];
  uint16_t vlan;     // the 802.1Q VLAN ID its frames carry; 0: untagged
  uint16_t reserved[3];
};
static_assert(sizeof(DeviceDesc) == 272 + 20 * kMaxDeviceAddrs + 8);

struct HelloRep {
  uint32_t version;
  uint32_t ndevices;  // DeviceDesc[ndevices] follow
  uint64_t client_id; // what `uroce client` lists it as
};
static_assert(sizeof(HelloRep) == 16);

// ---- OpenDevice ---------------------------------------------------------------------
struct OpenDeviceReq {
  uint32_t device;  // index into Hello's list
  uint32_t reserved;
};
struct OpenDeviceRep {
  uint64_t bytes;      // of the region (fd 0)
  uint32_t slot_bytes;
  uint32_t tx_slots;
  uint32_t rx_slots;
  uint32_t reserved;
};
static_assert(sizeof(OpenDeviceRep) == 24);
// fds with the reply: [0] the region (memfd), [1] wake (daemon writes when
// it filled RX while the client waits), [2] kick (client writes when it
// filled TX while the daemon waits).

// ---- QPNs ---------------------------------------------------------------------------
struct QpnReq {
  uint32_t device;
  uint32_t qpn;  // FreeQpn
};
struct QpnRep {
  uint32_t qpn;
  uint32_t reserved;
};

// ---- rdma_cm port space -------------------------------------------------------------
// One binding of an rdma_cm id, named by the client's token for it.
struct BindReq {
  uint64_t token;
  int32_t ps;          // RDMA_PS_*
  uint16_t port;       // host order; 0: pick one
  uint8_t ip[16];      // IPv4-mapped for IPv4
  uint8_t is_v4;
  uint8_t reuseaddr;
  uint8_t afonly;
  uint8_t reserved[6];
};
static_assert(sizeof(BindReq) == 40);
struct BindRep {
  uint16_t port;
  uint16_t reserved[3];
};
struct TokenReq {
  uint64_t token;
  uint32_t on;  // Listen: 1 listening, 0 no longer
  uint32_t reserved;
};

// ---- Admin --------------------------------------------------------------------------
enum class AdminWhat : uint32_t { kDevices = 1, kClients = 2, kQps = 3, kStats = 4 };
struct AdminReq {
  uint32_t what;
  uint32_t reserved;
};

// ---- QpDump (events socket, daemon -> client) ---------------------------------------
struct QpDumpReq {
  uint32_t device;
  uint32_t reserved;
};
// reply body: JSON text (an array of QPs)

}  // namespace uroce::drivers::daemon
