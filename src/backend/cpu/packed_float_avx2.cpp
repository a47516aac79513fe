// The packed products of float weights (f32, f16, bf16) and of MXFP4 on the AVX2 tier (AVX2, FMA,
// F16C; the AVX-512 tier runs them too), on packed.h's float layout: a group's 16 rows
// interleaved element by element, so that one 16-value row of the group (two vectors) is element
// k of all 16 rows. MXFP4 is decoded block by block into that layout (f32), then multiplied alike.
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
#include <cstring>

#include "backend/cpu/packed.h"
#include "backend/cpu/packed_layout.h"
#include "backend/cpu/quant_blocks.h"

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

// `count` elements of the chains of NT tokens by G groups. w: the first group's first element
// (groups group_stride bytes apart); a: the first token's first element (rows a_stride bytes
// apart); y: the first token's output of the first group's row 0. `first`: the chains start
// here; otherwise they are taken up from y.
template <class Panel, int NT, int G>
void tile(const uint8_t* w, size_t group_stride, const uint8_t* a, size_t a_stride, int64_t count, float* y,
          int64_t ldy, bool first) {
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
  for (int64_t k = 0; k < count; ++k) {
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
                int64_t count, float* y, int64_t ldy, bool first) {
  constexpr int G = 6 / NT;
  int64_t g = 0;
  for (; g + G <= n_groups; g += G) {
    tile<Panel, NT, G>(w + g * group_stride, group_stride, a, a_stride, count, y + 16 * g, ldy, first);
  }
  w += g * group_stride;
  y += 16 * g;
  switch (n_groups - g) {  // 0 to G - 1 groups left
    case 1: return tile<Panel, NT, 1>(w, group_stride, a, a_stride, count, y, ldy, first);
    case 2: return tile<Panel, NT, (G > 2 ? 2 : 1)>(w, group_stride, a, a_stride, count, y, ldy, first);
    case 3: return tile<Panel, NT, (G > 3 ? 3 : 1)>(w, group_stride, a, a_stride, count, y, ldy, first);
    case 4: return tile<Panel, NT, (G > 4 ? 4 : 1)>(w, group_stride, a, a_stride, count, y, ldy, first);
    case 5: return tile<Panel, NT, (G > 5 ? 5 : 1)>(w, group_stride, a, a_stride, count, y, ldy, first);
    default: return;
  }
}

// One block of `count` elements of every chain of n_groups groups by n_tok tokens (pointers as
// tile's): group by group, the tokens 6 at a time, then the 1 to 5 left.
template <class Panel>
void block_product(const uint8_t* w, size_t group_stride, int64_t n_groups, const uint8_t* a, size_t a_stride,
                   int64_t n_tok, int64_t count, float* y, int64_t ldy, bool first) {
  const int64_t full = n_tok - n_tok % 6;
  for (int64_t g = 0; g < n_groups; ++g) {
    for (int64_t t = 0; t < full; t += 6) {
      tile<Panel, 6, 1>(w + g * group_stride, group_stride, a + t * a_stride, a_stride, count, y + t * ldy + 16 * g,
                        ldy, first);
    }
  }
  a += full * a_stride;
  y += full * ldy;
  switch (n_tok - full) {
    case 1: return token_tile<Panel, 1>(w, group_stride, n_groups, a, a_stride, count, y, ldy, first);
    case 2: return token_tile<Panel, 2>(w, group_stride, n_groups, a, a_stride, count, y, ldy, first);
    case 3: return token_tile<Panel, 3>(w, group_stride, n_groups, a, a_stride, count, y, ldy, first);
    case 4: return token_tile<Panel, 4>(w, group_stride, n_groups, a, a_stride, count, y, ldy, first);
    case 5: return token_tile<Panel, 5>(w, group_stride, n_groups, a, a_stride, count, y, ldy, first);
    default: return;
  }
}

// PackedGemmFn (packed.h) of the float formats: block by block of the elements.
template <class Panel>
void packed_float_gemm(const uint8_t* w, size_t group_stride, int64_t n_groups, const void* act, size_t a_stride,
                       const PackedActInfo* /*info*/, int64_t n_tok, int64_t n, float* y, int64_t ldy,
                       bool /*one_pass*/) {
  const auto* a = static_cast<const uint8_t*>(act);
  for (int64_t k0 = 0; k0 < n; k0 += kBlockElements) {
    const int64_t count = k0 + kBlockElements < n ? kBlockElements : n - k0;
    block_product<Panel>(w + static_cast<size_t>(k0) * Panel::kBytes, group_stride, n_groups,
                         a + k0 * static_cast<int64_t>(sizeof(float)), a_stride, n_tok, count, y, ldy, k0 == 0);
  }
}

// MXFP4 (packed.h's layout: e[16], then per element two words of 8 rows' codes) decoded into f32
// panels, kMxfp4Elements elements of up to 6 groups at a time (24 KB: L1), which the f32 tiles
// then multiply. Each weight is the exact float the unpacked kernels and dequantize_row give
// (kMxfp4Doubled[code] times mxfp4_scale(e)), and its chain the f32 panels' chain, so an MXFP4
// matrix gives the bits of its BF16 twin's packed product.
constexpr int64_t kMxfp4Elements = 64;
constexpr int kMxfp4Groups = 6;
constexpr size_t kMxfp4PanelBytes = kMxfp4Elements * PanelF32::kBytes;  // one group's decoded block

// Blocks [0, n_blocks) of one group into panel (n_blocks * 32 elements of 16 floats).
void decode_mxfp4_panel(const uint8_t* blocks, int64_t n_blocks, float* panel) {
  const __m256 positive = _mm256_setr_ps(0, 1, 2, 3, 4, 6, 8, 12);
  const __m256 negative = _mm256_setr_ps(0, -1, -2, -3, -4, -6, -8, -12);
  const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* pb = blocks + b * static_cast<int64_t>(packed_layout::kMxfp4Bytes);
    alignas(32) float scale[kPackRows];
    for (int j = 0; j < kPackRows; ++j) scale[j] = mxfp4_scale(pb[j]);
    const __m256 scale_lo = _mm256_load_ps(scale), scale_hi = _mm256_load_ps(scale + 8);
    const uint8_t* codes = pb + packed_layout::kMxfp4Codes;
    float* out = panel + b * kQK * kPackRows;
    for (int k = 0; k < kQK; ++k) {
      for (int half = 0; half < 2; ++half) {
        uint32_t word;
        std::memcpy(&word, codes + 8 * k + 4 * half, 4);
        // Lane j: row j's code in bits 0-3 (higher bits: other rows', ignored): bits 0-2 pick
        // the magnitude, bit 3 (moved to the sign bit) the sign.
        const __m256i code = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(word)), shifts);
        const __m256 sign = _mm256_castsi256_ps(_mm256_slli_epi32(code, 28));
        const __m256 v = _mm256_blendv_ps(_mm256_permutevar8x32_ps(positive, code),
                                          _mm256_permutevar8x32_ps(negative, code), sign);
        _mm256_storeu_ps(out + k * kPackRows + 8 * half, _mm256_mul_ps(v, half == 0 ? scale_lo : scale_hi));
      }
    }
  }
}

