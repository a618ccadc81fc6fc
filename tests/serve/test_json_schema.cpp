// Structured outputs' schema compiler and recognizer (serve/json_schema.h): what each keyword
// admits byte by byte, what the compiler refuses and where, texts drawn at random from what the
// recognizer admits are valid JSON that a separate validator accepts, and the token mask over a
// schema equals trying every token's whole text.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "serve/json_mask_test_util.h"
#include "serve/json_schema_test_util.h"
#include "serve/json_schema.h"

namespace aqpim {
namespace {

using Json = nlohmann::ordered_json;
using serve::JsonSchema;
using serve::JsonSchemaError;
using serve::JsonSchemaPrefix;

using test::first_refused;
using test::whole;

const Json kPerson = Json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 8},
    "age": {"type": "integer"},
    "colour": {"enum": ["red", "green", 7, null]},
    "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
    "ok": {"type": "boolean"}
  },
  "required": ["name", "tags"],
  "additionalProperties": false
})");

TEST(JsonSchema, PropertiesComeInOrderRequiredOnesPresent) {
    const JsonSchema s(kPerson);
    EXPECT_TRUE(whole(s, R"({"name":"Ann","age":31,"colour":"red","tags":["a"],"ok":true})"));
    EXPECT_TRUE(whole(s, R"({"name":"Ann","tags":["a","b"]})")) << "optional ones skipped";
    EXPECT_TRUE(whole(s, "{ \"name\": \"Ann\",\n  \"colour\": null, \"tags\": [ \"x\" ] }"));
    const std::string swapped = R"({"tags":["a"],"name":"Ann"})";
    EXPECT_EQ(first_refused(s, swapped), 2u) << "\"name\" is required first: \"t\" starts no allowed key";
    const std::string missing = R"({"name":"Ann"})";
    EXPECT_EQ(first_refused(s, missing), missing.size() - 1) << "'}' before the required tags";
    const std::string extra = R"({"name":"Ann","tags":["a"],"zip":1})";
    EXPECT_EQ(first_refused(s, extra), extra.find("zip")) << "no key is left after tags but ok";
    const std::string twice = R"({"name":"Ann","name":"Bo"})";
    EXPECT_EQ(first_refused(s, twice), twice.rfind("name")) << "a key comes once";
    EXPECT_EQ(first_refused(s, R"({"nam":1})"), 5u) << "a key is a whole listed name";
}

TEST(JsonSchema, ScalarsKeepTheirTypeAndBounds) {
    const JsonSchema s(kPerson);
    const auto at = [&](const std::string& text) { return first_refused(s, text); };
    EXPECT_EQ(at(R"({"name":"")"), 9u) << "minLength 1: the closing quote of an empty name";
    EXPECT_EQ(at(R"({"name":"abcdefghi")"), 17u) << "maxLength 8: the ninth character";
    std::string escapes = R"({"name":")";
    for (int i = 0; i < 8; ++i) escapes += "\\u00e9";
    EXPECT_EQ(at(escapes + "x"), escapes.size()) << "eight escapes are eight characters: a ninth is refused";
    EXPECT_TRUE(whole(s, R"({"name":"h\u00e9llo\n","tags":["a"]})")) << "an escape is one character";
    EXPECT_TRUE(whole(s, R"({"name":"\ud83d\ude00","tags":["a"]})")) << "a surrogate pair is one character";
    EXPECT_TRUE(whole(s, "{\"name\":\"\xc3\xa9t\xc3\xa9\",\"tags\":[\"a\"]}")) << "UTF-8: code points counted";
    const JsonSchema one(Json::parse(R"({"type":"object","properties":{"s":{"type":"string","maxLength":1}}})"));
    EXPECT_TRUE(whole(one, R"({"s":"\ud83d\ude00"})")) << "a pair is the one character maxLength 1 allows";
    EXPECT_EQ(first_refused(one, R"({"s":"\udc00")"), 9u) << "a lone low surrogate, known from its second hex digit";
    EXPECT_EQ(first_refused(one, R"({"s":"\ud800\u0")"), 14u) << "after a high surrogate, a low one: no dead end";
    EXPECT_EQ(first_refused(one, R"({"s":"\ud800\ud8")"), 15u);
    EXPECT_EQ(first_refused(one, R"({"s":"\ud83dx")"), 12u) << "a high surrogate's low half must come";
    EXPECT_EQ(first_refused(one, R"({"s":"\ud83d\n")"), 13u);
    EXPECT_EQ(first_refused(one, R"({"s":"ab")"), 7u);
    EXPECT_EQ(first_refused(one, R"({"s":"a\n")"), 7u) << "no room for an escape's character";
    EXPECT_EQ(at(R"({"name":"a","age":1.5)"), 19u) << "an integer has no fraction";
    EXPECT_EQ(at(R"({"name":"a","age":1e3)"), 19u) << "nor an exponent";
    EXPECT_EQ(at(R"({"name":"a","age":"1")"), 18u);
    EXPECT_EQ(at(R"({"name":"a","age":-01)"), 20u) << "no leading zero";
    EXPECT_EQ(at(R"({"name":"a","colour":"rex")"), 24u) << "enum: the byte no value continues";
    EXPECT_EQ(at(R"({"name":"a","colour":8)"), 21u);
    EXPECT_EQ(at(R"({"name":"a","colour":7,"tags":["a"]})"), std::string(R"({"name":"a","colour":7,"tags":["a"]})").size());
    EXPECT_EQ(at(R"({"name":"a","colour":77)"), 22u) << "7 is a whole value: a second digit is not";
    EXPECT_EQ(at(R"({"name":"a","tags":["a"],"ok":trux)"), 33u);
    EXPECT_EQ(at(R"({"name":"a","tags":["a"],"ok":nul)"), 30u) << "ok is a boolean";
}

