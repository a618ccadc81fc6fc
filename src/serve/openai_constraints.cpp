// A request's output constraints (openai_fields.h): response_format (JSON mode, OpenAI's and
// llama-server's JSON schemas), vLLM's structured_outputs and guided_* fields, and a chat request's
// tools (docs/serve.md "JSON mode", "JSON schemas", "Regular expressions and choices", "Tool calls").

#include <bitset>
#include <set>
#include <vector>

#include "aqpim/file_io.h"
#include "serve/openai_fields.h"
#include "serve/openai_response.h"

namespace aqpim::serve {

using nlohmann::json;
using namespace fields;

namespace {

/// response_format into p.json_mode and p.json_schema: {"type": "text"}, {"type": "json_object"}
/// (JSON mode; llama-server's "schema" member beside it taken as a schema), or OpenAI's
/// {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}; or
/// llama-server's top-level "json_schema": {...}.
void read_response_format(const json& body, OrderedBody& ordered, CompletionParams& p) {
    if (const json* schema = field(body, "json_schema"); schema && !schema->is_null()) {
        // llama-server's own field: the schema itself, of any JSON value (as llama-server takes it),
        // beside no response_format but {"type": "text"}.
        const json* rf = field(body, "response_format");
        const json* rf_type = rf && rf->is_object() ? field(*rf, "type") : nullptr;
        if (rf && !(rf_type && *rf_type == "text"))
            bad("json_schema", "one output constraint per request (json_schema or response_format)");
        if (!schema->is_object()) bad("json_schema", fmt::format("expected a schema object, got {}", type_name(*schema)));
        try {
            p.json_schema = std::make_shared<const JsonSchema>(ordered.at({"json_schema"}), JsonSchema::Root::any);
        } catch (const JsonSchemaError& e) {
            bad("json_schema", e.what());
        }
        p.json_mode = true;
        return;
    }
    const json* v = field(body, "response_format");
    if (!v) return;
    const json* t = v->is_object() ? field(*v, "type") : nullptr;
    const std::string type = t && t->is_string() ? t->get<std::string>() : "";
    if (type != "text" && type != "json_object" && type != "json_schema")
        bad("response_format", "expected {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": \"json_schema\", \"json_schema\": {\"schema\": ...}}");
    p.json_mode = type != "text";
    std::vector<std::string> path;  // to the schema within the body
    if (type == "json_object" && field(*v, "schema")) path = {"response_format", "schema"};
    if (type == "json_schema") {
        const json* js = field(*v, "json_schema");
        if (!js || !js->is_object() || !field(*js, "schema"))
            bad("response_format", "json_schema: expected {\"name\": ..., \"schema\": {...}}");
        path = {"response_format", "json_schema", "schema"};
    }
    if (path.empty()) return;
    const std::string where = path.back() == "schema" && path.size() == 3 ? "json_schema.schema" : "schema";
    try {
        p.json_schema = std::make_shared<const JsonSchema>(ordered.at(path));
    } catch (const JsonSchemaError& e) {
        bad("response_format", where + " " + e.what());
    }
}

/// `text` as a pattern that matches it literally.
std::string regex_literal(const std::string& text) {
    std::string out;
    for (const char c : text) {
        if (std::string_view("\\^$.|?*+()[]{}/").find(c) != std::string_view::npos) out += '\\';
        out += c;
    }
    return out;
}

/// vLLM's structured outputs into p.regex (or p.json_mode and p.json_schema, or p.grammar):
/// {"structured_outputs": {"regex": R}}, {"choice": [texts]}, {"json": schema} or {"grammar": G}
/// (vLLM 0.12 on), or the fields those replaced, guided_regex, guided_choice, guided_json and
/// guided_grammar, or llama-server's `grammar`. The whole output matches the regex, is one of the
/// choices, is a JSON object of the schema, or matches the GBNF grammar. One constraint per request.
void read_structured_outputs(const json& body, OrderedBody& ordered, CompletionParams& p) {
    std::vector<std::vector<std::string>> found;  // paths to the constraints given
    if (const json* so = field(body, "structured_outputs")) {
        if (!so->is_object()) bad("structured_outputs", fmt::format("expected an object, got {}", type_name(*so)));
        for (const auto& [key, value] : so->items()) {
            if (key != "regex" && key != "choice" && key != "json" && key != "grammar")
                bad("structured_outputs." + key, "is not supported (regex, choice, json and grammar are)");
            if (!value.is_null()) found.push_back({"structured_outputs", key});
        }
    }
    for (const char* key : {"guided_regex", "guided_choice", "guided_json", "guided_grammar", "grammar"})
        if (const json* v = field(body, key); v && !(key == std::string_view("grammar") && v->is_string() && v->get<std::string>().empty()))
            found.push_back({key});  // llama-server sends "grammar": "" for none
    if (found.empty()) return;
    const std::string name = found[0].size() == 2 ? found[0][0] + "." + found[0][1] : found[0][0];
    if (found.size() > 1 || p.json_mode)
        bad(name, "one output constraint per request (structured_outputs' regex, choice, json or grammar, a guided_ field, grammar, or response_format)");
    const json* v = &body;
    for (const std::string& key : found[0]) v = &(*v)[key];
    const std::string& last = found[0].back();
    const std::string kind = last.substr(last.rfind('_') + 1);  // regex, choice, json, grammar
    if (kind == "json") {
        try {
            p.json_schema = std::make_shared<const JsonSchema>(
                v->is_string() ? parse_json<nlohmann::ordered_json>(v->get<std::string>(), "the schema") : ordered.at(found[0]));
        } catch (const JsonSchemaError& e) {
            bad(name, e.what());
        } catch (const Error& e) {  // a schema given as text that is not JSON
            bad(name, e.what());
        }
        p.json_mode = true;
        return;
    }
    if (kind == "grammar") {
        try {
            p.grammar = std::make_shared<const Grammar>(string(*v, name.c_str()));
        } catch (const GrammarError& e) {
            bad(name, e.what());
        }
        return;
    }
    std::string pattern;
    if (kind == "regex") {
        pattern = string(*v, name.c_str());
    } else {
        if (!v->is_array() || v->empty()) bad(name, "expected a non-empty array of strings");
        for (const json& c : *v) {
            if (!c.is_string()) bad(name, fmt::format("expected strings, got {}", type_name(c)));
            if (!pattern.empty()) pattern += '|';
            pattern += regex_literal(c.get<std::string>());
        }
        if (pattern.size() > RegexDfa::kMaxPatternBytes)
            bad(name, fmt::format("the choices take more than {} bytes as a pattern", RegexDfa::kMaxPatternBytes));
    }
    try {
        p.regex = std::make_shared<const RegexDfa>(pattern, RegexDfa::Match::whole, std::bitset<256>().set());
    } catch (const RegexError& e) {
        bad(name, e.what());
    }
}

}  // namespace

OrderedBody::OrderedBody(const json& body, std::string_view text) : body_(body), text_(text) {}

const nlohmann::ordered_json& OrderedBody::whole() {
    if (parsed_) return *parsed_;
    if (text_.empty()) return parsed_.emplace(body_);  // no text: the sorted order
    // ordered_json finds a member by a linear search, so reading an object costs the square of its
    // size: bound the largest object before reading (the sorted body says how large they are).
    std::vector<const json*> todo = {&body_};
    while (!todo.empty()) {
        const json* v = todo.back();
        todo.pop_back();
        if (v->is_object() && v->size() > kMaxMembers)
            bad("request body", fmt::format("an object of {} members; a request with a schema takes at most {} per object",
                                            v->size(), kMaxMembers));
        if (v->is_structured())
            for (const json& e : *v) todo.push_back(&e);
    }
    return parsed_.emplace(parse_json<nlohmann::ordered_json>(text_, "request body"));
}

nlohmann::ordered_json OrderedBody::at(const std::vector<std::string>& path) {
    std::string pointer;
    for (const std::string& key : path) pointer += "/" + key;  // keys without '/' or '~'; array indices as digits
    return whole().at(nlohmann::json_pointer<std::string>(pointer));
}

void read_output_constraints(const json& body, std::string_view body_text, CompletionParams& p) {
    OrderedBody ordered(body, body_text);
    read_response_format(body, ordered, p);
    read_structured_outputs(body, ordered, p);
    read_tools(body, ordered, p);
}

}  // namespace aqpim::serve
