// deepinfer bench ops: the op harness's perf table (backend/op_harness.h, CaseSet::kPerf) on one
// backend, through the Queue as a model runs it: per case the median time of --reps runs of the
// op and its rate, GB/s for the memory-bound cases (one-token products: weight bytes; decode
// attention: KV bytes read; elementwise ops: bytes in and out) and GFLOP/s for the others,
// beside the memory bandwidth the triad measures.
#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/op_harness.h"
#include "cli/args.h"
#include "cli/bench.h"
#include "cli/commands.h"
#include "core/thread_pool.h"

namespace deepinfer::cli {

namespace {

namespace harness = backend::harness;

const char* kBenchOpsUsage = R"(usage: deepinfer bench ops [--backend NAME] [--threads N] [--reps R] [--filter TEXT]
  Times the op harness's perf cases on one backend: matrix products of every weight format
  (decode: 1 token x 8192 x 4096, GB/s of weights read; prefill: 256 tokens x 2048 x 2048,
  GFLOP/s), batched decode attention (64 sequences x 320 keys, SmolLM2's heads, paged f16 KV:
  GB/s of KV read), prefill attention, and the elementwise, KV and MoE ops; after a line with
  the memory bandwidth measured by a triad and the arithmetic peak measured the same way (float32
  FMA, int8 and bf16 dot rates of the kernel tier on every thread). Each figure is the median of the
  repetitions; "of peak" reads it against the triad (memory-bound cases), the int8 rate
  (products of quantized weights) or the float32 rate (the rest).
  --backend NAME  the backend to time (default cpu; cpu-reference times the scalar oracle)
  --threads N     CPU threads (default: all cores)
  --reps R        repetitions per case (default 5)
  --filter TEXT   only the cases whose "op name" label contains TEXT
  The CPU kernel tier (avx512, avx2, scalar) is chosen from cpuid; DEEPINFER_ISA=avx2|scalar caps it.
)";

// The peak a compute-bound case is read against: the int8 rate for products of quantized weights
// (their kernels multiply quantized activations), the float32 rate for everything else.
double peak_for(const harness::OpCase& c, const backend::PeakRates& peak) {
  const bool product =
      c.op == backend::Op::kMatmul || c.op == backend::Op::kMatmulArgmax || c.op == backend::Op::kGroupedMatmul;
  if (product && !c.uses.empty()) {
    const auto traits = dtype_traits(c.uses[0].dtype);
    if (traits && traits->quantized) return peak.int8_gops;
  }
  return peak.f32_gflops;
}

std::string describe_peak(const backend::PeakRates& p) {
  if (p.f32_gflops <= 0.0) return "not measured on this backend or kernel tier";
  char buf[256];
  std::snprintf(buf, sizeof buf, "f32 FMA %.0f GFLOP/s | int8 dot %.0f GOP/s", p.f32_gflops, p.int8_gops);
  std::string out = buf;
  if (p.bf16_gflops > 0.0) out += " | bf16 dot " + std::to_string(static_cast<int>(p.bf16_gflops)) + " GFLOP/s";
  if (!p.note.empty()) out += " | " + p.note;
  return out;
}

}  // namespace

int bench_ops_command(const std::vector<std::string>& argv) {
  FlagSpec spec;
  spec.with_value = {"--backend", "--threads", "--reps", "--filter"};
  spec.switches = {"--help"};
  spec.aliases = {{"-t", "--threads"}, {"-h", "--help"}};
  auto parsed = Args::parse(argv, spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + kBenchOpsUsage, 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(kBenchOpsUsage, stdout);
    return 0;
  }
  if (!args.positional().empty()) {
    return fail("bench ops takes no model or other arguments\n" + std::string(kBenchOpsUsage), 2);
  }
  auto threads = args.get_int("--threads", ThreadPool::default_threads());
  auto reps = args.get_int("--reps", 5);
  for (const Status& s : {threads.status(), reps.status()}) {
    if (!s.ok()) return fail(s.message(), 2);
  }
  if (*threads < 1 || *threads > 1024) return fail("--threads must be between 1 and 1024", 2);
  if (*reps < 1) return fail("--reps must be >= 1", 2);
  const std::string filter = args.get("--filter").value_or("");

  std::vector<harness::OpCase> cases;
  for (harness::OpCase& c : harness::op_cases(harness::CaseSet::kPerf)) {
    if (filter.empty() || c.label().find(filter) != std::string::npos) cases.push_back(std::move(c));
  }
  if (cases.empty()) return fail("no perf case matches --filter '" + filter + "'", 2);

  ThreadPool pool(static_cast<int>(*threads));
  auto backend = backend::create_backend(args.get("--backend").value_or("cpu"), {&pool});
  if (!backend.ok()) return fail(backend.status().message(), 2);
  const double triad = triad_bandwidth(pool, static_cast<int>(*reps));
  const backend::PeakRates peak = (*backend)->measure_peak();
  std::printf("backend: %s | memory bandwidth (triad): %.1f GB/s\n", (*backend)->describe().c_str(), triad);
  std::printf("measured peak, %d threads: %s\n", static_cast<int>(*threads), describe_peak(peak).c_str());
  std::printf("%-18s %-58s %10s %16s %8s\n", "op", "case", "ms", "rate", "of peak");
  std::fflush(stdout);
  for (const harness::OpCase& c : cases) {
    const harness::PerfResult r = harness::time_case(c, **backend, static_cast<int>(*reps));
    const std::string op(backend::op_name(c.op));
    if (r.skipped) {
      std::printf("%-18s %-58s %10s  skipped: %s\n", op.c_str(), c.name.c_str(), "-", r.message.c_str());
      continue;
    }
    const bool memory = c.work.bound == harness::Bound::kMemory;
    const double rate = memory ? r.gbs : r.gflops;
    const double limit = memory ? triad : peak_for(c, peak);
    std::string share = "-";
    if (limit > 0.0) share = std::to_string(static_cast<int>(100.0 * rate / limit + 0.5)) + "%";
    std::printf("%-18s %-58s %10.3f %8.1f %-7s %8s\n", op.c_str(), c.name.c_str(), r.seconds * 1e3, rate,
                memory ? "GB/s" : "GFLOP/s", share.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace deepinfer::cli
