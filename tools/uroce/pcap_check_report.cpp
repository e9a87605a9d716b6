#include "tools/uroce/pcap_check_report.hpp"

#include <fmt/format.h>

#include <optional>
#include <vector>

#include "tools/uroce/link_layer.hpp"
#include "tools/uroce/overloaded.hpp"

namespace uroce::tools {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kIndent = "  ";
constexpr std::string_view kNone = "none";

std::string_view status_word(FileStatus s) noexcept {
  switch (s) {
    case FileStatus::Ok: return "OK";
    case FileStatus::Failed: return "FAILED";
    case FileStatus::Unreadable: return "UNREADABLE";
  }
  return "?";
}

std::string_view exit_word(ExitStatus s) noexcept {
  switch (s) {
    case kExitOk: return "OK";
    case kExitFailed: return "FAILED";
    case kExitError: return "ERROR";
  }
  return "?";
}

// "RC_SEND_ONLY 16, RC_ACK 20" or "none"
std::string join_counts(const std::vector<NamedCount>& counts) {
  if (counts.empty()) return std::string(kNone);
  std::string s;
  for (const NamedCount& c : counts) {
    if (!s.empty()) s += ", ";
    s += fmt::format("{} {}", c.name, c.count);
  }
  return s;
}

Json counts_json(const std::vector<NamedCount>& counts) {
  Json j = Json::object();
  for (const NamedCount& c : counts) j[c.name] = c.count;
  return j;
}

std::string byte_or_end(std::optional<uint8_t> b) {
  return b ? fmt::format("0x{:02x}", *b) : std::string("end of frame");
}

template <class T>
Json optional_json(const std::optional<T>& v) {
  return v ? Json(*v) : Json(nullptr);
}

// ---- the text block, line by line ------------------------------------------

void print_counts_line(std::FILE* out, const CheckReport& r) {
  fmt::print(out, "{}frames {} ({}), RoCEv2 {}, ICRC failures {}, round-trip failures {}, malformed {}, "
                  "snap-truncated {}\n",
             kIndent, r.frames, r.link_name, r.roce, r.icrc_failures, r.round_trip_failures, r.malformed_total(),
             r.snap_truncated);
}

void print_not_ethernet(std::FILE* out, const CheckReport& r) {
  if (r.not_ethernet == 0) return;
  if (link_kind(r.link_type) == LinkKind::NotEthernet) {
    fmt::print(out, "{}note: {} frames skipped: link type {} ({}, {}) is not Ethernet\n", kIndent, r.not_ethernet,
               r.link_type, r.link_name, r.link_description);
  } else {
    fmt::print(out, "{}note: {} frames skipped: their cooked header names no EtherType\n", kIndent,
               r.not_ethernet);
  }
}

void print_malformed(std::FILE* out, const CheckReport& r) {
  if (r.malformed_total() == 0) return;
  fmt::print(out, "{}malformed: {} ({} to UDP port 4791)\n", kIndent, join_counts(r.malformed_counts()),
             r.malformed_roce);
}

void print_snap_truncated(std::FILE* out, const CheckReport& r) {
  if (r.snap_truncated == 0) return;
  std::string_view verdict = "failures; --allow-truncated accepts them";
  if (r.snap_truncated_roce == 0) verdict = "none of them RoCEv2";
  if (r.snap_truncated_roce != 0 && r.allow_truncated) verdict = "allowed by --allow-truncated";
  fmt::print(out, "{}snap-truncated: {} frames cut short by the snaplen, {} RoCEv2 not verified ({})\n", kIndent,
             r.snap_truncated, r.snap_truncated_roce, verdict);
}

void print_failures(std::FILE* out, const CheckReport& r) {
  for (const FrameFailure& f : r.failures) {
    const std::string op = f.opcode ? " " + opcode_name(*f.opcode) : std::string();
    fmt::print(out, "{}frame {}{}: {}\n", kIndent, f.frame, op, describe_failure(f.detail));
  }
  if (r.failures_not_listed != 0) {
    fmt::print(out, "{}... and {} more failures not listed\n", kIndent, r.failures_not_listed);
  }
}

void print_error(std::FILE* out, const CheckReport& r) {
  if (r.error.empty()) return;
  if (r.opened) {
    fmt::print(out, "{}error: {} (reading frame {})\n", kIndent, r.error, r.frames + 1);
  } else {
    fmt::print(out, "{}error: {}\n", kIndent, r.error);
  }
}

// ---- JSON pieces -------------------------------------------------------------

Json failure_json(const FrameFailure& f) {
  Json j;
  j["frame"] = f.frame;
  j["kind"] = failure_kind_name(f.detail);
  j["opcode"] = f.opcode ? Json(opcode_name(*f.opcode)) : Json(nullptr);
  std::visit(Overloaded{
                 [&](const IcrcMismatch& m) {
                   j["icrc_expected"] = m.expected;
                   j["icrc_found"] = m.found;
                 },
                 [&](const RoundTripMismatch& m) {
                   j["build_failed"] = m.build_failed;
                   j["offset"] = m.offset;
                   j["built"] = optional_json(m.built);
                   j["captured"] = optional_json(m.captured);
                   j["built_len"] = m.built_len;
                   j["captured_len"] = m.captured_len;
                 },
                 [&](const MalformedRoce& m) { j["reason"] = wire::parse_error_name(m.error); },
                 [&](const SnapTruncated& m) {
                   j["captured_len"] = m.captured_len;
                   j["wire_len"] = m.wire_len;
                 },
                 [&](const CnpRule& c) {
                   j["field"] = c.field;
                   j["found"] = c.found;
                 },
             },
             f.detail);
  return j;
}

Json link_json(const CheckReport& r) {
  if (!r.opened) return nullptr;
  return Json{{"type", r.link_type}, {"name", r.link_name}, {"description", r.link_description}};
}

}  // namespace

