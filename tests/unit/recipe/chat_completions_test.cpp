// The Chat Completions and Messages adapters against deepseek-recipe 0.2.0
// (tests/golden/recipe/prompts.json): for every request, the same 400 body, or the same
// conversation and the same prompt.
#include <gtest/gtest.h>

#include <string>

#include "golden_json.h"
#include "recipe/protocol.h"

namespace deepinfer::recipe {
namespace {

using namespace golden;  // NOLINT

// Every request of `protocol` in the golden set: the reference's 400 body, or its conversation
// and prompt.
void expect_protocol_matches(const std::string& protocol,
                             Result<ConversationRequest> (*convert)(std::string_view,
                                                                    const ConversionOptions&)) {
  Json golden = load_golden();
  int total = 0, errors_exact = 0, rejected_unworded = 0, accepted_exact = 0;
  for (const Json& c : golden["cases"]) {
    if (c.value("protocol", "") != protocol) continue;
    ++total;
    const std::string body =
        c["request"].is_string() ? c["request"].get<std::string>() : c["request"].dump();
    Result<ConversationRequest> got = convert(body, ConversionOptions{});
    if (c.contains("error")) {
      if (got.ok()) {
        ADD_FAILURE() << "case " << c["id"] << " accepted; the reference rejects it: " << body;
        continue;
      }
      EXPECT_EQ(error_status(got.status()), c["error"]["status"].get<int>()) << "case " << c["id"];
      if (c["error"]["body"].is_null()) {
        ++rejected_unworded;  // a deserialization error: serde's wording is not reproduced
      } else if (error_body(got.status()) == c["error"]["body"].get<std::string>()) {
        ++errors_exact;
      } else {
        ADD_FAILURE() << "case " << c["id"]
                      << "\n  expected: " << c["error"]["body"].get<std::string>()
                      << "\n  got:      " << error_body(got.status());
      }
      continue;
    }
    if (!got.ok()) {
      ADD_FAILURE() << "case " << c["id"] << " rejected: " << got.status().message() << "\n  "
                    << body;
      continue;
    }
    const Conversation want = conversation_from_json(c["conversation"]);
    const std::string want_view = conversation_view(want).dump();
    const std::string got_view = conversation_view(got->conversation).dump();
    EXPECT_EQ(got_view, want_view) << "case " << c["id"];
    const PromptEncoding enc =
        c["encoding"] == "v41" ? PromptEncoding::kDeepseekV41 : PromptEncoding::kDeepseekV4;
    EXPECT_EQ(prompt_encoding(got->model_version), enc) << "case " << c["id"];
    const std::string prompt =
        render_prompt(got->conversation, prompt_encoding(got->model_version)).text();
    EXPECT_EQ(prompt, c["prompt"].get<std::string>()) << "case " << c["id"];
    if (got_view == want_view && prompt == c["prompt"].get<std::string>()) ++accepted_exact;
  }
  EXPECT_GE(total, 40);
  std::printf(
      "%s golden: %d requests; %d accepted and exact, %d errors with the exact body, "
      "%d malformed bodies rejected\n",
      protocol.c_str(), total, accepted_exact, errors_exact, rejected_unworded);
}

TEST(ChatCompletions, MatchesReferenceOnGoldenRequests) {
  expect_protocol_matches("chat", convert_chat_completions);
}

TEST(Responses, MatchesReferenceOnGoldenRequests) {
  expect_protocol_matches("responses", convert_responses);
}

TEST(Messages, MatchesReferenceOnGoldenRequests) {
  expect_protocol_matches("messages", convert_messages);
}

TEST(ChatCompletions, ParsingOptionsFollowTheRequest) {
  Result<ConversationRequest> r = convert_chat_completions(R"({"model":"DeepSeek-V4.1-Flash",
      "messages":[{"role":"user","content":"json please"}],"stop":["END"],
      "response_format":{"type":"json_object"},"thinking":{"type":"disabled"},
      "tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"required"})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const ParsingOptions& p = r->parsing_options;
  EXPECT_TRUE(p.parse_tool_calls);
  EXPECT_TRUE(p.starts_in_tool_calls);
  EXPECT_TRUE(p.parse_json_output);
  EXPECT_FALSE(p.thinking_initial_stage.has_value());
  EXPECT_EQ(p.stop_sequences, std::vector<std::string>{"END"});
  EXPECT_TRUE(render_prompt(r->conversation, PromptEncoding::kDeepseekV41).ends_in_tool_calls);
}

TEST(ChatCompletions, NotJsonIsA400) {
  Result<ConversationRequest> r = convert_chat_completions("{\"model\":");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(error_status(r.status()), 400);
  r = convert_chat_completions(
      R"({"model":"DeepSeek-V4.1-Flash","messages":[{"role":"user","content":5}]})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(error_status(r.status()), 400);
}

}  // namespace
}  // namespace deepinfer::recipe
