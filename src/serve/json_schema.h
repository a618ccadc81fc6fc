#pragma once
// Structured outputs (`response_format: {"type": "json_schema", ...}`, docs/serve.md "JSON
// schemas"): a JSON Schema compiled into nodes, and a byte-level recognizer that says whether a text
// is still the beginning of a value the schema accepts. It plugs into JSON mode's token mask
// (json_constraint.h) in place of the schema-less JsonPrefix.
//
// Generation follows llama.cpp's json-schema-to-grammar where a schema leaves a choice: an
// object's listed properties come in the schema's order, each required one present, an optional
// one present or skipped; keys not listed are never written (they would be valid only where
// `additionalProperties` allows them). Value-constraining keywords that are not implemented are
// refused, naming the keyword and where it is, never silently dropped.

#include <array>
#include <bitset>
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "serve/json_constraint.h"
#include "serve/regex_dfa.h"
#include "serve/regex_lengths.h"

namespace aqpim::serve {

/// A schema the compiler refuses: `where` is a JSON pointer into it ("/properties/age").
class JsonSchemaError : public std::runtime_error {
public:
    JsonSchemaError(const std::string& where, const std::string& message);
};

class JsonSchema {
public:
    static constexpr std::size_t kMaxProperties = 64;     ///< per object (key matching is a 64-bit set)
    static constexpr std::size_t kMaxLiterals = 64;       ///< values of one enum
    static constexpr std::size_t kMaxLiteralBytes = 1024; ///< one enum or const value as compact JSON, one property name
    static constexpr std::size_t kMaxNodes = 4096;        ///< compiled nodes (a $ref target compiles once)
    static constexpr std::size_t kMaxVariants = 64;       ///< objects of one anyOf / oneOf (the variants still admitted: a 64-bit set)
    static constexpr std::size_t kMaxPatterns = 32;  ///< distinct `pattern`s and `format`s (their TokenSetCaches share one budget)
    static constexpr std::size_t kMaxPatternTableBytes = std::size_t(2) << 20;  ///< their automata and length tables together
    static constexpr std::uint64_t kMaxPatternWork = RegexDfa::kMaxWork;  ///< their determinization and length tables' steps together
    /// Nodes every schema has first: any value, and any value of each JSON type (`any` starts one of them).
    static constexpr std::int64_t kBoundScale = 1000000000000000000;  ///< 1e18: bounds in units of 1e-18
    static constexpr int kAny = 0, kAnyObject = 1, kAnyArray = 2, kAnyString = 3, kAnyNumber = 4, kAnyLiteral = 5;

    enum class Kind : std::uint8_t {
        any,      ///< any JSON value
        object,   ///< `properties` in order, or free keys whose values are `extra` (between min and max of them), or `variants`
        array,    ///< `items`, between min and max of them
        string,   ///< between min and max characters (code points; an escape is one), matching `pattern` or `format`
        number,
        integer,
        literal,  ///< one of `texts` exactly (enum, const, boolean, null)
        choice,   ///< anyOf / oneOf / a list of types: the branch is known from the value's first byte
    };
    struct Property {
        std::string key;  ///< the name as written between the quotes (JSON-escaped)
        int node = 0;
        bool required = false;
    };
    struct Node {
        Kind kind = Kind::any;
        std::vector<Property> properties;  ///< object
        int extra = -1;                    ///< object without properties: node of free keys' values (-1: no keys)
        int key = -1;                      ///< object of free keys: node of their names (`propertyNames`, a string's; -1: any string)
        int items = -1;                    ///< array: items after the prefix (-1: none; max then bounds the array to the prefix)
        std::vector<int> prefix_items;     ///< array: its first items' own schemas (a tuple: prefixItems, or draft 7's items array)
        /// array: the schema of item `i` (-1: no item may be there)
        int item(std::int64_t i) const { return i < std::int64_t(prefix_items.size()) ? prefix_items[std::size_t(i)] : items; }
        std::int64_t min = 0, max = -1;    ///< array items, string characters, members of an object of free keys; max -1: unbounded
        std::vector<std::string> texts;    ///< literal: the values as compact JSON
        std::vector<int> branches;         ///< choice
        std::bitset<256> first;            ///< the bytes a value of this node can start with
        bool has_lowest = false, has_highest = false;  ///< integer, number: bounded below / above
        /// integer, number: the bounds, inclusive, times kBoundScale (|bound| <= 1e17): on the grid
        /// of the values written (multiples of kBoundScale for an integer; 1e-18 for a number,
        /// which is written with at most 18 fraction digits and no exponent when bounded)
        __int128 lowest = 0, highest = 0;
        /// integer, number: `multipleOf` times kBoundScale (an integer's: the least common multiple
        /// with kBoundScale), at most 1e18 x kBoundScale (past what is written); 0: none. Exact: a
        /// number with one is written as a bounded one is.
        __int128 multiple = 0;
        /// integer, number: written without an exponent, its value checked exactly (bounds or a multiple)
        bool exact() const { return has_lowest || has_highest || multiple > 0; }
        int pattern = -1;                  ///< string: its `pattern`'s or `format`'s automaton (-1: none)
        int lengths = -1;                  ///< string with an automaton and a length bound: its RegexLengths (-1: none)
        bool one_property = false;         ///< object: exactly one of the listed properties (min and maxProperties 1)
        bool unique = false;               ///< array: uniqueItems over literal items (each of the item node's texts once)
        bool one_of = false;               ///< choice: from oneOf (no branch's type may be inferred)
        bool inferred = false;             ///< its type was inferred from its keywords (other types also valid)
        // An object of variants (anyOf / oneOf branches that are objects, json_schema_variants.cpp):
        // `properties` are every variant's keys once; a text is read while some variant still
        // admits it (its keys in that variant's order, its values of that variant's schemas).
        std::vector<int> variants;               ///< the variants' object nodes (at most kMaxVariants)
        std::vector<std::int8_t> variant_at;     ///< [key * variants + v]: the key's index among variant v's properties (-1: none)
        std::vector<int> variant_value;          ///< [key * variants + v]: the node that reads its value in variant v
        std::vector<std::vector<std::uint8_t>> variant_keys;  ///< [v][j]: the key index of variant v's property j
        /// literal of an object of variants (their literals of one key merged): [text] the variants it is a value of
        std::vector<std::uint64_t> text_variants;
    };

