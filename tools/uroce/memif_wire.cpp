#include "tools/uroce/memif_wire.hpp"

#include <rte_mbuf.h>

namespace uroce::tools {

unsigned Relay::poll() noexcept {
  unsigned work = 0;
  for (Lane& lane : lanes_) work += move(lane);
  return work;
}

void Relay::release() noexcept {
  for (Lane& lane : lanes_) {
    for (uint16_t i = 0; i < lane.count; ++i) rte_pktmbuf_free(lane.held[lane.head + i]);
    lane.head = lane.count = 0;
  }
}

unsigned Relay::move(Lane& lane) noexcept {
  if (lane.count == 0) {
    lane.head = 0;
    lane.count = lane.from->rx_burst(lane.held.data(), kRelayBurst);
    if (lane.count == 0) return 0;
  }
  // Checked per burst, not per idle pass: a peer that left takes what
  // waits for it with it.
  if (!lane.to->link_up()) return drop(lane, RelayDrop::kNoPeer);
  const uint16_t sent = lane.to->tx_burst(lane.held.data() + lane.head, lane.count);
  lane.head = static_cast<uint16_t>(lane.head + sent);
  lane.count = static_cast<uint16_t>(lane.count - sent);
  lane.counters.forwarded += sent;
  return sent;
}

unsigned Relay::drop(Lane& lane, RelayDrop why) noexcept {
  const uint16_t n = lane.count;
  for (uint16_t i = 0; i < n; ++i) rte_pktmbuf_free(lane.held[lane.head + i]);
  lane.head = lane.count = 0;
  lane.counters.dropped[static_cast<size_t>(why)] += n;
  return n;
}

}  // namespace uroce::tools
