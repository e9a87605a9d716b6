#include "lib/config/fields.hpp"

#include <algorithm>
#include <charconv>

namespace uroce::config {

namespace {

bool is_name_char(char c) noexcept {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

bool is_blank_or_control(char c) noexcept {
  constexpr unsigned char kFirstPrintable = 0x20;
  constexpr unsigned char kDelete = 0x7F;
  const auto u = static_cast<unsigned char>(c);
  return u <= kFirstPrintable || u == kDelete;  // space included
}

std::string range_text(int64_t lo, int64_t hi) { return std::to_string(lo) + ".." + std::to_string(hi); }

}  // namespace

std::string_view to_string(Progress p) noexcept { return enum_name(kProgressNames, p); }
std::string_view to_string(LogLevel l) noexcept { return enum_name(kLogLevelNames, l); }
std::string_view to_string(Hugepages h) noexcept { return enum_name(kHugepagesNames, h); }
std::string_view to_string(LossRecovery r) noexcept { return enum_name(kLossRecoveryNames, r); }
Result<LossRecovery, std::string> parse_loss_recovery(std::string_view text) {
  return parse_enum(kLossRecoveryNames, text);
}
std::string_view to_string(CcMode m) noexcept { return enum_name(kCcModeNames, m); }
Result<CcMode, std::string> parse_cc_mode(std::string_view text) { return parse_enum(kCcModeNames, text); }
std::string_view to_string(DeviceKind k) noexcept {
  return k == DeviceKind::kDaemon ? "daemon" : enum_name(kDeviceKindNames, k);
}

Result<int64_t, std::string> check_range(int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) return Err{std::to_string(v) + " is out of range " + range_text(lo, hi)};
  return v;
}

Result<int64_t, std::string> parse_integer_in(std::string_view text, int64_t lo, int64_t hi) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (ptr != end || text.empty() || ec == std::errc::invalid_argument) {
    return Err{quote(text) + " is not a decimal integer"};
  }
  if (ec == std::errc::result_out_of_range) return Err{std::string(text) + " is out of range " + range_text(lo, hi)};
  return check_range(v, lo, hi);
}

Result<std::string, std::string> check_device_name(std::string_view name) {
  if (name.empty() || !std::all_of(name.begin(), name.end(), is_name_char)) {
    return Err{quote(name) + ": a device name is letters, digits, '_' and '-'"};
  }
  if (name.size() > kMaxDeviceNameLen) {
    return Err{quote(name) + ": longer than " + std::to_string(kMaxDeviceNameLen) + " characters"};
  }
  return std::string(name);
}

Result<std::string, std::string> check_devargs(std::string_view devargs) {
  if (devargs.empty()) return Err{std::string("must not be empty (DPDK devargs such as \"net_tap0,iface=tap0\")")};
  if (std::any_of(devargs.begin(), devargs.end(), is_blank_or_control)) {
    return Err{quote(devargs) + ": devargs contain no spaces or control characters"};
  }
  if (dpdk_device_name(devargs).empty()) {
    return Err{quote(devargs) + ": the device name before the first ',' is missing"};
  }
  return std::string(devargs);
}

Result<std::string, std::string> check_path(std::string_view path) {
  if (path.empty()) return Err{std::string("must not be empty")};
  return std::string(path);
}

Result<std::string, std::string> check_eal_arg(std::string_view arg) {
  if (arg.empty()) return Err{std::string("must not be empty")};
  return std::string(arg);
}

Result<std::string, std::string> check_faults(std::string_view spec) { return std::string(spec); }

std::string_view dpdk_device_name(std::string_view devargs) noexcept {
  return devargs.substr(0, devargs.find(','));
}

Result<IpAddr, std::string> parse_gid(std::string_view text) {
  if (text.find('/') != std::string_view::npos) {
    return Err{quote(text) + ": a GID is an address without a prefix length"};
  }
  auto a = parse_ip_address(text);
  if (!a) return a;
  if (std::string_view why = unusable_address_reason(*a); !why.empty()) {
    return Err{quote(text) + ": " + std::string(why) + " cannot be a GID"};
  }
  return a;
}

std::optional<size_t> find_address(const std::vector<IpPrefix>& earlier, const IpAddr& a) noexcept {
  const auto it = std::find_if(earlier.begin(), earlier.end(), [&](const IpPrefix& p) { return p.addr == a; });
  if (it == earlier.end()) return std::nullopt;
  return static_cast<size_t>(it - earlier.begin());
}

std::optional<size_t> find_address(const std::vector<IpAddr>& earlier, const IpAddr& a) noexcept {
  const auto it = std::find(earlier.begin(), earlier.end(), a);
  if (it == earlier.end()) return std::nullopt;
  return static_cast<size_t>(it - earlier.begin());
}

}  // namespace uroce::config
