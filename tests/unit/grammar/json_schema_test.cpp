#include <gtest/gtest.h>

#include "grammar_test_util.h"

namespace deepinfer::grammar {
namespace {

using testing::compile_spec;
using testing::matches;

struct Instance {
  const char* json;
  bool valid;
};

void expect_instances(const char* schema, std::initializer_list<Instance> instances) {
  auto g = compile_spec(GrammarKind::kJsonSchema, schema);
  ASSERT_TRUE(g.ok()) << schema << ": " << g.status().to_string();
  for (const Instance& i : instances) {
    EXPECT_EQ(matches(*g, i.json), i.valid) << schema << " on " << i.json;
  }
}

TEST(JsonSchema, Types) {
  expect_instances(R"({"type":"string"})", {{R"("a\"b\\c\n")", true}, {R"("é")", true}, {"1", false}, {R"("a)", false}});
  expect_instances(R"({"type":"integer"})", {{"0", true}, {"-12", true}, {"012", false}, {"1.5", false}, {"-0", true}});
  expect_instances(R"({"type":"number"})", {{"1.5e-3", true}, {"-0.0", true}, {"1.", false}, {".5", false}, {"1E+2", true}});
  expect_instances(R"({"type":["null","boolean"]})", {{"null", true}, {"true", true}, {"false", true}, {"0", false}});
  expect_instances(R"({})", {{R"({"a":[1,{"b":null}]})", true}, {"\"x\"", true}, {"[1,]", false}});
  expect_instances(R"(false)", {{"null", false}});
}

TEST(JsonSchema, ObjectsKeepDeclaredOrderAndRequiredProperties) {
  const char* schema = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
                           "required":["b"],"additionalProperties":false})";
  expect_instances(schema, {{R"({"b":"x"})", true},
                            {R"({"a":1,"b":"x","c":true})", true},
                            {R"({"a":1,"b":"x"})", true},
                            {R"({"b":"x","c":false})", true},
                            {R"({"a":1})", false},
                            {R"({"b":"x","a":1})", false},
                            {R"({"b":"x","d":1})", false},
                            {R"({"b":1})", false},
                            {R"({})", false}});
}

TEST(JsonSchema, AdditionalPropertiesExcludeDeclaredNames) {
  const char* schema = R"({"type":"object","properties":{"ab":{"type":"integer"}},"additionalProperties":{"type":"string"}})";
  expect_instances(schema, {{R"({"ab":1})", true},
                            {R"({"ab":1,"a":"x"})", true},
                            {R"({"abc":"x"})", true},
                            {R"({"zz":"x","q":"y"})", true},
                            {R"({"ab":"x"})", false},
                            {R"({"a":1})", false},
                            {R"({"ab":1,"ab":2})", false}});
  // Keys that differ from a name in a non-ASCII, escaped or DEL character, and keys that stop
  // inside a name, are other keys.
  expect_instances(schema, {{"{\"a\u00e9\":\"x\"}", true},
                            {R"({"a\n":"x"})", true},
                            {"{\"a\x7f\":\"x\"}", true},
                            {R"({"a\"b":"x"})", true},
                            {R"({"":"x"})", true}});
  // More than three properties: the member lists become rules; the language is the same.
  const char* many = R"({"type":"object","properties":{"a":{},"b":{},"c":{},"d":{},"e":{},"f":{},"g":{"type":"null"}},
                         "required":["d"],"additionalProperties":false})";
  expect_instances(many, {{R"({"d":1})", true}, {R"({"a":1,"d":2,"g":null})", true}, {R"({"a":1,"g":null})", false},
                          {R"({"d":1,"g":1})", false}, {R"({"d":1,"a":1})", false}});
}

// An object that allows other keys beside its names: the "not one of the names" key was
// inlined with a whole JSON string at each node of the names' trie (2,370 DFA states for seven
// short names, most of the compile time of a typical MaskBench schema).
TEST(JsonSchema, OtherKeysStaySmall) {
  const char* schema = R"({"type":"object","properties":{"id":{"type":"number"},"title":{"type":"string"},
      "description":{"type":"string"},"answers":{"type":"array","items":{"type":"string"}},"order":{"type":"number"},
      "professions":{"type":"array","items":{"type":"string"}},"races":{"type":"array","items":{"type":"string"}}},
      "required":["id","title","description","answers","order"]})";
  auto g = compile_spec(GrammarKind::kJsonSchema, schema);
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_LT((*g)->automaton().n_states(), 1000u);
  EXPECT_TRUE(testing::matches(*g, R"({"id":1,"title":"t","description":"d","answers":[],"order":2,"x":{"y":[1]}})"));
  EXPECT_FALSE(testing::matches(*g, R"({"id":1,"title":"t","description":"d","answers":[],"order":2,"races":1})"));
}

