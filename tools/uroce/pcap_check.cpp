#include "tools/uroce/pcap_check.hpp"

#include <fmt/format.h>
#include <pcap/pcap.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <span>
#include <tuple>
#include <utility>

#include "lib/wire/bth.hpp"
#include "lib/wire/build.hpp"
#include "lib/wire/eth.hpp"
#include "lib/wire/icrc.hpp"
#include "lib/wire/ipv4.hpp"
#include "lib/wire/ipv6.hpp"
#include "lib/wire/mad.hpp"
#include "lib/wire/opcode.hpp"
#include "lib/wire/udp.hpp"
#include "tools/uroce/link_layer.hpp"

namespace uroce::tools {
namespace {

using wire::FrameClass;
using wire::PktInfo;

constexpr uint8_t kBecnBit = 0x40;     // BTH byte 4: F 0x80, B 0x40 (IBA 9.2; A17 leaves it reserved in a CNP)
constexpr size_t kRebuildCap = 65536;  // build()'s buffer: a frame is at most 65535 bytes
constexpr size_t kMaxVlanTags = std::tuple_size_v<decltype(PktInfo::vlans)>;
constexpr size_t kUdpPortsLen = 4;     // source and destination port
constexpr int kPcapRecordRead = 1;     // pcap_next_ex: a record was read

struct PcapCloser {
  void operator()(pcap_t* p) const noexcept { pcap_close(p); }
};
using PcapHandle = std::unique_ptr<pcap_t, PcapCloser>;

// ---- a tolerant look at headers the parser rejected ------------------------

bool is_vlan_tpid(uint16_t type) noexcept {
  return type == wire::kEtherTypeVlan || type == wire::kEtherTypeQinQ;
}

// Offset of the UDP header behind an IP header at `l3`, if the bytes that
// say so are present.
std::optional<size_t> udp_offset(std::span<const uint8_t> f, size_t l3, uint16_t ethertype) noexcept {
  if (ethertype == wire::kEtherTypeIpv4 && f.size() >= l3 + wire::Ipv4::kMinSize) {
    wire::Ipv4C ip(f.data() + l3);
    const bool first_fragment = (ip.flags_frag() & wire::kIpv4FragOffsetMask) == 0;
    if (ip.version() == 4 && ip.protocol() == wire::kIpProtoUdp && first_fragment &&
        ip.header_len() >= wire::Ipv4::kMinSize) {
      return l3 + ip.header_len();
    }
  }
  if (ethertype == wire::kEtherTypeIpv6 && f.size() >= l3 + wire::Ipv6::kSize) {
    wire::Ipv6C ip(f.data() + l3);
    if (ip.version() == 6 && ip.next_header() == wire::kIpProtoUdp) return l3 + wire::Ipv6::kSize;
  }
  return std::nullopt;
}

// Whether `f` is UDP to port 4791, judged from whatever header bytes are
// there: the frame may be malformed or cut short by the snaplen.
bool is_udp_to_roce_port(std::span<const uint8_t> f) noexcept {
  if (f.size() < wire::Eth::kSize) return false;
  size_t off = wire::Eth::kSize;
  uint16_t type = wire::EthC(f.data()).ethertype();
  for (size_t tags = 0; is_vlan_tpid(type) && tags < kMaxVlanTags; ++tags) {
    if (f.size() < off + wire::Vlan::kSize) return false;
    type = wire::VlanC(f.data() + off).ethertype();
    off += wire::Vlan::kSize;
  }
  const std::optional<size_t> udp = udp_offset(f, off, type);
  if (!udp || f.size() < *udp + kUdpPortsLen) return false;
  return wire::UdpC(f.data() + *udp).dst_port() == wire::kRoceV2Port;
}

// ---- GSI MADs ----------------------------------------------------------------

// A MAD to the GSI: a UD SEND to QP1 long enough for the common MAD header.
bool is_gsi_mad(const PktInfo& pi) noexcept {
  const bool ud_send = pi.opcode == wire::op::UD_SEND_ONLY || pi.opcode == wire::op::UD_SEND_ONLY_IMM;
  return ud_send && pi.dest_qp == kQp1 && pi.payload_len >= wire::MadHdr::kSize;
}

MadKind mad_kind(const uint8_t* mad) noexcept {
  const wire::MadHdrC h(mad);
  const bool cm = h.mgmt_class() == wire::kMgmtClassCm;
  return MadKind{h.mgmt_class(), cm ? h.attr_id() : uint16_t{0}};
}

// ---- byte comparison -------------------------------------------------------

struct ByteRange {
  size_t begin = 0;
  size_t end = 0;
};

// The first offset at or after `from` where `a` and `b` differ, bytes in
// `skip` aside; a length difference counts at the shorter one's end.
std::optional<size_t> first_difference(std::span<const uint8_t> a, std::span<const uint8_t> b, size_t from,
                                       ByteRange skip) noexcept {
  const size_t common = std::min(a.size(), b.size());
  auto scan = [&](size_t lo, size_t hi) -> std::optional<size_t> {
    hi = std::min(hi, common);
    if (lo >= hi) return std::nullopt;
    const auto mismatch = std::mismatch(a.begin() + lo, a.begin() + hi, b.begin() + lo);
    if (mismatch.first == a.begin() + hi) return std::nullopt;
    return static_cast<size_t>(mismatch.first - a.begin());
  };
  if (auto d = scan(from, skip.begin)) return d;
  if (auto d = scan(std::max(from, skip.end), common)) return d;
  if (a.size() != b.size()) return common;
  return std::nullopt;
}

std::optional<uint8_t> byte_at(std::span<const uint8_t> s, size_t i) noexcept {
  return i < s.size() ? std::optional<uint8_t>(s[i]) : std::nullopt;
}

// ---- one frame at a time ---------------------------------------------------

class FrameChecker {
 public:
  FrameChecker(CheckReport& report, LinkKind link) : r_(report), link_(link), rebuilt_(kRebuildCap) {}

