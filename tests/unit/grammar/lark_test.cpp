#include "grammar/lark.h"

#include <gtest/gtest.h>

#include "grammar_test_util.h"

namespace deepinfer::grammar {
namespace {

using testing::compile_spec;
using testing::matches;

std::shared_ptr<const CompiledGrammar> lark(const std::string& text) {
  auto g = compile_spec(GrammarKind::kLark, text);
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return g.ok() ? *g : nullptr;
}

TEST(Lark, RulesTerminalsAndOperators) {
  const auto g = lark(R"(
// a list of assignments
start: assign (";" assign)* [";"]
assign: NAME "=" value
?value: NUMBER | "true"i | list
       | "'" /[a-z]*/ "'"
list: "[" (value ("," value)*)? "]"
NAME: ("a".."z" | "_")+
NUMBER: DIGIT+ ("." DIGIT~1..3)?
DIGIT: "0".."9"
)");
  ASSERT_NE(g, nullptr);
  for (const char* ok : {"x=1", "x=1;", "x=1;y_z=22.5", "a=TRUE", "a=True", "a=[]", "a=[1,[true],'abc']", "a=''"}) {
    EXPECT_TRUE(matches(g, ok)) << ok;
  }
  for (const char* bad : {"", "x=", "X=1", "x=1;;", "x=1.2345", "x=1.", "a=[1,]", "a='A'", "a=tru", "x = 1"}) {
    EXPECT_FALSE(matches(g, bad)) << bad;
  }
}

TEST(Lark, IgnoredTerminalsGoBetweenItemsOfRulesOnly) {
  const auto g = lark(R"(
start: pair ("," pair)*
pair: KEY ":" INT
KEY: /[a-z]+/
%import common.INT
%import common.WS
%ignore WS
)");
  ASSERT_NE(g, nullptr);
  for (const char* ok : {"a:1", " a : 1 ,\n b:22 ", "a:1,b:2,c:3", "\ta:1\t"}) EXPECT_TRUE(matches(g, ok)) << ok;
  // Inside a terminal nothing is skipped.
  for (const char* bad : {"a b:1", "a:1 2", "a:1,", ",a:1"}) EXPECT_FALSE(matches(g, bad)) << bad;
}

TEST(Lark, CommonTerminals) {
  const auto g = lark(R"(
start: SIGNED_NUMBER " " ESCAPED_STRING " " CNAME " " my_ws
my_ws: W
%import common (SIGNED_NUMBER, ESCAPED_STRING, CNAME)
%import common.WS_INLINE -> W
)");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(matches(g, "-1.5e3 \"a \\\" b\" _x9 \t "));
  EXPECT_TRUE(matches(g, "42 \"\" Abc  "));
  EXPECT_FALSE(matches(g, "1e \"\" a  "));
  EXPECT_FALSE(matches(g, "1 \"unterminated a  "));
  EXPECT_FALSE(matches(g, "1 \"\" 9a  "));
}

// Every terminal of Lark's common.lark that %import brings in parses, and a few match what
// Lark's own definitions do.
TEST(Lark, EveryCommonTerminalImports) {
  for (const char* name : {"DIGIT", "HEXDIGIT", "INT", "SIGNED_INT", "DECIMAL", "FLOAT", "SIGNED_FLOAT", "NUMBER",
                           "SIGNED_NUMBER", "ESCAPED_STRING", "LCASE_LETTER", "UCASE_LETTER", "LETTER", "WORD", "CNAME",
                           "WS_INLINE", "WS", "CR", "LF", "NEWLINE", "SH_COMMENT", "CPP_COMMENT"}) {
    auto g = compile_spec(GrammarKind::kLark, std::string("start: ") + name + "\n%import common." + name);
    ASSERT_TRUE(g.ok()) << name << ": " << g.status().to_string();
  }
  const std::pair<const char*, std::vector<std::pair<const char*, bool>>> cases[] = {
      {"FLOAT", {{"1.5", true}, {".5", true}, {"1e9", true}, {"1.", true}, {"1", false}, {"e9", false}}},
      {"HEXDIGIT", {{"f", true}, {"F", true}, {"g", false}}},
      {"NEWLINE", {{"\n", true}, {"\r\n\n", true}, {"\r", false}}},
      {"CPP_COMMENT", {{"// x", true}, {"// x\n", false}}},
  };
  for (const auto& [name, texts] : cases) {
    auto g = compile_spec(GrammarKind::kLark, std::string("start: ") + name + "\n%import common." + name);
    ASSERT_TRUE(g.ok());
    for (const auto& [text, ok] : texts) EXPECT_EQ(matches(*g, text), ok) << name << " " << text;
  }
}

