// Every tunable of the engine and the software RNIC in one place (STYLE 11),
// with why each has its value, and the IBA's timer tables the transport
// times by.  Limits that query_device reports are in rnic/limits.hpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace uroce::transport::params {

// ---- the engine's poll loop (engine.cpp) -------------------------------------------
// Frames to the device's own addresses waiting for the loop's next turn (as
// a port's ring: a full queue drops, and RC retransmits).  A turn's
// requester budget (kReqBudget per QP) stays far below it.
inline constexpr size_t kLoopbackFrames = 2048;

// An idle engine thread gives its core away by degrees: it spins for a
// while (lowest latency), then yields to other runnable threads (the
// application's own, which may be spinning on a CQ: on a machine with few
// cores they would otherwise starve each other), then naps.  A frame or
// doorbell arriving during a nap waits at most kIdleNapNs.
inline constexpr uint64_t kIdleSpinNs = 20'000;      // 20 us of pure spinning
inline constexpr uint64_t kIdleYieldNs = 2'000'000;  // then yield until 2 ms idle
inline constexpr long kIdleNapNs = 50'000;           // then 50 us naps
// A yield that comes back after this long lost the core for a scheduler
// slice (EEVDF's base slice is 0.75 ms times 1 + log2 of the CPU count; a
// thread that yields back returns within microseconds).  The idle engine
// thread then naps instead of yielding for a hold, kCoreSharedHoldMinNs
// at first, doubled (up to kCoreSharedHoldMaxNs) each time the yield after
// a hold stalls again: on a core shared for good, one slice lost per
// second.  Measured (DESIGN.md "Progress"): ib_write_lat -c UC 64 B between
// two namespaces (af_packet veth, 2 cores), where each side's thread spins
// on memory, 2000 us -> 50-117 us typical.
inline constexpr uint64_t kYieldStallNs = 200'000;
inline constexpr uint64_t kCoreSharedHoldMinNs = 10'000'000;
inline constexpr uint64_t kCoreSharedHoldMaxNs = 1'000'000'000;
// EngineConfig::idle_wait: an idle engine thread spins this long
// (yielding: a client's engine thread gives way to its own application),
// then sleeps until a frame, a doorbell or its next timer, at most
// kIdleWaitMaxNs.  A wake-up on the waker's CPU costs about 1 us here (an
// eventfd round trip between two threads on one CPU: 1.9 us); across CPUs
// far more (81 us pinned apart on this 2-vCPU VM), which is why uroced
// polls while a client spins (IdleHooks::keep_polling).
inline constexpr uint64_t kIdleWaitSpinNs = 10'000;
inline constexpr uint64_t kIdleWaitMaxNs = 10'000'000;
// ... but not while an application thread drove the loop this recently
// (try_progress): it is polling, and will come back.  Measured on the
// daemon path (ib_send_lat between two namespaces through two uroceds):
// with the engine thread sleeping on the port's wake fd whenever idle,
// the application's try_lock failed ~300,000 times a second and RC ACK
// timeouts ended runs in RETRY_EXC_ERR.
inline constexpr uint64_t kAssistActiveNs = 1'000'000;
// When an application thread last called try_progress(Hold) while the
// engine thread runs, the thread stays off the core kAssistHoldNs after it.
// Short: an application that polls a CQ calls again within a few
// microseconds, and one that went to spin on memory (ib_write_lat waits
// for the peer's WRITE that way) must not wait long for the engine (200 us
// here made ib_write_lat's typical latency ~80 us against ~40 us at 10 us,
// with ibv_rc_pingpong's thread mode unchanged at ~16 us).
inline constexpr uint64_t kAssistHoldNs = 10'000;
// How long a turn that ends with only ACKs holds them for the next turns,
// so that a request the application posts meanwhile leaves in the same
// tx_burst, ahead of them (Engine::requests_before_held_acks).  Below the
// shortest ACK timeout (4.096 us * 2^timeout with timeout 1, IBA 9.7.6.1.3)
// with room for the wire.  Measured (af_packet veth, 2 cores):
// - 2 us: a 64-byte SEND's one way 11.0 -> 8.7 us with engine threads,
//   10.7 -> 6.4 us inline (bench/run's stages): the receiver's poll no
//   longer waits behind its ACK's tx_burst;
// - 5 us: ib_write_lat 64 B typical ~48 us -> 3.6-4.0 us.  The two frames
//   of a burst reach the peer ~4 us apart here, and an application sees
//   the peer's data, returns from its poll and posts within ~5 us of the
//   ACK's turn: at 2 us the ACK left alone, the peer's application
//   returned from its poll on it and spun on memory, and the request after
//   it waited for the peer's engine thread (a nap).  ib_send_lat,
//   ib_read_lat and ib_write_bw/ib_send_bw unchanged within the noise.
inline constexpr uint64_t kAckHoldNs = 5'000;

