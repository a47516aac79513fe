// CPU operators against straightforward scalar formulas.
#include "backend/cpu/attention.h"
#include "backend/cpu/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/packed.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_kernels.h"
#include "core/half.h"

#include <cstring>

namespace deepinfer::cpu {

// Test parameters print as the tier's name (found by argument-dependent lookup, so here).
inline void PrintTo(Isa isa, std::ostream* os) { *os << isa_name(isa); }

namespace {

std::vector<float> random_vector(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// y = W x in double, W given as floats [n_out, n_in].
std::vector<float> naive_matmul(const std::vector<float>& w, const std::vector<float>& x, int64_t n_tokens,
                                int64_t n_out, int64_t n_in) {
  std::vector<float> y(static_cast<size_t>(n_tokens * n_out));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t o = 0; o < n_out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < n_in; ++i) acc += static_cast<double>(w[o * n_in + i]) * x[t * n_in + i];
      y[t * n_out + o] = static_cast<float>(acc);
    }
  }
  return y;
}

TEST(Ops, MatmulF32MatchesNaiveWithBiasAndThreads) {
  const int64_t n_out = 37, n_in = 70, n_tokens = 5;
  auto w = random_vector(n_out * n_in, 1);
  auto x = random_vector(n_tokens * n_in, 2);
  auto bias = random_vector(n_out, 3);
  auto expect = naive_matmul(w, x, n_tokens, n_out, n_in);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    QuantScratch scratch;
    std::vector<float> y(n_tokens * n_out);
    WeightMatrix m{DType::kF32, reinterpret_cast<const uint8_t*>(w.data()), n_out, n_in};
    matmul(m, x.data(), n_tokens, y.data(), bias.data(), scratch, pool);
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int64_t o = 0; o < n_out; ++o) {
        EXPECT_NEAR(y[t * n_out + o], expect[t * n_out + o] + bias[o], 1e-4) << "threads " << threads;
      }
    }
  }
}

// A quantized weight: its matmul equals dequantize-then-multiply of the same values.
class QuantMatmul : public ::testing::TestWithParam<DType> {};

TEST_P(QuantMatmul, MatchesDequantizedReference) {
  const DType type = GetParam();
  const int64_t n_out = 19, n_in = 512, n_tokens = 3;
  auto w_f = random_vector(n_out * n_in, 4);
  std::vector<uint8_t> w_q(dtype_row_bytes(type, n_in) * n_out);
  // Quantize the weights through the reference path (for 8-bit formats) or round-trip via
  // the dequantizer of random blocks: here we build a valid tensor by quantizing to Q8_0 only
  // when the type has a quantizer; other types are covered by the quant tests.
  ASSERT_TRUE(type == DType::kQ8_0 || type == DType::kF16 || type == DType::kBF16);
  for (int64_t o = 0; o < n_out; ++o) {
    quantize_row(type, w_f.data() + o * n_in, w_q.data() + o * dtype_row_bytes(type, n_in), n_in);
  }
  std::vector<float> w_deq(n_out * n_in);
  for (int64_t o = 0; o < n_out; ++o) {
    dequantize_row(type, w_q.data() + o * dtype_row_bytes(type, n_in), w_deq.data() + o * n_in, n_in);
  }
  auto x = random_vector(n_tokens * n_in, 5);
  // The reference sees the activations exactly as the kernel does: quantized to the weight's
  // companion format and back. What remains is float summation order.
  const DType act_type = vec_dot_type(type);
  std::vector<float> x_seen(x.size());
  std::vector<uint8_t> act(dtype_row_bytes(act_type, n_in));
  for (int64_t t = 0; t < n_tokens; ++t) {
    quantize_row(act_type, x.data() + t * n_in, act.data(), n_in);
    dequantize_row(act_type, act.data(), x_seen.data() + t * n_in, n_in);
  }
  auto expect = naive_matmul(w_deq, x_seen, n_tokens, n_out, n_in);
  ThreadPool pool(2);
  QuantScratch scratch;
  std::vector<float> y(n_tokens * n_out);
  WeightMatrix m{type, w_q.data(), n_out, n_in};
  matmul(m, x.data(), n_tokens, y.data(), nullptr, scratch, pool);
  for (size_t i = 0; i < y.size(); ++i) {
    // Sums of 512 products of magnitude ~1: float32 reordering costs ~1e-5 relative.
    EXPECT_NEAR(y[i], expect[i], 1e-3 * (1.0 + std::abs(expect[i]))) << dtype_name(type) << " at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantMatmul, ::testing::Values(DType::kQ8_0, DType::kF16, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Ops, RmsNorm) {
  const int64_t n = 33;
  auto x = random_vector(2 * n, 6, 3.0f);
  auto w = random_vector(n, 7);
  std::vector<float> y(2 * n);
  rms_norm(x.data(), w.data(), 1e-5f, 2, n, y.data());
  for (int r = 0; r < 2; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += x[r * n + i] * x[r * n + i];
    const double inv = 1.0 / std::sqrt(ss / n + 1e-5);
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y[r * n + i], x[r * n + i] * inv * w[i], 1e-5);
  }
}

