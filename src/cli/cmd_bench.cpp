// deepinfer bench: kernel and whole-model speeds on this machine, beside its measured memory
// bandwidth (a STREAM-like triad), so a figure can be read against what the hardware allows.
//
//   bench ops    the op harness's perf cases on one backend (cmd_bench_ops.cpp): GB/s of the
//                memory-bound ops (one-token products, decode attention), GFLOP/s of the others
//   bench model  prefill and decode tokens per second of one model, and decode against the
//                bandwidth bound (weight bytes read per token / measured bandwidth)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "backend/cpu/quant.h"
#include "cli/args.h"
#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/loading.h"
#include "core/thread_pool.h"

namespace deepinfer::cli {

namespace {

const char* kBenchUsage = R"(usage: deepinfer bench ops [--backend NAME] [--threads N] [--reps R] [--filter TEXT]
       deepinfer bench model [-m MODEL] [--threads N] [--reps R] [--prompt N] [--gen N]
  ops      the op harness's perf cases on one backend (default cpu): matrix products of every
           weight format (decode: 1 token, GB/s of weights read; prefill: 256 tokens, GFLOP/s),
           batched decode attention (64 sequences x 320 keys, GB/s of KV), elementwise, KV and
           MoE ops, with the memory bandwidth measured by a triad (bench ops --help)
  model    prefill (--prompt tokens, default 512) and decode (--gen tokens, default 128) tok/s,
           median of --reps runs (default 3), and decode against the memory-bandwidth bound
  --threads N  CPU threads (default: all cores)
  --reps R     repetitions; the median is reported
  The kernel tier (avx512, avx2, scalar) is chosen from cpuid; DEEPINFER_ISA=avx2|scalar caps it.
)";

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// CPU seconds this process has used. With one thread on a shared machine it measures the work
// done whatever share of a core the scheduler gave (wall-clock does not); with more threads it
// also counts the workers' spinning.
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

}  // namespace

// STREAM triad a = b + s * c over arrays far larger than the caches, split over the pool's
// threads; bytes moved = 3 arrays (two read, one written; write-allocate traffic not counted,
// as STREAM does). Median of reps, in GB/s.
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

