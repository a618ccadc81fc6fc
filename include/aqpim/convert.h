#pragma once
// Write a loaded model (safetensors, llama2.c or GGUF) as a GGUF v3 file that llama.cpp reads:
// its metadata keys ({arch}.embedding_length, ...), its tensor names (token_embd.weight,
// blk.N.attn_q.weight, ...), the vocabulary as tokenizer.ggml.*, norm vectors in F32 and the
// matrices in one chosen type or as stored.
//
// RoPE layout. GGUF "llama" models rotate interleaved pairs (2i, 2i+1); Hugging Face Llama
// checkpoints rotate halves (i, i + D/2). As llama.cpp's convert_hf_to_gguf.py does, the rows of
// Q and K (and their biases) of a llama model with NeoX pairs are permuted within each head so
// that interleaved RoPE on the converted file computes exactly what NeoX RoPE computed on the
// original. GGUF "qwen2" models rotate halves, so their rows are kept; llama2.c checkpoints and
// GGUF llama models are already interleaved.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "aqpim/ggml_types.h"
#include "aqpim/model.h"

namespace aqpim {

struct ConvertOptions {
    /// Type of every weight matrix in the output: F32, F16, BF16 or Q8_0 (quantized rows need
    /// a column count that is a multiple of 32); nullopt keeps each matrix as stored.
    std::optional<GgmlType> matrix_type;
    std::string name;  ///< general.name; empty: the model's config.name
};

struct ConvertSummary {
    std::string arch;            ///< general.architecture written
    int n_tensors = 0;
    std::uint64_t tensor_bytes = 0;  ///< bytes of tensor data written
    std::uint32_t file_type = 0;     ///< general.file_type (llama.cpp LLAMA_FTYPE)
    bool permuted_qk = false;        ///< Q/K rows went from NeoX to interleaved order
    int n_vocab_tokens = 0;          ///< tokens written (0: no vocabulary)
};

/// Convert and write `out_path` (through a temporary file renamed at the end). Throws
/// aqpim::Error on an unsupported target type, a matrix the type cannot hold, or an I/O failure.
ConvertSummary convert_to_gguf(const LoadedModel& model, const std::string& out_path,
                               const ConvertOptions& options = {});

/// "f32", "f16", "bf16", "q8_0" -> the type; "source" -> nullopt; anything else is an error.
std::optional<GgmlType> parse_convert_type(const std::string& name);

/// Source row of each output row when one projection's rows go from NeoX to interleaved pair
/// order, head by head ([n_head][head_dim] rows): out row h*D + 2j + t = in row h*D + t*D/2 + j
/// (j < D/2, t in {0, 1}). This is llama.cpp's LlamaModel.permute: w.reshape(n_head, 2, D/2, ...)
/// .swapaxes(1, 2).
std::vector<std::int64_t> neox_to_interleaved_rows(int n_head, int head_dim);

/// True when converting `config` to GGUF permutes Q/K rows (llama arch with NeoX pairs).
bool convert_permutes_qk(const ModelConfig& config);

}  // namespace aqpim