TEST(Ops, RopeRotatesPairsByPositionTimesFrequency) {
  const int64_t head_dim = 8, n_rot = 8, n_heads = 2;
  std::vector<float> inv_freq = {1.0f, 0.5f, 0.25f, 0.125f};
  std::vector<int32_t> pos = {3};
  auto x = random_vector(n_heads * head_dim, 8);
  for (RotaryPairing pairing : {RotaryPairing::kInterleaved, RotaryPairing::kHalf}) {
    auto y = x;
    rope(y.data(), 1, n_heads, head_dim, n_rot, pos, inv_freq, pairing);
    for (int64_t h = 0; h < n_heads; ++h) {
      for (int64_t i = 0; i < n_rot / 2; ++i) {
        const int64_t a = pairing == RotaryPairing::kInterleaved ? 2 * i : i;
        const int64_t b = pairing == RotaryPairing::kInterleaved ? 2 * i + 1 : i + n_rot / 2;
        const double th = 3.0 * inv_freq[i];
        const double x0 = x[h * head_dim + a], x1 = x[h * head_dim + b];
        EXPECT_NEAR(y[h * head_dim + a], x0 * std::cos(th) - x1 * std::sin(th), 1e-5);
        EXPECT_NEAR(y[h * head_dim + b], x0 * std::sin(th) + x1 * std::cos(th), 1e-5);
      }
    }
  }
  // Position 0 is the identity.
  auto y = x;
  std::vector<int32_t> zero = {0};
  rope(y.data(), 1, n_heads, head_dim, n_rot, zero, inv_freq, RotaryPairing::kHalf);
  EXPECT_EQ(y, x);
}

// Large enough tensors go over the pool's threads, row ranges each: every row's bits are those
// of the one-thread call, and each row is the one-row call's (a split that shifted rows,
// positions or offsets would move some).
TEST(Ops, RmsNormAndRopeOverThreadsGiveTheOneThreadBits) {
  const int64_t n_rows = 97, n = 320;  // 31,040 elements: past the threshold for splitting
  const auto x = random_vector(static_cast<size_t>(n_rows * n), 51, 3.0f);
  const auto w = random_vector(static_cast<size_t>(n), 52);
  ThreadPool pool(3);
  std::vector<float> one(x.size()), split(x.size());
  rms_norm(x.data(), w.data(), 1e-6f, n_rows, n, one.data());
  rms_norm(x.data(), w.data(), 1e-6f, n_rows, n, split.data(), pool);
  EXPECT_EQ(0, std::memcmp(one.data(), split.data(), one.size() * sizeof(float)));
  std::vector<float> row(static_cast<size_t>(n));
  rms_norm(x.data() + 60 * n, w.data(), 1e-6f, 1, n, row.data());
  EXPECT_EQ(0, std::memcmp(row.data(), split.data() + 60 * n, row.size() * sizeof(float)));

  const int64_t n_heads = 5, head_dim = 64, n_rot = 32;  // 97 tokens of 320
  std::vector<float> inv_freq(n_rot / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / n_rot);
  std::vector<int32_t> positions(static_cast<size_t>(n_rows));
  for (size_t t = 0; t < positions.size(); ++t) positions[t] = static_cast<int32_t>(7 + 3 * t);
  auto a = x, b = x;
  rope(a.data(), n_rows, n_heads, head_dim, n_rot, positions, inv_freq, RotaryPairing::kHalf, 16, -1.0f);
  rope(b.data(), n_rows, n_heads, head_dim, n_rot, positions, inv_freq, RotaryPairing::kHalf, 16, -1.0f, pool);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  EXPECT_NE(a, x);
  std::vector<float> tok(x.begin() + 80 * n, x.begin() + 81 * n);
  rope(tok.data(), 1, n_heads, head_dim, n_rot, std::span(positions).subspan(80, 1), inv_freq, RotaryPairing::kHalf,
       16, -1.0f);
  EXPECT_EQ(0, std::memcmp(tok.data(), b.data() + 80 * n, tok.size() * sizeof(float)));
}

// The angle table: a rope with RopeAngles' table gives the plain rope's bits, whether the table
// was just computed or kept from an earlier call, across several frequency sets and after the
// positions change (a kept table for old positions would fail it).
TEST(Ops, RopeWithTheAngleTableGivesThePlainRopesBits) {
  const int64_t n_heads = 3, head_dim = 64, n_rot = 64, n_tokens = 40;
  const auto x = random_vector(static_cast<size_t>(n_tokens * n_heads * head_dim), 61, 3.0f);
  std::vector<std::vector<float>> freqs;
  for (float base : {10000.0f, 1000000.0f, 500000.0f, 50000.0f, 10.0f}) {
    std::vector<float> f(n_rot / 2);
    for (size_t i = 0; i < f.size(); ++i) f[i] = std::pow(base, -2.0f * static_cast<float>(i) / n_rot);
    freqs.push_back(f);
  }
  ThreadPool pool(2);
  RopeAngles angles;
  for (int step = 0; step < 3; ++step) {
    std::vector<int32_t> positions(static_cast<size_t>(n_tokens));
    for (size_t t = 0; t < positions.size(); ++t) positions[t] = static_cast<int32_t>(100 * step + 5 * t + 1);
    for (int call = 0; call < 12; ++call) {  // every set twice or more: kept and recomputed tables
      const auto& f = freqs[static_cast<size_t>(call % 5)];
      const RotaryPairing pairing = call % 2 == 0 ? RotaryPairing::kHalf : RotaryPairing::kInterleaved;
      const float sign = call % 3 == 0 ? -1.0f : 1.0f;
      auto plain = x, tabled = x;
      rope(plain.data(), n_tokens, n_heads, head_dim, n_rot, positions, f, pairing, 0, sign, pool);
      rope(tabled.data(), n_tokens, n_heads, head_dim, n_rot, angles.table(positions, f, pool), pairing, 0, sign, pool);
      ASSERT_EQ(0, std::memcmp(plain.data(), tabled.data(), plain.size() * sizeof(float)))
          << "step " << step << " call " << call;
    }
  }
}

