// `aqpim bench decode --contexts ...`: decode speed where the KV cache dominates, every scheme in
// one run at each (batch, context), with the ratio to the first scheme (the baseline, f16 by
// default). Caches are filled with generated keys and values (outlier channels, low rank, RoPE;
// see aqpim/kv_capture.h synthetic_attention), so compressed schemes learn their codebooks on the
// fill, then after one untimed step `decode_tokens` real forward steps are timed (each advances
// every sequence by one), with the batched GEMM or, with --batch-invariant, as the server decodes.

#include <fmt/format.h>

#include <random>

#include "aqpim/kv_capture.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/model.h"
#include "aqpim/threads.h"
#include "aqpim/timer.h"
#include "aqpim/transformer.h"
#include "bench.h"

namespace aqpim::cli {

using json = nlohmann::ordered_json;

namespace {

/// Append n generated tokens to every layer of sequence seq, in chunks (bounded memory).
void fill_sequence(KvCache& cache, int seq, std::int64_t n, const KvShape& shape, std::uint64_t seed) {
    constexpr int kChunk = 2048;
    for (std::int64_t t0 = 0; t0 < n; t0 += kChunk) {
        const int m = int(std::min<std::int64_t>(kChunk, n - t0));
        for (int il = 0; il < shape.n_layer; ++il) {
            const CapturedAttention a =
                synthetic_attention(m, shape.n_kv_head, shape.n_kv_head, shape.head_dim, seed + 7919 * il + t0);
            cache.append(il, seq, m, a.k.data(), a.v.data());
        }
    }
}

}  // namespace

json bench_kv_decode(const DecodeBenchOptions& opt) {
    const LoadedModel m = load_model(opt.model);
    Transformer t(m.weights);
    t.set_batch_invariant(opt.batch_invariant);
    const KvShape shape = t.kv_shape();
    const std::vector<KvSchemeSpec> schemes = parse_kv_schemes(opt.kv);
    json rows = json::array();
    std::mt19937 rng(11);
    std::vector<float> logits;
    for (int batch : opt.batches)
        for (std::int64_t ctx : opt.contexts) {
            double base_tps = 0.0;
            for (std::size_t is = 0; is < schemes.size(); ++is) {
                KvCacheOptions ko;
                ko.context = ctx + 1 + opt.decode_tokens;
                std::unique_ptr<KvCache> cache = make_kv_cache(schemes[is], shape, ko);
                Timer fill_timer;
                for (int s = 0; s < batch; ++s) {
                    cache->add_sequence(s);
                    fill_sequence(*cache, s, ctx, shape, 1000 + 17 * s);
                }
                const double fill_s = fill_timer.seconds();
                std::vector<std::int32_t> ids(batch);
                std::vector<BatchSequence> step(batch);
                const auto decode_step = [&] {
                    for (int s = 0; s < batch; ++s) {
                        ids[s] = std::int32_t(rng() % unsigned(t.config().n_vocab));
                        step[s] = BatchSequence{s, {&ids[s], 1}, false};
                    }
                    return t.forward(step, *cache, logits).kv_bytes;
                };
                // One untimed step: the first append after the fill can grow a cache's buffers
                // (the f16 cache's vectors double, copying the whole context: 1.6 s at 32 x 8K
                // on one thread), a cost amortized over the whole generation in real use that a
                // window of decode_tokens steps would charge hundreds of times over.
                decode_step();
                std::uint64_t kv_bytes = 0;
                Timer timer;
                for (int i = 0; i < opt.decode_tokens; ++i) kv_bytes += decode_step();
                const double secs = timer.seconds();
                const double tps = double(batch) * opt.decode_tokens / secs;
                if (is == 0) base_tps = tps;
                const KvMemory mem = cache->memory();
                rows.push_back({{"section", "kv decode"}, {"batch", batch}, {"context", ctx}, {"kv", schemes[is].text},
                                {"threads", default_threads()}, {"batch_invariant", opt.batch_invariant},
                                {"tokens_per_s", tps},
                                {"vs_" + schemes[0].name, tps / base_tps},
                                {"kv_gbytes_per_s", double(kv_bytes) / secs / 1e9},
                                {"kv_mib", double(mem.bytes) / 1048576.0},
                                {"bits_per_element", mem.bits_per_element(shape)}, {"fill_s", fill_s}});
            }
        }
    return rows;
}

}  // namespace aqpim::cli
