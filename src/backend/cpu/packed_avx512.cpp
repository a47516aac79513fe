// AVX-512 VNNI matrix products of packed weights (layout in packed.h). A tile is R row groups
// (16 rows each, one zmm of results per group) by C activation rows. Per 32-element block:
//   - each group's 64-byte code vectors are loaded (and unpacked) once for the C tokens;
//   - each token's 4 activation bytes of a k-group are broadcast to the 16 lanes, once for the R
//     groups, and one vpdpbusd adds 4 products to each of the 16 rows' integer sums;
//   - the block's exact integer sums are scaled once per (group, token): one conversion, one
//     multiply (16 weight scales by the token's scale) and one fma, plus one fma for Q4_1's min.
// Unsigned codes pair with signed activations; the formats' offsets (8, 16, 128) enter the
// integer sum as -offset * sum(activation codes), formed once per token and block.
//
// Compiled with AVX-512 flags of its own and reached only through packed_gemm_fn after the
// cpuid check (see quant_avx512.cpp on why everything here is in an anonymous namespace).
//
// Batch invariance: an element's integer sum is exact and its float operations are the same
// sequence in every tile shape, so a result does not depend on the tokens or rows beside it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/packed.h"
#include "backend/cpu/packed_layout.h"
#include "backend/cpu/quant_blocks.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__F16C__) && defined(__FMA__)
#define DI_PACKED_AVX512 1
#if defined(__GNUC__) && !defined(__clang__)  // GCC 12 only (clang has no -Wmaybe-uninitialized)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

