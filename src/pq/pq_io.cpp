// ProductQuantizer persistence. The byte layout is specified in docs/pq-format.md; keep the two in
// step (a layout change bumps kVersion).

#include <bit>
#include <climits>
#include <cmath>
#include <cstring>
#include <fstream>
#include <istream>
#include <numeric>
#include <ostream>

#include "aqpim/error.h"
#include "aqpim/pq.h"
#include "pq/rotation.h"
#include "pq/subspace_plan.h"

namespace aqpim {

namespace {

constexpr char kMagic[4] = {'A', 'Q', 'P', 'Q'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 80;
constexpr std::uint32_t kFlagScale = 1u << 0;  // scale section present (scale_folding)
constexpr std::uint32_t kFlagPerm = 1u << 1;   // permutation section present (else identity)
constexpr std::int64_t kMaxD = 65536;          // load refuses larger D
constexpr double kOrthoTol = 1e-4;             // |R·Rᵀ - I| max entry accepted on load

std::uint32_t fnv1a(std::uint32_t h, const std::uint8_t* p, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 16777619u;
    return h;
}
constexpr std::uint32_t kFnvBasis = 2166136261u;

// Section sizes in bytes, in file order.
struct Sections {
    std::uint64_t centroids = 0, scale = 0, perm = 0, signs = 0, rotation = 0;
    std::uint64_t total() const { return centroids + scale + perm + signs + rotation; }
};
Sections section_bytes(std::uint64_t D, std::uint64_t nbits, bool scale, bool perm, Rotation rot) {
    Sections s;
    s.centroids = (std::uint64_t(1) << nbits) * D * 4;  // M * ksub * dsub floats = ksub * D
    s.scale = scale ? D * 4 : 0;
    s.perm = perm ? D * 4 : 0;
    s.signs = rot == Rotation::hadamard ? D * 4 : 0;
    s.rotation = rot == Rotation::random_orthogonal ? D * D * 4 : 0;
    return s;
}

// ---- little-endian writer -----------------------------------------------------------------------

struct Writer {
    std::vector<std::uint8_t> buf;
    void u32(std::uint32_t v) {
        for (int b = 0; b < 4; ++b) buf.push_back(std::uint8_t(v >> (8 * b)));
    }
    void u64(std::uint64_t v) {
        for (int b = 0; b < 8; ++b) buf.push_back(std::uint8_t(v >> (8 * b)));
    }
    void f64(double v) { u64(std::bit_cast<std::uint64_t>(v)); }
    void f32s(const float* p, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) u32(std::bit_cast<std::uint32_t>(p[i]));
    }
    void i32s(const std::int32_t* p, std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) u32(std::uint32_t(p[i]));
    }
};

// ---- little-endian reader: every read names its field; the checksum runs over all it reads --------

struct Reader {
    std::istream& in;
    std::uint64_t offset = 0;
    std::uint32_t hash = kFnvBasis;

    // n bytes, read in chunks so a hostile size fails on truncation before a huge allocation
    std::vector<std::uint8_t> bytes(std::uint64_t n, const char* field, bool hashed = true) {
        std::vector<std::uint8_t> out;
        constexpr std::uint64_t kStep = 1 << 20;
        while (out.size() < n) {
            std::size_t old = out.size(), step = std::size_t(std::min(kStep, n - old));
            out.resize(old + step);
            in.read(reinterpret_cast<char*>(out.data() + old), std::streamsize(step));
            std::size_t got = std::size_t(in.gcount());
            AQPIM_CHECK(got == step, "pq file: truncated at offset {} while reading '{}' ({} bytes, {} available)",
                        offset + old + got, field, n, old + got);
        }
        if (hashed) hash = fnv1a(hash, out.data(), out.size());
        offset += n;
        return out;
    }
    static std::uint32_t le32(const std::uint8_t* p) {
        return std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 | std::uint32_t(p[3]) << 24;
    }
    std::uint32_t u32(const char* field, bool hashed = true) { return le32(bytes(4, field, hashed).data()); }
    std::uint64_t u64(const char* field) {
        auto b = bytes(8, field);
        return std::uint64_t(le32(b.data())) | std::uint64_t(le32(b.data() + 4)) << 32;
    }
    double f64(const char* field) { return std::bit_cast<double>(u64(field)); }
    std::vector<float> f32s(std::uint64_t n, const char* field) {
        auto b = bytes(n * 4, field);
        std::vector<float> v(n);
        for (std::uint64_t i = 0; i < n; ++i) v[i] = std::bit_cast<float>(le32(b.data() + 4 * i));
        return v;
    }
};

void check_finite(const std::vector<float>& v, const char* field, std::string_view what) {
    for (std::size_t i = 0; i < v.size(); ++i)
        AQPIM_CHECK(std::isfinite(v[i]), "{}: '{}'[{}] = {} is not finite", what, field, i, v[i]);
}

void check_size(std::size_t got, std::size_t want, const char* field, std::string_view what) {
    AQPIM_CHECK(got == want, "{}: '{}' holds {} values, the parameters need {}", what, field, got, want);
}

}  // namespace

