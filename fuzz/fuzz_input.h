#pragma once
// What every fuzz target shares (docs/reliability.md): an input split into the files a reader
// opens, written to a private scratch folder, and the one outcome a reader may have besides
// success. An aqpim::Error is the expected answer to a bad file; any other exception escapes and
// libFuzzer reports it (the command would print it, but not as an error naming what is wrong), as
// it reports crashes, sanitizer findings, timeouts and allocations beyond -malloc_limit_mb.

#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "aqpim/error.h"

namespace aqpim::fuzz {

/// Separates the files of one input (a seed is file0 SEP file1 ...; the dictionaries name it).
inline constexpr std::string_view kPartSeparator = "\n--aqpim-fuzz-part--\n";

/// The input cut at every kPartSeparator; always at least one (possibly empty) part.
inline std::vector<std::string_view> split_parts(const std::uint8_t* data, std::size_t size) {
    std::string_view rest(reinterpret_cast<const char*>(data), size);
    std::vector<std::string_view> parts;
    for (std::size_t at; (at = rest.find(kPartSeparator)) != std::string_view::npos;) {
        parts.push_back(rest.substr(0, at));
        rest.remove_prefix(at + kPartSeparator.size());
    }
    parts.push_back(rest);
    return parts;
}

/// The part at index i, or empty when the input has fewer.
inline std::string_view part(const std::vector<std::string_view>& parts, std::size_t i) {
    return i < parts.size() ? parts[i] : std::string_view();
}

/// A scratch folder of this process ($TMPDIR or /tmp), emptied for each input.
inline const std::filesystem::path& scratch_dir() {
    static const std::filesystem::path dir = [] {
        auto d = std::filesystem::temp_directory_path() / ("aqpim-fuzz-" + std::to_string(::getpid()));
        std::filesystem::create_directories(d);
        return d;
    }();
    return dir;
}

/// Empty the scratch folder (one input's files never meet the next input's).
inline void clear_scratch() {
    for (const auto& e : std::filesystem::directory_iterator(scratch_dir())) std::filesystem::remove_all(e.path());
}

/// Write bytes to scratch_dir()/name and return the path.
inline std::string write_scratch(const std::string& name, std::string_view bytes) {
    const std::filesystem::path p = scratch_dir() / name;
    std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
    return p.string();
}

/// LLVMFuzzerInitialize of a target that makes its own seeds: with AQPIM_FUZZ_WRITE_SEEDS=DIR set
/// (scripts/fuzz.sh), write them into DIR and exit.
inline void write_seeds_if_asked(void (*write_seeds)(const std::filesystem::path&)) {
    if (const char* dir = std::getenv("AQPIM_FUZZ_WRITE_SEEDS"); dir && *dir) {
        std::filesystem::create_directories(dir);
        write_seeds(dir);
        std::exit(0);
    }
}

/// Two-part seeds (FIRST kPartSeparator SECOND), written to DIR/NAME0, NAME1, ...
inline void write_two_part_seeds(const std::filesystem::path& dir, const std::string& name,
                                 std::initializer_list<std::pair<std::string_view, std::string_view>> seeds) {
    int i = 0;
    for (const auto& [first, second] : seeds)
        std::ofstream(dir / (name + std::to_string(i++)), std::ios::binary) << first << kPartSeparator << second;
}

/// Defines LLVMFuzzerInitialize for a target that makes its own seeds (write_seeds_if_asked).
#define AQPIM_FUZZ_WRITES_SEEDS(write_seeds)                     \
    extern "C" int LLVMFuzzerInitialize(int*, char***) {         \
        aqpim::fuzz::write_seeds_if_asked(write_seeds);          \
        return 0;                                                \
    }

/// Run f; an aqpim::Error (a clear error naming the bad input) is a normal outcome.
template <class F>
void expect_success_or_error(F&& f) {
    try {
        f();
    } catch (const aqpim::Error&) {
    }
}

}  // namespace aqpim::fuzz
