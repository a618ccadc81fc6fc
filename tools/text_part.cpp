// `--part K/N`: one of N line-aligned parts of a text.

#include "text_part.h"

#include <fmt/format.h>

#include "aqpim/error.h"

namespace aqpim::cli {

namespace {

TextPart parse_part(const std::string& s) {
    const std::size_t slash = s.find('/');
    TextPart p;
    bool ok = slash != std::string::npos && slash > 0 && slash + 1 < s.size();
    if (ok) {
        try {
            std::size_t used_k = 0, used_n = 0;
            p.k = std::stoi(s.substr(0, slash), &used_k);
            p.n = std::stoi(s.substr(slash + 1), &used_n);
            ok = used_k == slash && used_n == s.size() - slash - 1;
        } catch (const std::exception&) {
            ok = false;
        }
    }
    AQPIM_CHECK(ok && p.n >= 1 && p.n <= 1000 && p.k >= 1 && p.k <= p.n,
                "--part {}: expected K/N with 1 <= K <= N <= 1000 (for example 1/2, the first half)", s);
    return p;
}

std::size_t cut(const std::string& text, int i, int n) {
    if (i <= 0) return 0;
    if (i >= n) return text.size();
    const std::size_t at = std::size_t(double(text.size()) * i / n);
    const std::size_t nl = text.find('\n', at == 0 ? 0 : at - 1);
    return nl == std::string::npos ? text.size() : nl + 1;
}

}  // namespace

CLI::Option* add_text_part_option(CLI::App* cmd, TextPart& part) {
    return cmd->add_option_function<std::string>(
        "--part", [&part](const std::string& s) { part = parse_part(s); },
        "K/N: use only part K of the text cut into N parts of about equal bytes at line ends (1/2: the first "
        "half, where settings are tuned; 2/2: the held-out half figures are reported on)");
}

std::string text_part(const std::string& text, const TextPart& part) {
    const std::size_t a = cut(text, part.k - 1, part.n), b = cut(text, part.k, part.n);
    AQPIM_CHECK(b > a, "--part {}/{}: the part is empty (the text has {} bytes)", part.k, part.n, text.size());
    return text.substr(a, b - a);
}

}  // namespace aqpim::cli
