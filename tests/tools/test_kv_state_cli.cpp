// `aqpim run --save-state / --restore-state` end to end: `run -n 40` equals `run -n 20 --save-state`
// then `run --restore-state -n 20` (text, tokens, sampler, cache), appended prompts, options that
// would change the state refused, hostile files one clear line; `aqpim bench kv-state` runs.

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "aqpim/kv_state.h"
#include "support/cli.h"
#include "support/temp_dir.h"

using aqpim::test::run_cli;
using aqpim::test::shared_path;

// Every command runs on one thread (-t 1): the machine's two cores are shared.

namespace {

const std::string kStories = shared_path("models/stories260K/stories260K.bin");

/// The text `run` printed: between stderr's model line and the blank line before its speed report.
std::string text(const std::string& out) {
    const std::size_t b = out.find('\n') + 1;
    return out.substr(b, out.find("\n\n", b) - b);
}

std::vector<std::uint8_t> file_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string& path, const std::vector<std::uint8_t>& b) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

/// Exit 1 with exactly one line, `aqpim: error: ...` naming `word`.
void expect_one_error_line(const aqpim::test::CliResult& r, const std::string& word) {
    EXPECT_EQ(r.exit_code, 1) << r.output;
    std::size_t errors = 0;
    for (std::size_t at = r.output.find("aqpim: error:"); at != std::string::npos;
         at = r.output.find("aqpim: error:", at + 1))
        ++errors;
    EXPECT_EQ(errors, 1u) << r.output;
    EXPECT_NE(r.output.find(word), std::string::npos) << "wanted '" << word << "' in:\n" << r.output;
    EXPECT_EQ(r.output.find("model:"), std::string::npos) << "the file is checked before the model loads:\n" << r.output;
}

}  // namespace

TEST(KvStateCli, RunFortyEqualsTwentySavedThenTwentyRestored) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    // pq with calibration at 16 tokens and a window of 4: codebooks train during the first half and a
    // refresh version during the second; ctx= states the context so both runs build the same cache.
    for (const std::string kv : {"pq:calib=16,window=4,refresh=32,page=32,ctx=256", "f16", "kivi2:g=8,window=8"}) {
        SCOPED_TRACE(kv);
        const std::string base = "-t 1 run -m " + kStories + " -p 'Once upon a time' --temp 0.8 --seed 11 --kv '" + kv + "'";
        const std::string a = aqpim::test::temp_path("a.aqkv"), b = aqpim::test::temp_path("b.aqkv"),
                          c = aqpim::test::temp_path("c.aqkv");
        const auto whole = run_cli(base + " -n 40 --save-state " + a);
        ASSERT_EQ(whole.exit_code, 0) << whole.output;
        const auto first = run_cli(base + " -n 20 --save-state " + b);
        ASSERT_EQ(first.exit_code, 0) << first.output;
        const auto second = run_cli("-t 1 run -m " + kStories + " --restore-state " + b + " -n 20 --save-state " + c);
        ASSERT_EQ(second.exit_code, 0) << second.output;
        EXPECT_EQ(text(whole.output), text(first.output) + text(second.output)) << whole.output << second.output;
        EXPECT_GT(text(second.output).size(), 20u);
        const aqpim::KvStateInfo wa = aqpim::read_kv_state_info(file_bytes(a)),
                                 wc = aqpim::read_kv_state_info(file_bytes(c));
        EXPECT_EQ(wc.slot.tokens, wa.slot.tokens);
        EXPECT_EQ(wc.slot.n_cached, wa.slot.n_cached);
        ASSERT_TRUE(wa.slot.sampler && wc.slot.sampler);
        EXPECT_TRUE(*wa.slot.sampler == *wc.slot.sampler);
        // The caches hold the same bytes.
        const auto fa = file_bytes(a), fc = file_bytes(c);
        EXPECT_EQ(std::vector<std::uint8_t>(fa.begin() + wa.cache_offset, fa.begin() + wa.cache_offset + wa.cache_bytes),
                  std::vector<std::uint8_t>(fc.begin() + wc.cache_offset, fc.begin() + wc.cache_offset + wc.cache_bytes));
    }
}

