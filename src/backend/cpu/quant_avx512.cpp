// AVX-512 (F, BW, VL, VNNI) matrix products of the block formats: a tile of R weight rows by C
// activation rows is computed at once, so each weight block is unpacked once for C tokens and
// each activation block loaded once for R rows (the prefill GEMM), and the one-token product
// (decode) is the same code with C = 1.
//
// This file is compiled with AVX-512 flags of its own (CMakeLists.txt) and reached only through
// quant.cpp's table after a cpuid check, so the rest of the binary stays plain x86-64. Every
// helper is in an anonymous namespace: an inline function of a shared header compiled here with
// AVX-512 could otherwise be picked by the linker for code that runs on any CPU.
//
// Batch invariance: a result y[t, o] is computed by the same instructions in the same order in
// every tile shape (1x1 .. RxC), so it does not depend on how many tokens are batched with it.
// The float results differ from the avx2 tier's (other lane sums); within a process one tier
// serves every batch size.
//
// 32-element formats (Q4_0, Q4_1, Q5_0): one zmm holds two blocks. Codes are unsigned as
// stored and the offset (8, 16) is folded into the vpdpbusd accumulator as -offset * sum(y),
// formed once per activation block pair, so a block pair costs one vpdpbusd, one conversion,
// one multiply (d_x * d_y) and one fma per tile element. Q4_1's min term m * s rides in lane 0 / 8 of the same accumulator. Q8_0 stays with
// the avx2 tier: written the same way (codes + 128, offset 128) its matrix products were faster
// but its one-token products, which bound decode, ran at half the avx2 speed.
//
// K-quants (Q2_K, Q4_K, Q6_K): each super-block's integer sum is formed exactly (vpmaddubsw,
// then vpdpwssd by the 16-bit sub-block scales) and scaled with the same float operations as the
// scalar reference, so these agree with ref::vec_dot bit for bit. Q3_K and Q5_K stay with the
// avx2 tier: written the same way, their prefill was about 2x and 1.56x faster but their decode
// 1.6x slower (a type takes all its kernels from one tier).
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/quant_kernels.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__F16C__) && defined(__FMA__)
#define DI_GEMM_AVX512 1
// GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation, which its own
// uninitialised-use warnings then report at every inlined cast and insert.
#if defined(__GNUC__) && !defined(__clang__)  // GCC 12 only (clang has no -Wmaybe-uninitialized)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

namespace deepinfer::cpu {

#if defined(DI_GEMM_AVX512)
namespace {

inline uint32_t load_u32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline float half_to_float(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

// Two 32-byte code runs (blocks i and i + 1, or zeros for the second when it does not exist).
inline __m512i pair256(const void* a, const void* b) {
  const __m512i lo = _mm512_inserti64x4(_mm512_setzero_si512(), load256(a), 0);
  return b ? _mm512_inserti64x4(lo, load256(b), 1) : lo;
}

// Nibbles of two blocks -> 64 codes in element order: [block i e0..31, block i+1 e0..31].
inline __m512i nibble_pair(const uint8_t* qs0, const uint8_t* qs1) {
  const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0));
  const __m128i b = qs1 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)) : _mm_setzero_si128();
  const __m256i raw = _mm256_set_m128i(b, a);
  const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1);
  // 128-bit lanes [a, b, a >> 4, b >> 4] -> [a, a >> 4, b, b >> 4]
  return _mm512_and_si512(_mm512_shuffle_i64x2(both, both, _MM_SHUFFLE(3, 1, 2, 0)), _mm512_set1_epi8(0x0F));
}

// Header words (d and, for Q4_1 / Q8_1, m or s) of a block pair as halves -> floats
// [d0, w0, d1, w1] in an xmm.
inline __m128 header_pair(const void* b0, const void* b1) {
  const uint32_t h0 = load_u32(b0);
  const uint32_t h1 = b1 ? load_u32(b1) : 0u;
  return _mm_cvtph_ps(_mm_set_epi32(0, 0, static_cast<int>(h1), static_cast<int>(h0)));
}

// d0 in lanes 0..7 and d1 in lanes 8..15 (from header_pair's lanes 0 and 2), or lanes 1 / 3.
inline __m512 spread(__m128 h, int first) {
  const __m512i idx = _mm512_set_epi32(first + 2, first + 2, first + 2, first + 2, first + 2, first + 2, first + 2,
                                       first + 2, first, first, first, first, first, first, first, first);
  return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(h));
}

