// The protocols' structured-output fields become the request's Constraint, schemas verbatim
// (key order kept), and never change the prompt: deepseek-recipe renders only JSON mode.
#include <gtest/gtest.h>

#include <string>

#include "recipe/dsv4_encoding.h"
#include "recipe/protocol.h"

namespace deepinfer::recipe {
namespace {

const std::string kSchema = R"({"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}}})";

std::string chat(const std::string& extra) {
  return R"({"model":"DeepSeek-V4.1-Flash","thinking":{"type":"disabled"},"messages":[{"role":"user","content":"hi"}],)" + extra + "}";
}

TEST(OutputFormat, ChatJsonSchemaIsTheConstraintAndLeavesThePromptAlone) {
  auto with = convert_chat_completions(chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":)" + kSchema + "}}"));
  ASSERT_TRUE(with.ok()) << with.status().message();
  EXPECT_EQ(with->inference_options.constraint.kind, ConstraintKind::kJsonSchema);
  EXPECT_EQ(with->inference_options.constraint.text, kSchema);  // declared order: zeta before alpha
  auto without = convert_chat_completions(chat(R"("response_format":{"type":"text"})"));
  ASSERT_TRUE(without.ok());
  EXPECT_EQ(without->inference_options.constraint.kind, ConstraintKind::kNone);
  EXPECT_EQ(render_prompt(with->conversation, PromptEncoding::kDeepseekV41).text(),
            render_prompt(without->conversation, PromptEncoding::kDeepseekV41).text());
}

TEST(OutputFormat, ChatRegexAndJsonObject) {
  auto regex = convert_chat_completions(chat(R"("response_format":{"type":"regex","regex":"[a-z]+"})"));
  ASSERT_TRUE(regex.ok()) << regex.status().message();
  EXPECT_EQ(regex->inference_options.constraint.kind, ConstraintKind::kRegex);
  EXPECT_EQ(regex->inference_options.constraint.text, "[a-z]+");
  auto object = convert_chat_completions(
      R"({"model":"DeepSeek-V4.1-Flash","messages":[{"role":"user","content":"answer in json"}],"response_format":{"type":"json_object"}})");
  ASSERT_TRUE(object.ok()) << object.status().message();
  EXPECT_EQ(object->inference_options.constraint.text, R"({"type":"object"})");
  EXPECT_TRUE(object->parsing_options.parse_json_output);
}

TEST(OutputFormat, ResponsesTextFormat) {
  auto r = convert_responses(R"({"model":"DeepSeek-V4.1-Flash","input":"hi","text":{"format":{"type":"json_schema","name":"p","schema":)" +
                             kSchema + "}}}");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->inference_options.constraint.text, kSchema);
  auto missing = convert_responses(R"({"model":"DeepSeek-V4.1-Flash","input":"hi","text":{"format":{"type":"json_schema","name":"p"}}})");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("text.format.schema"), std::string::npos) << missing.status().message();
}

TEST(OutputFormat, MessagesOutputFormatEitherSpelling) {
  const std::string head = R"({"model":"DeepSeek-V4.1-Flash","max_tokens":10,"messages":[{"role":"user","content":"hi"}],)";
  auto ga = convert_messages(head + R"("output_config":{"format":{"type":"json_schema","schema":)" + kSchema + "}}}");
  ASSERT_TRUE(ga.ok()) << ga.status().message();
  EXPECT_EQ(ga->inference_options.constraint.text, kSchema);
  auto beta = convert_messages(head + R"("output_format":{"type":"json_schema","schema":)" + kSchema + "}}");
  ASSERT_TRUE(beta.ok()) << beta.status().message();
  EXPECT_EQ(beta->inference_options.constraint.text, kSchema);
  auto both = convert_messages(head + R"("output_format":{"type":"json_schema","schema":{}},"output_config":{"format":{"type":"json_schema","schema":{}}}})");
  ASSERT_FALSE(both.ok());
  auto wrong_type = convert_messages(head + R"("output_format":{"type":"regex","schema":{}}})");
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(wrong_type.status().message().find("output_format.type"), std::string::npos) << wrong_type.status().message();
}

}  // namespace
}  // namespace deepinfer::recipe
