#pragma once
// Read-only memory map of a whole file (RAII). Readers of untrusted files check every size and
// offset against size() before touching data().

#include <cstddef>
#include <cstdint>
#include <string>

namespace aqpim {

class MappedFile {
public:
    MappedFile() = default;
    /// Map `path` read-only; throws aqpim::Error naming the path if it cannot be opened or mapped.
    explicit MappedFile(const std::string& path);
    MappedFile(MappedFile&& o) noexcept;
    MappedFile& operator=(MappedFile&& o) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile();

    const std::uint8_t* data() const { return data_; }
    std::size_t size() const { return size_; }
    const std::string& path() const { return path_; }

private:
    std::string path_;
    const std::uint8_t* data_ = nullptr;
    std::size_t size_ = 0;
};

}  // namespace aqpim
