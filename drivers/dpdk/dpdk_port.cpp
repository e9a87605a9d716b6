#include "drivers/dpdk/dpdk_port.hpp"

#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/socket.h>

#include <filesystem>

#include "lib/util/fault_guard.hpp"
#include "lib/util/quiet_threads.hpp"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <rte_bus_vdev.h>
#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

#include "drivers/netdev.hpp"

namespace uroce::drivers::dpdk {
namespace {

constexpr uint16_t kQueue = 0;
constexpr std::string_view kTapDriver = "net_tap";
constexpr std::string_view kMemifDriver = "net_memif";
// A memif port whose peer left is closed this long after: the interrupt
// thread finishes its own teardown of the port first (DpdkPort::close).
constexpr std::chrono::milliseconds kMemifPeerGoneWait{20};
constexpr std::string_view kAfXdpDriver = "net_af_xdp";
constexpr std::string_view kAfPacketDriver = "net_af_packet";
constexpr std::string_view kMemifRoleKey = "role";
constexpr std::string_view kMemifServer = "server";
constexpr std::string_view kIfaceKey = "iface";
constexpr std::string_view kPciBus = "pci";
constexpr std::string_view kFrameszKey = "framesz";
constexpr std::string_view kQdiscBypassKey = "qdisc_bypass";
constexpr std::string_view kAfPacketRingKeys[] = {"blocksz", "framesz", "framecnt"};

std::string dpdk_error(std::string_view what, int rc) {
  const int err = rc < 0 ? -rc : rc;
  return std::string(what) + ": " + rte_strerror(err);
}

// ---- which ethdevs are open -----------------------------------------------------

// Namespace-scope, not function-local: a port closed from a static
// destructor (a registry shutting down at exit) still finds them.
std::mutex g_open_mu;
std::set<uint16_t> g_open_ports;

bool claim_port(uint16_t id) {
  std::lock_guard lock(g_open_mu);
  return g_open_ports.insert(id).second;
}

void release_port(uint16_t id) {
  std::lock_guard lock(g_open_mu);
  g_open_ports.erase(id);
}

// ---- finding and probing ---------------------------------------------------------

// The ethdev of device `name`: by port name, else the first port whose
// rte_device has that name (a PCI device's ports).
std::optional<uint16_t> find_port(const std::string& name) {
  uint16_t id = 0;
  if (rte_eth_dev_get_port_by_name(name.c_str(), &id) == 0) return id;
  RTE_ETH_FOREACH_DEV(id) {
    rte_eth_dev_info info{};
    if (rte_eth_dev_info_get(id, &info) == 0 && info.device != nullptr && name == rte_dev_name(info.device)) {
      return id;
    }
  }
  return std::nullopt;
}

// The ring an af_packet vdev will have: the devargs' geometry where they
// give any (the PMD's defaults for the keys they leave out: a page, 2048,
// 512), else the one its netdev's MTU needs with at least `frames`
// frames, which is added to the devargs.
AfPacketRing add_af_packet_ring(Devargs& d, uint16_t data_room, uint32_t frames) {
  const long page = sysconf(_SC_PAGESIZE);
  const uint32_t page_size = page > 0 ? static_cast<uint32_t>(page) : 0;
  auto number = [&](std::string_view key, uint32_t dflt) {
    const auto v = d.get(key);
    return v ? static_cast<uint32_t>(std::strtoul(std::string(*v).c_str(), nullptr, 10)) : dflt;
  };
  const AfPacketRing given{.blocksz = number("blocksz", page_size != 0 ? page_size : 4096),
                           .framesz = number(kFrameszKey, kAfPacketDefaultFramesz),
                           .framecnt = number("framecnt", kAfPacketDefaultFramecnt)};
  const bool any_given = std::any_of(std::begin(kAfPacketRingKeys), std::end(kAfPacketRingKeys),
                                     [&](std::string_view k) { return d.has(k); });
  const auto iface = d.get(kIfaceKey);
  if (any_given || !iface) return given;
  const auto info = query_netdev(std::string(*iface), nullptr);
  if (!info) return given;  // the probe reports the missing interface
  const uint32_t max_framesz = data_room - RTE_PKTMBUF_HEADROOM + kAfPacketFrameOverhead;
  const auto ring = af_packet_ring_for_mtu(info->mtu, page_size, max_framesz, frames);
  if (!ring) return given;
  d.args.emplace_back("blocksz", std::to_string(ring->blocksz));
  d.args.emplace_back("framesz", std::to_string(ring->framesz));
  d.args.emplace_back("framecnt", std::to_string(ring->framecnt));
  return *ring;
}

Status probe(const Devargs& d, bool pci) {
  if (pci) {
    if (const int rc = rte_dev_probe(d.text().c_str()); rc < 0) {
      return Error{-rc, dpdk_error("rte_dev_probe(" + d.text() + ")", rc) +
                            " (a PCI device is probed at EAL start when listed with -a)"};
    }
    return {};
  }
  if (const int rc = rte_vdev_init(d.name.c_str(), d.args_text().c_str()); rc < 0) {
    return Error{-rc, dpdk_error("rte_vdev_init(" + d.name + ", " + d.args_text() + ")", rc)};
  }
  return {};
}

// net_af_packet copies each frame out of its ring into an mbuf and takes
// only a pool whose mbufs hold a whole ring frame's data after the
// headroom (framesz - kAfPacketFrameOverhead; the rest is the tpacket
// header: rx_queue_setup says ENOMEM otherwise).  No larger frame comes
// from the kernel, and the port's MTU is capped by the same framesz, so
// the engine builds none.  The default jumbo data room is kept for other
// ports: at 1500 bytes an mbuf is a quarter of the memory, and the pool's
// memory is what DPDK zeroes when it is freed.
uint16_t af_packet_data_room(uint32_t framesz) {
  const uint32_t room = framesz - kAfPacketFrameOverhead + RTE_PKTMBUF_HEADROOM;
  return static_cast<uint16_t>(std::min<uint32_t>(room, kDefaultDataRoom));
}

NetdevRole role_of(unsigned if_index, std::string_view driver) {
  if (if_index == 0) return NetdevRole::kNone;
  if (driver == kTapDriver) return NetdevRole::kPeer;
  if (driver == kAfXdpDriver) return NetdevRole::kExclusive;
  return NetdevRole::kShared;
}

// The mlx5 PMD's ethdev driver name ("mlx5_pci"; "mlx5_eth" on older
// releases, "mlx5_auxiliary" for sub-functions).
bool is_mlx5_driver(std::string_view driver) { return driver.starts_with("mlx5"); }

bool is_memif_client(const std::string& driver, const std::string& devargs) {
  if (driver != kMemifDriver) return false;
  const auto d = parse_devargs(devargs);
  return !d || d->get(kMemifRoleKey).value_or("client") != kMemifServer;
}

}  // namespace

std::string_view to_string(NetdevRole r) noexcept {
  switch (r) {
    case NetdevRole::kNone: return "none";
    case NetdevRole::kShared: return "shared";
    case NetdevRole::kExclusive: return "exclusive";
    case NetdevRole::kPeer: return "peer";
  }
  return "?";
}

Result<std::unique_ptr<DpdkPort>> DpdkPort::open(const DpdkPortConfig& config) {
  if (!eal_running()) return Error{ENODEV, "DpdkPort: the EAL is not running (eal_init first)"};
  auto parsed = parse_devargs(config.devargs);
  if (!parsed) return parsed.error();
  Devargs d = std::move(*parsed);
  const bool pci = is_pci_address(d.name);
  if (pci) d.name = canonical_pci_address(d.name);
  const AfPacketRing ring = is_af_packet(d.name) ? add_af_packet_ring(d, config.data_room, config.af_packet_frames)
                                                 : AfPacketRing{};

  std::unique_ptr<DpdkPort> p(new DpdkPort());
  p->af_packet_ring_ = ring;
  p->pmd_sends_ = d.get(kQdiscBypassKey) == "0";
  if (is_af_packet(d.name)) {
    p->start_pool(config);
    p->start_packet_rx(d, ring);
  }
  p->devargs_ = d.text();
  p->device_name_ = d.name;
  p->is_vdev_ = !pci;
  auto id = find_port(d.name);
  if (!id) {
    if (Status st = probe(d, pci); !st) return st.error();
    p->probed_here_ = true;
    id = find_port(d.name);
    if (!id) return Error{ENODEV, "DpdkPort: " + d.name + " was probed but has no ethdev port"};
  }
  p->port_id_ = *id;
  if (!claim_port(*id)) {
    p->probed_here_ = false;  // someone else's: leave it
    return Error{EBUSY, "DpdkPort: " + d.name + " is already open in this process"};
  }
  p->claimed_ = true;
  if (Status st = p->configure(config); !st) return st.error();
  if (Status st = p->start(config); !st) return st.error();
  p->read_identity(config);
  return Result<std::unique_ptr<DpdkPort>>(std::move(p));
}

// One RX and one TX queue, the pool, the role of the netdev, MTU and MAC.
Status DpdkPort::configure(const DpdkPortConfig& config) {
  rte_eth_dev_info info{};
  if (const int rc = rte_eth_dev_info_get(port_id_, &info); rc != 0) {
    return Error{-rc, dpdk_error("rte_eth_dev_info_get(" + devargs_ + ")", rc)};
  }
  driver_ = info.driver_name != nullptr ? info.driver_name : "";
  is_memif_ = driver_ == "net_memif";
  if (is_memif_) fault_guard::install();
  max_mtu_ = info.max_mtu;
  role_ = role_of(info.if_index, driver_);
  if (info.if_index != 0) {
    char name[IF_NAMESIZE] = {};
    if (if_indextoname(info.if_index, name) != nullptr) netdev_ = name;
  }
  // The mlx5 PMD shares its ConnectX port with the kernel (bifurcated):
  // isolate before configure, rules after start (install_flows).
  if (config.mlx5_isolation && is_mlx5_driver(driver_)) {
    if (Status st = mlx5::enable_isolation(port_id_); !st) return st;
    isolated_ = true;
  }
  rte_eth_conf conf{};  // rxmode.mtu 0: the ethdev default (see the header on MTU)
  if (config.fast_free) conf.txmode.offloads = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE;
  if (const int rc = rte_eth_dev_configure(port_id_, 1, 1, &conf); rc != 0) {
    return Error{-rc, dpdk_error("rte_eth_dev_configure(" + devargs_ + ")", rc)};
  }
  tx_offloads_ = conf.txmode.offloads;
  if (Status st = setup_queues(config); !st) return st;
  if (role_ == NetdevRole::kNone) return set_mtu_and_mac(config);
  return {};
}

// The port's own mbuf pool for its driver and af_packet ring.
PoolOptions DpdkPort::pool_options(const DpdkPortConfig& config, std::string_view driver) const {
  uint16_t room = config.data_room;
  // net_af_xdp makes its UMEM of the pool's own memory, one object per
  // UMEM frame, and the kernel takes no frame larger than a page: an
  // object of exactly a page, laid out as the PMD expects (page_frames).
  const bool page_frames = driver == kAfXdpDriver;
  if (page_frames) {
    room = page_frame_data_room(0);
  } else if (af_packet_ring_.framesz > kAfPacketFrameOverhead && config.data_room == kDefaultDataRoom) {
    room = af_packet_data_room(af_packet_ring_.framesz);
  }
  // af_packet copies frames by virtual address: its mbufs may share pages.
  return PoolOptions{.name_prefix = "uroce_port", .mbufs = config.pool_mbufs, .data_room = room,
                     .packed = af_packet_ring_.framesz != 0, .page_frames = page_frames};
}

// An af_packet port's pool, made on a thread of its own while the PMD
// probes (issue 13: start-up): filling the pool's memory is page faults,
// ~15 ms of CPU on this machine's VM, and the probe mostly waits for the
// kernel (RCU grace periods).  DPDK's mempool and memzone calls take the
// EAL's locks, so they may run beside the probe.  Made in setup_queues
// when no thread can be made.
void DpdkPort::start_pool(const DpdkPortConfig& config) {
  if (config.pool != nullptr) return;
  const PoolOptions o = pool_options(config, kAfPacketDriver);
  const QuietThreads quiet;
  try {
    pool_opening_ = std::async(std::launch::async, [o] { return create_pktmbuf_pool(o); });
  } catch (const std::system_error&) {
  }
}

Status DpdkPort::setup_queues(const DpdkPortConfig& config) {
  if (config.pool != nullptr) {
    pool_ = config.pool;
  } else {
    auto pool = pool_opening_.valid() ? pool_opening_.get() : create_pktmbuf_pool(pool_options(config, driver_));
    if (!pool) return pool.error();
    pool_ = *pool;
    owns_pool_ = true;
  }
  uint16_t rxd = config.rx_desc;
  uint16_t txd = config.tx_desc;
  rte_eth_dev_adjust_nb_rx_tx_desc(port_id_, &rxd, &txd);
  const int socket = rte_eth_dev_socket_id(port_id_);
  const unsigned sock = socket < 0 ? static_cast<unsigned>(SOCKET_ID_ANY) : static_cast<unsigned>(socket);
  if (const int rc = rte_eth_rx_queue_setup(port_id_, kQueue, rxd, sock, nullptr, pool_); rc != 0) {
    return Error{-rc, dpdk_error("rte_eth_rx_queue_setup(" + devargs_ + ")", rc)};
  }
  if (const int rc = rte_eth_tx_queue_setup(port_id_, kQueue, txd, sock, nullptr); rc != 0) {
    return Error{-rc, dpdk_error("rte_eth_tx_queue_setup(" + devargs_ + ")", rc)};
  }
  return {};
}

// Ports with no netdev: a PMD with no MTU or MAC operation (memif, ring)
// has no filter either, and carries what we ask as long as a frame fits
// one mbuf.
Status DpdkPort::set_mtu_and_mac(const DpdkPortConfig& config) {
  if (config.mtu) {
    const int rc = rte_eth_dev_set_mtu(port_id_, *config.mtu);
    const uint32_t room = rte_pktmbuf_data_room_size(pool_) - RTE_PKTMBUF_HEADROOM;
    const bool carried = rc == -ENOTSUP && *config.mtu + kEthOverheadBytes <= room;
    if (rc != 0 && !carried) {
      return Error{-rc, dpdk_error("rte_eth_dev_set_mtu(" + devargs_ + ", " + std::to_string(*config.mtu) + ")", rc)};
    }
  }
  if (config.mac) {
    rte_ether_addr a{};
    std::memcpy(a.addr_bytes, config.mac->data(), config.mac->size());
    if (const int rc = rte_eth_dev_default_mac_addr_set(port_id_, &a); rc != 0 && rc != -ENOTSUP) {
      return Error{-rc, dpdk_error("rte_eth_dev_default_mac_addr_set(" + devargs_ + ")", rc)};
    }
  }
  return {};
}

Status DpdkPort::start(const DpdkPortConfig& config) {
  const bool retry = is_memif_client(driver_, devargs_);
  const auto deadline = std::chrono::steady_clock::now() + config.connect_wait;
  for (;;) {
    const int rc = rte_eth_dev_start(port_id_);
    if (rc == 0) break;
    if (!retry || std::chrono::steady_clock::now() >= deadline) {
      std::string msg = dpdk_error("rte_eth_dev_start(" + devargs_ + ")", rc);
      if (retry) msg += " (no memif server listening on the socket?)";
      return Error{rc < 0 ? -rc : EIO, msg};
    }
    std::this_thread::sleep_for(kConnectRetryInterval);
  }
  started_ = true;
  if (role_ == NetdevRole::kNone) rte_eth_allmulticast_enable(port_id_);  // ND multicast; unsupported is fine
  // A memif client only: a server's link waits for a peer that may come
  // much later, and the other PMDs report theirs at once.
  if (retry) {
    const auto link_deadline = std::chrono::steady_clock::now() + config.link_wait;
    while (!link_up() && std::chrono::steady_clock::now() < link_deadline) {
      std::this_thread::sleep_for(kLinkPollInterval);
    }
  }
  return {};
}

void DpdkPort::read_identity(const DpdkPortConfig& config) {
  rte_ether_addr a{};
  if (config.mac && (role_ == NetdevRole::kNone || role_ == NetdevRole::kPeer)) {
    mac_ = *config.mac;
  } else if (rte_eth_macaddr_get(port_id_, &a) == 0) {
    std::memcpy(mac_.data(), a.addr_bytes, mac_.size());
  }
  if (netdev_.empty() && is_af_packet(device_name_)) {
    if (const auto d = parse_devargs(devargs_); d && d->get(kIfaceKey)) netdev_ = std::string(*d->get(kIfaceKey));
  }
  mtu_ = role_ == NetdevRole::kNone ? ethdev_mtu(config) : netdev_mtu();
  if (!netdev_.empty() && netdev_fd_ < 0) netdev_fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (is_af_packet(device_name_) && !netdev_.empty()) {
    std::unique_ptr<PacketRx> ring;  // made beside the probe (start_packet_rx), or none
    if (rx_opening_.valid()) {
      if (auto r = rx_opening_.get()) ring = std::move(*r);
    }
    wait_fd_ = find_packet_socket(netdev_, ring ? ring->fd() : -1);
    open_packet_tx();
    if (tx_fd_ >= 0) open_packet_rx(std::move(ring));
  }
}

// af_packet's receive ring of our own (packet_rx.hpp), of the geometry
// the PMD is given, made on a thread of its own while the PMD probes:
// the kernel makes each of them wait out RCU grace periods (a ring's
// set-up, a bind: ~12 ms each on this machine's VM), not the CPU, so the
// two overlap (issue 13: start-up).  Not with qdisc_bypass=0 (the PMD
// then keeps both paths, open_packet_tx), nor when no thread can be made
// (open_packet_rx then makes the ring itself).
void DpdkPort::start_packet_rx(const Devargs& d, const AfPacketRing& ring) {
  const auto iface = d.get(kIfaceKey);
  if (!iface || pmd_sends_) return;
  const QuietThreads quiet;
  try {
    rx_opening_ = std::async(std::launch::async, [name = std::string(*iface), ring] { return PacketRx::open(name, ring); });
  } catch (const std::system_error&) {
  }
}

// af_packet's receive path of our own: `ring` (start_packet_rx's), else
// one made now, then the PMD's socket retired.  Left on the PMD's path
// when the ring cannot be made; a retirement that fails leaves both
// sockets receiving (each frame copied twice, the PMD's ring unread and
// dropping), which is slower, not wrong.
void DpdkPort::open_packet_rx(std::unique_ptr<PacketRx> ring) {
  if (!ring) {
    auto rx = PacketRx::open(netdev_, af_packet_ring_);
    if (!rx) return;
    ring = std::move(*rx);
  }
  rx_ = std::move(ring);
  (void)retire_packet_socket(wait_fd_);
}

// af_packet's transmit path of our own (see the header): a packet socket
// that receives nothing (protocol 0), bound to the netdev, bypassing the
// qdisc as the PMD's does by default.  With qdisc_bypass=0 the PMD keeps
// sending: through the qdisc every frame passes the netdev's taps, and the
// PMD's socket (a fanout group's member, for which PACKET_IGNORE_OUTGOING
// does nothing) skips only what its own group sent.  Left on the PMD's
// path (tx_fd_ -1) when any step fails.
void DpdkPort::open_packet_tx() {
  if (wait_fd_ < 0 || pmd_sends_) return;
  const unsigned ifindex = if_nametoindex(netdev_.c_str());
  if (ifindex == 0) return;
  const int fd = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_ifindex = static_cast<int>(ifindex);
  const int one = 1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ll), sizeof ll) != 0 ||
      ::setsockopt(fd, SOL_PACKET, PACKET_QDISC_BYPASS, &one, sizeof one) != 0) {
    ::close(fd);
    return;
  }
  tx_fd_ = fd;
}

