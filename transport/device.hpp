// Bring-up: from a Config (lib/config) to running devices, one per
// [[device]]: the port, the engine on it, and the RNIC on the engine.  The
// C++ API the verbs shim calls (ibv_get_device_list, ibv_open_device), and
// what `uroce node` uses.  The tests and benchmarks build the same Device
// over a port of their own (Device::assemble).
//
// Clients.  What runs on a device above its RNIC — the IB CM on QP 1
// (cm/device_cm.hpp), a layer above this one — attaches as a DeviceClient,
// as a kernel module registers an ib_client: a registry's client factories
// (Devices::add_client) run for every device it opens, after the RNIC, and
// a device destroys its clients in reverse before its RNIC.
//
//   auto& devs = Devices::instance();          // the process's registry
//   auto dev = devs.open("uroce0");            // lazy: EAL, port, engine
//   dev->engine().run_sync([&] { ... });
//   devs.shutdown();                            // or at exit (Devices::Exit)
//
// What open() builds for a device:
//   - the EAL (once per process): the config's [eal] options and log
//     level, PCI devices on the allow list (-a); vdevs are probed by
//     DpdkPort itself (rte_vdev_init), so a failing vdev gets its own
//     error and a device opened after the EAL started works the same;
//   - the port: a DpdkPort for kind "dpdk", a SimPort on the registry's one
//     SimWire for kind "sim" (sim devices of one process share that wire;
//     it gets a port for every configured sim device when the first one
//     opens, since a SimWire takes endpoints only before its first frame);
//   - a FaultPort around it when the device's `faults` spec (UROCE_FAULTS
//     for the first device) changes anything;
//   - the addresses (DESIGN.md "Addresses") — see plan_addresses below;
//   - the engine: capture file, progress mode, telemetry under the
//     device's name (/uroce/stats,<name>);
//   - the RNIC (transport/rnic) on the engine, named as the device;
//   - its clients, in the order their factories were added.
// A Device is torn down in reverse: clients, RNIC, engine, ports.
//
// Capture: the device's `pcap`, else the global one.  When the global path
// serves more than one configured device, each device writes
// "<stem>-<device><ext>" next to it, so captures never share a file.
//
// Threads: every Devices call is control path and may come from any
// thread (one mutex).  A Device stays valid until close() or shutdown().
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drivers/daemon/daemon_port.hpp"
#include "drivers/daemon/link.hpp"
#include "drivers/dpdk/dpdk_port.hpp"
#include "drivers/dpdk/eal.hpp"
#include "drivers/fault.hpp"
#include "drivers/ingress_filter.hpp"
#include "drivers/netdev.hpp"
#include "drivers/port.hpp"
#include "drivers/result.hpp"
#include "lib/config/config.hpp"
#include "transport/device_client.hpp"
#include "transport/engine.hpp"

namespace uroce::rnic {
class Rnic;
}  // namespace uroce::rnic

namespace uroce::drivers::sim {
class SimWire;
class SimPort;
}  // namespace uroce::drivers::sim

