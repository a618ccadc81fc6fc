// AVX-512 (BW/VL/VBMI/VNNI) weight kernels: dequantization (bit-identical to quant_ref.cpp) and
// row dots. Quantized rows are multiplied against x quantized to int8 per block of 32 with
// vpdpbusd (u8 weight codes x s8 activations, four products per 32-bit lane); the per-block
// scales are applied per lane in f32. See docs/weights.md for the layouts and what bounds them.
//
// Activation layouts (QuantizedX, filled by prepare_x_avx512), chosen so that each 64-byte load
// of x lines up with the weight bytes a kernel has in a register without shuffling the weights:
//  * Q8_0, Q6_K: natural order.
//  * Q4_0: groups of 4 blocks (128 values); the group's 64 low-half values (values 0-15 of each
//    block, the low nibbles) first, then the 64 high-half values. A trailing partial group
//    stays in natural order.
//  * Q4_K: per super-block, the 32-value blocks in the order 0 2 1 3 4 6 5 7 (the low nibbles
//    of 64 qs bytes are sub-blocks 0 and 2, the high nibbles 1 and 3).
// For Q8_0 and Q4_0, lane[k] is the block scale d_x of the 4 values at q[4k..4k+3] (layout
// order) and lane_i[k] the integer the lane's dot starts from, cancelling the weights' offset:
// Q8_0 reads w + 128 as u8, so -128 x (sum of the lane's 4 values); Q4_0 reads nibbles q = w + 8,
// so -8 x (sum of the lane's 8 values: 4 low-half, 4 high-half). The K types fold d_x into their
// per-super-block scale vector instead; aux holds, per super-block, Q4_K's 8 d_x then 8 d_x*s,
// and Q6_K's 16 values -32*d_x*s16 (one per group of 16).

#include <immintrin.h>

#include <cstring>

// GCC 12 reports the _mm512_undefined_* pass-through operands of its AVX-512 intrinsics as
// uninitialised (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "aqpim/aligned.h"
#include "aqpim/error.h"
#include "model/quant_blocks.h"
#include "model/row_batch.h"
#include "simd/avx2_util.h"
#include "simd/static_dispatch.h"
#include "core/int_math.h"

namespace aqpim::quant {

namespace {

float h2f(f16_t h) { return _cvtsh_ss(h); }

/// Keeps the compiler from fusing a multiply with the following add (dequantization must round
/// the product first, as llama.cpp's scalar code does).
inline __m512 opaque(__m512 v) {
    asm("" : "+v"(v));
    return v;
}

// Horizontal reductions (GCC 12 warns about _mm512_reduce_*'s undefined upper halves).
inline __m256 fold(__m512 v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_castps512_ps256(_mm512_shuffle_f32x4(v, v, 0xee)));
}
using aqpim::hsum;  // the __m256 one (simd/avx2_util.h), beside this __m512 one
inline float hsum(__m512 v) { return hsum(fold(v)); }
/// hsum of four vectors at once, each by hsum's own tree (lanes l + l+8, then + l+4, + l+2, + l+1),
/// so each result is bit-identical to hsum's; about half the shuffles and adds of four hsums.
inline __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
    // 128-bit lanes: [a0 + a2, a1 + a3, b0 + b2, b1 + b3] and the same for c, d
    const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
    const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
    // [a0+a2 + a1+a3, b.., c.., d..]: one 128-bit lane per vector
    __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
    s = _mm512_add_ps(s, _mm512_permute_ps(s, 0x4e));  // element l + element l + 2
    s = _mm512_add_ps(s, _mm512_permute_ps(s, 0xb1));  // + element l + 1
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s));
}
inline float hmax(__m512 v) {
    __m256 m8 = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_castps512_ps256(_mm512_shuffle_f32x4(v, v, 0xee)));
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
inline int hsum_epi32(__m512i v) {
    const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_castsi512_si256(_mm512_shuffle_i64x2(v, v, 0xee)));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1)));
}

/// Prefetch n_lines cache lines kWeightPrefetchBytes ahead of p.
inline void prefetch_ahead(const std::uint8_t* p, int n_lines) {
    for (int i = 0; i < n_lines; ++i)
        _mm_prefetch(reinterpret_cast<const char*>(p + kWeightPrefetchBytes + 64 * i), _MM_HINT_T0);
}

inline float hsum256_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return float(_mm_cvtsi128_si32(s));
}

// ---- dequantization ---------------------------------------------------------------------------

void dequantize_q8_0(const BlockQ8_0* b, float* y, std::int64_t nb) {
    for (std::int64_t i = 0; i < nb; ++i, y += QK) {
        const __m512 d = _mm512_set1_ps(h2f(b[i].d));
        for (int h = 0; h < 2; ++h) {
            const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs + 16 * h));
            _mm512_storeu_ps(y + 16 * h, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d));
        }
    }
}

void dequantize_q4_0(const BlockQ4_0* b, float* y, std::int64_t nb) {
    const __m128i low = _mm_set1_epi8(0xF);
    const __m512i eight = _mm512_set1_epi32(8);
    for (std::int64_t i = 0; i < nb; ++i, y += QK) {
        const __m512 d = _mm512_set1_ps(h2f(b[i].d));
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
        const __m128i half[2] = {_mm_and_si128(q, low), _mm_and_si128(_mm_srli_epi16(q, 4), low)};
        for (int h = 0; h < 2; ++h) {
            const __m512i v = _mm512_sub_epi32(_mm512_cvtepu8_epi32(half[h]), eight);
            _mm512_storeu_ps(y + 16 * h, _mm512_mul_ps(_mm512_cvtepi32_ps(v), d));
        }
    }
}

void dequantize_q4_k(const BlockQ4_K* b, float* y, std::int64_t nb) {
    const __m128i low = _mm_set1_epi8(0xF);
    for (std::int64_t i = 0; i < nb; ++i) {
        const float d = h2f(b[i].d), dmin = h2f(b[i].dmin);
        std::uint8_t sc[8], m[8];
        unpack_q4k_scales(b[i].scales, sc, m);
        for (int c = 0; c < 4; ++c) {
            const std::uint8_t* q = b[i].qs + 32 * c;
            for (int s = 0; s < 2; ++s, y += 32) {
                const __m512 dj = _mm512_set1_ps(d * float(sc[2 * c + s])), mj = _mm512_set1_ps(dmin * float(m[2 * c + s]));
                for (int h = 0; h < 2; ++h) {
                    __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * h));
                    v = _mm_and_si128(s ? _mm_srli_epi16(v, 4) : v, low);
                    const __m512 p = opaque(_mm512_mul_ps(dj, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v))));
                    _mm512_storeu_ps(y + 16 * h, _mm512_sub_ps(p, mj));
                }
            }
        }
    }
}

