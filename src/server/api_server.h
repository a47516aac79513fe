// The API server's endpoints: OpenAI Chat Completions, Completions and Responses, Anthropic
// Messages (and count_tokens), tokenize/detokenize, models, health and Prometheus metrics; the
// recipe on its own (/v1/render, /v1/parse: api_recipe.h), server information (/v1/info) and
// the web UI's files (/ui: web_ui.h).
//
// ApiServer owns no threads: the transport (http.h) calls its handlers on connection threads,
// many at once; everything shared here is immutable after construction or atomic. Each
// generating handler submits one engine request, waits on it in slices (next_for) so that a
// vanished client cancels the request at once, and turns the text through the recipe's output
// parser and response builders into the protocol's body or SSE events.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/engine.h"
#include "recipe/protocol.h"
#include "server/api_errors.h"
#include "server/api_metrics.h"
#include "server/api_prompt.h"
#include "server/api_recipe.h"
#include "server/http.h"
#include "server/worker_role.h"

namespace deepinfer::server {

struct ApiConfig {
  WorkerRole role = WorkerRole::kBoth;
  std::string served_model_name = "deepinfer";
  int32_t max_num_seqs = 64;   // the engine's; admission counts it as running
  // Requests beyond max_num_seqs that may wait for a slot; one more is answered 429 with
  // Retry-After (docs/server.md, "Overload").
  int64_t max_queue = 512;
  std::chrono::milliseconds poll_interval{50};  // how often a waiting handler checks its client
  EngineConfig engine;  // as the engine was created, for GET /v1/info (the dashboard's configuration)
};

// A chat-protocol request checked, converted and rendered, ready to submit.
struct PreparedRequest {
  nlohmann::ordered_json body;
  recipe::ConversationRequest converted;
  BuiltPrompt prompt;
  GenerationRequest generation;
};

using Converter = Result<recipe::ConversationRequest> (*)(std::string_view body,
                                                          const recipe::ConversionOptions& options);

class ApiServer {
 public:
  ApiServer(ApiConfig config, Engine& engine, std::unique_ptr<PromptBuilder> prompts);

  std::vector<Route> routes();
  // The transport's own errors (401, 404, 413, ...) in the shape of the path's protocol.
  ErrorBody error_body() const;
  // The error event that ends a stream the transport cuts at shutdown, in the path's protocol.
  static StreamCutEvent stream_cut_event();
  ApiMetrics& metrics() { return *metrics_; }

 private:
  void chat_completions(const HttpRequest& request, ResponseWriter& out);
  void completions(const HttpRequest& request, ResponseWriter& out);
  void responses(const HttpRequest& request, ResponseWriter& out);
  void messages(const HttpRequest& request, ResponseWriter& out);
  void count_tokens(const HttpRequest& request, ResponseWriter& out);
  void tokenize(const HttpRequest& request, ResponseWriter& out);
  void detokenize(const HttpRequest& request, ResponseWriter& out);
  void models(const HttpRequest& request, ResponseWriter& out);
  void info(const HttpRequest& request, ResponseWriter& out);  // api_info.cpp

  // Reads, converts and renders a request; nullopt once an error was answered.
  // `chat_logprobs`: logprobs is a bool plus top_logprobs (Chat) rather than absent (others).
  std::optional<PreparedRequest> prepare(const HttpRequest& request, ApiFlavor flavor, Converter convert,
                                         bool chat_logprobs, ResponseWriter& out) const;
  recipe::ConversionOptions conversion_options() const;
  int64_t admission_limit() const { return config_.max_num_seqs + config_.max_queue; }
  // Submits a prepared generation; nullptr once the request was answered (an error, or a
  // prefill request, which ends here: api_prefill.cpp).
  std::shared_ptr<RequestHandle> submit(const HttpRequest& request, GenerationRequest generation, ApiFlavor flavor,
                                        ResponseWriter& out);
  void prefill_only(GenerationRequest generation, ApiFlavor flavor, ResponseWriter& out);
  // 404 when the body names a model this server does not serve.
  bool check_model(const std::string& body_model, ApiFlavor flavor, ResponseWriter& out) const;

  ApiConfig config_;
  Engine& engine_;
  std::unique_ptr<PromptBuilder> prompts_;
  std::unique_ptr<ApiMetrics> metrics_;
  std::unique_ptr<RecipeApi> recipe_;  // /v1/render and /v1/parse
  std::atomic<int64_t> in_flight_{0};  // generating requests admitted and not yet answered
  int64_t created_ = 0;                // unix seconds, for /v1/models
};

}  // namespace deepinfer::server
