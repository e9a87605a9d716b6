#include "drivers/netdev.hpp"

#include <arpa/inet.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "lib/wire/udp.hpp"

namespace uroce::drivers {
namespace {

unsigned prefix_len(const uint8_t* mask, size_t len) {
  unsigned n = 0;
  for (size_t i = 0; i < len; ++i) n += static_cast<unsigned>(__builtin_popcount(mask[i]));
  return n;
}

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// SO_RCVBUF as small as the kernel allows: the claim socket only absorbs.
constexpr int kClaimRcvBuf = 1;

int bind_claim(int family, std::string* err) {
  const int fd = ::socket(family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    if (err) *err = errno_text("socket");
    return -1;
  }
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &kClaimRcvBuf, sizeof kClaimRcvBuf);
  int rc;
  if (family == AF_INET6) {
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(wire::kRoceV2Port);
    a.sin6_addr = in6addr_any;
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(wire::kRoceV2Port);
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0) {
    if (err) *err = errno_text("bind UDP 4791");
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

std::optional<NetdevInfo> query_netdev(const std::string& name, std::string* err) {
  NetdevInfo info;
  info.name = name;
  info.ifindex = static_cast<int>(::if_nametoindex(name.c_str()));
  if (info.ifindex == 0) {
    if (err) *err = "no network device '" + name + "' in this namespace";
    return std::nullopt;
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    if (err) *err = errno_text("socket");
    return std::nullopt;
  }
  ifreq req{};
  std::strncpy(req.ifr_name, name.c_str(), IFNAMSIZ - 1);
  if (::ioctl(fd, SIOCGIFHWADDR, &req) == 0) {
    std::memcpy(info.mac.data(), req.ifr_hwaddr.sa_data, info.mac.size());
  }
  if (::ioctl(fd, SIOCGIFMTU, &req) == 0) info.mtu = static_cast<unsigned>(req.ifr_mtu);
  if (::ioctl(fd, SIOCGIFFLAGS, &req) == 0) info.up = (req.ifr_flags & IFF_UP) != 0;
  ::close(fd);

  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    if (err) *err = errno_text("getifaddrs");
    return std::nullopt;
  }
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || name != a->ifa_name) continue;
    NetdevAddr na;
    if (a->ifa_addr->sa_family == AF_INET) {
      const auto* sin = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
      na.addr[10] = na.addr[11] = 0xff;
      std::memcpy(na.addr.data() + 12, &sin->sin_addr, 4);
      if (a->ifa_netmask) {
        const auto* m = reinterpret_cast<const sockaddr_in*>(a->ifa_netmask);
        na.prefix = static_cast<uint8_t>(prefix_len(reinterpret_cast<const uint8_t*>(&m->sin_addr), 4));
      }
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr);
      na.ipv6 = true;
      std::memcpy(na.addr.data(), &sin6->sin6_addr, 16);
      na.link_local = na.addr[0] == 0xfe && (na.addr[1] & 0xc0) == 0x80;
      if (a->ifa_netmask) {
        const auto* m = reinterpret_cast<const sockaddr_in6*>(a->ifa_netmask);
        na.prefix = static_cast<uint8_t>(prefix_len(reinterpret_cast<const uint8_t*>(&m->sin6_addr), 16));
      }
    } else {
      continue;
    }
    info.addrs.push_back(na);
  }
  ::freeifaddrs(list);
  return info;
}

Udp4791Claim::~Udp4791Claim() { close_all(); }

Udp4791Claim::Udp4791Claim(Udp4791Claim&& o) noexcept : fd4_(o.fd4_), fd6_(o.fd6_) {
  o.fd4_ = o.fd6_ = -1;
}

Udp4791Claim& Udp4791Claim::operator=(Udp4791Claim&& o) noexcept {
  if (this != &o) {
    close_all();
    fd4_ = o.fd4_;
    fd6_ = o.fd6_;
    o.fd4_ = o.fd6_ = -1;
  }
  return *this;
}

void Udp4791Claim::close_all() noexcept {
  if (fd4_ >= 0) ::close(fd4_);
  if (fd6_ >= 0) ::close(fd6_);
  fd4_ = fd6_ = -1;
}

