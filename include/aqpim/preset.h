#pragma once
// Presets: JSON files under presets/<kind>/<name>.json that describe models, devices, DRAM/PIM
// parts and energy tables for `aqpim roofline` and `aqpim pimsim`. One format, one loader.
//
// Every number in a preset carries its provenance:
//     "hbm_bandwidth": {"value": 3.35e12, "unit": "B/s", "source": "NVIDIA H100 datasheet (2023)"}
// A bare number, a number without a non-empty "source", or a non-finite value is an error naming
// the file and the field. Objects without "value" group fields ("timing": {"nCL": {...}, ...});
// field paths use dots ("timing.nCL"). Strings, booleans and arrays of strings may be bare.
// Top-level "kind" and "name" are required and must match the file's place under presets/.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace aqpim {

class Preset {
public:
    /// Parse and validate preset text; `origin` names it in errors (usually the file path).
    static Preset parse(std::string_view text, const std::string& origin);
    /// Load and validate a preset file.
    static Preset load(const std::filesystem::path& path);

    const std::string& origin() const { return origin_; }
    const std::string& kind() const { return kind_; }
    const std::string& name() const { return name_; }
    std::string description() const;

    bool has(std::string_view field) const;
    /// The value of a numeric field; error naming the origin and field if missing.
    double number(std::string_view field) const;
    /// number() that must also be > 0 (resp. >= 0); error names the field and the value.
    double positive(std::string_view field) const;
    double nonnegative(std::string_view field) const;
    /// A positive integer-valued field (error if it has a fraction or exceeds `max`).
    std::int64_t count(std::string_view field, std::int64_t max = std::int64_t(1) << 40) const;
    std::optional<double> optional_number(std::string_view field) const;
    std::string source(std::string_view field) const;
    std::string unit(std::string_view field) const;  // "" when the field has none
    std::string text(std::string_view field) const;   // a string field; error if missing
    std::optional<std::string> optional_text(std::string_view field) const;
    bool flag(std::string_view field, bool fallback) const;
    /// A group of fields as a preset of its own (same origin; field names prefixed in errors).
    Preset group(std::string_view field) const;
    /// Names of the members of a group ("" = top level), in file order.
    std::vector<std::string> members(std::string_view field = "") const;

    /// Throw an error "ORIGIN: field F: MSG" (for cross-field consistency checks by users).
    [[noreturn]] void fail(std::string_view field, const std::string& msg) const;

    const nlohmann::ordered_json& json() const { return json_; }

private:
    Preset() = default;
    const nlohmann::ordered_json* find(std::string_view field) const;
    const nlohmann::ordered_json& numeric(std::string_view field) const;
    std::string path_of(std::string_view field) const;

    std::string origin_, kind_, name_, prefix_;
    nlohmann::ordered_json json_;
};

/// The presets directory: $AQPIM_PRESETS if set, else the source tree's presets/ (compiled in),
/// else presets/ next to the binary's parent directory.
std::filesystem::path presets_dir();

/// Find a preset by kind and name (presets/<kind>/<name>.json); `name_or_path` may also be a path
/// to a .json file. Unknown name -> error listing the known names of that kind.
Preset find_preset(std::string_view kind, std::string_view name_or_path);

/// Names of the presets of a kind, sorted.
std::vector<std::string> preset_names(std::string_view kind);

}  // namespace aqpim
