// Deltas between KV states: a gear-hash anchor index over the parent, a scan of the new state that
// turns every anchored match into a copy extended both ways, the lasting/tail split, and the
// composition of a chain into its last state through a list of pieces.

#include "store/state_delta.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "aqpim/error.h"

namespace aqpim::store {

namespace {

/// The rolling hash covers the last kWindow bytes: gear hashing shifts each byte's contribution one
/// bit further per byte, so after 64 bytes it has left the 64-bit value.
constexpr std::size_t kWindow = 64;
/// An anchor is a position whose window hash has its top 6 bits zero: about one per 64 bytes,
/// chosen by content, so the same bytes anchor at the same places in both states.
constexpr unsigned kAnchorShift = 58;

const std::array<std::uint64_t, 256>& gear() {
    static const std::array<std::uint64_t, 256> table = [] {
        std::array<std::uint64_t, 256> t{};
        std::uint64_t x = 0x6171706b76737464ULL;  // splitmix64 from a fixed seed: the same table everywhere
        for (auto& v : t) {
            std::uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
            v = z ^ (z >> 31);
        }
        return t;
    }();
    return table;
}

bool is_anchor(std::uint64_t h) { return (h >> kAnchorShift) == 0; }

/// The parent's bytes a copy may read: the complement of `forbidden` (sorted, disjoint) within
/// [0, size).
class AllowedRuns {
public:
    AllowedRuns(std::span<const ByteRange> forbidden, std::uint64_t size) : forbidden_(forbidden), size_(size) {}
    /// The allowed run [begin, end) that holds p, or {p, p} when p is forbidden.
    std::pair<std::uint64_t, std::uint64_t> around(std::uint64_t p) const {
        const auto next = std::upper_bound(forbidden_.begin(), forbidden_.end(), p,
                                           [](std::uint64_t v, const ByteRange& r) { return v < r.begin; });
        std::uint64_t begin = 0;
        if (next != forbidden_.begin()) {
            const ByteRange& prev = *(next - 1);
            if (prev.end > p) return {p, p};
            begin = prev.end;
        }
        return {begin, next == forbidden_.end() ? size_ : std::min(size_, next->begin)};
    }
    /// Every allowed run, in order.
    template <class F>
    void for_each(F&& f) const {
        std::uint64_t at = 0;
        for (const ByteRange& r : forbidden_) {
            if (r.begin > at) f(at, std::min(r.begin, size_));
            at = std::max(at, r.end);
        }
        if (at < size_) f(at, size_);
    }

private:
    std::span<const ByteRange> forbidden_;
    std::uint64_t size_;
};

/// Window hash -> end offset (inclusive) of its first anchored occurrence in the parent's allowed
/// runs (a window never crosses a forbidden byte).
class AnchorIndex {
public:
    AnchorIndex(std::span<const std::uint8_t> parent, const AllowedRuns& runs) {
        std::size_t cap = 16;
        while (cap < 2 * (parent.size() / 32 + 1)) cap *= 2;  // load factor <= 1/2 at one anchor per 64 bytes
        slots_.assign(cap, Slot{});
        const auto& g = gear();
        runs.for_each([&](std::uint64_t begin, std::uint64_t end) {
            std::uint64_t h = 0;
            for (std::uint64_t i = begin; i < end; ++i) {
                h = (h << 1) + g[parent[i]];
                if (i + 1 - begin >= kWindow && is_anchor(h)) insert(h, i);
            }
        });
    }
    /// End offset of the window with hash h, or -1.
    std::int64_t find(std::uint64_t h) const {
        for (std::size_t k = mix(h) & (slots_.size() - 1);; k = (k + 1) & (slots_.size() - 1)) {
            if (!slots_[k].used) return -1;
            if (slots_[k].hash == h) return std::int64_t(slots_[k].end);
        }
    }

private:
    struct Slot {
        std::uint64_t hash = 0, end = 0;
        bool used = false;
    };
    static std::size_t mix(std::uint64_t h) { return std::size_t((h * 0x9E3779B97F4A7C15ULL) >> 17); }
    void insert(std::uint64_t h, std::size_t end) {
        if (2 * (n_ + 1) > slots_.size()) return;  // more anchors than expected (low-entropy bytes): keep the first
        for (std::size_t k = mix(h) & (slots_.size() - 1);; k = (k + 1) & (slots_.size() - 1)) {
            if (slots_[k].used) {
                if (slots_[k].hash == h) return;
                continue;
            }
            slots_[k] = Slot{h, end, true};
            ++n_;
            return;
        }
    }
    std::vector<Slot> slots_;
    std::size_t n_ = 0;
};

/// Length of the common prefix of a and b (n bytes at most).
std::size_t common_prefix(const std::uint8_t* a, const std::uint8_t* b, std::size_t n) {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        std::uint64_t x, y;
        std::memcpy(&x, a + i, 8);
        std::memcpy(&y, b + i, 8);
        if (x != y) return i + std::size_t(__builtin_ctzll(x ^ y) / 8);  // little-endian: the lowest differing byte
    }
    while (i < n && a[i] == b[i]) ++i;
    return i;
}

/// Appends ops, merging a copy that continues the previous one.
struct OpWriter {
    StateDelta& d;
    void literal(const std::uint8_t* p, std::size_t n) {
        if (n == 0) return;
        const std::uint64_t at = d.literals.size();
        d.literals.insert(d.literals.end(), p, p + n);
        if (!d.ops.empty() && !d.ops.back().copy && d.ops.back().src + d.ops.back().len == at)
            d.ops.back().len += n;
        else
            d.ops.push_back({at, n, false});
    }
    void copy(std::uint64_t src, std::uint64_t n) {
        if (!d.ops.empty() && d.ops.back().copy && d.ops.back().src + d.ops.back().len == src)
            d.ops.back().len += n;
        else
            d.ops.push_back({src, n, true});
    }
};

/// Checked a + b <= limit without overflow.
bool fits(std::uint64_t a, std::uint64_t b, std::uint64_t limit) { return a <= limit && b <= limit - a; }

}  // namespace