namespace uroce::transport {

// ---- addresses ------------------------------------------------------------------
// A device's addresses, defined:
//   - On a port whose kernel netdev is its own interface (af_packet, mlx5
//     bifurcated: NetdevRole::kShared; af_xdp: kExclusive) the device
//     starts from the netdev's IPv4 and IPv6 addresses (link-local
//     included, as rxe's GID table does).  The configured `addresses`
//     (UROCE_IP) are ADDED to them; an address on both keeps one entry with
//     the configured prefix length (config overrides).  The device's MAC is
//     the netdev's; a configured `mac` that differs is used, with a warning.
//     The UDP 4791 claim is held.
//     - kShared: the kernel sees every received frame and answers ARP, ND
//       and ICMP on that netdev (answer_host = false), and its TCP keeps
//       working; a configured address the kernel does not hold is answered
//       by no one: it is kept, with a warning.
//     - kExclusive: the kernel hears nothing (af_xdp's default program
//       redirects every frame to the port), so the engine answers ARP, ND
//       and ICMP echo for all of them (answer_host = true).
//   - On every other port (memif, ring, null, sim, a PCI device with no
//     netdev, and tap, whose netdev is the far end of the wire) the
//     configured addresses are the only ones, and the engine answers ARP,
//     ND and ICMP echo for them itself (answer_host = true).
// Explicit `gids` are added to the addresses the engine accepts RoCE for.
struct AddressPlan {
  std::vector<config::IpPrefix> addresses;  // the netdev's (in its order), then configured additions
  bool answer_host = true;
  std::vector<std::string> warnings;
};

// `netdev`: the port's own interface (kShared, kExclusive), else null;
// `kernel_answers`: whether the kernel sees the frames (kShared).
AddressPlan plan_addresses(const config::DeviceConfig& dev, const drivers::NetdevInfo* netdev, bool kernel_answers);

// What a device ended up with, for tools and the verbs shim.
struct DeviceInfo {
  std::string name;
  config::DeviceKind kind = config::DeviceKind::kDpdk;
  std::string port;      // the port's name: devargs as probed, "sim0"
  std::string driver;    // "net_af_packet", "net_memif", "sim"
  std::string netdev;    // the kernel netdev behind the port; empty if none
  drivers::dpdk::NetdevRole netdev_role = drivers::dpdk::NetdevRole::kNone;
  wire::MacAddr mac{};
  uint16_t mtu = 0;      // IP MTU: the configured one, else the port's
  std::vector<config::IpPrefix> addresses;
  LocalAddrs local;      // what the engine owns (addresses and gids, MAC, VLAN)
  bool answer_host = true;  // the engine answers ARP/ND/ICMP (no kernel shares the port)
  bool udp4791_claimed = false;
  // The kernel's stack no longer sees our RoCE frames (kShared netdevs:
  // drivers/ingress_filter.hpp); false with a warning saying why not.
  bool ingress_filter = false;
  ProgressKind progress = ProgressKind::Thread;
  std::string pcap;      // capture file; empty: none
  std::optional<drivers::FaultSpec> faults;
  std::vector<std::string> warnings;
};

// Hooks for open(), for tests and diagnostics.
struct OpenOptions {
  // Interposes a Port between the device's port (after any FaultPort) and
  // its engine; called once; the returned port must forward to `inner`.
  std::function<std::unique_ptr<drivers::Port>(drivers::Port& inner)> wrap_port;
  // The engine thread sleeps when idle instead of napping
  // (EngineConfig::idle_wait; uroced's devices).  A device uroced serves
  // always does.
  bool idle_wait = false;
  // The engine thread's SCHED_FIFO priority (0: SCHED_OTHER), for an engine
  // that sleeps when idle (idle_wait), so that it never spins at that
  // priority: uroced's (DESIGN.md "The shared device").  Without the right
  // (CAP_SYS_NICE) it stays SCHED_OTHER, with a warning.
  int realtime_priority = 0;
  // Coalesce ACKs (EngineConfig::ack_hold_ns = params::kAckHoldNs); false:
  // every turn flushes (uroced forwards its clients' frames as they come).
  bool hold_acks = true;
  // af_packet's receive ring in frames (DpdkPortConfig::af_packet_frames)
  // unless the devargs say.
  uint32_t af_packet_frames = drivers::dpdk::kAfPacketRingFrames;
};

class Device {
 public:
  // A device over `port`, which the caller owns and keeps until the Device
  // is gone (tests, benchmarks): the engine (initialised, not started:
  // engine().start() or poll it) and the RNIC named `name`.  No EAL work,
  // no telemetry, no registry.
  static drivers::Result<std::unique_ptr<Device>> assemble(drivers::Port& port, std::string name, EngineConfig ec);

  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const std::string& name() const noexcept { return info_.name; }
  const DeviceInfo& info() const noexcept { return info_; }
  Engine& engine() noexcept { return *engine_; }
  rnic::Rnic& rnic() noexcept { return *rnic_; }  // what the verbs act on
  drivers::Port& port() noexcept { return *top_; }  // what the engine drives
  // The DpdkPort underneath, or null (sim).
  drivers::dpdk::DpdkPort* dpdk_port() noexcept { return dpdk_port_.get(); }
  // The DaemonPort underneath (a device uroced serves), or null.
  drivers::daemon::DaemonPort* daemon_port() noexcept { return daemon_port_.get(); }
  // The FaultPort, or null when the device has no faults.
  drivers::FaultPort* fault_port() noexcept { return fault_port_.get(); }

