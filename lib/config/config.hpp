// uroce's configuration: one TOML file plus environment overrides
// (DESIGN.md, "Configuration").  Loading returns a complete, validated
// Config or the first error; nothing starts half-configured.
//
// The file (UROCE_CONFIG, else /etc/uroce.toml; a missing default file is
// no error, a missing UROCE_CONFIG file is):
//
//   progress = "thread"            # or "inline"
//   log = "warning"                # "error", "warning", "info", "debug"
//   pcap = "/tmp/uroce.pcap"       # default capture path of every device
//   [eal]
//   core = 2                       # lcore of the engine thread
//   memory_mb = 512
//   extra = ["--log-level=lib.eal:debug"]
//   hugepages = "auto"             # "auto", "yes", "no"
//   telemetry = true              # `uroce stats` reads the counters; false: --no-telemetry
//   [[device]]
//   name = "uroce0"                # default: the lowest unused "uroceN"
//   kind = "dpdk"                  # or "sim" (in-memory wire, no devargs)
//   devargs = "net_af_packet0,iface=veth0"
//   addresses = ["10.0.0.1/24", "fd00::1/64"]
//   mac = "02:00:00:00:00:01"      # default: the port's
//   mtu = 1500                     # IP MTU, 256..9000; default: the port's
//   vlan = 10                      # 0..4094
//   gids = ["fe80::1", "10.0.0.1"] # explicit GID table entries
//   pcap = "/tmp/uroce0.pcap"      # overrides the global pcap
//   faults = "drop=0.01"           # fault spec, parsed by the sim wire
//   loss_recovery = "selective"    # or "go-back-n" (the default): DESIGN.md "Loss recovery"
//   spray_ports = 8                # 1..64 (1, the default: no spraying): DESIGN.md "Spraying"
//   engine_lcores = 2              # 1..8 engine threads (1, the default): DESIGN.md "More than one engine core"
//   ecn = true                     # data packets ECN-capable (ECT(0)); the default
//   cc = "dcqcn"                   # "delay" or "none": DESIGN.md "Congestion control"
//   repath = true                  # a congested QP moves to another UDP source port when idle
//   repath_rounds = 3
//   [device.dcqcn]                 # ConnectX's parameters, its defaults (cc.hpp)
//   rpg_time_reset_us = 300
//
// The environment then overrides, in this order (an empty value counts as
// unset):
//   UROCE_DEVICE    devargs of the first device (kind becomes "dpdk"); with
//                   no device in the file it creates one
//   UROCE_IP        comma-separated address/prefix list that REPLACES the
//                   first device's `addresses`
//   UROCE_MAC, UROCE_MTU, UROCE_FAULTS   the first device's mac, mtu, faults
//   UROCE_ENGINE_LCORES                  the first device's engine_lcores
//   UROCE_LOSS_RECOVERY                  the first device's loss_recovery
//   UROCE_ECN ("on"/"off"), UROCE_CC     the first device's ecn and cc
//   UROCE_PCAP      the global pcap; it also clears every device's own pcap,
//                   so the capture goes where the environment says
//   UROCE_PROGRESS, UROCE_LOG            the global progress and log
// The per-device variables need a device (from the file or UROCE_DEVICE).
//
// Errors read "<file>:<line>:<column>: <key>: <reason>", the key a dotted
// path such as device[1].addresses[0]; "<VARIABLE>: <reason>" for the
// environment.  Unknown keys are errors (with a suggestion when a known
// key is at most two edits away).  Only the first error, in file order,
// is reported.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lib/config/cc.hpp"
#include "lib/config/ip.hpp"
#include "lib/util/result.hpp"
#include "lib/wire/eth.hpp"

namespace uroce::config {

// ---- limits and defaults ----------------------------------------------------
inline constexpr std::string_view kDefaultConfigPath = "/etc/uroce.toml";
inline constexpr std::string_view kDefaultNamePrefix = "uroce";  // uroce0, uroce1, ...
inline constexpr size_t kMaxDeviceNameLen = 63;
inline constexpr uint16_t kMinMtu = 256;   // IP MTU; RoCE's path MTU derives from it
inline constexpr uint16_t kMaxMtu = 9000;  // jumbo frames
inline constexpr uint16_t kMaxVlanId = 4094;  // 4095 is reserved (802.1Q)
inline constexpr int kMaxLcore = 1023;        // beyond any RTE_MAX_LCORE we build with
inline constexpr uint32_t kMinMemoryMb = 16;  // EAL's own heap needs a few MB
inline constexpr uint32_t kMaxMemoryMb = 1u << 20;  // 1 TiB

// ---- values ----------------------------------------------------------------
enum class Progress : uint8_t { kThread, kInline };
enum class LogLevel : uint8_t { kError, kWarning, kInfo, kDebug };
enum class Hugepages : uint8_t { kAuto, kYes, kNo };
// kDaemon: a device uroced serves (issue 15): never from a file; the drop-in
// makes one per device the daemon lists (transport::Devices::use_daemon).
enum class DeviceKind : uint8_t { kDpdk, kSim, kDaemon };
// How a reliable QP recovers lost packets.  kGoBackN: RoCEv2's own, and
// the wire is the IBA's to the bit.  kSelective: offered to the peer on
// every request; used only once the peer's NAKs show it keeps what came
// after a gap (DESIGN.md "Loss recovery"); toward any other peer, go-back-N.
enum class LossRecovery : uint8_t { kGoBackN, kSelective };

std::string_view to_string(Progress p) noexcept;
std::string_view to_string(LogLevel l) noexcept;
std::string_view to_string(Hugepages h) noexcept;
std::string_view to_string(DeviceKind k) noexcept;
std::string_view to_string(LossRecovery r) noexcept;
std::string_view to_string(CcMode m) noexcept;
// "dcqcn" / "none"; else an error naming the choices.
Result<CcMode, std::string> parse_cc_mode(std::string_view text);
// "go-back-n" / "selective"; else an error naming the choices.
Result<LossRecovery, std::string> parse_loss_recovery(std::string_view text);

struct DeviceConfig {
  std::string name;                       // unique; [A-Za-z0-9_-]{1,63}
  DeviceKind kind = DeviceKind::kDpdk;
  std::string devargs;                    // empty exactly when kind is kSim
  std::vector<IpPrefix> addresses;        // file order, no duplicates
  std::optional<wire::MacAddr> mac;       // unset: the port's
  std::optional<uint16_t> mtu;            // unset: the port's
  std::vector<IpAddr> gids;               // explicit GID entries; IpAddr::bytes is the GID
  std::optional<std::string> pcap;        // unset: Config::pcap
  std::optional<std::string> faults;      // spec text; the sim wire parses it
  std::optional<uint16_t> vlan;           // unset: untagged
  LossRecovery loss_recovery = LossRecovery::kGoBackN;
  uint32_t spray_ports = 1;               // UDP source ports a reliable QP's requests spread over
  uint32_t engine_lcores = 1;             // engine threads, each with a share of the QPs
  CcConfig cc;                            // ecn, cc, [device.dcqcn]