std::uint64_t StateDelta::output_bytes() const {
    std::uint64_t n = 0;
    for (const DeltaOp& op : ops) n += op.len;
    return n;
}

StateDelta diff_states(std::span<const std::uint8_t> parent, std::span<const std::uint8_t> now,
                       std::span<const ByteRange> forbidden) {
    StateDelta d;
    d.parent_bytes = parent.size();
    OpWriter w{d};
    const AllowedRuns runs(forbidden, parent.size());
    const AnchorIndex index(parent, runs);
    const auto& g = gear();
    const std::size_t n = now.size();
    std::size_t lit = 0, filled = 0, i = 0;
    std::uint64_t h = 0;
    while (i < n) {
        h = (h << 1) + g[now[i]];
        if (++filled >= kWindow && is_anchor(h)) {
            const std::int64_t end = index.find(h);
            std::size_t ns = i + 1 - kWindow, ps = std::size_t(end) + 1 - kWindow;
            if (end >= 0 && std::memcmp(now.data() + ns, parent.data() + ps, kWindow) == 0) {
                const auto [run_begin, run_end] = runs.around(ps);  // the window lies in one allowed run
                while (ns > lit && ps > run_begin && now[ns - 1] == parent[ps - 1]) --ns, --ps;
                std::size_t ne = i + 1, pe = std::size_t(end) + 1;
                const std::size_t more = common_prefix(now.data() + ne, parent.data() + pe, std::min(n - ne, std::size_t(run_end) - pe));
                ne += more;
                w.literal(now.data() + lit, ns - lit);
                w.copy(ps, ne - ns);
                lit = i = ne;
                h = 0;
                filled = 0;
                continue;
            }
        }
        ++i;
    }
    w.literal(now.data() + lit, n - lit);
    d.lasting_bytes = d.literals.size();
    return d;
}

