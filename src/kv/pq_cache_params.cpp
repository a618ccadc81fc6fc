// The pq parameters' checks, the token schedule, the layout and the byte
// arithmetic shared by memory(), the budget and `aqpim info`.

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "aqpim/error.h"
#include "aqpim/simd.h"
#include "kv/pq_compact_centroids.h"
#include "kv/pq_layout.h"
#include "pq/subspace_plan.h"
#include "core/int_math.h"

namespace aqpim {

const std::vector<std::string>& PqKvParams::window_types() {
    static const std::vector<std::string> names = {"f16", "q8_0", "q4_0", "int8", "int4"};
    return names;
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
    AQPIM_CHECK(values == PqValuePath::automatic || values == PqValuePath::histogram || nbits == 4,
                "values={} needs nbits=4 (got {})", aqpim::to_string(values), nbits);
    AQPIM_CHECK(values != PqValuePath::bf16 || bf16_values_here(),
                "values=bf16 needs AVX512-BF16 at the avx512 kernel level (this CPU {} it; level {})",
                cpu_has_avx512_bf16() ? "has" : "lacks", simd_level_name(active_simd_level()));
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
                kp == RopePairs::neox ? "neox" : "interleaved");
    AQPIM_CHECK(std::find(window_types().begin(), window_types().end(), window_type) != window_types().end(),
                "wq={}: expected f16, q8_0, q4_0, int8 or int4", window_type);
    kv::pq_window_codec(*this, shape);  // q8_0/q4_0 need head_dim a multiple of 32
    // The quantizers' own checks (Hadamard needs a power-of-two head_dim, ...).
    ProductQuantizer check_k(kv::pq_key_params(*this, shape, Mk));
    ProductQuantizer check_v(kv::pq_value_params(*this, shape, Mv));
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

bool plan_is_identity_by_construction(const PQParams& q) {
    return q.order == SubspaceOrder::contiguous &&
           is_identity_permutation(make_subspace_plan(q.D, q.M, q.pairs, q.order, nullptr));
}

std::size_t predicted_quantizer_bytes(const PQParams& q, CodebookStorage codebooks) {
    const std::size_t D = std::size_t(q.D);
    std::size_t b = centroid_bytes(codebooks, std::size_t(1) << q.nbits, D);  // centroids [M][ksub][dsub]
    if (q.scale_folding) b += D * 4;
    if (!plan_is_identity_by_construction(q)) b += D * 4;
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

std::int64_t PqParts::add_layer_rows(const PqSchedule& s, std::int64_t n, std::uint64_t streams, std::uint64_t row,
                                    std::uint64_t tail_row) {
    sinks += std::uint64_t(std::clamp<std::int64_t>(n, 0, s.sinks)) * streams * row;
    const std::int64_t k = n - s.sinks;
    if (k <= 0) return 0;
    const std::int64_t c = s.coded(n), tail = k - c, win = std::min<std::int64_t>(k, s.window);
    window += std::uint64_t(win) * streams * tail_row;
    precal += std::uint64_t(tail - win) * streams * tail_row;
    return c;
}

PqParts pq_footprint_parts(const PqKvParams& p, const KvShape& shape, const PqLayout& L, std::int64_t n) {
    PqParts parts;
    if (n <= 0) return parts;
    const std::uint64_t n_kv_heads = std::uint64_t(shape.n_kv_head), row = L.row_bytes, tail_row = L.tail_row_bytes;
    parts.window_type = p.window_type;
    const PqSchedule& s = L.sched;
    if (L.n_coded_layers > 0) {
        const std::int64_t c = parts.add_layer_rows(s, n, std::uint64_t(L.n_coded_layers) * n_kv_heads * 2, row, tail_row);
        const std::int64_t pages = ceil_div(c, p.page);
        parts.codes = std::uint64_t(c) * L.width;
        parts.page_slack = std::uint64_t(pages) * L.code_page_bytes - parts.codes;
        if (n > s.sinks) parts.codebooks = std::uint64_t(s.versions_trained(n - s.sinks)) * L.codebook_bytes;
    }
    if (L.n_dense_layers > 0) {
        parts.dense = std::uint64_t(n) * std::uint64_t(L.n_dense_layers) * n_kv_heads * 2 * row;
        const std::int64_t pages = ceil_div(n, p.page);
        parts.page_slack += std::uint64_t(pages) * L.dense_page_bytes - parts.dense;
    }
    return parts;
}

std::vector<std::int64_t> pq_peak_candidates(const PqKvParams& p, const PqLayout& L, std::int64_t ctx) {
    // Between two of these points the footprint does not decrease (codes fill pages already counted,
    // the window grows, rows wait for a version), so its maximum over [1, ctx] is at one of them: the
    // token before a version trains, before a new code or dense page starts, and ctx itself (and the
    // tokens where a constant stretch begins, so that the first token holding the peak is found).
    std::vector<std::int64_t> at = {ctx};
    const PqSchedule& s = L.sched;
    const auto add = [&](std::int64_t n) {
        if (n >= 1 && n <= ctx) at.push_back(n);
    };
    for (int j = 0; j < s.versions; ++j) {
        const std::int64_t trains = s.sinks + s.version_start(j) + s.n_train;
        add(trains - 1);
        add(trains);
        if (trains > ctx) break;
    }
    // Each point and the one after it: the first token at which the maximum is reached is one of them.
    for (std::int64_t start = s.sinks + s.window + 1; start <= ctx + 1; start += p.page) add(start - 1), add(start);
    if (L.n_dense_layers > 0)
        for (std::int64_t start = 1; start <= ctx + 1; start += p.page) add(start - 1), add(start);
    add(s.sinks);
    add(s.sinks + s.window);
    return at;
}

PqPeak pq_peak_footprint(const PqKvParams& p, const KvShape& shape, const PqLayout& L, std::int64_t ctx) {
    PqPeak peak;
    for (std::int64_t n : pq_peak_candidates(p, L, ctx)) {
        const std::uint64_t b = pq_footprint_parts(p, shape, L, n).total();
        if (b > peak.bytes || (b == peak.bytes && n < peak.at)) peak.bytes = b, peak.at = n;
    }
    return peak;
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
    const std::size_t n_kv_heads = std::size_t(shape.n_kv_head);
    L.dense_page_bytes =
        L.n_dense_layers > 0 ? round_up_64(std::size_t(p.page) * L.n_dense_layers * n_kv_heads * 2 * L.row_bytes) : 0;
    if (L.n_coded_layers == 0) return L;

    const std::vector<int> ck = pq_m_candidates(p, shape, true), cv = pq_m_candidates(p, shape, false);
    const int mk0 = p.bits > 0 ? ck.front() : p.key_m(), mv0 = p.bits > 0 ? cv.front() : p.value_m();
    L.codebook_bytes = std::uint64_t(L.n_coded_layers) * n_kv_heads *
                       (predicted_quantizer_bytes(pq_key_params(p, shape, mk0), p.codebooks) +
                        predicted_quantizer_bytes(pq_value_params(p, shape, mv0), p.codebooks));
    const auto width_of = [&](int Mk, int Mv) {
        return std::size_t(L.n_coded_layers) * n_kv_heads * (pq_token_code_bytes(Mk, p.nbits) + pq_token_code_bytes(Mv, p.nbits));
    };
    if (p.bits <= 0) {
        L.Mk = p.key_m();
        L.Mv = p.value_m();
        L.width = width_of(L.Mk, L.Mv);
        L.code_page_bytes = round_up_64(std::size_t(p.page) * L.width);
        return L;
    }

    // bits=: the widest page whose sequence stays within the target at its peak on the way to `ctx`
    // tokens (the peak counts every codebook version and row waiting for one, per element of ctx).
    const std::int64_t ctx = p.ctx > 0 ? p.ctx : context;
    AQPIM_CHECK(ctx > 0, "bits={} needs the context it is stated at: give ctx= or set the run's context", p.bits);
    const std::size_t min_w = width_of(ck.front(), cv.front()), max_w = width_of(ck.back(), cv.back());
    const double elements = double(ctx) * double(shape.elements_per_token());
    const std::uint64_t allowed = std::uint64_t(std::floor(p.bits * elements / 8.0));
    const auto peak_at_width = [&](std::size_t w) {
        PqLayout trial = L;
        trial.width = w;
        trial.code_page_bytes = round_up_64(std::size_t(p.page) * w);
        return pq_peak_footprint(p, shape, trial, ctx).bytes;
    };
    if (L.sched.coded(ctx) == 0) {
        // Nothing is coded at ctx: the codes cost nothing there, but the rest must fit the target.
        const std::uint64_t rest = peak_at_width(0);
        AQPIM_CHECK(rest <= allowed,
                    "bits={} at context {} is out of reach: no token is coded by then (calib, sinks and window hold "
                    "them all), and those rows take {:.3f} bits/element at their peak (state the target at a longer "
                    "ctx=, or give calib= and window= below the context)",
                    p.bits, ctx, double(rest) * 8.0 / elements);
        L.width = max_w;
    } else {
        const std::uint64_t lowest = peak_at_width(min_w);
        AQPIM_CHECK(lowest <= allowed,
                    "bits={} at context {} is out of reach: with the smallest codes (k_m={}, v_m={}) a sequence peaks "
                    "at {:.3f} bits/element on its way there (sinks, window and pre-calibration rows, codebooks and "
                    "dense layers alone take {:.3f})",
                    p.bits, ctx, ck.front(), cv.front(), double(lowest) * 8.0 / elements,
                    double(peak_at_width(0)) * 8.0 / elements);
        std::size_t lo = min_w, hi = max_w;  // the widest w with peak_at_width(w) <= allowed (monotone in w)
        while (lo < hi) {
            const std::size_t mid = lo + (hi - lo + 1) / 2;
            if (peak_at_width(mid) <= allowed) lo = mid;
            else hi = mid - 1;
        }
        L.width = lo;
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
    const std::int64_t context = options.context > 0 ? options.context : seq_len;
    const PqKvParams p = PqKvParams::from_spec(spec, shape, context);
    const kv::PqLayout layout = kv::make_pq_layout(p, shape, context);
    PqCapacity cap;
    cap.per_sequence.n_tokens = seq_len;
    kv::pq_footprint_parts(p, shape, layout, seq_len).add_to(cap.per_sequence);
    const kv::PqPeak peak = kv::pq_peak_footprint(p, shape, layout, seq_len);
    cap.peak_bytes = peak.bytes;
    cap.peak_at = peak.at;
    cap.n_sequences = cap.peak_bytes > 0 ? std::int64_t(budget / cap.peak_bytes) : 0;
    cap.code_pages = ceil_div(layout.sched.coded(seq_len), p.page);
    if (layout.n_coded_layers == 0) cap.code_pages = 0;
    cap.code_page_bytes = layout.code_page_bytes;
    cap.bits_per_element = cap.per_sequence.bits_per_element(shape);
    return cap;
}

}  // namespace aqpim