namespace deepinfer::cpu {

#if defined(DI_PACKED_AVX512)
namespace {

#include "backend/cpu/packed_tiles.inc"

using namespace packed_layout;  // NOLINT(google-build-using-namespace): the layouts' offsets

inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }

// The 4-bit formats' code vector of k-group g (packed.h): low nibbles of codes[g] for g < 4,
// high nibbles of codes[g - 4] after.
inline __m512i nibbles(const uint8_t* codes, int g) {
  const __m512i q = load512(codes + 64 * (g & 3));
  const __m512i mask = _mm512_set1_epi8(0x0F);
  return g < 4 ? _mm512_and_si512(q, mask) : _mm512_and_si512(_mm512_srli_epi16(q, 4), mask);
}

// 4-bit codes with their fifth bits (Q5_0, Q5_1, Q5_K): bit `bit` of each byte of `high` moved
// to bit 4 (16-bit shifts: bit 4 of either byte of a word comes from the same byte, and the mask
// drops what crossed) and or-ed into the nibbles (0xF8: a | (b & c)).
inline __m512i with_fifth_bit(__m512i low4, __m512i high, int bit) {
  const __m512i moved = bit <= 4 ? _mm512_slli_epi16(high, 4 - bit) : _mm512_srli_epi16(high, bit - 4);
  return _mm512_ternarylogic_epi32(low4, moved, _mm512_set1_epi8(0x10), 0xF8);
}

// Traits of the 4-bit formats: codes at kCodesAt in the packed block, k-group g's activation
// bytes at 4g (low nibbles) or 16 + 4(g - 4) (high nibbles).
template <size_t kCodesAt>
struct NibbleCodes {
  static constexpr size_t kCodes = kCodesAt;
  static __m512i code(const uint8_t* pb, int g) { return nibbles(pb + kCodes, g); }
  static int act_offset(int g) { return g < 4 ? 4 * g : 16 + 4 * (g - 4); }
};

struct PackQ4_0 : Q4_0Format, NibbleCodes<kQ4_0Codes> {};

struct PackQ4_1 : Q4_1Format, NibbleCodes<kQ4_1Codes> {};

// The 5-bit formats: the 4-bit ones' nibbles at kCodesAt with their fifth bits in high[64] at
// kHighAt.
template <size_t kHighAt, size_t kCodesAt>
struct FiveBitCodes : NibbleCodes<kCodesAt> {
  static __m512i code(const uint8_t* pb, int g) {
    return with_fifth_bit(nibbles(pb + kCodesAt, g), load512(pb + kHighAt), g);
  }
};

struct PackQ5_0 : Q5_0Format, FiveBitCodes<kQ5_0High, kQ5_0Codes> {};

// Q5_1: Q4_1's d and m, then Q5_0's high bits and nibbles.
struct PackQ5_1 : Q5_1Format, FiveBitCodes<kQ5_1High, kQ5_1Codes> {};

// Q5_0 with its codes unpacked to bytes: k-group g's 64 bytes (in the order PackQ5_0::code gives
// them) at kQ5_0ByteCodes + 64 g, after the same d[16] (packed_layout.h). A prefill product unpacks each call's groups into
// this once (packed_gemm_q5_0) instead of once per token tile; the integer sums and the float
// operations are the same, so are the results.
struct PackQ5_0Bytes : PackQ5_0 {
  static constexpr size_t kBytes = kQ5_0ByteBytes;
  static __m512i code(const uint8_t* pb, int g) { return load512(pb + kQ5_0ByteCodes + 64 * g); }
};

struct PackQ8_0 : Q8_0Format {
  static constexpr size_t kCodes = kQ8_0Codes;
  static __m512i code(const uint8_t* pb, int g) { return load512(pb + kCodes + 64 * g); }
  static int act_offset(int g) { return 4 * g; }
};

// y[c * ldy + 16 r + j] for an R-group by C-token tile. One-token tiles split each integer sum
// over two accumulators (even and odd k-groups): eight dependent vpdpbusd per block would
// otherwise leave the unit waiting on its own latency.
template <typename F, int R, int C>
void tile(const uint8_t* w, size_t group_stride, const uint8_t* a, size_t a_stride, const PackedActInfo* info,
          int64_t nb, float* y, int64_t ldy, const Prefetch& prefetch) {
  using ActBlock = typename F::ActBlock;
  constexpr int kSplit = R * C >= 8 ? 1 : 2;
  // Element (r, c) of a tile's arrays is [r * C + c]: one-dimensional, which GCC keeps in
  // registers (it kept two-dimensional arrays of vectors on the stack in larger tiles).
  __m512 acc[R * C];
#pragma GCC unroll 32
  for (int e = 0; e < R * C; ++e) acc[e] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const ActBlock* ab[C];
    __m512 dy[C];
    __m512 sy[C];
    __m512i isum[kSplit * R * C];
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) {
      ab[c] = reinterpret_cast<const ActBlock*>(a + c * a_stride) + i;
      const PackedActInfo& x = info[c * nb + i];
      dy[c] = _mm512_set1_ps(x.d);
      if constexpr (F::kMin) sy[c] = _mm512_set1_ps(x.s);
      const __m512i init = F::kOffset != 0 ? _mm512_set1_epi32(-F::kOffset * x.code_sum) : _mm512_setzero_si512();
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        isum[r * C + c] = init;
        if constexpr (kSplit == 2) isum[R * C + r * C + c] = _mm512_setzero_si512();
      }
    }
    const uint8_t* pb[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) pb[r] = w + r * group_stride + i * F::kBytes;
    if (prefetch.ahead) {
      constexpr size_t kAhead = (kPrefetchBytes + F::kBytes - 1) / F::kBytes * F::kBytes;  // whole blocks
      for (int r = 0; r < R; ++r) prefetch_lines(pb[r] + kAhead, F::kBytes);
    }
    prefetch.next_share(i);
#pragma GCC unroll 8
    for (int g = 0; g < 8; ++g) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const __m512i q = F::code(pb[r], g);
#pragma GCC unroll 16
        for (int c = 0; c < C; ++c) {
          const __m512i x = _mm512_set1_epi32(load_i32(ab[c]->qs + F::act_offset(g)));
          __m512i& s = isum[(g % kSplit) * R * C + r * C + c];
          s = _mm512_dpbusd_epi32(s, q, x);
        }
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 dx = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb[r])));
      __m512 mx;
      if constexpr (F::kMin) mx = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb[r] + 32)));
#pragma GCC unroll 16
      for (int c = 0; c < C; ++c) {
        __m512i s = isum[r * C + c];
        if constexpr (kSplit == 2) s = _mm512_add_epi32(s, isum[R * C + r * C + c]);
        __m512& out = acc[r * C + c];
        out = _mm512_fmadd_ps(_mm512_mul_ps(dx, dy[c]), _mm512_cvtepi32_ps(s), out);
        if constexpr (F::kMin) out = _mm512_fmadd_ps(mx, sy[c], out);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 16
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + c * ldy + kPackRows * r, acc[r * C + c]);
  }
}

