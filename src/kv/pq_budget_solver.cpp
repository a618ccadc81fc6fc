// The bits= solver: a grid over the settings that cost bits, each checked by its exact peak footprint
// (pq_peak_footprint) and ranked by an error model fitted on the tuning half of the text.

#include "kv/pq_budget_solver.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "aqpim/error.h"
#include "kv/pq_layout.h"

namespace aqpim::kv {

namespace {

// ---- the error model, fitted on northanger-abbey.txt part 1/2 (the tuning half), austen-13m, c = 1024,
// 8 chunks, pq:refresh=0,cb=f16 with one key changed at a time (docs/kv-pq.md, "The bits= solver"):
// mean KL 0.00917 / 0.00535 / 0.00165 at m = 16 / 32 / 64 (0.5 / 1 / 2 bits per coded element);
// window 32 / 64 / 128: 0.0115 / 0.00535 / 0.0032; wq q8_0 0.00541, q4_0 0.0107; calib 128: 0.0096;
// m = 16 with nbits 8 (1 bit per coded element): 0.00335; sinks 1: 0.00522.
constexpr double kCodeKl = 0.0053;       ///< KL of 1 bit per coded element (m = 32 at 4 bits), window 64
constexpr double kCodeSlope = 1.6;       ///< KL falls 2^(-slope) per extra bit per coded element
constexpr double kWindowExponent = 0.9;  ///< code error scales as (64 / window)^exponent
constexpr double kNbits8Gain = 0.63;     ///< code error factor of 8-bit codes at equal bits per element
/// Added KL of the window and pre-calibration rows stored as wq=.
double window_storage_kl(const std::string& wq) {
    if (wq == "q8_0" || wq == "int8") return 0.0001;
    if (wq == "q4_0" || wq == "int4") return 0.0053;
    return 0;
}
/// Added KL of codebooks learned from fewer calibration tokens than 256.
double calibration_kl(int calib) { return calib >= 256 ? 0 : 0.0043 * (256.0 / calib - 1); }
/// Added KL of fewer sinks than 4: none measurable down to 1 (0.00522 vs 0.00535); 0 sinks not tried.
double sinks_kl(int sinks) { return sinks >= 1 ? 0 : 0.01; }

bool given(const std::vector<std::string>& keys, const char* key) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
}

/// The values a key may take: its given value alone, or the grid.
template <class T>
std::vector<T> choices(const std::vector<std::string>& keys, const char* key, T value, std::vector<T> grid) {
    if (given(keys, key)) return {value};
    return grid;
}

}  // namespace

double pq_predicted_kl(const PqKvParams& p, double code_bits) {
    const double window = std::max(1, p.window);
    double code = kCodeKl * std::exp2(-kCodeSlope * (code_bits - 1.0)) * std::pow(64.0 / window, kWindowExponent);
    if (p.nbits == 8) code *= kNbits8Gain;
    return code + window_storage_kl(p.window_type) + calibration_kl(p.calib) + sinks_kl(p.sinks);
}

PqBudgetChoice solve_pq_budget(const PqKvParams& given_params, const std::vector<std::string>& keys,
                               const KvShape& shape, std::int64_t ctx) {
    AQPIM_CHECK(given_params.bits > 0 && ctx > 0, "the bits= solver needs a target and a context");
    const PqKvParams& g = given_params;
    const double elements = double(ctx) * double(shape.elements_per_token());
    PqBudgetChoice best;
    best.predicted_kl = std::numeric_limits<double>::infinity();
    double lowest = std::numeric_limits<double>::infinity();
    std::string first_error;
    for (const std::string& wq : choices<std::string>(keys, "wq", g.window_type, {"f16", "q8_0", "q4_0", "int8", "int4"}))
        for (int window : choices(keys, "window", g.window, {16, 32, 64, 128, 256}))
            for (int calib : choices(keys, "calib", g.calib, {64, 96, 128, 160, 192, 224, 256}))
                for (int sinks : choices(keys, "sinks", g.sinks, {1, 4}))
                    for (int nbits : choices(keys, "nbits", g.nbits, {4, 8}))
                        for (CodebookStorage cb : choices(keys, "cb", g.codebooks, {CodebookStorage::f16, CodebookStorage::int8})) {
                            PqKvParams q = g;
                            q.window_type = wq;
                            q.window = window;
                            q.calib = calib;
                            q.sinks = sinks;
                            q.nbits = nbits;
                            q.codebooks = cb;
                            if (!given(keys, "refresh")) q.refresh = 0;
                            q.ctx = ctx;
                            try {
                                q.validate(shape);
                                // The lowest peak of this setting: its smallest codes.
                                PqKvParams smallest = q;
                                smallest.bits = 0;
                                smallest.k_m = pq_m_candidates(q, shape, true).front();
                                smallest.v_m = pq_m_candidates(q, shape, false).front();
                                const PqLayout Ls = make_pq_layout(smallest, shape, ctx);
                                lowest = std::min(lowest, double(pq_peak_footprint(smallest, shape, Ls, ctx).bytes) * 8 / elements);
                                const PqLayout L = make_pq_layout(q, shape, ctx);
                                const double coded_elements_per_token =
                                    2.0 * L.n_coded_layers * shape.n_kv_head * shape.head_dim;
                                const double code_bits = L.n_coded_layers > 0 && L.sched.coded(ctx) > 0
                                                             ? 8.0 * double(L.width) / coded_elements_per_token
                                                             : 0;
                                const double kl = pq_predicted_kl(q, code_bits);
                                if (kl < best.predicted_kl) {
                                    best.params = q;
                                    best.code_bits = code_bits;
                                    best.predicted_kl = kl;
                                    best.peak_bits = double(pq_peak_footprint(q, shape, L, ctx).bytes) * 8 / elements;
                                }
                            } catch (const Error& e) {
                                if (first_error.empty()) first_error = e.what();
                            }
                        }
    if (std::isinf(best.predicted_kl)) {
        AQPIM_CHECK(std::isfinite(lowest), "bits={} at context {}: no setting of the given keys is valid ({})", g.bits, ctx,
                    first_error);
        AQPIM_FAIL("bits={} at context {} is out of reach: the lowest peak any setting reaches is {:.3f} bits/element",
                   g.bits, ctx, std::ceil(lowest * 1000) / 1000);
    }
    return best;
}

}  // namespace aqpim::kv
