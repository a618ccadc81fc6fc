// Byte-level BPE: pre-tokenizer regexes on tricky strings, a small vocabulary built here (the 256
// byte characters + 14 merges) with hand-derived ids, ignore_merges, special tokens, round trips of
// arbitrary bytes, and a Hugging Face ByteLevel tokenizer.json written by the test.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "aqpim/error.h"
#include "aqpim/gguf.h"
#include "aqpim/tokenizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"
#include "tokenizer/unicode.h"

namespace aqpim {
namespace {

using Words = std::vector<std::string>;

Words split(const std::string& pre, const std::string& text) {
    tok::PreTokenizer p(tok::pre_tokenizer_regexes(pre));
    Words out;
    std::size_t covered = 0;
    for (const auto& [start, len] : p.split(text)) {
        EXPECT_EQ(start, covered);  // the pieces tile the text in order
        covered = start + len;
        out.push_back(text.substr(start, len));
    }
    EXPECT_EQ(covered, text.size());
    return out;
}

// ---- pre-tokenizer regexes ---------------------------------------------------------------------

TEST(TokenizerBpe, Gpt2Split) {
    EXPECT_EQ(split("gpt2", "Hello world"), (Words{"Hello", " world"}));
    EXPECT_EQ(split("gpt2", "I'm sure it's don't"), (Words{"I", "'m", " sure", " it", "'s", " don", "'t"}));
    EXPECT_EQ(split("gpt2", "THEY'RE"), (Words{"THEY", "'", "RE"}));  // contractions are lower-case only
    EXPECT_EQ(split("gpt2", "x 12345 y"), (Words{"x", " 12345", " y"}));
    EXPECT_EQ(split("gpt2", "h\xC3\xA9llo w\xC3\xB6rld \xE6\x97\xA5\xE6\x9C\xAC"),
              (Words{"h\xC3\xA9llo", " w\xC3\xB6rld", " \xE6\x97\xA5\xE6\x9C\xAC"}));  // héllo wörld 日本
    EXPECT_EQ(split("gpt2", "a   b"), (Words{"a", "  ", " b"}));  // the last space joins the word
    EXPECT_EQ(split("gpt2", "a\n\nb"), (Words{"a", "\n", "\n", "b"}));
    EXPECT_EQ(split("gpt2", "end.  "), (Words{"end", ".", "  "}));
    EXPECT_EQ(split("gpt2", "a\tb"), (Words{"a", "\t", "b"}));  // an unmatched stretch is a piece too
}

TEST(TokenizerBpe, Llama3Split) {
    EXPECT_EQ(split("llama3", "Hello world"), (Words{"Hello", " world"}));
    EXPECT_EQ(split("llama-bpe", "THEY'RE I'm"), (Words{"THEY", "'RE", " I", "'m"}));  // any case
    EXPECT_EQ(split("llama3", "12345"), (Words{"123", "45"}));                       // digits in threes
    EXPECT_EQ(split("llama3", "a\n\nb"), (Words{"a", "\n\n", "b"}));                 // newline runs
    EXPECT_EQ(split("llama3", "a   b"), (Words{"a", "  ", " b"}));
    EXPECT_EQ(split("llama3", "x=1;"), (Words{"x", "=", "1", ";"}));
    EXPECT_EQ(split("llama3", "wait...\nok"), (Words{"wait", "...\n", "ok"}));
    EXPECT_EQ(split("llama3", " $hello"), (Words{" $", "hello"}));
    EXPECT_EQ(split("llama3", "(caf\xC3\xA9)"), (Words{"(caf\xC3\xA9", ")"}));  // one non-letter may lead a word
    EXPECT_EQ(split("llama3", "tail  "), (Words{"tail", "  "}));
}

TEST(TokenizerBpe, Qwen2AndDefaultSplit) {
    EXPECT_EQ(split("qwen2", "12345"), (Words{"1", "2", "3", "4", "5"}));  // single digits
    EXPECT_EQ(split("qwen2", "THEY'RE"), (Words{"THEY", "'RE"}));
    EXPECT_EQ(split("default", "Hello, world!"), (Words{"Hello", ",", " world", "!"}));
    EXPECT_EQ(split("default", "12345"), (Words{"123", "45"}));
    EXPECT_THROW(tok::pre_tokenizer_regexes("bloom"), Error);
}

TEST(TokenizerBpe, InvalidUtf8IsSplitNotRejected) {
    const auto w = split("llama3", "a\xFF" "b\xC3");
    std::string joined;
    for (const auto& s : w) joined += s;
    EXPECT_EQ(joined, "a\xFF" "b\xC3");
    EXPECT_GE(w.size(), 2u);
}

// ---- a small byte-level vocabulary -------------------------------------------------------------

// Ids 0..255: the byte characters (id = byte); 256..269: the merges' products; 270: a control
// token; 271: "Ġhello", which no merge produces (reachable only with ignore_merges).
VocabData small_vocab(const std::string& pre = "gpt2") {
    VocabData v;
    v.kind = VocabKind::bpe;
    for (int b = 0; b < 256; ++b) v.tokens.push_back(unicode::byte_to_unicode(std::uint8_t(b)));
    const Words merges = {"Ġ t", "l l", "e ll", "h ell", "hell o", "h e", "Ġt he",
                          "Ġ w", "o r", "Ġw or", "Ġwor l", "Ġworl d", "1 2", "12 3"};
    for (const auto& m : merges) {
        v.merges.push_back(m);
        const auto sp = m.find(' ');
        v.tokens.push_back(m.substr(0, sp) + m.substr(sp + 1));
    }
    v.tokens.push_back("<|endoftext|>");
    v.tokens.push_back("Ġhello");
    v.types.assign(v.tokens.size(), TokenType::normal);
    v.types[270] = TokenType::control;
    v.pre_tokenizer = pre;
    v.bos = v.eos = 270;
    v.add_bos = false;
    v.add_space_prefix = false;
    return v;
}

using Ids = std::vector<std::int32_t>;

TEST(TokenizerBpe, HandDerivedIds) {
    const auto t = Tokenizer::create(small_vocab());
    // "hello": l+l (rank 1), e+ll (2), h+ell (3), hell+o (4) -> 260; " world": Ġ+w, o+r, Ġw+or,
    // Ġwor+l, Ġworl+d -> 267.
    EXPECT_EQ(t->encode("hello world", true), (Ids{260, 267}));  // add_bos false: add_special adds nothing
    // "the": h+e (5) -> [t, he]; " hello" -> [Ġ, hello] (no "Ġ hello" merge).
    EXPECT_EQ(t->encode("the hello", false), (Ids{'t', 261, ' ', 260}));
    EXPECT_EQ(t->encode(" the", false), (Ids{262}));                      // Ġ+t (0), h+e (5), Ġt+he (6)
    EXPECT_EQ(t->encode("123456", false), (Ids{269, '4', '5', '6'}));     // one gpt2 word
    EXPECT_EQ(t->encode("\xC3\xA9", false), (Ids{0xC3, 0xA9}));            // é: its two byte characters
    EXPECT_EQ(t->encode("<|endoftext|>hello", false), (Ids{270, 260}));  // control token split out
    EXPECT_TRUE(t->encode("", false).empty());
}

TEST(TokenizerBpe, PreTokenizerChangesTheWords) {
    EXPECT_EQ(Tokenizer::create(small_vocab("llama3"))->encode("123456", false), (Ids{269, '4', '5', '6'}));
    EXPECT_EQ(Tokenizer::create(small_vocab("qwen2"))->encode("123456", false), (Ids{'1', '2', '3', '4', '5', '6'}));
}

TEST(TokenizerBpe, IgnoreMergesTakesWholeWords) {
    VocabData v = small_vocab("llama3");
    EXPECT_EQ(Tokenizer::create(v)->encode(" hello", false), (Ids{' ', 260}));
    v.ignore_merges = true;
    EXPECT_EQ(Tokenizer::create(v)->encode(" hello", false), (Ids{271}));
}

TEST(TokenizerBpe, AddBosAndEos) {
    VocabData v = small_vocab();
    v.add_bos = true;
    v.add_eos = true;
    const auto t = Tokenizer::create(v);
    EXPECT_EQ(t->encode("hello", true), (Ids{270, 260, 270}));
    EXPECT_EQ(t->encode("hello", false), (Ids{260}));
}

TEST(TokenizerBpe, PiecesAreBytes) {
    const auto t = Tokenizer::create(small_vocab());
    EXPECT_EQ(t->piece(-1, 267), " world");
    EXPECT_EQ(t->piece(270, 267), " world");  // no dummy prefix to drop in byte-level BPE
    EXPECT_EQ(t->piece(-1, 0xC3), "\xC3");
    EXPECT_EQ(t->piece(-1, 270), "");
    EXPECT_EQ(t->decode({0xC3, 0xA9, 267}), "\xC3\xA9 world");
}

TEST(TokenizerBpe, RoundTripsArbitraryBytes) {
    AQPIM_REQUIRE_SHARED("reference/tokens");
    std::mt19937 rng(7);
    for (const char* pre : {"gpt2", "llama3", "qwen2", "default"}) {
        const auto t = Tokenizer::create(small_vocab(pre));
        for (int trial = 0; trial < 50; ++trial) {
            std::string s(std::size_t(rng() % 64), '\0');
            for (auto& c : s) c = char(rng() % 4 == 0 ? rng() % 256 : " helowrd12\n'"[rng() % 12]);
            EXPECT_EQ(t->decode(t->encode(s, false)), s) << pre;
        }
        // The probe's "<|endoftext|>" is this vocabulary's control token, which prints nothing.
        std::string text = test::read_text(test::tokens_dir() + "/probe.txt");
        const auto ids = t->encode(text, false);
        EXPECT_EQ(std::count(ids.begin(), ids.end(), 270), 1);
        text.erase(text.find("<|endoftext|>"), 13);
        EXPECT_EQ(t->decode(ids), text);
    }
}

TEST(TokenizerBpe, BadVocabulariesAreErrors) {
    VocabData v = small_vocab();
    v.merges.push_back("nope x");
    EXPECT_THROW(Tokenizer::create(v), Error);  // a merge part that is not a token
    v = small_vocab();
    v.merges.push_back("h o");
    EXPECT_THROW(Tokenizer::create(v), Error);  // a merge result that is not a token
    v = small_vocab();
    v.merges.push_back("hello");
    EXPECT_THROW(Tokenizer::create(v), Error);  // not "left right"
    v = small_vocab("bloom");
    EXPECT_THROW(Tokenizer::create(v), Error);  // unknown pre-tokenizer
    v = small_vocab();
    v.pre_regex = "(unclosed";
    EXPECT_THROW(Tokenizer::create(v), Error);
    v = small_vocab();
    v.bos = 272;
    EXPECT_THROW(Tokenizer::create(v), Error);
    v = small_vocab();
    v.types.pop_back();
    EXPECT_THROW(Tokenizer::create(v), Error);
}

// ---- Hugging Face ByteLevel tokenizer.json -----------------------------------------------------

std::string write_hf_bytelevel(const std::string& dir, const nlohmann::json& pre_tokenizer, bool ignore_merges) {
    const VocabData v = small_vocab();
    nlohmann::json vocab = nlohmann::json::object();
    for (std::size_t i = 0; i < 270; ++i) vocab[v.tokens[i]] = i;
    vocab[v.tokens[271]] = 271;
    nlohmann::json merges = nlohmann::json::array();
    for (const auto& m : v.merges) merges.push_back(nlohmann::json::array({m.substr(0, m.find(' ')), m.substr(m.find(' ') + 1)}));
    nlohmann::json j = {
        {"version", "1.0"},
        {"added_tokens", {{{"id", 270}, {"content", "<|endoftext|>"}, {"special", true}}}},
        {"normalizer", nullptr},
        {"pre_tokenizer", pre_tokenizer},
        {"post_processor", {{"type", "ByteLevel"}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"ignore_merges", ignore_merges}}},
    };
    const std::string path = dir + "/tokenizer.json";
    test::write_bytes(path, j.dump());
    test::write_bytes(dir + "/tokenizer_config.json",
                      R"({"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "add_bos_token": true})");
    return path;
}