TEST(JsonSchema, BoundedIntegersRefuseTheFirstDigitThatLeavesTheRange) {
    const JsonSchema s(Json::parse(R"({"type":"object","properties":{
        "n": {"type": "integer", "minimum": -5, "maximum": 120},
        "p": {"type": "integer", "exclusiveMinimum": 0.5, "exclusiveMaximum": 10},
        "q": {"maximum": -20},
        "r": {"type": "integer", "minimum": 7, "exclusiveMinimum": true}}})"));
    const auto at = [&](const std::string& v) { return first_refused(s, R"({"n":)" + v + "}"); };
    for (const char* ok : {"120", "-5", "0", "-0", "7", "99"}) EXPECT_EQ(at(ok), std::strlen(ok) + 6) << ok;
    EXPECT_EQ(at("121"), 7u) << "12 may still be 120; 121 may not";
    EXPECT_EQ(at("1200"), 8u);
    EXPECT_EQ(at("-6"), 6u);
    EXPECT_EQ(at("-12"), 7u) << "-1 may end there; -12 and beyond may not";
    EXPECT_EQ(at("-"), 6u) << "'-' is taken, the '}' after it is not";
    const auto at_p = [&](const std::string& v) { return first_refused(s, R"({"p":)" + v + "}"); };
    EXPECT_EQ(at_p("0"), 5u) << "exclusiveMinimum 0.5: 1 is the least";
    EXPECT_EQ(at_p("1"), 7u);
    EXPECT_EQ(at_p("10"), 6u) << "exclusiveMaximum 10: 9 is the most";
    EXPECT_EQ(at_p("-"), 5u);
    const auto at_q = [&](const std::string& v) { return first_refused(s, R"({"q":)" + v + "}"); };
    EXPECT_EQ(at_q("-20"), 9u) << "a bound alone makes an integer";
    EXPECT_EQ(at_q("-19"), 8u) << "-1 may still be -100; -19 may not";
    EXPECT_EQ(at_q("1"), 5u);
    EXPECT_EQ(at_q("-20.5"), 8u);
    // Bounds past 2^53 are kept exactly (a double would round them).
    const JsonSchema big(Json::parse(R"({"type":"object","properties":{"n":{"type":"integer","minimum":9007199254740993},
        "x":{"type":"integer","exclusiveMaximum":18014398509481984}}})"));
    EXPECT_EQ(first_refused(big, R"({"n":9007199254740992})"), 21u) << "the '}' that ends it below the minimum";
    EXPECT_TRUE(whole(big, R"({"n":9007199254740993})"));
    EXPECT_EQ(first_refused(big, R"({"x":18014398509481984})"), 21u) << "its last digit";
    EXPECT_TRUE(whole(big, R"({"x":18014398509481983})"));
    EXPECT_EQ(first_refused(s, R"({"r":7})"), 6u) << "draft 4: exclusiveMinimum true makes 7 excluded";
    EXPECT_EQ(first_refused(s, R"({"r":8})"), 7u);
}

TEST(JsonSchema, BoundedNumbersRefuseTheFirstByteThatLeavesTheRange) {
    const JsonSchema s(Json::parse(R"({"type":"object","properties":{
        "x": {"type": "number", "minimum": -1.5, "maximum": 2.25},
        "p": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "t": {"type": "number", "minimum": 0.1},
        "b": {"type": "number", "maximum": 9007199254740993}}})"));
    const auto at = [&](const char* key, const std::string& v) {
        return first_refused(s, std::string("{\"") + key + "\":" + v + "}") - 5;  // the offset within v
    };
    for (const char* ok : {"2.25", "2.2500", "-1.5", "0", "2", "2.2", "-1.49999", "-0.0", "1.000000000000000001"})
        EXPECT_EQ(at("x", ok), std::strlen(ok) + 1) << ok;
    EXPECT_EQ(at("x", "2.26"), 3u);
    EXPECT_EQ(at("x", "2.3"), 2u);
    EXPECT_EQ(at("x", "3"), 0u);
    EXPECT_EQ(at("x", "-2"), 1u);
    EXPECT_EQ(at("x", "-1.6"), 3u);
    EXPECT_EQ(at("x", "2.250000001"), 10u) << "above 2.25 at its last digit";
    EXPECT_EQ(at("x", "1e0"), 1u) << "a bounded number is written without an exponent";
    EXPECT_EQ(at("x", "1.0000000000000000001"), 20u) << "at most 18 fraction digits";
    EXPECT_EQ(at("p", "0"), 1u) << "exclusiveMinimum 0: 0 may go on (0.5), not end";
    EXPECT_EQ(at("p", "0.0"), 3u);
    EXPECT_EQ(at("p", "0.5"), 4u);
    EXPECT_EQ(at("p", "1"), 0u) << "exclusiveMaximum 1: 1.x is 1 or more";
    EXPECT_EQ(at("p", "-"), 0u);
    EXPECT_EQ(at("t", "0.1"), 4u) << "0.1 read exactly, not as the double below or above it";
    EXPECT_EQ(at("t", "0.09"), 2u) << "0.0 and any digits after it stay below 0.1";
    EXPECT_EQ(at("t", "123456789.5"), 12u) << "no upper bound";
    EXPECT_EQ(at("b", "9007199254740993.5"), 17u) << "past 2^53 exactly: .5 is above the bound";
    EXPECT_EQ(at("b", "9007199254740993.0"), 19u);
}

