#include "core/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace deepinfer {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}
constexpr int kSpinIterations = 20000;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::default_threads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

void ThreadPool::run_range(int index) {
  const int64_t n_blocks = (job_n_ + job_grain_ - 1) / job_grain_;
  const int64_t per = n_blocks / n_threads_;
  const int64_t extra = n_blocks % n_threads_;
  const int64_t first = index * per + std::min<int64_t>(index, extra);
  const int64_t count = per + (index < extra ? 1 : 0);
  const int64_t begin = std::min(job_n_, first * job_grain_);
  const int64_t end = std::min(job_n_, (first + count) * job_grain_);
  if (begin < end) (*job_)(index, begin, end);
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, 0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_range(0);
  while (pending_.load(std::memory_order_acquire) != 0) cpu_relax();
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  while (true) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinIterations) {
      cpu_relax();
      ++spins;
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    run_range(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace deepinfer
