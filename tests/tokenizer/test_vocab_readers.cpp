// Vocabulary readers: Hugging Face tokenizer.json (TinyStories-656K), GGUF write/read round trips,
// and hostile inputs for every reader (truncations at many offsets, absurd lengths, bad JSON,
// protobuf lengths past the end, ids out of range): aqpim::Error, never a crash.

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>

#include "aqpim/error.h"
#include "aqpim/gguf.h"
#include "aqpim/tokenizer.h"
#include "tokenizer/tokenizer_test_util.h"

namespace aqpim {
namespace {

using Ids = std::vector<std::int32_t>;
using test::read_text;
using test::write_bytes;

// ---- Hugging Face tokenizer.json: TinyStories-656K -----------------------------------------------

TEST(VocabHfJson, TinyStoriesVocabulary) {
    AQPIM_REQUIRE_SHARED("models/tinystories-656k/tokenizer.json");
    const VocabData v = vocab_from_hf_tokenizer_json(test::tinystories_json());
    EXPECT_EQ(v.kind, VocabKind::spm);
    ASSERT_EQ(v.tokens.size(), 2048u);
    EXPECT_EQ(v.merges.size(), 1967u);
    EXPECT_EQ(v.tokens[80], "\xE2\x96\x81");
    EXPECT_EQ(std::tie(v.unk, v.bos, v.eos, v.pad), std::tie(v.unk, v.bos, v.eos, v.unk));  // pad_token is <unk>
    EXPECT_EQ(v.unk, 0);
    EXPECT_EQ(v.bos, 1);  // <|start_story|>, from tokenizer_config.json
    EXPECT_EQ(v.eos, 2);  // <|end_story|>
    EXPECT_TRUE(v.add_bos);
    EXPECT_FALSE(v.add_eos);
    EXPECT_TRUE(v.add_space_prefix);  // the Prepend "▁" normalizer
    EXPECT_EQ(v.types[0], TokenType::unknown);
    EXPECT_EQ(v.types[1], TokenType::control);
    EXPECT_EQ(v.types[3], TokenType::normal);  // "\n"
}

TEST(VocabHfJson, TinyStoriesHandCheckedIds) {
    AQPIM_REQUIRE_SHARED("models/tinystories-656k/tokenizer.json");
    const auto t = Tokenizer::create(vocab_from_hf_tokenizer_json(test::tinystories_json()));
    // Hugging Face merges by rank over the whole normalised text ("▁Once▁upon..."): "e ▁" is rank 0,
    // "O n" 66, "c e▁" 120; there is no "▁O" token, so the dummy "▁" (80) stays alone. Pieces:
    // ▁ | On | ce▁ | upon▁a▁tim | e,▁ | there▁was▁a▁ | little▁girl▁named▁ | Lily | .
    EXPECT_EQ(t->encode("Once upon a time, there was a little girl named Lily.", true),
              (Ids{1, 80, 147, 201, 282, 215, 286, 598, 629, 10}));
    EXPECT_EQ(t->encode("Tom and Sue", false), (Ids{80, 875, 1066}));
    // The vocabulary has no <0xXX> tokens: a character outside it is one UNK.
    EXPECT_EQ(t->encode("Hi \xE6\x97\xA5", false), (Ids{80, 1158, 80, 0}));
    EXPECT_EQ(t->encode("<|end_story|>", false), (Ids{2}));
}

std::string without(std::string text, const std::vector<std::string>& drop) {
    for (const auto& d : drop) {
        for (std::size_t at; (at = text.find(d)) != std::string::npos;) text.erase(at, d.size());
    }
    return text;
}

TEST(VocabHfJson, TinyStoriesRoundTrips) {
    AQPIM_REQUIRE_SHARED("text/tinystories-sample.txt");
    AQPIM_REQUIRE_SHARED("text/tinystories-valid.txt");
    AQPIM_REQUIRE_SHARED("models/tinystories-656k/tokenizer.json");
    // Round trips up to what this vocabulary cannot hold (it has no byte tokens): “ and ” in the
    // sample, "\r" of some CRLF lines in tinystories-valid.txt are UNK, which prints nothing.
    const auto t = Tokenizer::create(vocab_from_hf_tokenizer_json(test::tinystories_json()));
    const std::string sample = read_text(test::shared_dir() + "/text/tinystories-sample.txt");
    const auto ids = t->encode(sample, true);
    EXPECT_EQ(ids.front(), 1);
    const std::string sample_want = without(sample, {"\xE2\x80\x9C", "\xE2\x80\x9D"});
    ASSERT_LT(sample_want.size(), sample.size());
    EXPECT_EQ(t->decode(ids), sample_want);

    const std::string valid = read_text(test::shared_dir() + "/text/tinystories-valid.txt");
    const auto vids = t->encode(valid, false);
    EXPECT_EQ(std::count(vids.begin(), vids.end(), 0), std::count(valid.begin(), valid.end(), '\r'));
    EXPECT_EQ(t->decode(vids), without(valid, {"\r"}));
}

std::string hf_json(const std::string& model_extra, const std::string& top_extra = "") {
    return R"({"normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
               {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
             "model": {"type": "BPE", "vocab": {"<unk>": 0, "a": 1, "b": 2, "ab": 3, "▁": 4})" +
           model_extra + "}" + top_extra + "}";
}

TEST(VocabHfJson, BadFilesAreErrors) {
    AQPIM_REQUIRE_SHARED("models/tinystories-656k/tokenizer.json");
    const std::string dir = test::temp_dir("hf_bad");
    const std::string path = dir + "/tokenizer.json";
    auto load = [&](const std::string& text) {
        write_bytes(path, text);
        return vocab_from_hf_tokenizer_json(path);
    };
    // The well-formed base case.
    const VocabData ok = load(hf_json(R"(, "merges": ["a b"], "unk_token": "<unk>")"));
    EXPECT_EQ(Tokenizer::create(ok)->encode("ab ba", false), (Ids{4, 3, 4, 2, 1}));

    EXPECT_THROW(vocab_from_hf_tokenizer_json(dir + "/missing.json"), Error);
    const std::string full = read_text(test::tinystories_json());
    for (std::size_t cut : {std::size_t(0), std::size_t(1), std::size_t(100), full.size() / 2, full.size() - 2}) {
        EXPECT_THROW(load(full.substr(0, cut)), Error) << "cut at " << cut;
    }
    EXPECT_THROW(load("[1, 2, 3]"), Error);
    EXPECT_THROW(load(R"({"model": 3})"), Error);
    EXPECT_THROW(load(R"({"model": {"type": "Unigram", "vocab": []}})"), Error);
    EXPECT_THROW(load(hf_json(R"(, "merges": ["a c"])")), Error);        // c is not a token
    EXPECT_THROW(load(hf_json(R"(, "merges": ["b a"])")), Error);        // "ba" is not a token
    EXPECT_THROW(load(hf_json(R"(, "merges": ["ab"])")), Error);         // not "left right"
    EXPECT_THROW(load(hf_json(R"(, "merges": [["a"]])")), Error);
    EXPECT_THROW(load(hf_json(R"(, "merges": [], "unk_token": "<nope>")")), Error);
    EXPECT_THROW(load(hf_json(R"(, "merges": 5)")), Error);
    EXPECT_THROW(load(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 2}, "merges": []},
                          "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}})"),
                 Error);  // ids not dense
    EXPECT_THROW(load(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": -1}, "merges": []}})"), Error);
    EXPECT_THROW(load(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})"), Error);  // no ▁ / ByteLevel
    EXPECT_THROW(load(hf_json(R"(, "merges": [])", R"(, "added_tokens": [{"id": 1, "content": "zz"}])")),
                 Error);  // id 1 is both "a" and "zz"
    EXPECT_THROW(load(hf_json(R"(, "merges": [])", R"(, "added_tokens": [{"id": 99999999, "content": "zz"}])")),
                 Error);
    EXPECT_THROW(load(hf_json(R"(, "merges": [])", R"(, "added_tokens": [{"id": 5, "content": "z", "special": "yes"}])")),
                 Error);  // a field of the wrong JSON type
    EXPECT_THROW(load(hf_json(R"(, "merges": [])", R"(, "pre_tokenizer": {"type": "Metaspace", "replacement": 7})")),
                 Error);
    EXPECT_THROW(load(R"({"model": {"type": 5, "vocab": {"a": 0}, "merges": []}})"), Error);  // type not a string
    EXPECT_THROW(load(hf_json(R"(, "merges": [])",
                              R"(, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": ""}, "behavior": "Isolated"})")),
                 Error);  // an empty pattern
    write_bytes(dir + "/tokenizer_config.json", R"({"bos_token": 5})");  // neither text nor {"content": text}
    EXPECT_THROW(load(hf_json(R"(, "merges": [])")), Error);
    write_bytes(dir + "/tokenizer_config.json", R"({"bos_token": null})");  // null: absent
    EXPECT_NO_THROW(load(hf_json(R"(, "merges": [])")));
    write_bytes(dir + "/tokenizer_config.json", R"({"bos_token": "<s>"})");  // not a token
    EXPECT_THROW(load(hf_json(R"(, "merges": [])")), Error);
    write_bytes(dir + "/tokenizer_config.json", R"({"add_bos_token": "yes"})");
    EXPECT_THROW(load(hf_json(R"(, "merges": [])")), Error);
    write_bytes(dir + "/tokenizer_config.json", "{broken");
    EXPECT_THROW(load(hf_json(R"(, "merges": [])")), Error);
}