// w0 in lane 0, w1 in lane 8, zeros elsewhere: a term added once per block, not per lane.
inline __m512 spread_once(__m128 h) {
  const __m512i idx = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 1);
  return _mm512_maskz_permutexvar_ps(0x0101, idx, _mm512_castps128_ps512(h));
}

// ---- 32-element formats ------------------------------------------------------------------------

struct FmtQ4_0 {
  using Block = BlockQ4_0;
  using ActBlock = BlockQ8_0;
  static constexpr int kOffset = 8;
  static constexpr bool kMin = false;
  static __m512i codes(const Block* b, bool two) { return nibble_pair(b[0].qs, two ? b[1].qs : nullptr); }
};

struct FmtQ4_1 {
  using Block = BlockQ4_1;
  using ActBlock = BlockQ8_1;
  static constexpr int kOffset = 0;
  static constexpr bool kMin = true;
  static __m512i codes(const Block* b, bool two) { return nibble_pair(b[0].qs, two ? b[1].qs : nullptr); }
};

struct FmtQ5_0 {
  using Block = BlockQ5_0;
  using ActBlock = BlockQ8_0;
  static constexpr int kOffset = 16;
  static constexpr bool kMin = false;
  static __m512i codes(const Block* b, bool two) {
    const __m512i nib = nibble_pair(b[0].qs, two ? b[1].qs : nullptr);
    const uint64_t bits = load_u32(b[0].qh) | (two ? static_cast<uint64_t>(load_u32(b[1].qh)) << 32 : 0);
    return _mm512_or_si512(nib, _mm512_maskz_mov_epi8(bits, _mm512_set1_epi8(0x10)));
  }
};

// How far ahead in each weight row to prefetch: 256, 512 and 1024 bytes were tried on
// one-token products; 1024 was best or tied for every format.
constexpr int kPrefetchBytes = 1024;

// y[c * ldy + r] for an R x C tile; w rows w_stride bytes apart, activation rows a_stride apart.
template <typename F, int R, int C>
void tile32(const uint8_t* w, size_t w_stride, const uint8_t* a, size_t a_stride, int64_t nb, float* y, int64_t ldy) {
  using Block = typename F::Block;
  using ActBlock = typename F::ActBlock;
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < nb; i += 2) {
    const bool two = i + 1 < nb;
    __m512i yq[C], ybias[C];
    __m512 yd[C], ys[C];
    for (int c = 0; c < C; ++c) {
      const ActBlock* b = reinterpret_cast<const ActBlock*>(a + c * a_stride) + i;
      yq[c] = pair256(b[0].qs, two ? b[1].qs : nullptr);
      const __m128 h = header_pair(&b[0], two ? &b[1] : nullptr);
      yd[c] = spread(h, 0);
      if constexpr (F::kMin) ys[c] = spread(h, 1);
      if constexpr (F::kOffset != 0) {
        const __m512i sum = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(F::kOffset)), yq[c]);
        ybias[c] = _mm512_sub_epi32(_mm512_setzero_si512(), sum);
      }
    }
    for (int r = 0; r < R; ++r) {
      const Block* b = reinterpret_cast<const Block*>(w + r * w_stride) + i;
      // Several rows are streamed at once, which the hardware prefetchers follow less well than
      // one (one-token Q5_0 products ran at half the avx2 tier's speed without this).
      _mm_prefetch(reinterpret_cast<const char*>(b) + kPrefetchBytes, _MM_HINT_T0);
      const __m512i q = F::codes(b, two);
      const __m128 h = header_pair(&b[0], two ? &b[1] : nullptr);
      const __m512 xd = spread(h, 0);
      __m512 xm;
      if constexpr (F::kMin) xm = spread_once(h);
      for (int c = 0; c < C; ++c) {
        __m512i p;
        if constexpr (F::kOffset != 0) {
          p = _mm512_dpbusd_epi32(ybias[c], q, yq[c]);
        } else {
          p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, yq[c]);
        }
        acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(xd, yd[c]), _mm512_cvtepi32_ps(p), acc[r][c]);
        if constexpr (F::kMin) acc[r][c] = _mm512_fmadd_ps(xm, ys[c], acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) y[c * ldy + r] = _mm512_reduce_add_ps(acc[r][c]);
  }
}

// ---- k-quants ----------------------------------------------------------------------------------

