#include "daemon/port_space.hpp"

#include <cerrno>

#include "lib/util/steady_ns.hpp"

namespace uroce::daemon {

PortSpace::PortSpace(uint64_t seed, std::function<uint64_t()> clock)
    : clock_(clock ? std::move(clock) : std::function<uint64_t()>(steady_ns)),
      rng_(seed != 0 ? static_cast<uint32_t>(seed) : std::random_device{}()) {
  next_ = rng_() % (kEphemeralHigh - kEphemeralLow + 1);
}

void PortSpace::listen_ended_locked(int ps, uint16_t port) {
  const uint64_t now = clock_();
  // Bounded: entries past the grace go as new ones come.
  std::erase_if(listen_ended_, [&](const auto& e) { return now - e.second >= kRelistenGraceNs; });
  listen_ended_[{ps, port}] = now;
}

bool PortSpace::relistening(int ps, uint16_t port) const {
  std::lock_guard lock(mu_);
  auto it = listen_ended_.find({ps, port});
  return it != listen_ended_.end() && clock_() - it->second < kRelistenGraceNs;
}

bool PortSpace::covers(const Binding& a, const transport::IpAddr& other_ip) {
  // a's binding overlaps another address through a wildcard: any address
  // of its family (an IPv6 wildcard covers IPv4 too unless AFONLY).
  if (!a.wildcard) return false;
  if (a.ip.is_v4() == other_ip.is_v4()) return true;
  return !a.ip.is_v4() && !a.afonly;
}

int PortSpace::conflict_locked(const Binding& b, uint16_t port) const {
  auto it = ports_.find({b.ps, port});
  if (it == ports_.end()) return 0;
  for (const Binding& o : it->second) {
    if (o.client == b.client && o.token == b.token) continue;
    const bool same = o.ip == b.ip && o.wildcard == b.wildcard;
    if (!same && !covers(o, b.ip) && !covers(b, o.ip)) continue;
    // SO_REUSEADDR-like: two non-listening ids may share a port
    // (cma_check_port).
    if (b.reuseaddr && o.reuseaddr && !o.listening && !b.listening) continue;
    return same ? EADDRINUSE : EADDRNOTAVAIL;
  }
  return 0;
}

int PortSpace::bind(ClientId client, uint64_t token, int ps, const transport::IpAddr& ip, bool wildcard,
                    uint16_t port, bool reuseaddr, bool afonly, uint16_t* out_port) {
  std::lock_guard lock(mu_);
  if (by_token_.count({client, token}) != 0) return EEXIST;
  Binding b{client, token, ps, port, ip, wildcard, reuseaddr, afonly, false};
  if (port == 0) {
    const uint32_t span = kEphemeralHigh - kEphemeralLow + 1;
    uint32_t tries = 0;
    do {
      port = static_cast<uint16_t>(kEphemeralLow + (next_++ % span));
    } while (ports_.count({ps, port}) != 0 && ++tries < span);
    if (tries >= span) return EADDRINUSE;
  } else if (const int rc = conflict_locked(b, port); rc != 0) {
    return rc;
  }
  b.port = port;
  ports_[{ps, port}].push_back(b);
  by_token_[{client, token}] = {ps, port};
  *out_port = port;
  return 0;
}

int PortSpace::unbind(ClientId client, uint64_t token) {
  std::lock_guard lock(mu_);
  auto t = by_token_.find({client, token});
  if (t == by_token_.end()) return ENOENT;
  auto it = ports_.find(t->second);
  if (it != ports_.end()) {
    std::erase_if(it->second, [&](const Binding& b) {
      if (b.client != client || b.token != token) return false;
      if (b.listening) listen_ended_locked(b.ps, b.port);
      return true;
    });
    if (it->second.empty()) ports_.erase(it);
  }
  by_token_.erase(t);
  return 0;
}

int PortSpace::listen(ClientId client, uint64_t token, bool on) {
  std::lock_guard lock(mu_);
  auto t = by_token_.find({client, token});
  if (t == by_token_.end()) return ENOENT;
  auto it = ports_.find(t->second);
  if (it == ports_.end()) return ENOENT;
  for (Binding& b : it->second) {
    if (b.client != client || b.token != token) continue;
    if (on && !b.listening) {
      Binding want = b;
      want.listening = true;
      if (const int rc = conflict_locked(want, t->second.second); rc != 0) return rc;
    }
    if (b.listening && !on) listen_ended_locked(b.ps, b.port);
    b.listening = on;
    return 0;
  }
  return ENOENT;
}

void PortSpace::release(ClientId client) {
  std::lock_guard lock(mu_);
  for (auto t = by_token_.begin(); t != by_token_.end();) {
    if (t->first.first != client) {
      ++t;
      continue;
    }
    auto it = ports_.find(t->second);
    if (it != ports_.end()) {
      std::erase_if(it->second, [&](const Binding& b) { return b.client == client; });
      if (it->second.empty()) ports_.erase(it);
    }
    t = by_token_.erase(t);
  }
}

std::optional<PortSpace::Binding> PortSpace::listener(int ps, uint16_t port, const transport::IpAddr& dst) const {
  std::lock_guard lock(mu_);
  auto it = ports_.find({ps, port});
  if (it == ports_.end()) return std::nullopt;
  const Binding* wild = nullptr;
  for (const Binding& b : it->second) {
    if (!b.listening) continue;
    if (!b.wildcard && b.ip == dst) return b;
    if (wild == nullptr && covers(b, dst)) wild = &b;
  }
  if (wild != nullptr) return *wild;
  return std::nullopt;
}

size_t PortSpace::size() const {
  std::lock_guard lock(mu_);
  return by_token_.size();
}

std::vector<PortSpace::Binding> PortSpace::bindings() const {
  std::lock_guard lock(mu_);
  std::vector<Binding> out;
  for (const auto& [key, list] : ports_) out.insert(out.end(), list.begin(), list.end());
  return out;
}

}  // namespace uroce::daemon
