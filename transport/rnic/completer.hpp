// The completer (completer.cpp), engine only: a QP's send side after the
// requester — the responses (ACK, NAK, READ response, atomic ACK) that
// acknowledge its WQEs, the send CQEs they become, go-back-N and the local
// ACK / RNR timers (IBA 9.7.5.1, 9.7.5.2, 9.7.6.1), and the flush of the
// send queue when the QP fails (IBA 10.3.1.6-7).  As rxe's rxe_comp.c: the
// completer owns send completions; the requester only asks it to retire
// what it finished (UC/UD) or failed.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

#include "lib/util/timer_wheel.hpp"
#include "lib/wire/types.hpp"

namespace uroce::transport {
class Engine;
struct RoceRx;
}  // namespace uroce::transport

namespace uroce::rnic {

class Qp;
struct SendWqe;

struct CompState {
  Psn psn{};                      // oldest unacknowledged PSN
  uint32_t wqe_idx = 0;           // SQ index of the oldest WQE not yet completed
  uint8_t retry_left = 0;         // from retry_cnt, per unacknowledged progress
  uint8_t rnr_left = 0;           // from rnr_retry (7: infinite)
  Timer ack_timer{};              // local ACK timeout
  Timer rnr_timer{};              // RNR wait before the retry
  bool rnr_wait = false;
  bool retry_started = false;     // a go-back-N from retry_psn is under way: later implied
  Psn retry_psn{};                //   NAKs for the same PSN do not start another (as rxe)
  bool retry_seen_any = false;    // responses since that go-back-N began, and the
  Psn retry_seen_hi{};            //   highest PSN among them (see completer.cpp, retry)
  // Adaptive retransmission (params::kRtoMinNs): the round-trip estimate
  // (0: no sample yet) and the timeouts in a row since the last progress.
  uint64_t srtt_ns = 0;
  uint64_t rttvar_ns = 0;
  uint8_t backoff = 0;
};

// [engine] A response packet for this QP.  Consumes the mbuf.
void completer_rx(transport::Engine& engine, Qp& qp, transport::RoceRx& pkt) noexcept;

// [engine] Write the send CQE of every WQE done or failed from the head of
// the SQ, in order (IBA 10.8.1: every signaled WQE, and every WQE that
// failed whatever its flags), and retire them.
void completer_retire(Qp& qp) noexcept;
// [engine] `w` failed with `status` (the Done WQEs before it complete
// first) and so does the send queue: RC to ERR, UC/UD to SQE; the rest is
// flushed.
void completer_fail(Qp& qp, SendWqe& w, ibv_wc_status status) noexcept;
// [engine] Every WQE not yet completed completes with WR_FLUSH_ERR, in
// order (a failed one keeps its own status), and the send side's windows
// are emptied (IBA 10.3.1.7).
void completer_flush(Qp& qp) noexcept;

// Bind the completer's timers to `qp` (once, when the QP is made) and
// (re)start its state at `psn` with the QP's retry counts.
void completer_bind(Qp& qp) noexcept;
void completer_reset(Qp& qp, transport::Engine& engine, Psn psn) noexcept;
// [engine] The local ACK timer to arm now (adaptive retransmission,
// params::kRtoMinNs): the round-trip estimate's RTO, doubled per timeout
// in a row, within the programmed timeout; with adaptive retransmission
// off (Rnic::set_adaptive_retransmission), the programmed timeout itself
// (0: none, `timeout` 0 being infinite).
uint64_t completer_rto(const Qp& qp) noexcept;
// [engine] Arms the local ACK timer at completer_rto from now (none when 0).
void completer_arm_ack_timer(transport::Engine& engine, Qp& qp) noexcept;
// [engine] A round-trip sample: the ACK of a packet sent once came `ns`
// after it left.
void completer_rtt_sample(Qp& qp, uint64_t ns) noexcept;

// [engine] Stop its timers (QP to ERR, or being destroyed).
void completer_stop(Qp& qp, transport::Engine& engine) noexcept;

}  // namespace uroce::rnic
