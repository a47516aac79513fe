// What the bench commands share (bench_measure.cpp), and bench ops itself (cmd_bench_ops.cpp).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "core/thread_pool.h"

namespace deepinfer::cli {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t);

// CPU seconds this process has used. With one thread on a shared machine it measures the work
// done whatever share of a core the scheduler gave (wall-clock does not); with more threads it
// also counts the workers' spinning.
double process_cpu_seconds();

double median(std::vector<double> v);

// STREAM triad a = b + s * c over arrays far larger than the caches, split over the pool's
// threads; bytes moved = 3 arrays (two read, one written; write-allocate traffic not counted,
// as STREAM does). Median of reps, in GB/s.
double triad_bandwidth(ThreadPool& pool, int reps);

// deepinfer bench ops [--backend NAME] [--threads N] [--reps R] [--filter TEXT]: the op
// harness's perf cases (cmd_bench_ops.cpp); the exit code.
int bench_ops_command(const std::vector<std::string>& args);

// deepinfer bench grammar --data DIR [...]: JSON Schema compile and mask times over MaskBench-format
// files (cmd_bench_grammar.cpp); the exit code.
int bench_grammar_command(const std::vector<std::string>& args);

// deepinfer bench serve --url URL [...]: the serving benchmark of `vllm bench serve` against a
// running server (cmd_bench_serve.cpp); the exit code.
int bench_serve_command(const std::vector<std::string>& args);

}  // namespace deepinfer::cli
