// Random CUDA attention problems in host memory and their double-precision reference.

#include "cuda/host_problem.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>

#include "cuda/pq_tile.h"
#include "cuda/require.h"

namespace aqpim::cuda {

namespace {

std::vector<int> per_sequence(const std::vector<int>& v, int batch, const char* name) {
    AQPIM_CUDA_REQUIRE(v.size() == 1 || int(v.size()) == batch,
                       std::string(name) + " needs 1 or batch values, got " + std::to_string(v.size()));
    return v.size() == 1 ? std::vector<int>(batch, v[0]) : v;
}

/// A dense random rotation of D = 2^k dims, row-major: log2(D) butterfly stages of Givens
/// rotations by random angles (every output mixes every input), in double.
void random_butterfly_rotation(int D, std::mt19937_64& rng, float* out) {
    std::uniform_real_distribution<double> angle(0.0, 6.283185307179586);
    std::vector<double> r(std::size_t(D) * D, 0.0);
    for (int i = 0; i < D; ++i) r[std::size_t(i) * D + i] = 1.0;
    for (int stride = 1; stride < D; stride *= 2)
        for (int i = 0; i < D; ++i) {
            if (i & stride) continue;
            const int j = i | stride;
            const double t = angle(rng), c = std::cos(t), sn = std::sin(t);
            for (int col = 0; col < D; ++col) {
                const double a = r[std::size_t(i) * D + col], b = r[std::size_t(j) * D + col];
                r[std::size_t(i) * D + col] = c * a - sn * b;
                r[std::size_t(j) * D + col] = sn * a + c * b;
            }
        }
    for (std::size_t i = 0; i < r.size(); ++i) out[i] = float(r[i]);
}

}  // namespace

PqProblemSpec pq_spec(int batch, int n_kv_heads, int n_q, int D, int Mk, int Mv, int page, int versions,
                      std::vector<int> n_coded, std::vector<int> n_f16, int chunk_pages, std::uint64_t seed) {
    PqProblemSpec s;
    s.shape = {batch, n_kv_heads, n_q, D, 0.0f};
    s.Mk = Mk;
    s.Mv = Mv;
    s.page_tokens = page;
    s.n_versions = versions;
    s.n_coded = std::move(n_coded);
    s.n_f16 = std::move(n_f16);
    s.chunk_pages = chunk_pages;
    s.seed = seed;
    return s;
}

PqAttentionParams HostPqProblem::view() const {
    PqAttentionParams p = dims;
    p.q = q.data();
    p.pool = pool.data();
    p.page_offset = page_offset.data();
    p.page_version = page_version.data();
    p.k_stream_off = k_stream_off.data();
    p.v_stream_off = v_stream_off.data();
    p.n_coded = n_coded.data();
    p.n_f16 = n_f16.data();
    p.k16 = k16.empty() ? nullptr : k16.data();
    p.v16 = v16.empty() ? nullptr : v16.data();
    p.k_cb = k_cb.data();
    p.k_perm = k_perm.data();
    p.k_gain = k_gain.data();
    p.v_cb = v_cb.data();
    p.v_perm = v_perm.data();
    p.v_gain = v_gain.data();
    p.k_rot = k_rot.empty() ? nullptr : k_rot.data();
    p.v_rot = v_rot.empty() ? nullptr : v_rot.data();
    return p;
}

std::size_t HostPqProblem::stream_bytes(bool values) const {
    return std::size_t(dims.page_tokens / kBlockTokens) * stream_block_bytes(dims, values);
}

HostPqProblem make_random_pq_problem(const PqProblemSpec& spec) {
    const AttentionShape& s = spec.shape;
    check_attention_shape(s);
    AQPIM_CUDA_REQUIRE(spec.nbits == 4 || spec.nbits == 8, "nbits must be 4 or 8, got " + std::to_string(spec.nbits));
    HostPqProblem h;
    PqAttentionParams& d = h.dims;
    d.shape = s;
    if (d.shape.scale == 0.0f) d.shape.scale = 1.0f / std::sqrt(float(s.D));
    d.Mk = spec.Mk;
    d.Mv = spec.Mv;
    d.nbits = spec.nbits;
    d.page_tokens = spec.page_tokens;
    d.n_versions = spec.n_versions;
    d.chunk_pages = spec.chunk_pages;
    h.n_coded = per_sequence(spec.n_coded, s.batch, "n_coded");
    h.n_f16 = per_sequence(spec.n_f16, s.batch, "n_f16");
    const int max_coded = *std::max_element(h.n_coded.begin(), h.n_coded.end());
    d.max_pages = std::max(1, (max_coded + spec.page_tokens - 1) / spec.page_tokens);
    d.n_chunks = (d.max_pages + d.chunk_pages - 1) / d.chunk_pages;
    d.max_f16 = *std::max_element(h.n_f16.begin(), h.n_f16.end());
    AQPIM_CUDA_REQUIRE(spec.page_tokens % kBlockTokens == 0, "page_tokens must be a multiple of 32");

    std::mt19937_64 rng(spec.seed);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    std::uniform_real_distribution<float> gain(0.5f, 2.0f);
    const int D = s.D, n_kv_heads = s.n_kv_heads;

    // Page layout: per KV head, key blocks then value blocks.
    const std::size_t kb = h.stream_bytes(false), vb = h.stream_bytes(true);
    for (int kv = 0; kv < n_kv_heads; ++kv) {
        h.k_stream_off.push_back(std::int64_t(kv * (kb + vb)));
        h.v_stream_off.push_back(std::int64_t(kv * (kb + vb) + kb));
    }
    h.page_bytes = (n_kv_heads * (kb + vb) + 63) / 64 * 64;
    std::int64_t n_pages_total = 0;
    for (int b = 0; b < s.batch; ++b) n_pages_total += (h.n_coded[b] + spec.page_tokens - 1) / spec.page_tokens;
    std::vector<std::int64_t> slots(n_pages_total);
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    h.page_offset.assign(std::size_t(s.batch) * d.max_pages, 0);
    h.page_version.assign(std::size_t(s.batch) * d.max_pages, 0);
    std::int64_t next = 0;
    for (int b = 0; b < s.batch; ++b) {
        const int n_pages = (h.n_coded[b] + spec.page_tokens - 1) / spec.page_tokens;
        for (int pg = 0; pg < n_pages; ++pg) {
            h.page_offset[std::size_t(b) * d.max_pages + pg] = slots[next++] * std::int64_t(h.page_bytes);
            h.page_version[std::size_t(b) * d.max_pages + pg] =
                std::uint8_t(std::min(spec.n_versions - 1, pg * spec.n_versions / std::max(1, n_pages)));
        }
    }
    if (spec.fill_data) {
        h.pool.resize(std::size_t(n_pages_total) * h.page_bytes);
        const unsigned n_values = spec.code_values > 0 ? unsigned(spec.code_values) : 256u;
        for (auto& byte : h.pool) {
            const unsigned r = unsigned(rng());
            byte = spec.nbits == 8 || spec.code_values <= 0
                       ? std::uint8_t(r % n_values)
                       : std::uint8_t((r & 15u) % n_values | ((r >> 4 & 15u) % n_values) << 4);
        }
        h.k16.resize(std::size_t(s.batch) * n_kv_heads * d.max_f16 * D);
        h.v16.resize(h.k16.size());
        for (auto& x : h.k16) x = f32_to_fp16_scalar(gauss(rng));
        for (auto& x : h.v16) x = f32_to_fp16_scalar(gauss(rng));
    }
    h.q.resize(std::size_t(s.batch) * n_kv_heads * s.n_q * D);
    for (float& x : h.q) x = gauss(rng);
    const std::size_t n_slots = std::size_t(s.batch) * spec.n_versions * n_kv_heads;
    for (auto* cb : {&h.k_cb, &h.v_cb}) {
        cb->resize(n_slots * ksub_of(spec.nbits) * D);
        for (float& x : *cb) x = gauss(rng);
    }
    for (auto* g : {&h.k_gain, &h.v_gain}) {
        g->resize(n_slots * D);
        for (float& x : *g) x = gain(rng);
    }
    for (auto* perm : {&h.k_perm, &h.v_perm}) {
        perm->resize(n_slots * D);
        for (std::size_t i = 0; i < n_slots; ++i) {
            std::iota(perm->begin() + i * D, perm->begin() + (i + 1) * D, 0);
            std::shuffle(perm->begin() + i * D, perm->begin() + (i + 1) * D, rng);
        }
    }
    if (spec.rotated)
        for (auto* rot : {&h.k_rot, &h.v_rot}) {
            rot->resize(n_slots * D * D);
            for (std::size_t i = 0; i < n_slots; ++i) random_butterfly_rotation(D, rng, rot->data() + i * D * D);
        }
    return h;
}

std::vector<double> reference_attention(const HostPqProblem& h) {
    const PqAttentionParams p = h.view();
    const AttentionShape& s = p.shape;
    const int D = s.D;
    AQPIM_CUDA_REQUIRE(!h.pool.empty() || h.n_coded == std::vector<int>(s.batch, 0), "the problem holds no code data");
    std::vector<double> out(std::size_t(s.batch) * s.n_kv_heads * s.n_q * D, 0.0);
    std::vector<float> k(D), v(D), y(D);
    for (int b = 0; b < s.batch; ++b)
        for (int kv = 0; kv < s.n_kv_heads; ++kv) {
            const int n = h.n_coded[b] + h.n_f16[b];
            std::vector<double> scores(std::size_t(s.n_q) * n), acc(std::size_t(s.n_q) * D, 0.0);
            std::vector<std::vector<float>> V(n);
            for (int t = 0; t < n; ++t) {
                if (t < h.n_coded[b]) {
                    const std::int64_t pt = std::int64_t(b) * p.max_pages + t / p.page_tokens;
                    const std::int64_t cs = codebook_slot(p, b, p.page_version[pt], kv);
                    const int in_page = t % p.page_tokens;
                    for (int values = 0; values < 2; ++values) {
                        const int M = values ? p.Mv : p.Mk;
                        const PqCodebookView cb = codebook_view(p, cs, values);
                        const std::uint8_t* block = p.pool + p.page_offset[pt] +
                                                    (values ? p.v_stream_off : p.k_stream_off)[kv] +
                                                    std::int64_t(in_page / kBlockTokens) * stream_block_bytes(p, values);
                        float* x = values ? v.data() : k.data();
                        for (int i = 0; i < D; ++i)
                            y[i] = centroid_dim(cb, D / M, i, block_code(block, p.nbits, in_page % kBlockTokens, i / (D / M)));
                        for (int i = 0; i < D; ++i) {
                            if (cb.rot)
                                x[i] = rotated_back(cb, y.data(), i);
                            else
                                x[value_dim(cb, i)] = value_gain(cb, i) * y[i];
                        }
                    }
                } else {
                    const std::size_t r = (std::size_t(b) * s.n_kv_heads + kv) * p.max_f16 + (t - h.n_coded[b]);
                    for (int i = 0; i < D; ++i) {
                        k[i] = hd_half_to_float(h.k16[r * D + i]);
                        v[i] = hd_half_to_float(h.v16[r * D + i]);
                    }
                }
                V[t] = v;
                for (int hq = 0; hq < s.n_q; ++hq) {
                    const float* q = p.q + ((std::size_t(b) * s.n_kv_heads + kv) * s.n_q + hq) * D;
                    double dot = 0.0;
                    for (int i = 0; i < D; ++i) dot += double(q[i]) * k[i];
                    scores[std::size_t(hq) * n + t] = dot * s.scale;
                }
            }
            for (int hq = 0; hq < s.n_q && n > 0; ++hq) {
                const double* sc = scores.data() + std::size_t(hq) * n;
                const double mx = *std::max_element(sc, sc + n);
                double sum = 0.0;
                for (int t = 0; t < n; ++t) {
                    const double w = std::exp(sc[t] - mx);
                    sum += w;
                    for (int i = 0; i < D; ++i) acc[std::size_t(hq) * D + i] += w * V[t][i];
                }
                for (int i = 0; i < D; ++i)
                    out[((std::size_t(b) * s.n_kv_heads + kv) * s.n_q + hq) * D + i] = acc[std::size_t(hq) * D + i] / sum;
            }
        }
    return out;
}

int host_nearest_code(const HostPqProblem& h, int b, int version, int kv, bool values, const float* x, int m) {
    const PqAttentionParams p = h.view();
    const std::int64_t cs = codebook_slot(p, b, version, kv);
    const int D = p.shape.D, M = values ? p.Mv : p.Mk;
    const PqCodebookView cb = codebook_view(p, cs, values);
    return nearest_code(x, cb, D / M, m);
}

void store_codes(HostPqProblem& p, int b, int kv, bool values, int t, const std::uint8_t* codes) {
    const int M = values ? p.dims.Mv : p.dims.Mk;
    AQPIM_CUDA_REQUIRE(t >= 0 && t < p.n_coded[b], "token " + std::to_string(t) + " is not coded in sequence " + std::to_string(b));
    const std::int64_t pt = std::int64_t(b) * p.dims.max_pages + t / p.dims.page_tokens;
    const int in_page = t % p.dims.page_tokens, tb = in_page % kBlockTokens;
    std::uint8_t* block = p.pool.data() + p.page_offset[pt] + (values ? p.v_stream_off : p.k_stream_off)[kv] +
                          std::size_t(in_page / kBlockTokens) * stream_block_bytes(p.dims, values);
    if (p.dims.nbits == 8) {
        for (int m = 0; m < M; ++m) block[m * kBlockTokens + tb] = codes[m];
        return;
    }
    for (int m = 0; m < M; ++m) {
        std::uint32_t dw;
        std::memcpy(&dw, block + 4 * code4_dword(tb, m), 4);
        const int sh = code4_shift(tb, m);
        dw = (dw & ~(15u << sh)) | (std::uint32_t(codes[m]) << sh);
        std::memcpy(block + 4 * code4_dword(tb, m), &dw, 4);
    }
}

double max_relative_error(const float* a, const double* b, std::size_t n) {
    double err = 0.0, ref = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
        if (!std::isfinite(a[i])) return INFINITY;
        err = std::max(err, std::abs(double(a[i]) - b[i]));
        ref = std::max(ref, std::abs(b[i]));
    }
    return ref > 0.0 ? err / ref : err;
}

}  // namespace aqpim::cuda
