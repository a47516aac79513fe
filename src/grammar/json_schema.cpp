#include "grammar/json_schema.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/automaton.h"
#include "grammar/byte_dfa.h"
#include "grammar/json_schema_formats.h"
#include "grammar/number_ranges.h"
#include "grammar/regex.h"
#include "grammar/stacks.h"

namespace deepinfer::grammar {

namespace {

using Json = nlohmann::ordered_json;

// Keywords with no effect on which instances validate.
const std::set<std::string> kAnnotations = {
    "$schema", "$id", "id", "$comment", "title", "description", "default", "examples", "example",
    "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "contentMediaType", "contentEncoding",
    "contentSchema", "$anchor", "$dynamicAnchor", "$recursiveAnchor", "$vocabulary", "discriminator",
    "xml", "externalDocs", "markdownDescription", "enumDescriptions", "errorMessage"};

// Assertions this compiler cannot express exactly: refused by name.
const std::set<std::string> kUnsupported = {
    "if", "then", "else", "propertyNames",
    "contains", "minContains", "maxContains", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef",
    "$recursiveRef"};

// Every assertion keyword of drafts 4 to 2020-12 (the rest are annotations or unknown).
const std::set<std::string> kAssertions = {
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum",
    "maxLength", "minLength", "pattern", "format", "items", "prefixItems", "additionalItems", "maxItems",
    "minItems", "uniqueItems", "contains", "maxContains", "minContains", "maxProperties", "minProperties",
    "required", "properties", "patternProperties", "additionalProperties", "dependencies", "dependentRequired",
    "dependentSchemas", "propertyNames", "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref",
    "unevaluatedItems", "unevaluatedProperties"};

const std::vector<std::string> kAllTypes = {"null", "boolean", "object", "array", "string", "number"};

class SchemaCompiler {
 public:
  SchemaCompiler(Json root, const JsonSchemaOptions& options) : root_(std::move(root)), options_(options) {}

  Result<Grammar> run() { return run_on(root_, ""); }

  // The grammar of `s`, a schema inside this document (its $refs resolve against the root).
  Result<Grammar> run_on(const Json& s, const std::string& path) {
    ws_ = options_.compact ? g_.empty() : g_.repeat(ws_char(), 0, std::max(options_.max_whitespace, 0));
    DI_ASSIGN_OR_RETURN(ExprId body, compile(s, path));
    g_.set_root(g_.add_rule(g_.fresh_name("root"), body));
    DI_RETURN_IF_ERROR(g_.validate());
    return std::move(g_);
  }

 private:
  ExprId ws_char() {
    ByteSet s;
    s.add(' ');
    s.add('\t');
    s.add('\n');
    return g_.byte_set(s);
  }
  ExprId lit(std::string_view s) { return g_.bytes(s); }
  ExprId comma() { return g_.seq({ws_, lit(","), ws_}); }

  static Status error(const std::string& path, const std::string& what) {
    return invalid_argument(what + " at " + (path.empty() ? std::string("/") : path));
  }

  // ---- shared rules -------------------------------------------------------------------------

  RuleId shared(const std::string& name, auto&& make) {
    auto it = shared_.find(name);
    if (it != shared_.end()) return it->second;
    const RuleId r = g_.declare_rule(g_.fresh_name(name));
    shared_.emplace(name, r);
    g_.define_rule(r, make());
    return r;
  }

  ExprId string_char() { return any_char_expr(g_, RegexEncoding::kJsonString); }

  ExprId any_string() {
    return g_.call(shared("string", [&] { return g_.seq({lit("\""), g_.star(string_char()), lit("\"")}); }));
  }

  ExprId any_number() {
    return g_.call(shared("number", [&] {
      const ExprId digits = g_.plus(g_.byte_range('0', '9'));
      const ExprId integer = g_.seq({g_.optional(lit("-")), g_.alt({lit("0"), g_.seq({g_.byte_range('1', '9'), g_.star(g_.byte_range('0', '9'))})})});
      ByteSet e, sign;
      e.add('e');
      e.add('E');
      sign.add('+');
      sign.add('-');
      const ExprId frac = g_.optional(g_.seq({lit("."), digits}));
      const ExprId exp = g_.optional(g_.seq({g_.byte_set(e), g_.optional(g_.byte_set(sign)), digits}));
      return g_.seq({integer, frac, exp});
    }));
  }

  ExprId any_integer() {
    return g_.call(shared("integer", [&] {
      return g_.seq({g_.optional(lit("-")), g_.alt({lit("0"), g_.seq({g_.byte_range('1', '9'), g_.star(g_.byte_range('0', '9'))})})});
    }));
  }

  ExprId any_value() {
    auto it = shared_.find("value");
    if (it != shared_.end()) return g_.call(it->second);
    const RuleId value = g_.declare_rule(g_.fresh_name("value"));
    shared_.emplace("value", value);
    const ExprId v = g_.call(value);
    const ExprId member = g_.seq({any_string(), ws_, lit(":"), ws_, v});
    const RuleId object = g_.add_rule(g_.fresh_name("object"),
        g_.seq({lit("{"), ws_, g_.optional(g_.seq({member, g_.star(g_.seq({comma(), member}))})), ws_, lit("}")}));
    const RuleId array = g_.add_rule(g_.fresh_name("array"),
        g_.seq({lit("["), ws_, g_.optional(g_.seq({v, g_.star(g_.seq({comma(), v}))})), ws_, lit("]")}));
    g_.define_rule(value, g_.alt({g_.call(object), g_.call(array), any_string(), any_number(), lit("true"),
                                  lit("false"), lit("null")}));
    return v;
  }

  // ---- references ---------------------------------------------------------------------------

  // A JSON Pointer array index: decimal digits only, in range.
  static std::optional<size_t> parse_index(const std::string& token) {
    size_t index = 0;
    const char* end = token.data() + token.size();
    auto [stop, ec] = std::from_chars(token.data(), end, index);
    if (token.empty() || ec != std::errc() || stop != end) return std::nullopt;
    return index;
  }

  Result<const Json*> resolve_pointer(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#') return error(path, "$ref '" + ref + "': only references inside the document (#...) are supported");
    const Json* cur = &root_;
    std::string pointer = ref.substr(1);
    if (!pointer.empty() && pointer[0] != '/') return error(path, "$ref '" + ref + "': anchors are not supported");
    size_t pos = 1;
    while (pos <= pointer.size() && !pointer.empty()) {
      size_t next = pointer.find('/', pos);
      if (next == std::string::npos) next = pointer.size();
      std::string token = pointer.substr(pos, next - pos);
      std::string decoded;
      for (size_t i = 0; i < token.size(); ++i) {
        if (token[i] == '~' && i + 1 < token.size()) {
          decoded += token[i + 1] == '1' ? '/' : '~';
          ++i;
        } else if (token[i] == '%' && i + 2 < token.size()) {
          unsigned byte = 0;
          const char* hex = token.data() + i + 1;
          auto [end, ec] = std::from_chars(hex, hex + 2, byte, 16);
          if (ec != std::errc() || end != hex + 2) return error(path, "$ref '" + ref + "': bad percent escape");
          decoded += static_cast<char>(byte);
          i += 2;
        } else {
          decoded += token[i];
        }
      }
      if (cur->is_object() && cur->contains(decoded)) {
        cur = &(*cur)[decoded];
      } else if (std::optional<size_t> index = parse_index(decoded); cur->is_array() && index && *index < cur->size()) {
        cur = &(*cur)[*index];
      } else {
        return error(path, "$ref '" + ref + "' does not resolve");
      }
      pos = next + 1;
    }
    return cur;
  }

  Result<ExprId> compile_ref(const std::string& ref, const std::string& path) {
    auto it = ref_rules_.find(ref);
    if (it != ref_rules_.end()) return g_.call(it->second);
    DI_ASSIGN_OR_RETURN(const Json* target, resolve_pointer(ref, path));
    std::string base = ref.substr(ref.find_last_of('/') + 1);
    std::string name;
    for (char c : base) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    if (name.empty()) name = "ref";
    const RuleId r = g_.declare_rule(g_.fresh_name(name));
    ref_rules_.emplace(ref, r);
    in_progress_.insert(ref);
    DI_ASSIGN_OR_RETURN(ExprId body, compile(*target, ref.substr(1)));
    in_progress_.erase(ref);
    g_.define_rule(r, body);
    return g_.call(r);
  }

  // The schema with its $ref replaced by the target merged with the siblings (for allOf and
  // analysis); a reference still being compiled (recursion) cannot be merged.
  Result<Json> inline_ref(const Json& s, const std::string& path, int depth = 0) {
    if (!s.is_object() || !s.contains("$ref")) return s;
    if (depth > 32) return error(path, "$ref chain longer than 32");
    const std::string ref = s["$ref"].is_string() ? s["$ref"].get<std::string>() : "";
    if (in_progress_.count(ref)) return error(path, "$ref '" + ref + "' is recursive and has sibling keywords");
    DI_ASSIGN_OR_RETURN(const Json* target, resolve_pointer(ref, path));
    DI_ASSIGN_OR_RETURN(Json t, inline_ref(*target, path, depth + 1));
    Json rest = s;
    rest.erase("$ref");
    return merge(t, rest, path);
  }

  // ---- allOf: merging two schemas into one that accepts their intersection ----------------------

  static bool has_assertions(const Json& s) {
    if (!s.is_object()) return !(s.is_boolean() && s.get<bool>());
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!kAnnotations.count(it.key())) return true;
    }
    return false;
  }

  static std::vector<std::string> types_of(const Json& s) {
    if (!s.is_object() || !s.contains("type")) return kAllTypes;
    const Json& t = s["type"];
    std::vector<std::string> out;
    if (t.is_string()) out.push_back(t.get<std::string>());
    if (t.is_array()) {
      for (const Json& x : t) {
        if (x.is_string()) out.push_back(x.get<std::string>());
      }
    }
    return out;
  }

