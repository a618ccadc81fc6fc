// The pq spec (parsing, validation, canonical text), the token schedule, the layout and the byte
// arithmetic shared by memory(), the budget and `aqpim info`.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "aqpim/error.h"
#include "kv/pq_layout.h"
#include "pq/subspace_plan.h"

namespace aqpim {

namespace {

const PqKvParams kDefaults{};

std::string value_of(const KvSchemeSpec& spec, const std::string& key) { return spec.params.at(key); }

/// An integer parameter in [lo, hi].
int int_param(const KvSchemeSpec& spec, const std::string& key, int fallback, std::int64_t lo, std::int64_t hi) {
    const std::int64_t x = spec.get_int(key, fallback);
    AQPIM_CHECK(x >= lo && x <= hi, "--kv {}: {}={} must be in {}..{}", spec.text, key, x, lo, hi);
    return int(x);
}

bool bool_param(const KvSchemeSpec& spec, const std::string& key, bool fallback) {
    if (!spec.has(key)) return fallback;
    const std::string v = value_of(spec, key);
    AQPIM_CHECK(v == "0" || v == "1", "--kv {}: {}={} must be 0 or 1", spec.text, key, v);
    return v == "1";
}

/// A named choice: the value must be one of names (its index is returned).
int choice_param(const KvSchemeSpec& spec, const std::string& key, const std::vector<std::string>& names, int fallback) {
    if (!spec.has(key)) return fallback;
    const std::string v = value_of(spec, key);
    for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == v) return int(i);
    std::string list;
    for (const std::string& n : names) list += (list.empty() ? "" : "|") + n;
    AQPIM_FAIL("--kv {}: {}={} is not one of {}", spec.text, key, v, list);
}

const std::vector<std::string> kPairsNames = {"none", "interleaved", "neox", "model"};
const std::vector<std::string> kOrderNames = {"contiguous", "balanced"};
const std::vector<std::string> kRotationNames = {"none", "hadamard", "random"};
const std::vector<std::string> kAttnNames = {"codes", "decode"};
const std::vector<std::string> kCodebookNames = {"f32", "f16"};
const std::vector<std::string> kWindowTypeNames = {"f16", "q8_0", "q4_0", "int8", "int4"};
const std::vector<std::string> kScoreNames = {"f32", "int8"};

std::string join_layers(const std::vector<int>& layers) {
    std::string s;
    for (int l : layers) {
        if (!s.empty()) s += '+';
        s += std::to_string(l);
    }
    return s;
}

}  // namespace

// ---- PqKvParams -------------------------------------------------------------------------------------

const std::vector<std::string>& PqKvParams::keys() {
    static const std::vector<std::string> k = {"m",     "k_m",   "v_m",    "nbits",    "calib",   "refresh",
                                               "versions", "sinks", "window", "f16_layers", "bits", "ctx", "v_weight",
                                               "page",  "pairs", "order",  "rotation", "k_scale", "v_scale",
                                               "aug",   "rope_theta", "iters", "trials", "seed", "attn", "scores", "cb", "wq"};
    return k;
}

std::vector<float> PqKvParams::key_inv_freq(const KvShape& shape) const {
    if (rope_theta <= 0) return shape.rope_inv_freq;
    std::vector<float> f(std::size_t(shape.head_dim / 2));
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = float(std::pow(rope_theta, -2.0 * double(i) / shape.head_dim));
    return f;
}

int PqKvParams::key_augment(const KvShape& shape) const {
    const bool known = key_pairs(shape) != RopePairs::none && !key_inv_freq(shape).empty();
    if (aug >= 0) return aug;
    return known ? 3 : 0;
}

bool PqKvParams::is_f16_layer(int il) const {
    return std::find(f16_layers.begin(), f16_layers.end(), il) != f16_layers.end();
}

