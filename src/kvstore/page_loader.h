// PageLoader: reads runs of consecutive pages from a PageStore on a thread of its own, so that
// a request whose prefix is in the store waits for the disk without holding up anyone else.
// A job names the pages of one prefix in order; the loader reads them until the first miss (a
// later page is useless without the ones before it) and hands the pages found to the job's
// callback, on the loader thread. Destruction abandons queued jobs (their callbacks never
// run) after the one in progress. Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kvstore/page_store.h"

namespace deepinfer::kvstore {

struct LoadResult {
  uint64_t tag = 0;          // the job's
  std::vector<Page> pages;   // the leading pages found, in order
  double seconds = 0.0;      // reading and verifying them
};

class PageLoader {
 public:
  using Done = std::function<void(LoadResult)>;
  PageLoader(PageStore& store, Done done);
  ~PageLoader();
  PageLoader(const PageLoader&) = delete;
  PageLoader& operator=(const PageLoader&) = delete;

  // `metas[i]` is what page keys[i] must hold.
  void submit(uint64_t tag, std::vector<PageKey> keys, std::vector<PageMeta> metas);

 private:
  struct Job {
    uint64_t tag;
    std::vector<PageKey> keys;
    std::vector<PageMeta> metas;
  };
  void loop();

  PageStore& store_;
  Done done_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::thread thread_;  // last
};

}  // namespace deepinfer::kvstore
