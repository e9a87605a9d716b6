// recv: the receive dispatcher — rxe_recv.c's job.  Every RoCEv2 packet to
// one of the device's addresses comes here from the engine, one burst at a
// time, and is checked once, in STYLE 7's order, before a role sees it:
//
//   DestQP 0xFFFFFF      -> the multicast group's QPs (mcast_rx)
//   the QP               by destination QPN in the one QP table (drop_unknown_qpn)
//   its state            requests (and all of a UD/GSI QP's traffic) from RTR
//                        on, responses in RTS/SQD (IBA 10.3.1) (drop_qp_state)
//   its path             RC/UC/XRC: from the path's destination to its source
//                        (rxe's check_addr) (drop_src_addr, drop_dst_addr)
//   the P_Key            the one we hold (IBA 10.9.3) (drop_pkey)
//   the frame            opcode known, ICRC (Engine::accept_roce)
//   then                 COMM_EST on a connected QP's first request since
//                        RTR, and the responder or the completer
//
// The Q_Key (UD/GSI) and everything about the message itself are the
// responder's and the completer's.  [engine] everything here.
#include <rte_mbuf.h>

#include <bit>
#include <cstring>
#include <optional>

#include "lib/util/stamps.hpp"
#include "lib/wire/bth.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"
#include "transport/engine.hpp"
#include "transport/rnic/completer.hpp"
#include "transport/rnic/qp.hpp"
#include "transport/rnic/responder.hpp"
#include "transport/rnic/rnic.hpp"