void split_lasting(StateDelta& d, const StateDelta& next) {
    AQPIM_ASSERT(next.parent_bytes == d.output_bytes());
    // Where each of d's ops starts in d's output.
    std::vector<std::uint64_t> starts;
    std::uint64_t at = 0;
    for (const DeltaOp& op : d.ops) starts.push_back(at), at += op.len;
    // Literal byte ranges of d that next copies: [first, last) in d.literals.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> kept;
    for (const DeltaOp& c : next.ops) {
        if (!c.copy) continue;
        std::size_t k = std::size_t(std::upper_bound(starts.begin(), starts.end(), c.src) - starts.begin()) - 1;
        for (std::uint64_t pos = c.src, end = c.src + c.len; pos < end; ++k) {
            const DeltaOp& op = d.ops[k];
            const std::uint64_t take = std::min(end, starts[k] + op.len) - pos;
            if (!op.copy) kept.emplace_back(op.src + (pos - starts[k]), op.src + (pos - starts[k]) + take);
            pos += take;
        }
    }
    std::sort(kept.begin(), kept.end());
    std::vector<std::pair<std::uint64_t, std::uint64_t>> lasting;  // merged, disjoint
    for (const auto& r : kept)
        if (!lasting.empty() && r.first <= lasting.back().second)
            lasting.back().second = std::max(lasting.back().second, r.second);
        else
            lasting.push_back(r);
    // New literal layout: the lasting ranges in order, then the rest in order. `moves` maps old
    // ranges [first, last) to their new offset, sorted by old offset and covering every literal byte.
    struct Move {
        std::uint64_t first, last, to;
    };
    std::vector<Move> moves;
    std::uint64_t n_lasting = 0;
    for (const auto& r : lasting) moves.push_back({r.first, r.second, n_lasting}), n_lasting += r.second - r.first;
    std::uint64_t tail_at = n_lasting, prev = 0;
    const std::size_t n_lasting_moves = moves.size();
    for (std::size_t k = 0; k <= n_lasting_moves; ++k) {
        const std::uint64_t gap_end = k < n_lasting_moves ? moves[k].first : d.literals.size();
        if (gap_end > prev) moves.push_back({prev, gap_end, tail_at}), tail_at += gap_end - prev;
        if (k < n_lasting_moves) prev = moves[k].last;
    }
    std::sort(moves.begin(), moves.end(), [](const Move& a, const Move& b) { return a.first < b.first; });

    std::vector<std::uint8_t> literals(d.literals.size());
    for (const Move& m : moves)
        std::memcpy(literals.data() + m.to, d.literals.data() + m.first, m.last - m.first);
    std::vector<DeltaOp> ops;
    for (const DeltaOp& op : d.ops) {
        if (op.copy) {
            ops.push_back(op);
            continue;
        }
        std::size_t k = std::size_t(std::upper_bound(moves.begin(), moves.end(), op.src,
                                                     [](std::uint64_t v, const Move& m) { return v < m.first; }) -
                                    moves.begin()) - 1;
        for (std::uint64_t pos = op.src, end = op.src + op.len; pos < end; ++k) {
            const Move& m = moves[k];
            const std::uint64_t take = std::min(end, m.last) - pos;
            const std::uint64_t to = m.to + (pos - m.first);
            if (!ops.empty() && !ops.back().copy && ops.back().src + ops.back().len == to && to != n_lasting)
                ops.back().len += take;  // (an op never spans the lasting and tail parts)
            else
                ops.push_back({to, take, false});
            pos += take;
        }
    }
    d.ops = std::move(ops);
    d.literals = std::move(literals);
    d.lasting_bytes = n_lasting;
}

