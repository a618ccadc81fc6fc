// Device-side attention problems (see device_problem.h).

#include "cuda/device_problem.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <random>

#include "cuda/cuda_check.h"

namespace aqpim::cuda {

namespace {

__device__ __forceinline__ std::uint64_t mix(std::uint64_t x) {  // splitmix64
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

__global__ void fill_bytes_kernel(std::uint8_t* dst, std::size_t n, std::uint64_t seed) {
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i * 8 < n;
         i += std::size_t(gridDim.x) * blockDim.x) {
        const std::uint64_t r = mix(seed ^ (i * 0x632be59bd9b4e019ull));
        for (int j = 0; j < 8 && i * 8 + j < n; ++j) dst[i * 8 + j] = std::uint8_t(r >> (8 * j));
    }
}

__global__ void fill_f16_kernel(std::uint16_t* dst, std::size_t n, std::uint64_t seed) {
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x) {
        const std::uint64_t r = mix(seed ^ (i * 0x632be59bd9b4e019ull));
        // Sum of four uniforms, centred and scaled to unit variance (Irwin-Hall).
        float s = 0.0f;
        for (int j = 0; j < 4; ++j) s += float((r >> (16 * j)) & 0xffffu) * (1.0f / 65536.0f);
        dst[i] = __half_as_ushort(__float2half_rn((s - 2.0f) * 1.7320508f));
    }
}

__global__ void fill_nan_kernel(float* dst, std::size_t n) {
    for (std::size_t i = std::size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += std::size_t(gridDim.x) * blockDim.x)
        dst[i] = __int_as_float(0x7fc00000);
}

constexpr unsigned kFillBlocks = 1024, kFillThreads = 256;

template <class T>
std::vector<T> download(const DeviceBytes& d) {
    std::vector<T> v(d.size() / sizeof(T));
    AQPIM_CUDA(cudaMemcpy(v.data(), d.as<void>(), d.size(), cudaMemcpyDeviceToHost));
    return v;
}

}  // namespace

DeviceBytes::DeviceBytes(std::size_t n) : n_(n) {
    if (n) AQPIM_CUDA(cudaMalloc(&ptr_, n));
}
DeviceBytes::DeviceBytes(const void* host, std::size_t n) : DeviceBytes(n) {
    if (n) AQPIM_CUDA(cudaMemcpy(ptr_, host, n, cudaMemcpyHostToDevice));
}
DeviceBytes::~DeviceBytes() {
    if (ptr_) cudaFree(ptr_);
}
DeviceBytes& DeviceBytes::operator=(DeviceBytes&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(n_, o.n_);
    return *this;
}

void fill_random_bytes(std::uint8_t* dst, std::size_t n, std::uint64_t seed, cudaStream_t stream) {
    fill_bytes_kernel<<<kFillBlocks, kFillThreads, 0, stream>>>(dst, n, seed);
    AQPIM_CUDA_LAUNCHED();
}
void fill_random_f16(std::uint16_t* dst, std::size_t n, std::uint64_t seed, cudaStream_t stream) {
    fill_f16_kernel<<<kFillBlocks, kFillThreads, 0, stream>>>(dst, n, seed);
    AQPIM_CUDA_LAUNCHED();
}

