#pragma once
// Decode traces: what a real run's KV cache held at every decode step, per layer and sequence
// (positions, which runs are coded by which codebook version in which page, which are f16), written
// by `aqpim run --trace FILE` and replayed by `aqpim pimsim --kv-trace FILE`. Format (JSON lines) in
// docs/pimsim.md "KV trace".

#include <cstdint>
#include <string>
#include <vector>

#include "aqpim/file_io.h"
#include "aqpim/kv_cache.h"

namespace aqpim {

struct KvTraceSequence {
    int seq = 0;
    std::int64_t tokens = 0;        ///< tokens stored in the layer before the step's token
    std::vector<KvSpan> spans;
};

struct KvTraceRecord {
    std::int64_t step = 0;          ///< decode step (0 = the first token after the prompt)
    int layer = 0;
    std::vector<KvTraceSequence> seqs;
};

struct KvTrace {
    std::string model, scheme;
    int n_layer = 0, n_head = 0, n_kv_head = 0, head_dim = 0;
    std::vector<KvTraceRecord> records;
    std::int64_t last_step() const { return records.empty() ? -1 : records.back().step; }
};

class KvTraceWriter {
public:
    /// Open `path` and write the header line. n_head: query heads of the model (GQA group = n_head / n_kv_head).
    KvTraceWriter(const std::string& path, const KvCache& cache, const std::string& model, int n_head);
    /// One line per layer: the layout of every listed sequence now, before decode step `step` appends.
    void record(std::int64_t step, const std::vector<int>& seq_ids);
    /// Put the complete trace under its name (until then it is a temporary file beside it, removed
    /// if the run fails).
    void finish() { out_.commit(); }

private:
    const KvCache& cache_;
    OutputFile out_;
};

/// Read a trace; malformed input is an aqpim::Error naming the file and line.
KvTrace read_kv_trace(const std::string& path);

}  // namespace aqpim
