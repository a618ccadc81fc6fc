// Array checks of the bindings (see arrays.h).

#include "arrays.h"

#include <fmt/format.h>

namespace aqpim::python {
namespace {

py::array as_array(py::handle obj, const char* what) {
    py::array a = py::array::ensure(obj);
    if (!a)
        throw py::type_error(fmt::format("{}: expected a numpy array, got {}", what,
                                         std::string(py::str(py::type::handle_of(obj).attr("__name__")))));
    return a;
}

void require_ndim(const py::array& a, const char* what, int ndim, const char* layout) {
    if (a.ndim() != ndim)
        throw py::value_error(fmt::format("{}: expected {} dimensions {}, got shape {}", what, ndim, layout, shape_text(a)));
}

}  // namespace

std::string shape_text(const py::array& a) {
    std::string s = "[";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + "]";
}

void require_dim(const py::array& a, int dim, py::ssize_t expected, const char* what, const char* meaning) {
    if (a.shape(dim) != expected)
        throw py::value_error(fmt::format("{}: shape {}: dim {} must be {} ({})", what, shape_text(a), dim, expected, meaning));
}

FloatArray float_array(py::handle obj, const char* what, int ndim, const char* layout) {
    const py::array a = as_array(obj, what);
    if (a.dtype().kind() != 'f')
        throw py::type_error(fmt::format("{}: expected a float array {} (float32; float16 and float64 are converted), got dtype {}",
                                         what, layout, std::string(py::str(a.dtype()))));
    require_ndim(a, what, ndim, layout);
    // in place when float32 and C-contiguous, else one converted copy
    auto converted = py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(a);
    if (!converted) throw py::type_error(fmt::format("{}: cannot convert dtype {} to float32", what, std::string(py::str(a.dtype()))));
    return py::reinterpret_steal<FloatArray>(converted.release());
}

ByteArray byte_array(py::handle obj, const char* what, int ndim, const char* layout) {
    const py::array a = as_array(obj, what);
    if (!py::isinstance<py::array_t<std::uint8_t>>(a))
        throw py::type_error(fmt::format("{}: expected a uint8 array {} (codes as encode() returns them), got dtype {}", what,
                                         layout, std::string(py::str(a.dtype()))));
    require_ndim(a, what, ndim, layout);
    auto contiguous = ByteArray::ensure(a);
    if (!contiguous) throw py::type_error(fmt::format("{}: cannot read the array as C-contiguous uint8", what));
    return contiguous;
}

FloatArray new_float_array(std::initializer_list<py::ssize_t> shape) { return FloatArray(std::vector<py::ssize_t>(shape)); }

}  // namespace aqpim::python
