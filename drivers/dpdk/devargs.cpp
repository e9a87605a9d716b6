#include "drivers/dpdk/devargs.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <numeric>

namespace uroce::drivers::dpdk {
namespace {

constexpr char kItemSeparator = ',';
constexpr char kKeyValueSeparator = '=';
constexpr std::string_view kDefaultPciDomain = "0000:";
constexpr std::string_view kAfPacketNames[] = {"net_af_packet", "eth_af_packet"};

bool all_hex(std::string_view s) noexcept {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

uint32_t round_up(uint32_t v, uint32_t align) noexcept { return (v + align - 1) / align * align; }

// Splits `text` at commas that are not inside [...].
std::vector<std::string_view> split_items(std::string_view text) {
  std::vector<std::string_view> items;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= text.size(); ++i) {
    const char c = i < text.size() ? text[i] : kItemSeparator;
    if (c == '[') ++depth;
    if (c == ']' && depth > 0) --depth;
    if (c == kItemSeparator && depth == 0) {
      items.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  return items;
}

}  // namespace

std::optional<std::string_view> Devargs::get(std::string_view key) const noexcept {
  for (const auto& [k, v] : args) {
    if (k == key) return std::string_view(v);
  }
  return std::nullopt;
}

std::string Devargs::args_text() const {
  std::string s;
  for (const auto& [k, v] : args) {
    if (!s.empty()) s += kItemSeparator;
    s += k;
    if (!v.empty()) {
      s += kKeyValueSeparator;
      s += v;
    }
  }
  return s;
}

std::string Devargs::text() const {
  const std::string a = args_text();
  return a.empty() ? name : name + kItemSeparator + a;
}

Result<Devargs> parse_devargs(std::string_view text) {
  const std::vector<std::string_view> items = split_items(text);
  if (items.empty() || items.front().empty()) {
    return Error{EINVAL, "devargs '" + std::string(text) + "': the device name before the first ',' is missing"};
  }
  Devargs d;
  d.name = std::string(items.front());
  for (size_t i = 1; i < items.size(); ++i) {
    const std::string_view item = items[i];
    const size_t eq = item.find(kKeyValueSeparator);
    const std::string_view key = item.substr(0, eq);
    if (key.empty()) {
      return Error{EINVAL, "devargs '" + std::string(text) + "': item " + std::to_string(i) + " has no key"};
    }
    const std::string_view value = eq == std::string_view::npos ? std::string_view{} : item.substr(eq + 1);
    d.args.emplace_back(std::string(key), std::string(value));
  }
  return d;
}

bool is_pci_address(std::string_view name) noexcept {
  // [dddd:]bb:dd.f
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos || dot + 2 != name.size() || name[dot + 1] < '0' || name[dot + 1] > '7') {
    return false;
  }
  std::string_view head = name.substr(0, dot);
  const size_t c2 = head.rfind(':');
  if (c2 == std::string_view::npos) return false;
  const std::string_view dev = head.substr(c2 + 1);
  head = head.substr(0, c2);
  const size_t c1 = head.rfind(':');
  const std::string_view bus = c1 == std::string_view::npos ? head : head.substr(c1 + 1);
  const std::string_view domain = c1 == std::string_view::npos ? std::string_view("0000") : head.substr(0, c1);
  return dev.size() == 2 && all_hex(dev) && bus.size() == 2 && all_hex(bus) && domain.size() == 4 &&
         all_hex(domain);
}

std::string canonical_pci_address(std::string_view name) {
  std::string s(name);
  if (std::count(s.begin(), s.end(), ':') == 1) s.insert(0, kDefaultPciDomain);
  std::transform(s.begin(), s.end(), s.begin(), [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
  return s;
}

std::string_view vdev_driver(std::string_view name) noexcept {
  while (!name.empty() && std::isdigit(static_cast<unsigned char>(name.back())) != 0) name.remove_suffix(1);
  return name;
}

bool is_af_packet(std::string_view name) noexcept {
  const std::string_view driver = vdev_driver(name);
  return std::find(std::begin(kAfPacketNames), std::end(kAfPacketNames), driver) != std::end(kAfPacketNames);
}

std::optional<AfPacketRing> af_packet_ring_for_mtu(uint32_t mtu, uint32_t page_size, uint32_t max_framesz,
                                                   uint32_t frames) noexcept {
  const uint32_t needed = round_up(mtu + kEthOverheadBytes + kAfPacketFrameOverhead, kAfPacketFrameQuantum);
  const uint32_t framesz = std::min(needed, max_framesz / kAfPacketFrameQuantum * kAfPacketFrameQuantum);
  const bool big_frames = framesz > kAfPacketDefaultFramesz;
  AfPacketRing r;
  r.framesz = big_frames ? framesz : kAfPacketDefaultFramesz;
  frames = std::max(std::min(frames, kAfPacketRingMaxBytes / r.framesz), kAfPacketDefaultFramecnt);
  if ((!big_frames && frames == kAfPacketDefaultFramecnt) || page_size == 0) return std::nullopt;
  r.blocksz = std::lcm(r.framesz, page_size);
  r.framecnt = round_up(frames, r.blocksz / r.framesz);
  return r;
}

uint32_t af_packet_mtu_limit(uint32_t framesz) noexcept {
  const uint32_t overhead = kAfPacketFrameOverhead + kEthOverheadBytes;
  return framesz > overhead ? framesz - overhead : 0;
}

}  // namespace uroce::drivers::dpdk