PqKvParams PqKvParams::from_spec(const KvSchemeSpec& spec, const KvShape& shape) {
    AQPIM_CHECK(spec.name == "pq", "--kv {}: not a pq scheme", spec.text);
    spec.require_known_keys(keys());
    const int D = shape.head_dim;
    PqKvParams p;
    // Default m: 32, or head_dim / 2 on heads narrower than 64 (dsub 2 keeps RoPE pairs whole).
    p.m = int_param(spec, "m", std::min(kDefaults.m, std::max(1, D / 2)), 1, D);
    p.k_m = spec.has("k_m") ? int_param(spec, "k_m", 0, 1, D) : 0;
    p.v_m = spec.has("v_m") ? int_param(spec, "v_m", 0, 1, D) : 0;
    p.nbits = int_param(spec, "nbits", kDefaults.nbits, 4, 8);
    AQPIM_CHECK(p.nbits == 4 || p.nbits == 8, "--kv {}: nbits={} must be 4 or 8", spec.text, p.nbits);
    p.calib = int_param(spec, "calib", kDefaults.calib, 1, 1 << 24);
    p.refresh = int_param(spec, "refresh", kDefaults.refresh, 0, 1 << 30);
    p.versions = int_param(spec, "versions", kDefaults.versions, 1, 1 << 16);
    p.sinks = int_param(spec, "sinks", kDefaults.sinks, 0, 1 << 24);
    p.window = int_param(spec, "window", kDefaults.window, 0, 1 << 24);
    p.f16_layers = spec.get_int_list("f16_layers");
    p.bits = spec.get_float("bits", 0.0);
    AQPIM_CHECK(!spec.has("bits") || (std::isfinite(p.bits) && p.bits > 0 && p.bits <= 32),
                "--kv {}: bits={} must be a number of bits per element in (0, 32]", spec.text, value_of(spec, "bits"));
    AQPIM_CHECK(!spec.has("bits") || (!spec.has("m") && !spec.has("k_m") && !spec.has("v_m")),
                "--kv {}: bits= chooses m per layer for keys and values; give either bits or m/k_m/v_m", spec.text);
    const std::int64_t ctx = spec.get_int("ctx", 0);
    AQPIM_CHECK(ctx >= 0 && ctx <= (std::int64_t(1) << 40), "--kv {}: ctx={} must be a token count >= 0", spec.text, ctx);
    p.ctx = ctx;
    p.v_weight = spec.get_float("v_weight", kDefaults.v_weight);
    AQPIM_CHECK(std::isfinite(p.v_weight) && p.v_weight > 0, "--kv {}: v_weight={} must be a positive number", spec.text,
                p.v_weight);
    p.page = int_param(spec, "page", kDefaults.page, 32, 1 << 20);
    const int pairs = choice_param(spec, "pairs", kPairsNames, 3);
    p.pairs_from_model = pairs == 3;
    p.pairs = pairs == 3 ? RopePairs::none : RopePairs(pairs);
    p.order = choice_param(spec, "order", kOrderNames, 1) == 0 ? SubspaceOrder::contiguous
                                                                : SubspaceOrder::variance_balanced;
    p.rotation = Rotation(choice_param(spec, "rotation", kRotationNames, 0));
    p.k_scale = bool_param(spec, "k_scale", kDefaults.k_scale);
    p.v_scale = bool_param(spec, "v_scale", kDefaults.v_scale);
    p.aug = spec.has("aug") ? int_param(spec, "aug", 0, 0, 64) : -1;
    p.rope_theta = spec.get_float("rope_theta", 0.0);
    AQPIM_CHECK(std::isfinite(p.rope_theta) && p.rope_theta >= 0, "--kv {}: rope_theta={} must be a RoPE base > 1",
                spec.text, value_of(spec, "rope_theta"));
    p.iters = int_param(spec, "iters", kDefaults.iters, 0, 10000);
    p.trials = int_param(spec, "trials", kDefaults.trials, 0, 8);
    const std::int64_t seed = spec.get_int("seed", std::int64_t(kDefaults.seed));
    AQPIM_CHECK(seed >= 0, "--kv {}: seed={} must be >= 0", spec.text, seed);
    p.seed = std::uint64_t(seed);
    p.attn = PqAttendMode(choice_param(spec, "attn", kAttnNames, 0));
    p.f16_codebooks = choice_param(spec, "cb", kCodebookNames, kDefaults.f16_codebooks ? 1 : 0) == 1;
    p.window_type = kWindowTypeNames[std::size_t(choice_param(spec, "wq", kWindowTypeNames, 0))];
    p.scores = PqScorePath(choice_param(spec, "scores", kScoreNames, 0));
    try {
        p.validate(shape);
    } catch (const Error& e) {
        AQPIM_FAIL("--kv {}: {}", spec.text, e.what());
    }
    return p;
}

