// The shared memory between a client process and uroced (issue 15): one
// region per client and device, made by the daemon (a sealed memfd it
// hands over), holding two rings of fixed-size slots:
//
//   TX  client -> daemon: the frames the client's RNIC sends, and control
//       records in order with them (a connected QP's path, multicast
//       membership), so that the daemon knows what a QP may send before it
//       sees the QP's first frame
//   RX  daemon -> client: the frames for the client's QPs
//
//   +--------+-----------------------+-----------------------+
//   | header | TX slots (tx_slots)   | RX slots (rx_slots)   |
//   +--------+-----------------------+-----------------------+
//   slot: SlotHeader (len, kind) then up to slot_bytes - 8 bytes
//
// Each ring is single-producer / single-consumer across the two processes:
// the producer fills a slot, then publishes its tail with release; the
// consumer reads the tail with acquire, copies the slot out, then publishes
// its head with release (the producer reads the head with acquire to see
// free slots).  Indexes run free (uint32_t, wrapping); slot = index & (n-1).
//
// Trust: the daemon treats everything the client can write as hostile.  It
// reads an index once per burst and drops the client when tail - head is
// more than the ring holds; it copies a slot's header once, bounds its
// length by the slot, and copies the bytes out before it looks at them (a
// client that rewrites a slot meanwhile only spoils its own frame).  The
// region is sealed against shrinking, so a client cannot make the
// daemon's mapping fault.  The client trusts the daemon (it trusts its
// kernel driver the same way).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

namespace uroce::drivers::daemon {

inline constexpr uint32_t kShmMagic = 0x55524f44;  // "UROD"
inline constexpr uint32_t kShmVersion = 2;

// Busy polling (DESIGN.md "The shared device", threads and scheduling).
// A client whose application spins on a CQ (kSpinPolls polls in a row
// that found nothing) says so (client_polls, bumped at most every
// kActivityNs) and yields its CPU at each further idle poll: on a machine
// with fewer cores than spinning threads the daemon, or a peer's, may be
// what it waits for.  The daemon polls instead of sleeping while any
// client spun within kClientActiveNs.
inline constexpr uint32_t kSpinPolls = 8;
inline constexpr uint64_t kActivityNs = 20'000;
inline constexpr uint64_t kClientActiveNs = 1'000'000;

// What a slot holds.
enum class RecordKind : uint16_t {
  kFrame = 1,       // an Ethernet frame
  kClaim = 2,       // ClaimRecord: a connected QP's destination (RTR and later)
  kUnclaim = 3,     // QpnRecord: the QP left it (RESET, destroyed)
  kMcastJoin = 4,   // McastRecord: the first QP of the client joined a group
  kMcastLeave = 5,  // McastRecord: the last one left
};

struct SlotHeader {
  uint32_t len;       // bytes after the header
  uint16_t kind;      // RecordKind
  uint16_t reserved;
};
static_assert(sizeof(SlotHeader) == 8);

// The path a connected QP (RC, UC, XRC) was given at RTR: the daemon lets
// the client send RC/UC/XRC packets to (remote_gid, remote_qpn) only while
// one of its QPs holds that claim (daemon/switch.hpp).
struct ClaimRecord {
  uint32_t qpn;
  uint32_t remote_qpn;
  uint8_t remote_gid[16];
};
static_assert(sizeof(ClaimRecord) == 24);

struct QpnRecord {
  uint32_t qpn;
};
static_assert(sizeof(QpnRecord) == 4);

struct McastRecord {
  uint8_t mgid[16];
};
static_assert(sizeof(McastRecord) == 16);

// One index on its own cache line (the two sides write different ones).
struct alignas(64) SharedIndex {
  std::atomic<uint32_t> v{0};
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "indexes must be lock-free to be shared across processes");
static_assert(sizeof(SharedIndex) == 64);

struct ShmHeader {
  // Written by the daemon before it hands the region over; the client checks.
  uint32_t magic;
  uint32_t version;
  uint32_t slot_bytes;  // a multiple of 64, header included
  uint32_t tx_slots;    // powers of two
  uint32_t rx_slots;
  uint32_t tx_offset;   // from the start of the region
  uint32_t rx_offset;
  uint32_t reserved;
  alignas(64) SharedIndex tx_tail;  // client: next TX slot it fills
  SharedIndex tx_head;              // daemon: next TX slot it reads
  SharedIndex rx_tail;              // daemon: next RX slot it fills
  SharedIndex rx_head;              // client: next RX slot it reads
  SharedIndex link_up;              // daemon: the port's link (1 up, 0 down)
  SharedIndex client_waiting;       // client: 1 while its engine sleeps on the wake fd
  SharedIndex daemon_waiting;       // daemon: 1 while it sleeps on the client's kick fd
  SharedIndex client_polls;         // client: bumped while its application spins on a CQ
};
static_assert(sizeof(ShmHeader) % 64 == 0);

struct ShmGeometry {
  uint32_t slot_bytes = 0;
  uint32_t tx_slots = 0;
  uint32_t rx_slots = 0;