// ---- GGUF round trips and bad vocabularies --------------------------------------------------------

VocabData write_and_read(const VocabData& v, const std::string& name) {
    const std::string path = test::temp_dir("gguf_" + name) + "/vocab.gguf";
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    write_vocab_gguf(w, v);
    w.write(path);
    return vocab_from_gguf(GgufFile(path));
}

void expect_same(const VocabData& a, const VocabData& b) {
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.scores, b.scores);
    EXPECT_EQ(a.types, b.types);
    EXPECT_EQ(a.merges, b.merges);
    EXPECT_EQ(std::tie(a.bos, a.eos, a.unk, a.pad, a.add_bos, a.add_eos, a.add_space_prefix),
              std::tie(b.bos, b.eos, b.unk, b.pad, b.add_bos, b.add_eos, b.add_space_prefix));
}

TEST(VocabGguf, RoundTripsEveryKind) {
    AQPIM_REQUIRE_SHARED("text/tinystories-sample.txt");
    AQPIM_REQUIRE_SHARED("models/stories260K/tok512.bin");
    AQPIM_REQUIRE_SHARED("models/austen-13m/tokenizer.model");
    AQPIM_REQUIRE_SHARED("models/tinystories-656k/tokenizer.json");
    const VocabData stories = vocab_from_llama2c(test::stories_tok(), 512);
    expect_same(write_and_read(stories, "stories"), stories);

    const VocabData austen = vocab_from_sentencepiece_model(test::austen_model());
    expect_same(write_and_read(austen, "austen"), austen);

    // HF rank-ordered merges travel as tokenizer.ggml.merges and keep the tokenizer's ids.
    const VocabData tiny = vocab_from_hf_tokenizer_json(test::tinystories_json());
    const VocabData tiny2 = write_and_read(tiny, "tiny");
    expect_same(tiny2, tiny);
    const std::string text = read_text(test::shared_dir() + "/text/tinystories-sample.txt");
    EXPECT_EQ(Tokenizer::create(tiny2)->encode(text, true), Tokenizer::create(tiny)->encode(text, true));

    // An SPM vocabulary without BOS keeps "none" (0xFFFFFFFF), not llama.cpp's default 1.
    VocabData no_bos = stories;
    no_bos.bos = -1;
    no_bos.add_bos = false;
    EXPECT_EQ(write_and_read(no_bos, "nobos").bos, -1);

    VocabData bpe;
    bpe.kind = VocabKind::bpe;
    bpe.tokens = {"a", "b", "ab", "<|end|>"};
    bpe.types = {TokenType::normal, TokenType::normal, TokenType::normal, TokenType::control};
    bpe.merges = {"a b"};
    bpe.pre_tokenizer = "llama-bpe";
    bpe.eos = 3;
    bpe.add_bos = false;
    bpe.add_space_prefix = false;
    const VocabData bpe2 = write_and_read(bpe, "bpe");
    expect_same(bpe2, bpe);
    VocabData no_merges = bpe;  // a BPE vocabulary without merges still writes the (empty) key
    no_merges.merges.clear();
    expect_same(write_and_read(no_merges, "bpe_no_merges"), no_merges);
    EXPECT_EQ(bpe2.pre_tokenizer, "llama-bpe");
    EXPECT_TRUE(bpe2.ignore_merges);  // llama.cpp's rule for the Llama 3 pre-tokenizer
}