namespace {

constexpr uint16_t kUsableNud = NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PROBE | NUD_PERMANENT | NUD_NOARP;
constexpr size_t kNetlinkBuf = 32 * 1024;

// The kernel's NLMSG_*/RTA_* macros cast char* to the header types and
// compare the signed length they are given with an unsigned one; clang
// warns on both (-Wcast-align, -Wsign-compare).  The headers they walk sit
// at NLMSG_ALIGN/RTA_ALIGN offsets of a buffer from operator new (16-byte
// aligned), so the casts are sound: the warnings are off for the
// functions that use them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wcast-align"
#pragma GCC diagnostic ignored "-Wsign-compare"

// The MAC in one RTM_NEWNEIGH message if it is for `ip` on `ifindex` and usable.
std::optional<wire::MacAddr> match_neigh(const nlmsghdr* h, int ifindex, const wire::Ipv6Addr& ip, bool v4) {
  const auto* nd = static_cast<const ndmsg*>(NLMSG_DATA(h));
  if (ifindex != 0 && nd->ndm_ifindex != ifindex) return std::nullopt;
  if ((nd->ndm_state & kUsableNud) == 0) return std::nullopt;
  const uint8_t* want = v4 ? ip.data() + 12 : ip.data();
  const size_t want_len = v4 ? 4 : 16;
  bool dst_ok = false;
  std::optional<wire::MacAddr> mac;
  int len = static_cast<int>(RTM_PAYLOAD(h));
  for (const rtattr* a = RTM_RTA(nd); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
    const auto alen = RTA_PAYLOAD(a);
    if (a->rta_type == NDA_DST && alen == want_len) dst_ok = std::memcmp(RTA_DATA(a), want, want_len) == 0;
    if (a->rta_type == NDA_LLADDR && alen == 6) {
      wire::MacAddr m{};
      std::memcpy(m.data(), RTA_DATA(a), 6);
      mac = m;
    }
  }
  return dst_ok ? mac : std::nullopt;
}

// The gateway in one RTM_NEWROUTE answer, if it names one.
std::optional<wire::Ipv6Addr> route_gateway(const nlmsghdr* h) {
  const auto* rt = static_cast<const rtmsg*>(NLMSG_DATA(h));
  int len = static_cast<int>(RTM_PAYLOAD(h));
  for (const rtattr* a = RTM_RTA(rt); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
    if (a->rta_type != RTA_GATEWAY) continue;
    if (RTA_PAYLOAD(a) == 4) return wire::ipv4_mapped(static_cast<const uint8_t*>(RTA_DATA(a)));
    if (RTA_PAYLOAD(a) == 16) {
      wire::Ipv6Addr gw{};
      std::memcpy(gw.data(), RTA_DATA(a), 16);
      return gw;
    }
  }
  return std::nullopt;
}

// One request to the kernel's routing netlink: each message of the
// answer goes to `on_msg` until it returns true (the caller has what it
// needs), the answer ends (NLMSG_DONE, NLMSG_ERROR) or nothing more comes.
// A dump's caller returns false throughout, so the dump is read to its end.
template <class OnMsg>
void netlink_ask(const nlmsghdr& req, OnMsg&& on_msg) {
  const int fd = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd < 0) return;
  if (::send(fd, &req, req.nlmsg_len, 0) == static_cast<ssize_t>(req.nlmsg_len)) {
    std::vector<uint8_t> buf(kNetlinkBuf);
    for (bool done = false; !done;) {
      const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      int left = static_cast<int>(n);
      for (auto* h = reinterpret_cast<nlmsghdr*>(buf.data()); !done && NLMSG_OK(h, left); h = NLMSG_NEXT(h, left))
        done = h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR || on_msg(h);
    }
  }
  ::close(fd);
}

}  // namespace