uint16_t DpdkPort::packet_tx_burst(rte_mbuf** pkts, uint16_t n) {
  uint16_t done = 0;
  while (done < n) {
    unsigned msgs = 0;
    unsigned iovs = 0;
    for (uint16_t i = done; i < n && msgs < kPacketTxBatch; ++i) {
      if (iovs + pkts[i]->nb_segs > kPacketTxIovs) break;
      tx_msgs_[msgs] = mmsghdr{};
      tx_msgs_[msgs].msg_hdr.msg_iov = &tx_iovs_[iovs];
      for (rte_mbuf* seg = pkts[i]; seg != nullptr; seg = seg->next) {
        tx_iovs_[iovs++] = iovec{rte_pktmbuf_mtod(seg, void*), seg->data_len};
      }
      tx_msgs_[msgs].msg_hdr.msg_iovlen = pkts[i]->nb_segs;
      ++msgs;
    }
    if (msgs == 0) {  // a frame of more segments than kPacketTxIovs
      tx_errors_.fetch_add(1, std::memory_order_relaxed);
      rte_pktmbuf_free(pkts[done]);
      ++done;
      continue;
    }
    const int sent = ::sendmmsg(tx_fd_, tx_msgs_.data(), msgs, MSG_DONTWAIT);
    if (sent > 0) {
      uint64_t bytes = 0;
      for (int k = 0; k < sent; ++k) bytes += pkts[done + k]->pkt_len;
      rte_pktmbuf_free_bulk(pkts + done, static_cast<unsigned>(sent));
      tx_frames_.fetch_add(static_cast<uint64_t>(sent), std::memory_order_relaxed);
      tx_bytes_.fetch_add(bytes, std::memory_order_relaxed);
      done = static_cast<uint16_t>(done + sent);
      continue;  // fewer than asked: the next one failed, and says why on its retry
    }
    // The first message failed.  No room (a full socket buffer or device
    // queue): the rest waits for the caller's next burst.  Anything else
    // (too long for the link, the link down): that frame is dropped and
    // counted, as the PMD does.
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS || errno == EINTR) break;
    tx_errors_.fetch_add(1, std::memory_order_relaxed);
    rte_pktmbuf_free(pkts[done]);
    ++done;
  }
  return done;
}