// Exact reduction of a 16-lane int32 sum and an 8-lane int32 sum to two integers.
inline void reduce_two(__m512i a, __m256i b, int* sa, int* sb) {
  const __m256i a8 = _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
  const __m256i h = _mm256_hadd_epi32(a8, b);  // [a01 a23 b01 b23 | a45 a67 b45 b67]
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));  // [a a b b]
  s = _mm_hadd_epi32(s, s);                                                                 // [a b a b]
  *sa = _mm_cvtsi128_si32(s);
  *sb = _mm_extract_epi32(s, 1);
}

// Q4_K: 64-element chunk j (0..3) of a super-block as contiguous codes 64j..64j+63; the 16-bit
// scale vector holds sc[2j] in words 0..15 and sc[2j+1] in words 16..31 (32 elements = 16
// vpmaddubsw pairs each).
struct FmtQ4_K {
  using Block = BlockQ4_K;
  struct RowState {
    __m512i sc16;  // the 8 sub-block scales as words 0..7
    __m256i mn16;  // mins, each twice: word 2k and 2k+1 hold mn[k] (pairs with bsums)
    float d, dmin;
  };
  static RowState row_state(const Block& b) {
    uint8_t sc[8], mn[8];
    unpack_q4_k_scales(b.scales, sc, mn);
    uint64_t sc64, mn64;
    std::memcpy(&sc64, sc, 8);
    std::memcpy(&mn64, mn, 8);
    RowState s;
    s.sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(sc64))));
    const __m128i mn8 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(mn64)));
    s.mn16 = _mm256_cvtepu16_epi32(mn8);
    s.mn16 = _mm256_or_si256(s.mn16, _mm256_slli_epi32(s.mn16, 16));
    s.d = half_to_float(b.d);
    s.dmin = half_to_float(b.dmin);
    return s;
  }
  static __m512i codes(const Block& b, int j) {
    const __m512i q = load512(b.qs + 64 * (j / 2));
    const __m512i lo = _mm512_and_si512(q, _mm512_set1_epi8(0x0F));
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), _mm512_set1_epi8(0x0F));
    // lo = [e 0..31 | e 64..95], hi = [e 32..63 | e 96..127] of this 128-element half.
    return (j & 1) == 0 ? _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(1, 0, 1, 0))
                        : _mm512_shuffle_i64x2(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
  }
  static __m512i scales(const RowState& s, int j) {
    const __m512i idx = _mm512_set_epi16(2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1,
                                         2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1, 2 * j + 1,
                                         2 * j + 1, 2 * j + 1, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j,
                                         2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j, 2 * j);
    return _mm512_permutexvar_epi16(idx, s.sc16);
  }
  // sum = fma(yd * d, sumi, sum) - (yd * dmin) * sum(mn * bsums), as the reference.
  static float finish(const RowState& s, const BlockQ8_K& yb, __m512i sumi, float sum) {
    const __m256i bs = load256(yb.bsums);
    int isum, msum;
    reduce_two(sumi, _mm256_madd_epi16(bs, s.mn16), &isum, &msum);
    sum = std::fma(yb.d * s.d, static_cast<float>(isum), sum);
    return std::fma(-(yb.d * s.dmin), static_cast<float>(msum), sum);
  }
};

// Q2_K: element e = 128h + 32s + l has its 2-bit code in bits 2s of qs[32h + l]; chunk j
// (h = j / 2) is s = 2(j % 2) for its first 32 elements and s + 1 for the others. 16-bit shifts
// by at most 6: what a byte keeps of them comes from that byte.
inline __m512i two_bit_codes(const uint8_t* qs, int j) {
  const int h = j / 2, s = 2 * (j & 1);
  const __m256i q = load256(qs + 32 * h);
  const __m512i q2 = _mm512_inserti64x4(_mm512_castsi256_si512(q), q, 1);
  const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(2 * s)),
                                           _mm256_set1_epi16(static_cast<int16_t>(2 * s + 2)), 1);
  return _mm512_and_si512(_mm512_srlv_epi16(q2, shift), _mm512_set1_epi8(3));
}

// Words 8m..8m+7 of the result (16 elements = 8 pairs) take the 16-element scale 4j + m.
inline __m512i scales_of_16(__m512i sc16, int j) {
  const int k = 4 * j;
  const __m512i idx = _mm512_set_epi16(k + 3, k + 3, k + 3, k + 3, k + 3, k + 3, k + 3, k + 3, k + 2, k + 2, k + 2,
                                       k + 2, k + 2, k + 2, k + 2, k + 2, k + 1, k + 1, k + 1, k + 1, k + 1, k + 1,
                                       k + 1, k + 1, k, k, k, k, k, k, k, k);
  return _mm512_permutexvar_epi16(idx, sc16);
}