std::size_t ProductQuantizer::parameter_bytes() const {
    const bool perm = !perm_identity_;  // set with perm_ (set_derived_): the memory accounting asks per step
    return std::size_t(section_bytes(params_.D, params_.nbits, params_.scale_folding, perm, params_.rotation).total());
}

void ProductQuantizer::save(std::ostream& out) const {
    AQPIM_CHECK(trained_ && has_centroids(), "save: the ProductQuantizer is not trained or has no codebooks");
    const PQParams& p = params_;
    const bool perm = !is_identity_permutation(perm_);
    const Sections sec = section_bytes(p.D, p.nbits, p.scale_folding, perm, p.rotation);
    Writer w;
    w.buf.reserve(kHeaderBytes + sec.total() + 4);
    w.buf.insert(w.buf.end(), kMagic, kMagic + 4);                                // 0  magic
    w.u32(kVersion);                                                              // 4  version
    w.u32(std::uint32_t(p.D));                                                    // 8  D
    w.u32(std::uint32_t(p.M));                                                    // 12 M
    w.u32(std::uint32_t(p.nbits));                                                // 16 nbits
    w.u32(std::uint32_t(p.pairs));                                                // 20 rope_pairs
    w.u32(std::uint32_t(p.order));                                                // 24 subspace_order
    w.u32(std::uint32_t(p.rotation));                                             // 28 rotation
    w.u32((p.scale_folding ? kFlagScale : 0) | (perm ? kFlagPerm : 0));           // 32 flags
    w.u32(std::uint32_t(p.kmeans.init));                                          // 36 kmeans_init
    w.u32(std::uint32_t(p.kmeans.max_iter));                                      // 40 kmeans_max_iter
    w.u32(0);                                                                     // 44 reserved
    w.u64(p.seed);                                                                // 48 seed
    w.u64(p.kmeans.seed);                                                         // 56 kmeans_seed
    w.f64(p.kmeans.tol);                                                          // 64 kmeans_tol
    w.u64(sec.total());                                                           // 72 payload_bytes
    AQPIM_ASSERT(w.buf.size() == kHeaderBytes);
    w.f32s(centroids_.data(), centroids_.size());
    if (p.scale_folding) w.f32s(scale_.data(), scale_.size());
    if (perm) w.i32s(perm_.data(), perm_.size());
    if (p.rotation == Rotation::hadamard) w.f32s(hadamard_signs_.data(), hadamard_signs_.size());
    if (p.rotation == Rotation::random_orthogonal) w.f32s(rotation_.data(), rotation_.size());
    AQPIM_ASSERT(w.buf.size() == kHeaderBytes + sec.total());
    w.u32(fnv1a(kFnvBasis, w.buf.data(), w.buf.size()));
    out.write(reinterpret_cast<const char*>(w.buf.data()), std::streamsize(w.buf.size()));
    AQPIM_CHECK(out.good(), "save: writing {} bytes failed", w.buf.size());
}