std::optional<wire::MacAddr> kernel_neighbour(int ifindex, const wire::Ipv6Addr& ip) {
  const bool v4 = wire::is_ipv4_mapped(ip);
  struct {
    nlmsghdr h;
    ndmsg nd;
  } req{};
  req.h.nlmsg_len = NLMSG_LENGTH(sizeof(ndmsg));
  req.h.nlmsg_type = RTM_GETNEIGH;
  req.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP;
  req.h.nlmsg_seq = 1;
  req.nd.ndm_family = v4 ? AF_INET : AF_INET6;
  req.nd.ndm_ifindex = ifindex;
  std::optional<wire::MacAddr> found;
  netlink_ask(req.h, [&](const nlmsghdr* h) {
    if (h->nlmsg_type == RTM_NEWNEIGH && !found) found = match_neigh(h, ifindex, ip, v4);
    return false;  // read the dump to its end
  });
  return found;
}

std::optional<wire::Ipv6Addr> kernel_gateway(int ifindex, const wire::Ipv6Addr& dst) {
  const bool v4 = wire::is_ipv4_mapped(dst);
  // `ip route get DST oif IF`: RTM_GETROUTE with the destination and the
  // interface; the answer is the one route the kernel would use.
  struct {
    nlmsghdr h;
    rtmsg rt;
    char attrs[64];
  } req{};
  req.h.nlmsg_len = NLMSG_LENGTH(sizeof(rtmsg));
  req.h.nlmsg_type = RTM_GETROUTE;
  req.h.nlmsg_flags = NLM_F_REQUEST;
  req.h.nlmsg_seq = 1;
  req.rt.rtm_family = v4 ? AF_INET : AF_INET6;
  req.rt.rtm_dst_len = v4 ? 32 : 128;
  auto add_attr = [&req](uint16_t type, const void* data, size_t n) {
    auto* a = reinterpret_cast<rtattr*>(reinterpret_cast<char*>(&req) + NLMSG_ALIGN(req.h.nlmsg_len));
    a->rta_type = type;
    a->rta_len = static_cast<uint16_t>(RTA_LENGTH(n));
    std::memcpy(RTA_DATA(a), data, n);
    req.h.nlmsg_len = NLMSG_ALIGN(req.h.nlmsg_len) + RTA_ALIGN(a->rta_len);
  };
  add_attr(RTA_DST, v4 ? dst.data() + 12 : dst.data(), v4 ? 4 : 16);
  if (ifindex != 0) add_attr(RTA_OIF, &ifindex, sizeof ifindex);
  // No route (NLMSG_ERROR): nullopt, on the link as before.
  std::optional<wire::Ipv6Addr> gw;
  netlink_ask(req.h, [&](const nlmsghdr* h) {
    if (h->nlmsg_type != RTM_NEWROUTE) return false;
    gw = route_gateway(h);
    return true;  // the one answer: no NLMSG_DONE follows it
  });
  return gw;
}

#pragma GCC diagnostic pop

bool kernel_solicit(int ifindex, const wire::Ipv6Addr& ip) {
  const bool v4 = wire::is_ipv4_mapped(ip);
  const int fd = ::socket(v4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  char name[IF_NAMESIZE] = {};
  if (ifindex != 0 && if_indextoname(static_cast<unsigned>(ifindex), name) != nullptr) {
    ::setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, name, static_cast<socklen_t>(std::strlen(name)));
  }
  constexpr uint16_t kDiscardPort = 9;
  ssize_t rc;
  if (v4) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(kDiscardPort);
    std::memcpy(&to.sin_addr, ip.data() + 12, 4);
    rc = ::sendto(fd, nullptr, 0, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to), sizeof to);
  } else {
    sockaddr_in6 to{};
    to.sin6_family = AF_INET6;
    to.sin6_port = htons(kDiscardPort);
    std::memcpy(&to.sin6_addr, ip.data(), 16);
    to.sin6_scope_id = static_cast<uint32_t>(ifindex);
    rc = ::sendto(fd, nullptr, 0, MSG_DONTWAIT, reinterpret_cast<sockaddr*>(&to), sizeof to);
  }
  ::close(fd);
  return rc == 0;
}

bool Udp4791Claim::open(std::string* err) {
  close_all();
  std::string e4, e6;
  fd4_ = bind_claim(AF_INET, &e4);
  fd6_ = bind_claim(AF_INET6, &e6);  // fails harmlessly when IPv6 is disabled
  if (fd4_ < 0 && fd6_ < 0) {
    if (err) *err = e4;
    return false;
  }
  return true;
}

}  // namespace uroce::drivers
