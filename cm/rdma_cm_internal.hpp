// What the rdma_cm model's files (rdma_cm.cpp, rdma_cm_addr.cpp,
// rdma_cm_mcast.cpp) share and nothing else sees: address helpers and the
// port range.
#pragma once

#include <arpa/inet.h>
#include <sys/socket.h>

#include <algorithm>
#include <cassert>
#include <cstdint>
#include <cstring>

#include "cm/rdma_cm.hpp"
#include "lib/util/log.hpp"
#include "lib/wire/ipv6.hpp"

namespace uroce::cm::detail {

using transport::IpAddr;

inline constexpr uint16_t kEphemeralLow = 32768;  // as Linux's ip_local_port_range
inline constexpr uint16_t kEphemeralHigh = 60999;

inline bool is_wildcard(const IpAddr& ip) {
  static const IpAddr v4any = IpAddr::v4(0);
  return ip == v4any || ip == IpAddr{};
}

// 127.0.0.0/8 and ::1.  As a destination, Linux's rdma_cm resolves them
// to the first device with an active port (cma_resolve_loopback); the ids
// keep the loopback addresses.
inline bool is_loopback(const IpAddr& ip) {
  static const IpAddr v6one = [] {
    IpAddr a;
    a.bytes[15] = 1;
    return a;
  }();
  return (ip.is_v4() && (ip.as_v4() >> 24) == 127) || ip == v6one;
}

// As a source, Linux's rdma_cm counts a loopback address as a wildcard
// (cma_any_addr): rdma_bind_addr(127.0.0.1) binds no device (id->verbs
// stays NULL), a listener on it hears requests to any of the host's
// devices, and it conflicts with every other binding of its port.
// Checked against kernel 6.1's rxe; libfabric's verbs provider relies on
// it to find a device's address when given none.
inline bool binds_any(const IpAddr& ip) { return is_wildcard(ip) || is_loopback(ip); }

// A conn trace line naming an rdma_cm id and an address.
inline void trace_addr(const RdmaId* id, const char* what, const IpAddr& ip, uint16_t port, const char* extra) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (ip.is_v4()) {
    const uint32_t be = htonl(ip.as_v4());
    inet_ntop(AF_INET, &be, text, sizeof text);
  } else {
    inet_ntop(AF_INET6, ip.bytes.data(), text, sizeof text);
  }
  trace_emit(TraceCat::Conn, "rdma_cm id %p: %s %s port %u%s", static_cast<const void*>(id), what, text, port, extra);
}

inline bool in_subnet(const IpAddr& a, const RdmaCmAddr& net) {
  return wire::same_subnet(a.bytes, net.ip.bytes, net.prefix_len);
}

inline void set_sockaddr(sockaddr_storage& ss, const IpAddr& ip, uint16_t port_host) {
  std::memset(&ss, 0, sizeof ss);
  if (ip.is_v4()) {
    auto* sin = reinterpret_cast<sockaddr_in*>(&ss);
    sin->sin_family = AF_INET;
    sin->sin_port = htons(port_host);
    std::memcpy(&sin->sin_addr, ip.bytes.data() + 12, 4);
  } else {
    auto* sin6 = reinterpret_cast<sockaddr_in6*>(&ss);
    sin6->sin6_family = AF_INET6;
    sin6->sin6_port = htons(port_host);
    std::memcpy(&sin6->sin6_addr, ip.bytes.data(), 16);
  }
}

inline const sockaddr* sa(const sockaddr_storage& ss) { return reinterpret_cast<const sockaddr*>(&ss); }


}  // namespace uroce::cm::detail

namespace uroce::cm {

// Runs `f` on the device's engine holding the model's lock (the threading
// rule: engine state on the engine; the lock is taken there, not held
// while waiting).
template <class F>
void RdmaCm::on_engine(RdmaDev& d, F&& f) {
  d.engine().run_sync([&] { from_engine(d, f); });
}

// [engine] One entry into the model from d's loop: the lock, then `f`;
// what d's engine raises for the model meanwhile (CM events: the CM holds
// them; neighbour results, COMM_EST: RdmaDev::later) waits for `f` to end
// and is handled next, in order, still in this entry.  Nothing re-enters
// the model: an entry never begins inside another.
template <class F>
void RdmaCm::from_engine(RdmaDev& d, F&& f) {
  UROCE_ASSERT_ENGINE(d.engine());
  assert(!d.in_entry);
  std::lock_guard lock(mu_);
  d.in_entry = true;
  if (d.cm != nullptr) d.cm->hold_events();
  f();
  if (d.cm != nullptr) d.cm->release_events();  // the events f raised: on_cm_event, in this entry
  while (!d.later.empty()) {
    const EngineInput in = d.later.front();
    d.later.pop_front();
    if (d.cm != nullptr) d.cm->hold_events();
    handle(d, in);
    if (d.cm != nullptr) d.cm->release_events();
  }
  d.in_entry = false;
}

template <class I, class F>
int RdmaCm::with_id(RdmaId* id, I&& input, F&& f) {
  RdmaDev* d = nullptr;
  {
    std::lock_guard lock(mu_);
    if (id == nullptr || ids_.count(id) == 0 || id->dev == nullptr) return EINVAL;
    d = id->dev;
  }
  int rc = EINVAL;
  on_engine(*d, [&] {
    const RdmaIdInput in = input(static_cast<const RdmaId&>(*id));
    if (id->destroyed || !rdma_id_allows(id->state, in)) return;  // it may have moved since the caller looked
    rc = f(*d, in);
  });
  return rc;
}

}  // namespace uroce::cm
