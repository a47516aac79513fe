// AVX2 gated activations and soft cap (act_avx512.cpp's, 8 elements at a time), for CPUs
// without AVX-512: silu(g) * u = g / (1 + exp(-g)) * u, gelu_tanh(g) * u = g / (1 + exp(-2 z)) * u
// with z = sqrt(2/pi) (g + 0.044715 g^3), and cap * tanh(x / cap), each through one vector
// exponential instead of libm's expf / tanhf per element. Compiled with AVX2 flags of its own
// and reached through ops.cpp only after cpuid says the CPU has them. A tail goes through a
// zero-padded copy, so every element gets the same arithmetic wherever it sits.
#include <climits>
#include <cstdint>
#include <cstring>

#include "backend/cpu/exp_avx2.h"
#include "backend/cpu/quant_kernels.h"

#if defined(__AVX2__) && defined(__FMA__)
#define DI_ACT_AVX2 1
#include <immintrin.h>
#endif

namespace deepinfer::cpu {

#if defined(DI_ACT_AVX2)
namespace {

using avx2::exp_ps;

// x[i] = step(x[i], y[i]) over n elements, 8 at a time; the last n % 8 through zero-padded
// copies.
template <typename Step>
inline void map2(float* x, const float* y, int64_t n, Step step) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, step(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  if (i < n) {
    const auto left = static_cast<size_t>(n - i);
    alignas(32) float xs[8] = {}, ys[8] = {};
    std::memcpy(xs, x + i, left * sizeof(float));
    std::memcpy(ys, y + i, left * sizeof(float));
    _mm256_store_ps(xs, step(_mm256_load_ps(xs), _mm256_load_ps(ys)));
    std::memcpy(x + i, xs, left * sizeof(float));
  }
}

// x[i] = step(x[i]), as map2.
template <typename Step>
inline void map1(float* x, int64_t n, Step step) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, step(_mm256_loadu_ps(x + i)));
  if (i < n) {
    const auto left = static_cast<size_t>(n - i);
    alignas(32) float xs[8] = {};
    std::memcpy(xs, x + i, left * sizeof(float));
    _mm256_store_ps(xs, step(_mm256_load_ps(xs)));
    std::memcpy(x + i, xs, left * sizeof(float));
  }
}

// gate[i] = gate[i] / (1 + exp(arg(gate[i]))) * up[i].
template <typename Arg>
inline void gated(float* gate, const float* up, int64_t n, Arg arg) {
  const __m256 one = _mm256_set1_ps(1.0f);
  map2(gate, up, n, [&](__m256 g, __m256 u) { return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, exp_ps(arg(g)))), u); });
}

void silu_mul(float* gate, const float* up, int64_t n) {
  gated(gate, up, n, [](__m256 g) { return _mm256_sub_ps(_mm256_setzero_ps(), g); });
}

void gelu_tanh_mul(float* gate, const float* up, int64_t n) {
  // -2 z = g * (-2 sqrt(2/pi)) * (1 + 0.044715 g^2)
  const __m256 k = _mm256_set1_ps(-2.0f * 0.7978845608028654f);
  const __m256 cubic = _mm256_set1_ps(0.044715f);
  const __m256 one = _mm256_set1_ps(1.0f);
  gated(gate, up, n, [&](__m256 g) {
    return _mm256_mul_ps(_mm256_mul_ps(g, k), _mm256_fmadd_ps(_mm256_mul_ps(g, g), cubic, one));
  });
}

// tanh(y) as act_avx512.cpp's tanh_ps: an odd Taylor polynomial through y^9 where |y| < 0.2,
// else sign(y) (1 - e) / (1 + e) with e = exp(-2|y|).
inline __m256 tanh_ps(__m256 y) {
  const __m256 sign = _mm256_and_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN)));
  const __m256 a = _mm256_and_ps(y, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MAX)));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp_ps(_mm256_mul_ps(a, _mm256_set1_ps(-2.0f)));
  const __m256 far = _mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e));
  const __m256 y2 = _mm256_mul_ps(a, a);
  __m256 p = _mm256_set1_ps(62.0f / 2835.0f);
  p = _mm256_fmadd_ps(p, y2, _mm256_set1_ps(-17.0f / 315.0f));
  p = _mm256_fmadd_ps(p, y2, _mm256_set1_ps(2.0f / 15.0f));
  p = _mm256_fmadd_ps(p, y2, _mm256_set1_ps(-1.0f / 3.0f));
  const __m256 near = _mm256_fmadd_ps(_mm256_mul_ps(p, y2), a, a);
  const __m256 t = _mm256_blendv_ps(far, near, _mm256_cmp_ps(a, _mm256_set1_ps(0.2f), _CMP_LT_OQ));
  return _mm256_or_ps(t, sign);
}

// x[i] = cap * tanh(x[i] * (1 / cap)), as the scalar version scales it.
void soft_cap(float* x, int64_t n, float cap) {
  const __m256 inv = _mm256_set1_ps(1.0f / cap);
  const __m256 c = _mm256_set1_ps(cap);
  map1(x, n, [&](__m256 v) { return _mm256_mul_ps(c, tanh_ps(_mm256_mul_ps(v, inv))); });
}

}  // namespace
#endif  // DI_ACT_AVX2

namespace avx2 {

GatedFn silu_mul_fn() {
#if defined(DI_ACT_AVX2)
  return silu_mul;
#else
  return nullptr;
#endif
}

GatedFn gelu_tanh_mul_fn() {
#if defined(DI_ACT_AVX2)
  return gelu_tanh_mul;
#else
  return nullptr;
#endif
}

SoftCapFn soft_cap_fn() {
#if defined(DI_ACT_AVX2)
  return soft_cap;
#else
  return nullptr;
#endif
}

}  // namespace avx2

}  // namespace deepinfer::cpu
