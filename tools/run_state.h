#pragma once
// `aqpim run --save-state / --restore-state` (docs/kv-state.md): where a run's sequence comes from
// (a prompt, or a saved state continued) and where it goes.

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aqpim/generate.h"
#include "aqpim/kv_state.h"
#include "aqpim/sampler.h"
#include "aqpim/transformer.h"
#include "model_options.h"

namespace aqpim::cli {

struct RunStateOptions {
    std::string save, restore;  ///< --save-state FILE, --restore-state FILE
};

/// The sequence a run continues: a fresh prompt, or a restored state with the prompt appended.
struct RunSequence {
    std::unique_ptr<KvCache> cache;  ///< holding sequence 0
    SlotState slot;
    std::optional<Sampler> sampler;
    std::int64_t context = 0;        ///< KvCacheOptions::context of the cache
    std::optional<ModelIdentity> model;  ///< computed when a state is read or written
};

void add_run_state_options(CLI::App* cmd, RunStateOptions& opts);
/// Check what can be checked before the model loads (a state file's header and checksum, the
/// output path), so a bad file fails before the work.
void check_run_state_files(const RunStateOptions& opts, const ModelOptions& model);
/// For --restore-state: the state restored, `prompt` (tokens without BOS) appended, the sampler from
/// the file. -p/--kv/--temp/--top-p/--seed given on `cmd` must agree with the file (else
/// aqpim::Error). Without it: a new cache and sequence for `prompt` (BOS included).
RunSequence start_run_sequence(const RunStateOptions& opts, const CLI::App& cmd, const ModelOptions& model_opts,
                               const LoadedModel& model, const Transformer& transformer,
                               const std::vector<std::int32_t>& prompt, const GenerateOptions& gen);
/// For --save-state: sequence 0 with its tokens and the sampler.
void finish_run_sequence(const RunStateOptions& opts, RunSequence& seq);

}  // namespace aqpim::cli
