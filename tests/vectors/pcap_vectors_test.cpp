// Real captures: every RoCEv2 frame parses, its ICRC verifies, and
// describe() + build() reproduces it byte for byte.
//
//   vectors_pcap [gtest flags] [--shared] [--label NAME] DIR
//
// One test per *.pcap under DIR.  With --shared, a missing DIR is a skip
// (exit 77, "skipped: NAME not found"): the third-party captures live
// outside the repository, in ../shared/vectors, and are never copied.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "lib/wire/build.hpp"
#include "lib/wire/bytes.hpp"
#include "lib/wire/mad.hpp"
#include "lib/wire/opcode.hpp"
#include "lib/wire/pkt.hpp"
#include "tests/common/test_util.hpp"
#include "tests/vectors/pcap_file.hpp"

namespace uroce::test {
namespace {

namespace fs = std::filesystem;
using namespace uroce::wire;

// Frame counts from the captures' own records (../shared/vectors/README.md
// and rxe-vm/rxe-pcaps.txt, counted there with tshark).  Keys are paths
// relative to the vectors directory.
struct Expected {
  std::string_view file;
  unsigned frames;
  unsigned rocev2;
  unsigned cm_mads;
  unsigned rocev1 = 0;
};

constexpr Expected kExpected[] = {
    {"rxe-linlinw5/rdma_cm.pcap", 96, 96, 12},
    {"rxe-linlinw5/rping.pcap", 65, 65, 5},
    {"rxe-linlinw5/pingpong_rc.pcap", 31, 20, 0},
    {"rxe-linlinw5/pingpong_uc.pcap", 21, 10, 0},
    {"rxe-linlinw5/pingpong_ud.pcap", 21, 10, 0},
    {"rxe-linlinw5/rdma_atomic_bw.pcap", 48, 10, 0},
    {"rxe-linlinw5/rdma_read_bw.pcap", 60, 20, 0},
    {"rxe-linlinw5/rdma_read_lat.pcap", 38, 10, 0},
    {"rxe-linlinw5/rdma_send_bw.pcap", 50, 20, 0},
    {"rxe-linlinw5/rdma_write_bw.pcap", 60, 20, 0},
    {"rxe-linlinw5/rdma_write_lat.pcap", 45, 20, 0},
    {"rxe-linlinw5/nccl_ring2_node0.pcap", 275, 184, 0},
    {"rxe-vm/rxe-rc-pingpong.pcap", 94, 80, 0},
    {"rxe-vm/rxe-rc-pingpong-small.pcap", 45, 32, 0},
    {"rxe-vm/rxe-ud-pingpong.pcap", 29, 16, 0},
    {"rxe-vm/rxe-rping.pcap", 55, 53, 5},
    {"rxe-vm/rxe-ucmatose.pcap", 23, 21, 5},
    {"rxe-vm/rxe-udaddy-sidr.pcap", 12, 10, 2},
    {"rxe-vm/rxe-cm-rej.pcap", 4, 2, 2},
    {"rxe-vm/rxe-send-lat.pcap", 112, 80, 0},
    {"rxe-vm/rxe-send-lat-rdmacm.pcap", 136, 134, 10},
    {"rxe-vm/rxe-write-bw.pcap", 142, 100, 0},
    {"rxe-vm/rxe-read-lat.pcap", 83, 50, 0},
    {"rxe-vm/rxe-atomic-lat.pcap", 51, 20, 0},
    {"rxe-vm/rxe-rc-pingpong-mtu4096.pcap", 37, 24, 0},
    {"rxe-vm/rxe-host-peer-cm-req.pcap", 14, 5, 5},
    {"connectx-magnate3/nvme-discover.pcap", 65, 61, 5},
    {"connectx-magnate3/nvme-discover2.pcap", 31, 31, 5},
    {"connectx-magnate3/ibdump-write.pcap", 17, 17, 5},
    {"connectx-magnate3/ibdump-read2.pcap", 16, 13, 5},
    {"connectx-magnate3/ibdump-send.pcap", 9, 9, 5},
    {"connectx-magnate3/ib_send_bw_over_roce.pcap", 45, 10, 0},
    {"connectx-magnate3/nvme-rdma-25echoTo27.pcap", 45, 45, 0},
    {"connectx-magnate3/rocev2_test.pcap", 708, 708, 0},
    {"connectx-magnate3/rocev1_rocev2_mixed_test.pcap", 624, 301, 0, 323},
    {"hns-oferby/roce.pcap", 123, 105, 0},
};

const Expected* expected_for(std::string_view rel) {
  for (const Expected& e : kExpected) {
    if (e.file == rel) return &e;
  }
  return nullptr;
}

// A classification that shares nothing with parse(): EtherType (through
// any 802.1Q/802.1ad tags), IP protocol, UDP destination port.
enum class Raw { RoceV2, RoceV1, Other };

Raw classify_raw(const std::vector<uint8_t>& f) {
  auto be16 = [&](size_t off) -> int { return off + 2 <= f.size() ? f[off] << 8 | f[off + 1] : -1; };
  size_t off = 12;
  int type = be16(off);
  while (type == 0x8100 || type == 0x88A8) {
    off += 4;
    type = be16(off);
  }
  off += 2;
  if (type == 0x8915) return Raw::RoceV1;
  size_t udp;
  if (type == 0x0800 && off + 20 <= f.size()) {
    if (f[off + 9] != 17) return Raw::Other;
    udp = off + (f[off] & 0x0F) * 4u;
  } else if (type == 0x86DD && off + 40 <= f.size()) {
    if (f[off + 6] != 17) return Raw::Other;
    udp = off + 40;
  } else {
    return Raw::Other;
  }
  return be16(udp + 2) == 4791 ? Raw::RoceV2 : Raw::Other;
}

bool is_cm_mad(const uint8_t* f, const PktInfo& pi) {
  return pi.opcode == op::UD_SEND_ONLY && pi.dest_qp == kQp1 && pi.payload_len >= MadHdrC::kSize &&
         MadHdrC(f + pi.payload_off).mgmt_class() == kMgmtClassCm;
}

struct Counts {
  std::string file;
  std::string note;
  unsigned frames = 0, rocev2 = 0, icrc_ok = 0, rebuilt = 0, cm = 0, rocev1 = 0, other = 0;
  std::map<std::string_view, unsigned> opcodes;
};

std::vector<Counts>& all_counts() {
  static std::vector<Counts> v;
  return v;
}

class PcapVectors : public ::testing::Test {
 public:
  PcapVectors(fs::path path, std::string rel) : path_(std::move(path)), rel_(std::move(rel)) {}