// The af_packet PMD's socket on `iface`: the newest AF_PACKET socket of this
// process bound to it but `not_this` (our own ring's, which may be newer:
// start_packet_rx), the PMD's own; DPDK 22.11 gives no way to ask it.
// -1 when none is found (the engine then naps, as before).
int DpdkPort::find_packet_socket(const std::string& iface, int not_this) {
  const unsigned ifindex = if_nametoindex(iface.c_str());
  if (ifindex == 0) return -1;
  int found = -1;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    // The name outlives the parse: `end` points into it.
    const std::string name = e.path().filename().string();
    char* end = nullptr;
    const long fd = std::strtol(name.c_str(), &end, 10);
    if (end == nullptr || *end != '\0' || fd < 0 || fd == not_this) continue;
    int domain = 0;
    socklen_t len = sizeof domain;
    if (::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_PACKET) continue;
    sockaddr_ll sll{};
    socklen_t sl = sizeof sll;
    if (::getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&sll), &sl) != 0) continue;
    if (static_cast<unsigned>(sll.sll_ifindex) == ifindex && fd > found) found = static_cast<int>(fd);
  }
  return found;
}

// The kernel netdev's MTU; af_packet's ring frames may limit it further.
uint16_t DpdkPort::netdev_mtu() const {
  uint32_t mtu = 0;
  if (const auto info = query_netdev(netdev_, nullptr)) mtu = info->mtu;
  if (af_packet_ring_.framesz != 0) mtu = std::min(mtu, af_packet_mtu_limit(af_packet_ring_.framesz));
  // A PMD that states its limit (af_xdp: a page per frame); af_packet and
  // tap state a max_rx_pktlen of 1518 yet carry jumbo frames, and no max_mtu.
  if (max_mtu_ != 0) mtu = std::min<uint32_t>(mtu, max_mtu_);
  return static_cast<uint16_t>(mtu);
}

