// DpdkPort: a Port over any DPDK ethdev, named by its devargs
// (DESIGN.md "drivers/"; research/dpdk.md §3 has the wires measured here).
//
//   net_af_packet0,iface=veth0      a kernel netdev, shared with the kernel
//   net_af_xdp0,iface=veth0         the same, through XDP, which takes every
//                                   received frame from the kernel (MTU < 3.5 KB)
//   net_tap0[,iface=tap0]           a tap: the kernel is at the far end
//   net_memif0,role=…,socket=…      another process, no kernel
//   net_ring0, net_null0            in-process (tests)
//   0000:03:00.0[,k=v]              a PCI device (mlx5: bifurcated, shares
//                                   its netdev with the kernel)
//
// Probing: a device the EAL already has (from --vdev or the PCI allow list)
// is adopted; otherwise a vdev is created with rte_vdev_init and a PCI
// device hot-plugged with rte_dev_probe, and the port removes what it
// created when it closes.  Several ports may be open in one process; one
// ethdev is opened by one DpdkPort at a time (EBUSY otherwise).
//
// Setup: one RX and one TX queue; buffers from a pool of its own
// (create_pktmbuf_pool: one frame per mbuf, jumbo included; for af_xdp,
// whose UMEM frames are the pool's objects, objects of at most a page)
// unless one is given.  Offloads: none on RX (the engine parses VLAN tags itself, so no
// VLAN strip); on TX only RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE when the PMD
// has it and `fast_free` is set.  IPv4 header checksum offload is not
// used: lib/wire's builder computes it, and RoCEv2 sends UDP checksum 0.
//
// MTU: the af_packet and tap PMDs refuse an ethdev MTU above 1500
// (max_rx_pktlen 1518), yet carry jumbo frames; the limit that matters is
// the kernel netdev's.  So the ethdev MTU is left alone on ports with a
// netdev, and mtu() is the netdev's MTU, capped by the PMD's max_mtu
// where it states one (af_xdp: about 3.5 KB) and for af_packet by the
// ring's frame size (framesz - 32).  An af_packet vdev whose devargs set
// no ring geometry gets framesz/blocksz/framecnt for the netdev's MTU
// (af_packet_ring_for_mtu).  On ports with no netdev the requested MTU is
// set with rte_eth_dev_set_mtu; a PMD with no MTU operation (memif, ring)
// carries it as long as a frame fits one mbuf.
//
// af_packet's transmit path: the PMD sends from its TX ring, whose frames
// the kernel hands on as pages of the ring (zero-copy), and a veth must
// then copy each into new pages before the peer may have it
// (skb_copy_ubufs: a page allocated, copied and freed per frame).  So an
// af_packet port that bypasses the qdisc (the PMD's default) sends through
// a packet socket of its own instead: sendmmsg of the mbufs, which the
// kernel copies into one linear buffer per frame (under a page) that the
// veth forwards as it is.  One system call per burst either way.  Frames
// the socket has no room for (EAGAIN, ENOBUFS) stay with the caller; a
// frame the link refuses (EMSGSIZE, ENETDOWN) is freed and counted in
// tx_dropped.  Such a port receives through a ring of its own as well
// (drivers/dpdk/packet_rx.hpp: the PMD's socket is in a fanout group,
// which costs every frame a flow hash), and the PMD's socket is retired
// (retire_packet_socket).  With qdisc_bypass=0 in the devargs the PMD
// keeps both paths.
//
// Threads: open and the destructor are control path (any one thread);
// rx_burst/tx_burst are driven by one thread at a time (Port's rule);
// mac/mtu/link_up/stats may be called from any thread.  An af_packet
// port's open makes its pool and its receive ring on two short threads of
// its own while the PMD probes, and waits for both before it returns (the
// kernel's RCU grace periods and the pool's page faults overlap: issue
// 13); the destructor of a port whose open failed waits for them too.
//
// Teardown: the destructor stops and closes the ethdev (and uninits a
// vdev it created).  Free every mbuf of its pool first.  net_memif's
// interrupt thread still works after the close; eal_shutdown waits for it
// (research/dpdk.md §3.4) — stop traffic on both ends of a memif link
// before either closes.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <optional>
#include <string>

#include "drivers/dpdk/devargs.hpp"
#include "drivers/dpdk/eal.hpp"
#include "drivers/dpdk/packet_rx.hpp"
#include "drivers/mlx5/flow_apply.hpp"
#include "drivers/port.hpp"
#include "drivers/result.hpp"

