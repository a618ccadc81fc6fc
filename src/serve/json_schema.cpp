// Structured outputs: the schema compiler and its recognizer (json_schema.h).

#include "serve/json_schema.h"

#include "serve/json_formats.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <set>
#include <utility>


namespace aqpim::serve {

using Json = nlohmann::ordered_json;

namespace {

/// Keywords that constrain a value and are not implemented: refused, never ignored. Unknown
/// keywords and annotations (title, description, default, examples, a `format` not in
/// json_formats(), ...) are ignored, as JSON Schema ignores what it does not know.
const std::set<std::string>& refused_keywords() {
    static const std::set<std::string> k = {
        "not", "if",
        "then", "else", "contains", "minContains", "maxContains",
        "patternProperties", "dependentRequired", "dependentSchemas", "dependencies",
        "unevaluatedProperties", "unevaluatedItems", "$dynamicRef",
        "$recursiveRef", "contentSchema"};
    return k;
}

/// Keywords that shape a value: a `$ref`, `allOf`, `anyOf`, `oneOf`, `enum` or `const` takes the
/// value's shape alone (`enum` and `const` beside `type` only), since the compiler does not
/// intersect schemas: with another beside it, both would have to hold at once.
const std::vector<std::string>& shaping_keywords() {
    static const std::vector<std::string> k = {"$ref", "allOf", "anyOf", "oneOf", "enum", "const", "type",
                                               "properties", "required", "additionalProperties", "propertyNames", "minProperties", "maxProperties", "items", "prefixItems", "additionalItems", "uniqueItems",
                                               "minLength", "maxLength", "pattern", "minItems", "maxItems", "minimum", "maximum",
                                               "exclusiveMinimum", "exclusiveMaximum", "multipleOf"};
    return k;
}

std::string pointer_token(const std::string& name) {  // RFC 6901
    std::string out;
    for (const char c : name) out += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return out;
}

JsonSchema::Node node_of(JsonSchema::Kind kind) {
    JsonSchema::Node n;
    n.kind = kind;
    return n;
}

/// A name as written between a JSON string's quotes.
std::string escaped(const std::string& name) {
    const std::string quoted = Json(name).dump();
    return quoted.substr(1, quoted.size() - 2);
}

std::bitset<256> bytes_of(std::string_view chars) {
    std::bitset<256> b;
    for (const char c : chars) b.set(static_cast<unsigned char>(c));
    return b;
}

const std::bitset<256>& number_first() {
    static const std::bitset<256> b = bytes_of("-0123456789");
    return b;
}

bool has_type(const Json& v, const std::string& type) {
    if (type == "object") return v.is_object();
    if (type == "array") return v.is_array();
    if (type == "string") return v.is_string();
    if (type == "integer") return v.is_number_integer() || v.is_number_unsigned() ||
                                  (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>());
    if (type == "number") return v.is_number();
    if (type == "boolean") return v.is_boolean();
    return type == "null" && v.is_null();
}

}  // namespace

JsonSchemaError::JsonSchemaError(const std::string& where, const std::string& message)
    : std::runtime_error("at " + (where.empty() ? std::string("the root") : where) + ": " + message) {}

JsonSchema::JsonSchema(const Json& schema, Root root) : document_(&schema) {
    Node any = node_of(Kind::any);
    any.first = bytes_of("{[\"-0123456789tfn");
    add(any, "");
    Node object = node_of(Kind::object);
    object.extra = kAny;
    object.first = bytes_of("{");
    add(object, "");
    Node array = node_of(Kind::array);
    array.items = kAny;
    array.first = bytes_of("[");
    add(array, "");
    Node string = node_of(Kind::string);
    string.first = bytes_of("\"");
    add(string, "");
    Node number = node_of(Kind::number);
    number.first = number_first();
    add(number, "");
    Node literal = node_of(Kind::literal);
    literal.texts = {"true", "false", "null"};
    literal.first = bytes_of("tfn");
    add(literal, "");

    root_ = compile(schema, "");
    if (root == Root::object && nodes_[std::size_t(root_)].kind != Kind::object)
        throw JsonSchemaError("", "the root must be an object schema ({\"type\": \"object\", ...})");
    check_choices();
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
        if (nodes_[i].key < 0) continue;
        int k = nodes_[i].key;
        while (nodes_[std::size_t(k)].kind == Kind::choice && nodes_[std::size_t(k)].branches.size() == 1)
            k = nodes_[std::size_t(k)].branches[0];
        const Node& key = nodes_[std::size_t(k)];
        // Any value, or keywords of another type only ({"maximum": 3}): every name is valid.
        if (key.kind == Kind::any || (key.inferred && key.kind != Kind::string && key.kind != Kind::choice)) nodes_[i].key = -1;
        else if (key.first != bytes_of("\""))
            throw JsonSchemaError(wheres_[i] + "/propertyNames", "must describe strings only (a key is a string)");
    }
    const auto cache_budget = std::make_shared<std::atomic<std::int64_t>>(TokenSetCache::kMaxBytes);
    for (RegexDfa& p : patterns_) p.token_cache().share_budget(cache_budget);
    document_ = nullptr;
    refs_.clear();
    pattern_ids_.clear();
    length_ids_.clear();
    wheres_.clear();
    wheres_.shrink_to_fit();
}