TEST(JsonSchema, MultipleOfKeepsExactMultiples) {
    const auto of = [](const char* field) { return JsonSchema(Json::parse(std::string(R"({"type":"object","properties":{"n":)") + field + "}}")); };
    const JsonSchema five = of(R"({"type":"integer","multipleOf":5})");
    EXPECT_TRUE(whole(five, R"({"n":15})"));
    EXPECT_TRUE(whole(five, R"({"n":-0})"));
    EXPECT_EQ(first_refused(five, R"({"n":17})"), 7u) << "17 may still become 170: refused where it ends";
    EXPECT_EQ(first_refused(five, R"({"n":1e1})"), 6u) << "written without an exponent";
    const JsonSchema five_to_20 = of(R"({"type":"integer","multipleOf":5,"maximum":20})");
    EXPECT_EQ(first_refused(five_to_20, R"({"n":17})"), 6u) << "neither 17 nor 170-179 is a multiple within 20";
    const JsonSchema cents = of(R"({"type":"number","multipleOf":0.01})");
    EXPECT_TRUE(whole(cents, R"({"n":1.23})"));
    EXPECT_TRUE(whole(cents, R"({"n":-0.1})"));
    EXPECT_EQ(first_refused(cents, R"({"n":1.234})"), 9u);
    EXPECT_EQ(first_refused(cents, R"({"n":1.239})"), 9u) << "exact decimals: 0.01 is not the double below it";
    const JsonSchema fives = of(R"({"type":"integer","multipleOf":2.5})");
    EXPECT_TRUE(whole(fives, R"({"n":10})"));
    EXPECT_EQ(first_refused(fives, R"({"n":7})"), 6u) << "an integer multiple of 2.5 is one of 5";
    const JsonSchema negative = of(R"({"type":"integer","multipleOf":3,"minimum":-5,"maximum":-1})");
    EXPECT_TRUE(whole(negative, R"({"n":-3})"));
    EXPECT_EQ(first_refused(negative, R"({"n":-4})"), 6u);
    EXPECT_EQ(first_refused(negative, R"({"n":0)"), 5u) << "0 is a multiple, but above the maximum";
    // Steps as large as what is written (18 integer digits): 2e17's multiples, and nothing between.
    const JsonSchema huge = of(R"({"type":"number","multipleOf":2e17})");
    EXPECT_TRUE(whole(huge, R"({"n":200000000000000000})"));
    EXPECT_TRUE(whole(huge, R"({"n":-800000000000000000.0})"));
    EXPECT_EQ(first_refused(huge, R"({"n":100000000000000000.000000000000000001})"), 5u)
        << "no multiple of 2e17 with at most 18 integer digits starts with 1";
    EXPECT_EQ(first_refused(huge, R"({"n":400000000000000000.000000000000000001})"), 41u);
    EXPECT_NO_THROW(of(R"({"type":"integer","multipleOf":2e17,"minimum":1})"));
    const JsonSchema third = of(R"({"type":"number","multipleOf":0.3333333333333333})");
    EXPECT_TRUE(whole(third, R"({"n":0.9999999999999999})")) << "the step as written, times 3";
    EXPECT_EQ(first_refused(third, R"({"n":1})"), 6u) << "1 may still become 1.3333333333333332";
    for (const char* bad : {R"({"type":"integer","multipleOf":0})", R"({"type":"integer","multipleOf":"2"})",
                            R"({"type":"number","multipleOf":1e-20})", R"({"type":"integer","multipleOf":5,"minimum":1,"maximum":4})",
                            R"({"enum":[5],"multipleOf":5})"})
        EXPECT_THROW(of(bad), JsonSchemaError) << bad;
}

TEST(JsonSchema, ArraysCountTheirItems) {
    const JsonSchema s(kPerson);
    const std::string empty = R"({"name":"a","tags":[])";
    EXPECT_EQ(first_refused(s, empty), empty.size() - 1) << "minItems 1";
    const std::string three = R"({"name":"a","tags":["x","y","z"])";
    EXPECT_EQ(first_refused(s, three), three.find(",\"z\"")) << "maxItems 2";
    EXPECT_EQ(first_refused(s, R"({"name":"a","tags":[1)"), 20u) << "items are strings";
}

TEST(JsonSchema, TuplesTakeEachPositionsSchema) {
    // pydantic's tuple[int, str]: prefixItems, no more items, both present.
    const JsonSchema pair(Json::parse(R"({"type":"object","properties":{"t":{"type":"array","prefixItems":[{"type":"integer"},
        {"type":"string","maxLength":2}],"minItems":2,"maxItems":2}}})"));
    EXPECT_TRUE(whole(pair, R"({"t":[1,"ab"]})"));
    EXPECT_EQ(first_refused(pair, R"({"t":["a")"), 6u) << "the first item an integer";
    EXPECT_EQ(first_refused(pair, R"({"t":[1,2)"), 8u) << "the second a string";
    EXPECT_EQ(first_refused(pair, R"({"t":[1])"), 7u) << "both present";
    EXPECT_EQ(first_refused(pair, R"({"t":[1,"a",)"), 11u) << "no third";
    // tuple[int, ...] after a prefix: items applies to the rest; items false closes the tuple.
    const JsonSchema open(Json::parse(R"({"type":"object","properties":{"t":{"prefixItems":[{"type":"string"}],"items":{"type":"integer"}}}})"));
    EXPECT_TRUE(whole(open, R"({"t":["x",1,2,3]})"));
    EXPECT_TRUE(whole(open, R"({"t":[]})"));
    EXPECT_EQ(first_refused(open, R"({"t":["x","y")"), 10u);
    const JsonSchema closed(Json::parse(R"({"type":"object","properties":{"t":{"prefixItems":[{"type":"null"}],"items":false}}})"));
    EXPECT_TRUE(whole(closed, R"({"t":[null]})"));
    EXPECT_EQ(first_refused(closed, R"({"t":[null,)"), 10u);
    // Draft 7: an items array, then additionalItems.
    const JsonSchema draft7(Json::parse(R"({"type":"object","properties":{"t":{"type":"array","items":[{"type":"boolean"}],
        "additionalItems":{"type":"string"}}}})"));
    EXPECT_TRUE(whole(draft7, R"({"t":[true,"a","b"]})"));
    EXPECT_EQ(first_refused(draft7, R"({"t":[true,false)"), 11u);
    EXPECT_THROW(JsonSchema(Json::parse(R"({"type":"object","properties":{"t":{"prefixItems":[{}],"items":false,"minItems":2}}})")),
                 JsonSchemaError) << "two items needed where one fits";
    EXPECT_THROW(JsonSchema(Json::parse(R"({"type":"object","properties":{"t":{"prefixItems":{}}}})")), JsonSchemaError);
    EXPECT_THROW(JsonSchema(Json::parse(R"({"type":"object","properties":{"t":{"prefixItems":[{"type":"integer"}],"items":[{"type":"string"}]}}})")),
                 JsonSchemaError) << "two drafts' tuples at once";
}

