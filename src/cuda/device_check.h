#pragma once
// Checks of the CUDA kernels on a GPU against the double-precision reference (host_problem.h).
// Plain C++ interface: called by the GoogleTest device tests (tests/cuda/test_cuda_device.cpp)
// and by the standalone check (standalone_main.cu), which needs no GTest.

#include <string>
#include <vector>

#include "cuda/pq_attention.h"

namespace aqpim::cuda {

/// Empty when a CUDA device can be used, else why not (e.g. "no GPU: cudaGetDeviceCount ...").
std::string cuda_device_unavailable();

struct DeviceCheck {
    std::string name;  ///< what was run (kernel and sizes)
    double error = 0;  ///< max relative error against the reference (or mismatch fraction)
    double tolerance = 0;
    bool passed() const { return error <= tolerance; }
};

/// Fused PQ attention (paged, several versions, f16 sinks/window, rotated codebooks) over D, GQA
/// ratio, M, batch, through one value path.
std::vector<DeviceCheck> check_pq_attention(PqValuePath path);
/// The 8-bit kernel (pq_attention_8bit.cu): segments, versions inside chunks, GQA 1-8, a rotation.
std::vector<DeviceCheck> check_pq_attention_8bit();
/// Dense f16 flash-decoding kernel.
std::vector<DeviceCheck> check_dense_attention();
/// Encode kernel (4- and 8-bit): codes equal to the host's nearest_code; no other byte of the pool changes.
std::vector<DeviceCheck> check_encode();
/// Decompress + cuBLAS fallback (f16 rows and f16 weights: a looser tolerance).
std::vector<DeviceCheck> check_decompress_fallback();

}  // namespace aqpim::cuda