void PqKvParams::validate(const KvShape& shape) const {
    const int D = shape.head_dim;
    AQPIM_CHECK(nbits == 4 || nbits == 8, "nbits={} must be 4 or 8", nbits);
    AQPIM_CHECK(sinks >= 0 && window >= 0, "sinks={} and window={} must be >= 0", sinks, window);
    AQPIM_CHECK(calib > sinks, "calib={} must exceed sinks={}: codebooks learn from tokens after the sinks", calib,
                sinks);
    AQPIM_CHECK(page >= kCodeBlock && page % kCodeBlock == 0, "page={} must be a positive multiple of the {}-token code block",
                page, kCodeBlock);
    AQPIM_CHECK(versions >= 1, "versions={} must be >= 1", versions);
    AQPIM_CHECK(refresh >= 0, "refresh={} must be >= 0 (0 = never)", refresh);
    if (refresh > 0) {
        AQPIM_CHECK(refresh % page == 0, "refresh={} must be a multiple of page={} (a version serves whole pages)", refresh,
                    page);
        AQPIM_CHECK(refresh >= calib - sinks,
                    "refresh={} must be at least calib - sinks = {} (a version learns from its first calib - sinks "
                    "tokens before the next one starts)",
                    refresh, calib - sinks);
    }
    for (int l : f16_layers)
        AQPIM_CHECK(l >= 0 && l < shape.n_layer, "f16_layers: layer {} out of range [0, {})", l, shape.n_layer);
    AQPIM_CHECK(iters >= 0, "iters={} must be >= 0", iters);
    AQPIM_CHECK(trials >= 0 && trials <= 8, "trials={} must be 0-8 (0 = 2 + ln k)", trials);
    AQPIM_CHECK(rope_theta == 0 || rope_theta > 1, "rope_theta={} must be a RoPE base > 1 (0 = the model's)", rope_theta);
    AQPIM_CHECK(shape.rope_inv_freq.empty() || int(shape.rope_inv_freq.size()) == D / 2,
                "the shape's RoPE frequencies hold {} pairs, head_dim {} has {}", shape.rope_inv_freq.size(), D, D / 2);
    if (aug > 0) {
        AQPIM_CHECK(key_pairs(shape) != RopePairs::none,
                    "aug={} rotates RoPE pairs, but the key pair layout is unknown (give pairs=interleaved|neox)", aug);
        AQPIM_CHECK(!key_inv_freq(shape).empty(),
                    "aug={} needs the RoPE frequencies: the model gives none, give rope_theta=BASE", aug);
    }
    AQPIM_CHECK(bits >= 0 && std::isfinite(bits), "bits={} must be >= 0", bits);
    AQPIM_CHECK(ctx >= 0, "ctx={} must be >= 0", ctx);
    AQPIM_CHECK(std::isfinite(v_weight) && v_weight > 0, "v_weight={} must be positive", v_weight);
    AQPIM_CHECK(scores != PqScorePath::int8 || nbits == 4, "scores=int8 needs nbits=4 (got {})", nbits);
    int Mk = key_m(), Mv = value_m();
    if (bits > 0) {
        AQPIM_CHECK(k_m == 0 && v_m == 0, "bits= chooses m; give either bits or k_m/v_m");
        const std::vector<int> ck = kv::pq_m_candidates(*this, shape, true), cv = kv::pq_m_candidates(*this, shape, false);
        AQPIM_CHECK(!ck.empty() && !cv.empty(), "bits=: no m fits head_dim {}", D);
        Mk = ck.front();
        Mv = cv.front();
    }
    for (auto [name, M] : {std::pair{"k_m", Mk}, std::pair{"v_m", Mv}})
        AQPIM_CHECK(M >= 1 && D % M == 0, "{}={} does not divide head_dim {}", name, M, D);
    AQPIM_CHECK(scores != PqScorePath::int8 || Mk <= 256, "scores=int8 supports key m <= 256 (got {})", Mk);
    const RopePairs kp = key_pairs(shape);
    AQPIM_CHECK(kp == RopePairs::none || (D / Mk) % 2 == 0,
                "k_m={}: dsub={} must be even so that no RoPE pair of head_dim {} is split (pairs={})", Mk, D / Mk, D,
                kPairsNames[int(kp)]);
    AQPIM_CHECK(std::find(kWindowTypeNames.begin(), kWindowTypeNames.end(), window_type) != kWindowTypeNames.end(),
                "wq={}: expected f16, q8_0, q4_0, int8 or int4", window_type);
    kv::pq_window_codec(*this, shape);  // q8_0/q4_0 need head_dim a multiple of 32
    // The quantizers' own checks (Hadamard needs a power-of-two head_dim, ...).
    ProductQuantizer check_k(kv::pq_key_params(*this, shape, Mk));
    ProductQuantizer check_v(kv::pq_value_params(*this, shape, Mv));
}