TEST(JsonSchema, UniqueItemsKeepASetOfEnumValues) {
    // pydantic's set[Colour]: uniqueItems over an enum (through $ref).
    const JsonSchema set(Json::parse(R"({"type":"object","$defs":{"c":{"enum":["red","green",1,12]}},"properties":{"s":{"type":"array",
        "items":{"$ref":"#/$defs/c"},"uniqueItems":true}}})"));
    EXPECT_TRUE(whole(set, R"({"s":["red",12,1,"green"]})"));
    EXPECT_TRUE(whole(set, R"({"s":[]})"));
    EXPECT_EQ(first_refused(set, R"({"s":["red","red")"), 13u) << "the second \"red\" at its first byte that leaves the others";
    EXPECT_EQ(first_refused(set, R"({"s":[1,"green",1])"), 17u) << "1 written: another 1 must go on to 12";
    EXPECT_TRUE(whole(set, R"({"s":[1,12]})"));
    EXPECT_EQ(first_refused(set, R"({"s":["red","green",1,12,)"), 24u) << "every value used: no fifth item";
    EXPECT_EQ(first_refused(set, R"({"s": [true])"), 7u);
    // A set of booleans holds at most two.
    const JsonSchema flags(Json::parse(R"({"type":"object","properties":{"f":{"type":"array","items":{"type":"boolean"},"uniqueItems":true}}})"));
    EXPECT_TRUE(whole(flags, R"({"f":[false,true]})"));
    EXPECT_EQ(first_refused(flags, R"({"f":[true,t)"), 11u);
    EXPECT_TRUE(whole(JsonSchema(Json::parse(R"({"type":"object","properties":{"a":{"items":{"type":"string"},"uniqueItems":false}}})")),
                      R"({"a":["x","x"]})")) << "uniqueItems false: no constraint";
    for (const char* bad : {R"({"type":"object","properties":{"a":{"items":{"type":"string"},"uniqueItems":true}}})",
                            R"({"type":"object","properties":{"a":{"items":{"enum":[1,1.0]},"uniqueItems":true}}})",
                            R"({"type":"object","properties":{"a":{"items":{"enum":[{"x":1,"y":2},{"y":2,"x":1}]},"uniqueItems":true}}})",
                            R"({"type":"object","properties":{"a":{"items":{"enum":["x","y"]},"uniqueItems":true,"minItems":3}}})",
                            R"({"type":"object","properties":{"a":{"items":{"enum":["x"]},"uniqueItems":"yes"}}})"})
        EXPECT_THROW(JsonSchema(Json::parse(bad)), JsonSchemaError) << bad;
}

TEST(JsonSchema, RefsAnyOfTypeListsAndFreeObjects) {
    const Json tree = Json::parse(R"({
      "$defs": {"node": {"type": "object", "properties": {
          "v": {"type": ["integer", "null"]},
          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}},
          "note": {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "null"}]},
          "meta": {"type": "object", "additionalProperties": {"type": "number"}}},
        "required": ["v"]}},
      "$ref": "#/$defs/node"})");
    const JsonSchema s(tree);
    EXPECT_TRUE(whole(s, R"({"v":1,"kids":[{"v":null,"kids":[{"v":2}]},{"v":3}],"note":null,"meta":{"x":1.5,"y":-2}})"));
    EXPECT_TRUE(whole(s, R"({"v":null,"note":"ab","meta":{}})"));
    EXPECT_EQ(first_refused(s, R"({"v":"1")"), 5u) << "integer or null";
    EXPECT_EQ(first_refused(s, R"({"v":1,"note":"abc")"), 17u) << "the string branch keeps its maxLength";
    EXPECT_EQ(first_refused(s, R"({"v":1,"meta":{"x":true)"), 19u) << "free keys' values are numbers";
    EXPECT_EQ(first_refused(s, R"({"v":1,"kids":[{"kids":[]}])"), 17u) << "a nested node still needs v first";
    // Recursion is bounded by the recognizer's depth, not by the schema.
    std::string deep = R"({"v":1,"kids":[)";
    for (int d = 0; d < JsonSchemaPrefix::kMaxDepth; ++d) deep += R"({"v":1,"kids":[)";
    EXPECT_LT(first_refused(s, deep), deep.size());
    const JsonSchema any(Json::parse(R"({"type": "object"})"));
    EXPECT_TRUE(whole(any, R"({"a":[1,{"b":null}],"c":"d","e":{}})")) << "no properties: any members";
    const JsonSchema closed(Json::parse(R"({"type": "object", "additionalProperties": false})"));
    EXPECT_TRUE(whole(closed, "{}"));
    EXPECT_EQ(first_refused(closed, R"({"a":1})"), 1u);
}

