// Preset loader: the format rules of include/aqpim/preset.h, each violated once.

#include <gtest/gtest.h>

#include <string>

#include "aqpim/error.h"
#include "aqpim/preset.h"

namespace aqpim {
namespace {

const char* kGood = R"({
  "kind": "device", "name": "toy", "description": "a toy",
  "bandwidth": {"value": 2e12, "unit": "B/s", "source": "made up"},
  "timing": {"nCL": {"value": 14, "source": "JESD"}, "tCK": {"value": 0.5, "unit": "ns", "source": "JESD"}},
  "pim": true, "names": ["a", "b"]
})";

std::string error_of(const std::string& text) {
    try {
        Preset::parse(text, "toy.json");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(Preset, ReadsFieldsGroupsAndSources) {
    Preset p = Preset::parse(kGood, "toy.json");
    EXPECT_EQ(p.kind(), "device");
    EXPECT_EQ(p.name(), "toy");
    EXPECT_DOUBLE_EQ(p.number("bandwidth"), 2e12);
    EXPECT_EQ(p.unit("bandwidth"), "B/s");
    EXPECT_EQ(p.source("timing.nCL"), "JESD");
    EXPECT_EQ(p.count("timing.nCL"), 14);
    EXPECT_TRUE(p.flag("pim", false));
    Preset t = p.group("timing");
    EXPECT_DOUBLE_EQ(t.positive("tCK"), 0.5);
    EXPECT_EQ(t.members(), (std::vector<std::string>{"nCL", "tCK"}));
    EXPECT_FALSE(p.optional_number("missing").has_value());
}

TEST(Preset, ErrorsNameTheFileAndField) {
    Preset p = Preset::parse(kGood, "toy.json");
    try {
        p.group("timing").number("nRCD");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("toy.json: field timing.nRCD: missing"), std::string::npos) << e.what();
    }
    EXPECT_THROW(p.count("timing.tCK"), Error);  // 0.5 is not a whole number
    EXPECT_THROW(p.text("bandwidth"), Error);
}

TEST(Preset, RejectsNumbersWithoutSourceOrValue) {
    EXPECT_NE(error_of(R"({"kind":"d","name":"x","bw": 3})").find("field bw: a bare number"), std::string::npos);
    EXPECT_NE(error_of(R"({"kind":"d","name":"x","bw": {"value": 3}})").find("field bw: no \"source\""), std::string::npos);
    EXPECT_NE(error_of(R"({"kind":"d","name":"x","g": {"bw": {"value": 3, "source": ""}}})").find("g.bw"), std::string::npos);
    EXPECT_NE(error_of(R"({"kind":"d","name":"x","bw": {"value": "3", "source": "s"}})").find("not a number"), std::string::npos);
    EXPECT_NE(error_of(R"({"kind":"d","name":"x","bw": {"value": 3, "source": "s", "vlaue": 4}})").find("unknown key"), std::string::npos);
    EXPECT_NE(error_of(R"({"name":"x"})").find("field kind: missing"), std::string::npos);
    EXPECT_NE(error_of("{\"kind\": ").find("not valid JSON"), std::string::npos);
    EXPECT_NE(error_of("[1]").find("JSON object"), std::string::npos);
}

TEST(Preset, NegativeAndZeroAreRefusedWhereTheyMakeNoSense) {
    Preset p = Preset::parse(R"({"kind":"d","name":"x","a": {"value": -1, "source": "s"}, "z": {"value": 0, "source": "s"}})", "x.json");
    EXPECT_THROW(p.nonnegative("a"), Error);
    EXPECT_THROW(p.positive("z"), Error);
    EXPECT_DOUBLE_EQ(p.nonnegative("z"), 0.0);
}

TEST(Preset, UnknownNameListsKnownOnes) {
    try {
        find_preset("no-such-kind", "nothing");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("unknown no-such-kind preset \"nothing\""), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace aqpim