// What configure() asked for (a PMD with no MTU operation carries it),
// else the ethdev's own.
uint16_t DpdkPort::ethdev_mtu(const DpdkPortConfig& config) const {
  if (config.mtu) return *config.mtu;
  uint16_t mtu = 0;
  return rte_eth_dev_get_mtu(port_id_, &mtu) == 0 ? mtu : static_cast<uint16_t>(RTE_ETHER_MTU);
}

DpdkPort::~DpdkPort() { close(); }

Status DpdkPort::install_flows(const mlx5::FlowPolicy& policy) {
  if (!started_) return Error{EINVAL, "DpdkPort::install_flows(" + devargs_ + "): the port is not started"};
  if (Status st = flows_.remove(); !st) return st;
  auto flows = mlx5::install_flow_rules(port_id_, policy);
  if (!flows) return flows.error();
  flows_ = std::move(*flows);
  return {};
}

void DpdkPort::close() noexcept {
  if (netdev_fd_ >= 0) ::close(netdev_fd_);
  netdev_fd_ = -1;
  if (tx_fd_ >= 0) ::close(tx_fd_);
  tx_fd_ = -1;
  rx_.reset();
  if (pool_opening_.valid()) {  // made beside a probe that then failed
    if (auto pool = pool_opening_.get(); pool && eal_running()) rte_mempool_free(*pool);
  }
  if (eal_running() && claimed_) {
    (void)flows_.remove();  // before stop: the rules belong to the started port
    // memif's teardown (memif_disconnect: free the shared regions, close
    // their descriptors) runs on the EAL interrupt thread when the peer
    // leaves, and again in rte_eth_dev_stop, with no lock shared: both at
    // once freed the regions twice ("EAL: Error: Invalid memory" on the
    // program's stderr, seen when both peers exited together).  A link
    // already down means the peer left and that thread is at it or done:
    // let it finish first.  (A departure that starts during the stop still
    // races; parking the interrupt thread in an alarm callback instead
    // registers the alarm source, and its rebuild of the descriptor set at
    // rte_eal_cleanup then reads the listener handle memif frees without
    // unregistering it: a memif server crashed at exit.)
    if (is_memif_ && started_ && !burst_allowed()) std::this_thread::sleep_for(kMemifPeerGoneWait);
    if (started_) rte_eth_dev_stop(port_id_);
    rte_eth_dev_close(port_id_);
    if (is_memif_) note_deferred_close();  // its interrupt thread has work left (eal_shutdown waits)
    if (probed_here_ && is_vdev_) rte_vdev_uninit(device_name_.c_str());
    if (probed_here_ && !is_vdev_) rte_eal_hotplug_remove(kPciBus.data(), device_name_.c_str());
  }
  if (claimed_) release_port(port_id_);
  if (owns_pool_ && !keep_pool_ && eal_running()) rte_mempool_free(pool_);
  claimed_ = started_ = owns_pool_ = false;
  pool_ = nullptr;
}

