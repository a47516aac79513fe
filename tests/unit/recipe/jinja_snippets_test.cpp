// One construct per case (filters, tests, operators, loops, macros, whitespace control, value
// printing), each rendered by transformers' jinja2 environment into
// tests/golden/templates/snippets.json by tools/golden/make_template_golden.py.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "recipe/chat_template.h"

namespace deepinfer::recipe {
namespace {

using Json = nlohmann::ordered_json;

Json load_snippets() {
  std::ifstream in(std::string(DEEPINFER_TEST_DATA) + "/golden/templates/snippets.json", std::ios::binary);
  EXPECT_TRUE(in.good()) << "missing tests/golden/templates/snippets.json";
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

TEST(JinjaSnippets, MatchJinja2) {
  Json golden = load_snippets();
  ASSERT_GE(golden["cases"].size(), 40u);
  ChatTemplateInput input;
  input.extra = golden["variables"];
  input.now = std::chrono::system_clock::from_time_t(golden["now_unix"].get<int64_t>());
  for (const Json& c : golden["cases"]) {
    const std::string source = c["template"].get<std::string>();
    auto tmpl = ChatTemplate::parse(source);
    ASSERT_TRUE(tmpl.ok()) << source << "\n" << tmpl.status().message();
    auto out = tmpl->render(input);
    if (c.contains("error")) {
      ASSERT_FALSE(out.ok()) << source << " rendered " << *out << " but jinja2 raised " << c["error"];
      const std::string error = c["error"].get<std::string>();
      // Python exception type names (TypeError, RecursionError) only say that it failed.
      if (error.find(' ') != std::string::npos) {
        EXPECT_NE(out.status().message().find(error), std::string::npos) << source << ": " << out.status().message();
      }
    } else {
      ASSERT_TRUE(out.ok()) << source << "\n" << out.status().message();
      EXPECT_EQ(*out, c["expected"].get<std::string>()) << source;
    }
  }
}

}  // namespace
}  // namespace deepinfer::recipe
