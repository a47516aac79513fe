#include "kvstore/write_behind.h"

namespace deepinfer::kvstore {

WriteBehind::WriteBehind(PageStore& store, int64_t max_pending_bytes)
    : store_(store), max_pending_bytes_(max_pending_bytes), thread_([this] { loop(); }) {}

WriteBehind::~WriteBehind() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool WriteBehind::submit(const PageKey& key, PageMeta meta, std::shared_ptr<const std::vector<uint8_t>> payload) {
  const auto bytes = static_cast<int64_t>(payload->size());
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // One page always fits an empty queue, however small the bound.
    if (!jobs_.empty() && stats_.pending_bytes + bytes > max_pending_bytes_) {
      ++stats_.dropped;
      return false;
    }
    jobs_.push_back({key, std::move(meta), std::move(payload)});
    stats_.pending_bytes += bytes;
    ++stats_.queued;
  }
  cv_.notify_all();
  return true;
}

bool WriteBehind::has_room(int64_t bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return jobs_.empty() || stats_.pending_bytes + bytes <= max_pending_bytes_;
}

void WriteBehind::flush() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_cv_.wait(lock, [&] { return jobs_.empty() && !busy_; });
}

WriteBehindStats WriteBehind::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void WriteBehind::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stop_, and everything queued is written
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    busy_ = true;
    lock.unlock();
    // A failure is counted by the store (write_failures); nobody waits for it.
    (void)store_.put(job.key, job.meta, job.payload);
    lock.lock();
    busy_ = false;
    stats_.pending_bytes -= static_cast<int64_t>(job.payload->size());
    if (jobs_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace deepinfer::kvstore