// uroced's client: how long a claim record waits for the frames the engine
// keeps (the shared ring was full) to leave before it (Engine::drain_tx).
// The daemon drains a ring within microseconds while it lives.
inline constexpr uint64_t kRecordDrainNs = 20'000'000;

// Inline progress: the backstop polls when no thread has for this long
// (Engine::start_backstop).
inline constexpr uint64_t kInlineBackstopNs = 100'000;
// The engine thread's nap while assisted: a frame ends it unless the
// application polled through the previous one (Engine::assist_nap).
inline constexpr long kAssistNapNs = 20'000;
// ... and for a client of uroced, one the application spun through (it
// polled at least every kAssistSpinPollNs on average) makes the next
// twice as long, up to kAssistNapMaxNs, off call; any other starts over.
// A program that polls only after each completion event keeps the short
// nap: the engine thread delivers its next event when the nap ends.
// Each wake-up of the engine thread takes a CPU from a spinning thread;
// a uroced client's spinning threads are two per end (the application
// and uroced's polling engine thread).  Measured through uroced between
// two namespaces (af_packet veth, 2 cores), 64 B typical: ib_send_lat
// 11.5-39.4 us (median ~29 in 6 runs) -> 9.0-11.7 (7.9-8.5 with the long
// naps on call); ib_send_bw 0.26-0.37 -> 0.35-0.47 M messages/s; and with
// the naps on call, ib_write_lat 26-42 -> 8.1-10.7, ib_send_lat -e
// (events) 144-159 -> 149-158.  In-process the same naps made no
// difference beyond the noise (ib_send_lat, ib_write_lat RC and UC, -e),
// and they stay short there: a post's own turn is a sendto, and post
// batching needs the thread on call (Engine::post_kick).
inline constexpr long kAssistNapMaxNs = 1'000'000;
inline constexpr uint64_t kAssistSpinPollNs = 10'000;
// A post that follows the previous post call's end within kPostBatchGapNs
// leaves its doorbell for the next turn (Engine::post_kick), up to
// kPostBatchMax posts: a burst of posts (ib_send_bw refills 100 WQEs per
// completion) goes to the port in one tx_burst, where af_packet spends a
// system call per burst.  A program that posts one message per round trip
// posts microseconds apart and runs its turn at each post, as before.
inline constexpr uint64_t kPostBatchGapNs = 1'000;
inline constexpr uint32_t kPostBatchMax = 32;

// ---- the RNIC -----------------------------------------------------------------------------
// How often the engine samples the port's link for the port events: a link
// change is reported within this; rarer than the idle back-off horizon so
// that an idle engine still naps.
inline constexpr uint64_t kLinkPollNs = 50'000'000;
// A sender that found no buffer tries again after this: buffers come back
// as the port sends.
inline constexpr uint64_t kNoBufferRetryNs = 10'000;

