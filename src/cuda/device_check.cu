// GPU checks of the CUDA kernels against the double-precision reference (see device_check.h).

#include "cuda/device_check.h"

#include <random>

#include <cstdio>

#include "cuda/cuda_check.h"
#include "cuda/decompress_fallback.h"
#include "cuda/dense_attention.h"
#include "cuda/device_problem.h"
#include "cuda/host_problem.h"
#include "cuda/pq_attention.h"

namespace aqpim::cuda {

namespace {

constexpr double kF32Tol = 1e-4;   // f32 arithmetic, __expf
constexpr double kF16Tol = 1e-2;   // the fallback rounds rows and weights to f16
constexpr double kMmaTol = 1.0 / 2048;  // the mma path rounds the weights to f16 (tests/cuda/test_cuda_mma.cpp)

std::string describe(const PqProblemSpec& s) {
    std::string n;
    for (int x : s.n_coded) n += (n.empty() ? "" : ",") + std::to_string(x);
    return "B=" + std::to_string(s.shape.batch) + " kv=" + std::to_string(s.shape.n_kv_heads) + " g=" +
           std::to_string(s.shape.n_q) + " D=" + std::to_string(s.shape.D) + " Mk=" + std::to_string(s.Mk) +
           " Mv=" + std::to_string(s.Mv) + " page=" + std::to_string(s.page_tokens) + " ver=" +
           std::to_string(s.n_versions) + (s.rotated ? " rotated" : "") + (s.nbits == 8 ? " 8-bit" : "") +
           (s.code_values > 0 ? " codes<" + std::to_string(s.code_values) : "") + " coded=" + n;
}

/// A spec whose codebooks carry random dense rotations.
PqProblemSpec rotated(PqProblemSpec s) {
    s.rotated = true;
    return s;
}

/// The same spec with every code drawn from [0, n): many tokens of a block share a bin.
PqProblemSpec few_codes(PqProblemSpec s, int n) {
    s.code_values = n;
    return s;
}

/// The same spec with 8-bit codes.
PqProblemSpec eight_bit(PqProblemSpec s) {
    s.nbits = 8;
    return s;
}

std::vector<PqProblemSpec> pq_specs() {
    return {
        pq_spec(1, 1, 1, 64, 16, 16, 32, 1, {32}, {0}, 1, 1),
        pq_spec(2, 2, 4, 128, 32, 32, 64, 2, {300, 451}, {20, 68}, 2, 2),
        pq_spec(3, 2, 3, 64, 32, 16, 32, 3, {1000, 37, 640}, {4}, 3, 3),
        pq_spec(1, 4, 8, 128, 64, 64, 256, 4, {5000}, {68}, 4, 4),
        pq_spec(4, 8, 4, 128, 32, 32, 256, 8, {32768, 1, 4097, 0}, {68}, 8, 5),
        pq_spec(2, 1, 7, 128, 16, 32, 128, 1, {129, 0}, {0, 5}, 1, 6),
        rotated(pq_spec(2, 2, 4, 128, 32, 32, 64, 3, {700, 95}, {20}, 2, 7)),
        rotated(pq_spec(2, 3, 1, 64, 16, 8, 32, 2, {300, 64}, {5}, 3, 8)),
        few_codes(pq_spec(2, 2, 4, 128, 32, 32, 64, 2, {600, 77}, {9}, 3, 9), 2),
    };
}

/// 8-bit codes: segments of 4096 / 2048 / 1024 / 1024 tokens (GQA instance 1 / 2 / 4 / 8), several per chunk,
/// versions changing inside chunks, partial pages and blocks, a rotated problem.
std::vector<PqProblemSpec> pq_8bit_specs() {
    return {
        eight_bit(pq_spec(1, 1, 1, 64, 16, 16, 32, 1, {32}, {0}, 1, 41)),
        eight_bit(pq_spec(2, 2, 4, 128, 32, 32, 64, 2, {300, 451}, {20, 68}, 2, 42)),
        eight_bit(pq_spec(3, 2, 3, 64, 16, 8, 32, 3, {2000, 37, 640}, {4}, 40, 43)),
        eight_bit(pq_spec(1, 4, 8, 128, 16, 32, 256, 3, {5000}, {68}, 8, 44)),
        eight_bit(pq_spec(2, 2, 2, 128, 32, 32, 64, 2, {1500, 90}, {10}, 8, 49)),  // GQA 2: float2 heads
        eight_bit(pq_spec(2, 2, 1, 128, 64, 16, 64, 2, {9000, 90}, {5}, 100, 45)),
        eight_bit(rotated(pq_spec(2, 2, 4, 128, 32, 16, 64, 2, {2500, 95}, {20}, 20, 46))),
        // codes from {0, 1, 2}: every warp's lanes meet in a bin, ~11 turns per update
        eight_bit(few_codes(pq_spec(2, 2, 4, 128, 32, 32, 64, 2, {1500, 200}, {10}, 8, 47), 3)),
        eight_bit(few_codes(pq_spec(1, 2, 8, 64, 16, 16, 32, 1, {700}, {3}, 10, 48), 1)),  // one code: 32 turns
    };
}

std::vector<DeviceCheck> check_pq_specs(const std::vector<PqProblemSpec>& specs, PqValuePath path) {
    std::vector<DeviceCheck> out;
    for (const PqProblemSpec& spec : specs) {
        const HostPqProblem h = make_random_pq_problem(spec);
        const std::vector<double> ref = reference_attention(h);
        const DevicePqProblem d(h);
        d.poison_out(nullptr);
        launch_pq_attention(d.params(), nullptr, path);
        AQPIM_CUDA(cudaDeviceSynchronize());
        const std::vector<float> got = d.download_out();
        out.push_back({std::string("pq_attention ") + to_string(path) + " " + describe(spec),
                       max_relative_error(got.data(), ref.data(), ref.size()),
                       is_mma(path) ? kMmaTol : kF32Tol});
    }
    return out;
}

}  // namespace

std::string cuda_device_unavailable() {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return std::string("no GPU: cudaGetDeviceCount says ") + cudaGetErrorString(err);
    }
    return n > 0 ? "" : "no GPU: no CUDA device found";
}

