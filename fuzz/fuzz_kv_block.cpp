// Block entries of the KV prefix store (docs/kv-store.md), as a server reads them from a tier it
// shares with others: decode_block of each main entry, then the chain they make (ordered by their
// index) with the last part as the last block's tail. Input: main entries, then
// the tail, joined by the part separator. Each main entry's trailing checksum is recomputed first,
// so mutations reach the parser and the composition behind it (the checksum itself is tested in
// BlockEntry.*), then check_chain, then compose_chain of the consistent part. Seeds: chains of real KV states (f16 and pq caches fed random rows) that this
// target writes when AQPIM_FUZZ_WRITE_SEEDS=DIR is set (scripts/fuzz.sh).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "aqpim/hash.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/kv_state.h"
#include "fuzz_input.h"
#include "store/block_entry.h"

namespace {

using namespace aqpim;

void write_seeds(const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir);
    KvShape shape;
    shape.n_layer = 2;
    shape.n_kv_head = 1;
    shape.head_dim = 32;
    int i_seed = 0;
    for (const char* scheme : {"f16", "q8_0", "pq:m=4,calib=12,window=4,sinks=2"}) {
        auto cache = make_kv_cache(parse_kv_scheme(scheme), shape, KvCacheOptions{});
        cache->add_sequence(0);
        std::mt19937 rng(7);
        std::normal_distribution<float> normal;
        std::vector<std::uint8_t> prev;
        std::vector<store::StateDelta> deltas;
        std::vector<std::vector<std::uint8_t>> states;
        for (int block = 0; block < 5; ++block) {
            std::vector<float> k(8 * 32), v(8 * 32);
            for (auto* x : {&k, &v})
                for (float& f : *x) f = normal(rng);
            for (int il = 0; il < shape.n_layer; ++il) cache->append(il, 0, 8, k.data(), v.data());
            SlotState slot;
            slot.n_cached = 8 * (block + 1);
            states.push_back(save_kv_state(*cache, 0, slot, ModelIdentity{1, "fuzz"}));
            deltas.push_back(store::diff_states(prev, states.back()));
            if (block > 0) store::split_lasting(deltas[std::size_t(block) - 1], deltas.back());
            prev = states.back();
        }
        std::vector<std::string> mains;
        std::string tail;
        store::BlockKey parent{};
        for (std::size_t j = 0; j < deltas.size(); ++j) {
            store::BlockHeader h;
            h.model_fingerprint = 1;
            h.key = {j + 1, j + 2};
            h.parent = parent;
            h.index = std::uint32_t(j);
            h.block_tokens = 8;
            h.state_checksum = xxh64(states[j].data(), states[j].size());
            const store::EncodedBlock e = store::encode_block(h, deltas[j]);
            mains.emplace_back(e.main.begin(), e.main.end());
            tail.assign(e.tail.begin(), e.tail.end());
            parent = h.key;
            std::string input;
            for (const std::string& m : mains) input += m, input += fuzz::kPartSeparator;
            input += tail;
            std::ofstream(dir / ("chain" + std::to_string(i_seed++)), std::ios::binary) << input;
        }
    }
}

}  // namespace

AQPIM_FUZZ_WRITES_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aqpim;
    const std::vector<std::string_view> parts = fuzz::split_parts(data, size);
    std::vector<std::vector<std::uint8_t>> mains;
    for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
        std::vector<std::uint8_t> m(parts[i].begin(), parts[i].end());
        if (m.size() >= 8) {
            const std::uint64_t sum = xxh64(m.data(), m.size() - 8);
            for (int b = 0; b < 8; ++b) m[m.size() - 8 + std::size_t(b)] = std::uint8_t(sum >> (8 * b));
        }
        mains.push_back(std::move(m));
    }
    const std::string_view tail = parts.back();
    fuzz::expect_success_or_error([&] {
        std::vector<store::DecodedBlock> blocks;
        for (const auto& m : mains) blocks.push_back(store::decode_block(m));
        if (blocks.empty()) return;
        std::stable_sort(blocks.begin(), blocks.end(),
                         [](const auto& a, const auto& b) { return a.header.index < b.header.index; });
        std::vector<store::DeltaView> views;
        for (std::size_t j = 0; j < blocks.size(); ++j) {
            const store::DecodedBlock& b = blocks[j];
            store::DeltaView v{b.ops, b.lasting, {}, b.header.tail_bytes, b.header.parent_bytes};
            if (j + 1 == blocks.size() && tail.size() == b.header.tail_bytes)
                v.tail = {reinterpret_cast<const std::uint8_t*>(tail.data()), tail.size()};
            views.push_back(v);
        }
        const store::ChainCheck check = store::check_chain(views, std::uint64_t(64) << 20);
        if (check.consistent == 0) return;
        views.resize(check.consistent);
        (void)store::compose_chain(views, std::uint64_t(64) << 20);
    });
    return 0;
}