  friend bool operator==(const DeviceConfig&, const DeviceConfig&) = default;
};

inline constexpr uint32_t kMaxSprayPorts = 64;
inline constexpr uint32_t kMaxEngineLcores = 8;  // transport/lcores.hpp's

struct EalConfig {
  std::optional<int> core;                // unset: the EAL's default
  std::optional<uint32_t> memory_mb;      // unset: the EAL's default
  std::vector<std::string> extra;         // appended to the EAL arguments
  Hugepages hugepages = Hugepages::kAuto; // auto: use them when mounted
  bool telemetry = true;  // on by default: `uroce stats` reads a running process's counters

  friend bool operator==(const EalConfig&, const EalConfig&) = default;
};

struct Config {
  std::vector<DeviceConfig> devices;
  Progress progress = Progress::kThread;
  LogLevel log = LogLevel::kWarning;
  std::optional<std::string> pcap;        // default capture path of every device
  EalConfig eal;

  friend bool operator==(const Config&, const Config&) = default;
};

// Where `dev` captures to: its own pcap, else the global one, else nowhere.
const std::optional<std::string>& capture_path(const Config& cfg, const DeviceConfig& dev) noexcept;

// ---- errors ----------------------------------------------------------------
struct SourcePos {
  uint32_t line = 0;    // 1-based
  uint32_t column = 0;  // 1-based
  friend bool operator==(SourcePos, SourcePos) = default;
};

struct ConfigError {
  std::string source;             // the file; empty for the environment
  std::optional<SourcePos> pos;   // when toml++ knows it
  std::string key;                // "device[1].mtu", "UROCE_MTU"; empty for syntax errors
  std::string reason;             // "12000 is out of range 256..9000"

  // "/etc/uroce.toml:7:13: device[1].mtu: 12000 is out of range 256..9000"
  std::string message() const;
};

template <class T>
using ConfigResult = Result<T, ConfigError>;

// ---- environment -------------------------------------------------------------
// A getenv-like lookup, so tests never touch the process environment.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

EnvLookup env_from_map(std::map<std::string, std::string, std::less<>> vars);
EnvLookup process_env();  // getenv(3)

// The variables load_config reads, in the order it applies them.
inline constexpr std::string_view kEnvConfig = "UROCE_CONFIG";
inline constexpr std::string_view kEnvDevice = "UROCE_DEVICE";
inline constexpr std::string_view kEnvIp = "UROCE_IP";
inline constexpr std::string_view kEnvMac = "UROCE_MAC";
inline constexpr std::string_view kEnvMtu = "UROCE_MTU";
inline constexpr std::string_view kEnvFaults = "UROCE_FAULTS";
inline constexpr std::string_view kEnvLossRecovery = "UROCE_LOSS_RECOVERY";
inline constexpr std::string_view kEnvEcn = "UROCE_ECN";
inline constexpr std::string_view kEnvCc = "UROCE_CC";
inline constexpr std::string_view kEnvPcap = "UROCE_PCAP";
inline constexpr std::string_view kEnvProgress = "UROCE_PROGRESS";
inline constexpr std::string_view kEnvLog = "UROCE_LOG";
inline constexpr std::string_view kEnvEngineLcores = "UROCE_ENGINE_LCORES";

// The variables that say how the first device behaves, as a list.
inline constexpr std::array<std::string_view, 4> kDeviceEnvVars{kEnvFaults, kEnvLossRecovery, kEnvEcn, kEnvCc};

// The variables that say how the first device behaves (UROCE_FAULTS,
// UROCE_LOSS_RECOVERY, UROCE_ECN, UROCE_CC), each checked as load_config
// checks it, applied to `dev`: for a device that comes from elsewhere
// (uroced's).  Errors name the variable.
ConfigResult<Ok> apply_device_env(const EnvLookup& env, DeviceConfig& dev);

// ---- loading and rendering ------------------------------------------------------
// Reads the file UROCE_CONFIG names (else `default_path`, which may be
// missing), then applies the environment and validates.
ConfigResult<Config> load_config(const EnvLookup& env, std::string_view default_path = kDefaultConfigPath);

// The same from TOML text; `source_name` is what messages call the file.
ConfigResult<Config> parse_config(std::string_view toml_text, std::string_view source_name,
                                  const EnvLookup& env);

// The configuration as TOML that parse_config reads back to an equal
// Config.  Unset optional keys are left out.
std::string render_config(const Config& cfg);

}  // namespace uroce::config
