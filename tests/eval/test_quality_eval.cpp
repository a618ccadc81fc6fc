// The quality harness (aqpim/eval.h, `aqpim eval`): the protocol equals token-by-token decoding for
// every scheme, the reference compares exactly with itself, the f16 perplexity is perplexity()'s,
// reports carry their fields, the recording decorator is transparent, and the CLI refuses bad input.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>
#include <mutex>
#include <random>
#include <sstream>

#include "aqpim/error.h"
#include "aqpim/eval.h"
#include "aqpim/generate.h"
#include "aqpim/perplexity.h"
#include "support/cli.h"
#include "support/temp_dir.h"
#include "support/tiny_model.h"

using namespace aqpim;

namespace {

/// head_dim 64 and GQA 2:1, so every scheme's defaults apply (q4_0 blocks, g=32 groups, pq m=32).
test::TinyModelShape eval_shape() {
    test::TinyModelShape s;
    s.n_embd = 128;
    s.n_ff = 96;
    s.n_layer = 2;
    s.n_head = 2;
    s.n_kv_head = 1;
    s.n_vocab = 64;
    return s;
}

std::vector<std::int32_t> random_tokens(std::size_t n, int n_vocab, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::int32_t> ids(n);
    for (auto& id : ids) id = std::int32_t(rng() % std::uint64_t(n_vocab));
    ids[0] = 1;  // BOS of the tiny model
    return ids;
}

/// The spec each scheme is tested with on a 96-token chunk (48 prefilled, 48 scored): parameters small
/// enough that the scheme's time-dependent parts (f16 windows sliding, groups closing, codebooks
/// trained and refreshed) happen inside the scored half. A name missing here runs with its defaults.
const std::map<std::string, std::string> kTestSpecs = {
    {"kivi2", "kivi2:g=16,window=8"},
    {"pq", "pq:calib=32,refresh=32,page=32,sinks=2,window=8"},
    {"turbo", "turbo:bits=2.5,qjl=1,sel=56,window=4"},
    {"qjl", "qjl:sel=56,window=4"},
};
/// For the end-to-end comparison of logits: k-means amplifies the ~1e-6 by which batched and
/// one-row matmuls round the keys differently, so there pq trains only on prefilled tokens (refresh
/// on scored tokens is covered exactly by the replay test). Exact score tables too: int8 tables
/// round each entry to a grid set by the query, and a 1e-6 change of the query can move an entry by
/// one step (PqAttention.Int8ScoresStayCloseToExact bounds that path).
const std::map<std::string, std::string> kLogitTestSpecs = {
    {"kivi2", "kivi2:g=16,window=8"},
    {"pq", "pq:calib=32,refresh=0,page=32,sinks=2,window=8,scores=f32"},
    {"turbo", "turbo:bits=2.5,qjl=1,sel=56,window=4"},
    {"qjl", "qjl:sel=56,window=4"},
};

std::string test_spec(const std::string& name, const std::map<std::string, std::string>& specs = kTestSpecs) {
    const auto it = specs.find(name);
    return it == specs.end() ? name : it->second;
}

/// Every call a forward pass makes on a cache, forwarded to the inner one and logged.
class CallLog final : public KvCache {
public:
    explicit CallLog(std::unique_ptr<KvCache> inner) : KvCache(inner->shape()), inner_(std::move(inner)) {}
    struct Append {
        int il = 0;
        std::int64_t pos0 = 0, n = 0;
        std::vector<float> k, v;  // [n][n_kv_head][head_dim]
    };
    struct Attend {
        int il = 0, ih = 0, group = 0;
        float scale = 0;
        std::vector<std::int64_t> pos;  // [n_rows]
        std::vector<float> q, out;      // [n_rows][group][head_dim]
    };
    std::vector<Append> appends;
    mutable std::vector<Attend> attends;  // attend() of different heads runs concurrently: under mutex_

    std::string scheme() const override { return inner_->scheme(); }
    void add_sequence(int id) override { inner_->add_sequence(id); }
    void remove_sequence(int id) override { inner_->remove_sequence(id); }
    bool has_sequence(int id) const override { return inner_->has_sequence(id); }
    std::int64_t n_tokens(int id, int il) const override { return inner_->n_tokens(id, il); }
    KvMemory memory() const override { return inner_->memory(); }
    void append(int il, int id, std::int64_t n, const float* k, const float* v) override {
        const std::size_t w = std::size_t(n) * shape().n_kv_head * shape().head_dim;
        appends.push_back({il, inner_->n_tokens(id, il), n, {k, k + w}, {v, v + w}});
        inner_->append(il, id, n, k, v);
    }
    void attend(int il, int id, int ih, const KvQuery& qr) const override {
        inner_->attend(il, id, ih, qr);
        const int w = qr.group * shape().head_dim;
        Attend a{il, ih, qr.group, qr.scale, {qr.pos, qr.pos + qr.n_rows}, {}, {}};
        for (int r = 0; r < qr.n_rows; ++r) {
            a.q.insert(a.q.end(), qr.q + r * qr.q_stride, qr.q + r * qr.q_stride + w);
            a.out.insert(a.out.end(), qr.out + r * qr.out_stride, qr.out + r * qr.out_stride + w);
        }
        std::lock_guard<std::mutex> lock(mutex_);
        attends.push_back(std::move(a));
    }

private:
    std::unique_ptr<KvCache> inner_;
    mutable std::mutex mutex_;
};

struct EvalTiny : ::testing::Test {
    ModelWeights weights = test::tiny_model(eval_shape(), 11);
    Transformer model{weights, 1};
};

/// Largest |a - b| over two logit arrays, and the largest |a|.
std::pair<double, double> max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    double d = 0.0, m = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        d = std::max(d, double(std::abs(a[i] - b[i])));
        m = std::max(m, double(std::abs(a[i])));
    }
    return {d, m};
}

}  // namespace

