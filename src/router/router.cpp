#include "router/router.h"

#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <thread>

#include "router/prefix_index.h"
#include "router/request_key.h"
#include "server/api_errors.h"
#include "server/api_server.h"
#include "server/http_client.h"

namespace deepinfer::router {

namespace {

using server::Clock;

// What a replica needs from the client's head: its credentials and Anthropic's version and
// beta flags. Nothing else is forwarded (hop-by-hop headers, Host, the client's Origin).
server::Headers forwarded_headers(const server::HttpRequest& request) {
  server::Headers out;
  for (const auto& [name, value] : request.headers) {
    if (name == "authorization" || name == "x-api-key" || name.rfind("anthropic-", 0) == 0) out.emplace_back(name, value);
  }
  return out;
}

void send_error(const server::HttpRequest& request, server::ResponseWriter& writer, int status, const std::string& message,
                const std::string& code) {
  const auto flavor = server::flavor_of_path(request.path);
  writer.send(status, "application/json", server::error_json(flavor, {status, message, code, ""}));
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// 429 and 503 say the replica did not take the request (queue full, shutting down): another
// replica may, and nothing has run twice.
bool refused(int status) { return status == 429 || status == 503; }

}  // namespace

namespace {

Status add_urls(const char* flag, const std::vector<std::string>& texts, std::vector<server::HttpUrl>& urls,
                std::vector<std::string>& names) {
  for (const std::string& text : texts) {
    auto url = server::parse_http_url(text);
    if (!url.ok()) return invalid_argument(std::string(flag) + " " + text + ": " + url.status().message());
    urls.push_back(*url);
    names.push_back(text);
  }
  return Status::ok_status();
}

}  // namespace

Result<std::unique_ptr<Router>> Router::create(const RouterOptions& options) {
  if (options.replicas.empty() && options.decode.empty()) {
    return invalid_argument("--replica or --decode: at least one replica URL is needed");
  }
  if (!options.prefill.empty() && options.decode.empty()) {
    return invalid_argument("--prefill needs --decode workers: a prefill worker only computes prompts for them");
  }
  std::vector<server::HttpUrl> urls, prefill_urls;
  std::vector<std::string> names, prefill_names;
  DI_RETURN_IF_ERROR(add_urls("--replica", options.replicas, urls, names));
  DI_RETURN_IF_ERROR(add_urls("--decode", options.decode, urls, names));
  DI_RETURN_IF_ERROR(add_urls("--prefill", options.prefill, prefill_urls, prefill_names));
  auto pool = std::make_unique<ReplicaPool>(std::move(urls), std::move(names), options.replica);
  std::unique_ptr<ReplicaPool> prefill_pool;
  if (!prefill_urls.empty()) {
    prefill_pool = std::make_unique<ReplicaPool>(std::move(prefill_urls), std::move(prefill_names), options.replica);
  }
  return std::unique_ptr<Router>(new Router(options, std::move(pool), std::move(prefill_pool)));
}

Router::Router(const RouterOptions& options, std::unique_ptr<ReplicaPool> pool, std::unique_ptr<ReplicaPool> prefill_pool)
    : options_(options), pool_(std::move(pool)), prefill_pool_(std::move(prefill_pool)),
      first_decode_(options.replicas.size()) {
  register_metrics();
}

Router::~Router() = default;

void Router::register_metrics() {
  retries_ = &registry_.counter("deepinfer_router:retries_total",
                                "Requests sent to another replica after one failed before the first byte.");
  no_replica_ = &registry_.counter("deepinfer_router:no_replica_total",
                                   "Requests answered 503 because no replica was available.");
  remote_prefills_ = &registry_.counter("deepinfer_router:remote_prefills_total",
                                        "Requests prefilled on a prefill worker before their decode worker took them.");
  prefill_failures_ = &registry_.counter("deepinfer_router:remote_prefill_failures_total",
                                         "Remote prefills that failed or found no prefill worker (the decode worker computed the prompt).");
  added_latency_ = &registry_.histogram("deepinfer_router:routing_seconds",
                                        "Time from a request's arrival to its hand-over to a replica (parse, key, decision).",
                                        {0.00001, 0.00003, 0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1});
  chunk_latency_ = &registry_.histogram("deepinfer_router:chunk_forward_seconds",
                                        "Time from a streamed piece's arrival from the replica to its write to the client.",
                                        {0.000003, 0.00001, 0.00003, 0.0001, 0.0003, 0.001, 0.003, 0.01});
  using server::GaugeFamily;
  GaugeFamily& requests = registry_.counter_family("deepinfer_router:requests_total", "Requests routed, by replica.", "replica");
  GaugeFamily& failures = registry_.counter_family("deepinfer_router:replica_failures_total",
                                                   "Requests whose replica could not be reached or broke off.", "replica");
  GaugeFamily& ejections = registry_.counter_family("deepinfer_router:ejections_total", "Times a replica was ejected.", "replica");
  GaugeFamily& readmissions = registry_.counter_family("deepinfer_router:readmissions_total",
                                                       "Times an ejected replica was re-admitted.", "replica");
  GaugeFamily& estimated = registry_.counter_family("deepinfer_router:estimated_hit_tokens_total",
                                                    "Prompt tokens the router expected each replica to find cached.", "replica");
  GaugeFamily& actual = registry_.counter_family("deepinfer_router:actual_hit_tokens_total",
                                                 "Prompt tokens each replica reported as prefix-cache hits.", "replica");
  GaugeFamily& decisions = registry_.counter_family("deepinfer_router:decisions_total", "Routing decisions by reason.", "reason");
  GaugeFamily& healthy = registry_.gauge_family("deepinfer_router:replica_healthy", "1 while a replica is admitted.", "replica");
  GaugeFamily& in_flight = registry_.gauge_family("deepinfer_router:replica_in_flight",
                                                  "Requests the router has in flight on a replica.", "replica");
  GaugeFamily& pending = registry_.gauge_family("deepinfer_router:replica_pending_prefill_tokens",
                                                "Expected uncached prompt tokens of requests on a replica that have not begun to answer.",
                                                "replica");
  GaugeFamily& blocks = registry_.gauge_family("deepinfer_router:replica_index_blocks",
                                               "Routing blocks in a replica's approximate prefix index.", "replica");
  registry_.on_render([this, &requests, &failures, &ejections, &readmissions, &estimated, &actual, &decisions, &healthy,
                       &in_flight, &pending, &blocks] {
    const auto snapshot = pool_->snapshot();
    for (size_t i = 0; i < snapshot.size(); ++i) {
      const std::string& name = snapshot[i].name;
      ReplicaCounters& c = pool_->counters(i);
      requests.with(name).set(static_cast<double>(c.requests.load()));
      failures.with(name).set(static_cast<double>(c.failures.load()));
      ejections.with(name).set(static_cast<double>(c.ejections.load()));
      readmissions.with(name).set(static_cast<double>(c.readmissions.load()));
      estimated.with(name).set(c.estimated_hit_tokens.load());
      actual.with(name).set(c.actual_hit_tokens.load());
      healthy.with(name).set(snapshot[i].healthy ? 1.0 : 0.0);
      in_flight.with(name).set(static_cast<double>(snapshot[i].in_flight));
      pending.with(name).set(snapshot[i].pending_prefill_tokens);
      blocks.with(name).set(static_cast<double>(snapshot[i].index_blocks));
    }
    for (size_t r = 0; r < kNumReasons; ++r) {
      const auto reason = static_cast<Reason>(r);
      decisions.with(std::string(reason_name(reason))).set(static_cast<double>(pool_->decisions(reason)));
    }
  });
}

namespace {

enum class Outcome { kDone, kRetry };

struct Attempt {
  Outcome outcome = Outcome::kDone;
  // For kRetry: what the client gets if no replica takes the request.
  int status = 502;
  std::string content_type;
  std::string body;
  std::string message;
};

}  // namespace

void Router::proxy(const server::HttpRequest& request, server::ResponseWriter& writer) {
  const auto arrived = Clock::now();
  const auto deadline = arrived + options_.request_timeout;
  const RequestKey key = request_key(request.path, request.body);
  const std::vector<uint64_t> keys = text_block_keys(key.text);
  std::vector<size_t> excluded;
  std::optional<Attempt> last;
  for (int attempt = 0; attempt <= options_.max_retries && !writer.client_gone(); ++attempt) {
    auto lease = pool_->acquire(options_.policy, keys, options_.cost, excluded);
    if (!lease) break;
    if (attempt > 0) retries_->inc();
    added_latency_->observe(seconds_since(arrived));
    const size_t index = lease->index;
    if (attempt == 0) remote_prefill(request, index, keys.size() - std::min(keys.size(), lease->choice.matched_blocks), deadline);
    server::HttpClient client(pool_->url(index), forwarded_headers(request));
    // Which replica answered and why, for clients and benchmarks that study the routing.
    const server::Headers routed = {{"x-deepinfer-replica", pool_->name(index)},
                                    {"x-deepinfer-route", std::string(reason_name(lease->choice.reason))}};
    server::HttpHead head;
    bool streaming = false, started = false;
    std::string buffered;
    Status s = client.request(request.method, request.target, request.body, deadline, head, [&](std::string_view piece) {
      pool_->answering(*lease);
      if (!started && !streaming) streaming = head.content_type.rfind("text/event-stream", 0) == 0 && !refused(head.status);
      if (!streaming) {
        buffered.append(piece);
        return buffered.size() <= (size_t{64} << 20);
      }
      const auto got = Clock::now();
      if (!started) {
        started = true;
        if (!writer.start_stream(head.status, head.content_type, routed)) return false;
      }
      const bool ok = writer.write(piece);
      chunk_latency_->observe(seconds_since(got));
      return ok;
    });
    pool_->release(*lease);
    if (started) {  // the client has bytes: whatever happens now, this replica answers
      if (!s.ok()) {
        pool_->counters(index).failures.fetch_add(1);
        if (s.code() == StatusCode::kUnavailable) pool_->report_unreachable(index);
        writer.write(server::ApiServer::stream_cut_event()(request, 502, "replica " + pool_->name(index) +
                                                                             " failed mid-stream: " + s.message()));
      }
      writer.finish();
      return;
    }
    if (s.ok() && !refused(head.status)) {
      writer.send(head.status, head.content_type.empty() ? "application/json" : head.content_type, std::move(buffered),
                  routed);
      return;
    }
    if (s.ok()) {  // refused: try another, keep this answer in case none takes it
      last = Attempt{Outcome::kRetry, head.status, head.content_type, std::move(buffered), ""};
    } else if (s.code() == StatusCode::kUnavailable) {
      // Refused or dropped before an answer: the replica is gone, and so is anything it began.
      pool_->report_unreachable(index);
      last = Attempt{Outcome::kRetry, 502, "", "", "replica " + pool_->name(index) + ": " + s.message()};
    } else {
      // Timed out: the replica may still be generating, so no other one starts the same work.
      pool_->counters(index).failures.fetch_add(1);
      send_error(request, writer, 504, "replica " + pool_->name(index) + " " + s.message(), "upstream_timeout");
      return;
    }
    excluded.push_back(index);
  }
  if (last && !last->body.empty()) {
    writer.send(last->status, last->content_type.empty() ? "application/json" : last->content_type, std::move(last->body));
  } else if (last) {
    send_error(request, writer, 502, last->message, "upstream_unavailable");
  } else {
    no_replica_->inc();
    send_error(request, writer, 503, "no replica is available (all are ejected or at their in-flight limit)", "no_replica");
  }
}

void Router::remote_prefill(const server::HttpRequest& request, size_t replica, size_t missed_blocks,
                            server::Clock::time_point deadline) {
  if (!prefill_pool_ || replica < first_decode_) return;
  const double missed_tokens = tokens_of_blocks(missed_blocks);
  if (missed_tokens < static_cast<double>(options_.pd_min_tokens)) return;
  // Least load: a prefill worker keeps nothing a later request could reuse in place (the store
  // holds the pages), so affinity buys it little.
  auto lease = prefill_pool_->acquire(Policy::kLeastLoad, {}, options_.cost, {});
  if (!lease) {
    prefill_failures_->inc();
    return;
  }
  server::Headers headers = forwarded_headers(request);
  headers.emplace_back(std::string(server::kPrefillOnlyHeader), "1");
  server::HttpClient client(prefill_pool_->url(lease->index), headers);
  server::HttpHead head;
  std::string body;
  const Status s = client.request(request.method, request.target, request.body, deadline, head, [&](std::string_view piece) {
    body.append(piece);
    return body.size() <= (size_t{1} << 20);
  });
  prefill_pool_->release(*lease);
  if (s.ok() && head.status == 200) {
    remote_prefills_->inc();
    return;
  }
  if (!s.ok() && s.code() == StatusCode::kUnavailable) prefill_pool_->report_unreachable(lease->index);
  prefill_pool_->counters(lease->index).failures.fetch_add(1);
  prefill_failures_->inc();
  std::fprintf(stderr, "deepinfer router: prefill on %s failed (%s); %s computes the prompt\n",
               prefill_pool_->name(lease->index).c_str(),
               s.ok() ? ("HTTP " + std::to_string(head.status)).c_str() : s.message().c_str(), pool_->name(replica).c_str());
}

std::vector<server::Route> Router::routes() {
  auto proxy = [this](const server::HttpRequest& r, server::ResponseWriter& w) { this->proxy(r, w); };
  std::vector<server::Route> out;
  for (const char* path : {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/messages/count_tokens",
                           "/v1/responses", "/tokenize", "/detokenize"}) {
    out.push_back({"POST", path, proxy, server::BodyType::kJson});
  }
  out.push_back({"GET", "/v1/models", proxy});
  out.push_back({"GET", "/health", [this](const server::HttpRequest&, server::ResponseWriter& w) {
                   size_t n_healthy = 0;
                   for (const auto& r : pool_->snapshot()) n_healthy += r.healthy ? 1 : 0;
                   const std::string body = "{\"status\":\"" + std::string(n_healthy ? "ok" : "no healthy replica") +
                                            "\",\"replicas_healthy\":" + std::to_string(n_healthy) + "}";
                   w.send(n_healthy ? 200 : 503, "application/json", body);
                 }});
  out.push_back({"GET", "/metrics", [this](const server::HttpRequest&, server::ResponseWriter& w) {
                   w.send(200, "text/plain; version=0.0.4", registry_.render());
                 }});
  return out;
}

server::HttpServerConfig Router::http_config() const {
  server::HttpServerConfig config;
  config.host = options_.host;
  config.port = options_.port;
  config.allowed_hosts = options_.allowed_hosts;
  config.allowed_origins = options_.allowed_origins;
  // Longer than any replica's: a request body is read before it is routed.
  config.read_timeout = std::chrono::milliseconds(30000);
  config.error_body = [](const server::HttpRequest& request, int status, std::string_view message) {
    return server::error_json(server::flavor_of_path(request.path), {status, std::string(message), "", ""});
  };
  config.stream_cut_event = server::ApiServer::stream_cut_event();
  return config;
}

Status run_router(const RouterOptions& options) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  DI_ASSIGN_OR_RETURN(std::unique_ptr<Router> router, Router::create(options));
  router->pool().check_all();
  router->pool().start_checks();
  if (ReplicaPool* prefill = router->prefill_pool()) {
    prefill->check_all();
    prefill->start_checks();
  }
  DI_ASSIGN_OR_RETURN(std::unique_ptr<server::HttpServer> http, server::HttpServer::start(router->http_config(), router->routes()));
  size_t n_healthy = 0;
  for (const auto& r : router->pool().snapshot()) n_healthy += r.healthy ? 1 : 0;
  const size_t n_prefill = router->prefill_pool() ? router->prefill_pool()->size() : 0;
  const std::string policy = std::string(policy_name(options.policy)) +
                             (options.policy == Policy::kCacheAware
                                  ? " (load in " + std::string(load_unit_name(options.cost.load_unit)) + ")"
                                  : "");
  std::fprintf(stderr, "deepinfer router: %s over %zu replicas (%zu healthy)%s on http://%s:%u\n",
               policy.c_str(), router->pool().size(), n_healthy,
               n_prefill ? (", " + std::to_string(n_prefill) + " prefill workers").c_str() : "", options.host.c_str(),
               static_cast<unsigned>(http->port()));
  std::fflush(stderr);
  std::thread waiter([&] {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    std::fprintf(stderr, "deepinfer router: %s, shutting down\n", signal_number == SIGTERM ? "SIGTERM" : "SIGINT");
    http->shutdown(options.shutdown_timeout);
  });
  http->wait();
  waiter.join();
  http.reset();
  router.reset();
  std::fprintf(stderr, "deepinfer router: stopped\n");
  return Status::ok_status();
}

}  // namespace deepinfer::router