std::string PqKvParams::to_string() const {
    std::string s = "pq";
    const auto add = [&](const char* key, const std::string& v) { s += fmt::format("{}{}={}", s == "pq" ? ":" : ",", key, v); };
    if (bits == 0 && m != kDefaults.m) add("m", std::to_string(m));
    if (k_m > 0) add("k_m", std::to_string(k_m));
    if (v_m > 0) add("v_m", std::to_string(v_m));
    if (nbits != kDefaults.nbits) add("nbits", std::to_string(nbits));
    if (calib != kDefaults.calib) add("calib", std::to_string(calib));
    if (refresh != kDefaults.refresh) add("refresh", std::to_string(refresh));
    if (versions != kDefaults.versions) add("versions", std::to_string(versions));
    if (sinks != kDefaults.sinks) add("sinks", std::to_string(sinks));
    if (window != kDefaults.window) add("window", std::to_string(window));
    if (!f16_layers.empty()) add("f16_layers", join_layers(f16_layers));
    if (bits > 0) add("bits", fmt::format("{}", bits));
    if (ctx > 0) add("ctx", std::to_string(ctx));
    if (v_weight != kDefaults.v_weight) add("v_weight", fmt::format("{}", v_weight));
    if (page != kDefaults.page) add("page", std::to_string(page));
    if (!pairs_from_model) add("pairs", kPairsNames[int(pairs)]);
    if (order != kDefaults.order) add("order", kOrderNames[order == SubspaceOrder::contiguous ? 0 : 1]);
    if (rotation != kDefaults.rotation) add("rotation", kRotationNames[int(rotation)]);
    if (k_scale != kDefaults.k_scale) add("k_scale", k_scale ? "1" : "0");
    if (v_scale != kDefaults.v_scale) add("v_scale", v_scale ? "1" : "0");
    if (aug >= 0) add("aug", std::to_string(aug));
    if (rope_theta > 0) add("rope_theta", fmt::format("{}", rope_theta));
    if (iters != kDefaults.iters) add("iters", std::to_string(iters));
    if (trials != kDefaults.trials) add("trials", std::to_string(trials));
    if (seed != kDefaults.seed) add("seed", std::to_string(seed));
    if (attn != kDefaults.attn) add("attn", kAttnNames[int(attn)]);
    if (scores != kDefaults.scores) add("scores", kScoreNames[int(scores)]);
    if (f16_codebooks != kDefaults.f16_codebooks) add("cb", kCodebookNames[f16_codebooks ? 1 : 0]);
    if (window_type != kDefaults.window_type) add("wq", window_type);
    return s;
}

// ---- PqSchedule ----------------------------------------------------------------------------------------

PqSchedule::PqSchedule(const PqKvParams& p)
    : sinks(p.sinks),
      window(p.window),
      n_train(p.calib - p.sinks),
      refresh(p.refresh),
      versions(p.refresh > 0 ? p.versions : 1) {}

int PqSchedule::version_of(std::int64_t i) const {
    if (refresh == 0) return 0;
    return int(std::min<std::int64_t>(versions - 1, i / refresh));
}

int PqSchedule::versions_started(std::int64_t k) const {
    if (refresh == 0 || k <= 0) return 1;
    return int(std::min<std::int64_t>(versions, k / refresh + 1));
}

int PqSchedule::versions_trained(std::int64_t k) const {
    if (k < n_train) return 0;
    if (refresh == 0) return 1;
    return int(std::min<std::int64_t>(versions, (k - n_train) / refresh + 1));
}

