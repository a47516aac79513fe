// Bad templates: mutated real templates and pathological nesting parse or fail with a status,
// and render or fail with a status; nothing crashes or hangs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "recipe/chat_template.h"

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

}  // namespace
}  // namespace deepinfer::recipe
