// What the fuzz campaign found (docs/reliability.md "Campaign"), each through the entry point its
// target uses, with the input it found (minimized by hand to what matters) committed under
// tests/data/fuzz/TARGET/ (a fuzz build also replays those files through the fuzz targets
// themselves: FuzzRegression.TARGET, fuzz/CMakeLists.txt). Two were undefined behaviour that only
// the sanitizer build reported; this suite runs them there too.

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "aqpim/byte_io.h"
#include "aqpim/error.h"
#include "aqpim/kv_scheme.h"
#include "aqpim/kv_state.h"
#include "aqpim/kv_trace.h"
#include "aqpim/file_io.h"
#include "support/errors.h"
#include "support/temp_dir.h"

namespace aqpim {
namespace {

std::string committed(const std::string& target, const std::string& name) {
    return std::string(AQPIM_SOURCE_DIR) + "/tests/data/fuzz/" + target + "/" + name;
}

TEST(FuzzFindings, KvTraceIntegerBeyondItsTypeIsAnErrorNotAConversion) {
    // fuzz_kv_trace: a token count of 6.7e21 (nlohmann holds it as a double) went through
    // get<std::int64_t>(), a float-to-integer conversion out of range.
    const std::string found = test::error_of([] { read_kv_trace(committed("kv_trace", "token-count-beyond-int64.jsonl")); });
    EXPECT_NE(found.find(":2:"), std::string::npos) << found;
    const std::string header =
        R"({"format":"aqpim-kv-trace","version":1,"model":"m","scheme":"f16","n_layer":1,"n_head":2,"n_kv_head":1,"head_dim":8})";
    for (const std::string& tokens : {"6666666666666666666663", "3.5", "18446744073709551615", "\"3\""}) {
        const std::string path = test::temp_path("fuzz_trace.jsonl");
        std::ofstream(path) << header << "\n"
                            << R"({"step":0,"layer":0,"seqs":[{"seq":0,"tokens":)" << tokens
                            << R"(,"spans":[[0,3,-1,-1]]}]})" << "\n";
        const std::string e = test::error_of([&] { read_kv_trace(path); });
        EXPECT_NE(e.find(":2:"), std::string::npos) << tokens << ": " << e;
    }
}

TEST(FuzzFindings, ALayerRangeBeyondAnyModelIsRefusedAtOnce) {
    // fuzz_kv_scheme: `f16_layers=...4-922225...` built a 922222-entry list (over 1 s per input).
    const std::string text = read_whole_file(committed("kv_scheme", "f16-layers-range-of-922k"), "fuzz input", 4096);
    EXPECT_EQ(text, "pq:f16_layers=5-222+1+4-922225+3-2322+2");
    const KvSchemeSpec s = parse_kv_scheme(text);
    const std::string e = test::error_of([&] { s.get_int_list("f16_layers"); });
    EXPECT_NE(e.find("bad range '4-922225'"), std::string::npos) << e;
    EXPECT_EQ(parse_kv_scheme("pq:f16_layers=0+2-4").get_int_list("f16_layers"), (std::vector<int>{0, 2, 3, 4}));
}

TEST(FuzzFindings, ReadingZeroElementsIntoAnEmptyBufferIsFine) {
    // fuzz_kv_state: a turbo state with zero f16 rows read them into an empty vector's data()
    // (null): memcpy(nullptr, src, 0) is undefined behaviour.
    const std::vector<std::uint8_t> bytes = {1, 2};
    ByteReader r(bytes, "kv state");
    std::vector<std::uint16_t> none;
    r.u16s(none.data(), 0, "rows");
    EXPECT_EQ(r.u16("after"), 0x0201);
    // The kind of file that found it: a turbo state without f16 rows (window 0), which loads.
    const std::vector<std::uint8_t> state = read_kv_state_file(committed("kv_state", "turbo-zero-f16-rows.kvs"));
    const RestoredKvState restored = load_kv_state(state);
    EXPECT_NE(restored.info.scheme.find("turbo"), std::string::npos) << restored.info.scheme;
    EXPECT_NE(restored.cache, nullptr);
}

}  // namespace
}  // namespace aqpim
