// Loading: find and read the file, then parse, apply the environment and
// validate.  The only part of lib/config that does I/O.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "lib/config/internal.hpp"
#include "lib/config/text.hpp"

namespace uroce::config {

namespace {

constexpr size_t kReadChunk = 4096;

// The file's bytes, or errno.
Result<std::string, int> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Err{errno};
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    return Err{EISDIR};
  }
  std::string text;
  std::array<char, kReadChunk> buf{};
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Err{err};
    }
    text.append(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace

ConfigError error_at(std::string_view source, std::optional<SourcePos> pos, std::string key, std::string reason) {
  return ConfigError{std::string(source), pos, std::move(key), std::move(reason)};
}

std::string ConfigError::message() const {
  std::string out = source;
  if (pos) out += (out.empty() ? "" : ":") + std::to_string(pos->line) + ":" + std::to_string(pos->column);
  if (!out.empty()) out += ": ";
  if (!key.empty()) out += key + ": ";
  return out + reason;
}

std::string device_path(size_t index) { return "device[" + std::to_string(index) + "]"; }

std::string device_key_path(size_t index, std::string_view key) {
  return device_path(index) + "." + key_text(key);
}

const std::optional<std::string>& capture_path(const Config& cfg, const DeviceConfig& dev) noexcept {
  return dev.pcap ? dev.pcap : cfg.pcap;
}

EnvLookup env_from_map(std::map<std::string, std::string, std::less<>> vars) {
  return [vars = std::move(vars)](std::string_view name) -> std::optional<std::string> {
    const auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

EnvLookup process_env() {
  return [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

ConfigResult<Config> parse_config(std::string_view toml_text, std::string_view source_name, const EnvLookup& env) {
  auto parsed = parse_toml(toml_text, source_name);
  if (!parsed) return Err{std::move(parsed).error()};
  if (Status s = apply_env(env, *parsed); !s) return Err{std::move(s).error()};
  if (Status s = validate(*parsed); !s) return Err{std::move(s).error()};
  return std::move(parsed->cfg);
}

ConfigResult<Config> load_config(const EnvLookup& env, std::string_view default_path) {
  const std::optional<std::string> named = env(kEnvConfig);
  const bool explicit_path = named && !named->empty();
  const std::string path = explicit_path ? *named : std::string(default_path);

  auto text = read_file(path);
  if (text) return parse_config(*text, path, env);
  if (explicit_path) {
    return Err{error_at("", std::nullopt, std::string(kEnvConfig),
                        "cannot read " + quote(path) + ": " + std::strerror(text.error()))};
  }
  if (text.error() == ENOENT) return parse_config("", "", env);  // no file: the environment alone
  return Err{error_at(path, std::nullopt, "", std::string("cannot read: ") + std::strerror(text.error()))};
}

}  // namespace uroce::config