void JsonSchema::check_choices() {
    // A choice's first bytes, and whether a branch's type was inferred, are its branches' (a
    // fixpoint: a branch may be a $ref compiled later, or the choice itself).
    for (bool changed = true; changed;) {
        changed = false;
        for (Node& n : nodes_) {
            if (n.kind != Kind::choice) continue;
            std::bitset<256> f;
            bool inferred = false;
            for (const int b : n.branches) f |= nodes_[std::size_t(b)].first, inferred = inferred || nodes_[std::size_t(b)].inferred;
            if (f != n.first || inferred != n.inferred) n.first = f, n.inferred = inferred, changed = true;
        }
    }
    const std::size_t compiled = nodes_.size();  // (merging objects adds nodes, none of them choices)
    std::set<int> merged;
    for (std::size_t i = 0; i < compiled; ++i) {
        const Node& n = nodes_[i];
        if (n.first.none()) throw JsonSchemaError(wheres_[i], "the schema accepts no value (references that lead only to each other)");
        if (n.kind != Kind::choice) continue;
        std::bitset<256> seen;
        for (std::size_t b = 0; b < n.branches.size(); ++b) {
            const Node& branch = nodes_[std::size_t(n.branches[b])];
            if (n.one_of && branch.inferred)
                throw JsonSchemaError(wheres_[i], "oneOf branch " + std::to_string(b) + " has no \"type\": values of every "
                                                  "other type would match it too");
            std::bitset<256> both = seen & branch.first;
            seen |= branch.first;
            both.reset('{');  // objects: merged below
            if (both.none()) continue;
            int c = 0;
            while (!both[std::size_t(c)]) ++c;
            std::size_t a = 0;
            while (!nodes_[std::size_t(n.branches[a])].first[std::size_t(c)]) ++a;
            throw JsonSchemaError(wheres_[i], "branches " + std::to_string(a) + " and " + std::to_string(b) +
                                                  " can both start with '" + std::string(1, char(c)) +
                                                  "': a value's branch must be known from its first byte "
                                                  "(different JSON types)");
        }
        merge_choice(int(i), merged);
    }
}

int JsonSchema::add(Node n, const std::string& where) {
    if (nodes_.size() >= kMaxNodes)
        throw JsonSchemaError(where, "the schema compiles to more than " + std::to_string(kMaxNodes) + " nodes");
    nodes_.push_back(std::move(n));
    wheres_.push_back(where);
    return int(nodes_.size() - 1);
}

int JsonSchema::compile(const Json& s, const std::string& where) {
    if (nesting_ >= kMaxNesting)
        throw JsonSchemaError(where, "schemas nested deeper than " + std::to_string(kMaxNesting) + " (with $ref chains)");
    ++nesting_;
    const int node = compile_nested(s, where);
    --nesting_;
    return node;
}

