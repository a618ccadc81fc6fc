#pragma once
// The KV cache of the `turbo` (TurboQuant) and `qjl` (QJL keys) schemes (docs/kv-baselines.md).
//
// Per layer, sequence and KV head: key rows coded by a TurboStreamCoder (turbo_codec.h); value rows
// by another one (turbo), by a per-token scalar row codec or as f16 (qjl). A stream whose rows are
// split (outlier channels apart) chooses its outlier channels per (sequence, layer, KV head) from
// the energy Σ x² of each channel over the first `sel` tokens, which wait in f16 until then; the
// newest `window` tokens stay f16 as well.
//
// State at n tokens: the oldest quantized(n) = (n < sel ? 0 : max(0, n - window)) tokens coded, the
// rest f16. Tokens are coded from their f16 rows (the same code whether they arrived in a batch or
// alone), and after an append of tokens [n0, n) the f16 rows of [quantized(n0 + 1), quantized(n))
// stay until the next append, so the rows of that step read every token as token-by-token decoding
// would (the KvCache time-consistency contract, as KIVI's cache does it).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "aqpim/kv_cache.h"
#include "aqpim/kv_scheme.h"
#include "kv/scalar_cache.h"
#include "kv/scalar_codec.h"
#include "kv/turbo_codec.h"

namespace aqpim::kv {

/// How value rows are stored: TurboQuant (rotated coordinates), a scalar row codec, or f16.
class TurboValueCodec {
public:
    explicit TurboValueCodec(TurboStreamCoder turbo);
    explicit TurboValueCodec(RowCodec rows);
    /// f16 rows of head_dim values.
    explicit TurboValueCodec(int head_dim);

    int head_dim() const { return head_dim_; }
    const std::optional<TurboStreamCoder>& turbo() const { return turbo_; }
    const std::optional<RowCodec>& rows() const { return rows_; }
    std::size_t row_bytes() const;
    /// True when decode_tile gives rotated coordinates (turbo) that need unrotate().
    bool rotated() const { return turbo_.has_value(); }
    /// x [head_dim] -> one row.
    void encode(const float* x, const int* channels, std::uint8_t* row) const;
    /// rows [n][row_bytes()] -> out [n][head_dim], in the coordinates attention accumulates in.
    void decode_tile(const std::uint8_t* rows, std::int64_t n, float* out) const;
    /// rows -> out [n][head_dim] in the original coordinates.
    void decode(const std::uint8_t* rows, std::int64_t n, const int* channels, float* out) const;

private:
    int head_dim_ = 0;
    std::optional<TurboStreamCoder> turbo_;
    std::optional<RowCodec> rows_;
};

struct TurboCacheParams {
    std::string scheme;  ///< what scheme() reports
    std::optional<TurboStreamCoder> keys;
    std::optional<TurboValueCodec> values;
    int sel = 0;     ///< tokens whose channel energies choose the outlier channels (0: no stream is split)
    int window = 0;  ///< newest tokens kept f16
    bool decode_attention = false;  ///< attend by decoding to the original coordinates (the reference)
};

/// One (layer, sequence, KV head) as the fast attention reads it.
struct TurboHeadView {
    SegmentedHead segments;             ///< which rows read which tokens coded, and the f16 rows
    const std::uint8_t* k_rows = nullptr;  ///< [quantized tokens][key row bytes]
    const std::uint8_t* v_rows = nullptr;  ///< [quantized tokens][value row bytes]
    const int* k_channels = nullptr;    ///< [head_dim] key channel permutation (nullptr: identity)
    const int* v_channels = nullptr;
};

/// out = softmax(scale q·K^T) V for every row of `query` (positions already checked): coded tokens
/// scored as q_ext · k_ext in the parts' coordinates (each row's query prepared once), their values
/// accumulated in the value coordinates and rotated back once per row, then the row's f16 tokens.
/// A row's result depends only on its position and the stored data (tiles start at fixed multiples).
void attend_turbo(const TurboStreamCoder& keys, const TurboValueCodec& values, const TurboHeadView& head,
                  const KvQuery& query);

/// The cache (sel >= 1 exactly when a stream is split; window >= 0; codecs of the shape's head_dim).
std::unique_ptr<KvCache> make_turbo_qjl_cache(TurboCacheParams params, const KvShape& shape,
                                             const KvCacheOptions& options);

}  // namespace aqpim::kv
