// Golden results on the shared real models: llama2.c's greedy text, llama.cpp's perplexity, and a
// PyTorch-checked greedy continuation of austen-13m, from every file format that holds them.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "aqpim/generate.h"
#include "aqpim/perplexity.h"
#include "support/cli.h"

using namespace aqpim;

namespace {

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

GenerateResult greedy(const LoadedModel& m, const std::vector<std::int32_t>& prompt, int n) {
    Transformer t(m.weights);
    auto cache = make_dense_kv_cache(t.kv_shape(), DenseKvType::f32);
    GenerateOptions o;
    o.n_predict = n;
    o.sampler.temperature = 0.0f;
    return generate(t, *m.tokenizer, *cache, prompt, o);
}

const std::string kStories = test::shared_dir() + "/models/stories260K/";
const std::string kAusten = test::shared_dir() + "/models/austen-13m/";

}  // namespace

TEST(Golden, Stories260KGreedyTextMatchesLlama2c) {
    AQPIM_REQUIRE_SHARED("reference/stories260K-greedy-200.txt");
    AQPIM_REQUIRE_SHARED("models/stories260K/");
    const std::string want = read_file(test::shared_dir() + "/reference/stories260K-greedy-200.txt");
    for (const std::string& path : {kStories + "stories260K.bin", kStories + "stories260K.gguf"}) {
        const LoadedModel m = load_model(path);
        ASSERT_TRUE(m.tokenizer) << path;
        // llama2.c's `run -n 200` forwards positions 0..199 and prints the 200 tokens they predict.
        const GenerateResult r = greedy(m, {m.tokenizer->bos()}, 200);
        EXPECT_EQ(r.generated.size(), 200u) << path;
        EXPECT_EQ(r.text + "\n", want) << path;
    }
}

TEST(Golden, Stories260KPerplexityMatchesLlamaCpp) {
    AQPIM_REQUIRE_SHARED("text/tinystories-valid.txt");
    AQPIM_REQUIRE_SHARED("models/stories260K/");
    const LoadedModel m = load_model(kStories + "stories260K.gguf");
    Transformer t(m.weights);
    const std::vector<std::int32_t> ids =
        m.tokenizer->encode(read_file(test::shared_dir() + "/text/tinystories-valid.txt"), true);
    PerplexityOptions o;
    o.n_ctx = 256;
    for (DenseKvType type : {DenseKvType::f32, DenseKvType::f16}) {
        const PerplexityResult r = perplexity(
            t, ids, m.tokenizer->bos(), [&](const KvShape& s) { return make_dense_kv_cache(s, type); }, o);
        EXPECT_EQ(r.n_chunks, 60);
        EXPECT_EQ(r.n_scored, 60 * 127);
        EXPECT_NEAR(r.ppl, 6.2132, 6.2132 * 1e-3);
        EXPECT_NEAR(r.ppl_error, 0.157, 0.002);
    }
}

TEST(Golden, Austen13mGreedyMatchesPyTorchFromGgufAndSafetensors) {
    AQPIM_REQUIRE_SHARED("reference/austen-13m-prompt0-greedy.json");
    AQPIM_REQUIRE_SHARED("models/austen-13m/");
    const nlohmann::json ref = nlohmann::json::parse(read_file(test::shared_dir() + "/reference/austen-13m-prompt0-greedy.json"));
    const auto input = ref["input_ids"].get<std::vector<std::int32_t>>();
    const auto want = ref["greedy_ids"].get<std::vector<std::int32_t>>();
    const auto top1 = ref["top1_first8"].get<std::vector<std::int32_t>>();
    for (const std::string& path : {kAusten + "austen-13m-f16.gguf", kAusten}) {
        const LoadedModel m = load_model(path);
        ASSERT_TRUE(m.tokenizer) << path;
        EXPECT_EQ(m.tokenizer->encode(ref["prompt"].get<std::string>(), true), input) << path;
        const GenerateResult r = greedy(m, input, int(want.size()));
        EXPECT_EQ(r.generated, want) << path;
        EXPECT_EQ(r.text, ref["greedy_text"].get<std::string>()) << path;

        Transformer t(m.weights);
        auto cache = make_dense_kv_cache(t.kv_shape(), DenseKvType::f32);
        cache->add_sequence(0);
        std::vector<float> logits;
        const std::vector<std::int32_t> first8(input.begin(), input.begin() + 8);
        const BatchSequence s{0, first8, true};
        t.forward({&s, 1}, *cache, logits);
        for (int i = 0; i < 8; ++i) EXPECT_EQ(argmax(logits.data() + i * 4096, 4096), top1[i]) << path << " pos " << i;
    }
}

TEST(Golden, Austen13mPerplexityMatchesLlamaCpp) {
    AQPIM_REQUIRE_SHARED("reference/tokens/northanger-first64KB.txt");
    AQPIM_REQUIRE_SHARED("models/austen-13m/");
    const LoadedModel m = load_model(kAusten + "austen-13m-f16.gguf");
    Transformer t(m.weights);
    const std::vector<std::int32_t> ids =
        m.tokenizer->encode(read_file(test::shared_dir() + "/reference/tokens/northanger-first64KB.txt"), true);
    PerplexityOptions o;
    o.n_ctx = 1024;
    const PerplexityResult r = perplexity(
        t, ids, m.tokenizer->bos(), [](const KvShape& s) { return make_dense_kv_cache(s, DenseKvType::f16); }, o);
    EXPECT_NEAR(r.ppl, 51.2965, 51.2965 * 1e-3);
}
