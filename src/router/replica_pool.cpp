#include "router/replica_pool.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

namespace deepinfer::router {

struct ReplicaPool::Replica {
  Replica(server::HttpUrl u, std::string n, size_t index_blocks) : url(std::move(u)), name(std::move(n)), index(index_blocks) {}
  server::HttpUrl url;
  std::string name;
  ReplicaCounters counters;
  // Guarded by ReplicaPool::mutex_:
  bool healthy = false;
  bool checked = false;  // a scrape has been seen (its totals are a baseline)
  int consecutive_failures = 0;
  int consecutive_ok = 0;
  int64_t in_flight = 0;
  double pending_prefill_tokens = 0;  // of leases not yet answering
  int64_t pending_prefills = 0;
  uint64_t routed_total = 0;
  ReplicaScrape last;
  int64_t own_at_scrape = 0;  // in_flight when `last` was taken
  PrefixIndex index;
};

ReplicaScrape parse_replica_metrics(std::string_view text) {
  ReplicaScrape out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.empty() || line.front() == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string_view::npos) continue;
    std::string_view name = line.substr(0, space), value_text = line.substr(space + 1);
    double value = 0;
    auto [ptr, ec] = std::from_chars(value_text.data(), value_text.data() + value_text.size(), value);
    if (ec != std::errc()) continue;
    if (name == "deepinfer:num_requests_running") out.running = value;
    else if (name == "deepinfer:num_requests_waiting") out.waiting = value;
    else if (name == "deepinfer:kv_cache_usage_perc") out.kv_usage = value;
    else if (name == "deepinfer:prefix_cache_queries_total") out.prefix_queries_total = value;
    else if (name == "deepinfer:prefix_cache_hits_total") out.prefix_hits_total = value;
  }
  return out;
}

LoadNow load_now(const ReplicaScrape& scrape, int64_t own_at_scrape, int64_t own_now) {
  const double counted = scrape.running + scrape.waiting;
  LoadNow out;
  out.others_queue = std::max(0.0, counted - static_cast<double>(own_at_scrape));
  const double held_now = static_cast<double>(own_now) + out.others_queue;
  out.kv_usage = counted <= 0 ? scrape.kv_usage : scrape.kv_usage * std::min(1.0, held_now / counted);
  return out;
}

ReplicaPool::ReplicaPool(std::vector<server::HttpUrl> urls, std::vector<std::string> names, ReplicaOptions options)
    : options_(options) {
  for (size_t i = 0; i < urls.size(); ++i) {
    replicas_.push_back(std::make_unique<Replica>(std::move(urls[i]), std::move(names[i]), options.index_blocks));
  }
}

ReplicaPool::~ReplicaPool() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (checker_.joinable()) checker_.join();
}

const server::HttpUrl& ReplicaPool::url(size_t index) const { return replicas_[index]->url; }
const std::string& ReplicaPool::name(size_t index) const { return replicas_[index]->name; }
ReplicaCounters& ReplicaPool::counters(size_t index) { return replicas_[index]->counters; }

bool ReplicaPool::check_one(size_t index, ReplicaScrape& scrape) const {
  server::HttpClient client(replicas_[index]->url);
  const auto deadline = server::Clock::now() + options_.health_timeout;
  auto health = client.get("/health", deadline);
  if (!health.ok() || health->status != 200) return false;
  auto metrics = client.get("/metrics", deadline);
  if (!metrics.ok() || metrics->status != 200) return false;
  scrape = parse_replica_metrics(metrics->body);
  return true;
}

void ReplicaPool::apply_check(size_t index, bool ok, const ReplicaScrape& scrape, int64_t own_before) {
  std::lock_guard lock(mutex_);
  Replica& r = *replicas_[index];
  if (!ok) {
    r.consecutive_ok = 0;
    if (++r.consecutive_failures >= options_.eject_after && r.healthy) {
      r.healthy = false;
      r.counters.ejections.fetch_add(1);
      std::fprintf(stderr, "deepinfer router: ejected %s (%d failed health checks)\n", r.name.c_str(), r.consecutive_failures);
    }
    return;
  }
  r.consecutive_failures = 0;
  // A counter that went down means a new process: its cache is empty whatever we recorded.
  const bool restarted = r.checked && scrape.prefix_queries_total < r.last.prefix_queries_total;
  if (r.checked && !restarted) {
    r.counters.actual_hit_tokens.fetch_add(std::max(0.0, scrape.prefix_hits_total - r.last.prefix_hits_total));
  }
  if (restarted) r.index.clear();
  r.last = scrape;
  // The scrape saw the requests in flight at some moment of the check; the larger count leaves
  // the fewest to others (one router alone: none).
  r.own_at_scrape = std::max(own_before, r.in_flight);
  r.checked = true;
  // The first check admits at once: a router starting beside its replicas should not wait
  // readmit_after intervals; a replica that was ejected has to prove itself again.
  const bool first = r.counters.ejections.load() == 0;
  if (!r.healthy && (++r.consecutive_ok >= options_.readmit_after || first)) {
    r.healthy = true;
    r.consecutive_ok = 0;
    r.index.clear();
    if (!first) {
      r.counters.readmissions.fetch_add(1);
      std::fprintf(stderr, "deepinfer router: re-admitted %s\n", r.name.c_str());
    }
  }
}

