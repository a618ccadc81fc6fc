#pragma once
// Error checks of the CUDA host code: every runtime call and every launch is checked.

#include <cuda_runtime.h>

#include "cuda/require.h"

/// Throw on a CUDA runtime error, naming the call.
#define AQPIM_CUDA(call)                                                                                   \
    do {                                                                                                   \
        const cudaError_t err_ = (call);                                                                   \
        if (err_ != cudaSuccess) ::aqpim::cuda::throw_failure(#call, __FILE__, __LINE__, cudaGetErrorString(err_)); \
    } while (0)

/// Throw if the last launch failed.
#define AQPIM_CUDA_LAUNCHED() AQPIM_CUDA(cudaGetLastError())