TEST(VocabGguf, BadVocabulariesAreErrors) {
    AQPIM_REQUIRE_SHARED("models/stories260K/tok512.bin");
    const std::string dir = test::temp_dir("gguf_bad");
    const VocabData base = vocab_from_llama2c(test::stories_tok(), 512);
    auto load = [&](const std::function<void(GgufWriter&)>& edit) {
        GgufWriter w;
        write_vocab_gguf(w, base);
        edit(w);
        w.write(dir + "/v.gguf");
        return vocab_from_gguf(GgufFile(dir + "/v.gguf"));
    };
    EXPECT_NO_THROW(load([](GgufWriter&) {}));
    try {
        load([](GgufWriter& w) { w.set_string("tokenizer.ggml.model", "bert"); });
        ADD_FAILURE() << "no error for tokenizer.ggml.model 'bert'";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("bert"), std::string::npos) << e.what();
    }
    EXPECT_THROW(load([](GgufWriter& w) { w.set_f32_array("tokenizer.ggml.scores", {0.0f, 1.0f}); }), Error);
    EXPECT_THROW(load([](GgufWriter& w) { w.set_i32_array("tokenizer.ggml.token_type", {1, 1, 1}); }), Error);
    EXPECT_THROW(load([](GgufWriter& w) { w.set_i32_array("tokenizer.ggml.token_type", std::vector<std::int32_t>(512, 9)); }),
                 Error);
    EXPECT_THROW(load([](GgufWriter& w) { w.set_u32("tokenizer.ggml.bos_token_id", 512); }), Error);
    EXPECT_THROW(load([](GgufWriter& w) { w.set_u32("tokenizer.ggml.unknown_token_id", 100000); }), Error);
    EXPECT_THROW(load([](GgufWriter& w) { w.set_string("tokenizer.ggml.tokens", "not an array"); }), Error);
    EXPECT_THROW(load([](GgufWriter& w) { w.set_string_array("tokenizer.ggml.tokens", {}); }), Error);
    EXPECT_THROW(load([](GgufWriter& w) { w.set_string("tokenizer.ggml.model", "gpt2"); }), Error);  // no merges
    EXPECT_THROW(load([](GgufWriter& w) {
                     w.set_string("tokenizer.ggml.model", "gpt2");
                     w.set_string_array("tokenizer.ggml.merges", {"x"});
                 }),
                 Error);
    EXPECT_THROW(load([](GgufWriter& w) {
                     w.set_string("tokenizer.ggml.model", "gpt2");
                     w.set_string("tokenizer.ggml.pre", "no-such-pre");
                     w.set_string_array("tokenizer.ggml.merges", {"a b"});
                 }),
                 Error);
    // A GGUF without a vocabulary.
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.write(dir + "/empty.gguf");
    EXPECT_THROW(vocab_from_gguf(GgufFile(dir + "/empty.gguf")), Error);
}

