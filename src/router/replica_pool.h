// The replicas behind the router: their health, their load, and what the router sent them.
//
// Health: a checker thread asks each replica's /health and /metrics every interval. After
// `eject_after` failed checks in a row a replica is ejected (no new requests); after
// `readmit_after` good checks in a row it is re-admitted, with its prefix index cleared (a
// replica that came back has an empty cache). A request that cannot even connect ejects its
// replica at once: a refused connection is not a slow replica, and waiting for the next check
// would send it more requests to fail over.
//
// Load: acquire() picks a replica and raises its in-flight count in the same critical section,
// so two requests arriving together see each other (load counted at dispatch); release()
// lowers it when the answer ends, however it ends. The request's expected uncached prompt
// tokens count as the replica's pending prefill from acquire() until answering() (the first
// byte back: a replica streams from its first token on) or release(), whichever comes first.
//
// Threading: every member is safe from any thread; one mutex guards the routing state (the
// decision is a few microseconds of arithmetic per replica), the counters are atomics.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "router/cost_model.h"
#include "router/prefix_index.h"
#include "server/http_client.h"

namespace deepinfer::router {

struct ReplicaOptions {
  int64_t max_in_flight = 64;  // per replica; 0: no limit
  size_t index_blocks = size_t{1} << 16;  // routing blocks remembered per replica (64 B each)
  std::chrono::milliseconds health_interval{1000};
  std::chrono::milliseconds health_timeout{1000};
  int eject_after = 2;
  int readmit_after = 2;
};

// What the router reads from a replica's /metrics (Prometheus text).
struct ReplicaScrape {
  double running = 0;
  double waiting = 0;
  double kv_usage = 0;
  double prefix_queries_total = 0;  // deepinfer:prefix_cache_queries_total
  double prefix_hits_total = 0;     // deepinfer:prefix_cache_hits_total
};
ReplicaScrape parse_replica_metrics(std::string_view text);

// What a scrape still says about a replica now. `own_at_scrape` is this router's in-flight
// count there when the scrape was taken, `own_now` its count now. The scrape's requests beyond
// the router's own are someone else's (kept: their end is not seen here). Its KV usage is held
// by the requests it counted, so it is scaled by the share of them still in flight (at most 1:
// the blocks of requests sent since are not known).
struct LoadNow {
  double others_queue = 0;
  double kv_usage = 0;
};
LoadNow load_now(const ReplicaScrape& scrape, int64_t own_at_scrape, int64_t own_now);

// Monotonic counts per replica, for /metrics.
struct ReplicaCounters {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> ejections{0};
  std::atomic<uint64_t> readmissions{0};
  std::atomic<double> estimated_hit_tokens{0};
  std::atomic<double> actual_hit_tokens{0};
};

struct ReplicaSnapshot {
  std::string name;
  bool healthy = false;
  int64_t in_flight = 0;
  double pending_prefill_tokens = 0;
  size_t index_blocks = 0;
};

class ReplicaPool {
 public:
  ReplicaPool(std::vector<server::HttpUrl> urls, std::vector<std::string> names, ReplicaOptions options);
  ~ReplicaPool();  // stops the checker
  ReplicaPool(const ReplicaPool&) = delete;
  ReplicaPool& operator=(const ReplicaPool&) = delete;

  // One round of checks on every replica, on the calling thread.
  void check_all();
  // Starts the checker thread (one round per health_interval).
  void start_checks();

  struct Lease {
    size_t index = 0;
    Choice choice;
    double prefill_tokens = 0;  // counted as the replica's pending prefill until answering()
    bool answering = false;
  };
  // Picks a replica for a request with these routing keys among the available ones not in
  // `excluded`, raises its in-flight count, and records the keys in its prefix index (the
  // placement made, so the next request of the conversation follows it). nullopt: none is
  // available (all ejected, excluded or at their limit).
  std::optional<Lease> acquire(Policy policy, const std::vector<uint64_t>& keys, const CostParams& params,
                               const std::vector<size_t>& excluded);
  // The replica has begun to answer: the lease's prefill is done (idempotent).
  void answering(Lease& lease);
  void release(Lease& lease);
  // The replica refused the connection or dropped it without an answer: eject it now.
  void report_unreachable(size_t index);

  size_t size() const { return replicas_.size(); }
  const server::HttpUrl& url(size_t index) const;
  const std::string& name(size_t index) const;
  ReplicaCounters& counters(size_t index);
  std::vector<ReplicaSnapshot> snapshot() const;
  uint64_t decisions(Reason reason) const { return decisions_[static_cast<size_t>(reason)].load(); }

 private:
  struct Replica;
  // own_before: the router's in-flight count at the replica when the check began.
  void apply_check(size_t index, bool ok, const ReplicaScrape& scrape, int64_t own_before);
  void end_prefill(Replica& r, Lease& lease);  // with mutex_ held
  bool check_one(size_t index, ReplicaScrape& scrape) const;

  ReplicaOptions options_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  mutable std::mutex mutex_;
  uint64_t rr_cursor_ = 0;
  std::atomic<uint64_t> decisions_[kNumReasons] = {};
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::thread checker_;
};

}  // namespace deepinfer::router
