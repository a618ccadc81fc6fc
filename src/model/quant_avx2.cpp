// AVX2 weight kernels: dequantization (bit-identical to quant_ref.cpp) and row dots. Quantized
// rows are multiplied against x quantized to int8 per block of 32 (natural order, the same
// values as quantize_x_ref) with vpmaddubsw (u8 x s8 pairs into s16) and vpmaddwd; signed
// weights use the sign trick (|w| against x carrying w's sign) so no pair sum saturates. The
// row-batch kernels: the server's batch-invariant product of float rows (dot_rows_invariant, its
// own arithmetic) and quantized rows against several activations at once (dot_rows_batch_quantized,
// matvec's arithmetic to the bit: a decoded block or super-block serves every activation of a block).

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "aqpim/error.h"
#include "model/quant_blocks.h"
#include "model/row_batch.h"
#include "simd/avx2_util.h"

namespace aqpim::quant {

namespace {

float h2f(f16_t h) { return _cvtsh_ss(h); }

inline __m256 opaque(__m256 v) {
    asm("" : "+x"(v));
    return v;
}

inline void prefetch_ahead(const void* p, int n_lines) {
    for (int i = 0; i < n_lines; ++i)
        _mm_prefetch(static_cast<const char*>(p) + kWeightPrefetchBytes + 64 * i, _MM_HINT_T0);
}

/// Lanes 0..n-1 set (a mask for _mm256_maskload_ps).
inline __m256i lanes_below(int n) { return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); }

/// 8 int32 sums of products of u8 a and s8 b (adjacent pairs never exceed the s16 range for the
/// operands used here: |a| <= 128 against |b| <= 127, or a <= 63).
inline __m256i dot_u8s8(__m256i a, __m256i b) { return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)); }

// ---- dequantization ---------------------------------------------------------------------------

void dequantize_q8_0(const BlockQ8_0* b, float* y, std::int64_t nb) {
    for (std::int64_t i = 0; i < nb; ++i, y += QK) {
        const __m256 d = _mm256_set1_ps(h2f(b[i].d));
        for (int h = 0; h < 4; ++h) {
            const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[i].qs + 8 * h));
            _mm256_storeu_ps(y + 8 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
        }
    }
}

void dequantize_q4_0(const BlockQ4_0* b, float* y, std::int64_t nb) {
    const __m128i low = _mm_set1_epi8(0xF);
    const __m256i eight = _mm256_set1_epi32(8);
    for (std::int64_t i = 0; i < nb; ++i, y += QK) {
        const __m256 d = _mm256_set1_ps(h2f(b[i].d));
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
        const __m128i half[2] = {_mm_and_si128(q, low), _mm_and_si128(_mm_srli_epi16(q, 4), low)};
        for (int h = 0; h < 2; ++h)
            for (int e = 0; e < 2; ++e) {
                const __m256i v = _mm256_sub_epi32(_mm256_cvtepu8_epi32(e == 0 ? half[h] : _mm_srli_si128(half[h], 8)), eight);
                _mm256_storeu_ps(y + 16 * h + 8 * e, _mm256_mul_ps(_mm256_cvtepi32_ps(v), d));
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
                const __m256 dj = _mm256_set1_ps(d * float(sc[2 * c + s])), mj = _mm256_set1_ps(dmin * float(m[2 * c + s]));
                for (int h = 0; h < 4; ++h) {
                    __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + 8 * h));
                    v = _mm_and_si128(s ? _mm_srli_epi16(v, 4) : v, low);
                    const __m256 p = opaque(_mm256_mul_ps(dj, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))));
                    _mm256_storeu_ps(y + 8 * h, _mm256_sub_ps(p, mj));
                }
            }
        }
    }
}

