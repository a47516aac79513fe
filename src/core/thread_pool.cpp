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

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)), claimed_(std::make_unique<std::atomic<uint64_t>[]>(n_threads_)) {
  for (int i = 0; i < n_threads_; ++i) claimed_[i].store(0);
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
  if (job_chunk_ > 0) {
    for (int64_t c = next_chunk_.fetch_add(1); c * job_chunk_ < job_n_; c = next_chunk_.fetch_add(1)) {
      (*job_)(index, c * job_chunk_, std::min(job_n_, (c + 1) * job_chunk_));
    }
    return;
  }
  const int64_t n_blocks = (job_n_ + job_grain_ - 1) / job_grain_;
  const int64_t per = n_blocks / n_threads_;
  const int64_t extra = n_blocks % n_threads_;
  const int64_t first = index * per + std::min<int64_t>(index, extra);
  const int64_t count = per + (index < extra ? 1 : 0);
  const int64_t begin = std::min(job_n_, first * job_grain_);
  const int64_t end = std::min(job_n_, (first + count) * job_grain_);
  if (begin < end) (*job_)(index, begin, end);
}

bool ThreadPool::claim(int index, uint64_t generation) {
  // Only ever raised: a worker still holding an older call's generation cannot take a range of a
  // newer call, nor one the caller took in this call.
  uint64_t cur = claimed_[index].load();
  while (cur < generation) {
    if (claimed_[index].compare_exchange_weak(cur, generation)) return true;
  }
  return false;
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  if (n_threads_ == 1 || n <= grain) {
    fn(0, 0, n);
    return;
  }
  start(n, fn, grain, 0);
}

void ThreadPool::parallel_chunks(int64_t n, int64_t chunk, const RangeFn& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(1, chunk);
  if (n_threads_ == 1 || n <= chunk) {
    for (int64_t begin = 0; begin < n; begin += chunk) fn(0, begin, std::min(n, begin + chunk));
    return;
  }
  start(n, fn, 1, chunk);
}

// One call's fan-out: the caller runs range 0 (or takes chunks until none is left), then every
// range no worker has claimed, then waits for the workers that did.
void ThreadPool::start(int64_t n, const RangeFn& fn, int64_t grain, int64_t chunk) {
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  job_chunk_ = chunk;
  next_chunk_.store(0, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation = generation_.fetch_add(1, std::memory_order_release) + 1;
  }
  wake_.notify_all();
  run_range(0);
  for (int i = 1; i < n_threads_; ++i) {
    if (claim(i, generation)) {
      run_range(i);
      pending_.fetch_sub(1);
    }
  }
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0 && spins < kSpinIterations; ++spins) cpu_relax();
  if (pending_.load(std::memory_order_acquire) != 0) {
    // Sequentially consistent on both sides (this store then the load in the predicate; the
    // worker's decrement then its load of caller_waiting_): one of the two sees the other.
    std::unique_lock<std::mutex> lock(mutex_);
    caller_waiting_.store(true);
    done_.wait(lock, [&] { return pending_.load() == 0; });
    caller_waiting_.store(false);
  }
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
    if (!claim(index, seen)) continue;  // the caller ran it
    run_range(index);
    if (pending_.fetch_sub(1) == 1 && caller_waiting_.load()) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
  }
}

}  // namespace deepinfer