DevicePqProblem::DevicePqProblem(const HostPqProblem& h, std::uint64_t fill_seed) : params_(h.dims) {
    const PqAttentionParams& d = h.dims;
    const AttentionShape& s = d.shape;
    std::int64_t n_pages = 0, coded = 0, f16_rows = 0;
    for (int b = 0; b < s.batch; ++b) {
        n_pages += (h.n_coded[b] + d.page_tokens - 1) / d.page_tokens;
        coded += h.n_coded[b];
        f16_rows += h.n_f16[b];
    }
    const std::size_t pool_bytes = std::size_t(n_pages) * h.page_bytes;
    const std::size_t f16_count = std::size_t(s.batch) * s.n_kv_heads * d.max_f16 * s.D;
    if (h.pool.empty()) {
        pool_ = DeviceBytes(pool_bytes);
        fill_random_bytes(pool_.as<std::uint8_t>(), pool_bytes, fill_seed, nullptr);
    } else {
        AQPIM_CUDA_REQUIRE(h.pool.size() == pool_bytes, "pool size does not match the page tables");
        pool_ = upload(h.pool);
    }
    if (h.k16.empty()) {
        k16_ = DeviceBytes(f16_count * 2);
        v16_ = DeviceBytes(f16_count * 2);
        fill_random_f16(k16_.as<std::uint16_t>(), f16_count, fill_seed + 1, nullptr);
        fill_random_f16(v16_.as<std::uint16_t>(), f16_count, fill_seed + 2, nullptr);
    } else {
        k16_ = upload(h.k16);
        v16_ = upload(h.v16);
    }
    q_ = upload(h.q);
    page_offset_ = upload(h.page_offset);
    page_version_ = upload(h.page_version);
    k_off_ = upload(h.k_stream_off);
    v_off_ = upload(h.v_stream_off);
    n_coded_ = upload(h.n_coded);
    n_f16_ = upload(h.n_f16);
    k_cb_ = upload(h.k_cb);
    k_perm_ = upload(h.k_perm);
    k_gain_ = upload(h.k_gain);
    v_cb_ = upload(h.v_cb);
    v_perm_ = upload(h.v_perm);
    v_gain_ = upload(h.v_gain);
    k_rot_ = upload(h.k_rot);
    v_rot_ = upload(h.v_rot);
    const std::size_t n_parts = std::size_t(s.batch) * s.n_kv_heads * (d.n_chunks + 1) * s.n_q;
    part_ml_ = DeviceBytes(n_parts * 2 * 4);
    part_acc_ = DeviceBytes(n_parts * s.D * 4);
    out_ = DeviceBytes(std::size_t(s.batch) * s.n_kv_heads * s.n_q * s.D * 4);
    AQPIM_CUDA(cudaDeviceSynchronize());

    PqAttentionParams& p = params_;
    p.q = q_.as<float>();
    p.pool = pool_.as<std::uint8_t>();
    p.page_offset = page_offset_.as<std::int64_t>();
    p.page_version = page_version_.as<std::uint8_t>();
    p.k_stream_off = k_off_.as<std::int64_t>();
    p.v_stream_off = v_off_.as<std::int64_t>();
    p.n_coded = n_coded_.as<int>();
    p.n_f16 = n_f16_.as<int>();
    p.k16 = k16_.as<std::uint16_t>();
    p.v16 = v16_.as<std::uint16_t>();
    p.k_cb = k_cb_.as<float>();
    p.k_perm = k_perm_.as<std::int32_t>();
    p.k_gain = k_gain_.as<float>();
    p.v_cb = v_cb_.as<float>();
    p.v_perm = v_perm_.as<std::int32_t>();
    p.v_gain = v_gain_.as<float>();
    p.k_rot = h.k_rot.empty() ? nullptr : k_rot_.as<float>();
    p.v_rot = h.v_rot.empty() ? nullptr : v_rot_.as<float>();
    p.part_ml = part_ml_.as<float>();
    p.part_acc = part_acc_.as<float>();
    p.out = out_.as<float>();

    // Bytes read at least once: codes, f16 rows, each (sequence, KV head, version in use)'s
    // codebooks, queries; written: the output.
    std::int64_t versions_in_use = 0;
    for (int b = 0; b < s.batch; ++b) {
        std::vector<bool> used(d.n_versions, false);
        for (int pg = 0; pg * d.page_tokens < h.n_coded[b]; ++pg) used[h.page_version[std::size_t(b) * d.max_pages + pg]] = true;
        versions_in_use += std::count(used.begin(), used.end(), true);
    }
    const std::uint64_t code_bytes_per_token =
        std::uint64_t(stream_block_bytes(d, false) + stream_block_bytes(d, true)) / kBlockTokens;
    // Per version in use, keys and values: centroids, perm and gain, and the D x D rotations if any.
    const std::uint64_t codebook_bytes = std::uint64_t(2) * (ksub_of(d.nbits) * s.D * 4 + s.D * 8) +
                                         (h.k_rot.empty() ? 0 : std::uint64_t(s.D) * s.D * 4) +
                                         (h.v_rot.empty() ? 0 : std::uint64_t(s.D) * s.D * 4);
    min_bytes_ = std::uint64_t(coded) * s.n_kv_heads * code_bytes_per_token + std::uint64_t(f16_rows) * s.n_kv_heads * s.D * 4 +
                 std::uint64_t(versions_in_use) * s.n_kv_heads * codebook_bytes + h.q.size() * 4 * 2;
}