void dequantize_q6_k(const BlockQ6_K* b, float* y, std::int64_t nb) {
    const __m256i m4 = _mm256_set1_epi32(0xF), m2 = _mm256_set1_epi32(3), k32 = _mm256_set1_epi32(32);
    for (std::int64_t i = 0; i < nb; ++i, y += QK_K) {
        const float d = h2f(b[i].d);
        for (int h = 0; h < 2; ++h)
            for (int l0 = 0; l0 < 32; l0 += 8) {
                auto load = [](const std::uint8_t* p) {
                    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
                };
                const __m256i qa = load(b[i].ql + 64 * h + l0), qb = load(b[i].ql + 64 * h + 32 + l0);
                const __m256i qh = load(b[i].qh + 32 * h + l0);
                const __m256i lo[4] = {_mm256_and_si256(qa, m4), _mm256_and_si256(qb, m4), _mm256_srli_epi32(qa, 4),
                                       _mm256_srli_epi32(qb, 4)};
                for (int quarter = 0; quarter < 4; ++quarter) {
                    const __m256i hi = _mm256_and_si256(_mm256_srli_epi32(qh, 2 * quarter), m2);
                    const __m256i q = _mm256_sub_epi32(_mm256_or_si256(lo[quarter], _mm256_slli_epi32(hi, 4)), k32);
                    const int at = 128 * h + 32 * quarter + l0;
                    const __m256 s = _mm256_set1_ps(d * float(b[i].scales[at / 16]));
                    _mm256_storeu_ps(y + at, _mm256_mul_ps(s, _mm256_cvtepi32_ps(q)));
                }
            }
    }
}

// ---- activations (natural order, bit-identical to quantize_x_ref) -------------------------------

void quantize_x(const float* x, std::int64_t n, QuantizedX& qx) {
    reserve_x(qx, n, false);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    for (std::int64_t b = 0; b < n / QK; ++b) {
        __m256 v[4];
        __m256 m = _mm256_setzero_ps();
        for (int t = 0; t < 4; ++t) {
            v[t] = _mm256_loadu_ps(x + 32 * b + 8 * t);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[t]));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        const float d = amax / 127.0f;
        const __m256 id = _mm256_set1_ps(d != 0 ? 1.0f / d : 0.0f);
        __m256i q[4];
        for (int t = 0; t < 4; ++t) q[t] = _mm256_cvtps_epi32(_mm256_mul_ps(v[t], id));
        const __m256i s01 = _mm256_add_epi32(q[0], q[1]), s23 = _mm256_add_epi32(q[2], q[3]);
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qx.q.data() + 32 * b), _mm256_permutevar8x32_epi32(p, perm));
        auto hsum_i = [](__m256i s) {
            __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
            return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1)));
        };
        const int sa = hsum_i(s01), sc = hsum_i(s23);
        qx.d[std::size_t(b)] = d;
        qx.s[std::size_t(b)] = sa + sc;
        qx.s16[std::size_t(2 * b)] = sa;
        qx.s16[std::size_t(2 * b + 1)] = sc;
    }
}

// ---- row dots -----------------------------------------------------------------------------------

inline __m256i load_x(const QuantizedX& qx, std::int64_t b) {
    return _mm256_load_si256(reinterpret_cast<const __m256i*>(qx.q.data() + 32 * b));
}

// Q8_0 and Q4_0 rows go a block (32 values) at a time, block b into accumulator b % 2, the two
// summed by hsum; matvec's kernel (dot_blocks) and the row-batch kernel (dot_blocks_block) share
// these steps, so every output of the batch kernel is matvec's to the bit.

/// Q8_0 block: its signed weights and their magnitudes (the sign trick), its scale.
struct Q8Block {
    using Block = BlockQ8_0;
    static constexpr int kPrefetchLines = 2;  ///< cache lines requested ahead per pair of blocks
    struct Weights {
        __m256i q, abs_q;
        float d;
    };
    static Weights decode(const BlockQ8_0& b) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
        return {q, _mm256_abs_epi8(q), h2f(b.d)};
    }
};

/// Q4_0 block: nibbles - 8 in natural order, their magnitudes, its scale.
struct Q4Block {
    using Block = BlockQ4_0;
    static constexpr int kPrefetchLines = 1;
    using Weights = Q8Block::Weights;
    static Weights decode(const BlockQ4_0& b) {
        const __m128i low = _mm_set1_epi8(0xF);
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
        const __m256i v = _mm256_sub_epi8(
            _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), low), _mm_and_si128(q, low)), _mm256_set1_epi8(8));
        return {v, _mm256_abs_epi8(v), h2f(b.d)};
    }
};

/// acc += block b's dot with x, scaled by the weight and activation scales.
inline __m256 add_block(const Q8Block::Weights& w, const QuantizedX& qx, std::int64_t b, __m256 acc) {
    const __m256i p = dot_u8s8(w.abs_q, _mm256_sign_epi8(load_x(qx, b), w.q));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(w.d * qx.d[std::size_t(b)]), acc);
}

