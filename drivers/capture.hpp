// Capture of every frame the engine sends and receives (UROCE_PCAP or the
// config's `pcap` key) to a classic pcap file (link type Ethernet) that
// tshark and `uroce pcap-check` read.  Written with libpcap.
//
// Thread: the engine thread (one writer).  Frames are written as they
// pass; the file is flushed at most every `kFlushInterval` and on close.
#pragma once

#include <cstdint>
#include <string>

#include "drivers/result.hpp"

struct pcap;
struct pcap_dumper;
struct rte_mbuf;

namespace uroce::drivers {

class Capture {
 public:
  static constexpr uint64_t kFlushIntervalNs = 100'000'000;
  static constexpr int kSnapLen = 65535;

  Capture() = default;
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  Status open(const std::string& path);
  bool is_open() const noexcept { return dumper_ != nullptr; }
  void close();

  // Write one frame (all segments of `m`), timestamped `now_ns` (CLOCK_REALTIME).
  void write(const rte_mbuf* m, uint64_t realtime_ns) noexcept;
  void write(const uint8_t* data, size_t len, uint64_t realtime_ns) noexcept;
  // Flush when the last flush is older than kFlushIntervalNs.
  void maybe_flush(uint64_t realtime_ns) noexcept;

  uint64_t frames() const noexcept { return frames_; }

 private:
  pcap* handle_ = nullptr;
  pcap_dumper* dumper_ = nullptr;
  uint64_t frames_ = 0;
  uint64_t last_flush_ns_ = 0;
  bool dirty_ = false;
};

}  // namespace uroce::drivers