TEST(JsonSchema, RefusesWhatItDoesNotImplementNamingWhere) {
    const auto error = [](const char* schema) -> std::string {
        try {
            JsonSchema s(Json::parse(schema));
        } catch (const JsonSchemaError& e) {
            return e.what();
        }
        return "";
    };
    EXPECT_EQ(error(R"({"type":"object","properties":{"a":{"type":"string","pattern":"(x)\\1"}}})"),
              "at /properties/a/pattern: at byte 3 of the pattern: back-references are not supported");
    EXPECT_NE(error(R"({"type":"object","properties":{"a":{"pattern":"^\\x01$"}}})").find("matches no text"), std::string::npos)
        << "a control character JSON has no short escape for cannot be written";
    EXPECT_NE(error(R"({"type":"object","properties":{"a":{"enum":["x"],"pattern":"x"}}})").find("beside"), std::string::npos);
    Json many = {{"type", "object"}, {"properties", Json::object()}};
    for (int i = 0; i < 33; ++i) many["properties"]["p" + std::to_string(i)] = {{"pattern", "x" + std::to_string(i)}};
    EXPECT_NE(error(many.dump().c_str()).find("more than 32 patterns"), std::string::npos);
    many["properties"]["p32"] = {{"pattern", "x0"}};
    EXPECT_EQ(error(many.dump().c_str()), "") << "a pattern written twice is compiled once";
    EXPECT_EQ(error(R"({"type":"object","properties":{"n":{"type":"integer","not":{"const":2}}}})"),
              "at /properties/n: the keyword \"not\" is not supported");
    EXPECT_NE(error(R"({"type":"object","properties":{"x":{"type":"number","minimum":1.5,"exclusiveMaximum":1.5}}})").find("no number lies within"), std::string::npos);
    EXPECT_NE(error(R"({"type":"object","properties":{"n":{"type":"integer","minimum":3.5,"exclusiveMaximum":4}}})").find("no integer"), std::string::npos);
    EXPECT_NE(error(R"({"type":"object","properties":{"n":{"type":"integer","minimum":1e30}}})").find("1e17"), std::string::npos);
    EXPECT_NE(error(R"({"type":"object","properties":{"n":{"enum":[1,2],"maximum":1}}})").find("beside"), std::string::npos);
    EXPECT_NE(error(R"({"type":"array"})").find("the root must be an object"), std::string::npos);
    EXPECT_NE(error(R"({"type":"object","properties":{"a":{}},"required":["b"]})").find("\"b\" is required"), std::string::npos);
    EXPECT_NE(error(R"({"type":"object","properties":{"a":{"anyOf":[{"type":"string"},{"enum":["x"]}]}}})")
                  .find("at /properties/a: branches 0 and 1 can both start with '\"'"),
              std::string::npos);
    EXPECT_NE(error(R"({"type":"object","properties":{"a":{"$ref":"http://x/s.json"}}})").find("within the schema"), std::string::npos);
    EXPECT_NE(error(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/nope"}}})").find("names nothing"), std::string::npos);
    EXPECT_NE(error(R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"type":"object","properties":{"x":{"$ref":"#/$defs/a"}}})")
                  .find("references alone"),
              std::string::npos);
    EXPECT_EQ(error(R"({"type":"object","properties":{"a":{"type":"array","contains":{"type":"string"}}}})"),
              "at /properties/a: the keyword \"contains\" is not supported");
    EXPECT_NE(error(R"({"type":"object","properties":{"a":{"type":"date"}}})").find("unknown type"), std::string::npos);
    EXPECT_NE(error(R"({"type":"object","properties":{"a":{"type":"string","minLength":3,"maxLength":2}}})").find("exceeds"), std::string::npos);
    EXPECT_NE(error(R"({"type":"object","properties":{"a":{"type":"integer","enum":["x"]}}})").find("no value has the schema's type"), std::string::npos);
    EXPECT_NE(error(R"({"type":"object","properties":{"a":false}})").find("accepts no value"), std::string::npos);
    // Keywords the compiler would have to intersect are refused, not dropped.
    EXPECT_NE(error(R"({"type":"object","properties":{"a":{"enum":["a","bbb"],"minLength":2}}})").find("\"minLength\" beside \"enum\""), std::string::npos);
    EXPECT_NE(error(R"({"type":"object","properties":{"a":{"enum":["a"],"const":"b"}}})").find("beside"), std::string::npos);
    EXPECT_NE(error(R"({"type":"object","properties":{"a":{"$ref":"#/$defs/s","allOf":[{"maxLength":2}]}},"$defs":{"s":{"type":"string"}}})").find("beside"), std::string::npos);
    EXPECT_NE(error(R"({"type":"object","properties":{"a":{"anyOf":[{"type":"null"}],"oneOf":[{"type":"string"}]}}})").find("beside"), std::string::npos);
    // oneOf: a branch without a type also matches values of the other branches' types.
    EXPECT_NE(error(R"({"type":"object","properties":{"x":{"oneOf":[{"maxLength":3},{"type":"integer"}]}}})").find("oneOf branch 0 has no \"type\""), std::string::npos);
    EXPECT_EQ(error(R"({"type":"object","properties":{"x":{"anyOf":[{"maxLength":3},{"type":"integer"}]}}})"), "") << "anyOf: it may";
    // References that only lead to each other accept nothing (and would leave the mask no token).
    EXPECT_NE(error(R"({"type":"object","properties":{"x":{"$ref":"#/$defs/z"}},"$defs":{"z":{"anyOf":[{"$ref":"#/$defs/z"}]}}})").find("accepts no value"), std::string::npos);
    // A conflict reached through a $ref is named where it is written.
    EXPECT_NE(error(R"({"type":"object","properties":{"x":{"$ref":"#/$defs/z"}},"$defs":{"z":{"anyOf":[{"type":"string"},{"const":"a"}]}}})").find("at /$defs/z: branches 0 and 1"), std::string::npos);
    EXPECT_EQ(error(R"({"type":"object","properties":{"n":{"type":"integer","enum":[1e19, 2]}}})"), "") << "1e19 is an integer";
    // Annotations are not constraints: accepted.
    EXPECT_EQ(error(R"({"title":"t","description":"d","type":"object","properties":{"when":{"type":"string","format":"date-time","default":"x","examples":["y"]}}})"), "");
    // More than 64 properties, and a schema nested past the bound.
    Json wide = {{"type", "object"}, {"properties", Json::object()}};
    for (int i = 0; i < 65; ++i) wide["properties"]["p" + std::to_string(i)] = {{"type", "null"}};
    EXPECT_NE(error(wide.dump().c_str()).find("more than 64"), std::string::npos);
}

TEST(JsonSchema, PatternsMatchTheStringsDecodedText) {
    const Json schema = Json::parse(R"({"type":"object","properties":{
        "date":{"type":"string","pattern":"^\\d{4}-\\d{2}-\\d{2}$"},
        "code":{"pattern":"[A-Z]{2}"},
        "odd":{"type":"string","pattern":"^a\"b\\\\c\\n$"}},"required":["date","code","odd"]})");
    const JsonSchema s(schema);
    EXPECT_TRUE(whole(s, R"({"date":"2026-12-07","code":"xxABx","odd":"a\"b\\c\n"})"));
    const std::string bad_digit = R"({"date":"2026-1x)";
    EXPECT_EQ(first_refused(s, bad_digit), bad_digit.size() - 1);
    const std::string too_long = R"({"date":"2026-12-077)";
    EXPECT_EQ(first_refused(s, too_long), too_long.size() - 1) << "anchored at its end";
    const std::string early = R"({"date":"2026-12")";
    EXPECT_EQ(first_refused(s, early), early.size() - 1) << "a string closes only on a match";
    const std::string date = R"({"date":"2026-12-07",)";
    const std::string no_code = date + R"("code":"xA")";
    EXPECT_EQ(first_refused(s, no_code), no_code.size() - 1) << "unanchored: somewhere in it, but not yet";
    const std::string unicode = R"({"date":"\u0032)";
    EXPECT_EQ(first_refused(s, unicode), unicode.find('\\')) << "a pattern's string writes no \\u escapes";
    const std::string odd = date + R"("code":"AB","odd":"a)";
    EXPECT_EQ(first_refused(s, odd + "\""), odd.size()) << "the '\"' the pattern needs next is written escaped";
    EXPECT_EQ(first_refused(s, odd + "\\"), odd.size() + 1) << "'\\' is admitted: an escaped '\"' goes on";
    EXPECT_EQ(first_refused(s, odd + "\\n"), odd.size() + 1) << "but not \\n";
    EXPECT_EQ(first_refused(s, odd + R"(\"b\\c)" + "\n"), odd.size() + 6) << "a newline only as \\n";
    EXPECT_TRUE(whole(s, odd + R"(\"b\\c\n"})"));
    // A key's value of a type list keeps the pattern on its string branch only.
    const JsonSchema either(Json::parse(R"({"type":"object","properties":{"a":{"type":["string","integer"],"pattern":"^z$"}}})"));
    EXPECT_TRUE(whole(either, R"({"a":12})"));
    EXPECT_TRUE(whole(either, R"({"a":"z"})"));
    EXPECT_FALSE(whole(either, R"({"a":"y"})"));
}

TEST(JsonSchema, FreeKeysAreCountedWithinMinAndMaxProperties) {
    // pydantic's dict[str, int] with min_length 1 and max_length 2.
    const JsonSchema dict(Json::parse(R"({"type":"object","additionalProperties":{"type":"integer"},"minProperties":1,"maxProperties":2})"));
    EXPECT_EQ(first_refused(dict, "{}"), 1u);
    EXPECT_TRUE(whole(dict, R"({"a":1})"));
    EXPECT_TRUE(whole(dict, R"({"a":1, "b":2})"));
    EXPECT_EQ(first_refused(dict, R"({"a":1,"b":2,)"), 12u) << "no third member";
    const JsonSchema none(Json::parse(R"({"type":"object","properties":{"d":{"maxProperties":0}}})"));
    EXPECT_TRUE(whole(none, R"({"d":{}})"));
    EXPECT_EQ(first_refused(none, R"({"d":{")"), 6u);
    const JsonSchema exactly_one(Json::parse(R"({"type":"object","minProperties":1,"maxProperties":1})"));
    EXPECT_TRUE(whole(exactly_one, R"({"k":null})"));
    EXPECT_EQ(first_refused(exactly_one, R"({"k":null,)"), 9u);
    EXPECT_THROW(JsonSchema(Json::parse(R"({"type":"object","additionalProperties":false,"minProperties":1})")), JsonSchemaError)
        << "no member may be written";
    EXPECT_THROW(JsonSchema(Json::parse(R"({"type":"object","minProperties":1,"maxProperties":0})")), JsonSchemaError);
    EXPECT_THROW(JsonSchema(Json::parse(R"({"type":"object","minProperties":2})")), JsonSchemaError)
        << "{\"a\":1,\"a\":2} would count 2 members and parse as 1 key";
}

TEST(JsonSchema, PropertyNamesShapeFreeKeys) {
    // pydantic's dict[Literal["a", "bb"], int] and dict[constr(pattern=r"^x\d+$", max_length=3), str].
    const JsonSchema literal(Json::parse(R"({"type":"object","additionalProperties":{"type":"integer"},
        "propertyNames":{"enum":["a","bb"],"type":"string"}})"));
    EXPECT_TRUE(whole(literal, R"({"a":1,"bb" : 2})"));
    EXPECT_EQ(first_refused(literal, R"({"b":)"), 3u);
    EXPECT_EQ(first_refused(literal, R"({"c")"), 2u);
    const JsonSchema pattern(Json::parse(R"({"type":"object","properties":{"d":{"additionalProperties":{"type":"string"},
        "propertyNames":{"pattern":"^x\\d+$","maxLength":3}}}})"));
    EXPECT_TRUE(whole(pattern, R"({"d":{"x12":"v","x3":""}})"));
    EXPECT_EQ(first_refused(pattern, R"({"d":{"y)"), 7u);
    EXPECT_EQ(first_refused(pattern, R"({"d":{"x")"), 8u) << "a digit must follow";
    EXPECT_EQ(first_refused(pattern, R"({"d":{"x123)"), 10u) << "three characters at most";
    EXPECT_TRUE(whole(JsonSchema(Json::parse(R"({"type":"object","propertyNames":true})")), R"({"any":1})"));
    EXPECT_TRUE(whole(JsonSchema(Json::parse(R"({"type":"object","propertyNames":{"maximum":3}})")), R"({"any":1})"))
        << "keywords of numbers leave every name valid";
    EXPECT_TRUE(whole(JsonSchema(Json::parse(R"({"type":"object","propertyNames":{"$ref":"#/$defs/K"},"$defs":{"K":{"description":"d"}}})")),
                      R"({"any":1})"));
    for (const char* refused : {R"({"type":"object","propertyNames":{"type":"integer"}})",
                                R"({"type":"object","properties":{"a":{}},"propertyNames":{"maxLength":1}})",
                                R"({"type":"object","propertyNames":{"enum":["a",1]}})"})
        EXPECT_THROW(JsonSchema(Json::parse(refused)), JsonSchemaError) << refused;
}

TEST(JsonSchema, MinAndMaxPropertiesOneMeanExactlyOneOfTheListed) {
    const JsonSchema s(Json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"null"}},
        "minProperties":1,"maxProperties":1})"));
    EXPECT_TRUE(whole(s, R"({"b":null})")) << "any one of them, not only the first";
    EXPECT_TRUE(whole(s, R"({"a":1})"));
    EXPECT_EQ(first_refused(s, "{}"), 1u);
    EXPECT_EQ(first_refused(s, R"({"a":1,)"), 6u);
    for (const char* other : {R"({"type":"object","properties":{"a":{}},"maxProperties":2})",
                              R"({"type":"object","properties":{"a":{}},"minProperties":1})",
                              R"({"type":"object","properties":{"a":{}},"required":["a"],"minProperties":1,"maxProperties":1})"})
        EXPECT_THROW(JsonSchema(Json::parse(other)), JsonSchemaError) << other;
}

// ---- texts drawn from the recognizer, checked by a validator written separately -----------------

/// Whether `v` is valid under `s` for the keywords the compiler implements ($ref resolved in `root`).
bool valid(const Json& v, const Json& s, const Json& root) {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) return valid(v, root.at(Json::json_pointer(s["$ref"].get<std::string>().substr(1))), root);
    for (const char* k : {"anyOf", "oneOf"})
        if (s.contains(k)) {
            int n = 0;
            for (const Json& b : s[k]) n += valid(v, b, root);
            return std::string(k) == "anyOf" ? n >= 1 : n == 1;
        }
    if (s.contains("const") && s["const"] != v) return false;
    if (s.contains("enum")) {
        bool in = false;
        for (const Json& e : s["enum"]) in = in || e == v;
        if (!in) return false;
    }
    if (s.contains("type")) {
        const Json types = s["type"].is_array() ? s["type"] : Json::array({s["type"]});
        bool typed = false;
        for (const Json& t : types) {
            const std::string n = t;
            typed = typed || (n == "object" && v.is_object()) || (n == "array" && v.is_array()) ||
                    (n == "string" && v.is_string()) || (n == "integer" && (v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>())))) ||
                    (n == "number" && v.is_number()) || (n == "boolean" && v.is_boolean()) || (n == "null" && v.is_null());
        }
        if (!typed) return false;
    }
    if (v.is_number()) {
        const double x = v.get<double>();
        if (s.contains("minimum") && x < s["minimum"].get<double>()) return false;
        if (s.contains("maximum") && x > s["maximum"].get<double>()) return false;
        if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
        if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
        if (s.contains("multipleOf") && std::fmod(x, s["multipleOf"].get<double>()) != 0) return false;  // exact for the steps drawn
    }
    if (v.is_string()) {
        // code points
        std::size_t chars = 0;
        for (const char c : v.get<std::string>()) chars += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
        if (s.contains("minLength") && chars < s["minLength"].get<std::size_t>()) return false;
        if (s.contains("maxLength") && chars > s["maxLength"].get<std::size_t>()) return false;
        if (s.contains("pattern") &&  // ASCII patterns and texts: std::regex reads bytes
            !std::regex_search(v.get<std::string>(), std::regex(s["pattern"].get<std::string>(), std::regex::ECMAScript)))
            return false;
    }
    if (v.is_array()) {
        if (s.contains("minItems") && v.size() < s["minItems"].get<std::size_t>()) return false;
        if (s.value("uniqueItems", false))
            for (std::size_t i = 0; i < v.size(); ++i)
                for (std::size_t j = i + 1; j < v.size(); ++j)
                    if (v[i] == v[j]) return false;
        if (s.contains("maxItems") && v.size() > s["maxItems"].get<std::size_t>()) return false;
        // A tuple: prefixItems then items (2020-12), or an items array then additionalItems (draft 7).
        const bool draft7 = s.contains("items") && s["items"].is_array();
        const Json prefix = draft7 ? s["items"] : s.value("prefixItems", Json::array());
        const Json rest = s.contains(draft7 ? "additionalItems" : "items") ? s[draft7 ? "additionalItems" : "items"] : Json(true);
        for (std::size_t i = 0; i < v.size(); ++i)
            if (!valid(v[i], i < prefix.size() ? prefix[i] : rest, root)) return false;
    }
    if (v.is_object()) {
        const Json props = s.contains("properties") ? s["properties"] : Json::object();
        if (s.contains("minProperties") && v.size() < s["minProperties"].get<std::size_t>()) return false;
        if (s.contains("maxProperties") && v.size() > s["maxProperties"].get<std::size_t>()) return false;
        if (s.contains("required"))
            for (const Json& r : s["required"])
                if (!v.contains(r.get<std::string>())) return false;
        for (const auto& [k, e] : v.items()) {
            if (s.contains("propertyNames") && !valid(Json(k), s["propertyNames"], root)) return false;
            if (props.contains(k)) {
                if (!valid(e, props[k], root)) return false;
            } else if (s.contains("additionalProperties") && !valid(e, s["additionalProperties"], root)) {
                return false;
            }
        }
    }
    return true;
}

