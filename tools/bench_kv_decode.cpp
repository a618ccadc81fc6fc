// `aqpim bench decode --contexts ...`: decode speed where the KV cache dominates, every scheme in
// one run at each (batch, context), with the ratio to the first scheme (the baseline, f16 by
// default). Caches are filled with generated keys and values (outlier channels, low rank, RoPE;
// see aqpim/kv_capture.h synthetic_attention), so compressed schemes learn their codebooks on the
// fill, then after one untimed step `decode_tokens` real forward steps are timed (each advances
// every sequence by one), with the batched GEMM or, with --batch-invariant, as the server decodes.
// The schemes' steps are interleaved (all caches held at once, filled from one generated context)
// unless --sequential. fill_s: the seconds a scheme's cache spent appending the context (coding and
// codebook training included, the generator not).

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

/// Decode steps a scheme runs back to back in one round of the interleaved timing.
constexpr int kInterleaveSteps = 4;

/// Append n generated tokens to every layer of sequence seq of each cache, in chunks (bounded
/// memory), each chunk generated once for all of them; fill_s[i] gains the seconds caches[i] spent
/// in its appends (coding and training included, the generator not).
void fill_sequence(const std::vector<KvCache*>& caches, int seq, std::int64_t n, const KvShape& shape,
                   std::uint64_t seed, std::vector<double>& fill_s) {
    constexpr int kChunk = 2048;
    std::vector<CapturedAttention> layers(std::size_t(shape.n_layer));
    for (std::int64_t t0 = 0; t0 < n; t0 += kChunk) {
        const int m = int(std::min<std::int64_t>(kChunk, n - t0));
        // The layers' chunks generated side by side (each from its own seed: the same values as
        // one after another; the generator was most of a long fill's time), appended in order.
        parallel_for(shape.n_layer, [&](std::int64_t il) {
            layers[std::size_t(il)] =
                synthetic_attention(m, shape.n_kv_head, shape.n_kv_head, shape.head_dim, seed + 7919 * il + t0);
        });
        for (int il = 0; il < shape.n_layer; ++il) {
            const CapturedAttention& a = layers[std::size_t(il)];
            for (std::size_t i = 0; i < caches.size(); ++i) {
                Timer timer;
                caches[i]->append(il, seq, m, a.k.data(), a.v.data());
                fill_s[i] += timer.seconds();
            }
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
    const std::size_t n_schemes = schemes.size();
    json rows = json::array();
    std::mt19937 rng(11);
    std::vector<float> logits;
    for (int batch : opt.batches)
        for (std::int64_t ctx : opt.contexts) {
            // Every scheme's cache, filled (the sum of their memory is held at once unless
            // --sequential: then one at a time, timed back to back).
            std::vector<std::unique_ptr<KvCache>> caches(n_schemes);
            std::vector<double> fill_s(n_schemes, 0.0), secs(n_schemes, 0.0);
            std::vector<std::uint64_t> kv_bytes(n_schemes, 0);
            std::vector<KvMemory> mem(n_schemes);
            std::vector<std::int32_t> ids(batch);
            std::vector<BatchSequence> step(batch);
            const auto new_ids = [&] {
                for (int s = 0; s < batch; ++s) ids[s] = std::int32_t(rng() % unsigned(t.config().n_vocab));
            };
            const auto decode_step = [&](KvCache& cache) {
                for (int s = 0; s < batch; ++s) step[s] = BatchSequence{s, {&ids[s], 1}, false};
                return t.forward(step, cache, logits).kv_bytes;
            };
            // Fill the caches [first, last) with the same generated context, then one untimed step
            // each: the first append after the fill can grow a cache's buffers (the f16 cache's
            // vectors double, copying the whole context: 1.6 s at 32 x 8K on one thread), a cost
            // amortized over the whole generation in real use that a window of decode_tokens steps
            // would charge hundreds of times over.
            const auto fill = [&](std::size_t first, std::size_t last) {
                std::vector<KvCache*> live;
                std::vector<double> appends(last - first, 0.0);
                for (std::size_t is = first; is < last; ++is) {
                    KvCacheOptions ko;
                    ko.context = ctx + 1 + opt.decode_tokens;
                    caches[is] = make_kv_cache(schemes[is], shape, ko);
                    live.push_back(caches[is].get());
                }
                for (int s = 0; s < batch; ++s) {
                    for (KvCache* c : live) c->add_sequence(s);
                    fill_sequence(live, s, ctx, shape, 1000 + 17 * s, appends);
                }
                new_ids();
                for (std::size_t is = first; is < last; ++is) {
                    fill_s[is] = appends[is - first];
                    decode_step(*caches[is]);
                }
            };
            const auto timed_step = [&](std::size_t is) {
                Timer timer;
                kv_bytes[is] += decode_step(*caches[is]);
                secs[is] += timer.seconds();
            };
            const auto finish = [&](std::size_t is) {
                mem[is] = caches[is]->memory();
                caches[is].reset();
            };
            if (opt.sequential) {
                for (std::size_t is = 0; is < n_schemes; ++is) {
                    fill(is, is + 1);
                    for (int i = 0; i < opt.decode_tokens; ++i) new_ids(), timed_step(is);
                    finish(is);
                }
            } else {
                // Interleaved: rounds of kInterleaveSteps steps per scheme, the schemes in an order
                // rotated each round, so the machine's drift over the run (10-20% on a shared VM)
                // falls on every scheme alike instead of on whichever ran last; a scheme's steps
                // within a round find the caches as its own previous step left them.
                fill(0, n_schemes);
                std::vector<std::int32_t> round_ids;
                for (int i0 = 0, round = 0; i0 < opt.decode_tokens; i0 += kInterleaveSteps, ++round) {
                    const int n = std::min(kInterleaveSteps, opt.decode_tokens - i0);
                    round_ids.clear();
                    for (int i = 0; i < n; ++i) new_ids(), round_ids.insert(round_ids.end(), ids.begin(), ids.end());
                    for (std::size_t j = 0; j < n_schemes; ++j)
                        for (int i = 0; i < n; ++i) {  // every scheme decodes the round's same tokens
                            std::copy_n(round_ids.begin() + std::ptrdiff_t(i) * batch, batch, ids.begin());
                            timed_step((std::size_t(round) + j) % n_schemes);
                        }
                }
                for (std::size_t is = 0; is < n_schemes; ++is) finish(is);
            }
            const double base_tps = double(batch) * opt.decode_tokens / secs[0];
            for (std::size_t is = 0; is < n_schemes; ++is) {
                const double tps = double(batch) * opt.decode_tokens / secs[is];
                rows.push_back({{"section", "kv decode"}, {"batch", batch}, {"context", ctx}, {"kv", schemes[is].text},
                                {"threads", default_threads()}, {"batch_invariant", opt.batch_invariant},
                                {"timing", opt.sequential ? "sequential" : "interleaved"},
                                {"tokens_per_s", tps},
                                {"vs_" + schemes[0].name, tps / base_tps},
                                {"kv_gbytes_per_s", double(kv_bytes[is]) / secs[is] / 1e9},
                                {"kv_mib", double(mem[is].bytes) / 1048576.0},
                                {"bits_per_element", mem[is].bits_per_element(shape)}, {"fill_s", fill_s[is]}});
            }
        }
    return rows;
}

}  // namespace aqpim::cli