  // Adds a client (destroyed in reverse order, before the RNIC).
  void attach(std::unique_ptr<DeviceClient> client);
  // The first client of type T, or null.
  template <class T>
  T* client() noexcept {
    for (auto& c : clients_) {
      if (auto* t = dynamic_cast<T*>(c.get())) return t;
    }
    return nullptr;
  }

  // One iteration of the loop if no other thread is running it (false
  // otherwise): inline progress, or an application thread assisting the
  // engine thread (Engine::try_progress).
  bool progress(Progress::Assist how = Progress::Assist::Hold);
  // After a post's doorbell: its turn now, or with the burst it belongs to
  // (Engine::post_kick).
  void post_progress() noexcept;
  // [any thread] The application polled a CQ; `empty`: it found nothing.
  // A client of uroced tells the daemon that it spins, and gives its core
  // away between such polls (drivers/daemon/shm_ring.hpp, busy polling).
  void cq_polled(bool empty) noexcept {
    if (daemon_port_ != nullptr) daemon_port_->app_polled(empty);
  }
  // Stops the engine thread (the device stays open; no more progress).
  void stop();

 private:
  friend class Devices;
  Device() = default;

  DeviceInfo info_;
  drivers::Udp4791Claim claim_;
  drivers::RoceIngressFilter ingress_filter_;
  int netdev_ifindex_ = 0;  // the kernel netdev the port shares, if any
  // Destroyed bottom-up: the engine first, the base port last.
  std::unique_ptr<drivers::dpdk::DpdkPort> dpdk_port_;
  std::unique_ptr<drivers::daemon::DaemonPort> daemon_port_;
  rte_mempool* daemon_pool_ = nullptr;  // the DaemonPort's buffers (freed after it)
  bool keep_daemon_pool_ = false;       // Teardown::Exit: not freed (as DpdkPort::keep_pool_at_close)
  drivers::sim::SimPort* sim_port_ = nullptr;  // owned by the registry's SimWire
  std::unique_ptr<drivers::FaultPort> fault_port_;
  std::unique_ptr<drivers::Port> wrapper_;
  drivers::Port* top_ = nullptr;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<rnic::Rnic> rnic_;  // destroyed after the clients (~Device)
  std::vector<std::unique_ptr<DeviceClient>> clients_;  // destroyed first, last one first
  bool registered_ = false;  // with telemetry
  static constexpr unsigned kNoLcore = ~0u;
  unsigned engine_lcore_ = kNoLcore;  // the engine thread's lcore id (rte_thread_register)
};

class Devices {
 public:
  // The process-wide registry.  It shuts down (stops engines, closes
  // ports, then the EAL if it started it) when the process exits.
  static Devices& instance();
  // [a child of fork(), its one thread] The child cannot use its parent's
  // devices: their engine threads are not in it, their locks may be held
  // by threads that are not in it, and their ports are the parent's.  The
  // registry instance() returned is abandoned (never touched again, not
  // even by its destructor) and instance() returns a new, empty one from
  // now on, on the same EAL (which the new one never closes).
  static Devices& renew_after_fork();

  // A registry of its own (tests).  The EAL is still one per process.
  Devices();
  ~Devices();
  Devices(const Devices&) = delete;
  Devices& operator=(const Devices&) = delete;

