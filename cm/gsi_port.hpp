// The CM's MadPort over a software RNIC's GSI QP (QP 1, IBA 13.5.1).
//
//   send: the MAD is copied into one of a ring of registered send slots and
//         posted as a UD SEND to the peer's QP 1 with Q_Key 0x80010000 and
//         P_Key 0xFFFF (IBA 13.4.6.1), through an address handle kept per
//         peer GID.  With every slot in flight (a burst: a thousand
//         connections torn down at once while the wire is slow) it waits in
//         a backlog, in order, and goes as slots free, as the kernel's
//         ib_mad keeps an overflow list rather than drop; only a full
//         backlog (kMaxBacklog) drops it, and the CM's retry covers that.
//   receive: a ring of registered 40 + 256-byte buffers stays posted on the
//         QP's receive queue; `poll()` takes the completions, strips the
//         40-byte GRH area (IBA 11.4.1.2: a UD receive starts with it),
//         reads the sender's GID from it (an IPv4 header sits in its last
//         20 bytes, an IPv6 header fills it) and hands the MAD to a
//         callback, then posts the buffer again.
//
// Threads: [engine] for send() and poll(): the CM that owns the port runs in
// its engine's loop (DeviceCm arms a timer that calls poll() after each
// completion on QP 1, on_completion).
// open()/close() are control path (they create RNIC objects).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "cm/mad_port.hpp"
#include "lib/wire/grh.hpp"
#include "lib/wire/mad.hpp"
#include "lib/util/counters.hpp"
#include "transport/rnic/rnic.hpp"

namespace uroce::cm {

#define UROCE_GSI_COUNTERS(X)                                                  \
  X(tx_posted, "MADs posted on QP 1")                                          \
  X(tx_queued, "MADs queued behind a full send ring (sent as slots free)")      \
  X(tx_no_slot, "MADs not sent: the send ring and its backlog full")           \
  X(tx_no_ah, "MADs not sent: no address handle for the peer's GID")           \
  X(tx_post_failed, "MADs not sent: post_send refused")                        \
  X(tx_errors, "send completions in error")                                    \
  X(rx_mads, "MADs received on QP 1")                                          \
  X(rx_errors, "receive completions in error (flushes included)")              \
  X(rx_short, "dropped: receive shorter than GRH + 256 bytes")                 \
  X(rx_bad_grh, "dropped: GRH area holds neither an IPv4 nor an IPv6 header")   \
  X(ah_evicted, "peer address handles dropped to make room (least recently used)")

UROCE_COUNTER_ENUM(GsiCtr, UROCE_GSI_COUNTERS)
using GsiCounters = CounterSet<GsiCtr, kGsiCtrInfo>;

class GsiPort final : public MadPort {
 public:
  static constexpr uint32_t kGrhBytes = wire::GrhArea::kSize;  // a UD receive's GRH area (lib/wire/grh.hpp)
  static constexpr uint32_t kRecvSlots = 256;
  static constexpr uint32_t kSendSlots = 256;
  static constexpr size_t kMaxBacklog = 4096;  // MADs waiting for a send slot (1 MiB at most)
  // Address handles kept (one per peer GID): a sender of MADs from ever
  // new source addresses must not grow memory without bound.  A send
  // copies the path into its work request, so an evicted handle is never
  // needed by a send in flight.
  static constexpr size_t kMaxAhs = 1024;

  using Receiver = std::function<void(const MadAddr& from, std::span<const uint8_t> mad)>;

  explicit GsiPort(rnic::Rnic& rnic) : rnic_(rnic) {}
  ~GsiPort() override;
  GsiPort(const GsiPort&) = delete;
  GsiPort& operator=(const GsiPort&) = delete;

  // Creates the PD, CQ, QP 1 and buffers, moves QP 1 to RTS and posts the
  // receives.  0 or an errno (EBUSY: QP 1 exists already).  Control path.
  int open();
  // Destroys what open() made.  Control path.
  void close();

  // [engine] MadPort.
  bool send(const MadAddr& to, std::span<const uint8_t> mad) override;
  // [engine] Takes every completion; received MADs go to `rx`.  Returns the
  // number of completions handled.
  unsigned poll(const Receiver& rx);

  // [engine] `wake(arg)` runs on the engine after each completion on QP 1
  // (received MAD or finished send): the caller schedules a poll().  After
  // open(); nullptr stops it.
  void on_completion(rnic::Cq::PushHook wake, void* arg) noexcept;

  const GsiCounters& counters() const noexcept { return ctr_; }
  size_t ah_count() const noexcept { return ah_gauge_.load(std::memory_order_relaxed); }  // any thread
  rnic::Qp* qp() const noexcept { return qp_; }

 private:
  using Slot = std::array<uint8_t, kGrhBytes + wire::kMadSize>;
  rnic::Ah* ah_for(const MadAddr& to);
  bool post_recv(uint32_t slot);
  bool post_send(const MadAddr& to, std::span<const uint8_t> mad);  // a slot is free

  rnic::Rnic& rnic_;
  rnic::Pd* pd_ = nullptr;
  rnic::Cq* cq_ = nullptr;
  rnic::Qp* qp_ = nullptr;
  rnic::Mr* mr_ = nullptr;
  std::vector<Slot> bufs_;          // kRecvSlots receive slots, then kSendSlots send slots
  uint32_t send_next_ = 0;          // next send slot (round robin)
  uint32_t send_busy_ = 0;          // send slots posted and not yet completed
  struct Queued {
    MadAddr to;
    std::array<uint8_t, wire::kMadSize> mad;
    uint16_t len;
  };
  std::deque<Queued> backlog_;      // [engine] waiting for a send slot, oldest first
  struct AhEntry {
    rnic::Ah* ah = nullptr;
    uint64_t used = 0;  // use_clock_ at the last send through it
  };
  std::map<std::array<uint8_t, 16>, AhEntry> ahs_;
  uint64_t use_clock_ = 0;
  std::atomic<size_t> ah_gauge_{0};  // ahs_.size(), for readers on other threads
  GsiCounters ctr_;
};

}  // namespace uroce::cm
