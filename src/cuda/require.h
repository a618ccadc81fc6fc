#pragma once
// Preconditions of the CUDA path's plain-C++ parts, which build without fmt (the standalone GPU
// check builds with nvcc and CMake alone): std::runtime_error naming the file and the condition.

#include <stdexcept>
#include <string>

namespace aqpim::cuda {

[[noreturn]] inline void throw_failure(const char* what, const char* file, int line, const std::string& detail) {
    throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " + detail);
}

}  // namespace aqpim::cuda

/// Throw std::runtime_error with `msg` (a std::string expression) when cond fails.
#define AQPIM_CUDA_REQUIRE(cond, msg)                                                           \
    do {                                                                                        \
        if (!(cond)) ::aqpim::cuda::throw_failure("requirement failed: " #cond, __FILE__, __LINE__, msg); \
    } while (0)