/// A text drawn byte by byte among the bytes the recognizer admits; after `wander` bytes it
/// prefers those that close values, so that it ends. Empty if it did not end in `limit` bytes.
std::string draw_text(const JsonSchema& schema, std::mt19937& rng, int wander, int limit) {
    const std::string alphabet = "{}[]\":,-0123456789.eE+abcdefgiklmnorstuvxyz\\/ \n";
    const std::string closing = "}]\",:0123456789tfn";
    JsonSchemaPrefix p(schema);
    std::string text;
    for (int step = 0; step < limit && !p.complete(); ++step) {
        std::vector<char> ok, closers;
        for (const char c : alphabet) {
            JsonSchemaPrefix next = p;
            if (!next.feed(std::string_view(&c, 1))) continue;
            ok.push_back(c);
            if (closing.find(c) != std::string::npos) closers.push_back(c);
        }
        // \u escapes drawn as \u0...: a lone surrogate is JSON text that nlohmann refuses.
        if (text.size() >= 2 && text.compare(text.size() - 2, 2, "\\u") == 0) ok.assign(1, '0');
        if (ok.empty()) return "";
        const std::vector<char>& from = step > wander && !closers.empty() ? closers : ok;
        const char c = from[rng() % from.size()];
        EXPECT_TRUE(p.feed(std::string_view(&c, 1)));
        text += c;
    }
    return p.complete() ? text : "";
}

