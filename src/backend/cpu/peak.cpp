#include "backend/cpu/peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "backend/cpu/quant_kernels.h"

namespace deepinfer::cpu {

namespace {

// Operations per second of `round` (which returns the operations it did) run on every thread at
// once: the best of three rounds of about 30 ms.
template <typename Round>
double rate_on_all_threads(ThreadPool& pool, Round round) {
  constexpr long kIterations = 2'000'000;  // 24 M instructions per thread, ~10-30 ms
  double best = 0.0;
  for (int r = 0; r < 3; ++r) {
    std::atomic<double> ops{0.0};
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(pool.n_threads(), [&](int, int64_t begin, int64_t end) {
      double mine = 0.0;
      for (int64_t i = begin; i < end; ++i) mine += round(kIterations);
      ops.fetch_add(mine);
    }, 1);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, ops.load() / s);
  }
  return best;
}

}  // namespace

PeakRates measure_peak_rates(ThreadPool& pool) {
  PeakRates p;
#if defined(__x86_64__)
  __builtin_cpu_init();
  p.amx = __builtin_cpu_supports("amx-tile") && __builtin_cpu_supports("amx-int8") &&
          __builtin_cpu_supports("amx-bf16");
  if (!cpu_has(Isa::kAvx512)) return p;  // the AVX-512 tier is the one whose peak is measured
  p.f32_gflops = rate_on_all_threads(pool, avx512::peak_f32_fma) / 1e9;
  p.int8_gops = rate_on_all_threads(pool, avx512::peak_int8_dot) / 1e9;
  if (avx512::compiled_bf16() && __builtin_cpu_supports("avx512bf16")) {
    p.bf16_gflops = rate_on_all_threads(pool, avx512::peak_bf16_dot) / 1e9;
  }
#else
  (void)pool;
#endif
  return p;
}

}  // namespace deepinfer::cpu
