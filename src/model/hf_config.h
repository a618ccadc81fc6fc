#pragma once
// Hugging Face config.json of a Llama-family checkpoint (LlamaForCausalLM, MistralForCausalLM,
// Qwen2ForCausalLM) -> ModelConfig. Private to src/: the safetensors loader and the layer-0 K/V
// capture read it.
//
// Required: hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, vocab_size,
// and architectures (or model_type). Optional, with the defaults of transformers' config classes:
// num_key_value_heads (= num_attention_heads), head_dim (= hidden_size / num_attention_heads),
// max_position_embeddings (2048), rms_norm_eps (1e-6), rope_theta (10000), tie_word_embeddings
// (false), rope_scaling (none; linear or llama3). A missing required field, a value of the wrong
// JSON type or out of range, or an unsupported architecture / rope_scaling type is an aqpim::Error
// naming the file and the field.

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "aqpim/model.h"

namespace aqpim {

/// Parse an already-read config.json object; `path` only names the file in errors. The result
/// has rope_pairs = neox (HF rotate_half) and name empty.
ModelConfig parse_hf_config(const nlohmann::json& cfg, const std::string& path);

/// Read and parse `path` (a config.json).
ModelConfig read_hf_config(const std::string& path);

}  // namespace aqpim