/// A Q8_0 / Q4_0 row of nb blocks against prepared x (matvec's arithmetic).
template <class U>
float dot_blocks(const std::uint8_t* row, const QuantizedX& qx, std::int64_t nb) {
    const auto* w = reinterpret_cast<const typename U::Block*>(row);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    std::int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
        prefetch_ahead(w + b, U::kPrefetchLines);
        acc0 = add_block(U::decode(w[b]), qx, b, acc0);
        acc1 = add_block(U::decode(w[b + 1]), qx, b + 1, acc1);
    }
    if (b < nb) acc0 = add_block(U::decode(w[b]), qx, b, acc0);
    return hsum(_mm256_add_ps(acc0, acc1));
}

/// dot_blocks for R rows against C activations at once, over values [k0, k1) of rows of n (chunks
/// of whole blocks, each starting at an even block), every output dot_blocks' to the bit: a decoded
/// block serves C activations, an activation's x block R rows. Between chunks the accumulators wait
/// in `saved` ([R][C][2] vectors of 8 floats, aligned).
template <class U, int R, int C>
void dot_blocks_block(const std::uint8_t* const* rows, const QuantizedX* const* xs, std::int64_t k0, std::int64_t k1,
                      std::int64_t n, float* saved, float* const* ys, std::size_t ahead) {
    __m256 acc[R][C][2];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c)
#pragma GCC unroll 2
            for (int a = 0; a < 2; ++a)
                acc[r][c][a] = k0 == 0 ? _mm256_setzero_ps() : _mm256_load_ps(saved + 8 * ((r * C + c) * 2 + a));
    const auto step = [&](std::int64_t b, auto A) {
        typename U::Weights w[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) w[r] = U::decode(reinterpret_cast<const typename U::Block*>(rows[r])[b]);
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c)
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) acc[r][c][A()] = add_block(w[r], *xs[c], b, acc[r][c][A()]);
    };
    const std::int64_t b1 = std::min(k1, n) / QK;
    std::int64_t b = k0 / QK;
    for (; b + 2 <= b1; b += 2) {
        if (ahead > 0)
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r)
                for (int line = 0; line < U::kPrefetchLines; ++line)
                    _mm_prefetch(reinterpret_cast<const char*>(rows[r] + sizeof(typename U::Block) * b + ahead + 64 * line),
                                 _MM_HINT_T0);
        step(b, std::integral_constant<int, 0>{});
        step(b + 1, std::integral_constant<int, 1>{});
    }
    if (b < b1) step(b, std::integral_constant<int, 0>{});
    if (k1 < n) {
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
            for (int c = 0; c < C; ++c)
#pragma GCC unroll 2
                for (int a = 0; a < 2; ++a) _mm256_store_ps(saved + 8 * ((r * C + c) * 2 + a), acc[r][c][a]);
        return;
    }
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c)
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) ys[c][r] = hsum(_mm256_add_ps(acc[r][c][0], acc[r][c][1]));
}

// Q4_K and Q6_K rows go a super-block (256 values) at a time into two accumulators and a per-type
// third term (Q4_K: the mins' vector, Q6_K: the -32 offset's scalar); matvec's kernel (dot_super)
// and the row-batch kernel (dot_super_block) share the steps, so every output of the batch kernel is
// matvec's to the bit.

/// What one Q4_K / Q6_K output accumulates over its super-blocks.
struct SuperSums {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), mins = _mm256_setzero_ps();
    float corr = 0;
    static constexpr int kFloats = 32;  ///< saved between chunks: the three vectors, then corr
    void load(const float* p) {
        acc0 = _mm256_load_ps(p);
        acc1 = _mm256_load_ps(p + 8);
        mins = _mm256_load_ps(p + 16);
        corr = p[24];
    }
    void store(float* p) const {
        _mm256_store_ps(p, acc0);
        _mm256_store_ps(p + 8, acc1);
        _mm256_store_ps(p + 16, mins);
        p[24] = corr;
    }
};

