// Congestion control on a QP (DESIGN.md "Congestion control"), engine only:
//
//   ECN       data packets (requests, READ responses) leave ECT(0) when the
//             device's `ecn` is on and the application's traffic class
//             left its ECN bits 00 (A17.3.1.1.3); ACKs, NAKs, atomic ACKs,
//             CNPs and MADs leave Not-ECT
//   NP        a valid RoCEv2 packet of a QP arriving CE (ECN 11) is answered
//             with a CNP toward the QP that sent it (A17.9.3, CA17-44), at
//             most one per min_time_between_cnps per QP
//   RP        a CNP for one of our QPs cuts its rate (DCQCN, dcqcn.hpp); with
//             cc "delay" the round trip the requester measures does too
//             (delay.hpp); the requester and the READ responder wait for the
//             QP's pacer, at the lower of the two rates
#pragma once

#include <cstdint>

#include "lib/util/timer_wheel.hpp"
#include "lib/wire/pkt.hpp"
#include "transport/cc/dcqcn.hpp"
#include "transport/cc/delay.hpp"
#include "transport/cc/pacer.hpp"

namespace uroce::transport {
class Engine;
struct RoceRx;
}  // namespace uroce::transport

namespace uroce::wire {
struct PktDesc;
}  // namespace uroce::wire

namespace uroce::rnic {

class Qp;
class Rnic;

// The port speed query_port reports (1X EDR) and DCQCN's maximum when
// rpg_max_rate is 0.
inline constexpr uint64_t kPortSpeedBps = 25'000'000'000ull;
// A QP idle for a while may send this much back to back at its paced rate.
inline constexpr uint32_t kPaceBurstBytes = 16 * 1024;
// The CNP's BTH byte 4 (F/B and reserved): the BECN bit set, as ConnectX
// sends it (A17.9.3 Figure 6 leaves the byte reserved; its ICRC masks it).
inline constexpr uint8_t kCnpBecn = 0x40;

struct QpCc {
  cc::Dcqcn rp;                    // reaction point: this QP's rate
  cc::DelayCc delay;               // cc = "delay": the rate the round trip allows
  cc::Pacer pacer;                 // at the lower of the two
  Timer timer{};                   // rp's next period boundary
  uint64_t last_cnp_sent_ns = 0;   // notification point: when this QP last sent a CNP
  bool cnp_sent = false;           // ... if ever since its reset
  uint64_t cnps_sent = 0;          // per QP, for `uroce qp` and the traces
  uint64_t cnps_rcvd = 0;
  // Path changes (repath): whether this round trip saw congestion, how
  // many in a row did, how often the QP moved.
  bool round_congested = false;
  uint32_t congested_rounds = 0;
  uint32_t path_changes = 0;
};

// [engine] The QP's state at its reset: at the maximum rate, not pacing,
// no timer.
void cc_reset(Qp& qp, transport::Engine& engine) noexcept;
void cc_bind(Qp& qp) noexcept;

// Set ECT(0) on a data packet's description (when the device's ecn is on
// and the traffic class carries no ECN bits of its own).
void cc_mark_data(const Rnic& rnic, wire::PktDesc& d) noexcept;

// [engine] A packet for `qp` arrived with CE: a CNP back, unless one went
// within min_time_between_cnps.  `frame`/`pi` stay the caller's.
void cc_ce_received(transport::Engine& engine, Qp& qp, const uint8_t* frame, const wire::PktInfo& pi) noexcept;
// [engine] A CNP for `qp` (its checks passed): DCQCN cuts, or, with cc
// "none", it is counted and ignored.  Frees the packet.
void cc_cnp_received(transport::Engine& engine, Qp& qp, transport::RoceRx& pkt) noexcept;

// [engine] Pacing: `qp.cc.pacer.wait(now)` is how long `qp` waits before
// its next frame (0: it may go now).  A frame of `bytes` left: the pacer
// and DCQCN's byte counter (nothing to do at the maximum rate).
// Callers test cc_tracking() first (inline: at the maximum rate, nothing).
inline bool cc_tracking(const QpCc& c) noexcept { return c.rp.active() || c.pacer.pacing(); }
// The rate the QP is paced at: the lower of DCQCN's and the delay
// controller's; 0 when neither holds it back.
uint64_t cc_rate_bps(const QpCc& c) noexcept;
void cc_sent(transport::Engine& engine, Qp& qp, uint32_t bytes) noexcept;
// [engine] A round-trip sample of the requester's (completer_rtt_sample):
// the delay-based controller's input with cc = "delay", and the end of a
// round for path changes.
void cc_rtt_sample(Qp& qp, uint64_t rtt_ns) noexcept;
// [engine] Everything the QP sent is acknowledged: with `repath` on and
// its last repath_rounds rounds congested, it moves to another UDP source
// port now (nothing in flight can be overtaken).
void cc_idle(Qp& qp) noexcept;

}  // namespace uroce::rnic