// ---- protocol ------------------------------------------------------------------------------------------

// The harness runs the scored half as one batched forward call; the KvCache time-consistency contract
// says that equals decoding it token by token. Checked for every scheme the factory knows. The two
// runs differ only where the batched matmul rounds differently from the one-row one (about 1e-6 of
// a logit), which a quantizer can at most turn into a rare neighbouring code.
TEST_F(EvalTiny, ProtocolEqualsTokenByTokenDecodeForEveryScheme) {
    constexpr double kLogitTolerance = 2e-3;  // relative to the largest logit
    constexpr double kKlTolerance = 1e-5;     // nats, per row
    const std::vector<std::int32_t> chunk = random_tokens(96, 64, 3);
    const int n_vocab = model.config().n_vocab;
    int n_tested = 0;
    for (const std::string& name : kv_scheme_names()) {
        SCOPED_TRACE(name);
        const KvSchemeSpec spec = parse_kv_scheme(test_spec(name, kLogitTestSpecs));
        std::vector<float> batched, decoded;
        auto c1 = make_kv_cache(spec, model.kv_shape(), {0, 96});
        auto c2 = make_kv_cache(spec, model.kv_shape(), {0, 96});
        run_chunk(model, *c1, chunk, 48, ScoredRows::batched, batched);
        run_chunk(model, *c2, chunk, 48, ScoredRows::token_by_token, decoded);
        ASSERT_EQ(batched.size(), std::size_t(48) * n_vocab);
        ASSERT_EQ(decoded.size(), batched.size());
        const auto [diff, scale] = max_diff(batched, decoded);
        EXPECT_LE(diff, kLogitTolerance * scale) << "largest logit " << scale;
        for (int r = 0; r < 48; ++r)
            EXPECT_LE(kl_divergence(decoded.data() + r * n_vocab, NAN, batched.data() + r * n_vocab, n_vocab),
                      kKlTolerance)
                << "row " << r;
        EXPECT_EQ(c1->memory().bytes, c2->memory().bytes);
        ++n_tested;
    }
    EXPECT_EQ(n_tested, int(kv_scheme_names().size()));
}

// The batched calls of the harness's chunk, replayed on a fresh cache of the same scheme one token at
// a time in decoding order (every layer appends the token, then its heads attend for it): each row's
// output equals the batched one. Same inputs on both sides, so this is the time-consistency contract
// itself, with every time-dependent part of each scheme (kTestSpecs) inside the scored half.
TEST_F(EvalTiny, BatchedCallsEqualTokenByTokenReplayForEveryScheme) {
    constexpr double kOutTolerance = 0;  // the contract says exactly; every scheme meets it bit for bit
    constexpr std::int64_t n = 96;
    const std::vector<std::int32_t> chunk = random_tokens(n, 64, 3);
    const KvShape shape = model.kv_shape();
    const int hd = shape.head_dim, n_kv_heads = shape.n_kv_head;
    int n_tested = 0;
    for (const std::string& name : kv_scheme_names()) {
        SCOPED_TRACE(test_spec(name));
        const KvSchemeSpec spec = parse_kv_scheme(test_spec(name));
        CallLog log(make_kv_cache(spec, shape, {0, n}));
        std::vector<float> logits;
        run_chunk(model, log, chunk, 48, ScoredRows::batched, logits);
        // Index the log: K/V rows of (layer, position); query and output rows of (layer, head, position).
        std::vector<std::vector<const float*>> k(std::size_t(shape.n_layer), std::vector<const float*>(n)), v = k;
        for (const CallLog::Append& a : log.appends)
            for (std::int64_t t = 0; t < a.n; ++t) {
                k[a.il][std::size_t(a.pos0 + t)] = a.k.data() + t * n_kv_heads * hd;
                v[a.il][std::size_t(a.pos0 + t)] = a.v.data() + t * n_kv_heads * hd;
            }
        struct Logged {
            const float* q;
            const float* out;
            int group;
            float scale;
        };
        std::map<std::tuple<int, int, std::int64_t>, Logged> rows;
        for (const CallLog::Attend& a : log.attends)
            for (std::size_t r = 0; r < a.pos.size(); ++r)
                rows[{a.il, a.ih, a.pos[r]}] = {a.q.data() + r * a.group * hd, a.out.data() + r * a.group * hd, a.group,
                                                a.scale};
        ASSERT_EQ(rows.size(), std::size_t(shape.n_layer) * n_kv_heads * n);

        auto cache = make_kv_cache(spec, shape, {0, n});
        cache->add_sequence(0);
        double max_diff = 0, max_out = 0;
        std::vector<float> out;
        for (std::int64_t t = 0; t < n; ++t)
            for (int il = 0; il < shape.n_layer; ++il) {
                cache->append(il, 0, 1, k[il][std::size_t(t)], v[il][std::size_t(t)]);
                for (int ih = 0; ih < n_kv_heads; ++ih) {
                    const Logged& want = rows.at({il, ih, t});
                    const int w = want.group * hd;
                    out.assign(std::size_t(w), 0.0f);
                    KvQuery qr;
                    qr.q = want.q;
                    qr.q_stride = w;
                    qr.n_rows = 1;
                    qr.group = want.group;
                    qr.pos = &t;
                    qr.scale = want.scale;
                    qr.out = out.data();
                    qr.out_stride = w;
                    cache->attend(il, 0, ih, qr);
                    for (int i = 0; i < w; ++i) {
                        max_diff = std::max(max_diff, double(std::abs(out[i] - want.out[i])));
                        max_out = std::max(max_out, double(std::abs(want.out[i])));
                    }
                }
            }
        EXPECT_LE(max_diff, kOutTolerance * max_out) << "largest output " << max_out;
        EXPECT_EQ(cache->memory().bytes, log.memory().bytes);
        ++n_tested;
    }
    EXPECT_EQ(n_tested, int(kv_scheme_names().size()));
}

