#pragma once
// String options of the Python API (pairs="neox", rotation="hadamard", ...), spelled as the `pq:`
// spec spells them (docs/kv-pq.md), and their enums.

#include <fmt/format.h>
#include <pybind11/pybind11.h>

#include <string>
#include <utility>
#include <vector>

#include "aqpim/attention.h"
#include "aqpim/kmeans.h"
#include "aqpim/pq.h"
#include "aqpim/rope_pairs.h"

namespace aqpim::python {

template <class E>
using Choices = std::vector<std::pair<const char*, E>>;

/// The enum `text` names; ValueError listing the choices otherwise.
template <class E>
E parse_choice(const std::string& text, const char* what, const Choices<E>& choices) {
    std::string names;
    for (const auto& [name, value] : choices) {
        if (text == name) return value;
        names += (names.empty() ? "" : ", ") + std::string(name);
    }
    throw pybind11::value_error(fmt::format("{}={}: expected one of {}", what, text, names));
}

template <class E>
const char* choice_name(E value, const Choices<E>& choices) {
    for (const auto& [name, v] : choices)
        if (v == value) return name;
    return "?";
}

inline const Choices<RopePairs> kPairs = {
    {"none", RopePairs::none}, {"interleaved", RopePairs::interleaved}, {"neox", RopePairs::neox}};
inline const Choices<SubspaceOrder> kOrders = {
    {"contiguous", SubspaceOrder::contiguous}, {"balanced", SubspaceOrder::variance_balanced}};
inline const Choices<Rotation> kRotations = {
    {"none", Rotation::none}, {"hadamard", Rotation::hadamard}, {"random", Rotation::random_orthogonal}};
inline const Choices<KMeansInit> kInits = {{"kmeans++", KMeansInit::kmeanspp}, {"random", KMeansInit::random}};
inline const Choices<PqScorePath> kScorePaths = {
    {"f32", PqScorePath::f32}, {"int8", PqScorePath::int8}, {"auto", PqScorePath::automatic}};
inline const Choices<PqValuePath> kValuePaths = {
    {"auto", PqValuePath::automatic},
    {"histogram", PqValuePath::histogram},
    {"permute", PqValuePath::permute},
    {"pairs", PqValuePath::pairs},
    {"bf16", PqValuePath::bf16}};

}  // namespace aqpim::python
