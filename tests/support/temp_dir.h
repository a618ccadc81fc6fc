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

/// Files in `path`'s directory whose names start with `path`'s name and a dot: what a writer of
/// `path` may have left behind (temporary files).
inline int files_left_beside(const std::string& path) {
    namespace fs = std::filesystem;
    const fs::path p(path);
    const std::string prefix = p.filename().string() + ".";
    int n = 0;
    for (const auto& e : fs::directory_iterator(p.parent_path()))
        if (e.path().filename().string().rfind(prefix, 0) == 0) ++n;
    return n;
}

}  // namespace aqpim::test
