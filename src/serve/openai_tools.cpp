// Tool calls on /v1/chat/completions (openai_fields.h, docs/serve.md "Tool calls"): the tools
// described to the model, a required or named call kept to its function's parameters by the JSON
// schema mask, calls and their results in the conversation, and a finished answer read as a call.

#include <algorithm>
#include <cctype>

#include "aqpim/file_io.h"
#include "core/text_space.h"
#include "serve/openai_fields.h"
#include "serve/openai_response.h"

namespace aqpim::serve {

using nlohmann::json;
using OrderedJson = nlohmann::ordered_json;
using namespace fields;

namespace {

constexpr std::size_t kMaxTools = 128;  ///< OpenAI's limit

/// A tool's name as OpenAI allows it: 1-64 of a-z, A-Z, 0-9, '_' and '-'.
bool tool_name_ok(const std::string& name) {
    if (name.empty() || name.size() > 64) return false;
    for (const char c : name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
    return true;
}

/// Local references ("#/$defs/U") of a schema moved to `at` within the call's schema point where
/// they pointed in the tool's own parameters.
void move_refs(OrderedJson& schema, const std::string& at) {
    if (schema.is_object())
        for (auto& [key, value] : schema.items()) {
            if (key == "$ref" && value.is_string() && value.get<std::string>().rfind('#', 0) == 0)
                value = "#" + at + value.get<std::string>().substr(1);
            else if (key != "const" && key != "enum" && key != "default" && key != "examples")  // values, not schemas
                move_refs(value, at);
        }
    else if (schema.is_array())
        for (OrderedJson& e : schema) move_refs(e, at);
}

}  // namespace

/// tools and tool_choice (chat). A call is the JSON object {"name": N, "arguments": A} the model
/// writes as its whole answer: tool_choice "required" or a named function keep the output one
/// (or, required with parallel_tool_calls, an array of them), "auto" leaves it free and reads a
/// finished answer that holds calls, "none" leaves the tools out of the prompt.
void read_tools(const json& body, OrderedBody& ordered, CompletionParams& p) {
    const json* tools = field(body, "tools");
    const json* choice = field(body, "tool_choice");
    if (const json* v = field(body, "parallel_tool_calls")) p.parallel_tool_calls = boolean(*v, "parallel_tool_calls");
    if (!tools) {
        if (choice && !(choice->is_string() && choice->get<std::string>() == "none")) bad("tool_choice", "needs tools");
        return;
    }
    if (!p.chat) bad("tools", "are a chat request's");
    if (!tools->is_array() || tools->empty() || tools->size() > kMaxTools)
        bad("tools", fmt::format("expected an array of 1 to {} tools", kMaxTools));
    std::vector<bool> has_parameters;
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
        if (const json* d = field(*fn, "description")) (void)string(*d, at + ".function.description");
        const json* params = field(*fn, "parameters");
        if (params && !params->is_object()) bad(at + ".function.parameters", "expected a JSON schema object");
        has_parameters.push_back(params && !params->empty());  // {} is any object
        if (const json* s = field(*fn, "strict")) (void)boolean(*s, at + ".function.strict");
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
    } else if (choice->is_object() && (!field(*choice, "type") || *field(*choice, "type") == "function") &&
               field(*choice, "function") && field(*choice, "function")->is_object() && field(*field(*choice, "function"), "name")) {
        named = string(*field(*field(*choice, "function"), "name"), "tool_choice.function.name");
        if (std::find(p.tool_names.begin(), p.tool_names.end(), named) == p.tool_names.end())
            bad("tool_choice.function.name", "\"" + named + "\" is not among the tools");
        p.tool_choice = CompletionParams::ToolChoice::named;
    } else {
        bad("tool_choice", "expected \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
    const std::vector<std::string>& names = p.tool_names;
    const bool required = p.tool_choice == CompletionParams::ToolChoice::required;
    if (required && names.size() > JsonSchema::kMaxVariants)
        bad("tools", fmt::format("tool_choice \"required\" takes at most {} tools", JsonSchema::kMaxVariants));
    const auto parameters = [&](std::size_t i) {  // as written; any object when none are given
        return has_parameters[i] ? ordered.at({"tools", std::to_string(i), "function", "parameters"}) : OrderedJson{{"type", "object"}};
    };
    // The tools in the prompt, their members in the written order: after the system message's
    // text, or as one. A call is written {"name": N, "arguments": A}; several as an array of them.
    const bool several = p.parallel_tool_calls && p.tool_choice != CompletionParams::ToolChoice::named;
    OrderedJson listed = OrderedJson::array();
    for (std::size_t i = 0; i < tools->size(); ++i) {
        OrderedJson shown = {{"name", names[i]}};
        if (const json* d = field(*field((*tools)[i], "function"), "description")) shown["description"] = *d;
        if (has_parameters[i]) shown["parameters"] = parameters(i);
        listed.push_back(std::move(shown));
    }
    const std::string described =
        "You can call these functions (each with a JSON Schema of its arguments):\n" + listed.dump() +
        "\nTo call one, answer with only a JSON object: {\"name\": the function's name, \"arguments\": an object of its arguments}." +
        std::string(several ? " To call several at once, answer with a JSON array of such objects." : "");
    if (!p.messages.empty() && p.messages[0].role == "system") p.messages[0].content += "\n\n" + described;
    else p.messages.insert(p.messages.begin(), {"system", described});
    if (p.tool_choice == CompletionParams::ToolChoice::auto_call) return;
    if (p.constrained())
        bad("tool_choice", "one output constraint per request: a required or named tool call, or response_format / structured_outputs / grammar");
    // A call's schema: {"name": N, "arguments": N's parameters}, N the named function or any of
    // them when one is required (an anyOf of objects told apart by the name before the
    // arguments, json_schema_variants.cpp); several calls (required, parallel_tool_calls): the
    // call or a non-empty array of calls.
    std::vector<std::size_t> called;  // the tools whose calls the schema holds
    for (std::size_t i = 0; i < names.size(); ++i)
        if (required || names[i] == named) called.push_back(i);
    OrderedJson calls = OrderedJson::array();
    const std::string call_at = several ? "/$defs/call" : "";
    for (std::size_t k = 0; k < called.size(); ++k) {
        OrderedJson call = {{"type", "object"}, {"properties", OrderedJson::object()}, {"required", {"name", "arguments"}}};
        call["properties"]["name"] = {{"const", names[called[k]]}};
        call["properties"]["arguments"] = parameters(called[k]);
        move_refs(call["properties"]["arguments"],
                  (called.size() > 1 ? fmt::format("{}/anyOf/{}", call_at, k) : call_at) + "/properties/arguments");
        calls.push_back(std::move(call));
    }
    OrderedJson schema = called.size() > 1 ? OrderedJson{{"anyOf", std::move(calls)}} : std::move(calls[0]);
    if (several)
        schema = {{"$defs", {{"call", std::move(schema)}}},
                  {"anyOf", {{{"$ref", "#/$defs/call"}}, {{"type", "array"}, {"items", {{"$ref", "#/$defs/call"}}}, {"minItems", 1}}}}};
    const std::string param = called.size() == 1 ? fmt::format("tools[{}].function.parameters", called[0]) : "tools";
    std::shared_ptr<const JsonSchema> compiled;
    try {
        compiled = std::make_shared<const JsonSchema>(schema, JsonSchema::Root::any);
    } catch (const JsonSchemaError& e) {
        bad(param, std::string("the call's schema ") + e.what());
    }
    // A call's arguments are an object (OpenAI's rule): a schema that admits other values would
    // let the model write a call no client reads as one. The call: the root's object branch, one
    // object or the tools' variants in their order.
    const JsonSchema::Node* call = &compiled->node(compiled->root());
    while (call->kind == JsonSchema::Kind::choice) {  // (the array's branch starts with '[')
        const auto b = std::find_if(call->branches.begin(), call->branches.end(), [&](int n) { return compiled->node(n).first['{']; });
        call = &compiled->node(*b);
    }
    for (std::size_t k = 0; k < called.size(); ++k) {
        const JsonSchema::Node& one = call->variants.empty() ? *call : compiled->node(call->variants[k]);
        if (compiled->node(one.properties[1].node).kind != JsonSchema::Kind::object)
            bad(fmt::format("tools[{}].function.parameters", called[k]), "must describe an object (\"type\": \"object\")");
    }
    p.json_schema = std::move(compiled);
    p.json_mode = true;
}

std::string tool_calls_text(const json& tool_calls, const std::string& param) {
    if (!tool_calls.is_array()) bad(param, fmt::format("expected an array, got {}", type_name(tool_calls)));
    std::string text;
    for (std::size_t i = 0; i < tool_calls.size(); ++i) {
        const std::string at = fmt::format("{}[{}]", param, i);
        const json& c = tool_calls[i];
        const json* fn = c.is_object() ? field(c, "function") : nullptr;
        if (!fn || !fn->is_object() || !field(*fn, "name"))
            bad(at, "expected {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
        OrderedJson call = {{"name", string(*field(*fn, "name"), at + ".function.name")}, {"arguments", OrderedJson::object()}};
        if (const json* a = field(*fn, "arguments")) {
            const std::string args = string(*a, at + ".function.arguments");  // OpenAI's: a JSON text ("" none)
            try {
                if (!args.empty()) call["arguments"] = parse_json<OrderedJson>(args, at + ".function.arguments");
            } catch (const Error& e) {
                bad(at + ".function.arguments", e.what());
            }
        }
        if (i) text += '\n';
        text += call.dump();
    }
    return text;
}

namespace {

constexpr std::string_view kCallOpen = "<tool_call>", kCallClose = "</tool_call>";
/// DeepSeek V3's and R1's calls: <｜tool▁calls▁begin｜> then per call <｜tool▁call▁begin｜>function
/// <｜tool▁sep｜>NAME\n```json\nARGUMENTS\n```<｜tool▁call▁end｜>, then <｜tool▁calls▁end｜>.
constexpr std::string_view kDsCallsBegin = "<\uFF5Ctool\u2581calls\u2581begin\uFF5C>",
                           kDsCallsEnd = "<\uFF5Ctool\u2581calls\u2581end\uFF5C>",
                           kDsCallBegin = "<\uFF5Ctool\u2581call\u2581begin\uFF5C>",
                           kDsCallEnd = "<\uFF5Ctool\u2581call\u2581end\uFF5C>", kDsSep = "<\uFF5Ctool\u2581sep\uFF5C>";
/// Where a block of calls may open after content: Hermes' tag, DeepSeek's (with or without its outer token).
constexpr std::string_view kBlockOpens[] = {kCallOpen, kDsCallsBegin, kDsCallBegin};
/// Written before a JSON call by Llama 3.1 (`<|python_tag|>`) and Mistral (`[TOOL_CALLS]`).
constexpr std::string_view kCallMarkers[] = {"<|python_tag|>", "[TOOL_CALLS]"};

using Call = std::pair<std::string, OrderedJson>;  // name, arguments

/// One call object: {"name": N, "arguments" or "parameters": A} (A an object, or a JSON text of
/// one) or {N: A}, N one of `names`.
bool call_of(const OrderedJson& v, const std::vector<std::string>& names, std::vector<Call>& out) {
    if (!v.is_object()) return false;
    std::string name;
    OrderedJson arguments;
    const char* args_key = v.contains("arguments") ? "arguments" : "parameters";
    if (v.size() == 2 && v.contains("name") && v["name"].is_string() && v.contains(args_key)) {
        name = v["name"];
        arguments = v[args_key];
        if (arguments.is_string()) {
            try {
                arguments = parse_json<OrderedJson>(arguments.get<std::string>(), "a tool call's arguments");
            } catch (const Error&) {
                return false;
            }
        }
    } else if (v.size() == 1) {
        name = v.begin().key();
        arguments = v.begin().value();
    } else {
        return false;
    }
    if (!arguments.is_object() || std::find(names.begin(), names.end(), name) == names.end()) return false;
    out.emplace_back(std::move(name), std::move(arguments));
    return true;
}

/// A JSON text that is one call object or an array of them.
bool calls_of_json(std::string_view text, const std::vector<std::string>& names, std::vector<Call>& out) {
    OrderedJson v;
    try {
        v = parse_json<OrderedJson>(std::string(text), "a tool call");  // nesting bounded, as every JSON the server reads
    } catch (const Error&) {
        return false;
    }
    if (!v.is_array()) return call_of(v, names, out);
    if (v.empty()) return false;
    for (const OrderedJson& e : v)
        if (!call_of(e, names, out)) return false;
    return true;
}

/// Hermes' form (Qwen, Hermes, chatml models): content, then <tool_call>CALL</tool_call> blocks
/// with only whitespace between and after them (the last one's closing tag may be missing).
bool calls_of_tags(std::string_view text, const std::vector<std::string>& names, std::vector<Call>& out, std::string& content) {
    std::size_t at = text.find(kCallOpen);
    if (at == std::string_view::npos) return false;
    content = std::string(trim_space(text.substr(0, at)));
    for (;;) {
        const std::size_t body = at + kCallOpen.size(), close = text.find(kCallClose, body);
        if (!calls_of_json(text.substr(body, close == std::string_view::npos ? std::string_view::npos : close - body), names, out))
            return false;
        if (close == std::string_view::npos) return true;
        const std::size_t next = text.find_first_not_of(kSpaceBytes, close + kCallClose.size());
        if (next == std::string_view::npos) return true;
        if (text.substr(next, kCallOpen.size()) != kCallOpen) return false;
        at = next;
    }
}

/// DeepSeek's form: content, then its calls block (its outer tokens may be missing, the last
/// call's end too), only whitespace after it.
bool calls_of_deepseek(std::string_view text, const std::vector<std::string>& names, std::vector<Call>& out,
                       std::string& content) {
    const std::size_t block = text.find(kDsCallsBegin), first = text.find(kDsCallBegin);
    if (first == std::string_view::npos) return false;
    const std::size_t at = std::min(block, first);
    content = std::string(trim_space(text.substr(0, at)));
    std::string_view rest = trim_space(text.substr(at));
    if (rest.substr(0, kDsCallsBegin.size()) == kDsCallsBegin) rest = trim_space(rest.substr(kDsCallsBegin.size()));
    while (rest.substr(0, kDsCallBegin.size()) == kDsCallBegin) {
        rest = rest.substr(kDsCallBegin.size());
        const std::size_t sep = rest.find(kDsSep), end = rest.find(kDsCallEnd);
        if (sep == std::string_view::npos || sep > end || trim_space(rest.substr(0, sep)) != "function") return false;
        std::string_view call = rest.substr(sep + kDsSep.size(), end == std::string_view::npos ? std::string_view::npos : end - sep - kDsSep.size());
        const std::size_t line = call.find('\n');
        if (line == std::string_view::npos) return false;
        const std::string name(trim_space(call.substr(0, line)));
        std::string_view arguments = trim_space(call.substr(line + 1));
        if (arguments.substr(0, 7) == "```json") arguments = arguments.substr(7);
        else if (arguments.substr(0, 3) == "```") arguments = arguments.substr(3);
        if (arguments.size() >= 3 && arguments.substr(arguments.size() - 3) == "```") arguments.remove_suffix(3);
        OrderedJson args;
        try {
            args = parse_json<OrderedJson>(std::string(arguments), "a tool call's arguments");
        } catch (const Error&) {
            return false;
        }
        if (!args.is_object() || std::find(names.begin(), names.end(), name) == names.end()) return false;
        out.emplace_back(name, std::move(args));
        if (end == std::string_view::npos) return true;  // the last call's end missing
        rest = trim_space(rest.substr(end + kDsCallEnd.size()));
    }
    if (rest.substr(0, kDsCallsEnd.size()) == kDsCallsEnd) rest = trim_space(rest.substr(kDsCallsEnd.size()));
    return rest.empty() && !out.empty();
}

/// A block of calls after content: Hermes' tags or DeepSeek's.
bool calls_of_block(std::string_view text, const std::vector<std::string>& names, std::vector<Call>& out, std::string& content) {
    if (calls_of_tags(text, names, out, content)) return true;
    out.clear();
    if (calls_of_deepseek(text, names, out, content)) return true;
    out.clear();
    return false;
}

/// OpenAI's tool_calls array of `calls` (ids `id`, `id`_1, ...; with `parallel` false the first only).
ToolCallsRead calls_read(std::vector<Call> calls, std::string content, const std::string& id, bool parallel) {
    if (!parallel) calls.resize(1);
    json out = json::array();
    for (std::size_t k = 0; k < calls.size(); ++k)
        out.push_back({{"id", k ? fmt::format("{}_{}", id, k) : id},
                       {"type", "function"},
                       {"function", {{"name", calls[k].first}, {"arguments", calls[k].second.dump()}}}});
    return {std::move(out), std::move(content)};
}

}  // namespace

ToolCallsRead tool_calls_of(const std::string& text, const std::vector<std::string>& names, const std::string& id, bool parallel) {
    std::vector<Call> calls;
    std::string content;
    std::string_view body = trim_space(text);
    for (const std::string_view marker : kCallMarkers)
        if (body.substr(0, marker.size()) == marker) body = trim_space(body.substr(marker.size()));
    if (!calls_of_json(body, names, calls)) {
        calls.clear();
        if (!calls_of_block(text, names, calls, content)) return {};
    }
    return calls_read(std::move(calls), std::move(content), id, parallel);
}

ToolCallsRead tool_calls_in_tags(const std::string& text, const std::vector<std::string>& names, const std::string& id,
                                 bool parallel) {
    std::vector<Call> calls;
    std::string content;
    if (!calls_of_block(text, names, calls, content)) return {};
    return calls_read(std::move(calls), std::move(content), id, parallel);
}

bool may_open_tool_calls(std::string_view text) {
    for (const std::string_view open : kBlockOpens) {
        if (text.find(open) != std::string_view::npos) return true;
        for (std::size_t k = std::min(text.size(), open.size() - 1); k > 0; --k)
            if (text.substr(text.size() - k) == open.substr(0, k)) return true;
    }
    return false;
}

bool may_be_tool_calls(std::string_view text) {
    const std::size_t first = text.find_first_not_of(kSpaceBytes);
    if (first == std::string_view::npos) return true;
    const std::string_view rest = text.substr(first);
    if (rest[0] == '{' || rest[0] == '[') {  // a call object opens with a key, an array of them with a call object
        const std::size_t next = rest.find_first_not_of(kSpaceBytes, 1);
        if (next == std::string_view::npos || rest[next] == (rest[0] == '{' ? '"' : '{')) return true;
    }
    for (const std::string_view start : {kCallOpen, kCallMarkers[0], kCallMarkers[1], kDsCallsBegin, kDsCallBegin}) {
        const std::size_t n = std::min(rest.size(), start.size());
        if (rest.substr(0, n) == start.substr(0, n)) return true;
    }
    return false;
}

}  // namespace aqpim::serve