void dequantize_q6_k(const BlockQ6_K* b, float* y, std::int64_t nb) {
    const __m512i m4 = _mm512_set1_epi32(0xF), m2 = _mm512_set1_epi32(3), k32 = _mm512_set1_epi32(32);
    for (std::int64_t i = 0; i < nb; ++i, y += QK_K) {
        const float d = h2f(b[i].d);
        for (int h = 0; h < 2; ++h)
            for (int l0 = 0; l0 < 32; l0 += 16) {
                auto load = [](const std::uint8_t* p) {
                    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
                };
                const __m512i qa = load(b[i].ql + 64 * h + l0), qb = load(b[i].ql + 64 * h + 32 + l0);
                const __m512i qh = load(b[i].qh + 32 * h + l0);
                const __m512i lo[4] = {_mm512_and_si512(qa, m4), _mm512_and_si512(qb, m4), _mm512_srli_epi32(qa, 4),
                                       _mm512_srli_epi32(qb, 4)};
                for (int quarter = 0; quarter < 4; ++quarter) {
                    const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(qh, 2 * quarter), m2);
                    const __m512i q = _mm512_sub_epi32(_mm512_or_si512(lo[quarter], _mm512_slli_epi32(hi, 4)), k32);
                    const int at = 128 * h + 32 * quarter + l0;
                    const __m512 s = _mm512_set1_ps(d * float(b[i].scales[at / 16]));
                    _mm512_storeu_ps(y + at, _mm512_mul_ps(s, _mm512_cvtepi32_ps(q)));
                }
            }
    }
}

// ---- activations --------------------------------------------------------------------------------

/// quantize_x_ref with the two 16-value halves of block b written to lo(b) and hi(b).
template <class Lo, class Hi>
void quantize_blocks(const float* x, std::int64_t nb, QuantizedX& qx, Lo lo, Hi hi) {
    for (std::int64_t b = 0; b < nb; ++b) {
        const __m512 a = _mm512_loadu_ps(x + 32 * b), c = _mm512_loadu_ps(x + 32 * b + 16);
        const float amax = hmax(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(c)));
        const float d = amax / 127.0f;
        const __m512 id = _mm512_set1_ps(d != 0 ? 1.0f / d : 0.0f);
        const __m512i qa = _mm512_cvtps_epi32(_mm512_mul_ps(a, id)), qc = _mm512_cvtps_epi32(_mm512_mul_ps(c, id));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(lo(b)), _mm512_cvtepi32_epi8(qa));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(hi(b)), _mm512_cvtepi32_epi8(qc));
        const int sa = hsum_epi32(qa), sc = hsum_epi32(qc);
        qx.d[std::size_t(b)] = d;
        qx.s[std::size_t(b)] = sa + sc;
        qx.s16[std::size_t(2 * b)] = sa;
        qx.s16[std::size_t(2 * b + 1)] = sc;
    }
}

// ---- row dots -----------------------------------------------------------------------------------

inline __m512i bytes_index(int (*f)(int)) {
    alignas(64) std::uint8_t idx[64];
    for (int i = 0; i < 64; ++i) idx[i] = std::uint8_t(f(i));
    return _mm512_load_si512(idx);
}

/// A row-batch block's accumulators [R][C][S]: zero at its first chunk, else as the previous chunk
/// left them in `saved` ([R][C][S] vectors of 16 floats, aligned).
template <int R, int C, int S>
inline void load_sums(__m512 (&acc)[R][C][S], const float* saved, bool first) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c)
#pragma GCC unroll 16
            for (int v = 0; v < S; ++v) acc[r][c][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(saved + 16 * ((r * C + c) * S + v));
}
template <int R, int C, int S>
inline void store_sums(const __m512 (&acc)[R][C][S], float* saved) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c)
#pragma GCC unroll 16
            for (int v = 0; v < S; ++v) _mm512_store_ps(saved + 16 * ((r * C + c) * S + v), acc[r][c][v]);
}

// Q8_0 and Q4_0 rows go in units of blocks whose dot with x starts from lane_i and whose sum is
// scaled per 4-value lane by (weight scale x lane): a unit of 2 Q8_0 blocks (68 bytes) or 4 Q4_0
// blocks (72 bytes), 64 or 128 values, 16 lanes. Unit u goes into accumulator u % 2, the two are
// summed by hsum, and the blocks after the last whole unit are added one by one after it; matvec's
// kernel (dot_units) and the row-batch kernel (dot_units_block) share these steps, so every output
// of the batch kernel is matvec's to the bit.

/// Q8_0 unit: two blocks; weights offset to u8 (w + 128, one xor) against x, the dot started at
/// -128 x (sum of the lane's x) from lane_i.
struct Q8Pair {
    static constexpr bool kSuperBlocks = false;  ///< dot_units' steps, not dot_super's
    static constexpr int kBlocks = 2, kBytes = 68;
    struct Weights {
        __m512i w;
        __m512 dw;  ///< each lane's block scale
    };
    /// The byte indices and offset decode uses, made once per call of a kernel (loaded into
    /// registers before its loop, not looked up per unit).
    struct Consts {
        __m512i idx_w, idx_d, bias;
    };
    static Consts consts() {
        static const __m512i idx_w = bytes_index([](int i) { return i < 32 ? 2 + i : 4 + i; });
        static const __m512i idx_d = bytes_index([](int i) { return (i < 16 ? 0 : 34) + (i & 1); });
        return {idx_w, idx_d, _mm512_set1_epi8(char(0x80))};
    }
    static Weights decode(const Consts& k, const std::uint8_t* p) {
        const __m512i A = _mm512_loadu_si512(p), B = _mm512_maskz_loadu_epi8(0xF, p + 64);
        return {_mm512_xor_si512(_mm512_permutex2var_epi8(A, k.idx_w, B), k.bias),
                _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi8(k.idx_d, A)))};
    }
    static __m512i dot(const Weights& w, const QuantizedX& qx, std::int64_t u) {
        return _mm512_dpbusd_epi32(_mm512_load_si512(qx.lane_i.data() + 16 * u), w.w, _mm512_load_si512(qx.q.data() + 64 * u));
    }
    /// Block b alone (natural order), as a float to add after the units' sum.
    static float block(const std::uint8_t* row, const QuantizedX& qx, std::int64_t b) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx.q.data() + 32 * b));
        const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
        return h2f(blk->d) * qx.d[std::size_t(b)] * hsum256_epi32(dot);
    }
};

