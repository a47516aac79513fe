// AVX-512 gated activations of the feed-forward block: silu(g) * u and gelu_tanh(g) * u, 16
// elements at a time. The scalar versions spend most of their time in libm's expf / tanhf
// (an eighth of Gemma 3's prefill); here both become one vector exponential:
//   silu(g)      = g / (1 + exp(-g))
//   gelu_tanh(g) = 0.5 g (1 + tanh(z)) = g / (1 + exp(-2 z)),  z = sqrt(2/pi) (g + 0.044715 g^3)
// Compiled with AVX-512 flags of its own and reached through ops.cpp only after cpuid says the
// CPU has them. The tail uses masked loads and stores, so every element gets the same
// arithmetic wherever it sits (a token's result does not depend on the batch).
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