// ---- llama2.c tokenizer.bin ---------------------------------------------------------------------------

TEST(VocabLlama2c, ReadsTok512) {
    AQPIM_REQUIRE_SHARED("models/stories260K/tok512.bin");
    const VocabData v = vocab_from_llama2c(test::stories_tok(), 512);
    ASSERT_EQ(v.tokens.size(), 512u);
    EXPECT_EQ(v.tokens[1], "<s>");
    EXPECT_EQ(v.types[1], TokenType::control);
    EXPECT_EQ(v.tokens[3], "<0x00>");
    EXPECT_EQ(v.types[3], TokenType::byte);
    EXPECT_EQ(v.tokens[259], "\xE2\x96\x81t");  // " t": space escaped
    EXPECT_EQ(v.scores[260], -1.0f);
    EXPECT_THROW(vocab_from_llama2c(test::stories_tok(), 600), Error);  // more tokens than the file has
    EXPECT_THROW(vocab_from_llama2c(test::stories_tok(), 2), Error);
    EXPECT_THROW(vocab_from_llama2c("/nonexistent/tok.bin", 512), Error);
}

TEST(VocabLlama2c, EveryTruncationIsAnError) {
    AQPIM_REQUIRE_SHARED("models/stories260K/tok512.bin");
    const std::string full = read_text(test::stories_tok());
    const std::string path = test::temp_dir("l2c_trunc") + "/tok.bin";
    int n_checked = 0;
    for (std::size_t cut = 0; cut < full.size(); cut += (cut < 64 ? 1 : 23)) {
        write_bytes(path, full.substr(0, cut));
        EXPECT_THROW(vocab_from_llama2c(path, 512), Error) << "cut at " << cut;
        ++n_checked;
    }
    EXPECT_GT(n_checked, 300);
}

