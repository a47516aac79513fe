// Structured output through the API: every protocol's format field and the server's own fields
// reach the engine as a constraint, and the answer follows it (sampled at temperature 1, so an
// unconstrained 135M model would not); conflicts and bad grammars are 400s naming the field.
#include <gtest/gtest.h>

#include <algorithm>

#include <regex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "api_test_server.h"

namespace deepinfer::server {
namespace {

using Json = nlohmann::ordered_json;

class StructuredOutputApi : public testing::ApiFixture {
 protected:
  static void SetUpTestSuite() { start(/*kv_cache_tokens=*/2048, /*threads=*/1); }
  static void TearDownTestSuite() { stop(); }

  static Json ok_json(const testing::RecordingWriter& out) {
    EXPECT_EQ(out.status_, 200) << out.body_;
    Json j = Json::parse(out.body_, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << out.body_;
    return j;
  }
  static std::string rejected(const testing::RecordingWriter& out) {
    EXPECT_EQ(out.status_, 400) << out.body_;
    const Json j = Json::parse(out.body_, nullptr, false);
    return j.contains("error") && j["error"].is_object() ? j["error"].value("message", "") : "";
  }
  static std::string chat_content(const testing::RecordingWriter& out) {
    const Json j = ok_json(out);
    if (!j.contains("choices")) return "";
    return j["choices"][0]["message"].value("content", "");
  }
};

const char* kPersonSchema =
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":12},"age":{"type":"integer","minimum":0,"maximum":150},)"
    R"("pets":{"type":"array","items":{"enum":["cat","dog"]},"maxItems":3}},"required":["name","age","pets"],"additionalProperties":false})";

// The answer is the schema's: the three keys and nothing else, with their types and bounds.
void expect_person(const std::string& text) {
  const Json j = Json::parse(text, nullptr, false);
  ASSERT_TRUE(j.is_object()) << text;
  EXPECT_EQ(j.size(), 3u) << text;
  ASSERT_TRUE(j.contains("name") && j["name"].is_string()) << text;
  // maxLength counts characters (code points), not bytes: a sampled name may be non-ASCII.
  const std::string name = j["name"].get<std::string>();
  const auto code_points = std::count_if(name.begin(), name.end(), [](char c) { return (c & 0xC0) != 0x80; });
  EXPECT_LE(code_points, 12) << text;
  ASSERT_TRUE(j.contains("age") && j["age"].is_number_integer()) << text;
  EXPECT_GE(j["age"].get<int64_t>(), 0);
  EXPECT_LE(j["age"].get<int64_t>(), 150);
  ASSERT_TRUE(j.contains("pets") && j["pets"].is_array()) << text;
  EXPECT_LE(j["pets"].size(), 3u);
  for (const Json& p : j["pets"]) EXPECT_TRUE(p == "cat" || p == "dog") << text;
}

std::string chat_body(const std::string& extra, int seed) {
  return R"({"model": "m", "temperature": 1, "seed": )" + std::to_string(seed) +
         R"(, "max_tokens": 120, "messages": [{"role": "user", "content": "Describe a person as JSON."}], )" + extra + "}";
}

TEST_F(StructuredOutputApi, ChatJsonSchemaIsFollowed) {
  for (int seed = 1; seed <= 3; ++seed) {
    const auto out = post("/v1/chat/completions",
                          chat_body(R"("response_format": {"type": "json_schema", "json_schema": {"name": "person", "strict": true, "schema": )" +
                                        std::string(kPersonSchema) + "}}",
                                    seed));
    expect_person(chat_content(out));
    EXPECT_EQ(ok_json(out)["choices"][0].value("finish_reason", ""), "stop") << out.body_;
  }
}

TEST_F(StructuredOutputApi, ChatRegexAndJsonObject) {
  const auto regex = post("/v1/chat/completions",
                          chat_body(R"("response_format": {"type": "regex", "regex": "[0-9]{3}-[0-9]{4}"})", 7));
  EXPECT_TRUE(std::regex_match(chat_content(regex), std::regex("[0-9]{3}-[0-9]{4}"))) << regex.body_;
  const auto object = post("/v1/chat/completions", chat_body(R"("response_format": {"type": "json_object"})", 8));
  const Json j = Json::parse(chat_content(object), nullptr, false);
  EXPECT_TRUE(j.is_object()) << object.body_;
}

TEST_F(StructuredOutputApi, VllmAndSglangFields) {
  const auto choice = post("/v1/completions", R"({"model": "m", "prompt": "The sky is", "temperature": 1, "seed": 3,
      "max_tokens": 10, "structured_outputs": {"choice": ["blue", "green", "on fire"]}})");
  const std::set<std::string> choices = {"blue", "green", "on fire"};
  EXPECT_TRUE(choices.contains(ok_json(choice)["choices"][0].value("text", ""))) << choice.body_;
  const auto grammar = post("/v1/completions", R"({"model": "m", "prompt": "Answer:", "temperature": 1, "seed": 4,
      "max_tokens": 10, "ebnf": "root ::= (\"yes\" | \"no\") \"!\""})");
  const std::string text = ok_json(grammar)["choices"][0].value("text", "");
  EXPECT_TRUE(text == "yes!" || text == "no!") << grammar.body_;
  const auto compact = post("/v1/chat/completions", chat_body(R"("structured_outputs": {"json": )" + std::string(kPersonSchema) +
                                                                  R"(, "disable_any_whitespace": true})", 5));
  const std::string person = chat_content(compact);
  expect_person(person);
  EXPECT_EQ(Json::parse(person, nullptr, false).dump(), person) << "no whitespace between JSON tokens";
  const auto completion_format = post("/v1/completions", R"({"model": "m", "prompt": "Code:", "temperature": 1, "seed": 6,
      "max_tokens": 10, "response_format": {"type": "regex", "regex": "[A-Z]{2}[0-9]"}})");
  EXPECT_TRUE(std::regex_match(ok_json(completion_format)["choices"][0].value("text", ""), std::regex("[A-Z]{2}[0-9]")))
      << completion_format.body_;
}

