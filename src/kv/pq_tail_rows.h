#pragma once
// The f16 (or wq=-coded) rows of one stream of the PQ cache that are not read as codes: the sinks'
// successors in the window and the tokens waiting for their codebook version (docs/kv-pq.md).

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>

#include "aqpim/aligned.h"
#include "aqpim/error.h"
#include "aqpim/half.h"
#include "kv/scalar_codec.h"

namespace aqpim::kv {

/// Rows of one stream (a layer's keys or values of one KV head) for positions [first, end), stored as
/// f16 or, with wq=, as a scalar row codec; contiguous; rows are appended at the end and dropped at
/// the front (amortised O(1)).
class TailRows {
public:
    void init(int D, std::int64_t first, const std::optional<RowCodec>& codec) {
        D_ = D;
        first_ = first;
        codec_ = codec;
        row_bytes_ = codec ? codec->row_bytes() : std::size_t(D) * sizeof(f16_t);
    }
    std::int64_t first() const { return first_; }
    std::int64_t end() const { return first_ + n_; }
    bool is_f16() const { return !codec_; }
    /// The f16 row at pos (f16 storage only).
    const f16_t* f16_row(std::int64_t pos) const {
        AQPIM_ASSERT(is_f16());
        return reinterpret_cast<const f16_t*>(at(pos));
    }
    /// Rows [pos, pos + n) as f32 [n][D].
    void read(std::int64_t pos, std::int64_t n, float* out) const {
        AQPIM_ASSERT(pos >= first_ && pos + n <= end());
        if (codec_)
            codec_->decode(at(pos), n, out);
        else
            fp16_to_f32(f16_row(pos), out, std::size_t(n) * D_);
    }

    /// Append n rows at end(): row i from src + i * stride (f32, rounded to f16 or coded).
    void push(const float* src, std::int64_t n, std::int64_t stride) {
        reserve(n);
        std::uint8_t* dst = buf_.data() + std::size_t(off_ + n_) * row_bytes_;
        if (codec_)
            codec_->encode(src, n, stride, dst);
        else
            for (std::int64_t i = 0; i < n; ++i)
                f32_to_fp16(src + i * stride, reinterpret_cast<f16_t*>(dst) + i * D_, std::size_t(D_));
        n_ += n;
    }
    /// Forget rows before pos. A buffer grown for a long prefill shrinks once its rows are coded:
    /// only the rows it holds count in memory(), so only those may stay allocated (within 4x).
    void drop_before(std::int64_t pos) {
        const std::int64_t d = std::clamp<std::int64_t>(pos - first_, 0, n_);
        first_ += d;
        off_ += d;
        n_ -= d;
        if (n_ == 0) off_ = 0;
        const std::int64_t floor = std::max<std::int64_t>(n_, 64);
        if (capacity() > 4 * floor) reallocate(2 * floor);
    }

    // kv state (save_sequence / restore_sequence): the rows as stored
    std::size_t row_bytes() const { return row_bytes_; }
    /// The stored bytes of the rows from pos on, [end() - pos][row_bytes()].
    const std::uint8_t* stored_rows(std::int64_t pos) const { return at(pos); }
    /// Append n rows given as stored bytes [n][row_bytes()].
    void push_stored(const std::uint8_t* rows, std::int64_t n) {
        if (n == 0) return;  // no rows: the buffer may still be empty (memcpy of a null pointer is UB)
        reserve(n);
        std::memcpy(buf_.data() + std::size_t(off_ + n_) * row_bytes_, rows, std::size_t(n) * row_bytes_);
        n_ += n;
    }

private:
    const std::uint8_t* at(std::int64_t pos) const { return buf_.data() + std::size_t(off_ + (pos - first_)) * row_bytes_; }
    std::int64_t capacity() const { return std::int64_t(buf_.size() / std::max<std::size_t>(row_bytes_, 1)); }
    void reserve(std::int64_t more) {
        const std::int64_t cap = capacity();
        if (off_ + n_ + more <= cap) return;
        if (n_ + more <= cap / 2) {  // room at the front: slide down
            std::memmove(buf_.data(), buf_.data() + std::size_t(off_) * row_bytes_, std::size_t(n_) * row_bytes_);
            off_ = 0;
            return;
        }
        reallocate(std::max<std::int64_t>(2 * (n_ + more), 64));
    }
    /// A buffer of `rows` rows holding the live rows at its front.
    void reallocate(std::int64_t rows) {
        AlignedBuffer<std::uint8_t> next(std::size_t(rows) * row_bytes_);
        if (n_ > 0) std::memcpy(next.data(), buf_.data() + std::size_t(off_) * row_bytes_, std::size_t(n_) * row_bytes_);
        buf_ = std::move(next);
        off_ = 0;
    }

    int D_ = 0;
    std::optional<RowCodec> codec_;  ///< none: f16 rows
    std::size_t row_bytes_ = 0;
    std::int64_t first_ = 0, n_ = 0, off_ = 0;  ///< rows [first_, first_ + n_) at buf_ row off_
    AlignedBuffer<std::uint8_t> buf_;
};

}  // namespace aqpim::kv
