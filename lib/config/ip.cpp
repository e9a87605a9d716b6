#include "lib/config/ip.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <vector>

#include "lib/config/text.hpp"
#include "lib/wire/ipv6.hpp"

namespace uroce::config {

namespace {

constexpr unsigned kMaxOctet = 255;
constexpr size_t kMaxOctetDigits = 3;
constexpr size_t kMaxPrefixDigits = 3;
// ::ffff:0:0/96 (RFC 4291 2.5.5.2): the first 10 bytes zero, then 0xffff.
constexpr size_t kMappedPrefixBytes = wire::kIpv4MappedPrefix.size();
constexpr const auto& kMappedPrefix = wire::kIpv4MappedPrefix;
constexpr uint8_t kIpv4MulticastTop = 0xE0;  // 224.0.0.0/4
constexpr uint8_t kIpv4MulticastMask = 0xF0;
constexpr uint8_t kIpv4LoopbackFirst = 127;  // 127.0.0.0/8
constexpr uint8_t kIpv6Multicast = 0xFF;     // ff00::/8

std::string invalid(std::string_view text, std::string_view detail) {
  return quote(text) + ": " + std::string(detail);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    const size_t end = s.find(sep, start);
    parts.push_back(s.substr(start, end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

// One decimal octet of a dotted quad; the error is the detail only.
Result<uint8_t, std::string> parse_octet(std::string_view part) {
  if (part.empty()) return Err{std::string("empty octet")};
  if (!all_digits(part)) return Err{"octet " + quote(part) + " is not a decimal number"};
  if (part.size() > 1 && part[0] == '0') {
    return Err{"octet " + quote(part) + " has a leading zero (octal is not accepted)"};
  }
  unsigned v = kMaxOctet + 1;
  if (part.size() <= kMaxOctetDigits) std::from_chars(part.data(), part.data() + part.size(), v);
  if (v > kMaxOctet) return Err{"octet " + std::string(part) + " is out of range 0..255"};
  return static_cast<uint8_t>(v);
}

// The two parsers below return the detail of an error only; callers quote
// the text it is about.
Result<IpAddr, std::string> parse_ipv4(std::string_view text) {
  const std::vector<std::string_view> parts = split(text, '.');
  if (parts.size() != kIpv4Bytes) {
    return Err{"an IPv4 address has 4 octets, this has " + std::to_string(parts.size())};
  }
  std::array<uint8_t, kIpv4Bytes> octets{};
  for (size_t i = 0; i < kIpv4Bytes; ++i) {
    auto octet = parse_octet(parts[i]);
    if (!octet) return Err{std::move(octet).error()};
    octets[i] = *octet;
  }
  return IpAddr::ipv4(octets);
}

bool is_ipv4_mapped(const std::array<uint8_t, kIpBytes>& b) noexcept {
  return wire::is_ipv4_mapped(b);
}

Result<IpAddr, std::string> parse_ipv6(std::string_view text) {
  IpAddr a;
  const std::string z(text);  // inet_pton wants a terminated string
  if (inet_pton(AF_INET6, z.c_str(), a.bytes.data()) != 1) {
    return Err{std::string("not a valid IPv6 address")};
  }
  a.family = is_ipv4_mapped(a.bytes) ? IpFamily::kIpv4 : IpFamily::kIpv6;
  return a;
}

Result<IpAddr, std::string> parse_address_detail(std::string_view text) {
  return text.find(':') != std::string_view::npos ? parse_ipv6(text) : parse_ipv4(text);
}

Result<uint8_t, std::string> parse_prefix_len(std::string_view text, std::string_view len, IpFamily family) {
  const unsigned max = max_prefix(family);
  if (!all_digits(len)) return Err{invalid(text, "prefix length " + quote(len) + " is not a decimal number")};
  unsigned v = max + 1;
  if (len.size() <= kMaxPrefixDigits) std::from_chars(len.data(), len.data() + len.size(), v);
  if (v > max) {
    return Err{invalid(text, "prefix length " + std::string(len) + " is out of range 0.." + std::to_string(max))};
  }
  return static_cast<uint8_t>(v);
}

}  // namespace

IpAddr IpAddr::ipv4(const std::array<uint8_t, kIpv4Bytes>& octets) noexcept {
  IpAddr a;
  a.family = IpFamily::kIpv4;
  std::copy(kMappedPrefix.begin(), kMappedPrefix.end(), a.bytes.begin());
  std::copy(octets.begin(), octets.end(), a.bytes.begin() + kMappedPrefixBytes);
  return a;
}

std::array<uint8_t, kIpv4Bytes> IpAddr::ipv4_octets() const noexcept {
  std::array<uint8_t, kIpv4Bytes> o{};
  std::copy(bytes.begin() + kMappedPrefixBytes, bytes.end(), o.begin());
  return o;
}

Result<IpAddr, std::string> parse_ip_address(std::string_view text) {
  if (text.empty()) return Err{invalid(text, "empty address")};
  auto a = parse_address_detail(text);
  if (!a) return Err{invalid(text, a.error())};
  return a;
}

Result<IpPrefix, std::string> parse_ip_prefix(std::string_view text) {
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) {
    return Err{invalid(text, "the prefix length is missing (address/prefix, e.g. \"10.0.0.1/24\")")};
  }
  const std::string_view addr_text = text.substr(0, slash);
  if (addr_text.empty()) return Err{invalid(text, "the address before '/' is missing")};
  auto addr = parse_address_detail(addr_text);
  if (!addr) return Err{invalid(text, addr.error())};
  if (addr->family == IpFamily::kIpv4 && addr_text.find(':') != std::string_view::npos) {
    return Err{invalid(text, "an IPv4-mapped IPv6 address; write the IPv4 address and its prefix")};
  }
  auto len = parse_prefix_len(text, text.substr(slash + 1), addr->family);
  if (!len) return Err{len.error()};
  if (std::string_view why = unusable_address_reason(*addr); !why.empty()) {
    return Err{invalid(text, std::string(why) + " cannot be a device address")};
  }
  return IpPrefix{*addr, *len};
}

std::string_view unusable_address_reason(const IpAddr& a) noexcept {
  if (a.family == IpFamily::kIpv4) {
    const auto o = a.ipv4_octets();
    if (std::all_of(o.begin(), o.end(), [](uint8_t b) { return b == 0; })) return "an unspecified address";
    if (std::all_of(o.begin(), o.end(), [](uint8_t b) { return b == kMaxOctet; })) return "the broadcast address";
    if (o[0] == kIpv4LoopbackFirst) return "a loopback address";
    if ((o[0] & kIpv4MulticastMask) == kIpv4MulticastTop) return "a multicast address";
    return {};
  }
  const auto& b = a.bytes;
  const bool zero_head = std::all_of(b.begin(), b.end() - 1, [](uint8_t x) { return x == 0; });
  if (zero_head && b.back() == 0) return "an unspecified address";
  if (zero_head && b.back() == 1) return "a loopback address";
  if (b[0] == kIpv6Multicast) return "a multicast address";
  return {};
}

std::string to_string(const IpAddr& a) {
  if (a.family == IpFamily::kIpv4) {
    const auto o = a.ipv4_octets();
    return std::to_string(o[0]) + "." + std::to_string(o[1]) + "." + std::to_string(o[2]) + "." +
           std::to_string(o[3]);
  }
  std::array<char, INET6_ADDRSTRLEN> buf{};
  inet_ntop(AF_INET6, a.bytes.data(), buf.data(), buf.size());
  return buf.data();
}

bool prefix_contains(const IpPrefix& p, const std::array<uint8_t, kIpBytes>& addr) noexcept {
  return wire::same_subnet(addr, p.addr.bytes, p.prefix_len);
}

std::string to_string(const IpPrefix& p) { return to_string(p.addr) + "/" + std::to_string(p.prefix_len); }

}  // namespace uroce::config
