// A pool of persistent worker threads for data-parallel kernels.
//
// parallel_for splits [0, n) into one contiguous range per thread and runs them at once, the
// calling thread taking the first range; it returns when all ranges are done. Workers spin
// briefly before sleeping, so the back-to-back calls of a forward pass do not pay a futex wake
// per op. The caller, done with its range, runs every range no worker has started yet (a worker
// claims its range before running it; the ranges and their thread indices stay the same, so no
// result depends on who ran them), then spins briefly and sleeps until the last range is done.
// On a machine where another process holds a core, a descheduled worker then costs the region
// its share of the work, not a scheduler time slice (2-thread decode ran 30x slower than 1-thread
// before). One caller at a time: the pool is owned by the thread that runs the model.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace deepinfer {

class ThreadPool {
 public:
  // fn(thread_index, begin, end) processes the half-open range [begin, end).
  using RangeFn = std::function<void(int, int64_t, int64_t)>;

  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int n_threads() const { return n_threads_; }

  // Ranges are aligned to `grain` elements (except the last) so block-quantized rows or cache
  // lines are not split between threads.
  void parallel_for(int64_t n, const RangeFn& fn, int64_t grain = 1);

  // [0, n) in chunks of `chunk` elements (the last shorter), each taken in order by whichever
  // thread is free, fn(thread_index, begin, end) once per chunk: for work whose cost per element
  // varies, or whose threads another process may hold up, where equal ranges would leave one
  // thread waiting on the other. A thread's chunks are increasing but not contiguous; fn must not
  // depend on which thread runs a chunk except through that thread's scratch.
  void parallel_chunks(int64_t n, int64_t chunk, const RangeFn& fn);

  // Default thread count: the number of online CPUs.
  static int default_threads();

 private:
  void worker_loop(int index);
  void run_range(int index);
  void start(int64_t n, const RangeFn& fn, int64_t grain, int64_t chunk);
  // Whether this thread is the first to take range `index` of call `generation`.
  bool claim(int index, uint64_t generation);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::unique_ptr<std::atomic<uint64_t>[]> claimed_;  // per range: the last call that took it
  std::condition_variable done_;         // the last range finished (caller_waiting_ was set)
  std::atomic<bool> caller_waiting_{false};
  const RangeFn* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_grain_ = 1;
  int64_t job_chunk_ = 0;  // > 0: parallel_chunks' call, whose chunks next_chunk_ hands out
  std::atomic<int64_t> next_chunk_{0};
};

}  // namespace deepinfer
