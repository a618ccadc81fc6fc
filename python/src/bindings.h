#pragma once
// The parts of the extension module aqpim._aqpim, one file each (module.cpp assembles them).

#include <pybind11/pybind11.h>

#include <cstdint>

#include "arrays.h"

namespace aqpim::python {

/// Codes [n_tokens][M] packed into code_blocks_for(n_tokens) blocks (aqpim/pq_codes.h layout):
/// blocks uint8 [n_blocks][code_block_bytes(M, nbits)].
struct PackedCodes {
    std::int64_t n_tokens = 0;
    int M = 0;
    int nbits = 4;
    ByteArray blocks;
};
/// Pack codes [n_tokens, M] (uint8, values < 2^nbits; ValueError otherwise).
PackedCodes pack_codes(py::handle codes, int nbits);

void bind_pq(py::module_& m);         ///< ProductQuantizer, kmeans, pack_codes (bind_pq.cpp)
void bind_attention(py::module_& m);  ///< pq_attention, dense_attention (bind_attention.cpp)
void bind_kv_cache(py::module_& m);   ///< KvCache (bind_kv_cache.cpp)
void bind_model(py::module_& m);      ///< Model (bind_model.cpp)

}  // namespace aqpim::python