/// Q4_K super-block: its sub-block scales and mins as floats (d and dmin applied), its nibbles read
/// in place; one activation's part: the mins term, then each 32-byte chunk's low and high nibbles
/// against two x blocks.
struct Q4KSuper {
    using Block = BlockQ4_K;
    static constexpr int kPrefetchLines = 3;
    struct Weights {
        __m256 sc, mn;
        const std::uint8_t* qs;
    };
    static Weights decode(const BlockQ4_K& b) {
        std::uint64_t sc_lo, m_hi;
        unpack_q4k_scales_words(b.scales, sc_lo, m_hi);
        return {_mm256_mul_ps(_mm256_set1_ps(h2f(b.d)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(std::int64_t(sc_lo))))),
                _mm256_mul_ps(_mm256_set1_ps(h2f(b.dmin)), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(std::int64_t(m_hi))))),
                b.qs};
    }
    static void add(const Weights& w, const QuantizedX& qx, std::int64_t i, SuperSums& s) {
        const __m256i low = _mm256_set1_epi8(0xF);
        // min term: sum_j dmin m_j * d_x[j] s[j]
        const __m256 dx = _mm256_loadu_ps(qx.d.data() + 8 * i);
        const __m256 xs = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx.s.data() + 8 * i)));
        s.mins = _mm256_fmadd_ps(w.mn, _mm256_mul_ps(dx, xs), s.mins);
        const __m256 w_sc = _mm256_mul_ps(w.sc, dx);  // d sc_j d_x[j]
        for (int c = 0; c < 4; ++c) {
            const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs + 32 * c));
            const std::int64_t b = 8 * i + 2 * c;
            const __m256i plo = dot_u8s8(_mm256_and_si256(q, low), load_x(qx, b));
            const __m256i phi = dot_u8s8(_mm256_and_si256(_mm256_srli_epi16(q, 4), low), load_x(qx, b + 1));
            s.acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(plo), _mm256_permutevar8x32_ps(w_sc, _mm256_set1_epi32(2 * c)), s.acc0);
            s.acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(phi), _mm256_permutevar8x32_ps(w_sc, _mm256_set1_epi32(2 * c + 1)), s.acc1);
        }
    }
    static float finish(const SuperSums& s) { return hsum(_mm256_add_ps(s.acc0, s.acc1)) - hsum(s.mins); }
};

/// Q6_K super-block: its 6-bit codes rebuilt (two halves of four 32-value quarters), its scale; one
/// activation's part: each quarter against an x block, the -32 offset through the block sums.
struct Q6KSuper {
    using Block = BlockQ6_K;
    static constexpr int kPrefetchLines = 4;
    struct Weights {
        __m256i u[2][4];
        float d;
        const std::int8_t* scales;
    };
    static Weights decode(const BlockQ6_K& b) {
        const __m256i low = _mm256_set1_epi8(0xF), top = _mm256_set1_epi8(0x30);
        Weights w;
        for (int h = 0; h < 2; ++h) {
            const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * h));
            w.u[h][0] = _mm256_or_si256(_mm256_and_si256(ql0, low), _mm256_and_si256(_mm256_slli_epi16(qh, 4), top));
            w.u[h][1] = _mm256_or_si256(_mm256_and_si256(ql1, low), _mm256_and_si256(_mm256_slli_epi16(qh, 2), top));
            w.u[h][2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low), _mm256_and_si256(qh, top));
            w.u[h][3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low),
                                        _mm256_and_si256(_mm256_srli_epi16(qh, 2), top));
        }
        w.d = h2f(b.d);
        w.scales = b.scales;
        return w;
    }
    static void add(const Weights& w, const QuantizedX& qx, std::int64_t i, SuperSums& s) {
        const std::int8_t* sc = w.scales;
        for (int h = 0; h < 2; ++h)
            for (int qq = 0; qq < 4; ++qq) {
                const std::int64_t b = 8 * i + 4 * h + qq;  // activation block = groups g, g+1
                const int g = 8 * h + 2 * qq;
                const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]));
                const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(w.u[h][qq], load_x(qx, b)), scv);
                const float ddx = w.d * qx.d[std::size_t(b)];
                __m256& acc = qq % 2 == 0 ? s.acc0 : s.acc1;
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(ddx), acc);
                s.corr += ddx * float(-32 * (sc[g] * qx.s16[std::size_t(2 * b)] + sc[g + 1] * qx.s16[std::size_t(2 * b + 1)]));
            }
    }
    static float finish(const SuperSums& s) { return hsum(_mm256_add_ps(s.acc0, s.acc1)) + s.corr; }
};