// f32 is exact under both, so there the only difference is the matmul rounding itself.
TEST_F(EvalTiny, ProtocolEqualsDecodeClosely_F32) {
    const std::vector<std::int32_t> chunk = random_tokens(64, 64, 5);
    std::vector<float> batched, decoded;
    auto c1 = make_dense_kv_cache(model.kv_shape(), DenseKvType::f32);
    auto c2 = make_dense_kv_cache(model.kv_shape(), DenseKvType::f32);
    run_chunk(model, *c1, chunk, 32, ScoredRows::batched, batched);
    run_chunk(model, *c2, chunk, 32, ScoredRows::token_by_token, decoded);
    const auto [diff, scale] = max_diff(batched, decoded);
    EXPECT_LE(diff, 1e-5 * scale);
}

TEST(EvalHelpers, KlDivergenceAndReference) {
    const std::vector<float> p = {1.0f, 2.0f, 0.5f}, q = {1.5f, 1.0f, 0.5f};
    EXPECT_EQ(kl_divergence(p.data(), NAN, p.data(), 3), 0.0);
    // By hand: KL(p || q) = Σ p_i (log p_i - log q_i).
    double lp[3], lq[3], sp = 0, sq = 0, want = 0;
    for (int i = 0; i < 3; ++i) sp += std::exp(double(p[i])), sq += std::exp(double(q[i]));
    for (int i = 0; i < 3; ++i) lp[i] = p[i] - std::log(sp), lq[i] = q[i] - std::log(sq), want += std::exp(lp[i]) * (lp[i] - lq[i]);
    EXPECT_NEAR(kl_divergence(p.data(), NAN, q.data(), 3), want, 1e-12);
    EXPECT_NEAR(log_sum_exp(p.data(), 3), std::log(sp), 1e-12);

    int ref = -1;
    auto s = with_f16_reference(parse_kv_schemes("f32;int8"), &ref);
    ASSERT_EQ(s.size(), 3u);
    EXPECT_EQ(ref, 0);
    EXPECT_EQ(s[0].text, "f16");
    s = with_f16_reference(parse_kv_schemes("f32;f16"), &ref);
    EXPECT_EQ(s.size(), 2u);
    EXPECT_EQ(ref, 1);
}

// ---- evaluate_quality ------------------------------------------------------------------------------

TEST_F(EvalTiny, F16AgainstItselfIsExactAndF32IsCloseButNotEqual) {
    const std::vector<std::int32_t> tokens = random_tokens(3 * 64 + 5, 64, 7);
    QualityOptions o;
    o.n_ctx = 64;
    const QualityReport r = evaluate_quality(model, tokens, 1, parse_kv_schemes("f16;f16;f32"), o);
    ASSERT_EQ(r.schemes.size(), 3u);
    EXPECT_EQ(r.n_chunks, 3);
    EXPECT_EQ(r.n_scored, 3 * (64 - 1 - 32));
    EXPECT_TRUE(r.schemes[0].reference);
    EXPECT_FALSE(r.schemes[1].reference);
    // A second f16 run: the same numbers to the bit.
    EXPECT_EQ(r.schemes[1].mean_kl, 0.0);
    EXPECT_EQ(r.schemes[1].max_kl, 0.0);
    EXPECT_EQ(r.schemes[1].top1, 1.0);
    EXPECT_EQ(r.schemes[1].delta_ppl_pct, 0.0);
    EXPECT_EQ(r.schemes[1].ppl, r.schemes[0].ppl);
    EXPECT_EQ(r.schemes[0].mean_kl, 0.0);
    // f32 keys and values differ from f16's by rounding only.
    const SchemeQuality& f32 = r.schemes[2];
    EXPECT_GT(f32.mean_kl, 0.0);
    EXPECT_LT(f32.mean_kl, 1e-4);
    EXPECT_GE(f32.top1, 0.95);
    EXPECT_LT(std::abs(f32.delta_ppl_pct), 0.5);
    EXPECT_NE(f32.delta_ppl_pct, 0.0);
    for (const SchemeQuality& q : r.schemes) {
        EXPECT_GT(q.tokens_per_s, 0.0);
        EXPECT_GT(q.ppl_error, 0.0);
        EXPECT_LE(q.max_kl, 1e-3);
    }
}

