#include "drivers/sim/sim_wire.hpp"

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace uroce::drivers::sim {

namespace {

constexpr uint8_t kGroupBit = 0x01;      // first octet of a MAC: multicast/broadcast
constexpr uint8_t kLocalAdminBit = 0x02;  // first octet of a MAC: locally administered
constexpr std::string_view kPoolPrefix = "sim";

wire::MacAddr default_mac(size_t index) {
  return {kLocalAdminBit, 0, 0, 0, static_cast<uint8_t>((index + 1) >> 8), static_cast<uint8_t>(index + 1)};
}

bool same_mac(const uint8_t* a, const wire::MacAddr& b) { return std::memcmp(a, b.data(), b.size()) == 0; }

}  // namespace

// ---- SimPort ------------------------------------------------------------------------

SimPort::SimPort(SimWire& wire, size_t index, const SimPortConfig& config, std::string name, wire::MacAddr mac,
                 rte_mempool* pool, bool owns_pool)
    : wire_(wire),
      index_(index),
      name_(std::move(name)),
      mac_(mac),
      mtu_(config.mtu),
      pool_(pool),
      owns_pool_(owns_pool) {}

SimPort::~SimPort() {
  if (owns_pool_) rte_mempool_free(pool_);
}

uint64_t SimPort::drops(SimDrop reason) const noexcept {
  return drops_[static_cast<size_t>(reason)].load(std::memory_order_relaxed);
}

void SimPort::count_drop(SimDrop reason) noexcept {
  drops_[static_cast<size_t>(reason)].fetch_add(1, std::memory_order_relaxed);
}

uint16_t SimPort::tx_burst(rte_mbuf** pkts, uint16_t n) {
  wire_.note_started();
  const uint64_t now = wire_.clock_.now_ns();
  uint64_t frames = 0;
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < n; ++i) {
    const uint32_t len = pkts[i]->pkt_len;
    if (send_one(pkts[i], now)) {
      ++frames;
      bytes += len;
    }
  }
  tx_frames_.fetch_add(frames, std::memory_order_relaxed);
  tx_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return n;
}

// Puts one frame on the wire, or frees it and counts why not.
bool SimPort::send_one(rte_mbuf* m, uint64_t now_ns) noexcept {
  SimDrop reason = SimDrop::kCount;
  if (!up_.load(std::memory_order_acquire)) {
    reason = SimDrop::kTxLinkDown;
  } else if (m->data_len < kEthHeaderBytes) {
    reason = SimDrop::kTxRunt;
  } else if (m->pkt_len > uint32_t{mtu_} + kEthOverheadBytes) {
    reason = SimDrop::kTxOversize;
  } else if (wire_.deliver(index_, m, now_ns)) {
    return true;
  } else {
    reason = SimDrop::kTxNoReceiver;
  }
  rte_pktmbuf_free(m);
  count_drop(reason);
  return false;
}

uint16_t SimPort::rx_burst(rte_mbuf** pkts, uint16_t n) {
  wire_.note_started();
  const uint64_t now = wire_.clock_.now_ns();
  const size_t ports = wire_.port_count();
  uint16_t got = 0;
  for (size_t k = 0; k < ports && got < n; ++k) {
    const size_t from = (rx_cursor_ + k) % ports;
    if (from != index_) got = static_cast<uint16_t>(got + wire_.receive(from, index_, pkts + got, n - got, now));
  }
  rx_cursor_ = (rx_cursor_ + 1) % ports;
  uint64_t bytes = 0;
  for (uint16_t i = 0; i < got; ++i) bytes += pkts[i]->pkt_len;
  rx_frames_.fetch_add(got, std::memory_order_relaxed);
  rx_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return got;
}

PortStats SimPort::stats() const {
  PortStats s;
  s.rx_frames = rx_frames_.load(std::memory_order_relaxed);
  s.rx_bytes = rx_bytes_.load(std::memory_order_relaxed);
  s.tx_frames = tx_frames_.load(std::memory_order_relaxed);
  s.tx_bytes = tx_bytes_.load(std::memory_order_relaxed);
  s.rx_dropped = wire_.rx_dropped(index_);
  for (const auto& d : drops_) s.tx_dropped += d.load(std::memory_order_relaxed);
  return s;
}

