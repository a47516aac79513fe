#include "router/cost_model.h"

#include <algorithm>
#include <limits>

#include "router/prefix_index.h"

namespace deepinfer::router {

std::optional<Policy> parse_policy(std::string_view name) {
  if (name == "round-robin") return Policy::kRoundRobin;
  if (name == "least-load") return Policy::kLeastLoad;
  if (name == "cache-aware") return Policy::kCacheAware;
  return std::nullopt;
}

std::string_view policy_name(Policy policy) {
  switch (policy) {
    case Policy::kRoundRobin: return "round-robin";
    case Policy::kLeastLoad: return "least-load";
    case Policy::kCacheAware: return "cache-aware";
  }
  return "?";
}

std::optional<LoadUnit> parse_load_unit(std::string_view name) {
  if (name == "tokens") return LoadUnit::kTokens;
  if (name == "requests") return LoadUnit::kRequests;
  return std::nullopt;
}

std::string_view load_unit_name(LoadUnit unit) { return unit == LoadUnit::kTokens ? "tokens" : "requests"; }

double tokens_of_blocks(size_t blocks) { return static_cast<double>(blocks * kTextBlockBytes) / kBytesPerToken; }

std::string_view reason_name(Reason reason) {
  switch (reason) {
    case Reason::kCacheHit: return "cache_hit";
    case Reason::kLeastLoad: return "least_load";
    case Reason::kBound: return "bound";
    case Reason::kRoundRobin: return "round_robin";
  }
  return "?";
}

double load_of(const CandidateView& c, const CostParams& params) {
  return static_cast<double>(c.in_flight) + c.others_queue + params.kv_usage_weight * c.kv_usage;
}

namespace {

// True when a is the better of two equally priced replicas.
bool tie_break(const CandidateView& a, size_t ia, const CandidateView& b, size_t ib, const CostParams& p) {
  const double la = load_of(a, p), lb = load_of(b, p);
  if (la != lb) return la < lb;
  if (a.routed_total != b.routed_total) return a.routed_total < b.routed_total;
  return ia < ib;
}

std::optional<Choice> least_load(std::span<const CandidateView> cs, const CostParams& p) {
  std::optional<size_t> best;
  for (size_t i = 0; i < cs.size(); ++i) {
    if (!cs[i].available) continue;
    if (!best || tie_break(cs[i], i, cs[*best], *best, p)) best = i;
  }
  if (!best) return std::nullopt;
  return Choice{*best, Reason::kLeastLoad, cs[*best].matched_blocks};
}

std::optional<Choice> round_robin(std::span<const CandidateView> cs, uint64_t cursor) {
  for (size_t step = 0; step < cs.size(); ++step) {
    const size_t i = (cursor + step) % cs.size();
    if (cs[i].available) return Choice{i, Reason::kRoundRobin, cs[i].matched_blocks};
  }
  return std::nullopt;
}

// tokens: the prompt tokens the replica computes before this request's first one, besides its
// own miss (the header's "work ahead").
double work_ahead_tokens(const CandidateView& c, double request_tokens, const CostParams& p) {
  const double decoding = static_cast<double>(std::max<int64_t>(0, c.in_flight - c.pending_prefills));
  return c.pending_prefill_tokens + p.decode_row_tokens * decoding +
         request_tokens * (c.others_queue + p.kv_usage_weight * c.kv_usage);
}

// What the replica costs the request, in the unit the params name (see the header).
double cache_aware_cost(const CandidateView& c, size_t total_blocks, double mean_load, const CostParams& p) {
  const size_t matched = std::min(c.matched_blocks, total_blocks);
  if (p.load_unit == LoadUnit::kTokens) {
    return tokens_of_blocks(total_blocks - matched) +
           p.load_weight * work_ahead_tokens(c, tokens_of_blocks(total_blocks), p);
  }
  const double miss = 1.0 - static_cast<double>(matched) / static_cast<double>(total_blocks);
  return miss + p.load_weight * load_of(c, p) / (mean_load + 1.0);
}

std::optional<Choice> cache_aware(std::span<const CandidateView> cs, size_t total_blocks, const CostParams& p) {
  double min_load = std::numeric_limits<double>::infinity(), sum_load = 0;
  size_t n_available = 0, best_match = 0;
  for (const CandidateView& c : cs) {
    if (!c.available) continue;
    min_load = std::min(min_load, load_of(c, p));
    sum_load += load_of(c, p);
    best_match = std::max(best_match, c.matched_blocks);
    ++n_available;
  }
  if (n_available == 0) return std::nullopt;
  // A miss everywhere: counted in requests, the least loaded replica; in tokens, the cost below
  // is the work ahead alone, which is the same question asked better.
  if (total_blocks == 0 || (best_match == 0 && p.load_unit == LoadUnit::kRequests)) return least_load(cs, p);
  const double bound = std::max(min_load + p.balance_abs, min_load * p.balance_rel);
  const double mean_load = sum_load / static_cast<double>(n_available);
  std::optional<size_t> best;
  double best_cost = 0;
  bool bounded_out = false;  // a replica matching best_match was over the bound
  for (size_t i = 0; i < cs.size(); ++i) {
    const CandidateView& c = cs[i];
    if (!c.available) continue;
    if (load_of(c, p) > bound) {
      bounded_out = bounded_out || c.matched_blocks == best_match;
      continue;
    }
    const double cost = cache_aware_cost(c, total_blocks, mean_load, p);
    if (!best || cost < best_cost || (cost == best_cost && tie_break(c, i, cs[*best], *best, p))) {
      best = i;
      best_cost = cost;
    }
  }
  // min_load's replica is always within the bound, so best is set.
  const CandidateView& chosen = cs[*best];
  Reason reason = Reason::kCacheHit;
  if (bounded_out && chosen.matched_blocks < best_match) reason = Reason::kBound;
  else if (chosen.matched_blocks == 0) reason = Reason::kLeastLoad;
  return Choice{*best, reason, chosen.matched_blocks};
}

}  // namespace

std::optional<Choice> choose(Policy policy, std::span<const CandidateView> candidates, size_t total_blocks,
                             const CostParams& params, uint64_t rr_cursor) {
  switch (policy) {
    case Policy::kRoundRobin: return round_robin(candidates, rr_cursor);
    case Policy::kLeastLoad: return least_load(candidates, params);
    case Policy::kCacheAware: return cache_aware(candidates, total_blocks, params);
  }
  return std::nullopt;
}

}  // namespace deepinfer::router
