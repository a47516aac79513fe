// `deepinfer router`: an HTTP front door over data-parallel replicas of `deepinfer serve`.
//
// Each API request (OpenAI Chat Completions, Completions, Responses; Anthropic Messages) is
// routed by the policy (cost_model.h) to one replica and proxied: its body goes out verbatim
// with the client's credentials, and the answer comes back as it arrives, a streamed answer
// chunk by chunk. The router never parses model output.
//
// Failover: a request moves to another replica only while nothing has reached its client and
// its replica produced nothing the client could see: the connection was refused or dropped
// before an answer, or the replica answered 429/503 (it did not take the request). A replica
// that is merely slow is not retried (that would run the generation twice); a stream that
// breaks after its first byte ends with the protocol's error event, never with a second
// generation spliced on.
//
// Threading: the transport runs each request on its connection's thread; the pool's lock is
// held only for the routing decision.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "router/cost_model.h"
#include "router/replica_pool.h"
#include "server/http.h"
#include "server/metrics.h"

namespace deepinfer::router {

struct RouterOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: any free port
  std::vector<std::string> replicas;  // "http://host:port"
  // Prefill/decode: decode workers are routed like replicas; before a decode worker gets a
  // request whose expected miss is at least pd_min_tokens, a prefill worker computes the prompt
  // (x-deepinfer-prefill-only) and the decode worker then finds its pages in the shared store.
  // A prefill that fails is skipped: the decode worker computes the prompt itself.
  std::vector<std::string> decode;
  std::vector<std::string> prefill;
  int64_t pd_min_tokens = 256;
  Policy policy = Policy::kCacheAware;
  CostParams cost;
  ReplicaOptions replica;
  int max_retries = 2;  // other replicas tried after the first, before the first byte
  std::chrono::milliseconds request_timeout{600000};
  std::chrono::milliseconds shutdown_timeout{30000};
  std::vector<std::string> allowed_hosts;
  std::vector<std::string> allowed_origins;
};

class Router {
 public:
  // INVALID_ARGUMENT naming a bad replica URL or an empty replica list.
  static Result<std::unique_ptr<Router>> create(const RouterOptions& options);
  ~Router();

  std::vector<server::Route> routes();
  server::HttpServerConfig http_config() const;
  ReplicaPool& pool() { return *pool_; }
  ReplicaPool* prefill_pool() { return prefill_pool_.get(); }

 private:
  Router(const RouterOptions& options, std::unique_ptr<ReplicaPool> pool, std::unique_ptr<ReplicaPool> prefill_pool);
  // Prefills the request on a prefill worker when `replica` is a decode worker expected to miss
  // enough of the prompt; when that is not worth it or fails, the replica computes the prompt.
  void remote_prefill(const server::HttpRequest& request, size_t replica, size_t missed_blocks,
                      server::Clock::time_point deadline);
  void proxy(const server::HttpRequest& request, server::ResponseWriter& writer);
  void models(const server::HttpRequest& request, server::ResponseWriter& writer);
  void register_metrics();

  RouterOptions options_;
  std::unique_ptr<ReplicaPool> pool_;          // replicas, then decode workers
  std::unique_ptr<ReplicaPool> prefill_pool_;  // nullptr without --prefill
  size_t first_decode_ = 0;                    // pool_ index of the first decode worker
  server::MetricsRegistry registry_;
  server::Counter* retries_ = nullptr;
  server::Counter* no_replica_ = nullptr;
  server::Counter* remote_prefills_ = nullptr;
  server::Counter* prefill_failures_ = nullptr;
  server::Histogram* added_latency_ = nullptr;
  server::Histogram* chunk_latency_ = nullptr;
};

// Starts the router, checks the replicas once, serves until SIGTERM or SIGINT, then shuts down
// gracefully. Blocks; installs its own signal handling (call once, from the main thread).
Status run_router(const RouterOptions& options);

}  // namespace deepinfer::router
