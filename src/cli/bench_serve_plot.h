// The SVG that `deepinfer bench serve --sweep-concurrency ... --plot FILE` writes: latency
// (TTFT p50 and p99, TPOT p50) and output throughput against the concurrency, one panel each,
// the concurrency on a log2 axis. Standard library only; the same points, the same bytes.
#pragma once

#include <string>
#include <vector>

namespace deepinfer::cli {

struct SweepPoint {
  double concurrency = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0, tpot_p50_ms = 0;
  double output_throughput = 0;
};

std::string sweep_svg(const std::string& title, const std::vector<SweepPoint>& points);

}  // namespace deepinfer::cli
