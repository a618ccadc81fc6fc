// The table of pq keys: docs/kv-pq.md carries the listing it generates (`aqpim info --pq-keys`), and
// every key it lists parses and prints back.

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "aqpim/kv_pq.h"
#include "aqpim/kv_scheme.h"

using namespace aqpim;

TEST(PqKeys, TheDocsCarryTheGeneratedListing) {
    std::ifstream in(std::string(AQPIM_SOURCE_DIR) + "/docs/kv-pq.md");
    ASSERT_TRUE(in) << "docs/kv-pq.md";
    std::stringstream doc;
    doc << in.rdbuf();
    EXPECT_NE(doc.str().find(PqKvParams::key_listing()), std::string::npos)
        << "docs/kv-pq.md lacks the output of `aqpim info --pq-keys`:\n" << PqKvParams::key_listing();
}

TEST(PqKeys, EveryListedKeyIsAcceptedAndPrintedBack) {
    const KvShape shape{4, 2, 128, RopePairs::interleaved};
    const std::string listing = PqKvParams::key_listing();
    for (const std::string& key : PqKvParams::keys()) EXPECT_NE(listing.find("| `" + key + "` |"), std::string::npos) << key;
    // A value other than the default for a sample of keys of every type comes back in the canonical text.
    for (const std::string spec : {"pq:m=16", "pq:k_scale=0", "pq:wq=int4", "pq:f16_layers=1+2", "pq:v_weight=2", "pq:aniso=8",
                                   "pq:pairs=neox", "pq:aug=0", "pq:seed=7", "pq:bits=3"})
        EXPECT_EQ(PqKvParams::from_spec(parse_kv_scheme(spec), shape).to_string(), spec);
}