// ---- SimWire: setup --------------------------------------------------------------------

SimWire::SimWire(const SimWireConfig& config) : config_(config), clock_(config.clock) {
  ports_.reserve(config_.max_ports);
  links_.resize(size_t{config_.max_ports} * config_.max_ports);
}

SimWire::~SimWire() {
  for (auto& l : links_) {
    if (!l) continue;
    std::lock_guard lock(l->mu);
    l->faults.discard_held();
    l->queue.clear();
  }
  ports_.clear();  // frees the pools the wire created, now that no frame is left on the wire
}

uint64_t SimWire::stream(size_t from, size_t to) const noexcept {
  return (uint64_t{from} << 32) | to;
}

Result<SimPort*> SimWire::add_port(const SimPortConfig& config) {
  if (started_.load(std::memory_order_relaxed)) {
    return Error{EBUSY, "add_port: add every endpoint before the first burst"};
  }
  const size_t index = ports_.size();
  if (index >= config_.max_ports) {
    return Error{ENOSPC, "add_port: the wire has max_ports = " + std::to_string(config_.max_ports) + " endpoints"};
  }
  const wire::MacAddr mac = config.mac.value_or(default_mac(index));
  if ((mac[0] & kGroupBit) != 0) return Error{EINVAL, "add_port: a port's MAC must be unicast"};
  for (const auto& p : ports_) {
    if (p->mac_ == mac) return Error{EEXIST, "add_port: MAC already used by " + p->name_};
  }
  rte_mempool* pool = config.pool;
  if (pool == nullptr) {
    auto created = dpdk::create_pktmbuf_pool({.name_prefix = kPoolPrefix,
                                              .mbufs = config.pool_mbufs,
                                              .data_room = config.data_room});
    if (!created) return created.error();
    pool = *created;
  }
  std::string name = config.name.empty() ? "sim" + std::to_string(index) : config.name;
  ports_.emplace_back(new SimPort(*this, index, config, std::move(name), mac, pool, config.pool == nullptr));
  if (Status st = create_links(index); !st) {
    ports_.pop_back();
    return st.error();
  }
  return ports_.back().get();
}

Status SimWire::create_links(size_t index) {
  for (size_t other = 0; other < index; ++other) {
    for (const auto& [from, to] : {std::pair{index, other}, std::pair{other, index}}) {
      auto& slot = links_[from * config_.max_ports + to];
      slot = std::make_unique<Link>();
      slot->queue.reset(config_.link_queue_frames);
      if (Status st = configure_link(from, to, all_faults_.value_or(FaultSpec{})); !st) return st;
    }
  }
  return {};
}

// ---- SimWire: control ----------------------------------------------------------------

Status SimWire::configure_link(size_t from, size_t to, const FaultSpec& spec) {
  Link& l = link(from, to);
  std::lock_guard lock(l.mu);
  l.faults.release_all(clock_.now_ns(), l.queue);
  return l.faults.configure(spec, stream(from, to));
}

Status SimWire::set_link_faults(const SimPort& from, const SimPort& to, const FaultSpec& spec) {
  if (from.index_ == to.index_) return Error{EINVAL, "set_link_faults: a port has no link to itself"};
  if (Status st = validate(spec); !st) return st;
  return configure_link(from.index_, to.index_, spec);
}

Status SimWire::set_port_faults(const SimPort& port, const FaultSpec& spec) {
  if (Status st = validate(spec); !st) return st;
  for (size_t other = 0; other < ports_.size(); ++other) {
    if (other == port.index_) continue;
    if (applies(spec.dir, FaultDir::kTx)) {
      if (Status st = configure_link(port.index_, other, spec); !st) return st;
    }
    if (applies(spec.dir, FaultDir::kRx)) {
      if (Status st = configure_link(other, port.index_, spec); !st) return st;
    }
  }
  return {};
}

Status SimWire::set_all_faults(const FaultSpec& spec) {
  if (Status st = validate(spec); !st) return st;
  all_faults_ = spec;
  for (size_t from = 0; from < ports_.size(); ++from) {
    for (size_t to = 0; to < ports_.size(); ++to) {
      if (from == to) continue;
      if (Status st = configure_link(from, to, spec); !st) return st;
    }
  }
  return {};
}

