// Input files read whole, JSON with a bounded depth, and output files that harm no input
// (include/aqpim/file_io.h).
#include "aqpim/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <mutex>
#include <filesystem>
#include <fstream>

namespace aqpim {

namespace fs = std::filesystem;

std::string read_whole_file(const std::string& path, std::string_view what, std::uint64_t max_bytes) {
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    AQPIM_CHECK(!ec && fs::exists(st), "{} {}: no such file", what, path);
    AQPIM_CHECK(!fs::is_directory(st), "{} {}: is a directory, not a file", what, path);
    AQPIM_CHECK(fs::is_regular_file(st), "{} {}: not a regular file", what, path);
    const std::uint64_t size = fs::file_size(path, ec);
    AQPIM_CHECK(!ec, "{} {}: cannot read its size: {}", what, path, ec.message());
    AQPIM_CHECK(size <= max_bytes, "{} {}: {} bytes, larger than the {} bytes read whole at most", what, path, size,
                max_bytes);
    std::ifstream f(path, std::ios::binary);
    AQPIM_CHECK(f.good(), "{} {}: cannot open: {}", what, path, std::strerror(errno));
    std::string bytes(std::size_t(size), '\0');
    f.read(bytes.data(), std::streamsize(size));
    AQPIM_CHECK(std::uint64_t(f.gcount()) == size, "{} {}: read {} of its {} bytes", what, path, f.gcount(), size);
    return bytes;
}

namespace {
template <class Json>
std::string excerpt(const Json& j, std::size_t max_chars) {
    std::string s = j.dump();
    if (s.size() > max_chars) s = s.substr(0, max_chars) + "...";
    return s;
}
}  // namespace

std::string json_excerpt(const nlohmann::json& j, std::size_t max_chars) { return excerpt(j, max_chars); }
std::string json_excerpt(const nlohmann::ordered_json& j, std::size_t max_chars) { return excerpt(j, max_chars); }

void check_output_not_input(const std::string& out, const std::vector<std::string>& inputs, std::string_view what) {
    std::error_code ec;
    AQPIM_CHECK(!fs::is_directory(out, ec), "{} {}: is a directory; give a file name", what, out);
    if (!fs::exists(out, ec)) return;
    auto refuse_if_same = [&](const fs::path& in) {
        std::error_code e;
        AQPIM_CHECK(!fs::equivalent(out, in, e), "{} {}: refusing to overwrite the input {}", what, out, in.string());
    };
    for (const std::string& in : inputs) {
        if (in.empty() || !fs::exists(in, ec)) continue;
        if (fs::is_directory(in, ec)) {
            for (const auto& e : fs::directory_iterator(in, ec)) refuse_if_same(e.path());
        } else {
            refuse_if_same(in);
        }
    }
}

void check_free_space(const std::string& path, std::uint64_t bytes, std::string_view what) {
    std::error_code ec;
    const fs::path dir = fs::absolute(path, ec).parent_path();
    const fs::space_info space = fs::space(dir, ec);
    if (ec) return;  // unknown: let the write say
    AQPIM_CHECK(space.available >= bytes,
                "{} {}: needs {} bytes ({:.2f} GiB), the file system holding it has {:.2f} GiB free", what, path, bytes,
                double(bytes) / double(1ull << 30), double(space.available) / double(1ull << 30));
}

namespace {

// Temporary files of open OutputFiles, removed by the signal handler (unlink is async-signal-safe).
constexpr int kMaxOpenOutputs = 16;
std::atomic<const char*> g_open_outputs[kMaxOpenOutputs];

extern "C" void remove_open_outputs_and_reraise(int sig) {
    for (auto& slot : g_open_outputs)
        if (const char* p = slot.load()) ::unlink(p);
    ::signal(sig, SIG_DFL);
    ::raise(sig);
}

void install_cleanup_handlers() {
    static std::once_flag once;
    std::call_once(once, [] {
        for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) {
            struct sigaction old {};
            if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;  // the program's own
            struct sigaction sa {};
            sa.sa_handler = remove_open_outputs_and_reraise;
            sigemptyset(&sa.sa_mask);
            ::sigaction(sig, &sa, nullptr);
        }
    });
}

void register_open_output(const char* tmp) {
    install_cleanup_handlers();
    for (auto& slot : g_open_outputs) {
        const char* empty = nullptr;
        if (slot.compare_exchange_strong(empty, tmp)) return;
    }  // more than kMaxOpenOutputs at once: this one is only removed on errors, not on signals
}

void unregister_open_output(const char* tmp) {
    for (auto& slot : g_open_outputs) {
        const char* expected = tmp;
        if (slot.compare_exchange_strong(expected, nullptr)) return;
    }
}

/// The process's umask without changing it (umask() can only be read by setting it, which races
/// with threads creating files): Linux reports it in /proc/self/status.
mode_t process_umask() {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
        if (line.rfind("Umask:", 0) == 0) return mode_t(std::stoul(line.substr(6), nullptr, 8));
    const mode_t mask = ::umask(0);  // no /proc: read it by setting it back at once
    ::umask(mask);
    return mask;
}
}  // namespace

