#include "tests/vectors/pcap_file.hpp"

#include <pcap/pcap.h>

#include <algorithm>

namespace uroce::test {

static_assert(kLinkEthernet == DLT_EN10MB);

PcapFile read_pcap(const std::filesystem::path& path) {
  PcapFile out;
  char err[PCAP_ERRBUF_SIZE] = {};
  pcap_t* p = pcap_open_offline(path.c_str(), err);
  if (p == nullptr) {
    out.error = err;
    return out;
  }
  out.linktype = pcap_datalink(p);
  pcap_pkthdr* hdr = nullptr;
  const u_char* data = nullptr;
  uint32_t n = 0;
  int rc;
  while ((rc = pcap_next_ex(p, &hdr, &data)) == 1) {
    PcapFrame f;
    f.number = ++n;
    f.wire_len = hdr->len;
    f.bytes.assign(data, data + hdr->caplen);
    out.frames.push_back(std::move(f));
  }
  if (rc == PCAP_ERROR) out.error = pcap_geterr(p);
  pcap_close(p);
  return out;
}

std::string linktype_name(int dlt) {
  const char* n = pcap_datalink_val_to_name(dlt);
  return n != nullptr ? n : "DLT " + std::to_string(dlt);
}

std::vector<std::filesystem::path> find_pcaps(const std::filesystem::path& root) {
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::recursive_directory_iterator(root)) {
    if (e.is_regular_file() && e.path().extension() == ".pcap") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace uroce::test
