// FLOPs and bytes of a decode step and of a prefill, by component (include/aqpim/roofline.h).
//
// Shapes (llama.cpp names): E = n_embd, Q = n_head*head_dim, KVd = n_kv_head*head_dim, F = n_ff,
// V = n_vocab. Everything is divided by tp (tensor parallelism splits heads and FFN columns; the
// interconnect carries two all-reduces of [tokens][E] per layer); layers are summed over the
// pipeline stages because one token crosses every stage in turn.

#include <algorithm>
#include <cmath>

#include "aqpim/error.h"
#include "aqpim/roofline.h"

namespace aqpim {

void PerfRun::validate() const {
    AQPIM_CHECK(batch >= 1 && batch <= (1 << 20), "--batch {}: must be in [1, 2^20]", batch);
    AQPIM_CHECK(context >= 1 && context <= (std::int64_t(1) << 24), "--context {}: must be in [1, 2^24]", context);
    AQPIM_CHECK(prompt >= 1 && prompt <= (std::int64_t(1) << 24), "--prompt {}: must be in [1, 2^24]", prompt);
    AQPIM_CHECK(weight_bits == 0 || (weight_bits >= 1 && weight_bits <= 32), "--wbits {}: must be in [1, 32]", weight_bits);
    AQPIM_CHECK(act_bits >= 4 && act_bits <= 32, "--abits {}: must be in [4, 32]", act_bits);
    AQPIM_CHECK(tp >= 1 && tp <= 1024, "--tp {}: must be in [1, 1024]", tp);
    AQPIM_CHECK(pp >= 1 && pp <= 1024, "--pp {}: must be in [1, 1024]", pp);
    AQPIM_CHECK(eff_bandwidth == 0 || (eff_bandwidth > 0 && eff_bandwidth <= 1), "--eff-bw {}: must be in (0, 1]", eff_bandwidth);
    AQPIM_CHECK(eff_compute == 0 || (eff_compute > 0 && eff_compute <= 1), "--eff-compute {}: must be in (0, 1]", eff_compute);
    AQPIM_CHECK(kernel_overhead < 1e-3, "--launch-us {}: must be below 1000", kernel_overhead * 1e6);
    AQPIM_CHECK(bandwidth_cap >= 0 && std::isfinite(bandwidth_cap), "bandwidth cap {}: must be >= 0 (0 = none)", bandwidth_cap);
}

Cost PhaseCost::total() const {
    Cost t;
    t.name = "total";
    for (const Cost& c : parts) {
        t.flops += c.flops;
        t.weight_bytes += c.weight_bytes;
        t.kv_bytes += c.kv_bytes;
        t.act_bytes += c.act_bytes;
        t.comm_bytes += c.comm_bytes;
        t.comm_messages += c.comm_messages;
        t.launches += c.launches;
    }
    return t;
}

namespace {

/// Builds the components of one phase: n_tok tokens go through every matrix; attention costs are
/// given by the caller.
struct CostBuilder {
    const PerfModel& m;
    const PerfRun& run;
    double n_tok;   // tokens through the matrices
    double wbytes;  // bytes per weight
    double abytes;  // bytes per activation
    bool int8;      // matrices on the integer roof
    PhaseCost out;

    CostBuilder(const PerfModel& model, const PerfRun& r, double tokens, Phase phase)
        : m(model), run(r), n_tok(tokens) {
        const double wbits = r.weight_bits > 0 ? r.weight_bits : model.weight_bits;
        wbytes = wbits / 8.0;
        abytes = r.act_bits / 8.0;
        int8 = wbits <= 8 && r.act_bits <= 8;
        out.phase = phase;
    }

