// Bad templates: mutated real templates and pathological nesting parse or fail with a status,
// and render or fail with a status; nothing crashes or hangs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>

#include "recipe/chat_template.h"
#include "recipe/jinja/evaluator.h"
#include "recipe/jinja/lexer.h"
#include "recipe/jinja/parser.h"

namespace deepinfer::recipe {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

ChatTemplateInput sample_input() {
  ChatTemplateInput input;
  input.messages = Json::parse(R"([
    {"role":"system","content":"sys"},
    {"role":"user","content":"hi {{ there }}"},
    {"role":"assistant","content":"yo","tool_calls":[{"id":"abcdefghi","type":"function",
      "function":{"name":"f","arguments":{"a":1}}}]},
    {"role":"tool","tool_call_id":"abcdefghi","content":"42"},
    {"role":"user","content":"bye"}])");
  input.tools = Json::parse(R"([{"type":"function","function":{"name":"f","description":"d",
    "parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}])");
  return input;
}

Result<std::string> render(const std::string& source) {
  DI_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::parse(source));
  return tmpl.render(ChatTemplateInput{});
}

// The render fails with INVALID_ARGUMENT whose message holds `what`.
void expect_render_error(const std::string& source, const std::string& what) {
  auto out = render(source);
  ASSERT_FALSE(out.ok()) << source << " rendered " << *out;
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument) << source;
  EXPECT_NE(out.status().message().find(what), std::string::npos) << source << ": " << out.status().message();
}

void expect_render(const std::string& source, const std::string& expected) {
  auto out = render(source);
  ASSERT_TRUE(out.ok()) << source << ": " << out.status().message();
  EXPECT_EQ(*out, expected) << source;
}

TEST(JinjaRobustness, MutatedRealTemplatesNeverCrash) {
  const fs::path dir = fs::path(DEEPINFER_TEST_DATA) / "golden" / "templates";
  std::mt19937 rng(1234);
  const std::string alphabet = "{}%#-+()[]|.,:'\"~ \nifendforsetmacro";
  ChatTemplateInput input = sample_input();
  size_t parsed = 0, rendered = 0, total = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string original = ss.str();
    for (int round = 0; round < 60; ++round) {
      std::string s = original;
      int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !s.empty(); ++e) {
        size_t at = rng() % s.size();
        switch (rng() % 3) {
          case 0: s.erase(at, 1 + rng() % 8); break;
          case 1: s.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
          default: s[at] = alphabet[rng() % alphabet.size()]; break;
        }
      }
      ++total;
      auto tmpl = ChatTemplate::parse(s);
      if (!tmpl.ok()) {
        EXPECT_EQ(tmpl.status().code(), StatusCode::kInvalidArgument);
        continue;
      }
      ++parsed;
      auto out = tmpl->render_pieces(input);
      if (out.ok()) {
        ++rendered;
      } else {
        EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
      }
    }
  }
  EXPECT_GT(total, 300u);
  // Mutations should exercise every path: some parse errors, some render errors, some output.
  EXPECT_GT(parsed, total / 10);
  EXPECT_LT(parsed, total);
  EXPECT_GT(rendered, 0u);
}

TEST(JinjaRobustness, DeepNestingIsAnErrorNotAStackOverflow) {
  std::string parens = "{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}";
  auto a = ChatTemplate::parse(parens);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("nesting deeper than"), std::string::npos) << a.status().message();

  std::string nots = "{{ " + [] {
    std::string s;
    for (int k = 0; k < 100000; ++k) s += "not ";
    return s;
  }() + "x }}";
  EXPECT_FALSE(ChatTemplate::parse(nots).ok());

  std::string blocks;
  for (int k = 0; k < 50000; ++k) blocks += "{% if true %}";
  EXPECT_FALSE(ChatTemplate::parse(blocks).ok());

  // Moderate nesting, as real templates have, is fine.
  auto ok = ChatTemplate::parse("{{ " + std::string(50, '[') + "1" + std::string(50, ']') + " }}");
  EXPECT_TRUE(ok.ok()) << ok.status().message();
}

// Found by jinja_fuzz: |length and slicing counted a character at every byte that is not a
// UTF-8 continuation byte, iteration and indexing decoded lead bytes whatever followed, so on
// invalid UTF-8 (a template from a GGUF file may hold any bytes) s[-1] read past the list of
// characters. Now every operation counts a byte with the continuation bytes after it.
TEST(JinjaRobustness, InvalidUtf8IsCountedIndexedSlicedAndIteratedAlike) {
  auto tmpl = ChatTemplate::parse(
      "{% set s = '\xff\xff\xff" "ab\x80\xe9' %}{{ s|length }} {{ s|list|length }} [{{ s[-1] }}] [{{ s[4] }}] "
      "[{{ s[1:3] }}] {% for c in s %}<{{ c }}>{% endfor %}");
  ASSERT_TRUE(tmpl.ok()) << tmpl.status().message();
  auto out = tmpl->render(ChatTemplateInput{});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(*out, "6 6 [\xe9] [b\x80] [\xff\xff] <\xff><\xff><\xff><a><b\x80><\xe9>");
}

