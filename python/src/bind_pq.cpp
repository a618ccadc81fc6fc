// aqpim.ProductQuantizer, aqpim.kmeans, aqpim.pack_codes / PackedCodes: the PQ engine on numpy
// arrays (include/aqpim/pq.h, kmeans.h, pq_codes.h, pq_kernels.h; the file layout of save() is
// docs/pq-format.md).

#include <pybind11/stl.h>

#include <sstream>

#include "aqpim/pq_codes.h"
#include "aqpim/pq_kernels.h"
#include "arrays.h"
#include "bindings.h"
#include "choices.h"

namespace aqpim::python {
namespace {

using namespace pybind11::literals;

py::dict stats_dict(const KMeansStats& s) {
    py::array_t<double> sse(py::ssize_t(s.sse.size()));
    std::copy(s.sse.begin(), s.sse.end(), sse.mutable_data());
    return py::dict("total_sse"_a = s.total_sse, "sse"_a = sse, "total_iterations"_a = s.total_iterations,
                    "max_iterations"_a = s.max_iterations, "empty_repairs"_a = s.empty_repairs);
}

KMeansParams kmeans_params(int k, int max_iter, double tol, std::uint64_t seed, const std::string& init, int seed_trials,
                           int n_threads) {
    KMeansParams p;
    p.k = k;
    p.max_iter = max_iter;
    p.tol = tol;
    p.seed = seed;
    p.init = parse_choice(init, "init", kInits);
    p.seed_trials = seed_trials;
    p.n_threads = n_threads;
    return p;
}

void require_trained(const ProductQuantizer& pq, const char* what) {
    if (!pq.is_trained()) throw py::value_error(fmt::format("{}: the ProductQuantizer is not trained (call train(x) first)", what));
}

/// Vectors [n, D] of the quantizer's D.
FloatArray vectors(const ProductQuantizer& pq, py::handle obj, const char* what) {
    FloatArray x = float_array(obj, what, 2, "[n, D]");
    require_dim(x, 1, pq.D(), what, "D, the quantizer's dims");
    return x;
}

/// x [n, D] -> a new [n, D] array through one of the quantizer's transforms.
template <class Fn>
FloatArray transform_rows(const ProductQuantizer& pq, py::handle x_obj, const char* what, Fn fn) {
    const FloatArray x = vectors(pq, x_obj, what);
    FloatArray y = new_float_array({x.shape(0), pq.D()});
    const float* xp = x.data();
    float* yp = y.mutable_data();
    const std::int64_t n = x.shape(0);
    {
        py::gil_scoped_release release;
        fn(xp, yp, n);
    }
    return y;
}

std::string to_bytes(const ProductQuantizer& pq) {
    std::ostringstream out;
    pq.save(out);
    return out.str();
}

ProductQuantizer from_bytes(const py::bytes& data) {
    std::istringstream in(std::string(data), std::ios::binary);
    return ProductQuantizer::load(in);
}

std::string repr(const ProductQuantizer& pq) {
    const PQParams& p = pq.params();
    return fmt::format("ProductQuantizer(d={}, m={}, nbits={}, plan='{}', pairs='{}', rotation='{}', scale_folding={}{})",
                       p.D, p.M, p.nbits, choice_name(p.order, kOrders), choice_name(p.pairs, kPairs),
                       choice_name(p.rotation, kRotations), p.scale_folding ? "True" : "False",
                       pq.is_trained() ? ", trained" : "");
}

void bind_product_quantizer(py::module_& m) {
    py::class_<ProductQuantizer>(m, "ProductQuantizer", R"doc(
Product quantizer of d-dim vectors: m subspaces of d/m dims, 2^nbits centroids each, after an
optional per-channel scale, rotation and subspace permutation (include/aqpim/pq.h).

plan: 'contiguous' or 'balanced' (variance-balanced subspaces); pairs: RoPE pairs kept in one
subspace, 'none', 'interleaved' (2i, 2i+1) or 'neox' (i, i + d/2); rotation: 'none', 'hadamard'
(d a power of two) or 'random' (orthogonal); scale_folding: divide channels by their RMS.)doc")
        .def(py::init([](int d, int m, int nbits, const std::string& plan, const std::string& pairs,
                         const std::string& rotation, bool scale_folding, std::uint64_t seed, int kmeans_iters,
                         double kmeans_tol, std::uint64_t kmeans_seed, const std::string& kmeans_init, int seed_trials,
                         int n_threads) {
                 PQParams p;
                 p.D = d;
                 p.M = m;
                 p.nbits = nbits;
                 p.order = parse_choice(plan, "plan", kOrders);
                 p.pairs = parse_choice(pairs, "pairs", kPairs);
                 p.rotation = parse_choice(rotation, "rotation", kRotations);
                 p.scale_folding = scale_folding;
                 p.seed = seed;
                 // k is the quantizer's ksub whatever is passed here (PQParams::kmeans).
                 p.kmeans = kmeans_params(1, kmeans_iters, kmeans_tol, kmeans_seed, kmeans_init, seed_trials, n_threads);
                 return ProductQuantizer(p);
             }),
             "d"_a, "m"_a, "nbits"_a = 4, py::kw_only(), "plan"_a = "contiguous", "pairs"_a = "none", "rotation"_a = "none",
             "scale_folding"_a = false, "seed"_a = 1234, "kmeans_iters"_a = 25, "kmeans_tol"_a = 1e-6,
             "kmeans_seed"_a = 1234, "kmeans_init"_a = "kmeans++", "seed_trials"_a = 0, "n_threads"_a = 0)
        .def_property_readonly("d", &ProductQuantizer::D)
        .def_property_readonly("m", &ProductQuantizer::M)
        .def_property_readonly("nbits", &ProductQuantizer::nbits)
        .def_property_readonly("dsub", &ProductQuantizer::dsub)
        .def_property_readonly("ksub", &ProductQuantizer::ksub)
        .def_property_readonly("is_trained", &ProductQuantizer::is_trained)
        .def_property_readonly("plan", [](const ProductQuantizer& pq) { return choice_name(pq.params().order, kOrders); })
        .def_property_readonly("pairs", [](const ProductQuantizer& pq) { return choice_name(pq.params().pairs, kPairs); })
        .def_property_readonly("rotation",
                               [](const ProductQuantizer& pq) { return choice_name(pq.params().rotation, kRotations); })
        .def_property_readonly("scale_folding", [](const ProductQuantizer& pq) { return pq.params().scale_folding; })
        .def(
            "train",
            [](ProductQuantizer& pq, py::handle x_obj, py::object w_obj) {
                const FloatArray x = vectors(pq, x_obj, "train: x");
                FloatArray w;
                if (!w_obj.is_none()) {
                    w = float_array(w_obj, "train: weights", 1, "[n]");
                    require_dim(w, 0, x.shape(0), "train: weights", "n, one weight per training vector");
                }
                KMeansStats stats;
                {
                    py::gil_scoped_release release;
                    stats = pq.train(x.data(), x.shape(0), w_obj.is_none() ? nullptr : w.data());
                }
                return stats_dict(stats);
            },
            "x"_a, "weights"_a = py::none(),
            "Learn scale, plan and codebooks from x [n, d] (optional weights [n]); returns k-means statistics.")
        .def(
            "encode",
            [](const ProductQuantizer& pq, py::handle x_obj) {
                require_trained(pq, "encode");
                const FloatArray x = vectors(pq, x_obj, "encode: x");
                ByteArray codes(std::vector<py::ssize_t>{x.shape(0), pq.M()});
                std::uint8_t* out = codes.mutable_data();
                {
                    py::gil_scoped_release release;
                    pq.encode(x.data(), x.shape(0), out);
                }
                return codes;
            },
            "x"_a, "Codes [n, m] uint8 of x [n, d]: the nearest centroid of each subvector.")
        .def(
            "decode",
            [](const ProductQuantizer& pq, py::handle codes_obj) {
                require_trained(pq, "decode");
                const ByteArray codes = byte_array(codes_obj, "decode: codes", 2, "[n, M]");
                require_dim(codes, 1, pq.M(), "decode: codes", "M, the quantizer's subspaces");
                FloatArray x = new_float_array({codes.shape(0), pq.D()});
                float* out = x.mutable_data();
                {
                    py::gil_scoped_release release;
                    pq.decode(codes.data(), codes.shape(0), out);
                }
                return x;
            },
            "codes"_a, "Vectors [n, d] in the original space from codes [n, m].")
        .def(
            "lut",
            [](const ProductQuantizer& pq, py::handle q_obj) {
                require_trained(pq, "lut");
                const FloatArray q = vectors(pq, q_obj, "lut: q");
                const std::int64_t n_q = q.shape(0);
                FloatArray lut = new_float_array({n_q, pq.M(), pq.ksub()});
                float* out = lut.mutable_data();
                {
                    py::gil_scoped_release release;
                    std::vector<float> qy(std::size_t(n_q) * pq.D());
                    std::vector<float> columns(lut_columns_floats(pq.M(), pq.ksub(), pq.dsub()));
                    pq.transform_query(q.data(), qy.data(), n_q);
                    pq_kernels().build_lut(qy.data(), int(n_q), pq.M(), pq.ksub(), pq.dsub(), pq.centroids(), out,
                                           columns.data());
                }
                return lut;
            },
            "q"_a,
            "Lookup tables [n_q, m, ksub] of queries q [n_q, d]: lut[h, m, c] = (query h in quantizer space, subspace m) "
            "· centroid c, so q·decode(code) = sum over m of lut[h, m, code[m]].")
        .def("forward", [](const ProductQuantizer& pq, py::handle x) {
                require_trained(pq, "forward");
                return transform_rows(pq, x, "forward: x", [&](const float* a, float* b, std::int64_t n) { pq.forward(a, b, n); });
            }, "x"_a, "x [n, d] in quantizer space: permutation · rotation · (x / scale).")
        .def("inverse", [](const ProductQuantizer& pq, py::handle y) {
                require_trained(pq, "inverse");
                return transform_rows(pq, y, "inverse: y", [&](const float* a, float* b, std::int64_t n) { pq.inverse(a, b, n); });
            }, "y"_a, "Inverse of forward().")
        .def("transform_query", [](const ProductQuantizer& pq, py::handle q) {
                require_trained(pq, "transform_query");
                return transform_rows(pq, q, "transform_query: q",
                                      [&](const float* a, float* b, std::int64_t n) { pq.transform_query(a, b, n); });
            }, "q"_a, "Queries [n, d] in quantizer space, so that q·x = transform_query(q)·forward(x).")
        .def_property_readonly(
            "centroids",
            [](py::object self) {
                const ProductQuantizer& pq = self.cast<const ProductQuantizer&>();
                require_trained(pq, "centroids");
                if (!pq.has_centroids()) throw py::value_error("centroids: the ProductQuantizer holds no codebooks");
                FloatArray view({py::ssize_t(pq.M()), py::ssize_t(pq.ksub()), py::ssize_t(pq.dsub())}, pq.centroids(), self);
                py::detail::array_proxy(view.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
                return view;
            },
            "Codebooks [m, ksub, dsub] in quantizer space (a read-only view into the quantizer).")
        .def_property_readonly("permutation", [](const ProductQuantizer& pq) {
                return py::array_t<std::int32_t>(py::ssize_t(pq.permutation().size()), pq.permutation().data());
            }, "Permutation [d] (y[i] = z[perm[i]]), empty before training.")
        .def_property_readonly("scale", [](const ProductQuantizer& pq) {
                return py::array_t<float>(py::ssize_t(pq.scale().size()), pq.scale().data());
            }, "Per-channel scale [d], empty without scale folding.")
        .def_property_readonly("parameter_bytes", &ProductQuantizer::parameter_bytes,
                               "Bytes of the parameters (codebooks, scale, permutation, rotation) as save() stores them.")
        .def(
            "bits_per_element",
            [](const ProductQuantizer& pq, std::optional<std::int64_t> n_vectors) {
                const double code_bits = double(pq.M()) * pq.nbits();
                if (!n_vectors) return code_bits / pq.D();
                if (*n_vectors < 1) throw py::value_error(fmt::format("bits_per_element: n_vectors={}: expected >= 1", *n_vectors));
                return (double(*n_vectors) * code_bits + 8.0 * double(pq.parameter_bytes())) / (double(*n_vectors) * pq.D());
            },
            "n_vectors"_a = py::none(),
            "Code bits per element (m * nbits / d); with n_vectors, everything counted: codes of n_vectors vectors "
            "plus parameter_bytes, per element.")
        .def("save", [](const ProductQuantizer& pq, const std::string& path) { pq.save_file(path); }, "path"_a,
             "Write the quantizer (docs/pq-format.md).")
        .def_static("load", &ProductQuantizer::load_file, "path"_a, "Read a file save() wrote (aqpim.Error names a bad field).")
        .def("to_bytes", [](const ProductQuantizer& pq) { return py::bytes(to_bytes(pq)); },
             "The bytes save() writes (docs/pq-format.md).")
        .def_static("from_bytes", &from_bytes, "data"_a, "The quantizer to_bytes() gave.")
        .def(py::pickle([](const ProductQuantizer& pq) { return py::bytes(to_bytes(pq)); },
                        [](const py::bytes& data) { return from_bytes(data); }))
        .def("__repr__", &repr);
}

void bind_kmeans(py::module_& m) {
    m.def(
        "kmeans",
        [](py::handle x_obj, int k, py::object w_obj, int max_iter, double tol, std::uint64_t seed,
           const std::string& init, int seed_trials, int n_threads) {
            const py::array probe = py::array::ensure(x_obj);
            const bool batched = probe && probe.ndim() == 3;
            const FloatArray x = float_array(x_obj, "kmeans: x", batched ? 3 : 2,
                                             batched ? "[n_problems, n_points, dim]" : "[n_points, dim]");
            const std::int64_t n_problems = batched ? x.shape(0) : 1;
            const std::int64_t n_points = x.shape(batched ? 1 : 0), dim = x.shape(batched ? 2 : 1);
            if (n_points > INT32_MAX || dim > INT32_MAX)
                throw py::value_error(fmt::format("kmeans: x shape {}: at most {} points and dims", shape_text(x), INT32_MAX));
            FloatArray w;
            if (!w_obj.is_none()) {
                w = float_array(w_obj, "kmeans: weights", batched ? 2 : 1, batched ? "[n_problems, n_points]" : "[n_points]");
                for (int i = 0; i < w.ndim(); ++i)
                    require_dim(w, i, x.shape(i), "kmeans: weights", "one weight per point of x");
            }
            const KMeansParams p = kmeans_params(k, max_iter, tol, seed, init, seed_trials, n_threads);
            FloatArray centroids = batched ? new_float_array({n_problems, k, dim}) : new_float_array({k, dim});
            float* out = centroids.mutable_data();
            KMeansStats stats;
            {
                py::gil_scoped_release release;
                stats = kmeans_batch(p, n_problems, int(n_points), int(dim), x.data(),
                                     w_obj.is_none() ? nullptr : w.data(), out);
            }
            return py::make_tuple(centroids, stats_dict(stats));
        },
        "x"_a, "k"_a, py::kw_only(), "weights"_a = py::none(), "max_iter"_a = 25, "tol"_a = 1e-6, "seed"_a = 1234,
        "init"_a = "kmeans++", "seed_trials"_a = 0, "n_threads"_a = 0,
        R"doc(k-means of x [n_points, dim], or of a batch of independent problems x [n_problems, n_points, dim]
(the codebooks of a model are thousands of tiny problems: include/aqpim/kmeans.h). Returns
(centroids [k, dim] or [n_problems, k, dim], stats dict). Deterministic for a seed whatever the
thread count.)doc");
}

void bind_packed_codes(py::module_& m) {
    py::class_<PackedCodes>(m, "PackedCodes",
                            "Codes laid out in blocks of 32 tokens for attention (include/aqpim/pq_codes.h): "
                            "pack_codes() makes them once, pq_attention() reads them in place.")
        .def(py::init([](py::handle blocks_obj, std::int64_t n_tokens, int m, int nbits) {
                 if (nbits != 4 && nbits != 8) throw py::value_error(fmt::format("PackedCodes: nbits={}: expected 4 or 8", nbits));
                 if (n_tokens < 0 || m < 1)
                     throw py::value_error(fmt::format("PackedCodes: n_tokens={}, m={}: expected >= 0 and >= 1", n_tokens, m));
                 PackedCodes p{n_tokens, m, nbits, byte_array(blocks_obj, "PackedCodes: blocks", 2, "[n_blocks, block_bytes]")};
                 require_dim(p.blocks, 0, code_blocks_for(n_tokens), "PackedCodes: blocks", "ceil(n_tokens / 32) blocks");
                 require_dim(p.blocks, 1, py::ssize_t(code_block_bytes(m, nbits)), "PackedCodes: blocks",
                             "bytes of one block of 32 tokens at this m and nbits");
                 return p;
             }),
             "blocks"_a, "n_tokens"_a, "m"_a, "nbits"_a, "Blocks pack_codes() made (e.g. kept in a tensor), read in place.")
        .def_readonly("n_tokens", &PackedCodes::n_tokens)
        .def_readonly("m", &PackedCodes::M)
        .def_readonly("nbits", &PackedCodes::nbits)
        .def_readonly("blocks", &PackedCodes::blocks, "uint8 [n_blocks, block_bytes]")
        .def("unpack", [](const PackedCodes& p) {
            ByteArray codes(std::vector<py::ssize_t>{py::ssize_t(p.n_tokens), p.M});
            unpack_code_blocks(p.blocks.data(), p.n_tokens, p.M, p.nbits, codes.mutable_data());
            return codes;
        }, "Codes [n_tokens, m] again.")
        .def("__repr__", [](const PackedCodes& p) {
            return fmt::format("PackedCodes(n_tokens={}, m={}, nbits={})", p.n_tokens, p.M, p.nbits);
        });
    m.def("pack_codes", &pack_codes, "codes"_a, "nbits"_a, "Codes [n, m] (uint8, < 2^nbits) packed for pq_attention().");
}

}  // namespace

PackedCodes pack_codes(py::handle codes_obj, int nbits) {
    if (nbits != 4 && nbits != 8) throw py::value_error(fmt::format("pack_codes: nbits={}: expected 4 or 8", nbits));
    const ByteArray codes = byte_array(codes_obj, "codes", 2, "[n_tokens, M]");
    PackedCodes p;
    p.n_tokens = codes.shape(0);
    p.M = int(codes.shape(1));
    p.nbits = nbits;
    const std::uint8_t* c = codes.data();
    const std::int64_t n_values = p.n_tokens * p.M;
    for (std::int64_t i = 0; i < n_values; ++i)
        if (c[i] >> nbits)
            throw py::value_error(fmt::format("codes: value {} of token {} subspace {}: expected < 2^{} = {}", c[i],
                                              i / p.M, i % p.M, nbits, 1 << nbits));
    p.blocks = ByteArray(std::vector<py::ssize_t>{py::ssize_t(code_blocks_for(p.n_tokens)),
                                                  py::ssize_t(code_block_bytes(p.M, nbits))});
    pack_code_blocks(c, p.n_tokens, p.M, nbits, p.blocks.mutable_data());
    return p;
}

void bind_pq(py::module_& m) {
    bind_product_quantizer(m);
    bind_kmeans(m);
    bind_packed_codes(m);
}

}  // namespace aqpim::python
