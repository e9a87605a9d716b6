#include "drivers/capture.hpp"

#include <pcap/pcap.h>
#include <rte_mbuf.h>

#include <cerrno>

namespace uroce::drivers {

Capture::~Capture() { close(); }

Status Capture::open(const std::string& path) {
  close();
  handle_ = pcap_open_dead(DLT_EN10MB, kSnapLen);
  if (!handle_) return Error{ENOMEM, "pcap_open_dead failed"};
  dumper_ = pcap_dump_open(handle_, path.c_str());
  if (!dumper_) {
    Error e{EIO, "capture file " + path + ": " + pcap_geterr(handle_)};
    pcap_close(handle_);
    handle_ = nullptr;
    return e;
  }
  return {};
}

void Capture::close() {
  if (dumper_) {
    pcap_dump_flush(dumper_);
    pcap_dump_close(dumper_);
    dumper_ = nullptr;
  }
  if (handle_) {
    pcap_close(handle_);
    handle_ = nullptr;
  }
}

void Capture::write(const uint8_t* data, size_t len, uint64_t realtime_ns) noexcept {
  if (!dumper_) return;
  pcap_pkthdr h{};
  h.ts.tv_sec = static_cast<time_t>(realtime_ns / 1'000'000'000);
  h.ts.tv_usec = static_cast<suseconds_t>((realtime_ns % 1'000'000'000) / 1000);
  h.caplen = h.len = static_cast<bpf_u_int32>(len);
  pcap_dump(reinterpret_cast<u_char*>(dumper_), &h, data);
  ++frames_;
  dirty_ = true;
}

void Capture::write(const rte_mbuf* m, uint64_t realtime_ns) noexcept {
  if (!dumper_) return;
  if (m->nb_segs == 1) {
    write(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len, realtime_ns);
    return;
  }
  // Chained buffers (not produced by our own TX path) are linearized.
  uint8_t buf[kSnapLen];
  const uint32_t len = m->pkt_len < static_cast<uint32_t>(kSnapLen) ? m->pkt_len : kSnapLen;
  const void* p = rte_pktmbuf_read(m, 0, len, buf);
  if (p) write(static_cast<const uint8_t*>(p), len, realtime_ns);
}

void Capture::maybe_flush(uint64_t realtime_ns) noexcept {
  if (!dumper_ || !dirty_ || realtime_ns - last_flush_ns_ < kFlushIntervalNs) return;
  pcap_dump_flush(dumper_);
  last_flush_ns_ = realtime_ns;
  dirty_ = false;
}

}  // namespace uroce::drivers
