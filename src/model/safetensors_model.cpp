// Hugging Face safetensors checkpoints (config.json + model.safetensors, or shards listed by
// model.safetensors.index.json) -> ModelWeights. Matrices point into the mapped shards (F32, F16,
// BF16 as stored); norms and biases are converted to f32. Q and K keep HF's layout: the forward
// pass applies NeoX-pair RoPE to them (config.rope_pairs = neox); only `convert` permutes them.

#include <fmt/ranges.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <memory>
#include <nlohmann/json.hpp>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/model.h"
#include "aqpim/safetensors.h"
#include "model/hf_config.h"

namespace aqpim {

namespace {

namespace fs = std::filesystem;

/// Where each tensor of a checkpoint lives; every shard is opened once and kept alive by the model.
class TensorIndex {
public:
    explicit TensorIndex(const fs::path& dir);

    bool has(const std::string& name) const { return by_tensor_.count(name) != 0; }
    const std::string& where() const { return where_; }
    const std::map<std::string, const SafetensorsFile*>& tensors() const { return by_tensor_; }
    /// The file holding `name`; an error naming the tensor and the checkpoint if there is none.
    const SafetensorsFile& file_of(const std::string& name) const;
    void keep_alive(std::vector<std::shared_ptr<const void>>& storage) const {
        for (const auto& [_, f] : files_) storage.push_back(f);
    }

private:
    std::string where_;  // "DIR/model.safetensors" or "DIR/model.safetensors.index.json"
    std::map<std::string, std::shared_ptr<const SafetensorsFile>> files_;  // by shard file name
    std::map<std::string, const SafetensorsFile*> by_tensor_;
};

TensorIndex::TensorIndex(const fs::path& dir) {
    const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
    if (fs::exists(index)) {
        where_ = index.string();
        nlohmann::json j = parse_json(read_whole_file(where_, "safetensors index"), where_);
        AQPIM_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(),
                    "{}: expected an object with a 'weight_map' object", where_);
        for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
            AQPIM_CHECK(it.value().is_string(), "{}: weight_map['{}'] is {}, expected a file name", where_, it.key(),
                        json_excerpt(it.value()));
            const std::string shard = it.value().get<std::string>();
            // a plain file name beside the index, never a path elsewhere
            AQPIM_CHECK(!shard.empty() && shard != "." && shard != ".." && shard.find('/') == std::string::npos &&
                            shard.find('\\') == std::string::npos,
                        "{}: weight_map['{}'] = '{}' is not a file name in the model directory", where_, it.key(),
                        shard);
            auto f = files_.find(shard);
            if (f == files_.end()) {
                const fs::path p = dir / shard;
                AQPIM_CHECK(fs::is_regular_file(p), "{}: shard '{}' (holding '{}') does not exist", where_, shard,
                            it.key());
                f = files_.emplace(shard, std::make_shared<const SafetensorsFile>(p.string())).first;
            }
            AQPIM_CHECK(f->second->has(it.key()), "{}: tensor '{}' is mapped to shard '{}', which does not contain it",
                        where_, it.key(), shard);
            by_tensor_[it.key()] = f->second.get();
        }
    } else {
        AQPIM_CHECK(fs::exists(single), "{}: no model.safetensors or model.safetensors.index.json", dir.string());
        where_ = single.string();
        auto f = files_.emplace("model.safetensors", std::make_shared<const SafetensorsFile>(where_)).first;
        for (const auto& [name, _] : f->second->tensors()) by_tensor_[name] = f->second.get();
    }
}

const SafetensorsFile& TensorIndex::file_of(const std::string& name) const {
    auto it = by_tensor_.find(name);
    AQPIM_CHECK(it != by_tensor_.end(), "{}: no tensor named '{}'", where_, name);
    return *it->second;
}

GgmlType ggml_type_of(const SafetensorsFile& f, const std::string& name, const SafetensorInfo& info) {
    switch (info.dtype) {
        case TensorDType::f32: return GgmlType::F32;
        case TensorDType::f16: return GgmlType::F16;
        case TensorDType::bf16: return GgmlType::BF16;
        default: break;
    }
    AQPIM_FAIL("{}: tensor '{}' has dtype {} (supported: F32, F16, BF16)", f.path(), name, info.dtype_name);
}

/// Builds ModelWeights from the index: matrices zero-copy, vectors as f32.
struct Reader {
    const TensorIndex& index;
    ModelWeights& w;
    std::set<std::string> used = {};

    /// [rows][cols] matrix, pointing into the mapping (copied only if the file misaligns it).
    WeightMatrix matrix(const std::string& name, std::int64_t rows, std::int64_t cols) {
        const SafetensorsFile& f = index.file_of(name);
        const SafetensorInfo& info = f.info(name);
        used.insert(name);
        AQPIM_CHECK(info.shape == (std::vector<std::int64_t>{rows, cols}),
                    "{}: tensor '{}' has shape [{}], expected [{}, {}]", f.path(), name, fmt::join(info.shape, ", "),
                    rows, cols);
        WeightMatrix m;
        m.type = ggml_type_of(f, name, info);
        m.rows = rows;
        m.cols = cols;
        m.data = f.tensor_data(info);
        const std::size_t elem = m.type == GgmlType::F32 ? 4 : 2;
        if (reinterpret_cast<std::uintptr_t>(m.data) % elem != 0) {
            // safetensors does not promise aligned data; the kernels may assume element alignment
            auto copy = std::make_shared<std::vector<std::uint64_t>>((info.n_bytes + 7) / 8);
            std::memcpy(copy->data(), m.data, info.n_bytes);
            m.data = reinterpret_cast<const std::uint8_t*>(copy->data());
            w.storage.push_back(copy);
        }
        return m;
    }

