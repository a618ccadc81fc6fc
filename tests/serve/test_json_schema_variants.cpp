// anyOf / oneOf branches that are all objects (serve/json_schema_variants.cpp): pydantic's unions
// and discriminated unions are read as one object whose keys and literal values tell the branches
// apart, each text admitted valid under one branch, and what cannot be told apart refused.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "serve/json_schema_test_util.h"

namespace aqpim {
namespace {

using Json = nlohmann::ordered_json;
using serve::JsonSchema;
using serve::JsonSchemaError;
using test::first_refused;
using test::whole;

std::string refusal(const std::string& schema) {
    try {
        JsonSchema s(Json::parse(schema));
    } catch (const JsonSchemaError& e) {
        return e.what();
    }
    return "";
}

// pydantic v2: `pet: Cat | Dog = Field(discriminator="pet_type")` and `Optional[Lizard | Cat]`.
const Json kPets = Json::parse(R"({
  "$defs": {
    "Cat": {"properties": {"pet_type": {"const": "cat", "title": "Pet Type", "type": "string"},
                           "meows": {"title": "Meows", "type": "integer"}},
            "required": ["pet_type", "meows"], "title": "Cat", "type": "object"},
    "Dog": {"properties": {"pet_type": {"const": "dog", "title": "Pet Type", "type": "string"},
                           "barks": {"title": "Barks", "type": "number"}},
            "required": ["pet_type", "barks"], "title": "Dog", "type": "object"},
    "Lizard": {"properties": {"name": {"type": "string"}, "scales": {"type": "boolean"}},
               "required": ["name"], "type": "object"}
  },
  "properties": {
    "pet": {"discriminator": {"mapping": {"cat": "#/$defs/Cat", "dog": "#/$defs/Dog"}, "propertyName": "pet_type"},
            "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}], "title": "Pet"},
    "other": {"anyOf": [{"$ref": "#/$defs/Lizard"}, {"$ref": "#/$defs/Cat"}, {"type": "null"}]}
  },
  "required": ["pet", "other"], "title": "Model", "type": "object"
})");

TEST(JsonSchemaVariants, ADiscriminatedUnionFollowsTheBranchItsLiteralNames) {
    const JsonSchema s(kPets);
    EXPECT_TRUE(whole(s, R"({"pet":{"pet_type":"cat","meows":3},"other":null})"));
    EXPECT_TRUE(whole(s, R"({"pet":{"pet_type":"dog","barks":1.5},"other":null})"));
    const std::string cat = R"({"pet":{"pet_type":"cat",")";
    EXPECT_EQ(first_refused(s, cat + "barks"), cat.size()) << "a cat does not bark";
    EXPECT_EQ(first_refused(s, cat + R"(meows":2.5)"), cat.size() + 8) << "a cat's meows are an integer";
    EXPECT_EQ(first_refused(s, R"({"pet":{"pet_type":"cow")"), 21u) << "only the branches' literals";
    EXPECT_EQ(first_refused(s, R"({"pet":{"pet_type":"dog"})"), 24u) << "a dog's barks are required";
    EXPECT_EQ(first_refused(s, R"({"pet":{"barks")"), 9u) << "the discriminator comes first in both branches";
}

TEST(JsonSchemaVariants, AnUndiscriminatedUnionKeepsEveryBranchTheKeysAllow) {
    const JsonSchema s(kPets);
    const std::string pet = R"({"pet":{"pet_type":"cat","meows":1},"other":)";
    EXPECT_TRUE(whole(s, pet + R"({"name":"Rex","scales":true}})"));
    EXPECT_TRUE(whole(s, pet + R"({"name":"Rex"}})"));
    EXPECT_TRUE(whole(s, pet + R"({"pet_type":"cat","meows":2}})"));
    EXPECT_EQ(first_refused(s, pet + R"({"name":"Rex","meows")"), pet.size() + 15) << "a lizard does not meow";
    EXPECT_EQ(first_refused(s, pet + R"({"pet_type":"cat","name")"), pet.size() + 19) << "a cat has no name";
    EXPECT_EQ(first_refused(s, pet + R"({})"), pet.size() + 1) << "each branch requires a key";
}

TEST(JsonSchemaVariants, SharedKeysAreReadOnceInEachBranchsOrder) {
    // The discriminator after a shared key, values alike though compiled apart, keys in two orders.
    const JsonSchema s(Json::parse(R"({"type":"object","properties":{"a":{"anyOf":[
        {"type":"object","properties":{"name":{"type":"string"},"kind":{"enum":["x","y"]},"p":{"type":"integer"}},"required":["name","kind","p"]},
        {"type":"object","properties":{"name":{"type":"string"},"kind":{"enum":["y","z"]},"q":{"type":"null"}},"required":["name","kind","q"]},
        {"type":"object","properties":{"u":{"type":"integer"},"v":{"type":"integer"}},"required":["u","v"]},
        {"type":"object","properties":{"v":{"type":"integer"},"u":{"type":"integer"}},"required":["v","u"]}]}}})"));
    EXPECT_TRUE(whole(s, R"({"a":{"name":"n","kind":"x","p":1}})"));
    EXPECT_TRUE(whole(s, R"({"a":{"name":"n","kind":"y","p":1}})")) << "\"y\" is a value of both";
    EXPECT_TRUE(whole(s, R"({"a":{"name":"n","kind":"y","q":null}})"));
    EXPECT_EQ(first_refused(s, R"({"a":{"name":"n","kind":"x","q")"), 29u);
    EXPECT_EQ(first_refused(s, R"({"a":{"name":"n","kind":"z","p")"), 29u);
    EXPECT_TRUE(whole(s, R"({"a":{"u":1,"v":2}})"));
    EXPECT_TRUE(whole(s, R"({"a":{"v":2,"u":1}})"));
    EXPECT_EQ(first_refused(s, R"({"a":{"u":1,"u")"), 13u) << "u twice";
    EXPECT_EQ(first_refused(s, R"({"a":{"v":2})"), 11u) << "u is required in both orders";
    EXPECT_EQ(first_refused(s, R"({"a":{"u":1,"kind")"), 13u);
}

