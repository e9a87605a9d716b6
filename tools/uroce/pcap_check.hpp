// `uroce pcap-check`: read a capture (pcap or pcapng) and check every
// RoCEv2 packet in it against lib/wire: the ICRC verifies, and
// build(describe(parse(frame))) gives the captured bytes back.
//
// `check_file()` is the library entry point (tests call it); printing is in
// pcap_check_report.hpp and the command line in pcap_check_cli.cpp.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "lib/wire/pkt.hpp"
#include "tools/uroce/exit_status.hpp"

namespace uroce::tools {

struct CheckOptions {
  // Frames cut short by the capture's snaplen cannot be verified.  Without
  // this, a cut RoCE frame fails the file; with it, it is only counted.
  bool allow_truncated = false;
};

// ---- failures, one record per failing frame ------------------------------

struct IcrcMismatch {
  uint32_t expected = 0;  // computed over the packet
  uint32_t found = 0;     // carried by the packet
};

struct RoundTripMismatch {
  bool build_failed = false;            // build() refused the description
  size_t offset = 0;                    // first differing byte, in record offsets
  std::optional<uint8_t> built;         // that byte in each; empty past the end
  std::optional<uint8_t> captured;
  size_t built_len = 0;                 // frame lengths
  size_t captured_len = 0;
};

struct MalformedRoce {                  // UDP to port 4791 that does not parse
  wire::ParseError error = wire::ParseError::None;
};

struct SnapTruncated {                  // RoCE frame cut short by the snaplen
  size_t captured_len = 0;
  size_t wire_len = 0;
};

// A CNP (opcode 0x81) that breaks a rule of IBA Annex A17 (A17.9.3,
// Figure 6): SE, M and PadCnt 0, PSN 0, and 16 reserved bytes that are 0.
struct CnpRule {
  std::string_view field;               // "se", "mig", "pad", "psn", "reserved_len", "reserved"
  uint64_t found = 0;                   // what the packet carries there
};

using FailureDetail = std::variant<IcrcMismatch, RoundTripMismatch, MalformedRoce, SnapTruncated, CnpRule>;

struct FrameFailure {
  uint64_t frame = 0;                   // 1-based, as Wireshark numbers frames
  std::optional<uint8_t> opcode;        // when the BTH was read
  FailureDetail detail;
};

// ---- the report for one file ---------------------------------------------

enum class FileStatus : uint8_t { Ok, Failed, Unreadable };
std::string_view file_status_name(FileStatus s) noexcept;  // "ok", "failed", "unreadable"

// A GSI MAD, counted by management class, and by attribute for CM MADs.
struct MadKind {
  uint8_t mgmt_class = 0;
  uint16_t attr_id = 0;  // CM class only; 0 for the others
  friend auto operator<=>(const MadKind&, const MadKind&) = default;
};

struct NamedCount {
  std::string name;
  uint64_t count = 0;
};

// Records past this many per file are counted, not kept.
inline constexpr size_t kMaxListedFailures = 1000;

struct CheckReport {
  std::string path;
  bool allow_truncated = false;

  // Reading.  `error` is why reading stopped early (or never started); when
  // it is set, the counts below cover the frames read before it.
  std::string error;
  bool opened = false;
  int link_type = -1;            // DLT_* value
  std::string link_name;         // pcap's name ("EN10MB"), when opened
  std::string link_description;  // pcap's description ("Ethernet")

  uint64_t frames = 0;
  uint64_t not_ethernet = 0;     // frames skipped: no Ethernet frame inside

  uint64_t roce = 0;             // RoCEv2 packets parsed
  std::array<uint64_t, 256> opcodes{};
  std::map<MadKind, uint64_t> mads;
  uint64_t icrc_failures = 0;
  uint64_t round_trip_failures = 0;
  uint64_t cnp_failures = 0;     // CNPs that break an A17 rule (CnpRule)
  uint64_t cnp_becn = 0;         // CNPs with the BECN bit set (ConnectX sets it; A17 leaves it reserved)
  // The IP ECN field of every RoCEv2 packet (RFC 3168: Not-ECT, ECT(1),
  // ECT(0), CE), and of the CNPs alone.
  std::array<uint64_t, 4> ecn{};
  std::array<uint64_t, 4> cnp_ecn{};

  std::array<uint64_t, wire::kNumParseErrors> malformed{};  // by reason
  uint64_t malformed_roce = 0;   // of those, UDP to port 4791

  std::map<wire::FrameClass, uint64_t> other_frames;  // ARP, ICMP, TCP …

  uint64_t snap_truncated = 0;   // caplen < len: not verified
  uint64_t snap_truncated_roce = 0;

  std::vector<FrameFailure> failures;  // the first kMaxListedFailures
  uint64_t failures_not_listed = 0;

  uint64_t malformed_total() const noexcept;
  // Checks that failed (a packet may fail its ICRC and its round trip).
  uint64_t failed_checks() const noexcept;
  FileStatus status() const noexcept;
  ExitStatus exit_status() const noexcept;

  // Counts with names, zero counts left out, in a stable order.
  std::vector<NamedCount> opcode_counts() const;       // by opcode value
  std::vector<NamedCount> mad_counts() const;          // by class, then attribute
  std::vector<NamedCount> malformed_counts() const;    // by ParseError
  std::vector<NamedCount> other_frame_counts() const;  // by FrameClass
  std::vector<NamedCount> ecn_counts() const;          // "not-ect", "ect1", "ect0", "ce"
  std::vector<NamedCount> cnp_ecn_counts() const;
};

// Check one capture file.  Never throws for bad input: a file that cannot
// be opened or read comes back with `error` set.
CheckReport check_file(const std::string& path, const CheckOptions& options);
// The same for a capture held in memory (`name` is what the report calls it).
CheckReport check_bytes(std::span<const uint8_t> capture, const std::string& name, const CheckOptions& options);

// ---- totals over several files -------------------------------------------

struct CheckTotals {
  uint64_t files = 0;
  uint64_t failed_files = 0;
  uint64_t unreadable_files = 0;
  uint64_t frames = 0;
  uint64_t not_ethernet = 0;
  uint64_t roce = 0;
  uint64_t icrc_failures = 0;
  uint64_t round_trip_failures = 0;
  uint64_t cnp_failures = 0;
  uint64_t malformed = 0;
  uint64_t malformed_roce = 0;
  uint64_t snap_truncated = 0;
  ExitStatus exit_status = kExitOk;  // the worst over the files

  void add(const CheckReport& r) noexcept;
};

// ---- names -----------------------------------------------------------------

std::string opcode_name(uint8_t opcode);          // "RC_SEND_ONLY", "UNKNOWN_0x15"
std::string mad_kind_name(const MadKind& kind);   // "REQ", "CM attr 0x0042", "class 0x01"
std::string_view failure_kind_name(const FailureDetail& d) noexcept;  // "icrc", "round_trip" …

}  // namespace uroce::tools