// DPDK 22.11's memif PMD unmaps its shared regions from the interrupt
// thread when the peer disconnects, while the data path may still be in a
// burst (research/dpdk.md 3.4: the surviving side can crash).  The link
// goes down first, so a memif port skips bursts while its link is down;
// a burst already under way runs guarded (guarded_burst).
bool DpdkPort::burst_allowed() const noexcept {
  if (!is_memif_) return true;
  rte_eth_link link{};
  return rte_eth_link_get_nowait(port_id_, &link) == 0 && link.link_status == RTE_ETH_LINK_UP;
}

// A memif burst runs as a fault_guard region: the peer's disconnect can
// unmap the shared regions between the link check and the ring access.
// A faulted RX burst returns nothing (mbufs the PMD took for it are lost);
// a faulted TX burst reports every frame taken, so that nothing the PMD
// may already have freed or queued is freed twice (a few mbufs leak, once
// per peer departure).  Counted in burst_faults.
uint16_t DpdkPort::guarded_burst(bool rx, rte_mbuf** pkts, uint16_t n) noexcept {
  struct Call {
    uint16_t port;
    bool rx;
    rte_mbuf** pkts;
    uint16_t n;
    uint16_t done;
  } c{port_id_, rx, pkts, n, 0};
  const bool ok = fault_guard::run(
      [](void* arg) {
        auto* k = static_cast<Call*>(arg);
        k->done = k->rx ? rte_eth_rx_burst(k->port, kQueue, k->pkts, k->n) : rte_eth_tx_burst(k->port, kQueue, k->pkts, k->n);
      },
      &c);
  if (ok) return c.done;
  burst_faults_.fetch_add(1, std::memory_order_relaxed);
  return rx ? 0 : n;
}

