// What fits in a device's memory, where KV overtakes weights, cumulative KV traffic
// (include/aqpim/roofline.h).

#include "aqpim/roofline.h"

#include <algorithm>
#include <functional>

namespace aqpim {
namespace {

constexpr std::int64_t kMaxContext = std::int64_t(1) << 24;

/// Largest n in [1, hi] with ok(n), 0 if ok(1) is false (ok monotone: true then false).
std::int64_t largest(std::int64_t hi, const std::function<bool(std::int64_t)>& ok) {
    if (!ok(1)) return 0;
    std::int64_t lo = 1;
    while (lo < hi) {
        const std::int64_t mid = lo + (hi - lo + 1) / 2;
        if (ok(mid)) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

double shards(const PerfRun& run) { return double(run.tp) * run.pp; }
/// Shards of the KV cache: KV heads split over at most n_kv_head devices (replicated beyond).
double kv_shards(const PerfModel& m, const PerfRun& run) { return std::min<double>(run.tp, m.n_kv_head) * run.pp; }

}  // namespace

double weight_bytes_per_device(const PerfModel& model, const PerfRun& run) {
    const double bits = run.weight_bits > 0 ? run.weight_bits : model.weight_bits;
    // k/v projections are replicated like the KV heads when tp > n_kv_head.
    const double kv_params = 2.0 * model.n_layer * model.n_embd * double(model.n_kv_head) * model.head_dim;
    return (double(model.n_params_total()) / shards(run) + kv_params * (1 / kv_shards(model, run) - 1 / shards(run))) * bits / 8.0;
}

std::int64_t max_context(const PerfModel& model, const PerfRun& run, const KvSizer& kv, const Device& device) {
    const double free = device.mem_capacity - weight_bytes_per_device(model, run);
    return largest(kMaxContext, [&](std::int64_t n) { return run.batch * kv.sequence_bytes(n) / kv_shards(model, run) <= free; });
}

std::int64_t max_batch(const PerfModel& model, const PerfRun& run, const KvSizer& kv, const Device& device) {
    const double free = device.mem_capacity - weight_bytes_per_device(model, run);
    const double per_seq = kv.sequence_bytes(run.context) / kv_shards(model, run);
    return free <= 0 ? 0 : std::int64_t(free / per_seq);
}

std::int64_t weight_kv_crossover(const PerfModel& model, const PerfRun& run, const KvSizer& kv) {
    const double w = weight_bytes_per_device(model, run);
    const std::int64_t below = largest(kMaxContext, [&](std::int64_t n) { return run.batch * kv.sequence_bytes(n) / kv_shards(model, run) < w; });
    return below + 1;
}

double cumulative_kv_bytes(const KvSizer& kv, std::int64_t n) {
    double sum = 0;
    if (n <= 4096) {
        for (std::int64_t i = 1; i <= n; ++i) sum += kv.sequence_bytes(i);
        return sum;
    }
    const int points = 4096;
    double prev_x = 1, prev_y = kv.sequence_bytes(1);
    for (int k = 1; k <= points; ++k) {
        const std::int64_t x = 1 + (n - 1) * k / points;
        const double y = kv.sequence_bytes(x);
        sum += (double(x) - prev_x) * (y + prev_y) / 2;
        prev_x = double(x);
        prev_y = y;
    }
    return sum + (kv.sequence_bytes(1) + kv.sequence_bytes(n)) / 2;  // trapezoid -> sum of n terms
}

}  // namespace aqpim
