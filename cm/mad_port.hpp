// The CM's one dependency on the transport below it: a way to send a
// 256-byte MAD to a peer's GSI QP.  On the wire that is a UD SEND to QP 1
// with Q_Key 0x80010000 and P_Key 0xFFFF (IBA 13.4.6.1, 13.5.1); the GSI
// binding (transport/rnic's QP 1) builds the AH from `MadAddr::gid`.
// Received MADs go the other way through `Cm::on_mad`.
//
// Tests wire two CMs back to back with an in-memory port
// (tests/cm/loop_port.hpp) that can drop or duplicate chosen MADs.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "lib/wire/types.hpp"

namespace uroce::cm {

// Where a MAD goes or came from: the peer port's GID (IPv4-mapped for
// RoCEv2 over IPv4) and its GSI QP.
struct MadAddr {
  std::array<uint8_t, 16> gid{};
  Qpn qpn = kQp1;
  Qkey qkey = kGsiQkey;
  Pkey pkey = kDefaultPkey;
  friend bool operator==(const MadAddr&, const MadAddr&) = default;
};

class MadPort {
 public:
  virtual ~MadPort() = default;
  // Queue one MAD for sending; false when it could not be (counted by the
  // CM; its retransmission timer covers the loss).  Must not call back into
  // the CM synchronously.
  virtual bool send(const MadAddr& to, std::span<const uint8_t> mad) = 0;
};

}  // namespace uroce::cm
