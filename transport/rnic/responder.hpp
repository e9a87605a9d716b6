// The receive side of a QP, engine only (responder.cpp): request packets in
// PSN order into memory, receive CQEs, ACK/NAK/READ responses/atomic ACKs
// out.  IBA 9.7.5 (responder), 9.7.4.1 (PSN checks), 9.9 (UD), 9.8 (UC).
#pragma once

#include <cstdint>
#include <vector>

#include "lib/util/timer_wheel.hpp"
#include "lib/wire/pkt.hpp"
#include "lib/wire/types.hpp"
#include "transport/rnic/objects.hpp"

struct rte_mbuf;

namespace uroce::transport {
class Engine;
struct RoceRx;
}  // namespace uroce::transport

namespace uroce::rnic {

class Qp;
class Mr;

// One executed READ or atomic, kept for duplicate requests (IBA 9.7.5.1.4):
// a duplicate READ is executed again; a duplicate atomic is answered from
// here, never re-executed.  Sized max_dest_rd_atomic.
struct RdAtomicResult {
  Psn psn{};             // first PSN of the request
  Psn last_psn{};        // last PSN of its response
  bool atomic = false;
  uint64_t atomic_orig = 0;
  uint64_t va = 0;       // READ: the request's address, length, rkey
  uint32_t len = 0;
  Rkey rkey{};
  bool valid = false;
};

struct RespState {
  Psn epsn{};                      // next expected PSN (rq_psn at RTR)
  Msn msn{};                       // messages completed (in the AETH)
  bool nak_sent = false;           // one PSN-sequence NAK per gap (C9-114)
  bool in_message = false;         // a multi-packet SEND/WRITE is under way
  // SEND in progress: the receive WQE being filled.
  uint64_t recv_offset = 0;
  // WRITE in progress: where the next packet goes.  The R_Key is looked up
  // again for every packet (the MR may be deregistered or re-registered
  // mid-message: then the rest fails, IBA 9.7.5.1.3), never a pointer kept
  // from the first packet.
  Rkey write_rkey{};
  uint64_t write_va = 0;
  uint32_t write_epoch = 0;        // the MR's epoch at the message's first packet
  uint64_t write_resid = 0;
  // UC: a gap drops the rest of the message until the next FIRST/ONLY.
  bool uc_drop = false;
  std::vector<RdAtomicResult> results;  // ring of max_dest_rd_atomic
  uint32_t results_next = 0;
  // responder.cpp's own:
  Psn ack_psn{};                   // one past the last SEND/WRITE/atomic executed (a duplicate is re-ACKed at ack_psn-1)
  // The requester offers selective repeat and this end keeps (reorder
  // ring): its ACKs, READ responses and atomic ACKs say so with
  // wire::kResv7Selective, so that it may spray (DESIGN.md "Spraying").
  bool peer_offers_sr = false;
  // The last ACK this QP queued, while it is the QP's newest response:
  // an ACK that follows it before the engine flushes replaces its PSN and
  // MSN in place (coalescing, IBA 9.7.5.1.1: an ACK acknowledges every
  // request up to its PSN).  Cleared by every other response (a NAK, a
  // READ response, an atomic ACK must not be overtaken by a later ACK).
  rte_mbuf* last_ack = nullptr;    // checked with Engine::waiting before any use
  uint64_t last_ack_gen = 0;
  uint8_t msg_opcode = 0;          // the last opcode of the message under way (valid while in_message)
  uint32_t write_len = 0;          // the RETH DMA length of the WRITE under way (WRITE_WITH_IMM's byte_len)
  // SRQ: the receive WQE taken for the message under way (an SRQ is shared,
  // so its WQE is popped at FIRST and kept here until the message ends).
  bool have_srq_wqe = false;
  RecvWqe srq_wqe{};                // its sge: srq_sges
  std::vector<ibv_sge> srq_sges;    // the SRQ's max_sge (Qp::Qp; XRC: the device's); the SRQ slot is reused once popped
  // XRC receive QP (annex A14): the SRQ the message under way named in its
  // first packet's XRCETH (every later packet must name it too), and the
  // one the held WQE came from (its CQ gets that WQE's completion).  Both
  // are dropped when their SRQ is destroyed (responder_forget_srq).
  Srq* msg_srq = nullptr;
  Srq* wqe_srq = nullptr;
  // A READ response being streamed, params::kRespBudget packets per engine
  // iteration (a long READ must not flood the port's TX ring or the
  // peer's RX ring).  Requests arriving meanwhile wait in `backlog`, in
  // order, so that nothing overtakes the response (IBA 9.7.5.1.6).
  struct ReadStream {
    bool active = false;
    bool first = false;       // the next packet starts the response (FIRST/ONLY)
    Rkey rkey{};              // re-checked every burst: the MR may go meanwhile
    uint32_t epoch = 0;       // ... or be re-registered (Mr::epoch)
    const Pd* pd = nullptr;   // the PD it is checked against (XRC: the SRQ's)
    uint64_t va = 0;          // next byte to send
    uint32_t resid = 0;       // bytes left
    uint32_t pkts_left = 0;   // packets left (1 for a zero-length READ)
    Psn psn{};                // PSN of the next packet
  } stream;
  Timer kick{};               // continues the stream on the next iteration
  struct Deferred {
    rte_mbuf* m = nullptr;
    wire::PktInfo info;
  };
  std::vector<Deferred> backlog;  // ring of params::kRespBacklog
  uint32_t backlog_head = 0;
  uint32_t backlog_count = 0;
  // Selective repeat (reorder.cpp): requests that came after a gap from a
  // requester that offers it, kept until the gap fills.  `ring` is indexed
  // by PSN modulo its size (params::kSrHoldPsns; empty when the device
  // does not offer selective repeat); a kept PSN lies in [epsn, hi).
  struct Reorder {
    std::vector<rte_mbuf*> ring;
    uint32_t held = 0;
    Psn hi{};        // one past the highest PSN kept (while held > 0)
    Psn nak_hi{};    // the gaps below this were NAKed selectively
    Psn seen{};      // epsn when packets were last kept or carried out
    uint32_t since_nak = 0;  // packets kept since the last NAK for the first gap
    bool sprayed = false;    // the requester sprays (wire::kResv7Sprayed): gaps wait (reorder.cpp)
  } reorder;
};


// [engine] A request packet (RC/UC/UD, GSI included) for this QP.  Consumes
// the mbuf.
void responder_rx(transport::Engine& engine, Qp& qp, transport::RoceRx& pkt) noexcept;
// Reset the responder (RESET/INIT; epsn from rq_psn at INIT->RTR).
void responder_reset(Qp& qp) noexcept;
// [engine] Drop the requests kept after a gap (reorder.cpp), if any: the
// QP is reset, failed or destroyed.
void reorder_clear(Qp& qp) noexcept;
// [engine] The QP went to ERR: complete the SRQ receive WQE the responder
// holds for a message under way (if any) with IBV_WC_WR_FLUSH_ERR.
// Qp::to_error calls it before flushing the RQ.
void responder_flush(Qp& qp) noexcept;
// [engine] The QP is being destroyed: cancel the responder's timer and
// free the requests it holds.  Rnic::destroy_qp calls it.
void responder_stop(Qp& qp, transport::Engine& engine) noexcept;
// [engine] The SRQ `srq` is being destroyed: an XRC receive QP drops the
// message under way that named it and the WQE it holds from it (a later
// packet of that message is then out of sequence).
void responder_forget_srq(Qp& qp, const Srq* srq) noexcept;
// Bind the responder's timer to `qp` (once, when the QP is made).
void responder_bind(Qp& qp) noexcept;

}  // namespace uroce::rnic
