// The KV-state container (docs/kv-state.md): header, sections, checksum; saving a sequence with its
// slot, checking a state against the cache it goes into, restoring it.

#include "aqpim/kv_state.h"

#include <cstring>
#include <set>

#include "aqpim/byte_io.h"
#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/hash.h"
#include "aqpim/model.h"

namespace aqpim {

namespace {

constexpr char kMagic[8] = {'A', 'Q', 'K', 'V', 'S', 'T', 'A', 'T'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kHeaderBytes = 32;
constexpr std::uint32_t kChecksumBytes = 8;
constexpr std::uint32_t kSectionHeaderBytes = 16;  // u32 tag, u32 flags, u64 length
constexpr std::uint32_t kRequired = 1u << 0;       // section flag: a reader that does not know it must refuse
constexpr std::uint32_t kMaxNameBytes = 1024, kMaxSchemeBytes = 4096;
constexpr std::uint64_t kMaxStateBytes = std::uint64_t(1) << 40;  // read_kv_state_file refuses larger files
/// Sampler words a sequence's state may claim: one per sampled token in practice (libstdc++ and
/// libc++ draw one 64-bit word per uniform double); the bound keeps a hostile count from replaying
/// for minutes.
constexpr std::uint64_t kMaxDrawsPerToken = 16, kMaxDrawsSlack = 1 << 16;

/// Section tags: four ASCII bytes, in file order.
constexpr std::uint32_t tag(const char (&s)[5]) {
    return std::uint32_t(std::uint8_t(s[0])) | std::uint32_t(std::uint8_t(s[1])) << 8 |
           std::uint32_t(std::uint8_t(s[2])) << 16 | std::uint32_t(std::uint8_t(s[3])) << 24;
}
constexpr std::uint32_t kModel = tag("MODL"), kShape = tag("KVSH"), kTokens = tag("TOKS"), kSampler = tag("SMPL"),
                        kCache = tag("KVSQ");

std::string tag_text(std::uint32_t t) {
    std::string s;
    for (int b = 0; b < 4; ++b) {
        const char c = char(t >> (8 * b));
        s += (c >= 0x20 && c < 0x7f) ? c : '?';
    }
    return s;
}

void begin_section(ByteWriter& w, std::uint32_t t, std::uint32_t flags) {
    w.u32(t);
    w.u32(flags);
}

std::string describe(const ModelIdentity& m) { return fmt::format("'{}' (fingerprint {:#018x})", m.name, m.fingerprint); }

// ---- parse ---------------------------------------------------------------------------------------

struct ParsedState {
    KvStateInfo info;
    std::span<const std::uint8_t> cache;  ///< the KVSQ payload
    std::uint64_t cache_offset = 0;       ///< its offset in the state
};

void read_model(ByteReader& r, KvStateInfo& info) {
    info.model.fingerprint = r.u64("model fingerprint");
    info.model.name = r.str(kMaxNameBytes, "model name");
}

void read_shape(ByteReader& r, KvStateInfo& info) {
    const std::uint32_t n_layer = r.u32("n_layer"), n_kv_heads = r.u32("n_kv_head"), hd = r.u32("head_dim"),
                        pairs = r.u32("rope_pairs");
    if (n_layer < 1 || n_layer > std::uint32_t(ModelLimits::layers))
        r.fail(fmt::format("'n_layer' = {}: expected 1..{}", n_layer, ModelLimits::layers));
    if (n_kv_heads < 1 || n_kv_heads > std::uint32_t(ModelLimits::heads))
        r.fail(fmt::format("'n_kv_head' = {}: expected 1..{}", n_kv_heads, ModelLimits::heads));
    if (hd < 1 || hd > std::uint32_t(ModelLimits::head_dim))
        r.fail(fmt::format("'head_dim' = {}: expected 1..{}", hd, ModelLimits::head_dim));
    if (pairs > 2) r.fail(fmt::format("'rope_pairs' = {}: expected 0 (none), 1 (interleaved) or 2 (neox)", pairs));
    info.shape = KvShape{int(n_layer), int(n_kv_heads), int(hd), RopePairs(pairs), {}};
    info.scheme = r.str(kMaxSchemeBytes, "scheme");
    info.context = r.i64("context");
    if (info.context < 0 || info.context > ModelLimits::context)
        r.fail(fmt::format("'context' = {}: expected 0..{}", info.context, ModelLimits::context));
}

void read_tokens(ByteReader& r, KvStateInfo& info) {
    SlotState& slot = info.slot;
    const std::uint64_t n_cached = r.u64("n_cached"), n = r.u64("n_tokens");
    if (n_cached > std::uint64_t(ModelLimits::context))
        r.fail(fmt::format("'n_cached' = {}: expected at most {}", n_cached, ModelLimits::context));
    if (n != 0 && n < n_cached) r.fail(fmt::format("'n_tokens' = {} is fewer than the {} cached", n, n_cached));
    r.require(n, 4, "tokens");
    slot.n_cached = std::int64_t(n_cached);
    slot.tokens.resize(std::size_t(n));
    r.i32s(slot.tokens.data(), n, "tokens");
    for (std::size_t i = 0; i < slot.tokens.size(); ++i)
        if (slot.tokens[i] < 0) r.fail(fmt::format("token {} has id {}", i, slot.tokens[i]));
}

ParsedState parse(std::span<const std::uint8_t> bytes) {
    ByteReader r(bytes, "kv state");
    if (bytes.size() < kHeaderBytes + kChecksumBytes)
        r.fail(fmt::format("truncated: {} bytes, a state has at least {}", bytes.size(), kHeaderBytes + kChecksumBytes));
    if (std::memcmp(r.bytes(8, "magic").data(), kMagic, 8) != 0) r.fail("not a KV state (magic is not \"AQKVSTAT\")");
    ParsedState ps;
    KvStateInfo& info = ps.info;
    info.version = r.u32("version");
    if (info.version != kVersion)
        r.fail(fmt::format("format version {}; this build reads version {}", info.version, kVersion));
    const std::uint32_t header = r.u32("header_bytes");
    if (header != kHeaderBytes) r.fail(fmt::format("'header_bytes' = {}: expected {}", header, kHeaderBytes));
    const std::uint64_t total = r.u64("file_bytes");
    if (total > bytes.size())
        r.fail(fmt::format("truncated: the header states {} bytes, {} are present", total, bytes.size()));
    if (total < bytes.size())
        r.fail(fmt::format("{} bytes after the {} the header states", bytes.size() - total, total));
    const std::uint32_t n_sections = r.u32("n_sections"), flags = r.u32("flags");
    if (flags != 0) r.fail(fmt::format("'flags' = {:#x}: expected 0", flags));
    const std::uint64_t body = total - kChecksumBytes;
    std::uint64_t stored = 0;
    for (int b = 0; b < 8; ++b) stored |= std::uint64_t(bytes[std::size_t(body) + b]) << (8 * b);
    const std::uint64_t computed = xxh64(bytes.data(), std::size_t(body));
    if (stored != computed)
        AQPIM_FAIL("kv state: checksum {:#018x} does not match the contents ({:#018x}): the file is corrupted", stored,
                   computed);

    ByteReader sections(bytes.first(std::size_t(body)), "kv state");
    sections.bytes(kHeaderBytes, "header");
    sections.require(n_sections, kSectionHeaderBytes, "section headers");
    std::set<std::uint32_t> seen;
    std::optional<ByteReader> sampler;
    for (std::uint32_t i = 0; i < n_sections; ++i) {
        const std::uint32_t t = sections.u32("section tag"), sflags = sections.u32("section flags");
        const std::uint64_t len = sections.u64("section length");
        const std::string name = fmt::format("section '{}'", tag_text(t));
        const std::uint64_t at = sections.offset();
        ByteReader s = sections.sub(len, name);
        if (!seen.insert(t).second) s.fail(fmt::format("{} appears twice", name));
        if (t == kModel)
            read_model(s, info);
        else if (t == kShape)
            read_shape(s, info);
        else if (t == kTokens)
            read_tokens(s, info);
        else if (t == kSampler)
            sampler.emplace(s.sub(len, name));  // read once the tokens bound its draws
        else if (t == kCache) {
            ps.cache = s.bytes(len, "cache");
            ps.cache_offset = at;
        } else if (sflags & kRequired)
            s.fail(fmt::format("{} is required but unknown to this build (a newer writer?)", name));
        else
            s.bytes(len, name);  // an optional section from a newer writer: skipped
        s.expect_end(name);
    }
    sections.expect_end("the last section");
    for (std::uint32_t t : {kModel, kShape, kTokens, kCache})
        if (!seen.count(t)) sections.fail(fmt::format("required section '{}' is missing", tag_text(t)));
    if (sampler) {
        const std::uint64_t tokens = std::max<std::uint64_t>(info.slot.tokens.size(), std::uint64_t(info.slot.n_cached));
        info.slot.sampler = SamplerState::read(*sampler, kMaxDrawsPerToken * tokens + kMaxDrawsSlack);
        sampler->expect_end("section 'SMPL'");
    }
    info.cache_offset = ps.cache_offset;
    info.cache_bytes = ps.cache.size();
    return ps;
}

// ---- checks against the destination ------------------------------------------------------------

void check_model(const KvStateInfo& info, const ModelIdentity& model) {
    AQPIM_CHECK(info.model.fingerprint == model.fingerprint, "kv state: saved for model {}, not for model {}",
                describe(info.model), describe(model));
}

void check_shape(const KvStateInfo& info, const KvShape& shape) {
    const KvShape& s = info.shape;
    AQPIM_CHECK(s.n_layer == shape.n_layer && s.n_kv_head == shape.n_kv_head && s.head_dim == shape.head_dim &&
                    s.rope_pairs == shape.rope_pairs,
                "kv state: saved from a cache of {} layers x {} KV heads x head_dim {} (rope pairs {}), not {} x {} x {} "
                "({})",
                s.n_layer, s.n_kv_head, s.head_dim, int(s.rope_pairs), shape.n_layer, shape.n_kv_head, shape.head_dim,
                int(shape.rope_pairs));
}

void check_cache(const KvStateInfo& info, const KvCache& cache) {
    check_shape(info, cache.shape());
    AQPIM_CHECK(info.scheme == cache.scheme(), "kv state: saved by a cache of scheme '{}', this cache is '{}'",
                info.scheme, cache.scheme());
}

void restore_into(const ParsedState& ps, KvCache& cache, int seq_id) {
    const KvStateInfo& info = ps.info;
    check_cache(info, cache);
    AQPIM_CHECK(!cache.has_sequence(seq_id), "kv state: sequence {} is in use; restore into a free sequence id",
                seq_id);
    ByteReader r(ps.cache, "kv state", ps.cache_offset);
    cache.restore_sequence(seq_id, r);
    try {
        r.expect_end("the cache section");
        for (int il = 0; il < cache.shape().n_layer; ++il)
            AQPIM_CHECK(cache.n_tokens(seq_id, il) == info.slot.n_cached,
                        "kv state: layer {} of the cache section holds {} tokens, the slot says {} are cached", il,
                        cache.n_tokens(seq_id, il), info.slot.n_cached);
    } catch (...) {
        cache.remove_sequence(seq_id);
        throw;
    }
}

}  // namespace

// ---- save --------------------------------------------------------------------------------------------

std::vector<std::uint8_t> save_kv_state(const KvCache& cache, int seq_id, const SlotState& slot,
                                        const ModelIdentity& model, std::int64_t context) {
    AQPIM_CHECK(cache.has_sequence(seq_id), "save kv state: the cache has no sequence {}", seq_id);
    const KvShape& shape = cache.shape();
    for (int il = 0; il < shape.n_layer; ++il)
        AQPIM_CHECK(cache.n_tokens(seq_id, il) == slot.n_cached,
                    "save kv state: layer {} of sequence {} holds {} tokens, the slot says {} are cached (save between "
                    "forward steps, when every layer holds them)",
                    il, seq_id, cache.n_tokens(seq_id, il), slot.n_cached);
    AQPIM_CHECK(slot.tokens.empty() || std::int64_t(slot.tokens.size()) >= slot.n_cached,
                "save kv state: the slot has {} tokens, fewer than the {} cached", slot.tokens.size(), slot.n_cached);
    AQPIM_CHECK(context >= 0 && context <= ModelLimits::context, "save kv state: context {} out of range 0..{}", context,
                ModelLimits::context);
    for (std::int32_t id : slot.tokens) AQPIM_CHECK(id >= 0, "save kv state: token id {} is negative", id);

    ByteWriter w;
    w.bytes(kMagic, 8);
    w.u32(kVersion);
    w.u32(kHeaderBytes);
    const std::size_t total_at = w.size();
    w.u64(0);  // file_bytes, filled below
    w.u32(slot.sampler ? 5 : 4);
    w.u32(0);

    begin_section(w, kModel, kRequired);
    std::size_t m = w.begin_length();
    w.u64(model.fingerprint);
    w.str(model.name.substr(0, kMaxNameBytes));
    w.end_length(m);

    begin_section(w, kShape, kRequired);
    m = w.begin_length();
    for (int v : {shape.n_layer, shape.n_kv_head, shape.head_dim, int(shape.rope_pairs)}) w.u32(std::uint32_t(v));
    w.str(cache.scheme());
    w.i64(context);
    w.end_length(m);

    begin_section(w, kTokens, kRequired);
    m = w.begin_length();
    w.u64(std::uint64_t(slot.n_cached));
    w.u64(slot.tokens.size());
    w.i32s(slot.tokens.data(), slot.tokens.size());
    w.end_length(m);

    if (slot.sampler) {
        begin_section(w, kSampler, kRequired);
        m = w.begin_length();
        slot.sampler->write(w);
        w.end_length(m);
    }

    begin_section(w, kCache, kRequired);
    m = w.begin_length();
    cache.save_sequence(seq_id, w);
    w.end_length(m);

    const std::uint64_t total = w.size() + kChecksumBytes;
    for (int b = 0; b < 8; ++b) w.data()[total_at + b] = std::uint8_t(total >> (8 * b));
    w.u64(xxh64(w.data().data(), w.size()));
    return w.take();
}

void save_kv_state_file(const std::string& path, const KvCache& cache, int seq_id, const SlotState& slot,
                        const ModelIdentity& model, std::int64_t context) {
    const std::vector<std::uint8_t> bytes = save_kv_state(cache, seq_id, slot, model, context);
    write_output_file(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), "kv state");
}

// ---- restore -----------------------------------------------------------------------------------------

KvStateInfo read_kv_state_info(std::span<const std::uint8_t> bytes) { return parse(bytes).info; }

void check_kv_state_target(const KvStateInfo& info, const KvCache& cache, const ModelIdentity& model) {
    check_model(info, model);
    check_cache(info, cache);
}

SlotState restore_kv_state(std::span<const std::uint8_t> bytes, KvCache& cache, int seq_id, const ModelIdentity& model) {
    const ParsedState ps = parse(bytes);
    check_model(ps.info, model);
    restore_into(ps, cache, seq_id);
    return ps.info.slot;
}

RestoredKvState load_kv_state(std::span<const std::uint8_t> bytes, const KvStateTarget& target) {
    ParsedState ps = parse(bytes);
    if (target.model) check_model(ps.info, *target.model);
    if (target.shape) check_shape(ps.info, *target.shape);
    KvCacheOptions options;
    options.memory_budget = target.memory_budget;
    options.context = ps.info.context;
    RestoredKvState out;
    try {
        out.cache = make_kv_cache(parse_kv_scheme(ps.info.scheme), target.shape ? *target.shape : ps.info.shape, options);
    } catch (const Error& e) {
        AQPIM_FAIL("kv state: its scheme '{}' does not build a cache: {}", ps.info.scheme, e.what());
    }
    restore_into(ps, *out.cache, 0);
    out.info = std::move(ps.info);
    return out;
}

std::vector<std::uint8_t> read_kv_state_file(const std::string& path) {
    const std::string text = read_whole_file(path, "kv state", kMaxStateBytes);
    return std::vector<std::uint8_t>(text.begin(), text.end());
}

// ---- sequences inside one cache ------------------------------------------------------------------------

void fork_sequence(KvCache& cache, int src, int dst) {
    AQPIM_CHECK(cache.has_sequence(src), "fork sequence: the cache has no sequence {}", src);
    AQPIM_CHECK(!cache.has_sequence(dst), "fork sequence: sequence {} is in use", dst);
    ByteWriter w;
    cache.save_sequence(src, w);
    ByteReader r(w.data(), fmt::format("fork of sequence {}", src));
    cache.restore_sequence(dst, r);
    try {
        r.expect_end("the sequence");
    } catch (...) {
        cache.remove_sequence(dst);
        throw;
    }
}

}  // namespace aqpim
