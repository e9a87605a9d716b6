// The rdma_cm model's home inside libibverbs.so.1: it needs the engines and
// RNICs, which live here (one static DPDK per process: DESIGN.md "Linking").
// librdmacm.so.1 asks for it through uroce_rdmacm() (UROCE_PRIVATE_1) and
// calls it only through its vtable, so nothing else crosses the boundary.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "cm/device_cm.hpp"
#include "cm/rdma_cm.hpp"
#include "drivers/daemon/link.hpp"
#include "lib/util/log.hpp"
#include "transport/device.hpp"
#include "verbs-shim/process.hpp"
#include "verbs-shim/shim.hpp"

namespace uroce::shim {
namespace {

// How long after the devices start a REQ for a service nobody listens on
// is forgotten rather than rejected (CmConfig::no_listener_grace_ns): the
// device start (under 100 ms here since issue 13, 0.6 s before, longer on a
// loaded machine) and the program's own set-up before rdma_listen.
constexpr uint64_t kNoListenerGraceNs = 3'000'000'000;

uint8_t env_u8(const char* name, uint8_t dflt, uint8_t max) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return dflt;
  char* end = nullptr;
  const unsigned long n = std::strtoul(v, &end, 10);
  return (end != nullptr && *end == '\0' && n <= max) ? static_cast<uint8_t>(n) : dflt;
}

}  // namespace
}  // namespace uroce::shim

using namespace uroce;

// The process's rdma_cm model over every device that came up (started on
// first use, never destroyed: engines may call into it until exit).  Its
// first use also gives every device its IB CM (a client of the device,
// built on each open device now and on any opened later), so a program
// that never uses librdmacm runs no CM, as before.
// UROCE_CM_RESPONSE_TIMEOUT (0..31, 4.096 us * 2^t) and UROCE_CM_RETRIES
// (0..15) override Linux's 20 and 15.

void shim::rdmacm_forget_after_fork() noexcept {
  // The child's one thread: the lock may have been held by a thread it
  // does not have.
  shim::ProcessState& p = shim::process();
  new (&p.rdmacm_mu) std::mutex;
  p.rdmacm.store(nullptr);
  p.rdmacm_tried = false;
}

void shim::rdmacm_at_exit() noexcept {
  if (cm::RdmaCm* m = shim::process().rdmacm.load()) m->disconnect_all();
}

void shim::rdmacm_device_removed(const rnic::Rnic* rnic) noexcept {
  if (cm::RdmaCm* m = shim::process().rdmacm.load()) m->device_removed(rnic);
}

size_t shim::rdmacm_disconnects_pending() noexcept {
  cm::RdmaCm* m = shim::process().rdmacm.load();
  return m != nullptr ? m->disconnects_pending() : 0;
}

UROCE_EXPORT cm::RdmaCm* uroce_rdmacm() noexcept {
  shim::adopt_fork();  // a child of fork() gets a model of its own
  if (cm::RdmaCm* m = shim::process().rdmacm.load(std::memory_order_acquire)) return m;
  std::lock_guard lock(shim::process().rdmacm_mu);
  if (shim::process().rdmacm_tried) return shim::process().rdmacm.load();
  shim::process().rdmacm_tried = true;
  [] {
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);  // starts the devices
    if (list == nullptr) return;
    ibv_free_device_list(list);
    // A program's device starts inside it, moments before it listens: REQs
    // that arrive in between are left for the peer's retry, not rejected.
    cm::CmConfig cc;
    cc.no_listener_grace_ns = shim::kNoListenerGraceNs;
    const drivers::Status added = transport::Devices::instance().add_client(
        [cc](transport::Device& dev) -> drivers::Result<std::unique_ptr<transport::DeviceClient>> {
          auto c = cm::DeviceCm::open(dev.rnic(), cc);
          if (!c) return c.error();
          return std::unique_ptr<transport::DeviceClient>(std::move(*c));
        });
    if (!added) {
      log_line(LogType::Shim, LogLevel::Error, "the connection manager did not start: %s",
               added.error().message.c_str());
      return;
    }
    std::vector<cm::RdmaCmDevice> devs;
    for (shim::IbvDevice* d : shim::devices()) {
      cm::RdmaCmDevice c;
      c.cm = d->tdev->client<cm::DeviceCm>();
      c.rnic = &d->rnic();
      c.verbs = ibv_open_device(&d->dev);
      c.inline_progress = d->inline_progress;
      for (const config::IpPrefix& p : d->tdev->info().addresses) {
        cm::RdmaCmAddr a;
        a.ip.bytes = p.addr.bytes;
        a.prefix_len = p.prefix_len;
        c.addresses.push_back(a);
      }
      devs.push_back(std::move(c));
    }
    cm::RdmaCmOptions opt;
    opt.cm_response_timeout = shim::env_u8("UROCE_CM_RESPONSE_TIMEOUT", opt.cm_response_timeout, 31);
    opt.max_cm_retries = shim::env_u8("UROCE_CM_RETRIES", opt.max_cm_retries, 15);
    auto* m = new (std::nothrow) cm::RdmaCm(std::move(devs), opt);
    if (m == nullptr) return;
    // A client of uroced: the host's port space is the daemon's.
    if (auto link = transport::Devices::instance().daemon()) {
      cm::RdmaCm::PortArbiter a;
      a.bind = [link](uint64_t token, int ps, const transport::IpAddr& ip, uint16_t port, bool reuseaddr,
                      bool afonly, uint16_t* granted) {
        drivers::daemon::BindReq b{};
        b.token = token;
        b.ps = ps;
        b.port = port;
        std::copy(ip.bytes.begin(), ip.bytes.end(), b.ip);
        b.is_v4 = ip.is_v4() ? 1 : 0;
        b.reuseaddr = reuseaddr ? 1 : 0;
        b.afonly = afonly ? 1 : 0;
        return link->bind(b, granted);
      };
      a.unbind = [link](uint64_t token) { (void)link->unbind(token); };
      a.listen = [link](uint64_t token, bool on) { return link->listen(token, on); };
      m->set_port_arbiter(std::move(a));
    }
    if (const int rc = m->start(); rc != 0) {
      log_line(LogType::Shim, LogLevel::Error, "the connection manager did not start: %s", std::strerror(rc));
      return;  // leaked on purpose: half-started engines may still refer to it
    }
    shim::process().rdmacm.store(m, std::memory_order_release);
  }();
  return shim::process().rdmacm.load();
}
