// AVX-512 gated activations of the feed-forward block: silu(g) * u and gelu_tanh(g) * u, 16
// elements at a time. The scalar versions spend most of their time in libm's expf / tanhf
// (an eighth of Gemma 3's prefill); here both become one vector exponential:
//   silu(g)      = g / (1 + exp(-g))
//   gelu_tanh(g) = 0.5 g (1 + tanh(z)) = g / (1 + exp(-2 z)),  z = sqrt(2/pi) (g + 0.044715 g^3)
// Compiled with AVX-512 flags of its own and reached through ops.cpp only after cpuid says the
// CPU has them. The tail uses masked loads and stores, so every element gets the same
// arithmetic wherever it sits (a token's result does not depend on the batch).
#include <cstdint>

#include "backend/cpu/quant_kernels.h"

#if defined(__AVX512F__)
#define DI_ACT_AVX512 1
#include <immintrin.h>
#endif

namespace deepinfer::cpu {

#if defined(DI_ACT_AVX512)
namespace {

// exp(x): x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor polynomial of degree 7
// (relative error below 2e-8 on that range, under float rounding), then scaled by 2^n with
// vscalefps, which also gives 0 and inf past float's range without a clamp.
// The all-lanes zero-masking forms of roundscale and scalef are the same instructions; GCC 12's
// unmasked ones pass an 'undefined' vector that -Wmaybe-uninitialized reports.
inline __m512 exp_ps(__m512 x) {
  const __m512 n = _mm512_maskz_roundscale_ps(__mmask16(0xFFFF), _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln2 high part (exact product)
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);  // low part
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(__mmask16(0xFFFF), p, n);
}

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

}  // namespace avx512

}  // namespace deepinfer::cpu
