#pragma once
// Files in and out of the command: whole input files read with their size checked first, JSON
// parsed with a bounded nesting depth, and output files that never harm an input and never leave a
// half-written file behind.

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "aqpim/error.h"

namespace aqpim {

/// Default largest input read whole (text, JSON, vocabularies): 1 GiB.
inline constexpr std::uint64_t kMaxWholeFileBytes = std::uint64_t(1) << 30;

/// The bytes of a regular file. `what` names the file's role in the messages ("tokenizer", "-f").
/// Throws aqpim::Error when the path is missing, a directory, a FIFO or device, unreadable, or
/// larger than `max_bytes`.
std::string read_whole_file(const std::string& path, std::string_view what,
                            std::uint64_t max_bytes = kMaxWholeFileBytes);

/// Deepest nesting of arrays and objects accepted in a JSON input. The formats read here nest a
/// few levels; a hostile file nested 100k deep would otherwise overflow the stack of code that
/// walks, copies or prints it.
inline constexpr int kMaxJsonDepth = 64;

/// Parse JSON text (nlohmann::json or ordered_json); malformed or too deeply nested input is an
/// aqpim::Error starting with `what`.
template <class Json = nlohmann::json>
Json parse_json(std::string_view text, const std::string& what) {
    auto limit_depth = [&](int depth, typename Json::parse_event_t, Json&) {
        if (depth >= kMaxJsonDepth)  // the depth outside the array or object that starts
            AQPIM_FAIL("{}: JSON nested deeper than {} levels", what, kMaxJsonDepth);
        return true;
    };
    try {
        return Json::parse(text.begin(), text.end(), limit_depth);
    } catch (const typename Json::exception& e) {
        const std::string_view why = e.what();  // quotes the offending token, which may be huge
        AQPIM_FAIL("{}: not valid JSON: {}{}", what, why.substr(0, 200), why.size() > 200 ? "..." : "");
    }
}

/// A JSON value as text for an error message: at most `max_chars` characters (then "...").
std::string json_excerpt(const nlohmann::json& j, std::size_t max_chars = 60);
std::string json_excerpt(const nlohmann::ordered_json& j, std::size_t max_chars = 60);

/// Throws unless writing `out` destroys no input: `out` is not a directory and is not the same file
/// as any of `inputs` (a directory among the inputs stands for the files in it; inputs that do not
/// exist or are empty strings are skipped). `what` names the option ("-o", "--trace").
void check_output_not_input(const std::string& out, const std::vector<std::string>& inputs, std::string_view what);

/// Throws unless the file system that will hold `path` has `bytes` free (a large output fails at
/// once instead of filling the disk and failing at the end).
void check_free_space(const std::string& path, std::uint64_t bytes, std::string_view what);

/// An output file that appears only when complete. The bytes go to a new temporary file beside
/// `path` (created exclusively, so no existing file is touched); commit() renames it onto `path`
/// (onto the file a symlink names, keeping an existing file's permissions). Destroyed without
/// commit() (an error on the way), it removes the temporary file and `path` is as it was; so does
/// SIGINT, SIGTERM, SIGHUP, SIGQUIT or SIGPIPE while it is open (a handler is installed where the
/// program left those signals at their default). A path that exists and is not a regular file
/// (/dev/stdout, a FIFO, a device) is written directly: there is nothing to replace.
class OutputFile {
public:
    OutputFile(std::string path, std::string_view what);
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;
    ~OutputFile();

    std::ostream& stream() { return out_; }
    /// Flush, check every write succeeded, and move the file into place.
    void commit();
    const std::string& path() const { return path_; }

private:
    void fail_if_bad(std::string_view doing);

    std::string path_, target_, tmp_, what_;  ///< target_: where the bytes end (path_, symlinks resolved)
    std::ofstream out_;
    bool committed_ = false, direct_ = false;   ///< direct_: written in place (not a regular file)
    int mode_ = -1;                             ///< the replaced file's permissions (-1: a new file)
};

/// Write `text` to `path` through an OutputFile.
void write_output_file(const std::string& path, std::string_view text, std::string_view what);

}  // namespace aqpim