TEST_F(EvalTiny, BitsPerElementAndBytesComeFromMemory) {
    const std::vector<std::int32_t> tokens = random_tokens(2 * 64, 64, 9);
    QualityOptions o;
    o.n_ctx = 64;
    std::string specs;
    for (const std::string& name : kv_scheme_names()) specs += test_spec(name) + ";";
    const QualityReport r = evaluate_quality(model, tokens, 1, parse_kv_schemes(specs), o);
    const KvShape shape = model.kv_shape();
    for (const SchemeQuality& q : r.schemes) {
        SCOPED_TRACE(q.spec);
        // What a fresh cache of the scheme holds after the same chunk, byte for byte.
        auto cache = make_kv_cache(parse_kv_scheme(q.spec), shape, {0, 64});
        std::vector<float> logits;
        const PerplexityChunks chunks(tokens, 1, 64, 0);
        run_chunk(model, *cache, chunks.chunk(1), 32, ScoredRows::batched, logits);
        const KvMemory mem = cache->memory();
        EXPECT_EQ(q.kv_bytes, mem.bytes);
        EXPECT_EQ(q.kv_parts, mem.parts);
        EXPECT_DOUBLE_EQ(q.bits_per_element, mem.bits_per_element(shape));
        EXPECT_EQ(q.scheme, cache->scheme());
        std::uint64_t sum = 0;
        for (const auto& [part, bytes] : q.kv_parts) sum += bytes;
        EXPECT_EQ(sum, q.kv_bytes);
        // Peak: the most a sequence holds on its way to 64 tokens, never less than at 64.
        std::uint64_t peak = 0;
        for (int n = 1; n <= 64; ++n) peak = std::max(peak, cache->sequence_bytes(n));
        EXPECT_EQ(q.peak_kv_bytes, std::max(peak, q.kv_bytes));
        EXPECT_GE(q.peak_bits_per_element, q.bits_per_element);
    }
    // The dense ones by hand: 64 tokens x 2 layers x 1 KV head x 64 dims x (K, V) x 2 or 4 bytes.
    for (const SchemeQuality& q : r.schemes) {
        if (q.spec == "f16") {
            EXPECT_TRUE(q.reference);
            EXPECT_EQ(q.kv_bytes, 64u * 2 * 64 * 2 * 2);
            EXPECT_DOUBLE_EQ(q.bits_per_element, 16.0);
        } else if (q.spec == "f32") {
            EXPECT_EQ(q.kv_bytes, 64u * 2 * 64 * 2 * 4);
            EXPECT_DOUBLE_EQ(q.bits_per_element, 32.0);
        }
    }
}

TEST_F(EvalTiny, PeakCountsRowsWaitingForARefreshVersion) {
    // With refresh, a version's training rows stay uncoded until it trains: on the way to 64 tokens
    // the cache holds more than at 64. Without refresh the peak is the figure at 64.
    const std::vector<std::int32_t> tokens = random_tokens(2 * 64, 64, 4);
    QualityOptions o;
    o.n_ctx = 64;
    const QualityReport r = evaluate_quality(
        model, tokens, 1,
        parse_kv_schemes("pq:m=8,calib=30,sinks=2,window=4,refresh=32,page=32,cb=f16;pq:m=8,calib=30,sinks=2,window=4,refresh=0,cb=f16"),
        o);
    const auto find = [&](const std::string& spec) -> const SchemeQuality& {
        for (const SchemeQuality& q : r.schemes)
            if (q.spec == spec) return q;
        ADD_FAILURE() << spec;
        return r.schemes[0];
    };
    const SchemeQuality& refresh = find("pq:m=8,calib=30,sinks=2,window=4,refresh=32,page=32,cb=f16");
    const SchemeQuality& once = find("pq:m=8,calib=30,sinks=2,window=4,refresh=0,cb=f16");
    EXPECT_GT(refresh.peak_kv_bytes, refresh.kv_bytes);
    EXPECT_GT(refresh.peak_bits_per_element, refresh.bits_per_element);
    EXPECT_EQ(once.peak_kv_bytes, once.kv_bytes);
    EXPECT_EQ(find("f16").peak_kv_bytes, find("f16").kv_bytes);
}

