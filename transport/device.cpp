#include "transport/device.hpp"

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include <rte_lcore.h>
#include <rte_mempool.h>
#include <pthread.h>
#include <sched.h>

#include <cstring>
#include <new>

#include "drivers/daemon/proto.hpp"
#include "drivers/sim/sim_wire.hpp"
#include "lib/config/mac.hpp"
#include "lib/util/log.hpp"
#include "transport/params.hpp"
#include "transport/rnic/rnic.hpp"
#include "transport/telemetry.hpp"

namespace uroce::transport {
namespace {

namespace dpdk = drivers::dpdk;
using drivers::Error;
using drivers::Status;

constexpr uint16_t kVlanTpid = wire::kEtherTypeVlan;
constexpr std::string_view kSimDriver = "sim";

config::IpPrefix to_prefix(const drivers::NetdevAddr& a) {
  config::IpPrefix p;
  p.addr.family = a.ipv6 ? config::IpFamily::kIpv6 : config::IpFamily::kIpv4;
  p.addr.bytes = a.addr;
  p.prefix_len = a.prefix;
  return p;
}

std::vector<config::IpPrefix>::iterator find_addr(std::vector<config::IpPrefix>& v, const config::IpAddr& a) {
  return std::find_if(v.begin(), v.end(), [&](const config::IpPrefix& p) { return p.addr == a; });
}

void add_ip(std::vector<IpAddr>& ips, const wire::Ipv6Addr& bytes) {
  const IpAddr ip = IpAddr::v6(bytes);  // IPv4 is already IPv4-mapped
  if (std::find(ips.begin(), ips.end(), ip) == ips.end()) ips.push_back(ip);
}

LocalAddrs local_addrs(const config::DeviceConfig& dev, const AddressPlan& plan, const wire::MacAddr& mac) {
  LocalAddrs l;
  l.mac = mac;
  for (const config::IpPrefix& p : plan.addresses) add_ip(l.ips, p.addr.bytes);
  for (const config::IpAddr& g : dev.gids) add_ip(l.ips, g.bytes);
  if (dev.vlan) {
    l.vlan_count = 1;
    l.vlans[0] = wire::VlanTag{kVlanTpid, *dev.vlan};
  }
  return l;
}

dpdk::EalMemory eal_memory(config::Hugepages h) {
  switch (h) {
    case config::Hugepages::kAuto: return dpdk::EalMemory::kAuto;
    case config::Hugepages::kYes: return dpdk::EalMemory::kHugepages;
    case config::Hugepages::kNo: return dpdk::EalMemory::kNoHuge;
  }
  return dpdk::EalMemory::kAuto;
}

ProgressKind engine_progress(config::Progress p) {
  return p == config::Progress::kInline ? ProgressKind::Inline : ProgressKind::Thread;
}

Error config_error(const config::ConfigError& e) { return Error{EINVAL, e.message()}; }

std::string device_error(const config::DeviceConfig& dev, const std::string& what) {
  return "device " + dev.name + ": " + what;
}

// The rte_flow rules of an isolated (mlx5) port: RoCEv2 to our addresses;
// ARP/ND too when the kernel does not answer for them.
drivers::mlx5::FlowPolicy flow_policy(const DeviceInfo& info, const config::DeviceConfig& dev) {
  drivers::mlx5::FlowPolicy p;
  for (const config::IpPrefix& a : info.addresses) {
    const IpAddr ip = IpAddr::v6(a.addr.bytes);  // IPv4 is already IPv4-mapped
    if (ip.is_v4()) {
      p.ipv4.push_back(ip.as_v4());
    } else {
      p.ipv6.push_back(ip.bytes);
    }
  }
  p.vlan = dev.vlan;
  p.steer_arp = p.steer_nd = info.answer_host;
  return p;
}

}  // namespace

// ---- addresses ----------------------------------------------------------------------

AddressPlan plan_addresses(const config::DeviceConfig& dev, const drivers::NetdevInfo* netdev, bool kernel_answers) {
  AddressPlan plan;
  if (netdev == nullptr) {
    plan.addresses = dev.addresses;
    plan.answer_host = true;
    if (plan.addresses.empty() && dev.gids.empty()) {
      plan.warnings.push_back("no address configured (addresses, UROCE_IP): the device has no GID");
    }
    return plan;
  }
  plan.answer_host = !kernel_answers;
  for (const drivers::NetdevAddr& a : netdev->addrs) plan.addresses.push_back(to_prefix(a));
  for (const config::IpPrefix& p : dev.addresses) {
    if (auto it = find_addr(plan.addresses, p.addr); it != plan.addresses.end()) {
      it->prefix_len = p.prefix_len;
      continue;
    }
    plan.addresses.push_back(p);
    if (kernel_answers) {
      plan.warnings.push_back(config::to_string(p) + " is not an address of " + netdev->name +
                              ": the kernel answers ARP/ND there, and not for it (add it with ip addr)");
    }
  }
  if (plan.addresses.empty()) plan.warnings.push_back(netdev->name + " has no IP address: the device has no GID");
  return plan;
}

dpdk::EalOptions eal_options(const config::Config& cfg) {
  dpdk::EalOptions o;
  o.memory = eal_memory(cfg.eal.hugepages);
  if (cfg.eal.memory_mb) o.memory_mb = *cfg.eal.memory_mb;
  if (cfg.eal.core) o.core = static_cast<unsigned>(*cfg.eal.core);
  o.telemetry = cfg.eal.telemetry;
  o.log_level = std::string(config::to_string(cfg.log));
  o.extra = cfg.eal.extra;
  for (const config::DeviceConfig& dev : cfg.devices) {
    if (dev.kind != config::DeviceKind::kDpdk) continue;
    const auto d = dpdk::parse_devargs(dev.devargs);
    if (d && dpdk::is_pci_address(d->name)) o.pci.push_back(dev.devargs);
  }
  return o;
}

// ---- Device --------------------------------------------------------------------------

drivers::Result<std::unique_ptr<Device>> Device::assemble(drivers::Port& port, std::string name, EngineConfig ec) {
  std::unique_ptr<Device> d(new Device());
  DeviceInfo& info = d->info_;
  info.name = std::move(name);
  info.kind = config::DeviceKind::kSim;
  info.port = port.name();
  info.driver = std::string(kSimDriver);
  info.mac = ec.local.mac;
  info.mtu = port.mtu();
  info.local = ec.local;
  info.answer_host = ec.answer_host;
  info.progress = ec.progress;
  info.pcap = ec.pcap_path;
  d->top_ = &port;
  d->engine_ = std::make_unique<Engine>(port, std::move(ec));
  if (Status st = d->engine_->init(); !st) return Error{st.error().code, info.name + ": " + st.error().message};
  d->rnic_ = std::make_unique<rnic::Rnic>(*d->engine_, info.name);
  return drivers::Result<std::unique_ptr<Device>>(std::move(d));
}

Device::~Device() {
  while (!clients_.empty()) clients_.pop_back();  // last attached first
  rnic_.reset();  // its QPs' timers and the engine's sink go with it (run_sync)
  if (registered_) {
    telemetry_unregister_set(info_.name, "port", this);
    telemetry_unregister(info_.name);
  }
  if (engine_) stop();
  engine_.reset();  // flushes TX and the capture
  wrapper_.reset();
  fault_port_.reset();
  dpdk_port_.reset();
  daemon_port_.reset();
  if (daemon_pool_ != nullptr && !keep_daemon_pool_) rte_mempool_free(daemon_pool_);
}

void Device::attach(std::unique_ptr<DeviceClient> client) {
  if (client) clients_.push_back(std::move(client));
}

bool Device::progress(Progress::Assist how) { return engine_->progress().try_progress(how); }
void Device::post_progress() noexcept { engine_->progress().post_kick(); }

void Device::stop() {
  engine_->stop();  // the thread releases its lcore id as it ends
  engine_lcore_ = kNoLcore;
}

// ---- Devices -------------------------------------------------------------------------

namespace {

Devices& make_registry() {
  // The registry shuts down from its destructor at exit.  Function-local
  // statics die in the reverse order of their construction, so the ones
  // that shutdown uses (the EAL's state, the telemetry registry) are made
  // first, to outlive it.
  (void)drivers::dpdk::eal_running();
  telemetry_unregister({});
  static Devices registry;
  return registry;
}

}  // namespace

namespace {
std::atomic<Devices*> g_renewed{nullptr};  // renew_after_fork's registry
}  // namespace

Devices& Devices::instance() {
  if (Devices* r = g_renewed.load(std::memory_order_acquire)) return *r;
  static Devices& registry = make_registry();
  return registry;
}

Devices& Devices::renew_after_fork() {
  instance().abandoned_.store(true, std::memory_order_release);
  // Never destroyed: the process's exit shuts it down (the drop-in's exit
  // gate), as it does the first one.
  auto* fresh = new Devices();
  g_renewed.store(fresh, std::memory_order_release);
  return *fresh;
}

Devices::Devices() = default;

Devices::~Devices() {
  if (!abandoned_.load(std::memory_order_acquire)) {
    shutdown();
    return;
  }
  // The parent's (renew_after_fork): nothing of it is run or freed here,
  // not even by the members' destructors.
  for (auto& d : open_) (void)d.release();
  (void)sim_.release();
  if (daemon_) new (std::nothrow) std::shared_ptr<drivers::daemon::Link>(std::move(daemon_));
}

Status Devices::configure(config::Config cfg) {
  std::lock_guard lock(mu_);
  if (!open_.empty() || shut_down_) return Error{EBUSY, "Devices::configure: devices are already open"};
  cfg_ = std::move(cfg);
  return {};
}

Status Devices::use_daemon(std::shared_ptr<drivers::daemon::Link> link) {
  std::lock_guard lock(mu_);
  if (!open_.empty() || shut_down_) return Error{EBUSY, "Devices::use_daemon: devices are already open"};
  // The process-wide settings from the environment; the per-device ones
  // (UROCE_DEVICE, UROCE_IP, UROCE_MAC, UROCE_MTU) are the daemon's.
  const config::EnvLookup env = config::process_env();
  const config::EnvLookup global = [env](std::string_view name) -> std::optional<std::string> {
    if (name == config::kEnvDevice || name == config::kEnvIp || name == config::kEnvMac || name == config::kEnvMtu ||
        std::find(config::kDeviceEnvVars.begin(), config::kDeviceEnvVars.end(), name) != config::kDeviceEnvVars.end())
      return std::nullopt;  // the daemon's device, or applied to it below
    return env(name);
  };
  auto cfg = config::parse_config("", "", global);
  if (!cfg) return config_error(cfg.error());
  for (const drivers::daemon::DeviceDesc& desc : link->devices()) {
    config::DeviceConfig dc;
    dc.name = desc.name;
    dc.kind = config::DeviceKind::kDaemon;
    wire::MacAddr mac;
    std::copy(desc.mac, desc.mac + 6, mac.begin());
    dc.mac = mac;
    dc.mtu = desc.mtu;
    if (desc.vlan != 0) dc.vlan = desc.vlan;  // the daemon's frames are tagged: so are ours
    for (uint32_t i = 0; i < desc.naddrs; ++i) {
      config::IpPrefix p;
      std::copy(desc.addrs[i].ip, desc.addrs[i].ip + 16, p.addr.bytes.begin());
      p.addr.family = IpAddr{p.addr.bytes}.is_v4() ? config::IpFamily::kIpv4 : config::IpFamily::kIpv6;
      p.prefix_len = desc.addrs[i].prefix;
      dc.addresses.push_back(p);
    }
    cfg->devices.push_back(std::move(dc));
  }
  if (!cfg->devices.empty())
    if (auto applied = config::apply_device_env(env, cfg->devices.front()); !applied) return config_error(applied.error());
  cfg_ = std::move(*cfg);
  daemon_ = std::move(link);
  return {};
}

std::shared_ptr<drivers::daemon::Link> Devices::daemon() const {
  std::lock_guard lock(mu_);
  return daemon_;
}

Status Devices::load_locked() {
  if (cfg_) return {};
  auto loaded = config::load_config(config::process_env());
  if (!loaded) return config_error(loaded.error());
  cfg_ = std::move(*loaded);
  return {};
}

drivers::Result<config::Config> Devices::config() {
  std::lock_guard lock(mu_);
  if (Status st = load_locked(); !st) return st.error();
  return *cfg_;
}

drivers::Result<std::vector<std::string>> Devices::names() {
  std::lock_guard lock(mu_);
  if (Status st = load_locked(); !st) return st.error();
  std::vector<std::string> out;
  for (const config::DeviceConfig& d : cfg_->devices) out.push_back(d.name);
  return out;
}

Status Devices::start_eal_locked() {
  if (eal_ready_) return {};
  const bool running_before = dpdk::eal_running();
  const auto& eal = dpdk::eal_init(eal_options(*cfg_));
  if (!eal) return eal.error();
  eal_owned_ = !running_before;
  eal_ready_ = true;
  return {};
}

const dpdk::EalInfo* Devices::eal() const {
  std::lock_guard lock(mu_);
  if (!eal_ready_) return nullptr;
  return &dpdk::eal_init().value();
}

drivers::Result<Device*> Devices::open(std::string_view name, const OpenOptions& options) {
  std::lock_guard lock(mu_);
  if (shut_down_) return Error{ESHUTDOWN, "Devices: shut down (the EAL cannot start twice)"};
  if (Status st = load_locked(); !st) return st.error();
  if (cfg_->devices.empty()) {
    return Error{ENODEV, "no uroce device is configured (set UROCE_DEVICE, or add a [[device]] to the config file)"};
  }
  const auto cfg_it = name.empty() ? cfg_->devices.begin()
                                   : std::find_if(cfg_->devices.begin(), cfg_->devices.end(),
                                                  [&](const config::DeviceConfig& d) { return d.name == name; });
  if (cfg_it == cfg_->devices.end()) return Error{ENODEV, "no uroce device named '" + std::string(name) + "'"};
  for (auto& d : open_) {
    if (d->name() == cfg_it->name) return d.get();
  }
  if (Status st = start_eal_locked(); !st) return st.error();
  auto dev = bring_up(*cfg_it, options);
  if (!dev) return dev.error();
  open_.push_back(std::move(*dev));
  return open_.back().get();
}

Status Devices::open_all() {
  std::vector<std::string> all;
  if (auto n = names(); n) {
    all = std::move(*n);
  } else {
    return n.error();
  }
  for (const std::string& n : all) {
    if (auto d = open(n); !d) return d.error();
  }
  return {};
}

Device* Devices::find(std::string_view name) {
  std::lock_guard lock(mu_);
  for (auto& d : open_) {
    if (d->name() == name) return d.get();
  }
  return nullptr;
}

void Devices::close_locked(std::vector<std::unique_ptr<Device>>::iterator it) { open_.erase(it); }

void Devices::close(std::string_view name) {
  std::lock_guard lock(mu_);
  const auto it = std::find_if(open_.begin(), open_.end(), [&](const auto& d) { return d->name() == name; });
  if (it != open_.end()) close_locked(it);
}

Status Devices::attach_client(Device& d, const ClientFactory& make) {
  auto c = make(d);
  if (!c) return c.error();
  d.attach(std::move(*c));
  return {};
}

Status Devices::add_client(ClientFactory make) {
  std::lock_guard lock(mu_);
  if (shut_down_) return Error{ESHUTDOWN, "Devices: shut down"};
  for (auto& d : open_) {
    if (Status st = attach_client(*d, make); !st) return st.error();
  }
  client_factories_.push_back(std::move(make));
  return {};
}

void Devices::shutdown(Teardown how) {
  if (abandoned_.load(std::memory_order_acquire)) return;  // the parent's (renew_after_fork)
  std::lock_guard lock(mu_);
  if (shut_down_) return;
  shut_down_ = true;
  if (how == Teardown::Exit) {
    for (auto& d : open_) {  // see Teardown::Exit
      for (auto& c : d->clients_) (void)c.release();
      (void)d->rnic_.release();
      if (d->dpdk_port_) d->dpdk_port_->keep_pool_at_close();  // no 10,000 page faults to zero it on the way out
      d->keep_daemon_pool_ = true;
    }
  }
  for (auto& d : open_) d->stop();  // every engine quiet before any port closes
  while (!open_.empty()) close_locked(std::prev(open_.end()));
  sim_ports_.clear();
  sim_.reset();
  if (eal_owned_) (void)dpdk::eal_shutdown();
}

// ---- bringing one device up ------------------------------------------------------------

std::string Devices::capture_for(const config::DeviceConfig& dev) const {
  if (dev.pcap) return *dev.pcap;
  if (!cfg_->pcap) return {};
  if (cfg_->devices.size() <= 1) return *cfg_->pcap;
  const std::filesystem::path p(*cfg_->pcap);
  return (p.parent_path() / (p.stem().string() + "-" + dev.name + p.extension().string())).string();
}

// The sim wire takes endpoints only before its first frame, so it gets one
// for every sim device of the configuration at once.
Status Devices::make_sim_wire_locked() {
  if (sim_) return {};
  sim_ = std::make_unique<drivers::sim::SimWire>();
  for (const config::DeviceConfig& dev : cfg_->devices) {
    if (dev.kind != config::DeviceKind::kSim) continue;
    drivers::sim::SimPortConfig pc;
    pc.name = dev.name;
    pc.mac = dev.mac;
    if (dev.mtu) pc.mtu = *dev.mtu;
    auto port = sim_->add_port(pc);
    if (!port) {
      sim_ports_.clear();
      sim_.reset();
      return port.error();
    }
    sim_ports_.emplace(dev.name, *port);
  }
  return {};
}

// A device uroced serves: its shared region and a pool for what crosses it.
Status Devices::make_daemon_port(Device& d, const config::DeviceConfig& dev) {
  const auto it = std::find_if(cfg_->devices.begin(), cfg_->devices.end(),
                               [&](const config::DeviceConfig& c) { return c.name == dev.name; });
  const auto index = static_cast<uint32_t>(it - cfg_->devices.begin());
  if (!daemon_ || index >= daemon_->devices().size()) return Error{ENODEV, device_error(dev, "uroced does not serve it")};
  auto region = daemon_->open_device(index);
  if (!region) return Error{region.error().code, device_error(dev, region.error().message)};
  // Room for one frame of the region per mbuf.  Frames are copied out of
  // the receive ring a burst at a time (DaemonPort::rx_burst), so the
  // pool need not hold a ring: the in-process pool's 4095 less the PMD's
  // receive ring, for what the engine holds itself.
  dpdk::PoolOptions po;
  po.name_prefix = "uroced";
  po.data_room = static_cast<uint16_t>(region->geometry().payload_max() + dpdk::kMbufHeadroom);
  po.mbufs = 3071;
  po.packed = true;  // copied by virtual address only
  auto pool = dpdk::create_pktmbuf_pool(po);
  if (!pool) return Error{pool.error().code, device_error(dev, pool.error().message)};
  d.daemon_pool_ = *pool;
  d.daemon_port_ = std::make_unique<drivers::daemon::DaemonPort>(std::move(*region), daemon_->devices()[index], *pool);
  d.top_ = d.daemon_port_.get();
  d.info_.driver = "uroced";
  d.info_.netdev = daemon_->devices()[index].netdev;
  return {};
}

// The RNIC's shared-device hooks (rnic.hpp SharedDevice): QPNs from the
// daemon, claims and multicast groups into the ring.
void Devices::share_with_daemon(Device& d, uint32_t index) {
  std::shared_ptr<drivers::daemon::Link> link = daemon_;
  drivers::daemon::DaemonPort* port = d.daemon_port_.get();
  Engine* engine = d.engine_.get();
  rnic::Rnic::SharedDevice sh;
  // A record follows the frames the engine has queued already (a QP's held
  // last ACK must reach the daemon before the QP's unclaim does), kept
  // ones included: when the ring was full, the engine waits for the daemon
  // to make room for them, at most params::kRecordDrainNs (a daemon that
  // stops draining is about to be found gone: the record goes anyway).
  auto follow_frames = [port, engine] {
    if (!engine->drain_tx(params::kRecordDrainNs) && !port->gone())
      log_line(LogType::Daemon, LogLevel::Warning, "uroced's ring stayed full for %llu ms: a record overtakes frames",
               static_cast<unsigned long long>(params::kRecordDrainNs / 1'000'000));
  };
  sh.alloc_qpn = [link, index](uint32_t* qpn) { return link->alloc_qpn(index, qpn); };
  sh.free_qpn = [link, index](uint32_t qpn) { (void)link->free_qpn(index, qpn); };
  sh.claim = [port, follow_frames](uint32_t qpn, const wire::Ipv6Addr& dgid, uint32_t dqpn) {
    uint8_t gid[16];
    std::copy(dgid.begin(), dgid.end(), gid);
    follow_frames();
    port->claim(qpn, gid, dqpn);
  };
  sh.unclaim = [port, follow_frames](uint32_t qpn) {
    follow_frames();
    port->unclaim(qpn);
  };
  sh.mcast = [port, follow_frames](const wire::Ipv6Addr& mgid, bool join) {
    uint8_t g[16];
    std::copy(mgid.begin(), mgid.end(), g);
    follow_frames();
    port->mcast(g, join);
  };
  d.rnic_->set_shared(std::move(sh));
}

Status Devices::make_port(Device& d, const config::DeviceConfig& dev, const OpenOptions& options) {
  DeviceInfo& info = d.info_;
  if (dev.kind == config::DeviceKind::kDaemon) return make_daemon_port(d, dev);
  if (dev.kind == config::DeviceKind::kSim) {
    if (Status st = make_sim_wire_locked(); !st) return Error{st.error().code, device_error(dev, st.error().message)};
    const auto it = sim_ports_.find(dev.name);
    if (it == sim_ports_.end()) return Error{ENODEV, device_error(dev, "no port on the sim wire")};
    d.sim_port_ = it->second;
    d.top_ = it->second;
    info.driver = kSimDriver;
    return {};
  }
  dpdk::DpdkPortConfig pc;
  pc.devargs = dev.devargs;
  pc.mtu = dev.mtu;
  pc.mac = dev.mac;
  pc.af_packet_frames = options.af_packet_frames;
  auto port = dpdk::DpdkPort::open(pc);
  if (!port) return Error{port.error().code, device_error(dev, port.error().message)};
  d.dpdk_port_ = std::move(*port);
  d.top_ = d.dpdk_port_.get();
  info.driver = d.dpdk_port_->driver();
  info.netdev_role = d.dpdk_port_->netdev_role();
  return {};
}

Status Devices::make_engine(Device& d, const config::DeviceConfig& dev, const OpenOptions& options) {
  DeviceInfo& info = d.info_;
  EngineConfig ec;
  ec.local = info.local;
  ec.answer_host = info.answer_host;
  ec.announce = info.answer_host;  // a kernel that shares the netdev announces its own addresses
  ec.pcap_path = info.pcap;
  ec.progress = info.progress;
  ec.ack_hold_ns = options.hold_acks ? params::kAckHoldNs : 0;
  ec.post_batch_gap_ns = params::kPostBatchGapNs;
  ec.idle_wait = options.idle_wait;
  ec.realtime_priority = options.realtime_priority;
  ec.lcores = dev.engine_lcores;  // config validation keeps it 1 where it cannot be more
  if (dev.kind == config::DeviceKind::kDaemon) {
    ec.idle_wait = true;
    // The daemon answers ARP/ND, announces, loops frames back (maybe to
    // another process) and owns the QPN space (DESIGN.md "The shared device").
    ec.announce = false;
    ec.port_loopback = true;
    const auto it = std::find_if(cfg_->devices.begin(), cfg_->devices.end(),
                                 [&](const config::DeviceConfig& c) { return c.name == dev.name; });
    const auto index = static_cast<size_t>(it - cfg_->devices.begin());
    if (daemon_ && index < daemon_->devices().size()) ec.max_qpn = daemon_->devices()[index].max_qpn;
  }
  if (d.dpdk_port_ && d.dpdk_port_->isolated()) {
    // Flow isolation keeps ARP/ND replies with the kernel: ask it.
    const int ifindex = d.netdev_ifindex_;
    ec.kernel_neigh = [ifindex](const IpAddr& ip) -> std::optional<wire::MacAddr> {
      if (auto mac = drivers::kernel_neighbour(ifindex, ip.bytes)) return mac;
      drivers::kernel_solicit(ifindex, ip.bytes);
      return std::nullopt;
    };
  }
  if (d.netdev_ifindex_ != 0) {
    // A destination outside every prefix of the device goes through the
    // gateway of the kernel's route on the shared interface (as rxe, whose
    // addresses are the kernel's, resolves it); inside one, on the link.
    const int ifindex = d.netdev_ifindex_;
    ec.next_hop = [ifindex, prefixes = info.addresses](const IpAddr& ip) -> std::optional<IpAddr> {
      const bool on_link = std::any_of(prefixes.begin(), prefixes.end(), [&](const config::IpPrefix& p) {
        return config::prefix_contains(p, ip.bytes);
      });
      if (on_link) return std::nullopt;
      if (const auto gw = drivers::kernel_gateway(ifindex, ip.bytes)) return IpAddr{*gw};
      return std::nullopt;
    };
  }
  d.engine_ = std::make_unique<Engine>(*d.top_, std::move(ec));
  if (Status st = d.engine_->init(); !st) return Error{st.error().code, device_error(dev, st.error().message)};
  telemetry_register(info.name, d.engine_.get());
  // The port's own figures (`uroce stats`: set "port").
  drivers::Port* port = d.top_;
  telemetry_register_set(info.name, "port", &d, [port](const CounterVisitor& f) {
    const drivers::PortStats ps = port->stats();
    f("port_rx_frames", ps.rx_frames);
    f("port_tx_frames", ps.tx_frames);
    f("port_rx_dropped", ps.rx_dropped);
    f("port_tx_dropped", ps.tx_dropped);
    f("port_burst_faults", ps.burst_faults);
  });
  d.registered_ = true;
  // The engine thread (or inline progress's backstop) is not an EAL
  // thread: register it, on the thread itself, so it has an lcore id
  // (mempool caches; net_af_xdp loses frames without one), and release the
  // id when it ends.
  Device* dev_ptr = &d;
  const int rt = options.realtime_priority;
  const std::string dev_name = info.name;
  auto on_start = [dev_ptr, rt, dev_name] {
    if (rte_thread_register() == 0) dev_ptr->engine_lcore_ = rte_lcore_id();
    if (rt > 0) {
      sched_param sp{};
      sp.sched_priority = rt;
      if (const int e = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp); e != 0)
        log_line(LogType::Engine, LogLevel::Warning, "%s: the engine thread stays SCHED_OTHER (SCHED_FIFO %d: %s)",
                 dev_name.c_str(), rt, std::strerror(e));
    }
  };
  auto on_exit = [] {
    if (rte_lcore_id() != LCORE_ID_ANY) rte_thread_unregister();
  };
  if (info.progress == ProgressKind::Thread) {
    d.engine_->start(on_start, on_exit);
  } else {
    d.engine_->progress().start_backstop(params::kInlineBackstopNs, on_start, on_exit);
  }
  return {};
}