TEST(JsonSchemaVariants, ValuesOfOneKeyAreToldApartByTheirFirstByte) {
    const JsonSchema s(Json::parse(R"({"type":"object","properties":{"a":{"anyOf":[
        {"type":"object","properties":{"v":{"type":"integer"},"n":{"type":"null"}},"required":["v"]},
        {"type":"object","properties":{"v":{"type":"string"},"s":{"type":"boolean"}},"required":["v"]},
        {"type":"object","properties":{"v":{"type":"array","items":{"type":"integer"}}}}]}}})"));
    EXPECT_TRUE(whole(s, R"({"a":{"v":7,"n":null}})"));
    EXPECT_TRUE(whole(s, R"({"a":{"v":"t","s":false}})"));
    EXPECT_TRUE(whole(s, R"({"a":{"v":[1,2]}})"));
    EXPECT_TRUE(whole(s, R"({"a":{}})")) << "the array branch requires nothing";
    EXPECT_EQ(first_refused(s, R"({"a":{"v":7,"s")"), 13u) << "an integer v is the first branch's";
    EXPECT_EQ(first_refused(s, R"({"a":{"v":"t","n")"), 15u);
}

TEST(JsonSchemaVariants, ValuesAfterAKeyThatToldTheBranchesApartMayDiffer) {
    // Tool calls: {"name": N, "arguments": A} with each tool's own arguments after its name; a
    // branch told apart by a required key the other lacks; and by one the other has after the value.
    const JsonSchema s(Json::parse(R"({"type":"object","properties":{"call":{"anyOf":[
        {"type":"object","properties":{"name":{"const":"add"},"arguments":{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]}},"required":["name","arguments"]},
        {"type":"object","properties":{"name":{"const":"say"},"arguments":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}},"required":["name","arguments"]}]},
      "other":{"anyOf":[
        {"type":"object","properties":{"id":{"type":"integer"},"o":{"type":"object","properties":{"p":{"type":"null"}}}},"required":["id"]},
        {"type":"object","properties":{"o":{"type":"object","properties":{"q":{"type":"null"}}},"id":{"type":"string"}}}]}}})"));
    EXPECT_TRUE(whole(s, R"({"call":{"name":"add","arguments":{"x":2}}})"));
    EXPECT_TRUE(whole(s, R"({"call":{"name":"say","arguments":{"text":"hi"}}})"));
    const std::string add = R"({"call":{"name":"add","arguments":{")";
    EXPECT_EQ(first_refused(s, add + "text"), add.size()) << "add's arguments are its own";
    EXPECT_TRUE(whole(s, R"({"other":{"id":1,"o":{"p":null}}})"));
    EXPECT_TRUE(whole(s, R"({"other":{"o":{"q":null},"id":"s"}})"));
    EXPECT_EQ(first_refused(s, R"({"other":{"id":1,"o":{"q")"), 23u) << "after id, o is the first branch's";
    EXPECT_EQ(first_refused(s, R"({"other":{"o":{"p")"), 16u) << "o first: the second branch (the first requires id before it)";
    // Without a key before it that tells them apart, the arguments could be either's.
    EXPECT_NE(refusal(R"({"type":"object","properties":{"call":{"anyOf":[
        {"type":"object","properties":{"name":{"const":"add"},"arguments":{"type":"object","properties":{"x":{}}}},"required":["arguments"]},
        {"type":"object","properties":{"name":{"const":"say"},"arguments":{"type":"object","properties":{"y":{}}}},"required":["arguments"]}]}}})")
                  .find("both have \"arguments\""),
              std::string::npos)
        << "either name may be skipped";
}