TEST(EvalQuality, F16PerplexityIsPerplexitysOnStories260K) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    AQPIM_REQUIRE_SHARED("text/tinystories-valid.txt");
    const LoadedModel m = load_model(test::shared_dir() + "/models/stories260K/stories260K.gguf");
    Transformer t(m.weights);
    std::ifstream f(test::shared_dir() + "/text/tinystories-valid.txt");
    std::ostringstream text;
    text << f.rdbuf();
    const std::vector<std::int32_t> ids = m.tokenizer->encode(text.str(), true);
    PerplexityOptions po;
    po.n_ctx = 128;
    po.max_chunks = 4;
    const PerplexityResult want = perplexity(
        t, ids, m.tokenizer->bos(), [](const KvShape& s) { return make_dense_kv_cache(s, DenseKvType::f16); }, po);
    QualityOptions qo;
    qo.n_ctx = 128;
    qo.max_chunks = 4;
    const QualityReport r = evaluate_quality(t, ids, m.tokenizer->bos(), parse_kv_schemes("f16"), qo);
    ASSERT_EQ(r.schemes.size(), 1u);
    EXPECT_EQ(r.n_chunks, want.n_chunks);
    EXPECT_EQ(r.n_scored, want.n_scored);
    // One forward call per chunk there, two here: equal up to the matmul's rounding by batch size
    // (up to 1e-6 relative with AVX-512 kernels, 5e-6 with AVX2's on an AMD EPYC).
    EXPECT_NEAR(r.schemes[0].ppl, want.ppl, 2e-5 * want.ppl);
    EXPECT_NEAR(r.schemes[0].ppl_error, want.ppl_error, 1e-5 * want.ppl_error);
    EXPECT_NEAR(r.schemes[0].mean_nll, want.mean_nll, 2e-5);
}

// ---- reports -----------------------------------------------------------------------------------------

TEST_F(EvalTiny, JsonCsvAndTableCarryEveryField) {
    const std::vector<std::int32_t> tokens = random_tokens(2 * 32, 64, 13);
    QualityOptions o;
    o.n_ctx = 32;
    const QualityReport r = evaluate_quality(model, tokens, 1, parse_kv_schemes("f32"), o);
    const auto j = nlohmann::json::parse(quality_json(r, {{"model", "tiny"}, {"file", "random"}}));
    EXPECT_EQ(j["model"], "tiny");
    EXPECT_EQ(j["n_ctx"], 32);
    EXPECT_EQ(j["n_chunks"], 2);
    EXPECT_EQ(j["kv_shape"]["head_dim"], 64);
    ASSERT_EQ(j["schemes"].size(), 2u);
    for (const char* key : {"spec", "scheme", "reference", "ppl", "ppl_error", "mean_nll", "delta_ppl_pct", "mean_kl",
                            "kl_error", "max_kl", "top1", "top1_error", "bits_per_element", "peak_bits_per_element",
                            "kv_bytes", "peak_kv_bytes", "kv_parts", "seconds", "tokens_per_s"})
        EXPECT_TRUE(j["schemes"][1].contains(key)) << key;
    EXPECT_EQ(j["schemes"][0]["spec"], "f16");
    EXPECT_EQ(j["schemes"][0]["reference"], true);
    EXPECT_EQ(j["schemes"][1]["bits_per_element"], 32.0);
    EXPECT_EQ(j["schemes"][1]["kv_parts"]["keys f32"], 32 * 2 * 64 * 4);

    // CSV: header + one line per scheme; a spec with commas is quoted.
    QualityReport rc = r;
    rc.schemes[1].spec = "pq:m=32,nbits=4";
    const std::string csv = quality_csv(rc);
    std::istringstream lines(csv);
    std::string header, row0, row1, extra;
    std::getline(lines, header);
    std::getline(lines, row0);
    std::getline(lines, row1);
    EXPECT_FALSE(std::getline(lines, extra));
    EXPECT_EQ(header.rfind("spec,scheme,reference,n_ctx,n_chunks,n_scored,ppl,", 0), 0u) << header;
    EXPECT_NE(header.find("mean_kl"), std::string::npos);
    EXPECT_NE(header.find("bits_per_element"), std::string::npos);
    EXPECT_EQ(row1.rfind("\"pq:m=32,nbits=4\",f32,0,32,2,", 0), 0u) << row1;
    EXPECT_EQ(std::count(header.begin(), header.end(), ','), std::count(row0.begin(), row0.end(), ','));

    const std::string table = quality_table(r);
    EXPECT_NE(table.find("f16 (ref)"), std::string::npos) << table;
    EXPECT_NE(table.find("32.000"), std::string::npos) << table;
}

// ---- generation ----------------------------------------------------------------------------------------

TEST(EvalGeneration, ReferenceIsGreedyDecodingAndSchemesAreTeacherForced) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    const LoadedModel m = load_model(test::shared_dir() + "/models/stories260K/stories260K.gguf");
    Transformer t(m.weights);
    const std::vector<std::int32_t> prompt = m.tokenizer->encode("Once upon a time", true);
    GenerationCheckOptions o;
    o.n_generate = 40;
    o.window = 16;
    const GenerationReport r = check_generation(t, prompt, parse_kv_schemes("f32;f16"), o);
    ASSERT_EQ(r.schemes.size(), 2u);
    const SchemeGeneration& f32 = r.schemes[0];
    const SchemeGeneration& f16 = r.schemes[1];
    ASSERT_TRUE(f16.reference);
    // The reference's tokens are what generate() produces greedily with an f16 cache.
    auto cache = make_dense_kv_cache(t.kv_shape(), DenseKvType::f16);
    GenerateOptions go;
    go.n_predict = 40;
    go.sampler.temperature = 0.0f;
    go.stop_at_eos = false;
    const GenerateResult want = generate(t, *m.tokenizer, *cache, prompt, go);
    EXPECT_EQ(f16.tokens, want.generated);
    EXPECT_EQ(f16.first_divergence, -1);
    EXPECT_EQ(f16.mean_kl, 0.0);
    EXPECT_EQ(f16.top1, 1.0);
    ASSERT_EQ(f16.window_kl.size(), 3u);  // steps 0-15, 16-31, 32-39
    EXPECT_GT(f32.mean_kl, 0.0);
    EXPECT_LT(f32.mean_kl, 1e-3);
    EXPECT_EQ(f32.tokens.size(), 40u);
    double sum = 0;
    for (int w = 0; w < 3; ++w) sum += f32.window_kl[std::size_t(w)] * (w < 2 ? 16 : 8);
    EXPECT_NEAR(sum / 40, f32.mean_kl, 1e-12);
    const auto j = nlohmann::json::parse(generation_json(r, {}));
    EXPECT_EQ(j["schemes"][1]["first_divergence"], -1);
    EXPECT_EQ(j["schemes"][0]["window_kl"].size(), 3u);
}