    /// A matrix [out x in] applied to n_tok tokens, repeated `copies` times per layer (experts),
    /// of which `weights_read` copies' weights are read; over every layer and split by tp.
    /// `split`: devices the matrix is split over (0 = tp; k/v projections: kv_split, replicated beyond).
    void matrix(const char* name, double in, double outd, double layers, double copies = 1, double weights_read = 1, double split = 0) {
        Cost c;
        c.name = name;
        const double tp = split > 0 ? split : run.tp;
        c.flops = 2.0 * n_tok * in * outd * copies * layers / tp;
        c.weight_bytes = in * outd * wbytes * weights_read * layers / tp;
        c.act_bytes = n_tok * (in + outd) * abytes * copies * layers / tp;
        c.on_int8 = int8;
        c.launches = int(layers);
        out.parts.push_back(c);
    }
    void add(Cost c) { out.parts.push_back(std::move(c)); }
};

/// Devices the KV heads are split over: tp, or n_kv_head when tp exceeds it (each device then
/// holds a replica of one KV head, as vLLM and TensorRT-LLM do).
double kv_split(const PerfModel& m, const PerfRun& run) { return std::min<double>(run.tp, m.n_kv_head); }

/// Expected distinct experts n tokens touch when each picks k of n_expert uniformly.
double experts_touched(const PerfModel& m, double n_tok) {
    if (m.n_expert == 1) return 1;
    const double miss = std::pow(1.0 - double(m.n_expert_used) / m.n_expert, n_tok);
    return m.n_expert * (1.0 - miss);
}

/// Matrices, norms, LM head and communication shared by both phases; `lm_tokens` tokens get logits.
void add_matrices(CostBuilder& b, double lm_tokens) {
    const PerfModel& m = b.m;
    const double L = m.n_layer, E = m.n_embd, Q = double(m.n_head) * m.head_dim, KVd = double(m.n_kv_head) * m.head_dim;
    b.matrix("q_proj", E, Q, L);
    b.matrix("k_proj", E, KVd, L, 1, 1, kv_split(m, b.run));
    b.matrix("v_proj", E, KVd, L, 1, 1, kv_split(m, b.run));
    b.matrix("o_proj", Q, E, L);
    if (m.n_expert > 1) b.matrix("router", E, m.n_expert, L);
    const double k = m.n_expert_used, touched = experts_touched(m, b.n_tok);
    b.matrix("ffn_gate", E, m.n_ff, L, k, touched);
    b.matrix("ffn_up", E, m.n_ff, L, k, touched);
    b.matrix("ffn_down", m.n_ff, E, L, k, touched);
    // RMSNorm (~4 FLOPs/element: square, sum, scale, weight) x2 per layer + final; RoPE on q and k
    // (~6 per pair element); SiLU(gate)*up (~5 per element); residual adds (2 per layer).
    Cost o;
    o.name = "norm/rope/act";
    o.flops = b.n_tok * (L * (2 * 4 * E + 3 * (Q + KVd) + 5 * m.n_ff * k + 2 * E) + 4 * E) / b.run.tp;
    o.weight_bytes = (2 * L + 1) * E * 2.0 / b.run.tp;  // norm weights kept f16
    o.act_bytes = b.n_tok * L * (4 * E + 2 * (Q + KVd) + 3 * m.n_ff * k) * b.abytes / b.run.tp;
    o.launches = int(6 * L + 1);  // 2 norms, RoPE, SiLU*mul, 2 residual adds per layer; final norm
    b.add(o);
    Cost lm;
    lm.name = "lm_head";
    lm.flops = 2.0 * lm_tokens * E * m.n_vocab / b.run.tp;
    lm.weight_bytes = E * m.n_vocab * b.wbytes / b.run.tp;
    lm.act_bytes = lm_tokens * (E + m.n_vocab) * b.abytes / b.run.tp;
    lm.on_int8 = b.int8;
    lm.launches = 1;
    b.add(lm);
    if (b.run.tp > 1) {
        Cost ar;
        ar.name = "tp_allreduce";
        const double T = b.run.tp;
        ar.comm_bytes = 2 * L * 2.0 * (T - 1) / T * b.n_tok * E * b.abytes;  // ring all-reduce, 2 per layer
        ar.comm_messages = int(2 * L);
        b.add(ar);
    }
    if (b.run.pp > 1) {
        Cost h;
        h.name = "pp_handoff";
        h.comm_bytes = (b.run.pp - 1) * b.n_tok * E * b.abytes / b.run.tp;
        h.comm_messages = b.run.pp - 1;
        b.add(h);
    }
}

/// Attention over `pairs` (query, key) pairs per head, reading `kv_read` bytes and writing
/// `kv_written` bytes of cache (whole model, before the tp split).
void add_attention(CostBuilder& b, double pairs, double kv_read, double kv_written, bool int8) {
    const PerfModel& m = b.m;
    const double T = b.run.tp, Tkv = kv_split(m, b.run), heads = double(m.n_head) * m.n_layer;
    Cost s, sm, ctx, w;
    s.name = "attn_scores";
    s.flops = 2.0 * pairs * heads * m.head_dim / T;
    s.kv_bytes = kv_read / 2 / Tkv;  // keys (a device holds its KV heads; replicated when tp > n_kv_head)
    s.on_int8 = int8;
    sm.name = "softmax";
    sm.flops = 5.0 * pairs * heads / T;  // max, subtract, exp, sum, scale (fused: no memory traffic)
    ctx.name = "attn_context";
    ctx.flops = 2.0 * pairs * heads * m.head_dim / T;
    ctx.kv_bytes = kv_read / 2 / Tkv;  // values
    ctx.on_int8 = int8;
    w.name = "kv_write";
    w.kv_bytes = kv_written / Tkv;
    s.launches = m.n_layer;  // one fused attention kernel per layer (scores, softmax, context)
    w.launches = m.n_layer;
    for (Cost* c : {&s, &sm, &ctx, &w}) b.add(*c);
}

}  // namespace

PhaseCost decode_cost(const PerfModel& model, const PerfRun& run, const KvSizer& kv) {
    run.validate();
    const double B = run.batch, n = double(run.context);
    CostBuilder b(model, run, B, Phase::decode);
    b.out.tokens = run.batch;
    add_matrices(b, B);
    const double per_token = kv.bits_per_element(run.context + 1) * double(kv.elements_per_token()) / 8.0;
    add_attention(b, B * (n + 1), B * kv.sequence_bytes(run.context), B * per_token,
                  run.act_bits <= 8 && kv.bits_per_element(run.context) <= 8.5);
    return std::move(b.out);
}

PhaseCost prefill_cost(const PerfModel& model, const PerfRun& run, const KvSizer& kv) {
    run.validate();
    const double B = run.batch, P = double(run.prompt);
    CostBuilder b(model, run, B * P, Phase::prefill);
    b.out.tokens = std::int64_t(run.batch) * run.prompt;
    add_matrices(b, B);  // logits of the last prompt token only
    const double seq = kv.sequence_bytes(run.prompt);
    add_attention(b, B * P * (P + 1) / 2, B * seq, B * seq, run.act_bits <= 8 && kv.bits_per_element(run.prompt) <= 8.5);
    return std::move(b.out);
}

}  // namespace aqpim
