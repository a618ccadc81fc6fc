// Structured outputs' schema compiler and recognizer (serve/json_schema.h, docs/serve.md "JSON
// schemas"). Input: SCHEMA SEP TEXT. The schema is parsed as the server parses a request (nesting
// bounded) and compiled; a JsonSchemaError is the expected refusal. A compiled schema reads TEXT
// byte by byte, each step also through a copy of the recognizer (copies are how the token mask
// tries continuations): the copy must agree with the original. A text it reads as complete must
// be JSON that nlohmann::json parses (bar numbers past double's range, and strings that are not
// UTF-8: bytes >= 0x80 are taken without validation, as docs/serve.md says). Anything else thrown, a crash or a disagreement is a finding.
// Seeds: AQPIM_FUZZ_WRITE_SEEDS (scripts/fuzz.sh).
#include <cstdlib>

#include "aqpim/file_io.h"
#include "fuzz_input.h"
#include "serve/json_schema.h"

namespace {

void write_seeds(const std::filesystem::path& dir) {
    const char* seeds[][2] = {
        {R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer"},)"
         R"("mood":{"enum":["happy","sad",7,null]},"tags":{"type":"array","items":{"type":"string"},"minItems":1,"maxItems":2}},)"
         R"("required":["name","tags"],"additionalProperties":false})",
         R"({"name":"Ann","age":31,"mood":"sad","tags":["a"]})"},
        {R"({"$defs":{"n":{"type":"object","properties":{"v":{"type":["integer","null"]},"kids":{"type":"array","items":{"$ref":"#/$defs/n"}},)"
         R"("note":{"anyOf":[{"type":"string","minLength":2},{"type":"boolean"}]}},"required":["v"]}},"$ref":"#/$defs/n"})",
         R"({"v":1,"kids":[{"v":null,"note":"ab"}],"note":true})"},
        {R"({"type":"object","additionalProperties":{"type":"array","items":{"type":"number"}}})", R"({"x":[1.5e3,-0.2],"y":[]})"},
        {R"({"type":"object","properties":{"a":{"type":"integer","minimum":-40,"maximum":7},"b":{"exclusiveMinimum":99},)"
         R"("c":{"type":["integer","null"],"maximum":-3,"exclusiveMaximum":true}}})",
         R"({"a":-39,"b":100,"c":null})"},
        {R"({"type":"object"})", "{\"a\":[1,{\"b\":null}],\"c\":\"\\u00e9\\ud83d\\ude00\"}"},
        {R"({"type":"object","properties":{"x":{"type":"number","minimum":-1.5,"exclusiveMaximum":2.25},"t":{"minimum":0.1}}})",
         R"({"x":2.2499,"t":3})"},
        {R"({"type":"object","properties":{"d":{"type":"string","pattern":"^\\d{4}-\\d{2}$"},"e":{"pattern":"a\"b|\\\\n"}}})",
         R"({"d":"2026-12","e":"xa\"b"})"},
        {R"({"type":"object","properties":{"w":{"type":"string","format":"date-time"},"h":{"type":"string","format":"hostname","maxLength":9},)"
         R"("p":{"type":"string","pattern":"^(ab)+$","minLength":3,"maxLength":7},"i":{"type":"string","format":"ipv6"},)"
         R"("m":{"type":"integer","multipleOf":2.5,"maximum":100},"c":{"type":"number","multipleOf":0.01}}})",
         R"({"w":"2024-02-29T23:59:59.5+01:00","h":"a.b-c.de","p":"abab","i":"fe80::1","m":95,"c":-1.25})"},
        {R"({"type":"object","properties":{"t":{"type":"array","prefixItems":[{"type":"integer"},{"enum":["a","b"]}],"items":false},)"
         R"("u":{"items":[{"type":"null"}],"additionalItems":{"type":"string","maxLength":2}},)"
         R"("s":{"items":{"enum":["red",1,12,true]},"uniqueItems":true}}})",
         R"({"t":[3,"b"],"u":[null,"ab","c"],"s":[1,true,12]})"},
        {R"({"$defs":{"C":{"type":"object","properties":{"t":{"const":"c"},"n":{"type":"integer"}},"required":["t"]},)"
         R"("D":{"type":"object","properties":{"n":{"type":"string"},"t":{"enum":["d","e"]}},"required":["t"]}},"type":"object",)"
         R"("properties":{"p":{"oneOf":[{"$ref":"#/$defs/C"},{"$ref":"#/$defs/D"},{"type":"null"}]},)"
         R"("q":{"anyOf":[{"type":"object","properties":{"u":{},"v":{"type":"null"}}},{"type":"object","properties":{"v":{"type":"null"},"u":{}}}]}}})",
         R"({"p":{"n":"x","t":"e"},"q":{"v":null,"u":[1]}})"},
    };
    int i = 0;
    for (const auto& [schema, text] : seeds)
        std::ofstream(dir / ("schema" + std::to_string(i++)), std::ios::binary)
            << schema << aqpim::fuzz::kPartSeparator << text;
}

}  // namespace

AQPIM_FUZZ_WRITES_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aqpim::serve;
    using Json = nlohmann::ordered_json;
    const auto parts = aqpim::fuzz::split_parts(data, size);
    Json doc;
    try {
        doc = aqpim::parse_json<Json>(aqpim::fuzz::part(parts, 0), "schema");
    } catch (const aqpim::Error&) {
        return 0;
    }
    std::unique_ptr<JsonSchema> schema;
    try {
        schema = std::make_unique<JsonSchema>(doc);
    } catch (const JsonSchemaError&) {
        return 0;
    }
    const std::string_view text = aqpim::fuzz::part(parts, 1);
    JsonSchemaPrefix p(*schema);
    std::size_t read = 0;
    for (; read < text.size(); ++read) {
        JsonSchemaPrefix copy = p;
        const bool ok = p.feed(text.substr(read, 1));
        if (copy.feed(text.substr(read, 1)) != ok) std::abort();  // a copy reads as the original
        if (!ok) break;
        if (copy.complete() != p.complete() || copy.string_room() != p.string_room()) std::abort();
    }
    if (read == text.size() && p.complete()) {
        try {
            (void)Json::parse(text);
        } catch (const Json::out_of_range&) {  // a number past double's range
        } catch (const Json::parse_error& e) {  // bytes >= 0x80 are taken in strings without UTF-8 validation
            if (std::string_view(e.what()).find("UTF-8") == std::string_view::npos) std::abort();
        }
    }
    return 0;
}