std::vector<DeviceCheck> check_pq_attention(PqValuePath path) { return check_pq_specs(pq_specs(), path); }

std::vector<DeviceCheck> check_pq_attention_8bit() { return check_pq_specs(pq_8bit_specs(), PqValuePath::histogram); }

std::vector<DeviceCheck> check_dense_attention() {
    std::vector<DeviceCheck> out;
    for (const PqProblemSpec& spec : {pq_spec(1, 1, 1, 64, 16, 16, 32, 1, {0}, {1}, 1, 11),
                                      pq_spec(2, 2, 4, 128, 32, 32, 32, 1, {0}, {3000, 17}, 1, 12),
                                      pq_spec(3, 4, 8, 128, 32, 32, 32, 1, {0}, {2049, 4096, 1000}, 1, 13),
                                      pq_spec(2, 2, 5, 64, 32, 32, 32, 1, {0}, {777}, 1, 14)}) {
        const HostPqProblem h = make_random_pq_problem(spec);
        const std::vector<double> ref = reference_attention(h);
        for (int chunk : {256, 1024}) {
            const DeviceDenseProblem d(h, chunk);
            d.poison_out(nullptr);
            launch_dense_attention(d.params(), nullptr);
            AQPIM_CUDA(cudaDeviceSynchronize());
            const std::vector<float> got = d.download_out();
            out.push_back({"dense_f16 chunk=" + std::to_string(chunk) + " " + describe(spec),
                           max_relative_error(got.data(), ref.data(), ref.size()), kF32Tol});
        }
    }
    return out;
}