  void TestBody() override {
    const PcapFile pf = read_pcap(path_);
    ASSERT_TRUE(pf.error.empty()) << path_ << ": " << pf.error;
    Counts c;
    c.file = rel_;
    if (pf.linktype != kLinkEthernet) {
      c.note = "not Ethernet (" + linktype_name(pf.linktype) + "), not read";
      all_counts().push_back(c);
      GTEST_SKIP() << rel_ << ": link type " << linktype_name(pf.linktype) << ", not Ethernet";
    }
    unsigned reported = 0;
    auto report = [&](const PcapFrame& fr, const std::string& what) {
      if (++reported <= 10) ADD_FAILURE() << rel_ << " frame " << fr.number << ": " << what;
    };
    for (const PcapFrame& fr : pf.frames) {
      ++c.frames;
      const std::vector<uint8_t>& f = fr.bytes;
      if (fr.wire_len != f.size()) {
        report(fr, "captured " + std::to_string(f.size()) + " of " + std::to_string(fr.wire_len) + " bytes");
        continue;
      }
      const PktInfo pi = parse(f);
      const Raw raw = classify_raw(f);
      if (pi.cls == FrameClass::Malformed) {
        report(fr, "malformed: " + std::string(parse_error_name(pi.error)));
        continue;
      }
      if (raw == Raw::RoceV1) {
        ++c.rocev1;
        if (pi.cls != FrameClass::OtherEther) report(fr, "RoCEv1 frame not classed other_ethertype");
        continue;
      }
      if (raw != Raw::RoceV2) {
        ++c.other;
        if (pi.cls == FrameClass::RoceV2) report(fr, "parsed as RoCEv2 but is not UDP to 4791");
        continue;
      }
      if (pi.cls != FrameClass::RoceV2) {
        report(fr, "UDP to 4791 parsed as " + std::string(frame_class_name(pi.cls)));
        continue;
      }
      ++c.rocev2;
      ++c.opcodes[pi.op().valid ? pi.op().name : std::string_view("(unknown)")];
      if (!pi.opcode_known) report(fr, "opcode " + std::to_string(pi.opcode) + " not in the table");
      if (is_cm_mad(f.data(), pi)) ++c.cm;
      if (verify_icrc(f.data(), pi)) {
        ++c.icrc_ok;
      } else {
        report(fr, "ICRC does not verify");
      }
      const Bytes again = build_frame(describe(f.data(), pi));
      if (again == f) {
        ++c.rebuilt;
      } else {
        size_t at = 0;
        while (at < std::min(again.size(), f.size()) && again[at] == f[at]) ++at;
        report(fr, "describe()+build() differs at byte " + std::to_string(at) + " (" +
                       std::to_string(again.size()) + " vs " + std::to_string(f.size()) + " bytes)");
      }
    }
    EXPECT_EQ(c.icrc_ok, c.rocev2) << rel_;
    EXPECT_EQ(c.rebuilt, c.rocev2) << rel_;
    EXPECT_GT(c.frames, 0u) << rel_ << " holds no frame";
    if (const Expected* e = expected_for(rel_)) {
      EXPECT_EQ(c.frames, e->frames) << rel_;
      EXPECT_EQ(c.rocev2, e->rocev2) << rel_;
      EXPECT_EQ(c.cm, e->cm_mads) << rel_;
      EXPECT_EQ(c.rocev1, e->rocev1) << rel_;
    } else {
      c.note = "no recorded counts";
    }
    RecordProperty("frames", static_cast<int>(c.frames));
    RecordProperty("rocev2", static_cast<int>(c.rocev2));
    RecordProperty("icrc_ok", static_cast<int>(c.icrc_ok));
    RecordProperty("rebuilt", static_cast<int>(c.rebuilt));
    all_counts().push_back(c);
  }