  // Use `cfg` instead of loading the configuration (UROCE_CONFIG and the
  // environment) on first use.  Fails once a device is open.
  drivers::Status configure(config::Config cfg);
  // A client of uroced (issue 15; DESIGN.md "The shared device"): the
  // devices are the daemon's, one for each it lists, each over a
  // DaemonPort (its RNIC this process's own, its QPNs the daemon's).  The
  // configuration is the environment's process-wide settings (progress,
  // log, capture, EAL); UROCE_FAULTS applies to the first device.  Fails
  // once a device is open.
  drivers::Status use_daemon(std::shared_ptr<drivers::daemon::Link> link);
  // The daemon's link, or null (in-process devices).
  std::shared_ptr<drivers::daemon::Link> daemon() const;
  // The configuration, loaded on first use.
  drivers::Result<config::Config> config();
  // The configured device names, in order (nothing is started).
  drivers::Result<std::vector<std::string>> names();

  // Starts the device (and the EAL) on first use; later calls return the
  // same Device.  An empty name means the first configured device.
  drivers::Result<Device*> open(std::string_view name = {}, const OpenOptions& options = {});
  drivers::Status open_all();
  Device* find(std::string_view name);  // an open device, or null

  // Stops the device's engine and closes its port.
  void close(std::string_view name);

  // A client for every device: `make` runs for each device open now and
  // for each one opened later, once its RNIC is up (ib_register_client).
  // A failing factory fails that device's open (or, for devices already
  // open, this call) with its error.
  using ClientFactory = std::function<drivers::Result<std::unique_ptr<DeviceClient>>(Device&)>;
  drivers::Status add_client(ClientFactory make);
  // Closes every device, then the sim wire, then the EAL (if this registry
  // started it: the EAL cannot start twice, so this is final).
  //   Teardown::Full   every object freed, in reverse order (tests, tools,
  //                    the registry's destructor);
  //   Teardown::Exit   the process is ending (the drop-in's exit handler):
  //                    engines stopped, ports and the EAL closed, but the
  //                    RNICs and what the program made on them stay in
  //                    memory, because other threads of the program may
  //                    still poll a CQ or read an MR until the process is
  //                    gone (a provider's rings likewise outlive exit());
  //                    so do the devices' clients (the CM), which the
  //                    program's rdma_cm calls may still reach.
  enum class Teardown : uint8_t { Full, Exit };
  void shutdown(Teardown how = Teardown::Full);

  // The EAL this registry runs on, once a device is open.
  const drivers::dpdk::EalInfo* eal() const;

 private:
  drivers::Status load_locked();
  drivers::Status start_eal_locked();
  drivers::Result<std::unique_ptr<Device>> bring_up(const config::DeviceConfig& dev, const OpenOptions& options);
  drivers::Status make_sim_wire_locked();
  drivers::Status make_port(Device& d, const config::DeviceConfig& dev, const OpenOptions& options);
  drivers::Status make_daemon_port(Device& d, const config::DeviceConfig& dev);
  void share_with_daemon(Device& d, uint32_t index);
  drivers::Status set_identity(Device& d, const config::DeviceConfig& dev);
  drivers::Status wrap_port(Device& d, const config::DeviceConfig& dev, const OpenOptions& options);
  drivers::Status make_engine(Device& d, const config::DeviceConfig& dev, const OpenOptions& options);
  static drivers::Status attach_client(Device& d, const ClientFactory& make);  // one factory's client on d
  std::string capture_for(const config::DeviceConfig& dev) const;
  void close_locked(std::vector<std::unique_ptr<Device>>::iterator it);

  mutable std::mutex mu_;
  std::optional<config::Config> cfg_;
  bool eal_owned_ = false;  // this registry started the EAL
  bool eal_ready_ = false;
  bool shut_down_ = false;
  std::atomic<bool> abandoned_{false};  // renew_after_fork: the parent's
  std::unique_ptr<drivers::sim::SimWire> sim_;
  std::map<std::string, drivers::sim::SimPort*, std::less<>> sim_ports_;  // owned by sim_
  std::vector<std::unique_ptr<Device>> open_;
  std::vector<ClientFactory> client_factories_;
  std::shared_ptr<drivers::daemon::Link> daemon_;  // use_daemon
};

// The EAL options a configuration asks for (pure).
drivers::dpdk::EalOptions eal_options(const config::Config& cfg);

}  // namespace uroce::transport