std::vector<DeviceCheck> check_encode() {
    std::vector<DeviceCheck> out;
    for (const PqProblemSpec& spec : {pq_spec(3, 4, 4, 128, 32, 64, 64, 2, {65, 1, 200}, {0}, 1, 21),
                                      pq_spec(2, 2, 1, 64, 16, 32, 32, 1, {32, 17}, {0}, 1, 22),
                                      rotated(pq_spec(2, 2, 4, 128, 32, 32, 64, 2, {70, 9}, {0}, 1, 23)),
                                      eight_bit(pq_spec(3, 4, 4, 128, 32, 16, 64, 2, {65, 1, 200}, {0}, 1, 24)),
                                      eight_bit(rotated(pq_spec(2, 2, 1, 64, 16, 8, 32, 1, {32, 17}, {0}, 1, 25)))}) {
        HostPqProblem h = make_random_pq_problem(spec);
        const PqAttentionParams& p = h.dims;
        const int D = p.shape.D, n_kv_heads = p.shape.n_kv_heads, batch = p.shape.batch;
        std::mt19937_64 rng(spec.seed);
        std::normal_distribution<float> gauss(0.0f, 2.0f);
        std::vector<float> k_new(std::size_t(batch) * n_kv_heads * D), v_new(k_new.size());
        for (float& x : k_new) x = gauss(rng);
        for (float& x : v_new) x = gauss(rng);
        // The new token's nibbles are zero (a page is zeroed when handed out).
        std::vector<std::uint8_t> zeros(64, 0), expect_codes;
        for (int b = 0; b < batch; ++b)
            for (int kv = 0; kv < n_kv_heads; ++kv)
                for (int values = 0; values < 2; ++values) store_codes(h, b, kv, values, h.n_coded[b] - 1, zeros.data());
        HostPqProblem want = h;
        for (int b = 0; b < batch; ++b)
            for (int kv = 0; kv < n_kv_heads; ++kv)
                for (int values = 0; values < 2; ++values) {
                    const int M = values ? p.Mv : p.Mk, t = h.n_coded[b] - 1;
                    const int ver = h.page_version[std::size_t(b) * p.max_pages + t / p.page_tokens];
                    std::vector<std::uint8_t> c(M);
                    const float* x = (values ? v_new : k_new).data() + (std::size_t(b) * n_kv_heads + kv) * D;
                    for (int m = 0; m < M; ++m) c[m] = std::uint8_t(host_nearest_code(h, b, ver, kv, values, x, m));
                    store_codes(want, b, kv, values, t, c.data());
                }
        const DevicePqProblem d(h);
        const DeviceBytes dk = upload(k_new), dv = upload(v_new);
        launch_pq_encode(d.params(), dk.as<float>(), dv.as<float>(), d.pool(), nullptr);
        AQPIM_CUDA(cudaDeviceSynchronize());
        const std::vector<std::uint8_t> got = d.download_pool();
        std::size_t differ = 0;
        for (std::size_t i = 0; i < got.size(); ++i) differ += got[i] != want.pool[i];
        // Device and host run the same nearest_code; only a near-tie under FMA contraction may
        // differ. Counted against the code bytes the step writes, not the whole pool.
        const double written = double(batch) * n_kv_heads * (p.Mk + p.Mv) * p.nbits / 8.0;
        out.push_back({"pq_encode " + describe(spec) + " (differing bytes / code bytes written)",
                       double(differ) / written, 0.02});
    }
    return out;
}

std::vector<DeviceCheck> check_decompress_fallback() {
    std::vector<DeviceCheck> out;
#ifdef AQPIM_CUDA_NO_CUBLAS
    std::printf("skipped: decompress_cublas (built without cuBLAS)\n");
#else
    for (const PqProblemSpec& spec : {pq_spec(2, 2, 4, 128, 32, 32, 64, 2, {300, 451}, {20, 68}, 2, 31),
                                      pq_spec(1, 4, 8, 64, 16, 32, 256, 1, {3000}, {4}, 4, 32),
                                      eight_bit(pq_spec(2, 2, 4, 128, 32, 16, 64, 2, {700, 90}, {20}, 2, 33))}) {
        const HostPqProblem h = make_random_pq_problem(spec);
        const std::vector<double> ref = reference_attention(h);
        const DevicePqProblem d(h);
        int rows = 0;
        for (int b = 0; b < spec.shape.batch; ++b) rows = std::max(rows, h.n_coded[b] + h.n_f16[b]);
        DecompressFallback fb(h.dims.shape, rows);
        d.poison_out(nullptr);
        fb.run(d.params(), nullptr);
        AQPIM_CUDA(cudaDeviceSynchronize());
        const std::vector<float> got = d.download_out();
        out.push_back({"decompress_cublas " + describe(spec), max_relative_error(got.data(), ref.data(), ref.size()), kF16Tol});
    }
#endif
    return out;
}

}  // namespace aqpim::cuda
