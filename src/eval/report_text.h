#pragma once
// Text helpers shared by the eval reports (src/eval/eval_report.cpp, retrieval_report.cpp).

#include <string>
#include <vector>

namespace aqpim::report_text {

/// Columns padded to their widest cell: the first left-aligned, the others right-aligned.
std::string aligned(const std::vector<std::vector<std::string>>& rows);
/// A CSV field, quoted when it holds a separator, quote or line break (specs hold commas).
std::string csv_field(const std::string& s);

}  // namespace aqpim::report_text