// The af_packet PMD's TX ring through the qdisc (qdisc_bypass=0): the
// kernel sends the ring's frames when the PMD's burst calls sendto, and a
// frame the qdisc or a tc program drops ends that walk (ENOBUFS) with the
// dropped frame's slot still queued and every frame behind it waiting for
// the next sendto.  A reliable sender that waits for ACKs sends nothing
// more, so nothing came until its ACK timeout, whose resend went out
// behind the stale frames: at 3% frame loss RC ran out of retry_cnt
// (bench/lossy/run).  So while a walk may have stopped short, every poll
// kicks the ring again, until a kick drains it.
void DpdkPort::kick_tx_ring() noexcept {
  if (::sendto(wait_fd_, nullptr, 0, MSG_DONTWAIT, nullptr, 0) >= 0) {
    tx_ring_stuck_ = false;
  } else if (errno != ENOBUFS && errno != EAGAIN && errno != EINTR) {
    tx_ring_stuck_ = false;  // not a walk cut short (the link went down, ...): the PMD's next burst says
  }
}

uint16_t DpdkPort::rx_burst(rte_mbuf** pkts, uint16_t n) {
  if (tx_ring_stuck_) kick_tx_ring();
  if (rx_) return rx_->rx_burst(pool_, port_id_, pkts, n);
  if (!is_memif_) return rte_eth_rx_burst(port_id_, kQueue, pkts, n);
  if (!burst_allowed()) return 0;
  return guarded_burst(true, pkts, n);
}

