#pragma once
// Attention problems in device memory: a HostPqProblem uploaded (tests), or one of bench size
// whose code pool and f16 rows are filled on the device (gigabytes: no host copy), plus the
// outputs and flash-decoding partials of the PQ and dense launches.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "cuda/attention_params.h"
#include "cuda/host_problem.h"

namespace aqpim::cuda {

/// cudaMalloc'd bytes, freed on destruction.
class DeviceBytes {
public:
    DeviceBytes() = default;
    explicit DeviceBytes(std::size_t n);
    DeviceBytes(const void* host, std::size_t n);  ///< upload
    ~DeviceBytes();
    DeviceBytes(DeviceBytes&& o) noexcept : ptr_(o.ptr_), n_(o.n_) { o.ptr_ = nullptr; o.n_ = 0; }
    DeviceBytes& operator=(DeviceBytes&& o) noexcept;
    DeviceBytes(const DeviceBytes&) = delete;
    DeviceBytes& operator=(const DeviceBytes&) = delete;
    template <class T> T* as() const { return static_cast<T*>(ptr_); }
    std::size_t size() const { return n_; }
private:
    void* ptr_ = nullptr;
    std::size_t n_ = 0;
};

template <class T>
DeviceBytes upload(const std::vector<T>& v) { return DeviceBytes(v.data(), v.size() * sizeof(T)); }

/// Fill n bytes with a hash of (seed, index) (random codes).
void fill_random_bytes(std::uint8_t* dst, std::size_t n, std::uint64_t seed, cudaStream_t stream);
/// Fill n f16 values with roughly N(0, 1) values from a hash of (seed, index).
void fill_random_f16(std::uint16_t* dst, std::size_t n, std::uint64_t seed, cudaStream_t stream);

/// A PQ problem on the device; params() has the device pointers, partials and output included.
class DevicePqProblem {
public:
    /// Upload h; when h holds no pool / f16 rows (spec.fill_data = false), fill them on the device.
    explicit DevicePqProblem(const HostPqProblem& h, std::uint64_t fill_seed = 7);
    const PqAttentionParams& params() const { return params_; }
    std::uint8_t* pool() const { return pool_.as<std::uint8_t>(); }
    /// Output [batch][n_kv_heads * n_q][D] to the host.
    std::vector<float> download_out() const;
    std::vector<std::uint8_t> download_pool() const;
    /// Fill the output with NaN (so an unwritten element fails the comparison).
    void poison_out(cudaStream_t stream) const;
    /// Bytes the fused kernel must read once: codes of every coded token, f16 rows, codebooks of the
    /// versions in use, queries; and write: output (partials excluded).
    std::uint64_t min_bytes() const { return min_bytes_; }
private:
    PqAttentionParams params_;
    DeviceBytes q_, pool_, page_offset_, page_version_, k_off_, v_off_, n_coded_, n_f16_, k16_, v16_;
    DeviceBytes k_cb_, k_perm_, k_gain_, k_rot_, v_cb_, v_perm_, v_gain_, v_rot_, part_ml_, part_acc_, out_;
    std::uint64_t min_bytes_ = 0;
};

/// A dense f16 problem on the device: K, V [batch][n_kv_heads][n_tokens][D] filled on the device.
class DeviceDenseProblem {
public:
    DeviceDenseProblem(const AttentionShape& shape, int n_tokens, int chunk_tokens, std::uint64_t seed);
    /// The same rows as a HostPqProblem's f16 rows (n_coded = 0): for comparison with its reference.
    explicit DeviceDenseProblem(const HostPqProblem& h, int chunk_tokens);
    const DenseAttentionParams& params() const { return params_; }
    std::vector<float> download_out() const;
    void poison_out(cudaStream_t stream) const;
    std::uint64_t min_bytes() const { return min_bytes_; }
private:
    void finish(const std::vector<float>& q, const std::vector<int>& n_tokens);
    DenseAttentionParams params_;
    DeviceBytes q_, k_, v_, n_tokens_, part_ml_, part_acc_, out_;
    std::uint64_t min_bytes_ = 0;
};

}  // namespace aqpim::cuda
