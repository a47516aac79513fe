// Failures: syntax errors name the line and column, render errors carry jinja2's message,
// and hostile templates (runaway recursion, huge loops) stop with an error instead of hanging.
#include <gtest/gtest.h>

#include <string>

#include "recipe/chat_template.h"

namespace deepinfer::recipe {
namespace {

std::string parse_error(const std::string& source) {
  auto tmpl = ChatTemplate::parse(source);
  EXPECT_FALSE(tmpl.ok()) << "parsed: " << source;
  return tmpl.ok() ? "" : tmpl.status().message();
}

std::string render_error(const std::string& source) {
  auto tmpl = ChatTemplate::parse(source);
  EXPECT_TRUE(tmpl.ok()) << tmpl.status().message();
  if (!tmpl.ok()) return "";
  auto out = tmpl->render(ChatTemplateInput{});
  EXPECT_FALSE(out.ok()) << source << " rendered " << *out;
  if (out.ok()) return "";
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidArgument);
  return out.status().message();
}

TEST(JinjaErrors, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(parse_error("line one\n  {{ 1 + }}"),
            "chat template syntax error at line 2, column 10: unexpected '}}'");
  EXPECT_EQ(parse_error("{% if x %}\nno end"),
            "chat template syntax error at line 2, column 7: unexpected end of template, expected 'elif' or 'else' or 'endif'");
  EXPECT_EQ(parse_error("ok\n\n   {% frobnicate %}"),
            "chat template syntax error at line 3, column 4: unknown tag 'frobnicate'");
  EXPECT_EQ(parse_error("{{ x|nosuchfilter }}"),
            "chat template syntax error at line 1, column 6: no filter named 'nosuchfilter'");
  EXPECT_EQ(parse_error("{{ x is nosuchtest }}"),
            "chat template syntax error at line 1, column 6: no test named 'nosuchtest'");
  EXPECT_EQ(parse_error("{{ 'unterminated }}"),
            "chat template syntax error at line 1, column 4: unterminated string");
  EXPECT_EQ(parse_error("{# never closed"), "chat template syntax error at line 1, column 1: missing end of comment tag");
  EXPECT_EQ(parse_error("{{ (1 }}"), "chat template syntax error at line 1, column 7: unexpected '}', expected ')'");
  EXPECT_EQ(parse_error("{{ 1 ] }}"), "chat template syntax error at line 1, column 6: unexpected ']'");
  EXPECT_EQ(parse_error("{% for x in %}{% endfor %}"),
            "chat template syntax error at line 1, column 13: unexpected '%}'");
}

TEST(JinjaErrors, RaiseException) {
  EXPECT_EQ(render_error("a{{ raise_exception('Only user and assistant roles are supported!') }}b"),
            "chat template error: Only user and assistant roles are supported!");
}

TEST(JinjaErrors, UndefinedUsedWhereJinja2Raises) {
  EXPECT_EQ(render_error("{{ missing.attr }}"), "chat template error: 'missing' is undefined");
  EXPECT_EQ(render_error("{% set d = {} %}{{ d.a.b }}"), "chat template error: 'dict object' has no attribute 'a'");
  EXPECT_EQ(render_error("{{ missing + 1 }}"), "chat template error: 'missing' is undefined");
  EXPECT_EQ(render_error("{{ missing() }}"), "chat template error: 'missing' is undefined");
  // Printing, iterating, testing and defaulting an undefined value are all fine.
  auto tmpl = ChatTemplate::parse("[{{ missing }}{% for x in missing %}x{% endfor %}{{ missing is defined }}"
                                  "{{ missing|default('d') }}{{ missing|length }}]");
  ASSERT_TRUE(tmpl.ok());
  auto out = tmpl->render(ChatTemplateInput{});
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(*out, "[Falsed0]");
}

TEST(JinjaErrors, TypeErrors) {
  EXPECT_EQ(render_error("{{ 1 + 'a' }}"), "chat template error: unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(render_error("{{ 1 // 0 }}"), "chat template error: integer division or modulo by zero");
  EXPECT_EQ(render_error("{% set x = 1 %}{% set x.a = 2 %}"),
            "chat template error: cannot assign attribute on non-namespace object");
}

TEST(JinjaErrors, FormatIndexPastAnyIntegerIsAnIndexError) {
  // Python: IndexError: Replacement index ... out of range. A 23-digit index overflowed
  // std::stoul and terminated the process (found by the jinja fuzzer).
  EXPECT_EQ(render_error("{{ '{99999999999999999999999}'.format(1) }}"),
            "chat template error: Replacement index 99999999999999999999999 out of range for positional args tuple");
  EXPECT_EQ(render_error("{{ '{1}'.format(1) }}"),
            "chat template error: Replacement index 1 out of range for positional args tuple");
  EXPECT_EQ(render_error("{{ '{0a}'.format(1) }}"), "chat template error: '0a'");
}

TEST(JinjaErrors, RunawayRecursionIsBounded) {
  EXPECT_EQ(render_error("{% macro r(k) %}{{ r(k + 1) }}{% endmacro %}{{ r(0) }}"),
            "chat template error: maximum recursion depth exceeded in macro 'r'");
  // Mutual recursion through call blocks is bounded the same way.
  EXPECT_NE(render_error("{% macro a() %}{% call a() %}x{% endcall %}{% endmacro %}{{ a() }}")
                .find("maximum recursion depth exceeded"),
            std::string::npos);
}

TEST(JinjaErrors, HugeLoopsAreRefused) {
  EXPECT_EQ(render_error("{% for i in range(1000000) %}{% endfor %}"),
            "chat template error: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  // Nested loops within the range limit still run into the render's iteration budget.
  EXPECT_NE(render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}")
                .find("iterations"),
            std::string::npos);
}

TEST(JinjaErrors, OutputSizeIsBounded) {
  EXPECT_NE(render_error("{% set s = 'x' * 1000 %}{% for i in range(100000) %}{% for j in range(10) %}{{ s }}"
                         "{% endfor %}{% endfor %}")
                .find("template output exceeds"),
            std::string::npos);
}

}  // namespace
}  // namespace deepinfer::recipe