TEST(JsonSchema, TextsItAdmitsAreValidJsonOfTheSchema) {
    const Json tree = Json::parse(R"({
      "$defs": {"node": {"type": "object", "properties": {
          "v": {"type": ["integer", "null"]},
          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
          "note": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "boolean"}]}},
        "required": ["v"]}},
      "$ref": "#/$defs/node"})");
    const Json free_values = Json::parse(R"({"type":"object","additionalProperties":{"type":"array","items":{"type":"number"},"minItems":1},
        "minProperties":1,"maxProperties":3,"propertyNames":{"anyOf":[{"pattern":"^[a-f]+$","maxLength":4}]}})");
    const Json bounded = Json::parse(R"({"type":"object","properties":{"a":{"type":"integer","minimum":-40,"maximum":7},
        "d":{"type":"number","minimum":-2.5,"maximum":3.75},
        "b":{"type":["integer","null"],"exclusiveMinimum":99},"c":{"type":"array","items":{"maximum":-3}},
        "f":{"type":"integer","multipleOf":3,"minimum":-20,"maximum":40},"g":{"type":"number","multipleOf":0.25}},"required":["a","b","c","d","f","g"]})");
    const Json tuples = Json::parse(R"({"type":"object","properties":{"a":{"type":"array","prefixItems":[{"type":"integer","minimum":0},
        {"enum":["x","y"]}],"items":{"type":"boolean"},"minItems":1},"b":{"type":"array","items":[{"type":"null"}],"additionalItems":false},
        "c":{"type":"array","items":{"enum":["x","y",1,12,true]},"uniqueItems":true,"minItems":1}},
        "required":["a","b","c"]})");
    const Json patterns = Json::parse(R"({"type":"object","properties":{"id":{"type":"string","pattern":"^[a-f]{2}-\\d+$"},
        "k":{"pattern":"^(a\"b|\\\\n)+$"},"t":{"type":["string","null"],"pattern":"x(yz)?"}},"required":["id","k","t"]})");
    // Object branches told apart by keys, literals (one shared), first bytes; keys in two orders.
    const Json variants = Json::parse(R"({"type":"object","properties":{"a":{"type":"array","maxItems":3,"items":{"anyOf":[
        {"type":"object","properties":{"n":{"type":"string","maxLength":2},"k":{"enum":["x","y"]},"p":{"type":"integer"}},"required":["k"]},
        {"type":"object","properties":{"n":{"type":"string","maxLength":2},"k":{"const":"y"},"q":{"type":"null"}},"required":["k","q"]},
        {"type":"object","properties":{"u":{"type":"integer"},"v":{"type":"boolean"}},"required":["u","v"]},
        {"type":"object","properties":{"v":{"type":"string"},"u":{"type":"integer"}},"required":["u"]},
        {"type":"null"}]}},
        "b":{"oneOf":[{"type":"object","properties":{"t":{"const":"c"},"m":{"type":"integer"},"o":{"properties":{"x":{"type":"null"}}}},"required":["t","m"]},
                      {"type":"object","properties":{"t":{"const":"d"},"m":{"type":"string"},"o":{"properties":{"y":{"type":"boolean"}}}},"required":["t"]}]}},
        "required":["a","b"]})");
    std::mt19937 rng(11);
    int drawn = 0;
    for (const Json* schema : {&kPerson, &tree, &free_values, &bounded, &patterns, &tuples, &variants}) {
        const JsonSchema s(*schema);
        const int drawn_before = drawn;
        for (int i = 0; i < 60; ++i) {
            const std::string text = draw_text(s, rng, 10 + i, 4000);
            if (text.empty()) continue;
            Json v;
            try {
                v = Json::parse(text);
            } catch (const Json::out_of_range&) {  // valid JSON, a number past double's range ("1E617")
                continue;
            } catch (const Json::exception& e) {
                ADD_FAILURE() << e.what() << "\n" << text;
                continue;
            }
            ++drawn;
            EXPECT_TRUE(valid(v, *schema, *schema)) << schema->dump() << "\n" << text;
        }
        EXPECT_GT(drawn - drawn_before, 20) << schema->dump();
    }
    EXPECT_GT(drawn, 330) << "the draws end";
}

