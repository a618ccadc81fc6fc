// The PQ cache's pieces of a KV state (kv/pq_state.h).

#include "kv/pq_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "aqpim/error.h"
#include "aqpim/pq_codes.h"
#include "kv/pq_compact_centroids.h"
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
    if (version.compact()) {
        const CompactCentroids& c = (value ? version.vc : version.kc)[std::size_t(ih)];
        if (c.storage == CodebookStorage::f16) {
            out.u16s(c.f16.data(), c.f16.size());
        } else {
            out.bytes(c.i8.data(), c.i8.size());
            out.f32s(c.scale.data(), c.scale.size());
        }
    } else {
        out.f32s(q.centroids(), std::size_t(q.ksub()) * q.D());
    }
    if (p.scale_folding) out.f32s(q.scale().data(), q.scale().size());
    if (perm) out.i32s(q.permutation().data(), q.permutation().size());
    if (p.rotation == Rotation::hadamard) out.f32s(q.hadamard_signs().data(), q.hadamard_signs().size());
    if (p.rotation == Rotation::random_orthogonal) out.f32s(q.rotation_matrix().data(), q.rotation_matrix().size());
}

namespace {

/// One quantizer of a state file, and with cb=f16/int8 its centroids as stored.
struct ReadQuantizer {
    ProductQuantizer q;
    CompactCentroids stored;
};

ReadQuantizer read_quantizer(ByteReader& in, const PQParams& p, CodebookStorage storage, const std::string& field) {
    const std::uint32_t flags = in.u32(field + " flags");
    if (flags & ~kHasPermutation) in.fail(fmt::format("'{} flags' = {:#x}: unknown bits set", field, flags));
    const std::uint64_t D = std::uint64_t(p.D), ksub = std::uint64_t(1) << p.nbits, n_centroids = ksub * D;
    PqTrainedParts parts;
    CompactCentroids stored;
    stored.storage = storage;
    stored.M = p.M, stored.ksub = int(ksub), stored.dsub = p.M > 0 ? p.D / p.M : 0;
    std::vector<float> wide;
    in.require(centroid_bytes(storage, ksub, D), 1, field + " centroids");
    if (storage == CodebookStorage::f16) {
        stored.f16.resize(n_centroids);
        in.u16s(stored.f16.data(), n_centroids, field + " centroids");
    } else if (storage == CodebookStorage::int8) {
        stored.i8.resize(n_centroids);
        const std::span<const std::uint8_t> b = in.bytes(n_centroids, field + " centroids");
        std::memcpy(stored.i8.data(), b.data(), b.size());
        stored.scale.resize(std::size_t(D));
        in.f32s(stored.scale.data(), D, field + " centroid scales");
        for (std::uint64_t d = 0; d < D; ++d)
            if (!(std::isfinite(stored.scale[d]) && stored.scale[d] >= 0))
                in.fail(fmt::format("'{} centroid scales' [{}] = {}: not a finite scale >= 0", field, d, stored.scale[d]));
    }
    if (storage == CodebookStorage::f32) {
        parts.centroids.resize(std::size_t(n_centroids));
        in.f32s(parts.centroids.data(), n_centroids, field + " centroids");
    } else {
        stored.widen(wide);  // from_parts checks them as it would the f32 ones
        parts.centroids.assign(wide.begin(), wide.end());
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
        return {ProductQuantizer::from_parts(p, std::move(parts), field), std::move(stored)};
    } catch (const Error& e) {
        in.fail(e.what());
    }
}

}  // namespace

PqLayerVersion read_pq_version(ByteReader& in, const PqKvParams& p, const KvShape& shape, std::span<const int> Mk,
                               std::span<const int> Mv, std::string_view field) {
    PqLayerVersion v;
    std::vector<CompactCentroids> kc, vc;
    for (int ih = 0; ih < shape.n_kv_head; ++ih) {
        const std::string at = fmt::format("{} KV head {}", field, ih);
        for (const bool value : {false, true}) {
            const PQParams q = value ? pq_value_params(p, shape, Mv[std::size_t(ih)]) : pq_key_params(p, shape, Mk[std::size_t(ih)]);
            ReadQuantizer r = read_quantizer(in, q, p.codebooks, at + (value ? " values" : " keys"));
            (value ? v.v : v.k).push_back(std::move(r.q));
            (value ? vc : kc).push_back(std::move(r.stored));
        }
    }
    // Compact centroids are taken as stored: rounding their widened copies again could differ.
    if (p.codebooks == CodebookStorage::f32)
        v.keep_counted_only(p.codebooks);
    else
        v.adopt_compact(std::move(kc), std::move(vc));
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
