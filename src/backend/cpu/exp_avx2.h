// The vector exponential of the AVX2 kernels (activations, softmax tiles), in a header so that a
// kernel keeps its operands in registers; every caller gets the same bits per lane.
#pragma once

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

namespace deepinfer::cpu::avx2 {

// exp(x) as avx512::exp_ps computes it (the same reduction and Taylor polynomial of degree 7),
// with 2^n put into the exponent bits instead of vscalefps: x is first clamped to [-87, 88], so
// that 2^n stays a normal float. Within that range the AVX-512 exponential's bits; below it
// about 1.6e-38 instead of a denormal or 0, above it about 1.65e38 instead of inf. Its callers
// add it to 1 (activations) or to sums of at least 1 (a softmax tile against its max).
// Always inlined: an out-of-line copy from a file compiled for AVX-512 could otherwise be the one
// the linker keeps for the AVX2 kernels.
[[gnu::always_inline]] inline __m256 exp_ps(__m256 x) {
  // x as the second operand: vmaxps and vminps return it when it is a NaN, which then goes through.
  x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(_mm256_set1_ps(-87.0f), x));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);  // ln2 high part (exact product)
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);  // low part
  __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}

}  // namespace deepinfer::cpu::avx2

#endif