TEST(Ops, SoftmaxAndSiluMul) {
  std::vector<float> x = {1.0f, 2.0f, 3.0f, -1000.0f};
  softmax(x.data(), 4);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(x[0], std::exp(1.0) / z, 1e-6);
  EXPECT_NEAR(x[2], std::exp(3.0) / z, 1e-6);
  EXPECT_EQ(x[3], 0.0f);
  std::vector<float> g = {-2.0f, 0.0f, 3.0f}, u = {1.0f, 5.0f, 2.0f};
  silu_mul(g.data(), u.data(), 3);
  EXPECT_NEAR(g[0], -2.0 / (1 + std::exp(2.0)) * 1.0, 1e-6);
  EXPECT_EQ(g[1], 0.0f);
  EXPECT_NEAR(g[2], 3.0 / (1 + std::exp(-3.0)) * 2.0, 1e-5);
}

TEST(Ops, CausalGqaAttentionMatchesTwoPassSoftmax) {
  const AttentionShape shape{6, 2, 16, 0.25f};
  const int64_t n_kv = 9, n_tokens = 3, kv_stride = shape.n_head_kv * shape.head_dim;
  auto k = random_vector(n_kv * kv_stride, 9);
  auto v = random_vector(n_kv * kv_stride, 10);
  auto q = random_vector(n_tokens * shape.n_head * shape.head_dim, 11);
  std::vector<int32_t> positions = {2, 5, 8};
  std::vector<float> out(q.size());
  ThreadPool pool(2);
  attention(shape, q.data(), n_tokens, positions, k.data(), v.data(), out.data(), pool);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int64_t h = 0; h < shape.n_head; ++h) {
      const int64_t kvh = h / (shape.n_head / shape.n_head_kv);
      const float* qh = q.data() + (t * shape.n_head + h) * shape.head_dim;
      std::vector<double> s(positions[t] + 1);
      double m = -1e300;
      for (int64_t j = 0; j <= positions[t]; ++j) {
        double d = 0;
        for (int64_t i = 0; i < shape.head_dim; ++i) d += qh[i] * k[j * kv_stride + kvh * shape.head_dim + i];
        s[j] = d * shape.scale;
        m = std::max(m, s[j]);
      }
      double z = 0;
      for (double& e : s) z += (e = std::exp(e - m));
      for (int64_t i = 0; i < shape.head_dim; ++i) {
        double acc = 0;
        for (int64_t j = 0; j <= positions[t]; ++j) acc += s[j] / z * v[j * kv_stride + kvh * shape.head_dim + i];
        EXPECT_NEAR(out[(t * shape.n_head + h) * shape.head_dim + i], acc, 1e-5);
      }
    }
  }
}

TEST(Ops, SlidingWindowAttentionSeesOnlyTheLastWindowPositions) {
  // head_dim 1, one head: scores all equal, so the output is the mean of the visible values.
  const AttentionShape shape{1, 1, 1, 1.0f, 3};
  std::vector<float> k(10, 0.0f), v(10), q = {1.0f, 1.0f};
  for (int i = 0; i < 10; ++i) v[i] = static_cast<float>(i);
  std::vector<int32_t> positions = {1, 9};
  std::vector<float> out(2);
  ThreadPool pool(1);
  attention(shape, q.data(), 2, positions, k.data(), v.data(), out.data(), pool);
  EXPECT_FLOAT_EQ(out[0], 0.5f);  // rows 0..1 (fewer than the window)
  EXPECT_FLOAT_EQ(out[1], 8.0f);  // rows 7..9
}

TEST(Ops, AttentionSeesNothingBelowTheSequencesMinPosition) {
  // Equal scores again: the output is the mean of the visible values. Rows below
  // min_position hold garbage that must not be read (SWA bounded replay leaves them unwritten).
  const AttentionShape shape{1, 1, 1, 1.0f, 4};
  std::vector<float> k(12, 0.0f), v(12), q = {1.0f, 1.0f, 1.0f};
  for (int i = 0; i < 12; ++i) v[i] = i < 5 ? 1e30f : static_cast<float>(i);
  // Paged: blocks of 2, logical block b in physical block 5 - b.
  const std::vector<int32_t> table = {5, 4, 3, 2, 1, 0};
  std::vector<SequenceKv> seqs = {{k.data(), v.data(), table.data(), 2, /*min_position=*/5}};
  std::vector<int32_t> positions = {5, 6, 9}, token_seq = {0, 0, 0};
  // Logical position p lives in row (5 - p / 2) * 2 + p % 2: fill values by logical position.
  for (int p = 0; p < 12; ++p) v[static_cast<size_t>(seqs[0].row(p))] = p < 5 ? 1e30f : static_cast<float>(p);
  std::vector<float> out(3);
  ThreadPool pool(1);
  attention(shape, q.data(), 3, positions, seqs, token_seq, out.data(), pool);
  EXPECT_FLOAT_EQ(out[0], 5.0f);   // window 2..5 clamped to 5..5
  EXPECT_FLOAT_EQ(out[1], 5.5f);   // 3..6 -> 5..6
  EXPECT_FLOAT_EQ(out[2], 7.5f);   // 6..9, the window alone
}

