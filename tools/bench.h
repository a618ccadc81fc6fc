#pragma once
// Benchmarks behind `aqpim bench pq`. Each section measures its subject and its baseline in the
// same process and returns rows; the command prints them as a table, or as JSON with --json.

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "store/prefix_store.h"

namespace aqpim {
class ProductQuantizer;
}

namespace aqpim::cli {

/// One aligned table per "section" of the rows (tools/cmd_bench.cpp).
void print_bench_tables(const nlohmann::ordered_json& rows);

struct BenchOptions {
    bool quick = false;      ///< smaller sizes, fewer repetitions (smoke runs, CI)
    int max_threads = 2;     ///< figures are taken at 1 thread and, if > 1, at max_threads
    std::uint64_t seed = 42;
};

/// k-means: aqpim kmeans_batch vs faiss k-means (same problems, one thread, same iteration
/// count) - time, total SSE, ratios; whole-model codebook training (32 layers x 8 KV heads x
/// {K,V} x M=32, 4-bit, 256 calibration tokens).
nlohmann::ordered_json bench_kmeans(const BenchOptions& opt);
/// PQ encode throughput (sub-vectors/s) for 4- and 8-bit codes.
nlohmann::ordered_json bench_encode(const BenchOptions& opt);

/// Read bandwidth of one and of all threads over a cold arena: the roofline for what follows.
nlohmann::ordered_json bench_bandwidth(const BenchOptions& opt);
/// Score scan alone (exact f32 tables and int8 tables), tokens/s and bytes/s, in cache and cold.
nlohmann::ordered_json bench_scan(const BenchOptions& opt);
/// Error of the int8-table scan against exact float tables (measured vs the M * scale / 2 bound).
nlohmann::ordered_json bench_int8_error(const BenchOptions& opt);
/// Value side alone: histogram path vs register-permute path, per SIMD level.
nlohmann::ordered_json bench_values(const BenchOptions& opt);
/// A D = 128 quantizer trained on uniform noise (codes are random: for timing only).
ProductQuantizer bench_pq(int M, int nbits, std::uint64_t seed);
/// One attention call on codes cut into its stages (GQA 4, D = 128, M = 32, 4-bit): per-tile
/// stages in ns/token, per-call ones in us, beside the whole call in the same run.
nlohmann::ordered_json bench_stages(const BenchOptions& opt);
/// GQA-group attention (4 query heads, D = 128): PQ vs dense f32 and f16, in cache and cold,
/// one and two threads.
nlohmann::ordered_json bench_attention(const BenchOptions& opt);

struct DecodeBenchOptions {
    std::string model;
    int prompt_tokens = 128;
    int decode_tokens = 32;
    bool quick = false;  ///< a smaller cold arena for the roof (smoke runs)
    // KV-dominated mode (bench_kv_decode), when contexts are given:
    std::vector<std::int64_t> contexts;  ///< tokens per sequence before the timed steps
    std::vector<int> batches{1};         ///< sequences advanced together by each step
    std::string kv = "f16;pq";           ///< schemes; the first is the baseline of the ratio
    bool batch_invariant = false;        ///< decode as the server does (Transformer::set_batch_invariant)
    /// Fill and time one scheme after another (peak memory: the largest cache) instead of holding
    /// every scheme's cache and interleaving their timed steps (peak: the sum; robust ratios).
    bool sequential = false;
};
/// Prefill tokens/s and GFLOP/s; decode tokens/s, GB/s of weights + KV read, and the fraction of
/// the streaming-read roof measured in the same run.
nlohmann::ordered_json bench_decode(const DecodeBenchOptions& opt);
/// Decode tokens/s per scheme at each (batch, context) with caches filled by generated K/V, and the
/// ratio to the first scheme.
nlohmann::ordered_json bench_kv_decode(const DecodeBenchOptions& opt);

struct ServeBenchOptions {
    std::string model;
    std::string kv = "f16;q8_0;q4_0;pq;pq:refresh=0,bits=2,cb=f16,wq=q8_0,window=128";  ///< the first is the baseline
    std::uint64_t kv_budget_bytes = 64ULL << 20;
    int prompt_tokens = 960;
    int output_tokens = 64;
    int clients = 0;        ///< concurrent clients (0: as many as the scheme fits)
    /// Requests per client. The first round starts every client at once (one wave of prefills,
    /// then of decodes); later rounds are staggered as a server's load is. On austen-13m one
    /// round measured f16 at 0.70-0.93x and pq:bits=2 at 1.05-1.19x of their 4-round rates.
    int rounds = 4;
    /// Requests per scheme in all (0: clients x rounds): every scheme serves the same number,
    /// handed to whichever client finishes, so a scheme that fits few sequences runs about as long
    /// as one that fits many (one that finished in seconds measured this VM's noise more than itself).
    int requests = 0;
    int prefill_chunk = 256;
    /// Runs of every scheme, alternating the order (forward, backward, ...); each row sums its
    /// scheme's passes and gives the lowest and highest ratio to the baseline of one pass.
    int passes = 1;
    /// Turns of each client's conversation (`--rounds` conversations per client): a later turn's
    /// prompt is the turn before's prompt and output and `turn_tokens` new tokens. With more than
    /// one, every scheme runs with the prompt cache off and on (EngineOptions::cache_prompt).
    int turns = 1;
    int turn_tokens = 64;
    /// With turns: a `disk:DIR[:BYTES]` tier (`--kv-store`); every scheme also runs with the prompt
    /// cache on and this tier (each run in a fresh directory below DIR, removed after it), so that
    /// the sequences the cache drops go to disk and come back.
    std::string disk_tier;
};
/// The serving engine under a closed-loop load per scheme: sequences that fit, output tokens/s,
/// TTFT and TPOT p50/p99, KV bytes per sequence, ratios to the first scheme.
nlohmann::ordered_json bench_serve(const ServeBenchOptions& opt);

struct StoreBenchOptions {
    std::string model;
    std::string kv = "f16;q8_0;pq;pq:bits=2";  ///< the first is the baseline
    std::vector<std::string> kv_store;          ///< tiers: each measured alone for TTFT, all in order for the workload
    std::uint64_t kv_budget_bytes = 1ULL << 30;
    int prefix_tokens = 4096;           ///< the shared prefix of the TTFT section
    int suffix_tokens = 64;             ///< each request's own tokens after it
    int block_tokens = store::kDefaultBlockTokens;
    int tail_every = store::kDefaultTailEvery;  ///< a block's tail stored every this many blocks
    int prefill_chunk = 256;
    int repeats = 3;                    ///< TTFT samples per tier (median)
    int workload_prefix_tokens = 1024;  ///< the system prompts of the workload section
    int workload_suffix_tokens = 512;   ///< each workload request's own tokens after its system prompt
    int shared_prefixes = 4;            ///< how many system prompts the workload draws from
    int requests = 24;                  ///< requests of the workload
    int clients = 4;                    ///< concurrent clients of the workload
    int output_tokens = 16;             ///< tokens generated per workload request
};
/// `bench serve --kv-store`: per scheme, bytes per 1K tokens of blocks stored and transferred
/// (with each tier's own accounting), TTFT for a shared prefix fresh and on a hit in each tier, and
/// hit rates and throughput under many requests sharing a few system prompts (docs/kv-store.md).
nlohmann::ordered_json bench_serve_store(const StoreBenchOptions& opt);

}  // namespace aqpim::cli
