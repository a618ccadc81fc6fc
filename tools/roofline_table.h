#pragma once
// A report of `aqpim roofline`: titled tables of numbers and words, printed aligned, as JSON or as CSV.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace aqpim::cli {

struct Table {
    std::string name;                 ///< machine name ("decode", "batch", ...): the JSON key
    std::string title;                ///< what the table shows, for people
    std::vector<std::string> columns; ///< column names with their unit ("time_ms")
    std::vector<std::vector<nlohmann::json>> rows;  ///< cells: numbers or strings
    std::vector<std::string> notes;   ///< printed under the table

    void add(std::vector<nlohmann::json> row);
    /// Aligned text: numbers with 4 significant digits (integers in full), strings left-aligned.
    std::string text() const;
    /// {"title", "columns", "rows": [{column: value}], "notes"}.
    nlohmann::ordered_json to_json() const;
    /// One header line and one line per row (strings quoted when they hold ',' or '"').
    std::string csv() const;
};

struct Report {
    nlohmann::ordered_json header;    ///< model, device, run: printed as "key: value" lines, in order
    std::vector<Table> tables;

    std::string text() const;
    nlohmann::ordered_json to_json() const;
    /// Tables one after another, each introduced by a "# name: title" line.
    std::string csv() const;
};

}  // namespace aqpim::cli