// ---- fidelity ------------------------------------------------------------------------------------------

TEST_F(EvalTiny, RecordingCacheIsTransparent) {
    const std::vector<std::int32_t> chunk = random_tokens(40, 64, 17);
    std::vector<float> plain, recorded;
    auto c = make_kv_cache(parse_kv_scheme("f16"), model.kv_shape());
    run_chunk(model, *c, chunk, 20, ScoredRows::batched, plain);
    RecordingKvCache rec(make_kv_cache(parse_kv_scheme("f16"), model.kv_shape()), 1, 0);
    run_chunk(model, rec, chunk, 20, ScoredRows::batched, recorded);
    EXPECT_EQ(plain, recorded);
    EXPECT_EQ(rec.keys(0).size(), std::size_t(40) * 64);
    EXPECT_EQ(rec.values(0).size(), std::size_t(40) * 64);
    ASSERT_EQ(rec.rows().size(), 40u);  // 20 prefill rows + 20 scored rows
    EXPECT_EQ(rec.rows()[0].pos, 0);
    EXPECT_EQ(rec.rows()[39].pos, 39);
    EXPECT_EQ(rec.rows()[39].q.size(), std::size_t(2) * 64);  // GQA group of 2
    EXPECT_EQ(rec.memory().bytes, c->memory().bytes);
    EXPECT_EQ(rec.scheme(), "f16");
}

FidelityOptions fidelity_options(int layer, int n_ctx, int n_bins) {
    FidelityOptions o;
    o.layer = layer;
    o.n_ctx = n_ctx;
    o.n_bins = n_bins;
    return o;
}

TEST_F(EvalTiny, FidelityOfDenseSchemes) {
    const std::vector<std::int32_t> tokens = random_tokens(96, 64, 19);
    const FidelityOptions o = fidelity_options(1, 96, 4);
    const FidelityReport r = measure_fidelity(model, tokens, 1, parse_kv_schemes("f32;f16"), o);
    ASSERT_EQ(r.schemes.size(), 2u);
    EXPECT_EQ(r.group, 2);
    EXPECT_EQ(r.probe_block, 16);     // min(head_dim, 16)
    EXPECT_EQ(r.n_probe_runs, 7);     // baseline + 96 / 16
    const SchemeFidelity& f32 = r.schemes[0];
    const SchemeFidelity& f16 = r.schemes[1];
    ASSERT_EQ(f32.bins.size(), 4u);
    EXPECT_EQ(f32.bins[0].pos_begin, 0);
    EXPECT_EQ(f32.bins[3].pos_end, 96);
    EXPECT_EQ(f32.all.n_rows, 96 * 2);
    ASSERT_TRUE(f32.probe_ok) << f32.probe_note;
    ASSERT_TRUE(f16.probe_ok) << f16.probe_note;
    // f32 stores exactly: errors at float rounding; the probe reads weights to ~1e-5.
    EXPECT_LT(f32.all.out_rel_err_max, 1e-5);
    EXPECT_LT(f32.all.score_rel_rmse, 1e-4);
    EXPECT_LT(std::abs(f32.all.attn_kl), 1e-8);
    // f16 rounds keys and values: visibly larger, still small.
    EXPECT_GT(f16.all.out_rel_err, 10 * f32.all.out_rel_err);
    EXPECT_LT(f16.all.out_rel_err, 5e-3);
    EXPECT_GT(f16.all.score_rel_rmse, f32.all.score_rel_rmse);
    EXPECT_LT(f16.all.score_rel_rmse, 5e-3);
    const auto j = nlohmann::json::parse(fidelity_json(r, {}));
    EXPECT_EQ(j["schemes"][0]["bins"].size(), 4u);
    EXPECT_TRUE(j["schemes"][1]["all"]["score_rel_rmse"].is_number());
}

