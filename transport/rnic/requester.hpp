// The send side of a QP, engine only: the requester turns SQ WQEs into
// request packets (requester.cpp); the completer takes the responses — ACK,
// NAK, READ response, atomic ACK — retires WQEs, writes send CQEs and runs
// retransmission (completer.cpp).  IBA 9.7 (reliable service), 9.9 (UD),
// and the local ACK / RNR timers of 9.7.6.1.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "lib/util/timer_wheel.hpp"
#include "lib/wire/pkt.hpp"
#include "lib/wire/types.hpp"

namespace uroce::transport {
class Engine;
struct RoceRx;
}  // namespace uroce::transport

namespace uroce::rnic {

class Qp;

struct ReqState {
  Psn next_psn{};                 // PSN of the next new packet (sq_psn at RTS)
  uint32_t wqe_idx = 0;           // SQ index of the WQE being segmented
  uint32_t rd_atomic_inflight = 0;  // READ/atomics sent and not completed (<= max_rd_atomic)
  uint32_t pkts_since_ackreq = 0;   // AckReq at least every 64 packets
  bool fence_wait = false;        // a fenced WQE waits for earlier READ/atomics
  bool scheduled = false;         // a doorbell is pending
  // requester.cpp's own:
  Psn psn_hi{};                   // one past the highest PSN ever sent (responses up to it are not ghosts)
  uint32_t wqe_hi = 0;            // one past the highest SQ index ever started (go-back-N resends below it)
  Timer kick{};                   // run again soon: after a send budget or a missing mbuf
};

struct CompState {
  Psn psn{};                      // oldest unacknowledged PSN
  uint32_t wqe_idx = 0;           // SQ index of the oldest WQE not yet completed
  uint8_t retry_left = 0;         // from retry_cnt, per unacknowledged progress
  uint8_t rnr_left = 0;           // from rnr_retry (7: infinite)
  Timer ack_timer{};              // local ACK timeout
  Timer rnr_timer{};              // RNR wait before the retry
  bool rnr_wait = false;
  // completer.cpp's own:
  bool retry_started = false;     // a go-back-N from retry_psn is under way: later implied
  Psn retry_psn{};                //   NAKs for the same PSN do not start another (as rxe)
};

// Unacknowledged PSNs the requester keeps outstanding at most (far below
// the 2^23 that the modular PSN compare allows, IBA 9.7.1).
inline constexpr uint32_t kMaxUnackedPsns = 512;
// Packets one requester_run sends before it yields to the poll loop.
inline constexpr uint32_t kReqBudget = 64;
// AckReq at least every this many packets of a long message (the IBA
// leaves the cadence to the requester; rxe uses 64).
inline constexpr uint32_t kMaxPktsPerAckReq = 64;

// [engine] The requester: send what the SQ and the window allow.  Called on
// the QP's doorbell and whenever the completer frees the window.
void requester_run(transport::Engine& engine, Qp& qp) noexcept;
// [engine] Go back N: restart segmentation at the oldest unacknowledged PSN
// (comp.psn) — on a PSN-sequence NAK, a local ACK timeout or after an RNR
// wait.
void requester_rewind(Qp& qp) noexcept;
// [engine] A response packet (ACK, NAK, READ response, atomic ACK) for this
// QP.  Consumes the mbuf.
void completer_rx(transport::Engine& engine, Qp& qp, transport::RoceRx& pkt) noexcept;
// Reset both roles' state (RESET/INIT, and sq_psn at RTR->RTS).  Cancels
// their timers.
void sender_reset(Qp& qp, transport::Engine& engine) noexcept;

// ---- shared by requester.cpp and completer.cpp ----
struct SendWqe;
enum class SgeDir : uint8_t { Gather, Scatter };
// Copy `len` bytes between `buf` and the WQE's SGEs (or inline data) at
// message offset `off`; false when an SGE no longer translates.
bool copy_sges(Qp& qp, const SendWqe& w, uint64_t off, uint8_t* buf, uint64_t len, SgeDir dir) noexcept;
bool wqe_is_rd_atomic(const SendWqe& w) noexcept;
// [engine] Complete `w` in error with `status` (after the Done WQEs before
// it) and fail the send queue: RC to ERR, UC/UD to SQE; the rest flushes.
void sender_fail(Qp& qp, SendWqe& w, ibv_wc_status status) noexcept;
// Timer callbacks (completer.cpp): local ACK timeout, end of an RNR wait.
void completer_ack_timeout(Timer& t, uint64_t now_ns);
void completer_rnr_timeout(Timer& t, uint64_t now_ns);

// The local ACK timeout in ns for the QP attribute `timeout` (4.096 us *
// 2^timeout; 0 means infinite: returns 0).  IBA 9.7.6.1.3 / C9-140.
uint64_t ack_timeout_ns(uint8_t timeout) noexcept;
// The RNR NAK timer for a 5-bit code, in ns (IBA table 45).
uint64_t rnr_timer_ns(uint8_t code) noexcept;

}  // namespace uroce::rnic
