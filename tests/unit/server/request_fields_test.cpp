// Request fields end to end through the API handlers (no sockets), on the default model with a
// 512-token context: issue 14's reproductions (limits wrapped or ignored, bad values truncated)
// and a property test that feeds every numeric field of every endpoint the boundary values and
// requires a 400 naming the field or a bounded, well-formed answer.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api_test_server.h"

namespace deepinfer::server {
namespace {

using Json = nlohmann::ordered_json;
using testing::RecordingWriter;

constexpr int64_t kContext = 512;

class RequestFields : public testing::ApiFixture {
 protected:
  // One engine thread: batches of one-token requests on a 135M model gain nothing from a
  // second, and a pool's spinning threads cost the most on a loaded machine (4.7 s of CPU for
  // the property test with one, 25 s with two, measured with ten other jobs on two cores).
  static void SetUpTestSuite() { start(kContext, /*threads=*/1); }
  static void TearDownTestSuite() { stop(); }

  // The 400's message (after checking the protocol's error shape), or a failure.
  static std::string rejected(const RecordingWriter& out, bool anthropic = false) {
    EXPECT_EQ(out.status_, 400) << out.body_;
    const Json j = Json::parse(out.body_, nullptr, false);
    if (anthropic) {
      EXPECT_EQ(j.value("type", ""), "error") << out.body_;
    }
    const std::string message = j.contains("error") && j["error"].is_object() ? j["error"].value("message", "") : "";
    EXPECT_EQ(message.find("json.exception"), std::string::npos) << message;
    return message;
  }
};

const std::string kChat = R"({"model": "m", "temperature": 0, "messages": [{"role": "user", "content": "Hi"}])";

// Signed overflow of prompt + max_tokens let this pass the context check and generate past the
// context until the client left.
TEST_F(RequestFields, MaxTokensNearInt64MaxIsAContextError) {
  const RecordingWriter out = post("/v1/completions", R"({"model": "m", "prompt": "Hi", "max_tokens": 9223372036854775807})",
                                   std::chrono::seconds(20));
  EXPECT_NE(rejected(out).find("maximum context length is 512 tokens"), std::string::npos) << out.body_;
  EXPECT_NE(out.body_.find("9223372036854775807 in the completion"), std::string::npos) << out.body_;
}

TEST_F(RequestFields, MaxCompletionTokensIsHonoured) {
  const RecordingWriter out = post("/v1/chat/completions", kChat + R"(, "ignore_eos": true, "max_completion_tokens": 2})");
  ASSERT_EQ(out.status_, 200) << out.body_;
  const Json j = Json::parse(out.body_);
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_NE(rejected(post("/v1/chat/completions", kChat + R"(, "max_completion_tokens": -5})")).find("max_completion_tokens"),
            std::string::npos);
}

TEST_F(RequestFields, MessagesNeedAnIntegerMaxTokens) {
  const std::string base = R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}])";
  EXPECT_EQ(rejected(post("/v1/messages", base + "}"), /*anthropic=*/true), "max_tokens: Field required");
  for (const char* value : {R"("3")", "1e308", "3.0"}) {
    EXPECT_NE(rejected(post("/v1/messages", base + ", \"max_tokens\": " + value + "}"), true).find("max_tokens"),
              std::string::npos)
        << value;
  }
  // count_tokens takes no max_tokens (Anthropic's shape).
  EXPECT_EQ(post("/v1/messages/count_tokens", base + "}").status_, 200);
}

TEST_F(RequestFields, ResponsesMaxOutputTokensIsAnInteger) {
  for (const char* value : {"3.0", "1e308"}) {
    EXPECT_NE(rejected(post("/v1/responses", std::string(R"({"model": "m", "input": "Hi", "max_output_tokens": )") + value + "}"))
                  .find("max_output_tokens"),
              std::string::npos)
        << value;
  }
}