/// A Q4_K / Q6_K row of nb super-blocks against prepared x (matvec's arithmetic).
template <class U>
float dot_super(const std::uint8_t* row, const QuantizedX& qx, std::int64_t nb) {
    const auto* w = reinterpret_cast<const typename U::Block*>(row);
    SuperSums s;
    for (std::int64_t i = 0; i < nb; ++i) {
        prefetch_ahead(w + i, U::kPrefetchLines);
        U::add(U::decode(w[i]), qx, i, s);
    }
    return U::finish(s);
}

/// dot_super for R rows against C activations at once, over values [k0, k1) of rows of n (chunks of
/// whole super-blocks), every output dot_super's to the bit: a decoded super-block serves C
/// activations. Between chunks the sums wait in `saved` ([R][C] of SuperSums::kFloats, aligned).
template <class U, int R, int C>
void dot_super_block(const std::uint8_t* const* rows, const QuantizedX* const* xs, std::int64_t k0, std::int64_t k1,
                     std::int64_t n, float* saved, float* const* ys, std::size_t ahead) {
    SuperSums s[R][C];
    if (k0 > 0)
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) s[r][c].load(saved + SuperSums::kFloats * (r * C + c));
    const std::int64_t i1 = std::min(k1, n) / QK_K;
    for (std::int64_t i = k0 / QK_K; i < i1; ++i) {
        typename U::Weights w[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) {
            const auto* blk = reinterpret_cast<const typename U::Block*>(rows[r]) + i;
            if (ahead > 0)
                for (int line = 0; line < U::kPrefetchLines; ++line)
                    _mm_prefetch(reinterpret_cast<const char*>(blk) + ahead + 64 * line, _MM_HINT_T0);
            w[r] = U::decode(*blk);
        }
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c)
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) U::add(w[r], *xs[c], i, s[r][c]);
    }
    if (k1 < n) {
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) s[r][c].store(saved + SuperSums::kFloats * (r * C + c));
        return;
    }
    for (int c = 0; c < C; ++c)
        for (int r = 0; r < R; ++r) ys[c][r] = U::finish(s[r][c]);
}

template <GgmlType T>
inline __m256 load8(const std::uint8_t* row, std::int64_t i) {
    if constexpr (T == GgmlType::F32) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + i);
    } else if constexpr (T == GgmlType::F16) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const f16_t*>(row) + i)));
    } else {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const bf16_t*>(row) + i)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
}

template <GgmlType T>
float dot_float(const std::uint8_t* row, const float* x, std::int64_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    std::int64_t i = 0;
    constexpr int kBytes = T == GgmlType::F32 ? 4 : 2;
    for (; i + 32 <= n; i += 32) {
        prefetch_ahead(row + i * kBytes, kBytes / 2);
        a0 = _mm256_fmadd_ps(load8<T>(row, i), _mm256_loadu_ps(x + i), a0);
        a1 = _mm256_fmadd_ps(load8<T>(row, i + 8), _mm256_loadu_ps(x + i + 8), a1);
        a2 = _mm256_fmadd_ps(load8<T>(row, i + 16), _mm256_loadu_ps(x + i + 16), a2);
        a3 = _mm256_fmadd_ps(load8<T>(row, i + 24), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load8<T>(row, i), _mm256_loadu_ps(x + i), a0);
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; ++i) {
        float v;
        if constexpr (T == GgmlType::F32) v = reinterpret_cast<const float*>(row)[i];
        else if constexpr (T == GgmlType::F16) v = fp16_to_f32_scalar(reinterpret_cast<const f16_t*>(row)[i]);
        else v = bf16_to_f32_scalar(reinterpret_cast<const bf16_t*>(row)[i]);
        sum += v * x[i];
    }
    return sum;
}

/// The first n (< 8) values of a row from value i, the other lanes 0.
template <GgmlType T>
inline __m256 load8_partial(const std::uint8_t* row, std::int64_t i, int n) {
    if constexpr (T == GgmlType::F32) {
        return _mm256_maskload_ps(reinterpret_cast<const float*>(row) + i, lanes_below(n));
    } else {
        alignas(16) std::uint16_t part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        std::memcpy(part, row + 2 * i, 2 * std::size_t(n));
        return load8<T>(reinterpret_cast<const std::uint8_t*>(part), 0);
    }
}