ProductQuantizer ProductQuantizer::load(std::istream& in) {
    Reader r{in};
    auto magic = r.bytes(4, "magic");
    AQPIM_CHECK(std::memcmp(magic.data(), kMagic, 4) == 0, "pq file: bad magic (expected \"AQPQ\")");
    const std::uint32_t version = r.u32("version");
    AQPIM_CHECK(version == kVersion, "pq file: unsupported version {} (this build reads version {})", version,
                kVersion);
    const std::uint32_t D = r.u32("D"), M = r.u32("M"), nbits = r.u32("nbits");
    AQPIM_CHECK(D >= 1 && D <= kMaxD, "pq file: 'D' = {}: expected 1..{}", D, kMaxD);
    AQPIM_CHECK(M >= 1 && M <= D && D % M == 0, "pq file: 'M' = {}: expected a divisor of D={}", M, D);
    AQPIM_CHECK(nbits == 4 || nbits == 8, "pq file: 'nbits' = {}: expected 4 or 8", nbits);
    const std::uint32_t pairs = r.u32("rope_pairs"), order = r.u32("subspace_order"), rot = r.u32("rotation");
    AQPIM_CHECK(pairs <= 2, "pq file: 'rope_pairs' = {}: expected 0 (none), 1 (interleaved) or 2 (neox)", pairs);
    AQPIM_CHECK(order <= 1, "pq file: 'subspace_order' = {}: expected 0 (contiguous) or 1 (variance_balanced)", order);
    AQPIM_CHECK(rot <= 2, "pq file: 'rotation' = {}: expected 0 (none), 1 (hadamard) or 2 (random_orthogonal)", rot);
    const std::uint32_t flags = r.u32("flags");
    AQPIM_CHECK((flags & ~(kFlagScale | kFlagPerm)) == 0, "pq file: 'flags' = {:#x}: unknown bits set", flags);
    const std::uint32_t init = r.u32("kmeans_init"), max_iter = r.u32("kmeans_max_iter");
    AQPIM_CHECK(init <= 1, "pq file: 'kmeans_init' = {}: expected 0 (kmeans++) or 1 (random)", init);
    AQPIM_CHECK(max_iter <= INT_MAX, "pq file: 'kmeans_max_iter' = {}: expected <= {}", max_iter, INT_MAX);
    const std::uint32_t reserved = r.u32("reserved");
    AQPIM_CHECK(reserved == 0, "pq file: 'reserved' = {}: expected 0", reserved);
    PQParams p;
    p.D = int(D);
    p.M = int(M);
    p.nbits = int(nbits);
    p.pairs = RopePairs(pairs);
    p.order = SubspaceOrder(order);
    p.rotation = Rotation(rot);
    p.scale_folding = (flags & kFlagScale) != 0;
    p.kmeans.init = KMeansInit(init);
    p.kmeans.max_iter = int(max_iter);
    p.seed = r.u64("seed");
    p.kmeans.seed = r.u64("kmeans_seed");
    p.kmeans.tol = r.f64("kmeans_tol");
    AQPIM_CHECK(std::isfinite(p.kmeans.tol) && p.kmeans.tol >= 0, "pq file: 'kmeans_tol' = {}: expected finite, >= 0",
                p.kmeans.tol);
    const bool has_perm = (flags & kFlagPerm) != 0;
    const Sections sec = section_bytes(D, nbits, p.scale_folding, has_perm, p.rotation);
    const std::uint64_t payload = r.u64("payload_bytes");
    AQPIM_CHECK(payload == sec.total(), "pq file: 'payload_bytes' = {}: the header implies {}", payload, sec.total());

    ProductQuantizer pq = [&] {
        try {
            return ProductQuantizer(p);
        } catch (const Error& e) {
            AQPIM_FAIL("pq file: bad parameters: {}", e.what());
        }
    }();
    auto centroids = r.f32s(sec.centroids / 4, "centroids");
    auto scale = r.f32s(sec.scale / 4, "scale");
    auto perm_raw = r.bytes(sec.perm, "permutation");
    auto signs = r.f32s(sec.signs / 4, "hadamard_signs");
    auto rotation = r.f32s(sec.rotation / 4, "rotation");
    const std::uint32_t computed = r.hash;
    const std::uint32_t stored = r.u32("checksum", /*hashed=*/false);
    AQPIM_CHECK(stored == computed, "pq file: 'checksum' = {:#010x} does not match the contents ({:#010x})", stored,
                computed);

    PqTrainedParts parts{std::move(centroids), std::move(scale), {}, std::move(signs), std::move(rotation)};
    if (has_perm) {
        parts.permutation.resize(D);
        for (std::uint32_t i = 0; i < D; ++i) parts.permutation[i] = std::int32_t(Reader::le32(perm_raw.data() + 4 * i));
    }
    pq.assign_parts_(std::move(parts), "pq file");
    return pq;
}