void ReplicaPool::check_all() {
  // Replicas are checked one after another: with a 1 s timeout and a handful of replicas a
  // round stays well inside the interval, and a thread per replica would buy nothing else.
  for (size_t i = 0; i < replicas_.size(); ++i) {
    int64_t own_before = 0;
    {
      std::lock_guard lock(mutex_);
      own_before = replicas_[i]->in_flight;
    }
    ReplicaScrape scrape;
    const bool ok = check_one(i, scrape);
    apply_check(i, ok, scrape, own_before);
  }
}

void ReplicaPool::start_checks() {
  checker_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      if (stop_cv_.wait_for(lock, options_.health_interval, [this] { return stopping_; })) break;
      lock.unlock();
      check_all();
      lock.lock();
    }
  });
}

std::optional<ReplicaPool::Lease> ReplicaPool::acquire(Policy policy, const std::vector<uint64_t>& keys,
                                                       const CostParams& params, const std::vector<size_t>& excluded) {
  std::lock_guard lock(mutex_);
  std::vector<CandidateView> views(replicas_.size());
  for (size_t i = 0; i < replicas_.size(); ++i) {
    const Replica& r = *replicas_[i];
    CandidateView& v = views[i];
    const bool below_limit = options_.max_in_flight <= 0 || r.in_flight < options_.max_in_flight;
    v.available = r.healthy && below_limit && std::find(excluded.begin(), excluded.end(), i) == excluded.end();
    v.in_flight = r.in_flight;
    const LoadNow now = load_now(r.last, r.own_at_scrape, r.in_flight);
    v.others_queue = now.others_queue;
    v.kv_usage = now.kv_usage;
    v.matched_blocks = r.index.match(keys);  // every policy, so that /metrics compares estimates
    v.routed_total = r.routed_total;
    v.pending_prefill_tokens = r.pending_prefill_tokens;
    v.pending_prefills = r.pending_prefills;
  }
  auto choice = choose(policy, views, keys.size(), params, rr_cursor_);
  if (!choice) return std::nullopt;
  if (choice->reason == Reason::kRoundRobin) rr_cursor_ = choice->index + 1;
  Replica& r = *replicas_[choice->index];
  const double prefill_tokens = tokens_of_blocks(keys.size() - std::min(keys.size(), choice->matched_blocks));
  ++r.in_flight;
  ++r.routed_total;
  r.pending_prefill_tokens += prefill_tokens;
  ++r.pending_prefills;
  r.index.insert(keys);
  decisions_[static_cast<size_t>(choice->reason)].fetch_add(1);
  r.counters.requests.fetch_add(1);
  r.counters.estimated_hit_tokens.fetch_add(tokens_of_blocks(choice->matched_blocks));
  return Lease{choice->index, *choice, prefill_tokens, false};
}

void ReplicaPool::end_prefill(Replica& r, Lease& lease) {
  if (lease.answering) return;
  lease.answering = true;
  // Sums of doubles drift; the count says when nothing is pending.
  r.pending_prefill_tokens = --r.pending_prefills == 0 ? 0.0 : std::max(0.0, r.pending_prefill_tokens - lease.prefill_tokens);
}

void ReplicaPool::answering(Lease& lease) {
  std::lock_guard lock(mutex_);
  end_prefill(*replicas_[lease.index], lease);
}

void ReplicaPool::release(Lease& lease) {
  std::lock_guard lock(mutex_);
  Replica& r = *replicas_[lease.index];
  end_prefill(r, lease);
  --r.in_flight;
}

void ReplicaPool::report_unreachable(size_t index) {
  std::lock_guard lock(mutex_);
  Replica& r = *replicas_[index];
  r.counters.failures.fetch_add(1);
  r.consecutive_ok = 0;
  r.consecutive_failures = std::max(r.consecutive_failures, options_.eject_after);
  if (r.healthy) {
    r.healthy = false;
    r.counters.ejections.fetch_add(1);
    std::fprintf(stderr, "deepinfer router: ejected %s (unreachable)\n", r.name.c_str());
  }
}

std::vector<ReplicaSnapshot> ReplicaPool::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<ReplicaSnapshot> out;
  for (const auto& r : replicas_) {
    out.push_back({r->name, r->healthy, r->in_flight, r->pending_prefill_tokens, r->index.size()});
  }
  return out;
}

}  // namespace deepinfer::router
