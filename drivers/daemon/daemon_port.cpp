#include "drivers/daemon/daemon_port.hpp"

#include <rte_mbuf.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "lib/util/steady_ns.hpp"

namespace uroce::drivers::daemon {

namespace {

void add(std::atomic<uint64_t>& c, uint64_t n) noexcept {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

}  // namespace

DaemonPort::DaemonPort(Region region, const DeviceDesc& desc, rte_mempool* pool)
    : region_(std::move(region)),
      rings_(shm_rings(region_.base(), region_.geometry())),
      hdr_(shm_header(region_.base())),
      pool_(pool),
      mtu_(desc.mtu),
      name_(std::string("uroced:") + desc.name) {
  std::copy(desc.mac, desc.mac + 6, mac_.begin());
  rings_.tx.producer_sync();
  rings_.rx.consumer_sync();
}

DaemonPort::~DaemonPort() = default;

bool DaemonPort::link_up() const {
  return !gone() && hdr_->link_up.v.load(std::memory_order_acquire) != 0;
}

PortStats DaemonPort::stats() const {
  PortStats s;
  s.rx_frames = rx_frames_.load(std::memory_order_relaxed);
  s.rx_bytes = rx_bytes_.load(std::memory_order_relaxed);
  s.tx_frames = tx_frames_.load(std::memory_order_relaxed);
  s.tx_bytes = tx_bytes_.load(std::memory_order_relaxed);
  s.rx_dropped = rx_dropped_.load(std::memory_order_relaxed);
  s.tx_dropped = tx_dropped_.load(std::memory_order_relaxed);
  return s;
}

uint16_t DaemonPort::rx_burst(rte_mbuf** pkts, uint16_t n) {
  const uint32_t ready = rings_.rx.ready();
  if (ready == 0 || ready == UINT32_MAX) return 0;  // the daemon never publishes more than the ring
  const auto want = static_cast<uint16_t>(std::min<uint32_t>(ready, n));
  uint16_t got = 0;
  uint32_t i = 0;
  uint64_t bytes = 0;
  for (; i < want; ++i) {
    const SlotHeader h = rings_.rx.header(i);
    if (h.kind != static_cast<uint16_t>(RecordKind::kFrame) || h.len > rings_.rx.payload_max()) {
      add(rx_dropped_, 1);
      continue;
    }
    rte_mbuf* m = rte_pktmbuf_alloc(pool_);
    if (m == nullptr) break;  // the slot stays for the next burst
    if (h.len > rte_pktmbuf_tailroom(m)) {
      rte_pktmbuf_free(m);
      add(rx_dropped_, 1);
      continue;
    }
    std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), rings_.rx.payload(i), h.len);
    m->data_len = static_cast<uint16_t>(h.len);
    m->pkt_len = h.len;
    bytes += h.len;
    pkts[got++] = m;
  }
  if (i != 0) rings_.rx.consume(i);
  add(rx_frames_, got);
  add(rx_bytes_, bytes);
  return got;
}

uint16_t DaemonPort::tx_burst(rte_mbuf** pkts, uint16_t n) {
  if (gone()) return 0;  // nobody on the other side: the engine counts them dropped
  flush_records();
  if (!pending_.empty()) return 0;  // records first, in order
  uint16_t sent = 0;  // taken: put in the ring, or dropped here
  uint32_t put = 0;
  uint64_t bytes = 0;
  for (; sent < n; ++sent) {
    rte_mbuf* m = pkts[sent];
    // Frames are one segment on every port (eal.hpp); a chain is copied whole.
    const uint32_t len = m->pkt_len;
    if (len > rings_.tx.payload_max() || m->nb_segs != 1) {
      // Cannot cross: counted and consumed, as a port drops an oversize frame.
      add(tx_dropped_, 1);
      rte_pktmbuf_free(m);
      continue;
    }
    if (!rings_.tx.put(RecordKind::kFrame, rte_pktmbuf_mtod(m, const uint8_t*), len)) break;
    ++put;
    bytes += len;
    rte_pktmbuf_free(m);
  }
  rings_.tx.publish();
  add(tx_frames_, put);
  add(tx_bytes_, bytes);
  kick_daemon();
  return sent;
}

void DaemonPort::app_polled(bool empty) noexcept {
  if (!empty) {
    empty_polls_.store(0, std::memory_order_relaxed);
    return;
  }
  // A poll or two that drain a CQ after an event is not a spin.
  if (empty_polls_.load(std::memory_order_relaxed) < kSpinPolls) {
    empty_polls_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const uint64_t now = steady_ns();
  if (now - published_ns_.load(std::memory_order_relaxed) >= kActivityNs) {
    published_ns_.store(now, std::memory_order_relaxed);
    hdr_->client_polls.v.fetch_add(1, std::memory_order_relaxed);
  }
  sched_yield();
}

bool DaemonPort::prepare_wait() {
  // Our store then our look at the ring, against the daemon's publish then
  // its load of client_waiting (Switch::publish_rx): one of us sees the other.
  hdr_->client_waiting.v.store(1, std::memory_order_seq_cst);
  return gone() || rings_.rx.ready() == 0;
}

void DaemonPort::end_wait() {
  hdr_->client_waiting.v.store(0, std::memory_order_relaxed);
  uint64_t v;
  while (::read(region_.wake_fd(), &v, sizeof v) > 0) {
  }
}

void DaemonPort::kick_daemon() noexcept {
  // The daemon sleeps on our kick fd only after it set daemon_waiting and
  // looked at our TX ring once more: a store of ours (publish) followed by
  // this load, against its store followed by its load, cannot both miss.
  if (hdr_->daemon_waiting.v.load(std::memory_order_seq_cst) == 0) return;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t w = ::write(region_.kick_fd(), &one, sizeof one);
}

bool DaemonPort::put_record(RecordKind kind, const void* p, uint32_t len) {
  if (pending_.empty() && rings_.tx.put(kind, p, len)) {
    rings_.tx.publish();
    kick_daemon();
    return true;
  }
  Pending rec{kind, std::vector<uint8_t>(static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + len)};
  pending_.push_back(std::move(rec));
  return false;
}

void DaemonPort::flush_records() {
  while (!pending_.empty()) {
    const Pending& r = pending_.front();
    if (!rings_.tx.put(r.kind, r.bytes.data(), static_cast<uint32_t>(r.bytes.size()))) break;
    pending_.pop_front();
  }
  rings_.tx.publish();
}

void DaemonPort::claim(uint32_t qpn, const uint8_t (&remote_gid)[16], uint32_t remote_qpn) {
  ClaimRecord r{};
  r.qpn = qpn;
  r.remote_qpn = remote_qpn;
  std::memcpy(r.remote_gid, remote_gid, sizeof r.remote_gid);
  put_record(RecordKind::kClaim, &r, sizeof r);
}

void DaemonPort::unclaim(uint32_t qpn) {
  const QpnRecord r{qpn};
  put_record(RecordKind::kUnclaim, &r, sizeof r);
}

void DaemonPort::mcast(const uint8_t (&mgid)[16], bool join) {
  McastRecord r{};
  std::memcpy(r.mgid, mgid, sizeof r.mgid);
  put_record(join ? RecordKind::kMcastJoin : RecordKind::kMcastLeave, &r, sizeof r);
}

}  // namespace uroce::drivers::daemon
