// What cm.cpp (ids, sending, events, the state machine's handlers and
// transitions) and cm_calls.cpp (the receive path, consumer calls, QP
// attributes) share: one step's input, and the MAD helpers.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <variant>

#include "cm/cm.hpp"
#include "lib/wire/mad.hpp"

namespace uroce::cm {

// What drives one step: the input, and its arguments.
struct Cm::Input {
  CmInput kind;
  const MadAddr* from = nullptr;  // Recv*
  const uint8_t* mad = nullptr;   // Recv*: the whole 256-byte MAD
  CmId* listener = nullptr;       // RecvReq / RecvSidrReq on a new id
  // Connect, Accept, SidrResolve, SidrReply: the consumer's parameters.
  std::variant<std::monostate, const ConnectParams*, const AcceptParams*, const SidrParams*,
               const SidrReplyParams*>
      params;
  std::span<const uint8_t> pdata;
  std::span<const uint8_t> ari;
  RejReason reason = RejReason::ConsumerReject;
  uint8_t service_timeout = 0;
  uint64_t service_id = 0;        // Listen
  uint64_t service_mask = 0;
  int rc = 0;                     // consumer calls: the result
};

namespace detail {

template <size_t N>
void copy_in(std::array<uint8_t, N>& dst, std::span<const uint8_t> src) noexcept {
  const size_t n = std::min(N, src.size());
  if (n != 0) std::memcpy(dst.data(), src.data(), n);
}

template <size_t N>
void set_event_pdata(CmEvent& ev, const std::array<uint8_t, N>& pd) noexcept {
  static_assert(N <= sizeof(ev.pdata));
  std::memcpy(ev.pdata.data(), pd.data(), N);
  ev.pdata_len = static_cast<uint8_t>(N);
}

inline uint64_t tid_of(const uint8_t* mad) noexcept { return wire::MadHdrC(mad).tid(); }
inline const uint8_t* body_of(const uint8_t* mad) noexcept { return mad + kMadHdrSize; }

}  // namespace detail
}  // namespace uroce::cm
