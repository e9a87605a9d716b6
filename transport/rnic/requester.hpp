// The requester (requester.cpp), engine only: a QP's SQ WQEs into request
// packets (IBA 9.7.4 for RC, 9.8 UC, 9.9 UD and the GSI QP), and go-back-N
// rewinding (9.7.4.1.4 / 9.7.5.2).  What comes back is the completer's
// (completer.hpp).
#pragma once

#include <cstdint>

#include "lib/util/timer_wheel.hpp"
#include "lib/wire/types.hpp"
#include "transport/params.hpp"

namespace uroce::transport {
class Engine;
}  // namespace uroce::transport

namespace uroce::rnic {

class Qp;

struct ReqState {
  Psn next_psn{};                 // PSN of the next new packet (sq_psn at RTS)
  uint32_t wqe_idx = 0;           // SQ index of the WQE being segmented
  uint32_t rd_atomic_inflight = 0;  // READ/atomics sent and not completed (<= max_rd_atomic)
  uint32_t pkts_since_ackreq = 0;   // AckReq at least every kMaxPktsPerAckReq packets
  bool ackreq_next = false;         // the first packet after a go-back-N asks for an ACK
  bool active = false;              // counted in Rnic::active_senders (packets outstanding)
  bool fence_wait = false;        // a fenced WQE waits for earlier READ/atomics
  Psn psn_hi{};                   // one past the highest PSN ever sent (responses up to it are not ghosts)
  uint32_t wqe_hi = 0;            // one past the highest SQ index ever started (go-back-N resends below it)
  uint32_t window = transport::params::kMaxUnackedPsns;  // unacknowledged PSNs allowed now (kMin..kMaxUnackedPsns)
  // The packet whose ACK times a round trip (adaptive retransmission): one
  // at a time, one that asked for an ACK and is sent for the first time.
  bool rtt_timing = false;
  Psn rtt_psn{};
  uint64_t rtt_sent_ns = 0;
  // Spraying: the peer's responder keeps what arrives after a gap (an ACK
  // or a NAK came with wire::kResv7Selective), and the port the next
  // request takes, of Rnic::spray_ports().
  bool peer_keeps = false;
  uint32_t spray_next = 0;
  Timer kick{};                   // run again soon: after a send budget or a missing mbuf
};

// [engine] Send what the SQ and the window allow.  Called on the QP's
// doorbell and whenever the completer frees the window.
void requester_run(transport::Engine& engine, Qp& qp) noexcept;
// [engine] Go back N: restart segmentation at the oldest unacknowledged PSN
// (comp.psn) — on a PSN-sequence NAK, a local ACK timeout or after an RNR
// wait.
void requester_rewind(Qp& qp) noexcept;
// [engine] Selective repeat: send [from, from + n) again, each packet as
// it first went (the last asks for an ACK), nothing else; what the
// requester sends next does not change.  PSNs at or past next_psn are
// left to the requester's own pass.
void requester_resend(transport::Engine& engine, Qp& qp, Psn from, uint32_t n) noexcept;
// Whether the QP's requests are spread over several UDP source ports now
// (DESIGN.md "Spraying"): the device sprays, the QP is reliable and its
// peer keeps what arrives after a gap.
bool requester_sprays(const Qp& qp) noexcept;
// [engine] The send window after a loss: halved on a sequence NAK's
// go-back-N, the minimum after an ACK timeout; regrown by acknowledged PSNs.
enum class LossSignal : uint8_t { SeqNak, AckTimeout };
void requester_shrink_window(Qp& qp, LossSignal why) noexcept;
void requester_grow_window(Qp& qp, uint32_t acked_psns) noexcept;
// [engine] Nothing of the QP is outstanding any more (all acknowledged, or
// flushed): it leaves the device's count of senders.
void requester_idle(Qp& qp) noexcept;
// Reset the send side — requester and completer — at the QP's sq_psn
// (RESET/INIT, and RTR->RTS), cancelling their timers.
void sender_reset(Qp& qp, transport::Engine& engine) noexcept;
// Bind the requester's timer to `qp` (once, when the QP is made).
void requester_bind(Qp& qp) noexcept;

}  // namespace uroce::rnic
