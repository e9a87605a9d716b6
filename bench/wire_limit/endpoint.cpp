#include "bench/wire_limit/endpoint.hpp"

#include <rte_cycles.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_log.h>
#include <rte_mempool.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "drivers/dpdk/eal.hpp"

namespace uroce::bench::wire_limit {

namespace {

namespace eal = drivers::dpdk;
using drivers::Error;
using drivers::Result;
using drivers::Status;

std::atomic<bool> g_stop{false};

void on_signal(int) { g_stop.store(true, std::memory_order_relaxed); }

// "net_memif0,role=server,…" -> "net_memif0", the name the port gets.
std::string vdev_name(const std::string& devargs) { return devargs.substr(0, devargs.find(',')); }

Error dpdk_error(const std::string& what, int rc) {
  return Error{-rc, what + " failed: " + rte_strerror(-rc)};
}

Status start_eal(const Options& o) {
  eal::EalOptions eo;
  eo.core = o.core;
  eo.telemetry = false;
  eo.log_level = o.log_level;
  eo.vdevs = {o.vdev};
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

Status make_pools(Endpoint& ep) {
  eal::PoolOptions po;
  po.mbufs = kPoolMbufs;
  po.data_room = static_cast<uint16_t>(eal::kMbufHeadroom + std::max(ep.frame_bytes, kMinDataRoom));
  po.name_prefix = "wl_rx";
  auto rx = eal::create_pktmbuf_pool(po);
  if (!rx) return rx.error();
  ep.rx_pool = *rx;
  po.name_prefix = "wl_tx";
  auto tx = eal::create_pktmbuf_pool(po);
  if (!tx) return tx.error();
  ep.tx_pool = *tx;
  TemplateArgs args{ep.mac, ep.to, ep.frame_bytes};
  rte_mempool_obj_iter(ep.tx_pool, write_template, &args);
  return {};
}

Status find_port(const Options& o, Endpoint& ep) {
  const std::string name = vdev_name(o.vdev);
  if (rte_eth_dev_get_port_by_name(name.c_str(), &ep.port) != 0) {
    return Error{ENODEV, "no port '" + name + "' after probing --vdev=" + o.vdev};
  }
  rte_ether_addr mac{};
  if (const int rc = rte_eth_macaddr_get(ep.port, &mac); rc != 0) return dpdk_error("rte_eth_macaddr_get", rc);
  std::memcpy(ep.mac.data(), mac.addr_bytes, ep.mac.size());
  return {};
}

Status setup_queues(const Endpoint& ep) {
  const rte_eth_conf conf{};
  if (const int rc = rte_eth_dev_configure(ep.port, 1, 1, &conf); rc != 0) {
    return dpdk_error("rte_eth_dev_configure", rc);
  }
  uint16_t rxd = kRxDescriptors;
  uint16_t txd = kTxDescriptors;
  if (const int rc = rte_eth_dev_adjust_nb_rx_tx_desc(ep.port, &rxd, &txd); rc != 0) {
    return dpdk_error("rte_eth_dev_adjust_nb_rx_tx_desc", rc);
  }
  const int socket = std::max(rte_eth_dev_socket_id(ep.port), 0);
  if (const int rc = rte_eth_rx_queue_setup(ep.port, kQueue, rxd, static_cast<unsigned>(socket), nullptr,
                                            ep.rx_pool);
      rc != 0) {
    return dpdk_error("rte_eth_rx_queue_setup", rc);
  }
  if (const int rc = rte_eth_tx_queue_setup(ep.port, kQueue, txd, static_cast<unsigned>(socket), nullptr);
      rc != 0) {
    return dpdk_error("rte_eth_tx_queue_setup", rc);
  }
  return {};
}

// A memif client cannot start before its server listens: retry a while.
Status start_port(const Endpoint& ep) {
  int rc = 0;
  for (int attempt = 0; attempt < kStartTries && !stop_requested(); ++attempt) {
    rc = rte_eth_dev_start(ep.port);
    if (rc == 0) {
      rte_eth_promiscuous_enable(ep.port);  // veth needs none; a NIC would
      return {};
    }
    std::this_thread::sleep_for(kStartRetry);
  }
  return dpdk_error("rte_eth_dev_start", rc < 0 ? rc : -EINTR);
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
  if (auto ok = find_port(o, ep); !ok) return ok.error();
  if (auto ok = make_pools(ep); !ok) return ok.error();
  if (auto ok = setup_queues(ep); !ok) return ok.error();
  if (auto ok = start_port(ep); !ok) return ok.error();
  if (o.relay) {
    auto relay = Relay::start(ep.port, ep.burst, o.relay_core);
    if (!relay) return relay.error();
    ep.relay = std::move(*relay);
  }
  return ep;
}

PortStats port_stats(const Endpoint& ep) {
  rte_eth_stats s{};
  rte_eth_stats_get(ep.port, &s);
  return PortStats{s.ipackets, s.opackets, s.imissed, s.ierrors, s.oerrors, s.rx_nombuf};
}

std::optional<RelayStats> stop_relay(const Endpoint& ep) noexcept {
  if (!ep.relay) return std::nullopt;
  ep.relay->stop();
  return ep.relay->stats();
}

Status close_endpoint(Endpoint& ep) {
  ep.relay.reset();  // off the port before it stops
  rte_eth_dev_stop(ep.port);
  rte_eth_dev_close(ep.port);
  rte_mempool_free(ep.tx_pool);
  rte_mempool_free(ep.rx_pool);
  ep.tx_pool = ep.rx_pool = nullptr;
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
