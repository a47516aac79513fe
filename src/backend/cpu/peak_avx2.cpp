// Peak-rate loops of the AVX2 tier (peak.h), as peak_avx512.cpp's: twelve accumulators, each its
// own dependency chain, an empty asm statement per round so that the rounds are not folded.
// Compiled with AVX2 flags of its own (CMakeLists.txt). The int8 rate is vpmaddubsw's, the
// instruction the AVX2 packed tiles multiply with (32 byte pairs per ymm, 2 operations each);
// the adds and vpmaddwd the tiles need besides are not counted, as vpdpbusd's fused add is not.
#include "backend/cpu/peak.h"

#include <cstdint>

#if defined(__AVX2__) && defined(__FMA__)
#define DI_PEAK_AVX2 1
#include <immintrin.h>
#endif

namespace deepinfer::cpu::avx2 {

#if defined(DI_PEAK_AVX2)
#define DI_PEAK_12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

namespace {
float hsum(__m256 v) {
  alignas(32) float f[8];
  _mm256_store_ps(f, v);
  return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}
// The lanes' wrapping sum (the chains' values are meaningless; only their use counts).
uint32_t hsum(__m256i v) {
  alignas(32) uint32_t x[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(x), v);
  return x[0] + x[1] + x[2] + x[3] + x[4] + x[5] + x[6] + x[7];
}
}  // namespace

double peak_f32_fma(long iterations) {
  __m256 x = _mm256_set1_ps(1.0000001f);
  const __m256 y = _mm256_set1_ps(1e-7f);
#define DI_DECL(i) __m256 a##i = _mm256_set1_ps(static_cast<float>(i) * 1e-3f);
  DI_PEAK_12(DI_DECL)
#undef DI_DECL
  for (long n = 0; n < iterations; ++n) {
#define DI_STEP(i) a##i = _mm256_fmadd_ps(a##i, x, y);
    DI_PEAK_12(DI_STEP)
#undef DI_STEP
    __asm__ volatile("" : "+x"(x));
  }
#define DI_SUM(i) +hsum(a##i)
  volatile float sink = 0.0f DI_PEAK_12(DI_SUM);
#undef DI_SUM
  (void)sink;
  return static_cast<double>(iterations) * 12 * 8 * 2;
}

double peak_int8_dot(long iterations) {
  __m256i v = _mm256_set1_epi8(-2);
#define DI_DECL(i) __m256i a##i = _mm256_set1_epi8(static_cast<char>(i + 1));
  DI_PEAK_12(DI_DECL)
#undef DI_DECL
  for (long n = 0; n < iterations; ++n) {
    // Each chain's product is its next unsigned operand: one vpmaddubsw per chain per round.
#define DI_STEP(i) a##i = _mm256_maddubs_epi16(a##i, v);
    DI_PEAK_12(DI_STEP)
#undef DI_STEP
    __asm__ volatile("" : "+x"(v));
  }
#define DI_SUM(i) +hsum(a##i)
  volatile uint32_t sink = 0u DI_PEAK_12(DI_SUM);
#undef DI_SUM
  (void)sink;
  return static_cast<double>(iterations) * 12 * 32 * 2;
}
#undef DI_PEAK_12

#else
double peak_f32_fma(long) { return 0.0; }
double peak_int8_dot(long) { return 0.0; }
#endif

}  // namespace deepinfer::cpu::avx2