int JsonSchema::compile_nested(const Json& s, const std::string& where) {
    if (s.is_boolean()) {
        if (s.get<bool>()) return kAny;
        throw JsonSchemaError(where, "the schema false accepts no value");
    }
    if (!s.is_object()) throw JsonSchemaError(where, "a schema must be an object or a boolean");
    for (const auto& [key, value] : s.items())
        if (refused_keywords().count(key)) throw JsonSchemaError(where, "the keyword \"" + key + "\" is not supported");
    const auto shaped_beside = [&](const std::string& by, const char* also_allowed = "") {
        for (const std::string& k : shaping_keywords())
            if (k != by && k != also_allowed && s.contains(k))
                throw JsonSchemaError(where, "\"" + k + "\" beside \"" + by + "\" is not supported");
        if (s.contains("format") && s["format"].is_string() && find_json_format(s["format"].get<std::string>()))
            throw JsonSchemaError(where, "\"format\" beside \"" + by + "\" is not supported");
    };
    if (s.contains("$ref")) {
        shaped_beside("$ref");
        if (!s["$ref"].is_string()) throw JsonSchemaError(where + "/$ref", "expected a string");
        return compile_ref(s["$ref"].get<std::string>(), where + "/$ref");
    }
    if (s.contains("allOf")) {  // pydantic v1 wraps a $ref with a description in a one-element allOf
        shaped_beside("allOf");
        const Json& all = s["allOf"];
        if (!all.is_array() || all.size() != 1)
            throw JsonSchemaError(where + "/allOf", "only an allOf of one schema is supported");
        return compile(all[0], where + "/allOf/0");
    }
    for (const char* any_of : {"anyOf", "oneOf"}) {
        if (!s.contains(any_of)) continue;
        shaped_beside(any_of);
        const Json& branches = s[any_of];
        const std::string at = where + "/" + any_of;
        if (!branches.is_array() || branches.empty()) throw JsonSchemaError(at, "expected a non-empty array of schemas");
        Node n = node_of(Kind::choice);
        n.one_of = std::string(any_of) == "oneOf";
        for (std::size_t i = 0; i < branches.size(); ++i) n.branches.push_back(compile(branches[i], at + "/" + std::to_string(i)));
        return add(std::move(n), where);
    }

    std::vector<std::string> types;
    if (s.contains("type")) {
        const Json& t = s["type"];
        if (t.is_string()) types.push_back(t.get<std::string>());
        else if (t.is_array() && !t.empty())
            for (const Json& e : t) {
                if (!e.is_string()) throw JsonSchemaError(where + "/type", "expected type names");
                types.push_back(e.get<std::string>());
            }
        else throw JsonSchemaError(where + "/type", "expected a type name or a non-empty array of them");
        for (const std::string& type : types)
            if (type != "object" && type != "array" && type != "string" && type != "number" && type != "integer" &&
                type != "boolean" && type != "null")
                throw JsonSchemaError(where + "/type", "unknown type \"" + type + "\"");
    }
    for (const char* key : {"enum", "const"}) {
        if (!s.contains(key)) continue;
        shaped_beside(key, "type");
        const std::string at = where + "/" + key;
        const Json values = std::string(key) == "const" ? Json::array({s[key]}) : s[key];
        if (!values.is_array() || values.empty()) throw JsonSchemaError(at, "expected a non-empty array");
        if (values.size() > kMaxLiterals)
            throw JsonSchemaError(at, "more than " + std::to_string(kMaxLiterals) + " values");
        Node n = node_of(Kind::literal);
        for (const Json& v : values) {
            const bool typed = types.empty() || std::any_of(types.begin(), types.end(), [&](const std::string& t) { return has_type(v, t); });
            if (!typed) continue;  // a value of another type can never be valid
            std::string text = v.dump();
            if (text.size() > kMaxLiteralBytes)
                throw JsonSchemaError(at, "a value longer than " + std::to_string(kMaxLiteralBytes) + " bytes as JSON");
            if (std::find(n.texts.begin(), n.texts.end(), text) == n.texts.end()) n.texts.push_back(std::move(text));
        }
        if (n.texts.empty()) throw JsonSchemaError(at, "no value has the schema's type");
        for (const std::string& t : n.texts) n.first.set(static_cast<unsigned char>(t[0]));
        return add(std::move(n), where);
    }
    if (types.empty()) {  // the type from the keywords that only apply to one: a value of it is valid
        std::string type;
        if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties") ||
            s.contains("propertyNames") || s.contains("minProperties") || s.contains("maxProperties"))
            type = "object";
        else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) type = "array";
        else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern")) type = "string";
        else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                 s.contains("exclusiveMaximum") || s.contains("multipleOf"))
            type = "integer";
        else return kAny;
        const int node = compile_typed(s, type, where);
        nodes_[std::size_t(node)].inferred = true;  // values of other types are valid too (oneOf: below)
        return node;
    }
    if (std::find(types.begin(), types.end(), "number") != types.end())  // every integer is a number
        types.erase(std::remove(types.begin(), types.end(), "integer"), types.end());
    std::sort(types.begin(), types.end());
    types.erase(std::unique(types.begin(), types.end()), types.end());
    if (types.size() == 1) return compile_typed(s, types[0], where);
    Node n = node_of(Kind::choice);
    for (const std::string& type : types) n.branches.push_back(compile_typed(s, type, where));
    return add(std::move(n), where);
}

