// The offline driver behind `deepinfer parse` (respond.h) against the golden event streams, the
// token-id entry of the output parser, and requests for a served model that is not DeepSeek.
#include "recipe/respond.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "recipe/token_output_parser.h"

namespace deepinfer::recipe {
namespace {

using Json = nlohmann::ordered_json;

Json load(const char* name) {
  std::ifstream in(std::string(DEEPINFER_TEST_DATA) + "/golden/recipe/" + name);
  EXPECT_TRUE(in.good()) << "missing tests/golden/recipe/" << name;
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

// The golden scripts count 3 output tokens for the output in one chunk (the Responses one
// feeds no chunk for an empty output).
RespondSettings golden_settings(const std::string& id, const std::string& output) {
  RespondSettings s;
  s.id = id;
  s.model = "model-x";
  s.stream = true;
  s.usage = {10, 4, output.empty() && id == "resp-1" ? 0 : 3};
  s.tool_call_id = [](size_t k) {
    return "call_" + std::string(k < 10 ? "0" : "") + std::to_string(k) + "_ID";
  };
  s.clock = [] { return int64_t{0}; };
  return s;
}

std::string sse(const Json& events) {
  std::string out;
  for (const Json& e : events) {
    out += "event: " + e[0].get<std::string>() + "\ndata: " + e[1].get<std::string>() + "\n\n";
  }
  return out;
}

TEST(Respond, MessagesAndResponsesStreamsMatchReference) {
  int n = 0;
  for (const auto& [file, protocol, id] :
       {std::tuple{"messages_responses.json", Protocol::kMessages, "msg-1"},
        std::tuple{"responses_responses.json", Protocol::kResponses, "resp-1"}}) {
    const Json golden = load(file);
    for (const Json& c : golden["cases"]) {
      if (c.contains("finish") && c["finish"] != "stop") continue;
      const std::string output = c["output"].get<std::string>();
      Result<std::string> got =
          respond(protocol, c["request"].dump(), output, golden_settings(id, output));
      ASSERT_TRUE(got.ok()) << got.status().message();
      ASSERT_EQ(*got, sse(c["events"])) << c["request"].dump() << "\n" << output;
      RespondSettings whole = golden_settings(id, output);
      whole.stream = false;
      ASSERT_EQ(*respond(protocol, c["request"].dump(), output, whole),
                c["body"].get<std::string>());
      ++n;
    }
  }
  EXPECT_GE(n, 400);
}

TEST(Respond, ChatStreamEndsWithDoneAndRejectsBadRequests) {
  const std::string req =
      R"({"model":"DeepSeek-V4.1-Flash","messages":[{"role":"user","content":"hi"}]})";
  RespondSettings s;
  s.stream = true;
  s.chunk_chars = 3;
  Result<std::string> got = respond(Protocol::kChat, req, "plan</think>Hello", s);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->rfind("data: {", 0), 0u);
  EXPECT_TRUE(got->ends_with("data: [DONE]\n\n"));
  EXPECT_NE(got->find(R"("reasoning_content":"pla")"), std::string::npos);
  Result<std::string> bad = respond(Protocol::kChat, R"({"model":"gpt-4","messages":[]})", "x", s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gpt-4"), std::string::npos);
  EXPECT_EQ(parse_protocol("responses"), Protocol::kResponses);
  EXPECT_FALSE(parse_protocol("completions").has_value());
}

// A detokenizer whose ids are bytes: it holds back an incomplete UTF-8 sequence, as
// IncrementalDecoder does.
struct ByteDecoder {
  std::string pending;
  std::string push(int32_t id) {
    pending += static_cast<char>(id);
    const unsigned char lead = static_cast<unsigned char>(pending[0]);
    const size_t need = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    if (pending.size() < need) return "";
    return std::exchange(pending, "");
  }
  std::string finish() { return std::exchange(pending, ""); }
};

TEST(TokenOutputParser, IdsGiveTheEventsOfTheText) {
  ParsingOptions o;
  o.thinking_initial_stage = ThinkingInitialStage::kReasoningStart;
  o.stop_sequences = {"STOP"};
  const std::string text = "日本 plan</think>Answer 😀 STOP ignored";
  OutputParser whole(o);
  ParsedOutput expected;
  accumulate(whole.feed(text), expected);
  accumulate(whole.finish(), expected);

  TokenOutputParser<ByteDecoder> parser(o, ByteDecoder{});
  ParsedOutput got;
  for (char c : text) accumulate(parser.feed(static_cast<unsigned char>(c)), got);
  accumulate(parser.finish(), got);
  EXPECT_EQ(got.reasoning, expected.reasoning);
  EXPECT_EQ(got.content, expected.content);
  EXPECT_EQ(got.content, "Answer 😀 ");
  EXPECT_EQ(parser.parser().stop_sequence(), "STOP");
  // Ids after the stop sequence are not read.
  EXPECT_EQ(parser.tokens(), static_cast<int64_t>(text.find("STOP") + 4));
}

// JSON mode: the output is over when the top-level value closes, so a server fed a token at a
// time stops there; the ids after it are not read.
TEST(TokenOutputParser, JsonModeStopsReadingAtTheEndOfTheValue) {
  ParsingOptions o;
  o.parse_json_output = true;
  const std::string text = "Here: {\"a\": [1, \"]}\"], \"b\": \"日本\"}\n\nand more {}";
  TokenOutputParser<ByteDecoder> parser(o, ByteDecoder{});
  ParsedOutput got;
  for (char c : text) accumulate(parser.feed(static_cast<unsigned char>(c)), got);
  accumulate(parser.finish(), got);
  EXPECT_TRUE(parser.parser().finished());
  EXPECT_EQ(got.content, " {\"a\": [1, \"]}\"], \"b\": \"日本\"}");
  EXPECT_EQ(parser.tokens(), static_cast<int64_t>(text.find("\n")));
}

TEST(ServedModel, ChatTemplateModelsParseTaggedToolCalls) {
  ConversionOptions options;
  options.model_versions.push_back({"smollm2", ModelVersion::kChatTemplate});
  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])";
  Result<ConversationRequest> req = convert_chat_completions(
      R"({"model":"smollm2","messages":[{"role":"user","content":"hi"}],)" + tools + "}", options);
  ASSERT_TRUE(req.ok()) << req.status().message();
  EXPECT_EQ(req->model_version, ModelVersion::kChatTemplate);
  EXPECT_EQ(req->parsing_options.tool_call_format, ToolCallFormat::kTaggedJson);
  EXPECT_TRUE(req->parsing_options.parse_tool_calls);
  EXPECT_FALSE(req->parsing_options.thinking_initial_stage.has_value());

  // DeepSeek names keep the DSML format and the thinking stage.
  Result<ConversationRequest> ds = convert_chat_completions(
      R"({"model":"DeepSeek-V4.1-Flash","messages":[{"role":"user","content":"hi"}],)" + tools +
          "}",
      options);
  ASSERT_TRUE(ds.ok());
  EXPECT_EQ(ds->parsing_options.tool_call_format, ToolCallFormat::kDsml);
  EXPECT_TRUE(ds->parsing_options.thinking_initial_stage.has_value());

  RespondSettings s;
  s.tool_call_id = [](size_t) { return std::string("call_x"); };
  // The request asks for thinking: a chat-template model has none, so it is switched off.
  const std::string request =
      R"({"model":"smollm2","thinking":{"type":"enabled"},"messages":[{"role":"user","content":)"
      R"("hi"}],)" +
      tools + "}";
  Result<std::string> body = respond(
      Protocol::kChat, request,
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>", s, options);
  ASSERT_TRUE(body.ok()) << body.status().message();
  const Json j = Json::parse(*body);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"], "{\"a\": 1}");
  EXPECT_FALSE(j["choices"][0]["message"].contains("reasoning_content"));
}

}  // namespace
}  // namespace deepinfer::recipe