std::vector<float> DevicePqProblem::download_out() const { return download<float>(out_); }
std::vector<std::uint8_t> DevicePqProblem::download_pool() const { return download<std::uint8_t>(pool_); }
void DevicePqProblem::poison_out(cudaStream_t stream) const {
    fill_nan_kernel<<<64, 256, 0, stream>>>(out_.as<float>(), out_.size() / 4);
    AQPIM_CUDA_LAUNCHED();
}

DeviceDenseProblem::DeviceDenseProblem(const AttentionShape& shape, int n_tokens, int chunk_tokens, std::uint64_t seed) {
    params_.shape = shape;
    params_.max_tokens = n_tokens;
    params_.chunk_tokens = chunk_tokens;
    const std::size_t count = std::size_t(shape.batch) * shape.n_kv_heads * n_tokens * shape.D;
    k_ = DeviceBytes(count * 2);
    v_ = DeviceBytes(count * 2);
    fill_random_f16(k_.as<std::uint16_t>(), count, seed, nullptr);
    fill_random_f16(v_.as<std::uint16_t>(), count, seed + 1, nullptr);
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> gauss(0.0f, 1.0f);
    std::vector<float> q(std::size_t(shape.batch) * shape.n_kv_heads * shape.n_q * shape.D);
    for (float& x : q) x = gauss(rng);
    finish(q, std::vector<int>(shape.batch, n_tokens));
}

DeviceDenseProblem::DeviceDenseProblem(const HostPqProblem& h, int chunk_tokens) {
    params_.shape = h.dims.shape;
    params_.max_tokens = h.dims.max_f16;
    params_.chunk_tokens = chunk_tokens;
    k_ = upload(h.k16);
    v_ = upload(h.v16);
    finish(h.q, h.n_f16);
}

void DeviceDenseProblem::finish(const std::vector<float>& q, const std::vector<int>& n_tokens) {
    DenseAttentionParams& p = params_;
    const AttentionShape& s = p.shape;
    p.n_chunks = std::max(1, (p.max_tokens + p.chunk_tokens - 1) / p.chunk_tokens);
    q_ = upload(q);
    n_tokens_ = upload(n_tokens);
    const std::size_t n_parts = std::size_t(s.batch) * s.n_kv_heads * p.n_chunks * s.n_q;
    part_ml_ = DeviceBytes(n_parts * 2 * 4);
    part_acc_ = DeviceBytes(n_parts * s.D * 4);
    out_ = DeviceBytes(q.size() * 4);
    AQPIM_CUDA(cudaDeviceSynchronize());
    p.q = q_.as<float>();
    p.k = k_.as<std::uint16_t>();
    p.v = v_.as<std::uint16_t>();
    p.n_tokens = n_tokens_.as<int>();
    p.part_ml = part_ml_.as<float>();
    p.part_acc = part_acc_.as<float>();
    p.out = out_.as<float>();
    std::uint64_t rows = 0;
    for (int n : n_tokens) rows += std::uint64_t(n);
    min_bytes_ = rows * s.n_kv_heads * s.D * 4 + q.size() * 8;
}

std::vector<float> DeviceDenseProblem::download_out() const { return download<float>(out_); }
void DeviceDenseProblem::poison_out(cudaStream_t stream) const {
    fill_nan_kernel<<<64, 256, 0, stream>>>(out_.as<float>(), out_.size() / 4);
    AQPIM_CUDA_LAUNCHED();
}

}  // namespace aqpim::cuda
