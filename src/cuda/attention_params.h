#pragma once
// What one decode-attention launch reads and writes, for one layer: device pointers and sizes.
// Plain data, shared by the kernels, their launchers and the host emulation in the tests.
//
// Sequences b < batch; KV heads kv < n_kv_heads; each KV head serves a GQA group of n_q query heads
// (query head kv * n_q + h). A sequence's coded tokens [0, n_coded[b]) live in pages of
// page_tokens tokens (a multiple of 32): page p of sequence b starts at byte
// page_offset[b * max_pages + p] of `pool`, and holds KV head kv's key blocks at
// k_stream_off[kv] and value blocks at v_stream_off[kv] inside the page (the PQ cache's page
// layout, docs/kv-pq.md). Its codebook version is page_version[b * max_pages + p].
// The f16 rows (attention sinks and the recent window) of (b, kv) are rows [0, n_f16[b]) of
// k16/v16 [batch][n_kv_heads][max_f16][D].

#include <cstdint>

#include "cuda/pq_tile.h"

namespace aqpim::cuda {

inline constexpr int kMaxGroup = 8;  ///< GQA ratios 1..8

/// The kernels are instantiated for groups of 1, 2, 4 and 8 query heads: the one serving n_q
/// (heads past n_q get zero queries and are not written).
AQPIM_HD int group_instance(int n_q) { return n_q <= 1 ? 1 : n_q <= 2 ? 2 : n_q <= 4 ? 4 : 8; }

struct AttentionShape {
    int batch = 1;
    int n_kv_heads = 1;
    int n_q = 1;  ///< query heads per KV head (GQA ratio)
    int D = 128;  ///< head_dim: 64 or 128
    float scale = 1.0f;
};

struct PqAttentionParams {
    AttentionShape shape;
    int Mk = 32, Mv = 32;  ///< subspaces of keys / values
    int nbits = 4;         ///< code width: 4 (16 centroids per subspace) or 8 (256; pq_attention_8bit.cu)
    int page_tokens = 256;
    int max_pages = 0;      ///< page table row length
    int n_versions = 1;     ///< codebook slots per (sequence, KV head)
    int chunk_pages = 1;    ///< pages per thread block (the split over the context)
    int n_chunks = 0;       ///< coded chunks per (sequence, KV head); chunk n_chunks is the f16 rows
    int max_f16 = 0;

    const float* q = nullptr;                  ///< [batch][n_kv_heads * n_q][D] original space
    const std::uint8_t* pool = nullptr;        ///< code pages
    const std::int64_t* page_offset = nullptr;  ///< [batch][max_pages] bytes into pool
    const std::uint8_t* page_version = nullptr;  ///< [batch][max_pages]
    const std::int64_t* k_stream_off = nullptr;  ///< [n_kv_heads] bytes into a page
    const std::int64_t* v_stream_off = nullptr;  ///< [n_kv_heads]
    const int* n_coded = nullptr;                ///< [batch]
    const int* n_f16 = nullptr;                  ///< [batch]
    const std::uint16_t* k16 = nullptr;          ///< [batch][n_kv_heads][max_f16][D] f16 bits
    const std::uint16_t* v16 = nullptr;
    // Codebooks [batch][n_versions][n_kv_heads]: centroids [Mk|Mv][ksub][dsub], perm [D], gain [D], and a
    // rotation [D][D] per slot, or null for none (docs/cuda.md, "Rotated quantizers").
    const float* k_cb = nullptr;
    const std::int32_t* k_perm = nullptr;
    const float* k_gain = nullptr;
    const float* k_rot = nullptr;
    const float* v_cb = nullptr;
    const std::int32_t* v_perm = nullptr;
    const float* v_gain = nullptr;
    const float* v_rot = nullptr;

    float* part_ml = nullptr;   ///< [batch][n_kv_heads][n_chunks + 1][n_q][2] (max, sum) per chunk
    float* part_acc = nullptr;  ///< [batch][n_kv_heads][n_chunks + 1][n_q][D] unnormalised, original space
    float* out = nullptr;       ///< [batch][n_kv_heads * n_q][D]
};

/// Dense f16 flash-decoding: K, V [batch][n_kv_heads][max_tokens][D], n_tokens[b] rows each.
struct DenseAttentionParams {
    AttentionShape shape;
    int max_tokens = 0;
    int chunk_tokens = 1024;
    int n_chunks = 0;
    const float* q = nullptr;
    const std::uint16_t* k = nullptr;
    const std::uint16_t* v = nullptr;
    const int* n_tokens = nullptr;
    float* part_ml = nullptr;   ///< [batch][n_kv_heads][n_chunks][n_q][2]
    float* part_acc = nullptr;  ///< [batch][n_kv_heads][n_chunks][n_q][D]
    float* out = nullptr;
};

/// Throw std::runtime_error naming the first bad size or missing buffer (attention_params.cpp).
void check_attention_shape(const AttentionShape& s);
void check_pq_attention_params(const PqAttentionParams& p);

/// Bytes of one 32-token block of the key (values = false) or value stream.
AQPIM_HD int stream_block_bytes(const PqAttentionParams& p, bool values) {
    return coded_block_bytes(values ? p.Mv : p.Mk, p.nbits);
}

/// Codebook slot of (b, version, kv) in the [batch][n_versions][n_kv_heads] arrays.
AQPIM_HD std::int64_t codebook_slot(const PqAttentionParams& p, int b, int version, int kv) {
    return (std::int64_t(b) * p.n_versions + version) * p.shape.n_kv_heads + kv;
}

/// The key (values = false) or value codebook of a slot.
AQPIM_HD PqCodebookView codebook_view(const PqAttentionParams& p, std::int64_t slot, bool values) {
    const int D = p.shape.D, ksub = ksub_of(p.nbits);
    const float* rot = values ? p.v_rot : p.k_rot;
    return values ? PqCodebookView{p.v_cb + slot * ksub * D, p.v_perm + slot * D, p.v_gain + slot * D,
                                   rot ? rot + slot * D * D : nullptr, D, ksub}
                  : PqCodebookView{p.k_cb + slot * ksub * D, p.k_perm + slot * D, p.k_gain + slot * D,
                                   rot ? rot + slot * D * D : nullptr, D, ksub};
}

}  // namespace aqpim::cuda
