#pragma once
// Shared paths and helpers of the tokenizer tests.

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "support/cli.h"

namespace aqpim::test {

inline std::string read_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

/// A fresh empty directory under the system temp dir for one test.
inline std::string temp_dir(const std::string& name) {
    const auto d = std::filesystem::temp_directory_path() / ("aqpim_tok_" + name);
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d.string();
}

inline std::string stories_tok() { return shared_dir() + "/models/stories260K/tok512.bin"; }
inline std::string stories_gguf() { return shared_dir() + "/models/stories260K/stories260K.gguf"; }
inline std::string austen_model() { return shared_dir() + "/models/austen-13m/tokenizer.model"; }
inline std::string austen_gguf() { return shared_dir() + "/models/austen-13m/austen-13m-f16.gguf"; }
inline std::string tinystories_json() { return shared_dir() + "/models/tinystories-656k/tokenizer.json"; }
inline std::string tokens_dir() { return shared_dir() + "/reference/tokens"; }

}  // namespace aqpim::test