TEST(Lark, EmbeddedJsonSchema) {
  const auto g = lark(R"(start: "<args>" %json {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"], "additionalProperties": false} "</args>")");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(matches(g, "<args>{\"n\":3}</args>"));
  EXPECT_FALSE(matches(g, "<args>{\"n\":\"3\"}</args>"));
  EXPECT_FALSE(matches(g, "<args>{}</args>"));
}

TEST(Lark, AliasesPrioritiesAndModifiersChangeNothingMatched) {
  const auto g = lark(R"(
?start: expr
!expr: expr2 "+" expr2 -> add
     | expr2
expr2: TERM
TERM.2: "x" | "y"
)");
  ASSERT_NE(g, nullptr);
  for (const char* ok : {"x", "x+y", "y+y"}) EXPECT_TRUE(matches(g, ok)) << ok;
  EXPECT_FALSE(matches(g, "x+"));
}

TEST(Lark, ErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* says;
  };
  const Case cases[] = {
      {"start: a\nb: \"x\"", "'a'"},  // a rule called and never defined
      {"start: \"x\"\n%import foo.BAR", "line 2"},
      {"start: \"x\"\n%import common.NOPE", "no 'NOPE'"},
      {"start: /a/i", "flags"},
      {"start: sep{x}", "templates"},
      {"start: \"x\"\n%declare Y", "unsupported directive"},
      {"start: (\"x\"", "missing ')'"},
      {"start: \"x\nb: \"y\"", "line 1: unterminated"},
      {"root: \"x\"", "no 'start' rule"},
      {"start: \"b\"..\"a\"", "out of order"},
      {"start: \"x\"\nstart: \"y\"", "defined twice"},
      {"start: \"x\" ~ 3..1", "out of order"},
  };
  for (const Case& c : cases) {
    auto g = parse_lark(c.text);
    ASSERT_FALSE(g.ok()) << c.text;
    EXPECT_NE(g.status().message().find(c.says), std::string::npos) << c.text << " -> " << g.status().message();
  }
}

// The servers' `grammar` fields take either dialect: GBNF defines with ::=, Lark with `name:`.
TEST(Lark, TheEbnfKindTellsTheDialectsApart) {
  EXPECT_TRUE(looks_like_lark("start: \"a\""));
  EXPECT_TRUE(looks_like_lark("// comment\n?start : x\nx: \"a\""));
  EXPECT_TRUE(looks_like_lark("%import common.WS\nstart: WS"));
  EXPECT_TRUE(looks_like_lark("TERM.2: \"a\"\nstart: TERM"));
  EXPECT_FALSE(looks_like_lark("root ::= \"a\""));
  EXPECT_FALSE(looks_like_lark("# comment\nroot ::= x\nx ::= \"a: b\""));
  EXPECT_FALSE(looks_like_lark(""));
  auto lark_via_ebnf = compile_spec(GrammarKind::kGbnf, "start: \"a\"+");
  ASSERT_TRUE(lark_via_ebnf.ok()) << lark_via_ebnf.status().to_string();
  EXPECT_TRUE(matches(*lark_via_ebnf, "aaa"));
  auto gbnf = compile_spec(GrammarKind::kGbnf, "root ::= \"a\"+");
  ASSERT_TRUE(gbnf.ok());
  EXPECT_TRUE(matches(*gbnf, "aa"));
}

}  // namespace
}  // namespace deepinfer::grammar
