#include <gtest/gtest.h>

#include "grammar/regex.h"
#include "grammar_test_util.h"

namespace deepinfer::grammar {
namespace {

using testing::compile_spec;
using testing::matches;

struct Case {
  const char* regex;
  const char* text;
  bool match;
};

TEST(Regex, MatchesTheLanguageOfTheECMAScriptSubset) {
  const Case cases[] = {
      {"abc", "abc", true},          {"abc", "ab", false},          {"abc", "abcd", false},
      {"a|bc", "bc", true},          {"a|bc", "a", true},           {"a|bc", "ac", false},
      {"a*", "", true},              {"a*", "aaaa", true},          {"a+", "", false},
      {"ab?c", "ac", true},          {"ab?c", "abbc", false},       {"a{2,3}", "a", false},
      {"a{2,3}", "aa", true},        {"a{2,3}", "aaaa", false},     {"a{2}", "aa", true},
      {"a{2,}", "aaaaaaa", true},    {"a{,2}", "a{,2}", true},      {"(ab)+", "ababab", true},
      {"(?:ab)+c", "abc", true},     {"(?<x>a)b", "ab", true},      {"[a-c]+", "abcabc", true},
      {"[a-c]", "d", false},         {"[^a-c]", "d", true},         {"[^a-c]", "b", false},
      {"\\d{3}", "123", true},       {"\\d", "a", false},           {"\\w+", "a_Z9", true},
      {"\\s", " ", true},            {"\\S", " ", false},           {"\\D", "5", false},
      {"a.c", "abc", true},          {"a.c", "a\nc", false},        {"\\.", ".", true},
      {"\\.", "a", false},           {"\\u00e9", "\xC3\xA9", true}, {"\\u{1F600}", "\xF0\x9F\x98\x80", true},
      {"\\ud83d\\ude00", "\xF0\x9F\x98\x80", true},                {"[\\u00e0-\\u00ff]", "\xC3\xA9", true},
      {"\\x41", "A", true},          {"^abc$", "abc", true},        {"[.]", ".", true},
      {"[\\]]", "]", true},          {"[a\\-z]", "-", true},        {"[a\\-z]", "b", false},
      {"é+", "\xC3\xA9\xC3\xA9", true}, {".", "\xE2\x82\xAC", true}, {"[^a]", "\xE2\x82\xAC", true},
      {"a+?b", "aab", true},         {"[]", "", false},             {"x[^]", "x\n", true},
  };
  for (const Case& c : cases) {
    auto g = compile_spec(GrammarKind::kRegex, c.regex);
    ASSERT_TRUE(g.ok()) << c.regex << ": " << g.status().to_string();
    EXPECT_EQ(matches(*g, c.text), c.match) << "/" << c.regex << "/ on '" << c.text << "'";
  }
}

TEST(Regex, RefusesWhatItCannotExpressNamingTheConstruct) {
  const std::pair<const char*, const char*> cases[] = {
      {"(?=a)a", "lookaround"}, {"(a)\\1", "backreference"}, {"\\bword", "word boundary"},
      {"\\p{L}", "property"},   {"a^b", "anchor"},           {"a$b", "anchor"},
      {"(ab", "missing ')'"},   {"ab)", "unbalanced"},       {"[ab", "unterminated"},
      {"*a", "nothing to repeat"}, {"a{3,2}", "out of order"}, {"(?i)a", "flags"},
  };
  for (const auto& [regex, what] : cases) {
    auto g = compile_spec(GrammarKind::kRegex, regex);
    ASSERT_FALSE(g.ok()) << regex;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find(what), std::string::npos) << regex << ": " << g.status().message();
  }
}

TEST(Regex, SearchModeIsUnanchoredUnlessAnchorsSayOtherwise) {
  Grammar g;
  auto e = compile_regex(g, "^ab|cd$", RegexEncoding::kRaw, RegexMatch::kSearch);
  ASSERT_TRUE(e.ok());
  g.set_root(g.add_rule("root", *e));
  auto a = Automaton::compile(g, {});
  ASSERT_TRUE(a.ok());
  auto compiled = std::make_shared<CompiledGrammar>(*a, testing::toy_vocab(), MatcherLimits{});
  EXPECT_TRUE(matches(compiled, "abxx"));
  EXPECT_TRUE(matches(compiled, "xxcd"));
  EXPECT_FALSE(matches(compiled, "xab"));
  EXPECT_FALSE(matches(compiled, "cdx"));
}

// A '$' that ends the pattern inside groups anchors the alternatives it ends (it was refused):
// ^([0-9]+\.[0-9]+$|%V%) is a version to the end, or anything starting with %V%.
TEST(Regex, EndAnchorInsideAGroupThatEndsThePattern) {
  auto search = [](const char* pattern, std::initializer_list<std::pair<const char*, bool>> texts) {
    Grammar g;
    auto e = compile_regex(g, pattern, RegexEncoding::kRaw, RegexMatch::kSearch);
    ASSERT_TRUE(e.ok()) << pattern << ": " << e.status().to_string();
    g.set_root(g.add_rule("root", *e));
    auto a = Automaton::compile(g, {});
    ASSERT_TRUE(a.ok());
    auto compiled = std::make_shared<CompiledGrammar>(*a, testing::toy_vocab(), MatcherLimits{});
    for (const auto& [text, match] : texts) EXPECT_EQ(matches(compiled, text), match) << pattern << " on " << text;
  };
  search("^([0-9]+\\.[0-9]+$|%V%)", {{"1.2", true}, {"1.2x", false}, {"x1.2", false}, {"%V%", true}, {"%V%tail", true}, {"a%V%", false}});
  search("a(b|(c$))", {{"xab", true}, {"xabz", true}, {"xac", true}, {"xacz", false}});
  for (const char* refused : {"(a$)b", "(a$)*", "(a$|b)c"}) {
    auto g = compile_spec(GrammarKind::kRegex, refused);
    EXPECT_FALSE(g.ok()) << refused;
  }
}

TEST(Regex, CompileBudgetRefusesAnExplodingRepetition) {
  GrammarSpec spec;
  spec.kind = GrammarKind::kRegex;
  spec.text = "((a{1000}){1000}){1000}";
  CompileOptions options;
  options.budget.max_states = 20000;
  auto g = compile_grammar(spec, testing::toy_vocab(), options);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(g.status().message().find("states"), std::string::npos) << g.status().message();
}

}  // namespace
}  // namespace deepinfer::grammar