// The tiled kernel against the per-key reference: paged tables in shuffled order, block sizes
// that do and do not divide the tile, GQA groups of 1 to 4, head sizes with tails, sliding
// windows, min_position, and tokens of several sequences in one call. Tolerance: float
// rounding of a softmax-weighted mean of unit-scale values (the two differ in summation order
// and in the exponential, 2e-8 relative). Then batch invariance: a token's output is bitwise
// the same alone (one head per work item) as in a large batch (whole GQA groups per item, runs
// of consecutive positions in query blocks). Both
// for a float32 and a float16 cache, on each instruction-set tier's tile kernels this CPU runs.
class AttentionTier : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!cpu_has(GetParam())) GTEST_SKIP() << "no " << isa_name(GetParam()) << " on this CPU: its attention tiles do not run here";
  }
};

TEST_P(AttentionTier, TiledAttentionMatchesTheReferenceAndIsBatchInvariant) {
  const Isa tier = GetParam();
  std::mt19937 rng(21);
  struct Case { int64_t n_head, n_head_kv, head_dim, block, window, min_pos; };
  const Case cases[] = {{9, 3, 64, 16, 0, 0}, {4, 1, 256, 16, 37, 0}, {6, 6, 17, 5, 0, 3},
                        {8, 2, 32, 48, 0, 0}, {4, 1, 64, 7, 20, 9}, {2, 1, 80, 33, 0, 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE("heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) + " dim " +
                 std::to_string(c.head_dim) + " block " + std::to_string(c.block));
    const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                               c.window};
    const int64_t kv_stride = c.n_head_kv * c.head_dim;
    const int n_seqs = 3;
    const int64_t max_len = 150;
    const int64_t blocks_per_seq = (max_len + c.block - 1) / c.block;
    const int64_t n_rows = n_seqs * blocks_per_seq * c.block;
    auto k = random_vector(static_cast<size_t>(n_rows * kv_stride), 31, 2.0f);
    auto v = random_vector(static_cast<size_t>(n_rows * kv_stride), 32);
    std::vector<int32_t> all_blocks(static_cast<size_t>(n_seqs * blocks_per_seq));
    for (size_t i = 0; i < all_blocks.size(); ++i) all_blocks[i] = static_cast<int32_t>(i);
    std::shuffle(all_blocks.begin(), all_blocks.end(), rng);
    // The same cache in float16 (the engine's default): the kernel widens it as the reference does.
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    for (size_t i = 0; i < k.size(); ++i) {
      k16[i] = fp32_to_fp16(k[i]);
      v16[i] = fp32_to_fp16(v[i]);
    }
    for (DType dtype : {DType::kF32, DType::kF16}) {
      SCOPED_TRACE(dtype_name(dtype));
      const void* kd = dtype == DType::kF16 ? static_cast<const void*>(k16.data()) : k.data();
      const void* vd = dtype == DType::kF16 ? static_cast<const void*>(v16.data()) : v.data();
      std::vector<SequenceKv> seqs;
      for (int s = 0; s < n_seqs; ++s) {
        seqs.push_back({kd, vd, all_blocks.data() + s * blocks_per_seq, c.block, s == 1 ? c.min_pos : 0, dtype});
      }
      std::vector<int32_t> positions, token_seq;
      for (int s = 0; s < n_seqs; ++s) {
        std::vector<int64_t> at = {std::max<int64_t>(c.min_pos, 0), 31, 32, 33, 97};
        // A prefill chunk: consecutive positions, which the kernel takes in query blocks.
        for (int64_t p = 100; p < 100 + 21 + 7 * s; ++p) at.push_back(p);
        at.push_back(max_len - 1);
        for (int64_t p : at) {
          positions.push_back(static_cast<int32_t>(std::max<int64_t>(p, s == 1 ? c.min_pos : 0)));
          token_seq.push_back(s);
        }
      }
      const auto n_tokens = static_cast<int64_t>(positions.size());
      auto q = random_vector(static_cast<size_t>(n_tokens * c.n_head * c.head_dim), 33, 2.0f);
      std::vector<float> tiled(q.size()), ref(q.size());
      ThreadPool pool(2);
      attention(shape, q.data(), n_tokens, positions, seqs, token_seq, tiled.data(), pool, tier);
      attention_reference(shape, q.data(), n_tokens, positions, seqs, token_seq, ref.data(), pool);
      for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(tiled[i], ref[i], 2e-5f * (1.0f + std::abs(ref[i]))) << i;
      const int64_t row = c.n_head * c.head_dim;
      for (int64_t t = 0; t < n_tokens; ++t) {
        std::vector<float> alone(static_cast<size_t>(row));
        attention(shape, q.data() + t * row, 1, std::span(positions).subspan(static_cast<size_t>(t), 1), seqs,
                  std::span(token_seq).subspan(static_cast<size_t>(t), 1), alone.data(), pool, tier);
        ASSERT_EQ(0, std::memcmp(alone.data(), tiled.data() + t * row, alone.size() * sizeof(float))) << "token " << t;
      }
    }
  }
}