// Every scheme the factory knows: the decorator works, errors are finite and f16 is the floor.
TEST_F(EvalTiny, FidelityRunsForEveryScheme) {
    const std::vector<std::int32_t> tokens = random_tokens(96, 64, 23);
    FidelityOptions o;
    o.n_ctx = 96;
    o.n_bins = 3;
    std::string specs;
    for (const std::string& name : kv_scheme_names()) specs += test_spec(name) + ";";
    const FidelityReport r = measure_fidelity(model, tokens, 1, parse_kv_schemes(specs), o);
    ASSERT_EQ(r.schemes.size(), kv_scheme_names().size());
    for (const SchemeFidelity& f : r.schemes) {
        SCOPED_TRACE(f.spec);
        EXPECT_TRUE(std::isfinite(f.all.out_rel_err));
        EXPECT_LT(f.all.out_rel_err, 2.0);
        // Every scheme here but turbo stores the probe's 0/1 values exactly (pq learns them from its
        // first calib - sinks = 30 >= 16 tokens), so the weights are read for all of them. turbo codes
        // values with fixed codebooks after a rotation, which cannot hold the probe patterns.
        if (parse_kv_scheme(f.spec).name == "turbo" && !f.probe_ok) continue;
        ASSERT_TRUE(f.probe_ok) << f.probe_note;
        EXPECT_TRUE(std::isfinite(f.all.score_rel_rmse));
        EXPECT_GE(f.all.attn_kl, -1e-6);
        EXPECT_GE(f.all.score_rel_rmse, r.schemes[0].all.score_rel_rmse);  // f32 (first name) is the floor
    }
}

// bits= chooses m per layer from calibration error of keys and values, so the probe values would
// change the allocation and the bytes; the probe runs pin the main run's m (make_pq_kv_cache with a
// PqAllocation) and the weights are read.
TEST_F(EvalTiny, FidelityReadsTheWeightsOfABitsCache) {
    const std::vector<std::int32_t> tokens = random_tokens(96, 64, 29);
    const FidelityOptions o = fidelity_options(1, 96, 2);
    const std::string spec = "pq:bits=B,calib=48,sinks=2,window=8,refresh=0,wq=f16";
    double reached = 0;
    for (const char* bits : {"4", "5", "6", "8"}) {  // the lowest target this 96-token shape reaches
        std::string s = spec;
        s.replace(s.find('B'), 1, bits);
        try {
            const FidelityReport r = measure_fidelity(model, tokens, 1, parse_kv_schemes("f16;" + s), o);
            SCOPED_TRACE(s);
            const SchemeFidelity& f = r.schemes.at(1);
            ASSERT_TRUE(f.probe_ok) << f.probe_note;
            EXPECT_TRUE(std::isfinite(f.all.score_rel_rmse));
            EXPECT_GT(f.all.score_rel_rmse, r.schemes[0].all.score_rel_rmse);  // coded keys: above f16's error
            EXPECT_GE(f.all.attn_kl, -1e-6);
            reached = std::stod(bits);
            break;
        } catch (const Error& e) {
            ASSERT_NE(std::string(e.what()).find("out of reach"), std::string::npos) << e.what();
        }
    }
    EXPECT_GT(reached, 0) << "no bits= target was reachable on the tiny model";
}

// ---- the command -----------------------------------------------------------------------------------------

namespace {
const std::string kStoriesGguf = test::shared_dir() + "/models/stories260K/stories260K.gguf";
const std::string kValid = test::shared_dir() + "/text/tinystories-valid.txt";
const std::string kSmallRun = "eval -m " + kStoriesGguf + " -f " + kValid + " -c 64 --chunks 2 ";
bool have_matplotlib() {
    return std::system("python3 -c 'import matplotlib' >/dev/null 2>&1") == 0 ||
           std::system("/usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") == 0;
}
}  // namespace

TEST(EvalCli, TableJsonAndCsv) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    AQPIM_REQUIRE_SHARED("text/tinystories-valid.txt");
    const auto t = test::run_cli(kSmallRun + "--kv 'f32'");
    ASSERT_EQ(t.exit_code, 0) << t.output;
    for (const char* want : {"f16 (ref)", "f32", "bits/elem", "PPL", "mean KL", "top-1", "tokens/s", "32.000"})
        EXPECT_NE(t.output.find(want), std::string::npos) << want << "\n" << t.output;

    const auto j = test::run_cli(kSmallRun + "--kv 'f16;f32' --json 2>/dev/null");
    ASSERT_EQ(j.exit_code, 0) << j.output;
    const auto json = nlohmann::json::parse(j.output.substr(j.output.find('{')));
    EXPECT_EQ(json["n_chunks"], 2);
    ASSERT_EQ(json["schemes"].size(), 2u);
    EXPECT_EQ(json["schemes"][0]["spec"], "f16");
    EXPECT_EQ(json["schemes"][0]["mean_kl"], 0.0);

    const auto c = test::run_cli(kSmallRun + "--kv f32 --csv 2>/dev/null");
    ASSERT_EQ(c.exit_code, 0) << c.output;
    const std::string csv = c.output.substr(c.output.find("spec,scheme,reference,"));
    EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 3) << csv;
}

