// The forward pass. Rows of all sequences in a step are processed together: x [n][n_embd].

#include "aqpim/transformer.h"

#include <algorithm>
#include <cmath>

#include "aqpim/error.h"
#include "aqpim/threads.h"
#include "model/quant_blocks.h"
#include "core/int_math.h"

namespace aqpim {
namespace {

/// Elements of the FFN's SiLU(gate) * up per task: a decode step's few thousand stay on one thread.
constexpr std::int64_t kSiluSlice = 16384;

/// out[r] = x[r] / rms(x[r]) * w for n rows of d values (sum of squares in double, as llama.cpp).
void rms_norm(const float* x, const std::vector<float>& w, float eps, std::int64_t n, int d, float* out) {
    for (std::int64_t r = 0; r < n; ++r) {
        const float* xr = x + r * d;
        double ss = 0.0;
        for (int i = 0; i < d; ++i) ss += double(xr[i]) * xr[i];
        const float scale = float(1.0 / std::sqrt(ss / d + eps));
        float* o = out + r * d;
        for (int i = 0; i < d; ++i) o[i] = xr[i] * scale * w[i];
    }
}

void add_bias(float* x, const std::vector<float>& b, std::int64_t n) {
    if (b.empty()) return;
    const std::size_t d = b.size();
    for (std::int64_t r = 0; r < n; ++r)
        for (std::size_t i = 0; i < d; ++i) x[r * d + i] += b[i];
}

void add_into(float* x, const float* y, std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) x[i] += y[i];
}

}  // namespace

Transformer::Transformer(const ModelWeights& weights, int n_threads)
    : weights_(weights), n_threads_(n_threads), inv_freq_(rope_inverse_frequencies(weights)) {
    weights.config.validate();
}

KvShape kv_shape_of(const ModelWeights& weights) {
    const ModelConfig& c = weights.config;
    KvShape s{c.n_layer, c.n_kv_head, c.head_dim, c.rope_pairs, {}};
    for (double f : rope_inverse_frequencies(weights)) s.rope_inv_freq.push_back(float(f));
    return s;
}

KvShape Transformer::kv_shape() const { return kv_shape_of(weights_); }

std::size_t Transformer::scratch_bytes() const { return workspaces_.bytes(); }

std::uint64_t Transformer::decode_weight_bytes() const {
    // Every matrix is streamed once per step except the embedding table, of which one row is read
    // (unless it doubles as the output matrix).
    std::uint64_t b = weights_.weight_bytes();
    if (weights_.output.data != weights_.token_embd.data) b -= weights_.token_embd.n_bytes();
    return b;
}

void Transformer::product(const WeightMatrix& W, const float* X, std::int64_t n, float* Y) {
    // Batch-invariant: every row with the same arithmetic whatever n (matmul's automatic paths
    // switch between matvec's and the GEMM's rounding with the batch size).
    if (batch_invariant_)
        quant::matmul_with(W, X, n, Y, n_threads_, quant::MatmulPath::invariant, &workspaces_);
    else
        matmul(W, X, n, Y, n_threads_, &workspaces_);
}

void Transformer::apply_rope(float* x, int n_heads, std::int64_t n) const {
    const int hd = config().head_dim, half = hd / 2;
    const bool neox = config().rope_pairs == RopePairs::neox;
    for (std::int64_t r = 0; r < n; ++r) {
        const float* c = rope_cos_.data() + r * half;
        const float* s = rope_sin_.data() + r * half;
        for (int h = 0; h < n_heads; ++h) {
            float* v = x + (r * n_heads + h) * hd;
            for (int i = 0; i < half; ++i) {
                float& a = v[neox ? i : 2 * i];
                float& b = v[neox ? i + half : 2 * i + 1];
                const float a0 = a, b0 = b;
                a = a0 * c[i] - b0 * s[i];
                b = a0 * s[i] + b0 * c[i];
            }
        }
    }
}

