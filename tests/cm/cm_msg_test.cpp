// CM messages against their field tables, the rdma_cm compatibility
// pieces, and every CM MAD of the real captures (suite 'unit'):
//   - each table's fields lie inside the 232-byte body and never overlap;
//     every setter writes its own bits and no others; getters read back;
//   - every CM MAD in tests/data/vectors and ../shared/vectors decodes and
//     re-encodes byte for byte (Ethernet RoCEv2 and native-IB ERF files);
//   - field values seen in the rxe-vm captures (Wireshark's decoding);
//   - the rdma_cm header and service ID we build equal Linux's bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "cm/msg.hpp"
#include "cm/cma_hdr.hpp"
#include "lib/wire/pkt.hpp"
#include "tests/vectors/pcap_file.hpp"

namespace uroce::test {
namespace {

namespace fs = std::filesystem;
using namespace uroce::cm;

// ---- field tables -------------------------------------------------------------

struct Table {
  const char* name;
  std::span<const FieldInfo> fields;
};

const Table kTables[] = {
    {"REQ", kReqFields},         {"MRA", kMraFields},   {"REJ", kRejFields},
    {"REP", kRepFields},         {"RTU", kRtuFields},   {"DREQ", kDreqFields},
    {"DREP", kDrepFields},       {"SIDR_REQ", kSidrReqFields}, {"SIDR_REP", kSidrRepFields},
};

// Bit i of the body: byte i/8, bit i%8 counted from the MSB.
std::vector<int> owners(const Table& t) {
  std::vector<int> own(kCmBodySize * 8, -1);
  for (size_t f = 0; f < t.fields.size(); ++f) {
    const FieldInfo& fi = t.fields[f];
    const size_t first = size_t{fi.byte} * 8 + fi.bit;
    for (size_t b = first; b < first + fi.width; ++b) {
      EXPECT_LT(b, own.size()) << t.name << "." << fi.name << " runs past the body";
      if (b >= own.size()) break;
      EXPECT_EQ(own[b], -1) << t.name << "." << fi.name << " overlaps "
                            << (own[b] >= 0 ? t.fields[own[b]].name : "");
      own[b] = static_cast<int>(f);
    }
  }
  return own;
}

TEST(CmFieldTables, InsideTheBodyAndDisjoint) {
  for (const Table& t : kTables) {
    SCOPED_TRACE(t.name);
    const std::vector<int> own = owners(t);
    // Private data is the last field and ends the body.
    EXPECT_EQ(std::string_view(t.fields.back().name), "private_data");
    EXPECT_EQ(t.fields.back().byte + t.fields.back().width / 8, kCmBodySize);
    EXPECT_NE(own.back(), -1);
  }
}

TEST(CmFieldTables, EverySetterWritesOnlyItsBits) {
  std::mt19937_64 rng(7);
  for (const Table& t : kTables) {
    SCOPED_TRACE(t.name);
    const std::vector<int> own = owners(t);
    for (size_t f = 0; f < t.fields.size(); ++f) {
      const FieldInfo& fi = t.fields[f];
      if (fi.blob) continue;
      SCOPED_TRACE(fi.name);
      std::array<uint8_t, kCmBodySize> body;
      for (auto& b : body) b = static_cast<uint8_t>(rng());
      const auto before = body;
      const Field fld{fi.byte, fi.bit, static_cast<uint8_t>(fi.width)};
      const uint64_t v = rng() & field_mask(fi.width);
      set_field(body.data(), fld, v);
      EXPECT_EQ(get_field(body.data(), fld), v);
      for (size_t bit = 0; bit < kCmBodySize * 8; ++bit) {
        const bool was = (before[bit / 8] >> (7 - bit % 8)) & 1;
        const bool is = (body[bit / 8] >> (7 - bit % 8)) & 1;
        if (own[bit] != static_cast<int>(f)) {
          ASSERT_EQ(was, is) << "bit " << bit << " changed";
        }
      }
      // All ones then all zeros: exactly `width` bits move.
      set_field(body.data(), fld, ~uint64_t{0});
      EXPECT_EQ(get_field(body.data(), fld), field_mask(fi.width));
    }
  }
}

// Spot checks of the generated accessors against hand-placed bytes.
TEST(CmFieldTables, AccessorsMatchTheSpecLayout) {
  std::array<uint8_t, kCmBodySize> b{};
  ReqView req(b.data());
  req.set_starting_psn(0xABCDEF);
  req.set_local_cm_response_timeout(0x14);
  req.set_retry_count(5);
  EXPECT_EQ(b[44], 0xAB);
  EXPECT_EQ(b[45], 0xCD);
  EXPECT_EQ(b[46], 0xEF);
  EXPECT_EQ(b[47], 0xA5);  // 10100 101: timeout 0x14, retry count 5
  req.set_primary_flow_label(0x001c9);
  req.set_primary_packet_rate(0x1c);
  EXPECT_EQ(b[88], 0x00);
  EXPECT_EQ(b[89], 0x1c);
  EXPECT_EQ(b[90], 0x90);
  EXPECT_EQ(b[91], 0x1c);
  req.set_service_id(0x0000000001061d2fULL);
  EXPECT_EQ(b[13], 0x06);
  EXPECT_EQ(b[15], 0x2f);

  b.fill(0);
  RepView rep(b.data());
  rep.set_local_ca_guid(0x505400fffe910012ULL);
  rep.set_rnr_retry_count(7);
  rep.set_target_ack_delay(0x0f);
  EXPECT_EQ(b[28], 0x50);
  EXPECT_EQ(b[35], 0x12);
  EXPECT_EQ(b[27], 0xE0);
  EXPECT_EQ(b[26], 0x78);
  EXPECT_EQ(rep.local_ca_guid(), 0x505400fffe910012ULL);

  b.fill(0);
  RejView rej(b.data());
  rej.set_reject_info_length(8);
  rej.set_message_rejected(1);
  rej.set_reason(28);
  EXPECT_EQ(b[8], 0x40);
  EXPECT_EQ(b[9], 0x10);
  EXPECT_EQ(b[10], 0x00);
  EXPECT_EQ(b[11], 28);
  EXPECT_EQ(rej.ari().size(), 72u);
  EXPECT_EQ(rej.ari().data(), b.data() + 12);
  EXPECT_EQ(rej.private_data().data(), b.data() + 84);
}

// ---- the rdma_cm pieces ---------------------------------------------------------

TEST(RdmaCmCompat, ServiceIds) {
  EXPECT_EQ(cma_service_id(PortSpace::Tcp, 0x1d2f), 0x0000000001061d2fULL);
  EXPECT_EQ(cma_service_id(PortSpace::Udp, 0x1c06), 0x0000000001111c06ULL);
  EXPECT_EQ(cma_service_id(PortSpace::Ib, 4420), 0x00000000013F1144ULL);
  EXPECT_TRUE(is_cma_service_id(0x0000000001061d2fULL));
  EXPECT_FALSE(is_cma_service_id(0x1000000000000001ULL));
  EXPECT_EQ(cma_port_space(0x0000000001111c06ULL), PortSpace::Udp);
  EXPECT_EQ(cma_port(0x0000000001111c06ULL), 0x1c06);
}

TEST(RdmaCmCompat, HeaderLayout) {
  std::array<uint8_t, kCmaHdrSize> h{};
  write_cma_hdr(CmaHdr::ipv4(0x0A5B000B, 0x0A5B000C, 0x91f1), h.data());
  const std::array<uint8_t, kCmaHdrSize> want = {
      0x00, 0x40, 0x91, 0xf1,                                      // version, IPv4, port
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0x5b, 0x00, 0x0b,  // source
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a, 0x5b, 0x00, 0x0c,  // destination
  };
  EXPECT_EQ(h, want);
  auto back = read_cma_hdr(h);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, CmaHdr::ipv4(0x0A5B000B, 0x0A5B000C, 0x91f1));
  h[0] = 1;  // another version: not a header Linux would accept
  EXPECT_FALSE(read_cma_hdr(h));
  h[0] = 0;
  h[1] = 0x50;
  EXPECT_FALSE(read_cma_hdr(h));

