// The rdma_cm id's state machine: which input each state takes and where
// it leads, as one table, and the driver (RdmaCm::step) every change of
// an id's state goes through.  The states follow Linux's rdma_cm
// (enum rdma_cm_state) where they overlap; the inputs are the consumer's
// calls and the events reported (rdma_cm.hpp).
#include <array>
#include <cstdint>

#include "cm/rdma_cm.hpp"
#include "cm/rdma_cm_internal.hpp"

namespace uroce::cm {

namespace {

using S = RdmaIdState;
using In = RdmaIdInput;

constexpr std::array<std::string_view, static_cast<size_t>(S::kCount)> kStateNames = {
    "Idle", "AddrBound", "AddrQuery", "AddrResolved", "RouteResolved", "Connect", "Listen",
    "ConnectRequest", "Accepting", "Connected", "Disconnected", "Failed"};

constexpr std::array<std::string_view, static_cast<size_t>(In::kCount)> kInputNames = {
    "bind", "set_addr_option", "resolve_addr", "resolve_route", "route_error", "listen",
    "join_multicast", "connect", "connect_ud", "accept", "accept_ud", "reject", "establish",
    "disconnect", "ADDR_RESOLVED", "ADDR_ERROR", "CONNECT_REQUEST", "CONNECT_RESPONSE", "ESTABLISHED",
    "REJECTED", "CONNECT_ERROR", "UNREACHABLE", "DISCONNECTED"};

constexpr uint16_t bit(S s) { return static_cast<uint16_t>(1u << static_cast<unsigned>(s)); }
template <class... Ss>
constexpr uint16_t from(Ss... ss) {
  return static_cast<uint16_t>((bit(ss) | ...));
}

// One row per input: the states that take it, and the state it leads to
// (kStay: the id keeps its state).
struct Row {
  uint16_t from;
  S to;
  bool stay = false;
};
constexpr S kStay = S::kCount;

constexpr Row row(uint16_t f, S to) { return to == kStay ? Row{f, S::Idle, true} : Row{f, to, false}; }

constexpr std::array<Row, static_cast<size_t>(In::kCount)> kTable = [] {
  std::array<Row, static_cast<size_t>(In::kCount)> t{};
  auto set = [&](In in, Row r) { t[static_cast<size_t>(in)] = r; };
  // The consumer's calls.
  set(In::Bind, row(from(S::Idle), S::AddrBound));
  set(In::SetAddrOption, row(from(S::Idle), kStay));
  set(In::ResolveAddr, row(from(S::AddrBound, S::AddrResolved, S::RouteResolved), S::AddrQuery));
  set(In::ResolveRoute, row(from(S::AddrResolved, S::RouteResolved), S::RouteResolved));
  set(In::RouteError, row(from(S::AddrResolved, S::RouteResolved), kStay));
  set(In::Listen, row(from(S::AddrBound, S::Listen), S::Listen));
  set(In::JoinMulticast, row(from(S::AddrBound, S::AddrResolved), kStay));
  set(In::Connect, row(from(S::RouteResolved), S::Connect));
  // UD needs no route: SIDR goes to the resolved address.
  set(In::ConnectUd, row(from(S::AddrResolved, S::RouteResolved), S::Connect));
  set(In::Accept, row(from(S::ConnectRequest), S::Accepting));
  set(In::AcceptUd, row(from(S::ConnectRequest), S::Connected));
  set(In::Reject, row(from(S::ConnectRequest), S::Failed));
  set(In::Establish, row(from(S::Connect), S::Connected));
  // DREQ (or DREP, or a REJ before the REP) leaves; DISCONNECTED moves it.
  set(In::Disconnect, row(from(S::Connect, S::Accepting, S::Connected, S::Disconnected), kStay));
  // What is reported.
  set(In::AddrResolved, row(from(S::AddrQuery), S::AddrResolved));
  set(In::AddrError, row(from(S::AddrQuery), S::AddrBound));
  set(In::ConnectRequest, row(from(S::Idle), S::ConnectRequest));
  set(In::ConnectResponse, row(from(S::Connect), kStay));
  set(In::Established, row(from(S::Connect, S::Accepting), S::Connected));
  set(In::Rejected, row(from(S::Connect, S::ConnectRequest, S::Accepting, S::Connected), S::Failed));
  set(In::ConnectError, row(from(S::Connect, S::ConnectRequest), S::Failed));
  set(In::Unreachable, row(from(S::Connect, S::Accepting), S::Failed));
  set(In::Disconnected, row(from(S::Connect, S::Accepting, S::Connected), S::Disconnected));
  return t;
}();

// Every input is taken somewhere.
static_assert([] {
  for (const Row& r : kTable)
    if (r.from == 0) return false;
  return true;
}());

}  // namespace

std::string_view rdma_id_state_name(RdmaIdState s) noexcept { return kStateNames[static_cast<size_t>(s)]; }
std::string_view rdma_id_input_name(RdmaIdInput in) noexcept { return kInputNames[static_cast<size_t>(in)]; }

bool rdma_id_allows(RdmaIdState s, RdmaIdInput in) noexcept {
  return (kTable[static_cast<size_t>(in)].from & bit(s)) != 0;
}

RdmaIdState rdma_id_next(RdmaIdState s, RdmaIdInput in) noexcept {
  const Row& r = kTable[static_cast<size_t>(in)];
  return r.stay ? s : r.to;
}

bool RdmaCm::step(RdmaId& id, RdmaIdInput in) {
  const RdmaIdState was = id.state;
  if (!rdma_id_allows(was, in)) {
    if (trace_on(TraceCat::Conn))
      trace_emit(TraceCat::Conn, "rdma_cm id %p: %.*s refused in %.*s", static_cast<const void*>(&id),
                 static_cast<int>(rdma_id_input_name(in).size()), rdma_id_input_name(in).data(),
                 static_cast<int>(rdma_id_state_name(was).size()), rdma_id_state_name(was).data());
    return false;
  }
  id.state = rdma_id_next(was, in);
  if (trace_on(TraceCat::Conn))
    trace_emit(TraceCat::Conn, "rdma_cm id %p: %.*s --%.*s--> %.*s", static_cast<const void*>(&id),
               static_cast<int>(rdma_id_state_name(was).size()), rdma_id_state_name(was).data(),
               static_cast<int>(rdma_id_input_name(in).size()), rdma_id_input_name(in).data(),
               static_cast<int>(rdma_id_state_name(id.state).size()), rdma_id_state_name(id.state).data());
  return true;
}

}  // namespace uroce::cm