std::string describe_failure(const FailureDetail& d) {
  return std::visit(
      Overloaded{
          [](const IcrcMismatch& m) { return fmt::format("ICRC expected 0x{:08x}, found 0x{:08x}", m.expected, m.found); },
          [](const RoundTripMismatch& m) {
            if (m.build_failed) return std::string("round trip: build() refused the description");
            return fmt::format("round trip differs at byte {} (rebuilt {}, captured {}); length rebuilt {}, captured {}",
                               m.offset, byte_or_end(m.built), byte_or_end(m.captured), m.built_len, m.captured_len);
          },
          [](const MalformedRoce& m) {
            return fmt::format("malformed packet to UDP port 4791: {} ({})", wire::parse_error_name(m.error),
                               wire::parse_error_text(m.error));
          },
          [](const SnapTruncated& m) {
            return fmt::format("RoCEv2 frame cut short by the snaplen: {} of {} bytes captured", m.captured_len,
                               m.wire_len);
          },
          [](const CnpRule& c) {
            return fmt::format("CNP breaks IBA A17.9.3: {} is {}, must be {}", c.field, c.found,
                               c.field == "reserved_len" ? "16" : "0");
          },
      },
      d);
}

void print_report(std::FILE* out, const CheckReport& r, bool verbose) {
  fmt::print(out, "{}: {}\n", r.path, status_word(r.status()));
  if (r.opened) {
    print_counts_line(out, r);
    fmt::print(out, "{}opcodes: {}\n", kIndent, join_counts(r.opcode_counts()));
    fmt::print(out, "{}CM MADs: {}\n", kIndent, join_counts(r.mad_counts()));
    fmt::print(out, "{}ECN: {}\n", kIndent, join_counts(r.ecn_counts()));
    if (r.opcodes[wire::kCnpOpcode] != 0) {
      fmt::print(out, "{}CNPs: {}, {} breaking A17.9.3, {} with BECN, ECN {}\n", kIndent, r.opcodes[wire::kCnpOpcode],
                 r.cnp_failures, r.cnp_becn, join_counts(r.cnp_ecn_counts()));
    }
    fmt::print(out, "{}other frames: {}\n", kIndent, join_counts(r.other_frame_counts()));
    print_malformed(out, r);
    print_snap_truncated(out, r);
    print_not_ethernet(out, r);
    if (verbose) print_failures(out, r);
  }
  print_error(out, r);
}