TEST(TokenizerBpe, HfByteLevelJsonWithLlama3Split) {
    const std::string dir = test::temp_dir("hf_bytelevel");
    const nlohmann::json pre = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", tok::hf_pre_tokenizer_pattern("llama3")}}}, {"behavior", "Isolated"},
           {"invert", false}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
    const VocabData v = vocab_from_hf_tokenizer_json(write_hf_bytelevel(dir, pre, true));
    EXPECT_EQ(v.kind, VocabKind::bpe);
    EXPECT_EQ(v.pre_tokenizer, "llama3");
    EXPECT_TRUE(v.pre_regex.empty());
    EXPECT_TRUE(v.ignore_merges);
    EXPECT_EQ(v.types[270], TokenType::control);
    EXPECT_EQ(v.bos, 270);
    EXPECT_TRUE(v.add_bos);
    const auto t = Tokenizer::create(v);
    EXPECT_EQ(t->encode("123456 hello", true), (Ids{270, 269, '4', '5', '6', 271}));
}

TEST(TokenizerBpe, HfByteLevelJsonWithCustomRegexAndPlainByteLevel) {
    const std::string dir = test::temp_dir("hf_bytelevel_custom");
    const nlohmann::json custom = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", "\\p{N}|[^\\p{N}]+"}}}, {"behavior", "Isolated"}, {"invert", false}},
          {{"type", "ByteLevel"}, {"use_regex", false}}}}};
    VocabData v = vocab_from_hf_tokenizer_json(write_hf_bytelevel(dir, custom, false));
    EXPECT_EQ(v.pre_regex, "\\p{N}|[^\\p{N}]+");
    EXPECT_EQ(Tokenizer::create(v)->encode("12", false), (Ids{'1', '2'}));
    EXPECT_THROW(
        {
            GgufWriter w;
            write_vocab_gguf(w, v);
        },
        Error);  // llama.cpp knows pre-tokenizers by name only

    const nlohmann::json plain = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
    v = vocab_from_hf_tokenizer_json(write_hf_bytelevel(dir, plain, false));
    EXPECT_EQ(v.pre_tokenizer, "gpt2");
    EXPECT_EQ(Tokenizer::create(v)->encode("hello world", false), (Ids{260, 267}));
}

}  // namespace
}  // namespace aqpim
