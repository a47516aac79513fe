// Request fields: each reader's type and range rules, and the adapters' token limits and type
// errors (issue 14: limits ignored or wrapped, library internals in messages).
#include "recipe/request_fields.h"

#include <gtest/gtest.h>

#include <string>

#include "recipe/protocol.h"

namespace deepinfer::recipe {
namespace {

using Json = nlohmann::ordered_json;

// The 400 message of a rejected read or conversion, or "" (and a failure) when it was accepted.
template <typename T>
std::string rejection(const Result<T>& r) {
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message().find("json.exception"), std::string::npos) << r.status().message();
  return r.status().message();
}

Result<std::optional<int64_t>> read_int(const std::string& value, int64_t lo, int64_t hi) {
  const Json body = Json::parse("{\"k\": " + value + "}");
  return FieldReader(body).integer({"k", lo, hi});
}

TEST(RequestFields, IntegersAreJsonIntegersWithinTheirRange) {
  EXPECT_EQ(*read_int("5", 0, 10).value(), 5);
  EXPECT_FALSE(read_int("null", 0, 10).value().has_value());
  EXPECT_EQ(rejection(read_int("3.0", 0, 10)),
            "Invalid type for 'k': expected an integer, but got a decimal number instead.");
  EXPECT_EQ(rejection(read_int("\"3\"", 0, 10)), "Invalid type for 'k': expected an integer, but got a string instead.");
  EXPECT_EQ(rejection(read_int("true", 0, 10)), "Invalid type for 'k': expected an integer, but got a boolean instead.");
  EXPECT_EQ(rejection(read_int("11", 0, 10)),
            "Invalid 'k': integer above maximum value. Expected a value <= 10, but got 11 instead.");
  EXPECT_EQ(rejection(read_int("-1", 0, 10)),
            "Invalid 'k': integer below minimum value. Expected a value >= 0, but got -1 instead.");
  // Beyond int64: the parser keeps these as unsigned or as doubles; none may wrap into range.
  EXPECT_NE(rejection(read_int("9223372036854775808", 0, INT64_MAX)).find("9223372036854775808"), std::string::npos);
  EXPECT_NE(rejection(read_int("18446744073709551616", 0, INT64_MAX)).find("above maximum"), std::string::npos);
  EXPECT_NE(rejection(read_int("1e308", 0, INT64_MAX)).find("1e+308"), std::string::npos);
  EXPECT_NE(rejection(read_int("-1e308", 0, INT64_MAX)).find("below minimum"), std::string::npos);
  EXPECT_EQ(*read_int("9223372036854775807", 0, INT64_MAX).value(), INT64_MAX);
}

TEST(RequestFields, NumbersAndNestedPaths) {
  const Json body = Json::parse(R"({"t": 0.5, "s": "NaN", "o": {"inner": "Infinity", "p": 0}})");
  const FieldReader f(body);
  EXPECT_EQ(*f.number({"t", {0, 1}}).value(), 0.5);
  EXPECT_EQ(rejection(f.number({"s", {0, 1}})), "Invalid type for 's': expected a number, but got a string instead.");
  const FieldReader o(*f.object("o").value(), "o");
  EXPECT_EQ(rejection(o.number({"inner", {0, 1}})),
            "Invalid type for 'o.inner': expected a number, but got a string instead.");
  EXPECT_EQ(rejection(o.number({"p", {0, 1, true}})),
            "Invalid 'o.p': number below minimum value. Expected a value > 0, but got 0 instead.");
  EXPECT_EQ(rejection(o.number({"p", {0, 1, true}, "the reference's words"})), "the reference's words");
  EXPECT_EQ(rejection(f.object("t")), "Invalid type for 't': expected an object, but got a decimal number instead.");
  EXPECT_EQ(rejection(f.boolean("t")), "Invalid type for 't': expected a boolean, but got a decimal number instead.");
}

std::string chat(const std::string& fields) {
  return R"({"model": "DeepSeek-V4.1-Flash", "messages": [{"role": "user", "content": "hi"}])" + fields + "}";
}

TEST(ChatCompletions, MaxCompletionTokensIsTheLimit) {
  Result<ConversationRequest> r = convert_chat_completions(chat(R"(, "max_completion_tokens": 7)"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->inference_options.max_tokens, 7);
  r = convert_chat_completions(chat(R"(, "max_tokens": 9)"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->inference_options.max_tokens, 9);
  EXPECT_NE(rejection(convert_chat_completions(chat(R"(, "max_completion_tokens": -5)"))).find("max_completion_tokens"),
            std::string::npos);
  EXPECT_NE(rejection(convert_chat_completions(chat(R"(, "max_completion_tokens": 2.5)"))).find("max_completion_tokens"),
            std::string::npos);
  // OpenAI refuses both at once, equal or not.
  EXPECT_EQ(rejection(convert_chat_completions(chat(R"(, "max_tokens": 7, "max_completion_tokens": 7)"))),
            "Setting 'max_tokens' and 'max_completion_tokens' at the same time is not supported.");
}

TEST(ChatCompletions, WrongTypesNameTheFieldInOurWords) {
  const std::pair<const char*, const char*> cases[] = {
      {R"(, "stream": "yes")", "'stream'"},
      {R"(, "logprobs": 100)", "'logprobs'"},
      {R"(, "top_logprobs": 1.5)", "'top_logprobs'"},
      {R"(, "seed": "1")", "'seed'"},
      {R"(, "temperature": "x")", "'temperature'"},
      {R"(, "stream": true, "stream_options": {"include_usage": 1})", "'stream_options.include_usage'"},
      {R"(, "response_format": {"type": 5})", "'response_format.type'"},
      {R"(, "tools": [{"type": "function", "function": {"name": "f", "strict": "yes"}}])", "'tools[0].function.strict'"},
      {R"(, "stop": ["a", 5])", "'stop[1]'"},
  };
  for (const auto& [fields, named] : cases) {
    EXPECT_NE(rejection(convert_chat_completions(chat(fields))).find(named), std::string::npos) << fields;
  }
  // Inside messages: a prefix that is not a boolean, a tool_call_id that is not a string.
  EXPECT_NE(rejection(convert_chat_completions(
                          R"({"model": "DeepSeek-V4.1-Flash", "messages": [{"role": "assistant", "content": "a", "prefix": "x"}]})"))
                .find("'messages[0].prefix'"),
            std::string::npos);
  EXPECT_NE(rejection(convert_chat_completions(R"({"model": "DeepSeek-V4.1-Flash", "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
                 "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "content": "r", "tool_call_id": 5}]})"))
                .find("'messages[2].tool_call_id'"),
            std::string::npos);
}

std::string messages(const std::string& fields) {
  return R"({"model": "DeepSeek-V4.1-Flash", "messages": [{"role": "user", "content": "hi"}])" + fields + "}";
}

TEST(Messages, MaxTokensIsAnIntegerAndRequiredUnderAnthropicsRule) {
  for (const char* value : {R"("3")", "1e308", "3.0", "0", "-1", "18446744073709551616"}) {
    EXPECT_NE(rejection(convert_messages(messages(std::string(", \"max_tokens\": ") + value))).find("max_tokens"),
              std::string::npos)
        << value;
  }
  Result<ConversationRequest> r = convert_messages(messages(R"(, "max_tokens": 5)"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->inference_options.max_tokens, 5);
  // Beyond the bound it is lowered to the bound, as deepseek-recipe does: never wrapped.
  r = convert_messages(messages(R"(, "max_tokens": 9223372036854775807)"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->inference_options.max_tokens, ConversionOptions{}.thinking_max_tokens_upper_bound);
  // deepseek-recipe accepts a request without it; Anthropic's API does not.
  EXPECT_TRUE(convert_messages(messages("")).ok());
  ConversionOptions anthropic;
  anthropic.messages_require_max_tokens = true;
  EXPECT_EQ(rejection(convert_messages(messages(""), anthropic)), "max_tokens: Field required");
  EXPECT_NE(rejection(convert_messages(messages(R"(, "max_tokens": 5, "stream": "yes")"))).find("'stream'"),
            std::string::npos);
  EXPECT_NE(rejection(convert_messages(messages(R"(, "max_tokens": 5, "thinking": {"type": "enabled", "budget_tokens": "9"})")))
                .find("'thinking.budget_tokens'"),
            std::string::npos);
  EXPECT_NE(rejection(convert_messages(messages(R"(, "max_tokens": 5, "tool_choice": {"type": "auto", "disable_parallel_tool_use": 1})")))
                .find("'tool_choice.disable_parallel_tool_use'"),
            std::string::npos);
}

std::string responses(const std::string& fields) {
  return R"({"model": "DeepSeek-V4.1-Flash", "input": "hi")" + fields + "}";
}

TEST(Responses, MaxOutputTokensIsAnInteger) {
  Result<ConversationRequest> r = convert_responses(responses(R"(, "max_output_tokens": 7)"));
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->inference_options.max_tokens, 7);
  EXPECT_NE(rejection(convert_responses(responses(R"(, "max_output_tokens": 3.0)"))).find("'max_output_tokens'"),
            std::string::npos);
  EXPECT_NE(rejection(convert_responses(responses(R"(, "max_output_tokens": 1e308)"))).find("'max_output_tokens'"),
            std::string::npos);
  // deepseek-recipe words an integer's range error after Chat's field (tests/golden/recipe).
  EXPECT_EQ(rejection(convert_responses(responses(R"(, "max_output_tokens": 400000)"))),
            "Invalid max_tokens value, the valid range of max_tokens is [1, 393216]");
  EXPECT_NE(rejection(convert_responses(responses(R"(, "stream": 1)"))).find("'stream'"), std::string::npos);
  EXPECT_NE(rejection(convert_responses(responses(R"(, "top_logprobs": 100)"))).find("top_logprobs"), std::string::npos);
  EXPECT_NE(rejection(convert_responses(R"({"model": "DeepSeek-V4.1-Flash", "input": [{"type": "function_call", "call_id": 5}]})"))
                .find("'input[0].call_id'"),
            std::string::npos);
}

}  // namespace
}  // namespace deepinfer::recipe