TEST(JsonSchema, Arrays) {
  expect_instances(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})",
                   {{"[1,2]", true}, {"[1,2,3]", true}, {"[1]", false}, {"[1,2,3,4]", false}, {"[1,\"a\"]", false}});
  expect_instances(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
                   {{"[]", true}, {"[\"a\"]", true}, {"[\"a\",1]", true}, {"[\"a\",1,2]", false}, {"[1]", false}});
  expect_instances(R"({"type":"array","items":[{"type":"string"}],"additionalItems":{"type":"null"},"minItems":2})",
                   {{"[\"a\",null]", true}, {"[\"a\",null,null]", true}, {"[\"a\"]", false}, {"[\"a\",1]", false}});
  expect_instances(R"({"type":"array","prefixItems":[{},{},{}],"maxItems":2})", {{"[1,2]", true}, {"[1,2,3]", false}});
}

TEST(JsonSchema, EnumConstAndStringBounds) {
  expect_instances(R"({"enum":["red",1,null,{"a":[1]}]})",
                   {{"\"red\"", true}, {"1", true}, {"null", true}, {R"({"a":[1]})", true}, {"\"blue\"", false}, {"2", false}});
  expect_instances(R"({"type":"string","enum":["a",1,"bb"],"maxLength":1})", {{"\"a\"", true}, {"1", false}, {"\"bb\"", false}});
  expect_instances(R"({"const":"x"})", {{"\"x\"", true}, {"\"y\"", false}});
  expect_instances(R"({"type":"string","minLength":2,"maxLength":3})",
                   {{"\"ab\"", true}, {"\"abc\"", true}, {"\"a\"", false}, {"\"abcd\"", false}, {"\"\\n\\t\"", true},
                    {"\"éé\"", true}});
}

TEST(JsonSchema, PatternsAndFormats) {
  expect_instances(R"({"type":"string","pattern":"^[a-z]+-\\d+$"})", {{"\"ab-12\"", true}, {"\"ab-\"", false}, {"\"Ab-1\"", false}});
  expect_instances(R"({"type":"string","pattern":"x"})", {{"\"axb\"", true}, {"\"ab\"", false}});
  expect_instances(R"({"type":"string","pattern":"^a\"b$"})", {{R"("a\"b")", true}, {R"("a"b")", false}});
  expect_instances(R"({"type":"string","format":"date"})",
                   {{"\"2024-02-29\"", true}, {"\"2023-02-29\"", false}, {"\"2000-02-29\"", true}, {"\"1900-02-29\"", false},
                    {"\"2024-04-31\"", false}, {"\"2024-12-31\"", true}, {"\"2024-13-01\"", false}});
  expect_instances(R"({"type":"string","format":"date-time"})",
                   {{"\"2024-01-02T03:04:05Z\"", true}, {"\"2024-01-02T03:04:05.123+01:00\"", true},
                    {"\"2024-01-02 03:04:05Z\"", false}, {"\"2024-01-02T24:00:00Z\"", false}});
  expect_instances(R"({"type":"string","format":"ipv4"})", {{"\"192.168.0.1\"", true}, {"\"256.1.1.1\"", false}, {"\"01.1.1.1\"", false}});
  expect_instances(R"({"type":"string","format":"ipv6"})", {{"\"::1\"", true}, {"\"2001:db8::ff00:42:8329\"", true}, {"\"1:2\"", false}});
  expect_instances(R"({"type":"string","format":"uuid"})", {{"\"123e4567-e89b-12d3-a456-426614174000\"", true}, {"\"123e4567\"", false}});
  expect_instances(R"({"type":"string","format":"email"})", {{"\"a.b@c.io\"", true}, {"\"a@b\"", false}, {"\"@b.io\"", false}});
  expect_instances(R"({"type":"string","format":"uri"})", {{"\"https://x.io/a?b=1#c\"", true}, {"\"x y\"", false}, {"\"/rel\"", false}});
}