    std::vector<float> vec(const std::string& name, std::int64_t n) {
        used.insert(name);
        return index.file_of(name).read_f32(name, {n});
    }

    /// Every tensor of the checkpoint must have been read, so a config that leaves layers out (or
    /// a checkpoint of another architecture) is refused instead of run wrong. Exempt: the RoPE
    /// inverse frequencies older checkpoints store (recomputed) and lm_head beside a tied embedding.
    void check_all_used(bool tied) const {
        for (const auto& [name, file] : index.tensors()) {
            if (used.count(name) || name.ends_with(".rotary_emb.inv_freq") || (tied && name == "lm_head.weight"))
                continue;
            AQPIM_FAIL("{}: tensor '{}' is not part of the model config.json describes ({} layers of {} as aqpim "
                       "runs it)", index.where(), name, w.config.n_layer, model_arch_name(w.config.arch));
        }
    }
};

/// The vocabulary beside the weights: tokenizer.json, else tokenizer.model, else none. A
/// vocabulary shorter than the embedding is padded with unused "[PADi]" tokens (as llama.cpp's
/// converter does) so that every id the model can produce has a token.
std::shared_ptr<const Tokenizer> load_tokenizer(const fs::path& dir, int n_vocab) {
    VocabData v;
    fs::path p;
    if (fs::exists(p = dir / "tokenizer.json")) {
        v = vocab_from_hf_tokenizer_json(p.string());
    } else if (fs::exists(p = dir / "tokenizer.model")) {
        v = vocab_from_sentencepiece_model(p.string());
    } else {
        return nullptr;
    }
    pad_vocabulary(v, n_vocab, p.string());
    return Tokenizer::create(std::move(v));
}

}  // namespace

LoadedModel load_safetensors_model(const std::string& dir_path) {
    const fs::path dir(dir_path);
    AQPIM_CHECK(fs::is_directory(dir), "safetensors model {}: not a directory", dir_path);
    LoadedModel out;
    ModelWeights& w = out.weights;
    ModelConfig& c = w.config;
    c = read_hf_config((dir / "config.json").string());
    c.name = (dir.filename().empty() ? dir.parent_path() : dir).filename().string();
    c.validate();
    w.format = "safetensors";

    TensorIndex index(dir);
    index.keep_alive(w.storage);
    Reader r{index, w};
    const std::int64_t E = c.n_embd, F = c.n_ff, V = c.n_vocab;
    const std::int64_t Q = std::int64_t(c.n_head) * c.head_dim, KV = std::int64_t(c.n_kv_head) * c.head_dim;

    // A tied checkpoint may store its one matrix only as lm_head.weight (TinyStories-656K does).
    const bool embd_as_head = !index.has("model.embed_tokens.weight") && index.has("lm_head.weight");
    w.token_embd = r.matrix(embd_as_head ? "lm_head.weight" : "model.embed_tokens.weight", V, E);
    w.layers.resize(std::size_t(c.n_layer));
    for (int il = 0; il < c.n_layer; ++il) {
        const std::string p = fmt::format("model.layers.{}.", il);
        LayerWeights& l = w.layers[std::size_t(il)];
        l.attn_norm = r.vec(p + "input_layernorm.weight", E);
        l.wq = r.matrix(p + "self_attn.q_proj.weight", Q, E);
        l.wk = r.matrix(p + "self_attn.k_proj.weight", KV, E);
        l.wv = r.matrix(p + "self_attn.v_proj.weight", KV, E);
        l.wo = r.matrix(p + "self_attn.o_proj.weight", E, Q);
        if (c.qkv_bias) {
            l.bq = r.vec(p + "self_attn.q_proj.bias", Q);
            l.bk = r.vec(p + "self_attn.k_proj.bias", KV);
            l.bv = r.vec(p + "self_attn.v_proj.bias", KV);
        }
        l.ffn_norm = r.vec(p + "post_attention_layernorm.weight", E);
        l.w_gate = r.matrix(p + "mlp.gate_proj.weight", F, E);
        l.w_up = r.matrix(p + "mlp.up_proj.weight", F, E);
        l.w_down = r.matrix(p + "mlp.down_proj.weight", E, F);
    }
    w.output_norm = r.vec("model.norm.weight", E);
    // transformers ties lm_head to the embedding when tie_word_embeddings; without an lm_head
    // tensor there is nothing else to use (llama.cpp does the same)
    c.tied_output = c.tied_output || embd_as_head || !index.has("lm_head.weight");
    w.output = c.tied_output ? w.token_embd : r.matrix("lm_head.weight", V, E);
    r.check_all_used(c.tied_output);

    out.tokenizer = load_tokenizer(dir, c.n_vocab);
    return out;
}

}  // namespace aqpim
