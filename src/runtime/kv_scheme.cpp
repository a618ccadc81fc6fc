// Parsing of --kv scheme specs.

#include "aqpim/kv_scheme.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "aqpim/error.h"
#include "aqpim/model.h"
#include "core/text_space.h"

namespace aqpim {
namespace {

std::string trim(std::string_view s) { return std::string(trim_space(s)); }

std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, sep)) out.push_back(item);
    if (!s.empty() && s.back() == sep) out.push_back("");
    return out;
}

std::int64_t parse_int(const std::string& scheme, const std::string& key, const std::string& v) {
    std::int64_t x = 0;
    const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    AQPIM_CHECK(ec == std::errc() && p == v.data() + v.size(), "--kv {}: {}={} is not an integer", scheme, key, v);
    return x;
}

}  // namespace

std::int64_t KvSchemeSpec::get_int(const std::string& key, std::int64_t fallback) const {
    const auto it = params.find(key);
    return it == params.end() ? fallback : parse_int(text, key, it->second);
}

double KvSchemeSpec::get_float(const std::string& key, double fallback) const {
    const auto it = params.find(key);
    if (it == params.end()) return fallback;
    std::size_t used = 0;
    double x = 0;
    try {
        x = std::stod(it->second, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    AQPIM_CHECK(used == it->second.size() && used > 0, "--kv {}: {}={} is not a number", text, key, it->second);
    return x;
}

std::vector<int> KvSchemeSpec::get_int_list(const std::string& key) const {
    std::vector<int> out;
    const auto it = params.find(key);
    if (it == params.end()) return out;
    for (const std::string& item : split(it->second, '+')) {
        AQPIM_CHECK(!item.empty(), "--kv {}: {}={} has an empty list item", text, key, it->second);
        const auto dash = item.find('-', 1);
        const std::int64_t a = parse_int(text, key, dash == std::string::npos ? item : item.substr(0, dash));
        const std::int64_t b = dash == std::string::npos ? a : parse_int(text, key, item.substr(dash + 1));
        // Lists name layers: a range beyond the most layers a model may have is an error, not a
        // million-entry list (the fuzzer's `f16_layers=4-922225` took over a second).
        AQPIM_CHECK(a >= 0 && b >= a && b < ModelLimits::layers, "--kv {}: {}: bad range '{}' (layers are 0..{})", text,
                    key, item, ModelLimits::layers - 1);
        for (std::int64_t x = a; x <= b; ++x) out.push_back(int(x));
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

void KvSchemeSpec::require_known_keys(const std::vector<std::string>& known) const {
    for (const auto& [k, v] : params) {
        if (std::find(known.begin(), known.end(), k) != known.end()) continue;
        std::string list;
        for (const std::string& n : known) list += (list.empty() ? "" : ", ") + n;
        AQPIM_FAIL("--kv {}: unknown parameter '{}' for {} (known: {})", text, k, name, list.empty() ? "none" : list);
    }
}

KvSchemeSpec parse_kv_scheme(const std::string& raw) {
    KvSchemeSpec s;
    s.text = trim(raw);
    AQPIM_CHECK(!s.text.empty(), "--kv: empty scheme");
    const auto colon = s.text.find(':');
    s.name = trim(s.text.substr(0, colon));
    AQPIM_CHECK(!s.name.empty(), "--kv '{}': no scheme name before ':'", s.text);
    if (colon == std::string::npos) return s;
    const std::string rest = s.text.substr(colon + 1);
    AQPIM_CHECK(!trim(rest).empty(), "--kv '{}': nothing after ':'", s.text);
    for (const std::string& kv : split(rest, ',')) {
        const auto eq = kv.find('=');
        AQPIM_CHECK(eq != std::string::npos, "--kv '{}': '{}' is not key=value", s.text, kv);
        const std::string key = trim(kv.substr(0, eq)), value = trim(kv.substr(eq + 1));
        AQPIM_CHECK(!key.empty() && !value.empty(), "--kv '{}': '{}' is not key=value", s.text, kv);
        AQPIM_CHECK(s.params.emplace(key, value).second, "--kv '{}': '{}' given twice", s.text, key);
    }
    return s;
}

std::vector<KvSchemeSpec> parse_kv_schemes(const std::string& text) {
    std::vector<KvSchemeSpec> out;
    for (const std::string& part : split(text, ';'))
        if (!trim(part).empty()) out.push_back(parse_kv_scheme(part));
    AQPIM_CHECK(!out.empty(), "--kv '{}': no scheme given", text);
    return out;
}

}  // namespace aqpim