    /// What the root may be: an object schema (OpenAI's rule for a client's schema), or any
    /// (the server's own schemas: several tool calls are an array).
    enum class Root : bool { object, any };
    /// Compiles `schema` (a JSON Schema, draft 2020-12 or 7 keywords; its object members in the
    /// order the client wrote them). Throws JsonSchemaError.
    explicit JsonSchema(const nlohmann::ordered_json& schema, Root root = Root::object);

    const Node& node(int i) const { return nodes_[std::size_t(i)]; }
    int root() const { return root_; }
    const RegexDfa& pattern(int i) const { return patterns_[std::size_t(i)]; }
    const RegexLengths& lengths(int i) const { return lengths_[std::size_t(i)]; }
    /// The bytes a JSON string's text can hold: all but the control bytes JSON has no short escape
    /// for (a pattern's string is written with its characters as they are, '"' and '\\' escaped).
    static const std::bitset<256>& pattern_writable();
    std::size_t size() const { return nodes_.size(); }

private:
    int compile(const nlohmann::ordered_json& s, const std::string& where);
    int compile_nested(const nlohmann::ordered_json& s, const std::string& where);
    int compile_typed(const nlohmann::ordered_json& s, const std::string& type, const std::string& where);
    int compile_ref(const std::string& ref, const std::string& where);
    int add(Node n, const std::string& where);
    void check_choices();
    /// Replaces a choice's branches that are objects by one object of variants (json_schema_variants.cpp).
    void merge_object_branches(int choice);
    /// Whether nodes a and b accept the same values in the same way (`assumed`: pairs taken as alike
    /// while comparing, so that recursive schemas end). Past kMaxShapeWork pairs compared in one
    /// schema, or kMaxShapeDepth nested, unlike: a refusal at worst, never a wrong reading.
    bool same_shape(int a, int b, std::set<std::pair<int, int>>& assumed, int depth = 0);
    static constexpr std::size_t kMaxShapeWork = std::size_t(1) << 20;
    static constexpr int kMaxShapeDepth = 256;  ///< (each level a stack frame: a request must not exhaust a thread's stack)
    /// Merges `choice`'s object branches (once: `merged` holds the choices done), the choices
    /// among its branches first, so that a union within it is one object of variants by then.
    void merge_choice(int choice, std::set<int>& merged);
    void number_bounds(const nlohmann::ordered_json& s, const std::string& where, Node& n);
    /// An array's items: `items`, a tuple's prefix (prefixItems, draft 7's items array) and what
    /// follows it, uniqueItems; narrows n.max to what they allow.
    void compile_items(const nlohmann::ordered_json& s, const std::string& where, Node& n);
    void compile_text_automaton(const nlohmann::ordered_json& s, const std::string& where, Node& n);
    int compile_pattern(std::string_view source, RegexDfa::Match match, const std::string& where);

    static constexpr int kMaxNesting = 256;  ///< schemas within schemas while compiling ($ref chains included)

