// Structured outputs: anyOf / oneOf branches that are all objects (json_schema.h), as pydantic
// writes `Union[Cat, Dog]` (anyOf) and discriminated unions (oneOf with a `discriminator`).
//
// The branches become one object of variants. Its keys are every variant's keys; the recognizer
// keeps the set of variants the text still matches and drops one when a key is not among those
// it admits next (its properties in its order, no required one skipped), when a value's first
// byte cannot start that variant's value for the key, or when a literal value written is not
// among its values. A value is read with one node for all the variants still matching, so the
// variants' schemas for one key must be alike, or told apart by their first byte, or literals
// (merged into one literal node that remembers which variants each text belongs to).

#include <algorithm>

#include "serve/json_schema.h"

namespace aqpim::serve {

bool JsonSchema::same_shape(int a, int b, std::set<std::pair<int, int>>& assumed, int depth) {
    if (a == b) return true;
    if (a < 0 || b < 0 || ++shape_work_ > kMaxShapeWork || depth >= kMaxShapeDepth) return false;
    ++depth;
    if (!assumed.insert({std::min(a, b), std::max(a, b)}).second) return true;  // being compared: alike unless shown otherwise
    const Node& x = nodes_[std::size_t(a)];
    const Node& y = nodes_[std::size_t(b)];
    const auto all_alike = [&](const std::vector<int>& p, const std::vector<int>& q) {
        if (p.size() != q.size()) return false;
        for (std::size_t i = 0; i < p.size(); ++i)
            if (!same_shape(p[i], q[i], assumed, depth)) return false;
        return true;
    };
    if (x.kind != y.kind || x.properties.size() != y.properties.size() || x.min != y.min || x.max != y.max ||
        x.texts != y.texts || x.first != y.first || x.has_lowest != y.has_lowest || x.has_highest != y.has_highest ||
        x.lowest != y.lowest || x.highest != y.highest || x.multiple != y.multiple || x.pattern != y.pattern ||
        x.lengths != y.lengths || x.one_property != y.one_property || x.unique != y.unique || x.one_of != y.one_of ||
        x.inferred != y.inferred || x.variant_at != y.variant_at || x.variant_keys != y.variant_keys ||
        x.text_variants != y.text_variants)
        return false;
    for (std::size_t i = 0; i < x.properties.size(); ++i)
        if (x.properties[i].key != y.properties[i].key || x.properties[i].required != y.properties[i].required ||
            !same_shape(x.properties[i].node, y.properties[i].node, assumed, depth))
            return false;
    return same_shape(x.extra, y.extra, assumed, depth) && same_shape(x.key, y.key, assumed, depth) &&
           same_shape(x.items, y.items, assumed, depth) &&
           all_alike(x.prefix_items, y.prefix_items) && all_alike(x.branches, y.branches) &&
           all_alike(x.variants, y.variants) && all_alike(x.variant_value, y.variant_value);
}

void JsonSchema::merge_choice(int choice, std::set<int>& merged) {
    if (!merged.insert(choice).second) return;
    for (std::size_t b = 0; b < nodes_[std::size_t(choice)].branches.size(); ++b)
        for (int node = nodes_[std::size_t(choice)].branches[b]; nodes_[std::size_t(node)].kind == Kind::choice;) {
            merge_choice(node, merged);  // (a choice being merged further up is left as it is: a cycle)
            if (nodes_[std::size_t(node)].branches.size() != 1) break;
            node = nodes_[std::size_t(node)].branches[0];
        }
    merge_object_branches(choice);
}

void JsonSchema::merge_object_branches(int choice) {
    const std::string where = wheres_[std::size_t(choice)];
    const bool one_of = nodes_[std::size_t(choice)].one_of;
    std::vector<std::size_t> positions;  // the branches that can start with '{'
    std::vector<int> objects;            // their objects: a union within one (a choice of one branch, merged before) gives its own
    std::vector<std::size_t> origin;     // [v] the branch variant v comes from
    for (std::size_t b = 0; b < nodes_[std::size_t(choice)].branches.size(); ++b) {
        int node = nodes_[std::size_t(choice)].branches[b];
        if (!nodes_[std::size_t(node)].first['{']) continue;
        positions.push_back(b);
        while (nodes_[std::size_t(node)].kind == Kind::choice && nodes_[std::size_t(node)].branches.size() == 1)
            node = nodes_[std::size_t(node)].branches[0];
        const std::vector<int> inner = nodes_[std::size_t(node)].kind == Kind::object ? nodes_[std::size_t(node)].variants : std::vector<int>{};
        for (const int o : inner.empty() ? std::vector<int>{node} : inner) objects.push_back(o), origin.push_back(b);
    }
    if (positions.size() < 2) return;
    const auto branch_name = [&](std::size_t v) { return "branch " + std::to_string(origin[v]); };
    if (objects.size() > kMaxVariants)
        throw JsonSchemaError(where, "more than " + std::to_string(kMaxVariants) + " branches are objects");
    Node merged;
    merged.kind = Kind::object;
    merged.variants = objects;
    const std::size_t n_variants = objects.size();
    for (std::size_t v = 0; v < n_variants; ++v) {
        const Node& o = nodes_[std::size_t(objects[v])];
        if (o.kind == Kind::choice)
            throw JsonSchemaError(where, branch_name(v) + " is itself a choice (anyOf, oneOf or a list of types) of an object "
                                         "and other values: list its branches among these");
        if (o.kind != Kind::object)
            throw JsonSchemaError(where, branch_name(v) + " and another branch can both start with '{': only branches that "
                                         "are objects with listed properties can be told apart while they are written");
        if (o.extra >= 0 || o.one_property)
            throw JsonSchemaError(where, branch_name(v) + " is an object of free keys or of exactly one property: "
                                         "beside other objects, a branch must list its properties");
        merged.inferred = merged.inferred || o.inferred;
        merged.variant_keys.emplace_back();
        for (const Property& p : o.properties) {
            auto it = std::find_if(merged.properties.begin(), merged.properties.end(), [&](const Property& q) { return q.key == p.key; });
            if (it == merged.properties.end()) {
                if (merged.properties.size() >= kMaxProperties)
                    throw JsonSchemaError(where, "the object branches have more than " + std::to_string(kMaxProperties) + " keys together");
                merged.properties.push_back({p.key, p.node, false});
                it = merged.properties.end() - 1;
            }
            merged.variant_keys.back().push_back(std::uint8_t(it - merged.properties.begin()));
        }
    }
    const std::size_t n_keys = merged.properties.size();
    merged.variant_at.assign(n_keys * n_variants, -1);
    merged.variant_value.assign(n_keys * n_variants, -1);
    for (std::size_t v = 0; v < n_variants; ++v)
        for (std::size_t j = 0; j < merged.variant_keys[v].size(); ++j) {
            const std::size_t k = merged.variant_keys[v][j];
            merged.variant_at[k * n_variants + v] = std::int8_t(j);
            merged.variant_value[k * n_variants + v] = nodes_[std::size_t(objects[v])].properties[j].node;
        }
    // Whether variants u and v can never both be matching when key k's value starts: a key d that
    // one of them requires before k is missing from the other, comes after k in it, or has values
    // that cannot be alike in the two (literals with no text in common, or different first bytes).
    const auto told_apart = [&](std::size_t u, std::size_t v, std::size_t k) {
        const Node& ou = nodes_[std::size_t(objects[u])];
        const Node& ov = nodes_[std::size_t(objects[v])];
        const int ku = merged.variant_at[k * n_variants + u], kv = merged.variant_at[k * n_variants + v];
        for (std::size_t d = 0; d < n_keys; ++d) {
            const int du = merged.variant_at[d * n_variants + u], dv = merged.variant_at[d * n_variants + v];
            const bool before_u = d != k && du >= 0 && du < ku && ou.properties[std::size_t(du)].required;
            const bool before_v = d != k && dv >= 0 && dv < kv && ov.properties[std::size_t(dv)].required;
            if ((before_u && (dv < 0 || dv > kv)) || (before_v && (du < 0 || du > ku))) return true;
            if (!before_u && !before_v) continue;
            if (du < 0 || dv < 0 || du > ku || dv > kv) continue;
            const Node& a = nodes_[std::size_t(ou.properties[std::size_t(du)].node)];
            const Node& b = nodes_[std::size_t(ov.properties[std::size_t(dv)].node)];
            bool apart = (a.first & b.first).none();
            if (a.kind == Kind::literal && b.kind == Kind::literal) {
                apart = true;
                for (const std::string& t : a.texts) apart = apart && std::find(b.texts.begin(), b.texts.end(), t) == b.texts.end();
            }
            if (apart) return true;
        }
        return false;
    };
    // Each key's values: alike ones read by one node, literals merged, the rest apart by first byte
    // or by an earlier key.
    int discriminator = -1;  // oneOf: a key every variant requires, each with literals of its own
    for (std::size_t k = 0; k < n_keys; ++k) {
        int* values = &merged.variant_value[k * n_variants];
        for (std::size_t v = 0; v < n_variants; ++v)
            for (std::size_t u = 0; u < v && values[v] >= 0; ++u) {
                std::set<std::pair<int, int>> assumed;  // one comparison's: a pair found unlike leaves it false as a whole
                if (values[u] >= 0 && values[u] != values[v] && same_shape(values[u], values[v], assumed)) values[v] = values[u];
            }
        Node literal;
        literal.kind = Kind::literal;
        std::uint64_t literal_variants = 0;
        for (std::size_t v = 0; v < n_variants; ++v) {
            if (values[v] < 0 || nodes_[std::size_t(values[v])].kind != Kind::literal) continue;
            literal_variants |= std::uint64_t(1) << v;
            for (const std::string& t : nodes_[std::size_t(values[v])].texts) {
                auto it = std::find(literal.texts.begin(), literal.texts.end(), t);
                if (it == literal.texts.end()) {
                    if (literal.texts.size() >= kMaxLiterals)
                        throw JsonSchemaError(where, "the object branches' values of \"" + merged.properties[k].key + "\" are more than " +
                                                         std::to_string(kMaxLiterals) + " literals together");
                    literal.texts.push_back(t);
                    literal.text_variants.push_back(0);
                    literal.first.set(static_cast<unsigned char>(t[0]));
                    it = literal.texts.end() - 1;
                }
                literal.text_variants[std::size_t(it - literal.texts.begin())] |= std::uint64_t(1) << v;
            }
        }
        // Every value a value of one variant only, compared as JSON Schema compares values (1 and
        // 1.0 are one number, key order does not matter), not as written.
        bool own_literals = literal_variants != 0;
        for (std::size_t i = 0; i < literal.texts.size() && own_literals; ++i) {
            const std::uint64_t tv = literal.text_variants[i];
            own_literals = (tv & (tv - 1)) == 0;
            for (std::size_t j = 0; j < i && own_literals; ++j)
                own_literals = literal.text_variants[j] == tv ||
                               nlohmann::json::parse(literal.texts[i]) != nlohmann::json::parse(literal.texts[j]);
        }
        if (literal_variants & (literal_variants - 1)) {  // literals in two variants or more: one node reads them
            const int id = add(std::move(literal), where);
            for (std::size_t v = 0; v < n_variants; ++v)
                if (literal_variants >> v & 1) values[v] = id;
        }
        for (std::size_t v = 0; v < n_variants; ++v)
            for (std::size_t u = 0; u < v; ++u) {
                if (values[u] < 0 || values[v] < 0 || values[u] == values[v]) continue;
                const std::bitset<256> both = nodes_[std::size_t(values[u])].first & nodes_[std::size_t(values[v])].first;
                if (both.none() || told_apart(u, v, k)) continue;
                int c = 0;
                while (!both[std::size_t(c)]) ++c;
                throw JsonSchemaError(where, branch_name(u) + " and " + branch_name(v) + " both have \"" + merged.properties[k].key +
                                                 "\" with different values that can start with '" + std::string(1, char(c)) +
                                                 "': object branches are told apart by their keys, by literal values "
                                                 "(const, enum), by a value's first byte, or by a key required before it");
            }
        bool required_by_all = true;
        for (std::size_t v = 0; v < n_variants; ++v) {
            const int at = merged.variant_at[k * n_variants + v];
            required_by_all = required_by_all && at >= 0 && nodes_[std::size_t(objects[v])].properties[std::size_t(at)].required;
        }
        const std::uint64_t all = n_variants == 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << n_variants) - 1;
        if (discriminator < 0 && required_by_all && literal_variants == all && own_literals) discriminator = int(k);
    }
    if (one_of && discriminator < 0)
        throw JsonSchemaError(where, "a oneOf of objects needs a discriminator: a property every branch requires, with "
                                     "const or enum values of its own in each (or use anyOf)");
    merged.first.set('{');
    const int id = add(std::move(merged), where);
    std::vector<int>& branches = nodes_[std::size_t(choice)].branches;
    branches[positions[0]] = id;
    for (std::size_t v = positions.size(); v-- > 1;) branches.erase(branches.begin() + std::ptrdiff_t(positions[v]));
}

}  // namespace aqpim::serve