// ---- Q4_K ----------------------------------------------------------------------------------------
// Per super-block: each sub-block's exact integer sum (8 vpdpbusd) times its 6-bit scale, summed
// over the 8 sub-blocks; the mins against the activation's sub-block sums (bsums); then the
// reference's float operations on those two integers, so results equal ref::vec_dot bit for bit.
// Layout (packed.h): d[16], dmin[16] (half), sc[8][16], mn[8][16] (bytes), codes[4][8][64].
// Q5_K: the same fields, then high[8][64] (packed.h): its codes are Q4_K's nibbles with bit s of
// high[l] (sub-block s, k-group l) moved to bit 4, as Q5_0's are. The same integer sums and
// float operations as the reference's, so the same bits.
// The form a prefill call unpacks Q5_K groups into (packed_gemm_q5_k_fn): the same d, dmin, sc
// and mn, then codes[8][8][64], sub-block s's k-group l as the direct tile forms it.
constexpr size_t kQ5KUnpackedBytes = kQ4KCodes + 8 * 512;

// The codes a tile reads: Q4_K's nibbles, Q5_K's nibbles and fifth bits, or Q5_K's unpacked bytes.
enum class KCodes { kNibbles, kFifthBit, kBytes };

template <int R, int C, KCodes kCodes = KCodes::kNibbles>
void tile_q4_k(const uint8_t* w, size_t group_stride, const uint8_t* a, size_t a_stride, const PackedActInfo*,
               int64_t nb, float* y, int64_t ldy, const Prefetch& prefetch) {
  constexpr size_t kBlock =
      kCodes == KCodes::kNibbles ? kQ4KBytes : (kCodes == KCodes::kFifthBit ? kQ5KBytes : kQ5KUnpackedBytes);
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  const __m512i low = _mm512_set1_epi8(0x0F);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ8_K* ab[C];
    for (int c = 0; c < C; ++c) ab[c] = reinterpret_cast<const BlockQ8_K*>(a + c * a_stride) + i;
    const uint8_t* pb[R];
    for (int r = 0; r < R; ++r) pb[r] = w + r * group_stride + i * kBlock;
    prefetch.next_share(i);
    __m512i isum[R][C];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) isum[r][c] = _mm512_setzero_si512();
    }
    for (int s = 0; s < 8; ++s) {
      if (prefetch.ahead) {  // two super-blocks ahead, a sub-block's share at a time
        for (int r = 0; r < R; ++r) prefetch_lines(pb[r] + 2 * kBlock + kBlock / 8 * s, kBlock / 8);
      }
      const int chunk = s / 2, high = s & 1;
      __m512i sub[R][C];
      for (int r = 0; r < R; ++r) {
        for (int c = 0; c < C; ++c) sub[r][c] = _mm512_setzero_si512();
      }
      for (int l = 0; l < 8; ++l) {
        for (int r = 0; r < R; ++r) {
          __m512i code;
          if constexpr (kCodes == KCodes::kBytes) {
            code = load512(pb[r] + kQ4KCodes + 512 * s + 64 * l);
          } else {
            const __m512i q = load512(pb[r] + kQ4KCodes + 512 * chunk + 64 * l);
            code = high ? _mm512_and_si512(_mm512_srli_epi16(q, 4), low) : _mm512_and_si512(q, low);
          }
          if constexpr (kCodes == KCodes::kFifthBit) code = with_fifth_bit(code, load512(pb[r] + kQ5KHigh + 64 * l), s);
          for (int c = 0; c < C; ++c) {
            const __m512i x = _mm512_set1_epi32(load_i32(ab[c]->qs + 64 * chunk + 32 * high + 4 * l));
            sub[r][c] = _mm512_dpbusd_epi32(sub[r][c], code, x);
          }
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m512i sc =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb[r] + kQ4KSc + 16 * s)));
        for (int c = 0; c < C; ++c) isum[r][c] = _mm512_add_epi32(isum[r][c], _mm512_mullo_epi32(sub[r][c], sc));
      }
    }
    // The mins' integer sums sum(mn[s] * bsum[s]) over the 8 sub-blocks, where bsum[s] is the
    // activation's sum over sub-block s: four vpdpwssd on 16-bit pairs (sub-blocks 2p, 2p + 1;
    // mn < 64, |bsum| <= 32 * 127), exactly the integer the per-sub-block products gave. After
    // the codes' sums, so that their registers are free while those run (a 1 x 8 tile).
    int32_t bsum_pairs[C][4];
    for (int c = 0; c < C; ++c) {
      for (int p = 0; p < 4; ++p) {
        const int32_t even = ab[c]->bsums[4 * p] + ab[c]->bsums[4 * p + 1];
        const int32_t odd = ab[c]->bsums[4 * p + 2] + ab[c]->bsums[4 * p + 3];
        const uint32_t pair = static_cast<uint32_t>(even & 0xFFFF) | (static_cast<uint32_t>(odd) << 16);
        bsum_pairs[c][p] = static_cast<int32_t>(pair);
      }
    }
    __m512i msum[R][C];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) msum[r][c] = _mm512_setzero_si512();
      for (int p = 0; p < 4; ++p) {
        const uint8_t* mn = pb[r] + kQ4KMn + 32 * p;
        const __m512i even = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mn)));
        const __m512i odd = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(mn + 16)));
        const __m512i pair = _mm512_or_si512(even, _mm512_slli_epi32(odd, 16));
        for (int c = 0; c < C; ++c) {
          msum[r][c] = _mm512_dpwssd_epi32(msum[r][c], pair, _mm512_set1_epi32(bsum_pairs[c][p]));
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb[r])));
      const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb[r] + 32)));
      for (int c = 0; c < C; ++c) {
        const __m512 dy = _mm512_set1_ps(ab[c]->d);
        // sum = fma(dy * d, isum, sum), then fma(-(dy * dmin), msum, sum): the reference's order.
        acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(dy, d), _mm512_cvtepi32_ps(isum[r][c]), acc[r][c]);
        acc[r][c] = _mm512_fnmadd_ps(_mm512_mul_ps(dy, dmin), _mm512_cvtepi32_ps(msum[r][c]), acc[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + c * ldy + kPackRows * r, acc[r][c]);
  }
}

