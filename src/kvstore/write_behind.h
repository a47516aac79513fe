// WriteBehind: puts pages into a PageStore on a thread of its own, so that whoever produces
// them (the engine thread) never waits on a disk. The queue is bounded in bytes: a page that
// would pass the bound is dropped and counted, never waited for, since a store write is only
// ever an optimisation. Destruction writes what is queued, then stops (a clean shutdown keeps
// its pages). Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kvstore/page_store.h"

namespace deepinfer::kvstore {

struct WriteBehindStats {
  int64_t queued = 0;         // pages accepted
  int64_t dropped = 0;        // pages refused because the queue was full
  int64_t pending_bytes = 0;  // payload bytes waiting now
};

class WriteBehind {
 public:
  WriteBehind(PageStore& store, int64_t max_pending_bytes);
  ~WriteBehind();
  WriteBehind(const WriteBehind&) = delete;
  WriteBehind& operator=(const WriteBehind&) = delete;

  // False (counted in dropped) when the queue holds too many bytes to take it.
  bool submit(const PageKey& key, PageMeta meta, std::shared_ptr<const std::vector<uint8_t>> payload);
  // Whether a page of `bytes` would be taken now (a hint: submit() decides).
  bool has_room(int64_t bytes) const;
  // Waits until every page accepted so far is written (or failed).
  void flush();
  WriteBehindStats stats() const;

 private:
  struct Job {
    PageKey key;
    PageMeta meta;
    std::shared_ptr<const std::vector<uint8_t>> payload;
  };
  void loop();

  PageStore& store_;
  const int64_t max_pending_bytes_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;       // work arrived, or stop
  std::condition_variable idle_cv_;  // the queue drained
  std::deque<Job> jobs_;
  bool busy_ = false;
  bool stop_ = false;
  WriteBehindStats stats_;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace deepinfer::kvstore
