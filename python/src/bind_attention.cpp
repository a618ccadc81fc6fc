// aqpim.pq_attention and aqpim.dense_attention: one GQA group of query heads attending over one KV
// head's tokens, on PQ codes or dense rows (include/aqpim/attention.h).

#include <cmath>
#include <optional>

#include <pybind11/stl.h>

#include "aqpim/attention.h"
#include "aqpim/pq_codes.h"
#include "bindings.h"
#include "choices.h"

namespace aqpim::python {
namespace {

using namespace pybind11::literals;

/// Codes given as PackedCodes (read in place) or as an array [n_tokens, M] (packed here).
PackedCodes packed_for(py::handle codes, const ProductQuantizer& pq, const char* what) {
    PackedCodes p = py::isinstance<PackedCodes>(codes) ? codes.cast<PackedCodes>() : pack_codes(codes, pq.nbits());
    if (p.M != pq.M() || p.nbits != pq.nbits())
        throw py::value_error(fmt::format("{}: codes of m={}, nbits={} for a quantizer of m={}, nbits={}", what, p.M, p.nbits,
                                          pq.M(), pq.nbits()));
    return p;
}

float scale_or_default(std::optional<float> scale, py::ssize_t D) {
    return scale ? *scale : float(1.0 / std::sqrt(double(D)));
}

FloatArray pq_attention(py::handle q_obj, py::handle k_codes, py::handle v_codes, const ProductQuantizer& pq_k,
                        const ProductQuantizer& pq_v, std::optional<float> scale, const std::string& scores,
                        const std::string& values) {
    if (!pq_k.is_trained() || !pq_v.is_trained())
        throw py::value_error("pq_attention: the key and value quantizers must be trained");
    const FloatArray q = float_array(q_obj, "pq_attention: q", 2, "[n_q, D]");
    require_dim(q, 1, pq_k.D(), "pq_attention: q", "D, the key quantizer's dims");
    if (q.shape(0) < 1) throw py::value_error("pq_attention: q has no query head");
    const PackedCodes k = packed_for(k_codes, pq_k, "pq_attention: k_codes");
    const PackedCodes v = packed_for(v_codes, pq_v, "pq_attention: v_codes");
    if (k.n_tokens != v.n_tokens)
        throw py::value_error(fmt::format("pq_attention: {} key tokens but {} value tokens", k.n_tokens, v.n_tokens));
    PqAttentionOptions options;
    options.scores = parse_choice(scores, "scores", kScorePaths);
    options.values = parse_choice(values, "values", kValuePaths);
    const int n_q = int(q.shape(0)), D = pq_k.D();
    const float s = scale_or_default(scale, D);
    FloatArray out = new_float_array({n_q, D});
    float* o = out.mutable_data();
    {
        py::gil_scoped_release release;
        AttentionPartial part(n_q, D);
        attend_pq(q.data(), n_q, pq_k, pq_v, k.blocks.data(), v.blocks.data(), k.n_tokens, s, options, part);
        part.finalize(o);
    }
    return out;
}

bool is_float16(py::handle obj) {
    const py::array a = py::array::ensure(obj);
    return a && a.dtype().kind() == 'f' && a.dtype().itemsize() == 2;
}

/// k or v [n_tokens, D] of float16, C-contiguous (copied when strided), as raw f16 bits.
py::array half_rows(py::handle obj, const char* what, py::ssize_t D) {
    const py::array a = py::array::ensure(obj, py::array::c_style);
    if (!a) throw py::type_error(fmt::format("{}: cannot read the float16 array as C-contiguous", what));
    if (a.ndim() != 2)
        throw py::value_error(fmt::format("{}: expected 2 dimensions [n_tokens, D], got shape {}", what, shape_text(a)));
    require_dim(a, 1, D, what, "D, the query's dims");
    return a;
}

FloatArray dense_attention(py::handle q_obj, py::handle k_obj, py::handle v_obj, std::optional<float> scale) {
    const FloatArray q = float_array(q_obj, "dense_attention: q", 2, "[n_q, D]");
    const py::ssize_t n_q = q.shape(0), D = q.shape(1);
    if (n_q < 1 || D < 1) throw py::value_error(fmt::format("dense_attention: q shape {} has no query", shape_text(q)));
    const float s = scale_or_default(scale, D);
    FloatArray out = new_float_array({n_q, D});
    float* o = out.mutable_data();
    AttentionPartial part{int(n_q), int(D)};
    if (is_float16(k_obj) && is_float16(v_obj)) {
        // float16 rows are read in place by the f16 kernel (what the dense f16 cache stores).
        const py::array k = half_rows(k_obj, "dense_attention: k", D), v = half_rows(v_obj, "dense_attention: v", D);
        require_dim(v, 0, k.shape(0), "dense_attention: v", "n_tokens, as many rows as k");
        const auto* kp = static_cast<const f16_t*>(k.data());
        const auto* vp = static_cast<const f16_t*>(v.data());
        py::gil_scoped_release release;
        attend_dense_f16(q.data(), int(n_q), int(D), kp, vp, k.shape(0), s, part);
        part.finalize(o);
    } else {
        const FloatArray k = float_array(k_obj, "dense_attention: k", 2, "[n_tokens, D]");
        const FloatArray v = float_array(v_obj, "dense_attention: v", 2, "[n_tokens, D]");
        require_dim(k, 1, D, "dense_attention: k", "D, the query's dims");
        require_dim(v, 1, D, "dense_attention: v", "D, the query's dims");
        require_dim(v, 0, k.shape(0), "dense_attention: v", "n_tokens, as many rows as k");
        py::gil_scoped_release release;
        attend_dense_f32(q.data(), int(n_q), int(D), k.data(), v.data(), k.shape(0), s, part);
        part.finalize(o);
    }
    return out;
}

}  // namespace

void bind_attention(py::module_& m) {
    m.def("pq_attention", &pq_attention, "q"_a, "k_codes"_a, "v_codes"_a, "pq_k"_a, "pq_v"_a, py::kw_only(),
          "scale"_a = py::none(), "scores"_a = "f32", "values"_a = "auto",
          R"doc(Attention of a GQA group of query heads q [n_q, d] over tokens whose keys and values are PQ
codes (k_codes [n, m_k], v_codes [n, m_v] uint8 as encode() gives, or PackedCodes from
pack_codes()), computed on the codes through lookup tables: softmax(scale q·K^T) V with K, V the
decoded rows, without decoding them. scale defaults to 1/sqrt(d); scores 'f32' (exact tables) or
'int8' (4-bit codes); values 'auto', 'histogram', 'permute', 'pairs' or 'bf16' (4-bit codes on a CPU
with AVX512-BF16: weights and codebook rounded to bf16). Returns [n_q, d].)doc");
    m.def("dense_attention", &dense_attention, "q"_a, "k"_a, "v"_a, py::kw_only(), "scale"_a = py::none(),
          R"doc(Attention of q [n_q, d] over dense keys and values k, v [n, d]: float16 rows are read in place by
the f16 kernel, anything else as float32. The reference pq_attention is measured against.)doc");
}

}  // namespace aqpim::python