  static constexpr size_t kHeaderBytes = 4096;  // the header page
  size_t tx_offset() const noexcept { return kHeaderBytes; }
  size_t rx_offset() const noexcept { return tx_offset() + size_t{slot_bytes} * tx_slots; }
  size_t bytes() const noexcept { return rx_offset() + size_t{slot_bytes} * rx_slots; }
  uint32_t payload_max() const noexcept { return slot_bytes - static_cast<uint32_t>(sizeof(SlotHeader)); }
  // Sane values: what both sides check before using a region.
  bool valid() const noexcept {
    auto pow2 = [](uint32_t n) { return n >= 2 && (n & (n - 1)) == 0 && n <= (1u << 16); };
    return slot_bytes >= 256 && slot_bytes % 64 == 0 && slot_bytes <= (1u << 16) && pow2(tx_slots) &&
           pow2(rx_slots);
  }
};

// The geometry for frames up to `frame_bytes`: slots hold a whole frame.
// The transmit ring takes up to 1024 of them within `tx_budget` bytes;
// the receive ring up to 4096 within `rx_budget`, because it is the
// client's only buffer against the wire: nothing paces a long READ
// response (8,192 packets for 8 MiB at MTU 1024) to a client the
// scheduler left off its CPU for a few milliseconds, and a response lost
// at its tail costs the requester its ACK timeout (seconds under rdma_cm).
// Both rings have at least 64 slots.
constexpr ShmGeometry geometry_for(uint32_t frame_bytes, size_t tx_budget = 4u << 20,
                                   size_t rx_budget = 8u << 20) noexcept {
  ShmGeometry g;
  g.slot_bytes = (frame_bytes + static_cast<uint32_t>(sizeof(SlotHeader)) + 63) / 64 * 64;
  auto slots = [&](uint32_t n, size_t budget) {
    while (n > 64 && size_t{n} * g.slot_bytes > budget) n /= 2;
    return n;
  };
  g.tx_slots = slots(1024, tx_budget);
  g.rx_slots = slots(4096, rx_budget);
  return g;
}

// One direction of the region, as one side sees it.
class ShmRing {
 public:
  ShmRing() = default;
  ShmRing(uint8_t* slots, uint32_t count, uint32_t slot_bytes, SharedIndex* head, SharedIndex* tail) noexcept
      : slots_(slots), count_(count), slot_bytes_(slot_bytes), head_(head), tail_(tail) {}

  uint32_t count() const noexcept { return count_; }
  uint32_t payload_max() const noexcept { return slot_bytes_ - static_cast<uint32_t>(sizeof(SlotHeader)); }

  // ---- producer ----
  // Slots free now (the consumer's head read with acquire).
  uint32_t free_slots() const noexcept {
    const uint32_t used = prod_tail_ - head_->v.load(std::memory_order_acquire);
    return used >= count_ ? 0 : count_ - used;
  }
  // Fills the next slot with `kind` and the bytes of a then b (their sum at
  // most payload_max()); false when the ring is full.  Not visible to the
  // consumer until publish().
  bool put(RecordKind kind, const void* a, uint32_t alen, const void* b = nullptr, uint32_t blen = 0) noexcept {
    if (alen + blen > payload_max() || free_slots() == 0) return false;
    uint8_t* s = slot(prod_tail_);
    const SlotHeader h{alen + blen, static_cast<uint16_t>(kind), 0};
    std::memcpy(s, &h, sizeof h);
    if (alen != 0) std::memcpy(s + sizeof h, a, alen);
    if (blen != 0) std::memcpy(s + sizeof h + alen, b, blen);
    ++prod_tail_;
    return true;
  }
  // The slots filled since the last publish become the consumer's.  A
  // full fence (seq_cst): the producer then looks whether the consumer
  // sleeps (client_waiting / daemon_waiting), and that load must not pass
  // this store (x86 lets a plain store pass a later load).
  void publish() noexcept { tail_->v.store(prod_tail_, std::memory_order_seq_cst); }
  // Start producing from the shared tail (after the region was mapped).
  void producer_sync() noexcept { prod_tail_ = tail_->v.load(std::memory_order_relaxed); }

