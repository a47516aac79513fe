#include "backend/cpu/peak.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string_view>

#include "backend/cpu/quant.h"
#include "backend/cpu/quant_kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

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
  // cpuid leaf 7: subleaf 0 EDX bits 22, 24, 25 are AMX-BF16, AMX-TILE, AMX-INT8; subleaf 1 EAX
  // bit 5 is AVX512-BF16 (read directly: not every compiler's __builtin_cpu_supports knows them).
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const unsigned max_subleaf = eax;
  p.amx = (edx >> 22 & 1) && (edx >> 24 & 1) && (edx >> 25 & 1);
  bool bf16 = false;
  if (max_subleaf >= 1) {
    __cpuid_count(7, 1, eax, ebx, ecx, edx);
    bf16 = (eax >> 5) & 1;
  }
  // The peak of the tier the kernels run on (DEEPINFER_ISA caps it).
  const std::string_view tier = kernel_isa();
  if (tier == "avx2") {
    p.f32_gflops = rate_on_all_threads(pool, avx2::peak_f32_fma) / 1e9;
    p.int8_gops = rate_on_all_threads(pool, avx2::peak_int8_dot) / 1e9;
    return p;
  }
  if (tier != "avx512") return p;
  p.f32_gflops = rate_on_all_threads(pool, avx512::peak_f32_fma) / 1e9;
  p.int8_gops = rate_on_all_threads(pool, avx512::peak_int8_dot) / 1e9;
  if (avx512::compiled_bf16() && bf16) {
    p.bf16_gflops = rate_on_all_threads(pool, avx512::peak_bf16_dot) / 1e9;
  }
#else
  (void)pool;
#endif
  return p;
}

}  // namespace deepinfer::cpu
