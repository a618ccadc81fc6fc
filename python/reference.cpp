// aqpim_py_reference: the C++ library called directly (no binding in between) on raw files, so
// the Python tests can check the bindings against it byte for byte (tests/python/test_pq.py,
// test_torch.py). Files are raw little-endian arrays.
//
//   pq --x X --n N --d D --m M [--nbits --plan --pairs --rotation --scale-folding --seed --kmeans-seed]
//      --codes OUT --quantizer OUT      train on X [n][d], write codes [n][m] and the saved quantizer
//   kv --scheme S --layers L --kv-heads H --head-dim D [--pairs --rope-theta --context] --k K --v V
//      --n N --chunks 300,1,1 --layer l --q Q --heads NH --rows R --out OUT
//      append K, V [L][n][H][D] to every layer in chunks of those sizes (the last repeated), then
//      write the attention of query rows Q [R][NH][D] (the last R positions) in layer l: [R][NH][D]

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "aqpim/error.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/pq.h"
#include "aqpim/transformer.h"

namespace {

using namespace aqpim;

template <class T>
std::vector<T> read_array(const std::string& path, std::size_t count) {
    std::ifstream in(path, std::ios::binary);
    std::vector<T> v(count);
    in.read(reinterpret_cast<char*>(v.data()), std::streamsize(count * sizeof(T)));
    AQPIM_CHECK(in.gcount() == std::streamsize(count * sizeof(T)), "{}: expected {} values", path, count);
    return v;
}

template <class T>
void write_array(const std::string& path, const std::vector<T>& v) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(T)));
    AQPIM_CHECK(out.good(), "{}: write failed", path);
}

template <class E>
E choice(const std::string& text, std::initializer_list<std::pair<const char*, E>> table) {
    for (const auto& [name, value] : table)
        if (text == name) return value;
    AQPIM_FAIL("unknown choice '{}'", text);
}

RopePairs pairs_of(const std::string& s) {
    return choice<RopePairs>(s, {{"none", RopePairs::none}, {"interleaved", RopePairs::interleaved}, {"neox", RopePairs::neox}});
}

struct PqArgs {
    std::string x, codes, quantizer, plan = "contiguous", pairs = "none", rotation = "none";
    std::int64_t n = 0;
    int d = 0, m = 0, nbits = 4;
    bool scale_folding = false;
    std::uint64_t seed = 1234, kmeans_seed = 1234;
};

void run_pq(const PqArgs& a) {
    PQParams p;
    p.D = a.d;
    p.M = a.m;
    p.nbits = a.nbits;
    p.order = choice<SubspaceOrder>(a.plan, {{"contiguous", SubspaceOrder::contiguous}, {"balanced", SubspaceOrder::variance_balanced}});
    p.pairs = pairs_of(a.pairs);
    p.rotation = choice<Rotation>(a.rotation, {{"none", Rotation::none}, {"hadamard", Rotation::hadamard}, {"random", Rotation::random_orthogonal}});
    p.scale_folding = a.scale_folding;
    p.seed = a.seed;
    p.kmeans.seed = a.kmeans_seed;
    ProductQuantizer pq(p);
    const std::vector<float> x = read_array<float>(a.x, std::size_t(a.n) * a.d);
    pq.train(x.data(), a.n);
    std::vector<std::uint8_t> codes(std::size_t(a.n) * a.m);
    pq.encode(x.data(), a.n, codes.data());
    write_array(a.codes, codes);
    pq.save_file(a.quantizer);
}

struct KvArgs {
    std::string scheme, pairs = "none", k, v, q, out, chunks = "1";
    int layers = 1, kv_heads = 1, head_dim = 0, heads = 1, rows = 1, layer = 0;
    double rope_theta = 0;
    std::int64_t n = 0, context = 0;
};

