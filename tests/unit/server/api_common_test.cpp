// The API server's request reading and error shapes, without a model.
#include "server/api_common.h"

#include <gtest/gtest.h>

namespace deepinfer::server {
namespace {

HttpRequest post(std::string body, std::string content_type = "application/json") {
  HttpRequest r;
  r.method = "POST";
  r.path = "/v1/chat/completions";
  if (!content_type.empty()) r.headers.emplace_back("content-type", content_type);
  r.body = std::move(body);
  return r;
}

TEST(ApiErrors, OpenAiShapeCarriesMessageTypeParamAndCode) {
  Json j = Json::parse(error_json(ApiFlavor::kOpenAi, {404, "no such model", "model_not_found", "model"}));
  EXPECT_EQ(j["error"]["message"], "no such model");
  EXPECT_EQ(j["error"]["type"], "not_found_error");
  EXPECT_EQ(j["error"]["param"], "model");
  EXPECT_EQ(j["error"]["code"], "model_not_found");
  Json bare = Json::parse(error_json(ApiFlavor::kOpenAi, {400, "bad", "", ""}));
  EXPECT_TRUE(bare["error"]["param"].is_null());
  EXPECT_EQ(bare["error"]["type"], "invalid_request_error");
}

TEST(ApiErrors, AnthropicShapeNamesTheTypeByStatus) {
  for (auto [status, type] : std::vector<std::pair<int, std::string>>{{400, "invalid_request_error"},
                                                                      {401, "authentication_error"},
                                                                      {404, "not_found_error"},
                                                                      {413, "request_too_large"},
                                                                      {429, "rate_limit_error"},
                                                                      {500, "api_error"}}) {
    Json j = Json::parse(error_json(ApiFlavor::kAnthropic, {status, "m", "", ""}));
    EXPECT_EQ(j["type"], "error");
    EXPECT_EQ(j["error"]["type"], type) << status;
    EXPECT_EQ(j["error"]["message"], "m");
  }
}

TEST(ApiErrors, PathPicksTheFlavor) {
  EXPECT_EQ(flavor_of_path("/v1/messages"), ApiFlavor::kAnthropic);
  EXPECT_EQ(flavor_of_path("/v1/messages/count_tokens"), ApiFlavor::kAnthropic);
  EXPECT_EQ(flavor_of_path("/v1/chat/completions"), ApiFlavor::kOpenAi);
  EXPECT_EQ(flavor_of_path("/nowhere"), ApiFlavor::kOpenAi);
}

TEST(ApiErrors, ContextOverflowIsAClient400) {
  ApiError e = api_error_from(out_of_range("too long"));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(api_error_from(internal_error("x")).status, 500);
}

TEST(ApiBody, AcceptsJsonObjects) {
  auto j = parse_json_body(post(R"({"a": [1, {"b": "ü"}]})"));
  ASSERT_TRUE(j.ok()) << j.status().message();
  EXPECT_EQ((*j)["a"][1]["b"], "ü");
  EXPECT_TRUE(parse_json_body(post("{}", "application/json; charset=utf-8")).ok());
  EXPECT_TRUE(parse_json_body(post("{}", "")).ok());  // no Content-Type: read as JSON
}

TEST(ApiBody, RejectsWhatIsNotAJsonObject) {
  EXPECT_EQ(parse_json_body(post("{}", "text/plain")).status().code(), StatusCode::kUnimplemented);
  EXPECT_EQ(parse_json_body(post(R"({"a": )")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_json_body(post("[1, 2]")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parse_json_body(post("{\"a\": \"\xff\xfe\"}")).status().code(), StatusCode::kInvalidArgument);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  auto nested = parse_json_body(post(deep));
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("deeper"), std::string::npos);
  // Brackets inside strings do not count as nesting.
  EXPECT_TRUE(parse_json_body(post("{\"s\": \"" + std::string(1000, '[') + "\"}")).ok());
}

TEST(ApiSampling, ReadsTheExtraKnobs) {
  Json body = Json::parse(R"({"n": 3, "seed": 7, "logprobs": true, "top_logprobs": 5, "top_k": 40,
                              "min_p": 0.1, "repetition_penalty": 1.2, "logit_bias": {"17": -100}})");
  auto x = read_sampling_extras(body, /*chat_logprobs=*/true);
  ASSERT_TRUE(x.ok()) << x.status().message();
  GenerationRequest g;
  apply_sampling(*x, 0.5, std::nullopt, g);
  EXPECT_EQ(g.n, 3);
  EXPECT_EQ(g.sampling.seed, 7u);
  EXPECT_EQ(g.sampling.logprobs, 5);
  EXPECT_EQ(g.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(g.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(g.sampling.repetition_penalty, 1.2f);
  EXPECT_FLOAT_EQ(g.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(g.sampling.top_p, 1.0f);
  ASSERT_EQ(g.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(g.sampling.logit_bias[0].first, 17);
}

TEST(ApiSampling, LogprobsDifferBetweenChatAndCompletions) {
  auto chat = read_sampling_extras(Json::parse(R"({"logprobs": true})"), /*chat_logprobs=*/true);
  ASSERT_TRUE(chat.ok());
  EXPECT_EQ(chat->logprobs, 0);
  auto completions = read_sampling_extras(Json::parse(R"({"logprobs": 3})"), SamplingFields::kCompletions);
  ASSERT_TRUE(completions.ok());
  EXPECT_EQ(completions->logprobs, 3);
  EXPECT_EQ(read_sampling_extras(Json::parse("{}"), true)->logprobs, -1);
  // Responses and Messages have neither field, nor n: what a client sends there is not read.
  auto conversation = read_sampling_extras(Json::parse(R"({"logprobs": true, "n": "x"})"), /*chat_logprobs=*/false);
  ASSERT_TRUE(conversation.ok()) << conversation.status().message();
  EXPECT_EQ(conversation->logprobs, -1);
  EXPECT_EQ(conversation->n, 1);
}

TEST(ApiSampling, RejectsOutOfRangeValuesWithAMessage) {
  for (const char* body : {R"({"n": 0})", R"({"n": 1.5})", R"({"seed": -1})", R"({"top_logprobs": 3})",
                           R"({"logprobs": true, "top_logprobs": 21})", R"({"min_p": 2})",
                           R"({"presence_penalty": 3})", R"({"logit_bias": {"x": 1}})", R"({"min_tokens": -2})"}) {
    auto x = read_sampling_extras(Json::parse(body), /*chat_logprobs=*/true);
    EXPECT_FALSE(x.ok()) << body;
    if (!x.ok()) {
      EXPECT_FALSE(x.status().message().empty());
    }
  }
}

TEST(ApiBody, BoolFieldNeverThrowsOnAWrongType) {
  Json body = Json::parse(R"({"a": true, "b": "yes", "c": 1})");
  EXPECT_TRUE(bool_field(body, "a", false));
  EXPECT_FALSE(bool_field(body, "b", false));
  EXPECT_TRUE(bool_field(body, "c", true));
  EXPECT_TRUE(bool_field(body, "missing", true));
  EXPECT_FALSE(bool_field(Json::array({1}), "a", false));
}

TEST(ApiIds, CarryTheirPrefixAndDiffer) {
  const std::string a = random_id("chatcmpl-"), b = random_id("chatcmpl-");
  EXPECT_EQ(a.rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(a.size(), 9u + 24u);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace deepinfer::server

namespace deepinfer::server {
namespace {

TEST(ApiOutputShaper, PrefixGoesFirstAndPlainTextPassesThrough) {
  BuiltPrompt prompt;
  prompt.output_prefix = "<tool_call>\n{\"name\": \"";
  OutputShaper shaper(prompt);
  EXPECT_EQ(shaper.shape("f\", "), "<tool_call>\n{\"name\": \"f\", ");
  EXPECT_EQ(shaper.shape("}}"), "}}");  // no arguments object opened: nothing is watched
  EXPECT_FALSE(shaper.done());
}

TEST(ApiOutputShaper, ForcedCallEndsWhereItsArgumentsClose) {
  BuiltPrompt prompt;
  prompt.output_prefix = "<tool_call>\n{\"name\": \"f\", \"arguments\": ";
  prompt.output_closing = "}\n</tool_call>";
  OutputShaper shaper(prompt);
  std::string fed = shaper.shape("{\"city\": \"Pa{r}\\\"is");  // braces and an escaped quote inside the string
  EXPECT_FALSE(shaper.done());
  fed += shaper.shape("\", \"n\": [1, {\"x\": 2}]");
  EXPECT_FALSE(shaper.done());
  fed += shaper.shape("} and then more text");
  EXPECT_TRUE(shaper.done());
  EXPECT_EQ(fed, prompt.output_prefix + "{\"city\": \"Pa{r}\\\"is\", \"n\": [1, {\"x\": 2}]}}\n</tool_call>");
  EXPECT_EQ(shaper.shape("ignored"), "");
}

TEST(ApiOutputShaper, ForcedCallOfSeveralToolsClosesTheBlock) {
  BuiltPrompt prompt;
  prompt.output_prefix = "<tool_call>\n";
  prompt.output_closing = "\n</tool_call>";
  OutputShaper shaper(prompt);
  std::string fed = shaper.shape("{\"name\": \"g\", \"arguments\": {}");
  EXPECT_FALSE(shaper.done());
  fed += shaper.shape("}\n\n");
  EXPECT_TRUE(shaper.done());
  EXPECT_EQ(fed, "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>");
}

}  // namespace
}  // namespace deepinfer::server