int JsonSchema::compile_typed(const Json& s, const std::string& type, const std::string& where) {
    const auto bound = [&](const char* key, std::int64_t fallback) -> std::int64_t {
        if (!s.contains(key)) return fallback;
        const Json& v = s[key];
        if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<std::int64_t>() >= 0))
            throw JsonSchemaError(where + "/" + key, "expected a non-negative integer");
        return std::int64_t(std::min<std::uint64_t>(v.get<std::uint64_t>(), std::uint64_t(1) << 40));
    };
    Node n;
    if (type == "object") {
        n.kind = Kind::object;
        n.first = bytes_of("{");
        if (s.contains("properties")) {
            const Json& props = s["properties"];
            if (!props.is_object()) throw JsonSchemaError(where + "/properties", "expected an object");
            if (props.size() > kMaxProperties)
                throw JsonSchemaError(where + "/properties", "more than " + std::to_string(kMaxProperties) + " properties");
            for (const auto& [name, sub] : props.items()) {
                const std::string at = where + "/properties/" + pointer_token(name);
                std::string key = escaped(name);
                if (key.size() > kMaxLiteralBytes)
                    throw JsonSchemaError(at, "a property name longer than " + std::to_string(kMaxLiteralBytes) + " bytes as JSON");
                n.properties.push_back({std::move(key), compile(sub, at), false});
            }
        }
        if (s.contains("required")) {
            const Json& req = s["required"];
            if (!req.is_array()) throw JsonSchemaError(where + "/required", "expected an array of names");
            for (const Json& name : req) {
                if (!name.is_string()) throw JsonSchemaError(where + "/required", "expected an array of names");
                const std::string key = escaped(name.get<std::string>());
                auto it = std::find_if(n.properties.begin(), n.properties.end(), [&](const Property& p) { return p.key == key; });
                if (it == n.properties.end())
                    throw JsonSchemaError(where + "/required", "\"" + name.get<std::string>() +
                                                                   "\" is required but not among the properties "
                                                                   "(only listed properties are generated)");
                it->required = true;
            }
        }
        if (s.contains("additionalProperties")) {
            const Json& extra = s["additionalProperties"];
            if (!extra.is_boolean() && !extra.is_object())
                throw JsonSchemaError(where + "/additionalProperties", "expected a boolean or a schema");
            // With listed properties only those are written (valid whatever this allows).
            if (n.properties.empty())
                n.extra = extra.is_boolean() ? (extra.get<bool>() ? kAny : -1)
                                             : compile(extra, where + "/additionalProperties");
        } else if (n.properties.empty()) {
            n.extra = kAny;
        }
        if (s.contains("propertyNames")) {  // pydantic's dict[Literal[...], X] and dict[constr(pattern=...), X]
            if (!n.properties.empty())
                throw JsonSchemaError(where + "/propertyNames", "beside listed properties is not supported (it shapes free keys' names)");
            const int key = compile(s["propertyNames"], where + "/propertyNames");
            if (n.extra >= 0) n.key = key;  // (checked to describe strings when references are resolved)
        }
        if (s.contains("minProperties") || s.contains("maxProperties")) {
            // Free keys (a dict): the members counted, within the bounds. Listed properties: only
            // "exactly one of them".
            if (n.properties.empty()) {
                // Members are counted as written, and a key may be written twice (JSON allows it;
                // the parsed object then holds it once): so a maximum holds exactly, and a minimum
                // of at most 1 (one member written is one key); larger minimums are refused.
                n.min = bound("minProperties", 0);
                n.max = n.extra < 0 ? 0 : bound("maxProperties", -1);
                if (n.min > 1)
                    throw JsonSchemaError(where + "/minProperties", "above 1 is not supported for free keys (a key written twice "
                                                                    "would count twice; the parsed object holds it once)");
            } else {
                const bool one = s.value("minProperties", Json()) == Json(1) && s.value("maxProperties", Json()) == Json(1);
                if (!one || s.contains("required"))
                    throw JsonSchemaError(where, "beside listed properties, minProperties and maxProperties are supported only as "
                                                 "both 1 and no required ones (exactly one of the listed properties)");
                n.one_property = true;
            }
        }
    } else if (type == "array") {
        n.kind = Kind::array;
        n.first = bytes_of("[");
        n.min = bound("minItems", 0);
        n.max = bound("maxItems", -1);
        compile_items(s, where, n);
    } else if (type == "string") {
        n.kind = Kind::string;
        n.first = bytes_of("\"");
        n.min = bound("minLength", 0);
        n.max = bound("maxLength", -1);
        compile_text_automaton(s, where, n);
    } else if (type == "number" || type == "integer") {
        n.kind = type == "number" ? Kind::number : Kind::integer;
        n.first = number_first();
        number_bounds(s, where, n);
    } else {
        n.kind = Kind::literal;
        n.texts = type == "boolean" ? std::vector<std::string>{"true", "false"} : std::vector<std::string>{"null"};
        for (const std::string& t : n.texts) n.first.set(static_cast<unsigned char>(t[0]));
    }
    if (n.max >= 0 && n.min > n.max)
        throw JsonSchemaError(where, "the lower bound " + std::to_string(n.min) + " exceeds the upper bound " + std::to_string(n.max));
    return add(std::move(n), where);
}

