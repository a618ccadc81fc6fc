// make_turbo_kv_cache: the `turbo` and `qjl` specs (aqpim/kv_turbo.h) to the parts of their codes.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "aqpim/error.h"
#include "aqpim/kv_turbo.h"
#include "kv/spec_params.h"
#include "kv/turbo_cache.h"

namespace aqpim {

namespace {

using kv::int_param;
using kv::TurboPartSpec;

constexpr std::int64_t kDefaultSeed = 1;
constexpr int kDefaultSel = 128;  // chosen on the first half of northanger-abbey.txt (docs/kv-baselines.md)
constexpr int kMaxTokens = 1 << 30;
// Seeds of the key and value rotations / projections are kept apart (pq/rotation.h streams).
constexpr std::uint64_t kKeyStream = 0x4b45595300000000ull, kValueStream = 0x56414c5300000000ull;

/// What turbo and qjl share: sel (only with outlier channels), window, seed, attn.
struct CommonParams {
    int sel = 0, window = 0;
    std::int64_t seed = kDefaultSeed;
    bool decode = false;
    /// ",sel=..,window=..[,seed=..][,attn=decode]" as scheme() prints them.
    std::string text() const {
        std::string s = sel ? fmt::format(",sel={}", sel) : "";
        s += fmt::format(",window={}", window);
        if (seed != kDefaultSeed) s += fmt::format(",seed={}", seed);
        if (decode) s += ",attn=decode";
        return s;
    }
};

CommonParams common_params(const KvSchemeSpec& spec, bool has_outliers) {
    CommonParams c;
    AQPIM_CHECK(has_outliers || !spec.has("sel"),
                "--kv {}: sel= chooses outlier channels, and this setting has none", spec.text);
    c.sel = has_outliers ? int_param(spec, "sel", kDefaultSel, 1, kMaxTokens) : 0;
    c.window = int_param(spec, "window", 0, 0, kMaxTokens);
    c.seed = spec.get_int("seed", kDefaultSeed);
    AQPIM_CHECK(c.seed >= 0, "--kv {}: seed={} must be non-negative", spec.text, c.seed);
    if (spec.has("attn")) {
        const std::string& a = spec.params.at("attn");
        AQPIM_CHECK(a == "fast" || a == "decode", "--kv {}: attn={}: expected fast or decode", spec.text, a);
        c.decode = a == "decode";
    }
    return c;
}

std::unique_ptr<KvCache> build(kv::TurboCacheParams p, const CommonParams& c, const KvShape& shape,
                               const KvCacheOptions& options) {
    p.sel = c.sel;
    p.window = c.window;
    p.decode_attention = c.decode;
    return kv::make_turbo_qjl_cache(std::move(p), shape, options);
}

// ---- turbo -----------------------------------------------------------------------------------------

/// bits=B over head_dim channels: n_high channels at floor(B) + 1 bits, the rest at floor(B).
struct BitSplit {
    int low_bits = 0, n_high = 0;
};

BitSplit split_bits(const KvSchemeSpec& spec, double bits, int hd) {
    AQPIM_CHECK(bits >= 1 && bits <= 4, "--kv {}: bits={} must be in 1..4 (TurboQuant's codebooks have 1 to 4 bits)",
                spec.text, bits);
    BitSplit s;
    s.low_bits = int(std::floor(bits));
    const double high = (bits - s.low_bits) * hd;
    s.n_high = int(std::llround(high));
    AQPIM_CHECK(std::fabs(high - s.n_high) < 1e-6,
                "--kv {}: bits={} puts {:.4g} of head_dim {} channels at {} bits: give bits in steps of 1/{}", spec.text, bits,
                high, hd, s.low_bits + 1, hd);
    AQPIM_CHECK(s.n_high == 0 || (s.n_high >= 2 && hd - s.n_high >= 2),
                "--kv {}: bits={} gives parts of {} and {} channels; each needs at least 2", spec.text, bits, s.n_high,
                hd - s.n_high);
    return s;
}

/// The parts of one stream: [outliers at low + 1 bits,] the rest at low bits; keys with the QJL residual
/// spend one bit of each part on a sketch of as many signs as channels.
std::vector<TurboPartSpec> turbo_parts(const BitSplit& s, int hd, bool qjl_residual) {
    std::vector<TurboPartSpec> parts;
    auto add = [&](int dim, int bits) { parts.push_back({dim, bits - int(qjl_residual), qjl_residual ? dim : 0}); };
    if (s.n_high) add(s.n_high, s.low_bits + 1);
    add(hd - s.n_high, s.low_bits);
    return parts;
}

std::unique_ptr<KvCache> make_turbo(const KvSchemeSpec& spec, const KvShape& shape, const KvCacheOptions& options) {
    spec.require_known_keys({"bits", "qjl", "sel", "window", "seed", "attn"});
    const int hd = shape.head_dim;
    const double bits = spec.get_float("bits", 3.5);
    const bool qjl = int_param(spec, "qjl", 0, 0, 1) == 1;
    const BitSplit split = split_bits(spec, bits, hd);
    const CommonParams c = common_params(spec, split.n_high > 0);
    kv::TurboCacheParams p;
    p.scheme = fmt::format("turbo:bits={},qjl={}{}", bits, int(qjl), c.text());
    p.keys.emplace(hd, turbo_parts(split, hd, qjl), std::uint64_t(c.seed) ^ kKeyStream);
    p.values.emplace(kv::TurboStreamCoder(hd, turbo_parts(split, hd, false), std::uint64_t(c.seed) ^ kValueStream));
    return build(std::move(p), c, shape, options);
}

// ---- qjl -------------------------------------------------------------------------------------------

/// values=f16|q8_0|q4_0|int1..int8 (intB in groups of vg channels).
kv::TurboValueCodec qjl_values(const KvSchemeSpec& spec, int hd, std::string& text) {
    const std::string name = spec.has("values") ? spec.params.at("values") : "int2";
    const bool is_int = name.size() == 4 && name.rfind("int", 0) == 0 && name[3] >= '1' && name[3] <= '8';
    AQPIM_CHECK(is_int || name == "f16" || name == "q8_0" || name == "q4_0",
                "--kv {}: values={}: expected f16, q8_0, q4_0 or int1..int8", spec.text, name);
    AQPIM_CHECK(is_int || !spec.has("vg"), "--kv {}: vg= sets the groups of intB values, not of {}", spec.text, name);
    text = "values=" + name;
    if (name == "f16") return kv::TurboValueCodec(hd);
    if (!is_int) {
        AQPIM_CHECK(hd % 32 == 0, "--kv {}: values={} needs head_dim a multiple of 32 (blocks of 32), got {}", spec.text,
                    name, hd);
        return kv::TurboValueCodec(kv::RowCodec::ggml_blocks(hd, name == "q8_0" ? GgmlType::Q8_0 : GgmlType::Q4_0));
    }
    const int vg = int_param(spec, "vg", std::gcd(32, hd), 1, hd);
    AQPIM_CHECK(hd % vg == 0, "--kv {}: vg={} does not divide head_dim {}", spec.text, vg, hd);
    text += fmt::format(",vg={}", vg);
    return kv::TurboValueCodec(kv::RowCodec::affine_groups(hd, name[3] - '0', vg));
}

std::unique_ptr<KvCache> make_qjl(const KvSchemeSpec& spec, const KvShape& shape, const KvCacheOptions& options) {
    spec.require_known_keys({"m", "outliers", "outlier_m", "sel", "window", "values", "vg", "seed", "attn"});
    const int hd = shape.head_dim;
    const int m = int_param(spec, "m", 2 * hd, 1, 1 << 16);
    const int outliers = int_param(spec, "outliers", hd / 16, 0, hd - 1);
    AQPIM_CHECK(outliers > 0 || !spec.has("outlier_m"), "--kv {}: outlier_m= sizes the outliers' sketch, and outliers=0",
                spec.text);
    const int outlier_m = outliers ? int_param(spec, "outlier_m", 16 * outliers, 1, 1 << 16) : 0;
    const CommonParams c = common_params(spec, outliers > 0);
    std::string values_text;
    kv::TurboValueCodec values = qjl_values(spec, hd, values_text);
    std::vector<TurboPartSpec> parts;
    if (outliers) parts.push_back({outliers, 0, outlier_m});
    parts.push_back({hd - outliers, 0, m});
    kv::TurboCacheParams p;
    p.scheme = fmt::format("qjl:m={},outliers={}", m, outliers) + (outliers ? fmt::format(",outlier_m={}", outlier_m) : "") +
               c.text() + "," + values_text;
    p.keys.emplace(hd, parts, std::uint64_t(c.seed) ^ kKeyStream);
    p.values.emplace(std::move(values));
    return build(std::move(p), c, shape, options);
}

}  // namespace

const std::vector<std::string>& turbo_kv_scheme_names() {
    static const std::vector<std::string> names = {"turbo", "qjl"};
    return names;
}

bool is_turbo_kv_scheme(const std::string& name) {
    const auto& names = turbo_kv_scheme_names();
    return std::find(names.begin(), names.end(), name) != names.end();
}

std::unique_ptr<KvCache> make_turbo_kv_cache(const KvSchemeSpec& spec, const KvShape& shape,
                                             const KvCacheOptions& options) {
    if (spec.name == "turbo") return make_turbo(spec, shape, options);
    if (spec.name == "qjl") return make_qjl(spec, shape, options);
    AQPIM_FAIL("--kv {}: '{}' is not a turbo or qjl scheme", spec.text, spec.name);
}

}  // namespace aqpim
