// The UROCE_* environment overrides (config.hpp lists what each does).
#include <array>
#include <utility>

#include "lib/config/fields.hpp"
#include "lib/config/internal.hpp"
#include "lib/config/mac.hpp"

namespace uroce::config {

namespace {

using Applied = Result<Ok, std::string>;  // the reason, without the variable's name

constexpr char kListSeparator = ',';

// The device the per-device variables change.
Result<DeviceConfig*, std::string> first_device(Parsed& p) {
  if (p.cfg.devices.empty()) {
    return Err{"there is no device to apply it to (set " + std::string(kEnvDevice) +
               " or add a [[device]] to the file)"};
  }
  return &p.cfg.devices.front();
}

Applied apply_device(std::string_view value, Parsed& p) {
  auto devargs = check_devargs(value);
  if (!devargs) return Err{std::move(devargs).error()};
  if (p.cfg.devices.empty()) {
    p.cfg.devices.emplace_back();
    p.origins.emplace_back();
  }
  DeviceConfig& dev = p.cfg.devices.front();
  dev.kind = DeviceKind::kDpdk;
  dev.devargs = std::move(*devargs);
  p.origins.front().devargs.reset();  // the file's position no longer describes it
  return Ok{};
}

Result<std::vector<IpPrefix>, std::string> parse_address_list(std::string_view value) {
  std::vector<IpPrefix> out;
  size_t start = 0;
  for (size_t entry = 1;; ++entry) {
    const size_t end = value.find(kListSeparator, start);
    const std::string_view text = trim(value.substr(start, end - start));
    if (text.empty()) return Err{"entry " + std::to_string(entry) + " of the list is empty"};
    auto prefix = parse_ip_prefix(text);
    if (!prefix) return Err{std::move(prefix).error()};
    if (auto dup = find_address(out, prefix->addr)) {
      return Err{quote(text) + ": the address is already entry " + std::to_string(*dup + 1)};
    }
    out.push_back(*prefix);
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

Applied apply_ip(std::string_view value, Parsed& p) {
  auto dev = first_device(p);
  if (!dev) return Err{std::move(dev).error()};
  auto list = parse_address_list(value);
  if (!list) return Err{std::move(list).error()};
  (*dev)->addresses = std::move(*list);
  return Ok{};
}

Applied apply_mac(std::string_view value, Parsed& p) {
  auto dev = first_device(p);
  if (!dev) return Err{std::move(dev).error()};
  auto mac = parse_mac(value);
  if (!mac) return Err{std::move(mac).error()};
  (*dev)->mac = *mac;
  return Ok{};
}

Applied apply_mtu(std::string_view value, Parsed& p) {
  auto dev = first_device(p);
  if (!dev) return Err{std::move(dev).error()};
  auto mtu = parse_integer_in(value, kMinMtu, kMaxMtu);
  if (!mtu) return Err{std::move(mtu).error()};
  (*dev)->mtu = static_cast<uint16_t>(*mtu);
  return Ok{};
}

Applied apply_engine_lcores(std::string_view value, Parsed& p) {
  auto dev = first_device(p);
  if (!dev) return Err{std::move(dev).error()};
  auto n = parse_integer_in(value, 1, kMaxEngineLcores);
  if (!n) return Err{std::move(n).error()};
  (*dev)->engine_lcores = static_cast<uint32_t>(*n);
  return Ok{};
}

Applied apply_faults(std::string_view value, DeviceConfig& dev) {
  auto spec = check_faults(value);
  if (!spec) return Err{std::move(spec).error()};
  dev.faults = std::move(*spec);
  return Ok{};
}

Applied apply_loss_recovery(std::string_view value, DeviceConfig& dev) {
  auto r = parse_loss_recovery(value);
  if (!r) return Err{std::move(r).error()};
  dev.loss_recovery = *r;
  return Ok{};
}

Applied apply_ecn(std::string_view value, DeviceConfig& dev) {
  if (value != "on" && value != "off") return Err{quote(value) + " is not \"on\" or \"off\""};
  dev.cc.ecn = value == "on";
  return Ok{};
}

Applied apply_cc(std::string_view value, DeviceConfig& dev) {
  auto r = parse_cc_mode(value);
  if (!r) return Err{std::move(r).error()};
  dev.cc.mode = *r;
  return Ok{};
}

Applied apply_pcap(std::string_view value, Parsed& p) {
  auto path = check_path(value);
  if (!path) return Err{std::move(path).error()};
  p.cfg.pcap = std::move(*path);
  for (DeviceConfig& dev : p.cfg.devices) dev.pcap.reset();
  return Ok{};
}

Applied apply_progress(std::string_view value, Parsed& p) {
  auto progress = parse_enum(kProgressNames, value);
  if (!progress) return Err{std::move(progress).error()};
  p.cfg.progress = *progress;
  return Ok{};
}

Applied apply_log(std::string_view value, Parsed& p) {
  auto level = parse_enum(kLogLevelNames, value);
  if (!level) return Err{std::move(level).error()};
  p.cfg.log = *level;
  return Ok{};
}

struct EnvOverride {
  std::string_view name;
  Applied (*apply)(std::string_view value, Parsed& p);
};

// How the first device behaves (not what it is): the same for a device of
// the file, of UROCE_DEVICE or of uroced (apply_device_env).
struct DeviceEnvOverride {
  std::string_view name;
  Applied (*apply)(std::string_view value, DeviceConfig& dev);
};

// UROCE_DEVICE first: it may create the device the others change.
constexpr std::array kEnvOverrides{
    EnvOverride{kEnvDevice, apply_device}, EnvOverride{kEnvIp, apply_ip}, EnvOverride{kEnvMac, apply_mac},
    EnvOverride{kEnvMtu, apply_mtu}, EnvOverride{kEnvEngineLcores, apply_engine_lcores},
};
constexpr std::array kDeviceEnvOverrides{
    DeviceEnvOverride{kEnvFaults, apply_faults},
    DeviceEnvOverride{kEnvLossRecovery, apply_loss_recovery},
    DeviceEnvOverride{kEnvEcn, apply_ecn},
    DeviceEnvOverride{kEnvCc, apply_cc},
};
static_assert(
    [] {
      for (size_t i = 0; i < kDeviceEnvVars.size(); ++i)
        if (kDeviceEnvOverrides[i].name != kDeviceEnvVars[i]) return false;
      return kDeviceEnvOverrides.size() == kDeviceEnvVars.size();
    }(),
    "config.hpp's kDeviceEnvVars lists the per-device overrides, in order");
constexpr std::array kGlobalEnvOverrides{
    EnvOverride{kEnvPcap, apply_pcap},
    EnvOverride{kEnvProgress, apply_progress},
    EnvOverride{kEnvLog, apply_log},
};

Status apply_each(const EnvLookup& env, const auto& table, auto& target) {
  for (const auto& o : table) {
    const std::optional<std::string> value = env(o.name);
    if (!value || value->empty()) continue;
    if (Applied a = o.apply(*value, target); !a) return Err{error_at("", std::nullopt, std::string(o.name), a.error())};
  }
  return Ok{};
}

}  // namespace

Status apply_device_env(const EnvLookup& env, DeviceConfig& dev) { return apply_each(env, kDeviceEnvOverrides, dev); }

Status apply_env(const EnvLookup& env, Parsed& p) {
  if (Status s = apply_each(env, kEnvOverrides, p); !s) return s;
  for (std::string_view name : kDeviceEnvVars) {
    if (const auto v = env(name); !v || v->empty()) continue;
    auto dev = first_device(p);
    if (!dev) return Err{error_at("", std::nullopt, std::string(name), dev.error())};
    if (Status s = apply_device_env(env, **dev); !s) return s;
    break;
  }
  return apply_each(env, kGlobalEnvOverrides, p);
}

}  // namespace uroce::config
