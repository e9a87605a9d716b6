#include "drivers/dpdk/packet_rx.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <net/if.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

#include "lib/util/quiet_threads.hpp"

namespace uroce::drivers::dpdk {
namespace {

constexpr uint16_t kVlanTagBytes = 4;
constexpr uint16_t kMacBytes = 12;  // destination and source
constexpr uint16_t kTpid8021Q = 0x8100;

std::string sys_error(const std::string& what, int err) { return what + ": " + std::strerror(err); }

// Closes `fd` on a short-lived thread of its own.  The kernel's release of
// a packet socket with rings waits out an RCU grace period for each ring
// and one for the socket (packet_release, packet_set_ring: 30-40 ms on
// this machine's VM, a third of a program's whole start-up, issue 13),
// and nothing here needs to wait for it: the socket receives on for those
// milliseconds into a ring nobody reads.  Closed at once when no thread
// can be made.  The thread takes none of the program's signals.
void release_in_background(int fd) noexcept {
  const QuietThreads quiet;
  try {
    std::thread([fd] { ::close(fd); }).detach();
  } catch (const std::system_error&) {
    ::close(fd);
  }
}

}  // namespace

Result<std::unique_ptr<PacketRx>> PacketRx::open(const std::string& iface, const AfPacketRing& g) {
  const std::string what = "af_packet receive ring on " + iface;
  if (g.blocksz == 0 || g.framesz == 0 || g.framecnt == 0 || g.blocksz % g.framesz != 0 ||
      g.framecnt % (g.blocksz / g.framesz) != 0) {
    return Error{EINVAL, what + ": blocksz " + std::to_string(g.blocksz) + ", framesz " + std::to_string(g.framesz) +
                             ", framecnt " + std::to_string(g.framecnt) + " make no ring"};
  }
  const unsigned ifindex = if_nametoindex(iface.c_str());
  if (ifindex == 0) return Error{ENODEV, what + ": no such interface"};
  std::unique_ptr<PacketRx> r(new PacketRx());
  r->g_ = g;
  r->per_block_ = g.blocksz / g.framesz;
  // Not yet bound (protocol 0): nothing arrives before the ring is there.
  r->fd_ = ::socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (r->fd_ < 0) return Error{errno, sys_error(what + ": socket", errno)};
  const int version = TPACKET_V2;
  tpacket_req req{.tp_block_size = g.blocksz,
                  .tp_block_nr = g.framecnt / r->per_block_,
                  .tp_frame_size = g.framesz,
                  .tp_frame_nr = g.framecnt};
  if (::setsockopt(r->fd_, SOL_PACKET, PACKET_VERSION, &version, sizeof version) != 0 ||
      ::setsockopt(r->fd_, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) != 0) {
    return Error{errno, sys_error(what + ": setsockopt", errno)};
  }
  r->map_len_ = static_cast<size_t>(req.tp_block_size) * req.tp_block_nr;
  void* m = ::mmap(nullptr, r->map_len_, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd_, 0);
  if (m == MAP_FAILED) {
    r->map_len_ = 0;
    return Error{errno, sys_error(what + ": mmap", errno)};
  }
  r->map_ = static_cast<uint8_t*>(m);
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_protocol = htons(ETH_P_ALL);
  ll.sll_ifindex = static_cast<int>(ifindex);
  if (::bind(r->fd_, reinterpret_cast<sockaddr*>(&ll), sizeof ll) != 0) {
    return Error{errno, sys_error(what + ": bind", errno)};
  }
  return Result<std::unique_ptr<PacketRx>>(std::move(r));
}

PacketRx::~PacketRx() {
  if (map_ != nullptr) ::munmap(map_, map_len_);
  if (fd_ >= 0) ::close(fd_);
}

uint8_t* PacketRx::slot(uint32_t i) const noexcept {
  return map_ + static_cast<size_t>(i / per_block_) * g_.blocksz + static_cast<size_t>(i % per_block_) * g_.framesz;
}

uint16_t PacketRx::rx_burst(rte_mempool* pool, uint16_t port, rte_mbuf** pkts, uint16_t n) noexcept {
  uint16_t got = 0;
  uint64_t bytes = 0;
  while (got < n) {
    auto* h = reinterpret_cast<tpacket2_hdr*>(slot(next_));
    // The kernel publishes a slot's status last (a release store on its side).
    const uint32_t status = __atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE);
    if ((status & TP_STATUS_USER) == 0) break;
    rte_mbuf* m = rte_pktmbuf_alloc(pool);
    if (m == nullptr) break;  // the frame stays in its slot for the next burst
    const uint8_t* frame = reinterpret_cast<const uint8_t*>(h) + h->tp_mac;
    uint32_t len = h->tp_snaplen;
    const bool tagged = (status & TP_STATUS_VLAN_VALID) != 0 && len >= kMacBytes;
    const uint32_t room = rte_pktmbuf_tailroom(m);
    if (len + (tagged ? kVlanTagBytes : 0) > room) len = room - (tagged ? kVlanTagBytes : 0);  // cannot be: framesz bounds both
    auto* out = rte_pktmbuf_mtod(m, uint8_t*);
    if (tagged) {
      // The kernel holds the outer tag apart (tp_vlan_tci): it goes back
      // after the MAC addresses, as it was on the wire.
      const uint16_t tpid = (status & TP_STATUS_VLAN_TPID_VALID) != 0 ? h->tp_vlan_tpid : kTpid8021Q;
      std::memcpy(out, frame, kMacBytes);
      const std::array<uint8_t, kVlanTagBytes> tag{static_cast<uint8_t>(tpid >> 8), static_cast<uint8_t>(tpid),
                                                   static_cast<uint8_t>(h->tp_vlan_tci >> 8),
                                                   static_cast<uint8_t>(h->tp_vlan_tci)};
      std::memcpy(out + kMacBytes, tag.data(), tag.size());
      std::memcpy(out + kMacBytes + kVlanTagBytes, frame + kMacBytes, len - kMacBytes);
      len += kVlanTagBytes;
    } else {
      std::memcpy(out, frame, len);
    }
    m->data_len = static_cast<uint16_t>(len);
    m->pkt_len = len;
    m->port = port;
    __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
    next_ = next_ + 1 == g_.framecnt ? 0 : next_ + 1;
    pkts[got++] = m;
    bytes += len;
  }
  if (got != 0) {  // one writer: plain stores that stats() may read from any thread
    frames_.store(frames_.load(std::memory_order_relaxed) + got, std::memory_order_relaxed);
    bytes_.store(bytes_.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
  }
  return got;
}

uint64_t PacketRx::take_drops() const noexcept {
  tpacket_stats ts{};
  socklen_t len = sizeof ts;
  if (::getsockopt(fd_, SOL_PACKET, PACKET_STATISTICS, &ts, &len) != 0) return 0;
  return ts.tp_drops;
}

Status retire_packet_socket(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Error{errno, sys_error("retire_packet_socket: fstat", errno)};
  // The socket's ring mapping: "start-end perms offset dev inode socket:[inode]".
  const std::string tag = "socket:[" + std::to_string(st.st_ino) + "]";
  std::ifstream maps("/proc/self/maps");
  std::string line;
  uintptr_t start = 0;
  uintptr_t end = 0;
  while (std::getline(maps, line)) {
    if (line.size() < tag.size() || line.compare(line.size() - tag.size(), tag.size(), tag) != 0) continue;
    std::istringstream in(line);
    char dash = 0;
    in >> std::hex >> start >> dash >> end;
    if (!in || dash != '-' || end <= start) return Error{EINVAL, "retire_packet_socket: cannot read " + line};
    break;
  }
  if (end == 0) return Error{ENOENT, "retire_packet_socket: fd " + std::to_string(fd) + " has no ring mapped"};
  const int stand_in = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (stand_in < 0) return Error{errno, sys_error("retire_packet_socket: socket", errno)};
  // The socket's last reference, held past the swap below so that the
  // release does not run on the caller's thread (release_in_background).
  const int last = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  void* m = ::mmap(reinterpret_cast<void*>(start), end - start, PROT_READ | PROT_WRITE,
                   MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) {
    const int err = errno;
    ::close(stand_in);
    if (last >= 0) ::close(last);
    return Error{err, sys_error("retire_packet_socket: mmap", err)};
  }
  // The mapping is gone; the fd number now names the stand-in (atomically:
  // no other thread's open can take the number in between).
  const int rc = ::dup3(stand_in, fd, O_CLOEXEC);
  const int err = errno;
  ::close(stand_in);
  if (last >= 0) release_in_background(last);
  if (rc < 0) return Error{err, sys_error("retire_packet_socket: dup3", err)};
  return {};
}

}  // namespace uroce::drivers::dpdk
