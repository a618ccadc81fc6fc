#pragma once

namespace aqpim {

/// Which dims RoPE rotates together (keys are quantized after RoPE; the runtime applies RoPE in
/// the layout its model file uses).
enum class RopePairs {
    none,         ///< no pairing constraint
    interleaved,  ///< (2i, 2i+1): llama.cpp "llama" layout, llama2.c
    neox,         ///< (i, i + D/2): HF rotate_half / NeoX / qwen2
};

}  // namespace aqpim
