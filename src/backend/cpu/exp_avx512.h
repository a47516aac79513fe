// The vector exponential of the AVX-512 kernels (activations, softmax tiles), in a header so that
// a kernel can keep its operands in registers; every caller gets the same bits per lane.
#pragma once

#if defined(__AVX512F__)
#include <immintrin.h>

namespace deepinfer::cpu::avx512 {

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

}  // namespace deepinfer::cpu::avx512

#endif
