// GGUF reader and writer: the shared models read, write/read round trips, and truncated,
// corrupted and hostile files give aqpim::Error, never a crash.

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>

#include "aqpim/error.h"
#include "aqpim/ggml_types.h"
#include "aqpim/gguf.h"
#include "support/cli.h"
#include "support/temp_dir.h"

namespace aqpim {
namespace {

namespace fs = std::filesystem;

using test::temp_path;
std::string stories_gguf() { return test::shared_dir() + "/models/stories260K/stories260K.gguf"; }

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_file(const std::string& path, const std::string& bytes) {
    fs::remove(path);  // a new file, not a truncated one: ext4 flushes files rewritten after truncation
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

/// The message of the aqpim::Error that constructing a GgufFile on `bytes` throws ("" if none).
std::string open_error(const std::string& bytes, const std::string& name = "hostile.gguf") {
    const std::string path = temp_path(name);
    write_file(path, bytes);
    try {
        GgufFile f(path);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

/// Raw GGUF bytes, field by field, so tests can write values no writer would.
struct RawGguf {
    std::string b;
    RawGguf& u8(std::uint8_t v) { return raw(&v, 1); }
    RawGguf& u32(std::uint32_t v) { return raw(&v, 4); }
    RawGguf& u64(std::uint64_t v) { return raw(&v, 8); }
    RawGguf& f32(float v) { return raw(&v, 4); }
    RawGguf& str(const std::string& s) {
        u64(s.size());
        b += s;
        return *this;
    }
    RawGguf& raw(const void* p, std::size_t n) {
        b.append(static_cast<const char*>(p), n);
        return *this;
    }
    RawGguf& header(std::uint64_t n_tensors, std::uint64_t n_metadata, std::uint32_t version = 3) {
        b += "GGUF";
        return u32(version).u64(n_tensors).u64(n_metadata);
    }
    RawGguf& kv_u32(const std::string& key, std::uint32_t v) { return str(key).u32(4).u32(v); }
    RawGguf& tensor(const std::string& name, std::vector<std::uint64_t> ne, std::uint32_t type, std::uint64_t offset) {
        str(name).u32(std::uint32_t(ne.size()));
        for (auto d : ne) u64(d);
        return u32(type).u64(offset);
    }
    RawGguf& pad_and_data(std::size_t data_bytes, std::size_t alignment = 32) {
        b.resize((b.size() + alignment - 1) / alignment * alignment, '\0');
        b.append(data_bytes, '\x01');
        return *this;
    }
};

// ---- types --------------------------------------------------------------------------------------

TEST(GgufTypes, BlockLayoutsMatchLlamaCpp) {
    const struct {
        GgmlType t;
        const char* name;
        int bs, bb;
        bool supported;
    } cases[] = {
        {GgmlType::F32, "F32", 1, 4, true},      {GgmlType::F16, "F16", 1, 2, true},
        {GgmlType::BF16, "BF16", 1, 2, true},    {GgmlType::Q4_0, "Q4_0", 32, 18, true},
        {GgmlType::Q4_1, "Q4_1", 32, 20, false}, {GgmlType::Q5_0, "Q5_0", 32, 22, false},
        {GgmlType::Q5_1, "Q5_1", 32, 24, false}, {GgmlType::Q8_0, "Q8_0", 32, 34, true},
        {GgmlType::Q8_1, "Q8_1", 32, 36, false}, {GgmlType::Q2_K, "Q2_K", 256, 84, false},
        {GgmlType::Q3_K, "Q3_K", 256, 110, false}, {GgmlType::Q4_K, "Q4_K", 256, 144, true},
        {GgmlType::Q5_K, "Q5_K", 256, 176, false}, {GgmlType::Q6_K, "Q6_K", 256, 210, true},
        {GgmlType::Q8_K, "Q8_K", 256, 292, false}, {GgmlType::IQ4_NL, "IQ4_NL", 32, 18, false},
        {GgmlType::IQ4_XS, "IQ4_XS", 256, 136, false}, {GgmlType::I8, "I8", 1, 1, false},
        {GgmlType::F64, "F64", 1, 8, false},     {GgmlType::TQ2_0, "TQ2_0", 256, 66, false},
    };
    for (const auto& c : cases) {
        const auto tr = ggml_type_traits(c.t);
        EXPECT_STREQ(tr.name, c.name);
        EXPECT_EQ(tr.block_size, c.bs) << c.name;
        EXPECT_EQ(tr.block_bytes, c.bb) << c.name;
        EXPECT_EQ(tr.supported, c.supported) << c.name;
        EXPECT_EQ(ggml_type_name(c.t), c.name);
    }
    EXPECT_EQ(ggml_type_traits(GgmlType(99)).block_size, 0);
    EXPECT_EQ(ggml_type_name(GgmlType(99)), "type 99");
    EXPECT_EQ(ggml_type_name(GgmlType(4)), "type 4");  // removed from ggml
}

TEST(GgufTypes, RowBytesAndSupport) {
    EXPECT_EQ(ggml_row_bytes(GgmlType::F32, 7), 28u);
    EXPECT_EQ(ggml_row_bytes(GgmlType::Q8_0, 4096), 128u * 34);
    EXPECT_EQ(ggml_row_bytes(GgmlType::Q4_K, 512), 2u * 144);
    EXPECT_THROW(ggml_row_bytes(GgmlType::Q8_0, 33), Error);
    EXPECT_THROW(ggml_row_bytes(GgmlType(99), 32), Error);
    EXPECT_NO_THROW(require_supported_type(GgmlType::Q6_K, "x"));
    try {
        require_supported_type(GgmlType::Q5_K, "tensor 'a'");
        ADD_FAILURE() << "Q5_K accepted";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("tensor 'a'"), std::string::npos) << msg;
        EXPECT_NE(msg.find("Q5_K"), std::string::npos) << msg;
        EXPECT_NE(msg.find("F32, F16, Q4_0, Q8_0, Q4_K, Q6_K, BF16"), std::string::npos) << msg;
    }
}

// ---- reading the shared model -------------------------------------------------------------------

TEST(GgufReader, ReadsStories260K) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    GgufFile f(stories_gguf());
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.get_string("general.architecture"), "llama");
    EXPECT_EQ(f.get_int("llama.embedding_length"), 64);
    EXPECT_EQ(f.get_int("llama.attention.head_count_kv"), 4);
    EXPECT_NEAR(f.get_float("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-9);
    EXPECT_EQ(f.get_int("tokenizer.ggml.padding_token_id"), 4294967295);  // uint32 -1 as llama.cpp writes it
    const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
    ASSERT_EQ(tokens.size(), 512u);
    EXPECT_EQ(tokens[1], "<s>");
    EXPECT_EQ(tokens[3], "<0x00>");
    EXPECT_EQ(f.get_float_array("tokenizer.ggml.scores").size(), 512u);
    const auto types = f.get_int_array("tokenizer.ggml.token_type");
    EXPECT_EQ(types[0], 2);
    EXPECT_EQ(types[3], 6);

    ASSERT_EQ(f.tensors().size(), 48u);
    const auto& q = f.tensor("blk.0.attn_k.weight");
    EXPECT_EQ(q.ne, (std::vector<std::int64_t>{64, 32}));
    EXPECT_EQ(q.type, GgmlType::F32);
    EXPECT_EQ(q.n_bytes, 64u * 32 * 4);
    EXPECT_EQ(q.n_elements(), 64 * 32);
    EXPECT_EQ(f.find_tensor("no.such.tensor"), nullptr);
    EXPECT_THROW(f.tensor("no.such.tensor"), Error);

    // the token embedding is the llama2.c checkpoint's first array, byte for byte
    const std::string bin = read_file(test::shared_dir() + "/models/stories260K/stories260K.bin");
    const auto& embd = f.tensor("token_embd.weight");
    ASSERT_EQ(embd.n_bytes, 512u * 64 * 4);
    EXPECT_EQ(std::memcmp(f.tensor_data(embd), bin.data() + 28, embd.n_bytes), 0);
}

TEST(GgufReader, TypedGettersNameTheKey) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    GgufFile f(stories_gguf());
    auto message = [](auto&& fn) {
        try {
            fn();
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    EXPECT_NE(message([&] { f.get_int("llama.missing_key"); }).find("'llama.missing_key' is missing"), std::string::npos);
    const std::string m = message([&] { f.get_int("general.name"); });
    EXPECT_NE(m.find("'general.name' is a string, expected an integer"), std::string::npos) << m;
    EXPECT_THROW(f.get_float("llama.block_count"), Error);  // integers are not floats
    EXPECT_THROW(f.get_string("llama.block_count"), Error);
    EXPECT_THROW(f.get_bool("llama.block_count"), Error);
    EXPECT_THROW(f.get_string_array("tokenizer.ggml.scores"), Error);
    EXPECT_THROW(f.get_int_array("tokenizer.ggml.tokens"), Error);
    EXPECT_THROW(f.get_float_array("tokenizer.ggml.token_type"), Error);
    EXPECT_FALSE(f.find_int("llama.rope.freq_base").has_value());
    EXPECT_FALSE(f.find_string("x").has_value());
    EXPECT_EQ(f.find_int("llama.block_count"), 5);
    EXPECT_THROW(f.find_float("llama.block_count"), Error);  // present with the wrong kind
}

// ---- writer round trip --------------------------------------------------------------------------

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::uint8_t> v(n);
    for (auto& x : v) x = std::uint8_t(rng());
    return v;
}

TEST(GgufWriter, RoundTripKeepsMetadataAndBytes) {
    for (std::uint32_t alignment : {32u, 64u, 1u}) {
        GgufWriter w(alignment);
        w.set_string("general.architecture", "llama");
        w.set_string("general.name", "first name");
        w.set_u32("llama.block_count", 3);
        w.set_i32("x.i32", -7);
        w.set_u64("x.u64", std::uint64_t(1) << 40);
        w.set_f32("x.f32", 0.25f);
        w.set_bool("x.bool", true);
        w.set_string_array("x.strings", {"a", "", "\xe2\x96\x81hello"});
        w.set_f32_array("x.floats", {1.5f, -2.0f});
        w.set_i32_array("x.ints", {3, -4, 5});
        w.set_string("general.name", "second name");  // replaces in place
        const auto t0 = random_bytes(5 * 3 * 4, 1), t1 = random_bytes(64 * 2 * 2, 2), t2 = random_bytes(2 * 34 * 3, 3);
        w.add_tensor("a", {5, 3}, GgmlType::F32, t0);
        w.add_tensor("b.f16", {64, 2}, GgmlType::F16, t1);
        w.add_tensor("c.q8", {64, 3}, GgmlType::Q8_0, t2);
        const std::string path = temp_path(fmt::format("roundtrip_{}.gguf", alignment));
        w.write(path);
        EXPECT_EQ(test::files_left_beside(path), 0);
        EXPECT_EQ(fs::file_size(path), w.file_bytes());

        GgufFile f(path);
        EXPECT_EQ(f.version(), 3u);
        EXPECT_EQ(f.metadata().size(), alignment == 32 ? 10u : 11u);  // + general.alignment
        EXPECT_EQ(f.get_string("general.name"), "second name");
        EXPECT_EQ(f.get_int("llama.block_count"), 3);
        EXPECT_EQ(f.metadata().at("llama.block_count").type, GgufValueType::UINT32);
        EXPECT_EQ(f.get_int("x.i32"), -7);
        EXPECT_EQ(f.get_int("x.u64"), std::int64_t(1) << 40);
        EXPECT_EQ(f.get_float("x.f32"), 0.25);
        EXPECT_TRUE(f.get_bool("x.bool"));
        EXPECT_EQ(f.get_string_array("x.strings"), (std::vector<std::string>{"a", "", "\xe2\x96\x81hello"}));
        EXPECT_EQ(f.get_float_array("x.floats"), (std::vector<double>{1.5, -2.0}));
        EXPECT_EQ(f.get_int_array("x.ints"), (std::vector<std::int64_t>{3, -4, 5}));
        if (alignment != 32) {
            EXPECT_EQ(f.get_int("general.alignment"), alignment);
        }
        ASSERT_EQ(f.tensors().size(), 3u);
        const std::vector<std::uint8_t>* expect[] = {&t0, &t1, &t2};
        for (std::size_t i = 0; i < 3; ++i) {
            const auto& t = f.tensors()[i];
            EXPECT_EQ(t.offset % alignment, 0u);
            ASSERT_EQ(t.n_bytes, expect[i]->size()) << t.name;
            EXPECT_EQ(std::memcmp(f.tensor_data(t), expect[i]->data(), t.n_bytes), 0) << t.name;
        }
        EXPECT_EQ(f.tensor("c.q8").type, GgmlType::Q8_0);
        EXPECT_EQ(f.tensor("b.f16").ne, (std::vector<std::int64_t>{64, 2}));

        // metadata is written in insertion order: the first key after the header is the first set
        const std::string raw = read_file(path);
        std::uint64_t len = 0;
        std::memcpy(&len, raw.data() + 24, 8);
        EXPECT_EQ(raw.substr(32, len), alignment == 32 ? "general.architecture" : "general.alignment");
    }
}

TEST(GgufWriter, RewritingTheSharedModelKeepsEveryTensor) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    GgufFile src(stories_gguf());
    GgufWriter w;
    w.set_string("general.architecture", src.get_string("general.architecture"));
    w.set_string_array("tokenizer.ggml.tokens", src.get_string_array("tokenizer.ggml.tokens"));
    for (const auto& t : src.tensors()) {
        const auto* p = src.tensor_data(t);
        w.add_tensor(t.name, t.ne, t.type, std::vector<std::uint8_t>(p, p + t.n_bytes));
    }
    const std::string path = temp_path("rewrite.gguf");
    w.write(path);
    GgufFile f(path);
    EXPECT_EQ(f.get_string_array("tokenizer.ggml.tokens"), src.get_string_array("tokenizer.ggml.tokens"));
    ASSERT_EQ(f.tensors().size(), src.tensors().size());
    for (const auto& t : src.tensors()) {
        const auto& u = f.tensor(t.name);
        EXPECT_EQ(u.ne, t.ne);
        ASSERT_EQ(u.n_bytes, t.n_bytes);
        EXPECT_EQ(std::memcmp(f.tensor_data(u), src.tensor_data(t), t.n_bytes), 0) << t.name;
    }
}

TEST(GgufWriter, StreamedTensorsArriveInRowOrderAcrossChunks) {
    // 20 MB: more than one write chunk
    const std::int64_t cols = 1024, rows = 5000;
    GgufWriter w;
    std::int64_t next_row = 0;
    w.add_tensor("big", {cols, rows}, GgmlType::F32, [&](std::int64_t row0, std::int64_t n, std::uint8_t* dst) {
        EXPECT_EQ(row0, next_row);
        next_row = row0 + n;
        for (std::int64_t r = 0; r < n; ++r)
            for (std::int64_t c = 0; c < cols; ++c) {
                const float v = float((row0 + r) * 7 + c % 13);
                std::memcpy(dst + std::size_t(r * cols + c) * 4, &v, 4);
            }
    });
    w.add_tensor("tail", {3}, GgmlType::F32, std::vector<std::uint8_t>(12, 0));
    const std::string path = temp_path("stream.gguf");
    w.write(path);
    EXPECT_EQ(next_row, rows);
    GgufFile f(path);
    const float* p = reinterpret_cast<const float*>(f.tensor_data(f.tensor("big")));
    for (std::int64_t r : {std::int64_t(0), std::int64_t(4095), std::int64_t(4096), rows - 1})
        for (std::int64_t c : {std::int64_t(0), std::int64_t(5), cols - 1}) EXPECT_EQ(p[r * cols + c], float(r * 7 + c % 13));
}

TEST(GgufWriter, BadTensorsAndOptionsAreErrors) {
    EXPECT_THROW(GgufWriter{3}, Error);
    EXPECT_THROW(GgufWriter{0}, Error);
    GgufWriter w;
    w.add_tensor("a", {4}, GgmlType::F32, std::vector<std::uint8_t>(16));
    EXPECT_THROW(w.add_tensor("a", {4}, GgmlType::F32, std::vector<std::uint8_t>(16)), Error);      // duplicate
    EXPECT_THROW(w.add_tensor("b", {4}, GgmlType::F32, std::vector<std::uint8_t>(15)), Error);      // wrong size
    EXPECT_THROW(w.add_tensor("c", {33}, GgmlType::Q8_0, std::vector<std::uint8_t>(34)), Error);    // not a block
    EXPECT_THROW(w.add_tensor("d", {0}, GgmlType::F32, std::vector<std::uint8_t>()), Error);        // empty dim
    EXPECT_THROW(w.add_tensor("e", {1, 1, 1, 1, 1}, GgmlType::F32, std::vector<std::uint8_t>(4)), Error);
    EXPECT_THROW(w.add_tensor("f", {4}, GgmlType(99), std::vector<std::uint8_t>(16)), Error);
    EXPECT_THROW(w.add_tensor(std::string(64, 'n'), {4}, GgmlType::F32, std::vector<std::uint8_t>(16)), Error);
    EXPECT_THROW(w.set_u32("general.alignment", 64), Error);  // only through the constructor
    // the failed additions left the writer usable
    w.add_tensor("b", {4}, GgmlType::F32, std::vector<std::uint8_t>(16));
    const std::string path = temp_path("after_errors.gguf");
    w.write(path);
    EXPECT_EQ(GgufFile(path).tensors().size(), 2u);
    // an unwritable destination is an error and leaves no temporary file
    EXPECT_THROW(w.write("/nonexistent_dir/x.gguf"), Error);
    // a generator that throws leaves no file under either name
    GgufWriter g;
    g.add_tensor("x", {4}, GgmlType::F32, [](std::int64_t, std::int64_t, std::uint8_t*) { AQPIM_FAIL("boom"); });
    const std::string gpath = temp_path("generator_throws.gguf");
    fs::remove(gpath);
    EXPECT_THROW(g.write(gpath), Error);
    EXPECT_FALSE(fs::exists(gpath));
    EXPECT_EQ(test::files_left_beside(gpath), 0);
}

// ---- hostile files ------------------------------------------------------------------------------

TEST(GgufHostile, EveryTruncationOfARealFileIsAnError) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    const std::string full = read_file(stories_gguf());
    ASSERT_GT(full.size(), 1000000u);
    EXPECT_EQ(open_error(full), "");
    std::vector<std::size_t> cuts;
    for (std::size_t i = 0; i <= 64; ++i) cuts.push_back(i);                   // magic, version, counts
    for (std::size_t i = 64; i < 14200; i += 3) cuts.push_back(i);            // metadata, tensor infos, padding
    for (std::size_t i = 14200; i < full.size(); i += 23456) cuts.push_back(i);  // data
    cuts.push_back(full.size() - 1);
    for (std::size_t cut : cuts) EXPECT_NE(open_error(full.substr(0, cut)), "") << "cut at " << cut;
    // a cut inside the data section names the tensor that no longer fits
    const std::string msg = open_error(full.substr(0, full.size() - 100));
    EXPECT_NE(msg.find("tensor 'blk.4.ffn_norm.weight'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("past the end"), std::string::npos) << msg;
}

/// Opens `bytes` as a GGUF file: either an aqpim::Error, or a file whose tensors can all be read
/// (every byte is touched: a tensor outside the mapping would crash). Returns whether it opened.
bool opens_safely(const std::string& bytes) {
    const std::string path = temp_path("flip.gguf");
    write_file(path, bytes);
    try {
        GgufFile f(path);
        std::uint64_t total = 0;
        unsigned sum = 0;
        for (const auto& t : f.tensors()) {
            const std::uint8_t* p = f.tensor_data(t);
            for (std::uint64_t i = 0; i < t.n_bytes; ++i) sum += p[i];
            total += t.n_bytes;
        }
        EXPECT_LE(total, bytes.size()) << sum;
        return true;
    } catch (const Error&) {
        return false;
    }
}

TEST(GgufHostile, FlippedBytesAreErrorsOrSafe) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.gguf");
    // A small file in the real model's format: its vocabulary metadata and a few of its tensors,
    // with every second byte of the header flipped three ways.
    GgufFile src(stories_gguf());
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_u32("llama.block_count", 5);
    w.set_string_array("tokenizer.ggml.tokens", src.get_string_array("tokenizer.ggml.tokens"));
    std::vector<std::int32_t> types;
    for (auto t : src.get_int_array("tokenizer.ggml.token_type")) types.push_back(std::int32_t(t));
    w.set_i32_array("tokenizer.ggml.token_type", types);
    for (const char* name : {"blk.0.attn_norm.weight", "blk.0.attn_k.weight", "output_norm.weight", "blk.1.attn_v.weight"}) {
        const auto& t = src.tensor(name);
        w.add_tensor(name, t.ne, t.type, std::vector<std::uint8_t>(src.tensor_data(t), src.tensor_data(t) + t.n_bytes));
    }
    const std::string path = temp_path("small.gguf");
    w.write(path);
    const std::string small = read_file(path);
    const GgufFile small_file(path);
    const auto& last = small_file.tensors().back();
    const std::size_t header_bytes = small.size() - std::size_t(last.offset + last.n_bytes);
    int errors = 0, opened = 0;
    for (std::size_t pos = 0; pos < header_bytes; pos += 2)
        for (std::uint8_t mask : {std::uint8_t(0x01), std::uint8_t(0x80), std::uint8_t(0xff)}) {
            std::string bad = small;
            bad[pos] = char(bad[pos] ^ mask);
            (opens_safely(bad) ? opened : errors)++;
        }
    EXPECT_GT(errors, 2000);
    EXPECT_GT(opened, 2000);  // flips inside token text are harmless

    // The real file: a sample of single-byte flips across its header.
    const std::string full = read_file(stories_gguf());
    std::mt19937_64 rng(5);
    for (int i = 0; i < 300; ++i) {
        std::string bad = full;
        const std::size_t pos = 4 + rng() % 14170;
        bad[pos] = char(bad[pos] ^ 0xff);
        opens_safely(bad);
    }
}

TEST(GgufHostile, AbsurdCountsLengthsAndTypesAreErrors) {
    const std::uint64_t huge = std::uint64_t(1) << 63;
    struct Case {
        const char* what;
        std::string bytes;
        const char* expect;  // a substring of the message
    };
    std::vector<Case> cases;
    auto add = [&](const char* what, const RawGguf& g, const char* expect) { cases.push_back({what, g.b, expect}); };
    add("empty file", RawGguf{}, "magic");
    add("bad magic", RawGguf{"GGML\3\0\0\0"}, "not a GGUF file");
    add("version 1", RawGguf{}.header(0, 0, 1), "version 1 is not supported");
    add("version 4", RawGguf{}.header(0, 0, 4), "unsupported GGUF version 4");
    add("big-endian", RawGguf{}.header(0, 0, 0x03000000), "big-endian");
    add("2^63 tensors", RawGguf{}.header(huge, 0), "tensor count");
    add("2^63 kv", RawGguf{}.header(0, huge), "metadata count");
    add("kv count past EOF", RawGguf{}.header(0, 3).kv_u32("a", 1), "metadata");
    add("key length past EOF", RawGguf{}.header(0, 1).u64(1000).raw("abcdefghijklmn", 14), "length 1000");
    add("key length 2^63", RawGguf{}.header(0, 1).u64(huge).raw("abcdefghijklmn", 14), "metadata key #0");
    add("empty key", RawGguf{}.header(0, 1).str("").u32(4).u32(1), "empty");
    add("unknown value type", RawGguf{}.header(0, 1).str("k").u32(99).u32(1), "unknown value type 99");
    add("string value past EOF", RawGguf{}.header(0, 1).str("k").u32(8).u64(1 << 20).raw("x", 1), "key 'k' string");
    add("array 2^62 u32", RawGguf{}.header(0, 1).str("k").u32(9).u32(4).u64(std::uint64_t(1) << 62), "array length");
    add("array 1000 u32 in 8 bytes", RawGguf{}.header(0, 1).str("k").u32(9).u32(4).u64(1000).u64(0), "array length 1000 is impossible");
    add("array of strings past EOF", RawGguf{}.header(0, 1).str("k").u32(9).u32(8).u64(2).str("a").u64(50),
        "key 'k' element 1");
    add("nested array", RawGguf{}.header(0, 1).str("k").u32(9).u32(9).u64(1).u32(4).u64(1).u32(5), "array of arrays");
    add("array of unknown type", RawGguf{}.header(0, 1).str("k").u32(9).u32(42).u64(1).u32(0), "unknown value type 42");
    add("bool 2", RawGguf{}.header(0, 1).str("k").u32(7).u8(2), "bool value 2");
    add("duplicate key", RawGguf{}.header(0, 2).kv_u32("k", 1).kv_u32("k", 2), "appears twice");
    add("alignment 0", RawGguf{}.header(0, 1).kv_u32("general.alignment", 0), "general.alignment 0");
    add("alignment 48", RawGguf{}.header(0, 1).kv_u32("general.alignment", 48), "power of two");
    add("alignment string", RawGguf{}.header(0, 1).str("general.alignment").u32(8).str("32"), "expected an integer");
    const auto one_tensor = [](std::vector<std::uint64_t> ne, std::uint32_t type, std::uint64_t offset,
                               std::size_t data) {
        return RawGguf{}.header(1, 0).tensor("w", std::move(ne), type, offset).pad_and_data(data);
    };
    add("n_dims 99", RawGguf{}.header(1, 0).str("w").u32(99).u64(4).u64(4).u32(0).u64(0).pad_and_data(64), "n_dims 99");
    add("n_dims 0", RawGguf{}.header(1, 0).str("w").u32(0).u32(0).u64(0).u64(0).u64(0).pad_and_data(64), "n_dims 0");
    add("ne 0", one_tensor({4, 0}, 0, 0, 64), "ne[1] = 0");
    add("ne product overflow", one_tensor({std::uint64_t(1) << 40, std::uint64_t(1) << 40}, 0, 0, 64), "overflows");
    add("ne 2^64-1", one_tensor({~std::uint64_t(0)}, 0, 0, 64), "ne[0]");
    add("unknown type 99", one_tensor({4}, 99, 0, 64), "unknown type 99");
    add("removed type 4", one_tensor({32}, 4, 0, 64), "unknown type 4");
    add("ne0 not a Q8_0 block", one_tensor({33, 2}, 8, 0, 128), "not a multiple of the Q8_0 block size 32");
    add("misaligned offset", one_tensor({4}, 0, 4, 64), "not a multiple of the alignment 32");
    add("offset past EOF", one_tensor({4}, 0, 1 << 20, 64), "past the end");
    add("bytes past EOF", one_tensor({1024}, 0, 0, 64), "offset 0 + 4096 bytes");
    add("huge offset", one_tensor({4}, 0, ~std::uint64_t(31), 64), "past the end");
    add("no data section", RawGguf{}.header(1, 0).tensor("w", {4}, 0, 0), "data section");
    add("overlapping tensors",
        RawGguf{}.header(2, 0).tensor("a", {16}, 0, 0).tensor("b", {16}, 0, 32).pad_and_data(128), "overlap");
    add("duplicate tensor", RawGguf{}.header(2, 0).tensor("a", {4}, 0, 0).tensor("a", {4}, 0, 32).pad_and_data(128),
        "appears twice");
    add("empty tensor name", RawGguf{}.header(1, 0).tensor("", {4}, 0, 0).pad_and_data(64), "name");
    add("tensor name 300 bytes", RawGguf{}.header(1, 0).tensor(std::string(300, 'x'), {4}, 0, 0).pad_and_data(64),
        "name has 300 bytes");
    add("tensor count past infos", RawGguf{}.header(3, 0).tensor("a", {4}, 0, 0).pad_and_data(1000), "tensor");
    add("type field past EOF", RawGguf{}.header(1, 0).str("wwwwwwwwwwww").u32(1).u64(4).u8(0).u8(0), "' type at");
    for (const auto& c : cases) {
        const std::string msg = open_error(c.bytes);
        EXPECT_NE(msg, "") << c.what << ": accepted";
        EXPECT_NE(msg.find(c.expect), std::string::npos) << c.what << ": " << msg;
    }
    // control: the same builder makes files the reader accepts
    EXPECT_EQ(open_error(one_tensor({4}, 0, 0, 16).b), "");
    EXPECT_EQ(open_error(RawGguf{}.header(2, 1).kv_u32("general.alignment", 16).tensor("a", {4}, 0, 0)
                             .tensor("b", {4}, 0, 16).pad_and_data(32, 16).b),
              "");
    EXPECT_EQ(open_error(RawGguf{}.header(0, 0, 2).b), "");
    EXPECT_THROW(GgufFile{temp_path("does_not_exist.gguf")}, Error);
}

}  // namespace
}  // namespace aqpim
