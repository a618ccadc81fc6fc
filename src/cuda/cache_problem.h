#pragma once
// A CUDA attention problem read from the CPU's PQ KV cache (aqpim/kv_pq.h, docs/kv-pq.md): the
// cache's code pages byte for byte, its page tables, codebook versions and f16 rows, in the layout
// the kernels launch on (attention_params.h). Shows the kernels read the cache as it is; the
// transfer to a device is DevicePqProblem's (device_problem.h).

#include <vector>

#include "aqpim/kv_pq.h"
#include "cuda/host_problem.h"

namespace aqpim::cuda {

/// One layer of views.size() sequences, one decode step each at its last position (the views of
/// pq_layer_read_view), queries q [batch][n_kv_heads * n_q][D] in the original space, scores scaled by
/// `scale`, chunk_pages pages per thread block. Throws aqpim::Error when the views cannot be one
/// launch: no view, M or code width differing between heads, versions or sequences, head offsets
/// differing between sequences, or a shape the kernels do not take.
HostPqProblem cuda_problem_from_cache(const std::vector<PqLayerReadView>& views, int n_q, const float* q, float scale,
                                      int chunk_pages);

}  // namespace aqpim::cuda
