// The rdma_cm port space of the host uroced serves (issue 15): every
// rdma_cm id of every client that is bound to an address and port, as the
// kernel's rdma_cm keeps them for every process (cma_ps_*), so that
//   - binding conflicts hold across processes (rdma_bind_addr's
//     EADDRINUSE / EADDRNOTAVAIL, cma_check_port's rules, as the in-process
//     model applies them to its own ids: cm/rdma_cm_addr.cpp);
//   - port 0 picks a port no process holds (the ephemeral range);
//   - a REQ or SIDR_REQ finds its listener's process: by port space and
//     port (the rdma_cm service ID) and the destination address in the
//     rdma_cm header of its private data (several processes may listen on
//     one port with different addresses).
//
// A binding is named by its client and the client's token for the id.
//
// A listener that its (still running) program ended leaves its port
// "relistening" for kRelistenGraceNs: a REQ that finds nobody there then
// is left unanswered for the peer's retry instead of rejected, as the
// in-process CM does in its start-up grace (CmConfig::no_listener_grace_ns)
// — a program that serves one connection per listener (perftest's -R
// server: its out-of-band connection, then the test's) listens again on
// the same port a moment later, while its peer may already be connecting.
// A client that went away (release) leaves no such grace: its port
// refuses at once, as ib_cm.
//
// Threads: any; one mutex (the control thread binds, the engines find
// listeners when a REQ arrives).  Pure: no I/O.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <vector>

#include "transport/neigh.hpp"

namespace uroce::daemon {

using ClientId = uint64_t;

class PortSpace {
 public:
  static constexpr uint16_t kEphemeralLow = 32768;  // Linux's ip_local_port_range
  static constexpr uint16_t kEphemeralHigh = 60999;

  static constexpr uint64_t kRelistenGraceNs = 3'000'000'000;

  // `clock`: nanoseconds, for the relistening grace (default: the
  // steady clock).
  explicit PortSpace(uint64_t seed = 0, std::function<uint64_t()> clock = {});

  struct Binding {
    ClientId client = 0;
    uint64_t token = 0;
    int ps = 0;
    uint16_t port = 0;
    transport::IpAddr ip{};
    bool wildcard = false;   // any address (or a loopback one: Linux's cma_any_addr view)
    bool reuseaddr = false;
    bool afonly = false;
    bool listening = false;
  };

  // Binds (client, token); `port` 0 picks one.  The port, or an errno:
  // EADDRINUSE (the same address and port), EADDRNOTAVAIL (an overlap
  // through a wildcard), EEXIST (the token is bound already).
  int bind(ClientId client, uint64_t token, int ps, const transport::IpAddr& ip, bool wildcard, uint16_t port,
           bool reuseaddr, bool afonly, uint16_t* out_port);
  // 0, or ENOENT when (client, token) is not bound.
  int unbind(ClientId client, uint64_t token);
  // 0, ENOENT; a listen that now conflicts with a reuseaddr sharer is
  // EADDRINUSE (Linux checks again at listen).
  int listen(ClientId client, uint64_t token, bool on);
  // Every binding of `client` (it went away).
  void release(ClientId client);

  // The listener for a request to (ps, port) at `dst`: a binding of that
  // exact address first, else a wildcard one of its family (an IPv6
  // wildcard also takes IPv4 unless afonly).
  std::optional<Binding> listener(int ps, uint16_t port, const transport::IpAddr& dst) const;
  // A listener on (ps, port) was ended by its program within
  // kRelistenGraceNs (see above).
  bool relistening(int ps, uint16_t port) const;

  size_t size() const;
  std::vector<Binding> bindings() const;  // for `uroce`

 private:
  // Conflict of `b` with the bindings of its (ps, port): 0 or an errno.
  int conflict_locked(const Binding& b, uint16_t port) const;
  static bool covers(const Binding& a, const transport::IpAddr& other_ip);
  void listen_ended_locked(int ps, uint16_t port);

  mutable std::mutex mu_;
  std::map<std::pair<int, uint16_t>, std::vector<Binding>> ports_;
  std::map<std::pair<ClientId, uint64_t>, std::pair<int, uint16_t>> by_token_;
  std::map<std::pair<int, uint16_t>, uint64_t> listen_ended_;  // when a program last ended a listener there
  std::function<uint64_t()> clock_;
  std::mt19937 rng_;
  uint32_t next_ = 0;
};

}  // namespace uroce::daemon
