// deepinfer bench: kernel and whole-model speeds on this machine, beside its measured memory
// bandwidth (a STREAM-like triad), so a figure can be read against what the hardware allows.
//
//   bench ops    the op harness's perf cases on one backend (cmd_bench_ops.cpp): GB/s of the
//                memory-bound ops (one-token products, decode attention), GFLOP/s of the others
//   bench model  prefill and decode tokens per second of one model through the engine, as
//                `run` generates, and decode against the bandwidth bound (weight bytes read per
//                token / measured bandwidth)
#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/quant.h"
#include "cli/args.h"
#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/loading.h"
#include "model/loader/tensor_source.h"

namespace deepinfer::cli {

namespace {

const char* kBenchUsage = R"(usage: deepinfer bench ops [--backend NAME] [--threads N] [--reps R] [--filter TEXT]
       deepinfer bench model [-m MODEL] [--reps R] [--prompt N] [--gen N] [engine options]
       deepinfer bench grammar --data DIR [--tokenizer MODEL] [--threads N] [--jsonl OUT] [--limit N]
       deepinfer bench serve [--url URL] [--model NAME] [vllm bench serve's flags]
  ops      the op harness's perf cases on one backend (default cpu): matrix products of every
           weight format (decode: 1 token, GB/s of weights read; prefill: 256 tokens, GFLOP/s),
           batched decode attention (64 sequences x 320 keys, GB/s of KV), elementwise, KV and
           MoE ops, with the memory bandwidth measured by a triad (bench ops --help)
  model    one request of --prompt tokens (default 512) generating --gen tokens (default 128)
           through the engine, greedy and past end-of-generation: prefill tok/s (prompt tokens
           over the time to the first token) and decode tok/s (the tokens after the first over
           the time they took), median of --reps runs (default 3), and decode against the
           memory-bandwidth bound
  grammar  structured-output masks over MaskBench-format files (bench grammar --help)
  serve    TTFT, TPOT, ITL and throughput of a running server under load (bench serve --help)
  --threads N  CPU threads (default: all cores)
  --reps R     repetitions; the median is reported
  The kernel tier (avx512, avx2, scalar) is chosen from cpuid; DEEPINFER_ISA=avx2|scalar caps it.
)";

std::string usage() { return kBenchUsage + engine_flags_usage(); }

// Weight bytes one decode step reads: every tensor once, except the token embedding, of which
// one row is read, unless the output projection is tied to it (then all of it is). KV-cache
// reads are left out (small at the short contexts this measures).
double bytes_per_token(const TensorSource& source) {
  double total = 0.0;
  const TensorView* embd = nullptr;
  bool has_output = false;
  for (const TensorView& t : source.tensors()) {
    total += static_cast<double>(t.n_bytes);
    if (t.name == "token_embd.weight") embd = &t;
    if (t.name == "output.weight") has_output = true;
  }
  if (embd && has_output) total -= static_cast<double>(embd->n_bytes - embd->row_bytes());
  return total;
}

// One repetition's speeds, wall-clock and per CPU second of the process.
struct RunSpeeds {
  double prefill_tps = 0.0, prefill_cpu_tps = 0.0;
  double decode_tps = 0.0, decode_cpu_tps = 0.0;
};

// One request through the engine: prefill up to the first token, decode after it. `salt` keeps
// the repetitions from finding each other's prompt in the prefix cache.
Result<RunSpeeds> bench_request(Engine& engine, const std::vector<int32_t>& prompt, int64_t n_gen,
                                const std::string& salt) {
  GenerationRequest request;
  request.prompt = prompt;
  request.max_tokens = n_gen;
  request.sampling.temperature = 0.0f;
  request.sampling.ignore_eos = true;
  request.detokenize = false;
  request.cache_salt = salt;
  const double cpu_start = process_cpu_seconds();
  DI_ASSIGN_OR_RETURN(std::shared_ptr<RequestHandle> handle, engine.submit(std::move(request)));
  RunSpeeds out;
  int64_t n_tokens = 0;
  Clock::time_point first{};
  double cpu_first = 0.0;
  while (std::optional<TokenEvent> e = handle->next()) {
    if (e->tokens.empty()) continue;
    if (n_tokens == 0) {
      first = Clock::now();
      cpu_first = process_cpu_seconds();
      out.prefill_tps = static_cast<double>(prompt.size()) / e->first_token_seconds;
      out.prefill_cpu_tps = static_cast<double>(prompt.size()) / (cpu_first - cpu_start);
    }
    n_tokens += static_cast<int64_t>(e->tokens.size());
  }
  if (n_tokens != n_gen) {
    return internal_error("the engine generated " + std::to_string(n_tokens) + " of " + std::to_string(n_gen) +
                          " tokens");
  }
  if (n_tokens > 1) {
    const double decoded = static_cast<double>(n_tokens - 1);
    out.decode_tps = decoded / seconds_since(first);
    out.decode_cpu_tps = decoded / (process_cpu_seconds() - cpu_first);
  }
  return out;
}

int bench_model(const Args& args, int reps, int64_t n_prompt, int64_t n_gen) {
  auto config = parse_engine_flags(args);
  if (!config.ok()) return fail(config.status().message(), 2);
  auto path = resolve_model_flag(args);
  if (!path.ok()) return fail(path.status().message());
  config->model_path = *path;
  double bytes = 0.0;
  {
    auto source = open_tensor_source(*path);
    if (!source.ok()) return fail(source.status().message());
    bytes = bytes_per_token(**source);
  }
  const int threads = engine_threads(*config);
  double bw = 0.0;
  {
    ThreadPool pool(threads);
    bw = triad_bandwidth(pool, reps);
  }
  auto loaded = load_engine(*config);
  if (!loaded.ok()) return fail(loaded.status().message());
  Engine& engine = *loaded->engine;
  const int64_t n_vocab = engine.n_vocab();
  // Fixed ids spread over the vocabulary: tokenization is not timed, and every run sees the
  // same tokens.
  std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
  for (int64_t i = 0; i < n_prompt; ++i) prompt[i] = static_cast<int32_t>((1000 + 7919 * i) % n_vocab);
  std::vector<double> pre_tps, dec_tps, pre_cpu_tps, dec_cpu_tps;
  for (int r = 0; r < reps; ++r) {
    auto speeds = bench_request(engine, prompt, n_gen, "bench model " + std::to_string(r));
    if (!speeds.ok()) return fail(speeds.status().message(), submit_exit_code(speeds.status()));
    pre_tps.push_back(speeds->prefill_tps);
    pre_cpu_tps.push_back(speeds->prefill_cpu_tps);
    if (n_gen > 1) {
      dec_tps.push_back(speeds->decode_tps);
      dec_cpu_tps.push_back(speeds->decode_cpu_tps);
    }
  }
  const double bound = bw * 1e9 / bytes;
  std::printf("model: %s\n", path->c_str());
  std::printf("kernels: %s | threads: %d | memory bandwidth (triad): %.1f GB/s\n", cpu::kernel_isa(), threads, bw);
  std::printf("prefill: %lld tokens, %.1f tok/s (median of %d); per CPU second: %.1f tok\n",
              static_cast<long long>(n_prompt), median(pre_tps), reps, median(pre_cpu_tps));
  if (!dec_tps.empty()) {
    const double dec = median(dec_tps);
    std::printf("decode:  %lld tokens, %.1f tok/s (median of %d); per CPU second: %.1f tok\n",
                static_cast<long long>(n_gen - 1), dec, reps, median(dec_cpu_tps));
    std::printf("decode bound: %.1f MB of weights per token -> %.1f tok/s at %.1f GB/s; reached %.0f%%\n", bytes / 1e6,
                bound, bw, 100.0 * dec / bound);
  }
  return 0;
}

}  // namespace

int bench_command(const std::vector<std::string>& argv) {
  if (argv.empty() || argv[0] == "--help" || argv[0] == "-h") {
    std::fputs(usage().c_str(), argv.empty() ? stderr : stdout);
    return argv.empty() ? 2 : 0;
  }
  const std::string what = argv[0];
  if (what == "serve") return bench_serve_command(std::vector<std::string>(argv.begin() + 1, argv.end()));
  if (what != "ops" && what != "model" && what != "grammar") return fail("unknown bench '" + what + "'\n" + usage(), 2);
  if (what == "ops") return bench_ops_command(std::vector<std::string>(argv.begin() + 1, argv.end()));
  if (what == "grammar") return bench_grammar_command(std::vector<std::string>(argv.begin() + 1, argv.end()));
  FlagSpec spec;
  spec.with_value = {"--threads", "--reps", "--prompt", "--gen"};
  spec.switches = {"--help"};
  spec.aliases = {{"-t", "--threads"}, {"-h", "--help"}};
  add_engine_flags(spec);
  auto parsed = Args::parse(std::vector<std::string>(argv.begin() + 1, argv.end()), spec);
  if (!parsed.ok()) return fail(parsed.status().message() + "\n" + usage(), 2);
  const Args& args = *parsed;
  if (args.has("--help")) {
    std::fputs(usage().c_str(), stdout);
    return 0;
  }
  auto reps = args.get_int("--reps", 3);
  auto n_prompt = args.get_int("--prompt", 512);
  auto n_gen = args.get_int("--gen", 128);
  for (const Status& s : {reps.status(), n_prompt.status(), n_gen.status()}) {
    if (!s.ok()) return fail(s.message(), 2);
  }
  if (*reps < 1 || *n_prompt < 1 || *n_gen < 1) return fail("--reps, --prompt and --gen must be >= 1", 2);
  return bench_model(args, static_cast<int>(*reps), *n_prompt, *n_gen);
}

}  // namespace deepinfer::cli