/// Q4_0 unit: four blocks; nibbles as u8 against the group-ordered x, the -8 offset pre-subtracted
/// through lane_i.
struct Q4Group {
    static constexpr bool kSuperBlocks = false;
    static constexpr int kBlocks = 4, kBytes = 72;
    struct Weights {
        __m512i lo, hi;
        __m512 dw;
    };
    struct Consts {
        __m512i idx_q, idx_d, low;
    };
    static Consts consts() {
        static const __m512i idx_q = bytes_index([](int i) { return 18 * (i / 16) + 2 + i % 16; });
        static const __m512i idx_d = bytes_index([](int i) { return i < 32 ? 18 * (i / 8) + (i & 1) : 0; });
        return {idx_q, idx_d, _mm512_set1_epi8(0xF)};
    }
    static Weights decode(const Consts& k, const std::uint8_t* p) {
        const __m512i A = _mm512_loadu_si512(p), B = _mm512_maskz_loadu_epi8(0xFF, p + 64);
        const __m512i v = _mm512_permutex2var_epi8(A, k.idx_q, B);
        return {_mm512_and_si512(v, k.low), _mm512_and_si512(_mm512_srli_epi16(v, 4), k.low),
                _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi8(k.idx_d, A)))};
    }
    static __m512i dot(const Weights& w, const QuantizedX& qx, std::int64_t u) {
        const std::int8_t* x = qx.q.data() + 128 * u;
        const __m512i d = _mm512_dpbusd_epi32(_mm512_load_si512(qx.lane_i.data() + 16 * u), w.lo, _mm512_load_si512(x));
        return _mm512_dpbusd_epi32(d, w.hi, _mm512_load_si512(x + 64));
    }
    static float block(const std::uint8_t* row, const QuantizedX& qx, std::int64_t b) {
        const __m128i low = _mm_set1_epi8(0xF);
        const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
        const __m256i w = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low), _mm_and_si128(q, low));
        const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx.q.data() + 32 * b));
        const __m256i dot = _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x);
        return h2f(blk->d) * qx.d[std::size_t(b)] * (hsum256_epi32(dot) - 8.0f * float(qx.s[std::size_t(b)]));
    }
};

/// acc += unit u's dot, scaled per lane.
template <class U>
inline __m512 add_unit(const typename U::Weights& w, const QuantizedX& qx, std::int64_t u, __m512 acc) {
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(U::dot(w, qx, u)), _mm512_mul_ps(w.dw, _mm512_load_ps(qx.lane.data() + 16 * u)), acc);
}

/// A Q8_0 / Q4_0 row of nb blocks against prepared x (matvec's arithmetic).
template <class U>
float dot_units(const std::uint8_t* row, const QuantizedX& qx, std::int64_t nb) {
    const typename U::Consts k = U::consts();
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    const std::int64_t nu = nb / U::kBlocks;
    auto unit = [&](std::int64_t u, __m512& acc) {
        const std::uint8_t* p = row + U::kBytes * u;
        prefetch_ahead(p, 2);
        acc = add_unit<U>(U::decode(k, p), qx, u, acc);
    };
    std::int64_t u = 0;
    for (; u + 2 <= nu; u += 2) {
        unit(u, acc0);
        unit(u + 1, acc1);
    }
    if (u < nu) unit(u, acc0);
    float sum = hsum(_mm512_add_ps(acc0, acc1));
    for (std::int64_t b = nu * U::kBlocks; b < nb; ++b) sum += U::block(row, qx, b);
    return sum;
}

/// dot_units for R rows against C activations at once, over values [k0, k1) of rows of n (chunks
/// of whole units, each starting at an even unit), every output dot_units' to the bit. A decoded
/// unit serves C activations, an activation's loads R rows. Between chunks the accumulators wait in
/// `saved` ([R][C][2] vectors of 16 floats).
template <class U, int R, int C>
void dot_units_block(const std::uint8_t* const* rows, const QuantizedX* const* xs, std::int64_t k0, std::int64_t k1,
                     std::int64_t n, float* saved, float* const* ys, std::size_t ahead) {
    constexpr std::int64_t kUnitValues = std::int64_t(QK) * U::kBlocks;
    const typename U::Consts k = U::consts();
    __m512 acc[R][C][2];
    load_sums(acc, saved, k0 == 0);
    const std::int64_t nu = n / kUnitValues, u1 = std::min(k1, n) / kUnitValues;
    for (std::int64_t u = k0 / kUnitValues; u < u1; ++u) {
        const int a = int(u % 2);
        typename U::Weights w[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
            const std::uint8_t* p = rows[r] + U::kBytes * u;
            if (ahead > 0)
                for (int line = 0; line < 2; ++line) _mm_prefetch(reinterpret_cast<const char*>(p + ahead + 64 * line), _MM_HINT_T0);
            w[r] = U::decode(k, p);
        }
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c)
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) acc[r][c][a] = add_unit<U>(w[r], *xs[c], u, acc[r][c][a]);
    }
    if (k1 < n) return store_sums(acc, saved);
    const std::int64_t nb = n / QK;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
            float sum = hsum(_mm512_add_ps(acc[r][c][0], acc[r][c][1]));
            for (std::int64_t b = nu * U::kBlocks; b < nb; ++b) sum += U::block(rows[r], *xs[c], b);
            ys[c][r] = sum;
        }
}

/// Lane -> f32 index for vpermps: lanes 0-7 take a, lanes 8-15 take b.
inline __m512i two_index(int a, int b) { return _mm512_mask_blend_epi32(0xFF00, _mm512_set1_epi32(a), _mm512_set1_epi32(b)); }
/// Lanes 4j..4j+3 take base + j.
inline __m512i four_index(int base) {
    return _mm512_add_epi32(_mm512_set1_epi32(base), _mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 2));
}

// Q4_K and Q6_K rows go a super-block (256 values) at a time into four accumulators (one per FMA
// of the super-block: the chain latency, not the ports, bound a single one) and a per-type fifth
// vector; matvec's kernel (dot_super) and the row-batch kernel (dot_super_block) share the steps, so
// every output of the batch kernel is matvec's to the bit.

/// What one output accumulates over its super-blocks.
struct SuperSums {
    __m512 acc[4];
    __m512 extra;  ///< Q4_K: the min terms (lanes 8-15); Q6_K: the +32 offset's correction
};

/// A super-block's integer dots into s.acc: per half h, codes a[h] against x[128 h, +64) and b[h]
/// against x[128 h + 64, +64), each scaled per lane by the lanes of `scale` that idx[2 h], idx[2 h + 1]
/// pick, into acc[2 h] and acc[2 h + 1].
inline void add_super_dots(const __m512i (&a)[2], const __m512i (&b)[2], const std::int8_t* x, const __m512i (&idx)[4],
                           __m512 scale, SuperSums& s) {
    for (int h = 0; h < 2; ++h) {
        const __m512i da = _mm512_dpbusd_epi32(_mm512_setzero_si512(), a[h], _mm512_load_si512(x + 128 * h));
        const __m512i db = _mm512_dpbusd_epi32(_mm512_setzero_si512(), b[h], _mm512_load_si512(x + 128 * h + 64));
        s.acc[2 * h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(da), _mm512_permutexvar_ps(idx[2 * h], scale), s.acc[2 * h]);
        s.acc[2 * h + 1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(db), _mm512_permutexvar_ps(idx[2 * h + 1], scale), s.acc[2 * h + 1]);
    }
}