void print_totals(std::FILE* out, const CheckTotals& t) {
  const uint64_t ok_files = t.files - t.failed_files - t.unreadable_files;
  fmt::print(out,
             "total: {} files ({} ok, {} failed, {} unreadable), {} frames, {} RoCEv2 packets, {} ICRC failures, "
             "{} round-trip failures, {} malformed ({} to UDP port 4791), {} snap-truncated, {} not Ethernet: {}\n",
             t.files, ok_files, t.failed_files, t.unreadable_files, t.frames, t.roce, t.icrc_failures,
             t.round_trip_failures, t.malformed, t.malformed_roce, t.snap_truncated, t.not_ethernet,
             exit_word(t.exit_status));
}

std::string error_line(const CheckReport& r) {
  if (r.opened) return fmt::format("uroce pcap-check: {}: {} (reading frame {})", r.path, r.error, r.frames + 1);
  return fmt::format("uroce pcap-check: {}: {}", r.path, r.error);
}

Json report_json(const CheckReport& r) {
  Json j;
  j["path"] = r.path;
  j["status"] = file_status_name(r.status());
  j["error"] = r.error.empty() ? Json(nullptr) : Json(r.error);
  j["link"] = link_json(r);
  j["frames"] = r.frames;
  j["not_ethernet"] = r.not_ethernet;
  j["roce_v2"] = r.roce;
  j["opcodes"] = counts_json(r.opcode_counts());
  j["cm_mads"] = counts_json(r.mad_counts());
  j["icrc_failures"] = r.icrc_failures;
  j["round_trip_failures"] = r.round_trip_failures;
  j["ecn"] = counts_json(r.ecn_counts());
  j["cnp"] = Json{{"count", r.opcodes[wire::kCnpOpcode]},
                  {"failures", r.cnp_failures},
                  {"becn", r.cnp_becn},
                  {"ecn", counts_json(r.cnp_ecn_counts())}};
  j["malformed"] = Json{{"total", r.malformed_total()},
                        {"udp_4791", r.malformed_roce},
                        {"reasons", counts_json(r.malformed_counts())}};
  j["other_frames"] = counts_json(r.other_frame_counts());
  j["snap_truncated"] = Json{{"total", r.snap_truncated},
                             {"roce_v2", r.snap_truncated_roce},
                             {"allowed", r.allow_truncated}};
  Json failures = Json::array();
  for (const FrameFailure& f : r.failures) failures.push_back(failure_json(f));
  j["failures"] = std::move(failures);
  j["failures_not_listed"] = r.failures_not_listed;
  return j;
}

Json totals_json(const CheckTotals& t) {
  Json j;
  j["files"] = t.files;
  j["failed_files"] = t.failed_files;
  j["unreadable_files"] = t.unreadable_files;
  j["frames"] = t.frames;
  j["not_ethernet"] = t.not_ethernet;
  j["roce_v2"] = t.roce;
  j["icrc_failures"] = t.icrc_failures;
  j["round_trip_failures"] = t.round_trip_failures;
  j["cnp_failures"] = t.cnp_failures;
  j["malformed"] = t.malformed;
  j["malformed_udp_4791"] = t.malformed_roce;
  j["snap_truncated"] = t.snap_truncated;
  j["exit_status"] = static_cast<int>(t.exit_status);
  return j;
}

Json document_json(std::span<const CheckReport> reports, const CheckTotals& t) {
  Json files = Json::array();
  for (const CheckReport& r : reports) files.push_back(report_json(r));
  return Json{{"files", std::move(files)}, {"totals", totals_json(t)}};
}

}  // namespace uroce::tools