std::vector<ByteRange> tail_ranges(std::span<const DeltaOp> ops, std::uint64_t lasting_bytes) {
    std::vector<ByteRange> out;
    std::uint64_t at = 0;
    for (const DeltaOp& op : ops) {
        if (!op.copy && op.src >= lasting_bytes) {
            if (!out.empty() && out.back().end == at)
                out.back().end += op.len;
            else
                out.push_back({at, at + op.len});
        }
        at += op.len;
    }
    return out;
}

std::vector<std::uint8_t> tail_of(std::span<const DeltaOp> ops, std::uint64_t lasting_bytes, std::uint64_t tail_bytes,
                                  std::span<const std::uint8_t> state) {
    std::vector<std::uint8_t> tail(tail_bytes);
    std::uint64_t at = 0;
    for (const DeltaOp& op : ops) {
        if (!op.copy && op.src >= lasting_bytes) {
            AQPIM_CHECK(fits(op.src - lasting_bytes, op.len, tail_bytes) && fits(at, op.len, state.size()),
                        "kv store: a tail op [{}, +{}) outside the tail or the state", op.src, op.len);
            std::memcpy(tail.data() + (op.src - lasting_bytes), state.data() + at, op.len);
        }
        at += op.len;
    }
    return tail;
}

namespace {

/// Composes a chain as lists of pieces: each state is the concatenation of `len` bytes of block
/// `block`'s literals at `src` (within one of its two parts), never its bytes.
class Composer {
public:
    struct Piece {
        std::uint32_t block;
        std::uint64_t src, len;
    };
    Composer(std::span<const DeltaView> chain, std::uint64_t max_bytes) : chain_(chain), max_bytes_(max_bytes) {}

    /// Add the next block. Malformed: throws aqpim::Error; inconsistent (it copies bytes of the
    /// previous block's tail): false, nothing added.
    bool add() {
        const std::uint32_t j = std::uint32_t(n_added_);
        const DeltaView& d = chain_[j];
        AQPIM_CHECK(d.parent_bytes == cur_bytes_, "kv store: block {} is written against a state of {} bytes, not the {} "
                    "bytes the blocks before it give", j, d.parent_bytes, cur_bytes_);
        AQPIM_CHECK(d.tail.empty() || d.tail.size() == d.tail_bytes, "kv store: block {}: a tail of {} bytes where it "
                    "states {}", j, d.tail.size(), d.tail_bytes);
        const std::uint64_t n_lasting = d.lasting.size();
        AQPIM_CHECK(fits(n_lasting, d.tail_bytes, ~std::uint64_t(0)), "kv store: block {}: tail of {} bytes", j, d.tail_bytes);
        const std::uint64_t n_literal = n_lasting + d.tail_bytes;
        std::uint64_t out = 0;
        next_.clear();
        for (std::size_t k = 0; k < d.ops.size(); ++k) {
            const DeltaOp& op = d.ops[k];
            AQPIM_CHECK(op.len > 0 && fits(out, op.len, max_bytes_),
                        "kv store: block {} op {}: length {} (the state may hold {} bytes)", j, k, op.len, max_bytes_);
            out += op.len;
            if (!op.copy) {
                AQPIM_CHECK(fits(op.src, op.len, n_literal), "kv store: block {} op {}: literal bytes [{}, +{}) outside "
                            "the block's {} literal bytes", j, k, op.src, op.len, n_literal);
                if (op.src < n_lasting && op.src + op.len > n_lasting) {
                    push(j, op.src, n_lasting - op.src);
                    push(j, n_lasting, op.src + op.len - n_lasting);
                } else {
                    push(j, op.src, op.len);
                }
                continue;
            }
            AQPIM_CHECK(fits(op.src, op.len, cur_bytes_), "kv store: block {} op {}: copies [{}, +{}) of a parent state "
                        "of {} bytes", j, k, op.src, op.len, cur_bytes_);
            std::size_t p = std::size_t(std::upper_bound(starts_.begin(), starts_.end(), op.src) - starts_.begin()) - 1;
            for (std::uint64_t pos = op.src, end = op.src + op.len; pos < end; ++p) {
                const Piece& pc = cur_[p];
                if (pc.block + 1 == j && pc.src >= chain_[pc.block].lasting.size()) return false;  // the parent's tail
                const std::uint64_t off = pos - starts_[p], take = std::min(end - pos, pc.len - off);
                push(pc.block, pc.src + off, take);
                pos += take;
            }
        }
        cur_.swap(next_);
        cur_bytes_ = out;
        starts_.clear();
        std::uint64_t at = 0;
        for (const Piece& pc : cur_) starts_.push_back(at), at += pc.len;
        ++n_added_;
        return true;
    }