TEST_F(RequestFields, OutOfRangeValuesAreRejectedNotTruncated) {
  // 4294967296 was cut to token 0; top_k 2^32 to 0 (no limit) and -5 to -1.
  EXPECT_NE(rejected(post("/v1/chat/completions", kChat + R"(, "max_tokens": 1, "logit_bias": {"4294967296": 100}})"))
                .find("logit_bias"),
            std::string::npos);
  EXPECT_NE(rejected(post("/v1/chat/completions", kChat + R"(, "max_tokens": 1, "logit_bias": {"049": 100}})")).find("logit_bias"),
            std::string::npos);
  EXPECT_NE(rejected(post("/v1/chat/completions", kChat + R"(, "max_tokens": 1, "logit_bias": {"49152": 100}})")).find("logit_bias"),
            std::string::npos);  // one past SmolLM2's vocabulary
  for (const char* top_k : {"4294967296", "-5"}) {
    EXPECT_NE(rejected(post("/v1/completions", std::string(R"({"model": "m", "prompt": "Hi", "max_tokens": 1, "top_k": )") + top_k + "}"))
                  .find("top_k"),
              std::string::npos);
  }
  EXPECT_NE(rejected(post("/v1/chat/completions", kChat + R"(, "max_tokens": 1, "logprobs": 100})")).find("logprobs"),
            std::string::npos);
  EXPECT_NE(rejected(post("/v1/chat/completions", kChat + R"(, "max_tokens": 1, "logprobs": true, "top_logprobs": 100})"))
                .find("top_logprobs"),
            std::string::npos);
  EXPECT_NE(rejected(post("/v1/completions", R"({"model": "m", "prompt": "Hi", "max_tokens": 1, "temperature": "x"})"))
                .find("temperature"),
            std::string::npos);
}

TEST_F(RequestFields, TokenizeChecksAddSpecialTokens) {
  EXPECT_NE(rejected(post("/tokenize", R"({"prompt": "Hi", "add_special_tokens": "no"})")).find("add_special_tokens"),
            std::string::npos);
  EXPECT_EQ(post("/tokenize", R"({"prompt": "Hi", "add_special_tokens": false})").status_, 200);
}

// ---- The property test ----

// One numeric field of one endpoint: `key` is set in `base` (a nested key as "parent.key").
// `limit` marks the endpoint's token limit, whose accepted value bounds the answer and whose
// too-large values are the context-length 400.
struct NumericField {
  std::string path;
  std::string base;
  std::string key;
  bool limit = false;
};

// Greedy answers to "Hi" under the chat template's default system prompt end after a few
// tokens, so a limit left at its default (the context's room) stays cheap too.
std::vector<NumericField> numeric_fields() {
  const std::string chat = kChat + R"(, "max_tokens": 1})";
  const std::string chat_unlimited = kChat + "}";
  const std::string completions = R"({"model": "m", "prompt": "Hi", "temperature": 0, "max_tokens": 1})";
  const std::string responses = R"({"model": "m", "input": "Hi", "temperature": 0, "max_output_tokens": 1})";
  const std::string messages = R"({"model": "m", "max_tokens": 1, "temperature": 0, "messages": [{"role": "user", "content": "Hi"}]})";
  std::vector<NumericField> fields = {
      {"/v1/chat/completions", chat, "max_tokens", true},
      {"/v1/chat/completions", chat_unlimited, "max_completion_tokens", true},
      {"/v1/chat/completions", chat, "logprobs"},  // a boolean: every number is a 400
      {"/v1/chat/completions", chat.substr(0, chat.size() - 1) + R"(, "logprobs": true})", "top_logprobs"},
      {"/v1/completions", completions, "max_tokens", true},
      {"/v1/completions", completions, "logprobs"},
      {"/v1/completions", completions, "best_of"},
      {"/v1/completions", R"({"model": "m", "prompt": [0], "max_tokens": 1})", "prompt.0"},
      {"/v1/responses", responses, "max_output_tokens", true},
      {"/v1/responses", responses, "top_logprobs"},
      {"/v1/responses", responses, "max_tool_calls"},
      {"/v1/messages", messages, "max_tokens", true},
      {"/v1/messages", messages.substr(0, messages.size() - 1) + R"(, "thinking": {"type": "enabled", "budget_tokens": 1024}})",
       "thinking.budget_tokens"},
      {"/v1/messages/count_tokens", messages, "max_tokens"},
      {"/detokenize", R"({"tokens": [0]})", "tokens.0"},
  };
  // The sampling fields every generating endpoint reads.
  for (const auto& [path, base] : std::vector<std::pair<std::string, std::string>>{
           {"/v1/chat/completions", chat}, {"/v1/completions", completions}, {"/v1/responses", responses}, {"/v1/messages", messages}}) {
    for (const char* key : {"temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
                            "repetition_penalty", "seed", "min_tokens", "logit_bias.5"}) {
      fields.push_back({path, base, key});
    }
    if (path == "/v1/chat/completions" || path == "/v1/completions") fields.push_back({path, base, "n"});
  }
  return fields;
}

// The boundary values: integers at the edges of int32, doubles, int64 and uint64; floats for
// integers; strings for numbers; null and other types.
const std::vector<std::string> kValues = {
    "0",   "-1",        "1",          "2147483648", "9007199254740992", "9223372036854775807", "18446744073709551616",
    "1e308", "-1e308",  "\"NaN\"",    "\"Infinity\"", "\"-Infinity\"", "3.0",                 "0.5",
    "\"3\"", "null",    "true",       "[]",         "{}"};

