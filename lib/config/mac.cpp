#include "lib/config/mac.hpp"

#include <algorithm>
#include <array>
#include <cstdio>

#include "lib/config/text.hpp"

namespace uroce::config {

namespace {

constexpr size_t kMacTextLen = sizeof "aa:bb:cc:dd:ee:ff" - 1;
constexpr size_t kGroupStride = 3;  // two hex digits and a ':'
constexpr uint8_t kGroupBit = 0x01;  // I/G bit of the first octet: multicast
constexpr int kNotHex = -1;
constexpr int kHexRadix = 16;

int hex_digit(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return kNotHex;
}

bool has_mac_shape(std::string_view t) noexcept {
  if (t.size() != kMacTextLen) return false;
  for (size_t i = 0; i < t.size(); ++i) {
    const bool separator_slot = i % kGroupStride == 2;
    if (separator_slot ? t[i] != ':' : hex_digit(t[i]) == kNotHex) return false;
  }
  return true;
}

}  // namespace

Result<wire::MacAddr, std::string> parse_mac(std::string_view text) {
  if (!has_mac_shape(text)) {
    return Err{quote(text) + ": not a MAC address (six hex pairs like \"02:00:00:00:00:01\")"};
  }
  wire::MacAddr mac{};
  for (size_t i = 0; i < mac.size(); ++i) {
    const size_t at = i * kGroupStride;
    mac[i] = static_cast<uint8_t>(hex_digit(text[at]) * kHexRadix + hex_digit(text[at + 1]));
  }
  if (mac[0] & kGroupBit) return Err{quote(text) + ": a multicast MAC cannot be a device's address"};
  if (std::all_of(mac.begin(), mac.end(), [](uint8_t b) { return b == 0; })) {
    return Err{quote(text) + ": the all-zero MAC cannot be a device's address"};
  }
  return mac;
}

std::string format_mac(const wire::MacAddr& mac) {
  std::array<char, kMacTextLen + 1> buf{};
  std::snprintf(buf.data(), buf.size(), "%02x:%02x:%02x:%02x:%02x:%02x", mac[0], mac[1], mac[2], mac[3],
                mac[4], mac[5]);
  return buf.data();
}

}  // namespace uroce::config