// Long contexts: keys go in segments of 1024 positions merged in order, and a decode token with
// few heads is split over the threads by segment. A token's output is bitwise the same alone
// (the split walk, on 1 or 2 threads) as in a batch with a prefill chunk across a segment edge
// (the one-item walk), and near the per-key reference.
TEST_P(AttentionTier, LongContextAttentionIsTheSameSplitBySegmentOrNot) {
  const Isa tier = GetParam();
  std::mt19937 rng(5);
  struct Case { int64_t n_head, n_head_kv, head_dim, block, window, min_pos; };
  const Case cases[] = {{9, 3, 64, 16, 0, 0}, {4, 1, 256, 16, 0, 0}, {4, 1, 64, 7, 1500, 0}, {2, 2, 32, 16, 0, 900}};
  for (const Case& c : cases) {
    SCOPED_TRACE("heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_head_kv) + " dim " +
                 std::to_string(c.head_dim) + " window " + std::to_string(c.window));
    const AttentionShape shape{c.n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt(static_cast<float>(c.head_dim)),
                               c.window};
    const int64_t kv_stride = c.n_head_kv * c.head_dim, len = 2600;
    const int64_t n_blocks = (len + c.block - 1) / c.block, n_rows = n_blocks * c.block;
    auto k = random_vector(static_cast<size_t>(n_rows * kv_stride), 41, 2.0f);
    auto v = random_vector(static_cast<size_t>(n_rows * kv_stride), 42);
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    for (size_t i = 0; i < k.size(); ++i) {
      k16[i] = fp32_to_fp16(k[i]);
      v16[i] = fp32_to_fp16(v[i]);
    }
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
    std::shuffle(table.begin(), table.end(), rng);
    const SequenceKv seq{k16.data(), v16.data(), table.data(), c.block, c.min_pos, DType::kF16};
    std::vector<int32_t> positions;
    for (int32_t p = 1000; p < 1040; ++p) positions.push_back(p);  // a prefill chunk across 1024
    for (int32_t p : {1023, 1024, 2047, 2048, 2599}) positions.push_back(p);
    const std::vector<int32_t> token_seq(positions.size(), 0);
    const auto n_tokens = static_cast<int64_t>(positions.size());
    auto q = random_vector(static_cast<size_t>(n_tokens * c.n_head * c.head_dim), 43, 2.0f);
    std::vector<float> batched(q.size()), ref(q.size());
    ThreadPool two(2), one(1);
    attention(shape, q.data(), n_tokens, positions, std::span(&seq, 1), token_seq, batched.data(), two, tier);
    attention_reference(shape, q.data(), n_tokens, positions, std::span(&seq, 1), token_seq, ref.data(), two);
    for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(batched[i], ref[i], 2e-5f * (1.0f + std::abs(ref[i]))) << i;
    const int64_t row = c.n_head * c.head_dim;
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (ThreadPool* pool : {&one, &two}) {
        std::vector<float> alone(static_cast<size_t>(row));
        attention(shape, q.data() + t * row, 1, std::span(positions).subspan(static_cast<size_t>(t), 1),
                  std::span(&seq, 1), std::span(token_seq).subspan(0, 1), alone.data(), *pool, tier);
        ASSERT_EQ(0, std::memcmp(alone.data(), batched.data() + t * row, alone.size() * sizeof(float)))
            << "position " << positions[static_cast<size_t>(t)] << ", " << pool->n_threads() << " threads";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiers, AttentionTier, ::testing::Values(Isa::kScalar, Isa::kAvx2, Isa::kAvx512),
                         [](const ::testing::TestParamInfo<Isa>& info) { return std::string(isa_name(info.param)); });

// The paged layout written out by hand: blocks of 4 slots, 2 KV heads of 3. Slot 6 is block 1,
// offset 2; block 1 starts at element 4 * 2 * 3 = 24 and head h's panel 12 elements later;
// dimension i of the key sits at + 4 i + 2 (keys in lanes), of the value at + 2 * 3 + i.
TEST(Ops, StoreKvPutsKeysInLanesAndValuesInRows) {
  const KvLayout layout{4, 2, 3};
  const std::vector<float> k = {0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f}, v = {-1, -2, -3, -4, -5, -6};
  for (DType dtype : {DType::kF32, DType::kF16}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::vector<float> k32(2 * layout.block_elems()), v32(k32.size());
    std::vector<uint16_t> k16(k32.size()), v16(k32.size());
    const bool half = dtype == DType::kF16;
    store_kv(layout, dtype, 6, k.data(), v.data(), half ? static_cast<void*>(k16.data()) : k32.data(),
             half ? static_cast<void*>(v16.data()) : v32.data());
    auto at = [&](bool key, size_t i) {
      return half ? fp16_to_fp32((key ? k16 : v16)[i]) : (key ? k32 : v32)[i];
    };
    for (int64_t h = 0; h < 2; ++h) {
      for (int64_t i = 0; i < 3; ++i) {
        EXPECT_EQ(layout.k_index(6, h, i), 24 + 12 * h + 4 * i + 2);
        EXPECT_EQ(layout.v_index(6, h, i), 24 + 12 * h + 6 + i);
        EXPECT_EQ(at(true, static_cast<size_t>(24 + 12 * h + 4 * i + 2)), k[static_cast<size_t>(h * 3 + i)]);
        EXPECT_EQ(at(false, static_cast<size_t>(24 + 12 * h + 6 + i)), v[static_cast<size_t>(h * 3 + i)]);
      }
    }
    int written = 0;  // nothing else
    for (size_t i = 0; i < k32.size(); ++i) written += (at(true, i) != 0.0f) + (at(false, i) != 0.0f);
    EXPECT_EQ(written, 12);
  }
}

TEST(Ops, GatherRowsDequantizes) {
  std::vector<float> table = {0, 1, 2, 3, 4, 5, 6, 7};  // 4 rows of 2
  WeightMatrix m{DType::kF32, reinterpret_cast<const uint8_t*>(table.data()), 4, 2};
  std::vector<int32_t> ids = {3, 0, 3};
  std::vector<float> y(6);
  gather_rows(m, ids, y.data());
  EXPECT_EQ(y, (std::vector<float>{6, 7, 0, 1, 6, 7}));
}

}  // namespace
}  // namespace deepinfer::cpu

