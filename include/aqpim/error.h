#pragma once
// Errors: library code throws aqpim::Error at API, file and config boundaries; hot kernels never
// throw and use AQPIM_ASSERT for internal invariants.

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace aqpim {

/// The one exception type of the library. The message names the bad value and what was expected.
class Error : public std::runtime_error {
public:
    explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);
[[noreturn]] void assert_fail(const char* file, int line, const char* cond);
}  // namespace detail

}  // namespace aqpim

/// Check a condition at an API/file/config boundary; on failure throw aqpim::Error with a
/// fmt-formatted message, e.g. AQPIM_CHECK(D % M == 0, "D={} is not divisible by M={}", D, M).
#define AQPIM_CHECK(cond, ...)                                                              \
    do {                                                                                     \
        if (!(cond)) ::aqpim::detail::throw_error(__FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
    } while (0)

/// Throw aqpim::Error unconditionally.
#define AQPIM_FAIL(...) ::aqpim::detail::throw_error(__FILE__, __LINE__, fmt::format(__VA_ARGS__))

/// Internal invariant (a bug if it fails). Active in all builds; aborts with the condition text.
#define AQPIM_ASSERT(cond)                                                     \
    do {                                                                       \
        if (!(cond)) ::aqpim::detail::assert_fail(__FILE__, __LINE__, #cond); \
    } while (0)