void Transformer::attention_block(int il, std::span<const BatchSequence> batch, KvCache& cache, std::int64_t n) {
    const ModelConfig& c = config();
    const LayerWeights& L = weights_.layers[il];
    const int hd = c.head_dim, q_dim = c.n_head * hd, kv_dim = c.n_kv_head * hd, group = c.n_head / c.n_kv_head;

    rms_norm(x_.data(), L.attn_norm, c.rms_eps, n, c.n_embd, xn_.data());
    product(L.wq, xn_.data(), n, q_.data());
    product(L.wk, xn_.data(), n, k_.data());
    product(L.wv, xn_.data(), n, v_.data());
    add_bias(q_.data(), L.bq, n);
    add_bias(k_.data(), L.bk, n);
    add_bias(v_.data(), L.bv, n);
    apply_rope(q_.data(), c.n_head, n);
    apply_rope(k_.data(), c.n_kv_head, n);

    // Store this step's keys and values, then attend: one task per (sequence, KV head).
    std::vector<std::int64_t> row0(batch.size() + 1, 0);
    for (std::size_t s = 0; s < batch.size(); ++s) {
        const std::int64_t r = row0[s], m = std::int64_t(batch[s].tokens.size());
        cache.append(il, batch[s].seq_id, m, k_.data() + r * kv_dim, v_.data() + r * kv_dim);
        row0[s + 1] = r + m;
    }
    const float scale = float(1.0 / std::sqrt(double(hd)));
    const std::int64_t n_tasks = std::int64_t(batch.size()) * c.n_kv_head;
    // Threads only when the step's attention is worth waking them: below about a million
    // multiply-adds, a parallel region costs more than it saves (tiny models, short contexts).
    double work = 0.0;
    for (std::size_t s = 0; s < batch.size(); ++s)
        work += double(row0[s + 1] - row0[s]) * double(pos_[row0[s + 1] - 1] + 1) * c.n_head * hd;
    const int attn_threads = work < double(1 << 20) ? 1 : n_threads_;
    workspaces_.prepare(attn_threads);
    parallel_for(
        n_tasks,
        [&](std::int64_t task) {
            const std::size_t s = std::size_t(task / c.n_kv_head);
            const int ih = int(task % c.n_kv_head);
            KvQuery query;
            query.q = q_.data() + row0[s] * q_dim + ih * group * hd;
            query.q_stride = q_dim;
            query.n_rows = int(row0[s + 1] - row0[s]);
            query.group = group;
            query.pos = pos_.data() + row0[s];
            query.scale = scale;
            query.out = attn_.data() + row0[s] * q_dim + ih * group * hd;
            query.out_stride = q_dim;
            query.ws = &workspaces_.mine();
            cache.attend(il, batch[s].seq_id, ih, query);
        },
        attn_threads);

    product(L.wo, attn_.data(), n, tmp_.data());
    add_into(x_.data(), tmp_.data(), std::size_t(n) * c.n_embd);
}

void Transformer::ffn_block(int il, std::int64_t n) {
    const ModelConfig& c = config();
    const LayerWeights& L = weights_.layers[il];
    rms_norm(x_.data(), L.ffn_norm, c.rms_eps, n, c.n_embd, xn_.data());
    product(L.w_gate, xn_.data(), n, gate_.data());
    product(L.w_up, xn_.data(), n, up_.data());
    // SiLU(gate) * up, element by element: in slices on the pool's threads when there are many
    // (a prefill chunk's were 3-6% of a serve load's CPU on the caller's thread alone).
    const std::int64_t count = n * c.n_ff, n_slices = ceil_div(count, kSiluSlice);
    parallel_for(
        n_slices,
        [&](std::int64_t slice) {
            const std::int64_t end = std::min(count, (slice + 1) * kSiluSlice);
            for (std::int64_t i = slice * kSiluSlice; i < end; ++i) {
                const float g = gate_[std::size_t(i)];
                gate_[std::size_t(i)] = g / (1.0f + std::exp(-g)) * up_[std::size_t(i)];
            }
        },
        n_slices > 1 ? n_threads_ : 1);
    product(L.w_down, gate_.data(), n, tmp_.data());
    add_into(x_.data(), tmp_.data(), std::size_t(n) * c.n_embd);
}