// ---- Q6_K, Q3_K and Q2_K -----------------------------------------------------------------------------
// Per super-block and sub-block s (16 elements, 4 k-groups): the unsigned codes' integer sum with
// the activations, started at -kOffset * bsums[s] so that it is the sum of (code - kOffset) *
// activation, times the sub-block's scale; Q2_K also sums its mins times bsums[s]. Then one
// fma(dy * d, sum, acc) (and Q2_K's fma(-(dy * dmin), mins' sum, acc)), the reference's float
// operations on the same integers, so results equal ref::vec_dot bit for bit.
// Layouts (packed.h): d[16] (half), sc[16][16] (int8), then Q6_K's low[32][64], high[16][64] or
// Q3_K's low[16][64], high[8][64]; Q2_K: d[16], dmin[16] (half), scales[16][16] (the stored
// bytes: scale in the low nibble, min in the high), low[16][64].

// The 16 rows' codes (0..63) of k-group g: its low nibble from low[g % 32], its two high bits
// moved from bits 2(g / 16).. of high[g % 16] to bits 4..5 (16-bit shifts: what crosses into
// the other byte of a word lands outside the bits kept).
inline __m512i q6_k_code(const uint8_t* pb, int g) {
  const __m512i lowv = load512(pb + kQ6KLow + 64 * (g & 31));
  const __m512i nib = g < 32 ? lowv : _mm512_srli_epi16(lowv, 4);
  const __m512i hv = load512(pb + kQ6KHigh + 64 * (g & 15));
  const int m = g >> 4;
  const __m512i hs = m < 2 ? _mm512_slli_epi16(hv, 4 - 2 * m) : (m == 2 ? hv : _mm512_srli_epi16(hv, 2));
  // 0xE4: (nib & 0x0F) | (hs & ~0x0F), then bits 6..7 cleared.
  const __m512i merged = _mm512_ternarylogic_epi32(nib, hs, _mm512_set1_epi8(0x0F), 0xE4);
  return _mm512_and_si512(merged, _mm512_set1_epi8(0x3F));
}

// The 16 rows' codes (0..7) of k-group g: its low 2 bits from bits 2(g / 16).. of low[g % 16],
// its third from bit g / 8 of high[g % 8] moved to bit 2 (16-bit shifts, as q6_k_code: a shift
// of at most 2 to the left moves the other byte's bits to bits 0..1 only, which the merge drops).
inline __m512i q3_k_code(const uint8_t* pb, int g) {
  const __m512i lowv = load512(pb + kQ3KLow + 64 * (g & 15));
  const int m = g >> 4;
  const __m512i low = m == 0 ? lowv : _mm512_srli_epi16(lowv, 2 * m);
  const __m512i hv = load512(pb + kQ3KHigh + 64 * (g & 7));
  const int bit = g >> 3;
  const __m512i hs = bit < 2 ? _mm512_slli_epi16(hv, 2 - bit) : (bit == 2 ? hv : _mm512_srli_epi16(hv, bit - 2));
  // 0xE4: (low & 0x03) | (hs & ~0x03), then bits 3..7 cleared.
  const __m512i merged = _mm512_ternarylogic_epi32(low, hs, _mm512_set1_epi8(0x03), 0xE4);
  return _mm512_and_si512(merged, _mm512_set1_epi8(0x07));
}

