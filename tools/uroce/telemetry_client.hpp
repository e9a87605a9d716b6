// A client of DPDK's telemetry socket (v2), to read the counters of
// running uroce processes (transport/telemetry.hpp serves them).
//
// Protocol (DPDK 22.11, lib/telemetry): a SOCK_SEQPACKET Unix socket at
// <runtime dir>/dpdk_telemetry.v2; on connect the server sends a greeting
// {"version": ..., "pid": ..., "max_output_len": ...}; each message sent is
// one command, "/uroce/stats,uroce0", and each reply is one JSON object
// {"/uroce/stats": <value>} (null when the command failed).  Replies keep
// the order the process sent (ordered_json): counters in declaration order.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "lib/util/result.hpp"

namespace uroce::tools {

inline constexpr std::string_view kTelemetrySocketName = "dpdk_telemetry.v2";
inline constexpr std::string_view kUroceRuntimePrefix = "uroce-";

// Where the EAL puts runtime directories for this user (as eal.cpp does):
// /var/run/dpdk for root, else $XDG_RUNTIME_DIR/dpdk, else /tmp/dpdk.
std::string dpdk_runtime_base();

struct TelemetryTarget {
  int pid = 0;
  std::string socket;  // <base>/uroce-<pid>/dpdk_telemetry.v2
};

// Every uroce-<pid> runtime directory under `base` that holds a telemetry
// socket, by pid.
std::vector<TelemetryTarget> find_uroce_processes(const std::string& base);
// `pid`'s socket under `base` (whether or not it exists), or with pid 0
// every process find_uroce_processes finds.
std::vector<TelemetryTarget> telemetry_targets(int pid, const std::string& base);

// One in-process uroce's QPs (its /uroce/devices, then /uroce/qps of
// each device a page at a time), shaped as `uroce qp`'s clients:
// [{"pid": ..., "program": ..., "device": ..., "in_process": true, "qps": [...]}, ...]
Result<nlohmann::json, std::string> process_qps(const TelemetryTarget& t);

class TelemetryClient {
 public:
  static Result<TelemetryClient, std::string> connect(const std::string& socket_path);
  TelemetryClient(TelemetryClient&& o) noexcept : fd_(o.fd_), max_output_(o.max_output_) { o.fd_ = -1; }
  TelemetryClient& operator=(TelemetryClient&&) = delete;
  TelemetryClient(const TelemetryClient&) = delete;
  ~TelemetryClient();

  // The value the command returned ("/uroce/stats,uroce0" -> the dict);
  // an error when the command failed, the reply was not JSON, or the
  // process did not answer.
  Result<nlohmann::ordered_json, std::string> query(const std::string& command);

 private:
  explicit TelemetryClient(int fd) : fd_(fd) {}
  Result<std::string, std::string> receive();

  int fd_ = -1;
  size_t max_output_ = 0;
};

}  // namespace uroce::tools
