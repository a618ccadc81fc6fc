// Block entries of the prefix store: keys, encoding and checked decoding (docs/kv-store.md).

#include "store/block_entry.h"

#include <fmt/format.h>

#include <cstring>

#include "aqpim/byte_io.h"
#include "aqpim/error.h"
#include "aqpim/hash.h"

namespace aqpim::store {

namespace {

constexpr char kMagic[8] = {'A', 'Q', 'K', 'V', 'B', 'L', 'O', 'K'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kHeaderBytes = 128;  // magic .. n_ops
constexpr std::uint64_t kOpBytes = 17;       // u8 copy, u64 src, u64 len

/// A 128-bit key over the bytes fed to it.
class KeyHasher {
public:
    KeyHasher() : a_(1), b_(2) {}
    void update(const void* p, std::size_t n) {
        a_.update(p, n);
        b_.update(p, n);
    }
    void u64(std::uint64_t v) {
        std::uint8_t le[8];
        for (int i = 0; i < 8; ++i) le[i] = std::uint8_t(v >> (8 * i));
        update(le, 8);
    }
    void str(const std::string& s) {
        u64(s.size());
        update(s.data(), s.size());
    }
    BlockKey key() const { return {a_.digest(), b_.digest()}; }

private:
    Xxh64 a_, b_;
};

}  // namespace

std::string BlockKey::hex() const { return fmt::format("{:016x}{:016x}", hi, lo); }

BlockKey namespace_key(const StoreNamespace& ns) {
    KeyHasher h;
    h.str("aqpim kv store v1");
    h.u64(ns.model_fingerprint);
    h.str(ns.scheme);
    h.u64(std::uint64_t(ns.context));
    h.u64(std::uint64_t(ns.block_tokens));
    h.u64(std::uint64_t(ns.prefill_chunk));
    h.str(ns.kernels);
    return h.key();
}

BlockKey salted_key(const BlockKey& ns_key, const std::string& salt) {
    if (salt.empty()) return ns_key;
    KeyHasher h;
    h.str("aqpim kv store salt");
    h.u64(ns_key.hi);
    h.u64(ns_key.lo);
    h.str(salt);
    return h.key();
}

BlockKey next_block_key(const BlockKey& prev, std::span<const std::int32_t> tokens) {
    KeyHasher h;
    h.u64(prev.hi);
    h.u64(prev.lo);
    h.u64(tokens.size());
    for (std::int32_t t : tokens) h.u64(std::uint64_t(std::uint32_t(t)));
    return h.key();
}

std::string main_entry_name(const BlockKey& k) { return k.hex(); }
std::string tail_entry_name(const BlockKey& k) { return k.hex() + ".tail"; }

EncodedBlock encode_block(BlockHeader h, const StateDelta& d) {
    AQPIM_ASSERT(d.lasting_bytes <= d.literals.size());
    h.state_bytes = d.output_bytes();
    h.parent_bytes = d.parent_bytes;
    h.tail_bytes = d.literals.size() - d.lasting_bytes;
    EncodedBlock out;
    if (h.tail_bytes > 0) {
        out.tail.assign(d.literals.begin() + std::ptrdiff_t(d.lasting_bytes), d.literals.end());
        h.tail_checksum = xxh64(out.tail.data(), out.tail.size());
    } else {
        h.tail_checksum = 0;
    }
    ByteWriter w;
    w.reserve(kHeaderBytes + d.ops.size() * kOpBytes + d.lasting_bytes + 8);
    w.bytes(kMagic, sizeof kMagic);
    w.u32(kVersion);
    w.u32(kHeaderBytes);
    w.u64(h.model_fingerprint);
    w.u64(h.key.hi);
    w.u64(h.key.lo);
    w.u64(h.parent.hi);
    w.u64(h.parent.lo);
    w.u32(h.index);
    w.u32(h.block_tokens);
    for (std::uint64_t v : {h.state_bytes, h.state_checksum, h.parent_bytes, std::uint64_t(d.lasting_bytes), h.tail_bytes,
                            h.tail_checksum, h.flags, std::uint64_t(d.ops.size())})
        w.u64(v);
    AQPIM_ASSERT(w.size() == kHeaderBytes);
    for (const DeltaOp& op : d.ops) {
        w.u8(op.copy ? 1 : 0);
        w.u64(op.src);
        w.u64(op.len);
    }
    w.bytes(d.literals.data(), d.lasting_bytes);
    w.u64(xxh64(w.data().data(), w.size()));
    out.main = w.take();
    return out;
}

DecodedBlock decode_block(std::span<const std::uint8_t> bytes) {
    ByteReader r(bytes, "kv store: block entry");
    if (bytes.size() < kHeaderBytes + 8) r.fail(fmt::format("{} bytes, shorter than a header and checksum", bytes.size()));
    if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) r.fail("not a block entry (magic)");
    std::uint64_t sum = 0;
    for (int i = 7; i >= 0; --i) sum = (sum << 8) | bytes[bytes.size() - 8 + std::size_t(i)];
    if (xxh64(bytes.data(), bytes.size() - 8) != sum) r.fail("checksum mismatch: the entry is corrupt");
    (void)r.bytes(sizeof kMagic, "magic");
    if (const std::uint32_t v = r.u32("version"); v != kVersion) r.fail(fmt::format("version {}, not {}", v, kVersion));
    if (const std::uint32_t hb = r.u32("header_bytes"); hb != kHeaderBytes) r.fail(fmt::format("header_bytes {}", hb));
    DecodedBlock b;
    BlockHeader& h = b.header;
    h.model_fingerprint = r.u64("model_fingerprint");
    h.key.hi = r.u64("key");
    h.key.lo = r.u64("key");
    h.parent.hi = r.u64("parent");
    h.parent.lo = r.u64("parent");
    h.index = r.u32("index");
    h.block_tokens = r.u32("block_tokens");
    h.state_bytes = r.u64("state_bytes");
    h.state_checksum = r.u64("state_checksum");
    h.parent_bytes = r.u64("parent_bytes");
    const std::uint64_t lasting = r.u64("lasting_bytes");
    h.tail_bytes = r.u64("tail_bytes");
    h.tail_checksum = r.u64("tail_checksum");
    h.flags = r.u64("flags");
    if (h.flags > BlockHeader::kTailStored) r.fail(fmt::format("flags {:#x} (bits above 0 are reserved)", h.flags));
    const std::uint64_t n_ops = r.u64("n_ops");
    r.require(n_ops, kOpBytes, "ops");
    b.ops.resize(std::size_t(n_ops));
    for (DeltaOp& op : b.ops) {
        const std::uint8_t kind = r.u8("op kind");
        if (kind > 1) r.fail(fmt::format("op kind {} (0 literal, 1 copy)", kind));
        op.copy = kind == 1;
        op.src = r.u64("op src");
        op.len = r.u64("op len");
    }
    b.lasting = r.bytes(lasting, "lasting literals");
    (void)r.u64("checksum");
    r.expect_end("the entry");
    return b;
}

}  // namespace aqpim::store