std::int64_t PqSchedule::trained_limit(std::int64_t k) const {
    if (k <= 0) return 0;
    const int j = versions_started(k) - 1;
    return k >= version_start(j) + n_train ? k : version_start(j);
}

std::int64_t PqSchedule::coded(std::int64_t n) const {
    const std::int64_t k = n - sinks;
    if (k <= 0) return 0;
    return std::max<std::int64_t>(0, std::min(k - window, trained_limit(k)));
}

namespace kv {

// ---- quantizer parameters ------------------------------------------------------------------------------

namespace {
PQParams base_params(const PqKvParams& p, const KvShape& shape, int M) {
    PQParams q;
    q.D = shape.head_dim;
    q.M = M;
    q.nbits = p.nbits;
    q.order = p.order;
    q.rotation = p.rotation;
    q.kmeans.max_iter = p.iters;
    q.kmeans.seed_trials = p.trials;
    q.kmeans.seed = p.seed;
    q.seed = p.seed;
    return q;
}
}  // namespace

PQParams pq_key_params(const PqKvParams& p, const KvShape& shape, int M) {
    PQParams q = base_params(p, shape, M);
    q.pairs = p.key_pairs(shape);
    q.scale_folding = p.k_scale;
    return q;
}

PQParams pq_value_params(const PqKvParams& p, const KvShape& shape, int M) {
    PQParams q = base_params(p, shape, M);
    q.pairs = RopePairs::none;
    q.scale_folding = p.v_scale;
    return q;
}

std::size_t predicted_quantizer_bytes(const PQParams& q, bool f16_codebooks) {
    const std::size_t D = std::size_t(q.D);
    std::size_t b = (std::size_t(1) << q.nbits) * D * (f16_codebooks ? 2 : 4);  // centroids [M][ksub][dsub]
    if (q.scale_folding) b += D * 4;
    const bool identity_plan = q.order == SubspaceOrder::contiguous &&
                               is_identity_permutation(make_subspace_plan(q.D, q.M, q.pairs, q.order, nullptr));
    if (!identity_plan) b += D * 4;
    if (q.rotation == Rotation::hadamard) b += D * 4;
    if (q.rotation == Rotation::random_orthogonal) b += D * D * 4;
    return b;
}

std::optional<RowCodec> pq_window_codec(const PqKvParams& p, const KvShape& shape) {
    const int D = shape.head_dim;
    if (p.window_type == "q8_0") return RowCodec::ggml_blocks(D, GgmlType::Q8_0);
    if (p.window_type == "q4_0") return RowCodec::ggml_blocks(D, GgmlType::Q4_0);
    if (p.window_type == "int8") return RowCodec::affine_groups(D, 8, std::gcd(D, 32));
    if (p.window_type == "int4") return RowCodec::affine_groups(D, 4, std::gcd(D, 32));
    return std::nullopt;
}

std::vector<int> pq_m_candidates(const PqKvParams& p, const KvShape& shape, bool keys) {
    const int D = shape.head_dim;
    const RopePairs pairs = keys ? p.key_pairs(shape) : RopePairs::none;
    std::vector<int> out;
    for (int M = 1; M <= D; ++M) {
        if (D % M != 0 || D / M > 32) continue;
        if (pairs != RopePairs::none && (D / M) % 2 != 0) continue;
        if (keys && p.scores == PqScorePath::int8 && M > 256) continue;
        out.push_back(M);
    }
    return out;
}

// ---- accounting -------------------------------------------------------------------------------------

void PqParts::add_to(KvMemory& m) const {
    m.add("codes", codes);
    m.add("page slack", page_slack);
    m.add("codebooks", codebooks);
    m.add("f16 sinks", sinks);
    m.add(window_type + " window", window);
    m.add(window_type + " pre-calibration", precal);
    m.add("dense f16 layers", dense);
}

PqParts pq_footprint_parts(const PqKvParams& p, const KvShape& shape, const PqLayout& L, std::int64_t n) {
    PqParts parts;
    if (n <= 0) return parts;
    const std::uint64_t n_kv = std::uint64_t(shape.n_kv_head), row = L.row_bytes, tail_row = L.tail_row_bytes;
    parts.window_type = p.window_type;
    const std::uint64_t coded_rows = std::uint64_t(L.n_coded_layers) * n_kv * 2;  // K and V rows of one token
    const PqSchedule& s = L.sched;
    const std::int64_t k = n - s.sinks;
    parts.sinks = std::uint64_t(std::min<std::int64_t>(n, s.sinks)) * coded_rows * row;
    if (k > 0 && L.n_coded_layers > 0) {
        const std::int64_t c = s.coded(n);
        const std::int64_t tail = k - c, win = std::min<std::int64_t>(k, s.window);
        parts.window = std::uint64_t(win) * coded_rows * tail_row;
        parts.precal = std::uint64_t(tail - win) * coded_rows * tail_row;
        const std::int64_t pages = (c + p.page - 1) / p.page;
        parts.codes = std::uint64_t(c) * L.width;
        parts.page_slack = std::uint64_t(pages) * L.code_page_bytes - parts.codes;
        parts.codebooks = std::uint64_t(s.versions_trained(k)) * L.codebook_bytes;
    }
    if (L.n_dense_layers > 0) {
        parts.dense = std::uint64_t(n) * std::uint64_t(L.n_dense_layers) * n_kv * 2 * row;
        const std::int64_t pages = (n + p.page - 1) / p.page;
        parts.page_slack += std::uint64_t(pages) * L.dense_page_bytes - parts.dense;
    }
    return parts;
}

namespace {

PqLayout layout_of(const PqKvParams& p, const KvShape& shape, std::int64_t context) {
    PqLayout L;
    L.sched = PqSchedule(p);
    L.row_bytes = std::size_t(shape.head_dim) * 2;
    const std::optional<RowCodec> tail = pq_window_codec(p, shape);
    L.tail_row_bytes = tail ? tail->row_bytes() : L.row_bytes;
    L.slot.assign(shape.n_layer, 0);
    L.dense.assign(shape.n_layer, false);
    for (int il = 0; il < shape.n_layer; ++il) {
        L.dense[il] = p.is_f16_layer(il);
        L.slot[il] = L.dense[il] ? L.n_dense_layers++ : L.n_coded_layers++;
    }
    const std::size_t n_kv = std::size_t(shape.n_kv_head);
    L.dense_page_bytes =
        L.n_dense_layers > 0 ? round_up_64(std::size_t(p.page) * L.n_dense_layers * n_kv * 2 * L.row_bytes) : 0;
    if (L.n_coded_layers == 0) return L;

    const std::vector<int> ck = pq_m_candidates(p, shape, true), cv = pq_m_candidates(p, shape, false);
    const int mk0 = p.bits > 0 ? ck.front() : p.key_m(), mv0 = p.bits > 0 ? cv.front() : p.value_m();
    L.codebook_bytes = std::uint64_t(L.n_coded_layers) * n_kv *
                       (predicted_quantizer_bytes(pq_key_params(p, shape, mk0), p.f16_codebooks) +
                        predicted_quantizer_bytes(pq_value_params(p, shape, mv0), p.f16_codebooks));
    const auto width_of = [&](int Mk, int Mv) {
        return std::size_t(L.n_coded_layers) * n_kv * (pq_token_code_bytes(Mk, p.nbits) + pq_token_code_bytes(Mv, p.nbits));
    };
    if (p.bits <= 0) {
        L.Mk = p.key_m();
        L.Mv = p.value_m();
        L.width = width_of(L.Mk, L.Mv);
        L.code_page_bytes = round_up_64(std::size_t(p.page) * L.width);
        return L;
    }

    // bits=: the widest page whose sequence of `ctx` tokens stays within the target.
    const std::int64_t ctx = p.ctx > 0 ? p.ctx : context;
    AQPIM_CHECK(ctx > 0, "bits={} needs the context it is stated at: give ctx= or set the run's context", p.bits);
    const std::size_t min_w = width_of(ck.front(), cv.front()), max_w = width_of(ck.back(), cv.back());
    const PqParts fixed = pq_footprint_parts(p, shape, L, ctx);  // width 0: no codes, no code pages
    const double elements = double(ctx) * double(shape.elements_per_token());
    const std::uint64_t allowed = std::uint64_t(std::floor(p.bits * elements / 8.0));
    const std::int64_t pages = (L.sched.coded(ctx) + p.page - 1) / p.page;
    const auto code_bytes = [&](std::size_t w) { return std::uint64_t(pages) * round_up_64(std::size_t(p.page) * w); };
    if (pages == 0) {
        // Nothing is coded at ctx: the codes cost nothing there, but the rest must fit the target.
        AQPIM_CHECK(fixed.total() <= allowed,
                    "bits={} at context {} is out of reach: no token is coded by then (calib, sinks and window hold "
                    "them all), and those rows take {:.3f} bits/element (state the target at a longer ctx=, or "
                    "give calib= and window= below the context)",
                    p.bits, ctx, double(fixed.total()) * 8.0 / elements);
        L.width = max_w;
    } else {
        const std::uint64_t have = allowed > fixed.total() ? allowed - fixed.total() : 0;
        std::size_t w = std::size_t(have / (std::uint64_t(pages) * std::uint64_t(p.page)));
        while (w > 0 && code_bytes(w) > have) --w;
        if (w < min_w) {
            const double reach = double(fixed.total() + code_bytes(min_w)) * 8.0 / elements;
            AQPIM_FAIL("bits={} at context {} is out of reach: sinks, window and pre-calibration rows, codebooks and "
                       "dense layers alone take {:.3f} bits/element, and the smallest codes (k_m={}, v_m={}) bring it "
                       "to {:.3f}",
                       p.bits, ctx, double(fixed.total()) * 8.0 / elements, ck.front(), cv.front(), reach);
        }
        L.width = std::min(w, max_w);
    }
    L.code_page_bytes = round_up_64(std::size_t(p.page) * L.width);
    return L;
}

}  // namespace

PqLayout make_pq_layout(const PqKvParams& p, const KvShape& shape, std::int64_t context) {
    PqLayout L = layout_of(p, shape, context);
    // A page holds `page` tokens of every coded (or dense) layer and head: bounded, so that page=
    // cannot make one allocation of gigabytes whatever the context.
    constexpr std::size_t kMaxPageBytes = std::size_t(1) << 30;
    for (const auto& [bytes, what] : {std::pair{L.code_page_bytes, "code"}, {L.dense_page_bytes, "dense f16"}})
        AQPIM_CHECK(bytes <= kMaxPageBytes,
                    "page={} makes a {} page of {} bytes ({} tokens of every layer and head it holds): at most {} "
                    "(use a smaller page=)", p.page, what, bytes, p.page, kMaxPageBytes);
    return L;
}

}  // namespace kv

