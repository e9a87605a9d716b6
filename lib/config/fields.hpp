// The value rules of each configuration key, shared by the TOML reader and
// the environment overrides.  Each takes text (or an integer) and returns
// the value or a reason; the caller adds where it came from.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lib/config/config.hpp"
#include "lib/config/ip.hpp"
#include "lib/util/result.hpp"
#include "lib/config/text.hpp"

namespace uroce::config {

template <class E>
struct EnumName {
  E value;
  std::string_view name;
};

inline constexpr std::array kProgressNames{
    EnumName<Progress>{Progress::kThread, "thread"},
    EnumName<Progress>{Progress::kInline, "inline"},
};
inline constexpr std::array kLogLevelNames{
    EnumName<LogLevel>{LogLevel::kError, "error"},
    EnumName<LogLevel>{LogLevel::kWarning, "warning"},
    EnumName<LogLevel>{LogLevel::kInfo, "info"},
    EnumName<LogLevel>{LogLevel::kDebug, "debug"},
};
inline constexpr std::array kHugepagesNames{
    EnumName<Hugepages>{Hugepages::kAuto, "auto"},
    EnumName<Hugepages>{Hugepages::kYes, "yes"},
    EnumName<Hugepages>{Hugepages::kNo, "no"},
};
inline constexpr std::array kLossRecoveryNames{
    EnumName<LossRecovery>{LossRecovery::kGoBackN, "go-back-n"},
    EnumName<LossRecovery>{LossRecovery::kSelective, "selective"},
};
inline constexpr std::array kCcModeNames{
    EnumName<CcMode>{CcMode::kDcqcn, "dcqcn"},
    EnumName<CcMode>{CcMode::kDelay, "delay"},
    EnumName<CcMode>{CcMode::kNone, "none"},
};
inline constexpr std::array kDeviceKindNames{
    EnumName<DeviceKind>{DeviceKind::kDpdk, "dpdk"},
    EnumName<DeviceKind>{DeviceKind::kSim, "sim"},
};

// "\"thread\" or \"inline\"", "\"auto\", \"yes\" or \"no\"".
template <class E, size_t N>
std::string enum_choices(const std::array<EnumName<E>, N>& names) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) out += i + 1 == N ? " or " : ", ";
    out += quote(names[i].name);
  }
  return out;
}

template <class E, size_t N>
Result<E, std::string> parse_enum(const std::array<EnumName<E>, N>& names, std::string_view text) {
  for (const EnumName<E>& n : names) {
    if (n.name == text) return n.value;
  }
  return Err{quote(text) + " is not " + enum_choices(names)};
}

template <class E, size_t N>
constexpr std::string_view enum_name(const std::array<EnumName<E>, N>& names, E value) noexcept {
  for (const EnumName<E>& n : names) {
    if (n.value == value) return n.name;
  }
  return "?";
}

// "12000 is out of range 256..9000" unless lo <= v <= hi.
Result<int64_t, std::string> check_range(int64_t v, int64_t lo, int64_t hi);
// Decimal text ("1500", "-3") in lo..hi.
Result<int64_t, std::string> parse_integer_in(std::string_view text, int64_t lo, int64_t hi);

Result<std::string, std::string> check_device_name(std::string_view name);
Result<std::string, std::string> check_devargs(std::string_view devargs);
Result<std::string, std::string> check_path(std::string_view path);
Result<std::string, std::string> check_eal_arg(std::string_view arg);
// Any text for now: the fault spec's grammar belongs to the sim wire's
// parser, which this should call once it exists.
Result<std::string, std::string> check_faults(std::string_view spec);

// What DPDK names the device: devargs up to the first ',' ("net_tap0",
// "0000:03:00.0").  Two devices with the same one are the same port.
std::string_view dpdk_device_name(std::string_view devargs) noexcept;

// A GID table entry: an IPv6 or IPv4 address without a prefix.
Result<IpAddr, std::string> parse_gid(std::string_view text);

// The index of the first of `earlier` with the same address as `a`.
std::optional<size_t> find_address(const std::vector<IpPrefix>& earlier, const IpAddr& a) noexcept;
std::optional<size_t> find_address(const std::vector<IpAddr>& earlier, const IpAddr& a) noexcept;

}  // namespace uroce::config
