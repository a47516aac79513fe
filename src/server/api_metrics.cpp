#include "server/api_metrics.h"

#include <array>
#include <memory>
#include <string>
#include <vector>

namespace deepinfer::server {

namespace {

std::vector<double> latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}

// EngineStats holds running totals; a Prometheus counter only grows by increments, so each
// scrape adds what the total gained since the previous one.
struct TotalsMirror {
  std::mutex mutex;
  EngineStats seen;
};

// The KV-cache store's counters (docs/kv-store.md), registered when the engine has a store.
void register_kv_store_metrics(MetricsRegistry& registry, const Engine& engine) {
  struct Item {
    Counter* counter;
    int64_t KvStoreUsage::*field;
  };
  const auto counter = [&](const char* name, const char* help, int64_t KvStoreUsage::*field) {
    return Item{&registry.counter(name, help), field};
  };
  std::vector<Item> items = {
      counter("deepinfer:kv_store_hit_pages_total", "KV store pages loaded into the prefix cache.", &KvStoreUsage::hit_pages),
      counter("deepinfer:kv_store_miss_pages_total", "KV store lookups that ended at a page it did not have.",
              &KvStoreUsage::miss_pages),
      counter("deepinfer:kv_store_hit_tokens_total", "Prompt tokens served from the KV store.", &KvStoreUsage::hit_tokens),
      counter("deepinfer:kv_store_read_bytes_total", "Page bytes read from the KV store's directory.",
              &KvStoreUsage::bytes_read),
      counter("deepinfer:kv_store_written_bytes_total", "Page bytes written to the KV store's directory.",
              &KvStoreUsage::bytes_written),
      counter("deepinfer:kv_store_evictions_total", "KV store pages evicted by the capacity watermark.",
              &KvStoreUsage::evictions),
      counter("deepinfer:kv_store_expirations_total", "KV store pages removed by the TTL.", &KvStoreUsage::expirations),
      counter("deepinfer:kv_store_write_drops_total", "KV store pages not written: the write queue was full.",
              &KvStoreUsage::write_drops),
      counter("deepinfer:kv_store_write_failures_total", "KV store page writes that failed (a full disk).",
              &KvStoreUsage::write_failures),
      counter("deepinfer:kv_store_checksum_failures_total", "KV store pages refused on read, and deleted.",
              &KvStoreUsage::checksum_failures),
  };
  Counter& load_seconds =
      registry.counter("deepinfer:kv_store_load_seconds_total", "Time spent reading and verifying KV store pages.");
  Gauge& pages = registry.gauge("deepinfer:kv_store_pages", "Pages in the KV store's directory (as this process knows it).");
  Gauge& bytes = registry.gauge("deepinfer:kv_store_bytes", "Bytes of those pages.");
  auto seen = std::make_shared<std::pair<std::mutex, KvStoreUsage>>();
  registry.on_render([&engine, items, &load_seconds, &pages, &bytes, seen] {
    const KvStoreUsage now = engine.stats().kv_store;
    pages.set(static_cast<double>(now.pages));
    bytes.set(static_cast<double>(now.bytes));
    std::lock_guard lock(seen->first);
    for (const Item& item : items) {
      const int64_t gained = now.*item.field - seen->second.*item.field;
      if (gained > 0) item.counter->inc(static_cast<double>(gained));
    }
    if (now.load_seconds > seen->second.load_seconds) load_seconds.inc(now.load_seconds - seen->second.load_seconds);
    seen->second = now;
  });
}

// Speculative decoding (vLLM's spec_decode counters, and per method and verify size).
void register_speculative_metrics(MetricsRegistry& registry, const Engine& engine) {
  Counter& drafts = registry.counter("deepinfer:spec_decode_num_drafts_total",
                                     "Sequence-steps that verified at least one draft token.");
  Counter& draft_tokens = registry.counter("deepinfer:spec_decode_num_draft_tokens_total", "Draft tokens verified.");
  Counter& accepted = registry.counter("deepinfer:spec_decode_num_accepted_tokens_total", "Draft tokens kept.");
  GaugeFamily& length = registry.gauge_family("deepinfer:spec_decode_mean_acceptance_length",
                                              "Tokens per verification, its own included, per method.", "method");
  GaugeFamily& sizes = registry.gauge_family("deepinfer:spec_decode_verify_size_steps",
                                             "Sequence-steps of speculating sequences by draft tokens verified.",
                                             "draft_tokens");
  auto seen = std::make_shared<std::pair<std::mutex, std::array<int64_t, 3>>>();
  registry.on_render([&engine, &drafts, &draft_tokens, &accepted, &length, &sizes, seen] {
    const SpeculativeUsage u = engine.stats().speculative;
    std::array<int64_t, 3> now{};
    for (const SpeculativeMethodUsage& m : u.methods) {
      now[0] += m.verifications;
      now[1] += m.draft_tokens;
      now[2] += m.accepted_tokens;
      if (m.verifications > 0) length.with(m.method).set(m.mean_acceptance_length());
    }
    for (size_t k = 0; k < u.verify_sizes.size(); ++k) {
      if (u.verify_sizes[k] > 0) sizes.with(std::to_string(k)).set(static_cast<double>(u.verify_sizes[k]));
    }
    std::lock_guard lock(seen->first);
    Counter* counters[] = {&drafts, &draft_tokens, &accepted};
    for (size_t i = 0; i < 3; ++i) {
      if (now[i] > seen->second[i]) counters[i]->inc(static_cast<double>(now[i] - seen->second[i]));
    }
    seen->second = now;
  });
}

}  // namespace

