#pragma once
// The arrays Python passes to the bindings: dtype, dimension and shape errors become TypeError /
// ValueError naming the argument and what was expected. An array that already is C-contiguous
// float32 (or uint8 for codes) is used in place; other float dtypes and strided views are copied
// once into that layout.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

namespace aqpim::python {

namespace py = pybind11;

using FloatArray = py::array_t<float, py::array::c_style>;
using ByteArray = py::array_t<std::uint8_t, py::array::c_style>;

/// `obj` as a C-contiguous float32 array of `ndim` dims; `layout` names the dims for messages
/// ("[n, D]"). TypeError unless a float array (float16/float64 are converted), ValueError on ndim.
FloatArray float_array(py::handle obj, const char* what, int ndim, const char* layout);
/// `obj` as a C-contiguous uint8 array of `ndim` dims (no other dtype: codes are never converted).
ByteArray byte_array(py::handle obj, const char* what, int ndim, const char* layout);

/// "[3, 128]".
std::string shape_text(const py::array& a);
/// ValueError unless a.shape(dim) == expected: "<what>: shape [..]: dim <dim> must be <expected> (<meaning>)".
void require_dim(const py::array& a, int dim, py::ssize_t expected, const char* what, const char* meaning);

/// A new C-contiguous float32 array of that shape.
FloatArray new_float_array(std::initializer_list<py::ssize_t> shape);

}  // namespace aqpim::python
