// A backend failure reaches the client as an error it can act on: a 500 in the protocol's shape
// before any byte of the answer, the protocol's error event once a stream has started, and the
// server goes on answering. Needs the default model in the cache.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "api_test_server.h"
#include "engine/create_engine.h"
#include "sync_hook_backend.h"
#include "model/catalog.h"
#include "server/api_prompt.h"
#include "server/api_server.h"
#include "tokenizer/tokenizer_loading.h"

namespace deepinfer::server {
namespace {

using server::testing::RecordingWriter;

class EngineFailure : public ::testing::Test {
 protected:
  // An engine whose sync number `fail_at` fails, and the API in front of it.
  void start(int fail_at) {
    const std::string path = cached_model_path(*find_known_model(kDefaultModelName));
    if (!std::filesystem::exists(path)) GTEST_SKIP() << "the default model is not in the cache: " << path;
    EngineConfig config;
    config.model_path = path;
    config.threads = 2;
    auto tokenizer = std::move(load_tokenizer(path, TokenizerPresence::kRequired)).value();
    engine_ = std::move(create_engine(config, tokenizer, [fail_at](std::unique_ptr<backend::Backend> inner) {
                          return std::unique_ptr<backend::Backend>(new deepinfer::testing::FailingBackend(std::move(inner), fail_at));
                        })).value();
    auto prompts = PromptBuilder::create(tokenizer);
    ApiConfig api;
    api.served_model_name = "m";
    server_ = std::make_unique<ApiServer>(api, *engine_, std::move(prompts).value());
  }

  RecordingWriter post(const std::string& path, const std::string& body) {
    HttpRequest request;
    request.method = "POST";
    request.target = request.path = path;
    request.headers = {{"content-type", "application/json"}};
    request.body = body;
    RecordingWriter out;
    for (const Route& r : server_->routes()) {
      if (r.method == "POST" && r.path == path) r.handler(request, out);
    }
    return out;
  }

  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ApiServer> server_;
};

const char* kChat = R"({"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8,
                        "temperature": 0, "stream": STREAM})";

std::string chat(bool stream) {
  std::string s = kChat;
  s.replace(s.find("STREAM"), 6, stream ? "true" : "false");
  return s;
}

TEST_F(EngineFailure, AnswersFiveHundredAndKeepsServing) {
  start(/*fail_at=*/1);
  RecordingWriter failed = post("/v1/chat/completions", chat(false));
  EXPECT_EQ(failed.status_, 500);
  const auto error = nlohmann::json::parse(failed.body_);
  EXPECT_EQ(error["error"]["type"], "server_error");
  EXPECT_NE(error["error"]["message"].get<std::string>().find("injected: out of device memory"), std::string::npos);
  RecordingWriter next = post("/v1/chat/completions", chat(false));
  EXPECT_EQ(next.status_, 200) << next.body_;
  EXPECT_EQ(nlohmann::json::parse(next.body_)["choices"][0]["finish_reason"], "length");
}

TEST_F(EngineFailure, AnthropicShapeForMessages) {
  start(1);
  RecordingWriter failed =
      post("/v1/messages", R"({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]})");
  EXPECT_EQ(failed.status_, 500);
  const auto error = nlohmann::json::parse(failed.body_);
  EXPECT_EQ(error["type"], "error");
  EXPECT_EQ(error["error"]["type"], "api_error");
}

TEST_F(EngineFailure, MidStreamTheProtocolsErrorEventEndsTheStream) {
  start(/*fail_at=*/4);  // a few tokens are out before the pass fails
  RecordingWriter out = post("/v1/chat/completions", chat(true));
  EXPECT_TRUE(out.streaming_);
  EXPECT_TRUE(out.finished_);
  EXPECT_EQ(out.status_, 200);
  const size_t at = out.body_.rfind("data: {\"error\"");
  ASSERT_NE(at, std::string::npos) << out.body_;
  EXPECT_NE(out.body_.find("injected", at), std::string::npos);
  EXPECT_EQ(out.body_.find("[DONE]"), std::string::npos);  // the answer did not complete
}

}  // namespace
}  // namespace deepinfer::server
