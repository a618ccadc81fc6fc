// The `format`s structured outputs enforce (json_formats.h), as regular expressions.

#include "serve/json_formats.h"

#include <string>

namespace aqpim::serve {

namespace {

// Dates: years 0001-9999 (Python's datetime has no year 0), each month's days, 29 February in
// leap years only (a multiple of 4 but not of 100, or of 400).
const std::string kYear = R"((?:000[1-9]|00[1-9]\d|0[1-9]\d\d|[1-9]\d\d\d))";
const std::string kMonthDay =
    R"((?:(?:0[1-9]|1[0-2])-(?:0[1-9]|1\d|2[0-8])|(?:0[13-9]|1[0-2])-(?:29|30)|(?:0[13578]|1[02])-31))";
const std::string kLeapYear = R"((?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:0[48]|[2468][048]|[13579][26])00))";
const std::string kDate = "(?:" + kYear + "-" + kMonthDay + "|" + kLeapYear + "-02-29)";
// RFC 3339 full-time: an offset always, no leap second (Python refuses :60), at most 6 fraction
// digits (microseconds, what Python and pydantic keep).
const std::string kTime = R"((?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,6})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d))";
// RFC 3339 appendix A (ISO 8601 durations), each number at most 9 digits.
const std::string kDurTime = R"(T(?:\d{1,9}H(?:\d{1,9}M(?:\d{1,9}S)?)?|\d{1,9}M(?:\d{1,9}S)?|\d{1,9}S))";
const std::string kDuration =
    R"(P(?:(?:\d{1,9}Y(?:\d{1,9}M(?:\d{1,9}D)?)?|\d{1,9}M(?:\d{1,9}D)?|\d{1,9}D)(?:)" + kDurTime + ")?|" + kDurTime +
    R"(|\d{1,9}W))";
// RFC 1123 host names: dot-separated labels of 1-63 letters, digits and inner hyphens.
const std::string kLabel = R"([A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)";
const std::string kHostname = kLabel + R"((?:\.)" + kLabel + ")*";
// RFC 5322 dot-atom addresses (no quoted local parts, no IP-literal domains) at a domain of two
// labels or more whose last is 2-63 letters (a top-level domain).
const std::string kAtom = R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)";
const std::string kEmail = kAtom + R"((?:\.)" + kAtom + R"()*@(?:)" + kLabel + R"(\.)+[A-Za-z]{2,63})";
const std::string kOctet = R"((?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";  // no leading zeros
const std::string kIpv4 = "(?:" + kOctet + R"(\.){3})" + kOctet;
// RFC 4291 text forms: eight groups, or fewer around one "::" (no embedded IPv4, no zone).
const std::string kH = "[0-9A-Fa-f]{1,4}";
const std::string kIpv6 = "(?:" + kH + ":){7}" + kH +                          //
                          "|(?:" + kH + ":){1,7}:" +                           //
                          "|(?:" + kH + ":){1,6}:" + kH +                      //
                          "|(?:" + kH + ":){1,5}(?::" + kH + "){1,2}" +        //
                          "|(?:" + kH + ":){1,4}(?::" + kH + "){1,3}" +        //
                          "|(?:" + kH + ":){1,3}(?::" + kH + "){1,4}" +        //
                          "|(?:" + kH + ":){1,2}(?::" + kH + "){1,5}" +        //
                          "|" + kH + ":(?::" + kH + "){1,6}" +                 //
                          "|:(?:(?::" + kH + "){1,7}|:)";
const std::string kUuid = "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}";
// RFC 3986 absolute URIs: scheme ":" hier-part ["?" query] ["#" fragment], an authority's host a
// registered name (no IP literals in brackets).
const std::string kPct = "%[0-9A-Fa-f]{2}";
const std::string kPchar = "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|" + kPct + ")";
const std::string kAuthority = "(?:(?:[A-Za-z0-9._~!$&'()*+,;=:-]|" + kPct + ")*@)?(?:[A-Za-z0-9._~!$&'()*+,;=-]|" + kPct +
                               R"()*(?::\d*)?)";
const std::string kUri = "[A-Za-z][A-Za-z0-9+.-]*:(?://" + kAuthority + "(?:/" + kPchar + "*)*|/(?:" + kPchar + "+(?:/" +
                         kPchar + "*)*)?|" + kPchar + "+(?:/" + kPchar + "*)*)?(?:[?](?:" + kPchar + "|[/?])*)?(?:#(?:" +
                         kPchar + "|[/?])*)?";

}  // namespace

const std::vector<JsonFormat>& json_formats() {
    static const std::string date_time = kDate + "T" + kTime;
    static const std::vector<JsonFormat> formats = {
        {"date-time", date_time, -1, "RFC 3339 date-time: 2026-12-07T10:16:59Z (T and Z upper case, an offset always, "
                                     "years 0001-9999, real calendar days, at most 6 fraction digits, no leap second)"},
        {"date", kDate, -1, "RFC 3339 full-date: 2026-12-07 (29 February in leap years only)"},
        {"time", kTime, -1, "RFC 3339 full-time: 10:16:59.5+01:00 (an offset always)"},
        {"duration", kDuration, -1, "RFC 3339 duration: P1Y2M3DT4H5M6S, PT30M, P2W (numbers of at most 9 digits)"},
        {"email", kEmail, 254, "an RFC 5322 dot-atom address at a domain whose last label is 2-63 letters; 254 characters at most"},
        {"hostname", kHostname, 253, "RFC 1123 labels of 1-63 letters, digits and inner hyphens; 253 characters at most"},
        {"ipv4", kIpv4, -1, "dotted decimal, no leading zeros"},
        {"ipv6", kIpv6, -1, "RFC 4291 groups, \"::\" once at most (no embedded IPv4, no zone)"},
        {"uuid", kUuid, -1, "8-4-4-4-12 hexadecimal digits"},
        {"uri", kUri, -1, "an RFC 3986 absolute URI (a scheme, then an authority, a path or neither; no IP literals)"},
    };
    return formats;
}

const JsonFormat* find_json_format(std::string_view name) {
    for (const JsonFormat& f : json_formats())
        if (f.name == name) return &f;
    return nullptr;
}

}  // namespace aqpim::serve