namespace deepinfer::cpu {
namespace {

// Batch invariance at the kernel level: a token's matmul output is bitwise the same whether it
// is computed alone or among others (the four-token path shares only the weight unpacking).
class BatchedDot : public ::testing::TestWithParam<DType> {};

TEST_P(BatchedDot, FourRowKernelEqualsSingleRowBitForBit) {
  const DType type = GetParam();
  const int64_t n = 800;  // 25 blocks: an odd count exercises the tail of the two-chain loop
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<uint8_t> w(dtype_row_bytes(type, n));
  for (auto& b : w) b = static_cast<uint8_t>(byte(rng));
  // Random codes with sane fp16 scales (random bytes may spell NaN in a scale).
  {
    std::vector<float> f(n);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (auto& v : f) v = g(rng);
    if (type == DType::kQ8_0) quantize_row(type, f.data(), w.data(), n);
    else {
      // Q4/Q5 formats: keep random codes, set d (and m) to small finite values.
      const size_t bb = dtype_traits(type)->block_bytes;
      const bool has_min = type == DType::kQ4_1 || type == DType::kQ5_1;
      for (size_t b = 0; b < w.size(); b += bb) {
        const uint16_t d = fp32_to_fp16(0.01f * (1 + b % 7)), m = fp32_to_fp16(-0.05f);
        std::memcpy(&w[b], &d, 2);
        if (has_min) std::memcpy(&w[b + 2], &m, 2);
      }
    }
  }
  const DType act_type = vec_dot_type(type);
  std::vector<std::vector<uint8_t>> acts(4, std::vector<uint8_t>(dtype_row_bytes(act_type, n)));
  std::normal_distribution<float> g(0.0f, 2.0f);
  for (auto& a : acts) {
    std::vector<float> f(n);
    for (auto& v : f) v = g(rng);
    quantize_row(act_type, f.data(), a.data(), n);
  }
  const void* rows[4] = {acts[0].data(), acts[1].data(), acts[2].data(), acts[3].data()};
  float out[4];
  vec_dot_x4(type, w.data(), rows, n, out);
  for (int c = 0; c < 4; ++c) {
    const float single = vec_dot(type, w.data(), rows[c], n);
    EXPECT_EQ(fp32_to_bits(out[c]), fp32_to_bits(single)) << dtype_name(type) << " row " << c;
    EXPECT_TRUE(std::isfinite(single));
  }
}

INSTANTIATE_TEST_SUITE_P(Types, BatchedDot,
                         ::testing::Values(DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1, DType::kQ8_0),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Ops, MatmulRowsDoNotDependOnBatchSize) {
  const int64_t n_out = 40, n_in = 256;
  std::vector<float> wf(n_out * n_in);
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto& v : wf) v = g(rng);
  std::vector<uint8_t> wq(dtype_row_bytes(DType::kQ8_0, n_in) * n_out);
  for (int64_t o = 0; o < n_out; ++o) {
    quantize_row(DType::kQ8_0, wf.data() + o * n_in, wq.data() + o * dtype_row_bytes(DType::kQ8_0, n_in), n_in);
  }
  WeightMatrix m{DType::kQ8_0, wq.data(), n_out, n_in};
  std::vector<float> x(7 * n_in);
  for (auto& v : x) v = g(rng);
  ThreadPool pool(2);
  QuantScratch scratch;
  std::vector<float> batched(7 * n_out), alone(n_out);
  matmul(m, x.data(), 7, batched.data(), nullptr, scratch, pool);
  for (int64_t t = 0; t < 7; ++t) {
    matmul(m, x.data() + t * n_in, 1, alone.data(), nullptr, scratch, pool);
    for (int64_t o = 0; o < n_out; ++o) {
      EXPECT_EQ(fp32_to_bits(batched[t * n_out + o]), fp32_to_bits(alone[o])) << "token " << t << " row " << o;
    }
  }
}

// Grouped products (q/k/v, gate/up) equal one matmul each, bit for bit: matrices of different
// heights and types sharing an activation format (Q4_0 through the GEMM and Q8_0 through the
// four-token dots both take Q8_0 rows), with and without bias, one token and several; and a
// group whose activation formats differ (Q4_1 takes Q8_1 rows) falls back to one product after
// the other.
TEST(Ops, MatmulGroupEqualsOneMatmulEach) {
  const int64_t n_in = 256;
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  struct Made {
    std::vector<uint8_t> bytes;
    WeightMatrix m;
  };
  auto make = [&](DType type, int64_t n_out) {
    std::vector<float> wf(static_cast<size_t>(n_out * n_in));
    for (auto& v : wf) v = g(rng);
    Made w;
    const size_t row = dtype_row_bytes(type, n_in);
    w.bytes.resize(row * static_cast<size_t>(n_out));
    if (type == DType::kF32) {
      std::memcpy(w.bytes.data(), wf.data(), w.bytes.size());
    } else if (type == DType::kQ8_0) {
      for (int64_t o = 0; o < n_out; ++o) quantize_row(type, wf.data() + o * n_in, w.bytes.data() + o * row, n_in);
    } else {
      // Q4_0 (f16 d, 16 code bytes) and Q4_1 (f16 d, f16 m, 16 code bytes): random codes, small
      // scales (weight quantizers are not part of the engine).
      std::uniform_int_distribution<int> byte(0, 255);
      for (auto& b : w.bytes) b = static_cast<uint8_t>(byte(rng));
      const size_t block = type == DType::kQ4_0 ? 18 : 20;
      for (size_t at = 0; at < w.bytes.size(); at += block) {
        const uint16_t d = fp32_to_fp16(0.01f * (1.0f + std::abs(g(rng))));
        std::memcpy(w.bytes.data() + at, &d, 2);
        if (type == DType::kQ4_1) {
          const uint16_t m = fp32_to_fp16(-0.05f * std::abs(g(rng)));
          std::memcpy(w.bytes.data() + at + 2, &m, 2);
        }
      }
    }
    w.m = WeightMatrix{type, w.bytes.data(), n_out, n_in};
    return w;
  };
  for (bool mixed_activations : {false, true}) {
    std::vector<Made> ws;
    ws.push_back(make(DType::kQ4_0, 40));
    ws.push_back(make(DType::kQ8_0, 19));
    ws.push_back(make(mixed_activations ? DType::kQ4_1 : DType::kQ4_0, 64));
    std::vector<float> bias(64);
    for (auto& v : bias) v = g(rng);
    for (int64_t n_tokens : {1, 7}) {
      std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
      for (auto& v : x) v = g(rng);
      ThreadPool pool(2);
      QuantScratch scratch;
      std::vector<std::vector<float>> grouped(3), single(3);
      std::vector<MatmulOutput> outs;
      for (size_t i = 0; i < 3; ++i) {
        grouped[i].resize(static_cast<size_t>(n_tokens * ws[i].m.n_out));
        single[i].resize(grouped[i].size());
        outs.push_back({&ws[i].m, grouped[i].data(), i == 1 ? bias.data() : nullptr});
      }
      matmul_group(outs, x.data(), n_tokens, scratch, pool);
      for (size_t i = 0; i < 3; ++i) {
        matmul(ws[i].m, x.data(), n_tokens, single[i].data(), i == 1 ? bias.data() : nullptr, scratch, pool);
        ASSERT_EQ(0, std::memcmp(grouped[i].data(), single[i].data(), grouped[i].size() * sizeof(float)))
            << "matrix " << i << ", " << n_tokens << " tokens, mixed activations " << mixed_activations;
      }
    }
  }
}

// matmul_argmax names the first maximum of the row matmul writes, for packed and unpacked
// matrices, one token and a batch, over 1 and 2 threads: ties planted by duplicate weight rows
// inside one 256-row call, across calls and across the threads' ranges go to the lower id, and
// a token whose x is zero (every product 0, a tie of all rows) takes id 0.
TEST(Ops, MatmulArgmaxIsTheFirstMaximumOfMatmul) {
  const int64_t n_out = 1024 + 48, n_in = 64;
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> wf(static_cast<size_t>(n_out * n_in));
  for (auto& v : wf) v = g(rng);
  // Row 900 is the largest for x = row 900 itself (|w|^2 beats w.v for the others, nearly
  // surely); copies of it at 901 (same call), 1000 (the next call) and 1060 (the last rows).
  for (int64_t copy : {901, 1000, 1060}) std::copy_n(wf.begin() + 900 * n_in, n_in, wf.begin() + copy * n_in);
  const int64_t n_tokens = 7;
  std::vector<float> x(static_cast<size_t>(n_tokens * n_in));
  for (auto& v : x) v = g(rng);
  std::copy_n(wf.begin() + 900 * n_in, n_in, x.begin() + 2 * n_in);
  std::fill_n(x.begin() + 4 * n_in, n_in, 0.0f);
  for (DType type : {DType::kF32, DType::kQ8_0}) {
    const size_t row = dtype_row_bytes(type, n_in);
    std::vector<uint8_t> bytes(row * static_cast<size_t>(n_out));
    if (type == DType::kF32) {
      std::memcpy(bytes.data(), wf.data(), bytes.size());
    } else {
      for (int64_t o = 0; o < n_out; ++o) quantize_row(type, wf.data() + o * n_in, bytes.data() + o * row, n_in);
    }
    std::vector<uint8_t> packed(bytes.size());
    for (bool pack : {false, true}) {
      WeightMatrix m{type, bytes.data(), n_out, n_in};
      if (pack) {
        if (!packable(type, n_out, n_in)) continue;
        pack_matrix(type, bytes.data(), n_out, n_in, packed.data());
        m.packed = packed.data();
      }
      for (int threads : {1, 2}) {
        for (int64_t n : {int64_t{1}, n_tokens}) {
          const float* xs = n == 1 ? x.data() + 2 * n_in : x.data();
          ThreadPool pool(threads);
          QuantScratch scratch;
          std::vector<float> y(static_cast<size_t>(n * n_out));
          matmul(m, xs, n, y.data(), nullptr, scratch, pool);
          std::vector<int32_t> best(static_cast<size_t>(n), -7), from_y(static_cast<size_t>(n), -7);
          matmul_argmax(m, xs, n, best.data(), scratch, pool);
          argmax_rows(y.data(), n, n_out, from_y.data());
          for (int64_t t = 0; t < n; ++t) {
            const float* yt = y.data() + t * n_out;
            const auto first = static_cast<int32_t>(std::max_element(yt, yt + n_out) - yt);
            EXPECT_EQ(best[static_cast<size_t>(t)], first)
                << dtype_name(type) << (pack ? " packed" : "") << ", " << threads << " threads, token " << t << " of " << n;
            EXPECT_EQ(from_y[static_cast<size_t>(t)], first);
          }
          if (n == 1) {
            EXPECT_EQ(best[0], 900) << dtype_name(type);
          }
          if (n == n_tokens) {
            EXPECT_EQ(best[2], 900) << dtype_name(type);
            EXPECT_EQ(best[4], 0) << dtype_name(type);
          }
        }
      }
    }
  }
}

// argmax_rows: NaN is never the largest, -inf counts as a value, a row of NaN only gives 0.
TEST(Ops, ArgmaxRowsSkipsNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> y = {nan, 1.0f, 3.0f, nan, 3.0f,  //
                                nan, nan, -inf, nan, -inf,   //
                                nan, nan, nan, nan, nan};
  std::vector<int32_t> best(3, -7);
  argmax_rows(y.data(), 3, 5, best.data());
  EXPECT_EQ(best, (std::vector<int32_t>{2, 2, 0}));
}

TEST(Ops, GeluTanhMulMatchesFormula) {
  // Known values of gelu(x, approximate="tanh"): 0 at 0, about 0.841192 at 1, -0.158808 at -1,
  // close to x for large x and to 0 for very negative x.
  std::vector<float> gate = {0.0f, 1.0f, -1.0f, 6.0f, -6.0f, 0.5f};
  const std::vector<float> up = {3.0f, 2.0f, 1.0f, 1.0f, 1.0f, -2.0f};
  gelu_tanh_mul(gate.data(), up.data(), static_cast<int64_t>(gate.size()));
  EXPECT_FLOAT_EQ(gate[0], 0.0f);
  EXPECT_NEAR(gate[1], 2.0f * 0.8411920f, 1e-5);
  EXPECT_NEAR(gate[2], -0.1588080f, 1e-5);
  EXPECT_NEAR(gate[3], 6.0f, 1e-5);
  EXPECT_NEAR(gate[4], 0.0f, 1e-5);
  const double x = 0.5;
  const double ref = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  EXPECT_NEAR(gate[5], -2.0 * ref, 1e-6);
}

TEST(Ops, SoftCapBoundsByTanh) {
  ThreadPool pool(2);
  for (const bool reference : {true, false}) {
    std::vector<float> x = {0.0f, 10.0f, -100.0f, 1000.0f, -0.0f};
    reference ? soft_cap_reference(x.data(), 5, 30.0f) : soft_cap(x.data(), 5, 30.0f, pool);
    EXPECT_FLOAT_EQ(x[0], 0.0f);
    EXPECT_NEAR(x[1], 30.0 * std::tanh(10.0 / 30.0), 1e-5);
    EXPECT_NEAR(x[2], 30.0 * std::tanh(-100.0 / 30.0), 1e-4);
    EXPECT_NEAR(x[3], 30.0f, 1e-4);
    EXPECT_TRUE(std::signbit(x[4])) << "tanh(-0) is -0";
  }
}

// The vector tanh against double precision over every scale it meets: near 0 (its polynomial),
// both sides of 0.2 (where it switches to the exponential form), the saturated tail, infinities
// and a NaN; 40,001 values cover a tail of 15 for the AVX-512 loop and its masked end.
TEST(Ops, SoftCapMatchesTanhToSevenDigits) {
  ThreadPool pool(2);
  const float cap = 30.0f;
  std::vector<float> in;
  for (int i = -20000; i <= 20000; ++i) in.push_back(static_cast<float>(std::sinh(i * 3e-4)) * cap * 0.5f);
  for (float v : {0.2f * cap, std::nextafter(0.2f * cap, 0.0f), 1e-30f, -1e-30f, 300.0f * cap}) in.push_back(v);
  in.push_back(std::numeric_limits<float>::infinity());
  in.push_back(-std::numeric_limits<float>::infinity());
  in.push_back(std::numeric_limits<float>::quiet_NaN());
  std::vector<float> x = in;
  soft_cap(x.data(), static_cast<int64_t>(x.size()), cap, pool);
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {
      EXPECT_TRUE(std::isnan(x[i]));
      continue;
    }
    const double want = cap * std::tanh(static_cast<double>(in[i] * (1.0f / cap)));
    EXPECT_NEAR(x[i], want, 5e-7 * std::abs(want) + 1e-37) << "x = " << in[i];
  }
}

