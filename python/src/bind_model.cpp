// aqpim.Model: a model file through the runtime's own forward pass (include/aqpim/model.h,
// transformer.h, generate.h, perplexity.h) with any `--kv` scheme.

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <ctime>
#include <mutex>
#include <optional>

#include "aqpim/error.h"
#include "aqpim/generate.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/perplexity.h"
#include "aqpim/transformer.h"
#include "bindings.h"
#include "choices.h"
#include "kv_cache_handle.h"

namespace aqpim::python {
namespace {

using namespace pybind11::literals;

/// A loaded model and its forward pass. The Transformer keeps scratch state, so calls take the
/// lock (the GIL is released while they run).
struct PyModel {
    std::unique_ptr<LoadedModel> loaded;  ///< owns the weights the Transformer points into
    std::unique_ptr<Transformer> transformer;
    std::mutex mu;
    double last_forward_cpu_seconds = 0;  ///< CPU time of this thread in the last logits() call's forward pass

    const ModelConfig& config() const { return loaded->weights.config; }
    const Tokenizer& tokenizer(const char* what) const {
        if (!loaded->tokenizer)
            throw py::value_error(fmt::format("{}: the model has no vocabulary (load it with tokenizer=PATH)", what));
        return *loaded->tokenizer;
    }
};

/// A vocabulary (the model's, or a file's) as Python sees it.
struct PyTokenizer {
    std::shared_ptr<const Tokenizer> tok;
};

py::str utf8(const std::string& bytes) { return py::bytes(bytes).attr("decode")("utf-8", "replace"); }

std::shared_ptr<PyModel> load(const std::string& path, const std::string& tokenizer, int n_threads) {
    if (n_threads < 0) throw py::value_error(fmt::format("Model: n_threads={}: expected >= 0 (0 = default)", n_threads));
    auto m = std::make_shared<PyModel>();
    py::gil_scoped_release release;
    LoadOptions o;
    o.tokenizer_path = tokenizer;
    m->loaded = std::make_unique<LoadedModel>(load_model(path, o));
    m->transformer = std::make_unique<Transformer>(m->loaded->weights, n_threads);
    return m;
}

py::dict config_dict(const PyModel& m) {
    const ModelConfig& c = m.config();
    return py::dict("name"_a = c.name, "arch"_a = model_arch_name(c.arch), "format"_a = m.loaded->weights.format,
                    "n_embd"_a = c.n_embd, "n_ff"_a = c.n_ff, "n_layer"_a = c.n_layer, "n_head"_a = c.n_head,
                    "n_kv_head"_a = c.n_kv_head, "head_dim"_a = c.head_dim, "n_vocab"_a = c.n_vocab,
                    "n_ctx_train"_a = c.n_ctx_train, "rms_eps"_a = c.rms_eps, "rope_theta"_a = c.rope_theta,
                    "rope_pairs"_a = choice_name(c.rope_pairs, kPairs), "qkv_bias"_a = c.qkv_bias,
                    "tied_output"_a = c.tied_output, "n_params"_a = c.n_params(),
                    "weight_bytes"_a = m.loaded->weights.weight_bytes());
}

std::vector<std::int32_t> token_ids(const py::handle& obj, const PyModel& m, const char* what) {
    std::vector<std::int32_t> ids;
    if (py::isinstance<py::str>(obj)) {
        const Tokenizer& tok = m.tokenizer(what);
        const std::string text = obj.cast<std::string>();
        py::gil_scoped_release release;  // a book takes a while
        return tok.encode(text, true);
    }
    try {
        ids = obj.cast<std::vector<std::int32_t>>();
    } catch (const py::cast_error&) {
        throw py::type_error(fmt::format("{}: expected text (str) or a sequence of token ids (int)", what));
    }
    for (std::size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0 || ids[i] >= m.config().n_vocab)
            throw py::value_error(fmt::format("{}: token {} is id {}: expected 0 <= id < n_vocab = {}", what, i, ids[i],
                                              m.config().n_vocab));
    return ids;
}

/// The cache a call uses: `cache` when given (it must fit the model), else a new one of `kv`
/// holding sequence 0, with `context` as the context bits= targets are stated at.
std::shared_ptr<PyKvCache> cache_for(const PyModel& m, const py::object& cache, const std::string& kv, std::int64_t context) {
    const KvShape shape = m.transformer->kv_shape();
    if (cache.is_none()) return make_py_kv_cache(kv, shape, context, 0, 1);
    auto c = cache.cast<std::shared_ptr<PyKvCache>>();
    const KvShape& s = c->cache->shape();
    if (s.n_layer != shape.n_layer || s.n_kv_head != shape.n_kv_head || s.head_dim != shape.head_dim)
        throw py::value_error(fmt::format("cache of {} layers x {} KV heads x {} dims for a model of {} x {} x {} "
                                          "(make it with Model.new_cache)", s.n_layer, s.n_kv_head, s.head_dim,
                                          shape.n_layer, shape.n_kv_head, shape.head_dim));
    return c;
}

/// CPU seconds of the calling thread (what the boundary benchmark subtracts: the forward pass).
double thread_cpu_seconds() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

/// A float32 array that owns `v` (moved, not copied).
FloatArray owning_array(std::vector<float>&& v, std::vector<py::ssize_t> shape) {
    auto* owned = new std::vector<float>(std::move(v));
    py::capsule free_when_done(owned, [](void* p) { delete static_cast<std::vector<float>*>(p); });
    return FloatArray(std::move(shape), owned->data(), free_when_done);
}

FloatArray logits(PyModel& m, const py::handle& tokens_obj, const std::string& kv, const py::object& cache_obj, int seq_id,
                  bool last_only) {
    const std::vector<std::int32_t> tokens = token_ids(tokens_obj, m, "logits: tokens");
    if (tokens.empty()) throw py::value_error("logits: no tokens");
    const std::shared_ptr<PyKvCache> c = cache_for(m, cache_obj, kv, std::int64_t(tokens.size()));
    std::vector<float> out;
    {
        py::gil_scoped_release release;
        std::scoped_lock lock(m.mu, c->mu);
        AQPIM_CHECK(c->cache->has_sequence(seq_id), "logits: no sequence {} in the cache", seq_id);
        const BatchSequence seq{seq_id, tokens, !last_only};
        const double t0 = thread_cpu_seconds();
        m.transformer->forward({&seq, 1}, *c->cache, out);
        m.last_forward_cpu_seconds = thread_cpu_seconds() - t0;
    }
    const py::ssize_t n_vocab = m.config().n_vocab;
    if (last_only) return owning_array(std::move(out), {n_vocab});
    return owning_array(std::move(out), {py::ssize_t(tokens.size()), n_vocab});
}

GenerateResult generate(PyModel& m, const py::handle& prompt_obj, int n_predict, const std::string& kv,
                        const py::object& cache_obj, float temperature, float top_p, std::uint64_t seed, bool stop_at_eos,
                        const py::object& on_piece) {
    const Tokenizer& tok = m.tokenizer("generate");
    const std::vector<std::int32_t> prompt = token_ids(prompt_obj, m, "generate: prompt");
    const std::shared_ptr<PyKvCache> c = cache_for(m, cache_obj, kv, std::int64_t(prompt.size()) + n_predict);
    GenerateOptions o;
    o.n_predict = n_predict;
    o.sampler = SamplerParams{temperature, top_p, seed};
    o.stop_at_eos = stop_at_eos;
    if (!on_piece.is_none()) {
        o.on_piece = [&on_piece](const std::string& piece) {
            py::gil_scoped_acquire acquire;
            on_piece(utf8(piece));
        };
    }
    py::gil_scoped_release release;
    std::scoped_lock lock(m.mu, c->mu);
    return aqpim::generate(*m.transformer, tok, *c->cache, prompt, o);
}

PerplexityResult perplexity(PyModel& m, const py::handle& text_obj, int n_ctx, const std::string& kv, int max_chunks,
                            std::optional<std::int32_t> bos) {
    // Text is tokenized with BOS (as `aqpim ppl`); ids are taken as given, BOS first.
    const std::vector<std::int32_t> tokens = token_ids(text_obj, m, "perplexity: text");
    if (!bos) {
        if (!m.loaded->tokenizer || m.loaded->tokenizer->bos() < 0)
            throw py::value_error("perplexity: the model has no vocabulary with a BOS token; pass bos=ID");
        bos = m.loaded->tokenizer->bos();
    }
    const KvSchemeSpec spec = parse_kv_scheme(kv);
    PerplexityOptions o;
    o.n_ctx = n_ctx;
    o.max_chunks = max_chunks;
    KvCacheOptions co;
    co.context = n_ctx;  // as `aqpim ppl -c n_ctx` states bits= targets
    py::gil_scoped_release release;
    std::lock_guard lock(m.mu);
    return aqpim::perplexity(*m.transformer, tokens, *bos, [&](const KvShape& shape) { return make_kv_cache(spec, shape, co); },
                             o);
}

void bind_tokenizer(py::module_& m) {
    py::class_<PyTokenizer>(m, "Tokenizer", "A model's vocabulary: SentencePiece-style or byte-level BPE (aqpim/tokenizer.h).")
        .def_static("load", [](const std::string& path, int n_vocab) { return PyTokenizer{load_tokenizer_file(path, n_vocab)}; },
                    "path"_a, "n_vocab"_a = 0,
                    "A vocabulary file: .gguf, tokenizer.json, tokenizer.model, or a llama2.c tokenizer.bin (needs n_vocab).")
        .def("encode", [](const PyTokenizer& t, const std::string& text, bool add_bos) { return t.tok->encode(text, add_bos); },
             "text"_a, "add_bos"_a = true, "Token ids of text (llama.cpp's rules: BOS first when add_bos and the vocabulary adds one).")
        .def("decode", [](const PyTokenizer& t, const std::vector<std::int32_t>& ids) { return utf8(t.tok->decode(ids)); },
             "ids"_a, "Text of token ids (invalid UTF-8 replaced).")
        .def("piece", [](const PyTokenizer& t, std::int32_t prev, std::int32_t id) { return utf8(t.tok->piece(prev, id)); },
             "prev"_a, "id"_a, "Text of token id as printed after token prev (-1: at the start).")
        .def_property_readonly("n_vocab", [](const PyTokenizer& t) { return t.tok->n_vocab(); })
        .def_property_readonly("bos", [](const PyTokenizer& t) { return t.tok->bos(); })
        .def_property_readonly("eos", [](const PyTokenizer& t) { return t.tok->eos(); });
}

void bind_results(py::module_& m) {
    py::class_<GenerateResult>(m, "GenerateResult", "What Model.generate() produced, and how fast.")
        .def_readonly("text", &GenerateResult::text)
        .def_readonly("tokens", &GenerateResult::generated)
        .def_readonly("n_prompt", &GenerateResult::n_prompt)
        .def_readonly("n_decode_steps", &GenerateResult::n_decode_steps)
        .def_readonly("prefill_seconds", &GenerateResult::prefill_seconds)
        .def_readonly("decode_seconds", &GenerateResult::decode_seconds)
        .def_readonly("decode_bytes", &GenerateResult::decode_bytes, "weights + KV bytes the decode steps read")
        .def_property_readonly("decode_tokens_per_s", [](const GenerateResult& r) {
            return r.decode_seconds > 0 ? r.n_decode_steps / r.decode_seconds : 0.0;
        })
        .def("__repr__", [](const GenerateResult& r) {
            return fmt::format("GenerateResult({} tokens after a prompt of {}, {} decode steps in {:.3f} s)",
                               r.generated.size(), r.n_prompt, r.n_decode_steps, r.decode_seconds);
        });
    py::class_<PerplexityResult>(m, "PerplexityResult", "Perplexity with llama.cpp's protocol (aqpim/perplexity.h).")
        .def_readonly("ppl", &PerplexityResult::ppl)
        .def_readonly("ppl_error", &PerplexityResult::ppl_error)
        .def_readonly("mean_nll", &PerplexityResult::mean_nll)
        .def_readonly("n_scored", &PerplexityResult::n_scored)
        .def_readonly("n_chunks", &PerplexityResult::n_chunks)
        .def_readonly("n_ctx", &PerplexityResult::n_ctx)
        .def_readonly("n_text_tokens", &PerplexityResult::n_text_tokens)
        .def_readonly("chunk_ppl", &PerplexityResult::chunk_ppl)
        .def_readonly("seconds", &PerplexityResult::seconds)
        .def("__repr__", [](const PerplexityResult& r) {
            return fmt::format("PerplexityResult(ppl={:.4f} +/- {:.5f}, {} chunks of {}, {} tokens scored)", r.ppl,
                               r.ppl_error, r.n_chunks, r.n_ctx, r.n_scored);
        });
}

}  // namespace

void bind_model(py::module_& m) {
    bind_tokenizer(m);
    bind_results(m);
    py::class_<PyModel, std::shared_ptr<PyModel>>(m, "Model", R"doc(
A model file run by the runtime's forward pass: a .gguf file, a Hugging Face safetensors
directory (config.json beside) or a llama2.c .bin (its tokenizer beside it, or tokenizer=PATH).
n_threads: threads of the forward pass (0 = aqpim.default_threads()).)doc")
        .def(py::init(&load), "path"_a, py::kw_only(), "tokenizer"_a = "", "n_threads"_a = 0)
        .def_property_readonly("config", &config_dict, "The model's shapes and settings (a dict).")
        .def_property_readonly("n_vocab", [](const PyModel& m) { return m.config().n_vocab; })
        .def_property_readonly("tokenizer", [](const PyModel& m) {
                m.tokenizer("tokenizer");
                return PyTokenizer{m.loaded->tokenizer};
            }, "The model's vocabulary (aqpim.Tokenizer).")
        .def("new_cache", [](const PyModel& m, const std::string& kv, std::int64_t context, std::uint64_t memory_budget,
                             int n_threads) {
                return make_py_kv_cache(kv, m.transformer->kv_shape(), context, memory_budget, n_threads);
            }, "kv"_a = "f16", py::kw_only(), "context"_a = 0, "memory_budget"_a = 0, "n_threads"_a = 1,
            "A KvCache of scheme kv with the model's KV shape (layers, heads, RoPE pairs and frequencies), holding sequence 0.")
        .def("tokenize", [](const PyModel& m, const std::string& text, bool add_bos) {
                return m.tokenizer("tokenize").encode(text, add_bos);
            }, "text"_a, "add_bos"_a = true, "Token ids of text (BOS first when add_bos and the vocabulary adds one).")
        .def("detokenize", [](const PyModel& m, const std::vector<std::int32_t>& ids) {
                return utf8(m.tokenizer("detokenize").decode(ids));
            }, "ids"_a, "Text of token ids.")
        .def("logits", &logits, "tokens"_a, py::kw_only(), "kv"_a = "f16", "cache"_a = py::none(), "seq_id"_a = 0,
             "last_only"_a = false,
             R"doc(One forward pass over tokens (ids, or text: tokenized with BOS) appended to the cache's sequence
(cache=None: a new cache of scheme kv). Returns logits [n_tokens, n_vocab], or [n_vocab] of the last
token with last_only. With a cache from new_cache(), calls continue the sequence: decoding from Python.)doc")
        .def_property_readonly("_last_forward_cpu_seconds", [](const PyModel& m) { return m.last_forward_cpu_seconds; },
                               "CPU seconds of this thread in the last logits() call's forward pass (bench/bench_python.py).")
        .def("generate", &generate, "prompt"_a, py::kw_only(), "n_predict"_a = 128, "kv"_a = "f16", "cache"_a = py::none(),
             "temperature"_a = 0.8f, "top_p"_a = 0.95f, "seed"_a = 42, "stop_at_eos"_a = true, "on_piece"_a = py::none(),
             "Generate after prompt (text, tokenized with BOS, or ids) in sequence 0 of the cache; on_piece(str) gets "
             "each token's text as it is produced. temperature 0: greedy.")
        .def("perplexity", &perplexity, "text"_a, py::kw_only(), "n_ctx"_a = 512, "kv"_a = "f16", "max_chunks"_a = 0,
             "bos"_a = py::none(),
             "Perplexity with llama.cpp's protocol, exactly as `aqpim ppl -c n_ctx --kv kv` computes it, of text "
             "(tokenized with BOS) or of token ids (BOS first; bos: the id chunks start with, default the vocabulary's).")
        .def("__repr__", [](const PyModel& m) {
            const ModelConfig& c = m.config();
            return fmt::format("Model('{}', {}, {} layers, {} heads / {} KV heads of {}, vocab {})", c.name,
                               m.loaded->weights.format, c.n_layer, c.n_head, c.n_kv_head, c.head_dim, c.n_vocab);
        });
}

}  // namespace aqpim::python