void run_kv(const KvArgs& a) {
    KvShape shape{a.layers, a.kv_heads, a.head_dim, pairs_of(a.pairs), {}};
    if (a.rope_theta != 0) {
        ModelWeights w;
        w.config.head_dim = a.head_dim;
        w.config.rope_theta = float(a.rope_theta);
        for (double f : rope_inverse_frequencies(w)) shape.rope_inv_freq.push_back(float(f));
    }
    KvCacheOptions o;
    o.context = a.context;
    auto cache = make_kv_cache(parse_kv_scheme(a.scheme), shape, o);
    cache->add_sequence(0);
    const std::size_t row = std::size_t(a.kv_heads) * a.head_dim;
    const std::vector<float> k = read_array<float>(a.k, a.layers * a.n * row), v = read_array<float>(a.v, a.layers * a.n * row);
    std::vector<std::int64_t> chunks;
    std::stringstream ss(a.chunks);
    for (std::string c; std::getline(ss, c, ',');) chunks.push_back(std::stoll(c));
    for (std::int64_t t = 0, i = 0; t < a.n; ++i) {
        const std::int64_t m = std::min(chunks[std::min<std::size_t>(i, chunks.size() - 1)], a.n - t);
        for (int il = 0; il < a.layers; ++il) {
            const std::size_t off = (std::size_t(il) * a.n + t) * row;
            cache->append(il, 0, m, k.data() + off, v.data() + off);
        }
        t += m;
    }
    const std::vector<float> q = read_array<float>(a.q, std::size_t(a.rows) * a.heads * a.head_dim);
    std::vector<float> out(q.size());
    std::vector<std::int64_t> pos(a.rows);
    for (int r = 0; r < a.rows; ++r) pos[r] = a.n - a.rows + r;
    const int group = a.heads / a.kv_heads;
    for (int ih = 0; ih < a.kv_heads; ++ih) {
        KvQuery query;
        query.q = q.data() + ih * group * a.head_dim;
        query.q_stride = std::int64_t(a.heads) * a.head_dim;
        query.n_rows = a.rows;
        query.group = group;
        query.pos = pos.data();
        query.scale = float(1.0 / std::sqrt(double(a.head_dim)));
        query.out = out.data() + ih * group * a.head_dim;
        query.out_stride = query.q_stride;
        cache->attend(a.layer, 0, ih, query);
    }
    write_array(a.out, out);
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"the aqpim library on raw files, for the Python tests"};
    app.require_subcommand(1);
    PqArgs pa;
    auto* pq = app.add_subcommand("pq", "train a product quantizer, write codes and the saved quantizer");
    pq->add_option("--x", pa.x)->required();
    pq->add_option("--n", pa.n)->required();
    pq->add_option("--d", pa.d)->required();
    pq->add_option("--m", pa.m)->required();
    pq->add_option("--nbits", pa.nbits);
    pq->add_option("--plan", pa.plan);
    pq->add_option("--pairs", pa.pairs);
    pq->add_option("--rotation", pa.rotation);
    pq->add_option("--scale-folding", pa.scale_folding);
    pq->add_option("--seed", pa.seed);
    pq->add_option("--kmeans-seed", pa.kmeans_seed);
    pq->add_option("--codes", pa.codes)->required();
    pq->add_option("--quantizer", pa.quantizer)->required();
    pq->callback([&] { run_pq(pa); });
    KvArgs ka;
    auto* kv = app.add_subcommand("kv", "fill a KV cache, write one layer's attention output");
    kv->add_option("--scheme", ka.scheme)->required();
    kv->add_option("--layers", ka.layers);
    kv->add_option("--kv-heads", ka.kv_heads);
    kv->add_option("--head-dim", ka.head_dim)->required();
    kv->add_option("--pairs", ka.pairs);
    kv->add_option("--rope-theta", ka.rope_theta);
    kv->add_option("--context", ka.context);
    kv->add_option("--k", ka.k)->required();
    kv->add_option("--v", ka.v)->required();
    kv->add_option("--n", ka.n)->required();
    kv->add_option("--chunks", ka.chunks);
    kv->add_option("--layer", ka.layer);
    kv->add_option("--q", ka.q)->required();
    kv->add_option("--heads", ka.heads);
    kv->add_option("--rows", ka.rows);
    kv->add_option("--out", ka.out)->required();
    kv->callback([&] { run_kv(ka); });
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    } catch (const aqpim::Error& e) {
        fmt::print(stderr, "aqpim_py_reference: error: {}\n", e.what());
        return 1;
    }
    return 0;
}