TEST(EvalCli, NeedlesWithATextAreAColumnAtTheChunksContext) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    AQPIM_REQUIRE_SHARED("text/tinystories-valid.txt");
    // One context (the chunk's, 64) x one depth x the 3 target weights: 3 queries per scheme.
    const auto j = test::run_cli(kSmallRun + "--needles --depths 0.5 --kv 'int8:g=8;int4:g=8' --json 2>/dev/null");
    ASSERT_EQ(j.exit_code, 0) << j.output;
    const auto json = nlohmann::json::parse(j.output.substr(j.output.find('{')));
    ASSERT_EQ(json["schemes"].size(), 3u);
    for (const auto& s : json["schemes"]) {
        ASSERT_TRUE(s.contains("needles")) << s.dump();
        EXPECT_EQ(s["needles"]["n_queries"], 3) << s["spec"];
        EXPECT_LE(s["needles"]["n_kept"].get<int>(), 3);
    }
    EXPECT_EQ(json["schemes"][0]["spec"], "f16");
    EXPECT_EQ(json["schemes"][0]["needles"]["n_kept"], 3);  // the reference keeps every needle
    const auto t = test::run_cli(kSmallRun + "--needles --depths 0.5 --kv 'int8:g=8' 2>/dev/null");
    ASSERT_EQ(t.exit_code, 0) << t.output;
    EXPECT_NE(t.output.find("needles %"), std::string::npos) << t.output;
    EXPECT_NE(t.output.find("100.0 (3/3)"), std::string::npos) << t.output;
    EXPECT_NE(t.output.find("queries at 64 tokens"), std::string::npos) << t.output;
    const auto c = test::run_cli(kSmallRun + "--needles --depths 0.5 --kv 'int8:g=8' --csv 2>/dev/null");
    EXPECT_NE(c.output.find(",needles_n_queries,needles_n_kept"), std::string::npos) << c.output;
    const auto no = test::run_cli(kSmallRun + "--kv 'int8:g=8' --csv 2>/dev/null");
    EXPECT_EQ(no.output.find("needles"), std::string::npos) << no.output;  // without --needles: as before
    const auto bad = test::run_cli(kSmallRun + "--needles --contexts 1024 --kv int8:g=8");
    EXPECT_NE(bad.exit_code, 0);
    EXPECT_NE(bad.output.find("--contexts is for --needles alone"), std::string::npos) << bad.output;
}

TEST(EvalCli, GenerateAndFidelityModes) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    AQPIM_REQUIRE_SHARED("text/tinystories-valid.txt");
    const auto g = test::run_cli("eval -m " + kStoriesGguf + " --generate 20 --window 8 -p 'Once upon a time' --kv f32");
    ASSERT_EQ(g.exit_code, 0) << g.output;
    for (const char* want : {"first divergence", "f16 greedy text: Once upon a time", "steps", "0-7", "16-19"})
        EXPECT_NE(g.output.find(want), std::string::npos) << want << "\n" << g.output;
    const auto f = test::run_cli("eval --fidelity --layer 1 --head 2 --bins 2 -m " + kStoriesGguf + " -f " + kValid +
                                 " -c 32 --kv 'f32;f16' --json 2>/dev/null");
    ASSERT_EQ(f.exit_code, 0) << f.output;
    const auto j = nlohmann::json::parse(f.output.substr(f.output.find('{')));
    EXPECT_EQ(j["layer"], 1);
    EXPECT_EQ(j["head"], 2);
    EXPECT_EQ(j["schemes"][1]["bins"].size(), 2u);
}

TEST(EvalCli, BadInputFailsWithOneClearLine) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    AQPIM_REQUIRE_SHARED("text/tinystories-valid.txt");
    const std::pair<std::string, std::string> cases[] = {
        {kSmallRun + "--kv 'f16;int3'", "int3"},
        {kSmallRun + "--kv 'f16;;'", ""},  // empty entries are skipped: runs
        {kSmallRun + "--kv 'f32' --plot out.jpg", "must end in .png or .svg"},
        {kSmallRun + "--kv 'f32' --plot out", "must end in .png or .svg"},
        {kSmallRun + "--kv f32 --json --csv", "excludes"},
        {"eval -m " + kStoriesGguf + " --kv f32", "needs -f"},
        {"eval -m " + kStoriesGguf + " --generate 4 --fidelity", "pick one"},
        {"eval --fidelity --layer 9 -m " + kStoriesGguf + " -f " + kValid + " -c 32", "--layer 9"},
    };
    for (const auto& [args, want] : cases) {
        const auto r = test::run_cli(args);
        if (want.empty()) {
            EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
            continue;
        }
        EXPECT_NE(r.exit_code, 0) << args;
        EXPECT_NE(r.output.find(want), std::string::npos) << args << "\n" << r.output;
        EXPECT_EQ(r.output.find("terminate"), std::string::npos) << args;
        EXPECT_EQ(r.output.find("chunks"), std::string::npos) << "failed only after evaluating: " << args;
    }
}

TEST(EvalCli, PlotWritesAFile) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    AQPIM_REQUIRE_SHARED("text/tinystories-valid.txt");
    if (!have_matplotlib()) GTEST_SKIP() << "python3-matplotlib is not installed (apt-get install python3-matplotlib)";
    const std::string out = test::temp_path("aqpim_eval_plot.png");
    std::filesystem::remove(out);
    const auto r = test::run_cli("eval -m " + kStoriesGguf + " -f " + kValid + " -c 32 --chunks 1 --kv 'f32;f16' --plot " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    ASSERT_TRUE(std::filesystem::exists(out)) << r.output;
    EXPECT_GT(std::filesystem::file_size(out), 1000u);
    std::ifstream f(out, std::ios::binary);
    std::string head(4, '\0');
    f.read(head.data(), 4);
    EXPECT_EQ(head.substr(1, 3), "PNG");
    std::filesystem::remove(out);
}