TEST(JsonSchema, NumericBounds) {
  expect_instances(R"({"type":"integer","minimum":-15,"maximum":137})",
                   {{"-15", true}, {"-16", false}, {"0", true}, {"137", true}, {"138", false}, {"99", true}, {"100", true}, {"-9", true}});
  expect_instances(R"({"type":"integer","exclusiveMinimum":0})", {{"0", false}, {"1", true}, {"123456789", true}, {"-1", false}});
  expect_instances(R"({"type":"integer","minimum":2.5,"exclusiveMaximum":10})", {{"2", false}, {"3", true}, {"9", true}, {"10", false}});
  expect_instances(R"({"type":"integer","minimum":5,"exclusiveMinimum":true})", {{"5", false}, {"6", true}});  // draft 4
  expect_instances(R"({"type":"number","minimum":0,"maximum":1})",
                   {{"0", true}, {"0.5", true}, {"1", true}, {"1.0", true}, {"1.01", false}, {"-0.1", false}, {"2", false}});
  expect_instances(R"({"type":"number","exclusiveMinimum":-2,"exclusiveMaximum":3})",
                   {{"-2", false}, {"-1.99", true}, {"-2.5", false}, {"2.999", true}, {"3", false}, {"3.0", false}});
  expect_instances(R"({"type":"number","multipleOf":0.01})", {{"1.25", true}, {"1.255", false}, {"-3", true}});
}

TEST(JsonSchema, RefsDefsAndRecursion) {
  const char* schema = R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
                           "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"],
                           "additionalProperties":false}},"$ref":"#/$defs/node"})";
  expect_instances(schema, {{R"({"v":1,"next":null})", true},
                            {R"({"v":1,"next":{"v":2,"next":{"v":3,"next":null}}})", true},
                            {R"({"v":1,"next":{"v":2}})", false}});
  expect_instances(R"({"definitions":{"a":{"type":"string"}},"properties":{"x":{"$ref":"#/definitions/a"}},"type":"object","additionalProperties":false})",
                   {{R"({"x":"s"})", true}, {R"({"x":1})", false}});
}

TEST(JsonSchema, CombinatorsMergeOrRefuse) {
  expect_instances(R"({"anyOf":[{"type":"string"},{"type":"integer"}]})", {{"\"a\"", true}, {"1", true}, {"null", false}});
  expect_instances(R"({"oneOf":[{"type":"string"},{"type":"integer"}]})", {{"\"a\"", true}, {"1", true}, {"1.5", false}});
  expect_instances(R"({"oneOf":[{"type":"object","properties":{"k":{"const":"a"},"x":{"type":"integer"}},"required":["k"],"additionalProperties":false},
                                {"type":"object","properties":{"k":{"const":"b"}},"required":["k"],"additionalProperties":false}]})",
                   {{R"({"k":"a","x":1})", true}, {R"({"k":"b"})", true}, {R"({"k":"b","x":1})", false}});
  expect_instances(R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
                                {"properties":{"b":{"type":"string"}},"required":["b"]}]})",
                   {{R"({"a":1,"b":"x"})", true}, {R"({"a":1})", false}});
  expect_instances(R"({"type":"object","properties":{"t":{"type":"string"}},"required":["t"],"additionalProperties":false,
                       "anyOf":[{"properties":{"t":{"const":"x"}}},{"properties":{"t":{"const":"y"}}}]})",
                   {{R"({"t":"x"})", true}, {R"({"t":"y"})", true}, {R"({"t":"z"})", false}});
}

