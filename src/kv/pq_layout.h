#pragma once
// What a PQ cache of given parameters looks like before any data: quantizer parameters, the page
// width (code bytes per token over every coded layer and KV head), page sizes, the schedule, and the
// byte arithmetic memory() and the budget share (docs/kv-pq.md, "Accounting").

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "aqpim/kv_pq.h"
#include "aqpim/pq_codes.h"
#include "kv/scalar_codec.h"

namespace aqpim::kv {

/// Bytes one token's codes take in the block layout (padded M at 4 bits).
inline std::size_t pq_token_code_bytes(int M, int nbits) { return code_block_bytes(M, nbits) / kCodeBlock; }
/// x rounded up to a multiple of 64 (a PagePool page stride).
inline std::size_t round_up_64(std::size_t x) { return (x + 63) / 64 * 64; }

/// Quantizer parameters for keys (RoPE pairs, k_scale) and values (no pairs, v_scale) with M subspaces.
PQParams pq_key_params(const PqKvParams& p, const KvShape& shape, int M);
PQParams pq_value_params(const PqKvParams& p, const KvShape& shape, int M);
/// parameter_bytes() a quantizer of these parameters will have once trained: its docs/pq-format.md
/// sections, with a permutation unless the plan is the identity by construction (contiguous order
/// without NeoX pairs).
std::size_t predicted_quantizer_bytes(const PQParams& params, CodebookStorage codebooks);
/// Whether a quantizer of these parameters has the identity permutation whatever its data
/// (contiguous order without NeoX pairs); otherwise its permutation is counted.
bool plan_is_identity_by_construction(const PQParams& params);
/// The codec of the window and pre-calibration rows (wq=), none for f16; errors on a head_dim the
/// codec cannot take.
std::optional<RowCodec> pq_window_codec(const PqKvParams& p, const KvShape& shape);
/// The m that bits= may choose for keys or values: divisors of head_dim with dsub <= 32, dsub even
/// for keys with RoPE pairs, M <= 256 with int8 scores; increasing.
std::vector<int> pq_m_candidates(const PqKvParams& p, const KvShape& shape, bool keys);

/// Byte counts of one sequence, by part.
struct PqParts {
    std::uint64_t codes = 0, page_slack = 0, codebooks = 0, sinks = 0, window = 0, precal = 0, dense = 0;
    std::string window_type = "f16";  ///< names the window and pre-calibration parts
    std::uint64_t total() const { return codes + page_slack + codebooks + sinks + window + precal + dense; }
    /// Adds the f16 sink rows and the window and pre-calibration rows of one coded layer at n tokens
    /// (`streams`: KV heads x 2 rows per token, times the layers counted), and returns its coded
    /// token count (schedule.coded(n)). memory() and pq_footprint_parts both count rows this way.
    std::int64_t add_layer_rows(const PqSchedule& schedule, std::int64_t n, std::uint64_t streams, std::uint64_t row_bytes,
                                std::uint64_t tail_row_bytes);
    void add_to(KvMemory& m) const;  ///< the parts under their memory() names (zero parts too)
};

struct PqLayout {
    PqSchedule sched;
    int n_coded_layers = 0;
    int n_dense_layers = 0;
    std::vector<int> slot;           ///< [n_layer] index among coded layers, or among dense layers
    std::vector<bool> dense;         ///< [n_layer] layer kept dense f16
    int Mk = 0, Mv = 0;              ///< fixed m (0 with bits=)
    std::size_t width = 0;           ///< code bytes per token of a page over every coded layer and head
    std::size_t code_page_bytes = 0;   ///< round_up_64(page * width)
    std::size_t dense_page_bytes = 0;  ///< round_up_64(page * n_dense_layers * n_kv_heads * 2 * D * 2)
    std::uint64_t codebook_bytes = 0;  ///< one version of every coded layer's quantizers (predicted)
    std::size_t row_bytes = 0;         ///< one f16 row: D * 2
    std::size_t tail_row_bytes = 0;    ///< one window / pre-calibration row as wq= stores it
};

/// The layout for these parameters; with bits=, the page width solves the budget at `context`
/// (the spec's ctx= first; 0 is an error) and a target out of reach is an error naming the minimum.
PqLayout make_pq_layout(const PqKvParams& p, const KvShape& shape, std::int64_t context);

/// Parts of one sequence with every layer at n tokens; codes counted at the page width.
PqParts pq_footprint_parts(const PqKvParams& p, const KvShape& shape, const PqLayout& layout, std::int64_t n);

/// The most bytes one sequence holds on its way to ctx tokens, and the first n where it holds them.
struct PqPeak {
    std::uint64_t bytes = 0;
    std::int64_t at = 0;
};
PqPeak pq_peak_footprint(const PqKvParams& p, const KvShape& shape, const PqLayout& layout, std::int64_t ctx);
/// The token counts pq_peak_footprint evaluates (the footprint's maximum over [1, ctx] is at one of them).
std::vector<std::int64_t> pq_peak_candidates(const PqKvParams& p, const PqLayout& layout, std::int64_t ctx);

}  // namespace aqpim::kv
