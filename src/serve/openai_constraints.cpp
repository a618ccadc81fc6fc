// A request's output constraints (openai_fields.h): response_format (JSON mode, OpenAI's and
// llama-server's JSON schemas), vLLM's structured_outputs and guided_* fields, and a chat request's
// tools (docs/serve.md "JSON mode", "JSON schemas", "Regular expressions and choices", "Tool calls").

#include <bitset>
#include <set>

#include "aqpim/file_io.h"
#include "serve/openai_fields.h"
#include "serve/openai_response.h"

namespace aqpim::serve {

using nlohmann::json;
using namespace fields;

namespace {

constexpr std::size_t kMaxTools = 64;

/// The JSON schema at `path` in the body, its members in the order the client wrote them when
/// `body_text` is given (nlohmann::json sorts them).
nlohmann::ordered_json ordered_schema(const json& body, std::string_view body_text, const std::vector<std::string>& path) {
    std::string pointer;
    for (const std::string& key : path) pointer += "/" + key;  // keys without '/' or '~'; array indices as digits
    const nlohmann::json_pointer<std::string> at(pointer);
    if (body_text.empty()) return nlohmann::ordered_json(body.at(at));
    return parse_json<nlohmann::ordered_json>(body_text, "request body").at(at);
}

/// response_format into p.json_mode and p.json_schema: {"type": "text"}, {"type": "json_object"}
/// (JSON mode; llama-server's "schema" member beside it taken as a schema), or OpenAI's
/// {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}.
void read_response_format(const json& body, std::string_view body_text, CompletionParams& p) {
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
        p.json_schema = std::make_shared<const JsonSchema>(ordered_schema(body, body_text, path));
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

/// vLLM's structured outputs into p.regex (or p.json_mode and p.json_schema): {"structured_outputs":
/// {"regex": R}}, {"choice": [texts]} or {"json": schema} (vLLM 0.12 on), or the fields those
/// replaced, guided_regex, guided_choice and guided_json. The whole output matches the regex, is
/// one of the choices, or is a JSON object of the schema. One constraint per request.
void read_structured_outputs(const json& body, std::string_view body_text, CompletionParams& p) {
    std::vector<std::vector<std::string>> found;  // paths to the constraints given
    if (const json* so = field(body, "structured_outputs")) {
        if (!so->is_object()) bad("structured_outputs", fmt::format("expected an object, got {}", type_name(*so)));
        for (const auto& [key, value] : so->items()) {
            if (key != "regex" && key != "choice" && key != "json")
                bad("structured_outputs." + key, "is not supported (regex, choice and json are)");
            if (!value.is_null()) found.push_back({"structured_outputs", key});
        }
    }
    for (const char* key : {"guided_regex", "guided_choice", "guided_json"})
        if (field(body, key)) found.push_back({key});
    if (found.empty()) return;
    const std::string name = found[0].size() == 2 ? found[0][0] + "." + found[0][1] : found[0][0];
    if (found.size() > 1 || p.json_mode)
        bad(name, "one output constraint per request (structured_outputs' regex, choice or json, a guided_ field, or response_format)");
    const json* v = &body;
    for (const std::string& key : found[0]) v = &(*v)[key];
    const std::string kind = found[0].back().substr(found[0].back().rfind('_') + 1);  // regex, choice, json
    if (kind == "json") {
        try {
            p.json_schema = std::make_shared<const JsonSchema>(
                v->is_string() ? parse_json<nlohmann::ordered_json>(v->get<std::string>(), "the schema") : ordered_schema(body, body_text, found[0]));
        } catch (const JsonSchemaError& e) {
            bad(name, e.what());
        } catch (const Error& e) {  // a schema given as text that is not JSON
            bad(name, e.what());
        }
        p.json_mode = true;
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

/// A tool's name as OpenAI allows it: 1-64 of a-z, A-Z, 0-9, '_' and '-'.
bool tool_name_ok(const std::string& name) {
    if (name.empty() || name.size() > 64) return false;
    for (const char c : name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
    return true;
}

/// tools and tool_choice (chat). A call is the JSON object {"name": N, "arguments": A} the model
/// writes as its whole answer: tool_choice "required" or a named function keep the output one
/// (the name's schema, `parameters` as written, for one function; any object's arguments among
/// several), "auto" leaves it free and reads a finished answer that is one as a call, "none"
/// leaves the tools out of the prompt.
void read_tools(const json& body, std::string_view body_text, CompletionParams& p) {
    const json* tools = field(body, "tools");
    const json* choice = field(body, "tool_choice");
    if (const json* v = field(body, "parallel_tool_calls")) (void)boolean(*v, "parallel_tool_calls");  // one call at most
    if (!tools) {
        if (choice && !(choice->is_string() && choice->get<std::string>() == "none")) bad("tool_choice", "needs tools");
        return;
    }
    if (!p.chat) bad("tools", "are a chat request's");
    if (!tools->is_array() || tools->empty() || tools->size() > kMaxTools)
        bad("tools", fmt::format("expected an array of 1 to {} tools", kMaxTools));
    json listed = json::array();  // what the prompt shows of them
    for (std::size_t i = 0; i < tools->size(); ++i) {
        const std::string at = fmt::format("tools[{}]", i);
        const json& t = (*tools)[i];
        if (!t.is_object()) bad(at, fmt::format("expected an object, got {}", type_name(t)));
        const json* type = field(t, "type");
        if (!type || string(*type, at + ".type") != "function") bad(at + ".type", "only \"function\" tools are supported");
        const json* fn = field(t, "function");
        if (!fn || !fn->is_object()) bad(at + ".function", "expected {\"name\": ..., \"parameters\": {...}}");
        for (const auto& [key, value] : fn->items())
            if (key != "name" && key != "description" && key != "parameters" && key != "strict")
                bad(at + ".function." + key, "unrecognized");
        const json* name = field(*fn, "name");
        if (!name) bad(at + ".function.name", "missing");
        const std::string n = string(*name, at + ".function.name");
        if (!tool_name_ok(n)) bad(at + ".function.name", "1 to 64 of a-z, A-Z, 0-9, '_' and '-'");
        if (std::find(p.tool_names.begin(), p.tool_names.end(), n) != p.tool_names.end())
            bad(at + ".function.name", "\"" + n + "\" names two tools");
        p.tool_names.push_back(n);
        json shown = {{"name", n}};
        if (const json* d = field(*fn, "description")) shown["description"] = string(*d, at + ".function.description");
        if (const json* params = field(*fn, "parameters")) {
            if (!params->is_object()) bad(at + ".function.parameters", "expected a JSON schema object");
            shown["parameters"] = *params;
        }
        if (const json* s = field(*fn, "strict")) (void)boolean(*s, at + ".function.strict");
        listed.push_back(std::move(shown));
    }
    // tool_choice: "none", "auto" (the default with tools), "required" or {"type": "function", "function": {"name": N}}.
    std::string named;
    if (!choice || (choice->is_string() && choice->get<std::string>() == "auto")) {
        p.tool_choice = CompletionParams::ToolChoice::auto_call;
    } else if (choice->is_string() && choice->get<std::string>() == "none") {
        p.tool_choice = CompletionParams::ToolChoice::none;
        p.tool_names.clear();
        return;
    } else if (choice->is_string() && choice->get<std::string>() == "required") {
        p.tool_choice = CompletionParams::ToolChoice::required;
    } else if (choice->is_object() && field(*choice, "function") && field(*choice, "function")->is_object() &&
               field(*field(*choice, "function"), "name")) {
        named = string(*field(*field(*choice, "function"), "name"), "tool_choice.function.name");
        if (std::find(p.tool_names.begin(), p.tool_names.end(), named) == p.tool_names.end())
            bad("tool_choice.function.name", "\"" + named + "\" is not among the tools");
        p.tool_choice = CompletionParams::ToolChoice::named;
    } else {
        bad("tool_choice", "expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    // The tools in the prompt: after the system message's text, or as one. A call is written
    // {"name": N, "arguments": A}, or {N: A} where one of several functions is required (the
    // schema compiler cannot choose the arguments' schema by a name already written; it can by
    // the key).
    const bool keyed = p.tool_choice == CompletionParams::ToolChoice::required && p.tool_names.size() > 1;
    const std::string described =
        "You can call these functions (each with a JSON Schema of its arguments):\n" + listed.dump() +
        (keyed ? "\nTo call one, answer with only a JSON object: {the function's name: an object of its arguments}."
               : "\nTo call one, answer with only a JSON object: {\"name\": the function's name, \"arguments\": an object of its arguments}.");
    if (!p.messages.empty() && p.messages[0].role == "system") p.messages[0].content += "\n\n" + described;
    else p.messages.insert(p.messages.begin(), {"system", described});
    if (p.tool_choice == CompletionParams::ToolChoice::auto_call) return;
    if (p.json_mode || p.regex)
        bad("tool_choice", "one output constraint per request: a required or named tool call, or response_format / structured_outputs");
    // The call's schema: {"name": the name (or one of them), "arguments": that function's parameters}.
    nlohmann::ordered_json schema = nlohmann::ordered_json::object(), properties = nlohmann::ordered_json::object();
    schema["type"] = "object";
    const std::vector<std::string>& names = p.tool_names;
    if (!named.empty() || names.size() == 1) {
        const std::string n = named.empty() ? names[0] : named;
        const std::size_t i = std::size_t(std::find(names.begin(), names.end(), n) - names.begin());
        properties["name"] = {{"const", n}};
        const json* fn = field((*tools)[i], "function");
        properties["arguments"] = field(*fn, "parameters")
                                      ? ordered_schema(body, body_text, {"tools", std::to_string(i), "function", "parameters"})
                                      : nlohmann::ordered_json{{"type", "object"}};
        schema["properties"] = std::move(properties);
        schema["required"] = {"name", "arguments"};
    } else {  // {N: A}: exactly one of the functions, keyed by its name
        for (std::size_t i = 0; i < names.size(); ++i)
            properties[names[i]] = field(*field((*tools)[i], "function"), "parameters")
                                       ? ordered_schema(body, body_text, {"tools", std::to_string(i), "function", "parameters"})
                                       : nlohmann::ordered_json{{"type", "object"}};
        schema["properties"] = std::move(properties);
        schema["minProperties"] = 1;
        schema["maxProperties"] = 1;
    }
    try {
        p.json_schema = std::make_shared<const JsonSchema>(schema);
    } catch (const JsonSchemaError& e) {
        bad(named.empty() ? "tools" : "tool_choice", std::string("the call's schema ") + e.what());
    }
    p.json_mode = true;
}

}  // namespace

void read_output_constraints(const json& body, std::string_view body_text, CompletionParams& p) {
    read_response_format(body, body_text, p);
    read_structured_outputs(body, body_text, p);
    read_tools(body, body_text, p);
}

std::string tool_calls_text(const json& tool_calls, const std::string& param) {
    if (!tool_calls.is_array()) bad(param, fmt::format("expected an array, got {}", type_name(tool_calls)));
    std::string text;
    for (std::size_t i = 0; i < tool_calls.size(); ++i) {
        const std::string at = fmt::format("{}[{}]", param, i);
        const json& c = tool_calls[i];
        const json* fn = c.is_object() ? field(c, "function") : nullptr;
        if (!fn || !fn->is_object() || !field(*fn, "name")) bad(at, "expected {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
        json call = {{"name", string(*field(*fn, "name"), at + ".function.name")}, {"arguments", json::object()}};
        if (const json* a = field(*fn, "arguments")) {
            const std::string args = string(*a, at + ".function.arguments");  // OpenAI's: a JSON text
            try {
                call["arguments"] = parse_json(args, at + ".function.arguments");
            } catch (const Error& e) {
                bad(at + ".function.arguments", e.what());
            }
        }
        if (i) text += '\n';
        text += call.dump();
    }
    return text;
}

json tool_calls_of(const std::string& text, const std::vector<std::string>& names, const std::string& id) {
    json v;
    try {
        v = json::parse(text);
    } catch (const json::exception&) {
        return nullptr;
    }
    std::string name;
    json arguments;
    if (v.is_object() && v.size() == 2 && v.contains("name") && v["name"].is_string() && v.contains("arguments") &&
        v["arguments"].is_object())
        name = v["name"], arguments = v["arguments"];
    else if (v.is_object() && v.size() == 1 && v.begin().value().is_object())  // {N: A}
        name = v.begin().key(), arguments = v.begin().value();
    else
        return nullptr;
    if (std::find(names.begin(), names.end(), name) == names.end()) return nullptr;
    return json::array({{{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments.dump()}}}}});
}

}  // namespace aqpim::serve
