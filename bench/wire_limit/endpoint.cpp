#include "bench/wire_limit/endpoint.hpp"

#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_log.h>
#include <rte_mempool.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>

#include "drivers/dpdk/eal.hpp"

namespace uroce::bench::wire_limit {

namespace {

namespace eal = drivers::dpdk;
using drivers::Error;
using drivers::Result;
using drivers::Status;

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

Status start_eal(const Options& o) {
  eal::EalOptions eo;
  eo.core = o.core;
  eo.telemetry = false;
  eo.log_level = o.log_level;
  // No --vdev: the port probes its own, as uroce's devices do.
  eo.restore_affinity = false;  // the main thread polls: keep it pinned to o.core
  const auto& started = eal::eal_init(eo);
  if (!started) return started.error();
  // EAL logs to stdout; later messages (teardown) go to stderr so stdout
  // stays the report.
  rte_openlog_stream(stderr);
  return {};
}

struct TemplateArgs {
  wire::MacAddr src;
  Addressing to;
  uint16_t frame_bytes;
};

// rte_mempool_obj_iter callback: every tx mbuf holds a complete frame, so
// the data path only stamps the per-frame fields.
void write_template(rte_mempool*, void* opaque, void* obj, unsigned) {
  const auto* args = static_cast<const TemplateArgs*>(opaque);
  auto* m = static_cast<rte_mbuf*>(obj);
  write_frame(static_cast<uint8_t*>(m->buf_addr) + RTE_PKTMBUF_HEADROOM, args->frame_bytes, args->src, args->to);
}

Status make_tx_pool(Endpoint& ep) {
  eal::PoolOptions po;
  po.mbufs = kPoolMbufs;
  po.data_room = static_cast<uint16_t>(eal::kMbufHeadroom + ep.frame_bytes);
  po.name_prefix = "wl_tx";
  auto tx = eal::create_pktmbuf_pool(po);
  if (!tx) return tx.error();
  ep.tx_pool = *tx;
  TemplateArgs args{ep.mac, ep.to, ep.frame_bytes};
  rte_mempool_obj_iter(ep.tx_pool, write_template, &args);
  return {};
}

// The port as uroce's engine opens it (drivers::dpdk::DpdkPort), with the
// same descriptor counts as before.  Frames sent come from tx_pool, not
// the port's own pool: no fast free.
Status open_port(const Options& o, Endpoint& ep) {
  drivers::dpdk::DpdkPortConfig pc;
  pc.devargs = o.vdev;
  pc.rx_desc = kRxDescriptors;
  pc.tx_desc = kTxDescriptors;
  pc.fast_free = false;
  pc.connect_wait = kConnectWait;
  auto port = drivers::dpdk::DpdkPort::open(pc);
  if (!port) return port.error();
  ep.port = std::move(*port);
  ep.mac = ep.port->mac();
  rte_eth_promiscuous_enable(ep.port->port_id());  // veth needs none; a NIC would
  return {};
}

// Polls until a frame of `kind` arrives (true) or TSC `until` (false);
// drops everything it reads.
bool await(const Endpoint& ep, FrameKind kind, uint64_t until) {
  rte_mbuf* bufs[kMaxBurst];
  bool got = false;
  while (!got && !stop_requested() && rte_rdtsc() < until) {
    const uint16_t n = port_rx(ep, bufs, ep.burst);
    for (uint16_t i = 0; i < n; ++i) {
      const auto info = classify(bufs[i]);
      got = got || (info && info->kind == kind);
    }
    rte_pktmbuf_free_bulk(bufs, n);
  }
  return got;
}

// One control frame, given up on after one timeout.
void send_control(const Endpoint& ep, FrameKind kind, uint32_t seq, uint32_t tsc) {
  rte_mbuf* m = make_frame(ep, kind, seq, tsc);
  if (m != nullptr) send_all(ep, &m, 1, rte_rdtsc() + ep.timeout_tsc);
}

}  // namespace

void install_signal_handlers() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

bool stop_requested() noexcept { return g_stop.load(std::memory_order_relaxed); }

Result<Endpoint> open_endpoint(const Options& o) {
  if (auto ok = start_eal(o); !ok) return ok.error();
  Endpoint ep;
  ep.frame_bytes = o.frame_bytes;
  ep.burst = o.burst;
  ep.tsc_hz = rte_get_tsc_hz();
  ep.timeout_tsc = ep.tsc_hz * static_cast<uint64_t>(o.timeout.count()) / 1000;
  ep.to = o.to;
  if (o.claim_udp) {
    std::string err;
    if (!ep.claim.open(&err)) return Error{EADDRINUSE, "--claim-udp: " + err};
  }
  if (auto ok = open_port(o, ep); !ok) return ok.error();
  if (auto ok = make_tx_pool(ep); !ok) return ok.error();
  if (o.relay) {
    auto relay = Relay::start(*ep.port, ep.burst, o.relay_core);
    if (!relay) return relay.error();
    ep.relay = std::move(*relay);
  }
  return ep;
}

PortStats port_stats(const Endpoint& ep) { return ep.port ? ep.port->stats() : PortStats{}; }

std::optional<RelayStats> stop_relay(const Endpoint& ep) noexcept {
  if (!ep.relay) return std::nullopt;
  ep.relay->stop();
  return ep.relay->stats();
}

Status close_endpoint(Endpoint& ep) {
  ep.relay.reset();  // off the port before it stops
  ep.port.reset();
  rte_mempool_free(ep.tx_pool);
  ep.tx_pool = nullptr;
  return eal::eal_shutdown();  // waits for memif's interrupt thread first
}

rte_mbuf* make_frame(const Endpoint& ep, FrameKind kind, uint32_t seq, uint32_t tsc) noexcept {
  rte_mbuf* m = rte_pktmbuf_alloc(ep.tx_pool);
  if (m == nullptr) return nullptr;
  m->data_len = ep.frame_bytes;
  m->pkt_len = ep.frame_bytes;
  stamp(rte_pktmbuf_mtod(m, uint8_t*), kind, seq, tsc);
  return m;
}

uint16_t send_all(const Endpoint& ep, rte_mbuf** bufs, uint16_t n, uint64_t deadline) noexcept {
  uint16_t sent = 0;
  while (sent < n) {
    sent = static_cast<uint16_t>(sent + port_tx(ep, bufs + sent, n - sent));
    if (sent < n && (rte_rdtsc() >= deadline || stop_requested())) {
      rte_pktmbuf_free_bulk(bufs + sent, n - sent);
      break;
    }
  }
  return sent;
}

bool greet(const Endpoint& ep, uint64_t deadline) {
  while (!stop_requested()) {
    const uint64_t now = rte_rdtsc();
    if (now >= deadline) return false;
    send_control(ep, FrameKind::kHello, 0, 0);
    if (await(ep, FrameKind::kHelloAck, std::min(deadline, now + ep.timeout_tsc))) return true;
  }
  return false;
}

bool say_done(const Endpoint& ep, uint64_t count) {
  for (int attempt = 0; attempt < kDoneTries && !stop_requested(); ++attempt) {
    send_control(ep, FrameKind::kDone, count_low(count), count_high(count));
    if (await(ep, FrameKind::kDoneAck, rte_rdtsc() + ep.timeout_tsc)) return true;
  }
  return false;
}

}  // namespace uroce::bench::wire_limit