void JsonSchema::compile_items(const Json& s, const std::string& where, Node& n) {
    // A tuple: prefixItems (draft 2020-12) and then `items`, or draft 7's array of `items` and
    // then `additionalItems`; the schema after the prefix may be false (no more items).
    const bool draft7_tuple = s.contains("items") && s["items"].is_array();
    if (draft7_tuple && s.contains("prefixItems"))
        throw JsonSchemaError(where, "\"prefixItems\" beside an array of \"items\" (two drafts' tuples at once) is not supported");
    const char* prefix_key = draft7_tuple ? "items" : "prefixItems";
    const char* rest_key = draft7_tuple ? "additionalItems" : "items";
    if (s.contains(prefix_key)) {
        const Json& prefix = s[prefix_key];
        if (!prefix.is_array()) throw JsonSchemaError(where + "/" + prefix_key, "expected an array of schemas");
        for (std::size_t i = 0; i < prefix.size(); ++i)
            n.prefix_items.push_back(compile(prefix[i], where + "/" + prefix_key + "/" + std::to_string(i)));
    }
    n.items = kAny;
    if (s.contains(rest_key)) {
        const Json& rest = s[rest_key];
        if (rest.is_boolean()) n.items = rest.get<bool>() ? kAny : -1;
        else n.items = compile(rest, where + "/" + rest_key);
    }
    if (n.items < 0) n.max = n.max < 0 ? std::int64_t(n.prefix_items.size()) : std::min(n.max, std::int64_t(n.prefix_items.size()));
    if (s.contains("uniqueItems")) {
        const Json& u = s["uniqueItems"];
        if (!u.is_boolean()) throw JsonSchemaError(where + "/uniqueItems", "expected a boolean");
        if (u.get<bool>()) {
            // A set of enum or const values: each item one of the literals, each literal once (the
            // recognizer keeps which were used in 64 bits). Items of other schemas would need
            // every earlier item remembered.
            if (!n.prefix_items.empty() || n.items < 0 || nodes_[std::size_t(n.items)].kind != Kind::literal)
                throw JsonSchemaError(where + "/uniqueItems", "supported only where every item is one of enum or const values "
                                                              "(a set of them), without prefixItems");
            const std::vector<std::string>& texts = nodes_[std::size_t(n.items)].texts;
            for (std::size_t a = 0; a < texts.size(); ++a)
                for (std::size_t b = a + 1; b < texts.size(); ++b)
                    if (nlohmann::json::parse(texts[a]) == nlohmann::json::parse(texts[b]))  // unordered: {"x":1,"y":2} is {"y":2,"x":1}
                        throw JsonSchemaError(where + "/uniqueItems", "the values " + texts[a] + " and " + texts[b] +
                                                                      " are equal: as items they could not both be written");
            n.unique = true;
            const std::int64_t distinct = std::int64_t(texts.size());
            n.max = n.max < 0 ? distinct : std::min(n.max, distinct);
        }
    }
}