namespace uroce::drivers::dpdk {

inline constexpr uint16_t kDefaultRxDesc = 1024;
inline constexpr uint16_t kDefaultTxDesc = 1024;
// A memif client's start fails until its server listens; it retries this long.
inline constexpr std::chrono::milliseconds kDefaultConnectWait{3000};
inline constexpr std::chrono::milliseconds kConnectRetryInterval{50};
// A memif client's link comes up after the handshake its start begins
// (the interrupt thread finishes it); open() waits this long for it, so a
// program that asks for the port state right after opening the device
// (perftest's check for ACTIVE) sees a server that is there.  On timeout
// the port opens with its link down, as before.
inline constexpr std::chrono::milliseconds kDefaultMemifLinkWait{2000};
inline constexpr std::chrono::milliseconds kLinkPollInterval{1};

// How the port's kernel netdev (if any) relates to the port.
enum class NetdevRole : uint8_t {
  kNone,    // no kernel netdev (memif, ring, null, a PCI device bound to vfio)
  kShared,     // the netdev is this port's own interface: what the port
               // sends leaves through it, the kernel's stack on it is this
               // host, and it sees the received frames too (af_packet, mlx5
               // bifurcated)
  kExclusive,  // the port's own interface, but received frames reach the
               // port alone: af_xdp's default XDP program redirects them
               // all, so the kernel's stack on it hears nothing
  kPeer,       // the netdev is the far end of the wire: what the port sends,
               // the kernel receives on it (tap)
};

std::string_view to_string(NetdevRole r) noexcept;

struct DpdkPortConfig {
  std::string devargs;                  // required
  std::optional<uint16_t> mtu;          // IP MTU for ports with no netdev; unset: the PMD's
  // The MAC for ports with no netdev (rte_eth_dev_default_mac_addr_set;
  // a PMD with no MAC filter carries it) and for tap, whose DPDK side has
  // no filter; a port that shares a netdev keeps the netdev's.
  std::optional<wire::MacAddr> mac;
  rte_mempool* pool = nullptr;          // not owned; null: the port makes one
  uint32_t pool_mbufs = kDefaultPoolMbufs;
  // The pool's data room.  For af_packet the default shrinks to what its
  // ring's frame holds (af_packet_data_room): a 1500-byte link's mbufs
  // are then a quarter of the memory.
  uint16_t data_room = kDefaultDataRoom;
  uint16_t rx_desc = kDefaultRxDesc;
  // af_packet's receive ring in frames when the devargs set no geometry
  // (at least the PMD's 512, within kAfPacketRingMaxBytes): the kernel
  // drops what does not fit.
  uint32_t af_packet_frames = kAfPacketRingFrames;
  uint16_t tx_desc = kDefaultTxDesc;
  // RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE when the PMD has it.  Its contract:
  // every mbuf sent comes from pool() and has reference count 1.  A caller
  // that keeps references to sent frames (retransmission by refcount)
  // must turn it off.
  bool fast_free = true;
  std::chrono::milliseconds connect_wait = kDefaultConnectWait;  // memif client
  std::chrono::milliseconds link_wait = kDefaultMemifLinkWait;   // memif client; 0: no wait
  // An mlx5 (ConnectX) port in the bifurcated model: rte_flow isolation
  // before configure, so the port receives only what install_flows()
  // steers to it and the kernel keeps the rest (drivers/mlx5/README.md).
  bool mlx5_isolation = true;
};

class DpdkPort final : public Port {
 public:
  // Needs a running EAL (eal_init).
  static Result<std::unique_ptr<DpdkPort>> open(const DpdkPortConfig& config);
  ~DpdkPort() override;
  DpdkPort(const DpdkPort&) = delete;
  DpdkPort& operator=(const DpdkPort&) = delete;

  // The process is ending: closing leaves the pool's memory as it is.
  // DPDK zeroes memory as it frees it, and most of a pool was never
  // touched: freeing a 4095-mbuf pool faulted in ~10,000 pages, 100 ms
  // or more of every program's exit on this machine.
  void keep_pool_at_close() noexcept { keep_pool_ = true; }

  uint16_t rx_burst(rte_mbuf** pkts, uint16_t n) override;
  uint16_t tx_burst(rte_mbuf** pkts, uint16_t n) override;

  wire::MacAddr mac() const override { return mac_; }
  uint16_t mtu() const override { return mtu_; }
  bool link_up() const override;
  // rx_dropped = imissed + ierrors + rx_nombuf, plus for af_packet the
  // frames its kernel ring had no room for (PACKET_STATISTICS: DPDK 22.11's
  // PMD does not count them); tx_dropped = oerrors, plus the frames our own
  // af_packet socket dropped (the header's transmit path); tx_frames and
  // tx_bytes likewise count both paths.
  PortStats stats() const override;
  rte_mempool* pool() const override { return pool_; }
  std::string name() const override { return devargs_; }
  std::string netdev() const override { return netdev_; }
  // af_packet: the receiving packet socket (our ring's, else the PMD's,
  // found among the process's fds by its bound interface), readable when
  // its ring holds a frame (the kernel's packet_poll); -1 for the other
  // PMDs.
  int wait_fd() const override { return rx_ ? rx_->fd() : wait_fd_; }
  // Whether an af_packet port receives and sends through sockets of its
  // own (the header), not the PMD's.
  bool own_packet_path() const noexcept { return rx_ != nullptr; }

