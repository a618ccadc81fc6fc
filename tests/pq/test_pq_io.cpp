#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "aqpim/error.h"
#include "aqpim/pq.h"
#include "pq/pq_test_data.h"

namespace aqpim {
namespace {

std::string to_bytes(const ProductQuantizer& pq) {
    std::ostringstream out;
    pq.save(out);
    return out.str();
}

ProductQuantizer from_bytes(const std::string& bytes) {
    std::istringstream in(bytes);
    return ProductQuantizer::load(in);
}

std::string load_error(const std::string& bytes) {
    try {
        from_bytes(bytes);
    } catch (const Error& e) {
        return e.what();
    }
    return "(no error)";
}

// Rewrite the trailing FNV-1a checksum so a crafted change reaches the field checks.
void fix_checksum(std::string& b) {
    std::uint32_t h = 2166136261u;
    for (std::size_t i = 0; i + 4 < b.size(); ++i) h = (h ^ std::uint8_t(b[i])) * 16777619u;
    for (int k = 0; k < 4; ++k) b[b.size() - 4 + k] = char(h >> (8 * k));
}

void put_u32(std::string& b, std::size_t off, std::uint32_t v) {
    for (int k = 0; k < 4; ++k) b[off + k] = char(v >> (8 * k));
}

ProductQuantizer trained(PQParams p, std::int64_t n = 64, std::uint32_t seed = 1) {
    p.kmeans.max_iter = 5;
    ProductQuantizer pq(p);
    auto x = test::correlated(n, p.D, seed);
    pq.train(x.data(), n);
    return pq;
}

// A small quantizer with every section: D=8, M=2, scale, permutation, Hadamard signs.
ProductQuantizer small_full() {
    PQParams p;
    p.D = 8;
    p.M = 2;
    p.scale_folding = true;
    p.rotation = Rotation::hadamard;
    p.order = SubspaceOrder::variance_balanced;
    p.pairs = RopePairs::interleaved;
    return trained(p);
}

TEST(PqIo, RoundTripIsBitExact) {
    std::vector<PQParams> configs(4);
    configs[0].D = 32, configs[0].M = 8;
    configs[1] = configs[0], configs[1].scale_folding = true, configs[1].rotation = Rotation::hadamard;
    configs[1].order = SubspaceOrder::variance_balanced, configs[1].pairs = RopePairs::neox;
    configs[2] = configs[0], configs[2].rotation = Rotation::random_orthogonal, configs[2].nbits = 8;
    configs[3] = configs[1], configs[3].pairs = RopePairs::none;
    auto x = test::correlated(300, 32, 77);
    for (const PQParams& p : configs) {
        ProductQuantizer a = trained(p, 300);
        std::string bytes = to_bytes(a);
        EXPECT_EQ(bytes.size(), 80 + a.parameter_bytes() + 4);
        ProductQuantizer b = from_bytes(bytes);
        EXPECT_EQ(to_bytes(b), bytes);
        EXPECT_EQ(b.params().D, p.D);
        EXPECT_EQ(b.params().nbits, p.nbits);
        EXPECT_EQ(b.params().pairs, p.pairs);
        EXPECT_EQ(b.params().order, p.order);
        EXPECT_EQ(b.params().rotation, p.rotation);
        EXPECT_EQ(b.params().scale_folding, p.scale_folding);
        EXPECT_EQ(b.params().seed, p.seed);
        EXPECT_EQ(b.params().kmeans.max_iter, 5);
        std::vector<std::uint8_t> ca(300 * 8), cb(300 * 8);
        a.encode(x.data(), 300, ca.data());
        b.encode(x.data(), 300, cb.data());
        ASSERT_EQ(ca, cb);
        std::vector<float> da(x.size()), db(x.size());
        a.decode(ca.data(), 300, da.data());
        b.decode(cb.data(), 300, db.data());
        ASSERT_EQ(std::memcmp(da.data(), db.data(), sizeof(float) * da.size()), 0);
    }
}

TEST(PqIo, FileRoundTrip) {
    ProductQuantizer a = small_full();
    std::string path = testing::TempDir() + "aqpim_pq_io_test.aqpq";
    a.save_file(path);
    ProductQuantizer b = ProductQuantizer::load_file(path);
    EXPECT_EQ(to_bytes(b), to_bytes(a));
    std::remove(path.c_str());
    EXPECT_THROW(ProductQuantizer::load_file(path), Error);
}

TEST(PqIo, UntrainedCannotBeSaved) {
    ProductQuantizer pq(PQParams{});
    std::ostringstream out;
    EXPECT_THROW(pq.save(out), Error);
}

TEST(PqIo, EveryTruncationIsAnError) {
    std::string bytes = to_bytes(small_full());
    for (std::size_t len = 0; len < bytes.size(); ++len) {
        std::string msg = load_error(bytes.substr(0, len));
        ASSERT_NE(msg.find("truncated"), std::string::npos) << "length " << len << ": " << msg;
    }
}

TEST(PqIo, EveryByteFlipIsAnError) {
    std::string bytes = to_bytes(small_full());
    for (std::size_t i = 0; i < bytes.size(); ++i) {
        std::string bad = bytes;
        bad[i] = char(bad[i] ^ 0x5a);
        ASSERT_THROW(from_bytes(bad), Error) << "offset " << i;
    }
}

TEST(PqIo, HeaderErrorsNameTheField) {
    const std::string bytes = to_bytes(small_full());
    auto with = [&](std::size_t off, std::uint32_t v) {
        std::string b = bytes;
        put_u32(b, off, v);
        return load_error(b);
    };
    std::string b = bytes;
    b[0] = 'X';
    EXPECT_NE(load_error(b).find("magic"), std::string::npos);
    EXPECT_NE(with(4, 2).find("version"), std::string::npos);
    EXPECT_NE(with(8, 0).find("'D'"), std::string::npos);
    EXPECT_NE(with(12, 3).find("'M'"), std::string::npos);
    EXPECT_NE(with(16, 3).find("'nbits'"), std::string::npos);
    EXPECT_NE(with(16, 8).find("payload_bytes"), std::string::npos);  // valid nbits, wrong sizes
    EXPECT_NE(with(20, 7).find("rope_pairs"), std::string::npos);
    EXPECT_NE(with(24, 2).find("subspace_order"), std::string::npos);
    EXPECT_NE(with(28, 3).find("'rotation'"), std::string::npos);
    EXPECT_NE(with(32, 0x10).find("flags"), std::string::npos);
    EXPECT_NE(with(44, 1).find("reserved"), std::string::npos);
    EXPECT_NE(with(48, 12345).find("checksum"), std::string::npos);  // seed: only the checksum sees it
}

TEST(PqIo, SectionValuesAreValidated) {
    const std::string bytes = to_bytes(small_full());
    // sections: centroids 16*8*4 = 512 B at 80, scale 32 B at 592, perm 32 B at 624, signs 32 B at 656
    ASSERT_EQ(bytes.size(), 80u + 512 + 32 + 32 + 32 + 4);
    auto crafted = [&](std::size_t off, std::uint32_t v) {
        std::string b = bytes;
        put_u32(b, off, v);
        fix_checksum(b);
        return load_error(b);
    };
    EXPECT_NE(crafted(80 + 4 * 7, std::bit_cast<std::uint32_t>(NAN)).find("centroids"), std::string::npos);
    EXPECT_NE(crafted(592, std::bit_cast<std::uint32_t>(-1.0f)).find("scale"), std::string::npos);
    EXPECT_NE(crafted(592 + 4, std::bit_cast<std::uint32_t>(INFINITY)).find("scale"), std::string::npos);
    EXPECT_NE(crafted(624, 9).find("permutation"), std::string::npos);
    EXPECT_NE(crafted(624, std::uint32_t(-1)).find("permutation"), std::string::npos);
    EXPECT_NE(crafted(656, std::bit_cast<std::uint32_t>(0.5f)).find("hadamard_signs"), std::string::npos);
    // a permutation that splits a RoPE pair: swap two entries across the subspaces
    std::string b = bytes;
    std::string first(b.data() + 624, 4), last(b.data() + 624 + 28, 4);
    b.replace(624, 4, last);
    b.replace(624 + 28, 4, first);
    fix_checksum(b);
    EXPECT_NE(load_error(b).find("RoPE pair"), std::string::npos);
}

// A header announcing a huge payload on a short stream fails on truncation (no huge allocation).
TEST(PqIo, HugeHeaderOnShortStreamIsTruncated) {
    std::string b = to_bytes(small_full()).substr(0, 80);
    const std::uint64_t D = 65536, payload = 256 * D * 4 + D * D * 4;  // 8-bit centroids + matrix
    put_u32(b, 8, std::uint32_t(D));
    put_u32(b, 12, 1);
    put_u32(b, 16, 8);
    put_u32(b, 20, 0);
    put_u32(b, 28, 2);
    put_u32(b, 32, 0);
    put_u32(b, 72, std::uint32_t(payload));
    put_u32(b, 76, std::uint32_t(payload >> 32));
    b += std::string(1000, '\0');
    EXPECT_NE(load_error(b).find("truncated"), std::string::npos) << load_error(b);
}

// Random bytes behind a valid magic and version: always an aqpim::Error, never a crash.
TEST(PqIo, RandomBytesAreRejected) {
    std::mt19937 rng(5);
    const std::string good = to_bytes(small_full());
    for (int t = 0; t < 300; ++t) {
        std::string b = good.substr(0, 8);
        const std::size_t len = rng() % (good.size() + 64);
        for (std::size_t i = 0; i < len; ++i) b += char(rng());
        if (t % 2) b.replace(8, std::min<std::size_t>(24, b.size() - 8), good.substr(8, 24));  // plausible D, M, nbits...
        ASSERT_THROW(from_bytes(b), Error) << "trial " << t;
    }
}

TEST(PqIo, NonOrthogonalRotationIsRejected) {
    PQParams p;
    p.D = 8;
    p.M = 2;
    p.rotation = Rotation::random_orthogonal;
    std::string b = to_bytes(trained(p));
    // centroids 512 B at 80, then the matrix (no scale, identity permutation)
    ASSERT_EQ(b.size(), 80u + 512 + 256 + 4);
    put_u32(b, 80 + 512, std::bit_cast<std::uint32_t>(2.0f));
    fix_checksum(b);
    EXPECT_NE(load_error(b).find("orthogonal"), std::string::npos);
}

}  // namespace
}  // namespace aqpim