// Addresses, MAC, MTU and the UDP 4791 claim (DESIGN.md "Addresses";
// plan_addresses has the rules).
Status Devices::set_identity(Device& d, const config::DeviceConfig& dev) {
  DeviceInfo& info = d.info_;
  drivers::Port& base = *d.top_;
  if (dev.kind == config::DeviceKind::kDaemon) {  // the daemon's, as it listed them
    info.addresses = dev.addresses;
    info.answer_host = false;
    info.mac = base.mac();
    info.mtu = base.mtu();
    AddressPlan plan;
    plan.addresses = dev.addresses;
    info.local = local_addrs(dev, plan, info.mac);
    return {};
  }
  const bool own_netdev =
      info.netdev_role == dpdk::NetdevRole::kShared || info.netdev_role == dpdk::NetdevRole::kExclusive;
  std::optional<drivers::NetdevInfo> netdev;
  if (own_netdev) {
    std::string err;
    netdev = drivers::query_netdev(info.netdev, &err);
    if (!netdev) return Error{ENODEV, device_error(dev, err)};
  }
  AddressPlan plan =
      plan_addresses(dev, netdev ? &*netdev : nullptr, info.netdev_role == dpdk::NetdevRole::kShared);
  info.addresses = plan.addresses;
  info.answer_host = plan.answer_host;
  info.warnings = std::move(plan.warnings);
  info.mac = dev.mac.value_or(base.mac());
  if (netdev && info.mac != base.mac()) {
    info.warnings.push_back("mac " + config::format_mac(info.mac) + " differs from " + info.netdev + "'s " +
                            config::format_mac(base.mac()) + ": frames to the netdev's MAC are not ours");
  }
  info.mtu = dev.mtu.value_or(base.mtu());
  if (info.mtu > base.mtu()) {
    return Error{EINVAL, device_error(dev, "mtu " + std::to_string(info.mtu) + " is more than the port carries (" +
                                               std::to_string(base.mtu()) + ")")};
  }
  info.local = local_addrs(dev, plan, info.mac);
  if (netdev) d.netdev_ifindex_ = netdev->ifindex;
  if (d.dpdk_port_ && d.dpdk_port_->isolated()) {
    if (Status st = d.dpdk_port_->install_flows(flow_policy(info, dev)); !st) {
      return Error{st.error().code, device_error(dev, "flow rules: " + st.error().message)};
    }
  }
  if (own_netdev) {
    std::string err;
    info.udp4791_claimed = d.claim_.open(&err);
    if (!info.udp4791_claimed) {
      info.warnings.push_back("UDP port 4791 not claimed (" + err + "): the kernel may answer RoCE with ICMP");
    }
  }
  // A netdev the kernel receives on too: its stack would take every RoCE
  // frame to our addresses after the port got it (IP input, a route, the
  // claim socket above); a tcx program drops them once the port has its
  // copy.  Not with a VLAN: the frames the filter could match are then
  // another VLAN's.
  if (info.netdev_role == dpdk::NetdevRole::kShared && !dev.vlan && netdev && !info.local.ips.empty()) {
    std::vector<wire::Ipv6Addr> ips;
    ips.reserve(info.local.ips.size());
    for (const auto& ip : info.local.ips) ips.push_back(ip.bytes);
    if (Status st = d.ingress_filter_.attach(netdev->ifindex, ips); st) {
      info.ingress_filter = true;
    } else {
      info.warnings.push_back("RoCE frames also go through " + info.netdev +
                              "'s kernel stack (ingress filter: " + st.error().message + ")");
    }
  }
  return {};
}