// Intersections of string languages, built as DFAs: each was a compile error before.
TEST(JsonSchema, PatternBesideLengthOrFormat) {
  expect_instances(R"({"type":"string","pattern":"^[a-z]+$","minLength":2,"maxLength":3})",
                   {{"\"ab\"", true}, {"\"abc\"", true}, {"\"a\"", false}, {"\"abcd\"", false}, {"\"aB\"", false}});
  // Lengths count characters, not bytes: escapes and UTF-8 are one each.
  expect_instances(R"({"type":"string","pattern":"b","maxLength":2})",
                   {{"\"\\nb\"", true}, {"\"\u00e9b\"", true}, {"\"abc\"", false}, {"\"\\n\\t\"", false}});
  expect_instances(R"({"type":"string","format":"date","pattern":"^2024"})",
                   {{"\"2024-01-02\"", true}, {"\"2023-01-02\"", false}, {"\"2024-13-01\"", false}});
  expect_instances(R"({"enum":["ab","cd",1],"pattern":"^a"})", {{"\"ab\"", true}, {"\"cd\"", false}, {"1", true}});
}

TEST(JsonSchema, PatternProperties) {
  const char* schema = R"({"type":"object","properties":{"fa":{"type":"string"}},
      "patternProperties":{"^f":{"maxLength":1},"o$":{"type":"string"}},"additionalProperties":{"type":"integer"}})";
  expect_instances(schema, {{R"({"fa":"x"})", true},
                            {R"({"fa":"xy"})", false},  // a declared name takes the patterns it matches too
                            {R"({"foo":"x"})", true},
                            {R"({"foo":"xy"})", false},
                            {R"({"foo":1})", false},
                            {R"({"fz":1})", true},
                            {R"({"bo":"s"})", true},
                            {R"({"bo":1})", false},
                            {R"({"z":1})", true},
                            {R"({"z":"s"})", false}});
  expect_instances(R"({"type":"object","patternProperties":{"^x-":{}},"additionalProperties":false,"required":["x-a"]})",
                   {{R"({"x-a":1})", true}, {R"({"x-a":1,"x-b":[]})", true}, {R"({"x-a":1,"y":2})", false}, {R"({})", false}});
}

TEST(JsonSchema, AdditionalPropertiesBesideNonAsciiNames) {
  expect_instances("{\"properties\":{\"\u00e9\":{\"type\":\"integer\"}},\"additionalProperties\":{\"type\":\"string\"}}",
                   {{"{\"\u00e9\":1}", true}, {"{\"\u00e9\":\"x\"}", false}, {R"({"e":"x"})", true}, {"{\"\u00e9\u00e9\":\"x\"}", true}});
}

// const/enum compare as JSON Schema does: numbers by value, objects in any key order.
TEST(JsonSchema, ConstAndEnumMatchEqualValuesWrittenOtherwise) {
  expect_instances(R"({"const":1})", {{"1", true}, {"1.0", true}, {"1.00", true}, {"1.01", false}, {"10", false}, {"-1", false}});
  expect_instances(R"({"const":-2.0})", {{"-2", true}, {"-2.0", true}, {"-2.5", false}, {"2", false}});
  expect_instances(R"({"const":0})", {{"0", true}, {"-0", true}, {"0.0", true}, {"0.1", false}});
  expect_instances(R"({"const":0.5})", {{"0.5", true}, {"0.50", true}, {"0.05", false}, {"5", false}});
  expect_instances(R"({"enum":[{"a":1,"b":[2]}]})",
                   {{R"({"a":1,"b":[2]})", true}, {R"({"b":[2.0],"a":1})", true}, {R"({"a":1})", false}, {R"({"a":1,"b":[2],"c":3})", false}});
}

TEST(JsonSchema, RequiredNamesOutsidePropertiesKeepTheirOrder) {
  expect_instances(R"({"required":["z","a"]})", {{R"({"z":1,"a":2})", true}, {R"({"z":1})", false}});
}

