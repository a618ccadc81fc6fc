// The retrieval view of attention weights: peaked reference rows, kept argmax and weight by distance
// back (aqpim/retrieval.h).

#include <cmath>

#include "aqpim/error.h"
#include "aqpim/retrieval.h"

namespace aqpim {

void RetrievalBin::merge(const RetrievalBin& o) {
    n_queries += o.n_queries;
    n_argmax += o.n_argmax;
    n_kept += o.n_kept;
}

std::vector<RetrievalBin> retrieval_distance_bins(std::int64_t max_distance) {
    AQPIM_CHECK(max_distance >= 1, "retrieval view: maximum distance {} (need >= 1)", max_distance);
    std::vector<RetrievalBin> bins;
    for (std::int64_t b = 1; b <= max_distance; b *= 2) {
        RetrievalBin bin;
        bin.dist_begin = b;
        bin.dist_end = std::min(2 * b, max_distance + 1);
        bins.push_back(bin);
    }
    return bins;
}

RetrievalCounter::RetrievalCounter(std::int64_t max_distance, double min_weight, double tolerance)
    : min_weight_(min_weight), tolerance_(tolerance), bins_(retrieval_distance_bins(max_distance)) {
    AQPIM_CHECK(min_weight > 0 && min_weight <= 1, "retrieval view: minimum weight {} (need 0 < w <= 1)", min_weight);
    AQPIM_CHECK(tolerance >= 0, "retrieval view: tolerance {} (need >= 0)", tolerance);
}

void RetrievalCounter::add(const double* ref, const double* scheme, std::int64_t pos) {
    ++n_rows_;
    std::int64_t top = 0, mine = 0;
    for (std::int64_t t = 1; t <= pos; ++t) {
        if (ref[t] > ref[top]) top = t;
        if (scheme[t] > scheme[mine]) mine = t;
    }
    if (ref[top] < min_weight_) return;
    if (top == 0) return void(++n_sink_rows_);
    if (top == pos) return void(++n_self_rows_);
    const std::int64_t distance = pos - top;
    const std::size_t ib = std::size_t(std::floor(std::log2(double(distance))));
    AQPIM_CHECK(ib < bins_.size(), "retrieval view: distance {} beyond the context {}", distance,
                bins_.back().dist_end - 1);
    RetrievalBin& b = bins_[ib];
    ++b.n_queries;
    if (mine != top) return;
    ++b.n_argmax;
    if (std::abs(scheme[top] - ref[top]) <= tolerance_ * ref[top]) ++b.n_kept;
}

void RetrievalCounter::merge(const RetrievalCounter& o) {
    AQPIM_CHECK(o.bins_.size() == bins_.size(), "retrieval view: merging counters of different contexts");
    for (std::size_t i = 0; i < bins_.size(); ++i) bins_[i].merge(o.bins_[i]);
    n_rows_ += o.n_rows_;
    n_sink_rows_ += o.n_sink_rows_;
    n_self_rows_ += o.n_self_rows_;
}

RetrievalBin RetrievalCounter::all() const {
    RetrievalBin a;
    a.dist_begin = 1;
    a.dist_end = bins_.empty() ? 1 : bins_.back().dist_end;
    for (const RetrievalBin& b : bins_) a.merge(b);
    return a;
}

}  // namespace aqpim
