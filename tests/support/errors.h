#pragma once
// The message of the aqpim::Error a call throws, for tests that check what an error names.

#include <functional>
#include <string>

#include "aqpim/error.h"

namespace aqpim::test {

/// What f throws as aqpim::Error; "" when it returns.
inline std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace aqpim::test
