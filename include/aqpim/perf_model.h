#pragma once
// The model side of `aqpim roofline`: the shape of a Llama-family decoder (dense or
// mixture-of-experts) as the memory-wall model needs it, from a preset (presets/model/NAME.json) or
// from the header of any model file the runtime reads (GGUF, safetensors directory, llama2.c .bin).
// Model parameters only; run parameters (batch, context, bits, device) live in PerfRun (roofline.h).

#include <cstdint>
#include <string>

#include "aqpim/kv_cache.h"
#include "aqpim/model.h"
#include "aqpim/preset.h"

namespace aqpim {

struct PerfModel {
    std::string name;
    std::string origin;        ///< preset file or model path (named in errors)
    std::string description;
    int n_embd = 0;            ///< hidden size
    int n_ff = 0;              ///< FFN inner size (of one expert)
    int n_layer = 0;
    int n_head = 0;
    int n_kv_head = 0;         ///< GQA: n_head % n_kv_head == 0
    int head_dim = 0;
    int n_vocab = 0;
    int n_expert = 1;          ///< MoE experts per layer (1 = dense)
    int n_expert_used = 1;     ///< experts each token is routed to
    bool qkv_bias = false;
    bool tied_output = false;  ///< LM head shares the token embedding (still read once per step)
    std::int64_t n_ctx_train = 0;
    double weight_bits = 16;   ///< bits per weight as stored (file: bytes*8/params; preset: its default)
    /// Where the shape came from, by field, for reports ("config.json", "GGUF metadata", a preset source).
    std::string source;

    /// Throws aqpim::Error naming origin and field: non-positive sizes, n_head % n_kv_head != 0,
    /// n_expert_used > n_expert, weight_bits outside (0, 32].
    void validate() const;

    // ---- parameter counts ------------------------------------------------------------------------
    std::int64_t attn_params_per_layer() const;    ///< Q, K, V, O (+ biases)
    std::int64_t expert_params_per_layer() const;  ///< gate + up + down of ONE expert
    std::int64_t n_params_total() const;           ///< every expert, embedding and LM head
    std::int64_t n_params_active() const;          ///< what one token touches (n_expert_used experts)

    /// The KV-cache shape (layers, KV heads, head_dim) for the runtime's cache accounting.
    KvShape kv_shape() const;
};

/// A model preset (kind "model"): n_embd, n_ff, n_layer, n_head, n_kv_head, vocab, optional
/// head_dim (= n_embd / n_head), n_expert / n_expert_used, n_ctx_train, weight_bits, and booleans
/// qkv_bias / tied_output. Inconsistent fields: aqpim::Error naming the file and the field.
PerfModel perf_model_from_preset(const Preset& preset);
/// The shape the runtime reads from a model file; weight_bits is 16 unless given.
PerfModel perf_model_from_config(const ModelConfig& config, const std::string& origin);
/// A model file's shape, header only where the format allows it: a safetensors directory (or its
/// config.json) is read without touching the weights; GGUF and llama2.c are mapped (metadata cheap)
/// and weight_bits is measured from the stored weights.
PerfModel perf_model_from_file(const std::string& path);
/// `--preset NAME|FILE.json`.
PerfModel find_perf_model(const std::string& name_or_path);

}  // namespace aqpim