  // ---- consumer ----
  // Slots ready: tail - head, or UINT32_MAX when the producer published an
  // impossible tail (more than the ring holds: a hostile or broken peer).
  uint32_t ready() noexcept {
    const uint32_t n = tail_->v.load(std::memory_order_acquire) - cons_head_;
    return n > count_ ? UINT32_MAX : n;
  }
  // The i-th ready slot (i < ready()): its header copied once, the length
  // bounded by the slot (a longer one is reported as payload_max() + 1, so
  // that the caller drops the record).
  SlotHeader header(uint32_t i) const noexcept {
    SlotHeader h;
    std::memcpy(&h, slot(cons_head_ + i), sizeof h);
    if (h.len > payload_max()) h.len = payload_max() + 1;
    return h;
  }
  const uint8_t* payload(uint32_t i) const noexcept { return slot(cons_head_ + i) + sizeof(SlotHeader); }
  // Hands `n` slots back to the producer.
  void consume(uint32_t n) noexcept {
    cons_head_ += n;
    head_->v.store(cons_head_, std::memory_order_release);
  }
  void consumer_sync() noexcept { cons_head_ = head_->v.load(std::memory_order_relaxed); }

 private:
  uint8_t* slot(uint32_t idx) const noexcept { return slots_ + size_t{idx & (count_ - 1)} * slot_bytes_; }

  uint8_t* slots_ = nullptr;
  uint32_t count_ = 0;
  uint32_t slot_bytes_ = 0;
  SharedIndex* head_ = nullptr;  // consumer-written
  SharedIndex* tail_ = nullptr;  // producer-written
  uint32_t prod_tail_ = 0;       // producer's private copy (the shared one may be scribbled on)
  uint32_t cons_head_ = 0;       // consumer's private copy
};

// Both rings of a mapped region; `client` picks the side.
struct ShmRings {
  ShmRing tx;  // client produces, daemon consumes
  ShmRing rx;  // daemon produces, client consumes
};

inline ShmHeader* shm_header(void* base) noexcept { return static_cast<ShmHeader*>(base); }

// Lays out a fresh region (the daemon, before handing it over).
inline void shm_init(void* base, const ShmGeometry& g) noexcept {
  auto* h = new (base) ShmHeader{};
  h->magic = kShmMagic;
  h->version = kShmVersion;
  h->slot_bytes = g.slot_bytes;
  h->tx_slots = g.tx_slots;
  h->rx_slots = g.rx_slots;
  h->tx_offset = static_cast<uint32_t>(g.tx_offset());
  h->rx_offset = static_cast<uint32_t>(g.rx_offset());
}

// The rings of a region whose geometry is `g` (the side that maps it has
// checked the header against what it was told).
inline ShmRings shm_rings(void* base, const ShmGeometry& g) noexcept {
  auto* h = shm_header(base);
  auto* b = static_cast<uint8_t*>(base);
  ShmRings r;
  r.tx = ShmRing(b + g.tx_offset(), g.tx_slots, g.slot_bytes, &h->tx_head, &h->tx_tail);
  r.rx = ShmRing(b + g.rx_offset(), g.rx_slots, g.slot_bytes, &h->rx_head, &h->rx_tail);
  return r;
}

// The client's check of a region the daemon handed over.
inline bool shm_header_matches(const void* base, const ShmGeometry& g) noexcept {
  const auto* h = static_cast<const ShmHeader*>(base);
  return h->magic == kShmMagic && h->version == kShmVersion && h->slot_bytes == g.slot_bytes &&
         h->tx_slots == g.tx_slots && h->rx_slots == g.rx_slots && h->tx_offset == g.tx_offset() &&
         h->rx_offset == g.rx_offset();
}

}  // namespace uroce::drivers::daemon