// The 16 rows' codes (0..3) of k-group g: bits 2(g / 16).. of low[g % 16].
inline __m512i q2_k_code(const uint8_t* pb, int g) {
  const __m512i lowv = load512(pb + kQ2KCodes + 64 * (g & 15));
  const int m = g >> 4;
  return _mm512_and_si512(m == 0 ? lowv : _mm512_srli_epi16(lowv, 2 * m), _mm512_set1_epi8(0x03));
}

// The formats tile_k16 multiplies: where a block's k-group codes come from (after kHeader bytes
// of scales), what the codes are offset by, the sub-blocks' scales and (kMins) mins as 16 int32
// with the dmin[16] halves at kDminAt.
struct SignedScales {
  static constexpr bool kMins = false;
  static constexpr size_t kHeader = kK16Codes;
  static __m512i scale(const uint8_t* pb, int s) {
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + kK16Sc + 16 * s)));
  }
};
struct Q6KCodes : SignedScales {
  static constexpr size_t kBytes = kQ6KBytes;
  static constexpr int kOffset = 32;
  static __m512i code(const uint8_t* pb, int g) { return q6_k_code(pb, g); }
};
struct Q3KCodes : SignedScales {
  static constexpr size_t kBytes = kQ3KBytes;
  static constexpr int kOffset = 4;
  static __m512i code(const uint8_t* pb, int g) { return q3_k_code(pb, g); }
};
struct Q2KCodes {
  static constexpr bool kMins = true;
  static constexpr size_t kDminAt = kQ2KDmin;
  static constexpr size_t kHeader = kQ2KCodes;
  static constexpr size_t kBytes = kQ2KBytes;
  static constexpr int kOffset = 0;
  static __m512i code(const uint8_t* pb, int g) { return q2_k_code(pb, g); }
  static __m512i scale_bytes(const uint8_t* pb, int s) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + kQ2KSc + 16 * s)));
  }
  static __m512i scale(const uint8_t* pb, int s) { return _mm512_and_si512(scale_bytes(pb, s), _mm512_set1_epi32(15)); }
  static __m512i min(const uint8_t* pb, int s) { return _mm512_srli_epi32(scale_bytes(pb, s), 4); }
};

// The layout a prefill call unpacks a format's groups into (packed_gemm_k16_fn): its kHeader
// bytes of scales as above, then codes[64][64], k-group g's 16 rows' codes as Packed::code
// gives them.
template <typename Packed>
struct K16ByteCodes : Packed {
  static constexpr size_t kBytes = Packed::kHeader + 4096;
  static __m512i code(const uint8_t* pb, int g) { return load512(pb + Packed::kHeader + 64 * g); }
};

template <typename Codes, int R, int C>
void tile_k16(const uint8_t* w, size_t group_stride, const uint8_t* a, size_t a_stride, const PackedActInfo*,
              int64_t nb, float* y, int64_t ldy, const Prefetch& prefetch) {
  constexpr size_t kBlock = Codes::kBytes;
  __m512 acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ8_K* ab[C];
    for (int c = 0; c < C; ++c) ab[c] = reinterpret_cast<const BlockQ8_K*>(a + c * a_stride) + i;
    const uint8_t* pb[R];
    for (int r = 0; r < R; ++r) pb[r] = w + r * group_stride + i * kBlock;
    prefetch.next_share(i);
    __m512i isum[R][C], msum[R][C];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) isum[r][c] = msum[r][c] = _mm512_setzero_si512();
    }
    // Unrolled, so that every k-group's shift counts are constants: rolled, GCC computed them
    // and branched on them in the loop; one token by 8192 x 4096 Q3_K 0.58-0.60 -> 0.30 ms,
    // Q6_K 0.49-0.56 -> 0.45-0.48 ms (both compute-bound there), and by 256 tokens no slower.