uint16_t DpdkPort::tx_burst(rte_mbuf** pkts, uint16_t n) {
  if (tx_fd_ >= 0) return packet_tx_burst(pkts, n);
  if (pmd_sends_ && wait_fd_ >= 0) {
    errno = 0;
    const uint16_t sent = rte_eth_tx_burst(port_id_, kQueue, pkts, n);
    if (errno == ENOBUFS || errno == EAGAIN) tx_ring_stuck_ = true;  // the PMD's sendto (see kick_tx_ring)
    return sent;
  }
  if (!is_memif_) return rte_eth_tx_burst(port_id_, kQueue, pkts, n);
  if (!burst_allowed()) return 0;
  return guarded_burst(false, pkts, n);
}

// The ethdev's link, and where the port has a kernel netdev, the netdev's
// operational state: DPDK 22.11's af_packet and af_xdp report the link up
// from start to stop whatever the netdev does, so a veth whose peer went
// down would never show it.  IFF_UP and IFF_RUNNING (carrier) from
// SIOCGIFFLAGS: one ioctl per link poll (transport/params.hpp kLinkPollNs).
bool DpdkPort::link_up() const {
  rte_eth_link link{};
  if (rte_eth_link_get_nowait(port_id_, &link) != 0 || link.link_status != RTE_ETH_LINK_UP) return false;
  if (netdev_fd_ < 0) return true;
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, netdev_.c_str(), IFNAMSIZ - 1);
  if (::ioctl(netdev_fd_, SIOCGIFFLAGS, &ifr) != 0) return true;  // cannot tell: the ethdev's word stands
  return (ifr.ifr_flags & IFF_UP) != 0 && (ifr.ifr_flags & IFF_RUNNING) != 0;
}