namespace {

// Weight bytes one decode step reads: every tensor once, except the token embedding, of which
// one row is read, unless the output projection is tied to it (then all of it is). KV-cache
// reads are left out (small at the short contexts this measures).
double bytes_per_token(const Model& model) {
  double total = 0.0;
  const TensorView* embd = nullptr;
  bool has_output = false;
  for (const TensorView& t : model.source().tensors()) {
    total += static_cast<double>(t.n_bytes);
    if (t.name == "token_embd.weight") embd = &t;
    if (t.name == "output.weight") has_output = true;
  }
  if (embd && has_output) total -= static_cast<double>(embd->n_bytes - embd->row_bytes());
  return total;
}

int bench_model(const std::optional<std::string>& model_arg, int threads, int reps, int64_t n_prompt, int64_t n_gen) {
  auto loaded = load_model(model_arg, threads);
  if (!loaded.ok()) return fail(loaded.status().message());
  const Model& model = *loaded->model;
  ThreadPool& pool = *loaded->pool;
  const double bw = triad_bandwidth(pool, reps);
  const int64_t n_vocab = model.config().n_vocab;
  // Fixed ids spread over the vocabulary: tokenization is not timed, and every run sees the
  // same tokens. Decode feeds fixed ids too, so sampling is not timed either.
  std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
  for (int64_t i = 0; i < n_prompt; ++i) prompt[i] = static_cast<int32_t>((1000 + 7919 * i) % n_vocab);
  std::vector<double> pre_tps, dec_tps, pre_cpu_tps, dec_cpu_tps;
  for (int r = 0; r < reps; ++r) {
    auto context = model.new_context(n_prompt + n_gen + 1, DType::kF16);  // the CLI's default cache
    if (!context.ok()) return fail(context.status().message());
    InferenceContext& ctx = **context;
    auto t = Clock::now();
    double cpu = process_cpu_seconds();
    if (Status st = ctx.eval(prompt, LogitsMode::kLast); !st.ok()) return fail(st.message());
    pre_tps.push_back(static_cast<double>(n_prompt) / seconds_since(t));
    pre_cpu_tps.push_back(static_cast<double>(n_prompt) / (process_cpu_seconds() - cpu));
    t = Clock::now();
    cpu = process_cpu_seconds();
    for (int64_t i = 0; i < n_gen; ++i) {
      const int32_t token = static_cast<int32_t>((17 + 104729 * i) % n_vocab);
      if (Status st = ctx.eval(std::span<const int32_t>(&token, 1), LogitsMode::kLast); !st.ok()) {
        return fail(st.message());
      }
    }
    if (n_gen > 0) {
      dec_tps.push_back(static_cast<double>(n_gen) / seconds_since(t));
      dec_cpu_tps.push_back(static_cast<double>(n_gen) / (process_cpu_seconds() - cpu));
    }
  }
  const double bytes = bytes_per_token(model);
  const double bound = bw * 1e9 / bytes;
  std::printf("model: %s\n", loaded->path.c_str());
  std::printf("kernels: %s | threads: %d | memory bandwidth (triad): %.1f GB/s\n", cpu::kernel_isa(), threads, bw);
  std::printf("prefill: %lld tokens, %.1f tok/s (median of %d); per CPU second: %.1f tok\n",
              static_cast<long long>(n_prompt), median(pre_tps), reps, median(pre_cpu_tps));
  if (!dec_tps.empty()) {
    const double dec = median(dec_tps);
    std::printf("decode:  %lld tokens, %.1f tok/s (median of %d); per CPU second: %.1f tok\n",
                static_cast<long long>(n_gen), dec, reps, median(dec_cpu_tps));
    std::printf("decode bound: %.1f MB of weights per token -> %.1f tok/s at %.1f GB/s; reached %.0f%%\n", bytes / 1e6,
                bound, bw, 100.0 * dec / bound);
  }
  return 0;
}

}  // namespace

int bench_command(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h") {
    std::fputs(kBenchUsage, argv.empty() ? stderr : stdout);
    return argv.empty() ? 2 : 0;
  }
  const std::string what = argv[0];
  if (what == "ops") return bench_ops_command(std::vector<std::string>(argv.begin() + 1, argv.end()));
  if (what != "model") return fail("unknown bench '" + what + "'\n" + kBenchUsage, 2);
  FlagSpec spec;
  spec.with_value = {"--model", "--threads", "--reps", "--prompt", "--gen"};
  spec.switches = {"--help"};
  spec.aliases = {{"-m", "--model"}, {"-t", "--threads"}, {"-h", "--help"}};
  auto parsed = Args::parse(std::vector<std::string>(argv.begin() + 1, argv.end()), spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + kBenchUsage, 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(kBenchUsage, stdout);
    return 0;
  }
  auto threads = args.get_int("--threads", ThreadPool::default_threads());
  auto reps = args.get_int("--reps", 3);
  auto n_prompt = args.get_int("--prompt", 512);
  auto n_gen = args.get_int("--gen", 128);
  for (const Status& s : {threads.status(), reps.status(), n_prompt.status(), n_gen.status()}) {
    if (!s.ok()) return fail(s.message(), 2);
  }
  if (*threads < 1 || *threads > 1024) return fail("--threads must be between 1 and 1024", 2);
  if (*reps < 1 || *n_prompt < 1 || *n_gen < 0) return fail("--reps and --prompt must be >= 1, --gen >= 0", 2);
  return bench_model(args.get("--model"), static_cast<int>(*threads), static_cast<int>(*reps), *n_prompt, *n_gen);
}

}  // namespace deepinfer::cli