TEST(JsonSchema, MaskEqualsTryingEveryTokenWhole) {
    const JsonSchema s(kPerson);
    std::mt19937 rng(3);
    const std::string bytes = "{}[]\":, 0123456789namegtsrdcolu\\";
    const std::vector<std::string> texts = test::with_random_texts(
        {"", "{\"", "{\"name\":", "\"tags\"", "red", "\"red\"", "7", "null", ",\"", "]}", " "}, rng, bytes, 500, 6);
    const std::int32_t eos = 0;
    const serve::GuideVocabulary vocab(texts, eos);
    const std::string doc = R"({"name":"Ann","age":31,"colour":"red","tags":["a","b"],"ok":false})";
    int kept = 0;
    for (std::size_t cut = 0; cut <= doc.size(); ++cut) {
        JsonSchemaPrefix state(s);
        ASSERT_TRUE(state.feed(std::string_view(doc).substr(0, cut))) << cut;
        kept += test::expect_mask_keeps_every_continuation(state, vocab, texts, eos, doc.substr(0, cut));
    }
    EXPECT_GT(kept, 200);
    // Inside a pattern's string the mask walks the tokens' trie (no shortcut for plain text).
    const JsonSchema patterned(Json::parse(R"({"type":"object","properties":{"name":{"pattern":"^[a-n]+e$"}}})"));
    const std::string named = R"({"name":"male"})";
    for (std::size_t cut = 0; cut <= named.size(); ++cut) {
        JsonSchemaPrefix state(patterned);
        ASSERT_TRUE(state.feed(std::string_view(named).substr(0, cut))) << cut;
        test::expect_mask_keeps_every_continuation(state, vocab, texts, eos, named.substr(0, cut));
    }
}

}  // namespace
}  // namespace aqpim
