#pragma once
// What product quantization of a real KV cache costs in fidelity, measured on captured attention
// inputs: codebooks learned online from the first `calib` tokens (per KV head, keys and values),
// every token encoded, and the last queries' causal attention computed on the codes compared with
// exact f32 attention. Bits per element count every byte: codes, all codebooks and transforms.

#include <string>

#include "aqpim/kv_capture.h"
#include "aqpim/pq.h"

namespace aqpim {

struct PqFidelityConfig {
    std::string name;
    PQParams key;    ///< D must equal the captured head_dim
    PQParams value;
};

struct PqFidelity {
    std::string name;
    double key_rel_mse = 0;      ///< Σ||k - k̂||² / Σ||k||², all tokens and KV heads
    double value_rel_mse = 0;
    double score_rel_rmse = 0;   ///< RMS(q·k - q·k̂) / RMS(q·k) over the measured queries
    double attn_rel_err = 0;     ///< mean over queries/heads of ||o_pq - o|| / ||o||
    double mean_kl = 0;          ///< mean KL(softmax(q·k) || softmax(q·k̂)) in nats
    double top1_agreement = 0;   ///< fraction of queries whose most-attended token is unchanged
    double bits_per_element = 0; ///< (codes + codebooks/transforms of K and V) * 8 / (2 n_kv_heads n D)
    double compression_vs_f16 = 0;
    double train_ms = 0;         ///< all codebooks of all heads, one batched call
    double encode_mtokens_per_s = 0;  ///< token vectors (K or V, one head) encoded per second
};

/// Measure one configuration; the last n_queries positions act as queries (causal attention).
PqFidelity measure_pq_fidelity(const CapturedAttention& cap, const PqFidelityConfig& cfg, int calib, int n_queries);

}  // namespace aqpim
