// The API server over the default model, driven without sockets: a request goes straight to
// its route's handler and a RecordingWriter keeps the answer. For server tests that need a
// real tokenizer and chat template but no HTTP; the test is skipped when the model is not in
// the cache.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>

#include "engine/create_engine.h"
#include "model/catalog.h"
#include "server/api_prompt.h"
#include "server/api_server.h"
#include "tokenizer/tokenizer_loading.h"

namespace deepinfer::server::testing {

// What a handler wrote. The client "leaves" once `patience` has passed, so a handler that would
// generate without end (the bug a test looks for) is cancelled and the test fails, not hangs.
class RecordingWriter final : public ResponseWriter {
 public:
  explicit RecordingWriter(std::chrono::seconds patience = std::chrono::seconds(60))
      : deadline_(std::chrono::steady_clock::now() + patience) {}
  void send(int status, std::string_view, std::string body, const Headers&) override {
    status_ = status;
    body_ = std::move(body);
  }
  bool start_stream(int status, std::string_view, const Headers&) override {
    status_ = status;
    streaming_ = true;
    return true;
  }
  bool write(std::string_view data) override {
    body_ += data;
    return true;
  }
  void finish() override { finished_ = true; }
  bool client_gone() override { return std::chrono::steady_clock::now() > deadline_; }

  int status_ = 0;
  bool streaming_ = false;
  bool finished_ = false;
  std::string body_;

 private:
  std::chrono::steady_clock::time_point deadline_;
};

// The served model is named "m". One engine serves every test of a suite (loading the model is
// most of a short test's time): a suite calls start() from SetUpTestSuite and stop() from
// TearDownTestSuite. `kv_cache_tokens` bounds the context (max_context is the smaller of the
// model's and the cache's), which keeps a runaway generation short.
class ApiFixture : public ::testing::Test {
 protected:
  static void start(int64_t kv_cache_tokens, int32_t threads = 2) {
    const std::string path = cached_model_path(*find_known_model(kDefaultModelName));
    if (!std::filesystem::exists(path)) return;  // each test skips (see SetUp)
    EngineConfig config;
    config.model_path = path;
    config.threads = threads;
    config.kv_cache_tokens = kv_cache_tokens;
    auto tokenizer = std::move(load_tokenizer(path, TokenizerPresence::kRequired)).value();
    engine_ = std::move(create_engine(config, tokenizer)).value();
    ApiConfig api;
    api.served_model_name = "m";
    server_ = std::make_unique<ApiServer>(api, *engine_, std::move(PromptBuilder::create(tokenizer)).value());
    routes_ = server_->routes();
  }
  static void stop() {
    routes_.clear();
    server_.reset();
    engine_.reset();
  }

  void SetUp() override {
    if (!server_) GTEST_SKIP() << "the default model is not in the cache: " << model_cache_dir();
  }

  static RecordingWriter post(const std::string& path, const std::string& body,
                              std::chrono::seconds patience = std::chrono::seconds(60)) {
    HttpRequest request;
    request.method = "POST";
    request.target = request.path = path;
    request.headers = {{"content-type", "application/json"}};
    request.body = body;
    RecordingWriter out(patience);
    for (const Route& r : routes_) {
      if (r.method == "POST" && r.path == path) r.handler(request, out);
    }
    return out;
  }

  static inline std::unique_ptr<Engine> engine_;
  static inline std::unique_ptr<ApiServer> server_;
  static inline std::vector<Route> routes_;
};

}  // namespace deepinfer::server::testing
