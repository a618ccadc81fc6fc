#pragma once
// Weight matrices as the runtime uses them: rows of a ggml type (f32/f16/bf16 or llama.cpp's
// quantized blocks), row-major, one row per output feature (GGUF ne0 = cols, ne1 = rows). The data
// is not owned (it points into a mapped file or a buffer the model keeps alive).
//
// Products (decode: matvec, one activation vector; prefill: matmul, many) dispatch per type and
// per SIMD level; matmul dequantizes tiles and uses OpenBLAS sgemm.

#include <cstdint>
#include <string>

#include "aqpim/ggml_types.h"

namespace aqpim {

class Workspace;         // aqpim/workspace.h
class ThreadWorkspaces;  // aqpim/workspace.h

struct WeightMatrix {
    GgmlType type = GgmlType::F32;
    std::int64_t rows = 0;  ///< output features
    std::int64_t cols = 0;  ///< input features (multiple of the type's block size)
    const std::uint8_t* data = nullptr;

    std::size_t row_bytes() const { return ggml_row_bytes(type, cols); }
    std::size_t n_bytes() const { return row_bytes() * static_cast<std::size_t>(rows); }
    const std::uint8_t* row(std::int64_t r) const { return data + static_cast<std::size_t>(r) * row_bytes(); }
    bool empty() const { return data == nullptr; }
};

/// y[r] = W.row(r) · x for every row (x has W.cols values), on up to n_threads threads
/// (0 = default_threads()).
/// `ws`: the calling thread's scratch (aqpim/workspace.h), reused from call to call; null: the call
/// allocates its own.
void matvec(const WeightMatrix& W, const float* x, float* y, int n_threads = 0, Workspace* ws = nullptr);

/// Y[i][r] = W.row(r) · X[i] for i < n (X is [n][W.cols], Y is [n][W.rows]).
/// `ws`: one scratch Workspace per thread of the call's regions, kept by the caller from call to call
/// (the Transformer's); null: the call allocates its own.
void matmul(const WeightMatrix& W, const float* X, std::int64_t n, float* Y, int n_threads = 0,
            ThreadWorkspaces* ws = nullptr);

/// What decides how matmul rounds beside aqpim's own SIMD level: the BLAS library's kernel and
/// build ("OpenBLAS <core> <config>"). Results computed under another text may differ in the last
/// bits (the KV prefix store keys blocks by it).
std::string gemm_backend();

/// Row r of W as f32 (W.cols values), e.g. a token embedding.
void dequantize_row(const WeightMatrix& W, std::int64_t r, float* out);

/// Convert n values (a multiple of the type's block size) between f32 and a type
/// (quantize_row: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K).
void dequantize(GgmlType type, const void* src, float* dst, std::int64_t n);
void quantize(GgmlType type, const float* src, void* dst, std::int64_t n);

}  // namespace aqpim