TEST(Ops, RouteTopKPicksHighestSoftmaxProbabilities) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.5f, 2.0f};
  std::vector<double> p(logits.size());
  double sum = 0;
  for (size_t e = 0; e < logits.size(); ++e) sum += p[e] = std::exp(static_cast<double>(logits[e]));
  for (double& v : p) v /= sum;
  int32_t ids[3];
  float w[3];
  route_top_k(logits.data(), 5, 3, /*renormalize=*/false, ids, w);
  // The tie between experts 1 and 4 goes to the lower index.
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 4);
  EXPECT_EQ(ids[2], 3);
  EXPECT_NEAR(w[0], p[1], 1e-6);
  EXPECT_NEAR(w[1], p[4], 1e-6);
  EXPECT_NEAR(w[2], p[3], 1e-6);
  route_top_k(logits.data(), 5, 2, /*renormalize=*/true, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 4);
  EXPECT_NEAR(w[0], 0.5, 1e-6);
  EXPECT_NEAR(w[0] + w[1], 1.0, 1e-6);
}

TEST(Ops, RmsNormPerHeadNormalizesEachHeadSeparately) {
  // QK-norm: [2 tokens, 3 heads, 4] normalised as 6 rows of 4 with one shared weight.
  const auto x = random_vector(24, 31);
  const std::vector<float> w = {1.0f, 0.5f, 2.0f, -1.0f};
  std::vector<float> out(24);
  rms_norm(x.data(), w.data(), 1e-6f, 6, 4, out.data());
  for (int r = 0; r < 6; ++r) {
    double ss = 0;
    for (int i = 0; i < 4; ++i) ss += static_cast<double>(x[r * 4 + i]) * x[r * 4 + i];
    const double inv = 1.0 / std::sqrt(ss / 4 + 1e-6);
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[r * 4 + i], x[r * 4 + i] * inv * w[i], 1e-5);
  }
}

}  // namespace
}  // namespace deepinfer::cpu
