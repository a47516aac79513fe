// ForwardWorker: one thread that runs the engine's forward passes, so the engine thread can do
// the next step's bookkeeping (admitting submissions, applying cancellations) meanwhile.
//
// launch() hands over one job; wait() returns its Status. One job at a time, launched and
// waited for by the engine thread only. The job may use the engine's ThreadPool: the engine
// thread leaves the pool alone until wait() returns.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "deepinfer/status.h"

namespace deepinfer {

class ForwardWorker {
 public:
  ForwardWorker() : thread_([this] { loop(); }) {}
  ~ForwardWorker() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  ForwardWorker(const ForwardWorker&) = delete;
  ForwardWorker& operator=(const ForwardWorker&) = delete;

  void launch(std::function<Status()> job) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = std::move(job);
      result_.reset();
    }
    cv_.notify_all();
  }

  Status wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return result_.has_value(); });
    Status s = std::move(*result_);
    result_.reset();
    return s;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || job_ != nullptr; });
      if (stop_) return;
      std::function<Status()> job = std::move(job_);
      job_ = nullptr;
      lock.unlock();
      Status s = job();
      lock.lock();
      result_ = std::move(s);
      cv_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::function<Status()> job_;
  std::optional<Status> result_;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace deepinfer
