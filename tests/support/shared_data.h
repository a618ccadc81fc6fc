#pragma once
// Where tests find the shared models and texts (../shared beside the checkout, see
// ../shared/DATA.md), and how a test that needs them says so: AQPIM_REQUIRE_SHARED skips the test
// (GoogleTest "skipped", with the path it looked for) when the data is absent, so a checkout
// without ../shared still passes with a visible count of skips.
//
// AQPIM_SHARED=DIR in the environment overrides the folder the build was configured with.

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace aqpim::test {

/// The shared data folder: $AQPIM_SHARED when set and non-empty, else ../shared beside the checkout.
inline std::string shared_dir() {
    const char* env = std::getenv("AQPIM_SHARED");
    if (env && *env) return env;
    return AQPIM_SHARED_DIR;
}

/// shared_dir() / rel.
inline std::string shared_path(const std::string& rel) { return shared_dir() + "/" + rel; }

/// Whether shared_path(rel) exists (a file or a folder).
inline bool shared_exists(const std::string& rel) {
    std::error_code ec;
    return std::filesystem::exists(shared_path(rel), ec);
}

}  // namespace aqpim::test

/// Skip the current test (from its body or SetUp) unless shared_path(rel) exists.
#define AQPIM_REQUIRE_SHARED(rel)                                                                   \
    do {                                                                                            \
        if (!::aqpim::test::shared_exists(rel))                                                     \
            GTEST_SKIP() << "shared data not found: " << ::aqpim::test::shared_path(rel)            \
                         << " (put ../shared beside the checkout or set AQPIM_SHARED=DIR)";         \
    } while (0)