#pragma GCC unroll 16
    for (int s = 0; s < 16; ++s) {
      if (prefetch.ahead) {  // two super-blocks ahead, a sub-block's share at a time
        for (int r = 0; r < R; ++r) prefetch_lines(pb[r] + 2 * kBlock + kBlock / 16 * s, kBlock / 16);
      }
      __m512i sub[R][C];
      for (int c = 0; c < C; ++c) {
        const __m512i offset = _mm512_set1_epi32(-Codes::kOffset * ab[c]->bsums[s]);
        for (int r = 0; r < R; ++r) sub[r][c] = offset;
      }
      for (int q = 0; q < 4; ++q) {
        const int g = 4 * s + q;
        for (int r = 0; r < R; ++r) {
          const __m512i code = Codes::code(pb[r], g);
          for (int c = 0; c < C; ++c) {
            const __m512i x = _mm512_set1_epi32(load_i32(ab[c]->qs + 4 * g));
            sub[r][c] = _mm512_dpbusd_epi32(sub[r][c], code, x);
          }
        }
      }
      for (int r = 0; r < R; ++r) {
        const __m512i sc = Codes::scale(pb[r], s);
        for (int c = 0; c < C; ++c) isum[r][c] = _mm512_add_epi32(isum[r][c], _mm512_mullo_epi32(sub[r][c], sc));
      }
    }
    // The mins' sums after the codes' (their registers free again), two sub-blocks per vpdpwssd:
    // each row's pair of mins (0..15) as 16-bit halves, by the pair of bsums (adjacent int16s).
    if constexpr (Codes::kMins) {
      for (int s = 0; s < 16; s += 2) {
        for (int r = 0; r < R; ++r) {
          const __m512i mins = _mm512_or_si512(Codes::min(pb[r], s), _mm512_slli_epi32(Codes::min(pb[r], s + 1), 16));
          for (int c = 0; c < C; ++c) {
            msum[r][c] = _mm512_dpwssd_epi32(msum[r][c], mins, _mm512_set1_epi32(load_i32(ab[c]->bsums + s)));
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb[r])));
      for (int c = 0; c < C; ++c) {
        const __m512 dy = _mm512_set1_ps(ab[c]->d);
        acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(dy, d), _mm512_cvtepi32_ps(isum[r][c]), acc[r][c]);
      }
      if constexpr (Codes::kMins) {
        const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb[r] + Codes::kDminAt)));
        for (int c = 0; c < C; ++c) {
          const __m512 dy = _mm512_set1_ps(ab[c]->d);
          acc[r][c] = _mm512_fnmadd_ps(_mm512_mul_ps(dy, dmin), _mm512_cvtepi32_ps(msum[r][c]), acc[r][c]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(y + c * ldy + kPackRows * r, acc[r][c]);
  }
}

// Tile shapes: R x C groups by tokens for matrix products. 2 x 6 (24 accumulators): against
// 2 x 4, 2048 x 2048 x 256 ran 1.16x (Q5_0), 1.10x (Q8_0), 1.07x (Q4_0) and 1.06x (Q4_1) faster
// on an Emerald Rapids Xeon; 1 x 12 was no better (Q5_0 +2%, Q8_0 -9%). One token takes one
// group at a time, so a decode step reads the weights as one linear stream: several groups at
// once were 8-40% slower on a 170 MB Q8_0 matrix that streams from memory (Zen 4), and so was
// a software prefetch there; on Intel the first token tiles prefetch (kPrefetchBytes).
constexpr int kR = 2, kC = 6;

template <typename F, int C>
constexpr PackedGemmFn packed_gemm = packed_gemm_tiles<tile<F, kR, C>, tile<F, 1, C>, tile<F, kR, 4>, tile<F, 1, 4>,
                                                       tile<F, 1, 1>, kR, C, kQK>;

// Q5_0 passed over several times (prefill): each call's groups unpacked once into PackQ5_0Bytes
// blocks (at most kUnpackedBytes at a time, in L2), then the tiles over those. Unpacking a
// k-group's codes takes five instructions on the ports that run vpdpbusd, against six vpdpbusd
// for a 2 x 6 tile's use of them; a call of 64 tokens now pays it once, not 11 times: Gemma 3's
// prefill 1.1x, Q5_0 2048 x 2048 by 256 tokens 1.2x. A decode batch (`one_pass`), which streams
// its weights from memory, keeps the direct tiles below four rows of tiles: unpacking there made
// a served step of 12-16 sequences 4% slower, and one of 24-30 no faster; at 47 (Gemma 3 served
// at 64 in flight) it was 3% faster (decode step 50.1 / 50.5 -> 48.4 / 49.1 ms).
void unpack_q5_0(const uint8_t* src, uint8_t* dst) {
  std::memcpy(dst, src, kQ5_0ByteCodes);  // d[16]
#pragma GCC unroll 8
  for (int g = 0; g < 8; ++g) _mm512_storeu_si512(dst + kQ5_0ByteCodes + 64 * g, PackQ5_0::code(src, g));
}