ApiMetrics::ApiMetrics(const Engine& engine)
    : requests_in_flight(registry_.gauge("deepinfer:api_requests_in_flight",
                                         "Generating requests admitted by the API server and not yet answered.")),
      requests_finished(registry_.counter("deepinfer:request_success_total", "Generating requests answered.")),
      requests_rejected(registry_.counter("deepinfer:request_rejected_total",
                                          "Requests refused with 429 because the queue was full.")),
      ttft(registry_.histogram("deepinfer:time_to_first_token_seconds", "Time to first token in seconds.",
                               latency_buckets())),
      itl(registry_.histogram("deepinfer:inter_token_latency_seconds", "Time between tokens in seconds.",
                              latency_buckets())),
      e2e(registry_.histogram("deepinfer:e2e_request_latency_seconds",
                              "Arrival to last token, in seconds.", latency_buckets())),
      queue_time(registry_.histogram("deepinfer:request_queue_time_seconds",
                                     "Submission to first scheduling, in seconds.", latency_buckets())) {
  Gauge& running = registry_.gauge("deepinfer:num_requests_running", "Requests in the engine's running batch.");
  Gauge& waiting = registry_.gauge("deepinfer:num_requests_waiting", "Requests waiting for the engine.");
  Gauge& kv_usage = registry_.gauge("deepinfer:kv_cache_usage_perc", "Fraction of KV cache blocks in use (0-1).");
  Gauge& kv_used = registry_.gauge("deepinfer:kv_cache_blocks_used", "KV cache blocks in use.");
  Gauge& kv_total = registry_.gauge("deepinfer:kv_cache_blocks_total", "KV cache blocks in all.");
  GaugeFamily& group_used = registry_.gauge_family("deepinfer:kv_cache_group_blocks_used",
                                                   "KV cache blocks in use, per layer group.", "group");
  GaugeFamily& group_total = registry_.gauge_family("deepinfer:kv_cache_group_blocks_total",
                                                    "KV cache blocks, per layer group.", "group");
  GaugeFamily& group_bytes = registry_.gauge_family("deepinfer:kv_cache_group_bytes",
                                                    "KV cache memory, per layer group.", "group");
  Counter& failed_steps = registry_.counter("deepinfer:failed_steps_total",
                                            "Forward passes the backend failed (their requests ended with an error).");
  Counter& queries = registry_.counter("deepinfer:prefix_cache_queries_total",
                                       "Prompt tokens looked up in the prefix cache.");
  Counter& hits = registry_.counter("deepinfer:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.");
  Counter& prompt = registry_.counter("deepinfer:prompt_tokens_total", "Prompt tokens computed.");
  Counter& generation = registry_.counter("deepinfer:generation_tokens_total", "Tokens generated.");
  Counter& preemptions = registry_.counter("deepinfer:num_preemptions_total", "Sequences preempted.");
  Counter& steps = registry_.counter("deepinfer:engine_steps_total", "Engine steps (forward passes).");
  Counter& forward = registry_.counter("deepinfer:engine_forward_seconds_total", "Time inside forward passes.");
  Counter& overhead = registry_.counter("deepinfer:engine_overhead_seconds_total",
                                        "Time the model stood idle between passes because of the engine (sampling).");
  Counter& decode_steps = registry_.counter("deepinfer:engine_decode_steps_total",
                                            "Steps that computed no prompt token (every sequence decoding).");
  Counter& decode_tokens = registry_.counter("deepinfer:engine_decode_step_tokens_total",
                                             "Tokens sampled in decode-only steps.");
  Counter& decode_seconds = registry_.counter("deepinfer:engine_decode_step_seconds_total",
                                              "Time of decode-only steps: forward pass plus overhead.");
  auto mirror = std::make_shared<TotalsMirror>();
  registry_.on_render([&, mirror] {
    const EngineStats s = engine.stats();
    running.set(static_cast<double>(s.n_running));
    waiting.set(static_cast<double>(s.n_waiting));
    kv_usage.set(s.kv_usage);
    kv_used.set(static_cast<double>(s.kv_blocks_used));
    kv_total.set(static_cast<double>(s.kv_blocks_total));
    for (const KvGroupUsage& g : s.kv_groups) {
      group_used.with(g.name).set(static_cast<double>(g.blocks_used));
      group_total.with(g.name).set(static_cast<double>(g.blocks_total));
      group_bytes.with(g.name).set(static_cast<double>(g.bytes));
    }
    std::lock_guard lock(mirror->mutex);
    auto add = [](Counter& c, int64_t now, int64_t& seen) {
      if (now > seen) c.inc(static_cast<double>(now - seen));
      seen = now;
    };
    add(queries, s.prefix_queries, mirror->seen.prefix_queries);
    add(hits, s.prefix_hits, mirror->seen.prefix_hits);
    add(prompt, s.prompt_tokens, mirror->seen.prompt_tokens);
    add(generation, s.generation_tokens, mirror->seen.generation_tokens);
    add(preemptions, s.n_preemptions, mirror->seen.n_preemptions);
    add(failed_steps, s.n_failed_steps, mirror->seen.n_failed_steps);
    add(steps, s.n_steps, mirror->seen.n_steps);
    add(decode_steps, s.decode_steps, mirror->seen.decode_steps);
    add(decode_tokens, s.decode_step_tokens, mirror->seen.decode_step_tokens);
    const auto add_seconds = [](Counter& c, double now, double& seen) {
      if (now > seen) c.inc(now - seen);
      seen = now;
    };
    add_seconds(forward, s.forward_seconds, mirror->seen.forward_seconds);
    add_seconds(overhead, s.overhead_seconds, mirror->seen.overhead_seconds);
    add_seconds(decode_seconds, s.decode_step_seconds, mirror->seen.decode_step_seconds);
  });
  if (engine.stats().kv_store.enabled) register_kv_store_metrics(registry_, engine);
  register_speculative_metrics(registry_, engine);
}

void RequestTimer::on_event(size_t n_tokens, bool first_of_index, double queue_seconds) {
  const Clock::time_point now = Clock::now();
  if (first_of_index) metrics_.queue_time.observe(queue_seconds);
  if (n_tokens == 0) return;
  if (!any_token_) {
    metrics_.ttft.observe(std::chrono::duration<double>(now - arrival_).count());
    any_token_ = true;
    if (n_tokens > 1) {
      // Tokens that arrive together (a prompt's first token with a stop-string flush) count
      // as zero gaps rather than one long one.
      for (size_t i = 1; i < n_tokens; ++i) metrics_.itl.observe(0.0);
    }
  } else {
    const double gap = std::chrono::duration<double>(now - last_).count() / static_cast<double>(n_tokens);
    for (size_t i = 0; i < n_tokens; ++i) metrics_.itl.observe(gap);
  }
  last_ = now;
}

void RequestTimer::on_end() {
  metrics_.e2e.observe(std::chrono::duration<double>(Clock::now() - arrival_).count());
  metrics_.requests_finished.inc();
}

}  // namespace deepinfer::server
