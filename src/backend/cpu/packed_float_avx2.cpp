// The packed product of float weights (f32, f16, bf16) on the AVX2 tier (AVX2, FMA, F16C), on
// packed.h's float layout: a group's 16 rows interleaved element by element, so that one
// 16-value row of the group (two vectors) is element k of all 16 rows.
//
// Order of operations: every output is one chain of fused multiply-adds over its elements in
// order, acc = fma(w[k], a[k], acc) from k = 0 and acc = +0, in one vector lane. No tile shape,
// token count or group count changes that chain, so a token's result never depends on its batch,
// and a one-token product (decode) reads the same panels as prefill. A chain longer than a block
// of kBlockElements is parked in y between blocks and taken up again: a float stored and loaded
// unchanged, so the bits are those of one unbroken chain.
//
// Register tiles: 12 accumulators (NT tokens x G groups x 2 vectors, NT * G = 6), the group's two
// weight vectors and one broadcast activation: per element 2 G weight loads (converted to float)
// and NT broadcasts for 12 FMAs. Prefill runs 6 tokens by 1 group; the last 1 to 3 tokens and a
// decode step run 2, 3 or 6 groups at a time, so that 12 independent chains hide the FMA latency.
#include <cstddef>
#include <cstdint>

#include "backend/cpu/packed.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define DI_PACKED_FLOAT_AVX2 1
#include <immintrin.h>
#endif

namespace deepinfer::cpu {

#if defined(DI_PACKED_FLOAT_AVX2)
namespace {

// Elements of one block of the chains (see above): a group's block of f16 weights is 8 KB, which
// stays in L1 while the call's token tiles pass over it; the tokens' block (4 bytes per element
// and token) stays in L2.
constexpr int64_t kBlockElements = 256;

// A group's element k: 16 values, as two float vectors (rows 0-7, rows 8-15).
struct PanelF32 {
  static constexpr size_t kBytes = 16 * sizeof(float);
  static void load(const uint8_t* p, __m256& lo, __m256& hi) {
    lo = _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    hi = _mm256_loadu_ps(reinterpret_cast<const float*>(p) + 8);
  }
};
struct PanelF16 {
  static constexpr size_t kBytes = 16 * sizeof(uint16_t);
  static void load(const uint8_t* p, __m256& lo, __m256& hi) {
    lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p) + 1));
  }
};
struct PanelBF16 {
  static constexpr size_t kBytes = 16 * sizeof(uint16_t);
  static __m256 widen(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
  static void load(const uint8_t* p, __m256& lo, __m256& hi) {
    lo = widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    hi = widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p) + 1));
  }
};

// Elements [k0, k1) of the chains of NT tokens by G groups. w: the first group's element 0 (the
// groups group_stride bytes apart); a: the first token's row (rows a_stride bytes apart); y: the
// first token's output of the first group's row 0. `first`: the chains start here (k0 == 0);
// otherwise they are taken up from y.
template <class Panel, int NT, int G>
void tile(const uint8_t* w, size_t group_stride, const uint8_t* a, size_t a_stride, int64_t k0, int64_t k1,
          float* y, int64_t ldy, bool first) {
  // The constant loops unrolled early, so that GCC keeps acc in registers (left to its later
  // unrolling, it stored every accumulator to the stack on every element: half the speed).
  __m256 acc[NT][G][2];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      acc[t][g][0] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + t * ldy + 16 * g);
      acc[t][g][1] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + t * ldy + 16 * g + 8);
    }
  }
  const float* rows[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) rows[t] = reinterpret_cast<const float*>(a + t * a_stride);
  for (int64_t k = k0; k < k1; ++k) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      __m256 lo, hi;
      Panel::load(w + g * group_stride + static_cast<size_t>(k) * Panel::kBytes, lo, hi);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const __m256 b = _mm256_broadcast_ss(rows[t] + k);
        acc[t][g][0] = _mm256_fmadd_ps(lo, b, acc[t][g][0]);
        acc[t][g][1] = _mm256_fmadd_ps(hi, b, acc[t][g][1]);
      }
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      _mm256_storeu_ps(y + t * ldy + 16 * g, acc[t][g][0]);
      _mm256_storeu_ps(y + t * ldy + 16 * g + 8, acc[t][g][1]);
    }
  }
}