/// The invariant products' block at this level (dot_rows_invariant): the sums of R rows against C
/// activations over values [k0, k1) of rows of n, each output 8 values a step into one 8-lane
/// accumulator (the last n % 8 values in one step, the missing lanes 0), then hsum: an output's
/// bits depend on its row and activation only, not on R, C, the chunks or the threads. A weight
/// vector serves C activations and an x vector R rows. Between chunks the accumulators wait in
/// `saved` ([R][C] vectors of 8 floats, aligned); `ahead` > 0: each row's weights that many bytes on
/// are requested as the row's own are read.
template <GgmlType T, int R, int C>
void dot_invariant_block(const std::uint8_t* const* rows, const float* const* xs, std::int64_t k0, std::int64_t k1,
                         std::int64_t n, float* saved, float* const* ys, std::size_t ahead) {
    constexpr std::int64_t kValueBytes = T == GgmlType::F32 ? 4 : 2;
    __m256 acc[R][C];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) acc[r][c] = k0 == 0 ? _mm256_setzero_ps() : _mm256_load_ps(saved + 8 * (r * C + c));
    const auto step = [&](std::int64_t i) {
        __m256 w[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) w[r] = load8<T>(rows[r], i);
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
            const __m256 x = opaque(_mm256_loadu_ps(xs[c] + i));  // one load, not one per row
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(w[r], x, acc[r][c]);
        }
    };
    const std::int64_t end = std::min(k1, n);
    std::int64_t i = k0;
    for (; i + 32 <= end; i += 32) {  // four steps per pass, each into the same accumulators
        if (ahead > 0)
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
                for (std::int64_t line = 0; line < kValueBytes / 2; ++line)
                    _mm_prefetch(reinterpret_cast<const char*>(rows[r] + i * kValueBytes + ahead + 64 * line), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int s = 0; s < 4; ++s) step(i + 8 * s);
    }
    for (; i + 8 <= end; i += 8) step(i);
    if (k1 < n) {
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
            for (int c = 0; c < C; ++c) _mm256_store_ps(saved + 8 * (r * C + c), acc[r][c]);
        return;
    }
    if (i < n) {
        const int left = int(n - i);
        __m256 w[R];
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) w[r] = load8_partial<T>(rows[r], i, left);
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
            const __m256 x = _mm256_maskload_ps(xs[c] + i, lanes_below(left));
#pragma GCC unroll 16
            for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(w[r], x, acc[r][c]);
        }
    }
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c)
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) ys[c][r] = hsum(acc[r][c]);
}

template <int kR, int kC>
void dot_invariant_rows(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                        std::int64_t cols, const float* X, std::int64_t n_x, float* Y, std::int64_t ldy, float* saved) {
    static_assert(kBatchChunk % 32 == 0, "chunks of whole 32-value passes");
    auto run = [&](auto type_constant) {
        constexpr GgmlType T = decltype(type_constant)::value;
        row_batch_blocks<kR, kC, kR * kC * 8>(
            w, row_bytes, n_rows, cols, X, cols, n_x, Y, ldy, saved,
            [&](auto RR, auto CC, const std::uint8_t* const* rows, const float* const* xs, std::int64_t k0,
                std::int64_t k1, float* acc, float* const* ys,
                std::size_t ahead) { dot_invariant_block<T, RR, CC>(rows, xs, k0, k1, cols, acc, ys, ahead); });
    };
    switch (type) {
        case GgmlType::F32: return run(std::integral_constant<GgmlType, GgmlType::F32>{});
        case GgmlType::F16: return run(std::integral_constant<GgmlType, GgmlType::F16>{});
        case GgmlType::BF16: return run(std::integral_constant<GgmlType, GgmlType::BF16>{});
        default: AQPIM_ASSERT(false);
    }
}

template <class RowDot>
void for_rows(const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows, float* y, RowDot dot) {
    for (std::int64_t r = 0; r < n_rows; ++r) y[r] = dot(w + std::size_t(r) * row_bytes);
}

}  // namespace

void dequantize_avx2(GgmlType type, const void* src, float* dst, std::int64_t n) {
    switch (type) {
        case GgmlType::Q8_0: return dequantize_q8_0(static_cast<const BlockQ8_0*>(src), dst, n / QK);
        case GgmlType::Q4_0: return dequantize_q4_0(static_cast<const BlockQ4_0*>(src), dst, n / QK);
        case GgmlType::Q4_K: return dequantize_q4_k(static_cast<const BlockQ4_K*>(src), dst, n / QK_K);
        case GgmlType::Q6_K: return dequantize_q6_k(static_cast<const BlockQ6_K*>(src), dst, n / QK_K);
        default: AQPIM_ASSERT(false);
    }
}