// `not` of what can be complemented exactly, per JSON type.
TEST(JsonSchema, NotOfTypesValuesAndStringLanguages) {
  expect_instances(R"({"not":{"type":"null"}})", {{"null", false}, {"1", true}, {"\"a\"", true}, {"{}", true}, {"[]", true}, {"true", true}});
  expect_instances(R"({"not":{"pattern":"^a*$"}})", {{"\"aa\"", false}, {"\"\"", false}, {"\"ab\"", true}, {"1", false}});
  expect_instances(R"({"not":{"maxLength":2}})", {{"\"abc\"", true}, {"\"ab\"", false}, {"null", false}});
  expect_instances(R"({"type":"string","not":{"enum":["a","b"]}})", {{"\"a\"", false}, {"\"c\"", true}, {"\"ab\"", true}, {"1", false}});
  expect_instances(R"({"type":"integer","not":{"const":3}})", {{"3", false}, {"3.0", false}, {"4", true}, {"-3", true}, {"\"3\"", false}});
  expect_instances(R"({"type":"number","not":{"type":"integer"}})", {{"1.5", true}, {"2", false}, {"2.0", false}, {"2e0", false}});
  expect_instances(R"({"not":{"enum":[true,null]}})", {{"true", false}, {"null", false}, {"false", true}, {"0", true}});
  expect_instances(R"({"not":{}})", {{"null", false}, {"1", false}});
  // String keywords beside `not` narrow the strings it leaves.
  expect_instances(R"({"type":"string","minLength":2,"not":{"pattern":"^a"}})",
                   {{"\"bb\"", true}, {"\"b\"", false}, {"\"ab\"", false}, {"1", false}});
  expect_instances(R"({"maxLength":1,"not":{"type":"null"}})", {{"\"a\"", true}, {"\"ab\"", false}, {"2", true}, {"null", false}});
}

TEST(JsonSchema, HostnameFormat) {
  const std::string long_label(64, 'a');
  std::string long_name;
  for (int i = 0; i < 3; ++i) long_name += std::string(63, 'a') + ".";
  long_name += std::string(62, 'a');  // 254 characters
  expect_instances(R"({"type":"string","format":"hostname"})",
                   {{"\"example.com\"", true}, {"\"a-b.c1\"", true}, {"\"localhost\"", true}, {"\"-a.com\"", false},
                    {"\"a-.com\"", false}, {"\"a..com\"", false}, {"\"a_b.com\"", false}, {"\"xn--x.com\"", false}});
  auto g = testing::compile_spec(GrammarKind::kJsonSchema, R"({"type":"string","format":"hostname"})");
  ASSERT_TRUE(g.ok());
  EXPECT_FALSE(matches(*g, "\"" + long_label + ".com\""));
  EXPECT_FALSE(matches(*g, "\"" + long_name + "\""));
  EXPECT_TRUE(matches(*g, "\"" + long_name.substr(1) + "\""));
}

// oneOf branches where one requires a property the other cannot have are disjoint.
TEST(JsonSchema, OneOfDisjointByAForbiddenRequiredProperty) {
  expect_instances(R"({"oneOf":[{"type":"object","properties":{"src":{"type":"string"},"to":{"type":"string"}},"required":["src","to"],"additionalProperties":false},
                                {"type":"object","properties":{"replace":{"type":"string"},"with":{"type":"string"}},"required":["replace","with"],"additionalProperties":false}]})",
                   {{R"({"src":"a","to":"b"})", true}, {R"({"replace":"a","with":"b"})", true}, {R"({"src":"a","with":"b"})", false}});
}

// Length bounds in the thousands repeat a call of one character: inlined, they outgrew the
// 250 000-state budget (maxLength 2000 was refused).
TEST(JsonSchema, LongStringBounds) {
  auto g = testing::compile_spec(GrammarKind::kJsonSchema, R"({"type":"string","maxLength":70000})");
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  EXPECT_TRUE(matches(*g, "\"abc\\n\u00e9\""));
  EXPECT_TRUE(matches(*g, "\"" + std::string(70000, 'x') + "\""));
  EXPECT_FALSE(matches(*g, "\"" + std::string(70001, 'x') + "\""));
  expect_instances(R"({"type":"string","minLength":1100,"maxLength":1101})", {{"\"\"", false}});
  auto m = testing::compile_spec(GrammarKind::kJsonSchema, R"({"type":"string","minLength":1100,"maxLength":1101})");
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(matches(*m, "\"" + std::string(1099, 'x') + "\""));
  EXPECT_TRUE(matches(*m, "\"" + std::string(1100, 'x') + "\""));
  EXPECT_TRUE(matches(*m, "\"" + std::string(1101, 'x') + "\""));
  EXPECT_FALSE(matches(*m, "\"" + std::string(1102, 'x') + "\""));
}