// ---- public accounting ---------------------------------------------------------------------------------

KvMemory pq_sequence_footprint(const PqKvParams& params, const KvShape& shape, std::int64_t n_tokens,
                               std::int64_t context) {
    params.validate(shape);
    const kv::PqLayout layout = kv::make_pq_layout(params, shape, context > 0 ? context : n_tokens);
    KvMemory m;
    m.n_tokens = std::max<std::int64_t>(n_tokens, 0);
    kv::pq_footprint_parts(params, shape, layout, n_tokens).add_to(m);
    return m;
}

PqCapacity pq_capacity(const KvSchemeSpec& spec, const KvShape& shape, std::int64_t seq_len, std::uint64_t budget,
                       const KvCacheOptions& options) {
    AQPIM_CHECK(seq_len >= 1, "pq capacity: sequence length {} must be >= 1", seq_len);
    const PqKvParams p = PqKvParams::from_spec(spec, shape);
    const kv::PqLayout layout = kv::make_pq_layout(p, shape, options.context > 0 ? options.context : seq_len);
    PqCapacity cap;
    cap.per_sequence.n_tokens = seq_len;
    kv::pq_footprint_parts(p, shape, layout, seq_len).add_to(cap.per_sequence);
    for (std::int64_t n = 1; n <= seq_len; ++n) {
        const std::uint64_t b = kv::pq_footprint_parts(p, shape, layout, n).total();
        if (b > cap.peak_bytes) cap.peak_bytes = b, cap.peak_at = n;
    }
    cap.n_sequences = cap.peak_bytes > 0 ? std::int64_t(budget / cap.peak_bytes) : 0;
    cap.code_pages = (layout.sched.coded(seq_len) + p.page - 1) / p.page;
    if (layout.n_coded_layers == 0) cap.code_pages = 0;
    cap.code_page_bytes = layout.code_page_bytes;
    cap.bits_per_element = cap.per_sequence.bits_per_element(shape);
    return cap;
}

}  // namespace aqpim
