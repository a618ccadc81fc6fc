// The `pq:` keys: one declarative table (name, type, accepted values, default, meaning) from which
// parsing, the canonical text, keys() and the listing of `aqpim info --pq-keys` / docs/kv-pq.md
// come. Checks that involve several keys are PqKvParams::validate's (pq_cache_params.cpp).

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "aqpim/error.h"
#include "aqpim/kv_pq.h"
#include "kv/pq_budget_solver.h"

namespace aqpim {

namespace {

const PqKvParams kDefaults{};

/// One key: what the listing says, how a spec value is read into the parameters, and the value the
/// canonical text writes ("" leaves the key out: it has its default).
struct PqKey {
    std::string name, type, values, fallback, doc;
    std::function<void(PqKvParams&, const KvSchemeSpec&, const KvShape&)> parse;
    std::function<std::string(const PqKvParams&)> print;
};

std::string number_text(double x) { return fmt::format("{}", x); }

std::int64_t int_in(const KvSchemeSpec& spec, const std::string& key, std::int64_t fallback, std::int64_t lo,
                    std::int64_t hi) {
    const std::int64_t x = spec.get_int(key, fallback);
    AQPIM_CHECK(x >= lo && x <= hi, "--kv {}: {}={} must be in {}..{}", spec.text, key, x, lo, hi);
    return x;
}

PqKey int_key(const std::string& name, int PqKvParams::*field, int lo, int hi, std::string doc) {
    return {name, "integer", fmt::format("{}..{}", lo, hi), std::to_string(kDefaults.*field), std::move(doc),
            [=](PqKvParams& p, const KvSchemeSpec& s, const KvShape&) { p.*field = int(int_in(s, name, p.*field, lo, hi)); },
            [=](const PqKvParams& p) { return p.*field == kDefaults.*field ? std::string() : std::to_string(p.*field); }};
}

PqKey flag_key(const std::string& name, bool PqKvParams::*field, std::string doc) {
    return {name, "flag", "0|1", kDefaults.*field ? "1" : "0", std::move(doc),
            [=](PqKvParams& p, const KvSchemeSpec& s, const KvShape&) {
                if (!s.has(name)) return;
                const std::string v = s.params.at(name);
                AQPIM_CHECK(v == "0" || v == "1", "--kv {}: {}={} must be 0 or 1", s.text, name, v);
                p.*field = v == "1";
            },
            [=](const PqKvParams& p) { return p.*field == kDefaults.*field ? std::string() : (p.*field ? "1" : "0"); }};
}

std::string join(const std::vector<std::string>& names, const char* sep) {
    std::string s;
    for (const std::string& n : names) s += (s.empty() ? "" : sep) + n;
    return s;
}

/// A named choice stored through get/set of its index into names.
PqKey choice_key(const std::string& name, std::vector<std::string> names, std::function<int(const PqKvParams&)> get,
                 std::function<void(PqKvParams&, int)> set, std::string doc) {
    const std::string fallback = names[std::size_t(get(kDefaults))];
    return {name, "choice", join(names, "|"), fallback, std::move(doc),
            [=](PqKvParams& p, const KvSchemeSpec& s, const KvShape&) {
                if (!s.has(name)) return;
                const std::string v = s.params.at(name);
                const auto it = std::find(names.begin(), names.end(), v);
                AQPIM_CHECK(it != names.end(), "--kv {}: {}={} is not one of {}", s.text, name, v, join(names, "|"));
                set(p, int(it - names.begin()));
            },
            [=](const PqKvParams& p) { return get(p) == get(kDefaults) ? std::string() : names[std::size_t(get(p))]; }};
}

std::string join_layers(const std::vector<int>& layers) {
    std::string s;
    for (int l : layers) s += (s.empty() ? "" : "+") + std::to_string(l);
    return s;
}

const std::vector<PqKey>& key_table() {
    static const std::vector<PqKey> table = [] {
        std::vector<PqKey> t;
        t.push_back({"m", "integer", "1..head_dim, dividing it", "32 (head_dim / 2 below 64)",
                     "subspaces of keys and values (head_dim / m dims each)",
                     [](PqKvParams& p, const KvSchemeSpec& s, const KvShape& shape) {
                         // dsub 2 on heads narrower than 64 keeps RoPE pairs whole.
                         const int D = shape.head_dim;
                         p.m = int(int_in(s, "m", std::min(kDefaults.m, std::max(1, D / 2)), 1, D));
                     },
                     [](const PqKvParams& p) { return p.bits == 0 && p.m != kDefaults.m ? std::to_string(p.m) : ""; }});
        // Init-captures (field = field): clang 14 cannot capture a structured binding itself.
        for (auto [name, field] : {std::pair{"k_m", &PqKvParams::k_m}, std::pair{"v_m", &PqKvParams::v_m}})
            t.push_back({name, "integer", "1..head_dim, dividing it", "m",
                         std::string("subspaces of ") + (name[0] == 'k' ? "keys" : "values") + " alone",
                         [name = std::string(name), field = field](PqKvParams& p, const KvSchemeSpec& s, const KvShape& shape) {
                             if (s.has(name)) p.*field = int(int_in(s, name, 0, 1, shape.head_dim));
                         },
                         [field = field](const PqKvParams& p) { return p.*field > 0 ? std::to_string(p.*field) : ""; }});
        t.push_back(choice_key(
            "nbits", {"4", "8"}, [](const PqKvParams& p) { return p.nbits == 8 ? 1 : 0; },
            [](PqKvParams& p, int i) { p.nbits = i == 1 ? 8 : 4; }, "bits per sub-code"));
        t.push_back(int_key("calib", &PqKvParams::calib, 1, 1 << 24,
                            "tokens (sinks included) before the first codebooks exist"));
        t.push_back(int_key("refresh", &PqKvParams::refresh, 0, 1 << 30,
                            "coded tokens per codebook version, 0 = one version; a multiple of page, at least calib - sinks"));
        t.push_back(int_key("versions", &PqKvParams::versions, 1, 1 << 16,
                            "most codebook versions per layer and sequence; at the bound the refresh stops"));
        t.push_back(int_key("sinks", &PqKvParams::sinks, 0, 1 << 24, "first tokens kept f16"));
        t.push_back(int_key("window", &PqKvParams::window, 0, 1 << 24, "last tokens kept uncoded (stored as wq)"));
        t.push_back({"f16_layers", "layer list", "layers, e.g. 0+1+4-7", "none", "layers kept dense f16",
                     [](PqKvParams& p, const KvSchemeSpec& s, const KvShape&) { p.f16_layers = s.get_int_list("f16_layers"); },
                     [](const PqKvParams& p) { return join_layers(p.f16_layers); }});
        t.push_back({"bits", "number", "(0, 32]", "off",
                     "target bits/element, everything counted, at the PEAK on the way to ctx; solves every key left open "
                     "that costs bits (the bits= solver)",
                     [](PqKvParams& p, const KvSchemeSpec& s, const KvShape&) {
                         if (!s.has("bits")) return;
                         p.bits = s.get_float("bits", 0.0);
                         AQPIM_CHECK(std::isfinite(p.bits) && p.bits > 0 && p.bits <= 32,
                                     "--kv {}: bits={} must be a number of bits per element in (0, 32]", s.text,
                                     s.params.at("bits"));
                         AQPIM_CHECK(!s.has("m") && !s.has("k_m") && !s.has("v_m"),
                                     "--kv {}: bits= chooses m per layer for keys and values; give either bits or m/k_m/v_m",
                                     s.text);
                     },
                     [](const PqKvParams& p) { return p.bits > 0 ? number_text(p.bits) : ""; }});
        t.push_back({"ctx", "integer", "0..2^40", "the run's context", "the context bits= is stated at",
                     [](PqKvParams& p, const KvSchemeSpec& s, const KvShape&) {
                         const std::int64_t ctx = s.get_int("ctx", 0);
                         AQPIM_CHECK(ctx >= 0 && ctx <= (std::int64_t(1) << 40), "--kv {}: ctx={} must be a token count >= 0",
                                     s.text, ctx);
                         p.ctx = ctx;
                     },
                     [](const PqKvParams& p) { return p.ctx > 0 ? std::to_string(p.ctx) : ""; }});
        t.push_back({"v_weight", "number", "> 0", number_text(kDefaults.v_weight),
                     "weight of value error against key error when bits= splits the code width",
                     [](PqKvParams& p, const KvSchemeSpec& s, const KvShape&) {
                         p.v_weight = s.get_float("v_weight", kDefaults.v_weight);
                         AQPIM_CHECK(std::isfinite(p.v_weight) && p.v_weight > 0, "--kv {}: v_weight={} must be a positive number",
                                     s.text, p.v_weight);
                     },
                     [](const PqKvParams& p) { return p.v_weight != kDefaults.v_weight ? number_text(p.v_weight) : ""; }});
        t.push_back({"aniso", "number", "0..1e6", number_text(kDefaults.aniso),
                     "weight of each key's self-score error beside its distance when keys are coded (0 = nearest centroid)",
                     [](PqKvParams& p, const KvSchemeSpec& s, const KvShape&) {
                         p.aniso = s.get_float("aniso", kDefaults.aniso);
                         AQPIM_CHECK(std::isfinite(p.aniso) && p.aniso >= 0 && p.aniso <= 1e6,
                                     "--kv {}: aniso={} must be a number in 0..1e6", s.text, p.aniso);
                     },
                     [](const PqKvParams& p) { return p.aniso != kDefaults.aniso ? number_text(p.aniso) : ""; }});
        t.push_back(int_key("page", &PqKvParams::page, 32, 1 << 20, "tokens per page, a multiple of the 32-token code block"));
        t.push_back(choice_key(
            "pairs", {"none", "interleaved", "neox", "model"},
            [](const PqKvParams& p) { return p.pairs_from_model ? 3 : int(p.pairs); },
            [](PqKvParams& p, int i) {
                p.pairs_from_model = i == 3;
                p.pairs = i == 3 ? RopePairs::none : RopePairs(i);
            },
            "RoPE pair layout of the keys (model: KvShape::rope_pairs)"));
        t.push_back(choice_key(
            "order", {"contiguous", "balanced"},
            [](const PqKvParams& p) { return p.order == SubspaceOrder::contiguous ? 0 : 1; },
            [](PqKvParams& p, int i) { p.order = i == 0 ? SubspaceOrder::contiguous : SubspaceOrder::variance_balanced; },
            "subspace plan: variance-balanced or contiguous"));
        t.push_back(choice_key(
            "rotation", {"none", "hadamard", "random"}, [](const PqKvParams& p) { return int(p.rotation); },
            [](PqKvParams& p, int i) { p.rotation = Rotation(i); }, "rotation of keys and values before quantizing"));
        t.push_back(flag_key("k_scale", &PqKvParams::k_scale, "per-channel scale folding of keys"));
        t.push_back(flag_key("v_scale", &PqKvParams::v_scale, "per-channel scale folding of values"));
        t.push_back({"aug", "integer", "0..64", "3 when pairs and frequencies are known, else 0",
                     "RoPE-rotated copies of each key calibration token",
                     [](PqKvParams& p, const KvSchemeSpec& s, const KvShape&) {
                         if (s.has("aug")) p.aug = int(int_in(s, "aug", 0, 0, 64));
                     },
                     [](const PqKvParams& p) { return p.aug >= 0 ? std::to_string(p.aug) : ""; }});
        t.push_back({"rope_theta", "number", "0 or > 1", "the model's", "RoPE base for aug when the shape has no frequencies",
                     [](PqKvParams& p, const KvSchemeSpec& s, const KvShape&) {
                         p.rope_theta = s.get_float("rope_theta", 0.0);
                         AQPIM_CHECK(std::isfinite(p.rope_theta) && p.rope_theta >= 0,
                                     "--kv {}: rope_theta={} must be a RoPE base > 1", s.text, s.params.at("rope_theta"));
                     },
                     [](const PqKvParams& p) { return p.rope_theta > 0 ? number_text(p.rope_theta) : ""; }});
        t.push_back(int_key("iters", &PqKvParams::iters, 0, 10000, "k-means iterations at most"));
        t.push_back(int_key("trials", &PqKvParams::trials, 0, 8,
                            "k-means++ draws per seed, the best kept: 0 = 2 + ln k (greedy), 1 = plain k-means++"));
        t.push_back({"seed", "integer", ">= 0", std::to_string(kDefaults.seed), "k-means and rotation seed",
                     [](PqKvParams& p, const KvSchemeSpec& s, const KvShape&) {
                         const std::int64_t seed = s.get_int("seed", std::int64_t(kDefaults.seed));
                         AQPIM_CHECK(seed >= 0, "--kv {}: seed={} must be >= 0", s.text, seed);
                         p.seed = std::uint64_t(seed);
                     },
                     [](const PqKvParams& p) { return p.seed != kDefaults.seed ? std::to_string(p.seed) : ""; }});
        t.push_back(choice_key(
            "attn", {"codes", "decode"}, [](const PqKvParams& p) { return int(p.attn); },
            [](PqKvParams& p, int i) { p.attn = PqAttendMode(i); },
            "attention on the codes (lookup tables) or decode-then-dense (the reference)"));
        t.push_back(choice_key(
            "scores", {"f32", "int8", "auto"}, [](const PqKvParams& p) { return int(p.scores); },
            [](PqKvParams& p, int i) { p.scores = PqScorePath(i); },
            "score tables: exact f32, int8 (m <= 256), or auto: int8 where it is the faster scan (4-bit keys; 8-bit at avx512)"));
        t.push_back(choice_key(
            "values", {"auto", "histogram", "permute", "pairs", "bf16"}, [](const PqKvParams& p) { return int(p.values); },
            [](PqKvParams& p, int i) { p.values = PqValuePath(i); },
            "value pass: auto (bf16 with int8 score tables where the CPU has AVX512-BF16, else the fastest exact one), "
            "histogram, permute, pairs (nbits 4) or bf16 (nbits 4, AVX512-BF16: weights and codebook rounded to bf16)"));
        t.push_back(choice_key(
            "cb", {"f32", "f16", "int8"}, [](const PqKvParams& p) { return int(p.codebooks); },
            [](PqKvParams& p, int i) { p.codebooks = CodebookStorage(i); },
            "codebook storage (f16: half the bytes; int8 with a scale per dimension: about 0.3)"));
        t.push_back(choice_key(
            "wq", PqKvParams::window_types(),
            [](const PqKvParams& p) {
                const std::vector<std::string>& names = PqKvParams::window_types();
                return int(std::find(names.begin(), names.end(), p.window_type) - names.begin());
            },
            [](PqKvParams& p, int i) { p.window_type = PqKvParams::window_types()[std::size_t(i)]; },
            "storage of the window and of rows waiting for a codebook version (sinks stay f16)"));
        return t;
    }();
    return table;
}

}  // namespace

const std::vector<std::string>& PqKvParams::keys() {
    static const std::vector<std::string> names = [] {
        std::vector<std::string> k;
        for (const PqKey& key : key_table()) k.push_back(key.name);
        return k;
    }();
    return names;
}

std::string PqKvParams::key_listing() {
    std::string s = "| key | type | values | default | meaning |\n|---|---|---|---|---|\n";
    for (const PqKey& k : key_table())
        s += fmt::format("| `{}` | {} | {} | {} | {} |\n", k.name, k.type, k.values, k.fallback, k.doc);
    return s;
}

PqKvParams PqKvParams::from_spec(const KvSchemeSpec& spec, const KvShape& shape, std::int64_t context) {
    AQPIM_CHECK(spec.name == "pq", "--kv {}: not a pq scheme", spec.text);
    spec.require_known_keys(keys());
    PqKvParams p;
    for (const PqKey& k : key_table()) k.parse(p, spec, shape);
    try {
        p.validate(shape);
        const std::int64_t stated = p.ctx > 0 ? p.ctx : context;
        if (p.bits > 0 && stated > 0) {
            std::vector<std::string> given;
            for (const auto& [key, value] : spec.params) given.push_back(key);
            p = kv::solve_pq_budget(p, given, shape, stated).params;
        }
    } catch (const Error& e) {
        AQPIM_FAIL("--kv {}: {}", spec.text, e.what());
    }
    return p;
}

std::string PqKvParams::to_string() const {
    std::string s = "pq";
    for (const PqKey& k : key_table())
        if (const std::string v = k.print(*this); !v.empty()) s += fmt::format("{}{}={}", s == "pq" ? ":" : ",", k.name, v);
    return s;
}

}  // namespace aqpim
