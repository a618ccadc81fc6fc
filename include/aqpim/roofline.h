#pragma once
// The memory-wall model of LLM inference (`aqpim roofline`, docs/roofline.md): FLOPs and bytes of
// every component of a decode step and of a prefill, per device after tensor/pipeline parallelism,
// and the time the roofline bounds them to.
//
// Conventions: a matrix product of [m x k] by [k x n] costs 2 m k n FLOPs; weights are read from
// memory once per step (a decode step of B sequences shares them); KV bytes are what the cache's own
// accounting says a sequence of that length holds (every overhead counted: scales, codebooks, f16
// windows), all of it read once per step; activations are read and written once per matrix product
// at the activation precision.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aqpim/kv_cache.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/perf_device.h"
#include "aqpim/perf_model.h"

namespace aqpim {

/// Run parameters (what the user chooses), validated by validate().
struct PerfRun {
    int batch = 1;                 ///< sequences decoded together
    std::int64_t context = 1024;   ///< tokens each sequence holds when the decode step runs
    std::int64_t prompt = 512;     ///< prefill length
    double weight_bits = 0;        ///< 0 = the model's
    double act_bits = 16;
    std::string kv_scheme = "f16"; ///< a --kv spec (kv_scheme.h)
    int tp = 1;                    ///< tensor parallel devices (heads and FFN columns split)
    int pp = 1;                    ///< pipeline stages (layers split; one token crosses them in turn)
    double eff_bandwidth = 0;      ///< 0 = the device's default
    double eff_compute = 0;
    double kernel_overhead = -1;   ///< seconds per kernel launch; < 0 = the device's default
    double bandwidth_cap = 0;      ///< B/s the kernels can stream at most whatever the memory (an issue
                                   ///< roof of the software: docs/roofline.md); 0 = none

    void validate() const;
};

/// Bytes a KV scheme holds for one sequence, from the cache's own accounting (make_kv_cache's
/// sequence_bytes, which for pq is pq_sequence_footprint): exact bits/element.
class KvSizer {
public:
    /// `context`: the length a `pq:bits=` target is stated at (the run's -c; 0: none).
    KvSizer(const KvShape& shape, const std::string& scheme, std::int64_t context = 0);
    const std::string& scheme() const { return scheme_; }
    /// Bytes one sequence of n tokens holds, all layers, K and V (n >= 1).
    double sequence_bytes(std::int64_t n) const;
    /// bits per stored element at n tokens.
    double bits_per_element(std::int64_t n) const;
    std::int64_t elements_per_token() const { return shape_.elements_per_token(); }

private:
    KvShape shape_;
    std::string scheme_;
    std::unique_ptr<KvCache> cache_;
};

/// One component of a phase, per device: FLOPs and bytes by kind.
struct Cost {
    std::string name;
    double flops = 0;
    double weight_bytes = 0;
    double kv_bytes = 0;     ///< read and written
    double act_bytes = 0;
    double comm_bytes = 0;   ///< sent over the interconnect (not memory traffic)
    int comm_messages = 0;   ///< latency-bound messages (all-reduces, stage hand-offs)
    int launches = 0;        ///< kernels launched per step (one per layer and operation): fixed overhead each
    bool on_int8 = false;    ///< runs on the integer roof (weights and activations <= 8 bits)
    double mem_bytes() const { return weight_bytes + kv_bytes + act_bytes; }
};

enum class Phase { decode, prefill };

/// Components of one phase over the whole model, per device (one tensor-parallel shard of one
/// pipeline stage is 1/(tp*pp) of the work; layers are summed, so time is per token for pp).
struct PhaseCost {
    Phase phase = Phase::decode;
    std::int64_t tokens = 0;       ///< tokens the phase produces (decode: batch; prefill: batch*prompt)
    std::vector<Cost> parts;
    Cost total() const;
};

/// FLOPs and bytes of one decode step (batch sequences at run.context tokens, one new token each).
PhaseCost decode_cost(const PerfModel& model, const PerfRun& run, const KvSizer& kv);
/// FLOPs and bytes of a prefill of run.prompt tokens for run.batch sequences (causal attention:
/// token i attends to i + 1 tokens; K/V of the prompt read once, flash-attention style).
PhaseCost prefill_cost(const PerfModel& model, const PerfRun& run, const KvSizer& kv);

/// The roofline of a phase on a device.
struct RoofTime {
    std::string name;
    double compute_s = 0, memory_s = 0, comm_s = 0;
    double overhead_s = 0;       ///< launches x kernel overhead
    double time_s = 0;           ///< max(compute, memory) + comm + overhead
    const char* bound() const;   ///< "memory", "compute", "link" or "launch"
};

struct RooflineResult {
    double peak_compute = 0;      ///< FLOP/s achievable (peak x efficiency) on the phase's roof
    double bandwidth = 0;         ///< B/s achievable
    double ridge = 0;             ///< FLOP/byte where the roofs meet
    double intensity = 0;         ///< FLOP per memory byte of the whole phase
    double attainable = 0;        ///< min(peak_compute, intensity * bandwidth)
    const char* bound = "";       ///< which roof binds the phase as a whole: memory or compute
    double time_aggregate_s = 0;  ///< phase FLOPs / attainable (+ comm + launch overhead): the whole-phase roofline
    double time_s = 0;            ///< sum over components of max(compute, memory) + comm + overhead: per-kernel
    double overhead_s = 0;        ///< the fixed launch overhead included in both times
    double tokens_per_s = 0;      ///< phase tokens / time_s
    std::vector<RoofTime> parts;
};

RooflineResult roofline(const PhaseCost& cost, const Device& device, const PerfRun& run);

// ---- capacity ---------------------------------------------------------------------------------------

/// Bytes of weights one device holds (its tensor-parallel shard of its pipeline stage).
double weight_bytes_per_device(const PerfModel& model, const PerfRun& run);
/// Largest context every one of run.batch sequences can reach with weights + KV in the device's
/// memory (0 if even the weights do not fit); capped at 1<<24.
std::int64_t max_context(const PerfModel& model, const PerfRun& run, const KvSizer& kv, const Device& device);
/// Largest batch at run.context (0 if none fits).
std::int64_t max_batch(const PerfModel& model, const PerfRun& run, const KvSizer& kv, const Device& device);
/// Context at which the KV bytes read per decode step reach the weight bytes (the bound switches
/// from weights to KV); capped at 1<<24.
std::int64_t weight_kv_crossover(const PerfModel& model, const PerfRun& run, const KvSizer& kv);
/// KV bytes read to generate tokens 1..n of one sequence from an empty cache: sum over steps of the
/// cache size (the O(n^2) term), summed exactly for n <= 4096, else by 4096-point trapezoid.
double cumulative_kv_bytes(const KvSizer& kv, std::int64_t n);

}  // namespace aqpim
