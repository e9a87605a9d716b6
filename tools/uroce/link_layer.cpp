#include "tools/uroce/link_layer.hpp"

#include <pcap/dlt.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "lib/wire/bytes.hpp"
#include "lib/wire/eth.hpp"

namespace uroce::tools {

// Where a cooked header keeps what the synthetic Ethernet header needs
// (https://www.tcpdump.org/linktypes/LINKTYPE_LINUX_SLL.html and
// LINKTYPE_LINUX_SLL2.html).  Both hold the sender's link-layer address
// in an 8-byte field with its length beside it.
struct CookedLayout {
  size_t header_len;
  size_t protocol_off;  // EtherType of the network layer, big-endian
  size_t addr_len_off;  // SLL: 16 bits, SLL2: 8 bits
  size_t addr_len_size;
  size_t addr_off;
};

namespace {

// SLL: packet type (2), ARPHRD type (2), address length (2), address (8), protocol (2).
constexpr CookedLayout kSll{
    .header_len = 16, .protocol_off = 14, .addr_len_off = 4, .addr_len_size = 2, .addr_off = 6};
// SLL2: protocol (2), reserved (2), interface index (4), ARPHRD type (2),
// packet type (1), address length (1), address (8).
constexpr CookedLayout kSll2{
    .header_len = 20, .protocol_off = 0, .addr_len_off = 11, .addr_len_size = 1, .addr_off = 12};

// Protocol values below this are 802.3 lengths or Linux pseudo-protocols
// (ETH_P_802_2, netlink families …), not EtherTypes.
constexpr uint16_t kMinEtherType = 0x0600;

constexpr size_t kMacLen = std::tuple_size_v<wire::MacAddr>;
constexpr size_t kEthSrcOff = kMacLen;

size_t cooked_addr_len(std::span<const uint8_t> record, const CookedLayout& l) noexcept {
  const uint8_t* p = record.data() + l.addr_len_off;
  return l.addr_len_size == sizeof(uint16_t) ? wire::load_be<uint16_t>(p) : *p;
}

}  // namespace

LinkKind link_kind(int dlt) noexcept {
  switch (dlt) {
    case DLT_EN10MB: return LinkKind::Ethernet;
    case DLT_LINUX_SLL: return LinkKind::LinuxSll;
    case DLT_LINUX_SLL2: return LinkKind::LinuxSll2;
    default: return LinkKind::NotEthernet;
  }
}

std::optional<EthernetView> LinkAdapter::to_ethernet(std::span<const uint8_t> record) {
  switch (kind_) {
    case LinkKind::Ethernet: return EthernetView{record, 0, 0};
    case LinkKind::LinuxSll: return wrap_cooked(record, kSll);
    case LinkKind::LinuxSll2: return wrap_cooked(record, kSll2);
    case LinkKind::NotEthernet: return std::nullopt;
  }
  return std::nullopt;
}

std::optional<EthernetView> LinkAdapter::wrap_cooked(std::span<const uint8_t> record,
                                                     const CookedLayout& layout) {
  // A record too short for its own header: an empty frame, which the
  // parser reports as shorter than an Ethernet header.
  if (record.size() < layout.header_len) return EthernetView{{}, 0, 0};
  const uint16_t protocol = wire::load_be<uint16_t>(record.data() + layout.protocol_off);
  if (protocol < kMinEtherType) return std::nullopt;

  const std::span<const uint8_t> network = record.subspan(layout.header_len);
  scratch_.resize(wire::Eth::kSize + network.size());
  std::fill_n(scratch_.begin(), wire::Eth::kSize, uint8_t{0});
  if (cooked_addr_len(record, layout) == kMacLen) {
    std::memcpy(scratch_.data() + kEthSrcOff, record.data() + layout.addr_off, kMacLen);
  }
  wire::Eth(scratch_.data()).set_ethertype(protocol);
  if (!network.empty()) std::memcpy(scratch_.data() + wire::Eth::kSize, network.data(), network.size());
  return EthernetView{scratch_, wire::Eth::kSize, layout.header_len};
}

}  // namespace uroce::tools