// The FaultPort (when the spec changes anything), then the caller's wrapper.
Status Devices::wrap_port(Device& d, const config::DeviceConfig& dev, const OpenOptions& options) {
  if (dev.faults) {
    auto spec = drivers::parse_fault_spec(*dev.faults);
    if (!spec) return Error{EINVAL, device_error(dev, "faults: " + spec.error().message)};
    if (spec->active()) {
      auto fp = drivers::FaultPort::create(*d.top_, *spec);
      if (!fp) return Error{fp.error().code, device_error(dev, fp.error().message)};
      d.fault_port_ = std::move(*fp);
      d.top_ = d.fault_port_.get();
      d.info_.faults = *spec;
    }
  }
  if (options.wrap_port) {
    d.wrapper_ = options.wrap_port(*d.top_);
    if (d.wrapper_) d.top_ = d.wrapper_.get();
  }
  return {};
}

drivers::Result<std::unique_ptr<Device>> Devices::bring_up(const config::DeviceConfig& dev, const OpenOptions& options) {
  std::unique_ptr<Device> d(new Device());
  DeviceInfo& info = d->info_;
  info.name = dev.name;
  info.kind = dev.kind;
  if (Status st = make_port(*d, dev, options); !st) return st.error();
  info.port = d->top_->name();
  info.netdev = d->top_->netdev();
  if (Status st = set_identity(*d, dev); !st) return st.error();
  if (Status st = wrap_port(*d, dev, options); !st) return st.error();
  info.pcap = capture_for(dev);
  info.progress = engine_progress(cfg_->progress);
  if (Status st = make_engine(*d, dev, options); !st) return st.error();
  d->rnic_ = std::make_unique<rnic::Rnic>(*d->engine_, dev.name);
  d->rnic_->set_selective_repeat(dev.loss_recovery == config::LossRecovery::kSelective);
  d->rnic_->set_spray_ports(dev.spray_ports);
  d->rnic_->set_cc(dev.cc);
  if (dev.kind == config::DeviceKind::kDaemon) {
    const auto it = std::find_if(cfg_->devices.begin(), cfg_->devices.end(),
                                 [&](const config::DeviceConfig& c) { return c.name == dev.name; });
    share_with_daemon(*d, static_cast<uint32_t>(it - cfg_->devices.begin()));
  }
  for (const ClientFactory& make : client_factories_) {
    if (Status st = attach_client(*d, make); !st) return Error{st.error().code, device_error(dev, st.error().message)};
  }
  return drivers::Result<std::unique_ptr<Device>>(std::move(d));
}

}  // namespace uroce::transport