namespace uroce::rnic {
namespace {

constexpr uint16_t kPkeyBaseMask = 0x7FFF;    // the match ignores the membership bit (10.9.3)

// A connected QP takes packets only from its path, as rxe's check_addr
// does: the source address (on RoCEv2 the GRH's SGID is the IP source,
// IBA A17.4) is the path's destination, and the destination is our GID
// the path starts from.  nullopt: it comes from the path; else why not.
std::optional<RnicCtr> off_path(const Qp& qp, const uint8_t* frame, const wire::PktInfo& pi) noexcept {
  const AhAttr& path = qp.attrs().path;
  if (wire::src_gid(frame, pi) != path.dgid) return RnicCtr::drop_src_addr;
  if (wire::dst_gid(frame, pi) != path.sgid) return RnicCtr::drop_dst_addr;
  return std::nullopt;
}

bool our_pkey(const uint8_t* frame, const wire::PktInfo& pi) noexcept {
  return (wire::BthC(frame + pi.bth_off).pkey().value() & kPkeyBaseMask) == (kDefaultPkey.value() & kPkeyBaseMask);
}

}  // namespace

void Rnic::rx_burst(transport::Engine& engine, transport::RoceRx* pkts, uint16_t n) {
  UROCE_ASSERT_ENGINE(engine);
  UROCE_STAMP(Classified);
  for (uint16_t i = 0; i < n; ++i) {
    transport::RoceRx& pkt = pkts[i];
    const uint8_t* frame = rte_pktmbuf_mtod(pkt.m, const uint8_t*);
    const uint32_t qpn = pkt.info.dest_qp.value();
    if (qpn == kMulticastQpn) {
      mcast_rx(engine, pkt);
      continue;
    }
    Qp* qp = qpn < qp_table_.size() ? qp_table_[qpn] : nullptr;
    if (qp == nullptr) {
      engine.drop(pkt.m, transport::EngineCtr::drop_unknown_qpn);
      continue;
    }
    if (&qp->engine() != &engine) {  // another lcore's QP: its loop checks and runs it
      hand_off(engine, qp->engine(), pkt.m);
      continue;
    }
    // Requests (and everything for a UD/GSI QP) go to the responder;
    // responses to the completer.  (An opcode we do not know is refused by
    // accept_roce below; until then its table entry is all false.)
    // A CNP (A17.9.3) goes to the QP that sends toward its source, in any
    // state past INIT (a QP before RTR sends nothing to slow down); then it
    // takes the same path, P_Key and ICRC checks as every packet (a CNP
    // from elsewhere would let any host slow any QP down).
    const bool cnp = pkt.info.opcode == wire::kCnpOpcode;
    const bool to_responder = pkt.info.op().request || qp->type() == IBV_QPT_UD || qp->is_gsi();
    const ibv_qp_state st = qp->state();
    const StateCaps caps = state_caps(st);
    const bool takes = cnp ? st != IBV_QPS_RESET && st != IBV_QPS_INIT
                           : (to_responder ? caps.takes_requests : caps.takes_responses);
    if (!takes) {
      ctr_.inc(RnicCtr::drop_qp_state);
      rte_pktmbuf_free(pkt.m);
      continue;
    }
    const bool connected = qp->connected();
    if (connected) {
      if (const auto why = off_path(*qp, frame, pkt.info)) {
        ctr_.inc(*why);
        rte_pktmbuf_free(pkt.m);
        continue;
      }
    }
    if (!our_pkey(frame, pkt.info)) {
      ctr_.inc(RnicCtr::drop_pkey);
      rte_pktmbuf_free(pkt.m);
      continue;
    }
    if (!engine.accept_roce(pkt)) continue;
    if (cnp) {
      cc_cnp_received(engine, *qp, pkt);
      continue;
    }
    if (wire::ecn(frame, pkt.info) == wire::Ecn::Ce) cc_ce_received(engine, *qp, frame, pkt.info);
    if (connected && !qp->comm_est && to_responder) comm_est(*qp);
    if (to_responder) {
      ctr_.inc(RnicCtr::rx_req_pkts);
      responder_rx(engine, *qp, pkt);
    } else {
      ctr_.inc(RnicCtr::rx_resp_pkts);
      completer_rx(engine, *qp, pkt);
    }
  }
}

// IBA 11.6.3.1 (communication established): the first request a
// connected QP receives since it went to RTR.  The application hears of
// it (ibv_get_async_event) only while the QP is still in RTR, as from
// hardware (qib, mlx5); a QP its owner already moved to RTS — rdma_cm's
// passive side does, before its REP — raises nothing.  The connection
// manager hears of it in either state (set_comm_est_hook) and takes it for
// the RTU that may still be on its way (IBA 12.9.6).
//
// The CM is lcore 0's: a QP of another lcore tells it through a queue of
// QPNs and a doorbell of lcore 0 (comm_est_q_), and lcore 0 looks the QP
// up again (it may have gone meanwhile).
void Rnic::comm_est(Qp& qp) noexcept {
  UROCE_ASSERT_ENGINE(qp.engine());
  qp.comm_est = true;
  if (qp.state() == IBV_QPS_RTR) {
    AsyncEvent ev;
    ev.type = IBV_EVENT_COMM_EST;
    ev.qp = &qp;
    raise(ev);
  }
  if (!comm_est_hook_) return;
  if (&qp.engine() == &engine_) {
    comm_est_hook_(qp);
    return;
  }
  if (!comm_est_q_.push(qp.qpn().value())) return;  // full: the CM's timers still see the RTU's loss
  engine_.ring({[](transport::Engine&, void* rnic) { static_cast<Rnic*>(rnic)->drain_comm_est(); }, this});
}

void Rnic::drain_comm_est() noexcept {
  UROCE_ASSERT_ENGINE(engine_);
  uint32_t qpn = 0;
  while (comm_est_q_.pop(qpn)) {
    Qp* qp = qpn < qp_table_.size() ? qp_table_[qpn] : nullptr;
    if (qp != nullptr && comm_est_hook_) comm_est_hook_(*qp);
  }
}

void Rnic::hand_off(transport::Engine& from, transport::Engine& to, rte_mbuf* m) noexcept {
  if (lcores_->hand_off(to.lcore(), m)) {
    from.counters_mut().inc(transport::EngineCtr::lane_handoffs);
  } else {
    from.drop(m, transport::EngineCtr::drop_lane_full);
  }
}

// A packet to the multicast QPN: one copy to every QP attached to the
// group named by its destination IP (rxe_rcv_mcast_pkt does the same).
// The copies share the mbuf (one reference each); each QP's responder
// checks its Q_Key and consumes its own receive WQE, so the completion has
// src_qp and the GRH as for unicast.
void Rnic::mcast_rx(transport::Engine& engine, transport::RoceRx& pkt) noexcept {
  UROCE_ASSERT_ENGINE(engine);
  if (!pkt.handed) ctr_.inc(RnicCtr::rx_mcast_pkts);
  const uint8_t* f = rte_pktmbuf_mtod(pkt.m, const uint8_t*);
  const wire::Ipv6Addr mgid = wire::dst_gid(f, pkt.info);
  const McastGroup* g = mcast_.find(mgid);
  if (g == nullptr) {
    ctr_.inc(RnicCtr::drop_mcast_no_group);
    rte_pktmbuf_free(pkt.m);
    return;
  }
  if (!our_pkey(f, pkt.info)) {
    ctr_.inc(RnicCtr::drop_pkey);
    rte_pktmbuf_free(pkt.m);
    return;
  }
  if (!engine.accept_roce(pkt)) return;
  const wire::OpcodeInfo& op = pkt.info.op();
  if (op.transport != wire::Transport::UD || !op.request) {  // only UD is multicast (IBA 10.5)
    ctr_.inc(RnicCtr::drop_mcast_not_ud);
    rte_pktmbuf_free(pkt.m);
    return;
  }
  // A message this device sent to a group it is in loops back to it (IBA
  // 10.5: every member gets a copy); the sending QP itself does not when it
  // was created with IBV_QP_CREATE_BLOCK_SELF_MCAST_LB.
  const transport::IpAddr src{wire::src_gid(f, pkt.info)};
  const bool ours = engine.config().local.owns(src);
  const uint32_t src_qp = wire::DethC(f + pkt.info.ext_off(wire::kHdrDeth)).src_qp().value();
  auto blocked = [&](const Qp* qp) { return ours && qp->block_self_mcast_lb && qp->qpn().value() == src_qp; };
  // Only QPs that take requests now get a copy.  With several lcores
  // (transport/lcores.hpp) each lcore delivers to its own members; the
  // lcore that received the frame from the wire or its loopback hands one
  // copy to every other lcore with a member, and those deliver only theirs.
  uint16_t takers = 0;
  bool any_blocked = false;
  uint32_t lanes = 0;  // other lcores to hand a copy to (bit per lcore)
  for (Qp* qp : g->qps) {
    const bool mine = &qp->engine() == &engine;
    if (!mine) {
      if (!pkt.handed) lanes |= 1u << qp->engine().lcore();
      continue;
    }
    if (!state_caps(qp->state()).takes_requests) continue;
    if (blocked(qp)) {
      any_blocked = true;
      continue;
    }
    ++takers;
  }
  if (any_blocked) ctr_.inc(RnicCtr::mcast_self_blocked);
  const auto copies = static_cast<uint16_t>(takers + std::popcount(lanes));
  if (copies == 0) {
    if (!any_blocked && !pkt.handed) ctr_.inc(RnicCtr::drop_qp_state);
    rte_pktmbuf_free(pkt.m);
    return;
  }
  if (copies > 1) rte_mbuf_refcnt_update(pkt.m, static_cast<int16_t>(copies - 1));
  for (unsigned l = 0; lanes != 0; ++l, lanes >>= 1)
    if (lanes & 1u) hand_off(engine, lcores_->engine(l), pkt.m);
  for (Qp* qp : g->qps) {
    if (&qp->engine() != &engine || !state_caps(qp->state()).takes_requests || blocked(qp)) continue;
    ctr_.inc(RnicCtr::rx_mcast_copies);
    responder_rx(engine, *qp, pkt);  // frees its reference
  }
}

}  // namespace uroce::rnic
