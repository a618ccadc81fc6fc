#pragma once
// `--part K/N` of `aqpim ppl` and `aqpim eval`: part K of a text cut into N parts of about equal
// bytes at line ends, so that settings can be chosen on one part and reported on another
// (docs/eval.md, "Tuning and held-out parts").

#include <CLI/CLI.hpp>

#include <string>

namespace aqpim::cli {

struct TextPart {
    int k = 1, n = 1;  ///< part k of n (1-based); 1/1 = the whole text
};

/// Adds `--part K/N` to cmd, parsed into part (a bad value is a clear error).
CLI::Option* add_text_part_option(CLI::App* cmd, TextPart& part);
/// Part k of n of text: bytes [cut(k - 1), cut(k)) where cut(i) is the first line start at or after
/// i * size / n (cut(0) = 0, cut(n) = size).
std::string text_part(const std::string& text, const TextPart& part);

}  // namespace aqpim::cli
