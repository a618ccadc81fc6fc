# Sources of the CUDA path, shared by the main build (CMakeLists.txt, "# ---- CUDA") and the
# standalone GPU check (src/cuda/CMakeLists.txt, nvcc + CMake only).
set(AQPIM_CUDA_DIR ${CMAKE_CURRENT_LIST_DIR})
# Kernels and their launchers (nvcc).
set(AQPIM_CUDA_KERNEL_SOURCES
  ${AQPIM_CUDA_DIR}/combine.cu
  ${AQPIM_CUDA_DIR}/pq_attention.cu
  ${AQPIM_CUDA_DIR}/pq_attention_mma.cu
  ${AQPIM_CUDA_DIR}/pq_attention_8bit.cu
  ${AQPIM_CUDA_DIR}/dense_attention.cu
  ${AQPIM_CUDA_DIR}/pq_encode.cu
  ${AQPIM_CUDA_DIR}/decompress_fallback.cu
  ${AQPIM_CUDA_DIR}/device_problem.cu
  ${AQPIM_CUDA_DIR}/device_check.cu
  ${AQPIM_CUDA_DIR}/cuda_bench.cu)
# Plain C++ the kernels' host side needs; the main build already compiles these into `aqpim`.
set(AQPIM_CUDA_HOST_SOURCES
  ${AQPIM_CUDA_DIR}/attention_params.cpp
  ${AQPIM_CUDA_DIR}/host_problem.cpp)
