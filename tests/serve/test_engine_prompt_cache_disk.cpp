// The prompt cache's disk tier (--kv-store disk:DIR): a cached sequence that admission drops is
// written to disk, and the next prompt that begins with every token it holds brings it back with
// exactly the tokens of the conversation never dropped; the disk tier's BYTES bound what is kept
// there; another salt, cache_prompt false and an unreadable file prefill anew.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include <fmt/format.h>

#include "serve/prompt_cache_test_util.h"

namespace aqpim {
namespace {

using namespace test::prompt_cache;
namespace fs = std::filesystem;

/// One slot (a second conversation drops the first from memory) and a disk tier in `dir`.
serve::EngineOptions one_slot_on_disk(const std::string& kv, const std::string& dir, std::string bytes = "") {
    serve::EngineOptions o = options(kv, 1);
    o.kv_store = {"disk:" + test::temp_path(dir) + bytes};
    return o;
}

/// The files of the cached sequences on disk below the tier's directory.
std::vector<fs::path> files_on_disk(const std::string& dir) {
    std::vector<fs::path> out;
    for (const auto& e : fs::recursive_directory_iterator(test::temp_path(dir)))
        if (e.is_regular_file() && e.path().parent_path().filename() == "cached") out.push_back(e.path());
    return out;
}

TEST(ServePromptCacheDisk, ADroppedSequenceComesBackFromDiskWithTheTokensOfOneNeverDropped) {
    const LoadedModel& m = test::synth_serve_model();
    const int n_vocab = m.weights.config.n_vocab;
    for (const std::string kv : {"f16", kPq}) {
        const std::vector<std::int32_t> a = test::test_prompt(40, 70, n_vocab), b = test::test_prompt(30, 71, n_vocab);
        const std::vector<std::int32_t> user = words(7, 72);
        serve::Engine e(m.weights, one_slot_on_disk(kv, "disk-tier-" + kv.substr(0, 2)));
        const std::vector<std::int32_t> reply = test::submit_collect(e, greedy(a, 12))->tokens();
        ASSERT_EQ(test::submit_collect(e, greedy(b, 5))->tokens().size(), 5u) << kv;  // a goes to disk for b's slot
        serve::PromptCacheStats st = e.stats().prompt_cache;
        EXPECT_EQ(st.evictions, 1u) << kv;
        EXPECT_EQ(st.disk_writes, 1u) << kv;
        EXPECT_EQ(st.disk_sequences, 1u) << kv;
        EXPECT_GT(st.disk_bytes, 0u) << kv;
        EXPECT_EQ(files_on_disk("disk-tier-" + kv.substr(0, 2)).size(), 1u) << kv;

        auto next = test::submit_collect(e, greedy(joined(joined(a, reply), user), 10));
        const std::vector<std::int32_t> continued = next->tokens();
        EXPECT_EQ(next->final_event().n_prompt_fed, 1 + 7) << kv << ": the 51 tokens a held came back from disk";
        st = e.stats().prompt_cache;
        EXPECT_EQ(st.hits, 1u) << kv;
        EXPECT_EQ(st.disk_hits, 1u) << kv;
        EXPECT_EQ(st.tokens_reused, 51u) << kv;
        EXPECT_EQ(st.disk_writes, 2u) << kv << ": b went to disk in turn";
        EXPECT_EQ(st.disk_sequences, 1u) << kv << ": a left the disk when it came back";

        // The same conversation in an engine with room for both: never dropped, same tokens.
        serve::Engine ref(m.weights, options(kv, 4));
        ASSERT_EQ(test::submit_collect(ref, greedy(a, 12))->tokens(), reply) << kv;
        ASSERT_EQ(test::submit_collect(ref, greedy(b, 5))->tokens().size(), 5u) << kv;
        EXPECT_EQ(test::submit_collect(ref, greedy(joined(joined(a, reply), user), 10))->tokens(), continued) << kv;
        EXPECT_EQ(ref.stats().prompt_cache.disk_hits, 0u) << kv;
    }
}

TEST(ServePromptCacheDisk, TheDiskTiersBytesBoundTheSequencesKeptThere) {
    const LoadedModel& m = test::synth_serve_model();
    const int n_vocab = m.weights.config.n_vocab;
    std::uint64_t one = 0;
    {
        serve::Engine probe(m.weights, one_slot_on_disk("f16", "disk-probe"));
        ASSERT_EQ(test::submit_collect(probe, greedy(test::test_prompt(40, 80, n_vocab), 8))->tokens().size(), 8u);
        ASSERT_EQ(test::submit_collect(probe, greedy(test::test_prompt(40, 81, n_vocab), 8))->tokens().size(), 8u);
        one = probe.stats().prompt_cache.disk_bytes;
        ASSERT_GT(one, 0u);
    }
    // Room for one such sequence on disk, not two.
    serve::Engine e(m.weights, one_slot_on_disk("f16", "disk-bound", ":" + std::to_string(one + one / 2)));
    std::vector<std::vector<std::int32_t>> held;
    for (int i = 0; i < 3; ++i) {
        const std::vector<std::int32_t> p = test::test_prompt(40, 82 + i, n_vocab);
        held.push_back(joined(p, test::submit_collect(e, greedy(p, 8))->tokens()));
    }
    const serve::PromptCacheStats st = e.stats().prompt_cache;
    EXPECT_EQ(st.disk_writes, 2u);
    EXPECT_EQ(st.disk_evictions, 1u) << "the first left the disk for the second";
    EXPECT_EQ(st.disk_sequences, 1u);
    EXPECT_LE(st.disk_bytes, one + one / 2);
    EXPECT_EQ(files_on_disk("disk-bound").size(), 1u);
    auto fed = [&](int i) {
        return test::submit_collect(e, greedy(joined(held[std::size_t(i)], words(3, 90 + i)), 2))->final_event().n_prompt_fed;
    };
    EXPECT_EQ(fed(1), 1 + 3) << "the second came back from disk";
    EXPECT_EQ(e.stats().prompt_cache.disk_write_failures, 1u)
        << "the third, dropped for its slot, had no room beside the second, which that request continued";
    EXPECT_EQ(fed(0), 48 + 3) << "the first is gone";
    EXPECT_EQ(e.stats().prompt_cache.disk_writes, 3u) << "the continued second went to disk for the first's slot";

    // Room for none: dropped, counted, and said once.
    serve::EngineOptions o = one_slot_on_disk("f16", "disk-none", ":" + std::to_string(one / 2));
    std::vector<std::string> warnings;
    o.warn = [&](const std::string& w) { warnings.push_back(w); };
    serve::Engine none(m.weights, o);
    for (int i = 0; i < 2; ++i) test::submit_collect(none, greedy(test::test_prompt(40, 86 + i, n_vocab), 8))->wait();
    EXPECT_EQ(none.stats().prompt_cache.disk_writes, 0u);
    EXPECT_EQ(none.stats().prompt_cache.disk_write_failures, 1u);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("exceed the tier's"), std::string::npos) << warnings[0];
}

TEST(ServePromptCacheDisk, AnotherSaltCachePromptFalseAndAnUnreadableFilePrefillAnew) {
    const LoadedModel& m = test::synth_serve_model();
    const int n_vocab = m.weights.config.n_vocab;
    serve::EngineOptions o = one_slot_on_disk(kPq, "disk-refusals");
    std::vector<std::string> warnings;
    o.warn = [&](const std::string& w) { warnings.push_back(w); };
    serve::Engine e(m.weights, o);
    const std::vector<std::int32_t> a = test::test_prompt(40, 100, n_vocab);
    std::vector<std::int32_t> held = joined(a, test::submit_collect(e, greedy(a, 8))->tokens());
    held.pop_back();  // the last token drawn, never fed
    auto fed = [&](serve::GenerationRequest r) { return test::submit_collect(e, std::move(r))->final_event().n_prompt_fed; };
    ASSERT_EQ(fed(greedy(test::test_prompt(30, 101, n_vocab), 4)), 30);  // a goes to disk
    ASSERT_EQ(e.stats().prompt_cache.disk_sequences, 1u);

    serve::GenerationRequest salted = greedy(joined(held, words(3, 102)), 2);
    salted.cache_salt = "tenant";
    EXPECT_EQ(fed(salted), 47 + 3) << "another salt";
    serve::GenerationRequest off = greedy(joined(held, words(3, 103)), 2);
    off.cache_prompt = false;
    EXPECT_EQ(fed(off), 47 + 3) << "cache_prompt false";
    serve::GenerationRequest scored = greedy(joined(held, words(3, 104)), 2);
    scored.prompt_logprobs = true;
    EXPECT_EQ(fed(scored), 47 + 3) << "prompt scores need every row";
    EXPECT_EQ(e.stats().prompt_cache.disk_hits, 0u);

    // Each of those dropped the one before to disk: a's file is still there. Damage it.
    const std::vector<fs::path> files = files_on_disk("disk-refusals");
    ASSERT_FALSE(files.empty());
    for (const fs::path& f : files) {
        std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
        io.seekp(std::streamoff(fs::file_size(f) / 2));
        io.put('\x5a').put('\xa5').put('\x5a');
    }
    EXPECT_EQ(fed(greedy(joined(held, words(3, 105)), 2)), 47 + 3) << "an unreadable sequence prefills anew";
    EXPECT_EQ(e.stats().prompt_cache.disk_hits, 0u);
    EXPECT_GE(e.stats().store.restore_refused, 1u);
    bool named = false;
    for (const std::string& w : warnings) named = named || w.find("read back from disk") != std::string::npos;
    EXPECT_TRUE(named) << "a warning names the refused sequence";
}

TEST(ServePromptCacheDisk, AStartingServerSweepsOnlyTheDirectoriesOfItsMachinesGoneServers) {
    const LoadedModel& m = test::synth_serve_model();
    const fs::path tier = test::temp_path("disk-sweep");
    std::string host;
    {
        serve::Engine first(m.weights, one_slot_on_disk("f16", "disk-sweep"));
        const std::string own = fmt::format("-{}-", ::getpid());
        for (const auto& d : fs::directory_iterator(tier)) {
            const std::string name = d.path().filename().string();
            if (name.rfind("parked-", 0) == 0 && name.find(own) != std::string::npos)
                host = name.substr(7, name.find(own) - 7);
        }
    }
    ASSERT_FALSE(host.empty()) << "the directory is parked-HOST-PID-NONCE";
    const fs::path gone = tier / ("parked-" + host + "-2147483000-deadbeef");     // no such process
    const fs::path alive = tier / fmt::format("parked-{}-{}-0000beef", host, ::getpid());  // this one
    const fs::path elsewhere = tier / ("parked-" + host + "x-2147483000-deadbeef");  // another machine's
    for (const fs::path& d : {gone, alive, elsewhere}) {
        fs::create_directories(d / "cached");
        std::ofstream(d / "cached" / "cached0.aqkv") << "state";
    }
    serve::Engine second(m.weights, one_slot_on_disk("f16", "disk-sweep"));
    EXPECT_FALSE(fs::exists(gone));
    EXPECT_TRUE(fs::exists(alive / "cached" / "cached0.aqkv"));
    EXPECT_TRUE(fs::exists(elsewhere / "cached" / "cached0.aqkv"));
}

}  // namespace
}  // namespace aqpim
