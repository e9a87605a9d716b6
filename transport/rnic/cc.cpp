// Congestion control on a QP: ECN on data, the notification point's CNPs,
// the reaction point's DCQCN and pacer (cc.hpp).  [engine] everything.
#include "transport/rnic/cc.hpp"

#include <rte_mbuf.h>

#include <algorithm>
#include <cstring>

#include "lib/util/log.hpp"
#include "lib/util/mix64.hpp"
#include "lib/wire/bth.hpp"
#include "lib/wire/ext.hpp"
#include "transport/engine.hpp"
#include "transport/rnic/qp.hpp"
#include "transport/rnic/rnic.hpp"
#include "transport/rnic/tx.hpp"

namespace uroce::rnic {
namespace {

constexpr uint64_t kNsPerUs = 1000;
constexpr uint8_t kEcnMask = 0x03;
constexpr uint8_t kEcnEct0 = 0x02;        // RFC 3168 ECT(0), as ConnectX sends data
constexpr uint16_t kVlanPcpShift = 13;     // 802.1Q TCI: PCP in its top 3 bits
constexpr uint16_t kVlanNotPcp = 0x1FFF;

// The pacer follows the lower of DCQCN's and the delay controller's rates
// (neither active: it is off); the timer DCQCN's next boundary.
void follow_rate(transport::Engine& engine, Qp& qp) noexcept {
  QpCc& c = qp.cc;
  c.pacer.set_rate(cc_rate_bps(c), ~uint64_t{0}, kPaceBurstBytes);
  engine.timers().cancel(c.timer);
  if (const uint64_t at = c.rp.deadline(); at != 0) engine.timers().arm(c.timer, at);
}

// Run `step` on the reaction point; count its cuts; the pacer and timer follow.
// UROCE_TRACE=cc: one line when a QP enters DCQCN, at each cut, and when
// it leaves (back at its maximum).
template <class Step>
void rp_step(transport::Engine& engine, Qp& qp, Step&& step) noexcept {
  cc::Dcqcn& rp = qp.cc.rp;
  const uint64_t cuts = rp.cuts();
  const uint64_t rate = rp.rate_bps();
  const uint64_t deadline = rp.deadline();
  const bool was_active = rp.active();
  step(rp);
  if (rp.cuts() != cuts) {
    qp.rnic().counters().add(RnicCtr::rp_rate_cuts, rp.cuts() - cuts);
    UROCE_TRACE(TraceCat::Cc, "qp %u cut: rate %.3f Gb/s, target %.3f Gb/s, alpha %u/1024, cnps %lu",
                qp.qpn().value(), static_cast<double>(rp.rate_bps()) / 1e9,
                static_cast<double>(rp.target_bps()) / 1e9, rp.alpha(), static_cast<unsigned long>(qp.cc.cnps_rcvd));
  }
  if (rp.active() != was_active) {
    UROCE_TRACE(TraceCat::Cc, "qp %u %s DCQCN: rate %.3f Gb/s", qp.qpn().value(),
                rp.active() ? "enters" : "leaves", static_cast<double>(rp.rate_bps()) / 1e9);
  }
  if (rp.rate_bps() != rate || rp.deadline() != deadline) follow_rate(engine, qp);
}

void on_timer(Timer& t, uint64_t now_ns) {
  Qp& qp = t.owner_as<Qp>();
  rp_step(qp.engine(), qp, [now_ns](cc::Dcqcn& rp) { rp.advance(now_ns); });
  if (const uint64_t at = qp.cc.rp.deadline(); at != 0 && !qp.cc.timer.armed()) qp.engine().timers().arm(qp.cc.timer, at);
}

// The path back to whoever sent `pi`: a connected QP's own; for UD the
// packet's addresses reversed.
AhAttr path_back(const Qp& qp, const uint8_t* frame, const wire::PktInfo& pi) noexcept {
  if (qp.connected()) return qp.attrs().path;
  AhAttr p;
  p.ipv4 = pi.l3 == wire::L3::IPv4;
  p.dgid = wire::src_gid(frame, pi);
  p.sgid = wire::dst_gid(frame, pi);
  return p;
}

}  // namespace

void cc_bind(Qp& qp) noexcept {
  qp.cc.timer.cb = on_timer;
  qp.cc.timer.owner = &qp;
}

void cc_reset(Qp& qp, transport::Engine& engine) noexcept {
  QpCc& c = qp.cc;
  engine.timers().cancel(c.timer);
  c.rp.reset(qp.rnic().cc().dcqcn, kPortSpeedBps);
  c.delay.reset(qp.rnic().cc().delay, kPortSpeedBps);
  c.pacer.reset();
  c.cnp_sent = false;
  c.last_cnp_sent_ns = 0;
  c.round_congested = false;
  c.congested_rounds = 0;
}

void cc_mark_data(const Rnic& rnic, wire::PktDesc& d) noexcept {
  if (rnic.cc().ecn && (d.tos & kEcnMask) == 0) d.tos |= kEcnEct0;
}

// A17.9.3, CA17-44: a CNP to the source of a CE-marked packet: BTH opcode
// 0x81, DestQP the sending QP (ours' dest_qp_num; for UD the DETH's
// source QP), PSN 0, the marked packet's P_Key, SE/M/pad 0, the BECN bit,
// 16 reserved bytes of zero, the normal ICRC; Not-ECT, DSCP cnp_dscp, on a
// tagged device the VLAN priority cnp_802p_prio.
void cc_ce_received(transport::Engine& engine, Qp& qp, const uint8_t* frame, const wire::PktInfo& pi) noexcept {
  Rnic& rnic = qp.rnic();
  RnicCounters& ctr = rnic.counters();
  ctr.inc(RnicCtr::np_ecn_marked_roce_packets);
  if (qp.is_gsi()) return;  // MADs are not a flow to slow down
  const config::DcqcnConfig& p = rnic.cc().dcqcn;
  QpCc& c = qp.cc;
  const uint64_t now = engine.now();
  if (c.cnp_sent && now - c.last_cnp_sent_ns < uint64_t{p.min_time_between_cnps_us} * kNsPerUs) {
    ctr.inc(RnicCtr::np_cnp_coalesced);
    return;
  }
  const AhAttr path = path_back(qp, frame, pi);
  wire::PktDesc d;
  tx_fill_path(engine, path, qp.attrs().sport, d);
  d.tos = static_cast<uint8_t>(p.cnp_dscp << 2);  // ECN 00: the CNP is not ECN-capable
  if (d.vlan_count > 0) {
    d.vlans[0].tci = static_cast<uint16_t>((d.vlans[0].tci & kVlanNotPcp) | (p.cnp_802p_prio << kVlanPcpShift));
  }
  d.opcode = wire::kCnpOpcode;
  d.dest_qp = qp.connected() ? Qpn(qp.attrs().dest_qp_num) : wire::DethC(frame + pi.ext_off(wire::kHdrDeth)).src_qp();
  d.psn = Psn(0);
  d.pkey = wire::BthC(frame + pi.bth_off).pkey();
  d.resv8a = kCnpBecn;
  rte_mbuf* m = engine.alloc();
  if (m == nullptr) {
    ctr.inc(RnicCtr::np_cnp_failed);
    return;
  }
  const TxResult sent = tx_frame(engine, m, path, d, wire::kCnpReservedLen, [](uint8_t* dst) {
    std::memset(dst, 0, wire::kCnpReservedLen);
    return true;
  });
  if (sent != TxResult::Sent) {
    ctr.inc(RnicCtr::np_cnp_failed);
    return;
  }
  ctr.inc(RnicCtr::np_cnp_sent);
  c.cnp_sent = true;
  c.last_cnp_sent_ns = now;
  ++c.cnps_sent;
}

// CA17-45: the QP the CNP names slows down.  The 16 reserved bytes are
// ignored, as A17.9.3 asks of a receiver.
void cc_cnp_received(transport::Engine& engine, Qp& qp, transport::RoceRx& pkt) noexcept {
  Rnic& rnic = qp.rnic();
  rte_pktmbuf_free(pkt.m);
  ++qp.cc.cnps_rcvd;
  qp.cc.round_congested = true;  // a path's congestion, whatever the rate control
  if (rnic.cc().mode == config::CcMode::kNone) {
    rnic.counters().inc(RnicCtr::rp_cnp_ignored);
    return;
  }
  rnic.counters().inc(RnicCtr::rp_cnp_handled);
  const uint64_t now = engine.now();
  rp_step(engine, qp, [now](cc::Dcqcn& rp) { rp.on_cnp(now); });
}

void cc_rtt_sample(Qp& qp, uint64_t rtt_ns) noexcept {
  Rnic& rnic = qp.rnic();
  QpCc& c = qp.cc;
  c.congested_rounds = c.round_congested ? c.congested_rounds + 1 : 0;  // a round ends
  c.round_congested = false;
  if (rnic.cc().mode != config::CcMode::kDelay) return;
  cc::DelayCc& d = qp.cc.delay;
  const uint64_t rate = d.rate_bps();
  const uint64_t cuts = d.cuts();
  d.on_rtt(qp.engine().now(), rtt_ns);
  if (d.cuts() != cuts) {
    c.round_congested = true;  // counts for the round now beginning
    rnic.counters().inc(RnicCtr::rp_delay_cuts);
    UROCE_TRACE(TraceCat::Cc, "qp %u delay cut: rtt %lu us, rate %.3f Gb/s", qp.qpn().value(),
                static_cast<unsigned long>(rtt_ns / 1000), static_cast<double>(d.rate_bps()) / 1e9);
  }
  if (d.rate_bps() != rate) follow_rate(qp.engine(), qp);
}

// PLB's idle rehash: a new source port in RoCEv2's range (A17.3.2.1:
// 0xC000-0xFFFF by convention), another than the one it leaves, from the
// QPN and the count of changes (deterministic, spread over the range).
void cc_idle(Qp& qp) noexcept {
  Rnic& rnic = qp.rnic();
  QpCc& c = qp.cc;
  if (!rnic.cc().repath || !qp.reliable() || c.congested_rounds < rnic.cc().repath_rounds) return;
  const uint16_t old_port = qp.attrs().sport;
  const uint64_t h = mix64((uint64_t{qp.qpn().value()} << 32) ^ (uint64_t{c.path_changes + 1} * kGolden64));
  uint16_t port = static_cast<uint16_t>(0xC000u | (h & 0x3FFFu));
  if (port == old_port) port = static_cast<uint16_t>(0xC000u | ((port + 1) & 0x3FFFu));
  qp.set_sport(port);
  ++c.path_changes;
  c.congested_rounds = 0;
  rnic.counters().inc(RnicCtr::path_changes);
  UROCE_TRACE(TraceCat::Cc, "qp %u path change: UDP source port %u -> %u (change %u)", qp.qpn().value(), old_port,
              port, c.path_changes);
}

uint64_t cc_rate_bps(const QpCc& c) noexcept {
  constexpr uint64_t kUnlimited = ~uint64_t{0};
  const uint64_t by_cnp = c.rp.active() ? c.rp.rate_bps() : kUnlimited;
  const uint64_t by_delay = c.delay.active() ? c.delay.rate_bps() : kUnlimited;
  const uint64_t rate = std::min(by_cnp, by_delay);
  return rate == kUnlimited ? 0 : rate;
}

void cc_sent(transport::Engine& engine, Qp& qp, uint32_t bytes) noexcept {
  const uint64_t now = engine.now();
  qp.cc.pacer.spend(now, bytes);
  rp_step(engine, qp, [now, bytes](cc::Dcqcn& rp) { rp.on_sent(now, bytes); });
}

}  // namespace uroce::rnic
