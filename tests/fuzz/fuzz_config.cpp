// Fuzz target: the configuration parser (lib/config).  Any text either
// parses into a Config that renders back to TOML and parses again to an
// equal Config, or fails with a ConfigError; nothing else (no crash, no
// exception escaping, no sanitizer report).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "lib/config/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace uroce::config;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto parsed = parse_config(text, "fuzz.toml", env_from_map({}));
  if (!parsed.ok()) return 0;
  const std::string again = render_config(*parsed);
  auto back = parse_config(again, "rendered.toml", env_from_map({}));
  if (!back.ok() || !(*back == *parsed)) {
    std::fprintf(stderr, "fuzz-config: a parsed configuration does not round-trip:\n%s\n", again.c_str());
    std::abort();
  }
  return 0;
}
