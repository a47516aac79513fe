// deepinfer bench ops: per-kernel GB/s (one-token matrix-vector products, bound by memory) and
// GFLOP/s (many-token matrix products, bound by arithmetic) of each weight format, and batched
// decode attention over a paged float16 KV cache, beside the measured memory bandwidth.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/packed.h"
#include "backend/cpu/quant.h"
#include "cli/bench.h"
#include "core/page_buffer.h"
#include "core/thread_pool.h"

namespace deepinfer::cli {

namespace {

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

}  // namespace

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

}  // namespace deepinfer::cli
