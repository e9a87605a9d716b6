#include "bench/wire_limit/relay.hpp"

#include <rte_errno.h>
#include <rte_lcore.h>
#include <sched.h>
#include <unistd.h>

#include <string>

#include "bench/wire_limit/endpoint.hpp"

namespace uroce::bench::wire_limit {

namespace {

// Each way; a power of two (rte_ring), more than a run ever has in flight.
constexpr unsigned kRingSlots = 1024;

void free_ring(rte_ring* r) noexcept {
  if (r == nullptr) return;
  void* m = nullptr;
  while (rte_ring_sc_dequeue(r, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
  rte_ring_free(r);
}

// `core`, or for -1 every online CPU: the relay goes where the scheduler
// puts it, as uroced's engine thread does.
void place_calling_thread(int core) noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (core >= 0 && core < CPU_SETSIZE) {
    CPU_SET(core, &set);
  } else {
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    for (long c = 0; c < cpus && c < CPU_SETSIZE; ++c) CPU_SET(static_cast<int>(c), &set);
  }
  sched_setaffinity(0, sizeof set, &set);
}

}  // namespace

drivers::Result<std::unique_ptr<Relay>> Relay::start(drivers::Port& port, uint16_t burst, int core) {
  rte_ring* to_wire = rte_ring_create("wl_to_wire", kRingSlots, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  rte_ring* from_wire = rte_ring_create("wl_from_wire", kRingSlots, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  if (to_wire == nullptr || from_wire == nullptr) {
    const int err = rte_errno;
    free_ring(to_wire);
    free_ring(from_wire);
    return drivers::Error{err, std::string("--relay: rte_ring_create failed: ") + rte_strerror(err)};
  }
  std::unique_ptr<Relay> r(new Relay(port, burst, core, to_wire, from_wire));
  r->thread_ = std::thread([p = r.get()] { p->loop(); });
  return r;
}

Relay::Relay(drivers::Port& port, uint16_t burst, int core, rte_ring* to_wire, rte_ring* from_wire)
    : port_(port), burst_(burst), core_(core), to_wire_(to_wire), from_wire_(from_wire) {}

Relay::~Relay() { stop(); }

void Relay::stop() noexcept {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
  free_ring(to_wire_);
  free_ring(from_wire_);
  to_wire_ = from_wire_ = nullptr;
}

uint16_t Relay::rx(rte_mbuf** bufs, uint16_t n) noexcept {
  const auto got =
      static_cast<uint16_t>(rte_ring_sc_dequeue_burst(from_wire_, reinterpret_cast<void**>(bufs), n, nullptr));
  if (got == 0) sched_yield();
  return got;
}

uint16_t Relay::tx(rte_mbuf** bufs, uint16_t n) noexcept {
  const auto took =
      static_cast<uint16_t>(rte_ring_sp_enqueue_burst(to_wire_, reinterpret_cast<void**>(bufs), n, nullptr));
  if (took < n) sched_yield();  // the ring is full: the relay runs first
  return took;
}

void Relay::loop() noexcept {
  place_calling_thread(core_);
  // An lcore id: the mempools' per-lcore caches, as on the program's thread.
  const bool registered = rte_thread_register() == 0;
  rte_mbuf* in[kMaxBurst];
  rte_mbuf* out[kMaxBurst];
  uint16_t pending = 0;  // out[0, pending): taken from the program, not yet by the port
  while (!stop_.load(std::memory_order_relaxed)) {
    const uint16_t n = port_.rx_burst(in, burst_);
    if (n != 0) {
      const auto passed =
          static_cast<uint16_t>(rte_ring_sp_enqueue_burst(from_wire_, reinterpret_cast<void**>(in), n, nullptr));
      stats_.from_wire += passed;
      stats_.dropped += n - passed;
      rte_pktmbuf_free_bulk(in + passed, n - passed);
    }
    if (pending == 0) {
      pending = static_cast<uint16_t>(
          rte_ring_sc_dequeue_burst(to_wire_, reinterpret_cast<void**>(out), burst_, nullptr));
    }
    uint16_t sent = 0;
    if (pending != 0) {
      sent = port_.tx_burst(out, pending);
      stats_.to_wire += sent;
      for (uint16_t i = sent; i < pending; ++i) out[i - sent] = out[i];
      pending = static_cast<uint16_t>(pending - sent);
    }
    if (n == 0 && sent == 0) {
      ++stats_.idle_yields;
      sched_yield();
    }
  }
  stats_.dropped += pending;
  rte_pktmbuf_free_bulk(out, pending);
  if (registered) rte_thread_unregister();
}

}  // namespace uroce::bench::wire_limit
