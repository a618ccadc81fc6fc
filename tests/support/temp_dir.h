#pragma once
// Files in this test process's own temporary directory (removed when the process exits), so
// parallel test processes never share a path.

#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace aqpim::test {

inline std::string temp_path(const std::string& name) {
    namespace fs = std::filesystem;
    struct TempDir {
        fs::path dir = fs::temp_directory_path() / ("aqpim_test_" + std::to_string(::getpid()));
        TempDir() { fs::create_directories(dir); }
        ~TempDir() {
            std::error_code ec;
            fs::remove_all(dir, ec);
        }
    };
    static const TempDir d;
    return (d.dir / name).string();
}

}  // namespace aqpim::test
