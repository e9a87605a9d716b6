// Small text helpers shared by the parser, the environment overrides and
// the renderer.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace uroce::config {

// `s` as a TOML basic string, quotes included: "a\"b".  Messages quote
// user text with it too, so what they show can be pasted back.
std::string quote(std::string_view s);

// A key as it appears in a dotted path: bare when it can be, else quoted.
std::string key_text(std::string_view key);

// Levenshtein distance (insert, delete, substitute; each costs 1).
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `word` when it is at most `max_distance` edits
// away and closer than `word`'s own length; empty otherwise.
std::string_view closest(std::string_view word, std::span<const std::string_view> candidates,
                         size_t max_distance);

// `s` without leading and trailing spaces and tabs.
std::string_view trim(std::string_view s) noexcept;

// `s` is one or more decimal digits.
bool all_digits(std::string_view s) noexcept;

}  // namespace uroce::config