  uint16_t port_id() const noexcept { return port_id_; }
  NetdevRole netdev_role() const noexcept { return role_; }
  const std::string& driver() const noexcept { return driver_; }  // "net_af_packet"
  uint64_t tx_offloads() const noexcept { return tx_offloads_; }
  bool probed_here() const noexcept { return probed_here_; }     // removed again on close
  // Whether rte_flow isolation is on (an mlx5 port): nothing arrives until
  // install_flows() steers it here.
  bool isolated() const noexcept { return isolated_; }
  // Steer `policy`'s traffic (RoCEv2 for our addresses, ARP/ND when asked)
  // to the RX queue; replaces rules installed before.  Removed on close.
  Status install_flows(const mlx5::FlowPolicy& policy);
  const mlx5::InstalledFlows& flows() const noexcept { return flows_; }

 private:
  bool burst_allowed() const noexcept;
  uint16_t guarded_burst(bool rx, rte_mbuf** pkts, uint16_t n) noexcept;
  bool is_memif_ = false;   // see burst_allowed()
  std::atomic<uint64_t> burst_faults_{0};
  // af_packet: the ring's drops read so far (each read of the kernel's
  // count resets it).
  mutable std::atomic<uint64_t> ring_drops_{0};
  DpdkPort() = default;
  Status configure(const DpdkPortConfig& config);
  PoolOptions pool_options(const DpdkPortConfig& config, std::string_view driver) const;
  void start_pool(const DpdkPortConfig& config);
  Status setup_queues(const DpdkPortConfig& config);
  Status set_mtu_and_mac(const DpdkPortConfig& config);
  Status start(const DpdkPortConfig& config);
  void read_identity(const DpdkPortConfig& config);
  uint16_t netdev_mtu() const;
  static int find_packet_socket(const std::string& iface, int not_this);
  void open_packet_tx();
  void kick_tx_ring() noexcept;
  void start_packet_rx(const Devargs& d, const AfPacketRing& ring);
  void open_packet_rx(std::unique_ptr<PacketRx> ring);
  uint16_t packet_tx_burst(rte_mbuf** pkts, uint16_t n);
  uint16_t ethdev_mtu(const DpdkPortConfig& config) const;
  void close() noexcept;

  uint16_t port_id_ = 0;
  std::string devargs_;      // as probed (af_packet ring geometry included)
  std::string device_name_;  // the vdev or PCI name
  std::string driver_;
  std::string netdev_;
  int netdev_fd_ = -1;       // a socket for SIOCGIFFLAGS on netdev_ (link_up)
  int wait_fd_ = -1;         // not ours: the af_packet PMD's socket (wait_fd)
  // af_packet's transmit socket (open_packet_tx), -1: the PMD sends; its
  // frames, bytes and errors; sendmmsg's arrays (tx_burst's one thread).
  static constexpr unsigned kPacketTxBatch = 64;
  static constexpr unsigned kPacketTxIovs = 256;
  int tx_fd_ = -1;
  std::unique_ptr<PacketRx> rx_;  // af_packet's receive ring of our own (open_packet_rx)
  // That ring while it is being made, beside the PMD's probe (open).
  std::future<Result<std::unique_ptr<PacketRx>>> rx_opening_;
  // An af_packet port's pool while it is being made (start_pool).
  std::future<Result<rte_mempool*>> pool_opening_;
  std::atomic<uint64_t> tx_frames_{0}, tx_bytes_{0}, tx_errors_{0};
  std::array<mmsghdr, kPacketTxBatch> tx_msgs_{};
  std::array<iovec, kPacketTxIovs> tx_iovs_{};
  NetdevRole role_ = NetdevRole::kNone;
  wire::MacAddr mac_{};
  uint16_t mtu_ = 0;
  uint16_t max_mtu_ = 0;     // the PMD's dev_info.max_mtu
  uint64_t tx_offloads_ = 0;
  rte_mempool* pool_ = nullptr;
  bool owns_pool_ = false;
  bool keep_pool_ = false;     // keep_pool_at_close
  AfPacketRing af_packet_ring_{};  // af_packet: its ring's geometry, else all 0
  bool pmd_sends_ = false;   // af_packet with qdisc_bypass=0: the PMD's own paths (open_packet_tx)
  bool tx_ring_stuck_ = false;  // pmd_sends_: frames may wait in the PMD's TX ring (kick_tx_ring)
  bool probed_here_ = false;
  bool is_vdev_ = false;
  bool claimed_ = false;     // in the set of open ports
  bool started_ = false;
  bool isolated_ = false;
  mlx5::InstalledFlows flows_;
};

}  // namespace uroce::drivers::dpdk
