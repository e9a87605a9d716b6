// Link types of a capture, mapped onto the Ethernet frames lib/wire parses.
//
// DLT_EN10MB records are Ethernet frames already (802.1Q tags included).
// Linux cooked captures (DLT_LINUX_SLL, DLT_LINUX_SLL2: what `tshark -i any`
// and `tcpdump -i any` write) replace the Ethernet header with their own;
// their network layer is copied behind a synthetic Ethernet header into a
// scratch buffer, so the bytes from the IP header (or a VLAN tag the
// kernel put back) on are the capture's own.  Any other link type (ERF with
// native InfiniBand, loopback, 802.11 …) holds no Ethernet frames.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace uroce::tools {

enum class LinkKind : uint8_t { Ethernet, LinuxSll, LinuxSll2, NotEthernet };

LinkKind link_kind(int dlt) noexcept;

// An Ethernet frame made from one capture record.
struct EthernetView {
  std::span<const uint8_t> frame;
  // The first byte of `frame` that came from the capture (after a
  // synthetic header), and where that byte sits in the record: a byte at
  // frame offset `o >= compare_from` is record byte
  // `o - compare_from + record_start`.
  size_t compare_from = 0;
  size_t record_start = 0;

  size_t record_offset(size_t frame_offset) const noexcept {
    return frame_offset - compare_from + record_start;
  }
};

struct CookedLayout;  // where a cooked header keeps its fields (link_layer.cpp)

class LinkAdapter {
 public:
  explicit LinkAdapter(LinkKind kind) noexcept : kind_(kind) {}

  LinkKind kind() const noexcept { return kind_; }

  // The Ethernet frame in `record`, or nothing when the record carries none
  // (another link type, or a cooked record whose protocol field is not an
  // EtherType).  The view may point into an internal buffer that the next
  // call overwrites.
  std::optional<EthernetView> to_ethernet(std::span<const uint8_t> record);

 private:
  std::optional<EthernetView> wrap_cooked(std::span<const uint8_t> record, const CookedLayout& layout);

  LinkKind kind_;
  std::vector<uint8_t> scratch_;
};

}  // namespace uroce::tools
