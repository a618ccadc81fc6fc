#pragma once
// A Llama-family model as the runtime computes with it, whatever file it came from: GGUF
// (`llama`, `qwen2`), a Hugging Face safetensors directory (config.json, single or sharded), or a
// llama2.c checkpoint. Weight matrices point into the mapped file where its type can be used
// directly (F32/F16/BF16/quantized); small vectors (norms, biases) are converted to f32.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "aqpim/rope_pairs.h"
#include "aqpim/tokenizer.h"
#include "aqpim/weights.h"

namespace aqpim {

enum class ModelArch { llama, qwen2 };
const char* model_arch_name(ModelArch arch);

/// RoPE frequency scaling. llama3: Llama-3.1's piecewise rule (factor, low/high frequency factors,
/// original context); linear: positions divided by factor.
struct RopeScaling {
    enum class Kind { none, linear, llama3 } kind = Kind::none;
    float factor = 1.0f;
    float low_freq_factor = 1.0f;
    float high_freq_factor = 4.0f;
    int original_context = 8192;
};

/// The largest shapes a model may state, and so whatever describes one (a KV trace, pimsim's
/// options): beyond them no real model exists and sizes computed from them overflow or allocate
/// absurd amounts.
struct ModelLimits {
    static constexpr int dim = 1 << 17;        ///< n_embd (n_ff: 4x)
    static constexpr int layers = 1024;
    static constexpr int heads = 4096;         ///< query or KV heads
    static constexpr int head_dim = 1024;
    static constexpr int vocab = 1 << 22;
    static constexpr int context = 1 << 24;    ///< tokens of one sequence
};

struct ModelConfig {
    ModelArch arch = ModelArch::llama;
    std::string name;           ///< general.name or the directory/file name
    int n_embd = 0;             ///< hidden size
    int n_ff = 0;               ///< FFN inner size
    int n_layer = 0;
    int n_head = 0;
    int n_kv_head = 0;          ///< GQA: n_head % n_kv_head == 0
    int head_dim = 0;           ///< usually n_embd / n_head
    int n_vocab = 0;
    int n_ctx_train = 0;        ///< a default, not a limit (going past warns)
    float rms_eps = 1e-5f;
    float rope_theta = 10000.0f;
    RopePairs rope_pairs = RopePairs::interleaved;
    RopeScaling rope_scaling{};
    bool qkv_bias = false;      ///< qwen2
    bool tied_output = false;   ///< output matrix is the token embedding

    /// Throws aqpim::Error naming the field if a dimension is non-positive, absurd (beyond what any
    /// real model has) or inconsistent (n_head % n_kv_head, ...).
    void validate() const;
    std::int64_t n_params() const;
};

struct LayerWeights {
    std::vector<float> attn_norm;    ///< [n_embd]
    WeightMatrix wq, wk, wv, wo;     ///< [n_head*hd][n_embd], [n_kv_heads*hd][n_embd] x2, [n_embd][n_head*hd]
    std::vector<float> bq, bk, bv;   ///< empty unless qkv_bias
    std::vector<float> ffn_norm;     ///< [n_embd]
    WeightMatrix w_gate, w_up;       ///< [n_ff][n_embd]
    WeightMatrix w_down;             ///< [n_embd][n_ff]
};

struct ModelWeights {
    ModelConfig config;
    WeightMatrix token_embd;         ///< [n_vocab][n_embd]
    std::vector<LayerWeights> layers;
    std::vector<float> output_norm;  ///< [n_embd]
    WeightMatrix output;             ///< [n_vocab][n_embd]; same data as token_embd when tied
    std::vector<float> rope_freq_factors;  ///< [head_dim/2] GGUF rope_freqs.weight (Llama-3): each pair's
                                           ///< frequency is divided by its factor; empty if absent
    std::string format;              ///< "gguf", "safetensors", "llama2c"
    std::vector<std::shared_ptr<const void>> storage;  ///< keeps mappings and converted buffers alive

    /// Bytes of all weight matrices and vectors as stored (what one decode step streams).
    std::uint64_t weight_bytes() const;
};

struct LoadedModel {
    ModelWeights weights;
    std::shared_ptr<const Tokenizer> tokenizer;  ///< null if the model has no vocabulary
};

struct LoadOptions {
    std::string tokenizer_path;  ///< overrides the vocabulary (tokenizer.bin, tokenizer.json, tokenizer.model, .gguf)
    bool vocabulary = true;      ///< false: weights only (a llama2.c checkpoint needs no tokenizer beside it)
};

/// Load a model: a directory (safetensors + config.json), a .gguf file, or a llama2.c .bin
/// checkpoint (recognised by content, not by name). For llama2.c the vocabulary is
/// options.tokenizer_path, else tokenizer.bin or a single tok*.bin next to the checkpoint.
LoadedModel load_model(const std::string& path, const LoadOptions& options = {});

/// A vocabulary file on its own, recognised by content/name: .gguf, tokenizer.json, a
/// SentencePiece .model, else a llama2.c tokenizer.bin (which needs n_vocab).
/// (A vocabulary shorter than n_vocab is padded, see pad_vocabulary.)
std::shared_ptr<const Tokenizer> load_tokenizer_file(const std::string& path, int n_vocab);
/// Pad a vocabulary shorter than the model's embedding with unused "[PADi]" tokens (as llama.cpp's
/// converter does) so every id the model can produce has a token; more tokens than n_vocab is an
/// error naming `source`.
void pad_vocabulary(VocabData& vocab, int n_vocab, const std::string& source);

// Per-format loaders (load_model picks one).
LoadedModel load_gguf_model(const std::string& path);
LoadedModel load_safetensors_model(const std::string& dir);
LoadedModel load_llama2c_model(const std::string& path, const std::string& tokenizer_path);

}  // namespace aqpim
