// SentencePiece-style tokenizer: golden ids from llama.cpp (stories260K via tok512.bin and via the
// GGUF, austen-13m via tokenizer.model and via the GGUF), special-token splitting, pieces, round
// trips and a long-text bound.

#include <gtest/gtest.h>

#include <ctime>

#include "aqpim/error.h"
#include "aqpim/gguf.h"
#include "aqpim/kv_capture.h"
#include "aqpim/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace aqpim {
namespace {

using test::read_text;

std::shared_ptr<const Tokenizer> stories_llama2c() {
    static const auto t = Tokenizer::create(vocab_from_llama2c(test::stories_tok(), 512));
    return t;
}
std::shared_ptr<const Tokenizer> stories_gguf() {
    static const auto t = Tokenizer::create(vocab_from_gguf(GgufFile(test::stories_gguf())));
    return t;
}
std::shared_ptr<const Tokenizer> austen_spm() {
    static const auto t = Tokenizer::create(vocab_from_sentencepiece_model(test::austen_model()));
    return t;
}
std::shared_ptr<const Tokenizer> austen_gguf() {
    static const auto t = Tokenizer::create(vocab_from_gguf(GgufFile(test::austen_gguf())));
    return t;
}

// ---- golden ids --------------------------------------------------------------------------------

TEST(TokenizerSpm, StoriesSampleMatchesLlamaCpp) {
    AQPIM_REQUIRE_SHARED("models/stories260K/tok512.bin");
    AQPIM_REQUIRE_SHARED("text/tinystories-sample.txt");
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    AQPIM_REQUIRE_SHARED("reference/tokens");
    const std::string text = read_text(test::shared_dir() + "/text/tinystories-sample.txt");
    const auto want = read_token_ids(test::tokens_dir() + "/stories260K.tinystories-sample.ids");
    ASSERT_GT(want.size(), 100u);
    EXPECT_EQ(stories_llama2c()->encode(text, true), want);
    EXPECT_EQ(stories_gguf()->encode(text, true), want);
}

TEST(TokenizerSpm, StoriesProbeMatchesLlamaCpp) {
    AQPIM_REQUIRE_SHARED("models/stories260K/tok512.bin");
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    AQPIM_REQUIRE_SHARED("reference/tokens");
    // probe.txt: Unicode (Ü, ï, ö, é, 日本語 — bytes where the 512-token vocabulary lacks them), a tab,
    // double spaces, a newline, "<|endoftext|>" (plain text for this vocabulary) and digits. The file
    // has no trailing newline, and the ids end in 語's bytes (no <0x0A>).
    const std::string text = read_text(test::tokens_dir() + "/probe.txt");
    ASSERT_FALSE(text.empty());
    EXPECT_NE(text.back(), '\n');
    const auto want = read_token_ids(test::tokens_dir() + "/stories260K.probe.ids");
    ASSERT_EQ(want.front(), 1);
    EXPECT_NE(want.back(), 13);
    EXPECT_EQ(stories_llama2c()->encode(text, true), want);
    EXPECT_EQ(stories_gguf()->encode(text, true), want);
}

TEST(TokenizerSpm, AustenMatchesLlamaCppAndSentencePiece) {
    AQPIM_REQUIRE_SHARED("models/austen-13m/austen-13m-f16.gguf");
    AQPIM_REQUIRE_SHARED("reference/tokens");
    const std::string text = read_text(test::tokens_dir() + "/northanger-first64KB.txt");
    const auto want = read_token_ids(test::tokens_dir() + "/austen-13m.northanger-first64KB.ids");
    ASSERT_GT(want.size(), 10000u);
    EXPECT_EQ(austen_spm()->encode(text, false), want);
    EXPECT_EQ(austen_gguf()->encode(text, false), want);
    // With BOS: the same ids after <s> = 1.
    const auto with_bos = austen_spm()->encode(text.substr(0, 2000), true);
    ASSERT_FALSE(with_bos.empty());
    EXPECT_EQ(with_bos.front(), 1);
}

TEST(TokenizerSpm, Llama2cAndGgufVocabulariesAreTheSame) {
    AQPIM_REQUIRE_SHARED("models/stories260K/tok512.bin");
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    const VocabData a = vocab_from_llama2c(test::stories_tok(), 512);
    const VocabData b = vocab_from_gguf(GgufFile(test::stories_gguf()));
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.scores, b.scores);
    EXPECT_EQ(a.types, b.types);
    EXPECT_EQ(std::tie(a.bos, a.eos, a.unk, a.add_bos, a.add_eos, a.add_space_prefix),
              std::tie(b.bos, b.eos, b.unk, b.add_bos, b.add_eos, b.add_space_prefix));
    EXPECT_EQ(b.pad, -1);  // padding_token_id 0xFFFFFFFF in the file: none
}

