#include "lib/config/text.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <numeric>
#include <vector>

namespace uroce::config {

namespace {

// TOML's short escapes (TOML 1.0, "String"); other control characters
// become \uXXXX.
struct ShortEscape {
  char c;
  std::string_view text;
};
constexpr std::array kShortEscapes{
    ShortEscape{'"', "\\\""}, ShortEscape{'\\', "\\\\"}, ShortEscape{'\b', "\\b"},
    ShortEscape{'\t', "\\t"}, ShortEscape{'\n', "\\n"},  ShortEscape{'\f', "\\f"},
    ShortEscape{'\r', "\\r"},
};
constexpr unsigned char kFirstPrintable = 0x20;
constexpr unsigned char kDelete = 0x7F;

void append_escaped(std::string& out, char c) {
  for (const ShortEscape& e : kShortEscapes) {
    if (e.c == c) {
      out += e.text;
      return;
    }
  }
  const auto u = static_cast<unsigned char>(c);
  if (u < kFirstPrintable || u == kDelete) {
    std::array<char, sizeof "\\u0000"> buf{};
    std::snprintf(buf.data(), buf.size(), "\\u%04X", static_cast<unsigned>(u));
    out += buf.data();
    return;
  }
  out += c;
}

bool is_bare_key_char(char c) noexcept {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

}  // namespace

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) append_escaped(out, c);
  out += '"';
  return out;
}

std::string key_text(std::string_view key) {
  const bool bare = !key.empty() && std::all_of(key.begin(), key.end(), is_bare_key_char);
  return bare ? std::string(key) : quote(key);
}

size_t edit_distance(std::string_view a, std::string_view b) {
  // One row of the dynamic-programming table at a time.
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t{0});
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      const size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string_view closest(std::string_view word, std::span<const std::string_view> candidates,
                         size_t max_distance) {
  std::string_view best;
  size_t best_distance = std::min(max_distance + 1, word.size());
  for (std::string_view c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_distance) {
      best = c;
      best_distance = d;
    }
  }
  return best;
}

std::string_view trim(std::string_view s) noexcept {
  constexpr std::string_view kBlanks = " \t";
  const size_t first = s.find_first_not_of(kBlanks);
  if (first == std::string_view::npos) return {};
  const size_t last = s.find_last_not_of(kBlanks);
  return s.substr(first, last - first + 1);
}

bool all_digits(std::string_view s) noexcept {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace uroce::config