    // During compilation only:
    const nlohmann::ordered_json* document_ = nullptr;  ///< the whole schema ($ref targets)
    std::map<std::string, int> refs_;                   ///< $ref pointer -> node (compiled once; cycles allowed)
    std::set<int> pending_refs_;                        ///< $ref nodes whose target is being compiled
    std::vector<std::string> wheres_;                   ///< [node] where it was compiled (error messages)
    int nesting_ = 0;
    std::vector<Node> nodes_;
    std::map<std::pair<std::string, RegexDfa::Match>, int> pattern_ids_;  ///< (source, match) -> patterns_ index
    std::vector<RegexDfa> patterns_;
    std::vector<RegexLengths> lengths_;
    std::map<std::tuple<int, std::int64_t, std::int64_t>, int> length_ids_;  ///< (pattern, min, max) -> lengths_ index
    std::size_t pattern_bytes_ = 0;
    std::size_t shape_work_ = 0;  ///< pairs of nodes same_shape compared
    std::uint64_t pattern_work_ = 0;
    int root_ = -1;
};

/// Reads text byte by byte and says whether it is still the beginning of one value of `schema`
/// (whitespace between tokens bounded as JsonPrefix bounds it). A small value: copying it is how a
/// candidate continuation is tried. Bytes >= 0x80 are accepted inside strings without UTF-8
/// validation.
class JsonSchemaPrefix {
public:
    /// Frames: the open objects and arrays and the value in progress (deeper nesting: refused).
    static constexpr int kMaxDepth = 32;

    explicit JsonSchemaPrefix(const JsonSchema& schema) : schema_(&schema) {}
    JsonSchemaPrefix(const JsonSchemaPrefix& o) { *this = o; }
    JsonSchemaPrefix& operator=(const JsonSchemaPrefix& o);  ///< copies only the frames in use

    bool feed(std::string_view text);
    bool complete() const { return done_; }
    bool can_end() const { return done_; }
    /// Inside a string, after no backslash, a text without '"', '\\' or a byte below 0x20 continues
    /// it when it has at most this many characters (kAnyLength: no bound); -1 elsewhere.
    std::int64_t string_room() const;
    /// Inside a `pattern`'s or `format`'s string, after no backslash: its automaton, plain tokens only.
    AutomatonAt automaton() const;

private:
    enum class Phase : std::uint8_t {
        // object
        key_or_end, key, key_text, colon, member_value, next_member,
        // array
        item_or_end, item, next_item,
        // string (a value or a free object's key)
        chars, escape, unicode,
        // number (Frame::number says where)
        number,
        // literal
        literal,
    };
    /// Trivial, so that a copy of the recognizer copies only the frames in use (value-initialize
    /// a new one: `Frame f{}`).
    struct Frame {
        std::int64_t count;       ///< object: next property index; array: items; string: characters
        std::uint64_t candidates; ///< key_text: properties still matching; literal: texts still matching; unique array: texts used
        std::uint64_t variants;   ///< object of variants: those the text still matches (count: its last key's index + 1)
        std::int32_t node;
        std::int32_t member;      ///< object: the property whose value is read (-1: a free key's)
        std::int32_t pattern_state;  ///< string with a pattern: its automaton's state
        std::uint16_t pos;        ///< key_text / literal: bytes matched; unicode: the code unit so far
        Phase phase;
        std::uint8_t hex_left;
        JsonNumber number;
        bool key;                 ///< string: a free object's key
        bool high_surrogate;      ///< string: a \\u escape of a high surrogate was read, its low half must come
        bool negative;            ///< number: after '-' (count: the integer digits' value, pos: their count)
        std::uint8_t fraction_digits;  ///< bounded number: digits after the point (at most 18) ...
        std::int64_t fraction;         ///< ... and their value
    };

    bool byte(unsigned char c);
    bool start_value(int node, unsigned char c);
    bool push(Frame f);
    void value_done();
    bool in_number(Frame& f, unsigned char c);
    bool number_feasible(const Frame& f) const;
    bool number_within(const Frame& f) const;
    bool in_literal(Frame& f, unsigned char c);
    /// frames_[at] when it is a unique array (uniqueItems over literals), else nullptr (also for at < 0).
    Frame* unique_array(int at);
    bool in_string_byte(Frame& f, unsigned char c);
    bool in_pattern_byte(Frame& f, unsigned char c, const JsonSchema::Node& n);
    bool in_key_text(Frame& f, unsigned char c);
    bool can_close_object(const Frame& f) const;
    std::uint64_t allowed_keys(const Frame& f) const;
    /// Object of variants: the keys variant v admits next, and whether it can close now.
    std::uint64_t variant_keys(const Frame& f, std::size_t v) const;
    bool variant_can_close(const Frame& f, std::size_t v) const;

    const JsonSchema* schema_ = nullptr;
    std::array<Frame, kMaxDepth> frames_;  ///< [0, depth_): the containers, then the value in progress
    std::uint8_t depth_ = 0;
    bool done_ = false;
    std::uint8_t whitespace_ = 0;
    bool newline_ = false;
};

}  // namespace aqpim::serve