TEST(TokenizerSpm, SentencePieceAndGgufVocabulariesAreTheSame) {
    AQPIM_REQUIRE_SHARED("models/austen-13m/tokenizer.model");
    AQPIM_REQUIRE_SHARED("models/austen-13m/austen-13m-f16.gguf");
    // tokenizer_config.json beside tokenizer.model is applied as llama.cpp's converter does: its
    // added_tokens_decoder makes <unk>, <s>, </s> control tokens with score -1000.
    const VocabData a = vocab_from_sentencepiece_model(test::austen_model());
    const VocabData b = vocab_from_gguf(GgufFile(test::austen_gguf()));
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.scores, b.scores);
    EXPECT_EQ(a.types, b.types);
    EXPECT_EQ(std::tie(a.bos, a.eos, a.unk, a.add_bos, a.add_eos, a.add_space_prefix),
              std::tie(b.bos, b.eos, b.unk, b.add_bos, b.add_eos, b.add_space_prefix));
    EXPECT_EQ(a.types[0], TokenType::control);
    EXPECT_EQ(a.scores[0], -1000.0f);
    EXPECT_EQ(a.types[5], TokenType::byte);
}

// ---- hand-checked behaviour --------------------------------------------------------------------

TEST(TokenizerSpm, HandCheckedIds) {
    AQPIM_REQUIRE_SHARED("models/stories260K/tok512.bin");
    const auto t = stories_llama2c();
    // "Hello": dummy prefix, then "▁He" (346) "ll" (306) "o" (414), as the probe's first word.
    EXPECT_EQ(t->encode("Hello", true), (std::vector<std::int32_t>{1, 346, 306, 414}));
    EXPECT_EQ(t->encode("Hello", false), (std::vector<std::int32_t>{346, 306, 414}));
    EXPECT_EQ(t->encode("", true), (std::vector<std::int32_t>{1}));
    EXPECT_TRUE(t->encode("", false).empty());
    // A character outside the vocabulary becomes its UTF-8 bytes: "語" = E8 AA 9E -> <0xE8> <0xAA> <0x9E>
    // (byte b is token b + 3); the leading "▁" stays a token of its own (410).
    EXPECT_EQ(t->encode("語", false), (std::vector<std::int32_t>{410, 0xE8 + 3, 0xAA + 3, 0x9E + 3}));
}

TEST(TokenizerSpm, SpecialTokenTextsAreSplitOut) {
    AQPIM_REQUIRE_SHARED("models/stories260K/tok512.bin");
    const auto t = stories_llama2c();
    const auto hello = t->encode("Hello", false);
    // "<s>" and "</s>" in the text are the control tokens 1 and 2; the text after a special token
    // gets the dummy prefix again (llama.cpp's is_prev_special).
    std::vector<std::int32_t> want{1};
    want.insert(want.end(), hello.begin(), hello.end());
    want.push_back(2);
    want.insert(want.end(), hello.begin(), hello.end());
    EXPECT_EQ(t->encode("<s>Hello</s>Hello", false), want);
    // <unk> (type unknown) is special as well.
    EXPECT_EQ(t->encode("<unk>", false), (std::vector<std::int32_t>{0}));
    // Pieces of a partial special text are ordinary text.
    const auto partial = t->encode("<s", false);
    EXPECT_EQ(std::count(partial.begin(), partial.end(), 1), 0);
}

