// `aqpim run --save-state / --restore-state`.

#include "run_state.h"

#include <fmt/format.h>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/generate.h"
#include "aqpim/kv_scheme.h"

namespace aqpim::cli {

namespace {

/// The state file's bytes, every error naming the option and the file.
template <class F>
auto with_state_file(const std::string& path, F&& f) {
    try {
        return f();
    } catch (const Error& e) {
        AQPIM_FAIL("--restore-state {}: {}", path, e.what());
    }
}

/// A sampling option given on the command line must agree with the state's sampler.
template <class T>
void check_same(const CLI::App& cmd, const char* flag, T given, T saved) {
    AQPIM_CHECK(cmd.count(flag) == 0 || given == saved,
                "--restore-state: the state continues its own sampler ({} {}); {} {} would change it", flag, saved, flag,
                given);
}

}  // namespace

void add_run_state_options(CLI::App* cmd, RunStateOptions& opts) {
    cmd->add_option("--save-state", opts.save,
                    "after generating, save sequence 0 with its tokens and sampler to this file (docs/kv-state.md)");
    cmd->add_option("--restore-state", opts.restore,
                    "continue a state --save-state wrote (same -m; --kv and sampling come from the file; -p appends text)");
}

void check_run_state_files(const RunStateOptions& opts, const ModelOptions& model) {
    if (!opts.save.empty()) check_output_not_input(opts.save, {model.model, model.tokenizer}, "--save-state");
    if (!opts.restore.empty())
        with_state_file(opts.restore, [&] { return read_kv_state_info(read_kv_state_file(opts.restore)); });
}

RunSequence start_run_sequence(const RunStateOptions& opts, const CLI::App& cmd, const ModelOptions& model_opts,
                               const LoadedModel& model, const Transformer& transformer,
                               const std::vector<std::int32_t>& prompt, const GenerateOptions& gen) {
    RunSequence seq;
    if (!opts.save.empty() || !opts.restore.empty()) seq.model = model_identity(model.weights);
    const KvShape shape = transformer.kv_shape();
    if (opts.restore.empty()) {
        seq.context = std::int64_t(prompt.size()) + gen.n_predict;
        seq.cache = make_cli_kv_cache(model_opts, shape, seq.context);
        seq.cache->add_sequence(0);
        seq.slot.tokens = prompt;
        seq.sampler.emplace(gen.sampler);
        return seq;
    }
    RestoredKvState r = with_state_file(opts.restore, [&] {
        return load_kv_state(read_kv_state_file(opts.restore), {&*seq.model, &shape, 0});
    });
    seq.cache = std::move(r.cache);
    seq.slot = std::move(r.info.slot);
    seq.context = r.info.context;
    if (cmd.count("--kv") != 0) {
        const std::string given = make_kv_cache(parse_kv_scheme(model_opts.kv), shape, {0, seq.context})->scheme();
        AQPIM_CHECK(given == seq.cache->scheme(), "--restore-state: the state's cache is --kv {}, not {}",
                    seq.cache->scheme(), given);
    }
    AQPIM_CHECK(seq.slot.sampler, "--restore-state {}: the state holds no sampler to continue with", opts.restore);
    const SamplerParams& saved = seq.slot.sampler->params;
    check_same(cmd, "--temp", gen.sampler.temperature, saved.temperature);
    check_same(cmd, "--top-p", gen.sampler.top_p, saved.top_p);
    check_same(cmd, "--seed", gen.sampler.seed, saved.seed);
    seq.sampler.emplace(*seq.slot.sampler);
    AQPIM_CHECK(!seq.slot.tokens.empty(), "--restore-state {}: the state holds no token ids to continue",
                opts.restore);
    seq.slot.tokens.insert(seq.slot.tokens.end(), prompt.begin(), prompt.end());
    AQPIM_CHECK(seq.slot.n_cached < std::int64_t(seq.slot.tokens.size()),
                "--restore-state {}: every token of the state is in its cache (saved after -n 0?): give -p with text to "
                "append",
                opts.restore);
    return seq;
}

void finish_run_sequence(const RunStateOptions& opts, RunSequence& seq) {
    if (opts.save.empty()) return;
    seq.slot.sampler = seq.sampler->state();
    save_kv_state_file(opts.save, *seq.cache, 0, seq.slot, *seq.model, seq.context);
}

}  // namespace aqpim::cli