OutputFile::OutputFile(std::string path, std::string_view what) : path_(std::move(path)), what_(what) {
    std::error_code ec;
    AQPIM_CHECK(!path_.empty(), "{}: empty file name", what_);
    AQPIM_CHECK(!fs::is_directory(path_, ec), "{} {}: is a directory; give a file name", what_, path_);
    target_ = path_;
    const fs::file_status st = fs::status(path_, ec);  // follows symlinks
    if (fs::exists(st) && !fs::is_regular_file(st)) {
        direct_ = true;  // /dev/stdout, a FIFO, a device: write into it, never replace it
        out_.open(path_, std::ios::binary);
        AQPIM_CHECK(out_.is_open(), "{} {}: cannot open for writing: {}", what_, path_, std::strerror(errno));
        return;
    }
    if (fs::is_symlink(fs::symlink_status(path_, ec))) {
        const fs::path resolved = fs::weakly_canonical(path_, ec);
        AQPIM_CHECK(!ec, "{} {}: cannot resolve the symbolic link: {}", what_, path_, ec.message());
        target_ = resolved.string();
    }
    if (fs::exists(st)) mode_ = int(fs::status(target_, ec).permissions() & fs::perms::mask);
    // The name is registered before mkstemp creates the file (mkstemp fills in its X's in place), so
    // a signal at any moment from here on removes whatever name it holds: registered after, a
    // signal between the two left the file behind (seen once in a CI run of
    // CliFiles.AnInterruptedWriteLeavesNothing).
    tmp_ = target_ + ".XXXXXX";
    register_open_output(tmp_.c_str());
    const int fd = ::mkstemp(tmp_.data());
    if (fd < 0) {
        const int err = errno;
        unregister_open_output(tmp_.c_str());
        AQPIM_FAIL("{} {}: cannot create a file beside it: {}", what_, path_, std::strerror(err));
    }
    ::close(fd);
    out_.open(tmp_, std::ios::binary | std::ios::trunc);
    if (!out_.is_open()) {
        unregister_open_output(tmp_.c_str());
        fs::remove(tmp_, ec);
        AQPIM_FAIL("{} {}: cannot open {} for writing", what_, path_, tmp_);
    }
}

OutputFile::~OutputFile() {
    if (direct_) return;
    unregister_open_output(tmp_.c_str());
    if (committed_) return;
    out_.close();
    std::error_code ec;
    fs::remove(tmp_, ec);
}

void OutputFile::fail_if_bad(std::string_view doing) {
    if (out_.good()) return;
    const int err = errno;
    AQPIM_FAIL("{} {}: {} failed: {}", what_, path_, doing, err != 0 ? std::strerror(err) : "stream error");
}

void OutputFile::commit() {
    AQPIM_CHECK(!committed_, "{} {}: committed twice", what_, path_);
    out_.flush();
    fail_if_bad("writing");
    out_.close();
    fail_if_bad("closing");
    committed_ = true;
    if (direct_) return;
    // mkstemp creates the file 0600: the replaced file's permissions, or a new file's of this user
    ::chmod(tmp_.c_str(), mode_t(mode_ >= 0 ? mode_ : 0666 & ~process_umask()));
    std::error_code ec;
    fs::rename(tmp_, target_, ec);
    if (ec) {
        committed_ = false;  // the destructor removes the temporary file
        AQPIM_FAIL("{} {}: cannot move {} into place: {}", what_, path_, tmp_, ec.message());
    }
}

void write_output_file(const std::string& path, std::string_view text, std::string_view what) {
    OutputFile f(path, what);
    f.stream().write(text.data(), std::streamsize(text.size()));
    f.commit();
}

}  // namespace aqpim
