// AVX-512 gated activations of the feed-forward block: silu(g) * u and gelu_tanh(g) * u, 16
// elements at a time. The scalar versions spend most of their time in libm's expf / tanhf
// (an eighth of Gemma 3's prefill); here both become one vector exponential:
//   silu(g)      = g / (1 + exp(-g))
//   gelu_tanh(g) = 0.5 g (1 + tanh(z)) = g / (1 + exp(-2 z)),  z = sqrt(2/pi) (g + 0.044715 g^3)
// Compiled with AVX-512 flags of its own and reached through ops.cpp only after cpuid says the
// CPU has them. The tail uses masked loads and stores, so every element gets the same
// arithmetic wherever it sits (a token's result does not depend on the batch).
#include <climits>
#include <cstdint>

#include "backend/cpu/exp_avx512.h"
#include "backend/cpu/quant_kernels.h"

#if defined(__AVX512F__)
#define DI_ACT_AVX512 1
#include <immintrin.h>
#endif

namespace deepinfer::cpu {

#if defined(DI_ACT_AVX512)
namespace {

using avx512::exp_ps;

// gate[i] = gate[i] / (1 + exp(arg(gate[i]))) * up[i].
template <typename Arg>
inline void gated(float* gate, const float* up, int64_t n, Arg arg) {
  const __m512 one = _mm512_set1_ps(1.0f);
  auto step = [&](__m512 g, __m512 u) { return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, exp_ps(arg(g)))), u); };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(gate + i, step(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(gate + i, m, step(_mm512_maskz_loadu_ps(m, gate + i), _mm512_maskz_loadu_ps(m, up + i)));
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  gated(gate, up, n, [](__m512 g) { return _mm512_sub_ps(_mm512_setzero_ps(), g); });
}

void gelu_tanh_mul(float* gate, const float* up, int64_t n) {
  // -2 z = g * (-2 sqrt(2/pi)) * (1 + 0.044715 g^2)
  const __m512 k = _mm512_set1_ps(-2.0f * 0.7978845608028654f);
  const __m512 cubic = _mm512_set1_ps(0.044715f);
  const __m512 one = _mm512_set1_ps(1.0f);
  gated(gate, up, n, [&](__m512 g) {
    return _mm512_mul_ps(_mm512_mul_ps(g, k), _mm512_fmadd_ps(_mm512_mul_ps(g, g), cubic, one));
  });
}

// x[i] = exp(x[i]) for finite x (past float's range: 0 or inf).
void exp_inplace(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, exp_ps(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, m, exp_ps(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

// tanh(y) for the soft cap: an odd Taylor polynomial through y^9 where |y| < 0.2 (the next
// term is under 1e-9 of the result), else sign(y) (1 - e) / (1 + e) with e = exp(-2|y|) in
// (0, 1], which neither overflows nor, that far from 0, cancels more than a bit. Within 4e-7
// of std::tanh relative (the op harness holds it to 1e-5).
inline __m512 tanh_ps(__m512 y) {
  const __m512 sign = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(INT32_MIN)));
  const __m512 a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(INT32_MAX)));
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 e = exp_ps(_mm512_mul_ps(a, _mm512_set1_ps(-2.0f)));
  const __m512 far = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
  // y (1 + y^2 (-1/3 + y^2 (2/15 + y^2 (-17/315 + y^2 62/2835)))), for |y| < 0.2.
  const __m512 y2 = _mm512_mul_ps(a, a);
  __m512 p = _mm512_set1_ps(62.0f / 2835.0f);
  p = _mm512_fmadd_ps(p, y2, _mm512_set1_ps(-17.0f / 315.0f));
  p = _mm512_fmadd_ps(p, y2, _mm512_set1_ps(2.0f / 15.0f));
  p = _mm512_fmadd_ps(p, y2, _mm512_set1_ps(-1.0f / 3.0f));
  const __m512 near = _mm512_fmadd_ps(_mm512_mul_ps(p, y2), a, a);
  const __m512 t = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, _mm512_set1_ps(0.2f), _CMP_LT_OQ), far, near);
  return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), _mm512_castps_si512(sign)));
}

// x[i] = cap * tanh(x[i] * (1 / cap)), as the scalar version scales it.
void soft_cap(float* x, int64_t n, float cap) {
  const __m512 inv = _mm512_set1_ps(1.0f / cap);
  const __m512 c = _mm512_set1_ps(cap);
  auto step = [&](__m512 v) { return _mm512_mul_ps(c, tanh_ps(_mm512_mul_ps(v, inv))); };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, step(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(x + i, m, step(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace
#endif  // DI_ACT_AVX512

namespace avx512 {

GatedFn silu_mul_fn() {
#if defined(DI_ACT_AVX512)
  return silu_mul;
#else
  return nullptr;
#endif
}

GatedFn gelu_tanh_mul_fn() {
#if defined(DI_ACT_AVX512)
  return gelu_tanh_mul;
#else
  return nullptr;
#endif
}

ExpFn exp_fn() {
#if defined(DI_ACT_AVX512)
  return exp_inplace;
#else
  return nullptr;
#endif
}

SoftCapFn soft_cap_fn() {
#if defined(DI_ACT_AVX512)
  return soft_cap;
#else
  return nullptr;
#endif
}

}  // namespace avx512

}  // namespace deepinfer::cpu
