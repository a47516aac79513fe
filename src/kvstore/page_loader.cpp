#include "kvstore/page_loader.h"

#include <chrono>

namespace deepinfer::kvstore {

PageLoader::PageLoader(PageStore& store, Done done) : store_(store), done_(std::move(done)), thread_([this] { loop(); }) {}

PageLoader::~PageLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void PageLoader::submit(uint64_t tag, std::vector<PageKey> keys, std::vector<PageMeta> metas) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back({tag, std::move(keys), std::move(metas)});
  }
  cv_.notify_all();
}

void PageLoader::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    const auto t0 = std::chrono::steady_clock::now();
    LoadResult result;
    result.tag = job.tag;
    for (size_t i = 0; i < job.keys.size(); ++i) {
      Result<Page> page = store_.get(job.keys[i], job.metas[i]);
      if (!page.ok()) break;
      result.pages.push_back(std::move(*page));
    }
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    done_(std::move(result));
    lock.lock();
  }
}

}  // namespace deepinfer::kvstore
