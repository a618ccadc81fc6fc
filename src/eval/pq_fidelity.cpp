#include "aqpim/pq_fidelity.h"

#include <algorithm>
#include <cmath>

#include "aqpim/attention.h"
#include "aqpim/error.h"
#include "aqpim/pq_codes.h"
#include "aqpim/timer.h"

namespace aqpim {

namespace {

struct CodedHead {
    std::vector<std::uint8_t> codes;   // [n][M]
    std::vector<std::uint8_t> blocks;  // scan layout
    std::vector<float> decoded;        // [n][D]
};

CodedHead encode_head(const ProductQuantizer& pq, const std::vector<float>& x, int n, double* encode_seconds) {
    CodedHead h;
    h.codes.resize(std::size_t(n) * pq.M());
    Timer timer;
    pq.encode(x.data(), n, h.codes.data());
    *encode_seconds += timer.seconds();
    h.blocks.resize(std::size_t(code_blocks_for(n)) * code_block_bytes(pq.M(), pq.nbits()));
    pack_code_blocks(h.codes.data(), n, pq.M(), pq.nbits(), h.blocks.data());
    h.decoded.resize(std::size_t(n) * pq.D());
    pq.decode(h.codes.data(), n, h.decoded.data());
    return h;
}

double sq_err(const float* a, const float* b, std::size_t n, double* norm) {
    double e = 0;
    for (std::size_t i = 0; i < n; ++i) {
        e += double(a[i] - b[i]) * (a[i] - b[i]);
        *norm += double(a[i]) * a[i];
    }
    return e;
}

}  // namespace

PqFidelity measure_pq_fidelity(const CapturedAttention& cap, const PqFidelityConfig& cfg, int calib, int n_queries) {
    const int n = cap.n_tokens, D = cap.head_dim, n_kv_heads = cap.n_kv_head, group = cap.n_head / cap.n_kv_head;
    AQPIM_CHECK(cfg.key.D == D && cfg.value.D == D, "config '{}' has D={}/{}, captured heads have {}", cfg.name,
                cfg.key.D, cfg.value.D, D);
    AQPIM_CHECK(calib >= 1 && calib <= n, "calibration tokens {} must be in [1, {}]", calib, n);
    AQPIM_CHECK(n_queries >= 1 && n_queries <= n, "queries {} must be in [1, {}]", n_queries, n);
    PqFidelity r;
    r.name = cfg.name;

    // Per KV head rows, then all codebooks (K and V of every head) in one batched training call.
    std::vector<std::vector<float>> keys(n_kv_heads), values(n_kv_heads);
    for (int ih = 0; ih < n_kv_heads; ++ih) {
        keys[ih] = cap.kv_head(cap.k, ih);
        values[ih] = cap.kv_head(cap.v, ih);
    }
    std::vector<ProductQuantizer> kpq, vpq;
    for (int ih = 0; ih < n_kv_heads; ++ih) {
        kpq.emplace_back(cfg.key);
        vpq.emplace_back(cfg.value);
    }
    std::vector<const float*> kx, vx;
    for (int ih = 0; ih < n_kv_heads; ++ih) {
        kx.push_back(keys[ih].data());
        vx.push_back(values[ih].data());
    }
    Timer train_timer;
    const bool same_shape = cfg.key.M == cfg.value.M && cfg.key.nbits == cfg.value.nbits;
    if (same_shape) {
        std::vector<ProductQuantizer> all = kpq;
        all.insert(all.end(), vpq.begin(), vpq.end());
        std::vector<const float*> xs = kx;
        xs.insert(xs.end(), vx.begin(), vx.end());
        train_product_quantizers(all, xs, calib);
        std::copy(all.begin(), all.begin() + n_kv_heads, kpq.begin());
        std::copy(all.begin() + n_kv_heads, all.end(), vpq.begin());
    } else {
        train_product_quantizers(kpq, kx, calib);
        train_product_quantizers(vpq, vx, calib);
    }
    r.train_ms = train_timer.ms();

    double k_err = 0, k_norm = 0, v_err = 0, v_norm = 0, s_err = 0, s_norm = 0;
    double attn_err = 0, kl = 0, top1 = 0;
    std::size_t stored_bytes = 0, n_measured = 0;
    double encode_s = 0;
    std::vector<float> out_pq(std::size_t(group) * D), out_ref(out_pq.size()), q(out_pq.size());
    Workspace ws;  // the attention calls' scratch, reused
    for (int ih = 0; ih < n_kv_heads; ++ih) {
        CodedHead ck = encode_head(kpq[ih], keys[ih], n, &encode_s), cv = encode_head(vpq[ih], values[ih], n, &encode_s);
        stored_bytes += ck.blocks.size() + cv.blocks.size() + kpq[ih].parameter_bytes() + vpq[ih].parameter_bytes();
        k_err += sq_err(keys[ih].data(), ck.decoded.data(), keys[ih].size(), &k_norm);
        v_err += sq_err(values[ih].data(), cv.decoded.data(), values[ih].size(), &v_norm);
        const float scale = 1.0f / std::sqrt(float(D));
        for (int t = n - n_queries; t < n; ++t) {
            const int ctx = t + 1;
            for (int g = 0; g < group; ++g)
                std::copy_n(cap.q.data() + (std::size_t(t) * cap.n_head + ih * group + g) * D, D, q.data() + g * D);
            AttentionPartial ref(group, D), pq(group, D);
            attend_dense_f32(q.data(), group, D, keys[ih].data(), values[ih].data(), ctx, scale, ref, &ws);
            attend_pq(q.data(), group, kpq[ih], vpq[ih], ck.blocks.data(), cv.blocks.data(), ctx, scale, {}, pq, &ws);
            ref.finalize(out_ref.data());
            pq.finalize(out_pq.data());
            for (int g = 0; g < group; ++g) {
                double e = 0, nn = 0;
                e = sq_err(out_ref.data() + g * D, out_pq.data() + g * D, D, &nn);
                attn_err += std::sqrt(e / std::max(nn, 1e-30));
                // scores and softmax distributions, exact vs coded keys
                std::vector<double> s(ctx), sh(ctx);
                double mx = -1e300, mxh = -1e300;
                int arg = 0, argh = 0;
                for (int j = 0; j < ctx; ++j) {
                    double a = 0, b = 0;
                    for (int d = 0; d < D; ++d) {
                        a += double(q[g * D + d]) * keys[ih][std::size_t(j) * D + d];
                        b += double(q[g * D + d]) * ck.decoded[std::size_t(j) * D + d];
                    }
                    s[j] = a * scale;
                    sh[j] = b * scale;
                    s_err += (s[j] - sh[j]) * (s[j] - sh[j]);
                    s_norm += s[j] * s[j];
                    if (s[j] > mx) mx = s[j], arg = j;
                    if (sh[j] > mxh) mxh = sh[j], argh = j;
                }
                double z = 0, zh = 0;
                for (int j = 0; j < ctx; ++j) z += std::exp(s[j] - mx), zh += std::exp(sh[j] - mxh);
                double kl_q = 0;
                for (int j = 0; j < ctx; ++j) {
                    const double p = std::exp(s[j] - mx) / z;
                    const double ph = std::exp(sh[j] - mxh) / zh;
                    if (p > 0) kl_q += p * std::log(p / std::max(ph, 1e-300));
                }
                kl += kl_q;
                top1 += arg == argh;
                ++n_measured;
            }
        }
    }
    r.key_rel_mse = k_err / std::max(k_norm, 1e-30);
    r.value_rel_mse = v_err / std::max(v_norm, 1e-30);
    r.score_rel_rmse = std::sqrt(s_err / std::max(s_norm, 1e-30));
    r.attn_rel_err = attn_err / double(n_measured);
    r.mean_kl = kl / double(n_measured);
    r.top1_agreement = top1 / double(n_measured);
    const double elements = 2.0 * n_kv_heads * double(n) * D;
    r.bits_per_element = double(stored_bytes) * 8 / elements;
    r.compression_vs_f16 = 16.0 / r.bits_per_element;
    r.encode_mtokens_per_s = 2.0 * n_kv_heads * n / encode_s / 1e6;
    return r;
}

}  // namespace aqpim
