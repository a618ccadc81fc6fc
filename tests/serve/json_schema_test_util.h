#pragma once
// Feeding a schema's recognizer byte by byte (serve/json_schema.h), for the schema tests.

#include <string>
#include <string_view>

#include "serve/json_schema.h"

namespace aqpim::test {

/// The first byte of `text` the recognizer refuses (text.size() when none); *complete whether
/// the text it read is a whole value.
inline std::size_t first_refused(const serve::JsonSchema& schema, const std::string& text, bool* complete = nullptr) {
    serve::JsonSchemaPrefix p(schema);
    for (std::size_t i = 0; i < text.size(); ++i)
        if (!p.feed(std::string_view(text).substr(i, 1))) return i;
    if (complete) *complete = p.complete();
    return text.size();
}

/// Whether the recognizer reads `text` whole as one value.
inline bool whole(const serve::JsonSchema& schema, const std::string& text) {
    bool complete = false;
    return first_refused(schema, text, &complete) == text.size() && complete;
}

}  // namespace aqpim::test