// Requester (requester.cpp).  Unacknowledged PSNs it keeps outstanding at
// most (far below the 2^23 that the modular PSN compare allows, IBA 9.7.1).
inline constexpr uint32_t kMaxUnackedPsns = 512;
// The send window under loss (ReqState::window): a go-back-N after a
// sequence NAK halves it, an ACK timeout drops it to kMinUnackedPsns, and
// every PSN acknowledged since adds one, up to kMaxUnackedPsns.  Go-back-N
// resends everything past a lost packet, so on a lossy Ethernet (no PFC) a
// full window after every loss sends most packets many times over.
inline constexpr uint32_t kMinUnackedPsns = 16;
// The window a QP of a device with congestion control (cc "dcqcn" or
// "delay") starts with at RTS: its first round trip sends no more than
// this, and each PSN acknowledged adds one (it doubles per round trip, as
// TCP's slow start).  Starting at kMaxUnackedPsns, two QPs' first flights
// (1 MiB at path MTU 1024) overflowed a 256 KB switch queue before any CNP
// could come back (bench/incast/run: 101-189 port drops, all in the first
// second; with it, none).  With cc "none" a QP starts at kMaxUnackedPsns.
inline constexpr uint32_t kInitialUnackedPsns = 64;
// What all of a device's reliable requesters keep outstanding together is
// kMaxUnackedPsns too: each of the n with packets outstanding gets at most
// kMaxUnackedPsns / n, not below this.  A receiver whose engine thread is
// descheduled holds what arrives meanwhile in its port's ring (512 frames
// on af_packet): 64 QPs of full windows overflowed it by 60 times, lost
// 4-10% of their packets and ended in RETRY_EXC_ERR in about 1 run of 7
// (ib_write_bw -q 64).
inline constexpr uint32_t kMinSharePsns = 4;
// Packets one requester_run sends before it yields to the poll loop.
inline constexpr uint32_t kReqBudget = 64;
// AckReq at least every this many packets of a long message (the IBA
// leaves the cadence to the requester; rxe uses 64).
inline constexpr uint32_t kMaxPktsPerAckReq = 64;

// Selective repeat (DESIGN.md "Loss recovery on a lossy link";
// responder side in reorder.cpp).  PSNs past the expected one a responder
// keeps packets for: the requester's whole window.
inline constexpr uint32_t kSrHoldPsns = kMaxUnackedPsns;
// Packets all of a device's responders keep together: a quarter of a
// port's receive pool (drivers/dpdk kDefaultPoolMbufs, 4095), so that
// held frames never starve the receive path.  Past it a gap is NAKed the
// IBA's way and the requester goes back N.
inline constexpr uint32_t kSrHoldDeviceMax = 1024;
// A responder keeping packets behind a gap NAKs the gap again after this
// many more arrive without it (the NAK or the resent packet was lost too).
inline constexpr uint32_t kSrRenakEvery = 16;
// Spraying (DESIGN.md "Spraying"): a responder whose requester sprays NAKs
// a gap only once it keeps this many packets past it (reordering between
// paths is not loss; RFC 5681's duplicate-ACK threshold, in packets that
// overtook the hole).  A tail shorter than that waits for the requester's
// ACK timeout.  A quarter of a 64 KiB message at path MTU 1024, and well
// inside kSrHoldPsns.
inline constexpr uint32_t kSprayReorderPkts = 16;

// Responder (responder.cpp).  Packets one READ response burst sends before
// yielding to the poll loop (a long READ must not flood the port's TX ring
// or the peer's RX ring).
inline constexpr uint32_t kRespBudget = 64;
// Requests a QP holds while its READ response streams (more are dropped;
// the requester retransmits them).
inline constexpr uint32_t kRespBacklog = 256;

// A connected QP's path resolves its next hop inside ibv_modify_qp
// (IBV_QP_AV), as Linux does for every RoCE device (ib_resolve_eth_dmac:
// rdma_resolve_ip, 1 s): the first packets of either side then go out at
// once instead of waiting in the neighbour's queue (16 frames; more are
// dropped, and an ACK dropped there is sent again only when the peer
// retransmits, after the QP's ACK timeout).  Rnic::await_neighbour.
inline constexpr uint64_t kPathResolveNs = 1'000'000'000;
inline constexpr long kPathResolvePollNs = 20'000;  // between looks, when another thread runs the loop