TEST_F(StructuredOutputApi, ResponsesAndMessagesFormats) {
  const auto responses = post("/v1/responses", R"({"model": "m", "temperature": 1, "max_output_tokens": 240,
      "input": "Describe a person.", "text": {"format": {"type": "json_schema", "name": "person", "schema": )" +
                                                   std::string(kPersonSchema) + "}}}");
  const Json r = ok_json(responses);
  std::string text;
  for (const Json& item : r.value("output", Json::array())) {
    if (item.value("type", "") != "message") continue;
    for (const Json& part : item["content"]) text += part.value("text", "");
  }
  expect_person(text);
  const auto messages = post("/v1/messages", R"({"model": "m", "max_tokens": 240, "temperature": 1,
      "messages": [{"role": "user", "content": "Describe a person."}],
      "output_config": {"format": {"type": "json_schema", "schema": )" + std::string(kPersonSchema) + "}}}");
  const Json m = ok_json(messages);
  ASSERT_TRUE(m.contains("content") && !m["content"].empty()) << messages.body_;
  expect_person(m["content"][0].value("text", ""));
}

TEST_F(StructuredOutputApi, ForcedCallOfSeveralToolsHasValidArguments) {
  const std::string tools = R"("tools": [
      {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
          "properties": {"city": {"type": "string", "maxLength": 20}, "unit": {"enum": ["C", "F"]}},
          "required": ["city", "unit"], "additionalProperties": false}}},
      {"type": "function", "function": {"name": "add", "parameters": {"type": "object",
          "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"$ref": "#/$defs/n"}}, "required": ["a", "b"],
          "additionalProperties": false, "$defs": {"n": {"type": "integer"}}}}}],
      "tool_choice": "required")";
  for (int seed = 1; seed <= 3; ++seed) {
    const auto out = post("/v1/chat/completions", chat_body(tools, seed));
    const Json j = ok_json(out);
    ASSERT_TRUE(j.contains("choices")) << out.body_;
    EXPECT_EQ(j["choices"][0].value("finish_reason", ""), "tool_calls") << out.body_;
    const Json& calls = j["choices"][0]["message"]["tool_calls"];
    ASSERT_EQ(calls.size(), 1u) << out.body_;
    const std::string name = calls[0]["function"].value("name", "");
    const Json args = Json::parse(calls[0]["function"].value("arguments", ""), nullptr, false);
    ASSERT_TRUE(args.is_object()) << out.body_;
    if (name == "get_weather") {
      EXPECT_TRUE(args.contains("city") && args["city"].is_string()) << out.body_;
      EXPECT_TRUE(args.value("unit", "") == "C" || args.value("unit", "") == "F") << out.body_;
      EXPECT_EQ(args.size(), 2u) << out.body_;
    } else {
      ASSERT_EQ(name, "add") << out.body_;
      EXPECT_TRUE(args.contains("a") && args["a"].is_number_integer()) << out.body_;
      EXPECT_TRUE(args.contains("b") && args["b"].is_number_integer()) << out.body_;
      EXPECT_EQ(args.size(), 2u) << out.body_;
    }
  }
}

TEST_F(StructuredOutputApi, BadFormatsAre400sNamingTheField) {
  const std::string schema = R"({"type": "object"})";
  EXPECT_NE(rejected(post("/v1/chat/completions",
                          chat_body(R"("response_format": {"type": "json_schema", "json_schema": {"schema": {}}})", 1)))
                .find("response_format.json_schema.name"),
            std::string::npos);
  EXPECT_NE(rejected(post("/v1/chat/completions",
                          chat_body(R"("response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": 3}})", 1)))
                .find("response_format.json_schema.schema"),
            std::string::npos);
  EXPECT_NE(rejected(post("/v1/chat/completions", chat_body(R"("response_format": {"type": "regex"})", 1)))
                .find("response_format.regex"),
            std::string::npos);
  const std::string both = rejected(post("/v1/chat/completions",
                                         chat_body(R"("response_format": {"type": "json_object"}, "structured_outputs": {"regex": "a"})", 1)));
  EXPECT_NE(both.find("'response_format' and 'structured_outputs.regex'"), std::string::npos) << both;
  const std::string two = rejected(post("/v1/completions", R"({"model": "m", "prompt": "x", "regex": "a", "guided_choice": ["a"]})"));
  EXPECT_NE(two.find("'regex' and 'guided_choice'"), std::string::npos) << two;
  const std::string unsupported = rejected(post("/v1/chat/completions",
                                                chat_body(R"("structured_outputs": {"json": {"not": {"required": ["a"]}}})", 1)));
  EXPECT_NE(unsupported.find("'not'"), std::string::npos) << unsupported;
  const std::string huge = rejected(post("/v1/completions", R"({"model": "m", "prompt": "x", "regex": "((a{1000}){1000}){1000}"})"));
  EXPECT_NE(huge.find("too large"), std::string::npos) << huge;
  EXPECT_NE(rejected(post("/v1/responses", R"({"model": "m", "input": "x", "text": {"format": {"type": "yaml"}}})")).find("yaml"),
            std::string::npos);
  EXPECT_EQ(engine_->stats().n_running + engine_->stats().n_waiting, 0) << "nothing was queued";
}

}  // namespace
}  // namespace deepinfer::server
