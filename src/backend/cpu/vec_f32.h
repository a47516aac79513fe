// Small float32 vector primitives shared by the CPU operators (dot, scale-and-add).
#pragma once

#include <cstdint>

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace deepinfer::cpu {

inline float dot_f32(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float sum = 0.0f;
#if defined(__AVX512F__)
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
  }
  for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
  sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  __m256 acc = _mm256_add_ps(acc0, acc1);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  sum = _mm_cvtss_f32(s);
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// y[i] = y[i] * scale + alpha * x[i]
inline void scale_add_f32(float* y, float scale, float alpha, const float* x, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 vs = _mm512_set1_ps(scale), va = _mm512_set1_ps(alpha);
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_mul_ps(vs, _mm512_loadu_ps(y + i))));
  }
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 vs = _mm256_set1_ps(scale), va = _mm256_set1_ps(alpha);
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_mul_ps(vs, _mm256_loadu_ps(y + i))));
  }
#endif
  for (; i < n; ++i) y[i] = y[i] * scale + alpha * x[i];
}

}  // namespace deepinfer::cpu
