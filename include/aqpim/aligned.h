#pragma once
// Aligned, uninitialised-by-default buffers for kernels (64-byte alignment = one cache line,
// one AVX-512 register).

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <type_traits>
#include <utility>

namespace aqpim {

inline constexpr std::size_t kAlign = 64;

void* aligned_malloc(std::size_t bytes);  // throws aqpim::Error on failure; bytes may be 0
void aligned_free(void* p) noexcept;

/// Owning buffer of trivially copyable T, 64-byte aligned. Contents are zeroed on construction
/// (kernels rely on padding being zero) and on resize growth.
template <class T>
class AlignedBuffer {
    static_assert(std::is_trivially_copyable_v<T>);

public:
    AlignedBuffer() = default;
    explicit AlignedBuffer(std::size_t n) { resize(n); }
    AlignedBuffer(const AlignedBuffer& o) : AlignedBuffer(o.n_) {
        if (n_) std::memcpy(p_, o.p_, n_ * sizeof(T));
    }
    AlignedBuffer(AlignedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    AlignedBuffer& operator=(AlignedBuffer o) noexcept {
        std::swap(p_, o.p_);
        std::swap(n_, o.n_);
        return *this;
    }
    ~AlignedBuffer() { aligned_free(p_); }

    /// Resize, keeping the first min(old, n) elements; new elements are zero.
    void resize(std::size_t n) {
        if (n == n_) return;
        T* q = static_cast<T*>(aligned_malloc(n * sizeof(T)));
        std::size_t keep = n < n_ ? n : n_;
        if (keep) std::memcpy(q, p_, keep * sizeof(T));
        if (n > keep) std::memset(static_cast<void*>(q + keep), 0, (n - keep) * sizeof(T));
        aligned_free(p_);
        p_ = q;
        n_ = n;
    }
    void fill_zero() {
        if (n_) std::memset(static_cast<void*>(p_), 0, n_ * sizeof(T));
    }

    T* data() { return p_; }
    const T* data() const { return p_; }
    std::size_t size() const { return n_; }
    bool empty() const { return n_ == 0; }
    T& operator[](std::size_t i) { return p_[i]; }
    const T& operator[](std::size_t i) const { return p_[i]; }
    T* begin() { return p_; }
    T* end() { return p_ + n_; }
    const T* begin() const { return p_; }
    const T* end() const { return p_ + n_; }
    std::span<T> span() { return {p_, n_}; }
    std::span<const T> span() const { return {p_, n_}; }

private:
    T* p_ = nullptr;
    std::size_t n_ = 0;
};

}  // namespace aqpim
