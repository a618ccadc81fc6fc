// Slot save / restore: a sequence saved after N tokens, restored (into another slot too) and
// continued for N more gives exactly the 2N tokens of one uninterrupted request. A parked sequence
// whose spill to disk failed is tried again.

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <thread>

#include "aqpim/error.h"
#include "aqpim/model.h"
#include "serve/prompt_cache_test_util.h"
#include "support/shared_data.h"

namespace aqpim {
namespace {

constexpr const char* kModel = "models/austen-13m/austen-13m-f16.gguf";

void check_restore_continues(const std::string& kv) {
    const LoadedModel m = load_model(test::shared_path(kModel));
    serve::EngineOptions o;
    o.kv = kv;
    o.ctx = 256;
    o.parallel = 3;
    serve::GenerationRequest r;
    r.prompt = test::test_prompt(40, 3, m.weights.config.n_vocab);
    r.sampler.temperature = 0.8f;
    r.sampler.seed = 77;
    r.max_tokens = 24;
    r.cache_prompt = false;  // no sequence kept but the parked one
    serve::Engine e(m.weights, o);
    const std::vector<std::int32_t> whole = test::submit_collect(e, r)->tokens();
    ASSERT_EQ(whole.size(), 24u);

    r.max_tokens = 12;
    r.park = true;
    const std::vector<std::int32_t> first = test::submit_collect(e, r)->tokens();
    ASSERT_EQ(e.slots()[0].phase, serve::SlotPhase::parked);
    const std::string path = (std::filesystem::temp_directory_path() / ("aqpim-serve-slot-" + std::to_string(::getpid()))).string();
    e.save_slot(0, path);
    const std::uint64_t parked = e.stats().kv_bytes_reserved;
    e.release_slot(0);
    EXPECT_LT(e.stats().kv_bytes_reserved, parked);
    EXPECT_EQ(e.stats().pages_in_use, 0);
    EXPECT_THROW(e.save_slot(0, path + ".x"), Error);  // idle
    e.restore_slot(2, path);
    EXPECT_EQ(e.slots()[2].phase, serve::SlotPhase::parked);
    std::filesystem::remove(path);

    serve::GenerationRequest more;
    more.resume_slot = 2;
    more.max_tokens = 12;
    more.sampler.seed = 999;  // ignored: the saved sampler continues
    more.cache_prompt = false;
    auto c = test::submit_collect(e, more);
    std::vector<std::int32_t> joined = first;
    for (std::int32_t t : c->tokens()) joined.push_back(t);
    EXPECT_EQ(joined, whole) << kv;
    EXPECT_EQ(c->final_event().finish, serve::FinishReason::length);
    EXPECT_EQ(e.stats().pages_in_use, 0);
    EXPECT_EQ(e.slots()[2].phase, serve::SlotPhase::idle);
}

TEST(ServeSlots, SaveRestoreContinuesExactlyPq) {
    AQPIM_REQUIRE_SHARED(kModel);
    check_restore_continues("pq:calib=32,refresh=0,window=8,sinks=4");
}

TEST(ServeSlots, SaveRestoreContinuesExactlyF16) {
    AQPIM_REQUIRE_SHARED(kModel);
    check_restore_continues("f16");
}

TEST(ServeSlots, AParkedSequenceWhoseSpillFailedIsTriedAgain) {
    namespace fs = std::filesystem;
    using namespace test::prompt_cache;
    const LoadedModel& m = test::synth_serve_model();
    serve::EngineOptions o = options("f16", 2);
    const fs::path tier = test::temp_path("spill-retry");
    o.kv_store = {"disk:" + tier.string()};
    o.cache_prompt = false;
    {
        const serve::Engine probe(m.weights, o);
        o.kv_budget_bytes = probe.stats().kv_bytes_used + probe.reservation_bytes(300);
    }
    std::vector<std::string> warnings;
    std::mutex warn_mu;
    o.warn = [&](const std::string& w) {
        std::lock_guard<std::mutex> lk(warn_mu);
        warnings.push_back(w);
    };
    serve::Engine e(m.weights, o);
    serve::GenerationRequest parked = greedy(test::test_prompt(200, 90, m.weights.config.n_vocab), 50);
    parked.park = true;
    ASSERT_EQ(test::submit_collect(e, parked)->final_event().finish, serve::FinishReason::length);
    // The parked sequences' directory gone: the spill the next request needs fails.
    fs::path dir;
    for (const auto& d : fs::directory_iterator(tier))
        if (d.path().filename().string().rfind("parked-", 0) == 0) dir = d.path();
    ASSERT_FALSE(dir.empty());
    fs::remove_all(dir);
    auto next = test::submit_collect(e, greedy(test::test_prompt(100, 91, m.weights.config.n_vocab), 100));
    for (int i = 0; i < 200 && [&] {
             std::lock_guard<std::mutex> lk(warn_mu);
             return warnings.empty();
         }();
         ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    {
        std::lock_guard<std::mutex> lk(warn_mu);
        ASSERT_FALSE(warnings.empty()) << "the spill was tried and failed";
    }
    EXPECT_EQ(e.slots()[0].phase, serve::SlotPhase::parked);
    fs::create_directories(dir);  // room on disk again: the next try goes through
    std::unique_lock<std::mutex> lk(next->mu);
    ASSERT_TRUE(next->cv.wait_for(lk, std::chrono::seconds(30), [&] { return next->done; }))
        << "the request waited for ever on a spill that could now succeed";
    lk.unlock();
    EXPECT_EQ(next->final_event().finish, serve::FinishReason::length);
    EXPECT_EQ(e.stats().store.spills, 1u);
    EXPECT_EQ(e.slots()[0].phase, serve::SlotPhase::spilled);
}

}  // namespace
}  // namespace aqpim