// Long bounds are counted in chunks of 64 characters: every count in [min, max] is accepted and
// none outside, at and around the chunk edges, with escapes and multi-byte characters counted
// as one character each.
TEST(JsonSchema, LongStringBoundsAreExactAroundChunkEdges) {
  const auto text_of = [](int64_t n) {
    std::string body;
    for (int64_t i = 0; i < n; ++i) body += i == 0 ? "\u00e9" : i == 1 ? "\\n" : i % 97 == 5 ? "\\\"" : "x";
    return "\"" + body + "\"";
  };
  const std::pair<int64_t, int64_t> bounds[] = {{0, 1025}, {0, 1088}, {0, 1151}, {0, 1152}, {1025, 1025},
                                                {1280, 1343}, {1100, 1101}, {3000, 5000}, {1030, -1}, {2048, 4096}};
  for (const auto& [lo, hi] : bounds) {
    std::string schema = R"({"type":"string","minLength":)" + std::to_string(lo);
    if (hi >= 0) schema += R"(,"maxLength":)" + std::to_string(hi);
    schema += "}";
    auto g = testing::compile_spec(GrammarKind::kJsonSchema, schema);
    ASSERT_TRUE(g.ok()) << schema << ": " << g.status().to_string();
    std::vector<int64_t> counts = {0, 1, 63, 64, 65, 127, 128, 129, lo - 1, lo, lo + 1, lo + 63, lo + 64, lo + 65};
    if (hi >= 0) {
      for (int64_t d : {-129, -128, -127, -65, -64, -63, -1, 0, 1, 2, 64}) counts.push_back(hi + d);
    } else {
      counts.push_back(lo + 700);
    }
    for (int64_t n : counts) {
      if (n < 0) continue;
      const bool want = n >= lo && (hi < 0 || n <= hi);
      EXPECT_EQ(matches(*g, text_of(n)), want) << schema << ": " << n << " characters";
    }
  }
}

// Keys other than the declared names may start with any character: ASCII, non-ASCII, an
// escape (the non-ASCII or escaped first character and the rest of the key are one rule).
TEST(JsonSchema, OtherKeysStartWithAnyCharacter) {
  expect_instances(R"({"type":"object","properties":{"ab":{"type":"string"}},"additionalProperties":{"type":"integer"}})",
                   {{R"({"ab":"x"})", true}, {R"({"a":1})", true}, {R"({"abc":1})", true}, {"{\"\u00e9t\u00e9\":2}", true},
                    {R"({"\n":3})", true}, {R"({"\"q\"":4})", true}, {"{\"\u00e9\":\"x\"}", false},
                    {R"({"ab":1})", false}, {R"({"":5})", true}});
}

// allOf branches that differ only in keywords without an assertion (vendor extensions) merge.
TEST(JsonSchema, AllOfIgnoresUnknownKeywords) {
  expect_instances(R"({"allOf":[{"x-doc":"a","type":"string"},{"x-doc":"b","minLength":1}]})",
                   {{"\"a\"", true}, {"\"\"", false}, {"1", false}});
}

// One variant per set of trigger properties present: each was a compile error before.
TEST(JsonSchema, DependenciesAsVariantsPerTrigger) {
  const char* required = R"({"type":"object","properties":{"card":{"type":"string"},"address":{"type":"string"},"name":{}},
                             "dependentRequired":{"card":["address"]}})";
  expect_instances(required, {{R"({})", true}, {R"({"name":1})", true}, {R"({"card":"x","address":"y"})", true},
                              {R"({"card":"x"})", false}, {R"({"address":"y"})", true}, {R"({"card":"x","name":1})", false}});
  const char* draft7 = R"({"dependencies":{"a":["b"],"c":{"properties":{"d":{"type":"integer"}},"required":["d"]}}})";
  expect_instances(draft7, {{R"({"a":1,"b":2})", true}, {R"({"a":1})", false}, {R"({"c":1,"d":2})", true}, {R"({"c":1,"d":"x"})", false},
                            {R"({"c":1})", false}, {R"({"d":"x"})", true}, {"5", true}, {"\"s\"", true}});
  expect_instances(R"({"dependentSchemas":{"a":false}})", {{R"({"a":1})", false}, {R"({"b":1})", true}});
}

TEST(JsonSchema, NotIgnoresUnknownKeywords) {
  expect_instances(R"({"comment":"x","not":{"type":"string","comment":"y"}})", {{"\"a\"", false}, {"1", true}});
}