PortStats DpdkPort::stats() const {
  rte_eth_stats s{};
  PortStats p;
  if (rte_eth_stats_get(port_id_, &s) != 0) return p;
  p.rx_frames = s.ipackets;
  p.rx_bytes = s.ibytes;
  p.tx_frames = s.opackets + tx_frames_.load(std::memory_order_relaxed);
  p.tx_bytes = s.obytes + tx_bytes_.load(std::memory_order_relaxed);
  if (rx_) {
    p.rx_frames += rx_->frames();
    p.rx_bytes += rx_->bytes();
    ring_drops_.fetch_add(rx_->take_drops(), std::memory_order_relaxed);
  } else if (wait_fd_ >= 0) {
    tpacket_stats ts{};
    socklen_t len = sizeof ts;
    if (::getsockopt(wait_fd_, SOL_PACKET, PACKET_STATISTICS, &ts, &len) == 0) {
      ring_drops_.fetch_add(ts.tp_drops, std::memory_order_relaxed);
    }
  }
  p.rx_dropped = s.imissed + s.ierrors + s.rx_nombuf + ring_drops_.load(std::memory_order_relaxed);
  p.tx_dropped = s.oerrors + tx_errors_.load(std::memory_order_relaxed);
  p.burst_faults = burst_faults_.load(std::memory_order_relaxed);
  return p;
}

}  // namespace uroce::drivers::dpdk
