// lib/wire's decoding against tshark's, field by field, on the sample
// packets listed in tests/data/tshark/<set>/<name>.csv (written by
// scripts/gen-tshark-expect from tests/data/vectors/<set>/<name>.pcap).
//
//   vectors_tshark [gtest flags] TSHARK_DIR VECTORS_DIR
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "lib/wire/bth.hpp"
#include "lib/wire/bytes.hpp"
#include "lib/wire/ext.hpp"
#include "lib/wire/icrc.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/mad.hpp"
#include "lib/wire/pkt.hpp"
#include "lib/wire/udp.hpp"
#include "tests/vectors/pcap_file.hpp"

namespace uroce::test {
namespace {

namespace fs = std::filesystem;
using namespace uroce::wire;

// How tshark 4.0 prints a field.
enum class Fmt {
  Dec,       // "64"
  Hex,       // "0x0000000080010000": 0x and a fixed width
  HexBytes,  // "00000016": FT_BYTES, no prefix
  Ipv4,      // "10.1.16.61"
};

struct Frame {
  const uint8_t* f;
  const PktInfo& pi;
  std::optional<uint64_t> ext(Hdr h, const std::function<uint64_t(const uint8_t*)>& get) const {
    if (!pi.op().has(h)) return std::nullopt;
    return get(f + pi.ext_off(h));
  }
  bool ipv4() const { return pi.l3 == L3::IPv4; }
  // tshark decodes a MAD on every UD datagram to QP1 (the GSI).
  bool mad() const {
    return pi.op().transport == Transport::UD && pi.dest_qp == kQp1 && pi.payload_len >= MadHdrC::kSize;
  }
};

using Getter = std::function<std::optional<uint64_t>(const Frame&)>;

struct Field {
  std::string_view name;
  Fmt fmt;
  Getter ours;  // nullopt: the field is absent from our decoding
};

std::optional<uint64_t> v(uint64_t x) { return x; }

const std::vector<Field>& fields() {
  static const std::vector<Field> kFields = {
      {"ip.src", Fmt::Ipv4, [](const Frame& p) { return p.ipv4() ? v(Ipv4C(p.f + p.pi.l3_off).src()) : std::nullopt; }},
      {"ip.dst", Fmt::Ipv4, [](const Frame& p) { return p.ipv4() ? v(Ipv4C(p.f + p.pi.l3_off).dst()) : std::nullopt; }},
      {"ip.dsfield", Fmt::Hex, [](const Frame& p) { return p.ipv4() ? v(Ipv4C(p.f + p.pi.l3_off).tos()) : std::nullopt; }},
      {"ip.ttl", Fmt::Dec, [](const Frame& p) { return p.ipv4() ? v(Ipv4C(p.f + p.pi.l3_off).ttl()) : std::nullopt; }},
      {"ip.flags.df", Fmt::Dec, [](const Frame& p) { return p.ipv4() ? v(Ipv4C(p.f + p.pi.l3_off).df()) : std::nullopt; }},
      {"udp.srcport", Fmt::Dec, [](const Frame& p) { return v(UdpC(p.f + p.pi.l4_off).src_port()); }},
      {"udp.dstport", Fmt::Dec, [](const Frame& p) { return v(UdpC(p.f + p.pi.l4_off).dst_port()); }},
      {"udp.length", Fmt::Dec, [](const Frame& p) { return v(UdpC(p.f + p.pi.l4_off).length()); }},
      {"udp.checksum", Fmt::Hex, [](const Frame& p) { return v(UdpC(p.f + p.pi.l4_off).checksum()); }},
      {"infiniband.bth.opcode", Fmt::Dec, [](const Frame& p) { return v(p.pi.opcode); }},
      {"infiniband.bth.se", Fmt::Dec, [](const Frame& p) { return v(BthC(p.f + p.pi.bth_off).se()); }},
      {"infiniband.bth.m", Fmt::Dec, [](const Frame& p) { return v(BthC(p.f + p.pi.bth_off).mig()); }},
      {"infiniband.bth.padcnt", Fmt::Dec, [](const Frame& p) { return v(p.pi.pad); }},
      {"infiniband.bth.tver", Fmt::Dec, [](const Frame& p) { return v(BthC(p.f + p.pi.bth_off).tver()); }},
      {"infiniband.bth.p_key", Fmt::Dec, [](const Frame& p) { return v(BthC(p.f + p.pi.bth_off).pkey().value()); }},
      {"infiniband.bth.destqp", Fmt::Hex, [](const Frame& p) { return v(p.pi.dest_qp.value()); }},
      {"infiniband.bth.a", Fmt::Dec, [](const Frame& p) { return v(BthC(p.f + p.pi.bth_off).ack_req()); }},
      {"infiniband.bth.psn", Fmt::Dec, [](const Frame& p) { return v(p.pi.psn.value()); }},
      // tshark names the AtomicETH's VA and R_Key reth.va and reth.r_key.
      {"infiniband.reth.va", Fmt::Hex,
       [](const Frame& p) {
         if (auto r = p.ext(kHdrReth, [](const uint8_t* h) { return RethC(h).va(); })) return r;
         return p.ext(kHdrAtomicEth, [](const uint8_t* h) { return AtomicEthC(h).va(); });
       }},
      {"infiniband.reth.r_key", Fmt::Hex,
       [](const Frame& p) {
         if (auto r = p.ext(kHdrReth, [](const uint8_t* h) { return uint64_t{RethC(h).rkey().value()}; })) return r;
         return p.ext(kHdrAtomicEth, [](const uint8_t* h) { return uint64_t{AtomicEthC(h).rkey().value()}; });
       }},
      {"infiniband.reth.dmalen", Fmt::Dec,
       [](const Frame& p) { return p.ext(kHdrReth, [](const uint8_t* h) { return uint64_t{RethC(h).dma_len()}; }); }},
      {"infiniband.aeth.syndrome", Fmt::Dec,
       [](const Frame& p) { return p.ext(kHdrAeth, [](const uint8_t* h) { return uint64_t{AethC(h).syndrome()}; }); }},
      {"infiniband.aeth.msn", Fmt::Dec,
       [](const Frame& p) { return p.ext(kHdrAeth, [](const uint8_t* h) { return uint64_t{AethC(h).msn().value()}; }); }},
      {"infiniband.atomiceth.swapdt", Fmt::Dec,
       [](const Frame& p) { return p.ext(kHdrAtomicEth, [](const uint8_t* h) { return AtomicEthC(h).swap_add(); }); }},
      {"infiniband.atomiceth.cmpdt", Fmt::Dec,
       [](const Frame& p) { return p.ext(kHdrAtomicEth, [](const uint8_t* h) { return AtomicEthC(h).compare(); }); }},
      {"infiniband.atomicacketh.origremdt", Fmt::Dec,
       [](const Frame& p) { return p.ext(kHdrAtomicAckEth, [](const uint8_t* h) { return AtomicAckEthC(h).orig(); }); }},
      {"infiniband.immdt", Fmt::HexBytes,
       [](const Frame& p) { return p.ext(kHdrImmDt, [](const uint8_t* h) { return uint64_t{ImmDtC(h).imm()}; }); }},
      {"infiniband.ieth", Fmt::Hex,
       [](const Frame& p) { return p.ext(kHdrIeth, [](const uint8_t* h) { return uint64_t{IethC(h).rkey().value()}; }); }},
      // Q_Key printed as a 64-bit value (0x0000000080010000).
      {"infiniband.deth.q_key", Fmt::Hex,
       [](const Frame& p) { return p.ext(kHdrDeth, [](const uint8_t* h) { return uint64_t{DethC(h).qkey().value()}; }); }},
      {"infiniband.deth.srcqp", Fmt::Hex,
       [](const Frame& p) { return p.ext(kHdrDeth, [](const uint8_t* h) { return uint64_t{DethC(h).src_qp().value()}; }); }},
      {"infiniband.mad.baseversion", Fmt::Hex,
       [](const Frame& p) { return p.mad() ? v(MadHdrC(p.f + p.pi.payload_off).base_version()) : std::nullopt; }},
      {"infiniband.mad.mgmtclass", Fmt::Hex,
       [](const Frame& p) { return p.mad() ? v(MadHdrC(p.f + p.pi.payload_off).mgmt_class()) : std::nullopt; }},
      {"infiniband.mad.classversion", Fmt::Hex,
       [](const Frame& p) { return p.mad() ? v(MadHdrC(p.f + p.pi.payload_off).class_version()) : std::nullopt; }},
      {"infiniband.mad.method", Fmt::Hex,
       [](const Frame& p) { return p.mad() ? v(MadHdrC(p.f + p.pi.payload_off).method()) : std::nullopt; }},
      {"infiniband.mad.status", Fmt::Hex,
       [](const Frame& p) { return p.mad() ? v(MadHdrC(p.f + p.pi.payload_off).status()) : std::nullopt; }},
      {"infiniband.mad.transactionid", Fmt::Hex,
       [](const Frame& p) { return p.mad() ? v(MadHdrC(p.f + p.pi.payload_off).tid()) : std::nullopt; }},
      {"infiniband.mad.attributeid", Fmt::Hex,
       [](const Frame& p) { return p.mad() ? v(MadHdrC(p.f + p.pi.payload_off).attr_id()) : std::nullopt; }},
      {"infiniband.mad.attributemodifier", Fmt::Hex,
       [](const Frame& p) { return p.mad() ? v(MadHdrC(p.f + p.pi.payload_off).attr_mod()) : std::nullopt; }},
      // tshark shows the 4 ICRC bytes read big-endian: byte-swapped
      // relative to the CRC value.  Compared with the ICRC we compute.
      {"infiniband.invariant.crc", Fmt::Hex,
       [](const Frame& p) { return v(byteswap(compute_icrc(p.f, p.pi))); }},
  };
  return kFields;
}

// Parses tshark's text strictly in the format the field is printed in;
// nullopt when the text is not in that format.
std::optional<uint64_t> parse_value(std::string_view s, Fmt fmt) {
  auto digits = [](std::string_view d, int base) -> std::optional<uint64_t> {
    if (d.empty() || d.size() > (base == 16 ? 16u : 20u)) return std::nullopt;
    uint64_t x = 0;
    for (char c : d) {
      int k;
      if (c >= '0' && c <= '9') {
        k = c - '0';
      } else if (base == 16 && c >= 'a' && c <= 'f') {
        k = c - 'a' + 10;
      } else {
        return std::nullopt;
      }
      x = x * static_cast<uint64_t>(base) + static_cast<uint64_t>(k);
    }
    return x;
  };
  switch (fmt) {
    case Fmt::Dec:
      return digits(s, 10);
    case Fmt::Hex:
      if (s.substr(0, 2) != "0x") return std::nullopt;
      return digits(s.substr(2), 16);
    case Fmt::HexBytes:
      return digits(s, 16);
    case Fmt::Ipv4: {
      uint64_t a = 0;
      int parts = 0;
      size_t at = 0;
      while (at <= s.size() && parts < 4) {
        const size_t dot = std::min(s.find('.', at), s.size());
        const auto octet = digits(s.substr(at, dot - at), 10);
        if (!octet || *octet > 255) return std::nullopt;
        a = a << 8 | *octet;
        ++parts;
        at = dot + 1;
      }
      if (parts != 4 || at != s.size() + 1) return std::nullopt;
      return a;
    }
  }
  return std::nullopt;
}

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : line) {
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else if (c != '\r') {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

struct Totals {
  std::map<std::string, unsigned> present;  // field -> rows where both sides had it
  unsigned rows = 0;
  unsigned files_registered = 0;
  unsigned files_done = 0;
};

Totals& totals() {
  static Totals t;
  return t;
}

class TsharkCompare : public ::testing::Test {
 public:
  TsharkCompare(fs::path csv, fs::path pcap, std::string rel)
      : csv_(std::move(csv)), pcap_(std::move(pcap)), rel_(std::move(rel)) {}

  void TestBody() override {
    std::ifstream in(csv_);
    ASSERT_TRUE(in) << csv_;
    std::string line;
    ASSERT_TRUE(std::getline(in, line)) << csv_ << " is empty";
    const std::vector<std::string> header = split_csv_line(line);
    ASSERT_FALSE(header.empty());
    ASSERT_EQ(header[0], "frame.number");
    // Every column is one we compare: a column added to the generator
    // without a comparison here fails.
    std::vector<const Field*> cols(header.size(), nullptr);
    for (size_t i = 1; i < header.size(); ++i) {
      for (const Field& fd : fields()) {
        if (fd.name == header[i]) cols[i] = &fd;
      }
      EXPECT_NE(cols[i], nullptr) << "no comparison for column " << header[i];
    }
    for (const Field& fd : fields()) {
      EXPECT_NE(std::find(header.begin(), header.end(), fd.name), header.end()) << rel_ << " lacks " << fd.name;
    }
    const PcapFile pf = read_pcap(pcap_);
    ASSERT_TRUE(pf.error.empty()) << pcap_ << ": " << pf.error;
    ASSERT_EQ(pf.linktype, kLinkEthernet);

    unsigned rows = 0, compared = 0, mismatches = 0;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      const std::vector<std::string> cells = split_csv_line(line);
      ASSERT_EQ(cells.size(), header.size()) << rel_ << ": " << line;
      const auto number = parse_value(cells[0], Fmt::Dec);
      ASSERT_TRUE(number && *number >= 1 && *number <= pf.frames.size()) << rel_ << ": frame " << cells[0];
      const PcapFrame& fr = pf.frames[*number - 1];
      ASSERT_EQ(fr.number, *number);
      const PktInfo pi = parse(fr.bytes);
      ++rows;
      if (pi.cls != FrameClass::RoceV2) {
        ADD_FAILURE() << rel_ << " frame " << *number << ": tshark decodes RoCE, we say "
                      << frame_class_name(pi.cls) << " " << parse_error_name(pi.error);
        continue;
      }
      const Frame p{fr.bytes.data(), pi};
      for (size_t i = 1; i < cells.size(); ++i) {
        if (cols[i] == nullptr) continue;
        const Field& fd = *cols[i];
        const std::optional<uint64_t> ours = fd.ours(p);
        const std::string& theirs_text = cells[i];
        std::string problem;
        if (theirs_text.empty()) {
          if (ours) problem = "tshark has no value, we decode " + std::to_string(*ours);
        } else {
          const std::optional<uint64_t> theirs = parse_value(theirs_text, fd.fmt);
          if (!theirs) {
            problem = "tshark's text '" + theirs_text + "' is not in the expected format";
          } else if (!ours) {
            problem = "tshark decodes " + theirs_text + ", the field is absent from ours";
          } else if (*ours != *theirs) {
            char buf[64];
            std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(*ours));
            problem = "tshark " + theirs_text + ", ours " + std::to_string(*ours) + " (" + buf + ")";
          } else {
            ++compared;
            ++totals().present[std::string(fd.name)];
          }
        }
        if (!problem.empty()) {
          ++mismatches;
          if (mismatches <= 20) {
            ADD_FAILURE() << rel_ << " frame " << *number << " (" << pi.op().name << ") " << fd.name << ": " << problem;
          }
        }
      }
      // The ICRC tshark shows is the one on the wire, and it verifies.
      EXPECT_TRUE(verify_icrc(fr.bytes.data(), pi)) << rel_ << " frame " << *number;
    }
    EXPECT_EQ(mismatches, 0u) << rel_;
    EXPECT_GT(rows, 0u) << rel_ << " lists no frame";
    totals().rows += rows;
    ++totals().files_done;
    std::printf("%-44s %4u frames, %5u values equal to tshark's\n", rel_.c_str(), rows, compared);
    RecordProperty("frames", static_cast<int>(rows));
    RecordProperty("values", static_cast<int>(compared));
  }

 private:
  fs::path csv_, pcap_;
  std::string rel_;
};

// After all files: every field was actually compared somewhere, so no
// getter can be silently dead.  Registered last.
class CoverageCheck : public ::testing::Test {
 public:
  void TestBody() override {
    if (totals().files_done != totals().files_registered) {
      GTEST_SKIP() << "needs every file compared first (filtered or shuffled run)";
    }
    // Not present in any copied capture: IETH (no SEND_WITH_INVALIDATE).
    static constexpr std::string_view kNeverSeen[] = {"infiniband.ieth"};
    for (const Field& fd : fields()) {
      const bool exempt = std::find(std::begin(kNeverSeen), std::end(kNeverSeen), fd.name) != std::end(kNeverSeen);
      const unsigned n = totals().present.count(std::string(fd.name)) ? totals().present[std::string(fd.name)] : 0;
      if (exempt) {
        EXPECT_EQ(n, 0u) << fd.name << " now appears in the data: take it off kNeverSeen";
      } else {
        EXPECT_GT(n, 0u) << fd.name << " was never compared";
      }
    }
    std::printf("fields compared (rows where both decoders had a value):\n");
    for (const auto& [name, n] : totals().present) std::printf("  %-36s %u\n", name.c_str(), n);
  }
};

}  // namespace
}  // namespace uroce::test

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  ::testing::InitGoogleTest(&argc, argv);
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s [gtest flags] TSHARK_DIR VECTORS_DIR\n", argv[0]);
    return 2;
  }
  const fs::path tshark_dir = argv[1], vectors_dir = argv[2];
  std::vector<fs::path> csvs;
  if (fs::is_directory(tshark_dir)) {
    for (const auto& e : fs::recursive_directory_iterator(tshark_dir)) {
      if (e.is_regular_file() && e.path().extension() == ".csv") csvs.push_back(e.path());
    }
  }
  std::sort(csvs.begin(), csvs.end());
  if (csvs.empty()) {
    std::fprintf(stderr, "%s: no .csv files (run scripts/gen-tshark-expect)\n", tshark_dir.c_str());
    return 1;
  }
  for (const fs::path& csv : csvs) {
    const fs::path rel = fs::relative(csv, tshark_dir);
    fs::path pcap = vectors_dir / rel;
    pcap.replace_extension(".pcap");
    std::string name;
    for (char ch : rel.generic_string()) name.push_back(std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_');
    ::testing::RegisterTest("Tshark", name.c_str(), nullptr, rel.generic_string().c_str(), __FILE__, __LINE__,
                            [csv, pcap, r = rel.generic_string()]() -> ::testing::Test* {
                              return new uroce::test::TsharkCompare(csv, pcap, r);
                            });
  }
  uroce::test::totals().files_registered = static_cast<unsigned>(csvs.size());
  ::testing::RegisterTest("Tshark", "EveryFieldCompared", nullptr, nullptr, __FILE__, __LINE__,
                          []() -> ::testing::Test* { return new uroce::test::CoverageCheck(); });
  return RUN_ALL_TESTS();
}
