#include "aqpim/kv_capture.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "aqpim/error.h"
#include "aqpim/eval.h"
#include "aqpim/file_io.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/model.h"
#include "aqpim/transformer.h"

namespace aqpim {

namespace {

nlohmann::json read_json(const std::string& path) {
    return parse_json(read_whole_file(path, "JSON file"), path);
}

}  // namespace

std::vector<float> CapturedAttention::kv_head(const std::vector<float>& kv, int ih) const {
    AQPIM_CHECK(ih >= 0 && ih < n_kv_head, "KV head {} out of range [0, {})", ih, n_kv_head);
    std::vector<float> out(std::size_t(n_tokens) * head_dim);
    for (int t = 0; t < n_tokens; ++t)
        for (int d = 0; d < head_dim; ++d)
            out[std::size_t(t) * head_dim + d] = kv[(std::size_t(t) * n_kv_head + ih) * head_dim + d];
    return out;
}

CapturedAttention capture_layer0(const std::string& model_path, std::span<const std::int32_t> tokens) {
    LoadOptions weights_only;
    weights_only.vocabulary = false;  // the capture takes token ids
    const LoadedModel model = load_model(model_path, weights_only);
    const ModelConfig& cfg = model.weights.config;
    for (std::int32_t id : tokens)
        AQPIM_CHECK(id >= 0 && id < cfg.n_vocab, "token id {} out of range [0, {})", id, cfg.n_vocab);
    const std::int64_t n = std::int64_t(tokens.size());
    AQPIM_CHECK(n >= 1, "capture of {}: no tokens", model_path);

    // The runtime's own prefill into an exact f32 cache, with one recorder per KV head of layer 0
    // wrapped around it: the keys and values it appends and the queries it attends with.
    Transformer transformer(model.weights);
    const KvShape shape = transformer.kv_shape();
    std::unique_ptr<KvCache> cache = make_kv_cache(parse_kv_scheme("f32"), shape, KvCacheOptions{0, n});
    std::vector<const RecordingKvCache*> heads(std::size_t(cfg.n_kv_head));
    for (int ih = cfg.n_kv_head - 1; ih >= 0; --ih) {
        auto rec = std::make_unique<RecordingKvCache>(std::move(cache), 0, ih);
        heads[std::size_t(ih)] = rec.get();
        cache = std::move(rec);
    }
    cache->add_sequence(0);
    const BatchSequence seq{0, tokens, false};
    std::vector<float> logits;
    transformer.forward(std::span(&seq, 1), *cache, logits);

    CapturedAttention c;
    c.n_tokens = int(n);
    c.n_head = cfg.n_head;
    c.n_kv_head = cfg.n_kv_head;
    c.head_dim = cfg.head_dim;
    c.rope_pairs = shape.rope_pairs;
    const int hd = c.head_dim, group = c.n_head / c.n_kv_head;
    c.q.assign(std::size_t(n) * c.n_head * hd, 0.0f);
    c.k.resize(std::size_t(n) * c.n_kv_head * hd);
    c.v.resize(c.k.size());
    for (int ih = 0; ih < c.n_kv_head; ++ih) {
        const RecordingKvCache& rec = *heads[std::size_t(ih)];
        for (std::int64_t t = 0; t < n; ++t) {
            const std::size_t to = (std::size_t(t) * c.n_kv_head + ih) * hd, from = std::size_t(t) * hd;
            std::copy_n(rec.keys(0).data() + from, hd, c.k.data() + to);
            std::copy_n(rec.values(0).data() + from, hd, c.v.data() + to);
        }
        AQPIM_ASSERT(std::int64_t(rec.rows().size()) == n);
        for (const RecordingKvCache::Row& row : rec.rows())
            std::copy(row.q.begin(), row.q.end(), c.q.data() + (std::size_t(row.pos) * c.n_head + ih * group) * hd);
    }
    return c;
}

std::vector<std::int32_t> read_token_ids(const std::string& path) {
    const auto j = read_json(path);
    AQPIM_CHECK(j.is_array(), "{}: expected a JSON array of token ids", path);
    std::vector<std::int32_t> ids;
    ids.reserve(j.size());
    for (const auto& v : j) {
        AQPIM_CHECK(v.is_number_integer() && v.get<std::int64_t>() >= 0 && v.get<std::int64_t>() < (1ll << 31),
                    "{}: bad token id {}", path, json_excerpt(v));
        ids.push_back(std::int32_t(v.get<std::int64_t>()));
    }
    return ids;
}

}  // namespace aqpim
