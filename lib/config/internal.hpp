// What the stages of loading hand each other: parse the TOML, apply the
// environment, validate the whole.  Not part of the API.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "lib/config/config.hpp"

namespace uroce::config {

// Where a device's keys were in the file, for errors found after parsing.
// Empty for a device the environment created, or a key the environment set.
struct DeviceOrigin {
  std::optional<SourcePos> table;
  std::optional<SourcePos> name;
  std::optional<SourcePos> devargs;
  std::optional<SourcePos> spray_ports;
  std::optional<SourcePos> engine_lcores;
};

struct Parsed {
  std::string source;                // the file name; empty when there is none
  Config cfg;
  std::vector<DeviceOrigin> origins;  // one per cfg.devices
};

using Status = ConfigResult<Ok>;

// TOML text to a Config with every key checked on its own (parse.cpp).
ConfigResult<Parsed> parse_toml(std::string_view text, std::string_view source);
// The UROCE_* overrides, in the documented order (env.cpp).
Status apply_env(const EnvLookup& env, Parsed& p);
// Default names, then checks across keys and devices (validate.cpp).
Status validate(Parsed& p);

ConfigError error_at(std::string_view source, std::optional<SourcePos> pos, std::string key, std::string reason);

// "device[1]", "device[1].mtu"
std::string device_path(size_t index);
std::string device_key_path(size_t index, std::string_view key);

}  // namespace uroce::config
