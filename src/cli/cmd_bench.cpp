// deepinfer bench: kernel and whole-model speeds on this machine, beside its measured memory
// bandwidth (a STREAM-like triad), so a figure can be read against what the hardware allows.
//
//   bench ops    per-kernel GB/s (one-token matrix-vector products, bound by memory) and
//                GFLOP/s (many-token matrix products, bound by arithmetic) of each weight format,
//                and batched decode attention over a paged float16 KV cache
//   bench model  prefill and decode tokens per second of one model, and decode against the
//                bandwidth bound (weight bytes read per token / measured bandwidth)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/packed.h"
#include "backend/cpu/quant.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/loading.h"
#include "core/page_buffer.h"
#include "core/thread_pool.h"

namespace deepinfer::cli {

namespace {

const char* kBenchUsage = R"(usage: deepinfer bench ops [--threads N] [--reps R]
       deepinfer bench model [-m MODEL] [--threads N] [--reps R] [--prompt N] [--gen N]
  ops      matrix products of every weight format: decode (1 token, GB/s of weights read) and
           prefill (256 tokens, GFLOP/s), with the memory bandwidth measured by a triad; then
           attention for a batch of 64 decoding sequences of 320 positions (ms per layer)
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

void print_header(ThreadPool& pool, int reps) {
  std::printf("kernels: %s | threads: %d | memory bandwidth (triad): %.1f GB/s\n", cpu::kernel_isa(), pool.n_threads(),
              triad_bandwidth(pool, reps));
}

// A weight matrix of random rows with sane scales: float rows quantized by the format's own
// reference quantizer where one exists, else random codes under small half-float scales.
std::vector<uint8_t> random_weights(DType type, int64_t n_out, int64_t n_in, std::mt19937& rng) {
  const size_t row_bytes = dtype_row_bytes(type, n_in);
  std::vector<uint8_t> w(row_bytes * static_cast<size_t>(n_out));
  for (auto& byte : w) byte = static_cast<uint8_t>(rng());
  const DType same[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0};
  if (std::find(std::begin(same), std::end(same), type) != std::end(same)) {
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::vector<float> row(static_cast<size_t>(n_in));
    for (int64_t o = 0; o < n_out; ++o) {
      for (float& v : row) v = g(rng);
      cpu::quantize_row(type, row.data(), w.data() + o * row_bytes, n_in);
    }
    return w;
  }
  // Block formats: overwrite every half-float field that is a scale (d, and m / dmin) with
  // 2^-6; codes stay random. Offsets of those fields per format (bytes within a block).
  const size_t block_bytes = dtype_traits(type)->block_bytes;
  std::vector<size_t> scale_offsets;
  switch (type) {
    case DType::kQ4_0:
    case DType::kQ5_0: scale_offsets = {0}; break;
    case DType::kQ4_1:
    case DType::kQ5_1:
    case DType::kQ4_K:
    case DType::kQ5_K: scale_offsets = {0, 2}; break;
    case DType::kQ6_K: scale_offsets = {block_bytes - 2}; break;
    default: break;
  }
  const uint16_t scale = 0x2400;  // 2^-6 as a half
  for (size_t b = 0; b < w.size(); b += block_bytes) {
    for (size_t off : scale_offsets) std::memcpy(&w[b + off], &scale, 2);
  }
  return w;
}

// Batched decode attention: 64 sequences of 320 positions each, one query token per sequence,
// SmolLM2's shape (9 query heads, 3 KV heads of 64), a float16 paged cache whose blocks are
// shuffled as the engine's allocator leaves them, each call on another of 30 "layers" so the
// keys come from memory as in a forward pass. Reports ms per layer and the KV bytes read per
// second; attention was 27% of a batch-64 engine run's profile (prefill included).
void bench_decode_attention(ThreadPool& pool, int reps) {
  constexpr int64_t kSeqs = 64, kPositions = 320, kBlock = 16, kLayers = 30, kHeads = 9, kKvHeads = 3, kDim = 64;
  constexpr int64_t kBlocksPerSeq = kPositions / kBlock, kRowElems = kKvHeads * kDim;
  const int64_t n_blocks = kLayers * kSeqs * kBlocksPerSeq;
  PageBuffer k(static_cast<size_t>(n_blocks * kBlock * kRowElems) * 2), v(k.size());
  std::mt19937 rng(3);
  for (size_t i = 0; i < k.size(); ++i) k.data()[i] = v.data()[i] = static_cast<uint8_t>(i % 61);  // finite halves
  std::vector<int32_t> blocks(static_cast<size_t>(n_blocks));
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int32_t>(i);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<cpu::SequenceKv> seqs(kSeqs);
  std::vector<int32_t> positions(kSeqs, kPositions - 1), token_seq(kSeqs);
  for (int64_t s = 0; s < kSeqs; ++s) token_seq[s] = static_cast<int32_t>(s);
  std::vector<float> q(kSeqs * kHeads * kDim, 0.05f), out(q.size());
  const cpu::AttentionShape shape{kHeads, kKvHeads, kDim, 0.125f, 0};
  std::vector<double> times;
  for (int r = 0; r < std::max(reps, 1) * kLayers; ++r) {
    const int64_t layer = r % kLayers;
    for (int64_t s = 0; s < kSeqs; ++s) {
      seqs[s] = {k.data(), v.data(), blocks.data() + (layer * kSeqs + s) * kBlocksPerSeq, kBlock, 0, DType::kF16};
    }
    const auto t = Clock::now();
    cpu::attention(shape, q.data(), kSeqs, positions, seqs, token_seq, out.data(), pool);
    times.push_back(seconds_since(t));
  }
  const double s = median(times);
  const double bytes = 2.0 * kSeqs * kPositions * kRowElems * 2;  // K and V, float16
  std::printf("attention, decode of %lld sequences x %lld keys (9/3 heads x 64, f16 KV, paged): %.3f ms per layer, "
              "%.1f GB/s of KV\n",
              static_cast<long long>(kSeqs), static_cast<long long>(kPositions), s * 1e3, bytes / s / 1e9);
}

int bench_ops(int threads, int reps) {
  ThreadPool pool(threads);
  print_header(pool, reps);
  std::printf("%-6s %26s %28s\n", "format", "decode 1 tok (GB/s, ms)", "prefill 256 tok (GFLOP/s, ms)");
  std::mt19937 rng(1);
  cpu::QuantScratch scratch;
  // Decode: 8192 x 4096 (tens of MB, past the caches): GB/s of weight bytes streamed.
  // Prefill: 2048 x 2048 by 256 tokens: 2 * rows * cols * tokens flops.
  const int64_t dec_out = 8192, dec_in = 4096, pre_out = 2048, pre_in = 2048, pre_tok = 256;
  std::vector<float> x(static_cast<size_t>(pre_tok * std::max(dec_in, pre_in)));
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (float& v : x) v = g(rng);
  std::vector<float> y(static_cast<size_t>(pre_tok * std::max(dec_out, pre_out)));
  for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                     DType::kQ8_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    if (!cpu::quant_supported(type)) continue;
    const std::vector<uint8_t> wd = random_weights(type, dec_out, dec_in, rng);
    // Packed where the models pack (backend/cpu/packed.h): the kernels a model runs.
    cpu::PackedWeights packs;
    cpu::WeightMatrix md{type, wd.data(), dec_out, dec_in};
    packs.pack(md);
    std::vector<double> dec;
    cpu::matmul(md, x.data(), 1, y.data(), nullptr, scratch, pool);  // warm-up
    for (int r = 0; r < reps; ++r) {
      const auto t = Clock::now();
      cpu::matmul(md, x.data(), 1, y.data(), nullptr, scratch, pool);
      dec.push_back(seconds_since(t));
    }
    const std::vector<uint8_t> wp = random_weights(type, pre_out, pre_in, rng);
    cpu::WeightMatrix mp{type, wp.data(), pre_out, pre_in};
    packs.pack(mp);
    std::vector<double> pre;
    cpu::matmul(mp, x.data(), pre_tok, y.data(), nullptr, scratch, pool);
    for (int r = 0; r < reps; ++r) {
      const auto t = Clock::now();
      cpu::matmul(mp, x.data(), pre_tok, y.data(), nullptr, scratch, pool);
      pre.push_back(seconds_since(t));
    }
    const double dec_s = median(dec), pre_s = median(pre);
    const std::string name = std::string(dtype_name(type)) + (md.packed != nullptr ? " (packed)" : "");
    std::printf("%-15s %8.1f %8.3f %19.1f %8.2f\n", name.c_str(),
                static_cast<double>(wd.size()) / dec_s / 1e9, dec_s * 1e3,
                2.0 * pre_out * pre_in * pre_tok / pre_s / 1e9, pre_s * 1e3);
  }
  bench_decode_attention(pool, reps);
  return 0;
}

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
  if (what != "ops" && what != "model") return fail("unknown bench '" + what + "'\n" + kBenchUsage, 2);
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
  auto reps = args.get_int("--reps", what == "ops" ? 5 : 3);
  auto n_prompt = args.get_int("--prompt", 512);
  auto n_gen = args.get_int("--gen", 128);
  for (const Status& s : {threads.status(), reps.status(), n_prompt.status(), n_gen.status()}) {
    if (!s.ok()) return fail(s.message(), 2);
  }
  if (*threads < 1 || *threads > 1024) return fail("--threads must be between 1 and 1024", 2);
  if (*reps < 1 || *n_prompt < 1 || *n_gen < 0) return fail("--reps and --prompt must be >= 1, --gen >= 0", 2);
  if (what == "ops") {
    if (args.has("--model")) return fail("bench ops takes no model", 2);
    return bench_ops(static_cast<int>(*threads), static_cast<int>(*reps));
  }
  return bench_model(args.get("--model"), static_cast<int>(*threads), static_cast<int>(*reps), *n_prompt, *n_gen);
}

}  // namespace deepinfer::cli
