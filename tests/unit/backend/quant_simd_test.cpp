// SIMD paths against the scalar reference on random rows of many lengths. Each instruction set
// this build targets is tested on its own (quant.h only reaches the fastest one). Dot products
// may differ from the reference only by the order of float additions; the k-quants reduce
// each super-block to one integer first and so must agree exactly; the quantizers must agree
// byte for byte.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/quant.h"
#include "core/half.h"
#include "backend/cpu/quant_kernels.h"
#include "quant_test_util.h"

namespace deepinfer::cpu {
namespace {

using testing::block_size;
using testing::dot_double;
using testing::kWeightTypes;
using testing::random_floats;
using testing::random_row;

struct IsaPath {
  std::string name;
  VecDotFn (*vec_dot_fn)(DType);
  QuantizeRowFn (*quantize_row_fn)(DType);
  bool built;  // this build compiled the tier and this CPU runs it
};

// Only the tiers this CPU runs: calling another would be an illegal instruction.
std::vector<IsaPath> isas() {
  std::vector<IsaPath> all;
  if (cpu_has(Isa::kAvx2)) all.push_back({"avx2", avx2::vec_dot_fn, avx2::quantize_row_fn, true});
  if (cpu_has(Isa::kAvx512)) all.push_back({"avx512", avx512::vec_dot_fn, avx512::quantize_row_fn, true});
  return all;
}

bool is_k_quant(DType t) { return t >= DType::kQ2_K && t <= DType::kQ8_K; }

// The paths the real models need must exist wherever the instruction set was compiled in, so a
// refactor cannot silently fall back to scalar code.
TEST(QuantSimd, RequiredPathsExist) {
  if (!cpu_has(Isa::kAvx2)) GTEST_SKIP() << "this CPU or build lacks AVX2 (+FMA, F16C): scalar paths only";
  const IsaPath avx2 = isas()[0];
  for (DType t : {DType::kF32, DType::kF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ8_0, DType::kQ4_K,
                  DType::kQ6_K}) {
    EXPECT_NE(avx2.vec_dot_fn(t), nullptr) << dtype_name(t);
  }
  for (DType t : {DType::kQ8_0, DType::kQ8_1, DType::kQ8_K}) EXPECT_NE(avx2.quantize_row_fn(t), nullptr) << dtype_name(t);
}

TEST(QuantSimd, VecDotMatchesReference) {
  std::mt19937 rng(1234);
  int n_checked = 0;
  for (const IsaPath& isa : isas()) {
    for (DType type : kWeightTypes) {
      const VecDotFn fast = isa.vec_dot_fn(type);
      if (fast == nullptr) continue;
      const int64_t bs = block_size(type);
      // Odd block counts for the block formats; lengths off the vector width for plain types.
      const std::vector<int64_t> lengths =
          bs == 1 ? std::vector<int64_t>{1, 7, 8, 15, 16, 17, 33, 70, 576, 4099}
                  : std::vector<int64_t>{bs, 2 * bs, 3 * bs, 5 * bs, 7 * bs, 17 * bs, 33 * bs};
      for (int64_t n : lengths) {
        for (int rep = 0; rep < 3; ++rep) {
          const std::vector<uint8_t> w = random_row(type, n, rng);
          const std::vector<float> x = random_floats(n, rng);
          const DType act_type = vec_dot_type(type);
          std::vector<uint8_t> a(dtype_row_bytes(act_type, n));
          ref::quantize_row(act_type, x.data(), a.data(), n);
          const float want = ref::vec_dot(type, w.data(), a.data(), n);
          const float got = fast(w.data(), a.data(), n);
          if (is_k_quant(type)) {
            EXPECT_EQ(got, want) << isa.name << " " << dtype_name(type) << " n=" << n;
          } else {
            std::vector<float> w_f(n), a_f(n);
            ref::dequantize_row(type, w.data(), w_f.data(), n);
            ref::dequantize_row(act_type, a.data(), a_f.data(), n);
            // Both round a sum of n / block terms (n for plain types), in different orders: the
            // worst-case bound of float summation, which one wrong element exceeds.
            const double terms = static_cast<double>(n / bs + 16);
            const double tol = terms * 0x1p-24 * dot_double(w_f, a_f).magnitude + 1e-30;
            EXPECT_NEAR(got, want, tol) << isa.name << " " << dtype_name(type) << " n=" << n;
          }
          ++n_checked;
        }
      }
    }
  }
  if (n_checked == 0) GTEST_SKIP() << "no SIMD dot product in this build";
}

// MXFP4 rows against float activations give bit for bit what the same weights stored as BF16
// give, in every tier (the scalar reference, each SIMD tier, and the public dispatch, whose BF16
// product is the avx2 tier's): a DeepSeek V4 release's FP4 experts then compute exactly what
// its dequantized twin does.
TEST(QuantSimd, Mxfp4EqualsItsBf16TwinBitForBit) {
  std::mt19937 rng(77);
  for (int64_t n : {32, 64, 96, 33 * 32, 4096}) {
    const std::vector<uint8_t> w = random_row(DType::kMXFP4, n, rng);
    std::vector<float> values(static_cast<size_t>(n));
    ref::dequantize_row(DType::kMXFP4, w.data(), values.data(), n);
    std::vector<uint16_t> twin(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      twin[static_cast<size_t>(i)] = fp32_to_bf16(values[static_cast<size_t>(i)]);
      ASSERT_EQ(bf16_to_fp32(twin[static_cast<size_t>(i)]), values[static_cast<size_t>(i)]) << "not exact in BF16";
    }
    const std::vector<float> x = random_floats(n, rng);
    EXPECT_EQ(fp32_to_bits(ref::vec_dot(DType::kMXFP4, w.data(), x.data(), n)),
              fp32_to_bits(ref::vec_dot(DType::kBF16, twin.data(), x.data(), n)))
        << "reference, n=" << n;
    EXPECT_EQ(fp32_to_bits(vec_dot(DType::kMXFP4, w.data(), x.data(), n)),
              fp32_to_bits(vec_dot(DType::kBF16, twin.data(), x.data(), n)))
        << "dispatch, n=" << n;
    for (const IsaPath& isa : isas()) {
      const VecDotFn fast = isa.vec_dot_fn(DType::kMXFP4);
      if (fast == nullptr) continue;
      EXPECT_EQ(fp32_to_bits(fast(w.data(), x.data(), n)), fp32_to_bits(vec_dot(DType::kBF16, twin.data(), x.data(), n)))
          << isa.name << ", n=" << n;
    }
  }
}

// Inputs that hit the rounding rules: halves at d = 1 (amax 127), ties between +max and -max,
// all-zero blocks, and plain random blocks.
std::vector<float> tricky_floats(int64_t n, std::mt19937& rng) {
  std::vector<float> x = random_floats(n, rng, 2.0f);
  std::uniform_int_distribution<int> half_steps(-254, 254);
  for (int64_t b0 = 0; b0 + 256 <= n; b0 += 256) {
    const int kind = static_cast<int>((b0 / 256) % 4);
    if (kind == 1) {  // halves with amax 127
      for (int64_t i = b0; i < b0 + 256; ++i) x[i] = 0.5f * static_cast<float>(half_steps(rng));
      x[b0 + 5] = 127.0f;
      x[b0 + 40] = -127.0f;
    } else if (kind == 2) {  // zeros
      for (int64_t i = b0; i < b0 + 256; ++i) x[i] = 0.0f;
    } else if (kind == 3) {  // max magnitude negative, tie later
      x[b0 + 100] = -50.0f;
      x[b0 + 200] = 50.0f;
    }
  }
  return x;
}

TEST(QuantSimd, QuantizeIsBitExact) {
  std::mt19937 rng(99);
  int n_checked = 0;
  for (const IsaPath& isa : isas()) {
    for (DType type : {DType::kQ8_0, DType::kQ8_1, DType::kQ8_K}) {
      const QuantizeRowFn fast = isa.quantize_row_fn(type);
      if (fast == nullptr) continue;
      for (int64_t n : {256, 512, 1024, 2048, 4096}) {
        const std::vector<float> x = tricky_floats(n, rng);
        std::vector<uint8_t> want(dtype_row_bytes(type, n)), got(dtype_row_bytes(type, n), 0xEE);
        ref::quantize_row(type, x.data(), want.data(), n);
        fast(x.data(), got.data(), n);
        EXPECT_EQ(got, want) << isa.name << " " << dtype_name(type) << " n=" << n;
        ++n_checked;
      }
    }
  }
  if (n_checked == 0) GTEST_SKIP() << "no SIMD quantizer in this build";
}

// quant.h dispatches to some implementation for every weight type; whichever it is, it agrees
// with the reference.
TEST(QuantSimd, PublicDispatchAgreesWithReference) {
  std::mt19937 rng(5);
  for (DType type : kWeightTypes) {
    const int64_t n = 8 * std::max<int64_t>(block_size(type), 32);
    const std::vector<uint8_t> w = random_row(type, n, rng);
    const std::vector<float> x = random_floats(n, rng);
    const DType act_type = vec_dot_type(type);
    std::vector<uint8_t> a(dtype_row_bytes(act_type, n)), a_ref(dtype_row_bytes(act_type, n));
    quantize_row(act_type, x.data(), a.data(), n);
    ref::quantize_row(act_type, x.data(), a_ref.data(), n);
    EXPECT_EQ(a, a_ref) << dtype_name(type);
    const float want = ref::vec_dot(type, w.data(), a.data(), n);
    EXPECT_NEAR(vec_dot(type, w.data(), a.data(), n), want, 1e-4 * (std::fabs(want) + 1.0)) << dtype_name(type);
  }
}

}  // namespace
}  // namespace deepinfer::cpu
