// Whole-file pcap reading through libpcap, for the vectors suite.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace uroce::test {

struct PcapFrame {
  uint32_t number = 0;  // 1-based, as tshark's frame.number
  uint32_t wire_len = 0;
  std::vector<uint8_t> bytes;  // caplen bytes
};

inline constexpr int kLinkEthernet = 1;  // DLT_EN10MB

struct PcapFile {
  int linktype = -1;  // DLT_*
  std::vector<PcapFrame> frames;
  std::string error;  // non-empty when the file could not be read
};

PcapFile read_pcap(const std::filesystem::path& path);
std::string linktype_name(int dlt);

// Every *.pcap under `root`, recursively, sorted by path.
std::vector<std::filesystem::path> find_pcaps(const std::filesystem::path& root);

}  // namespace uroce::test