TEST(TokenizerSpm, PiecesFollowLlama2c) {
    AQPIM_REQUIRE_SHARED("models/stories260K/tok512.bin");
    const auto t = stories_llama2c();
    const std::int32_t once = t->encode("Once", false).at(0);
    EXPECT_EQ(t->vocab().tokens[std::size_t(once)], "\xE2\x96\x81Once");
    EXPECT_EQ(t->piece(1, once), "Once");        // after BOS: the leading space is dropped
    EXPECT_EQ(t->piece(once, once), " Once");     // elsewhere it is printed
    EXPECT_EQ(t->piece(once, 13), "\n");          // <0x0A> -> the raw byte
    EXPECT_EQ(t->piece(once, 0xE8 + 3), "\xE8");
    EXPECT_EQ(t->piece(once, 1), "");             // control tokens print nothing
    EXPECT_EQ(t->piece(once, 2), "");
    EXPECT_THROW(t->piece(once, 512), Error);
    EXPECT_THROW(t->piece(once, -1), Error);
}

TEST(TokenizerSpm, GreedyReferenceTextRoundTrips) {
    AQPIM_REQUIRE_SHARED("models/stories260K/tok512.bin");
    AQPIM_REQUIRE_SHARED("reference/stories260K-greedy-200.txt");
    // llama2.c's greedy output (piece by piece after BOS) re-encodes and decodes to itself.
    std::string text = read_text(test::shared_dir() + "/reference/stories260K-greedy-200.txt");
    ASSERT_FALSE(text.empty());
    const auto ids = stories_llama2c()->encode(text, true);
    EXPECT_EQ(stories_llama2c()->decode(ids), text);
}

TEST(TokenizerSpm, RoundTrips) {
    AQPIM_REQUIRE_SHARED("text/tinystories-sample.txt");
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    AQPIM_REQUIRE_SHARED("models/austen-13m/austen-13m-f16.gguf");
    AQPIM_REQUIRE_SHARED("reference/tokens");
    const std::vector<std::string> texts = {
        read_text(test::shared_dir() + "/text/tinystories-sample.txt"),
        read_text(test::tokens_dir() + "/probe.txt"),
        read_text(test::tokens_dir() + "/northanger-first64KB.txt"),
        " leading space",
        "  two leading spaces and trailing  ",
        "\n\nnewlines\r\n\ttabs",
        "émoji 🙂 and 中文",
        "user <s> mid </s> text",  // checked separately below
    };
    for (const auto& t : {stories_llama2c(), stories_gguf(), austen_spm(), austen_gguf()}) {
        for (std::size_t i = 0; i + 1 < texts.size(); ++i) {
            for (const bool bos : {false, true}) {
                EXPECT_EQ(t->decode(t->encode(texts[i], bos)), texts[i]) << "text " << i << " bos " << bos;
            }
        }
        // Control tokens print nothing; the spaces around them stay (the dummy prefix added after
        // each one is dropped again).
        EXPECT_EQ(t->decode(t->encode(texts.back(), true)), "user  mid  text");
    }
}

TEST(TokenizerSpm, LongTextScalesAsNLogN) {
    AQPIM_REQUIRE_SHARED("text/wikitext-2-test.raw");
    // 1.3 MB as one fragment: the merge queue is O(n log n) (llama.cpp runs SPM on the whole text).
    // Judged by the ratio of CPU times of the whole text and of its first eighth, not by an absolute
    // limit, so that a slow machine or a sanitizer build (which slows both alike) cannot fail it:
    // O(n log n) gives about 9x, O(n^2) 64x.
    const std::string text = read_text(test::shared_dir() + "/text/wikitext-2-test.raw");
    ASSERT_GT(text.size(), 1'000'000u);
    const std::string eighth = text.substr(0, text.size() / 8);
    auto cpu_seconds = [] {  // of this thread, so that another process does not count
        timespec ts{};
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
    };
    const auto& spm = austen_spm();
    spm->encode(eighth, true);  // warm-up, so that first-touch costs fall on neither timing
    double t0 = cpu_seconds();
    const auto eighth_ids = spm->encode(eighth, true);
    const double s_eighth = cpu_seconds() - t0;
    t0 = cpu_seconds();
    const auto ids = spm->encode(text, true);
    const double s_all = cpu_seconds() - t0;
    EXPECT_GT(ids.size(), text.size() / 8);
    EXPECT_GT(ids.size(), 7 * eighth_ids.size());
    EXPECT_LT(s_all, 24.0 * s_eighth) << "the whole text took " << s_all << " s of CPU, its first eighth "
                                      << s_eighth << " s: worse than n log n";
    EXPECT_EQ(spm->decode(ids), text);
    RecordProperty("encode_seconds", std::to_string(s_all));
}

}  // namespace
}  // namespace aqpim
