// safetensors reader: the shared model reads; truncated, corrupted and hostile files give
// aqpim::Error, never a crash.

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "aqpim/error.h"
#include "aqpim/safetensors.h"
#include "support/cli.h"

namespace aqpim {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) { return (fs::temp_directory_path() / ("aqpim_test_" + name)).string(); }

void write_file(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::string make_file(const std::string& header_json, std::size_t data_bytes) {
    std::string out(8, '\0');
    const std::uint64_t n = header_json.size();
    std::memcpy(out.data(), &n, 8);
    return out + header_json + std::string(data_bytes, '\x01');
}

TEST(Safetensors, ReadsTheSharedModel) {
    AQPIM_REQUIRE_SHARED("models/austen-13m/model.safetensors");
    SafetensorsFile f(test::shared_dir() + "/models/austen-13m/model.safetensors");
    const auto& info = f.info("model.layers.0.self_attn.k_proj.weight");
    EXPECT_EQ(info.dtype, TensorDType::f16);
    EXPECT_EQ(info.shape, (std::vector<std::int64_t>{256, 512}));
    auto norm = f.read_f32("model.layers.0.input_layernorm.weight", {512});
    ASSERT_EQ(norm.size(), 512u);
    for (float x : norm) EXPECT_TRUE(std::isfinite(x));
    EXPECT_THROW(f.read_f32("model.layers.0.input_layernorm.weight", {256}), Error);
    EXPECT_THROW(f.info("no.such.tensor"), Error);
}

TEST(Safetensors, SmallValidFile) {
    const std::string path = temp_path("ok.safetensors");
    std::string bytes = make_file(R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"__metadata__":{"x":"y"}})", 16);
    float vals[4] = {1, -2, 3.5f, 0};
    std::memcpy(bytes.data() + bytes.size() - 16, vals, 16);
    write_file(path, bytes);
    SafetensorsFile f(path);
    auto a = f.read_f32("a", {2, 2});
    EXPECT_EQ(a, (std::vector<float>{1, -2, 3.5f, 0}));
}

TEST(Safetensors, HostileHeadersAreErrors) {
    const std::string path = temp_path("bad.safetensors");
    const std::vector<std::pair<std::string, std::size_t>> cases = {
        {R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,17]}})", 16},            // end past data
        {R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[8,4]}})", 16},             // begin > end
        {R"({"a":{"dtype":"F32","shape":[3,2],"data_offsets":[0,16]}})", 16},            // size mismatch
        {R"({"a":{"dtype":"F32","shape":[-1,2],"data_offsets":[0,16]}})", 16},           // negative dim
        {R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", 16},  // overflow
        {R"({"a":{"dtype":"Q9","shape":[2,2],"data_offsets":[0,16]}})", 16},             // unknown dtype
        {R"({"a":{"shape":[2,2],"data_offsets":[0,16]}})", 16},                          // no dtype
        {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", 16},                 // one offset
        {R"({"a":[1,2,3]})", 16},                                                        // not an object
        {R"([1,2])", 0},                                                                 // header not object
        {R"({"a":{"dtype":"F32","shape":[4],)", 16},                                     // broken JSON
        {R"({"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
         16},                                                                            // overlapping tensors
        {R"({"a":{"dtype":"F32","shape":)" + std::string(100000, '[') + "]}}", 16},     // nested 100k deep
    };
    for (const auto& [header, data] : cases) {
        write_file(path, make_file(header, data));
        EXPECT_THROW(SafetensorsFile{path}, Error) << header.substr(0, 100);
    }
    write_file(path, make_file(cases[11].first, 16));
    try {
        SafetensorsFile{path};
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tensors 'a' and 'b' overlap"), std::string::npos) << e.what();
    }
    // header length larger than the file, and absurd
    std::string bytes = make_file(R"({})", 0);
    const std::uint64_t huge = 1ull << 40;
    std::memcpy(bytes.data(), &huge, 8);
    write_file(path, bytes);
    EXPECT_THROW(SafetensorsFile{path}, Error);
    write_file(path, "abc");
    EXPECT_THROW(SafetensorsFile{path}, Error);
    EXPECT_THROW(SafetensorsFile{temp_path("does_not_exist")}, Error);
}

TEST(Safetensors, TruncationsOfARealHeaderAreErrors) {
    AQPIM_REQUIRE_SHARED("models/austen-13m/model.safetensors");
    // The shared model's header and first tensor bytes, cut at many offsets.
    std::ifstream in(test::shared_dir() + "/models/austen-13m/model.safetensors", std::ios::binary);
    std::string head(64 * 1024, '\0');
    in.read(head.data(), std::streamsize(head.size()));
    const std::string path = temp_path("trunc.safetensors");
    for (std::size_t cut : {0ul, 4ul, 8ul, 9ul, 100ul, 1000ul, 3000ul, 5000ul, 65536ul}) {
        write_file(path, head.substr(0, cut));
        EXPECT_THROW(SafetensorsFile{path}, Error) << "cut at " << cut;
    }
    // flipped bytes inside the JSON header: either a clean error or a file whose tensors are all in bounds
    for (std::size_t pos = 8; pos < 2000; pos += 37) {
        std::string bad = head;
        bad[pos] = char(bad[pos] ^ 0x5a);
        write_file(path, bad);
        try {
            SafetensorsFile f(path);
            for (const auto& [name, info] : f.tensors()) EXPECT_LE(info.begin + info.n_bytes, head.size());
        } catch (const Error&) {
        }
    }
}

}  // namespace
}  // namespace aqpim