/// Q4_K: per super-block the sub-block scales d*sc in f32, nibbles against block-reordered x, and the
/// min term dmin*m . (d_x*s) as one 8-wide FMA.
struct Q4KSuper {
    static constexpr bool kSuperBlocks = true;  ///< dot_super's steps
    static constexpr int kBytes = sizeof(BlockQ4_K), kPrefetchLines = 3;
    struct Consts {
        __m512i low, idx[4], dd_index;
    };
    static Consts consts() {
        return {_mm512_set1_epi8(0xF), {two_index(0, 2), two_index(1, 3), two_index(4, 6), two_index(5, 7)},
                two_index(0, 1) /* [d x 8, dmin x 8] */};
    }
    struct Weights {
        __m512 scales;  ///< [d sc_j (j < 8) | dmin m_j]
        __m512i lo[2], hi[2];
    };
    static Weights decode(const Consts& k, const std::uint8_t* p) {
        const auto* blk = reinterpret_cast<const BlockQ4_K*>(p);
        std::uint64_t sc_lo, m_hi;
        unpack_q4k_scales_words(blk->scales, sc_lo, m_hi);
        const __m128i smv = _mm_set_epi64x(std::int64_t(m_hi), std::int64_t(sc_lo));
        std::uint32_t dm;
        std::memcpy(&dm, blk, 4);
        const __m512 DD = _mm512_permutexvar_ps(k.dd_index, _mm512_castps128_ps512(_mm_cvtph_ps(_mm_cvtsi32_si128(int(dm)))));
        Weights w;
        w.scales = _mm512_mul_ps(DD, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(smv)));
        for (int c2 = 0; c2 < 2; ++c2) {
            const __m512i q = _mm512_loadu_si512(blk->qs + 64 * c2);
            w.lo[c2] = _mm512_and_si512(q, k.low);
            w.hi[c2] = _mm512_and_si512(_mm512_srli_epi16(q, 4), k.low);
        }
        return w;
    }
    static void step(const Consts& k, const Weights& w, const QuantizedX& qx, std::int64_t i, SuperSums& s) {
        // P = [d sc_j d_x[j] (j < 8) | dmin m_j d_x[j] s[j]]: lanes 0-7 scale sub-block j's integer
        // dot, lanes 8-15 are its min term (summed over the row in extra)
        const __m512 P = _mm512_mul_ps(w.scales, _mm512_load_ps(qx.aux.data() + 16 * i));
        s.extra = _mm512_add_ps(s.extra, P);
        add_super_dots(w.lo, w.hi, qx.q.data() + 256 * i, k.idx, P, s);
    }
    static float finish(const SuperSums& s) {
        const __m512 a = _mm512_add_ps(_mm512_add_ps(s.acc[0], s.acc[1]), _mm512_add_ps(s.acc[2], s.acc[3]));
        return hsum(a) - hsum(_mm512_castps512_ps256(_mm512_shuffle_f32x4(s.extra, s.extra, 0xee)));
    }
};

/// Q6_K: 6-bit codes (q + 32, u8) rebuilt from ql/qh per 64 values, dotted with natural x; group
/// scales d*sc in f32; the +32 offset removed per super-block through aux (one FMA).
struct Q6KSuper {
    static constexpr bool kSuperBlocks = true;
    static constexpr int kBytes = sizeof(BlockQ6_K), kPrefetchLines = 4;
    struct Consts {
        __m512i low, top, shl, shr, idx[4], half_index;
    };
    static Consts consts() {
        return {_mm512_set1_epi8(0xF),
                _mm512_set1_epi8(0x30),
                _mm512_set_epi64(2, 2, 2, 2, 4, 4, 4, 4),
                _mm512_set_epi64(2, 2, 2, 2, 0, 0, 0, 0),
                {four_index(0), four_index(4), four_index(8), four_index(12)},
                _mm512_srli_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), 1)};
    }
    struct Weights {
        __m512 F;  ///< d sc_g, group g of 16 values
        __m512i ua[2], ub[2];
    };
    static Weights decode(const Consts& k, const std::uint8_t* p) {
        const auto* blk = reinterpret_cast<const BlockQ6_K*>(p);
        const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales));
        Weights w;
        w.F = _mm512_mul_ps(_mm512_set1_ps(h2f(blk->d)), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s8)));
        for (int h = 0; h < 2; ++h) {
            const __m512i ql = _mm512_loadu_si512(blk->ql + 64 * h);
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qh + 32 * h)));
            // (A & C) | B with C = 0x0F: imm 0xEC
            w.ua[h] = _mm512_ternarylogic_epi32(ql, _mm512_and_si512(_mm512_sllv_epi64(qh, k.shl), k.top), k.low, 0xEC);
            w.ub[h] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), _mm512_and_si512(_mm512_srlv_epi64(qh, k.shr), k.top),
                                                k.low, 0xEC);
        }
        return w;
    }
    static void step(const Consts& k, const Weights& w, const QuantizedX& qx, std::int64_t i, SuperSums& s) {
        s.extra = _mm512_fmadd_ps(w.F, _mm512_load_ps(qx.aux.data() + 16 * i), s.extra);
        // d sc_g d_x[g / 2]: the whole scale of group g's integer dot
        const __m512 Fx = _mm512_mul_ps(w.F, _mm512_permutexvar_ps(k.half_index, _mm512_castps256_ps512(_mm256_loadu_ps(qx.d.data() + 8 * i))));
        add_super_dots(w.ua, w.ub, qx.q.data() + 256 * i, k.idx, Fx, s);
    }
    static float finish(const SuperSums& s) {
        return hsum(_mm512_add_ps(_mm512_add_ps(_mm512_add_ps(s.acc[0], s.acc[1]), _mm512_add_ps(s.acc[2], s.acc[3])), s.extra));
    }
};

inline SuperSums zero_sums() {
    const __m512 z = _mm512_setzero_ps();
    return {{z, z, z, z}, z};
}

/// A Q4_K / Q6_K row of nb super-blocks against prepared x (matvec's arithmetic).
template <class U>
float dot_super(const std::uint8_t* row, const QuantizedX& qx, std::int64_t nb) {
    const typename U::Consts k = U::consts();
    SuperSums s = zero_sums();
    for (std::int64_t i = 0; i < nb; ++i) {
        const std::uint8_t* p = row + std::int64_t(U::kBytes) * i;
        prefetch_ahead(p, U::kPrefetchLines);
        U::step(k, U::decode(k, p), qx, i, s);
    }
    return U::finish(s);
}

