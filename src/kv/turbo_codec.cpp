// TurboQuant / QJL rows: rotation, Lloyd-Max indices, residual sign sketches, and their decoders.

#include "kv/turbo_codec.h"

#include <cmath>
#include <cstring>
#include <numbers>

#include "aqpim/error.h"
#include "aqpim/half.h"
#include "aqpim/workspace.h"
#include "kv/scalar_codec.h"
#include "kv/turbo_kernels.h"
#include "pq/rotation.h"

namespace aqpim::kv {

namespace {

/// Work vectors of one row ([head_dim] or a part's [dim] floats or codes; a decoded row's [ext_dim]),
/// on the stack for head dims up to 256.
using RowFloats = LocalBuffer<float, 256>;
using RowCodes = LocalBuffer<std::uint8_t, 256>;
using ExtFloats = LocalBuffer<float, 512>;

int channel(const int* channels, int i) { return channels ? channels[i] : i; }

double norm2(const float* x, int n) {
    double s = 0;
    for (int i = 0; i < n; ++i) s += double(x[i]) * x[i];
    return std::sqrt(s);
}

float load_f16(const std::uint8_t* p) {
    f16_t h;
    std::memcpy(&h, p, sizeof h);
    return fp16_to_f32_scalar(h);
}

/// Σ a[j] b[j] in 8 partial sums of a fixed order (vectorisable without -ffast-math, the same everywhere).
float dot8(const float* a, const float* b, int n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int n8 = n / 8 * 8;
    for (int j = 0; j < n8; j += 8)
        for (int k = 0; k < 8; ++k) acc[k] += a[j + k] * b[j + k];
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (int j = n8; j < n; ++j) sum += a[j] * b[j];
    return sum;
}

/// Stores x as f16 and returns the stored value.
float store_f16(float x, std::uint8_t* p) {
    const f16_t h = f32_to_fp16_scalar(x);
    std::memcpy(p, &h, sizeof h);
    return fp16_to_f32_scalar(h);
}

// Seeds of a part's R and S: distinct streams per part (pq/rotation.h tags the kinds apart).
std::uint64_t part_seed(std::uint64_t seed, std::size_t part) { return seed + 0x9e3779b97f4a7c15ull * (part + 1); }

}  // namespace

TurboStreamCoder::TurboStreamCoder(int head_dim, std::vector<TurboPartSpec> parts, std::uint64_t seed)
    : head_dim_(head_dim), spec_(std::move(parts)) {
    AQPIM_CHECK(!spec_.empty(), "TurboQuant code: no parts");
    int channels = 0;
    for (const TurboPartSpec& s : spec_) {
        AQPIM_CHECK(s.dim >= 1 && s.mse_bits >= 0 && s.mse_bits <= 8 && s.sketch_bits >= 0 &&
                        (s.mse_bits > 0 || s.sketch_bits > 0) && (s.mse_bits == 0 || s.dim >= 2),
                    "TurboQuant code: part of {} channels with {} mse bits and {} sketch bits cannot be coded", s.dim,
                    s.mse_bits, s.sketch_bits);
        channels += s.dim;
    }
    AQPIM_CHECK(channels == head_dim, "TurboQuant code: parts cover {} channels, head_dim is {}", channels, head_dim);
    std::size_t bytes = 0;
    int offset = 0, mse_dims = 0;
    for (const TurboPartSpec& s : spec_) mse_dims += s.mse_bits > 0 ? s.dim : 0;
    int sketch_offset = mse_dims, mse_offset = 0;
    for (std::size_t i = 0; i < spec_.size(); ++i) {
        const TurboPartSpec& s = spec_[i];
        Part p;
        p.spec = s;
        p.channel_offset = offset;
        p.byte_offset = bytes;
        if (s.mse_bits > 0) {
            p.mse_offset = mse_offset;
            mse_offset += s.dim;
            p.codebook = &sphere_codebook(s.dim, s.mse_bits);
            p.code_bytes = (std::size_t(s.dim) * s.mse_bits + 7) / 8;
            if (is_power_of_two(s.dim))
                p.hadamard_signs = random_signs(s.dim, part_seed(seed, i));
            else
                p.rotation = random_orthogonal(s.dim, part_seed(seed, i));
            row_bytes_.codes += p.code_bytes;
            row_bytes_.norms += sizeof(f16_t);
        }
        if (s.sketch_bits > 0) {
            p.sketch_offset = sketch_offset;
            sketch_offset += s.sketch_bits;
            sketch_dim_ += s.sketch_bits;
            p.sign_bytes = (std::size_t(s.sketch_bits) + 7) / 8;
            p.projection = random_gaussian(std::size_t(s.sketch_bits) * s.dim, part_seed(seed, i));
            p.sketch_scale = float(std::sqrt(std::numbers::pi / 2) / s.sketch_bits);
            row_bytes_.signs += p.sign_bytes;
            row_bytes_.sign_norms += sizeof(f16_t);
        }
        bytes += p.code_bytes + (s.mse_bits > 0 ? sizeof(f16_t) : 0) + p.sign_bytes + (s.sketch_bits > 0 ? sizeof(f16_t) : 0);
        offset += s.dim;
        parts_.push_back(std::move(p));
    }
    ext_dim_ = sketch_offset;
    AQPIM_ASSERT(bytes == row_bytes_.total());
}

std::size_t TurboStreamCoder::rotation_bytes() const {
    std::size_t n = 0;
    for (const Part& p : parts_) n += (p.hadamard_signs.size() + p.rotation.size()) * sizeof(float);
    return n;
}

std::size_t TurboStreamCoder::projection_bytes() const {
    std::size_t n = 0;
    for (const Part& p : parts_) n += p.projection.size() * sizeof(float);
    return n;
}

std::size_t TurboStreamCoder::codebook_bytes() const {
    std::size_t n = 0;
    for (const Part& p : parts_)
        if (p.codebook) n += (p.codebook->centroids.size() + p.codebook->bounds.size()) * sizeof(float);
    return n;
}

void TurboStreamCoder::rotate(const Part& p, const float* x, float* y, bool transpose) const {
    const int d = p.spec.dim;
    if (!p.hadamard_signs.empty()) {
        if (y != x) std::memcpy(y, x, std::size_t(d) * sizeof(float));
        hadamard_rotate(p.hadamard_signs.data(), d, y, transpose);
    } else {
        matrix_rotate(p.rotation.data(), d, x, y, transpose);
    }
}

void TurboStreamCoder::encode(const float* x, const int* channels, std::uint8_t* row) const {
    RowFloats part{std::size_t(head_dim_)}, rotated{std::size_t(head_dim_)};
    RowCodes idx{std::size_t(head_dim_)};
    for (const Part& p : parts_) {
        const int d = p.spec.dim;
        std::uint8_t* out = row + p.byte_offset;
        float* xp = part.data();
        for (int j = 0; j < d; ++j) xp[j] = x[channel(channels, p.channel_offset + j)];
        float* r = xp;  // what the sketch codes: the rotated residual, or the part itself without mse
        if (p.codebook) {
            float* y = rotated.data();
            std::uint8_t* ix = idx.data();
            rotate(p, xp, y, false);
            const double norm = norm2(xp, d);
            const float inv = norm > 0 ? float(1.0 / norm) : 0.0f;
            for (int j = 0; j < d; ++j) ix[j] = std::uint8_t(p.codebook->index(y[j] * inv));
            pack_bits(ix, d, p.spec.mse_bits, out);
            const float stored = store_f16(float(norm), out + p.code_bytes);
            for (int j = 0; j < d; ++j) y[j] -= stored * p.codebook->centroids[ix[j]];
            r = y;
            out += p.code_bytes + sizeof(f16_t);
        }
        if (p.spec.sketch_bits > 0) {
            std::memset(out, 0, p.sign_bytes);
            for (int i = 0; i < p.spec.sketch_bits; ++i)
                if (dot8(p.projection.data() + std::size_t(i) * d, r, d) > 0) out[i / 8] |= std::uint8_t(1u << (i % 8));
            store_f16(float(norm2(r, d)), out + p.sign_bytes);
        }
    }
}

void TurboStreamCoder::decode_ext(const std::uint8_t* rows, std::int64_t n, float* ext) const {
    const TurboKernels& k = turbo_kernels(active_simd_level());
    const std::size_t rb = row_bytes_.total();
    for (std::int64_t t = 0; t < n; ++t) {
        const std::uint8_t* row = rows + t * rb;
        float* e = ext + t * ext_dim_;
        for (const Part& p : parts_) {
            const std::uint8_t* in = row + p.byte_offset;
            if (p.codebook) {
                k.centroids(in, p.spec.dim, p.spec.mse_bits, p.codebook->centroids.data(), load_f16(in + p.code_bytes),
                            e + p.mse_offset);
                in += p.code_bytes + sizeof(f16_t);
            }
            if (p.spec.sketch_bits > 0)
                k.signs(in, p.spec.sketch_bits, p.sketch_scale * load_f16(in + p.sign_bytes), e + p.sketch_offset);
        }
    }
}

void TurboStreamCoder::prepare_query(const float* q, const int* channels, float* q_ext) const {
    RowFloats part{std::size_t(head_dim_)};
    for (const Part& p : parts_) {
        const int d = p.spec.dim;
        float* qp = part.data();
        for (int j = 0; j < d; ++j) qp[j] = q[channel(channels, p.channel_offset + j)];
        const float* qs = qp;  // the query in the sketch's coordinates
        if (p.codebook) {
            float* y = q_ext + p.mse_offset;
            rotate(p, qp, y, false);
            qs = y;
        }
        for (int i = 0; i < p.spec.sketch_bits; ++i)
            q_ext[p.sketch_offset + i] = dot8(p.projection.data() + std::size_t(i) * d, qs, d);
    }
}

void TurboStreamCoder::unrotate(const float* acc, const int* channels, float* out) const {
    AQPIM_ASSERT(rotated_only());
    RowFloats part{std::size_t(head_dim_)};
    for (const Part& p : parts_) {
        float* z = part.data();
        rotate(p, acc + p.mse_offset, z, true);
        for (int j = 0; j < p.spec.dim; ++j) out[channel(channels, p.channel_offset + j)] = z[j];
    }
}

void TurboStreamCoder::decode(const std::uint8_t* rows, std::int64_t n, const int* channels, float* out) const {
    ExtFloats ext_row{std::size_t(ext_dim_)};
    RowFloats coded{std::size_t(head_dim_)}, part{std::size_t(head_dim_)};
    float* ext = ext_row.data();
    for (std::int64_t t = 0; t < n; ++t) {
        decode_ext(rows + t * row_bytes_.total(), 1, ext);
        for (const Part& p : parts_) {
            const int d = p.spec.dim;
            float* y = coded.data();  // the part in its coding coordinates
            for (int j = 0; j < d; ++j) y[j] = p.codebook ? ext[p.mse_offset + j] : 0.0f;
            if (p.spec.sketch_bits > 0)  // + √(π/2)/m ‖r‖ S^T s: the sketch's reconstruction of r
                for (int i = 0; i < p.spec.sketch_bits; ++i) {
                    const float v = ext[p.sketch_offset + i];
                    const float* Si = p.projection.data() + std::size_t(i) * d;
                    for (int j = 0; j < d; ++j) y[j] += v * Si[j];
                }
            float* xp = part.data();
            if (p.codebook)
                rotate(p, y, xp, true);
            else
                std::memcpy(xp, y, std::size_t(d) * sizeof(float));
            for (int j = 0; j < d; ++j) out[t * head_dim_ + channel(channels, p.channel_offset + j)] = xp[j];
        }
    }
}

}  // namespace aqpim::kv