// ---- IBA 9.7.6.1 timers -------------------------------------------------------------------
// Local ACK timeout, C9-140: 4.096 us * 2^timeout; 0 disables the timer.
constexpr std::array<uint64_t, 32> make_ack_timeouts() {
  std::array<uint64_t, 32> t{};
  for (unsigned i = 1; i < 32; ++i) t[i] = uint64_t{4096} << i;
  return t;
}
inline constexpr std::array<uint64_t, 32> kAckTimeoutNs = make_ack_timeouts();
static_assert(kAckTimeoutNs[0] == 0 && kAckTimeoutNs[1] == 8192 && kAckTimeoutNs[14] == 67'108'864);
static_assert(kAckTimeoutNs[31] == 4096ull << 31);  // ~2.4 hours, the largest

// RNR NAK timer field encoding, IBA table 45 (ns).  Code 0 is the longest.
inline constexpr std::array<uint64_t, 32> kRnrTimerNs = {
    655'360'000, 10'000,     20'000,     30'000,     40'000,      60'000,      80'000,      120'000,
    160'000,     240'000,    320'000,    480'000,    640'000,     960'000,     1'280'000,   1'920'000,
    2'560'000,   3'840'000,  5'120'000,  7'680'000,  10'240'000,  15'360'000,  20'480'000,  30'720'000,
    40'960'000,  61'440'000, 81'920'000, 122'880'000, 163'840'000, 245'760'000, 327'680'000, 491'520'000,
};
constexpr bool rnr_table_increasing() {
  for (size_t i = 2; i < kRnrTimerNs.size(); ++i)
    if (kRnrTimerNs[i] <= kRnrTimerNs[i - 1]) return false;
  return kRnrTimerNs[0] > kRnrTimerNs[31];
}
static_assert(rnr_table_increasing());
static_assert(kRnrTimerNs[1] == 10'000 && kRnrTimerNs[16] == 2'560'000 && kRnrTimerNs[31] == 491'520'000);

// The local ACK timeout for the QP attribute `timeout` (0: infinite, 0 ns).
constexpr uint64_t ack_timeout_ns(uint8_t timeout) noexcept { return kAckTimeoutNs[timeout & 0x1F]; }
// The RNR NAK timer for a 5-bit code.
constexpr uint64_t rnr_timer_ns(uint8_t code) noexcept { return kRnrTimerNs[code & 0x1F]; }

// Adaptive retransmission, as ConnectX runs it by default: the local ACK
// timer starts from what the QP's own round trips say, and the programmed
// timeout (ack_timeout_ns) is its ceiling.  RTO = SRTT + 4 RTTVAR (RFC
// 6298's estimator over the ACKs of packets that asked for one and were
// sent once: Karn's rule), at least kRtoMinNs, kRtoMinNs before the first
// sample, doubled by each timeout in a row (kRtoMaxBackoff doublings at
// most) and reset by any progress.  Each timeout still takes one of
// retry_cnt.  A QP programmed with `timeout` 0 (the IBA's infinite) has
// no ceiling but the doubling's and never runs out of retries: what was
// lost is sent again, and a vanished peer is waited for, as the IBA
// says (rxe, with no adaptive timer, sends nothing again).  kRtoMinNs is the
// floor a loaded 2-core host's scheduler allows without spurious timeouts
// (a descheduled engine thread misses its turn for a few milliseconds);
// with it, retry_cnt 5 at timeout 18 (1.07 s programmed) ends in
// RETRY_EXC_ERR after ~1 s instead of 6.4 s, and a lost packet at the tail
// of a burst costs 16 ms, not the programmed timeout.
inline constexpr uint64_t kRtoMinNs = 16'000'000;
inline constexpr unsigned kRtoMaxBackoff = 12;

// retry_cnt / rnr_retry: rnr_retry 7 retries for ever (the IBA gives the
// RNR Retry Count that one special value); the transport Retry Count has
// none: retry_cnt 7 is seven retries, as ConnectX counts them (only rxe
// reads 7 as infinite there), so that a peer that vanished ends in
// IBV_WC_RETRY_EXC_ERR within the QP's budget.
inline constexpr uint8_t kInfiniteRnrRetry = 7;

}  // namespace uroce::transport::params