// Q2_K: codes 0..3, 16 unsigned 4-bit scales and mins, one per 16 elements (pairing with bsums).
struct FmtQ2_K {
  using Block = BlockQ2_K;
  struct RowState {
    __m512i sc16;  // scales as words 0..15
    __m256i mn16;  // mins as words 0..15
    float d, dmin;
  };
  static RowState row_state(const Block& b) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales));
    RowState s;
    s.sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(raw, _mm_set1_epi8(0x0F))));
    s.mn16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
    s.d = half_to_float(b.d);
    s.dmin = half_to_float(b.dmin);
    return s;
  }
  static __m512i codes(const Block& b, int j) { return two_bit_codes(b.qs, j); }
  static __m512i scales(const RowState& s, int j) { return scales_of_16(s.sc16, j); }
  static float finish(const RowState& s, const BlockQ8_K& yb, __m512i sumi, float sum) {
    int isum, msum;
    reduce_two(sumi, _mm256_madd_epi16(load256(yb.bsums), s.mn16), &isum, &msum);
    sum = std::fma(yb.d * s.d, static_cast<float>(isum), sum);
    return std::fma(-(yb.d * s.dmin), static_cast<float>(msum), sum);
  }
};

// Q6_K: chunk j is elements 64j..64j+63 (half h = j / 2; the low nibbles of ql[64h..64h+63]
// for even j, the high ones for odd j, and qh bits 0-1 / 2-3 or 4-5 / 6-7 per 32-byte half).
// Codes are 0..63; the -32 is folded in as -32 * sum(sc * bsums).
struct FmtQ6_K {
  using Block = BlockQ6_K;
  struct RowState {
    __m512i sc16;  // the 16 sub-block scales as signed words 0..15
    __m256i sc16y;
    float d;
  };
  static RowState row_state(const Block& b) {
    RowState s;
    s.sc16y = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    s.sc16 = _mm512_castsi256_si512(s.sc16y);
    s.d = half_to_float(b.d);
    return s;
  }
  static __m512i codes(const Block& b, int j) {
    const int h = j / 2;
    const __m512i ql = load512(b.ql + 64 * h);
    const __m256i qh = load256(b.qh + 32 * h);
    const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), qh, 1);
    __m512i low;
    __m512i shift;
    if ((j & 1) == 0) {
      low = _mm512_and_si512(ql, _mm512_set1_epi8(0x0F));
      shift = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
    } else {
      low = _mm512_and_si512(_mm512_srli_epi16(ql, 4), _mm512_set1_epi8(0x0F));
      shift = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    }
    const __m512i high = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh2, shift), _mm512_set1_epi8(3)), 4);
    return _mm512_or_si512(low, high);
  }
  static __m512i scales(const RowState& s, int j) { return scales_of_16(s.sc16, j); }
  static float finish(const RowState& s, const BlockQ8_K& yb, __m512i sumi, float sum) {
    const __m256i bs = load256(yb.bsums);
    int isum, offset;
    reduce_two(sumi, _mm256_madd_epi16(bs, s.sc16y), &isum, &offset);
    return std::fma(yb.d * s.d, static_cast<float>(isum - 32 * offset), sum);
  }
};