    /// The bytes of the last state added (which may read the last block's tail).
    std::vector<std::uint8_t> bytes() const {
        std::vector<std::uint8_t> state(cur_bytes_);
        std::uint64_t at = 0;
        for (const Piece& pc : cur_) {
            const DeltaView& d = chain_[pc.block];
            const std::uint64_t n_lasting = d.lasting.size();
            if (pc.src < n_lasting) {
                std::memcpy(state.data() + at, d.lasting.data() + pc.src, pc.len);
            } else {
                AQPIM_CHECK(d.tail.size() == d.tail_bytes && d.tail_bytes > 0,
                            "kv store: block {}: the state reads its tail, which was not given", pc.block);
                std::memcpy(state.data() + at, d.tail.data() + (pc.src - n_lasting), pc.len);
            }
            at += pc.len;
        }
        return state;
    }

private:
    /// Pieces a state may consist of, and pieces made over a whole chain (a legitimate chain has a
    /// few per layer, head and block).
    static constexpr std::size_t kMaxPieces = std::size_t(1) << 22, kMaxWork = std::size_t(1) << 25;

    void push(std::uint32_t block, std::uint64_t src, std::uint64_t len) {
        const std::uint64_t lasting = chain_[block].lasting.size();  // a piece never spans lasting and tail
        if (!next_.empty() && next_.back().block == block && next_.back().src + next_.back().len == src && src != lasting) {
            next_.back().len += len;
            return;
        }
        AQPIM_CHECK(next_.size() < kMaxPieces && ++work_ <= kMaxWork,
                    "kv store: block {}: the chain is too fragmented to compose (over {} pieces in a state or {} in all)",
                    n_added_, kMaxPieces, kMaxWork);
        next_.push_back({block, src, len});
    }

    std::span<const DeltaView> chain_;
    std::uint64_t max_bytes_;
    std::vector<Piece> cur_, next_;
    std::vector<std::uint64_t> starts_;  // of cur_'s pieces in its state
    std::uint64_t cur_bytes_ = 0;
    std::size_t n_added_ = 0, work_ = 0;
};

}  // namespace

ChainCheck check_chain(std::span<const DeltaView> chain, std::uint64_t max_bytes) {
    ChainCheck c;
    Composer composer(chain, max_bytes);
    for (c.bad_block = 0; c.bad_block < chain.size(); ++c.bad_block) {
        try {
            if (!composer.add()) break;
        } catch (const Error& e) {
            c.why = e.what();
            break;
        }
        c.consistent = c.bad_block + 1;
    }
    return c;
}

std::vector<std::uint8_t> compose_chain(std::span<const DeltaView> chain, std::uint64_t max_bytes) {
    AQPIM_CHECK(!chain.empty(), "kv store: an empty chain of blocks");
    Composer composer(chain, max_bytes);
    for (std::size_t j = 0; j < chain.size(); ++j)
        AQPIM_CHECK(composer.add(), "kv store: block {} copies bytes of the tail of the block before it (written against "
                    "another split of it)", j);
    return composer.bytes();
}

}  // namespace aqpim::store