// `base` with the field at `key` set to `value` (a parent.key path descends into an object or
// an array).
Json with_field(const NumericField& field, const std::string& value) {
  Json body = Json::parse(field.base);
  const Json v = Json::parse(value);
  const size_t dot = field.key.find('.');
  if (dot == std::string::npos) {
    body[field.key] = v;
    return body;
  }
  Json& parent = body[field.key.substr(0, dot)];
  const std::string child = field.key.substr(dot + 1);
  if (parent.is_array()) {
    parent[std::stoul(child)] = v;
  } else {
    parent[child] = v;
  }
  return body;
}

// Why an answer is neither a 400 naming the field nor a bounded, well-formed result; "" if it is one.
std::string judge(const NumericField& field, const Json& body, const RecordingWriter& out) {
  const std::string name = field.key.substr(0, field.key.find('.'));
  const std::string leaf = field.key.substr(field.key.rfind('.') + 1);
  if (out.status_ == 400) {
    const Json j = Json::parse(out.body_, nullptr, false);
    const std::string message = j.is_object() && j.contains("error") ? j["error"].value("message", "") : "";
    if (message.find("json.exception") != std::string::npos) return "the library's words: " + message;
    if (message.find(name) != std::string::npos || message.find(leaf) != std::string::npos) return "";
    // A limit past the context; deepseek-recipe words max_output_tokens' range as max_tokens'.
    if (field.limit && (message.find("maximum context length") != std::string::npos ||
                        message.find("max_tokens") != std::string::npos)) {
      return "";
    }
    return "a 400 that does not name the field: " + message;
  }
  if (out.status_ != 200) return "status " + std::to_string(out.status_) + ": " + out.body_;
  const Json j = Json::parse(out.body_, nullptr, false);
  if (j.is_discarded()) return "a 200 whose body is not JSON";
  if (field.path == "/detokenize") return j.contains("prompt") && j["prompt"].is_string() ? "" : "no prompt";
  if (field.path == "/v1/messages/count_tokens") return j.value("input_tokens", 0) > 0 ? "" : "no input_tokens";
  // Bounded: within n times the limit asked for (the context's room when it is the default).
  const int64_t n = body.contains("n") && body["n"].is_number_integer() ? body["n"].get<int64_t>() : 1;
  int64_t limit = 1;
  if (field.limit) {
    const Json& v = body[field.key];
    limit = v.is_number_integer() ? v.get<int64_t>() : kContext;
  }
  int64_t generated = -1;
  if (j.contains("usage") && j["usage"].is_object()) {
    const Json& u = j["usage"];
    generated = u.value("completion_tokens", u.value("output_tokens", int64_t{-1}));
  }
  if (generated < 0) return "a 200 without usage: " + out.body_;
  if (generated > n * limit) return "generated " + std::to_string(generated) + " tokens, more than " + std::to_string(n * limit);
  if (j.contains("choices") && static_cast<int64_t>(j["choices"].size()) != n) return "not n choices";
  return "";
}

TEST_F(RequestFields, EveryNumericFieldTakesEveryBoundaryValue) {
  struct Case {
    const NumericField* field;
    Json body;
  };
  const std::vector<NumericField> fields = numeric_fields();
  std::vector<Case> cases;
  for (const NumericField& f : fields) {
    for (const std::string& v : kValues) cases.push_back({&f, with_field(f, v)});
  }
  // Sixteen at a time, which the engine batches.
  constexpr size_t kParallel = 16;
  int accepted = 0, rejected_400 = 0;
  for (size_t start = 0; start < cases.size(); start += kParallel) {
    std::vector<std::future<RecordingWriter>> answers;
    for (size_t i = start; i < std::min(cases.size(), start + kParallel); ++i) {
      answers.push_back(std::async(std::launch::async, [&, i] {
        return post(cases[i].field->path, cases[i].body.dump(), std::chrono::seconds(30));
      }));
    }
    for (size_t i = start; i < std::min(cases.size(), start + kParallel); ++i) {
      const RecordingWriter out = answers[i - start].get();
      const std::string why = judge(*cases[i].field, cases[i].body, out);
      EXPECT_EQ(why, "") << cases[i].field->path << " " << cases[i].body.dump();
      (out.status_ == 200 ? accepted : rejected_400)++;
    }
  }
  std::printf("%zu numeric fields x %zu values: %d answered, %d rejected with a 400 naming the field\n", fields.size(),
              kValues.size(), accepted, rejected_400);
}

}  // namespace
}  // namespace deepinfer::server