// Groups [0, n_groups) for NT tokens: G = 6 / NT groups at a time, then the rest together.
template <class Panel, int NT>
void token_tile(const uint8_t* w, size_t group_stride, int64_t n_groups, const uint8_t* a, size_t a_stride,
                int64_t k0, int64_t k1, float* y, int64_t ldy, bool first) {
  constexpr int G = 6 / NT;
  int64_t g = 0;
  for (; g + G <= n_groups; g += G) {
    tile<Panel, NT, G>(w + g * group_stride, group_stride, a, a_stride, k0, k1, y + 16 * g, ldy, first);
  }
  w += g * group_stride;
  y += 16 * g;
  switch (n_groups - g) {  // 0 to G - 1 groups left
    case 1: return tile<Panel, NT, 1>(w, group_stride, a, a_stride, k0, k1, y, ldy, first);
    case 2: return tile<Panel, NT, (G > 2 ? 2 : 1)>(w, group_stride, a, a_stride, k0, k1, y, ldy, first);
    case 3: return tile<Panel, NT, (G > 3 ? 3 : 1)>(w, group_stride, a, a_stride, k0, k1, y, ldy, first);
    case 4: return tile<Panel, NT, (G > 4 ? 4 : 1)>(w, group_stride, a, a_stride, k0, k1, y, ldy, first);
    case 5: return tile<Panel, NT, (G > 5 ? 5 : 1)>(w, group_stride, a, a_stride, k0, k1, y, ldy, first);
    default: return;
  }
}

// PackedGemmFn (packed.h). Block by block of the elements; in a block, group by group, the
// call's tokens 6 at a time, then the 1 to 5 left.
template <class Panel>
void packed_float_gemm(const uint8_t* w, size_t group_stride, int64_t n_groups, const void* act, size_t a_stride,
                       const PackedActInfo* /*info*/, int64_t n_tok, int64_t n, float* y, int64_t ldy,
                       bool /*one_pass*/) {
  const auto* a = static_cast<const uint8_t*>(act);
  const int64_t full = n_tok - n_tok % 6;
  for (int64_t k0 = 0; k0 < n; k0 += kBlockElements) {
    const int64_t k1 = k0 + kBlockElements < n ? k0 + kBlockElements : n;
    const bool first = k0 == 0;
    for (int64_t g = 0; g < n_groups; ++g) {
      const uint8_t* wg = w + g * group_stride;
      for (int64_t t = 0; t < full; t += 6) {
        tile<Panel, 6, 1>(wg, group_stride, a + t * a_stride, a_stride, k0, k1, y + t * ldy + 16 * g, ldy, first);
      }
    }
    const uint8_t* ar = a + full * a_stride;
    float* yr = y + full * ldy;
    switch (n_tok - full) {
      case 1: token_tile<Panel, 1>(w, group_stride, n_groups, ar, a_stride, k0, k1, yr, ldy, first); break;
      case 2: token_tile<Panel, 2>(w, group_stride, n_groups, ar, a_stride, k0, k1, yr, ldy, first); break;
      case 3: token_tile<Panel, 3>(w, group_stride, n_groups, ar, a_stride, k0, k1, yr, ldy, first); break;
      case 4: token_tile<Panel, 4>(w, group_stride, n_groups, ar, a_stride, k0, k1, yr, ldy, first); break;
      case 5: token_tile<Panel, 5>(w, group_stride, n_groups, ar, a_stride, k0, k1, yr, ldy, first); break;
      default: break;
    }
  }
}

}  // namespace
#endif

namespace avx2 {

PackedGemmFn packed_float_gemm_fn(DType weight_type) {
#if defined(DI_PACKED_FLOAT_AVX2)
  switch (weight_type) {
    case DType::kF32: return packed_float_gemm<PanelF32>;
    case DType::kF16: return packed_float_gemm<PanelF16>;
    case DType::kBF16: return packed_float_gemm<PanelBF16>;
    default: break;
  }
#endif
  (void)weight_type;
  return nullptr;
}

}  // namespace avx2

}  // namespace deepinfer::cpu
