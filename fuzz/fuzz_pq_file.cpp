// PQ files (docs/pq-format.md): ProductQuantizer::load, then encode and decode of one vector with
// what was loaded. Seeds: quantizers this target trains and saves when AQPIM_FUZZ_WRITE_SEEDS=DIR
// is set (scripts/fuzz.sh), so they are the current format's own output.
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <vector>

#include "aqpim/pq.h"
#include "fuzz_input.h"

namespace {

void write_seeds(const std::filesystem::path& dir) {
    using namespace aqpim;
    std::filesystem::create_directories(dir);
    const int n = 512;
    int i_seed = 0;
    for (const int nbits : {4, 8})
        for (const Rotation rotation : {Rotation::none, Rotation::hadamard, Rotation::random_orthogonal})
            for (const bool scale_folding : {false, true}) {
                PQParams p;
                p.D = 16;
                p.M = 4;
                p.nbits = nbits;
                p.rotation = rotation;
                p.scale_folding = scale_folding;
                std::vector<float> x(std::size_t(n) * p.D);
                for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 2654435761u % 1999) - 999) / 333.0f;
                ProductQuantizer pq(p);
                pq.train(x.data(), n);
                pq.save_file((dir / ("pq" + std::to_string(i_seed++) + ".pq")).string());
            }
}

}  // namespace

AQPIM_FUZZ_WRITES_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aqpim;
    std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
    fuzz::expect_success_or_error([&] {
        const ProductQuantizer pq = ProductQuantizer::load(in);
        std::vector<float> x(std::size_t(pq.D()), 0.5f);
        std::vector<std::uint8_t> codes(std::size_t(pq.M()));
        pq.encode(x.data(), 1, codes.data());
        pq.decode(codes.data(), 1, x.data());
    });
    return 0;
}
