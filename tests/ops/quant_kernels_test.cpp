// Op tests of the quantized kernels: every instruction-set tier this CPU runs, against the scalar
// reference, on random shapes with odd sizes and tails (odd block counts, row and token counts
// that are not multiples of the register tiles, blocks larger than the matmul's cache blocks).
//
// Tolerances: the k-quants reduce each super-block to one exact integer and scale it with the
// reference's float operations, so they must agree exactly; the 32-element formats differ from
// the reference only in the order of float additions, bounded by the float summation error of
// their terms (one wrong element is far outside it). Within a tier the matrix product must equal
// that tier's one-row dot product bit for bit (batch invariance).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../unit/backend/quant_test_util.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/peak.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_kernels.h"

namespace deepinfer::cpu {
namespace {

using testing::block_size;
using testing::dot_double;
using testing::random_floats;
using testing::random_row;

bool is_k_quant(DType t) { return t >= DType::kQ2_K && t <= DType::kQ8_K; }

// The formats the AVX-512 tier has matrix products for (Q8_0 and the rest use the avx2 tier's
// four-token kernel, checked by MatmulIsBatchInvariantForEveryFormat).
constexpr DType kGemmTypes[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ2_K, DType::kQ4_K, DType::kQ6_K};

// A random weight matrix of `rows` rows, each row_bytes apart plus `pad` bytes of garbage, and
// `toks` activation rows quantized by the reference, likewise padded.
struct Problem {
  DType type;
  int64_t n, rows, toks;
  size_t w_stride, a_stride;
  std::vector<uint8_t> w, a;
  std::vector<std::vector<float>> w_f, a_f;  // dequantized, for the error bound
};

// `pad` bytes after every row, so strides differ from row sizes. Keep it a multiple of 4: blocks
// hold float16 scales (Q8_K a float32 one), and real rows (packed, from a 32-aligned tensor) keep
// their blocks aligned.
Problem make_problem(DType type, int64_t n, int64_t rows, int64_t toks, size_t pad, std::mt19937& rng) {
  Problem p{type, n, rows, toks, dtype_row_bytes(type, n) + pad, 0, {}, {}, {}, {}};
  const DType act_type = vec_dot_type(type);
  p.a_stride = dtype_row_bytes(act_type, n) + pad;
  p.w.assign(p.w_stride * rows, 0xA5);
  p.a.assign(p.a_stride * toks, 0x5A);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<uint8_t> row = random_row(type, n, rng);
    std::memcpy(p.w.data() + r * p.w_stride, row.data(), row.size());
    std::vector<float> f(n);
    ref::dequantize_row(type, row.data(), f.data(), n);
    p.w_f.push_back(std::move(f));
  }
  for (int64_t t = 0; t < toks; ++t) {
    const std::vector<float> x = random_floats(n, rng, 2.0f);
    ref::quantize_row(act_type, x.data(), p.a.data() + t * p.a_stride, n);
    std::vector<float> f(n);
    ref::dequantize_row(act_type, p.a.data() + t * p.a_stride, f.data(), n);
    p.a_f.push_back(std::move(f));
  }
  return p;
}

double tolerance(const Problem& p, int64_t r, int64_t t) {
  // Terms summed: one per 4-element lane in the widest tier, plus the block terms.
  const double terms = static_cast<double>(p.n / 4 + p.n / block_size(p.type) + 16);
  return terms * 0x1p-24 * dot_double(p.w_f[r], p.a_f[t]).magnitude + 1e-30;
}

struct Tier {
  std::string name;
  VecDotFn (*vec_dot_fn)(DType);
  GemmFn (*gemm_fn)(DType);
  std::vector<DType> gemm_types;  // those gemm_fn has a product for
};

std::vector<Tier> tiers() {
  std::vector<Tier> all;
  if (cpu_has(Isa::kAvx2)) {
    all.push_back({"avx2", avx2::vec_dot_fn, avx2::gemm_fn, {DType::kF32, DType::kF16, DType::kBF16}});
  }
  if (cpu_has(Isa::kAvx512)) {
    all.push_back({"avx512", avx512::vec_dot_fn, avx512::gemm_fn, std::vector<DType>(std::begin(kGemmTypes), std::end(kGemmTypes))});
  }
  return all;
}

TEST(OpKernels, DispatchPicksTheHighestTierTheCpuRuns) {
  const char* want = cpu_has(Isa::kAvx512) ? "avx512" : cpu_has(Isa::kAvx2) ? "avx2" : "scalar";
  if (std::getenv("DEEPINFER_ISA") != nullptr) GTEST_SKIP() << "DEEPINFER_ISA caps the tier";
  EXPECT_STREQ(kernel_isa(), want);
  // The tier the table holds is the one gemm_fn reaches.
  EXPECT_EQ(gemm_fn(DType::kQ4_1) != nullptr, cpu_has(Isa::kAvx512));
}

// The peak rates `bench ops` reads kernels against are measured for the tier the kernels run on:
// positive on AVX2 and AVX-512 CPUs, and the int8 rate above the float one (a vpmaddubsw or
// vpdpbusd does 4 times a vfmadd231ps's multiplies on the same width).
TEST(OpKernels, PeakRatesAreMeasuredForTheTierInUse) {
  ThreadPool pool(1);
  const PeakRates p = measure_peak_rates(pool);
  if (std::string(kernel_isa()) == "scalar") {
    EXPECT_EQ(p.f32_gflops, 0.0);
    GTEST_SKIP() << "no vector tier on this CPU: no peak is measured";
  }
  EXPECT_GT(p.f32_gflops, 1.0);
  EXPECT_GT(p.int8_gops, p.f32_gflops);
}

TEST(OpKernels, VecDotOfEveryTierMatchesReference) {
  std::mt19937 rng(21);
  int checked = 0;
  for (const Tier& tier : tiers()) {
    for (DType type : testing::kWeightTypes) {
      const VecDotFn fast = tier.vec_dot_fn(type);
      if (fast == nullptr) continue;
      const int64_t bs = block_size(type);
      for (int64_t blocks : {1, 2, 3, 5, 18, 19}) {
        const int64_t n = bs == 1 ? 8 * blocks + 3 : bs * blocks;
        const Problem p = make_problem(type, n, 1, 1, 0, rng);
        const float want = ref::vec_dot(type, p.w.data(), p.a.data(), n);
        const float got = fast(p.w.data(), p.a.data(), n);
        if (is_k_quant(type)) {
          EXPECT_EQ(fp32_to_bits(got), fp32_to_bits(want)) << tier.name << " " << dtype_name(type) << " n=" << n;
        } else {
          EXPECT_NEAR(got, want, tolerance(p, 0, 0)) << tier.name << " " << dtype_name(type) << " n=" << n;
        }
        ++checked;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no SIMD tier on this CPU";
}

// Every (row, token) of a matrix product equals the same tier's single dot product bit for bit,
// for tile-unfriendly shapes, and the reference within the tolerance.
TEST(OpKernels, GemmEqualsItsVecDotBitForBitOnOddShapes) {
  std::mt19937 rng(77);
  int checked = 0;
  for (const Tier& tier : tiers()) {
    for (DType type : tier.gemm_types) {
      const GemmFn gemm = tier.gemm_fn(type);
      const VecDotFn dot = tier.vec_dot_fn(type);
      ASSERT_NE(gemm, nullptr) << tier.name << " " << dtype_name(type);
      ASSERT_NE(dot, nullptr) << tier.name << " " << dtype_name(type);
      const int64_t bs = block_size(type);
      const int64_t shapes[][3] = {{1, 1, 1}, {1, 5, 3}, {3, 1, 2}, {4, 4, 18}, {5, 7, 1}, {9, 6, 5}, {13, 11, 3}, {8, 9, 19},
                                      {37, 4, 19}};  // past a band of 33 rows (float tiles)
      for (const auto& s : shapes) {
        // Float types (block size 1): lengths with and without 32- and 8-element steps and tails, and
        // past the tiles' 512-element blocks (1029, 1087).
        const int64_t plain_n = s[2] == 1 ? 7 : 57 * s[2] + s[2] % 5;
        const int64_t rows = s[0], toks = s[1], n = bs == 1 ? plain_n : bs * s[2];
        const Problem p = make_problem(type, n, rows, toks, 8, rng);
        const int64_t ldy = rows + 3;
        std::vector<float> y(static_cast<size_t>(toks * ldy), -1.0f);
        gemm(p.w.data(), p.w_stride, rows, p.a.data(), p.a_stride, toks, n, y.data(), ldy);
        for (int64_t t = 0; t < toks; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            const void* wr = p.w.data() + r * p.w_stride;
            const void* at = p.a.data() + t * p.a_stride;
            const float got = y[t * ldy + r];
            const std::string where = tier.name + " " + std::string(dtype_name(type)) + " rows=" + std::to_string(rows) +
                                      " toks=" + std::to_string(toks) + " n=" + std::to_string(n) + " at (" +
                                      std::to_string(r) + "," + std::to_string(t) + ")";
            EXPECT_EQ(fp32_to_bits(got), fp32_to_bits(dot(wr, at, n))) << where;
            const float want = ref::vec_dot(type, wr, at, n);
            if (is_k_quant(type)) {
              EXPECT_EQ(fp32_to_bits(got), fp32_to_bits(want)) << where;
            } else {
              EXPECT_NEAR(got, want, tolerance(p, r, t)) << where;
            }
          }
          // The padding columns of y are not written.
          for (int64_t r = rows; r < ldy; ++r) EXPECT_EQ(y[t * ldy + r], -1.0f);
        }
        ++checked;
      }
    }
  }
  if (checked == 0) GTEST_SKIP() << "no matrix-product kernel on this CPU";
}

// Four activation rows at once (the dispatched vec_dot_x4) give each row exactly its one-row dot,
// for every weight type, on lengths with a tail past the 32- and 8-element steps (float types).
TEST(OpKernels, FourRowDotsEqualOneRowDotsBitForBit) {
  std::mt19937 rng(13);
  for (DType type : testing::kWeightTypes) {
    const bool plain = block_size(type) == 1;
    for (int64_t blocks : {1, 3, 9}) {
      const int64_t n = plain ? 32 * blocks + 13 : block_size(type) * blocks;
      const std::vector<uint8_t> w = random_row(type, n, rng);
      const DType act_type = vec_dot_type(type);
      std::vector<std::vector<uint8_t>> rows(4, std::vector<uint8_t>(dtype_row_bytes(act_type, n)));
      const void* a[4];
      for (int c = 0; c < 4; ++c) {
        const std::vector<float> x = random_floats(n, rng);
        if (act_type == DType::kF32) {
          std::memcpy(rows[c].data(), x.data(), rows[c].size());
        } else {
          quantize_row(act_type, x.data(), rows[c].data(), n);
        }
        a[c] = rows[c].data();
      }
      float four[4];
      vec_dot_x4(type, w.data(), a, n, four);
      for (int c = 0; c < 4; ++c) {
        ASSERT_EQ(fp32_to_bits(four[c]), fp32_to_bits(vec_dot(type, w.data(), a[c], n)))
            << dtype_name(type) << " n=" << n << " row " << c;
      }
    }
  }
}

// The public matmul on two threads: batch sizes that cross the token blocks and row counts that
// split unevenly between threads give each token exactly its one-token result, plus the bias.
TEST(OpKernels, MatmulIsBatchInvariantForEveryFormat) {
  std::mt19937 rng(5);
  ThreadPool pool(2);
  QuantScratch scratch;
  for (DType type : testing::kWeightTypes) {
    const int64_t n_in = 2 * 256, n_out = 37, n_tok = 70;
    std::vector<uint8_t> w;
    for (int64_t o = 0; o < n_out; ++o) {
      const std::vector<uint8_t> row = random_row(type, n_in, rng);
      w.insert(w.end(), row.begin(), row.end());
    }
    const WeightMatrix m{type, w.data(), n_out, n_in};
    const std::vector<float> x = random_floats(n_tok * n_in, rng);
    const std::vector<float> bias = random_floats(n_out, rng);
    std::vector<float> batched(n_tok * n_out), alone(n_out);
    matmul(m, x.data(), n_tok, batched.data(), bias.data(), scratch, pool);
    for (int64_t t = 0; t < n_tok; ++t) {
      matmul(m, x.data() + t * n_in, 1, alone.data(), bias.data(), scratch, pool);
      for (int64_t o = 0; o < n_out; ++o) {
        ASSERT_EQ(fp32_to_bits(batched[t * n_out + o]), fp32_to_bits(alone[o]))
            << dtype_name(type) << " token " << t << " row " << o;
      }
    }
    // And the product itself: dequantized weights against the float input, within the error of
    // quantizing the activations (a few parts in a thousand of the magnitude).
    std::vector<float> wf(n_in);
    for (int64_t o = 0; o < n_out; o += 5) {
      ref::dequantize_row(type, w.data() + o * m.row_bytes(), wf.data(), n_in);
      for (int64_t t = 0; t < n_tok; t += 7) {
        double dot = 0, mag = 0;
        for (int64_t i = 0; i < n_in; ++i) {
          dot += static_cast<double>(wf[i]) * x[t * n_in + i];
          mag += std::fabs(static_cast<double>(wf[i]) * x[t * n_in + i]);
        }
        EXPECT_NEAR(batched[t * n_out + o], dot + bias[o], 0.02 * mag + 1e-6) << dtype_name(type);
      }
    }
  }
}

}  // namespace
}  // namespace deepinfer::cpu