  void check(std::span<const uint8_t> record, size_t wire_len);

 private:
  void check_snap_truncated(const EthernetView& v, size_t wire_len);
  void check_malformed(const EthernetView& v, const PktInfo& pi);
  void check_roce(const EthernetView& v, const PktInfo& pi);
  bool check_icrc(const EthernetView& v, const PktInfo& pi);
  void check_round_trip(const EthernetView& v, const PktInfo& pi, bool icrc_ok);
  void check_cnp(const EthernetView& v, const PktInfo& pi);
  void add_failure(std::optional<uint8_t> opcode, FailureDetail detail);

  CheckReport& r_;
  LinkAdapter link_;
  std::vector<uint8_t> rebuilt_;
  uint64_t frame_no_ = 0;
};

void FrameChecker::check(std::span<const uint8_t> record, size_t wire_len) {
  ++frame_no_;
  ++r_.frames;
  const std::optional<EthernetView> view = link_.to_ethernet(record);
  if (!view) {
    ++r_.not_ethernet;
    return;
  }
  if (record.size() < wire_len) {
    check_snap_truncated(*view, wire_len);
    return;
  }
  const PktInfo pi = wire::parse(view->frame);
  switch (pi.cls) {
    case FrameClass::RoceV2:
      check_roce(*view, pi);
      return;
    case FrameClass::Malformed:
      check_malformed(*view, pi);
      return;
    case FrameClass::ARP:
    case FrameClass::ICMPv4:
    case FrameClass::ICMPv6:
    case FrameClass::OtherIPv4:
    case FrameClass::OtherIPv6:
    case FrameClass::OtherEther:
      ++r_.other_frames[pi.cls];
      return;
  }
}

void FrameChecker::check_snap_truncated(const EthernetView& v, size_t wire_len) {
  ++r_.snap_truncated;
  if (!is_udp_to_roce_port(v.frame)) return;
  ++r_.snap_truncated_roce;
  if (r_.allow_truncated) return;
  const size_t captured = v.record_offset(v.frame.size());
  add_failure(std::nullopt, SnapTruncated{captured, wire_len});
}

void FrameChecker::check_malformed(const EthernetView& v, const PktInfo& pi) {
  ++r_.malformed[static_cast<size_t>(pi.error)];
  if (!is_udp_to_roce_port(v.frame)) return;
  ++r_.malformed_roce;
  // The parser fills in the BTH fields once it has read the BTH.
  const bool bth_read = pi.bth_off != 0;
  add_failure(bth_read ? std::optional<uint8_t>(pi.opcode) : std::nullopt, MalformedRoce{pi.error});
}

void FrameChecker::check_roce(const EthernetView& v, const PktInfo& pi) {
  ++r_.roce;
  ++r_.opcodes[pi.opcode];
  if (is_gsi_mad(pi)) ++r_.mads[mad_kind(v.frame.data() + pi.payload_off)];
  const uint8_t* f = v.frame.data();
  const auto ecn = static_cast<size_t>(wire::ecn(f, pi));
  ++r_.ecn[ecn];
  if (pi.opcode == wire::kCnpOpcode) {
    ++r_.cnp_ecn[ecn];
    check_cnp(v, pi);
  }
  const bool icrc_ok = check_icrc(v, pi);
  check_round_trip(v, pi, icrc_ok);
}

// IBA Annex A17.9.3, Figure 6: a CNP's BTH has SE 0, M 0, PadCnt 0 and PSN
// 0, and 16 reserved bytes follow that the sender sets to 0.  The F/B byte
// and the DestQP are not checked (the B bit is reserved there; ConnectX
// sets it: counted apart).  One failure per CNP, the first rule it breaks.
void FrameChecker::check_cnp(const EthernetView& v, const PktInfo& pi) {
  const uint8_t* bth = v.frame.data() + pi.bth_off;
  const wire::BthC h(bth);
  if ((h.resv8a() & kBecnBit) != 0) ++r_.cnp_becn;
  std::optional<CnpRule> broken;
  if (h.se()) {
    broken = CnpRule{"se", 1};
  } else if (h.mig()) {
    broken = CnpRule{"mig", 1};
  } else if (h.pad_count() != 0) {
    broken = CnpRule{"pad", h.pad_count()};
  } else if (h.psn().value() != 0) {
    broken = CnpRule{"psn", h.psn().value()};
  } else if (pi.payload_len != wire::kCnpReservedLen) {
    broken = CnpRule{"reserved_len", pi.payload_len};
  } else {
    const uint8_t* res = v.frame.data() + pi.payload_off;
    if (std::any_of(res, res + wire::kCnpReservedLen, [](uint8_t b) { return b != 0; })) broken = CnpRule{"reserved", 1};
  }
  if (!broken) return;
  ++r_.cnp_failures;
  add_failure(pi.opcode, *broken);
}

bool FrameChecker::check_icrc(const EthernetView& v, const PktInfo& pi) {
  const uint8_t* f = v.frame.data();
  if (wire::verify_icrc(f, pi)) return true;
  ++r_.icrc_failures;
  add_failure(pi.opcode, IcrcMismatch{wire::compute_icrc(f, pi), wire::load_icrc(f + pi.icrc_off)});
  return false;
}

// build(describe(parse(frame))) must give the frame back.  build() always
// writes the right ICRC, so a packet whose ICRC failed is compared around
// its ICRC: that failure is already counted once.
void FrameChecker::check_round_trip(const EthernetView& v, const PktInfo& pi, bool icrc_ok) {
  const wire::PktDesc desc = wire::describe(v.frame.data(), pi);
  const size_t built_len = wire::build(rebuilt_, desc);
  const size_t captured_len = v.record_offset(v.frame.size());
  if (built_len == 0) {
    ++r_.round_trip_failures;
    add_failure(pi.opcode, RoundTripMismatch{.build_failed = true, .captured_len = captured_len});
    return;
  }
  const std::span<const uint8_t> built(rebuilt_.data(), built_len);
  const ByteRange skip = icrc_ok ? ByteRange{} : ByteRange{pi.icrc_off, pi.icrc_off + wire::kIcrcSize};
  const std::optional<size_t> diff = first_difference(built, v.frame, v.compare_from, skip);
  if (!diff) return;
  ++r_.round_trip_failures;
  add_failure(pi.opcode, RoundTripMismatch{
                             .offset = v.record_offset(*diff),
                             .built = byte_at(built, *diff),
                             .captured = byte_at(v.frame, *diff),
                             .built_len = v.record_offset(built_len),
                             .captured_len = captured_len,
                         });
}

void FrameChecker::add_failure(std::optional<uint8_t> opcode, FailureDetail detail) {
  if (r_.failures.size() < kMaxListedFailures) {
    r_.failures.push_back(FrameFailure{frame_no_, opcode, std::move(detail)});
  } else {
    ++r_.failures_not_listed;
  }
}

// ---- the file ----------------------------------------------------------------

// libpcap's open errors may already start with the path; the report names
// the file itself.
std::string without_path_prefix(std::string message, const std::string& path) {
  const std::string prefix = path + ": ";
  if (message.starts_with(prefix)) message.erase(0, prefix.size());
  return message;
}

void describe_link(CheckReport& r, int dlt) {
  r.link_type = dlt;
  const char* name = pcap_datalink_val_to_name(dlt);
  r.link_name = name != nullptr ? name : fmt::format("DLT_{}", dlt);
  const char* description = pcap_datalink_val_to_description(dlt);
  r.link_description = description != nullptr ? description : r.link_name;
}

void read_records(pcap_t* pcap, FrameChecker& checker, CheckReport& r) {
  for (;;) {
    pcap_pkthdr* hdr = nullptr;
    const u_char* data = nullptr;
    const int rc = pcap_next_ex(pcap, &hdr, &data);
    if (rc == kPcapRecordRead) {
      checker.check(std::span<const uint8_t>(data, hdr->caplen), hdr->len);
      continue;
    }
    if (rc == PCAP_ERROR_BREAK) return;  // end of file
    // PCAP_ERROR: a truncated record, an impossible length, an I/O error.
    // (0, "no packet yet", only happens on live captures.)
    r.error = rc == PCAP_ERROR ? pcap_geterr(pcap) : fmt::format("pcap_next_ex returned {}", rc);
    return;
  }
}

}  // namespace

// ---- CheckReport -------------------------------------------------------------

std::string_view file_status_name(FileStatus s) noexcept {
  switch (s) {
    case FileStatus::Ok: return "ok";
    case FileStatus::Failed: return "failed";
    case FileStatus::Unreadable: return "unreadable";
  }
  return "?";
}

uint64_t CheckReport::malformed_total() const noexcept {
  uint64_t n = 0;
  for (uint64_t c : malformed) n += c;
  return n;
}

uint64_t CheckReport::failed_checks() const noexcept {
  const uint64_t cut = allow_truncated ? 0 : snap_truncated_roce;
  return icrc_failures + round_trip_failures + cnp_failures + malformed_roce + cut;
}

FileStatus CheckReport::status() const noexcept {
  if (!error.empty()) return FileStatus::Unreadable;
  return failed_checks() == 0 ? FileStatus::Ok : FileStatus::Failed;
}

ExitStatus CheckReport::exit_status() const noexcept {
  switch (status()) {
    case FileStatus::Ok: return kExitOk;
    case FileStatus::Failed: return kExitFailed;
    case FileStatus::Unreadable: return kExitError;
  }
  return kExitError;
}

namespace {
constexpr std::array<std::string_view, 4> kEcnNames = {"not-ect", "ect1", "ect0", "ce"};
std::vector<NamedCount> ecn_named(const std::array<uint64_t, 4>& n) {
  std::vector<NamedCount> out;
  for (size_t i = 0; i < n.size(); ++i) {
    if (n[i] != 0) out.push_back({std::string(kEcnNames[i]), n[i]});
  }
  return out;
}
}  // namespace

std::vector<NamedCount> CheckReport::ecn_counts() const { return ecn_named(ecn); }
std::vector<NamedCount> CheckReport::cnp_ecn_counts() const { return ecn_named(cnp_ecn); }

std::vector<NamedCount> CheckReport::opcode_counts() const {
  std::vector<NamedCount> out;
  for (size_t op = 0; op < opcodes.size(); ++op) {
    if (opcodes[op] != 0) out.push_back({opcode_name(static_cast<uint8_t>(op)), opcodes[op]});
  }
  return out;
}

std::vector<NamedCount> CheckReport::mad_counts() const {
  std::vector<NamedCount> out;
  for (const auto& [kind, count] : mads) out.push_back({mad_kind_name(kind), count});
  return out;
}

std::vector<NamedCount> CheckReport::malformed_counts() const {
  std::vector<NamedCount> out;
  for (size_t e = 0; e < malformed.size(); ++e) {
    if (malformed[e] != 0) {
      out.push_back({std::string(wire::parse_error_name(static_cast<wire::ParseError>(e))), malformed[e]});
    }
  }
  return out;
}

std::vector<NamedCount> CheckReport::other_frame_counts() const {
  std::vector<NamedCount> out;
  for (const auto& [cls, count] : other_frames) out.push_back({std::string(wire::frame_class_name(cls)), count});
  return out;
}

namespace {

// Check what an open capture holds (`pcap` may be null: `errbuf` says why).
CheckReport check_pcap(pcap_t* opened, const char* errbuf, const std::string& path, const CheckOptions& options) {
  CheckReport r;
  r.path = path;
  r.allow_truncated = options.allow_truncated;
  const PcapHandle pcap(opened);
  if (!pcap) {
    r.error = errbuf[0] != '\0' ? without_path_prefix(errbuf, path) : std::string("cannot open");
    return r;
  }
  r.opened = true;
  describe_link(r, pcap_datalink(pcap.get()));
  FrameChecker checker(r, link_kind(r.link_type));
  read_records(pcap.get(), checker, r);
  return r;
}

}  // namespace

CheckReport check_file(const std::string& path, const CheckOptions& options) {
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  // pcap_open_offline reads pcap and pcapng alike.
  return check_pcap(pcap_open_offline(path.c_str(), errbuf), errbuf, path, options);
}

CheckReport check_bytes(std::span<const uint8_t> capture, const std::string& name, const CheckOptions& options) {
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  // A FILE over the bytes; pcap_close closes it.
  FILE* f = capture.empty() ? nullptr : fmemopen(const_cast<uint8_t*>(capture.data()), capture.size(), "rb");
  if (f == nullptr) {
    CheckReport r;
    r.path = name;
    r.error = "empty capture";
    return r;
  }
  pcap_t* p = pcap_fopen_offline(f, errbuf);
  if (p == nullptr) std::fclose(f);
  return check_pcap(p, errbuf, name, options);
}

// ---- totals and names --------------------------------------------------------

void CheckTotals::add(const CheckReport& r) noexcept {
  ++files;
  const FileStatus s = r.status();
  failed_files += s == FileStatus::Failed;
  unreadable_files += s == FileStatus::Unreadable;
  frames += r.frames;
  not_ethernet += r.not_ethernet;
  roce += r.roce;
  icrc_failures += r.icrc_failures;
  round_trip_failures += r.round_trip_failures;
  cnp_failures += r.cnp_failures;
  malformed += r.malformed_total();
  malformed_roce += r.malformed_roce;
  snap_truncated += r.snap_truncated;
  exit_status = std::max(exit_status, r.exit_status());
}

std::string opcode_name(uint8_t opcode) {
  const wire::OpcodeInfo& info = wire::opcode_info(opcode);
  return info.valid ? std::string(info.name) : fmt::format("UNKNOWN_0x{:02X}", opcode);
}

std::string mad_kind_name(const MadKind& kind) {
  if (kind.mgmt_class != wire::kMgmtClassCm) return fmt::format("class 0x{:02X}", kind.mgmt_class);
  const char* name = wire::cm_attr_name(kind.attr_id);
  return name != nullptr ? std::string(name) : fmt::format("CM attr 0x{:04X}", kind.attr_id);
}

std::string_view failure_kind_name(const FailureDetail& d) noexcept {
  static constexpr std::array<std::string_view, std::variant_size_v<FailureDetail>> kNames = {
      "icrc", "round_trip", "malformed", "snap_truncated", "cnp"};
  return kNames[d.index()];
}

}  // namespace uroce::tools