void prepare_x_avx2(GgmlType, const float* x, std::int64_t n, QuantizedX& qx) { quantize_x(x, n, qx); }

void dot_rows_invariant_avx2(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                             std::int64_t cols, const float* X, std::int64_t n_x, float* Y, std::int64_t ldy,
                             float* saved) {
    using B = InvariantBlocksAvx2;
    if (n_x <= B::few_activations && row_bytes * B::few_rows <= InvariantBlocks::kFewRowsBlockBytes)
        return dot_invariant_rows<B::few_rows, B::few_activations>(type, w, row_bytes, n_rows, cols, X, n_x, Y, ldy, saved);
    dot_invariant_rows<B::rows, B::activations>(type, w, row_bytes, n_rows, cols, X, n_x, Y, ldy, saved);
}

void dot_rows_avx2(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows, std::int64_t cols,
                   const float* x, const QuantizedX& qx, float* y) {
    auto rows = [&](auto dot) { for_rows(w, row_bytes, n_rows, y, dot); };
    switch (type) {
        case GgmlType::F32: return rows([&](const std::uint8_t* r) { return dot_float<GgmlType::F32>(r, x, cols); });
        case GgmlType::F16: return rows([&](const std::uint8_t* r) { return dot_float<GgmlType::F16>(r, x, cols); });
        case GgmlType::BF16: return rows([&](const std::uint8_t* r) { return dot_float<GgmlType::BF16>(r, x, cols); });
        case GgmlType::Q8_0: return rows([&](const std::uint8_t* r) { return dot_blocks<Q8Block>(r, qx, cols / QK); });
        case GgmlType::Q4_0: return rows([&](const std::uint8_t* r) { return dot_blocks<Q4Block>(r, qx, cols / QK); });
        case GgmlType::Q4_K: return rows([&](const std::uint8_t* r) { return dot_super<Q4KSuper>(r, qx, cols / QK_K); });
        case GgmlType::Q6_K: return rows([&](const std::uint8_t* r) { return dot_super<Q6KSuper>(r, qx, cols / QK_K); });
        default: AQPIM_ASSERT(false);
    }
}

void dot_rows_batch_quantized_avx2(GgmlType type, const std::uint8_t* w, std::size_t row_bytes, std::int64_t n_rows,
                                   std::int64_t cols, const QuantizedX* X, std::int64_t n_x, float* Y, std::int64_t ldy,
                                   float* saved) {
    using B = QuantBatchBlocksAvx2;
    static_assert(kBatchChunk % (2 * QK) == 0 && kBatchChunk % QK_K == 0,
                  "chunks of whole blocks, each starting at an even block, and of whole super-blocks");
    const auto blocks = [&](auto unit) {
        using U = decltype(unit);
        row_batch_blocks<B::rows, B::activations, B::rows * B::activations * 2 * 8>(
            w, row_bytes, n_rows, cols, X, 1, n_x, Y, ldy, saved,
            [&](auto RR, auto CC, const std::uint8_t* const* rows, const QuantizedX* const* xs, std::int64_t k0,
                std::int64_t k1, float* acc, float* const* ys,
                std::size_t ahead) { dot_blocks_block<U, RR, CC>(rows, xs, k0, k1, cols, acc, ys, ahead); });
    };
    const auto supers = [&](auto unit) {
        using U = decltype(unit);
        row_batch_blocks<B::super_rows, B::super_activations, B::super_rows * B::super_activations * SuperSums::kFloats>(
            w, row_bytes, n_rows, cols, X, 1, n_x, Y, ldy, saved,
            [&](auto RR, auto CC, const std::uint8_t* const* rows, const QuantizedX* const* xs, std::int64_t k0,
                std::int64_t k1, float* acc, float* const* ys,
                std::size_t ahead) { dot_super_block<U, RR, CC>(rows, xs, k0, k1, cols, acc, ys, ahead); });
    };
    switch (type) {
        case GgmlType::Q8_0: return blocks(Q8Block{});
        case GgmlType::Q4_0: return blocks(Q4Block{});
        case GgmlType::Q4_K: return supers(Q4KSuper{});
        case GgmlType::Q6_K: return supers(Q6KSuper{});
        default: AQPIM_ASSERT(false);
    }
}

}  // namespace aqpim::quant
