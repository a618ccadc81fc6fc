// The logit processing of a request (src/serve/logit_processing.h): each step against
// hand-computed logits.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "serve/json_constraint.h"
#include "serve/logit_processing.h"

namespace aqpim {
namespace {

using serve::LogitProcessing;
constexpr float kDropped = serve::kDroppedLogit;

std::vector<float> processed(const LogitProcessing& p, const std::vector<std::int32_t>& tokens, std::size_t first_generated,
                             std::vector<float> logits, float temperature = 1.0f) {
    serve::apply_logit_processing(p, tokens, first_generated, temperature, logits.data(), int(logits.size()));
    return logits;
}

TEST(LogitProcessing, NothingByDefault) {
    const LogitProcessing p;
    EXPECT_FALSE(p.active());
    EXPECT_EQ(processed(p, {0, 1, 1}, 1, {1, 2, 3, -4}), (std::vector<float>{1, 2, 3, -4}));
    EXPECT_EQ(p.invalid_reason(4), "");
}

TEST(LogitProcessing, BiasThenPenaltiesCountOnlyGeneratedTokens) {
    LogitProcessing p;
    p.logit_bias = {{3, 10.0f}, {0, -1.5f}};
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    ASSERT_TRUE(p.active());
    // prompt 2 2 (not counted), generated 1 1 3
    const auto l = processed(p, {2, 2, 1, 1, 3}, 2, {0, 0, 0, 0});
    EXPECT_FLOAT_EQ(l[0], -1.5f);
    EXPECT_FLOAT_EQ(l[1], -(2 * 0.5f + 0.25f));
    EXPECT_FLOAT_EQ(l[2], 0.0f);
    EXPECT_FLOAT_EQ(l[3], 10.0f - (0.5f + 0.25f));
}

TEST(LogitProcessing, RepetitionPenaltyInItsWindowDividesPositiveAndMultipliesNegative) {
    LogitProcessing p;
    p.repetition_penalty = 2.0f;
    p.repetition_window = 2;  // tokens 1 and 3 (the last two); token 0 is older
    const auto l = processed(p, {0, 1, 3}, 3, {4, 4, 4, -4});
    EXPECT_EQ(l, (std::vector<float>{4, 2, 4, -8}));
    p.repetition_window = -1;  // the whole sequence, prompt included
    EXPECT_EQ(processed(p, {0, 1, 3}, 3, {4, 4, 4, -4}), (std::vector<float>{2, 2, 4, -8}));
    p.repetition_window = 0;
    EXPECT_FALSE(p.active());
}

TEST(LogitProcessing, TopKKeepsTheLargestWithTiesAndMinPScalesWithTemperature) {
    LogitProcessing p;
    p.top_k = 2;
    EXPECT_EQ(processed(p, {}, 0, {1, 5, 3, 3}), (std::vector<float>{kDropped, 5, 3, 3}));
    p.top_k = 0;
    p.min_p = 0.5f;
    // kept: l >= max + T ln(0.5); T = 1: 5 - 0.693 = 4.307; T = 4: 5 - 2.77 = 2.23
    EXPECT_EQ(processed(p, {}, 0, {1, 5, 4.4f, 4.2f}, 1.0f), (std::vector<float>{kDropped, 5, 4.4f, kDropped}));
    EXPECT_EQ(processed(p, {}, 0, {1, 5, 4.4f, 2.5f}, 4.0f), (std::vector<float>{kDropped, 5, 4.4f, 2.5f}));
    EXPECT_EQ(processed(p, {}, 0, {1, 5, 4.4f, 2.5f}, 0.0f), (std::vector<float>{1, 5, 4.4f, 2.5f}));  // greedy
}

TEST(LogitProcessing, LlamaServersOrderTakesTheNucleusAndMinPAtTemperatureOne) {
    LogitProcessing p;
    p.unit_temperature = true;
    p.top_p = 0.7f;
    // ln-probabilities at T = 1 of {ln 4, ln 2, ln 1, ln 1} / 8: 0.5, 0.25, 0.125, 0.125. The
    // nucleus reaching 0.7 is the first two (0.5 < 0.7 <= 0.75), whatever the request's temperature.
    const float a = std::log(4.0f), b = std::log(2.0f);
    for (const float t : {0.5f, 1.0f, 3.0f})
        EXPECT_EQ(processed(p, {}, 0, {0, b, a, 0}, t), (std::vector<float>{kDropped, b, a, kDropped})) << t;
    p.top_p = 0.0f;  // keeps the most likely one
    EXPECT_EQ(processed(p, {}, 0, {0, b, a, 0}), (std::vector<float>{kDropped, kDropped, a, kDropped}));
    p.top_p = 1.0f;
    p.min_p = 0.4f;  // p / p_max >= 0.4 at T = 1: 1, 0.5 kept, 0.25 dropped (at T = 4 all would stay)
    EXPECT_EQ(processed(p, {}, 0, {0, b, a, 0}, 4.0f), (std::vector<float>{kDropped, b, a, kDropped}));
    EXPECT_EQ(processed(p, {}, 0, {0, b, a, 0}, 0.0f), (std::vector<float>{kDropped, b, a, kDropped}));
    // The nucleus is taken over what top_k kept: of {4, 2} alone (2/3, 1/3), 0.6 needs only the
    // first, where over all four (0.5, 0.25, ...) it needs two.
    p = {};
    p.unit_temperature = true;
    p.top_k = 2;
    p.top_p = 0.6f;
    EXPECT_EQ(processed(p, {}, 0, {0, b, a, 0}), (std::vector<float>{kDropped, kDropped, a, kDropped}));
    EXPECT_EQ(p.invalid_reason(4), "");
    p.unit_temperature = false;
    EXPECT_NE(p.invalid_reason(4).find("unit_temperature"), std::string::npos);
}

TEST(LogitProcessing, BannedTokensAreNeverDrawnEvenTheLargest) {
    LogitProcessing p;
    p.banned = {2};
    p.logit_bias = {{2, 100.0f}};
    ASSERT_TRUE(p.active());
    const auto l = processed(p, {}, 0, {0, 1, 9, 3});
    EXPECT_LT(l[2], -1e29f);
    EXPECT_EQ(l[3], 3.0f);
    p.banned = {4};
    EXPECT_NE(p.invalid_reason(4).find("banned token 4"), std::string::npos);
}

/// Token texts for the infill sampler: token i's text is texts[i] (EOS is token 0, no text).
std::shared_ptr<const serve::GuideVocabulary> texts_of(const std::vector<std::string>& texts) {
    return std::make_shared<const serve::GuideVocabulary>(texts, 0);
}

TEST(LogitProcessing, TheInfillSamplerEndsMergesAndThresholdsAsLlamaCpps) {
    LogitProcessing p;
    p.unit_temperature = true;
    // 0: EOS, 1: "ret", 2: "return", 3: "x", 4: "y", 5: "<|file_sep|>" (an end token, no text here)
    p.infill = serve::InfillSampling{texts_of({"", "ret", "return", "x", "y", ""}), {0, 5}};
    ASSERT_EQ(p.invalid_reason(6), "");
    const auto ln = [](double x) { return float(std::log(x)); };
    // Probabilities 0.3 ret, 0.3 return, 0.3 x, 0.05 y, 0.05 EOS (ends 0.05: 3 x 0.05 x 5 = 0.75 < 0.95).
    // "ret" starts "return": of a tie the first keeps both (ret, 0.6); y is below 0.2; then of the
    // 0.95 left, below 1 / (2 texts + 1): x at 0.3 / 0.95 = 0.316 goes, ret at 0.63 stays, and EOS
    // stays (an end token is never thresholded).
    auto l = processed(p, {}, 0, {ln(0.05), ln(0.3), ln(0.3), ln(0.3), ln(0.05), kDropped});
    EXPECT_GT(l[1], kDropped);
    EXPECT_EQ(l[2], kDropped) << "merged into ret";
    EXPECT_EQ(l[3], kDropped);
    EXPECT_EQ(l[4], kDropped);
    EXPECT_GT(l[0], kDropped);
    EXPECT_FLOAT_EQ(l[1], ln(0.3)) << "the draw weighs a kept token by its own logit";
    // The ends likely enough (3 x p_end x n > p_text): only the end tokens are left.
    l = processed(p, {}, 0, {ln(0.2), ln(0.4), kDropped, ln(0.4), kDropped, kDropped});
    EXPECT_EQ(l, (std::vector<float>{ln(0.2), kDropped, kDropped, kDropped, kDropped, kDropped}));
    // Text tokens all below 0.2: the end tokens in the running alone, at their own logits.
    std::vector<float> many(40, 0.0f);  // 39 texts of equal weight: each about 0.025, all below 0.2
    std::vector<std::string> t(40);
    for (std::size_t i = 1; i < 40; ++i) t[i] = "t" + std::to_string(i) + "#";
    LogitProcessing q;
    q.unit_temperature = true;
    q.infill = serve::InfillSampling{texts_of(t), {0}};
    many[0] = -10.0f;
    auto out = processed(q, {}, 0, many);
    EXPECT_EQ(out[0], -10.0f);
    for (std::size_t i = 1; i < 40; ++i) EXPECT_EQ(out[i], kDropped) << i;
    // No end token in the running (banned, or refused by a constraint): llama.cpp would force one;
    // here the tokens stay as they were.
    many[0] = kDropped;
    out = processed(q, {}, 0, many);
    EXPECT_EQ(out, many);
    q.infill->ends.clear();
    EXPECT_NE(q.invalid_reason(40).find("end token"), std::string::npos);
    q.infill->ends = {0};
    q.unit_temperature = false;
    EXPECT_NE(q.invalid_reason(40).find("unit_temperature"), std::string::npos);
}

TEST(LogitProcessing, InvalidFieldsAreNamed) {
    LogitProcessing p;
    p.logit_bias = {{7, 1.0f}};
    EXPECT_NE(p.invalid_reason(4).find("token 7"), std::string::npos);
    p.logit_bias = {{1, 101.0f}};
    EXPECT_NE(p.invalid_reason(4).find("[-100, 100]"), std::string::npos);
    p = {};
    p.min_p = std::nanf("");
    EXPECT_NE(p.invalid_reason(4).find("min_p"), std::string::npos);
    p = {};
    p.repetition_penalty = 0.0f;
    EXPECT_NE(p.invalid_reason(4).find("repetition"), std::string::npos);
    p = {};
    p.frequency_penalty = 3.0f;
    EXPECT_NE(p.invalid_reason(4).find("frequency_penalty"), std::string::npos);
}

}  // namespace
}  // namespace aqpim
