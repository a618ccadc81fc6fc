// Centroids rounded to f16 or int8 (kv/pq_compact_centroids.h).

#include "kv/pq_compact_centroids.h"

#include <algorithm>
#include <cmath>

#include "aqpim/error.h"
#include "aqpim/simd.h"

namespace aqpim::kv {

namespace {

using WidenBy16 = void (*)(const std::int8_t* q, const float* scale, int M, std::size_t per_m, int dsub, float* out);

void widen_int8_by16_ref(const std::int8_t* q, const float* scale, int M, std::size_t per_m, int dsub, float* out) {
    for (int m = 0; m < M; ++m, q += per_m, out += per_m)
        for (std::size_t i = 0; i < per_m; i += std::size_t(dsub))
            for (int j = 0; j < dsub; ++j) out[i + j] = float(q[i + j]) * scale[std::size_t(m) * dsub + j];
}

const WidenBy16 kWidenBy16[3] = {widen_int8_by16_ref, widen_int8_by16_avx2, widen_int8_by16_avx512};

}  // namespace

std::size_t centroid_bytes(CodebookStorage storage, std::size_t ksub, std::size_t D) {
    switch (storage) {
    case CodebookStorage::f32: return ksub * D * 4;
    case CodebookStorage::f16: return ksub * D * 2;
    case CodebookStorage::int8: return ksub * D + D * 4;
    }
    return 0;
}

CompactCentroids CompactCentroids::round(CodebookStorage storage, const float* centroids, int M, int ksub, int dsub) {
    AQPIM_ASSERT(storage != CodebookStorage::f32);
    CompactCentroids c;
    c.storage = storage;
    c.M = M, c.ksub = ksub, c.dsub = dsub;
    const std::size_t n = c.n_values();
    if (storage == CodebookStorage::f16) {
        c.f16.resize(n);
        f32_to_fp16(centroids, c.f16.data(), n);
        return c;
    }
    c.scale.assign(std::size_t(M) * dsub, 0.0f);
    for (int m = 0; m < M; ++m)
        for (int k = 0; k < ksub; ++k)
            for (int j = 0; j < dsub; ++j) {
                float& s = c.scale[std::size_t(m) * dsub + j];
                s = std::max(s, std::fabs(centroids[(std::size_t(m) * ksub + k) * dsub + j]));
            }
    for (float& s : c.scale) s /= 127.0f;
    c.i8.resize(n);
    for (int m = 0; m < M; ++m)
        for (int k = 0; k < ksub; ++k)
            for (int j = 0; j < dsub; ++j) {
                const std::size_t i = (std::size_t(m) * ksub + k) * dsub + j;
                const float s = c.scale[std::size_t(m) * dsub + j];
                const float q = s > 0 ? std::nearbyint(centroids[i] / s) : 0.0f;
                c.i8[i] = std::int8_t(std::clamp(q, -127.0f, 127.0f));
            }
    return c;
}

std::size_t CompactCentroids::bytes() const {
    return centroid_bytes(storage, std::size_t(ksub), std::size_t(M) * dsub);
}

void CompactCentroids::widen(std::vector<float>& out) const {
    const std::size_t n = n_values();
    out.resize(n);
    if (storage == CodebookStorage::f16) return fp16_to_f32(f16.data(), out.data(), n);
    AQPIM_ASSERT(storage == CodebookStorage::int8);
    // Value i of subspace m is i8[i] * scale[m][i % dsub]. Where dsub divides 16, a run of 16
    // values repeats one pattern of scales: one 16-wide product per run, in the ISA's kernel, every
    // subspace in one call (attention and encoding widen every codebook they read, per call: with
    // the pattern built by a division per lane and the products in the baseline ISA this was 8% of
    // a decode step at batch 64 x 1K, and with the pattern built by a scalar loop per subspace and
    // a kernel call each, 4.7% of one at batch 32 x 8K; docs/pq-kernels.md).
    const std::size_t per_m = std::size_t(ksub) * dsub;
    if (16 % dsub == 0 && per_m % 16 == 0) return dispatch(kWidenBy16)(i8.data(), scale.data(), M, per_m, dsub, out.data());
    widen_int8_by16_ref(i8.data(), scale.data(), M, per_m, dsub, out.data());
}

}  // namespace aqpim::kv