TEST(KvStateCli, APromptIsAppendedTextAndStateOptionsCannotChange) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    const std::string s = aqpim::test::temp_path("p.aqkv"), t = aqpim::test::temp_path("p2.aqkv");
    ASSERT_EQ(run_cli("-t 1 run -m " + kStories + " -p 'Once upon a time' -n 0 --kv q8_0 --save-state " + s).exit_code, 1)
        << "q8_0 needs head_dim 32; stories260K has 8";
    const auto made = run_cli("-t 1 run -m " + kStories + " -p 'Once upon a time' -n 0 --kv int4:g=8 --save-state " + s);
    ASSERT_EQ(made.exit_code, 0) << made.output;
    const aqpim::KvStateInfo prefilled = aqpim::read_kv_state_info(file_bytes(s));
    EXPECT_EQ(prefilled.slot.n_cached, std::int64_t(prefilled.slot.tokens.size()));  // -n 0: everything fed
    // Nothing waits to be fed: continuing needs text.
    const auto nothing = run_cli("-t 1 run -m " + kStories + " --restore-state " + s + " -n 5");
    EXPECT_EQ(nothing.exit_code, 1);
    EXPECT_NE(nothing.output.find("give -p"), std::string::npos) << nothing.output;
    const auto more = run_cli("-t 1 run -m " + kStories + " --restore-state " + s + " -p ' there was' -n 8 --save-state " + t);
    ASSERT_EQ(more.exit_code, 0) << more.output;
    EXPECT_EQ(text(more.output).rfind(" there was", 0), 0u) << more.output;
    const aqpim::KvStateInfo appended = aqpim::read_kv_state_info(file_bytes(t));
    ASSERT_GT(appended.slot.tokens.size(), prefilled.slot.tokens.size() + 8);
    EXPECT_TRUE(std::equal(prefilled.slot.tokens.begin(), prefilled.slot.tokens.end(), appended.slot.tokens.begin()));
    // Options that would change what the state continues are refused; the same values are fine.
    const std::string restore = "-t 1 run -m " + kStories + " --restore-state " + s + " -p ' x' -n 2";
    for (const auto& [flag, word] : {std::pair{" --kv f16", "not f16"}, std::pair{" --temp 0.5", "--temp"},
                                     std::pair{" --seed 9", "--seed"}, std::pair{" --top-p 0.5", "--top-p"}}) {
        const auto r = run_cli(restore + flag);
        EXPECT_EQ(r.exit_code, 1) << flag;
        EXPECT_NE(r.output.find(word), std::string::npos) << r.output;
    }
    EXPECT_EQ(run_cli(restore + " --kv int4:g=8 --temp 0.8 --seed 42").exit_code, 0);
}

TEST(KvStateCli, HostileFilesGiveOneErrorLine) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    AQPIM_REQUIRE_SHARED("models/tinystories-656k/model.safetensors");
    const std::string good = aqpim::test::temp_path("good.aqkv"), bad = aqpim::test::temp_path("bad.aqkv");
    ASSERT_EQ(run_cli("-t 1 run -m " + kStories + " -p 'Once' -n 12 --kv pq:calib=8,window=2 --save-state " + good).exit_code, 0);
    const std::vector<std::uint8_t> bytes = file_bytes(good);
    const std::string restore = "-t 1 run -m " + kStories + " --restore-state " + bad + " -n 4";
    write_bytes(bad, std::vector<std::uint8_t>(bytes.begin(), bytes.begin() + long(bytes.size() / 2)));
    expect_one_error_line(run_cli(restore), "truncated");
    std::vector<std::uint8_t> flipped = bytes;
    flipped[flipped.size() / 3] ^= 0x10;
    write_bytes(bad, flipped);
    expect_one_error_line(run_cli(restore), "checksum");
    write_bytes(bad, {'n', 'o', 't', ' ', 'a', ' ', 's', 't', 'a', 't', 'e', '\n'});
    expect_one_error_line(run_cli(restore), "kv state");
    expect_one_error_line(run_cli("-t 1 run -m " + kStories + " --restore-state " + aqpim::test::temp_path("none") + " -n 1"),
                          "--restore-state");
    // Another model: its line is printed (it has to load to be compared), then one error line.
    const auto other = run_cli("-t 1 run -m " + shared_path("models/tinystories-656k") + " --restore-state " + good + " -n 4");
    EXPECT_EQ(other.exit_code, 1) << other.output;
    EXPECT_NE(other.output.find("aqpim: error: --restore-state " + good + ": kv state: saved for model"),
              std::string::npos)
        << other.output;
    // --save-state onto the model is refused before any work.
    expect_one_error_line(run_cli("-t 1 run -m " + kStories + " -n 1 --save-state " + kStories), "--save-state");
}

TEST(KvStateCli, BenchReportsBytesBesideMemoryAndTimes) {
    AQPIM_REQUIRE_SHARED("models/stories260K/stories260K.bin");
    const auto r = run_cli("-t 1 bench kv-state -m " + kStories + " --tokens 64 --kv 'f16;pq:calib=32,window=8' --min-seconds 0 --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* want : {"\"state_bytes\"", "\"memory_bytes\"", "\"restore_ms\"", "\"memcpy_mb_per_s\"",
                             "pq:m=4,calib=32,window=8", "model identity"})
        EXPECT_NE(r.output.find(want), std::string::npos) << want << "\n" << r.output;
}
