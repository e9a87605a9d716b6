// The receive side of a QP, engine only (responder.cpp): request packets in
// PSN order into memory, receive CQEs, ACK/NAK/READ responses/atomic ACKs
// out.  IBA 9.7.5 (responder), 9.7.4.1 (PSN checks), 9.9 (UD), 9.8 (UC).
#pragma once

#include <cstdint>
#include <vector>

#include "lib/wire/types.hpp"

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
  uint32_t rkey = 0;
  bool valid = false;
};

struct RespState {
  Psn epsn{};                      // next expected PSN (rq_psn at RTR)
  Msn msn{};                       // messages completed (in the AETH)
  bool nak_sent = false;           // one PSN-sequence NAK per gap (C9-114)
  bool in_message = false;         // a multi-packet SEND/WRITE is under way
  // SEND in progress: the receive WQE being filled.
  uint64_t recv_offset = 0;
  // WRITE in progress: the target memory.
  uint8_t* write_ptr = nullptr;
  uint64_t write_resid = 0;
  // UC: a gap drops the rest of the message until the next FIRST/ONLY.
  bool uc_drop = false;
  std::vector<RdAtomicResult> results;  // ring of max_dest_rd_atomic
  uint32_t results_next = 0;
};

// [engine] A request packet (RC/UC/UD, GSI included) for this QP.  Consumes
// the mbuf.
void responder_rx(transport::Engine& engine, Qp& qp, transport::RoceRx& pkt) noexcept;
// Reset the responder (RESET/INIT; epsn from rq_psn at INIT->RTR).
void responder_reset(Qp& qp) noexcept;

}  // namespace uroce::rnic
