// aqpim._aqpim: the extension module under the Python package aqpim (docs/python.md).

#include "aqpim/error.h"
#include "aqpim/simd.h"
#include "aqpim/threads.h"
#include "bindings.h"

PYBIND11_MODULE(_aqpim, m) {
    namespace py = pybind11;
    m.doc() = "aqpim's C++ library: product quantizer, k-means, attention on codes, KV caches, the Llama runtime";
    // aqpim::Error keeps its message; it is a RuntimeError, so `except RuntimeError` catches it too.
    py::register_exception<aqpim::Error>(m, "Error", PyExc_RuntimeError);
    aqpim::python::bind_pq(m);
    aqpim::python::bind_attention(m);
    aqpim::python::bind_kv_cache(m);
    aqpim::python::bind_model(m);
    m.def("simd_level", [] { return aqpim::simd_level_name(aqpim::active_simd_level()); },
          "The SIMD level the kernels run at (AQPIM_SIMD=ref|avx2|avx512 forces one).");
    m.def("default_threads", &aqpim::default_threads, "Threads parallel regions use by default (OMP_NUM_THREADS, else cores).");
    m.def("set_default_threads", &aqpim::set_default_threads, py::arg("n"), "Set the default thread count (n >= 1).");
}