TEST(JsonSchemaVariants, WhatCannotBeToldApartIsRefusedNamingIt) {
    const std::string obj = R"({"type":"object","properties":{"a":)";
    // The same key with different values that start alike.
    EXPECT_NE(refusal(obj + R"({"anyOf":[{"type":"object","properties":{"v":{"type":"string"}}},
        {"type":"object","properties":{"v":{"type":"string","maxLength":2}}}]}}})")
                  .find("at /properties/a: branch 0 and branch 1 both have \"v\" with different values that can start with '\"'"),
              std::string::npos);
    // A branch of free keys, or any value, beside an object.
    EXPECT_NE(refusal(obj + R"({"anyOf":[{"type":"object"},{"type":"object","properties":{"v":{}}}]}}})").find("must list its properties"),
              std::string::npos);
    EXPECT_NE(refusal(obj + R"({"anyOf":[{"type":"object","properties":{"v":{}}},{}]}}})").find("branch 1 and another branch can both start with '{'"),
              std::string::npos);
    EXPECT_NE(refusal(obj + R"({"anyOf":[{"anyOf":[{"type":"object","properties":{"v":{}}},{"type":"null"}]},
        {"type":"object","properties":{"w":{}}}]}}})").find("branch 0 is itself a choice (anyOf, oneOf or a list of types) of an object and other values"),
              std::string::npos);
    // A union within a union: its objects join the outer branches (pydantic's discriminated union
    // beside another model); a choice of an object and null does not.
    const JsonSchema nested(Json::parse(obj + R"({"anyOf":[{"oneOf":[
        {"type":"object","properties":{"t":{"const":"a"},"x":{"type":"integer"}},"required":["t"]},
        {"type":"object","properties":{"t":{"const":"b"},"x":{"type":"string"}},"required":["t"]}]},
        {"$ref":"#/$defs/C"},{"type":"null"}]}},"$defs":{"C":{"anyOf":[{"type":"object","properties":{"c":{"type":"boolean"}},"required":["c"]}]}}})"));
    EXPECT_TRUE(whole(nested, R"({"a":{"t":"b","x":"s"}})"));
    EXPECT_TRUE(whole(nested, R"({"a":{"c":true}})"));
    EXPECT_TRUE(whole(nested, R"({"a":null})"));
    EXPECT_EQ(first_refused(nested, R"({"a":{"t":"a","x":")"), 18u);
    EXPECT_EQ(first_refused(nested, R"({"a":{"t":"a","c")"), 15u);
    // The inner union reached first through a reference (its node compiled after the outer one's copy).
    const JsonSchema referenced(Json::parse(R"({"$defs":{"Outer":{"anyOf":[{"$ref":"#/$defs/Inner"},
        {"type":"object","properties":{"c":{"type":"null"}},"required":["c"]}]},
        "Inner":{"anyOf":[{"type":"object","properties":{"a":{"type":"null"}},"required":["a"]},
                          {"type":"object","properties":{"b":{"type":"null"}},"required":["b"]}]}},
        "type":"object","properties":{"p":{"$ref":"#/$defs/Outer"}}})"));
    for (const char* text : {R"({"p":{"a":null}})", R"({"p":{"b":null}})", R"({"p":{"c":null}})"}) EXPECT_TRUE(whole(referenced, text)) << text;
    // oneOf: exactly one branch must match, so a discriminator must say which.
    EXPECT_NE(refusal(obj + R"({"oneOf":[{"type":"object","properties":{"x":{"type":"integer"}}},
        {"type":"object","properties":{"y":{"type":"integer"}}}]}}})").find("a oneOf of objects needs a discriminator"),
              std::string::npos)
        << "{\"x\":1,\"y\":2} is valid under both (additional properties)";
    EXPECT_NE(refusal(obj + R"({"oneOf":[{"type":"object","properties":{"t":{"enum":["a","b"]}},"required":["t"]},
        {"type":"object","properties":{"t":{"enum":["b"]}},"required":["t"]}]}}})").find("discriminator"),
              std::string::npos)
        << "\"b\" is a value of both";
    // Literals written differently can be one value: 1 and 1.0, objects with their keys in another order.
    for (const auto& [a, b] : {std::pair<std::string, std::string>{"1", "1.0"}, {R"({"a":1,"b":2})", R"({"b":2,"a":1})"}})
        EXPECT_NE(refusal(obj + R"({"oneOf":[{"type":"object","properties":{"d":{"const":)" + a + R"(}},"required":["d"]},
            {"type":"object","properties":{"d":{"const":)" + b + R"(}},"required":["d"]}]}}})").find("discriminator"), std::string::npos)
            << a << " " << b;
    // Branches whose values are alike only past kMaxShapeDepth levels are unlike: two cycles of 101
    // and 100 objects through $ref compare as 10100 nested pairs (a stack's worth), refused instead.
    Json cycles = {{"type", "object"}, {"$defs", Json::object()}};
    for (const int len : {101, 100})
        for (int i = 0; i < len; ++i)
            cycles["$defs"][std::to_string(len) + "_" + std::to_string(i)] = {
                {"type", "object"}, {"properties", {{"n", {{"$ref", "#/$defs/" + std::to_string(len) + "_" + std::to_string((i + 1) % len)}}}}}};
    cycles["properties"]["u"]["anyOf"] = {{{"type", "object"}, {"properties", {{"k", {{"$ref", "#/$defs/101_0"}}}}}},
                                          {{"type", "object"}, {"properties", {{"k", {{"$ref", "#/$defs/100_0"}}}}}}};
    EXPECT_NE(refusal(cycles.dump()).find("both have \"k\""), std::string::npos);
    // Too many branches for the 64-bit set of those still matching.
    Json wide = {{"type", "object"}, {"properties", {{"a", {{"anyOf", Json::array()}}}}}};
    for (int i = 0; i < 65; ++i)
        wide["properties"]["a"]["anyOf"].push_back({{"type", "object"}, {"properties", {{"k" + std::to_string(i), {{"type", "null"}}}}}});
    EXPECT_NE(refusal(wide.dump()).find("more than 64 branches are objects"), std::string::npos);
    wide["properties"]["a"]["anyOf"].erase(64);
    EXPECT_EQ(refusal(wide.dump()), "") << "64 branches are held";
    const JsonSchema s(wide);
    EXPECT_TRUE(whole(s, R"({"a":{"k63":null}})"));
    EXPECT_EQ(first_refused(s, R"({"a":{"k63":null,)"), 16u) << "k63's branch has no other key";
}

}  // namespace
}  // namespace aqpim
