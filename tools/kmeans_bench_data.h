#pragma once
// Inputs of the k-means and encode benchmarks (tools/bench_pq_kmeans.cpp, bench/bench_kmeans.cpp):
// KV-cache-like rows from synthetic_attention (outlier key channels, low-rank structure, RoPE on
// keys), cut into PQ sub-vectors.

#include <cstdint>
#include <vector>

#include "aqpim/kv_capture.h"

namespace aqpim::benchdata {

/// Keys and values of n_layers x n_kv_head heads, n_tokens each, as rows:
/// [n_layers][n_kv_head][K, V][n_tokens][D].
inline std::vector<float> kv_rows(int n_layers, int n_kv_head, int n_tokens, int D, std::uint64_t seed) {
    std::vector<float> rows;
    rows.reserve(std::size_t(n_layers) * n_kv_head * 2 * n_tokens * D);
    for (int il = 0; il < n_layers; ++il) {
        CapturedAttention a =
            synthetic_attention(n_tokens, n_kv_head, n_kv_head, D, seed + std::uint64_t(il) * 1000003u);
        for (int ih = 0; ih < n_kv_head; ++ih)
            for (const std::vector<float>* kv : {&a.k, &a.v}) {
                std::vector<float> head = a.kv_head(*kv, ih);
                rows.insert(rows.end(), head.begin(), head.end());
            }
    }
    return rows;
}

/// k-means problems of a PQ over rows [n_streams][n_tokens][D] with M = D / dsub subspaces:
/// [n_streams][M][n_tokens][dsub] (problem s * M + m = sub-vector m of stream s's tokens).
inline std::vector<float> subspace_problems(const std::vector<float>& rows, int n_streams, int n_tokens, int D,
                                            int dsub) {
    const int M = D / dsub;
    std::vector<float> x(rows.size());
    for (int s = 0; s < n_streams; ++s)
        for (int m = 0; m < M; ++m)
            for (int t = 0; t < n_tokens; ++t)
                for (int d = 0; d < dsub; ++d)
                    x[((std::size_t(s) * M + m) * n_tokens + t) * dsub + d] =
                        rows[(std::size_t(s) * n_tokens + t) * D + m * dsub + d];
    return x;
}

}  // namespace aqpim::benchdata
