// Shared by the bench subcommands: the memory-bandwidth triad every report starts from
// (cmd_bench.cpp) and `bench ops` (cmd_bench_ops.cpp), which bench_command hands its arguments.
#pragma once

#include <string>
#include <vector>

#include "core/thread_pool.h"

namespace deepinfer::cli {

// STREAM triad a = b + s * c over arrays far larger than the caches, split over the pool's
// threads: GB/s, the median of max(reps, 3) runs.
double triad_bandwidth(ThreadPool& pool, int reps);

// deepinfer bench ops [--backend NAME] [--threads N] [--reps R] [--filter TEXT]
int bench_ops_command(const std::vector<std::string>& args);

}  // namespace deepinfer::cli
