// Printing `uroce pcap-check` reports: a readable block per file and a
// totals line, or one JSON document with the same content.
#pragma once

#include <cstdio>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "tools/uroce/pcap_check.hpp"

namespace uroce::tools {

// A block for one file; with `verbose`, one line per failing frame.
void print_report(std::FILE* out, const CheckReport& r, bool verbose);

// The line that ends the output.
void print_totals(std::FILE* out, const CheckTotals& t);

// One line naming the file and why it could not be read (for stderr).
std::string error_line(const CheckReport& r);

// What went wrong with one frame, as a verbose line says it (without the
// frame number and opcode).
std::string describe_failure(const FailureDetail& d);

nlohmann::ordered_json report_json(const CheckReport& r);
nlohmann::ordered_json totals_json(const CheckTotals& t);
// {"files": [report…], "totals": {…}}
nlohmann::ordered_json document_json(std::span<const CheckReport> reports, const CheckTotals& t);

}  // namespace uroce::tools