template <typename F, int R, int C>
void tile_k(const uint8_t* w, size_t w_stride, const uint8_t* a, size_t a_stride, int64_t nb, float* y, int64_t ldy) {
  using Block = typename F::Block;
  float sum[R][C] = {};
  for (int64_t i = 0; i < nb; ++i) {
    typename F::RowState st[R];
    for (int r = 0; r < R; ++r) st[r] = F::row_state(reinterpret_cast<const Block*>(w + r * w_stride)[i]);
    __m512i sumi[R][C];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) sumi[r][c] = _mm512_setzero_si512();
    }
    for (int j = 0; j < 4; ++j) {
      __m512i yq[C];
      for (int c = 0; c < C; ++c) yq[c] = load512(reinterpret_cast<const BlockQ8_K*>(a + c * a_stride)[i].qs + 64 * j);
      for (int r = 0; r < R; ++r) {
        const __m512i q = F::codes(reinterpret_cast<const Block*>(w + r * w_stride)[i], j);
        const __m512i sc = F::scales(st[r], j);
        for (int c = 0; c < C; ++c) {
          // Codes <= 63 and |activations| <= 127: the int16 pair sums cannot saturate.
          sumi[r][c] = _mm512_dpwssd_epi32(sumi[r][c], _mm512_maddubs_epi16(q, yq[c]), sc);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        sum[r][c] = F::finish(st[r], reinterpret_cast<const BlockQ8_K*>(a + c * a_stride)[i], sumi[r][c], sum[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) y[c * ldy + r] = sum[r][c];
  }
}

// ---- tiling --------------------------------------------------------------------------------------

using TileFn = void (*)(const uint8_t*, size_t, const uint8_t*, size_t, int64_t, float*, int64_t);

// Full R x C tiles, then the row remainder one row at a time, then the token remainder (all of
// a one-token product) R1 rows at a time. Every tile shape computes each element with the same
// instructions (see the file comment).
template <TileFn kRC, TileFn kR1, TileFn k1C, TileFn k11, int R, int C, int R1>
void gemm_tiles(const void* w, size_t w_stride, int64_t n_rows, const void* a, size_t a_stride, int64_t n_tok,
                int64_t nb, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  int64_t t = 0;
  for (; t + C <= n_tok; t += C) {
    int64_t r = 0;
    for (; r + R <= n_rows; r += R) kRC(wb + r * w_stride, w_stride, ab + t * a_stride, a_stride, nb, y + t * ldy + r, ldy);
    for (; r < n_rows; ++r) k1C(wb + r * w_stride, w_stride, ab + t * a_stride, a_stride, nb, y + t * ldy + r, ldy);
  }
  for (; t < n_tok; ++t) {
    int64_t r = 0;
    for (; r + R1 <= n_rows; r += R1) kR1(wb + r * w_stride, w_stride, ab + t * a_stride, a_stride, nb, y + t * ldy + r, ldy);
    for (; r < n_rows; ++r) k11(wb + r * w_stride, w_stride, ab + t * a_stride, a_stride, nb, y + t * ldy + r, ldy);
  }
}

// Tile shapes measured on Zen 4 (thread CPU time, 1536 x 1536 by 256 tokens): 4 x 4 beat 4 x 3,
// 3 x 4, 2 x 4 and 2 x 6 for the 32-element formats; 2 x 4 beat 4 x 2 and 3 x 4 for the k-quants,
// whose scale vectors also need registers. One-token products (decode) take R1 rows at once (2
// and 4 were within the noise of each other for the k-quants).
constexpr int kR32 = 4, kC32 = 4, kR1_32 = 4;
constexpr int kRK = 2, kCK = 4, kR1K = 2;

template <typename F>
void gemm32(const void* w, size_t w_stride, int64_t n_rows, const void* a, size_t a_stride, int64_t n_tok, int64_t n,
            float* y, int64_t ldy) {
  gemm_tiles<tile32<F, kR32, kC32>, tile32<F, kR1_32, 1>, tile32<F, 1, kC32>, tile32<F, 1, 1>, kR32, kC32, kR1_32>(
      w, w_stride, n_rows, a, a_stride, n_tok, n / kQK, y, ldy);
}

template <typename F>
void gemm_k(const void* w, size_t w_stride, int64_t n_rows, const void* a, size_t a_stride, int64_t n_tok, int64_t n,
            float* y, int64_t ldy) {
  gemm_tiles<tile_k<F, kRK, kCK>, tile_k<F, kR1K, 1>, tile_k<F, 1, kCK>, tile_k<F, 1, 1>, kRK, kCK, kR1K>(
      w, w_stride, n_rows, a, a_stride, n_tok, n / kQKK, y, ldy);
}

// ---- MXFP4 against float activations ----------------------------------------------------------
//
// Each block's 32 weights are decoded to floats (doubled e2m1 values through a byte shuffle,
// times 2^(e - 128): exact) and multiplied into float activations. The sums follow the avx2
// tier's plain-type order exactly: four 8-lane chains over elements 0-7, 8-15, 16-23 and 24-31 of
// every block (here the first two and the last two share a zmm), reduced as that tier reduces
// them. So an MXFP4 row gives bit for bit the result of the same weights stored as BF16.

inline float hsum_like_avx2(__m512 a, __m512 b) {
  const __m256 v = _mm256_add_ps(_mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1)),
                                 _mm256_add_ps(_mm512_castps512_ps256(b), _mm512_extractf32x8_ps(b, 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// C activation rows at once: each block is decoded once for all of them.
template <int C>
void mxfp4_dots(const void* w, const void* const* a, int64_t n, float* out) {
  const auto* x = static_cast<const BlockMXFP4*>(w);
  const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m128i low4 = _mm_set1_epi8(0x0F);
  __m512 lo[C], hi[C];
  for (int c = 0; c < C; ++c) lo[c] = hi[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n / kQK; ++b) {
    _mm_prefetch(reinterpret_cast<const char*>(x + b) + kPrefetchBytes, _MM_HINT_T0);
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].qs));
    const __m512 d = _mm512_set1_ps(mxfp4_scale(x[b].e));
    const __m128i codes_lo = _mm_shuffle_epi8(lut, _mm_and_si128(raw, low4));
    const __m128i codes_hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(raw, 4), low4));
    const __m512 w_lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(codes_lo)), d);
    const __m512 w_hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(codes_hi)), d);
    for (int c = 0; c < C; ++c) {
      const float* y = static_cast<const float*>(a[c]) + b * kQK;
      lo[c] = _mm512_fmadd_ps(w_lo, _mm512_loadu_ps(y), lo[c]);
      hi[c] = _mm512_fmadd_ps(w_hi, _mm512_loadu_ps(y + 16), hi[c]);
    }
  }
  for (int c = 0; c < C; ++c) out[c] = hsum_like_avx2(lo[c], hi[c]);
}

