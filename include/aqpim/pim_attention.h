#pragma once
// Attention workloads on a PIM device, simulated command by command on the busiest channel
// (include/aqpim/pim_engine.h) and replicated by symmetry over the other channels and devices:
// KV heads are placed round-robin on channels, so every channel runs the same command stream for
// ceil(heads / channels) heads or one fewer; the device finishes when the busiest channel does.
// docs/pimsim.md describes both mappings command by command.

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "aqpim/pim_engine.h"
#include "aqpim/pim_spec.h"

namespace aqpim {

/// One decode step's attention, as the PIM device sees it.
struct PimAttentionShape {
    std::int64_t kv_heads = 0;     ///< KV heads to process (layers x KV heads x batch), all devices
    int group = 1;                 ///< query heads per KV head (GQA)
    int head_dim = 128;
    std::int64_t context = 0;      ///< tokens per KV head
    int devices = 1;               ///< stacks (or chips) the heads are spread over
};

/// PQ coding of the cache (aqpim's `--kv pq:` parameters that matter to the hardware).
struct PimPqParams {
    int k_m = 32, v_m = 32;        ///< subspaces of keys / values
    int nbits = 4;                 ///< bits per sub-code (ksub = 2^nbits)
    std::int64_t f16_tokens = 68;  ///< tokens kept f16 (sinks + window + pre-calibration), attended AttAcc-style
    int versions = 1;              ///< codebook versions in use at this context (one LUT set each)
    std::int64_t refresh = 512;    ///< tokens per codebook version (refresh cost amortized per step); 0 = none
    bool encode_in_pim = true;     ///< nearest-codeword search for the new token in the PIM unit
    /// How codes sit in the banks. token: a bank holds whole tokens (every subspace), each unit needs
    /// every table. subspace (bank placement only): the banks of a group split the subspaces, each
    /// unit holds 1/banks_per_group of the tables and codebook, the group's adder tree sums the
    /// partial scores (as AttAcc splits head dims over banks).
    enum class Mapping { token, subspace } mapping = Mapping::token;
};
PimPqParams::Mapping parse_pq_mapping(std::string_view s);  ///< "token" | "subspace"; error otherwise

/// Energy by component, joules, whole system (all channels and devices).
struct PimEnergy {
    double activate = 0, read = 0, compute = 0, buffer = 0, io = 0, refresh = 0, background = 0;
    double total() const { return activate + read + compute + buffer + io + refresh + background; }
};

struct PimResult {
    std::string workload;          ///< "fp16" or "pq"
    PimPlacement placement = PimPlacement::bank;
    std::int64_t heads_per_channel = 0;   ///< on the busiest channel (the one simulated)
    std::int64_t cycles = 0;       ///< busiest channel, to the last data
    double seconds = 0;
    std::vector<std::pair<std::string, std::int64_t>> phases;  ///< cycles per phase (busiest channel)
    std::array<std::int64_t, kPimCmdCount> counts{};           ///< commands on the busiest channel
    double bytes_read = 0;         ///< DRAM array bytes read into PIM units, whole system
    double internal_bandwidth = 0; ///< bytes_read / seconds
    double kv_bytes = 0;           ///< KV bytes stored (codes + f16 parts), whole system
    PimEnergy energy;
    double lut_buffer_bytes = 0;   ///< PQ: lookup-table buffer each unit needs
    double lut_sram_mm2 = 0;       ///< PQ: that buffer's area over all units of one device
};

/// FP16 attention AttAcc-style: query written to the GEMV buffers (WRGB), scores by MAC commands
/// over the keys, scores moved to the softmax buffer (MVSB), softmax on the buffer die (SFM),
/// probabilities moved back (MVGB), context by MAC commands over the values, results out (MVSB).
/// Heads pipeline as in AttAcc: score(h+1) runs while softmax(h) finishes.
PimResult simulate_fp16_attention(const DramSpec& spec, PimPlacement placement, const PimAttentionShape& shape,
                                  PimChannel::Options opt = {});

/// PQ attention as aqpim computes it (docs/kv-pq.md), in memory: new token encoded in a PIM unit,
/// per-query lookup tables written to the unit buffers, codes of keys streamed from rows with
/// table lookups accumulating scores, softmax on the buffer die, probabilities written back,
/// value codes streamed into per-unit histograms multiplied by the value codebook, partial outputs
/// reduced on the buffer die; f16 tokens take the FP16 path; codebook refresh amortized.
PimResult simulate_pq_attention(const DramSpec& spec, PimPlacement placement, const PimAttentionShape& shape,
                                const PimPqParams& pq, PimChannel::Options opt = {});

/// Energy of a finished simulation (counts of the busiest channel scaled to every KV head).
PimEnergy pim_energy(const DramSpec& spec, PimPlacement placement, const std::array<std::int64_t, kPimCmdCount>& counts,
                     double count_scale, double seconds, double pim_ops, double op_energy, double io_bytes);

}  // namespace aqpim