TEST(VocabLlama2c, AbsurdLengthsAreErrors) {
    AQPIM_REQUIRE_SHARED("models/stories260K/tok512.bin");
    const std::string full = read_text(test::stories_tok());
    const std::string path = test::temp_dir("l2c_len") + "/tok.bin";
    auto with_i32 = [&](std::size_t off, std::int32_t value) {
        std::string b = full;
        std::memcpy(b.data() + off, &value, 4);
        write_bytes(path, b);
    };
    // Offsets: max_token_length at 0; token 0 = score at 4, length at 8 ("<unk>": 5 bytes).
    for (std::int32_t bad : {0, -1, 1 << 30}) {
        with_i32(0, bad);
        EXPECT_THROW(vocab_from_llama2c(path, 512), Error) << "max_token_length " << bad;
    }
    for (std::int32_t bad : {-1, -2147483647 - 1, 8, 1 << 30, 2147483647}) {
        with_i32(8, bad);
        EXPECT_THROW(vocab_from_llama2c(path, 512), Error) << "length " << bad;
    }
    const std::uint32_t nan_bits = 0x7FC00000u;
    with_i32(4, std::int32_t(nan_bits));
    EXPECT_THROW(vocab_from_llama2c(path, 512), Error);
}

// ---- SentencePiece tokenizer.model --------------------------------------------------------------------

std::string varint(std::uint64_t v) {
    std::string s;
    do {
        s.push_back(char((v & 0x7F) | (v > 0x7F ? 0x80 : 0)));
        v >>= 7;
    } while (v);
    return s;
}
std::string field_bytes(int field, const std::string& payload) { return varint(std::uint64_t(field) << 3 | 2) + varint(payload.size()) + payload; }
std::string field_varint(int field, std::uint64_t v) { return varint(std::uint64_t(field) << 3) + varint(v); }
std::string field_float(int field, float f) {
    std::string s = varint(std::uint64_t(field) << 3 | 5);
    s.append(reinterpret_cast<const char*>(&f), 4);
    return s;
}
std::string piece(const std::string& text, float score, int type = 1) {
    return field_bytes(1, field_bytes(1, text) + field_float(2, score) + field_varint(3, std::uint64_t(type)));
}
std::string bpe_trainer() { return field_bytes(2, field_varint(3, 2)); }

TEST(VocabSentencePiece, ReadsAHandWrittenModel) {
    const std::string dir = test::temp_dir("spm_hand");
    const std::string path = dir + "/tokenizer.model";
    write_bytes(path, piece("<unk>", 0, 2) + piece("<s>", 0, 3) + piece("</s>", 0, 3) + piece("\xE2\x96\x81", -1) +
                          piece("a", -2) + piece("\xE2\x96\x81" "a", -0.5f) + bpe_trainer() +
                          field_bytes(3, field_varint(3, 0)));  // add_dummy_prefix = false
    const VocabData v = vocab_from_sentencepiece_model(path);
    EXPECT_EQ(v.tokens.size(), 6u);
    EXPECT_FALSE(v.add_space_prefix);
    EXPECT_EQ(std::tie(v.unk, v.bos, v.eos, v.pad), std::tie(v.unk, v.bos, v.eos, v.pad));
    EXPECT_EQ(v.unk, 0);
    EXPECT_EQ(v.bos, 1);
    EXPECT_EQ(v.pad, -1);
    const auto t = Tokenizer::create(v);
    EXPECT_EQ(t->encode("a a", true), (Ids{1, 4, 5}));  // no dummy prefix: "a", "▁a"
    EXPECT_EQ(v.types[0], TokenType::unknown);

    // tokenizer_config.json beside it: flags, and added_tokens_decoder as llama.cpp's converter
    // applies it (special -> control, else user-defined with "▁" as a space; score -1000; ids
    // beyond the pieces ignored).
    write_bytes(dir + "/tokenizer_config.json", R"({"add_bos_token": false, "add_eos_token": true,
        "added_tokens_decoder": {"0": {"content": "<unk>", "special": true},
                                 "3": {"content": "<sep▁x>", "special": false},
                                 "99": {"content": "<far>", "special": true}}})");
    const VocabData c = vocab_from_sentencepiece_model(path);
    EXPECT_FALSE(c.add_bos);
    EXPECT_TRUE(c.add_eos);
    EXPECT_EQ(c.types[0], TokenType::control);
    EXPECT_EQ(c.scores[0], -1000.0f);
    EXPECT_EQ(c.tokens[3], "<sep x>");
    EXPECT_EQ(c.types[3], TokenType::user_defined);
    EXPECT_EQ(Tokenizer::create(c)->encode("a<sep x>a", true), (Ids{4, 3, 4, 2}));
    write_bytes(dir + "/tokenizer_config.json", R"({"added_tokens_decoder": {"x": {"content": "y"}}})");
    EXPECT_THROW(vocab_from_sentencepiece_model(path), Error);
}