 private:
  fs::path path_;
  std::string rel_;
};

std::string test_name(const std::string& rel) {
  std::string n;
  for (char ch : rel) n.push_back((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ? ch : '_');
  return n;
}

void print_summary(const std::string& label) {
  unsigned files = 0, frames = 0, roce = 0, ok = 0, rebuilt = 0, cm = 0;
  std::printf("\n%-52s %7s %7s %7s %7s %5s %5s\n", ("captures in " + label).c_str(), "frames", "RoCEv2", "ICRC ok",
              "rebuilt", "CM", "v1");
  for (const Counts& c : all_counts()) {
    std::printf("%-52s %7u %7u %7u %7u %5u %5u  %s\n", c.file.c_str(), c.frames, c.rocev2, c.icrc_ok, c.rebuilt,
                c.cm, c.rocev1, c.note.c_str());
    ++files;
    frames += c.frames;
    roce += c.rocev2;
    ok += c.icrc_ok;
    rebuilt += c.rebuilt;
    cm += c.cm;
  }
  std::printf("%-52s %7u %7u %7u %7u %5u\n", ("total (" + std::to_string(files) + " files)").c_str(), frames, roce,
              ok, rebuilt, cm);
  std::map<std::string_view, unsigned> ops;
  for (const Counts& c : all_counts()) {
    for (const auto& [name, n] : c.opcodes) ops[name] += n;
  }
  std::printf("opcodes:");
  for (const auto& [name, n] : ops) std::printf(" %.*s=%u", static_cast<int>(name.size()), name.data(), n);
  std::printf("\n");
}

}  // namespace
}  // namespace uroce::test

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  ::testing::InitGoogleTest(&argc, argv);
  bool shared = false;
  std::string label;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--shared") {
      shared = true;
    } else if (a == "--label" && i + 1 < argc) {
      label = argv[++i];
    } else if (!a.empty() && a[0] != '-' && dir.empty()) {
      dir = argv[i];
    } else {
      std::fprintf(stderr, "usage: %s [gtest flags] [--shared] [--label NAME] DIR\n", argv[0]);
      return 2;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "usage: %s [gtest flags] [--shared] [--label NAME] DIR\n", argv[0]);
    return 2;
  }
  if (label.empty()) label = dir;
  if (!fs::is_directory(dir)) {
    if (shared) {
      std::printf("skipped: %s not found\n", label.c_str());
      std::printf("(looked in %s; the third-party captures are read from there, never copied)\n", dir.c_str());
      return 77;
    }
    std::fprintf(stderr, "%s: no such directory\n", dir.c_str());
    return 1;
  }
  const auto files = uroce::test::find_pcaps(dir);
  if (files.empty()) {
    std::fprintf(stderr, "%s: no .pcap files\n", dir.c_str());
    return 1;
  }
  for (const fs::path& p : files) {
    const std::string rel = fs::relative(p, dir).generic_string();
    ::testing::RegisterTest(shared ? "SharedVectors" : "Vectors", uroce::test::test_name(rel).c_str(), nullptr,
                            rel.c_str(), __FILE__, __LINE__,
                            [p, rel]() -> ::testing::Test* { return new uroce::test::PcapVectors(p, rel); });
  }
  const int rc = RUN_ALL_TESTS();
  uroce::test::print_summary(label);
  return rc;
}