void JsonSchema::number_bounds(const Json& s, const std::string& where, Node& n) {
    const char* keys[] = {"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum", "multipleOf"};
    bool any = false;
    for (const char* k : keys) any = any || s.contains(k);
    if (!any) return;
    // The values within the bounds, on the grid of what is written (1e-18 for a number, 1 for an
    // integer), in units of 1e-18, exactly: minimum m -> m rounded up to the grid, exclusiveMinimum x
    // -> the next grid point above x (draft 4's boolean form: minimum made exclusive), and the same
    // downwards. A JSON integer is exact; a float is read through its shortest decimal form.
    using Wide = __int128;
    const Wide scale = kBoundScale, huge = Wide(1) << 120, limit = Wide(100000000000000000) * scale;  // 1e17
    const Wide grid = n.kind == Kind::integer ? scale : 1;
    const auto floor_div = [](Wide a, Wide b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); };
    const auto scaled = [&](const char* key, bool round_up) -> Wide {  // the keyword's value x 1e18
        const Json& v = s[key];
        if (!v.is_number()) throw JsonSchemaError(where + "/" + key, "expected a number");
        if (v.is_number_unsigned()) return Wide(v.get<std::uint64_t>()) * scale;
        if (v.is_number_integer()) return Wide(v.get<std::int64_t>()) * scale;
        const double d = v.get<double>();
        if (!std::isfinite(d)) throw JsonSchemaError(where + "/" + key, "expected a finite number");
        if (std::fabs(d) > 1e20) return d > 0 ? huge : -huge;
        char buf[64];
        const auto end = std::to_chars(buf, buf + sizeof buf, d).ptr;  // shortest: "0.1", "1e-07", "-2.5e+19"
        Wide mantissa = 0;
        int exponent = 18, sign = 1;
        bool point = false;
        for (const char* c = buf; c < end; ++c) {
            if (*c == '-') sign = -1;
            else if (*c == '.') point = true;
            else if (*c == 'e') {  // to_chars writes no NUL: read the exponent within [c + 1, end)
                int e = 0;
                std::from_chars(c + 1 + (c[1] == '+'), end, e);
                exponent += e;
                c = end - 1;
            }
            else mantissa = mantissa * 10 + (*c - '0'), exponent -= point;
        }
        mantissa *= sign;
        if (exponent >= 0) {
            for (int k = 0; k < exponent; ++k) mantissa *= 10;
            return mantissa;
        }
        if (exponent < -36) return mantissa == 0 ? 0 : (round_up ? (mantissa > 0 ? 1 : 0) : (mantissa > 0 ? 0 : -1));
        Wide p = 1;
        for (int k = 0; k < -exponent; ++k) p *= 10;
        return round_up ? -floor_div(-mantissa, p) : floor_div(mantissa, p);
    };
    Wide lo = -huge, hi = huge;
    for (const bool upper : {false, true}) {
        const char* plain = upper ? "maximum" : "minimum";
        const char* exclusive = upper ? "exclusiveMaximum" : "exclusiveMinimum";
        const bool draft4 = s.contains(exclusive) && s[exclusive].is_boolean();
        Wide& bound = upper ? hi : lo;
        if (s.contains(plain)) {
            const bool open = draft4 && s[exclusive].get<bool>();
            bound = upper ? (open ? scaled(plain, true) - 1 : scaled(plain, false))
                          : (open ? scaled(plain, false) + 1 : scaled(plain, true));
        }
        if (s.contains(exclusive) && !draft4)
            bound = upper ? std::min(bound, scaled(exclusive, true) - 1) : std::max(bound, scaled(exclusive, false) + 1);
    }
    lo = -floor_div(-lo, grid) * grid;  // onto the grid: up, and down
    hi = floor_div(hi, grid) * grid;
    if (lo > limit || hi < -limit) throw JsonSchemaError(where, "bounds beyond +-1e17 are not supported");
    if (lo > hi)
        throw JsonSchemaError(where, std::string("no ") + (n.kind == Kind::integer ? "integer" : "number") +
                                         " lies within minimum and maximum");
    n.has_lowest = lo >= -limit;
    n.has_highest = hi <= limit;
    n.lowest = n.has_lowest ? lo : 0;
    n.highest = n.has_highest ? hi : 0;
    if (!s.contains("multipleOf")) return;
    // multipleOf, exactly: on the 1e-18 grid (a float through its shortest decimal form), an
    // integer's the least common multiple with 1. An exact number is written with at most 18
    // integer digits, so below 1e18 in magnitude: a step of 1e18 or more has only 0 as a multiple
    // there, and stands as 1e18 for all of them.
    const std::string at = where + "/multipleOf";
    const Json& m = s["multipleOf"];
    if (!m.is_number() || !(m.get<double>() > 0)) throw JsonSchemaError(at, "expected a number above 0");
    Wide step = scaled("multipleOf", false);
    if (step == 0 || step != scaled("multipleOf", true))
        throw JsonSchemaError(at, "a multipleOf with more than 18 fraction digits is not supported");
    const Wide cap = Wide(1000000000000000000) * scale;  // 1e18 in units of 1e-18
    step = std::min(step, cap);
    if (n.kind == Kind::integer) {
        Wide a = step, b = scale;  // gcd
        while (b != 0) a = std::exchange(b, a % b);
        step = step / a > cap / scale ? cap : step / a * scale;
    }
    n.multiple = step;
    const Wide lowest = std::max(lo, 1 - cap), highest = std::min(hi, cap - 1);  // what can be written
    if (floor_div(highest, step) * step < lowest)
        throw JsonSchemaError(where, std::string("no ") + (n.kind == Kind::integer ? "integer" : "number") +
                                         " within the bounds is a multiple of multipleOf");
}