/// dot_super for R rows against C activations at once, over values [k0, k1) of rows of n (chunks of
/// whole super-blocks), every output dot_super's to the bit. A decoded super-block serves C
/// activations. Between chunks the sums wait in `saved` ([R][C] x 5 vectors of 16 floats).
template <class U, int R, int C>
void dot_super_block(const std::uint8_t* const* rows, const QuantizedX* const* xs, std::int64_t k0, std::int64_t k1,
                     std::int64_t n, float* saved, float* const* ys, std::size_t ahead) {
    constexpr int kVectors = sizeof(SuperSums) / sizeof(__m512);
    const typename U::Consts k = U::consts();
    SuperSums s[R][C];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
            if (k0 == 0) {
                s[r][c] = zero_sums();
                continue;
            }
            const float* from = saved + 16 * kVectors * (r * C + c);
            for (int v = 0; v < 4; ++v) s[r][c].acc[v] = _mm512_load_ps(from + 16 * v);
            s[r][c].extra = _mm512_load_ps(from + 64);
        }
    const std::int64_t i1 = std::min(k1, n) / QK_K;
    for (std::int64_t i = k0 / QK_K; i < i1; ++i) {
        typename U::Weights w[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
            const std::uint8_t* p = rows[r] + std::int64_t(U::kBytes) * i;
            if (ahead > 0)
                for (int line = 0; line < U::kPrefetchLines; ++line)
                    _mm_prefetch(reinterpret_cast<const char*>(p + ahead + 64 * line), _MM_HINT_T0);
            w[r] = U::decode(k, p);
        }
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c)
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) U::step(k, w[r], *xs[c], i, s[r][c]);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
            if (k1 < n) {
                float* to = saved + 16 * kVectors * (r * C + c);
                for (int v = 0; v < 4; ++v) _mm512_store_ps(to + 16 * v, s[r][c].acc[v]);
                _mm512_store_ps(to + 64, s[r][c].extra);
            } else {
                ys[c][r] = U::finish(s[r][c]);
            }
        }
}

/// F32 / F16 / BF16 row against f32 x: 64 values per step in four accumulators.
template <GgmlType T>
inline __m512 load16(const std::uint8_t* row, std::int64_t i, __mmask16 m = 0xFFFF) {
    if constexpr (T == GgmlType::F32) {
        return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + i);
    } else if constexpr (T == GgmlType::F16) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const f16_t*>(row) + i));
    } else {
        const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const bf16_t*>(row) + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
    }
}

template <GgmlType T>
float dot_float(const std::uint8_t* row, const float* x, std::int64_t n) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    std::int64_t i = 0;
    constexpr int kLines = T == GgmlType::F32 ? 4 : 2;  // cache lines per 64 values
    for (; i + 64 <= n; i += 64) {
        prefetch_ahead(row + i * kLines, kLines);  // kLines = bytes per value
        a0 = _mm512_fmadd_ps(load16<T>(row, i), _mm512_loadu_ps(x + i), a0);
        a1 = _mm512_fmadd_ps(load16<T>(row, i + 16), _mm512_loadu_ps(x + i + 16), a1);
        a2 = _mm512_fmadd_ps(load16<T>(row, i + 32), _mm512_loadu_ps(x + i + 32), a2);
        a3 = _mm512_fmadd_ps(load16<T>(row, i + 48), _mm512_loadu_ps(x + i + 48), a3);
    }
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
        a0 = _mm512_fmadd_ps(load16<T>(row, i, m), _mm512_maskz_loadu_ps(m, x + i), a0);
    }
    return hsum(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/// The sums of R rows of W against C rows of x at once, over values [k0, k1) of a row of n, in S
/// 16-lane accumulators per output: S = 4 is dot_float's arithmetic (64 values per step, 16 in each
/// accumulator; the masked tail, in the chunk that reaches n, into the first; the same hsum), so
/// every output is bit-identical to dot_float's. S = 1 is the invariant products' arithmetic: 16
/// values per step into one accumulator, then hsum. A converted weight vector is used C times and
/// an x vector R times (R + C loads per R x C FMAs instead of two per FMA). Between chunks the
/// accumulators wait in `saved` ([R][C][S] vectors of 16 floats, aligned). `ahead` > 0: each row's
/// line that many bytes further on is requested as the row's own is read (the weights the next
/// blocks read, while these come from memory only once).
template <GgmlType T, int S, int R, int C>
void dot_float_block(const std::uint8_t* const* rows, const float* const* xs, std::int64_t k0, std::int64_t k1,
                     std::int64_t n, float* saved, float* const* ys, std::size_t ahead) {
    static_assert(S == 1 || S == 4, "dot_float's four accumulators or the invariant products' one");
    constexpr std::int64_t kValueBytes = T == GgmlType::F32 ? 4 : 2;
    __m512 acc[R][C][S];
    load_sums(acc, saved, k0 == 0);
    std::int64_t i = k0;
    for (; i + 64 <= std::min(k1, n); i += 64) {  // 64 values a step: 16 into each of 4 sums, or all 64 into one
        if (ahead > 0)
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
                for (std::int64_t line = 0; line < kValueBytes; ++line)
                    _mm_prefetch(reinterpret_cast<const char*>(rows[r] + i * kValueBytes + ahead + 64 * line), _MM_HINT_T0);
#pragma GCC unroll 16
        for (int s = 0; s < 4; ++s) {
            __m512 w[R];
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) w[r] = load16<T>(rows[r], i + 16 * s);
#pragma GCC unroll 16
            for (int c = 0; c < C; ++c) {
                const __m512 x = opaque(_mm512_loadu_ps(xs[c] + i + 16 * s));  // one load, not one per row
#pragma GCC unroll 16
                for (int r = 0; r < R; ++r) acc[r][c][s % S] = _mm512_fmadd_ps(w[r], x, acc[r][c][s % S]);
            }
        }
    }
    if (k1 < n) return store_sums(acc, saved);
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
        __m512 w[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) w[r] = load16<T>(rows[r], i, m);
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
            const __m512 x = _mm512_maskz_loadu_ps(m, xs[c] + i);
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) acc[r][c][0] = _mm512_fmadd_ps(w[r], x, acc[r][c][0]);
        }
    }
    if constexpr (S == 4) {
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
            for (int c = 0; c < C; ++c)
                ys[c][r] = hsum(_mm512_add_ps(_mm512_add_ps(acc[r][c][0], acc[r][c][1]), _mm512_add_ps(acc[r][c][2], acc[r][c][3])));
    } else {
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c)
#pragma GCC unroll 16
            for (int r0 = 0; r0 < R; r0 += 4) {
                __m512 v[4];
#pragma GCC unroll 4
                for (int j = 0; j < 4; ++j) v[j] = r0 + j < R ? acc[r0 + j][c][0] : _mm512_setzero_ps();
                alignas(16) float out[4];
                _mm_store_ps(out, hsum4(v[0], v[1], v[2], v[3]));
#pragma GCC unroll 4
                for (int j = 0; j < 4; ++j)
                    if (r0 + j < R) ys[c][r0 + j] = out[j];
            }
    }
}

/// Y[c][r] = row r . X[c] for n_rows rows and n_x activations, in blocks of kR rows x kC
/// activations with S accumulators per output (dot_float_block), through row_batch_blocks.
template <GgmlType T, int S, int kR, int kC>
void dot_float_rows_batch(const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows, std::int64_t cols,
                          const float* X, std::int64_t n_x, float* Y, std::int64_t ldy, float* saved) {
    static_assert(kBatchChunk % 64 == 0, "chunks of whole 64-value steps");
    row_batch_blocks<kR, kC, kR * kC * S * 16>(
        w, row_bytes, n_rows, cols, X, cols, n_x, Y, ldy, saved,
        [&](auto RR, auto CC, const std::uint8_t* const* rows, const float* const* xs, std::int64_t k0, std::int64_t k1,
            float* acc, float* const* ys, std::size_t ahead) { dot_float_block<T, S, RR, CC>(rows, xs, k0, k1, cols, acc, ys, ahead); });
}