// Going down loses every frame on its way to the port (mutex ordering: a
// sender that takes a link's lock after this sees up_ == false).
void SimWire::set_link_up(SimPort& port, bool up) {
  port.up_.store(up, std::memory_order_release);
  if (up) return;
  for (size_t from = 0; from < ports_.size(); ++from) {
    if (from == port.index_) continue;
    Link& l = link(from, port.index_);
    std::lock_guard lock(l.mu);
    const uint64_t lost = l.faults.held() + l.queue.size();
    l.faults.discard_held();
    l.queue.clear();
    l.counters[FaultCounter::kDownDropped] += lost;
  }
}

FaultCounters SimWire::link_counters(const SimPort& from, const SimPort& to) const {
  if (from.index_ == to.index_) return {};
  const Link& l = link(from.index_, to.index_);
  std::lock_guard lock(l.mu);
  FaultCounters c = l.faults.counters();
  c += l.counters;
  return c;
}

FaultCounters SimWire::counters() const {
  FaultCounters total;
  for (const auto& from : ports_) {
    for (const auto& to : ports_) total += link_counters(*from, *to);
    total[FaultCounter::kDownDropped] += from->drops(SimDrop::kTxLinkDown);
  }
  return total;
}

uint32_t SimWire::in_flight() const {
  uint32_t n = 0;
  for (const auto& l : links_) {
    if (!l) continue;
    std::lock_guard lock(l->mu);
    n += l->queue.size() + l->faults.held();
  }
  return n;
}

uint64_t SimWire::rx_dropped(size_t to) const {
  uint64_t n = 0;
  for (size_t from = 0; from < ports_.size(); ++from) {
    if (from == to) continue;
    const Link& l = link(from, to);
    std::lock_guard lock(l.mu);
    n += l.counters[FaultCounter::kDownDropped] + l.counters[FaultCounter::kNoMbuf] +
         l.faults.counters()[FaultCounter::kQueueFull];
  }
  return n;
}

// ---- SimWire: data path ------------------------------------------------------------------

// Switches one frame: to the port that has its destination MAC, else to
// every other port.  False when there is no other port at all.
bool SimWire::deliver(size_t from, rte_mbuf* m, uint64_t now_ns) noexcept {
  const auto* dst = rte_pktmbuf_mtod(m, const uint8_t*);
  if ((dst[0] & kGroupBit) == 0) {
    for (size_t to = 0; to < ports_.size(); ++to) {
      if (to != from && same_mac(dst, ports_[to]->mac_)) {
        enqueue(from, to, m, now_ns);
        return true;
      }
    }
  }
  if (ports_.size() < 2) return false;
  flood(from, m, now_ns);
  return true;
}

// Every other port gets a copy from its own pool; the last gets `m`.
void SimWire::flood(size_t from, rte_mbuf* m, uint64_t now_ns) noexcept {
  const size_t last = from == ports_.size() - 1 ? ports_.size() - 2 : ports_.size() - 1;
  for (size_t to = 0; to < ports_.size(); ++to) {
    if (to == from) continue;
    rte_mbuf* f = to == last ? m : rte_pktmbuf_copy(m, ports_[to]->pool_, 0, UINT32_MAX);
    if (f != nullptr) {
      enqueue(from, to, f, now_ns);
      continue;
    }
    Link& l = link(from, to);
    std::lock_guard lock(l.mu);
    ++l.counters[FaultCounter::kNoMbuf];
  }
}

void SimWire::enqueue(size_t from, size_t to, rte_mbuf* m, uint64_t now_ns) noexcept {
  Link& l = link(from, to);
  const SimPort& dst = *ports_[to];
  std::lock_guard lock(l.mu);
  if (!dst.up_.load(std::memory_order_acquire)) {
    rte_pktmbuf_free(m);
    ++l.counters[FaultCounter::kDownDropped];
    return;
  }
  l.faults.submit(m, now_ns, dst.pool_, l.queue);
}

uint16_t SimWire::receive(size_t from, size_t to, rte_mbuf** out, uint16_t n, uint64_t now_ns) noexcept {
  Link& l = link(from, to);
  std::lock_guard lock(l.mu);
  l.faults.release_expired(now_ns, l.queue);
  return l.queue.pop_due(now_ns, out, n);
}

}  // namespace uroce::drivers::sim
