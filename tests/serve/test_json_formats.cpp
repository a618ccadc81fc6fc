// JSON Schema `format`s (serve/json_formats.h) and length bounds beside a pattern or a format
// (serve/regex_lengths.h): hand-checked texts each way; strings drawn at random from what the
// recognizer admits, checked by parsers written separately (calendar arithmetic, inet_pton) and
// by std::regex; the mask against trying every token whole where a length bound cuts what the
// automaton alone would admit.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "serve/json_formats.h"
#include "serve/json_mask_test_util.h"
#include "serve/json_schema.h"

namespace aqpim {
namespace {

using Json = nlohmann::ordered_json;
using serve::JsonSchema;
using serve::JsonSchemaError;
using serve::JsonSchemaPrefix;

/// {"v": <string schema>}, with v required.
JsonSchema one_string(const Json& string_schema) {
    Json root = {{"type", "object"}, {"properties", {{"v", string_schema}}}, {"required", {"v"}}};
    return JsonSchema(root);
}

JsonSchema formatted(const std::string& format) { return one_string({{"type", "string"}, {"format", format}}); }

/// Whether {"v":"<text>"} is admitted whole (text written as JSON string content).
bool admits(const JsonSchema& s, const std::string& text) {
    JsonSchemaPrefix p(s);
    return p.feed("{\"v\":\"" + text + "\"}") && p.complete();
}

/// The first byte of `text` (after {"v":") refused, text.size() when none.
std::size_t refused_at(const JsonSchema& s, const std::string& text) {
    JsonSchemaPrefix p(s);
    EXPECT_TRUE(p.feed("{\"v\":\""));
    for (std::size_t i = 0; i < text.size(); ++i)
        if (!p.feed(std::string_view(text).substr(i, 1))) return i;
    return text.size();
}

// ---- parsers written without the formats' expressions ---------------------------------------

bool digits(const std::string& s, std::size_t at, std::size_t n) {
    if (at + n > s.size()) return false;
    for (std::size_t i = at; i < at + n; ++i)
        if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
    return true;
}
int number(const std::string& s, std::size_t at, std::size_t n) { return std::stoi(s.substr(at, n)); }

bool valid_date(const std::string& s) {
    if (s.size() != 10 || s[4] != '-' || s[7] != '-' || !digits(s, 0, 4) || !digits(s, 5, 2) || !digits(s, 8, 2)) return false;
    const int y = number(s, 0, 4), m = number(s, 5, 2), d = number(s, 8, 2);
    const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    const int days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return y >= 1 && m >= 1 && m <= 12 && d >= 1 && d <= days[m - 1];
}

bool valid_time(const std::string& s) {
    if (s.size() < 9 || s[2] != ':' || s[5] != ':' || !digits(s, 0, 2) || !digits(s, 3, 2) || !digits(s, 6, 2)) return false;
    if (number(s, 0, 2) > 23 || number(s, 3, 2) > 59 || number(s, 6, 2) > 59) return false;
    std::size_t i = 8;
    if (s[i] == '.') {
        std::size_t n = 0;
        while (i + 1 + n < s.size() && std::isdigit(static_cast<unsigned char>(s[i + 1 + n]))) ++n;
        if (n < 1 || n > 6) return false;
        i += 1 + n;
    }
    if (s.substr(i) == "Z") return true;
    return s.size() == i + 6 && (s[i] == '+' || s[i] == '-') && s[i + 3] == ':' && digits(s, i + 1, 2) && digits(s, i + 4, 2) &&
           number(s, i + 1, 2) <= 23 && number(s, i + 4, 2) <= 59;
}

bool valid_duration(const std::string& s) {  // P[nY][nM][nD][T[nH][nM][nS]] with something in each part, or PnW
    if (s.size() < 3 || s[0] != 'P') return false;
    std::size_t i = 1;
    const auto units = [&](const std::string& order) {
        int found = 0;
        std::size_t next_unit = 0;
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
            std::size_t n = 0;
            while (i + n < s.size() && std::isdigit(static_cast<unsigned char>(s[i + n]))) ++n;
            if (n > 9 || i + n >= s.size()) return -1;
            const std::size_t u = order.find(s[i + n], next_unit);
            if (u == std::string::npos) return found > 0 ? found : -1;  // not this part's unit: the caller's
            next_unit = u + 1;
            i += n + 1;
            ++found;
        }
        return found;
    };
    if (s.back() == 'W') return s.size() >= 3 && s.size() <= 11 && digits(s, 1, s.size() - 2);
    const int date_units = units("YMD");
    if (date_units < 0) return false;
    if (i == s.size()) return date_units > 0;
    if (s[i] != 'T') return false;
    ++i;
    return units("HMS") > 0 && i == s.size();
}

bool valid_label(const std::string& l) {
    if (l.empty() || l.size() > 63 || l.front() == '-' || l.back() == '-') return false;
    for (const char c : l)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
    return true;
}

std::vector<std::string> split(const std::string& s, char by) {
    std::vector<std::string> parts(1);
    for (const char c : s) {
        if (c == by) parts.emplace_back();
        else parts.back().push_back(c);
    }
    return parts;
}

bool valid_hostname(const std::string& s) {
    if (s.size() > 253) return false;
    for (const std::string& l : split(s, '.'))
        if (!valid_label(l)) return false;
    return true;
}

bool valid_email(const std::string& s) {
    const std::size_t at = s.rfind('@');
    if (s.size() > 254 || at == std::string::npos) return false;
    for (const std::string& atom : split(s.substr(0, at), '.')) {
        if (atom.empty()) return false;
        for (const char c : atom)
            if (!std::isalnum(static_cast<unsigned char>(c)) && std::string("!#$%&'*+/=?^_`{|}~-").find(c) == std::string::npos)
                return false;
    }
    const std::vector<std::string> labels = split(s.substr(at + 1), '.');
    if (labels.size() < 2 || !valid_hostname(s.substr(at + 1))) return false;
    const std::string& top = labels.back();
    if (top.size() < 2) return false;
    for (const char c : top)
        if (!std::isalpha(static_cast<unsigned char>(c))) return false;
    return true;
}

bool valid_uuid(const std::string& s) {
    if (s.size() != 36) return false;
    for (std::size_t i = 0; i < s.size(); ++i)
        if (i == 8 || i == 13 || i == 18 || i == 23 ? s[i] != '-' : !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
    return true;
}

bool valid_ip(const std::string& s, int family) {
    unsigned char out[16];
    return inet_pton(family, s.c_str(), out) == 1;
}

bool valid_uri(const std::string& s) {  // scheme ":" then URI characters, '#' at most once
    const std::size_t colon = s.find(':');
    if (colon == std::string::npos || colon == 0 || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
    for (std::size_t i = 1; i < colon; ++i)
        if (!std::isalnum(static_cast<unsigned char>(s[i])) && std::string("+.-").find(s[i]) == std::string::npos) return false;
    int hashes = 0;
    for (std::size_t i = colon + 1; i < s.size(); ++i) {
        const char c = s[i];
        hashes += c == '#';
        if (c == '%') {
            if (!(i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) && std::isxdigit(static_cast<unsigned char>(s[i + 2]))))
                return false;
            i += 2;
        } else if (!std::isalnum(static_cast<unsigned char>(c)) && std::string("-._~:/?#@!$&'()*+,;=").find(c) == std::string::npos) {
            return false;
        }
    }
    return hashes <= 1;
}

bool valid_as(const std::string& format, const std::string& s) {
    if (format == "date-time") {
        const std::size_t t = s.find('T');
        return t != std::string::npos && valid_date(s.substr(0, t)) && valid_time(s.substr(t + 1));
    }
    if (format == "date") return valid_date(s);
    if (format == "time") return valid_time(s);
    if (format == "duration") return valid_duration(s);
    if (format == "email") return valid_email(s);
    if (format == "hostname") return valid_hostname(s);
    if (format == "ipv4") return valid_ip(s, AF_INET);
    if (format == "ipv6") return valid_ip(s, AF_INET6);
    if (format == "uuid") return valid_uuid(s);
    if (format == "uri") return valid_uri(s);
    ADD_FAILURE() << "no parser for " << format;
    return false;
}

// ---- the tests --------------------------------------------------------------------------------

TEST(JsonFormats, HandCheckedTextsEachWay) {
    struct Case {
        const char* format;
        std::vector<std::string> good, bad;
    };
    const std::vector<Case> cases = {
        {"date", {"2024-02-29", "2000-02-29", "2026-12-31", "0001-01-01", "0400-02-29"},
         {"2023-02-29", "1900-02-29", "2026-04-31", "2026-13-01", "0000-01-01", "2026-1-01", "2026-12-07T"}},
        {"time", {"23:59:59Z", "00:00:00.123456+05:30", "12:00:00-23:59"},
         {"24:00:00Z", "12:00:00", "12:00:60Z", "12:00:00.1234567Z", "12:00:00z", "12:00:00+24:00"}},
        {"date-time", {"2026-12-07T10:16:59Z", "2024-02-29T00:00:00.5+01:00"}, {"2026-12-07 10:16:59Z", "2026-12-07t10:16:59Z"}},
        {"duration", {"P1Y2M3DT4H5M6S", "PT30M", "P2W", "P1D", "P1M"}, {"P", "PT", "P1H", "P1Y1W", "P1D2Y", "PT1S2M", "P1234567890D"}},
        {"email", {"a.b+c@example.co.uk", "x_y@host.io", "o'brien@mail.example.org"},
         {"a..b@x.com", "a@b", ".a@x.com", "a@-x.com", "a@x.c", "a@x.c0m", "a b@x.com"}},
        {"hostname", {"my-host.example.com", "a", "xn--80ak6aa92e.com", std::string(63, 'h')},
         {"-a", "a-", "a..b", "a.", std::string(64, 'h'), "a_b"}},
        {"ipv4", {"192.168.0.1", "0.0.0.0", "255.255.255.255"}, {"256.1.1.1", "01.1.1.1", "1.1.1", "1.1.1.1.1"}},
        {"ipv6", {"::", "::1", "fe80::1", "2001:db8::8a2e:370:7334", "1:2:3:4:5:6:7:8", "1::", "a:b:c:d:e:f:0::"},
         {"1:2:3:4:5:6:7:8:9", ":::", "1::2::3", "12345::", "1:2:3:4:5:6:7", "::g"}},
        {"uuid", {"123e4567-e89b-12d3-a456-426614174000", "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF"},
         {"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400g"}},
        {"uri", {"https://example.com/a?b=c#d", "mailto:a@b.c", "urn:isbn:0451450523", "http://u:p@h:8080/%20x", "a:"},
         {"://x", "a b:c", "http://x/#a#b", "1http://x", "http://x/%2"}},
    };
    for (const Case& c : cases) {
        const JsonSchema s = formatted(c.format);
        for (const std::string& t : c.good) {
            EXPECT_TRUE(admits(s, t)) << c.format << ": " << t;
            EXPECT_TRUE(valid_as(c.format, t)) << "the test's own parser, " << c.format << ": " << t;
        }
        for (const std::string& t : c.bad) {
            EXPECT_FALSE(admits(s, t)) << c.format << ": " << t;
            EXPECT_FALSE(valid_as(c.format, t)) << "the test's own parser, " << c.format << ": " << t;
        }
    }
    // RFC 3339's ABNF, stricter than ISO 8601: no unit skipped between two written ones.
    EXPECT_FALSE(admits(formatted("duration"), "PT1H1S"));
    EXPECT_FALSE(admits(formatted("duration"), "P1Y1D"));
    // Refused at the first byte no valid text continues, not at the closing quote.
    EXPECT_EQ(refused_at(formatted("date"), "2023-02-29"), 9u);
    EXPECT_EQ(refused_at(formatted("ipv4"), "256"), 2u);
    EXPECT_EQ(refused_at(formatted("uuid"), "123e4567-e89b-12d3-a456-426614174000x"), 36u);
}

/// A string drawn byte by byte among the printable ASCII bytes the recognizer admits after {"v":";
/// after `wander` bytes the closing quote is taken whenever it is admitted. Empty if unfinished.
std::string draw_string(const JsonSchema& s, std::mt19937& rng, int wander, int limit) {
    JsonSchemaPrefix p(s);
    EXPECT_TRUE(p.feed("{\"v\":\""));
    std::string text;
    for (int step = 0; step < limit; ++step) {
        std::vector<char> ok;
        for (int c = 0x20; c < 0x7F; ++c) {
            JsonSchemaPrefix next = p;
            const char ch = char(c);
            if (c != '\\' && next.feed(std::string_view(&ch, 1))) ok.push_back(ch);
        }
        if (ok.empty()) return "";
        const bool close = std::find(ok.begin(), ok.end(), '"') != ok.end() && (step > wander || ok.size() == 1);
        const char c = close ? '"' : ok[rng() % ok.size()];
        if (c == '"' && !close) continue;  // not yet: draw again
        EXPECT_TRUE(p.feed(std::string_view(&c, 1)));
        if (c == '"') return p.feed("}") && p.complete() ? text : "";
        text += c;
    }
    return "";
}

TEST(JsonFormats, DrawnStringsParseAsTheirFormat) {
    std::mt19937 rng(5);
    for (const serve::JsonFormat& f : serve::json_formats()) {
        const JsonSchema s = formatted(std::string(f.name));
        const std::regex re(std::string(f.regex), std::regex::ECMAScript);
        int drawn = 0;
        for (int i = 0; i < 80; ++i) {
            const std::string text = draw_string(s, rng, 4 + i % 40, 400);
            if (text.empty()) continue;
            ++drawn;
            if (std::getenv("AQPIM_SHOW_DRAWS")) std::printf("%s: %s\n", std::string(f.name).c_str(), text.c_str());
            EXPECT_TRUE(valid_as(std::string(f.name), text)) << f.name << ": " << text;
            EXPECT_TRUE(std::regex_match(text, re)) << f.name << ": " << text;
        }
        EXPECT_GE(drawn, 70) << f.name << ": the draws end";
    }
}

TEST(JsonFormats, LengthBoundsBesideAPatternAreExact) {
    const JsonSchema at_most_3 = one_string({{"type", "string"}, {"pattern", "^(ab)+$"}, {"maxLength", 3}});
    EXPECT_TRUE(admits(at_most_3, "ab"));
    EXPECT_EQ(refused_at(at_most_3, "aba"), 2u) << "\"aba\" has no match within 3 characters";
    const JsonSchema three_to_5 = one_string({{"type", "string"}, {"pattern", "^(ab)+$"}, {"minLength", 3}, {"maxLength", 5}});
    EXPECT_FALSE(admits(three_to_5, "ab"));
    EXPECT_TRUE(admits(three_to_5, "abab"));
    EXPECT_EQ(refused_at(three_to_5, "ababa"), 4u);
    const JsonSchema at_least_3 = one_string({{"type", "string"}, {"pattern", "a"}, {"minLength", 3}});
    EXPECT_FALSE(admits(at_least_3, "xa"));
    EXPECT_TRUE(admits(at_least_3, "xxa"));
    EXPECT_TRUE(admits(at_least_3, "axxxxxxx"));
    // Characters are code points: é is two bytes, one character.
    const JsonSchema two_chars = one_string({{"type", "string"}, {"pattern", "^.+$"}, {"maxLength", 2}});
    EXPECT_TRUE(admits(two_chars, "\xC3\xA9\xC3\xA9"));
    EXPECT_EQ(refused_at(two_chars, "\xC3\xA9\xC3\xA9x"), 4u);
    // An escape is one character, refused where it would be one too many.
    const JsonSchema quoted = one_string({{"type", "string"}, {"pattern", "^[a\"]*$"}, {"maxLength", 2}});
    EXPECT_TRUE(admits(quoted, "a\\\""));
    EXPECT_EQ(refused_at(quoted, "aa\\"), 2u);
    // A format's own bound: a host name holds at most 253 characters.
    std::string host = "a";
    while (host.size() < 253) host += ".a";
    const JsonSchema hostname = formatted("hostname");
    EXPECT_TRUE(admits(hostname, host));
    EXPECT_EQ(refused_at(hostname, host + ".a"), 253u);
    EXPECT_EQ(refused_at(one_string({{"type", "string"}, {"format", "hostname"}, {"maxLength", 3}}), "a.bc"), 3u);
    // One table per automaton and bounds: 20 host names cost one.
    Json many = {{"type", "object"}, {"properties", Json::object()}};
    for (int i = 0; i < 20; ++i) many["properties"]["h" + std::to_string(i)] = {{"type", "string"}, {"format", "hostname"}};
    EXPECT_NO_THROW(JsonSchema{many});
}

TEST(JsonFormats, RefusalsNameWhatCannotHold) {
    const auto error_of = [](const Json& string_schema) -> std::string {
        try {
            one_string(string_schema);
        } catch (const JsonSchemaError& e) {
            return e.what();
        }
        return "";
    };
    EXPECT_NE(error_of({{"type", "string"}, {"pattern", "^a{5}$"}, {"maxLength", 3}}).find("between 0 and 3 characters"), std::string::npos);
    EXPECT_NE(error_of({{"type", "string"}, {"pattern", "^(aa)+$"}, {"minLength", 3}, {"maxLength", 3}}).find("/properties/v/pattern"),
              std::string::npos);
    EXPECT_NE(error_of({{"type", "string"}, {"format", "uuid"}, {"minLength", 37}}).find("at least 37 characters"), std::string::npos);
    EXPECT_NE(error_of({{"type", "string"}, {"format", "date"}, {"pattern", "^2"}}).find("beside the format \"date\""), std::string::npos);
    EXPECT_NE(error_of({{"enum", {"2026-12-07"}}, {"format", "date"}}).find("\"format\" beside \"enum\""), std::string::npos);
    EXPECT_NE(error_of({{"type", "string"}, {"pattern", "^x+$"}, {"maxLength", 40000000}}).find("too complex"), std::string::npos);
    EXPECT_NE(error_of({{"type", "string"}, {"format", "email"}, {"minLength", 300}}).find("the format's own bound of 254"), std::string::npos)
        << "a minimum past the format's own bound";
    // Formats nobody enforces are annotations, as before.
    EXPECT_EQ(error_of({{"type", "string"}, {"format", "binary"}}), "");
    EXPECT_EQ(error_of({{"type", "integer"}, {"format", "int32"}}), "");
    EXPECT_TRUE(admits(formatted("binary"), "anything"));
    EXPECT_EQ(error_of({{"enum", {"x"}}, {"format", "binary"}}), "");
}

TEST(JsonFormats, MaskEqualsTryingEveryTokenWholeUnderALengthBound) {
    std::mt19937 rng(9);
    const std::vector<std::string> texts =
        test::with_random_texts({"", "{\"v\":\"", "ab", "abab", "a", "b\"", "\"}", "\"", "}", "babab", "ababa", "bab"}, rng, "ab\"}", 400, 5);
    const std::int32_t eos = 0;
    const serve::GuideVocabulary vocab(texts, eos);
    // Tokens are tried whole below minLength and near maxLength; between, the cached set is taken
    // as it is (21 - 5-character tokens - 2 characters to end a match from any state).
    for (const int max : {7, 21}) {
        const JsonSchema s = one_string({{"type", "string"}, {"pattern", "^(ab)+$"}, {"minLength", 3}, {"maxLength", max}});
        std::string doc = "{\"v\":\"";
        for (int i = 0; i < max / 2; ++i) doc += "ab";
        doc += "\"}";
        int kept = 0;
        for (std::size_t cut = 0; cut <= doc.size(); ++cut) {
            JsonSchemaPrefix state(s);
            ASSERT_TRUE(state.feed(std::string_view(doc).substr(0, cut))) << cut;
            kept += test::expect_mask_keeps_every_continuation(state, vocab, texts, eos, doc.substr(0, cut));
        }
        EXPECT_GT(kept, 30) << max;
    }
}

}  // namespace
}  // namespace aqpim