float mxfp4_dot(const void* w, const void* a, int64_t n) {
  float out;
  mxfp4_dots<1>(w, &a, n, &out);
  return out;
}

template <GemmFn kGemm>
float one_dot(const void* w, const void* a, int64_t n) {
  float out;
  kGemm(w, 0, 1, a, 0, 1, n, &out, 1);
  return out;
}

template <GemmFn kGemm>
void four_dots(const void* w, const void* const* a, int64_t n, float* out) {
  for (int c = 0; c < 4; ++c) kGemm(w, 0, 1, a[c], 0, 1, n, out + c, 1);
}

}  // namespace
#endif  // DI_GEMM_AVX512

namespace avx512 {

QuantizeRowFn quantize_row_fn(DType) { return nullptr; }

GemmFn gemm_fn(DType weight_type) {
#if defined(DI_GEMM_AVX512)
  switch (weight_type) {
    case DType::kQ4_0: return gemm32<FmtQ4_0>;
    case DType::kQ4_1: return gemm32<FmtQ4_1>;
    case DType::kQ5_0: return gemm32<FmtQ5_0>;
    case DType::kQ4_K: return gemm_k<FmtQ4_K>;
    case DType::kQ6_K: return gemm_k<FmtQ6_K>;
    case DType::kQ2_K: return gemm_k<FmtQ2_K>;
    default: break;
  }
#endif
  return nullptr;
}

VecDotFn vec_dot_fn(DType weight_type) {
#if defined(DI_GEMM_AVX512)
  switch (weight_type) {
    case DType::kQ4_0: return one_dot<gemm32<FmtQ4_0>>;
    case DType::kQ4_1: return one_dot<gemm32<FmtQ4_1>>;
    case DType::kQ5_0: return one_dot<gemm32<FmtQ5_0>>;
    case DType::kMXFP4: return mxfp4_dot;
    case DType::kQ4_K: return one_dot<gemm_k<FmtQ4_K>>;
    case DType::kQ6_K: return one_dot<gemm_k<FmtQ6_K>>;
    case DType::kQ2_K: return one_dot<gemm_k<FmtQ2_K>>;
    default: break;
  }
#endif
  return nullptr;
}

VecDot4Fn vec_dot4_fn(DType weight_type) {
#if defined(DI_GEMM_AVX512)
  switch (weight_type) {
    case DType::kQ4_0: return four_dots<gemm32<FmtQ4_0>>;
    case DType::kQ4_1: return four_dots<gemm32<FmtQ4_1>>;
    case DType::kQ5_0: return four_dots<gemm32<FmtQ5_0>>;
    case DType::kMXFP4: return mxfp4_dots<4>;
    case DType::kQ4_K: return four_dots<gemm_k<FmtQ4_K>>;
    case DType::kQ6_K: return four_dots<gemm_k<FmtQ6_K>>;
    case DType::kQ2_K: return four_dots<gemm_k<FmtQ2_K>>;
    default: break;
  }
#endif
  return nullptr;
}

}  // namespace avx512

}  // namespace deepinfer::cpu