void packed_gemm_q5_0(const uint8_t* w, size_t group_stride, int64_t n_groups, const void* act, size_t a_stride,
                      const PackedActInfo* infos, int64_t n_tok, int64_t n, float* y, int64_t ldy, bool one_pass) {
  if (n_tok < (one_pass ? 4 : 2) * kC) {
    return packed_gemm<PackQ5_0, kC>(w, group_stride, n_groups, act, a_stride, infos, n_tok, n, y, ldy, one_pass);
  }
  unpacked_gemm<PackQ5_0::kBytes, PackQ5_0Bytes::kBytes, kQK, unpack_q5_0, packed_gemm<PackQ5_0Bytes, kC>, kR>(
      w, group_stride, n_groups, act, a_stride, infos, n_tok, n, y, ldy);
}

// Q4_K: two groups by four tokens, each code vector's nibbles taken out once for four tokens and
// each activation broadcast once for two groups; the mins' sums wait until the codes' are done,
// so that the 2 x 4 tile's 24 accumulators fit the 32 registers. 2048 x 2048 by 256 tokens
// 3.84-3.93 -> 3.06-3.09 ms against one group by four (1 x 8: 3.27-3.36); Llama-1B Q4_K_M
// prefill 241 -> 291 tok/s.
constexpr PackedGemmFn packed_gemm_q4_k = packed_gemm_tiles<tile_q4_k<2, 4>, tile_q4_k<1, 4>, tile_q4_k<2, 4>,
                                                            tile_q4_k<1, 4>, tile_q4_k<1, 1>, 2, 4, kQKK>;
// Q5_K in Q4_K's tiles: its fifth bits or-ed into the nibbles (decode), or over codes unpacked
// to bytes once per call (kBytes, prefill).
template <KCodes kCodes>
constexpr PackedGemmFn packed_gemm_q5_k =
    packed_gemm_tiles<tile_q4_k<2, 4, kCodes>, tile_q4_k<1, 4, kCodes>, tile_q4_k<2, 4, kCodes>,
                      tile_q4_k<1, 4, kCodes>, tile_q4_k<1, 1, kCodes>, 2, 4, kQKK>;

// Q5_K passed over several times (prefill), as Q5_0: each call's codes (nibble and fifth bit:
// four instructions per code vector) formed once into bytes instead of once per row of token
// tiles. Decode batches below eight rows of tiles (32 tokens) keep the direct tiles.
void unpack_q5_k(const uint8_t* src, uint8_t* dst) {
  std::memcpy(dst, src, kQ4KCodes);  // d, dmin, sc, mn
  const __m512i low = _mm512_set1_epi8(0x0F);
  for (int s = 0; s < 8; ++s) {
    for (int l = 0; l < 8; ++l) {
      const __m512i q = load512(src + kQ4KCodes + 512 * (s / 2) + 64 * l);
      const __m512i nib = s & 1 ? _mm512_and_si512(_mm512_srli_epi16(q, 4), low) : _mm512_and_si512(q, low);
      _mm512_storeu_si512(dst + kQ4KCodes + 512 * s + 64 * l, with_fifth_bit(nib, load512(src + kQ5KHigh + 64 * l), s));
    }
  }
}

void packed_gemm_q5_k_fn(const uint8_t* w, size_t group_stride, int64_t n_groups, const void* act, size_t a_stride,
                         const PackedActInfo* infos, int64_t n_tok, int64_t n, float* y, int64_t ldy, bool one_pass) {
  if (n_tok < (one_pass ? 8 : 4) * 4) {
    return packed_gemm_q5_k<KCodes::kFifthBit>(w, group_stride, n_groups, act, a_stride, infos, n_tok, n, y, ldy,
                                                one_pass);
  }
  unpacked_gemm<kQ5KBytes, kQ5KUnpackedBytes, kQKK, unpack_q5_k, packed_gemm_q5_k<KCodes::kBytes>, 2>(
      w, group_stride, n_groups, act, a_stride, infos, n_tok, n, y, ldy);
}