ForwardTraffic Transformer::forward(std::span<const BatchSequence> batch, KvCache& cache, std::vector<float>& logits) {
    const ModelConfig& c = config();
    std::int64_t n = 0;
    for (const BatchSequence& s : batch) {
        AQPIM_CHECK(!s.tokens.empty(), "forward: sequence {} has no tokens in this step", s.seq_id);
        n += std::int64_t(s.tokens.size());
    }
    if (n == 0) return {};

    // Rows: embeddings, positions, RoPE angles.
    const int half = c.head_dim / 2;
    x_.resize(std::size_t(n) * c.n_embd);
    pos_.resize(n);
    rope_cos_.resize(std::size_t(n) * half);
    rope_sin_.resize(std::size_t(n) * half);
    std::int64_t r = 0;
    for (const BatchSequence& s : batch) {
        const std::int64_t p0 = cache.n_tokens(s.seq_id, 0);
        for (std::size_t i = 0; i < s.tokens.size(); ++i, ++r) {
            const std::int32_t id = s.tokens[i];
            AQPIM_CHECK(id >= 0 && id < c.n_vocab, "forward: token id {} out of range [0, {})", id, c.n_vocab);
            dequantize_row(weights_.token_embd, id, x_.data() + r * c.n_embd);
            pos_[r] = p0 + std::int64_t(i);
            for (int j = 0; j < half; ++j) {
                const double angle = double(pos_[r]) * inv_freq_[j];
                rope_cos_[r * half + j] = float(std::cos(angle));
                rope_sin_[r * half + j] = float(std::sin(angle));
            }
        }
    }

    const std::size_t q_dim = std::size_t(c.n_head) * c.head_dim, kv_dim = std::size_t(c.n_kv_head) * c.head_dim;
    xn_.resize(std::size_t(n) * c.n_embd);
    tmp_.resize(std::size_t(n) * c.n_embd);
    q_.resize(n * q_dim);
    attn_.resize(n * q_dim);
    k_.resize(n * kv_dim);
    v_.resize(n * kv_dim);
    gate_.resize(std::size_t(n) * c.n_ff);
    up_.resize(std::size_t(n) * c.n_ff);

    ForwardTraffic traffic;
    for (int il = 0; il < c.n_layer; ++il) {
        attention_block(il, batch, cache, n);
        ffn_block(il, n);
    }
    traffic.kv_bytes = cache.memory().bytes;

    // Logits of the requested rows: every sequence's last row in one product (the call a step
    // that asks for last rows only makes, so asking for all rows never changes the logits a
    // server samples from: a product's rounding depends on its row count), the other rows in another.
    std::vector<std::int64_t> last, earlier;      // rows of x_
    std::vector<std::size_t> last_at, earlier_at;  // their rows of logits
    r = 0;
    for (const BatchSequence& s : batch) {
        const std::int64_t m = std::int64_t(s.tokens.size());
        for (std::int64_t i = s.all_logits ? 0 : m - 1; i < m; ++i) {
            (i == m - 1 ? last : earlier).push_back(r + i);
            (i == m - 1 ? last_at : earlier_at).push_back(last_at.size() + earlier_at.size());
        }
        r += m;
    }
    logits.resize((last.size() + earlier.size()) * std::size_t(c.n_vocab));
    const auto project = [&](const std::vector<std::int64_t>& from, const std::vector<std::size_t>& to) {
        if (from.empty()) return;
        std::vector<float> picked(from.size() * c.n_embd);
        for (std::size_t i = 0; i < from.size(); ++i)
            std::copy_n(x_.data() + from[i] * c.n_embd, c.n_embd, picked.data() + i * c.n_embd);
        rms_norm(picked.data(), weights_.output_norm, c.rms_eps, std::int64_t(from.size()), c.n_embd, picked.data());
        const std::size_t nv = std::size_t(c.n_vocab);
        if (earlier.empty()) return product(weights_.output, picked.data(), std::int64_t(from.size()), logits.data());
        std::vector<float> out(from.size() * nv);
        product(weights_.output, picked.data(), std::int64_t(from.size()), out.data());
        for (std::size_t i = 0; i < from.size(); ++i) std::copy_n(out.data() + i * nv, nv, logits.data() + to[i] * nv);
    };
    project(last, last_at);
    project(earlier, earlier_at);

    traffic.weight_bytes = decode_weight_bytes();
    return traffic;
}

}  // namespace aqpim