void packed_mxfp4_gemm(const uint8_t* w, size_t group_stride, int64_t n_groups, const void* act, size_t a_stride,
                       const PackedActInfo* /*info*/, int64_t n_tok, int64_t n, float* y, int64_t ldy,
                       bool /*one_pass*/) {
  alignas(64) float panels[kMxfp4Groups * kMxfp4Elements * kPackRows];  // 24 KB of stack
  const auto* a = static_cast<const uint8_t*>(act);
  const size_t block_bytes = packed_layout::kMxfp4Bytes;
  for (int64_t k0 = 0; k0 < n; k0 += kMxfp4Elements) {
    const int64_t count = k0 + kMxfp4Elements < n ? kMxfp4Elements : n - k0;
    for (int64_t g0 = 0; g0 < n_groups; g0 += kMxfp4Groups) {
      const int64_t ng = n_groups - g0 < kMxfp4Groups ? n_groups - g0 : kMxfp4Groups;
      for (int64_t g = 0; g < ng; ++g) {
        decode_mxfp4_panel(w + (g0 + g) * group_stride + static_cast<size_t>(k0 / kQK) * block_bytes, count / kQK,
                           panels + g * (kMxfp4PanelBytes / sizeof(float)));
      }
      block_product<PanelF32>(reinterpret_cast<const uint8_t*>(panels), kMxfp4PanelBytes, ng,
                              a + k0 * static_cast<int64_t>(sizeof(float)), a_stride, n_tok, count, y + 16 * g0, ldy,
                              k0 == 0);
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
    case DType::kMXFP4: return packed_mxfp4_gemm;
    default: break;
  }
#endif
  (void)weight_type;
  return nullptr;
}

}  // namespace avx2

}  // namespace deepinfer::cpu