TEST(VocabSentencePiece, HostileFilesAreErrors) {
    const std::string dir = test::temp_dir("spm_bad");
    const std::string path = dir + "/tokenizer.model";
    auto load = [&](const std::string& bytes) {
        write_bytes(path, bytes);
        return vocab_from_sentencepiece_model(path);
    };
    const std::string good = piece("<unk>", 0, 2) + piece("<s>", 0, 3) + piece("</s>", 0, 3) + piece("x", -1) + bpe_trainer();
    EXPECT_NO_THROW(load(good));
    EXPECT_THROW(load(""), Error);                                       // no pieces
    EXPECT_THROW(load(piece("x", 0)), Error);                            // no trainer spec: UNIGRAM
    EXPECT_THROW(load(piece("x", 0) + field_bytes(2, field_varint(3, 1))), Error);  // UNIGRAM
    EXPECT_THROW(load(good + field_bytes(2, field_varint(40, 77))), Error);         // unk_id out of range
    EXPECT_THROW(load(good + field_bytes(2, field_varint(41, std::uint64_t(-5)))), Error);  // bos_id -5
    EXPECT_THROW(load(piece("x", 0, 9) + bpe_trainer()), Error);        // piece type 9
    EXPECT_THROW(load(field_bytes(1, field_float(2, 1.0f)) + bpe_trainer()), Error);  // piece without text
    EXPECT_THROW(load(varint(1 << 3 | 2) + varint(1000) + "short"), Error);  // length past the end
    EXPECT_THROW(load(varint(1 << 3 | 2) + varint(~0ull)), Error);           // absurd length
    EXPECT_THROW(load(varint(1 << 3 | 2) + std::string(11, '\xFF')), Error);  // varint over 10 bytes
    EXPECT_THROW(load(good + varint(9 << 3 | 3)), Error);                     // group wire type
    EXPECT_THROW(load(good + varint(9 << 3 | 1) + "abc"), Error);              // truncated fixed64
    EXPECT_THROW(load(field_bytes(1, field_varint(1, 3)) + bpe_trainer()), Error);  // piece text as varint
    EXPECT_THROW(load(field_bytes(1, field_bytes(1, "x") + varint(2 << 3 | 5) + "ab") + bpe_trainer()), Error);
}

TEST(VocabSentencePiece, TruncationsOfTheRealModelAreErrorsOrValid) {
    AQPIM_REQUIRE_SHARED("models/austen-13m/tokenizer.model");
    const std::string full = read_text(test::austen_model());
    const std::string path = test::temp_dir("spm_trunc") + "/tokenizer.model";
    int n_errors = 0, n_valid = 0;
    for (std::size_t cut = 0; cut < full.size(); cut += (cut < 128 ? 1 : 331)) {
        write_bytes(path, full.substr(0, cut));
        try {
            const VocabData v = vocab_from_sentencepiece_model(path);
            ++n_valid;  // cut at a field boundary after the trainer spec: a smaller but valid model
            EXPECT_NO_THROW(Tokenizer::create(v));
        } catch (const Error&) {
            ++n_errors;
        }
    }
    EXPECT_GT(n_errors, 300);  // every cut before the trainer spec (it follows the 4096 pieces)
    // Flipped bytes: error or a valid model, never a crash.
    std::string flipped = full;
    for (std::size_t i = 0; i < full.size(); i += 257) {
        flipped[i] = char(flipped[i] ^ 0x5A);
        write_bytes(path, flipped);
        try {
            vocab_from_sentencepiece_model(path);
        } catch (const Error&) {
        }
        flipped[i] = full[i];
    }
}

}  // namespace
}  // namespace aqpim