// Found by jinja_fuzz (2 ** 10 ** 10): integer arithmetic overflowed int64, which is undefined
// behaviour; Python's integers are unbounded, ours fail the render instead. `**` also stopped
// after 64 factors, so (-1) ** 65 came out as 1.
TEST(JinjaRobustness, IntegerOverflowIsAnError) {
  for (const char* source : {"{{ 9223372036854775807 + 1 }}", "{{ -9223372036854775807 - 2 }}",
                             "{{ 4611686018427387904 * 2 }}", "{{ 2 ** 63 }}", "{{ 2 ** 10 ** 10 }}",
                             "{{ -(-9223372036854775807 - 1) }}", "{{ (-9223372036854775807 - 1) // -1 }}"}) {
    expect_render_error(source, "integer overflow");
  }
  expect_render("{{ (-1) ** 65 }} {{ 3 ** 39 }} {{ 2 ** -1 }}", "-1 4052555153018976267 0.5");
  expect_render("{{ (-9223372036854775807 - 1) % -1 }} {{ (-9223372036854775807 - 1) % 3 }} {{ -7 // 2 }} {{ -7 % 2 }}",
                "0 1 -4 1");
}

// Slicing stepped with k += step, which overflows for a vast step and then indexed with the
// wrapped value.
TEST(JinjaRobustness, SliceWithAVastStep) {
  expect_render("{{ [1, 2, 3][1::9223372036854775807] }} {{ 'abc'[1::9223372036854775807] }} "
                "{{ [1, 2, 3][::-9223372036854775807 - 1] }} {{ [1, 2, 3, 4, 5][4:0:-3] }}",
                "[2] b [3] [5, 2]");
}

// range() counted its items in int64, which two far-apart bounds overflow.
TEST(JinjaRobustness, RangeWithVastBounds) {
  expect_render_error("{{ range(-9223372036854775807 - 1, 9223372036854775807)|length }}", "Range too big");
  expect_render("{{ range(0, 9223372036854775807, 4611686018427387904)|list }} "
                "{{ range(5, -9223372036854775807, -9223372036854775807)|list }}",
                "[0, 4611686018427387904] [5, -9223372036854775802]");
}

// |int converted floats beyond int64 (and NaN) with a cast, which is undefined behaviour.
TEST(JinjaRobustness, IntOfAFloatOutsideInt64) {
  expect_render_error("{{ 1e300|int }}", "integer overflow");
  expect_render_error("{{ '-1e19'|int }}", "integer overflow");
  expect_render("{{ ('nan'|float)|int }} {{ 'nan'|int(7) }} {{ (-1.9)|int }} {{ '2.5'|int }}", "0 7 -1 2");
}

// map(attribute=) read a numeric part with std::stoll, whose out_of_range exception escaped
// the renderer (it converts only its own errors).
TEST(JinjaRobustness, AttributeIndexPastInt64) {
  expect_render("{{ [[1, 2]]|map(attribute='99999999999999999999')|list|length }} "
                "{{ [[1, 2]]|map(attribute='1')|list }}",
                "1 [2]");
}

// Repetition, concatenation and indentation built values of any size: a template could ask
// for more memory than there is (or throw length_error from a negative width).
TEST(JinjaRobustness, ValueSizesAreBounded) {
  expect_render_error("{{ ('x' * 67108865)|length }}", "template string exceeds");
  expect_render_error("{{ ('ab' * 9223372036854775807)|length }}", "template string exceeds");
  expect_render_error("{% set a = 'x' * 33554432 %}{{ (a ~ a ~ 'y')|length }}", "template string exceeds");
  expect_render_error("{% set a = 'x' * 33554432 %}{{ (a + a + 'y')|length }}", "template string exceeds");
  expect_render_error("{{ ([0] * 1048577)|length }}", "template list exceeds");
  expect_render_error("{{ 'a\nb'|indent(9223372036854775807) }}", "template string exceeds");
  expect_render_error("{{ [1]|tojson(indent=9223372036854775807) }}", "template string exceeds");
  expect_render("{{ ('x' * 67108864)|length }} {{ 'a\nb'|indent(-3) }} {{ 'ab' * -2 }}|{{ [1] * 0 }}",
                "67108864 a\nb |[]");
}

// Found by jinja_fuzz (LeakSanitizer): a namespace given an attribute that holds the namespace
// itself is a cycle of shared pointers, which outlived the render: every such render leaked.
TEST(JinjaRobustness, ANamespaceHoldingItselfIsFreedAfterTheRender) {
  auto lexed = jinja::lex("{% set ns.me = ns %}{% set ns.d = {'k': [ns]} %}{{ ns.me.me.d['k'][0].me is defined }}");
  ASSERT_TRUE(lexed.ok()) << lexed.status().message();
  auto body = jinja::parse(*lexed);
  ASSERT_TRUE(body.ok()) << body.status().message();
  std::weak_ptr<jinja::Dict> watched;
  {
    jinja::Value ns = jinja::Value::new_namespace();
    watched = ns.dict;
    jinja::Evaluator evaluator(jinja::RenderLimits{}, jinja::Clock{});
    EXPECT_EQ(evaluator.render(*body, {{"ns", ns}}).str, "True");
  }
  EXPECT_TRUE(watched.expired());
}

}  // namespace
}  // namespace deepinfer::recipe
