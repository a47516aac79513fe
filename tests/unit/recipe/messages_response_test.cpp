// Messages responses against deepseek-recipe 0.2.0 (tests/golden/recipe/messages_responses.json):
// for each model output, parsed under the options the Messages adapter derives from the request,
// the same SSE event sequence and the same complete message (tool call ids normalized).
#include "recipe/messages_response.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "recipe/protocol.h"

namespace deepinfer::recipe {
namespace {

using Json = nlohmann::ordered_json;

TEST(MessagesResponse, MatchesReference) {
  std::ifstream in(std::string(DEEPINFER_TEST_DATA) + "/golden/recipe/messages_responses.json");
  ASSERT_TRUE(in.good()) << "missing tests/golden/recipe/messages_responses.json";
  std::stringstream ss;
  ss << in.rdbuf();
  const Json golden = Json::parse(ss.str());
  ASSERT_GE(golden["cases"].size(), 100u);
  int streams = 0, bodies = 0, streamed_exact = 0;
  for (const Json& c : golden["cases"]) {
    Result<ConversationRequest> req = convert_messages(c["request"].dump());
    ASSERT_TRUE(req.ok()) << req.status().message();
    MessagesResponseSettings settings;
    settings.id = "msg-1";
    settings.model = "model-x";
    settings.thinking = req->conversation.thinking_mode;
    settings.tool_call_id = [](size_t k) {
      return "call_" + std::string(k < 10 ? "0" : "") + std::to_string(k) + "_ID";
    };
    MessagesWriter writer(settings);
    OutputParser parser(req->parsing_options);
    std::vector<MessagesEvent> events = writer.start({10, 4, 0});
    auto add = [&](const std::vector<MessagesEvent>& more) {
      events.insert(events.end(), more.begin(), more.end());
    };
    add(writer.events(parser.feed(c["output"].get<std::string>())));
    add(writer.events(parser.finish()));
    const Usage usage{10, 4, 3};
    add(writer.finish(BackendFinish::kStop, usage, parser.stop_sequence()));
    Json got = Json::array();
    for (const MessagesEvent& e : events) got.push_back({e.type, e.json});
    EXPECT_EQ(got, c["events"]) << c["request"].dump() << "\n" << c["output"].dump();
    const std::string body = writer.body(BackendFinish::kStop, usage, parser.stop_sequence());
    EXPECT_EQ(body, c["body"].get<std::string>()) << c["output"].dump();
    streams += got == c["events"];
    bodies += body == c["body"].get<std::string>();

    // Five characters at a time; every text chunk counts as one output token.
    MessagesWriter streamed_writer(settings);
    OutputParser streamed_parser(req->parsing_options);
    std::vector<MessagesEvent> streamed = streamed_writer.start({10, 4, 0});
    const std::string text = c["output"].get<std::string>();
    std::vector<size_t> starts;
    for (size_t i = 0; i < text.size(); ++i) {
      if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) starts.push_back(i);
    }
    int64_t chunks_fed = 0;
    for (size_t k = 0; k < starts.size() && !streamed_parser.stop_sequence(); k += 5) {
      const size_t end = k + 5 < starts.size() ? starts[k + 5] : text.size();
      auto more =
          streamed_writer.events(streamed_parser.feed(text.substr(starts[k], end - starts[k])));
      streamed.insert(streamed.end(), more.begin(), more.end());
      ++chunks_fed;
    }
    auto more = streamed_writer.events(streamed_parser.finish());
    streamed.insert(streamed.end(), more.begin(), more.end());
    more = streamed_writer.finish(BackendFinish::kStop, {10, 4, chunks_fed},
                                  streamed_parser.stop_sequence());
    streamed.insert(streamed.end(), more.begin(), more.end());
    Json got_streamed = Json::array();
    for (const MessagesEvent& e : streamed) got_streamed.push_back({e.type, e.json});
    EXPECT_EQ(got_streamed, c["streamed_events"]) << c["request"].dump() << "\n"
                                                  << c["output"].dump();
    streamed_exact += got_streamed == c["streamed_events"];
  }
  std::printf(
      "messages responses: %d/%zu event streams exact (%d/%zu fed five characters at a "
      "time), %d/%zu bodies exact\n",
      streams, golden["cases"].size(), streamed_exact, golden["cases"].size(), bodies,
      golden["cases"].size());
}

TEST(MessagesResponse, SseFraming) {
  MessagesEvent e{"ping", R"({"type":"ping"})"};
  EXPECT_EQ(e.sse(), "event: ping\ndata: {\"type\":\"ping\"}\n\n");
}

}  // namespace
}  // namespace deepinfer::recipe