template <class RowDot>
void for_rows(const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows, float* y, RowDot dot) {
    for (std::int64_t r = 0; r < n_rows; ++r) y[r] = dot(w + std::size_t(r) * row_bytes);
}

// ---- f32 GEMM on packed panels (matmul's prefill path) ------------------------------------------

inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const f16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

/// Lines of the bytes packed next, requested into L2 one every `every` k steps of the kernel, so
/// that they arrive while the product computes instead of stalling the next pack on DRAM.
struct NextPanelPrefetch {
    const char* bytes = nullptr;
    std::int64_t n_lines = 0, line = 0, every = 1, count = 1;
    void step() {
        if (--count > 0) return;
        count = every;
        if (line < n_lines) _mm_prefetch(bytes + 64 * line++, _MM_HINT_T1);
    }
};

/// y[i][0..n_cols) (+)= sum_k X[i][k] * panel[k][0..n_cols) for MR rows of X: MR x 32 outputs in
/// 2 MR registers; per k two panel loads (f16 panels: widened as loaded), MR broadcasts, 2 MR FMAs.
template <int MR, class P>
void panel_kernel(const float* X, std::int64_t ldx, const P* panel, std::int64_t k0, std::int64_t k1, float* Y,
                  std::int64_t ldy, int n_cols, bool accumulate, NextPanelPrefetch& next) {
    __m512 acc[MR][2];
    for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (std::int64_t k = k0; k < k1; ++k) {
        next.step();
        const __m512 p0 = load16(panel + 32 * k), p1 = load16(panel + 32 * k + 16);
        for (int i = 0; i < MR; ++i) {
            const __m512 x = _mm512_set1_ps(X[i * ldx + k]);
            acc[i][0] = _mm512_fmadd_ps(x, p0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(x, p1, acc[i][1]);
        }
    }
    const __mmask16 m0 = n_cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n_cols) - 1);
    const __mmask16 m1 = n_cols >= 32 ? __mmask16(0xFFFF) : n_cols <= 16 ? __mmask16(0) : __mmask16((1u << (n_cols - 16)) - 1);
    for (int i = 0; i < MR; ++i) {
        float* y = Y + i * ldy;
        if (accumulate) {
            acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_maskz_loadu_ps(m0, y));
            acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_maskz_loadu_ps(m1, y + 16));
        }
        _mm512_mask_storeu_ps(y, m0, acc[i][0]);
        _mm512_mask_storeu_ps(y + 16, m1, acc[i][1]);
    }
}

}  // namespace

