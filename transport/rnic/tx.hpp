// Building and sending the transport's packets (requester, responder and
// completer share it): headers straight into the mbuf, the payload gathered
// in place, ICRC, then the engine's neighbour-resolving send.  No
// allocation beyond the mbuf.
#pragma once

#include <rte_mbuf.h>

#include <cstdint>
#include <cstring>

#include "lib/util/stamps.hpp"
#include "lib/wire/build.hpp"
#include "transport/engine.hpp"
#include "transport/rnic/objects.hpp"

namespace uroce::rnic {

// The path part of `d` — L3 family and addresses, traffic class, hop limit,
// flow label, VLAN tags, source MAC, UDP source port, P_Key — from `path`.
// The destination MAC is filled in by neighbour resolution.
void tx_fill_path(const transport::Engine& engine, const AhAttr& path, uint16_t sport, wire::PktDesc& d) noexcept;

// What became of a frame handed to tx_frame.
enum class TxResult : uint8_t {
  Sent,       // queued for the port, or waiting for its neighbour to resolve
  TooLong,    // the frame would not fit a buffer (freed)
  NoNeighbour,  // the destination did not resolve lately, or the table is full (freed; the engine's neighbour stats count it)
  CopyFault,  // the payload could not be read (the copy returned false; freed, nothing sent)
};

// Hand a finished frame to the engine: towards `path.dgid`'s neighbour, or
// for a multicast GID straight to the group's MAC (mcast.hpp: no
// neighbour resolution).  False as Engine::send_to.
// `kind`: what the frame is (transport::tx_kind of its opcode).
bool tx_out(transport::Engine& engine, const AhAttr& path, rte_mbuf* m,
            transport::TxKind kind = transport::TxKind::Other) noexcept;

// Write headers for `payload_len` bytes into `m` (taken from
// engine.alloc(), consumed here), let `copy(uint8_t* dst)` write the
// payload (false when it cannot: the frame is then dropped unsent), finish
// (pad, ICRC) and send towards `path.dgid`: what became of it, so that a
// sender can tell "sent, or lost on the way" apart, and why (the requester
// counts each reason).
template <class CopyFn>
TxResult tx_frame(transport::Engine& engine, rte_mbuf* m, const AhAttr& path, const wire::PktDesc& d,
                  size_t payload_len, CopyFn&& copy) noexcept {
  if (wire::frame_len(d, payload_len) > rte_pktmbuf_tailroom(m)) {
    rte_pktmbuf_free(m);
    return TxResult::TooLong;
  }
  uint8_t* frame = rte_pktmbuf_mtod(m, uint8_t*);
  const size_t hl = wire::write_headers(frame, d, payload_len);
  if (!copy(frame + hl)) {
    rte_pktmbuf_free(m);
    return TxResult::CopyFault;
  }
  UROCE_STAMP(Built);
  transport::Engine::set_frame_len(m, wire::finish(frame, d, payload_len));
  UROCE_STAMP(Sealed);
  return tx_out(engine, path, m, transport::tx_kind(d.opcode)) ? TxResult::Sent : TxResult::NoNeighbour;
}

// A frame with no payload (an ACK, a NAK, an atomic ACK's headers only):
// false when no buffer (the engine counts drop_no_mbuf) or it was lost on
// the way.
inline bool tx_send(transport::Engine& engine, const AhAttr& path, const wire::PktDesc& d) noexcept {
  rte_mbuf* m = engine.alloc();
  if (m == nullptr) return false;
  return tx_frame(engine, m, path, d, 0, [](uint8_t*) { return true; }) == TxResult::Sent;
}

}  // namespace uroce::rnic