// Q6_K, Q3_K and Q2_K: one group by eight tokens. Q6_K's and Q3_K's codes cost six instructions
// to unpack (two loads, two shifts, a merge and a mask), which eight tokens share: Q6_K's 1 x 8 ran 1.5-2x faster
// than 1 x 4 on Zen 4 (2048 x 2048 by 256 tokens); Q4_K, whose codes cost two, gained nothing
// from it.
constexpr int kCK16 = 8;
template <typename Codes>
constexpr PackedGemmFn packed_gemm_k16 =
    packed_gemm_tiles<tile_k16<Codes, 1, kCK16>, tile_k16<Codes, 1, kCK16>, tile_k16<Codes, 1, 4>,
                      tile_k16<Codes, 1, 4>, tile_k16<Codes, 1, 1>, 1, kCK16, kQKK>;

// Q6_K, Q3_K and Q2_K passed over several times (prefill), as Q5_0: each call's groups unpacked to
// bytes once (six instructions per k-group's codes, which an 8-token tile paid again in every
// tile row): Q6_K 2048x2048 by 256 tokens 5.2 -> 4.0-4.1 ms, Gemma 3's prefill at 512 3-6%
// faster. Decode batches below four rows of tiles (32 tokens) keep the direct tiles; at 47
// (Gemma 3 served at 64 in flight) unpacking made the decode step 3% shorter (51.9 / 51.6 ->
// 50.0 / 50.2 ms).
template <typename Codes>
void unpack_k16(const uint8_t* src, uint8_t* dst) {
  std::memcpy(dst, src, Codes::kHeader);  // d[16], (dmin[16],) the scales
  for (int g = 0; g < 64; ++g) _mm512_storeu_si512(dst + Codes::kHeader + 64 * g, Codes::code(src, g));
}

template <typename Codes>
void packed_gemm_k16_fn(const uint8_t* w, size_t group_stride, int64_t n_groups, const void* act, size_t a_stride,
                        const PackedActInfo* infos, int64_t n_tok, int64_t n, float* y, int64_t ldy, bool one_pass) {
  if (n_tok < (one_pass ? 4 : 2) * kCK16) {
    return packed_gemm_k16<Codes>(w, group_stride, n_groups, act, a_stride, infos, n_tok, n, y, ldy, one_pass);
  }
  unpacked_gemm<Codes::kBytes, K16ByteCodes<Codes>::kBytes, kQKK, unpack_k16<Codes>,
                packed_gemm_k16<K16ByteCodes<Codes>>, 1>(w, group_stride, n_groups, act, a_stride, infos, n_tok, n, y,
                                                         ldy);
}

}  // namespace
#endif  // DI_PACKED_AVX512

namespace avx512 {

PackedGemmFn packed_gemm_fn(DType weight_type) {
#if defined(DI_PACKED_AVX512)
  switch (weight_type) {
    case DType::kQ4_0: return packed_gemm<PackQ4_0, kC>;
    case DType::kQ4_1: return packed_gemm<PackQ4_1, kC>;
    case DType::kQ5_0: return packed_gemm_q5_0;
    case DType::kQ5_1: return packed_gemm<PackQ5_1, kC>;
    case DType::kQ8_0: return packed_gemm<PackQ8_0, kC>;
    case DType::kQ4_K: return packed_gemm_q4_k;
    case DType::kQ5_K: return packed_gemm_q5_k_fn;
    case DType::kQ2_K: return packed_gemm_k16_fn<Q2KCodes>;
    case DType::kQ3_K: return packed_gemm_k16_fn<Q3KCodes>;
    case DType::kQ6_K: return packed_gemm_k16_fn<Q6KCodes>;
    default: return avx2::packed_float_gemm_fn(weight_type);  // float panels: AVX2 tiles on both tiers
  }
#endif
  (void)weight_type;
  return nullptr;
}

PackedActInfoFn packed_act_info_fn(DType weight_type) {
#if defined(DI_PACKED_AVX512)
  switch (weight_type) {
    case DType::kQ4_0:
    case DType::kQ5_0:
    case DType::kQ8_0: return act_infos<BlockQ8_0>;
    case DType::kQ4_1:
    case DType::kQ5_1: return act_infos<BlockQ8_1>;
    default: break;
  }
#endif
  (void)weight_type;
  return nullptr;
}

}  // namespace avx512

}  // namespace deepinfer::cpu