const std::bitset<256>& JsonSchema::pattern_writable() {
    static const std::bitset<256> b = [] {
        std::bitset<256> w;
        for (int c = 0x20; c < 256; ++c) w.set(std::size_t(c));
        for (const char c : {'\b', '\f', '\n', '\r', '\t'}) w.set(static_cast<unsigned char>(c));
        return w;
    }();
    return b;
}

void JsonSchema::compile_text_automaton(const Json& s, const std::string& where, Node& n) {
    const JsonFormat* format = nullptr;
    if (s.contains("format") && s["format"].is_string()) format = find_json_format(s["format"].get<std::string>());
    if (s.contains("pattern") && format)
        throw JsonSchemaError(where, "\"pattern\" beside the format \"" + std::string(format->name) + "\" is not supported");
    std::string at;
    if (s.contains("pattern")) {
        at = where + "/pattern";
        if (!s["pattern"].is_string()) throw JsonSchemaError(at, "expected a string");
        n.pattern = compile_pattern(s["pattern"].get<std::string>(), RegexDfa::Match::search, at);
    } else if (format) {
        at = where + "/format";
        n.pattern = compile_pattern(format->regex, RegexDfa::Match::whole, at);
    } else {
        return;
    }
    // A length bound beside it: the states from which a match of an admissible length goes on.
    std::int64_t max = n.max;
    if (format && format->max_chars >= 0) max = max < 0 ? format->max_chars : std::min(max, format->max_chars);
    if ((n.min == 0 && max < 0) || (n.max >= 0 && n.min > n.max)) return;  // no bound, or one the caller refuses
    const std::string bounds =
        "minLength " + std::to_string(n.min) + (n.max >= 0 ? ", maxLength " + std::to_string(n.max) : std::string()) +
        (format && format->max_chars >= 0 ? ", and the format's own bound of " + std::to_string(format->max_chars) + " characters" : "");
    if (max >= 0 && n.min > max) throw JsonSchemaError(at, "no text has " + bounds);
    const auto key = std::make_tuple(n.pattern, n.min, max);  // one table per automaton and bounds
    if (const auto it = length_ids_.find(key); it != length_ids_.end()) {
        n.lengths = it->second;
        return;
    }
    try {
        lengths_.emplace_back(patterns_[std::size_t(n.pattern)], n.min, max, kMaxPatternWork - pattern_work_);
    } catch (const RegexError& e) {
        throw JsonSchemaError(at, std::string(e.what()) + " (" + bounds + ")");
    }
    n.lengths = int(lengths_.size() - 1);
    length_ids_[key] = n.lengths;
    pattern_work_ += lengths_.back().work();
    pattern_bytes_ += lengths_.back().bytes();
    if (pattern_bytes_ > kMaxPatternTableBytes)
        throw JsonSchemaError(at, "the schema's patterns need more than " + std::to_string(kMaxPatternTableBytes >> 20) +
                                      " MiB of automata and length tables");
}

