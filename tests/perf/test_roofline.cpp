// The memory-wall model against hand-computed FLOPs and bytes, and its invariants.

#include <gtest/gtest.h>

#include <cmath>

#include "aqpim/error.h"
#include "aqpim/perf_energy.h"
#include "aqpim/roofline.h"

namespace aqpim {
namespace {

const Cost& part(const PhaseCost& c, const std::string& name) {
    for (const Cost& p : c.parts)
        if (p.name == name) return p;
    ADD_FAILURE() << "no component " << name;
    return c.parts.front();
}

TEST(RooflineKv, BytesPerTokenFromTheCachesOwnAccounting) {
    // 2 (K,V) x 32 layers x 32 heads x 128 x 2 bytes; Qwen2-72B: 2 x 80 x 8 x 128 x 2 (not the article's 2.62 MB).
    EXPECT_DOUBLE_EQ(KvSizer(find_perf_model("llama2-7b").kv_shape(), "f16").sequence_bytes(1000), 524288.0 * 1000);
    EXPECT_DOUBLE_EQ(KvSizer(find_perf_model("qwen2-72b").kv_shape(), "f16").sequence_bytes(1000), 327680.0 * 1000);
    EXPECT_DOUBLE_EQ(KvSizer(find_perf_model("qwen-72b-as-written").kv_shape(), "f16").sequence_bytes(1), 2621440.0);
    const KvShape s = find_perf_model("llama3-8b").kv_shape();
    EXPECT_DOUBLE_EQ(KvSizer(s, "q8_0").bits_per_element(4096), 8.5);  // 32 int8 + f16 scale
    EXPECT_DOUBLE_EQ(KvSizer(s, "q4_0").bits_per_element(4096), 4.5);
    const double pq = KvSizer(s, "pq").bits_per_element(32768);
    EXPECT_GT(pq, 1.0);  // codes are 1 bit/element (m=32 x 4 bits per 128 dims); codebooks and f16 tokens add more
    EXPECT_LT(pq, 1.5);
    EXPECT_THROW(KvSizer(s, "nonsense"), Error);
}

TEST(RooflineCost, Llama2_7bDecodeByHand) {
    const PerfModel m = find_perf_model("llama2-7b");
    PerfRun run;
    run.context = 1000;
    const PhaseCost c = decode_cost(m, run, KvSizer(m.kv_shape(), "f16"));
    EXPECT_DOUBLE_EQ(part(c, "q_proj").flops, 2.0 * 4096 * 4096 * 32);
    EXPECT_DOUBLE_EQ(part(c, "q_proj").weight_bytes, 4096.0 * 4096 * 2 * 32);
    EXPECT_DOUBLE_EQ(part(c, "ffn_down").weight_bytes, 11008.0 * 4096 * 2 * 32);
    EXPECT_DOUBLE_EQ(part(c, "lm_head").weight_bytes, 32000.0 * 4096 * 2);
    // q.k over 1001 positions (the cache plus the new token) for 32 heads x 32 layers.
    EXPECT_DOUBLE_EQ(part(c, "attn_scores").flops, 2.0 * 1001 * 128 * 32 * 32);
    EXPECT_DOUBLE_EQ(part(c, "attn_scores").kv_bytes + part(c, "attn_context").kv_bytes, 524288.0 * 1000);
    EXPECT_DOUBLE_EQ(part(c, "kv_write").kv_bytes, 524288.0);
    // All matrix weights: 32 x (4 x 4096^2 + 3 x 4096 x 11008) + LM head = 6,607,077,376 parameters.
    double matrix_bytes = 0;
    for (const Cost& p : c.parts)
        if (p.name != "norm/rope/act") matrix_bytes += p.weight_bytes;
    EXPECT_DOUBLE_EQ(matrix_bytes, 6607077376.0 * 2);
    EXPECT_EQ(m.n_params_total(), 6738415616LL);  // Meta's count (embedding, norms included)
    // Kernels per step: 7 matrices + 6 small ops + fused attention + KV write per layer, final norm, LM head.
    EXPECT_EQ(c.total().launches, 32 * (7 + 6 + 1 + 1) + 1 + 1);
    const Device d = find_device("h100-sxm");
    PerfRun no_launch = run, with_launch = run;
    no_launch.kernel_overhead = 0;
    with_launch.kernel_overhead = 10e-6;
    EXPECT_NEAR(roofline(c, d, with_launch).time_s - roofline(c, d, no_launch).time_s, 482 * 10e-6, 1e-12);
}

TEST(RooflineCost, Qwen2_72bGqaProjectionsAreNarrow) {
    const PerfModel m = find_perf_model("qwen2-72b");
    const PhaseCost c = decode_cost(m, PerfRun{}, KvSizer(m.kv_shape(), "f16"));
    // K is 8192 x 1024 (8 KV heads x 128), not the article's 8192 x 8192.
    EXPECT_DOUBLE_EQ(part(c, "k_proj").weight_bytes, 8192.0 * 1024 * 2 * 80);
    EXPECT_DOUBLE_EQ(part(c, "q_proj").weight_bytes, 8192.0 * 8192 * 2 * 80);
    EXPECT_DOUBLE_EQ(part(c, "ffn_gate").flops, 2.0 * 8192 * 29568 * 80);
}

TEST(RooflineBound, IsTheMinimumOfTheRoofs) {
    const PerfModel m = find_perf_model("llama3-8b");
    const Device d = find_device("h100-sxm");
    const KvSizer kv(m.kv_shape(), "f16");
    for (int batch : {1, 16, 256}) {
        PerfRun run;
        run.batch = batch;
        for (const PhaseCost& c : {decode_cost(m, run, kv), prefill_cost(m, run, kv)}) {
            const RooflineResult r = roofline(c, d, run);
            EXPECT_DOUBLE_EQ(r.attainable, std::min(r.peak_compute, r.intensity * r.bandwidth));
            EXPECT_STREQ(r.bound, r.intensity < r.ridge ? "memory" : "compute");
            // Each kernel on its own roof can only be slower than the phase on one roofline.
            EXPECT_GE(r.time_s, r.time_aggregate_s * (1 - 1e-12));
            for (const RoofTime& t : r.parts)
                EXPECT_DOUBLE_EQ(t.time_s, std::max(t.compute_s, t.memory_s) + t.comm_s + t.overhead_s);
        }
    }
    PerfRun run;
    run.prompt = 2048;
    EXPECT_STREQ(roofline(decode_cost(m, run, kv), d, run).bound, "memory");
    EXPECT_STREQ(roofline(prefill_cost(m, run, kv), d, run).bound, "compute");
}

TEST(RooflineBound, WeightBoundIntensityGrowsWithBatch) {
    const PerfModel m = find_perf_model("llama2-70b");
    const Device d = find_device("h100-sxm");
    const KvSizer kv(m.kv_shape(), "f16");
    double last = 0;
    for (int batch : {1, 2, 4, 8, 16, 32, 64}) {
        PerfRun run;
        run.batch = batch;
        run.context = 128;  // weights dominate the bytes
        run.tp = 4;
        const RooflineResult r = roofline(decode_cost(m, run, kv), d, run);
        EXPECT_GT(r.intensity, last * 1.5) << "batch " << batch;
        last = r.intensity;
    }
    // At long context the KV read grows with the batch too: with MHA (Llama-2-7B) every KV byte
    // serves 1 FLOP per query head pair, so batching does not lift the intensity much above 1.
    const PerfModel mha = find_perf_model("llama2-7b");
    const KvSizer mha_kv(mha.kv_shape(), "f16");
    PerfRun one, many;
    one.context = many.context = 32768;
    many.batch = 64;
    const double i1 = roofline(decode_cost(mha, one, mha_kv), d, one).intensity;
    const double i64 = roofline(decode_cost(mha, many, mha_kv), d, many).intensity;
    EXPECT_LT(i64, 2.0);
    EXPECT_LT(i64, 2 * i1);
}

TEST(RooflineParallel, TensorParallelSplitsWeightsAndAddsAllReduces) {
    const PerfModel m = find_perf_model("llama3-70b");
    const KvSizer kv(m.kv_shape(), "f16");
    PerfRun one, four;
    four.tp = 4;
    const PhaseCost a = decode_cost(m, one, kv), b = decode_cost(m, four, kv);
    EXPECT_NEAR(b.total().weight_bytes * 4, a.total().weight_bytes, 1e-6 * a.total().weight_bytes);
    EXPECT_EQ(a.total().comm_bytes, 0.0);
    // Two ring all-reduces of [1][8192] f16 per layer: 2 x 80 x 2 (T-1)/T x 16 KiB.
    EXPECT_DOUBLE_EQ(part(b, "tp_allreduce").comm_bytes, 2 * 80 * 2.0 * 3 / 4 * 8192 * 2);
    EXPECT_EQ(weight_bytes_per_device(m, four) * 4, weight_bytes_per_device(m, one));
}

TEST(RooflineMoe, ActiveVsTotalParameters) {
    const PerfModel m = find_perf_model("mixtral-8x7b");
    EXPECT_NEAR(double(m.n_params_total()), 46.7e9, 0.1e9);   // Mistral's "46.7B total"
    EXPECT_NEAR(double(m.n_params_active()), 12.9e9, 0.1e9);  // "12.9B active per token"
    const KvSizer kv(m.kv_shape(), "f16");
    PerfRun one, big;
    big.batch = 256;
    const double expert = 4096.0 * 14336 * 2 * 32;  // one expert's gate matrix, all layers, f16
    EXPECT_DOUBLE_EQ(part(decode_cost(m, one, kv), "ffn_gate").weight_bytes, 2 * expert);  // 2 of 8 experts
    EXPECT_NEAR(part(decode_cost(m, big, kv), "ffn_gate").weight_bytes, 8 * expert, 1e-6 * expert);
}

TEST(RooflineCapacity, FitsCrossoverAndCumulativeTraffic) {
    const PerfModel m = find_perf_model("llama2-7b");
    const Device d = find_device("h100-sxm");
    const KvSizer kv(m.kv_shape(), "f16");
    PerfRun run;
    const double weights = double(m.n_params_total()) * 2;
    EXPECT_EQ(max_context(m, run, kv, d), std::int64_t((d.mem_capacity - weights) / 524288));
    run.context = 4096;
    EXPECT_EQ(max_batch(m, run, kv, d), std::int64_t((d.mem_capacity - weights) / (524288.0 * 4096)));
    run.batch = 4;
    const std::int64_t x = weight_kv_crossover(m, run, kv);
    EXPECT_GE(4 * kv.sequence_bytes(x), weights);
    EXPECT_LT(4 * kv.sequence_bytes(x - 1), weights);
    EXPECT_DOUBLE_EQ(cumulative_kv_bytes(kv, 1000), 524288.0 * 1000 * 1001 / 2);   // exact sum
    EXPECT_NEAR(cumulative_kv_bytes(kv, 100000), 524288.0 * 100000 * 100001 / 2, 1e-9 * 524288.0 * 1e10);
}

TEST(RooflineEnergy, ArticleTableAppliedPerByteAndFlop) {
    const PerfModel m = find_perf_model("qwen-72b-as-written");
    PerfRun run;
    run.context = 1000;
    const PhaseCost c = decode_cost(m, run, KvSizer(m.kv_shape(), "f16"));
    const EnergyTable t = find_energy_table("article-7nm");
    const EnergyBreakdown e = phase_energy(c, t);
    EXPECT_DOUBLE_EQ(e.weights, c.total().weight_bytes * 40e-12);
    EXPECT_DOUBLE_EQ(e.kv, c.total().kv_bytes * 40e-12);
    EXPECT_NEAR(e.total(), e.weights + e.kv + e.l2 + e.compute + e.other, 1e-12);
    EXPECT_GT(e.pim_removable, 0.5 * e.total());  // decode energy is data movement
    EXPECT_LT(e.pim_removable, e.total());
}

TEST(RooflineRun, RefusesNonsense) {
    PerfRun r;
    r.batch = 0;
    EXPECT_THROW(r.validate(), Error);
    r = PerfRun{};
    r.eff_bandwidth = 1.5;
    EXPECT_THROW(r.validate(), Error);
    r = PerfRun{};
    r.act_bits = 1;
    EXPECT_THROW(r.validate(), Error);
}

TEST(RooflineParallel, KvHeadsReplicateBeyondTheirCount) {
    // Llama-3-70B has 8 KV heads: at tp 16 each device holds (a replica of) one KV head, so the KV
    // bytes and k/v projection weights per device stop shrinking at tp 8 while q/o/FFN halve.
    const PerfModel m = find_perf_model("llama3-70b");
    ASSERT_EQ(m.n_kv_head, 8);
    const KvSizer kv(m.kv_shape(), "f16");
    PerfRun r8, r16;
    r8.tp = 8, r16.tp = 16;
    r8.context = r16.context = 4096;
    const auto part = [](const PhaseCost& c, const std::string& name) {
        for (const Cost& x : c.parts)
            if (x.name == name) return x;
        return Cost{};
    };
    const PhaseCost c8 = decode_cost(m, r8, kv), c16 = decode_cost(m, r16, kv);
    for (const char* name : {"attn_scores", "attn_context", "kv_write"})
        EXPECT_DOUBLE_EQ(part(c16, name).kv_bytes, part(c8, name).kv_bytes) << name;
    EXPECT_DOUBLE_EQ(part(c16, "k_proj").weight_bytes, part(c8, "k_proj").weight_bytes);
    EXPECT_DOUBLE_EQ(part(c16, "q_proj").weight_bytes * 2, part(c8, "q_proj").weight_bytes);
    EXPECT_DOUBLE_EQ(part(c16, "attn_scores").flops * 2, part(c8, "attn_scores").flops);  // query heads still split
    // Per-device KV for one sequence: the whole cache / 8 at both degrees; the weights hold the replicas.
    const double kv_params = 2.0 * m.n_layer * m.n_embd * double(m.n_kv_head) * m.head_dim;
    const double bits = m.weight_bits;
    EXPECT_NEAR(weight_bytes_per_device(m, r16),
                (double(m.n_params_total()) / 16 + kv_params * (1.0 / 8 - 1.0 / 16)) * bits / 8, 1);
    const Device h = find_device("h100-sxm");
    r8.batch = r16.batch = 1;
    EXPECT_LE(max_context(m, r16, kv, h), 2 * max_context(m, r8, kv, h));
    EXPECT_GT(max_context(m, r16, kv, h), max_context(m, r8, kv, h));  // more room for KV, not twice the room
    // At or below the KV head count nothing changes: tp 4 splits KV four ways.
    PerfRun r4 = r8;
    r4.tp = 4;
    EXPECT_DOUBLE_EQ(part(decode_cost(m, r4, kv), "kv_write").kv_bytes, 2 * part(c8, "kv_write").kv_bytes);
}

}  // namespace
}  // namespace aqpim
