#pragma once
// Filling a HostPqProblem from the CPU engine's objects: codebooks of trained quantizers
// (the tests build problems the CPU attention can also answer).

#include <cstdint>

#include "aqpim/cuda_pq.h"
#include "cuda/host_problem.h"

namespace aqpim::cuda {

/// Codebook slot (b, version, kv) of keys (values = false) or values := cb (M must match).
void set_codebook(HostPqProblem& p, int b, int version, int kv, bool values, const CudaCodebook& cb);

}  // namespace aqpim::cuda
