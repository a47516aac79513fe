// Measurements the bench commands share: wall and CPU clocks, medians, and the memory bandwidth
// of a STREAM-like triad that every figure is printed beside.
#include "cli/bench.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

namespace deepinfer::cli {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double triad_bandwidth(ThreadPool& pool, int reps) {
  const int64_t n = int64_t{32} << 20;  // 3 x 128 MiB of floats
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n), 1.0f), c(static_cast<size_t>(n), 2.0f);
  const float s = 3.0f;
  auto triad = [&] {
    pool.parallel_for(
        n,
        [&](int, int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
        },
        4096);
  };
  triad();  // first touch
  std::vector<double> gbs;
  for (int r = 0; r < std::max(reps, 3); ++r) {
    const auto t = Clock::now();
    triad();
    gbs.push_back(3.0 * 4.0 * static_cast<double>(n) / seconds_since(t) / 1e9);
  }
  if (a[12345] != 7.0f) std::fprintf(stderr, "deepinfer: triad check failed\n");
  return median(gbs);
}

}  // namespace deepinfer::cli
