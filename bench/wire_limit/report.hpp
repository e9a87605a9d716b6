// What each mode prints: one JSON object (--json; scripts/bench-wire-limit
// reads it) or a few lines of text.  Printed and flushed before the port
// closes, so a crash in teardown loses nothing.
#pragma once

#include <optional>

#include "bench/wire_limit/endpoint.hpp"
#include "bench/wire_limit/options.hpp"
#include "bench/wire_limit/runs.hpp"

namespace uroce::bench::wire_limit {

struct RunContext {
  const Options& options;
  const Endpoint& endpoint;
  PortStats port;
  std::optional<RelayStats> relay;  // --relay
};

void report(const RunContext& ctx, const PingResult& r);
void report(const RunContext& ctx, const TxResult& r);
void report(const RunContext& ctx, const ResponderResult& r);

}  // namespace uroce::bench::wire_limit