  static constexpr const char* kElementKeywords[] = {"prefixItems", "items", "additionalItems"};

  static bool has_element_keywords(const Json& s) {
    return s.contains("prefixItems") || s.contains("items");  // additionalItems alone does nothing
  }

  // Element i of an array meets prefix[i] (i < prefix.size()) or rest, as one schema object
  // says it: prefixItems and the items after them (2020-12), or an items array and
  // additionalItems (drafts 4-7), or one items schema for every element.
  struct ElementSchemas {
    std::vector<Json> prefix;
    Json rest = Json(true);
  };

  static Result<ElementSchemas> element_schemas(const Json& s, const std::string& path) {
    ElementSchemas out;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) return error(path, "prefixItems must be an array");
      out.prefix.assign(s["prefixItems"].begin(), s["prefixItems"].end());
      if (s.contains("items")) out.rest = s["items"];
    } else if (s.contains("items") && s["items"].is_array()) {
      out.prefix.assign(s["items"].begin(), s["items"].end());
      if (s.contains("additionalItems")) out.rest = s["additionalItems"];
    } else if (s.contains("items")) {
      out.rest = s["items"];
    }
    return out;
  }

  // {prefixItems, items} (only the keywords needed) that accept exactly the arrays both a's
  // and b's element keywords accept.
  Result<Json> merge_element_schemas(const Json& a, const Json& b, const std::string& path) {
    DI_ASSIGN_OR_RETURN(ElementSchemas x, element_schemas(a, path));
    DI_ASSIGN_OR_RETURN(ElementSchemas y, element_schemas(b, path));
    Json out = Json::object();
    const size_t n = std::max(x.prefix.size(), y.prefix.size());
    if (n > 0) {
      out["prefixItems"] = Json::array();
      for (size_t i = 0; i < n; ++i) {
        const Json& xi = i < x.prefix.size() ? x.prefix[i] : x.rest;
        const Json& yi = i < y.prefix.size() ? y.prefix[i] : y.rest;
        DI_ASSIGN_OR_RETURN(Json m, merge(xi, yi, path + "/prefixItems/" + std::to_string(i)));
        out["prefixItems"].push_back(std::move(m));
      }
    }
    DI_ASSIGN_OR_RETURN(Json rest, merge(x.rest, y.rest, path + "/items"));
    if (rest != Json(true)) out["items"] = std::move(rest);
    return out;
  }

  Result<Json> merge(const Json& a_in, const Json& b_in, const std::string& path) {
    if (a_in.is_boolean()) return a_in.get<bool>() ? b_in : a_in;
    if (b_in.is_boolean()) return b_in.get<bool>() ? a_in : b_in;
    DI_ASSIGN_OR_RETURN(Json a, inline_ref(a_in, path));
    DI_ASSIGN_OR_RETURN(Json b, inline_ref(b_in, path));
    if (a.is_boolean() || b.is_boolean()) return merge(a, b, path);
    // additionalItems means something only beside an items array of its own object; merged
    // beside another object's items array it would wrongly constrain it.
    for (Json* x : {&a, &b}) {
      if (x->contains("additionalItems") && !(x->contains("items") && (*x)["items"].is_array())) x->erase("additionalItems");
    }
    Json out = a;
    // Which `items` applies to which element depends on the prefix of its own schema object,
    // so when both objects constrain elements they are merged element by element, not by key.
    const bool merge_elements = has_element_keywords(a) && has_element_keywords(b);
    if (merge_elements) {
      DI_ASSIGN_OR_RETURN(Json elements, merge_element_schemas(a, b, path));
      for (const char* k : kElementKeywords) out.erase(k);
      for (auto it = elements.begin(); it != elements.end(); ++it) out[it.key()] = it.value();
    }
    for (auto it = b.begin(); it != b.end(); ++it) {
      const std::string& k = it.key();
      const Json& v = it.value();
      if (merge_elements && std::find(std::begin(kElementKeywords), std::end(kElementKeywords), k) != std::end(kElementKeywords)) {
        continue;
      }
      if (!out.contains(k)) {
        out[k] = v;
        continue;
      }
      if (out[k] == v || !kAssertions.count(k)) continue;  // annotations and unknown keywords: the first kept
      if (k == "properties" && v.is_object() && out[k].is_object()) {
        for (auto p = v.begin(); p != v.end(); ++p) {
          if (out[k].contains(p.key())) {
            DI_ASSIGN_OR_RETURN(Json m, merge(out[k][p.key()], p.value(), path + "/properties/" + p.key()));
            out[k][p.key()] = m;
          } else {
            out[k][p.key()] = p.value();
          }
        }
      } else if (k == "required" && v.is_array()) {
        for (const Json& r : v) {
          if (std::find(out[k].begin(), out[k].end(), r) == out[k].end()) out[k].push_back(r);
        }
      } else if (k == "type") {
        std::vector<std::string> ta = types_of(out), tb = types_of(b), both;
        for (const std::string& t : ta) {
          for (const std::string& u : tb) {
            if (t == u || (t == "integer" && u == "number")) both.push_back(t);
            else if (t == "number" && u == "integer") both.push_back(u);
          }
        }
        if (both.empty()) return Json(false);
        out[k] = both.size() == 1 ? Json(both[0]) : Json(both);
      } else if (k == "minimum" || k == "minLength" || k == "minItems" || k == "minProperties" ||
                 (k == "exclusiveMinimum" && v.is_number())) {
        out[k] = std::max(out[k].get<double>(), v.get<double>());
      } else if (k == "maximum" || k == "maxLength" || k == "maxItems" || k == "maxProperties" ||
                 (k == "exclusiveMaximum" && v.is_number())) {
        out[k] = std::min(out[k].get<double>(), v.get<double>());
      } else if (k == "enum" && v.is_array() && out[k].is_array()) {
        Json both = Json::array();
        for (const Json& x : out[k]) {
          if (json_contains(v, x)) both.push_back(x);
        }
        out[k] = both;
      } else if (k == "allOf" && v.is_array()) {
        for (const Json& x : v) out[k].push_back(x);
      } else {
        return error(path, "allOf: both branches set '" + k + "' differently, which cannot be merged");
      }
    }
    // One branch's additionalProperties must not be widened by the other's properties.
    for (const Json* x : {&a, &b}) {
      const Json* other = x == &a ? &b : &a;
      if (x->contains("additionalProperties") && (*x)["additionalProperties"] != Json(true) && other->contains("properties")) {
        for (auto p = (*other)["properties"].begin(); p != (*other)["properties"].end(); ++p) {
          if (p.value() == Json(false)) continue;  // forbids a name: widens nothing
          if (!x->contains("properties") || !(*x)["properties"].contains(p.key())) {
            return error(path, "allOf: property '" + p.key() + "' is limited by another branch's additionalProperties");
          }
        }
      }
    }
    return out;
  }

  // ---- oneOf: accepted as anyOf when the branches cannot overlap -----------------------------

  struct Shape {
    std::set<std::string> types;  // "integer" stands for itself, "number" includes integers
    std::vector<Json> values;     // const/enum, when given
    bool has_values = false;
  };

  Result<Shape> shape(const Json& s_in, const std::string& path) {
    Json s = s_in;
    if (s.is_object() && s.contains("$ref")) {
      const std::string ref = s["$ref"].is_string() ? s["$ref"].get<std::string>() : "";
      DI_ASSIGN_OR_RETURN(const Json* t, resolve_pointer(ref, path));
      s = *t;
    }
    Shape out;
    if (s.is_boolean()) {
      if (s.get<bool>()) out.types = {kAllTypes.begin(), kAllTypes.end()};
      return out;
    }
    for (const std::string& t : types_of(s)) out.types.insert(t);
    if (s.contains("const")) {
      out.values = {s["const"]};
      out.has_values = true;
    } else if (s.contains("enum") && s["enum"].is_array()) {
      out.values = std::vector<Json>(s["enum"].begin(), s["enum"].end());
      out.has_values = true;
    }
    return out;
  }

  static bool types_overlap(const std::set<std::string>& a, const std::set<std::string>& b) {
    for (const std::string& t : a) {
      for (const std::string& u : b) {
        if (t == u) return true;
        if ((t == "number" && u == "integer") || (t == "integer" && u == "number")) return true;
      }
    }
    return false;
  }

  // A property required in both whose const/enum values do not meet.
  Result<bool> discriminated(const Json& a, const Json& b, const std::string& path) {
    if (!a.is_object() || !b.is_object() || !a.contains("properties") || !b.contains("properties")) return false;
    auto required = [](const Json& s, const std::string& k) {
      return s.contains("required") && s["required"].is_array() &&
             std::find(s["required"].begin(), s["required"].end(), Json(k)) != s["required"].end();
    };
    // A property one requires and the other cannot have (no such property beside
    // additionalProperties false, or a false property schema).
    auto forbids = [](const Json& s, const std::string& k) {
      if (s.contains("patternProperties") || s.contains("$ref") || s.contains("allOf") || s.contains("anyOf") || s.contains("oneOf")) return false;
      if (s["properties"].contains(k)) return s["properties"][k] == Json(false);
      return s.contains("additionalProperties") && s["additionalProperties"] == Json(false);
    };
    for (const auto& [x, y] : {std::pair<const Json*, const Json*>{&a, &b}, {&b, &a}}) {
      if (!x->contains("required") || !(*x)["required"].is_array()) continue;
      for (const Json& r : (*x)["required"]) {
        if (r.is_string() && forbids(*y, r.get<std::string>())) return true;
      }
    }
    for (auto p = a["properties"].begin(); p != a["properties"].end(); ++p) {
      if (!b["properties"].contains(p.key()) || !required(a, p.key()) || !required(b, p.key())) continue;
      DI_ASSIGN_OR_RETURN(Shape x, shape(p.value(), path));
      DI_ASSIGN_OR_RETURN(Shape y, shape(b["properties"][p.key()], path));
      if (x.has_values && y.has_values && values_disjoint(x.values, y.values)) return true;
    }
    return false;
  }

  static bool values_disjoint(const std::vector<Json>& a, const std::vector<Json>& b) {
    for (const Json& x : a) {
      for (const Json& y : b) {
        if (json_equal(x, y)) return false;
      }
    }
    return true;
  }

  Result<bool> disjoint(const Json& a_in, const Json& b_in, const std::string& path) {
    DI_ASSIGN_OR_RETURN(Shape a, shape(a_in, path));
    DI_ASSIGN_OR_RETURN(Shape b, shape(b_in, path));
    if (a.types.empty() || b.types.empty()) return true;
    if (!types_overlap(a.types, b.types)) return true;
    if (a.has_values && b.has_values && values_disjoint(a.values, b.values)) return true;
    DI_ASSIGN_OR_RETURN(Json ra, inline_ref(a_in, path));
    DI_ASSIGN_OR_RETURN(Json rb, inline_ref(b_in, path));
    // Both must be objects for a discriminator to separate them.
    if (a.types == std::set<std::string>{"object"} && b.types == std::set<std::string>{"object"}) {
      return discriminated(ra, rb, path);
    }
    return false;
  }

  // ---- the schema ---------------------------------------------------------------------------

  Result<ExprId> compile(const Json& s, const std::string& path) {
    if (++depth_ > 256) return error(path, "schema nested more than 256 deep");
    auto result = compile_inner(s, path);
    --depth_;
    return result;
  }

  Result<ExprId> compile_inner(const Json& s, const std::string& path) {
    if (s.is_boolean()) return s.get<bool>() ? any_value() : g_.nothing();
    if (!s.is_object()) return error(path, "a schema must be an object or a boolean");
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (kUnsupported.count(it.key())) {
        if ((it.key() == "then" || it.key() == "else") && !s.contains("if")) continue;  // no effect alone
        return error(path, "keyword '" + it.key() + "' is not supported");
      }
    }
    if (s.contains("not") && !s.contains("enum") && !s.contains("const")) return compile_not(s, path);
    if (s.contains("$ref")) {
      Json rest = s;
      rest.erase("$ref");
      const std::string ref = s["$ref"].is_string() ? s["$ref"].get<std::string>() : "";
      if (!s["$ref"].is_string()) return error(path, "$ref must be a string");
      if (!has_assertions(rest)) return compile_ref(ref, path);
      DI_ASSIGN_OR_RETURN(Json merged, inline_ref(s, path));
      return compile(merged, path);
    }
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].empty()) return error(path, "allOf must be a non-empty array");
      Json acc = s;
      acc.erase("allOf");
      for (const Json& branch : s["allOf"]) {
        DI_ASSIGN_OR_RETURN(Json m, merge(acc, branch, path + "/allOf"));
        acc = m;
      }
      return compile(acc, path);
    }
    if (s.contains("dependencies") || s.contains("dependentRequired") || s.contains("dependentSchemas")) {
      return compile_dependencies(s, path);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const Json& branches = s[key];
      if (!branches.is_array() || branches.empty()) return error(path, std::string(key) + " must be a non-empty array");
      if (std::string(key) == "oneOf") {
        Json base = s;
        base.erase(key);
        // Disjointness is judged with the siblings merged in (a parent's "type": "object" makes
        // branches that differ by a discriminator disjoint), or alone where merging fails.
        std::vector<Json> judged(branches.begin(), branches.end());
        if (has_assertions(base)) {
          for (size_t i = 0; i < judged.size(); ++i) {
            auto m = merge(base, branches[i], path);
            if (!m.ok()) {
              judged.assign(branches.begin(), branches.end());
              break;
            }
            judged[i] = std::move(*m);
          }
        }
        auto required_only = compile_one_of_required(s, base, path);
        if (!required_only.ok() || *required_only != kNoExpr) return required_only;
        for (size_t i = 0; i < branches.size(); ++i) {
          for (size_t j = i + 1; j < branches.size(); ++j) {
            DI_ASSIGN_OR_RETURN(bool d, disjoint(judged[i], judged[j], path));
            if (!d) {
              return error(path, "oneOf: branches " + std::to_string(i) + " and " + std::to_string(j) +
                                     " may both match (only mutually exclusive branches are supported)");
            }
          }
        }
      }
      Json base = s;
      base.erase(key);
      std::vector<ExprId> alts;
      for (size_t i = 0; i < branches.size(); ++i) {
        const std::string bpath = path + "/" + key + "/" + std::to_string(i);
        if (!has_assertions(base)) {
          DI_ASSIGN_OR_RETURN(ExprId e, compile(branches[i], bpath));
          alts.push_back(e);
        } else {
          DI_ASSIGN_OR_RETURN(Json m, merge(base, branches[i], bpath));
          DI_ASSIGN_OR_RETURN(ExprId e, compile(m, bpath));
          alts.push_back(e);
        }
      }
      return g_.alt(std::move(alts));
    }
    if (s.contains("const") || s.contains("enum")) return compile_enum(s, path);
    std::vector<std::string> types = types_of(s);
    if (s.contains("type") && types.empty()) return error(path, "type must be a string or an array of strings");
    const bool has_number = std::find(types.begin(), types.end(), "number") != types.end();
    std::vector<ExprId> alts;
    for (const std::string& t : types) {
      if (t == "integer" && has_number) continue;
      DI_ASSIGN_OR_RETURN(ExprId e, compile_type(t, s, path));
      alts.push_back(e);
    }
    return g_.alt(std::move(alts));
  }

  // dependentRequired, dependentSchemas and draft 7's dependencies: one variant of the schema
  // per set of trigger properties present, the others forbidden (a false property schema), the
  // present ones required along with what they bring. The variants are disjoint by which
  // triggers appear, so their union is exact; there are 2^k of them, so k is kept small.
  Result<ExprId> compile_dependencies(const Json& s, const std::string& path) {
    std::vector<std::string> triggers;
    std::map<std::string, std::vector<std::string>> needs;
    std::map<std::string, Json> schemas;
    for (const char* kw : {"dependentRequired", "dependentSchemas", "dependencies"}) {
      if (!s.contains(kw)) continue;
      if (!s[kw].is_object()) return error(path, std::string(kw) + " must be an object");
      for (auto it = s[kw].begin(); it != s[kw].end(); ++it) {
        const std::string& t = it.key();
        if (std::find(triggers.begin(), triggers.end(), t) == triggers.end()) triggers.push_back(t);
        if (std::string(kw) == "dependentRequired" || (std::string(kw) == "dependencies" && it.value().is_array())) {
          if (!it.value().is_array()) return error(path, std::string(kw) + " must map names to arrays of names");
          for (const Json& r : it.value()) {
            if (!r.is_string()) return error(path, std::string(kw) + " must map names to arrays of names");
            needs[t].push_back(r.get<std::string>());
          }
        } else if (schemas.count(t)) {
          DI_ASSIGN_OR_RETURN(Json m, merge(schemas[t], it.value(), path + "/" + kw));
          schemas[t] = std::move(m);
        } else {
          schemas[t] = it.value();
        }
      }
    }
    if (triggers.size() > 4) return error(path, "keyword 'dependencies' (or dependentRequired/dependentSchemas) over more than 4 properties is not supported");
    Json base = s;
    for (const char* kw : {"dependentRequired", "dependentSchemas", "dependencies"}) base.erase(kw);
    std::vector<ExprId> alts;
    for (uint32_t present = 0; present < (1u << triggers.size()); ++present) {
      Json v = base;
      auto require = [&](const std::string& name) {
        if (!v.contains("required") || !v["required"].is_array()) v["required"] = Json::array();
        if (!json_contains(v["required"], Json(name))) v["required"].push_back(name);
      };
      for (size_t i = 0; i < triggers.size(); ++i) {
        if (!(present & (1u << i))) continue;
        require(triggers[i]);
        // An undeclared trigger is declared first (a trigger usually comes before what it
        // brings; properties go in declared order), where that changes no value's schema.
        if (!v.contains("additionalProperties") && !v.contains("patternProperties") &&
            !(v.contains("properties") && v["properties"].is_object() && v["properties"].contains(triggers[i]))) {
          Json props = Json::object();
          props[triggers[i]] = Json::object();
          if (v.contains("properties") && v["properties"].is_object()) {
            for (auto it = v["properties"].begin(); it != v["properties"].end(); ++it) props[it.key()] = it.value();
          }
          v["properties"] = std::move(props);
        }
        for (const std::string& r : needs[triggers[i]]) require(r);
        if (schemas.count(triggers[i])) {
          DI_ASSIGN_OR_RETURN(Json m, merge(v, schemas[triggers[i]], path + "/dependencies/" + triggers[i]));
          v = std::move(m);
        }
      }
      if (v.is_boolean()) {
        if (v.get<bool>()) return error(path, "dependencies: a variant merged to true");  // cannot happen: base is an object
        continue;
      }
      for (size_t i = 0; i < triggers.size(); ++i) {
        if (present & (1u << i)) continue;
        if (!v.contains("properties") || !v["properties"].is_object()) v["properties"] = Json::object();
        v["properties"][triggers[i]] = false;
      }
      DI_ASSIGN_OR_RETURN(ExprId e, compile(v, path));
      alts.push_back(e);
    }
    return g_.alt(std::move(alts));
  }

  static constexpr ExprId kNoExpr = -1;

  // oneOf whose branches only require properties ({"required": ["a"]}, {"required": ["b"]}): an
  // object matches exactly one branch depending on which of the named properties it has, so the
  // schema is one variant per presence set with exactly one branch satisfied (present names
  // required, absent ones forbidden), objects only (anything else meets every branch). kNoExpr
  // when the branches are not of that form.
  Result<ExprId> compile_one_of_required(const Json& s, const Json& base, const std::string& path) {
    const Json& branches = s["oneOf"];
    if (branches.size() < 2) return kNoExpr;
    std::vector<std::vector<std::string>> sets;
    std::vector<std::string> names;
    for (const Json& b_in : branches) {
      if (!b_in.is_object()) return kNoExpr;
      for (auto it = b_in.begin(); it != b_in.end(); ++it) {
        if (it.key() != "required" && kAssertions.count(it.key())) return kNoExpr;
      }
      std::vector<std::string> set;
      if (b_in.contains("required")) {
        if (!b_in["required"].is_array()) return kNoExpr;
        for (const Json& r : b_in["required"]) {
          if (!r.is_string()) return kNoExpr;
          set.push_back(r.get<std::string>());
          if (std::find(names.begin(), names.end(), set.back()) == names.end()) names.push_back(set.back());
        }
      }
      sets.push_back(std::move(set));
    }
    if (names.size() > 6) return error(path, "oneOf of required lists over more than 6 properties is not supported");
    DI_ASSIGN_OR_RETURN(Json objects, merge(base, Json{{"type", "object"}}, path));
    std::vector<ExprId> alts;
    for (uint32_t present = 0; present < (1u << names.size()); ++present) {
      auto has = [&](const std::string& n) {
        return (present >> (std::find(names.begin(), names.end(), n) - names.begin())) & 1u;
      };
      int satisfied = 0;
      for (const auto& set : sets) satisfied += std::all_of(set.begin(), set.end(), has);
      if (satisfied != 1) continue;
      Json variant = Json::object();
      variant["required"] = Json::array();
      variant["properties"] = Json::object();
      for (size_t i = 0; i < names.size(); ++i) {
        if (present & (1u << i)) variant["required"].push_back(names[i]);
        else variant["properties"][names[i]] = false;
      }
      DI_ASSIGN_OR_RETURN(Json m, merge(objects, variant, path + "/oneOf"));
      DI_ASSIGN_OR_RETURN(ExprId e, compile(m, path + "/oneOf"));
      alts.push_back(e);
    }
    return g_.alt(std::move(alts));
  }

  // `not` over what can be complemented exactly: a schema of type, const/enum of scalars and
  // the string keywords, beside nothing but `type`. The complement is built per JSON type: the
  // null and boolean values left out, every object or array unless the schema takes them all,
  // the strings outside the schema's string language (a DFA complement), and the numbers not
  // among its values (plain decimals: exponent spellings are refused, which is stricter).
  Result<ExprId> compile_not(const Json& s, const std::string& path) {
    static const std::set<std::string> kComplementable = {"type", "enum", "const", "pattern", "minLength", "maxLength", "format"};
    Json rest = s;
    rest.erase("not");
    for (auto it = rest.begin(); it != rest.end(); ++it) {
      // Beside it: the type, and string keywords (they narrow only the strings' piece below).
      static const std::set<std::string> kBeside = {"type", "pattern", "minLength", "maxLength", "format"};
      if (!kBeside.count(it.key()) && kAssertions.count(it.key())) {
        return error(path, "keyword 'not' beside '" + it.key() + "' is not supported");
      }
    }
    DI_ASSIGN_OR_RETURN(Json n, inline_ref(s["not"], path + "/not"));
    if (n.is_boolean()) return n.get<bool>() ? g_.nothing() : compile(rest, path);
    if (!n.is_object()) return error(path, "not must be a schema");
    if (n.contains("not") && !has_assertions([&] { Json x = n; x.erase("not"); return x; }())) {
      DI_ASSIGN_OR_RETURN(Json m, merge(rest, n["not"], path + "/not/not"));  // not(not(X)) is X
      return compile(m, path);
    }
    for (auto it = n.begin(); it != n.end(); ++it) {
      if (!kComplementable.count(it.key()) && kAssertions.count(it.key())) {
        return error(path, "keyword 'not' over '" + it.key() + "' is not supported");
      }
    }
    std::optional<std::vector<Json>> values;
    if (n.contains("const")) values = std::vector<Json>{n["const"]};
    if (n.contains("enum")) {
      if (!n["enum"].is_array()) return error(path, "enum must be an array");
      std::vector<Json> e;
      for (const Json& v : n["enum"]) {
        if (!values || json_contains(Json(*values), v)) e.push_back(v);
      }
      values = std::move(e);
    }
    const std::vector<std::string> n_types = types_of(n);
    if (values) {
      std::vector<Json> kept;
      for (const Json& v : *values) {
        if (v.is_object() || v.is_array()) return error(path, "keyword 'not' over an object or array const/enum is not supported");
        if (value_fits(v, n, n_types)) kept.push_back(v);
      }
      values = std::move(kept);
    }
    auto n_has = [&](const char* t) { return std::find(n_types.begin(), n_types.end(), t) != n_types.end(); };
    auto in_values = [&](const Json& v) { return !values || json_contains(Json(*values), v); };
    const std::vector<std::string> outer = types_of(rest);
    auto outer_has = [&](const char* t) { return std::find(outer.begin(), outer.end(), t) != outer.end(); };
    std::vector<ExprId> alts;
    if (outer_has("null") && !(n_has("null") && in_values(Json(nullptr)))) alts.push_back(lit("null"));
    if (outer_has("boolean")) {
      for (bool b : {true, false}) {
        if (!(n_has("boolean") && in_values(Json(b)))) alts.push_back(lit(b ? "true" : "false"));
      }
    }
    for (const char* t : {"object", "array"}) {
      if (outer_has(t) && !(n_has(t) && !values)) {
        DI_ASSIGN_OR_RETURN(ExprId e, compile_type(t, Json::object(), path));
        alts.push_back(e);
      }
    }
    if (outer_has("string")) {
      DI_ASSIGN_OR_RETURN(ByteDfa any, any_string_dfa(path));
      ByteDfa taken;  // the strings `n` accepts
      if (n_has("string")) {
        DI_ASSIGN_OR_RETURN(taken, string_keywords_dfa(n, path));
        if (values) {
          std::set<std::string> strings;
          for (const Json& v : *values) {
            if (v.is_string()) strings.insert(v.get<std::string>());
          }
          for (const std::string& x : strings) {
            for (unsigned char c : x) {
              if (c < 0x20) return error(path, "keyword 'not' over a string with a control character is not supported");
            }
          }
          DI_ASSIGN_OR_RETURN(ByteDfa listed, names_dfa(strings, path));
          DI_ASSIGN_OR_RETURN(taken, dfa_op(taken, listed, DfaOp::kAnd, path));
        }
      }
      DI_ASSIGN_OR_RETURN(ByteDfa allowed, string_keywords_dfa(rest, path));
      DI_ASSIGN_OR_RETURN(ByteDfa left, dfa_op(allowed, taken, DfaOp::kAndNot, path));
      alts.push_back(g_.seq({lit("\""), g_.dfa(std::make_shared<const ByteDfa>(std::move(left))), lit("\"")}));
    }
    const bool outer_number = outer_has("number"), outer_integer = outer_has("integer") || outer_number;
    if (outer_integer) {
      const bool n_takes_all = (n_has("number") || (n_has("integer") && !outer_number)) && !values;
      const bool n_takes_none = !n_has("number") && !n_has("integer");
      if (n_takes_none) {
        alts.push_back(outer_number ? any_number() : any_integer());
      } else if (!n_takes_all) {
        // Plain decimals (integers only, for an integer-only outer type) not among n's numbers.
        Grammar t;
        const ExprId digits = t.plus(t.byte_range('0', '9'));
        const ExprId integer = t.seq({t.optional(t.bytes("-")), t.alt({t.bytes("0"), t.seq({t.byte_range('1', '9'), t.star(t.byte_range('0', '9'))})})});
        const ExprId universe = outer_number ? t.seq({integer, t.optional(t.seq({t.bytes("."), digits}))}) : integer;
        std::vector<ExprId> taken;
        if (values) {
          for (const Json& v : *values) {
            if (!v.is_number()) continue;
            const double x = std::fabs(v.get<double>());
            // number_spellings_in writes such values only as given, not every plain spelling.
            if (x >= 1e39 || (x != 0 && x < 1e-39)) return error(path, "keyword 'not' over a number this large or small is not supported");
            taken.push_back(number_spellings_in(t, v));
          }
        } else {
          // n is integer-only: every plain spelling of an integer.
          taken.push_back(t.seq({integer, t.optional(t.seq({t.bytes("."), t.plus(t.bytes("0"))}))}));
        }
        auto u = dfa_of(t, universe);
        auto k = dfa_of(t, t.alt(std::move(taken)));
        if (!u.ok() || !k.ok()) return error(path, (u.ok() ? k.status() : u.status()).message());
        DI_ASSIGN_OR_RETURN(ByteDfa left, dfa_op(*u, *k, DfaOp::kAndNot, path));
        alts.push_back(g_.dfa(std::make_shared<const ByteDfa>(std::move(left))));
      }
    }
    return g_.alt(std::move(alts));
  }

  Result<ExprId> compile_type(const std::string& t, const Json& s, const std::string& path) {
    if (t == "null") return lit("null");
    if (t == "boolean") return g_.alt({lit("true"), lit("false")});
    if (t == "string") return compile_string(s, path);
    if (t == "number" || t == "integer") return compile_number(s, t == "integer", path);
    if (t == "object") return memo_rule("object", s, path, [&] { return compile_object(s, path); });
    if (t == "array") return memo_rule("array", s, path, [&] { return compile_array(s, path); });
    return error(path, "unknown type '" + t + "'");
  }

  // Object and array schemas become rules of their own, shared when the same subschema recurs.
  Result<ExprId> memo_rule(const std::string& kind, const Json& s, const std::string& path, auto&& make) {
    const std::string key = kind + ":" + s.dump();
    auto it = memo_.find(key);
    if (it != memo_.end()) return g_.call(it->second);
    DI_ASSIGN_OR_RETURN(ExprId body, make());
    const RuleId r = g_.add_rule(g_.fresh_name(kind), body);
    memo_.emplace(key, r);
    return g_.call(r);
  }

  // ---- scalars ------------------------------------------------------------------------------

  // ---- string languages as DFAs (between the quotes, escaped as a compact serializer does) --

  Result<ByteDfa> body_dfa(const std::string& path, auto&& make) {
    Grammar t;
    auto e = make(t);
    if constexpr (std::is_same_v<decltype(e), ExprId>) {
      auto d = dfa_of(t, e);
      if (!d.ok()) return error(path, d.status().message());
      return d;
    } else {
      if (!e.ok()) return error(path, e.status().message());
      auto d = dfa_of(t, *e);
      if (!d.ok()) return error(path, d.status().message());
      return d;
    }
  }

  Result<ByteDfa> pattern_dfa(const std::string& pattern, RegexMatch match, const std::string& path) {
    return body_dfa(path, [&](Grammar& t) { return compile_regex(t, pattern, RegexEncoding::kJsonString, match); });
  }

  Result<ByteDfa> length_dfa(int64_t min_len, int64_t max_len, const std::string& path) {
    return body_dfa(path, [&](Grammar& t) {
      return t.repeat(any_char_expr(t, RegexEncoding::kJsonString), static_cast<int32_t>(min_len),
                      max_len == kUnbounded ? kUnbounded : static_cast<int32_t>(max_len));
    });
  }

  Result<ByteDfa> any_string_dfa(const std::string& path) { return length_dfa(0, kUnbounded, path); }

  // The names as a compact serializer writes them (what lit(Json(name).dump()) matches).
  Result<ByteDfa> names_dfa(const std::set<std::string>& names, const std::string& path) {
    return body_dfa(path, [&](Grammar& t) {
      std::vector<ExprId> alts;
      for (const std::string& n : names) {
        const std::string quoted = Json(n).dump();
        alts.push_back(t.bytes(quoted.substr(1, quoted.size() - 2)));
      }
      return t.alt(std::move(alts));
    });
  }

  Result<ByteDfa> dfa_op(const ByteDfa& a, const ByteDfa& b, DfaOp op, const std::string& path) {
    auto d = combine(a, b, op);
    if (!d.ok()) return error(path, d.status().message());
    return d;
  }

  static bool string_body_accepted(const ByteDfa& d, const std::string& value) {
    const std::string quoted = Json(value).dump();
    return dfa_accepts(d, std::string_view(quoted).substr(1, quoted.size() - 2));
  }

  // The string keywords of `s` (pattern, format, minLength, maxLength) as one DFA of the body.
  Result<ByteDfa> string_keywords_dfa(const Json& s, const std::string& path) {
    DI_ASSIGN_OR_RETURN(ByteDfa d, any_string_dfa(path));
    if (s.contains("format")) {
      if (!s["format"].is_string()) return error(path, "format must be a string");
      auto regex = format_regex(s["format"].get<std::string>());
      if (!regex) return error(path, "format '" + s["format"].get<std::string>() + "' is not supported");
      DI_ASSIGN_OR_RETURN(ByteDfa f, pattern_dfa(*regex, RegexMatch::kFull, path));
      DI_ASSIGN_OR_RETURN(d, dfa_op(d, f, DfaOp::kAnd, path));
      if (s["format"] == Json("hostname")) {
        DI_ASSIGN_OR_RETURN(ByteDfa dashes, pattern_dfa("--", RegexMatch::kSearch, path));
        DI_ASSIGN_OR_RETURN(d, dfa_op(d, dashes, DfaOp::kAndNot, path));
        DI_ASSIGN_OR_RETURN(ByteDfa one_char, length_dfa(1, 1, path));
        auto l = with_length(d, one_char, 0, 253);
        if (!l.ok()) return error(path, l.status().message());
        d = std::move(*l);
      }
    }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) return error(path, "pattern must be a string");
      DI_ASSIGN_OR_RETURN(ByteDfa p, pattern_dfa(s["pattern"].get<std::string>(), RegexMatch::kSearch, path));
      DI_ASSIGN_OR_RETURN(d, dfa_op(d, p, DfaOp::kAnd, path));
    }
    if (s.contains("minLength") || s.contains("maxLength")) {
      int64_t min_len = 0, max_len = kUnbounded;
      if (s.contains("minLength")) min_len = static_cast<int64_t>(std::ceil(s["minLength"].get<double>()));
      if (s.contains("maxLength")) max_len = static_cast<int64_t>(std::floor(s["maxLength"].get<double>()));
      if (min_len > 4096 || max_len > 4096) return error(path, "minLength/maxLength above 4096 beside pattern or format");
      DI_ASSIGN_OR_RETURN(ByteDfa one_char, length_dfa(1, 1, path));
      auto l = with_length(d, one_char, min_len, max_len);
      if (!l.ok()) return error(path, l.status().message());
      d = std::move(*l);
    }
    return d;
  }

  Result<ExprId> compile_string(const Json& s, const std::string& path) {
    const bool has_len = s.contains("minLength") || s.contains("maxLength");
    int64_t min_len = 0, max_len = kUnbounded;
    if (s.contains("minLength")) {
      if (!s["minLength"].is_number() || s["minLength"].get<double>() < 0) return error(path, "minLength must be a non-negative number");
      min_len = static_cast<int64_t>(std::ceil(s["minLength"].get<double>()));
    }
    if (s.contains("maxLength")) {
      if (!s["maxLength"].is_number() || s["maxLength"].get<double>() < 0) return error(path, "maxLength must be a non-negative number");
      max_len = static_cast<int64_t>(std::floor(s["maxLength"].get<double>()));
    }
    if (max_len != kUnbounded && max_len < min_len) return g_.nothing();
    std::string pattern;
    if (s.contains("format")) {
      if (!s["format"].is_string()) return error(path, "format must be a string");
      const std::string f = s["format"].get<std::string>();
      auto regex = format_regex(f);
      if (!regex) return error(path, "format '" + f + "' is not supported");
      pattern = *regex;
    }
    if ((s.contains("format") && s.contains("pattern")) || ((s.contains("format") || s.contains("pattern")) && has_len) ||
        (s.contains("format") && s["format"] == Json("hostname"))) {
      // An intersection of string languages: built as a DFA.
      DI_ASSIGN_OR_RETURN(ByteDfa d, string_keywords_dfa(s, path));
      return g_.seq({lit("\""), g_.dfa(std::make_shared<const ByteDfa>(std::move(d))), lit("\"")});
    }
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) return error(path, "pattern must be a string");
      pattern = s["pattern"].get<std::string>();
    }
    if (!pattern.empty() || s.contains("pattern")) {
      const RegexMatch match = s.contains("format") ? RegexMatch::kFull : RegexMatch::kSearch;
      auto body = compile_regex(g_, pattern, RegexEncoding::kJsonString, match);
      if (!body.ok()) return error(path, body.status().message());
      const std::string key = "pattern:" + std::to_string(static_cast<int>(match)) + pattern;
      return g_.call(shared(key, [&] { return g_.seq({lit("\""), *body, lit("\"")}); }));
    }
    if (!has_len) return any_string();
    if (min_len > (1 << 20) || max_len > (1 << 20)) return error(path, "minLength/maxLength above 1048576");
    const std::string key = "string_" + std::to_string(min_len) + "_" + (max_len == kUnbounded ? "inf" : std::to_string(max_len));
    return g_.call(shared(key, [&] {
      const bool long_bounds = min_len > kInlineLengthBound || max_len > kInlineLengthBound;
      const ExprId body = long_bounds ? long_string_body(min_len, max_len)
                                      : g_.repeat(string_char(), static_cast<int32_t>(min_len),
                                                  static_cast<int32_t>(max_len));
      return g_.seq({lit("\""), body, lit("\"")});
    }));
  }

  // Bounds past this are counted in chunks (long_string_body); up to it the characters are
  // inlined, one copy of the character's automaton (escapes, UTF-8) each.
  static constexpr int64_t kInlineLengthBound = 1024;
  static constexpr int32_t kStringChunk = 64;

  // min_len..max_len characters (max_len may be kUnbounded) with a bound past
  // kInlineLengthBound. Inlined, a few thousand copies of the character outgrow the compile
  // budget; a call of one character per position put a call in every state of the string, so
  // every mask checked nearly the whole vocabulary against the stacks (maxLength 32767: 5.6 ms
  // a mask). Here a shared rule holds kStringChunk characters inlined and the count goes in
  // whole chunks: exactly min_len is q chunks and r characters, and up to `extra` more is
  // chunk{0, t-1} then 0..extra - 64(t-1) characters (t = extra / 64; the tail is 64 to 127
  // long, so every count up to `extra` is reached, and none beyond). Calls happen once per
  // chunk, and a state inside a chunk has a call-free class.
  ExprId long_string_body(int64_t min_len, int64_t max_len) {
    const ExprId chunk = g_.call(shared("string_chunk", [&] { return g_.repeat(string_char(), kStringChunk, kStringChunk); }));
    const auto chars = [&](int64_t lo, int64_t hi) {
      return g_.repeat(string_char(), static_cast<int32_t>(lo), hi == kUnbounded ? kUnbounded : static_cast<int32_t>(hi));
    };
    const int64_t q = min_len / kStringChunk, r = min_len % kStringChunk;
    std::vector<ExprId> parts = {g_.repeat(chunk, static_cast<int32_t>(q), static_cast<int32_t>(q)), chars(r, r)};
    if (max_len == kUnbounded) {
      parts.push_back(chars(0, kUnbounded));
    } else {
      const int64_t extra = max_len - min_len;
      const int64_t t = extra / kStringChunk;
      if (t == 0) {
        parts.push_back(chars(0, extra));
      } else {
        parts.push_back(g_.repeat(chunk, 0, static_cast<int32_t>(t - 1)));
        parts.push_back(chars(0, extra - kStringChunk * (t - 1)));
      }
    }
    return g_.seq(std::move(parts));
  }

  Result<ExprId> compile_number(const Json& s, bool integer, const std::string& path) {
    NumberBounds b;
    auto num = [&](const char* k, double* out) -> Status {
      if (!s.contains(k)) return Status::ok_status();
      if (!s[k].is_number()) return error(path, std::string(k) + " must be a number");
      *out = s[k].get<double>();
      return Status::ok_status();
    };
    double v;
    if (s.contains("minimum")) {
      DI_RETURN_IF_ERROR(num("minimum", &v));
      b.set_lower(v, s.contains("exclusiveMinimum") && s["exclusiveMinimum"] == Json(true));
    }
    if (s.contains("maximum")) {
      DI_RETURN_IF_ERROR(num("maximum", &v));
      b.set_upper(v, s.contains("exclusiveMaximum") && s["exclusiveMaximum"] == Json(true));
    }
    if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number()) {
      b.set_lower(s["exclusiveMinimum"].get<double>(), true);
    }
    if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_number()) {
      b.set_upper(s["exclusiveMaximum"].get<double>(), true);
    }
    int32_t frac_digits = -1;  // -1: any
    if (s.contains("multipleOf")) {
      if (!s["multipleOf"].is_number() || s["multipleOf"].get<double>() <= 0) return error(path, "multipleOf must be a positive number");
      const double m = s["multipleOf"].get<double>();
      if (m == 1.0 || (integer && m == std::floor(m) && m == 1.0)) {
        integer = true;
      } else if (!integer && m < 1.0 && decimal_places(m) >= 0) {
        frac_digits = decimal_places(m);
      } else {
        return error(path, "multipleOf " + s["multipleOf"].dump() + " is not supported");
      }
    }
    if (!b.bounded() && frac_digits < 0) return integer ? any_integer() : any_number();
    auto e = integer ? integer_range_expr(g_, b) : number_range_expr(g_, b, frac_digits);
    if (!e.ok()) return error(path, e.status().message());
    return *e;
  }

  // 10^-k exactly (0.1, 0.01, ...): k; else -1.
  static int32_t decimal_places(double m) {
    for (int k = 1; k <= 12; ++k) {
      if (std::fabs(m - std::pow(10.0, -k)) < 1e-15) return k;
    }
    return -1;
  }

  Result<ExprId> compile_enum(const Json& s, const std::string& path) {
    static const std::set<std::string> kSiblingsAllowed = {"type", "const", "enum", "minLength", "maxLength", "pattern", "format",
                                                           "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    // Unknown keywords are annotations; known assertions beside enum must be checked. Those
    // the filter below does not know are checked by the grammar of the rest of the schema,
    // run over each value (compact): a value it refuses is left out, which at worst is stricter.
    Json others = Json::object();
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (!kSiblingsAllowed.count(it.key()) && kAssertions.count(it.key())) others[it.key()] = it.value();
    }
    std::shared_ptr<const Automaton> others_grammar;
    if (!others.empty()) {
      if (s.contains("type")) others["type"] = s["type"];
      JsonSchemaOptions compact = options_;
      compact.compact = true;
      SchemaCompiler sub(root_, compact);
      auto g = sub.run_on(others, path);
      if (!g.ok()) return g.status();
      auto a = Automaton::compile(*g, CompileBudget{});
      if (!a.ok()) return error(path, "enum/const beside other keywords: " + a.status().message());
      others_grammar = *a;
    }
    auto others_accept = [&](const Json& v) {
      if (!others_grammar) return true;
      Stacks st(others_grammar.get(), 2000);
      st.reset(others_grammar->root_start(), Stacks::kRoot);
      for (char c : v.dump()) {
        if (!st.advance(static_cast<uint8_t>(c))) return false;
      }
      return st.can_end();
    };
    std::vector<Json> values;
    if (s.contains("const")) values.push_back(s["const"]);
    if (s.contains("enum")) {
      if (!s["enum"].is_array()) return error(path, "enum must be an array");
      if (!s.contains("const")) values.assign(s["enum"].begin(), s["enum"].end());
      else if (!json_contains(s["enum"], s["const"])) values.clear();
    }
    const std::vector<std::string> types = types_of(s);
    std::optional<ByteDfa> string_dfa;
    if (s.contains("pattern") || s.contains("format")) {
      DI_ASSIGN_OR_RETURN(ByteDfa d, string_keywords_dfa(s, path));
      string_dfa = std::move(d);
    }
    std::vector<ExprId> alts;
    for (const Json& v : values) {
      if (!value_fits(v, s, types)) continue;
      if (string_dfa && v.is_string() && !string_body_accepted(*string_dfa, v.get<std::string>())) continue;
      if (!others_accept(v)) continue;
      alts.push_back(const_expr(v));
    }
    return g_.alt(std::move(alts));
  }

  // Equality as JSON Schema defines it: numbers by value, objects regardless of key order.
  static bool json_equal(const Json& a, const Json& b) {
    if (a.is_number() && b.is_number()) {
      if (a.is_number_float() || b.is_number_float()) return a.get<double>() == b.get<double>();
      if (a.is_number_unsigned() && b.is_number_unsigned()) return a.get<uint64_t>() == b.get<uint64_t>();
      if (a.is_number_unsigned() || b.is_number_unsigned()) {
        const Json& u = a.is_number_unsigned() ? a : b;
        const Json& i = a.is_number_unsigned() ? b : a;
        return i.get<int64_t>() >= 0 && static_cast<uint64_t>(i.get<int64_t>()) == u.get<uint64_t>();
      }
      return a.get<int64_t>() == b.get<int64_t>();
    }
    if (a.type() != b.type()) return false;
    if (a.is_array()) {
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!json_equal(a[i], b[i])) return false;
      }
      return true;
    }
    if (a.is_object()) {
      if (a.size() != b.size()) return false;
      for (auto it = a.begin(); it != a.end(); ++it) {
        if (!b.contains(it.key()) || !json_equal(it.value(), b[it.key()])) return false;
      }
      return true;
    }
    return a == b;
  }

  static bool json_contains(const Json& array, const Json& v) {
    for (const Json& x : array) {
      if (json_equal(x, v)) return true;
    }
    return false;
  }

  // Every instance equal to `v`: numbers in each plain decimal spelling of their value (1, 1.0,
  // 1.00; not exponents, which would make the set irregular in general), objects with their
  // members in any order (up to four members; more keep the written order, which is stricter).
  ExprId const_expr(const Json& v) {
    if (v.is_number()) return number_spellings(v);
    if (v.is_array()) {
      if (v.empty()) return g_.seq({lit("["), ws_, lit("]")});
      std::vector<ExprId> parts = {lit("["), ws_};
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) parts.push_back(comma());
        parts.push_back(const_expr(v[i]));
      }
      parts.push_back(ws_);
      parts.push_back(lit("]"));
      return g_.seq(std::move(parts));
    }
    if (v.is_object()) {
      if (v.empty()) return g_.seq({lit("{"), ws_, lit("}")});
      std::vector<ExprId> members;
      for (auto it = v.begin(); it != v.end(); ++it) {
        members.push_back(g_.seq({lit(Json(it.key()).dump()), ws_, lit(":"), ws_, const_expr(it.value())}));
      }
      const size_t n = members.size();
      ExprId body;
      if (n <= 4) {
        // rest(mask): the members still to write, any order, each after a comma.
        std::function<ExprId(uint32_t, bool)> rest = [&](uint32_t mask, bool first) -> ExprId {
          if (mask == 0) return g_.empty();
          std::vector<ExprId> alts;
          for (size_t j = 0; j < n; ++j) {
            if (mask & (1u << j)) alts.push_back(g_.seq({first ? g_.empty() : comma(), members[j], rest(mask & ~(1u << j), false)}));
          }
          return g_.alt(std::move(alts));
        };
        body = rest((1u << n) - 1, true);
      } else {
        std::vector<ExprId> parts;
        for (size_t j = 0; j < n; ++j) {
          if (j) parts.push_back(comma());
          parts.push_back(members[j]);
        }
        body = g_.seq(std::move(parts));
      }
      return g_.seq({lit("{"), ws_, body, ws_, lit("}")});
    }
    return lit(v.dump());
  }

  ExprId number_spellings(const Json& v) { return number_spellings_in(g_, v); }

  static ExprId number_spellings_in(Grammar& g_, const Json& v) {
    auto lit = [&](std::string_view t) { return g_.bytes(t); };
    const std::string text = v.dump();
    std::string digits;
    int64_t point = -1, exponent = 0;
    const bool negative = !text.empty() && text[0] == '-';
    size_t i = negative ? 1 : 0;
    for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
      if (text[i] == '.') point = static_cast<int64_t>(digits.size());
      else digits += text[i];
    }
    if (i < text.size()) exponent = std::strtoll(text.c_str() + i + 1, nullptr, 10);
    int64_t int_digits = (point < 0 ? static_cast<int64_t>(digits.size()) : point) + exponent;
    // Significant digits only: value = 0.digits * 10^int_digits.
    size_t lead = 0;
    while (lead < digits.size() && digits[lead] == '0') ++lead;
    digits = digits.substr(lead);
    int_digits -= static_cast<int64_t>(lead);
    while (!digits.empty() && digits.back() == '0') digits.pop_back();
    const ExprId zeros = g_.star(lit("0"));
    if (digits.empty()) return g_.seq({g_.optional(lit("-")), lit("0"), g_.optional(g_.seq({lit("."), g_.plus(lit("0"))}))});
    if (int_digits > 40 || int_digits < -40) return lit(text);
    std::string int_part, frac;
    if (int_digits <= 0) {
      int_part = "0";
      frac = std::string(static_cast<size_t>(-int_digits), '0') + digits;
    } else if (int_digits >= static_cast<int64_t>(digits.size())) {
      int_part = digits + std::string(static_cast<size_t>(int_digits) - digits.size(), '0');
    } else {
      int_part = digits.substr(0, static_cast<size_t>(int_digits));
      frac = digits.substr(static_cast<size_t>(int_digits));
    }
    const std::string sign = negative ? "-" : "";
    const ExprId plain = frac.empty() ? g_.seq({lit(sign + int_part), g_.optional(g_.seq({lit("."), g_.plus(lit("0"))}))})
                                      : g_.seq({lit(sign + int_part + "." + frac), zeros});
    const bool has_exponent = text.find_first_of("eE") != std::string::npos;
    return has_exponent ? g_.alt({plain, lit(text)}) : plain;
  }

  static bool value_fits(const Json& v, const Json& s, const std::vector<std::string>& types) {
    auto has = [&](const char* t) { return std::find(types.begin(), types.end(), t) != types.end(); };
    bool type_ok = (v.is_null() && has("null")) || (v.is_boolean() && has("boolean")) || (v.is_object() && has("object")) ||
                   (v.is_array() && has("array")) || (v.is_string() && has("string")) || (v.is_number() && has("number")) ||
                   (v.is_number() && has("integer") && std::floor(v.get<double>()) == v.get<double>());
    if (!type_ok) return false;
    if (v.is_string()) {
      size_t n = 0;
      for (unsigned char c : v.get<std::string>()) n += (c & 0xC0) != 0x80;
      if (s.contains("minLength") && n < s["minLength"].get<double>()) return false;
      if (s.contains("maxLength") && n > s["maxLength"].get<double>()) return false;
    }
    if (v.is_number()) {
      const double x = v.get<double>();
      auto bound = [&](const char* k) { return s.contains(k) && s[k].is_number(); };
      if (bound("minimum") && x < s["minimum"].get<double>()) return false;
      if (bound("maximum") && x > s["maximum"].get<double>()) return false;
      if (bound("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return false;
      if (bound("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return false;
    }
    return true;
  }

  // ---- objects ------------------------------------------------------------------------------

  struct Property {
    std::string name;
    Json schema;
    bool required;
  };

  struct PatternProperty {
    ByteDfa keys;  // key bodies the pattern matches (anywhere: JSON Schema's search)
    Json schema;
  };

  Result<ExprId> compile_object(const Json& s, const std::string& path) {
    std::vector<PatternProperty> patterns;
    if (s.contains("patternProperties")) {
      if (!s["patternProperties"].is_object()) return error(path, "patternProperties must be an object");
      // Each extra key takes the schemas of exactly the patterns it matches: one key language per
      // subset of patterns, so their number stays small.
      if (s["patternProperties"].size() > 4) return error(path, "patternProperties with more than 4 patterns is not supported");
      for (auto p = s["patternProperties"].begin(); p != s["patternProperties"].end(); ++p) {
        DI_ASSIGN_OR_RETURN(ByteDfa d, pattern_dfa(p.key(), RegexMatch::kSearch, path + "/patternProperties"));
        patterns.push_back({std::move(d), p.value()});
      }
    }
    std::vector<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return error(path, "required must be an array");
      for (const Json& r : s["required"]) {
        if (!r.is_string()) return error(path, "required must list strings");
        if (std::find(required.begin(), required.end(), r.get<std::string>()) == required.end()) required.push_back(r.get<std::string>());
      }
    }
    auto is_required = [&](const std::string& k) { return std::find(required.begin(), required.end(), k) != required.end(); };
    Json additional = s.contains("additionalProperties") ? s["additionalProperties"] : Json(true);
    if (!additional.is_boolean() && !additional.is_object()) return error(path, "additionalProperties must be a schema");
    const bool additional_allowed = !(additional.is_boolean() && !additional.get<bool>());
    // A named property's value meets its own schema and that of every pattern matching its name;
    // a name no `properties` declares takes the patterns' schemas, or additionalProperties if none.
    auto with_patterns = [&](const std::string& name, std::optional<Json> own) -> Result<std::optional<Json>> {
      std::optional<Json> out = std::move(own);
      for (const PatternProperty& p : patterns) {
        if (!string_body_accepted(p.keys, name)) continue;
        if (!out) {
          out = p.schema;
        } else {
          DI_ASSIGN_OR_RETURN(Json m, merge(*out, p.schema, path + "/patternProperties"));
          out = std::move(m);
        }
      }
      if (!out && additional_allowed) out = additional;
      return out;
    };
    std::vector<Property> props;
    std::set<std::string> names;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) return error(path, "properties must be an object");
      for (auto p = s["properties"].begin(); p != s["properties"].end(); ++p) {
        names.insert(p.key());
        DI_ASSIGN_OR_RETURN(std::optional<Json> schema, with_patterns(p.key(), p.value()));
        if (schema->is_boolean() && !schema->get<bool>()) {
          if (is_required(p.key())) return g_.nothing();
          continue;  // may not appear
        }
        props.push_back({p.key(), *schema, is_required(p.key())});
      }
    }
    for (const std::string& r : required) {
      if (names.count(r)) continue;
      DI_ASSIGN_OR_RETURN(std::optional<Json> schema, with_patterns(r, std::nullopt));
      if (!schema) return g_.nothing();
      props.push_back({r, *schema, true});
      names.insert(r);
    }
    bool extras_possible = additional_allowed || !patterns.empty();
    const size_t n_required = required.size();
    // minProperties 1 with nothing required: the member list must not be empty (below).
    bool non_empty = false;
    if (s.contains("minProperties") && s["minProperties"].is_number() && s["minProperties"].get<double>() > n_required) {
      if (n_required > 0 || s["minProperties"].get<double>() > 1) {
        return error(path, "minProperties above the number of required properties (other than 1 with none required) is not supported");
      }
      non_empty = true;
    }
    if (s.contains("maxProperties") && s["maxProperties"].is_number() && (extras_possible || s["maxProperties"].get<double>() < props.size())) {
      if (s["maxProperties"].get<double>() != n_required) {
        return error(path, "maxProperties below the number of possible properties (other than the required count) is not supported");
      }
      // Exactly the required properties: nothing else may appear.
      std::erase_if(props, [](const Property& p) { return !p.required; });
      extras_possible = false;
      patterns.clear();
    }
    std::vector<ExprId> kv;
    for (const Property& p : props) {
      DI_ASSIGN_OR_RETURN(ExprId value, compile(p.schema, path + "/properties/" + p.name));
      kv.push_back(g_.seq({lit(Json(p.name).dump()), ws_, lit(":"), ws_, value}));
    }
    ExprId add_kv = g_.nothing();
    if (!extras_possible) {
    } else if (!patterns.empty()) {
      DI_ASSIGN_OR_RETURN(add_kv, pattern_members(patterns, names, additional_allowed ? std::optional<Json>(additional) : std::nullopt, path));
    } else if (additional_allowed) {
      DI_ASSIGN_OR_RETURN(ExprId key, other_key(names, path));
      DI_ASSIGN_OR_RETURN(ExprId value, compile(additional, path + "/additionalProperties"));
      // A rule of its own: the suffixes below use it at every gap, and inlined its key trie and
      // value would be copied into each (most of a small schema's automaton, measured).
      add_kv = g_.call(g_.add_rule(g_.fresh_name("additional_member"), g_.seq({key, ws_, lit(":"), ws_, value})));
    }
    const bool additional_allowed_any = extras_possible;
    // B_i: the members from property i on, after a member (each starts with a comma); A_0: all
    // of them, none written yet. A B_i is flat: one branch per property that may come next (up
    // to the first required one), each followed by the B after it. Nested instead (B_i as "i
    // or skip to B_{i+1}"), skipping k optional properties pushed k calls for every byte, or
    // doubled the automaton with each property when inlined. Past three properties the B_i
    // are rules, so each is built once.
    const size_t n = props.size();
    std::vector<size_t> next_required(n + 1, n);
    for (size_t i = n; i-- > 0;) next_required[i] = props[i].required ? i : next_required[i + 1];
    std::vector<ExprId> b(n + 1);
    b[n] = additional_allowed_any ? g_.star(g_.seq({comma(), add_kv})) : g_.empty();
    ExprId a_end = additional_allowed_any ? g_.optional(g_.seq({add_kv, b[n]})) : g_.empty();
    if (non_empty) a_end = additional_allowed_any ? g_.seq({add_kv, b[n]}) : g_.nothing();
    const bool as_rules = n > 3;
    auto members_from = [&](size_t i, bool first) {
      std::vector<ExprId> alts;
      for (size_t j = i; j < n && j <= next_required[i]; ++j) {
        alts.push_back(first ? g_.seq({kv[j], b[j + 1]}) : g_.seq({comma(), kv[j], b[j + 1]}));
      }
      if (next_required[i] == n) alts.push_back(first ? a_end : b[n]);
      return g_.alt(std::move(alts));
    };
    for (size_t i = n; i-- > 0;) {
      b[i] = members_from(i, false);
      if (as_rules) b[i] = g_.call(g_.add_rule(g_.fresh_name("members"), b[i]));
    }
    const ExprId a0 = members_from(0, true);
    std::vector<ExprId> a = {as_rules ? g_.call(g_.add_rule(g_.fresh_name("members"), a0)) : a0};
    return g_.seq({lit("{"), ws_, a[0], ws_, lit("}")});
  }

  // Members whose key no `properties` declares: for each set C of patterns, the keys matching
  // exactly those in C, valued by all of C's schemas (C empty: by additionalProperties, if any).
  Result<ExprId> pattern_members(const std::vector<PatternProperty>& patterns, const std::set<std::string>& names,
                                 const std::optional<Json>& additional, const std::string& path) {
    for (const std::string& n : names) {
      for (unsigned char c : n) {
        // A control character's escape (\u00XX) need not be the only spelling of the name.
        if (c < 0x20) return error(path, "patternProperties beside a property name with a control character is not supported");
      }
    }
    DI_ASSIGN_OR_RETURN(ByteDfa any, any_string_dfa(path));
    DI_ASSIGN_OR_RETURN(ByteDfa declared, names_dfa(names, path));
    DI_ASSIGN_OR_RETURN(ByteDfa others, dfa_op(any, declared, DfaOp::kAndNot, path));
    std::vector<ExprId> members;
    for (uint32_t subset = 0; subset < (1u << patterns.size()); ++subset) {
      if (subset == 0 && !additional) continue;
      ByteDfa keys = others;
      std::optional<Json> value = subset == 0 ? additional : std::nullopt;
      for (size_t q = 0; q < patterns.size() && !dfa_empty(keys); ++q) {
        const bool in = subset & (1u << q);
        DI_ASSIGN_OR_RETURN(keys, dfa_op(keys, patterns[q].keys, in ? DfaOp::kAnd : DfaOp::kAndNot, path));
        if (!in) continue;
        if (!value) {
          value = patterns[q].schema;
        } else {
          DI_ASSIGN_OR_RETURN(Json m, merge(*value, patterns[q].schema, path + "/patternProperties"));
          value = std::move(m);
        }
      }
      if (dfa_empty(keys)) continue;
      DI_ASSIGN_OR_RETURN(ExprId v, compile(*value, path + "/patternProperties"));
      const ExprId key = g_.seq({lit("\""), g_.dfa(std::make_shared<const ByteDfa>(std::move(keys))), lit("\"")});
      members.push_back(g_.seq({key, ws_, lit(":"), ws_, v}));
    }
    return g_.call(g_.add_rule(g_.fresh_name("pattern_member"), g_.alt(std::move(members))));
  }

  static CodepointSet quote_and_backslash() {
    CodepointSet s;
    s.add('"');
    s.add('\\');
    return s;
  }

  // A JSON string that is none of `names` (the keys additionalProperties covers).
  Result<ExprId> other_key(const std::set<std::string>& names, const std::string& path) {
    if (names.empty()) return any_string();
    bool plain = true;
    for (const std::string& n : names) {
      for (unsigned char c : n) {
        // A control character's escape (\u00XX) need not be the only spelling of the name.
        if (c < 0x20) return error(path, "additionalProperties beside a property name with a control character is not supported");
        if (c >= 0x7f || c == '"' || c == '\\') plain = false;
      }
    }
    if (!plain) {
      // The key trie below assumes printable ASCII names; others are subtracted as DFAs.
      DI_ASSIGN_OR_RETURN(ByteDfa any, any_string_dfa(path));
      DI_ASSIGN_OR_RETURN(ByteDfa declared, names_dfa(names, path));
      DI_ASSIGN_OR_RETURN(ByteDfa others, dfa_op(any, declared, DfaOp::kAndNot, path));
      return g_.seq({lit("\""), g_.dfa(std::make_shared<const ByteDfa>(std::move(others))), lit("\"")});
    }
    return g_.seq({lit("\""), key_trie(std::vector<std::string>(names.begin(), names.end()), 0)});
  }

  // Strings (after the opening quote) that are not one of `names`, all of which share their
  // first `depth` bytes with the text so far.
  ExprId key_trie(const std::vector<std::string>& names, size_t depth) {
    bool is_name = false;
    std::map<char, std::vector<std::string>> children;
    for (const std::string& n : names) {
      if (n.size() == depth) is_name = true;
      else children[n[depth]].push_back(n);
    }
    std::vector<ExprId> alts;
    if (!is_name) alts.push_back(lit("\""));
    // A character no name continues with, then any string's rest. Names are ASCII, so only the
    // ASCII part differs from node to node; the non-ASCII characters and the rest of the string
    // are rules shared by every node (inlined, they were most of a small schema's automaton).
    // Names hold no character JSON escapes (other_key checks), so the escapes are shared too.
    ByteSet other;
    other.add_range(0x20, 0x7E);
    for (unsigned char special : {'"', '\\'}) other.words[special >> 6] &= ~(uint64_t{1} << (special & 63));
    for (const auto& [c, _] : children) {
      const auto b = static_cast<unsigned char>(c);
      other.words[b >> 6] &= ~(uint64_t{1} << (b & 63));
    }
    // The non-ASCII or escaped character and the rest are one rule: a call of the character
    // alone made every token that starts with one and goes on (38,000 of DeepSeek V4's
    // vocabulary) uncertain, checked against the stacks at every mask inside a key.
    const ExprId not_plain_then_rest = g_.call(shared("non_ascii_or_escaped_key_rest", [&] {
      CodepointSet rest;
      rest.add_range(0, kMaxCodepoint);
      CodepointSet plain;
      plain.add_range(0x20, 0x7E);
      plain = plain.minus(quote_and_backslash());
      return g_.seq({codepoints_expr(g_, rest.minus(plain), RegexEncoding::kJsonString), g_.star(string_char()), lit("\"")});
    }));
    const ExprId rest = g_.call(shared("string_rest", [&] { return g_.seq({g_.star(string_char()), lit("\"")}); }));
    alts.push_back(g_.seq({g_.byte_set(other), rest}));
    alts.push_back(not_plain_then_rest);
    for (const auto& [c, group] : children) alts.push_back(g_.seq({lit(std::string(1, c)), key_trie(group, depth + 1)}));
    return g_.alt(std::move(alts));
  }

  // ---- arrays -------------------------------------------------------------------------------

  Result<ExprId> compile_array(const Json& s, const std::string& path) {
    if (s.contains("uniqueItems") && s["uniqueItems"] == Json(true) &&
        !(s.contains("maxItems") && s["maxItems"].is_number() && s["maxItems"].get<double>() <= 1)) {
      return error(path, "keyword 'uniqueItems' is not supported");
    }
    std::vector<Json> prefix;
    Json rest = Json(true);
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) return error(path, "prefixItems must be an array");
      prefix.assign(s["prefixItems"].begin(), s["prefixItems"].end());
      if (s.contains("items")) rest = s["items"];
    } else if (s.contains("items") && s["items"].is_array()) {
      prefix.assign(s["items"].begin(), s["items"].end());
      if (s.contains("additionalItems")) rest = s["additionalItems"];
    } else if (s.contains("items")) {
      rest = s["items"];
    }
    int64_t min_items = 0, max_items = kUnbounded;
    if (s.contains("minItems") && s["minItems"].is_number()) min_items = static_cast<int64_t>(std::ceil(s["minItems"].get<double>()));
    if (s.contains("maxItems") && s["maxItems"].is_number()) max_items = static_cast<int64_t>(std::floor(s["maxItems"].get<double>()));
    const bool rest_allowed = !(rest.is_boolean() && !rest.get<bool>());
    if (!rest_allowed) max_items = max_items == kUnbounded ? static_cast<int64_t>(prefix.size()) : std::min<int64_t>(max_items, prefix.size());
    if (max_items != kUnbounded && max_items < min_items) return g_.nothing();
    if (min_items > 100000 || max_items > 100000) return error(path, "minItems/maxItems above 100000");
    std::vector<ExprId> items;
    for (size_t i = 0; i < prefix.size(); ++i) {
      DI_ASSIGN_OR_RETURN(ExprId e, compile(prefix[i], path + "/prefixItems/" + std::to_string(i)));
      items.push_back(e);
    }
    ExprId rest_item = g_.nothing();
    if (rest_allowed) {
      DI_ASSIGN_OR_RETURN(rest_item, compile(rest, path + "/items"));
    }
    // Elements from index i on: the prefix items one by one, then the rest repeated. Prefix
    // items past maxItems never appear.
    const auto n_pre = static_cast<int64_t>(prefix.size());
    const int64_t n_eff = max_items != kUnbounded && max_items < n_pre ? max_items : n_pre;
    ExprId tail = g_.empty();
    const int64_t lo = std::max<int64_t>(0, min_items - n_pre);
    const int64_t hi = max_items == kUnbounded ? kUnbounded : max_items - n_pre;
    if (n_eff < n_pre || hi == 0 || !rest_allowed) {
      tail = lo > 0 && n_eff == n_pre ? g_.nothing() : g_.empty();
    } else if (n_pre == 0) {
      const ExprId more = g_.repeat(g_.seq({comma(), rest_item}), static_cast<int32_t>(std::max<int64_t>(lo - 1, 0)),
                                    hi == kUnbounded ? kUnbounded : static_cast<int32_t>(hi - 1));
      const ExprId list = g_.seq({rest_item, more});
      tail = lo > 0 ? list : g_.optional(list);
    } else {
      tail = g_.repeat(g_.seq({comma(), rest_item}), static_cast<int32_t>(lo), hi == kUnbounded ? kUnbounded : static_cast<int32_t>(hi));
    }
    for (int64_t i = n_eff; i-- > 0;) {
      const ExprId e = g_.seq({i == 0 ? g_.empty() : comma(), items[i], tail});
      tail = i < min_items ? e : g_.optional(e);
    }
    return g_.seq({lit("["), ws_, tail, ws_, lit("]")});
  }

  Json root_;
  JsonSchemaOptions options_;
  Grammar g_;
  ExprId ws_ = 0;
  int depth_ = 0;
  std::unordered_map<std::string, RuleId> shared_;
  std::unordered_map<std::string, RuleId> ref_rules_;
  std::unordered_map<std::string, RuleId> memo_;
  std::set<std::string> in_progress_;
};

}  // namespace

Result<Grammar> json_schema_to_grammar(std::string_view schema_text, const JsonSchemaOptions& options) {
  Json root = Json::parse(schema_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return invalid_argument("JSON Schema is not valid JSON");
  try {
    return SchemaCompiler(std::move(root), options).run();
  } catch (const nlohmann::json::exception& e) {
    // A keyword of the wrong JSON type somewhere a number or string was read.
    return invalid_argument(std::string("JSON Schema has a keyword of the wrong type: ") + e.what());
  }
}

}  // namespace deepinfer::grammar
