// Fuzz target: the capture reader and checker (`uroce pcap-check`,
// tools/uroce/pcap_check.*) on any bytes: a report comes back, never a
// crash; a report that says the capture was read has counts that add up.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "tools/uroce/pcap_check.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace uroce::tools;
  CheckOptions o;
  const CheckReport r = check_bytes(std::span<const uint8_t>(data, size), "fuzz.pcap", o);
  if (r.roce + r.not_ethernet > r.frames) {
    std::fprintf(stderr, "fuzz-pcap: %llu RoCE + %llu not-Ethernet frames of %llu\n",
                 static_cast<unsigned long long>(r.roce), static_cast<unsigned long long>(r.not_ethernet),
                 static_cast<unsigned long long>(r.frames));
    std::abort();
  }
  return 0;
}
