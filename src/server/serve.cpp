#include "server/serve.h"

#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "deepinfer/engine.h"
#include "engine/create_engine.h"
#include "model/catalog.h"
#include "server/api_server.h"
#include "server/http.h"
#include "server/http_policy.h"
#include "server/web_ui.h"
#include "tokenizer/tokenizer_loading.h"

namespace deepinfer::server {

namespace {

std::string default_served_name(const std::string& model_arg, const std::string& path) {
  if (!model_arg.empty() && find_known_model(model_arg) != nullptr) return model_arg;
  if (model_arg.empty()) return std::string(kDefaultModelName);
  return std::filesystem::path(path).stem().string();
}

}  // namespace

namespace {

// One short generation before the port opens. The first pass through a fresh engine pays for
// first touches of its scratch and KV memory (0.3 s to the first token on SmolLM2 against
// 35 ms for the next request, issue 23); a client should not. Its blocks carry their own
// cache salt, so no request can hit them, and they are evicted like any others.
void warm_up(Engine& engine) {
  GenerationRequest request;
  for (int64_t i = 0; i < 32; ++i) request.prompt.push_back(static_cast<int32_t>((1000 + 7919 * i) % engine.n_vocab()));
  request.max_tokens = 4;
  request.sampling.temperature = 0.0f;
  request.sampling.ignore_eos = true;
  request.detokenize = false;
  request.cache_salt = "deepinfer serve warm-up";
  auto handle = engine.submit(std::move(request));
  if (!handle.ok()) return;  // a model that cannot run this fails the first request with its reason
  while ((*handle)->next()) {
  }
}

}  // namespace

Status serve(const ServeOptions& options) {
  // Every thread started from here on inherits the mask: only the waiter below takes the
  // signals, outside any handler, so it may call shutdown().
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (options.role != WorkerRole::kBoth && options.engine.kv_store_dir.empty()) {
    return invalid_argument("--role prefill and --role decode need --kv-store: the store carries the prompt's KV "
                            "pages from the prefill worker to the decode worker");
  }
  const std::string& path = options.engine.model_path;
  // One tokenizer for the prompts and the engine's text.
  DI_ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tokenizer, load_tokenizer(path, TokenizerPresence::kRequired));
  DI_ASSIGN_OR_RETURN(std::string architecture, model_architecture(path));
  DI_ASSIGN_OR_RETURN(std::unique_ptr<PromptBuilder> prompts, PromptBuilder::create(tokenizer, architecture));
  // A server commits its KV cache at start (EngineConfig::prefault_kv_cache): the first blocks
  // each request touches would otherwise cost its steps page faults.
  EngineConfig engine_config = options.engine;
  engine_config.prefault_kv_cache = true;
  DI_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, create_engine(engine_config, tokenizer));
  warm_up(*engine);

  ApiConfig api_config;
  api_config.served_model_name =
      options.served_model_name.empty() ? default_served_name(options.model, path) : options.served_model_name;
  api_config.max_num_seqs = options.engine.max_num_seqs;
  api_config.max_queue = options.max_queue;
  api_config.engine = options.engine;
  api_config.role = options.role;
  ApiServer api(api_config, *engine, std::move(prompts));

  HttpServerConfig http_config;
  http_config.host = options.host;
  http_config.port = options.port;
  http_config.api_keys = options.api_keys;
  // The web UI's pages load without a key; the key the page asks for goes with its API calls.
  for (std::string& path : web_ui_paths()) http_config.public_paths.push_back(std::move(path));
  http_config.max_body_bytes = options.max_body_bytes;
  http_config.read_timeout = std::chrono::milliseconds(static_cast<int64_t>(options.read_timeout_s * 1000.0));
  http_config.allowed_origins = options.allowed_origins;
  http_config.allowed_hosts = options.allowed_hosts;
  http_config.error_body = api.error_body();
  http_config.stream_cut_event = api.stream_cut_event();
  DI_ASSIGN_OR_RETURN(std::unique_ptr<HttpServer> http, HttpServer::start(http_config, api.routes()));

  static constexpr const char* kRoleNote[] = {"", ", prefill worker", ", decode worker"};
  std::fprintf(stderr, "deepinfer serve: %s on http://%s:%u (context %lld tokens)%s%s\n",
               api_config.served_model_name.c_str(), options.host.c_str(), static_cast<unsigned>(http->port()),
               static_cast<long long>(engine->max_context()), options.api_keys.empty() ? "" : ", API key required",
               kRoleNote[static_cast<int>(options.role)]);
  if (!is_loopback_host(options.host) && options.api_keys.empty()) {
    std::fprintf(stderr, "deepinfer serve: warning: %s is not a loopback address and no --api-key is set: "
                         "anyone who can reach the port can use the model (docs/security.md)\n",
                 options.host.c_str());
  }
  std::fflush(stderr);

  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(options.shutdown_timeout_s * 1000.0));
  std::thread waiter([&] {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    std::fprintf(stderr, "deepinfer serve: %s, shutting down (up to %.0f s for requests in flight)\n",
                 signal_number == SIGTERM ? "SIGTERM" : "SIGINT", options.shutdown_timeout_s);
    http->shutdown(grace);
  });
  http->wait();
  waiter.join();
  http.reset();
  engine.reset();  // cancels whatever is left
  std::fprintf(stderr, "deepinfer serve: stopped\n");
  return Status::ok_status();
}

}  // namespace deepinfer::server