namespace {

void pack_panel_rows(const float* rows, int n_rows, std::int64_t K, float* panel) {
    // panel[k][j] = rows[j][k], zero for j >= n_rows; 16 x 16 register transposes (64 shuffles
    // per 256 values), scalar for the last K % 16 columns.
    for (int j0 = 0; j0 < kPanelRows; j0 += 16) {
        std::int64_t k0 = 0;
        for (; k0 + 16 <= K; k0 += 16) {
            __m512 r[16], t[16], R[4][4];
            for (int j = 0; j < 16; ++j)
                r[j] = j0 + j < n_rows ? load16(rows + (j0 + j) * K + k0) : _mm512_setzero_ps();
            for (int a = 0; a < 8; ++a) {
                t[2 * a] = _mm512_unpacklo_ps(r[2 * a], r[2 * a + 1]);
                t[2 * a + 1] = _mm512_unpackhi_ps(r[2 * a], r[2 * a + 1]);
            }
            // R[g][c], 128-bit lane L: column 4L + c of rows 4g..4g+3
            for (int g = 0; g < 4; ++g) {
                R[g][0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
                R[g][1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
                R[g][2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
                R[g][3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
            }
            // column 4L + c = lanes L of R[0..3][c]: a 4 x 4 transpose of 128-bit lanes
            for (int c = 0; c < 4; ++c) {
                const __m512 x = _mm512_shuffle_f32x4(R[0][c], R[1][c], 0x88), y = _mm512_shuffle_f32x4(R[0][c], R[1][c], 0xDD);
                const __m512 z = _mm512_shuffle_f32x4(R[2][c], R[3][c], 0x88), w = _mm512_shuffle_f32x4(R[2][c], R[3][c], 0xDD);
                float* out = panel + 32 * k0 + j0;
                _mm512_store_ps(out + 32 * c, _mm512_shuffle_f32x4(x, z, 0x88));
                _mm512_store_ps(out + 32 * (4 + c), _mm512_shuffle_f32x4(y, w, 0x88));
                _mm512_store_ps(out + 32 * (8 + c), _mm512_shuffle_f32x4(x, z, 0xDD));
                _mm512_store_ps(out + 32 * (12 + c), _mm512_shuffle_f32x4(y, w, 0xDD));
            }
        }
        for (; k0 < K; ++k0)
            for (int j = 0; j < 16; ++j) panel[32 * k0 + j0 + j] = j0 + j < n_rows ? rows[(j0 + j) * K + k0] : 0.0f;
    }
}

}  // namespace

void pack_panel_avx512(const float* rows, int n_rows, std::int64_t K, float* panel) {
    pack_panel_rows(rows, n_rows, K, panel);
}

void pack_panel_f16_avx512(const f16_t* rows, int n_rows, std::int64_t K, f16_t* panel) {
    constexpr std::int64_t kPackAhead = 256;  // values (8 lines) ahead in each row
    // panel[k][j] = rows[j][k], 0 for j >= n_rows, as 16-bit words: 32 x 32 word transposes, 160
    // shuffles per 1024 values and half the bytes stored (the f32 transpose above, which once took
    // f16 rows too: 256 shuffles and a widening per 16 values).
    // Per group g of 8 rows, three in-lane unpack stages leave V[g][c], whose 128-bit lane L holds
    // column 8L + c of the group's rows; a 4 x 4 transpose of lanes across the groups then gives
    // column 8L + c of all 32 rows.
    std::int64_t k0 = 0;
    __m512i V[4][8];
    for (; k0 + 32 <= K; k0 += 32) {
        for (int g = 0; g < 4; ++g) {
            __m512i R[8], t[8], u[8];
            for (int i = 0; i < 8; ++i) {
                const int j = 8 * g + i;
                if (j >= n_rows) {
                    R[i] = _mm512_setzero_si512();
                    continue;
                }
                // 32 rows are more streams than the hardware prefetcher follows: ask for each
                // row's line kPackAhead ahead.
                if (k0 + kPackAhead < K) _mm_prefetch(reinterpret_cast<const char*>(rows + j * K + k0 + kPackAhead), _MM_HINT_T0);
                R[i] = _mm512_loadu_si512(rows + j * K + k0);
            }
            for (int a = 0; a < 4; ++a) {  // t[2a] (t[2a+1]): words 0-3 (4-7) of rows 2a, 2a+1 paired
                t[2 * a] = _mm512_unpacklo_epi16(R[2 * a], R[2 * a + 1]);
                t[2 * a + 1] = _mm512_unpackhi_epi16(R[2 * a], R[2 * a + 1]);
            }
            for (int h = 0; h < 2; ++h) {  // u[4h + p]: words 2p, 2p+1 of rows 4h..4h+3
                u[4 * h] = _mm512_unpacklo_epi32(t[4 * h], t[4 * h + 2]);
                u[4 * h + 1] = _mm512_unpackhi_epi32(t[4 * h], t[4 * h + 2]);
                u[4 * h + 2] = _mm512_unpacklo_epi32(t[4 * h + 1], t[4 * h + 3]);
                u[4 * h + 3] = _mm512_unpackhi_epi32(t[4 * h + 1], t[4 * h + 3]);
            }
            for (int q = 0; q < 4; ++q) {  // word 2q (2q+1) of all 8 rows
                V[g][2 * q] = _mm512_unpacklo_epi64(u[q], u[4 + q]);
                V[g][2 * q + 1] = _mm512_unpackhi_epi64(u[q], u[4 + q]);
            }
        }
        for (int c = 0; c < 8; ++c) {
            const __m512i P = _mm512_shuffle_i64x2(V[0][c], V[1][c], _MM_SHUFFLE(2, 0, 2, 0));
            const __m512i Q = _mm512_shuffle_i64x2(V[0][c], V[1][c], _MM_SHUFFLE(3, 1, 3, 1));
            const __m512i R = _mm512_shuffle_i64x2(V[2][c], V[3][c], _MM_SHUFFLE(2, 0, 2, 0));
            const __m512i S = _mm512_shuffle_i64x2(V[2][c], V[3][c], _MM_SHUFFLE(3, 1, 3, 1));
            f16_t* out = panel + 32 * (k0 + c);
            _mm512_store_si512(out, _mm512_shuffle_i64x2(P, R, _MM_SHUFFLE(2, 0, 2, 0)));           // lane 0: k0 + c
            _mm512_store_si512(out + 32 * 8, _mm512_shuffle_i64x2(Q, S, _MM_SHUFFLE(2, 0, 2, 0)));  // lane 1
            _mm512_store_si512(out + 32 * 16, _mm512_shuffle_i64x2(P, R, _MM_SHUFFLE(3, 1, 3, 1)));  // lane 2
            _mm512_store_si512(out + 32 * 24, _mm512_shuffle_i64x2(Q, S, _MM_SHUFFLE(3, 1, 3, 1)));  // lane 3
        }
    }
    for (; k0 < K; ++k0)
        for (int j = 0; j < kPanelRows; ++j) panel[32 * k0 + j] = j < n_rows ? rows[j * K + k0] : f16_t(0);
}

namespace {

// Rows of X per kernel call: 16 accumulators. 8 leaves no partial block at batches 8-64 (6 left a
// block of 2 at 32; 8 takes 0.85-1.0x of 6's time on austen's FFN shapes in bench_matvec).
constexpr int kPanelMR = 8;

template <class P>
void gemm_panel(const float* X, std::int64_t n, std::int64_t K, const P* panel, int n_cols, float* Y, std::int64_t ldy,
                const void* next, std::size_t next_bytes) {
    constexpr std::int64_t kc = 2048;  // K chunk: the panel's 256 KB of it stays in L2 across X rows
    NextPanelPrefetch ahead;  // spread over every row block's k steps
    if (next && next_bytes > 0) {
        ahead.bytes = static_cast<const char*>(next);
        ahead.n_lines = std::int64_t((next_bytes + 63) / 64);
        ahead.every = ahead.count = std::max<std::int64_t>(1, ceil_div(n, kPanelMR) * K / ahead.n_lines);
    } else {
        ahead.count = std::numeric_limits<std::int64_t>::max();
    }
    for (std::int64_t k0 = 0; k0 < K; k0 += kc) {
        const std::int64_t k1 = std::min(K, k0 + kc);
        for (std::int64_t i = 0; i < n; i += kPanelMR)
            with_count<kPanelMR>(int(std::min<std::int64_t>(kPanelMR, n - i)), [&](auto MR) {
                panel_kernel<MR>(X + i * K, K, panel, k0, k1, Y + i * ldy, ldy, n_cols, k0 > 0, ahead);
            });
    }
}

}  // namespace

void gemm_panel_avx512(const float* X, std::int64_t n, std::int64_t K, const float* panel, int n_cols, float* Y,
                       std::int64_t ldy, const void* next, std::size_t next_bytes) {
    gemm_panel(X, n, K, panel, n_cols, Y, ldy, next, next_bytes);
}

void gemm_panel_avx512(const float* X, std::int64_t n, std::int64_t K, const f16_t* panel, int n_cols, float* Y,
                       std::int64_t ldy, const void* next, std::size_t next_bytes) {
    gemm_panel(X, n, K, panel, n_cols, Y, ldy, next, next_bytes);
}

void dequantize_avx512(GgmlType type, const void* src, float* dst, std::int64_t n) {
    switch (type) {
        case GgmlType::Q8_0: return dequantize_q8_0(static_cast<const BlockQ8_0*>(src), dst, n / QK);
        case GgmlType::Q4_0: return dequantize_q4_0(static_cast<const BlockQ4_0*>(src), dst, n / QK);
        case GgmlType::Q4_K: return dequantize_q4_k(static_cast<const BlockQ4_K*>(src), dst, n / QK_K);
        case GgmlType::Q6_K: return dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, n / QK_K);
        default: AQPIM_ASSERT(false);
    }
}

void prepare_x_avx512(GgmlType type, const float* x, std::int64_t n, QuantizedX& qx) {
    reserve_x(qx, n, true);
    const std::int64_t nb = n / QK;
    std::int8_t* q = qx.q.data();
    float* lane = qx.lane.data();
    switch (type) {
        case GgmlType::Q4_0: {
            const std::int64_t ng = nb / 4;
            quantize_blocks(
                x, nb, qx,
                [&](std::int64_t b) { return b < 4 * ng ? q + 128 * (b / 4) + 16 * (b % 4) : q + 32 * b; },
                [&](std::int64_t b) { return b < 4 * ng ? q + 128 * (b / 4) + 64 + 16 * (b % 4) : q + 32 * b + 16; });
            for (std::int64_t k = 0; k < 16 * ng; ++k) {
                const std::int64_t g = k / 16, j = k % 16;
                lane[k] = qx.d[std::size_t(4 * g + j / 4)];
                const std::int8_t* lo = q + 128 * g + 4 * j;
                int s = 0;
                for (int t = 0; t < 4; ++t) s += lo[t] + lo[64 + t];
                qx.lane_i[std::size_t(k)] = -8 * s;
            }
            break;
        }
        case GgmlType::Q4_K: {
            static constexpr int kPos[8] = {0, 2, 1, 3, 4, 6, 5, 7};  // block j of a super-block -> position
            auto at = [&](std::int64_t b) { return q + 256 * (b / 8) + 32 * kPos[b % 8]; };
            quantize_blocks(x, nb, qx, at, [&](std::int64_t b) { return at(b) + 16; });
            for (std::int64_t b = 0; b < nb; ++b) {  // per super-block: d_x[0..8), d_x s[0..8)
                qx.aux[std::size_t(16 * (b / 8) + b % 8)] = qx.d[std::size_t(b)];
                qx.aux[std::size_t(16 * (b / 8) + 8 + b % 8)] = qx.d[std::size_t(b)] * float(qx.s[std::size_t(b)]);
            }
            break;
        }
        default: {  // Q8_0, Q6_K: natural order
            quantize_blocks(
                x, nb, qx, [&](std::int64_t b) { return q + 32 * b; }, [&](std::int64_t b) { return q + 32 * b + 16; });
            if (type == GgmlType::Q6_K)
                for (std::int64_t g = 0; g < n / 16; ++g)
                    qx.aux[std::size_t(g)] = -32.0f * qx.d[std::size_t(g / 2)] * float(qx.s16[std::size_t(g)]);
            else
                for (std::int64_t k = 0; k < n / 4; ++k) {
                    lane[k] = qx.d[std::size_t(k / 8)];
                    qx.lane_i[std::size_t(k)] = -128 * (q[4 * k] + q[4 * k + 1] + q[4 * k + 2] + q[4 * k + 3]);
                }
            break;
        }
    }
}

void dot_rows_avx512(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                     std::int64_t cols, const float* x, const QuantizedX& qx, float* y) {
    switch (type) {
        case GgmlType::F32:
            return for_rows(w, row_bytes, n_rows, y, [&](const std::uint8_t* r) { return dot_float<GgmlType::F32>(r, x, cols); });
        case GgmlType::F16:
            return for_rows(w, row_bytes, n_rows, y, [&](const std::uint8_t* r) { return dot_float<GgmlType::F16>(r, x, cols); });
        case GgmlType::BF16:
            return for_rows(w, row_bytes, n_rows, y, [&](const std::uint8_t* r) { return dot_float<GgmlType::BF16>(r, x, cols); });
        case GgmlType::Q8_0:
            return for_rows(w, row_bytes, n_rows, y, [&](const std::uint8_t* r) { return dot_units<Q8Pair>(r, qx, cols / QK); });
        case GgmlType::Q4_0:
            return for_rows(w, row_bytes, n_rows, y, [&](const std::uint8_t* r) { return dot_units<Q4Group>(r, qx, cols / QK); });
        case GgmlType::Q4_K:
            return for_rows(w, row_bytes, n_rows, y, [&](const std::uint8_t* r) { return dot_super<Q4KSuper>(r, qx, cols / QK_K); });
        case GgmlType::Q6_K:
            return for_rows(w, row_bytes, n_rows, y, [&](const std::uint8_t* r) { return dot_super<Q6KSuper>(r, qx, cols / QK_K); });
        default: AQPIM_ASSERT(false);
    }
}

namespace {

template <int S, int kR, int kC>
void dot_float_rows_batch_of(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                             std::int64_t cols, const float* X, std::int64_t n_x, float* Y, std::int64_t ldy, float* saved) {
    switch (type) {
        case GgmlType::F32: return dot_float_rows_batch<GgmlType::F32, S, kR, kC>(w, row_bytes, n_rows, cols, X, n_x, Y, ldy, saved);
        case GgmlType::F16: return dot_float_rows_batch<GgmlType::F16, S, kR, kC>(w, row_bytes, n_rows, cols, X, n_x, Y, ldy, saved);
        case GgmlType::BF16: return dot_float_rows_batch<GgmlType::BF16, S, kR, kC>(w, row_bytes, n_rows, cols, X, n_x, Y, ldy, saved);
        default: AQPIM_ASSERT(false);
    }
}

}  // namespace

void dot_rows_batch_avx512(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                           std::int64_t cols, const float* X, std::int64_t n_x, float* Y, std::int64_t ldy, float* saved) {
    using B = BatchBlocks;
    dot_float_rows_batch_of<B::sums, B::rows, B::activations>(type, w, row_bytes, n_rows, cols, X, n_x, Y, ldy, saved);
}

void dot_rows_batch_quantized_avx512(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                                     std::int64_t cols, const QuantizedX* X, std::int64_t n_x, float* Y, std::int64_t ldy,
                                     float* saved) {
    using B = QuantBatchBlocks;
    static_assert(kBatchChunk % (QK * Q8Pair::kBlocks * 2) == 0 && kBatchChunk % (QK * Q4Group::kBlocks * 2) == 0 &&
                      kBatchChunk % QK_K == 0,
                  "chunks of whole units, each starting at an even unit, and of whole super-blocks");
    const auto run = [&](auto unit) {
        using U = decltype(unit);
        constexpr int kRows = U::kSuperBlocks ? B::super_rows : B::rows;
        row_batch_blocks<kRows, B::activations, kRows * B::activations * B::sums * 16>(
            w, row_bytes, n_rows, cols, X, 1, n_x, Y, ldy, saved,
            [&](auto RR, auto CC, const std::uint8_t* const* rows, const QuantizedX* const* xs, std::int64_t k0,
                std::int64_t k1, float* acc, float* const* ys, std::size_t ahead) {
                if constexpr (U::kSuperBlocks)
                    dot_super_block<U, RR, CC>(rows, xs, k0, k1, cols, acc, ys, ahead);
                else
                    dot_units_block<U, RR, CC>(rows, xs, k0, k1, cols, acc, ys, ahead);
            });
    };
    switch (type) {
        case GgmlType::Q8_0: return run(Q8Pair{});
        case GgmlType::Q4_0: return run(Q4Group{});
        case GgmlType::Q4_K: return run(Q4KSuper{});
        case GgmlType::Q6_K: return run(Q6KSuper{});
        default: AQPIM_ASSERT(false);
    }
}

void dot_rows_invariant_avx512(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                               std::int64_t cols, const float* X, std::int64_t n_x, float* Y, std::int64_t ldy,
                               float* saved) {
    using B = InvariantBlocks;
    if (n_x <= B::few_activations && row_bytes * B::few_rows <= B::kFewRowsBlockBytes)
        return dot_float_rows_batch_of<B::sums, B::few_rows, B::few_activations>(type, w, row_bytes, n_rows, cols, X, n_x,
                                                                                  Y, ldy, saved);
    dot_float_rows_batch_of<B::sums, B::rows, B::activations>(type, w, row_bytes, n_rows, cols, X, n_x, Y, ldy, saved);
}

}  // namespace aqpim::quant