  Ip6Bytes s{}, d{};
  s[0] = 0xfe;
  d[15] = 1;
  write_cma_hdr(CmaHdr::ipv6(s, d, 80), h.data());
  EXPECT_EQ(h[1], 0x60);
  EXPECT_EQ(h[4], 0xfe);
  EXPECT_EQ(h[35], 1);
  EXPECT_EQ(read_cma_hdr(h)->dst, d);
}

TEST(RdmaCmCompat, PrivateDataRoom) {
  EXPECT_EQ(kReqUserDataMax, 56u);
  EXPECT_EQ(kSidrReqUserDataMax, 180u);
  EXPECT_EQ(kRepUserDataMax, 196u);
  EXPECT_EQ(kRejUserDataMax, 148u);
  std::array<uint8_t, 92> pd{};
  std::vector<uint8_t> user(56, 0xAA);
  EXPECT_TRUE(format_cma_private_data(CmaHdr::ipv4(1, 2, 3), user, pd));
  EXPECT_EQ(pd[36], 0xAA);
  EXPECT_EQ(pd[91], 0xAA);
  user.push_back(0xBB);
  EXPECT_FALSE(format_cma_private_data(CmaHdr::ipv4(1, 2, 3), user, pd));
  EXPECT_EQ(negotiate_rd_atomic({4, 2}, {1, 3}).responder_resources, 3);
  EXPECT_EQ(negotiate_rd_atomic({4, 2}, {1, 3}).initiator_depth, 1);
}

// ---- real captures -------------------------------------------------------------------

struct CapturedMad {
  uint32_t frame = 0;
  std::vector<uint8_t> mad;  // 256 bytes
};

// Native InfiniBand in ERF records (link type 197): a 16-byte ERF header
// (type 21, InfiniBand), then LRH (8), GRH (40) when LNH is 3, BTH (12),
// DETH (8) and the MAD.
constexpr int kLinkErf = 197;

std::vector<CapturedMad> cm_mads(const PcapFile& pf) {
  std::vector<CapturedMad> out;
  for (const PcapFrame& f : pf.frames) {
    const uint8_t* mad = nullptr;
    size_t room = 0;
    if (pf.linktype == kLinkEthernet) {
      const wire::PktInfo pi = wire::parse(f.bytes);
      if (!pi.is_roce() || pi.opcode != wire::op::UD_SEND_ONLY || pi.dest_qp != kQp1) continue;
      mad = f.bytes.data() + pi.payload_off;
      room = pi.payload_len;
    } else if (pf.linktype == kLinkErf) {
      const auto& b = f.bytes;
      if (b.size() < 16 || (b[8] & 0x7F) != 21 || (b[8] & 0x80) != 0) continue;
      size_t off = 16;
      if (b.size() < off + 8) continue;
      const unsigned lnh = b[off + 1] & 3;
      off += 8;
      if (lnh == 3) off += 40;
      else if (lnh != 2) continue;
      if (b.size() < off + 20) continue;
      const uint8_t opcode = b[off];
      const uint32_t dqp = wire::load_be24(&b[off + 5]);
      if (opcode != wire::op::UD_SEND_ONLY || dqp != 1) continue;
      off += 20;
      mad = b.data() + off;
      room = b.size() - off;
    } else {
      continue;
    }
    if (room < kMadSize || wire::MadHdrC(mad).mgmt_class() != wire::kMgmtClassCm) continue;
    out.push_back({f.number, std::vector<uint8_t>(mad, mad + kMadSize)});
  }
  return out;
}

// Decode with the table, build a whole MAD again, compare all 256 bytes.
bool rebuilds(const std::vector<uint8_t>& mad, std::string& attr) {
  const wire::MadHdrC h(mad.data());
  const uint8_t* body = mad.data() + kMadHdrSize;
  const char* name = wire::cm_attr_name(h.attr_id());
  attr = name != nullptr ? name : "attr " + std::to_string(h.attr_id());
  MadBuf again{};
  switch (static_cast<wire::CmAttr>(h.attr_id())) {
    case wire::CmAttr::Req: again = build_mad(decode(ReqViewC(body)), h.tid()); break;
    case wire::CmAttr::Mra: again = build_mad(decode(MraViewC(body)), h.tid()); break;
    case wire::CmAttr::Rej: again = build_mad(decode(RejViewC(body)), h.tid()); break;
    case wire::CmAttr::Rep: again = build_mad(decode(RepViewC(body)), h.tid()); break;
    case wire::CmAttr::Rtu: again = build_mad(decode(RtuViewC(body)), h.tid()); break;
    case wire::CmAttr::Dreq: again = build_mad(decode(DreqViewC(body)), h.tid()); break;
    case wire::CmAttr::Drep: again = build_mad(decode(DrepViewC(body)), h.tid()); break;
    case wire::CmAttr::SidrReq: again = build_mad(decode(SidrReqViewC(body)), h.tid()); break;
    case wire::CmAttr::SidrRep: again = build_mad(decode(SidrRepViewC(body)), h.tid()); break;
    case wire::CmAttr::ClassPortInfo: case wire::CmAttr::Lap: case wire::CmAttr::Apr:
      return false;
  }
  if (check_cm_mad(mad) != MadCheck::Ok) return false;
  return std::equal(again.begin(), again.end(), mad.begin());
}

struct DirResult {
  unsigned files = 0;
  std::map<std::string, unsigned> by_attr;
};

DirResult roundtrip_dir(const fs::path& dir) {
  DirResult r;
  for (const fs::path& p : find_pcaps(dir)) {
    SCOPED_TRACE(p.string());
    const PcapFile pf = read_pcap(p);
    EXPECT_TRUE(pf.error.empty()) << pf.error;
    ++r.files;
    for (const CapturedMad& m : cm_mads(pf)) {
      std::string attr;
      EXPECT_TRUE(rebuilds(m.mad, attr)) << "frame " << m.frame << " (" << attr << ") does not rebuild";
      ++r.by_attr[attr];
    }
  }
  return r;
}

const fs::path kRepoVectors = UROCE_TEST_VECTORS_DIR;
const fs::path kSharedVectors = UROCE_SHARED_VECTORS_DIR;

TEST(CmVectors, RepositoryCapturesRoundTrip) {
  DirResult r = roundtrip_dir(kRepoVectors);
  EXPECT_GE(r.files, 20u);
  // From the captures' own records (README.md, rxe-vm/rxe-pcaps.txt).
  EXPECT_EQ(r.by_attr["REQ"], 2u + 1 + 1 + 1 + 1 + 2 + 4);
  EXPECT_EQ(r.by_attr["REP"], 2u + 1 + 1 + 1 + 2);
  EXPECT_EQ(r.by_attr["REJ"], 2u);
  EXPECT_EQ(r.by_attr["DREQ"], 3u + 1 + 1 + 1 + 2);
  EXPECT_EQ(r.by_attr["SIDR_REQ"], 1u);
  EXPECT_EQ(r.by_attr["SIDR_REP"], 1u);
  for (const auto& [attr, n] : r.by_attr) std::printf("  %-9s %u\n", attr.c_str(), n);
}

TEST(CmVectors, SharedCapturesRoundTrip) {
  if (!fs::exists(kSharedVectors)) GTEST_SKIP() << kSharedVectors << " is absent";
  DirResult r = roundtrip_dir(kSharedVectors);
  EXPECT_GE(r.files, 30u);
  // The rxe sets (12 REQs), ConnectX RoCE (5 connections) and native IB
  // in ERF (3 IPoIB-CM connections, 1 rping).
  EXPECT_EQ(r.by_attr["REQ"], 12u + 5 + 3 + 1);
  EXPECT_EQ(r.by_attr["REP"], 7u + 5 + 3 + 1);
  EXPECT_EQ(r.by_attr["DREQ"], 8u + 5 + 1);
  unsigned total = 0;
  for (const auto& [attr, n] : r.by_attr) {
    std::printf("  %-9s %u\n", attr.c_str(), n);
    total += n;
  }
  EXPECT_GE(total, 80u);
}

std::vector<CapturedMad> mads_of(const char* rel) {
  const PcapFile pf = read_pcap(kRepoVectors / rel);
  EXPECT_TRUE(pf.error.empty()) << rel << ": " << pf.error;
  return cm_mads(pf);
}

const uint8_t* body(const CapturedMad& m) { return m.mad.data() + kMadHdrSize; }
uint16_t attr(const CapturedMad& m) { return wire::MadHdrC(m.mad.data()).attr_id(); }

// Values as Wireshark decodes rxe-vm/rxe-ucmatose.pcap (two 6.1 kernels).
TEST(CmVectors, UcmatoseFieldValues) {
  const auto mads = mads_of("rxe-vm/rxe-ucmatose.pcap");
  ASSERT_EQ(mads.size(), 5u);
  ASSERT_EQ(attr(mads[0]), 0x0010);
  const ReqMsg req = decode(ReqViewC(body(mads[0])));
  EXPECT_EQ(req.local_comm_id, 0x9c25f9ecu);
  EXPECT_EQ(req.service_id, 0x0000000001061d2fULL);
  EXPECT_EQ(cma_port_space(req.service_id), PortSpace::Tcp);
  EXPECT_EQ(cma_port(req.service_id), 7471);  // ucmatose's default port
  EXPECT_EQ(req.local_ca_guid, 0x505400fffe910011ULL);
  EXPECT_EQ(req.local_qpn, 0x15u);
  EXPECT_EQ(req.responder_resources, 1);
  EXPECT_EQ(req.initiator_depth, 1);
  EXPECT_EQ(req.remote_cm_response_timeout, 0x14);
  EXPECT_EQ(req.transport_service_type, 0);
  EXPECT_EQ(req.starting_psn, 0x64a8b2u);
  EXPECT_EQ(req.local_cm_response_timeout, 0x14);
  EXPECT_EQ(req.retry_count, 5);
  EXPECT_EQ(req.partition_key, 0xffff);
  EXPECT_EQ(req.path_mtu, 3);
  EXPECT_EQ(req.rnr_retry_count, 0);
  EXPECT_EQ(req.max_cm_retries, 15);
  EXPECT_EQ(req.primary_local_lid, 0xffff);
  EXPECT_EQ(req.primary_local_gid, ipv4_mapped_gid(0x0A5B000B));
  EXPECT_EQ(req.primary_remote_gid, ipv4_mapped_gid(0x0A5B000C));
  // Bytes 88..91 are 1c 95 e0 00: flow label 0x1c95e, packet rate 0 by
  // the spec's table (tshark 4.0 shows 0x001c9 and 0x1c: it shifts the
  // 32-bit word by 20 instead of 12).
  EXPECT_EQ(req.primary_flow_label, 0x1c95eu);
  EXPECT_EQ(req.primary_packet_rate, 0);
  EXPECT_EQ(req.primary_hop_limit, 0x40);
  EXPECT_EQ(req.primary_local_ack_timeout, 0x13);
  const auto cma = read_cma_hdr(req.private_data);
  ASSERT_TRUE(cma);
  EXPECT_EQ(cma->ip_version, 4);
  EXPECT_EQ(cma->port, 0x91f1);
  EXPECT_EQ(cma->src_ipv4(), 0x0A5B000Bu);
  EXPECT_EQ(cma->dst_ipv4(), 0x0A5B000Cu);
  // What we would write for the same address pair is Linux's exact bytes.
  std::array<uint8_t, 92> ours{};
  ASSERT_TRUE(format_cma_private_data(CmaHdr::ipv4(0x0A5B000B, 0x0A5B000C, 0x91f1), {}, ours));
  EXPECT_EQ(ours, req.private_data);
  EXPECT_EQ(cma_service_id(PortSpace::Tcp, 7471), req.service_id);

  ASSERT_EQ(attr(mads[1]), 0x0013);
  const RepMsg rep = decode(RepViewC(body(mads[1])));
  EXPECT_EQ(rep.local_comm_id, 0x912d2bc6u);
  EXPECT_EQ(rep.remote_comm_id, 0x9c25f9ecu);
  EXPECT_EQ(rep.local_qpn, 0x15u);
  EXPECT_EQ(rep.starting_psn, 0x027852u);
  EXPECT_EQ(rep.target_ack_delay, 0x0f);
  EXPECT_EQ(rep.rnr_retry_count, 7);
  EXPECT_EQ(rep.local_ca_guid, 0x505400fffe910012ULL);
  // The REP and the RTU answer the REQ's transaction.
  EXPECT_EQ(wire::MadHdrC(mads[1].mad.data()).tid(), wire::MadHdrC(mads[0].mad.data()).tid());

  ASSERT_EQ(attr(mads[2]), 0x0014);
  EXPECT_EQ(RtuViewC(body(mads[2])).local_comm_id(), 0x9c25f9ecu);
  EXPECT_EQ(RtuViewC(body(mads[2])).remote_comm_id(), 0x912d2bc6u);
  EXPECT_EQ(wire::MadHdrC(mads[2].mad.data()).tid(), wire::MadHdrC(mads[0].mad.data()).tid());

  ASSERT_EQ(attr(mads[3]), 0x0015);
  const DreqMsg dreq = decode(DreqViewC(body(mads[3])));
  EXPECT_EQ(dreq.local_comm_id, 0x912d2bc6u);
  EXPECT_EQ(dreq.remote_qpn_eecn, 0x15u);
  ASSERT_EQ(attr(mads[4]), 0x0016);
  EXPECT_EQ(wire::MadHdrC(mads[4].mad.data()).tid(), wire::MadHdrC(mads[3].mad.data()).tid());
}

TEST(CmVectors, RejectAndSidrFieldValues) {
  const auto rej = mads_of("rxe-vm/rxe-cm-rej.pcap");
  ASSERT_EQ(rej.size(), 2u);
  const RejMsg j = decode(RejViewC(body(rej[1])));
  EXPECT_EQ(j.reason, static_cast<uint16_t>(RejReason::InvalidServiceId));
  EXPECT_EQ(j.local_comm_id, 0u);
  EXPECT_EQ(j.remote_comm_id, ReqViewC(body(rej[0])).local_comm_id());
  EXPECT_EQ(j.message_rejected, 0);
  EXPECT_EQ(rej_reason_text(j.reason), "invalid service ID");

  const auto sidr = mads_of("rxe-vm/rxe-udaddy-sidr.pcap");
  ASSERT_EQ(sidr.size(), 2u);
  const SidrReqMsg sq = decode(SidrReqViewC(body(sidr[0])));
  EXPECT_EQ(sq.request_id, 0x9f25f9ecu);
  EXPECT_EQ(sq.partition_key, 0xffff);
  EXPECT_EQ(sq.service_id, cma_service_id(PortSpace::Udp, 0x1c06));
  const auto cma = read_cma_hdr(sq.private_data);
  ASSERT_TRUE(cma);
  EXPECT_EQ(cma->port, 0xcf0b);
  EXPECT_EQ(cma->src_ipv4(), 0x0A5B000Bu);
  const SidrRepMsg sp = decode(SidrRepViewC(body(sidr[1])));
  EXPECT_EQ(sp.request_id, sq.request_id);
  EXPECT_EQ(sp.status, 0);
  EXPECT_EQ(sp.qpn, 0x16u);
  EXPECT_EQ(sp.service_id, sq.service_id);
  EXPECT_EQ(sp.qkey, 0x01234567u);  // RDMA_UDP_QKEY
}

}  // namespace
}  // namespace uroce::test