// oneOf over required lists: one variant per presence set that satisfies exactly one branch.
TEST(JsonSchema, OneOfOfRequiredLists) {
  const char* schema = R"({"type":"object","properties":{"a":{"type":"integer"},"b":{},"c":{}},
                           "oneOf":[{"required":["a"]},{"required":["b","c"]}]})";
  expect_instances(schema, {{R"({"a":1})", true}, {R"({"b":1,"c":2})", true}, {R"({"a":1,"b":2})", true},
                            {R"({"a":1,"b":1,"c":2})", false}, {R"({"b":1})", false}, {R"({})", false},
                            {R"({"a":"x"})", false}});
  // Without "type": "object" a non-object meets both branches, so oneOf refuses it.
  expect_instances(R"({"oneOf":[{"required":["x"]},{"required":["y"]}]})",
                   {{R"({"x":1})", true}, {R"({"y":1})", true}, {R"({"x":1,"y":1})", false}, {"1", false}, {R"({"z":1})", false}});
}

// A parent's "type": "object" makes branches told apart by a discriminator disjoint.
TEST(JsonSchema, OneOfDisjointnessSeesTheSiblings) {
  expect_instances(R"({"type":"object","oneOf":[{"properties":{"k":{"enum":["a"]}},"required":["k"]},
                                               {"properties":{"k":{"enum":["b"]}},"required":["k"]}]})",
                   {{R"({"k":"a"})", true}, {R"({"k":"b"})", true}, {R"({"k":"c"})", false}, {"1", false}});
}

TEST(JsonSchema, UnsupportedKeywordsAreErrorsNamingTheKeyword) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"not":{"type":"object","required":["a"]}})", "'not' over 'required'"},
      {R"({"type":"array","uniqueItems":true})", "'uniqueItems'"},
      {R"({"oneOf":[{"type":"string"},{"type":"string","minLength":2}]})", "oneOf: branches 0 and 1 may both match"},
      {R"({"type":"string","format":"idn-hostname"})", "format 'idn-hostname'"},
      {R"({"$ref":"other.json#/a"})", "only references inside the document"},
      {R"({"$ref":"#/$defs/missing"})", "does not resolve"},
      {R"({"$defs":{},"$ref":"#/$defs/%zz"})", "bad percent escape"},
      {R"({"items":[{}],"$ref":"#/items/99999999999999999999999"})", "does not resolve"},
      {R"({"items":[{}],"$ref":"#/items/-0"})", "does not resolve"},
      {R"({"type":"number","minimum":0.5})", "fractional lower bound"},
      {R"({"type":"integer","multipleOf":7})", "multipleOf 7"},
      {R"({"allOf":[{"type":"object","properties":{"a":{}},"additionalProperties":false},{"properties":{"b":{}}}]})",
       "additionalProperties"},
      {R"({"type":"object","properties":{"p":{"if":{"type":"string"},"then":{"minLength":1}}}})", "'if' is not supported at /properties/p"},
      {"{not json", "not valid JSON"},
  };
  for (const auto& [schema, what] : cases) {
    auto g = compile_spec(GrammarKind::kJsonSchema, schema);
    ASSERT_FALSE(g.ok()) << schema;
    EXPECT_NE(g.status().message().find(what), std::string::npos) << schema << ": " << g.status().message();
  }
}

TEST(JsonSchema, WhitespaceIsConfigurable) {
  GrammarSpec spec;
  spec.kind = GrammarKind::kJsonSchema;
  spec.text = R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}})";
  spec.json.compact = false;
  spec.json.max_whitespace = 2;
  auto flexible = compile_grammar(spec, testing::toy_vocab(), {});
  ASSERT_TRUE(flexible.ok());
  EXPECT_TRUE(matches(*flexible, "{ \"a\" : [ 1 ,\n2 ] }"));
  EXPECT_FALSE(matches(*flexible, "{   \"a\":[]}"));  // three spaces: over max_whitespace
  spec.json.compact = true;
  auto compact = compile_grammar(spec, testing::toy_vocab(), {});
  ASSERT_TRUE(compact.ok());
  EXPECT_TRUE(matches(*compact, "{\"a\":[1,2]}"));
  EXPECT_FALSE(matches(*compact, "{ \"a\":[1,2]}"));
}

}  // namespace
}  // namespace deepinfer::grammar
