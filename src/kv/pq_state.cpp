// The PQ cache's pieces of a KV state (kv/pq_state.h).

#include "kv/pq_state.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "aqpim/error.h"
#include "aqpim/pq_codes.h"
#include "kv/pq_layout.h"
#include "pq/subspace_plan.h"

namespace aqpim::kv {

namespace {
constexpr std::uint32_t kHasPermutation = 1u << 0;
}  // namespace

void write_pq_quantizer(ByteWriter& out, const PqLayerVersion& version, bool value, int ih) {
    const ProductQuantizer& q = (value ? version.v : version.k)[std::size_t(ih)];
    const PQParams& p = q.params();
    const bool perm = !is_identity_permutation(q.permutation());
    out.u32(perm ? kHasPermutation : 0);
    if (version.f16()) {
        const AlignedBuffer<f16_t>& c16 = (value ? version.v16 : version.k16)[std::size_t(ih)];
        out.u16s(c16.data(), c16.size());
    } else {
        out.f32s(q.centroids(), std::size_t(q.ksub()) * q.D());
    }
    if (p.scale_folding) out.f32s(q.scale().data(), q.scale().size());
    if (perm) out.i32s(q.permutation().data(), q.permutation().size());
    if (p.rotation == Rotation::hadamard) out.f32s(q.hadamard_signs().data(), q.hadamard_signs().size());
    if (p.rotation == Rotation::random_orthogonal) out.f32s(q.rotation_matrix().data(), q.rotation_matrix().size());
}

namespace {

ProductQuantizer read_quantizer(ByteReader& in, const PQParams& p, bool f16_codebooks, const std::string& field) {
    const std::uint32_t flags = in.u32(field + " flags");
    if (flags & ~kHasPermutation) in.fail(fmt::format("'{} flags' = {:#x}: unknown bits set", field, flags));
    const std::uint64_t D = std::uint64_t(p.D), n_centroids = (std::uint64_t(1) << p.nbits) * D;
    PqTrainedParts parts;
    in.require(n_centroids, f16_codebooks ? 2 : 4, field + " centroids");
    parts.centroids.resize(std::size_t(n_centroids));
    if (f16_codebooks) {
        std::vector<f16_t> c16(n_centroids);
        in.u16s(c16.data(), n_centroids, field + " centroids");
        fp16_to_f32(c16.data(), parts.centroids.data(), c16.size());  // exact; rounded back by store_f16
    } else {
        in.f32s(parts.centroids.data(), n_centroids, field + " centroids");
    }
    const auto floats = [&](std::vector<float>& out, std::uint64_t n, const char* what) {
        in.require(n, 4, field + what);
        out.resize(std::size_t(n));
        in.f32s(out.data(), n, field + what);
    };
    if (p.scale_folding) floats(parts.scale, D, " scale");
    if (flags & kHasPermutation) {
        in.require(D, 4, field + " permutation");
        parts.permutation.resize(std::size_t(D));
        in.i32s(parts.permutation.data(), D, field + " permutation");
    }
    if (p.rotation == Rotation::hadamard) floats(parts.hadamard_signs, D, " hadamard signs");
    if (p.rotation == Rotation::random_orthogonal) floats(parts.rotation, D * D, " rotation");
    try {
        return ProductQuantizer::from_parts(p, std::move(parts), field);
    } catch (const Error& e) {
        in.fail(e.what());
    }
}

}  // namespace

PqLayerVersion read_pq_version(ByteReader& in, const PqKvParams& p, const KvShape& shape, std::span<const int> Mk,
                               std::span<const int> Mv, std::string_view field) {
    PqLayerVersion v;
    for (int ih = 0; ih < shape.n_kv_head; ++ih) {
        const std::string at = fmt::format("{} KV head {}", field, ih);
        v.k.push_back(read_quantizer(in, pq_key_params(p, shape, Mk[std::size_t(ih)]), p.f16_codebooks, at + " keys"));
        v.v.push_back(
            read_quantizer(in, pq_value_params(p, shape, Mv[std::size_t(ih)]), p.f16_codebooks, at + " values"));
    }
    v.keep_counted_only(p.f16_codebooks);
    return v;
}

bool code_blocks_canonical(const std::uint8_t* blocks, std::int64_t n, int M, int nbits) {
    // Repacking the codes of a block writes zero into its padding. Only blocks with padding need the
    // check: every block when M has padding subspaces (4-bit codes, M not a multiple of 4), else the
    // last one when n is not a multiple of the block.
    const std::size_t bb = code_block_bytes(M, nbits);
    const std::int64_t n_blocks = code_blocks_for(n);
    const std::int64_t first = code_padded_M(M, nbits) != M ? 0 : n % kCodeBlock != 0 ? n_blocks - 1 : n_blocks;
    std::vector<std::uint8_t> codes(std::size_t(kCodeBlock) * M), repacked(bb);
    for (std::int64_t b = first; b < n_blocks; ++b) {
        const std::uint8_t* block = blocks + std::size_t(b) * bb;
        const std::int64_t t = std::min<std::int64_t>(kCodeBlock, n - b * kCodeBlock);
        unpack_code_blocks(block, t, M, nbits, codes.data());
        pack_code_blocks(codes.data(), t, M, nbits, repacked.data());
        if (std::memcmp(block, repacked.data(), bb) != 0) return false;
    }
    return true;
}

}  // namespace aqpim::kv