ProductQuantizer ProductQuantizer::from_parts(const PQParams& params, PqTrainedParts parts, std::string_view what) {
    ProductQuantizer pq = [&] {
        try {
            return ProductQuantizer(params);
        } catch (const Error& e) {
            AQPIM_FAIL("{}: bad parameters: {}", what, e.what());
        }
    }();
    pq.assign_parts_(std::move(parts), what);
    return pq;
}

void ProductQuantizer::assign_parts_(PqTrainedParts parts, std::string_view what) {
    const PQParams& p = params_;
    const std::size_t D = std::size_t(p.D);
    check_size(parts.centroids.size(), std::size_t(ksub()) * D, "centroids", what);
    check_size(parts.scale.size(), p.scale_folding ? D : 0, "scale", what);
    if (!parts.permutation.empty()) check_size(parts.permutation.size(), D, "permutation", what);
    check_size(parts.hadamard_signs.size(), p.rotation == Rotation::hadamard ? D : 0, "hadamard_signs", what);
    check_size(parts.rotation.size(), p.rotation == Rotation::random_orthogonal ? D * D : 0, "rotation", what);
    check_finite(parts.centroids, "centroids", what);
    check_finite(parts.scale, "scale", what);
    for (std::size_t d = 0; d < parts.scale.size(); ++d)
        AQPIM_CHECK(parts.scale[d] > 0, "{}: 'scale'[{}] = {}: expected > 0", what, d, parts.scale[d]);
    std::vector<std::int32_t> perm = std::move(parts.permutation);
    if (perm.empty()) {
        perm.resize(D);
        std::iota(perm.begin(), perm.end(), 0);
    }
    AQPIM_CHECK(is_permutation(perm), "{}: 'permutation' is not a permutation of 0..{}", what, D - 1);
    AQPIM_CHECK(plan_keeps_pairs(perm, p.M, p.pairs), "{}: 'permutation' splits a RoPE pair across subspaces", what);
    for (std::size_t d = 0; d < parts.hadamard_signs.size(); ++d)
        AQPIM_CHECK(parts.hadamard_signs[d] == 1.0f || parts.hadamard_signs[d] == -1.0f,
                    "{}: 'hadamard_signs'[{}] = {}: expected +1 or -1", what, d, parts.hadamard_signs[d]);
    const std::vector<float>& rotation = parts.rotation;
    check_finite(rotation, "rotation", what);
    if (!rotation.empty()) {  // R·Rᵀ = I
        for (std::size_t a = 0; a < D; ++a)
            for (std::size_t b = 0; b <= a; ++b) {
                double dot = 0;
                for (std::size_t c = 0; c < D; ++c) dot += double(rotation[a * D + c]) * rotation[b * D + c];
                AQPIM_CHECK(std::abs(dot - (a == b ? 1.0 : 0.0)) <= kOrthoTol,
                            "{}: 'rotation' is not orthogonal (row {} · row {} = {})", what, a, b, dot);
            }
    }

    centroids_.resize(parts.centroids.size());
    std::memcpy(centroids_.data(), parts.centroids.data(), sizeof(float) * parts.centroids.size());
    scale_ = std::move(parts.scale);
    perm_ = std::move(perm);
    hadamard_signs_ = std::move(parts.hadamard_signs);
    rotation_ = std::move(parts.rotation);
    set_derived_();
    finish_training_();
}

void ProductQuantizer::save_file(const std::string& path) const {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    AQPIM_CHECK(out.is_open(), "save_file: cannot open '{}' for writing", path);
    save(out);
    out.close();
    AQPIM_CHECK(!out.fail(), "save_file: writing '{}' failed", path);
}

ProductQuantizer ProductQuantizer::load_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    AQPIM_CHECK(in.is_open(), "load_file: cannot open '{}'", path);
    try {
        return load(in);
    } catch (const Error& e) {
        AQPIM_FAIL("{}: {}", path, e.what());
    }
}

}  // namespace aqpim
