// Peak-rate loops (peak.h): twelve accumulators, each its own dependency chain, so that the
// units' throughput and not an instruction's latency bounds the loop. Compiled with AVX-512
// flags of its own (CMakeLists.txt); an empty asm statement per round keeps the compiler from
// folding the rounds, without touching memory.
#include "backend/cpu/peak.h"

#if defined(__AVX512F__) && defined(__AVX512VNNI__)
#define DI_PEAK_AVX512 1
// GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation (the reductions),
// which its own uninitialised-use warnings then report.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

namespace deepinfer::cpu::avx512 {

#if defined(DI_PEAK_AVX512)
#define DI_PEAK_12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

double peak_f32_fma(long iterations) {
  __m512 x = _mm512_set1_ps(1.0000001f);
  const __m512 y = _mm512_set1_ps(1e-7f);
#define DI_DECL(i) __m512 a##i = _mm512_set1_ps(static_cast<float>(i) * 1e-3f);
  DI_PEAK_12(DI_DECL)
#undef DI_DECL
  for (long n = 0; n < iterations; ++n) {
#define DI_STEP(i) a##i = _mm512_fmadd_ps(a##i, x, y);
    DI_PEAK_12(DI_STEP)
#undef DI_STEP
    __asm__ volatile("" : "+v"(x));
  }
#define DI_SUM(i) +_mm512_reduce_add_ps(a##i)
  volatile float sink = 0.0f DI_PEAK_12(DI_SUM);
#undef DI_SUM
  (void)sink;
  return static_cast<double>(iterations) * 12 * 16 * 2;
}

double peak_int8_dot(long iterations) {
  __m512i u = _mm512_set1_epi8(3);
  const __m512i v = _mm512_set1_epi8(-2);
#define DI_DECL(i) __m512i a##i = _mm512_set1_epi32(i);
  DI_PEAK_12(DI_DECL)
#undef DI_DECL
  for (long n = 0; n < iterations; ++n) {
#define DI_STEP(i) a##i = _mm512_dpbusd_epi32(a##i, u, v);
    DI_PEAK_12(DI_STEP)
#undef DI_STEP
    __asm__ volatile("" : "+v"(u));
  }
#define DI_SUM(i) +_mm512_reduce_add_epi32(a##i)
  volatile int sink = 0 DI_PEAK_12(DI_SUM);
#undef DI_SUM
  (void)sink;
  return static_cast<double>(iterations) * 12 * 64 * 2;
}

#if defined(__AVX512BF16__)
double peak_bf16_dot(long iterations) {
  __m512bh p = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3f80));  // 1.0
  const __m512bh q = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3380));  // 2^-24
#define DI_DECL(i) __m512 a##i = _mm512_set1_ps(static_cast<float>(i));
  DI_PEAK_12(DI_DECL)
#undef DI_DECL
  for (long n = 0; n < iterations; ++n) {
#define DI_STEP(i) a##i = _mm512_dpbf16_ps(a##i, p, q);
    DI_PEAK_12(DI_STEP)
#undef DI_STEP
    __asm__ volatile("" : "+v"(p));
  }
#define DI_SUM(i) +_mm512_reduce_add_ps(a##i)
  volatile float sink = 0.0f DI_PEAK_12(DI_SUM);
#undef DI_SUM
  (void)sink;
  return static_cast<double>(iterations) * 12 * 32 * 2;
}
bool compiled_bf16() { return true; }
#else
double peak_bf16_dot(long) { return 0.0; }
bool compiled_bf16() { return false; }
#endif
#undef DI_PEAK_12

#else
double peak_f32_fma(long) { return 0.0; }
double peak_int8_dot(long) { return 0.0; }
double peak_bf16_dot(long) { return 0.0; }
bool compiled_bf16() { return false; }
#endif

}  // namespace deepinfer::cpu::avx512
