// Op tests of the vector gated activations (silu * up, gelu_tanh * up) of every tier this CPU
// runs, against the formulas in double, over lengths with tails and inputs from tiny to past
// the exponential's float range. Tolerance: float rounding of the exponential's argument, which
// exp turns into a relative error of |argument| ulps (the vector exponential itself is accurate
// to about 2e-8), plus a few ulps; results below 1e-30 (exp past float's range) count as 0.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "backend/cpu/quant_kernels.h"
#include "core/thread_pool.h"

namespace deepinfer::cpu {
namespace {

double silu_ref(double g) { return g / (1.0 + std::exp(-g)); }
// 0.5 g (1 + tanh(z)) in its sigmoid form g / (1 + exp(-2z)): equal, but 1 + tanh(z) cancels
// to nothing for very negative g even in double.
double gelu_ref(double g) { return g / (1.0 + std::exp(-2.0 * 0.7978845608028654 * (g + 0.044715 * g * g * g))); }

std::vector<float> inputs(int64_t n, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 3.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = g(rng);
  // Edges: zero, tiny, and far past exp's range on both sides.
  const float edges[] = {0.0f, 1e-30f, -1e-30f, 90.0f, -90.0f, 200.0f, -200.0f, 15.0f, -15.0f};
  for (size_t i = 0; i < std::size(edges) && i < v.size(); ++i) v[i * 3 % v.size()] = edges[i];
  return v;
}

// The exponential's argument: -g for silu, -2 sqrt(2/pi) (g + 0.044715 g^3) for gelu.
double silu_arg(double g) { return -g; }
double gelu_arg(double g) { return -2.0 * 0.7978845608028654 * (g + 0.044715 * g * g * g); }

void check(GatedFn fn, double (*ref)(double), double (*arg)(double), const std::string& name) {
  std::mt19937 rng(8);
  for (int64_t n : {1, 5, 15, 16, 17, 33, 640, 2048 + 7}) {
    std::vector<float> gate = inputs(n, rng);
    const std::vector<float> orig = gate;
    std::vector<float> up = inputs(n, rng);
    fn(gate.data(), up.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double want = ref(orig[i]) * up[i];
      const double tol = (4.0 + std::fabs(arg(orig[i]))) * 0x1p-23 * std::fabs(want) + 1e-30;
      EXPECT_NEAR(gate[i], want, tol) << name << " n=" << n << " g=" << orig[i] << " u=" << up[i];
    }
  }
}

TEST(OpKernels, GatedActivationsOfEveryTierMatchTheFormulas) {
  int checked = 0;
  if (cpu_has(Isa::kAvx512)) {
    ASSERT_NE(avx512::silu_mul_fn(), nullptr);
    ASSERT_NE(avx512::gelu_tanh_mul_fn(), nullptr);
    check(avx512::silu_mul_fn(), silu_ref, silu_arg, "avx512 silu");
    check(avx512::gelu_tanh_mul_fn(), gelu_ref, gelu_arg, "avx512 gelu");
    checked += 2;
  }
  if (cpu_has(Isa::kAvx2)) {
    ASSERT_NE(avx2::silu_mul_fn(), nullptr);
    ASSERT_NE(avx2::gelu_tanh_mul_fn(), nullptr);
    check(avx2::silu_mul_fn(), silu_ref, silu_arg, "avx2 silu");
    check(avx2::gelu_tanh_mul_fn(), gelu_ref, gelu_arg, "avx2 gelu");
    checked += 2;
  }
  // The dispatched public ops, whatever tier they run on.
  check(silu_mul, silu_ref, silu_arg, "silu_mul");
  check(gelu_tanh_mul, gelu_ref, gelu_arg, "gelu_tanh_mul");
  if (checked == 0) GTEST_SKIP() << "only the scalar activations on this CPU (checked through the public ops)";
}

// The ops over a pool split their elements on 64-element lines: every element once, with the
// bits of one thread (lengths below the split's threshold, at it, and odd past it).
TEST(OpKernels, GatedActivationsAndAddOverThreadsEqualOneThread) {
  std::mt19937 rng(9);
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {16383, 16384 + 5, 100003}) {
      const std::vector<float> gate = inputs(n, rng), up = inputs(n, rng);
      std::vector<float> one = gate, split = gate;
      silu_mul(one.data(), up.data(), n);
      silu_mul(split.data(), up.data(), n, pool);
      EXPECT_EQ(one, split) << "silu_mul n=" << n << ", " << threads << " threads";
      one = gate, split = gate;
      gelu_tanh_mul(one.data(), up.data(), n);
      gelu_tanh_mul(split.data(), up.data(), n, pool);
      EXPECT_EQ(one, split) << "gelu_tanh_mul n=" << n << ", " << threads << " threads";
      split = gate;
      add(split.data(), up.data(), n, pool);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(split[i], gate[i] + up[i]) << "add n=" << n << " at " << i;
    }
  }
}

}  // namespace
}  // namespace deepinfer::cpu
