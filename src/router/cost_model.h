// The routing decision as a pure function of a plain-data view of the replicas, so that every
// policy is tested without sockets (tests/unit/router/cost_model_test.cpp).
//
// Load is counted at dispatch: `in_flight` is the router's own count, raised before the request
// leaves and lowered when its answer ends, so a burst never lands on one replica because the
// replicas' metrics have not caught up yet (the "lost load counter" and PD pile-up failures of
// other routers). A scrape only adds the requests the router did not send (`others_queue`), and
// its KV usage is scaled to the requests still there (ReplicaPool's load_now): a scrape taken
// while a replica was full and read after it drained must not make it look full. (Taking the
// larger of in_flight and the scraped count did exactly that: with the checks 0.5 s apart,
// least-load sent 32 of 157 requests to the replica already holding 5-7 of the 8 in flight.)
//
// cache-aware measures load in one of two units (CostParams::load_unit):
//   - requests: cost = miss + load_weight * load / (mean load + 1), where miss is
//     the fraction of the prompt's blocks the replica is not expected to hold and load is
//     load_of() below. Dimensionless: at weight 1 a full miss costs as much as one
//     mean-load-plus-one above the others.
//   - tokens (the default): cost = own miss + load_weight * work ahead, both in prompt tokens
//     to compute before this request's first token. The work ahead is the uncached prompt
//     tokens of the requests sent to the replica whose first byte has not come back
//     (`pending_prefill_tokens`), plus `decode_row_tokens` per request already decoding there
//     and the request's own size per request the replica reports that this router did not
//     send. That is the replica's time to first token for this request, in token units: on a
//     replica that batches continuously, a new request waits for the prefills ahead of it,
//     while a decode row adds about one token's work per step. It is each request's own best
//     guess. Measured against requests (docs/benchmarks.md, "Stale scrapes; load in tokens"),
//     once scrapes no longer overstated a drained replica's load, on two replicas with a core
//     each: the same hit rate (49.5-49.9% against 49.6-49.7%), 1-2% more throughput, and the
//     shortest tail of the four policies (TTFT p99 2503 / 2586 ms against 2857 / 2976;
//     round-robin 3158 / 2839). (Before that fix it had lowered the hit rate: the stale KV
//     usage it multiplies by the request's size had sent requests off their caches.)
// Two guards keep one hot prefix from piling onto one
// replica, per request rather than as a global gate (a gate opened by one hot replica would
// turn affinity off for every other prefix too):
//   - the bound: only replicas with load <= max(min_load + balance_abs, min_load * balance_rel)
//     compete; the best-matching replica outside it loses the request ("bound");
//   - a miss everywhere goes to the least loaded replica, never to "the smallest tree", which
//     ignores load (SGLang's death spiral).
// Ties break on load, then on the fewest requests routed so far, then on the lowest index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace deepinfer::router {

enum class Policy { kRoundRobin, kLeastLoad, kCacheAware };
enum class LoadUnit { kTokens, kRequests };

// "round-robin", "least-load", "cache-aware"; nullopt for anything else.
std::optional<Policy> parse_policy(std::string_view name);
std::string_view policy_name(Policy policy);
// "tokens", "requests"; nullopt for anything else.
std::optional<LoadUnit> parse_load_unit(std::string_view name);
std::string_view load_unit_name(LoadUnit unit);

struct CandidateView {
  bool available = false;  // healthy and below its in-flight limit
  int64_t in_flight = 0;   // counted by the router at dispatch
  double others_queue = 0;   // requests the replica reported beyond this router's own
  double kv_usage = 0;       // 0-1, the last scrape's, scaled to the requests still there
  size_t matched_blocks = 0; // of the request's blocks, expected in this replica's cache
  uint64_t routed_total = 0; // requests routed here so far
  // Uncached prompt tokens of the requests in flight here that have not started answering,
  // and how many requests those are (the rest of in_flight are decoding).
  double pending_prefill_tokens = 0;
  int64_t pending_prefills = 0;
};

struct CostParams {
  LoadUnit load_unit = LoadUnit::kTokens;
  double load_weight = 1.0;
  // tokens: what one decoding request adds to the work ahead of a new request.
  double decode_row_tokens = 16.0;
  double balance_abs = 8.0;
  double balance_rel = 1.5;
  // A replica whose KV cache is nearly full is about to preempt: its usage counts as this many
  // queued requests (scaled 0-1).
  double kv_usage_weight = 4.0;
};

enum class Reason {
  kCacheHit,    // cache-aware: the cheapest replica holds part of the prompt
  kLeastLoad,   // least-load policy, or cache-aware with no hit anywhere
  kBound,       // cache-aware: the best-matching replica was over the bound
  kRoundRobin,
};
inline constexpr size_t kNumReasons = 4;
std::string_view reason_name(Reason reason);

struct Choice {
  size_t index = 0;
  Reason reason = Reason::kLeastLoad;
  size_t matched_blocks = 0;
};

// The load the policies compare: what the router sent plus what others sent, plus KV pressure.
double load_of(const CandidateView& c, const CostParams& params);

// Prompt tokens of `blocks` routing blocks (kTextBlockBytes bytes at kBytesPerToken).
double tokens_of_blocks(size_t blocks);

// The replica for a request of `total_blocks` routing blocks, or nullopt when none is available.
// `rr_cursor` is the round-robin position (advanced by the caller after a kRoundRobin choice).
std::optional<Choice> choose(Policy policy, std::span<const CandidateView> candidates, size_t total_blocks,
                             const CostParams& params, uint64_t rr_cursor);

}  // namespace deepinfer::router
