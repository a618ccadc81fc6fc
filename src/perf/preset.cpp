// Preset loading and validation (see include/aqpim/preset.h for the format).

#include "aqpim/preset.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "aqpim/error.h"
#include "aqpim/file_io.h"

namespace aqpim {
namespace {

using Json = nlohmann::ordered_json;

bool is_numeric_leaf(const Json& j) { return j.is_object() && j.contains("value"); }

// Walk the tree: every number must sit in a {"value", "source"} leaf with a finite value.
void validate_tree(const Json& j, const std::string& path, const std::string& origin) {
    auto where = [&](const std::string& p) { return p.empty() ? std::string("(top level)") : p; };
    if (j.is_number()) AQPIM_FAIL("{}: field {}: a bare number; write {{\"value\": ..., \"source\": \"...\"}}", origin, where(path));
    if (j.is_array()) {
        for (const auto& e : j)
            AQPIM_CHECK(e.is_string(), "{}: field {}: arrays may hold only strings", origin, where(path));
        return;
    }
    if (!j.is_object()) return;
    if (is_numeric_leaf(j)) {
        const Json& v = j["value"];
        AQPIM_CHECK(v.is_number(), "{}: field {}: \"value\" is not a number", origin, where(path));
        AQPIM_CHECK(std::isfinite(v.get<double>()), "{}: field {}: value is not finite", origin, where(path));
        auto src = j.find("source");
        AQPIM_CHECK(src != j.end() && src->is_string() && !src->get<std::string>().empty(),
                    "{}: field {}: no \"source\" (every number names where it comes from)", origin, where(path));
        for (auto it = j.begin(); it != j.end(); ++it)
            AQPIM_CHECK(it.key() == "value" || it.key() == "source" || it.key() == "unit" || it.key() == "note",
                        "{}: field {}: unknown key \"{}\" in a numeric field", origin, where(path), it.key());
        return;
    }
    for (auto it = j.begin(); it != j.end(); ++it)
        validate_tree(it.value(), path.empty() ? it.key() : path + "." + it.key(), origin);
}


}  // namespace

Preset Preset::parse(std::string_view text, const std::string& origin) {
    Preset p;
    p.origin_ = origin;
    p.json_ = parse_json<Json>(text, origin);
    AQPIM_CHECK(p.json_.is_object(), "{}: a preset is a JSON object", origin);
    validate_tree(p.json_, "", origin);
    p.kind_ = p.text("kind");
    p.name_ = p.text("name");
    return p;
}

Preset Preset::load(const std::filesystem::path& path) {
    Preset p = parse(read_whole_file(path.string(), "preset"), path.string());
    const std::string stem = path.stem().string();
    AQPIM_CHECK(p.name_ == stem, "{}: field name: \"{}\" differs from the file name \"{}\"", p.origin_, p.name_, stem);
    return p;
}

std::string Preset::path_of(std::string_view field) const {
    if (prefix_.empty()) return std::string(field);
    return field.empty() ? prefix_ : prefix_ + "." + std::string(field);
}

void Preset::fail(std::string_view field, const std::string& msg) const {
    AQPIM_FAIL("{}: field {}: {}", origin_, path_of(field), msg);
}

const Json* Preset::find(std::string_view field) const {
    const Json* j = &json_;
    std::size_t start = 0;
    while (start <= field.size() && !field.empty()) {
        std::size_t dot = field.find('.', start);
        std::string key(field.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
        if (!j->is_object()) return nullptr;
        auto it = j->find(key);
        if (it == j->end()) return nullptr;
        j = &*it;
        if (dot == std::string_view::npos) break;
        start = dot + 1;
    }
    return j;
}

bool Preset::has(std::string_view field) const { return find(field) != nullptr; }

const Json& Preset::numeric(std::string_view field) const {
    const Json* j = find(field);
    if (!j) fail(field, "missing");
    if (!is_numeric_leaf(*j)) fail(field, "is not a numeric field {\"value\", \"source\"}");
    return *j;
}

double Preset::number(std::string_view field) const { return numeric(field)["value"].get<double>(); }

double Preset::positive(std::string_view field) const {
    double v = number(field);
    if (!(v > 0)) fail(field, fmt::format("must be > 0, is {}", v));
    return v;
}

double Preset::nonnegative(std::string_view field) const {
    double v = number(field);
    if (v < 0) fail(field, fmt::format("must be >= 0, is {}", v));
    return v;
}

std::int64_t Preset::count(std::string_view field, std::int64_t max) const {
    double v = number(field);
    if (!(v >= 1) || v != std::floor(v) || v > double(max))
        fail(field, fmt::format("must be a whole number in [1, {}], is {}", max, v));
    return std::int64_t(v);
}

std::optional<double> Preset::optional_number(std::string_view field) const {
    if (!has(field)) return std::nullopt;
    return number(field);
}

std::string Preset::source(std::string_view field) const { return numeric(field)["source"].get<std::string>(); }

std::string Preset::unit(std::string_view field) const {
    const Json& j = numeric(field);
    auto it = j.find("unit");
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string Preset::text(std::string_view field) const {
    auto t = optional_text(field);
    if (!t) fail(field, "missing");
    return *t;
}

std::optional<std::string> Preset::optional_text(std::string_view field) const {
    const Json* j = find(field);
    if (!j) return std::nullopt;
    if (!j->is_string()) fail(field, "is not a string");
    return j->get<std::string>();
}

std::string Preset::description() const { return optional_text("description").value_or(""); }

bool Preset::flag(std::string_view field, bool fallback) const {
    const Json* j = find(field);
    if (!j) return fallback;
    if (!j->is_boolean()) fail(field, "is not true/false");
    return j->get<bool>();
}

Preset Preset::group(std::string_view field) const {
    const Json* j = find(field);
    if (!j) fail(field, "missing");
    if (!j->is_object() || is_numeric_leaf(*j)) fail(field, "is not a group of fields");
    Preset p;
    p.origin_ = origin_;
    p.kind_ = kind_;
    p.name_ = name_;
    p.prefix_ = path_of(field);
    p.json_ = *j;
    return p;
}

std::vector<std::string> Preset::members(std::string_view field) const {
    const Json* j = field.empty() ? &json_ : find(field);
    if (!j) fail(field, "missing");
    std::vector<std::string> out;
    if (j->is_object())
        for (auto it = j->begin(); it != j->end(); ++it) out.push_back(it.key());
    return out;
}

std::filesystem::path presets_dir() {
    if (const char* env = std::getenv("AQPIM_PRESETS"); env && *env) return env;
#ifdef AQPIM_PRESETS_DIR
    if (std::filesystem::is_directory(AQPIM_PRESETS_DIR)) return AQPIM_PRESETS_DIR;
#endif
    std::error_code ec;
    auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (!ec) return exe.parent_path().parent_path() / "presets";
    return "presets";
}

std::vector<std::string> preset_names(std::string_view kind) {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(presets_dir() / kind, ec))
        if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
    std::sort(names.begin(), names.end());
    return names;
}

Preset find_preset(std::string_view kind, std::string_view name_or_path) {
    std::filesystem::path as_path(name_or_path);
    if (as_path.extension() == ".json" || name_or_path.find('/') != std::string_view::npos) {
        Preset p = Preset::load(as_path);
        if (p.kind() != kind) p.fail("kind", fmt::format("is \"{}\", expected \"{}\"", p.kind(), kind));
        return p;
    }
    auto path = presets_dir() / kind / (std::string(name_or_path) + ".json");
    if (!std::filesystem::exists(path)) {
        auto names = preset_names(kind);
        std::string list;
        for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
        AQPIM_FAIL("unknown {} preset \"{}\" (known: {}; or give a path to a .json file)", kind, name_or_path,
                   list.empty() ? "none found in " + (presets_dir() / kind).string() : list);
    }
    Preset p = Preset::load(path);
    if (p.kind() != kind) p.fail("kind", fmt::format("is \"{}\", expected \"{}\"", p.kind(), kind));
    return p;
}

}  // namespace aqpim
