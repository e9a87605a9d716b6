#include "transport/neigh.hpp"

#include <cstring>
#include <optional>
#include <vector>

#include "lib/wire/bytes.hpp"

namespace uroce::transport {

IpAddr IpAddr::v4(uint32_t a) noexcept {
  IpAddr r;
  r.bytes[10] = 0xff;
  r.bytes[11] = 0xff;
  wire::store_be(r.bytes.data() + 12, a);
  return r;
}

bool IpAddr::is_v4() const noexcept { return wire::is_ipv4_mapped(bytes); }

uint32_t IpAddr::as_v4() const noexcept { return wire::load_be<uint32_t>(bytes.data() + 12); }

size_t IpAddrHash::operator()(const IpAddr& a) const noexcept {
  uint64_t x, y;
  std::memcpy(&x, a.bytes.data(), 8);
  std::memcpy(&y, a.bytes.data() + 8, 8);
  return std::hash<uint64_t>{}(x * 0x9E3779B97F4A7C15ull ^ y);
}

const char* neigh_state_name(NeighState s) noexcept {
  switch (s) {
    case NeighState::Incomplete: return "incomplete";
    case NeighState::Reachable: return "reachable";
    case NeighState::Stale: return "stale";
    case NeighState::Failed: return "failed";
  }
  return "?";
}

struct NeighTable::Entry {
  IpAddr ip;
  IpAddr via;                // what is asked for: `ip` on the link, else its gateway
  NeighState state = NeighState::Incomplete;
  wire::MacAddr mac{};
  bool permanent = false;
  bool probing = false;      // a request is outstanding
  unsigned requests = 0;     // sent in the current probe
  uint64_t expires_ns = 0;   // Reachable -> Stale, Failed -> removed
  Timer timer;
  std::vector<rte_mbuf*> pending;  // reserved to max_pending at creation
  NeighTable* table = nullptr;
};

NeighTable::NeighTable(TimerWheel& wheel, NeighConfig cfg, Hooks hooks)
    : wheel_(wheel), cfg_(cfg), hooks_(std::move(hooks)) {}

NeighTable::~NeighTable() {
  for (auto& [ip, e] : entries_) {
    wheel_.cancel(e->timer);
    for (rte_mbuf* m : e->pending) hooks_.drop(m);
  }
}

NeighTable::Entry* NeighTable::find(const IpAddr& ip) const {
  auto it = entries_.find(ip);
  return it == entries_.end() ? nullptr : it->second.get();
}

NeighTable::Entry* NeighTable::create(const IpAddr& ip, uint64_t /*now_ns*/) {
  if (entries_.size() >= cfg_.max_entries) {
    stats_.table_full.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  auto e = std::make_unique<Entry>();
  e->ip = ip;
  e->via = ip;
  if (hooks_.next_hop) {
    if (const std::optional<IpAddr> gw = hooks_.next_hop(ip); gw && !(*gw == ip)) {
      e->via = *gw;
      ++routed_;
    }
  }
  e->table = this;
  e->pending.reserve(cfg_.max_pending);
  e->timer.owner = e.get();
  e->timer.cb = [](Timer& t, uint64_t now) {
    Entry& en = t.owner_as<Entry>();
    en.table->on_timer(en, now);
  };
  Entry* raw = e.get();
  const std::lock_guard lock(peek_mu_);
  entries_.emplace(ip, std::move(e));
  size_.store(entries_.size(), std::memory_order_relaxed);
  return raw;
}

void NeighTable::probe(Entry& e, uint64_t now_ns) {
  e.probing = true;
  ++e.requests;
  stats_.requests_sent.fetch_add(1, std::memory_order_relaxed);
  hooks_.send_request(e.via);
  wheel_.arm(e.timer, now_ns + cfg_.retry_interval_ns);
}

const wire::MacAddr* NeighTable::lookup(const IpAddr& ip, uint64_t now_ns) {
  Entry* e = find(ip);
  if (!e) return nullptr;
  switch (e->state) {
    case NeighState::Reachable:
      return &e->mac;
    case NeighState::Stale:
      // Usable while we confirm it (kernel ARP's "delay/probe" in one step).
      if (!e->probing) {
        e->requests = 0;
        probe(*e, now_ns);
      }
      return &e->mac;
    case NeighState::Incomplete:
    case NeighState::Failed:
      return nullptr;
  }
  return nullptr;
}

void NeighTable::resolve(const IpAddr& ip, uint64_t now_ns) {
  Entry* e = find(ip);
  if (e) {
    switch (e->state) {
      case NeighState::Reachable:
      case NeighState::Stale:
        hooks_.resolved(ip, true);
        return;
      case NeighState::Incomplete:
        return;  // already probing; `resolved` comes when it ends
      case NeighState::Failed:
        // A new explicit request starts over.
        e->state = NeighState::Incomplete;
        e->requests = 0;
        probe(*e, now_ns);
        return;
    }
  }
  e = create(ip, now_ns);
  if (!e) {
    hooks_.resolved(ip, false);
    return;
  }
  probe(*e, now_ns);
}

bool NeighTable::send(const IpAddr& ip, rte_mbuf* m, uint64_t now_ns) {
  if (const wire::MacAddr* mac = lookup(ip, now_ns)) {
    hooks_.release(m, *mac);
    return true;
  }
  Entry* e = find(ip);
  if (!e) {
    e = create(ip, now_ns);
    if (!e) {
      stats_.pending_dropped.fetch_add(1, std::memory_order_relaxed);
      hooks_.drop(m);
      return false;
    }
    probe(*e, now_ns);
  }
  if (e->state == NeighState::Failed) {
    stats_.pending_dropped.fetch_add(1, std::memory_order_relaxed);
    hooks_.drop(m);
    return false;
  }
  if (e->pending.size() >= cfg_.max_pending) {
    // Keep the newest, as the kernel's unresolved queue does.
    stats_.pending_dropped.fetch_add(1, std::memory_order_relaxed);
    hooks_.drop(e->pending.front());
    e->pending.erase(e->pending.begin());
  }
  e->pending.push_back(m);
  return true;
}

void NeighTable::learn(const IpAddr& ip, const wire::MacAddr& mac, bool solicited, uint64_t now_ns) {
  bool routed_through = false;
  if (routed_ != 0) {
    // Collected first: set_reachable's hooks may add entries (a rehash).
    std::vector<Entry*> through;
    for (auto& [key, en] : entries_)
      if (en->via == ip && !(key == ip) && !en->permanent) through.push_back(en.get());
    routed_through = !through.empty();
    for (Entry* en : through) set_reachable(*en, mac, now_ns);
  }
  Entry* e = find(ip);
  if (!e) {
    if (!solicited || routed_through) return;  // the gateway itself needs no entry of its own
    e = create(ip, now_ns);
    if (!e) return;
  }
  if (e->permanent) return;
  set_reachable(*e, mac, now_ns);
}

void NeighTable::set_reachable(Entry& e, const wire::MacAddr& mac, uint64_t now_ns) {
  const bool was_waiting = e.state == NeighState::Incomplete || e.state == NeighState::Failed;
  {
    const std::lock_guard lock(peek_mu_);
    if (e.state != NeighState::Reachable || e.mac != mac) bump();
    e.mac = mac;
    e.state = NeighState::Reachable;
  }
  e.probing = false;
  e.requests = 0;
  e.expires_ns = now_ns + cfg_.reachable_ns;
  wheel_.arm(e.timer, e.expires_ns);
  if (was_waiting) {
    stats_.resolved.fetch_add(1, std::memory_order_relaxed);
    flush_pending(e);
    hooks_.resolved(e.ip, true);
  }
}

void NeighTable::add_static(const IpAddr& ip, const wire::MacAddr& mac) {
  Entry* e = find(ip);
  if (!e) e = create(ip, 0);
  if (!e) return;
  wheel_.cancel(e->timer);
  {
    const std::lock_guard lock(peek_mu_);
    bump();
    e->mac = mac;
    e->state = NeighState::Reachable;
  }
  e->permanent = true;
  e->probing = false;
  flush_pending(*e);
}

void NeighTable::flush_pending(Entry& e) {
  for (rte_mbuf* m : e.pending) hooks_.release(m, e.mac);
  e.pending.clear();
}

void NeighTable::fail(Entry& e, uint64_t now_ns) {
  {
    const std::lock_guard lock(peek_mu_);
    bump();
    e.state = NeighState::Failed;
  }
  e.probing = false;
  stats_.failed.fetch_add(1, std::memory_order_relaxed);
  stats_.pending_dropped.fetch_add(e.pending.size(), std::memory_order_relaxed);
  for (rte_mbuf* m : e.pending) hooks_.drop(m);
  e.pending.clear();
  e.expires_ns = now_ns + cfg_.failed_hold_ns;
  wheel_.arm(e.timer, e.expires_ns);
  hooks_.resolved(e.ip, false);
}

void NeighTable::on_timer(Entry& e, uint64_t now_ns) {
  switch (e.state) {
    case NeighState::Reachable: {
      const std::lock_guard lock(peek_mu_);
      bump();  // the next use re-probes (lookup)
      e.state = NeighState::Stale;
      return;
    }
    case NeighState::Incomplete:
    case NeighState::Stale:  // a re-probe of a stale entry went unanswered
      if (e.requests >= cfg_.max_requests) {
        fail(e, now_ns);
      } else {
        probe(e, now_ns);
      }
      return;
    case NeighState::Failed: {
      const IpAddr ip = e.ip;
      if (!(e.via == e.ip)) --routed_;
      const std::lock_guard lock(peek_mu_);
      bump();
      entries_.erase(ip);  // destroys `e`; its timer is no longer armed
      size_.store(entries_.size(), std::memory_order_relaxed);
      return;
    }
  }
}

std::optional<wire::MacAddr> NeighTable::peek(const IpAddr& ip, bool* failed) const {
  const std::lock_guard lock(peek_mu_);
  const Entry* e = find(ip);
  if (failed != nullptr) *failed = e != nullptr && e->state == NeighState::Failed;
  if (e == nullptr || e->state != NeighState::Reachable) return std::nullopt;
  return e->mac;
}

std::optional<NeighState> NeighTable::state(const IpAddr& ip) const {
  const Entry* e = find(ip);
  if (!e) return std::nullopt;
  return e->state;
}

}  // namespace uroce::transport