int JsonSchema::compile_pattern(std::string_view source, RegexDfa::Match match, const std::string& where) {
    const auto key = std::make_pair(std::string(source), match);
    if (const auto it = pattern_ids_.find(key); it != pattern_ids_.end()) return it->second;
    if (patterns_.size() >= kMaxPatterns)
        throw JsonSchemaError(where, "more than " + std::to_string(kMaxPatterns) + " patterns and formats in one schema");
    try {
        patterns_.emplace_back(source, match, pattern_writable(), kMaxPatternWork - pattern_work_);
    } catch (const RegexError& e) {
        const bool shared = pattern_work_ > 0 && std::string_view(e.what()).find("too complex") != std::string_view::npos;
        throw JsonSchemaError(where, std::string(e.what()) + (shared ? " (with the schema's other patterns)" : ""));
    }
    pattern_work_ += patterns_.back().work();
    pattern_bytes_ += patterns_.back().table_bytes();
    if (pattern_bytes_ > kMaxPatternTableBytes)
        throw JsonSchemaError(where, "the schema's patterns need more than " + std::to_string(kMaxPatternTableBytes >> 20) +
                                         " MiB of automata");
    pattern_ids_[key] = int(patterns_.size() - 1);
    return int(patterns_.size() - 1);
}

int JsonSchema::compile_ref(const std::string& ref, const std::string& where) {
    if (const auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref.empty() || ref[0] != '#')
        throw JsonSchemaError(where, "only references within the schema (\"#...\") are supported, not \"" + ref + "\"");
    const Json* target = nullptr;
    try {
        const Json::json_pointer pointer(ref.substr(1));
        if (document_->contains(pointer)) target = &document_->at(pointer);
    } catch (const Json::exception&) {
    }
    if (!target) throw JsonSchemaError(where, "\"" + ref + "\" names nothing in the schema");
    const int at = add(node_of(Kind::any), where);  // a placeholder: a cycle back to it resolves to it
    refs_[ref] = at;
    pending_refs_.insert(at);
    const int compiled = compile(*target, ref.substr(1));
    if (pending_refs_.count(compiled))
        throw JsonSchemaError(where, "\"" + ref + "\" comes back to itself through references alone");
    pending_refs_.erase(at);
    nodes_[std::size_t(at)] = nodes_[std::size_t(compiled)];
    wheres_[std::size_t(at)] = wheres_[std::size_t(compiled)];  // errors name the target, not the reference
    return at;
}

}  // namespace aqpim::serve
