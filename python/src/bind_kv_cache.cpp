// aqpim.KvCache: any `--kv` scheme of the runtime (include/aqpim/kv_cache.h, kv_scheme.h) on numpy
// arrays, memory counted as `aqpim info` counts it.

#include <pybind11/stl.h>

#include <optional>

#include "aqpim/byte_io.h"
#include "aqpim/error.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/kv_state.h"
#include "aqpim/threads.h"
#include "aqpim/timer.h"
#include "aqpim/transformer.h"
#include "bindings.h"
#include "choices.h"
#include "kv_cache_handle.h"

namespace aqpim::python {
namespace {

using namespace pybind11::literals;

KvShape kv_shape(int n_layers, int n_kv_heads, int head_dim, const std::string& pairs, double rope_theta,
                 const py::object& inv_freq_obj) {
    KvShape s{n_layers, n_kv_heads, head_dim, parse_choice(pairs, "rope_pairs", kPairs), {}};
    if (n_layers < 1 || n_kv_heads < 1 || head_dim < 1)
        throw py::value_error(fmt::format("KvCache: n_layers={}, n_kv_heads={}, head_dim={}: expected >= 1 each", n_layers,
                                          n_kv_heads, head_dim));
    if (rope_theta != 0 && !inv_freq_obj.is_none())
        throw py::value_error("KvCache: give rope_theta or rope_inv_freq, not both");
    if (rope_theta != 0) {
        // The runtime's own frequencies for this theta (no scaling), as Transformer::kv_shape() has them.
        ModelWeights w;
        w.config.head_dim = head_dim;
        w.config.rope_theta = float(rope_theta);
        for (double f : rope_inverse_frequencies(w)) s.rope_inv_freq.push_back(float(f));
    } else if (!inv_freq_obj.is_none()) {
        const FloatArray f = float_array(inv_freq_obj, "KvCache: rope_inv_freq", 1, "[head_dim / 2]");
        require_dim(f, 0, head_dim / 2, "KvCache: rope_inv_freq", "head_dim / 2, one frequency per RoPE pair");
        s.rope_inv_freq.assign(f.data(), f.data() + f.shape(0));
    }
    return s;
}

py::dict memory_dict(const KvCache& cache) {
    const KvMemory mem = cache.memory();
    py::dict parts;
    for (const auto& [name, bytes] : mem.parts) parts[py::str(name)] = bytes;
    return py::dict("n_tokens"_a = mem.n_tokens, "bytes"_a = mem.bytes,
                    "bits_per_element"_a = mem.bits_per_element(cache.shape()), "parts"_a = parts);
}

/// q (or out) [n_rows, n_heads, head_dim] of a cache: n_heads a multiple of n_kv_heads.
void check_heads(const py::array& a, const KvShape& shape, const char* what) {
    if (a.shape(1) < 1 || a.shape(1) % shape.n_kv_head != 0)
        throw py::value_error(fmt::format("{}: shape {}: dim 1 must be the query heads, a multiple of n_kv_heads={}", what,
                                          shape_text(a), shape.n_kv_head));
    require_dim(a, 2, shape.head_dim, what, "head_dim");
}

/// Every KV head's attention of query rows q [n_rows][n_heads][head_dim] into out (same layout).
void attend_heads(PyKvCache& c, int layer, int seq_id, const float* q, int n_rows, int n_heads, const std::int64_t* pos,
                  float scale, float* out) {
    const KvShape& shape = c.cache->shape();
    const int group = n_heads / shape.n_kv_head, hd = shape.head_dim;
    const std::int64_t row_stride = std::int64_t(n_heads) * hd;
    c.workspaces.prepare(c.n_threads);
    parallel_for(
        shape.n_kv_head,
        [&](std::int64_t ih) {
            KvQuery query;
            query.q = q + ih * group * hd;
            query.q_stride = row_stride;
            query.n_rows = n_rows;
            query.group = group;
            query.pos = pos;
            query.scale = scale;
            query.out = out + ih * group * hd;
            query.out_stride = row_stride;
            query.ws = &c.workspaces.mine();
            c.cache->attend(layer, seq_id, int(ih), query);
        },
        c.n_threads);
}

/// The query rows' positions [n_rows] given as an array (None: the sequence's last n_rows tokens).
using PosArray = py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>;
PosArray position_array(const py::object& pos_obj, int n_rows) {
    if (pos_obj.is_none()) return PosArray();
    const PosArray p = PosArray::ensure(pos_obj);
    if (!p || p.ndim() != 1 || p.shape(0) != n_rows)
        throw py::value_error(fmt::format("attend: pos must be {} integer positions [n_rows]", n_rows));
    return p;
}

/// Positions of the query rows: `given` [n_rows] (checked against the tokens held) or, when null,
/// the sequence's last n_rows tokens. Call with the cache locked.
std::vector<std::int64_t> row_positions(const KvCache& cache, int layer, int seq_id, int n_rows, const std::int64_t* given) {
    if (!cache.has_sequence(seq_id)) throw py::value_error(fmt::format("attend: no sequence {} in the cache", seq_id));
    const std::int64_t n = cache.n_tokens(seq_id, layer);
    std::vector<std::int64_t> pos(n_rows);
    if (!given) {
        if (n_rows > n)
            throw py::value_error(fmt::format("attend: {} query rows but sequence {} holds {} tokens in layer {}", n_rows,
                                              seq_id, n, layer));
        for (int i = 0; i < n_rows; ++i) pos[i] = n - n_rows + i;
        return pos;
    }
    for (int i = 0; i < n_rows; ++i) {
        pos[i] = given[i];
        if (pos[i] < 0 || pos[i] >= n)
            throw py::value_error(fmt::format("attend: pos[{}] = {}: expected 0 <= pos < {} (tokens of sequence {} in layer {})",
                                              i, pos[i], n, seq_id, layer));
    }
    return pos;
}

void check_layer(const KvCache& cache, int layer) {
    if (layer < 0 || layer >= cache.shape().n_layer)
        throw py::value_error(fmt::format("layer {} out of range [0, {})", layer, cache.shape().n_layer));
}

void append(PyKvCache& c, int layer, py::handle k_obj, py::handle v_obj, int seq_id) {
    const KvShape& shape = c.cache->shape();
    check_layer(*c.cache, layer);
    const FloatArray k = float_array(k_obj, "append: k", 3, "[n, n_kv_heads, head_dim]");
    const FloatArray v = float_array(v_obj, "append: v", 3, "[n, n_kv_heads, head_dim]");
    for (const FloatArray* a : {&k, &v}) {
        const char* what = a == &k ? "append: k" : "append: v";
        require_dim(*a, 1, shape.n_kv_head, what, "n_kv_heads");
        require_dim(*a, 2, shape.head_dim, what, "head_dim");
    }
    require_dim(v, 0, k.shape(0), "append: v", "n, as many tokens as k");
    if (k.shape(0) == 0) return;
    py::gil_scoped_release release;
    std::lock_guard lock(c.mu);
    c.cache->append(layer, seq_id, k.shape(0), k.data(), v.data());
}

FloatArray attend(PyKvCache& c, int layer, py::handle q_obj, int seq_id, const py::object& pos_obj,
                  std::optional<float> scale, const py::object& out_obj) {
    const KvShape& shape = c.cache->shape();
    check_layer(*c.cache, layer);
    const FloatArray q = float_array(q_obj, "attend: q", 3, "[n_rows, n_heads, head_dim]");
    check_heads(q, shape, "attend: q");
    const int n_rows = int(q.shape(0)), n_heads = int(q.shape(1));
    FloatArray out;
    if (out_obj.is_none()) {
        out = new_float_array({n_rows, n_heads, shape.head_dim});
    } else {
        if (!py::isinstance<FloatArray>(out_obj) || !py::reinterpret_borrow<py::array>(out_obj).writeable())
            throw py::type_error("attend: out must be a writeable C-contiguous float32 array [n_rows, n_heads, head_dim]");
        out = py::reinterpret_borrow<FloatArray>(out_obj);
        if (out.ndim() != 3 || out.shape(0) != n_rows || out.shape(1) != n_heads || out.shape(2) != shape.head_dim)
            throw py::value_error(fmt::format("attend: out has shape {}, q {}: expected the same", shape_text(out), shape_text(q)));
    }
    const PosArray given = position_array(pos_obj, n_rows);
    const std::int64_t* given_pos = pos_obj.is_none() ? nullptr : given.data();
    const float s = scale ? *scale : float(1.0 / std::sqrt(double(shape.head_dim)));
    float* o = out.mutable_data();
    {
        py::gil_scoped_release release;
        std::lock_guard lock(c.mu);
        const std::vector<std::int64_t> pos = row_positions(*c.cache, layer, seq_id, n_rows, given_pos);
        attend_heads(c, layer, seq_id, q.data(), n_rows, n_heads, pos.data(), s, o);
    }
    return out;
}

}  // namespace

std::shared_ptr<PyKvCache> make_py_kv_cache(const std::string& scheme, const KvShape& shape, std::int64_t context,
                                            std::uint64_t memory_budget, int n_threads) {
    if (n_threads < 0) throw py::value_error(fmt::format("KvCache: n_threads={}: expected >= 0", n_threads));
    auto c = std::make_shared<PyKvCache>();
    KvCacheOptions o;
    o.context = context;
    o.memory_budget = memory_budget;
    c->cache = make_kv_cache(parse_kv_scheme(scheme), shape, o);
    c->cache->add_sequence(0);
    c->n_threads = n_threads;
    return c;
}

void bind_kv_cache(py::module_& m) {
    py::class_<PyKvCache, std::shared_ptr<PyKvCache>>(m, "KvCache", R"doc(
A KV cache of any `--kv` scheme of the runtime ('f16', 'q4_0', 'pq:bits=2,...': docs/kv-pq.md),
holding keys (after RoPE) and values of n_layers layers of n_kv_heads heads of head_dim dims per
sequence; it starts with sequence 0. rope_pairs ('none', 'interleaved', 'neox') and the RoPE
frequencies (rope_theta, or rope_inv_freq [head_dim/2]) tell PQ how keys were rotated (pairs kept
in one subspace; calibration keys augmented over positions), as a model's cache has them.
context: the context `bits=` targets are stated at; memory_budget: bytes the cache may hold.)doc")
        .def(py::init([](const std::string& scheme, int n_layers, int n_kv_heads, int head_dim, const std::string& pairs,
                         double rope_theta, const py::object& rope_inv_freq, std::int64_t context,
                         std::uint64_t memory_budget, int n_threads) {
                 return make_py_kv_cache(scheme, kv_shape(n_layers, n_kv_heads, head_dim, pairs, rope_theta, rope_inv_freq),
                                         context, memory_budget, n_threads);
             }),
             "scheme"_a, "n_layers"_a, "n_kv_heads"_a, "head_dim"_a, py::kw_only(), "rope_pairs"_a = "none",
             "rope_theta"_a = 0.0, "rope_inv_freq"_a = py::none(), "context"_a = 0, "memory_budget"_a = 0,
             "n_threads"_a = 1)
        .def_property_readonly("scheme", [](const PyKvCache& c) { return c.cache->scheme(); })
        .def_property_readonly("n_layers", [](const PyKvCache& c) { return c.cache->shape().n_layer; })
        .def_property_readonly("n_kv_heads", [](const PyKvCache& c) { return c.cache->shape().n_kv_head; })
        .def_property_readonly("head_dim", [](const PyKvCache& c) { return c.cache->shape().head_dim; })
        .def_property_readonly("rope_pairs", [](const PyKvCache& c) { return choice_name(c.cache->shape().rope_pairs, kPairs); })
        .def_readwrite("n_threads", &PyKvCache::n_threads, "Threads attend() spreads the KV heads over (0 = default).")
        // Every call takes the cache's lock: another Python thread may be inside append() or
        // attend() with the GIL released (holders of the lock never wait for the GIL).
        .def("add_sequence", [](PyKvCache& c, int seq_id) { std::lock_guard l(c.mu); c.cache->add_sequence(seq_id); }, "seq_id"_a)
        .def("remove_sequence", [](PyKvCache& c, int seq_id) { std::lock_guard l(c.mu); c.cache->remove_sequence(seq_id); },
             "seq_id"_a)
        .def("has_sequence", [](PyKvCache& c, int seq_id) { std::lock_guard l(c.mu); return c.cache->has_sequence(seq_id); },
             "seq_id"_a)
        .def("n_tokens", [](PyKvCache& c, int seq_id, int layer) {
                check_layer(*c.cache, layer);
                std::lock_guard l(c.mu);
                return c.cache->n_tokens(seq_id, layer);
            }, "seq_id"_a = 0, "layer"_a = 0, "Tokens of the sequence stored in that layer.")
        .def("append", &append, "layer"_a, "k"_a, "v"_a, "seq_id"_a = 0,
             "Append n tokens to a layer of a sequence: k, v [n, n_kv_heads, head_dim] (post-RoPE keys).")
        .def("attend", &attend, "layer"_a, "q"_a, "seq_id"_a = 0, py::kw_only(), "pos"_a = py::none(), "scale"_a = py::none(),
             "out"_a = py::none(),
             R"doc(Attention of query rows q [n_rows, n_heads, head_dim] (post-RoPE; n_heads a multiple of n_kv_heads,
query head h reads KV head h // (n_heads // n_kv_heads)) over the layer's tokens, row i causally
limited to positions <= pos[i] (default: the sequence's last n_rows tokens). scale defaults to
1/sqrt(head_dim); out (float32, same shape) receives the result in place. Returns [n_rows, n_heads, head_dim].)doc")
        .def("memory", [](PyKvCache& c) { std::lock_guard l(c.mu); return memory_dict(*c.cache); },
             "Every byte held: {'n_tokens', 'bytes', 'bits_per_element', 'parts': {name: bytes}} (as `aqpim info` counts).")
        .def("scratch_bytes", [](PyKvCache& c) {
                std::lock_guard l(c.mu);
                return c.cache->scratch_bytes() + c.workspaces.bytes();
            },
             "Heap bytes of scratch kept between calls, not KV and not in memory(): the cache's own (training rows, "
             "encode buffers) and attend()'s per-thread workspaces.")
        .def("sequence_bytes", [](PyKvCache& c, std::int64_t n_tokens) {
                std::lock_guard l(c.mu);
                return c.cache->sequence_bytes(n_tokens);
            },
             "n_tokens"_a, "Steady-state bytes one more sequence of n_tokens tokens would hold (`aqpim info --context`).")
        .def("layout", [](PyKvCache& c, int layer, int seq_id) {
                check_layer(*c.cache, layer);
                std::vector<KvSpan> layout;
                {
                    std::lock_guard l(c.mu);
                    layout = c.cache->layout(seq_id, layer);
                }
                py::list spans;
                for (const KvSpan& s : layout)
                    spans.append(py::dict("first"_a = s.first, "n"_a = s.n, "version"_a = s.version, "page"_a = s.page));
                return spans;
            }, "layer"_a, "seq_id"_a = 0, "How the layer's tokens are stored: spans {first, n, version (-1: uncoded), page}.")
        .def("save_sequence", [](PyKvCache& c, int seq_id) {
                ByteWriter out;
                {
                    py::gil_scoped_release release;
                    std::lock_guard l(c.mu);
                    c.cache->save_sequence(seq_id, out);
                }
                return py::bytes(reinterpret_cast<const char*>(out.data().data()), out.size());
            }, "seq_id"_a = 0,
            "The sequence's own bytes (KvCache::save_sequence, the scheme's section of docs/kv-state.md).")
        .def("restore_sequence", [](PyKvCache& c, int seq_id, const py::bytes& data) {
                const std::string bytes = data;
                py::gil_scoped_release release;
                std::lock_guard l(c.mu);
                ByteReader in({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()}, "kv sequence");
                c.cache->restore_sequence(seq_id, in);
            }, "seq_id"_a, "data"_a,
            "Create sequence seq_id from save_sequence() bytes of a cache of the same shape and scheme (checked; "
            "on an error the cache is as it was).")
        .def("fork_sequence", [](PyKvCache& c, int src, int dst) {
                py::gil_scoped_release release;
                std::lock_guard l(c.mu);
                fork_sequence(*c.cache, src, dst);
            }, "src"_a, "dst"_a, "Copy sequence src into a new sequence dst (a shared prompt prefix).")
        .def("_time_attend", [](PyKvCache& c, int layer, py::handle q_obj, int n_calls, int seq_id) {
                // The C++ side of the boundary benchmark (bench/bench_python.py): the same attend as
                // attend(), n_calls times in a C++ loop; seconds per call.
                const FloatArray q = float_array(q_obj, "_time_attend: q", 3, "[n_rows, n_heads, head_dim]");
                check_heads(q, c.cache->shape(), "_time_attend: q");
                const int n_rows = int(q.shape(0)), n_heads = int(q.shape(1));
                std::vector<float> out(q.size());
                const float s = float(1.0 / std::sqrt(double(c.cache->shape().head_dim)));
                py::gil_scoped_release release;
                std::lock_guard lock(c.mu);
                const std::vector<std::int64_t> pos = row_positions(*c.cache, layer, seq_id, n_rows, nullptr);
                Timer t;
                for (int i = 0; i < n_calls; ++i) attend_heads(c, layer, seq_id, q.data(), n_rows, n_heads, pos.data(), s, out.data());
                return t.seconds() / std::max(n_calls, 1);
            }, "layer"_a, "q"_a, "n_calls"_a, "seq_id"_a = 0)
        .def("__repr__", [](const PyKvCache& c) {
            const KvShape& s = c.cache->shape();
            return fmt::format("KvCache('{}', n_layers={}, n_kv_heads={}, head_dim={}, rope_pairs='{}')", c.cache->scheme(),
                               s.n_layer, s.n_kv_head, s.head_dim, choice_name(s.rope_pairs, kPairs));
        });
}

}  // namespace aqpim::python
