// `uroce pcap-check` and the CNP (IBA Annex A17.9.3, Figure 6): a capture
// built here, in memory, of CNPs that keep every rule and of CNPs that
// each break one; and the ECN field of every packet counted.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "lib/wire/build.hpp"
#include "tools/uroce/pcap_check.hpp"

namespace uroce::tools {
namespace {

// A classic pcap (Ethernet) of `frames`.
std::vector<uint8_t> pcap_of(const std::vector<std::vector<uint8_t>>& frames) {
  std::vector<uint8_t> out;
  auto u32 = [&](uint32_t v) { for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i))); };
  auto u16 = [&](uint16_t v) { for (int i = 0; i < 2; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i))); };
  u32(0xA1B2C3D4), u16(2), u16(4), u32(0), u32(0), u32(65535), u32(1);  // DLT_EN10MB
  for (const auto& f : frames) {
    u32(0), u32(0), u32(static_cast<uint32_t>(f.size())), u32(static_cast<uint32_t>(f.size()));
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}

const std::vector<uint8_t> kZeros(16, 0);

wire::PktDesc cnp() {
  wire::PktDesc d;
  d.eth_src = {2, 0, 0, 0, 0, 1};
  d.eth_dst = {2, 0, 0, 0, 0, 2};
  d.src = wire::PktDesc::ipv4_mapped(0x0A000001);
  d.dst = wire::PktDesc::ipv4_mapped(0x0A000002);
  d.tos = 48 << 2;
  d.sport = 0xC001;
  d.opcode = wire::kCnpOpcode;
  d.dest_qp = Qpn(0x12);
  d.resv8a = 0x40;
  d.payload = kZeros;
  return d;
}

std::vector<uint8_t> frame(const wire::PktDesc& d) {
  std::vector<uint8_t> f(2048);
  f.resize(wire::build(f, d));
  EXPECT_FALSE(f.empty());
  return f;
}

TEST(PcapCheckCnp, GoodCnpsPassAndAreCounted) {
  wire::PktDesc plain = cnp();
  plain.resv8a = 0;  // the B bit is reserved in A17: a CNP without it is no failure
  wire::PktDesc data = cnp();
  data.opcode = wire::op::RC_SEND_ONLY;
  data.tos = 0x02;  // ECT(0)
  data.psn = Psn(5);
  wire::PktDesc marked = data;
  marked.tos = 0x03;  // CE
  const auto bytes = pcap_of({frame(cnp()), frame(plain), frame(data), frame(marked)});
  const CheckReport r = check_bytes(bytes, "mem", {});
  EXPECT_EQ(r.status(), FileStatus::Ok) << r.error;
  EXPECT_EQ(r.opcodes[wire::kCnpOpcode], 2u);
  EXPECT_EQ(r.cnp_failures, 0u);
  EXPECT_EQ(r.cnp_becn, 1u);
  EXPECT_EQ(r.ecn[0], 2u);  // the CNPs: Not-ECT
  EXPECT_EQ(r.ecn[2], 1u);  // ECT(0)
  EXPECT_EQ(r.ecn[3], 1u);  // CE
  EXPECT_EQ(r.cnp_ecn[0], 2u);
}

TEST(PcapCheckCnp, EachBrokenRuleIsAFailure) {
  struct Case { const char* field; void (*mutate)(wire::PktDesc&); };
  static const std::vector<uint8_t> kNonZero = [] { std::vector<uint8_t> v(16, 0); v[9] = 1; return v; }();
  static const std::vector<uint8_t> kShort(12, 0);
  const Case cases[] = {
      {"se", [](wire::PktDesc& d) { d.se = true; }},
      {"mig", [](wire::PktDesc& d) { d.mig = true; }},
      {"psn", [](wire::PktDesc& d) { d.psn = Psn(7); }},
      {"reserved_len", [](wire::PktDesc& d) { d.payload = kShort; }},
      {"reserved", [](wire::PktDesc& d) { d.payload = kNonZero; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    wire::PktDesc d = cnp();
    c.mutate(d);
    const CheckReport r = check_bytes(pcap_of({frame(cnp()), frame(d)}), "mem", {});
    EXPECT_EQ(r.status(), FileStatus::Failed);
    EXPECT_EQ(r.cnp_failures, 1u);
    ASSERT_EQ(r.failures.size(), 1u);
    EXPECT_EQ(r.failures[0].frame, 2u);
    const auto* rule = std::get_if<CnpRule>(&r.failures[0].detail);
    ASSERT_NE(rule, nullptr);
    EXPECT_EQ(rule->field, c.field);
    EXPECT_EQ(failure_kind_name(r.failures[0].detail), "cnp");
  }
}

}  // namespace
}  // namespace uroce::tools
