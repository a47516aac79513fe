// AVX2 matrix products of packed weights (layout in packed.h), for CPUs without AVX-512 VNNI
// (AMD Zen 2 and 3, Intel before Ice Lake and its client cores). The same packed matrices as
// the AVX-512 tiles: a 16-row group's 64-byte code vector is two 32-byte halves, rows 0..7 and
// 8..15, and a tile works through a block half by half, one ymm of results per half and token.
//
// With no vpdpbusd, a k-group's 4 products per row come from vpmaddubsw (unsigned codes by
// signed activation bytes, two products per int16 lane) and are summed over several k-groups in
// int16 before one vpmaddwd widens them: by ones (32-element formats) or by the sub-block's
// scale (k-quants), which then costs nothing more. kChunk k-groups go into one int16 sum: all 8
// of a block for 4-bit codes (8 * 2 * 15 * 127 = 30480 < 2^15), 4 for 5-bit codes, 2 for Q6_K's
// 6-bit ones. Q8_0's codes span a whole byte, where even one k-group's pair could saturate: its
// codes are taken back to signed (xor 0x80), and |code| multiplies the activation with the
// code's sign (vpsignb), each k-group widened on its own (pairs below 2 * 128 * 127).
//
// Every integer sum is exact, and the float operations on it are the AVX-512 tiles', lane for
// lane (one multiply and one fma per block, Q4_1's min fma, the k-quants' two fmas), so both
// tiers give the same bits, and the k-quants the reference's bits. Compiled without fp
// contraction (CMakeLists.txt): every tile shape issues the same float operations, so a result
// does not depend on the tokens or rows beside it.
//
// Compiled with AVX2 flags of its own and reached only through packed_gemm_fn after the cpuid
// check; everything is in an anonymous namespace (see quant_avx512.cpp on why).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backend/cpu/packed.h"
#include "backend/cpu/packed_layout.h"
#include "backend/cpu/quant_blocks.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define DI_PACKED_AVX2 1
#include <immintrin.h>
#endif

namespace deepinfer::cpu {

#if defined(DI_PACKED_AVX2)
namespace {

#include "backend/cpu/packed_tiles.inc"

using namespace packed_layout;  // NOLINT(google-build-using-namespace): the layouts' offsets

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m256i bcast32(const void* p) { return _mm256_set1_epi32(load_i32(p)); }
inline __m256i bytes8(uint8_t v) { return _mm256_set1_epi8(static_cast<char>(v)); }

// p, which the compiler can no longer prove equal to p. The tiles take a token's activation
// pointers through this at the start of each half: a half's broadcasts of those bytes then stay
// in that half. Otherwise GCC computes every broadcast of a block once for both halves (they
// are the same values) and keeps them live across the first half, more than the 16 registers
// hold (Q4_0's 1 x 4 tile: 140 of 423 instructions on the stack without, 62 with).
template <typename T>
inline const T* opaque(const T* p) {
  asm volatile("" : "+r"(p));
  return p;
}

// v, as a register at this point of the instruction stream. After each product added to a
// tile's int16 or int32 sums: without it GCC computed all of a block's products first and summed
// them at the end, spilling them (Q4_0's 1 x 4 tile: 152 of 486 instructions on the stack -> 62, the
// float accumulators' load and store per block).
inline void in_register(__m256i& v) { asm("" : "+x"(v)); }


// 8 halves at p (rows 8h..8h+7 of a d[16] field: p + 16 h) as floats.
inline __m256 halves8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// 32-bit lane j = bytes 4j..4j+3 of u (unsigned) times those of s (signed), summed in pairs to
// int16: lanes 2j and 2j + 1.
inline __m256i maddubs(__m256i u, __m256i s) { return _mm256_maddubs_epi16(u, s); }
inline __m256i widen_sum(__m256i s16) { return _mm256_madd_epi16(s16, _mm256_set1_epi16(1)); }

// Bytes 8h..8h+7 of the 16 at p as 16-bit pairs (v_j, v_j) in 32-bit lane j, so that vpmaddwd
// of an int16 pair sum by it scales row 8h + j's sum. Unsigned bytes go to the low byte of each
// 16-bit half (the high one zero); signed ones to the high byte, then shifted down with their sign.
struct PairControl {
  alignas(32) int8_t bytes[32];
};
constexpr PairControl pair_control(int h, bool high_byte) {
  PairControl ctrl{};
  for (int j = 0; j < 8; ++j) {
    for (int k = 0; k < 2; ++k) {
      ctrl.bytes[4 * j + 2 * k] = high_byte ? int8_t{-1} : static_cast<int8_t>(8 * h + j);
      ctrl.bytes[4 * j + 2 * k + 1] = high_byte ? static_cast<int8_t>(8 * h + j) : int8_t{-1};
    }
  }
  return ctrl;
}
constexpr PairControl kPairControl[2][2] = {{pair_control(0, false), pair_control(1, false)},
                                            {pair_control(0, true), pair_control(1, true)}};
inline __m256i shuffle_pairs(const uint8_t* p, int h, bool high_byte) {
  const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_shuffle_epi8(v, _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairControl[high_byte][h].bytes)));
}
inline __m256i pairs_u8(const uint8_t* p, int h) { return shuffle_pairs(p, h, false); }
inline __m256i pairs_i8(const uint8_t* p, int h) { return _mm256_srai_epi16(shuffle_pairs(p, h, true), 8); }

// Row 8h + j's bytes of two sub-blocks as one 16-bit pair in 32-bit lane j: a[8h + j] low,
// b[8h + j] high (sign-extended or not), for a vpmaddwd by a pair of activation sums.
inline __m256i two_subblocks_u8(const uint8_t* a, const uint8_t* b, int h) {
  const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + 8 * h)));
  const __m256i hi = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8 * h)));
  return _mm256_or_si256(lo, _mm256_slli_epi32(hi, 16));
}
inline __m256i two_subblocks_i8(const uint8_t* a, const uint8_t* b, int h) {
  const __m256i lo = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + 8 * h)));
  const __m256i hi = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 8 * h)));
  return _mm256_or_si256(_mm256_and_si256(lo, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(hi, 16));
}

// s16[c] = (first ? 0 : s16[c]) + the products of `code` (unsigned) with token c's 4 activation
// bytes at qs[c] + at, for the C tokens of a tile.
template <int C>
inline void add_products(__m256i code, const int8_t* const* qs, int at, bool first, __m256i* s16) {
  for (int c = 0; c < C; ++c) {
    const __m256i p = maddubs(code, bcast32(qs[c] + at));
    s16[c] = first ? p : _mm256_add_epi16(s16[c], p);
    in_register(s16[c]);
  }
}

// isum[c] += s16[c]'s int16 pairs times `scale`'s (vpmaddwd), for the C tokens.
template <int C>
inline void add_scaled(const __m256i* s16, __m256i scale, __m256i* isum) {
  for (int c = 0; c < C; ++c) {
    isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(s16[c], scale));
    in_register(isum[c]);
  }
}

// ---- 32-element formats -------------------------------------------------------------------------

// Half h of the 4-bit formats' code vector of k-group g: low nibbles of codes[g] for g < 4, high
// nibbles of codes[g - 4] after.
inline __m256i nibbles(const uint8_t* codes, int g, int h) {
  const __m256i q = load256(codes + 64 * (g & 3) + 32 * h);
  return _mm256_and_si256(g < 4 ? q : _mm256_srli_epi16(q, 4), bytes8(0x0F));
}

// Bit `bit` of each byte of `high` moved to bit 4 and or-ed into the nibbles (16-bit shifts: the
// mask drops what crossed from the other byte).
inline __m256i with_fifth_bit(__m256i low4, __m256i high, int bit) {
  const __m256i moved = bit <= 4 ? _mm256_slli_epi16(high, 4 - bit) : _mm256_srli_epi16(high, bit - 4);
  return _mm256_or_si256(low4, _mm256_and_si256(moved, bytes8(0x10)));
}

// Traits: codes at kCodesAt in the packed block, k-group g's activation bytes at act_offset(g),
// kChunk k-groups per int16 sum, and (kSigned) codes that are signed bytes, multiplied by
// magnitude and sign.
template <size_t kCodesAt>
struct NibbleCodes {
  static constexpr int kChunk = 8;
  static constexpr bool kSigned = false;
  static __m256i code(const uint8_t* pb, int g, int h) { return nibbles(pb + kCodesAt, g, h); }
  static int act_offset(int g) { return g < 4 ? 4 * g : 16 + 4 * (g - 4); }
};

struct PackQ4_0 : Q4_0Format, NibbleCodes<kQ4_0Codes> {};

struct PackQ4_1 : Q4_1Format, NibbleCodes<kQ4_1Codes> {};

template <size_t kHighAt, size_t kCodesAt>
struct FiveBitCodes : NibbleCodes<kCodesAt> {
  static constexpr int kChunk = 4;
  static __m256i code(const uint8_t* pb, int g, int h) {
    return with_fifth_bit(nibbles(pb + kCodesAt, g, h), load256(pb + kHighAt + 32 * h), g);
  }
};

struct PackQ5_0 : Q5_0Format, FiveBitCodes<kQ5_0High, kQ5_0Codes> {};

struct PackQ5_1 : Q5_1Format, FiveBitCodes<kQ5_1High, kQ5_1Codes> {};

// Q5_0 with its codes unpacked to bytes (packed_layout.h), which a prefill call forms once per
// call (packed_gemm_q5_0).
struct PackQ5_0Bytes : PackQ5_0 {
  static constexpr size_t kBytes = kQ5_0ByteBytes;
  static __m256i code(const uint8_t* pb, int g, int h) { return load256(pb + kQ5_0ByteCodes + 64 * g + 32 * h); }
};

// Q8_0: stored as code + 128; the integer sum is formed from the signed codes, so no offset.
struct PackQ8_0 : Q8_0Format {
  static constexpr int32_t kOffset = 0;
  static constexpr int kChunk = 1;
  static constexpr bool kSigned = true;
  static __m256i code(const uint8_t* pb, int g, int h) {
    return _mm256_xor_si256(load256(pb + kQ8_0Codes + 64 * g + 32 * h), bytes8(0x80));
  }
  static int act_offset(int g) { return 4 * g; }
};

// y[c * ldy + 16 r + j] for one group by C tokens. Per block and half: the C tokens' int16 sums
// of kChunk k-groups at a time, widened into int32 and started at -kOffset * (activation code
// sum); then the AVX-512 tile's float operations.
template <typename F, int C>
void tile(const uint8_t* w, size_t, const uint8_t* a, size_t a_stride, const PackedActInfo* info, int64_t nb,
          float* y, int64_t ldy, const Prefetch& prefetch) {
  using ActBlock = typename F::ActBlock;
  __m256 acc[2 * C];  // [h * C + c]
#pragma GCC unroll 16
  for (int e = 0; e < 2 * C; ++e) acc[e] = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const ActBlock* ab[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) ab[c] = reinterpret_cast<const ActBlock*>(a + c * a_stride) + i;
    const uint8_t* pb = w + i * F::kBytes;
    if (prefetch.ahead) {
      constexpr size_t kAhead = (kPrefetchBytes + F::kBytes - 1) / F::kBytes * F::kBytes;
      prefetch_lines(pb + kAhead, F::kBytes);
    }
    prefetch.next_share(i);
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const int8_t* qs[C];
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) qs[c] = opaque(ab[c]->qs);
      __m256i isum[C];
#pragma GCC unroll 8
      for (int g0 = 0; g0 < 8; g0 += F::kChunk) {
        __m256i s16[C];
#pragma GCC unroll 8
        for (int g = g0; g < g0 + F::kChunk; ++g) {
          const __m256i q = F::code(pb, g, h);
          __m256i mag;
          if constexpr (F::kSigned) mag = _mm256_abs_epi8(q);
#pragma GCC unroll 8
          for (int c = 0; c < C; ++c) {
            const __m256i x = bcast32(qs[c] + F::act_offset(g));
            const __m256i p = F::kSigned ? maddubs(mag, _mm256_sign_epi8(x, q)) : maddubs(q, x);
            s16[c] = g == g0 ? p : _mm256_add_epi16(s16[c], p);
            in_register(s16[c]);
          }
        }
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          isum[c] = g0 == 0 ? widen_sum(s16[c]) : _mm256_add_epi32(isum[c], widen_sum(s16[c]));
          in_register(isum[c]);
        }
      }
      const __m256 dx = halves8(pb + 16 * h);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) {
        const PackedActInfo& x = info[c * nb + i];
        __m256i s = isum[c];
        if constexpr (F::kOffset != 0) s = _mm256_add_epi32(s, _mm256_set1_epi32(-F::kOffset * x.code_sum));
        __m256& out = acc[h * C + c];
        out = _mm256_fmadd_ps(_mm256_mul_ps(dx, _mm256_set1_ps(x.d)), _mm256_cvtepi32_ps(s), out);
        if constexpr (F::kMin) out = _mm256_fmadd_ps(halves8(pb + 32 + 16 * h), _mm256_set1_ps(x.s), out);
      }
    }
  }
#pragma GCC unroll 8
  for (int c = 0; c < C; ++c) {
    _mm256_storeu_ps(y + c * ldy, acc[c]);
    _mm256_storeu_ps(y + c * ldy + 8, acc[C + c]);
  }
}

// ---- Q4_K and Q5_K ------------------------------------------------------------------------------
// Per super-block and half: each sub-block's int16 sums (8 k-groups for Q4_K's 4-bit codes, two
// runs of 4 for Q5_K's) widened by vpmaddwd with the sub-block's scale, summed over the 8
// sub-blocks; the mins' sum against the activation's sub-block sums in 16-bit pairs (as the
// AVX-512 tile); then the reference's two fmas. Layout (packed.h): d[16], dmin[16] (half),
// sc[8][16], mn[8][16] (bytes), codes[4][8][64], Q5_K's high[8][64] after.
// The form a prefill call unpacks Q5_K groups into: d, dmin, sc and mn, then codes[8][8][64].
constexpr size_t kQ5KUnpackedBytes = kQ4KCodes + 8 * 512;

enum class KCodes { kNibbles, kFifthBit, kBytes };

// The accumulators of the k-quant tiles live in y (zeroed first, then one load, fma and store
// per super-block): a super-block's integer work is long enough to hide them, and their
// registers go to more tokens.
template <int C>
inline void zero_tile(float* y, int64_t ldy) {
  for (int c = 0; c < C; ++c) {
    _mm256_storeu_ps(y + c * ldy, _mm256_setzero_ps());
    _mm256_storeu_ps(y + c * ldy + 8, _mm256_setzero_ps());
  }
}

template <int C, KCodes kCodes = KCodes::kNibbles>
void tile_q4_k(const uint8_t* w, size_t, const uint8_t* a, size_t a_stride, const PackedActInfo*, int64_t nb,
               float* y, int64_t ldy, const Prefetch& prefetch) {
  constexpr size_t kBlock =
      kCodes == KCodes::kNibbles ? kQ4KBytes : (kCodes == KCodes::kFifthBit ? kQ5KBytes : kQ5KUnpackedBytes);
  constexpr int kChunk = kCodes == KCodes::kNibbles ? 8 : 4;
  zero_tile<C>(y, ldy);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ8_K* ab[C];
    for (int c = 0; c < C; ++c) ab[c] = reinterpret_cast<const BlockQ8_K*>(a + c * a_stride) + i;
    const uint8_t* pb = w + i * kBlock;
    prefetch.next_share(i);
    if (prefetch.ahead) prefetch_lines(pb + 2 * kBlock, kBlock);
    int32_t bsum_pairs[C][4];
    for (int c = 0; c < C; ++c) {
      for (int p = 0; p < 4; ++p) {
        const int32_t even = ab[c]->bsums[4 * p] + ab[c]->bsums[4 * p + 1];
        const int32_t odd = ab[c]->bsums[4 * p + 2] + ab[c]->bsums[4 * p + 3];
        bsum_pairs[c][p] = static_cast<int32_t>(static_cast<uint32_t>(even & 0xFFFF) | (static_cast<uint32_t>(odd) << 16));
      }
    }
    for (int h = 0; h < 2; ++h) {
      const int8_t* qs[C];
      for (int c = 0; c < C; ++c) qs[c] = opaque(ab[c]->qs);
      __m256i isum[C];
      for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
      for (int s = 0; s < 8; ++s) {
        const __m256i scale = pairs_u8(pb + kQ4KSc + 16 * s, h);
        const int chunk = s / 2, high = s & 1;
#pragma GCC unroll 2
        for (int l0 = 0; l0 < 8; l0 += kChunk) {
          __m256i s16[C];
#pragma GCC unroll 8
          for (int l = l0; l < l0 + kChunk; ++l) {
            __m256i code;
            if constexpr (kCodes == KCodes::kBytes) {
              code = load256(pb + kQ4KCodes + 512 * s + 64 * l + 32 * h);
            } else {
              const __m256i q = load256(pb + kQ4KCodes + 512 * chunk + 64 * l + 32 * h);
              code = _mm256_and_si256(high ? _mm256_srli_epi16(q, 4) : q, bytes8(0x0F));
            }
            if constexpr (kCodes == KCodes::kFifthBit) {
              code = with_fifth_bit(code, load256(pb + kQ5KHigh + 64 * l + 32 * h), s);
            }
            add_products<C>(code, qs, 32 * s + 4 * l, l == l0, s16);
          }
          add_scaled<C>(s16, scale, isum);
        }
      }
      __m256i msum[C];
      for (int c = 0; c < C; ++c) msum[c] = _mm256_setzero_si256();
      for (int p = 0; p < 4; ++p) {
        const __m256i mins = two_subblocks_u8(pb + kQ4KMn + 32 * p, pb + kQ4KMn + 32 * p + 16, h);
        for (int c = 0; c < C; ++c) {
          msum[c] = _mm256_add_epi32(msum[c], _mm256_madd_epi16(mins, _mm256_set1_epi32(bsum_pairs[c][p])));
        }
      }
      const __m256 d = halves8(pb + 16 * h), dmin = halves8(pb + 32 + 16 * h);
      for (int c = 0; c < C; ++c) {
        float* out = y + c * ldy + 8 * h;
        const __m256 dy = _mm256_set1_ps(ab[c]->d);
        __m256 v = _mm256_fmadd_ps(_mm256_mul_ps(dy, d), _mm256_cvtepi32_ps(isum[c]), _mm256_loadu_ps(out));
        v = _mm256_fnmadd_ps(_mm256_mul_ps(dy, dmin), _mm256_cvtepi32_ps(msum[c]), v);
        _mm256_storeu_ps(out, v);
      }
    }
  }
}

// ---- Q6_K, Q3_K and Q2_K --------------------------------------------------------------------
// Per super-block, half and sub-block s (16 elements, 4 k-groups): the unsigned codes' int16
// sums (kChunk k-groups at a time) widened by the sub-block's scale; the codes' offset as
// -kOffset * sum_s scale_s * bsums[s] and Q2_K's mins as sum_s min_s * bsums[s], both two
// sub-blocks per vpmaddwd. The same integers as the AVX-512 tile's, so the reference's bits.
// Layouts (packed.h): d[16] (half), sc[16][16] (int8), then Q6_K's low[32][64], high[16][64] or
// Q3_K's low[16][64], high[8][64]; Q2_K: d[16], dmin[16] (half), scales[16][16], low[16][64].

// Half h of k-group g's codes (0..63): its low nibble from low[g % 32], its two high bits from
// bits 2(g / 16).. of high[g % 16] moved to bits 4..5.
inline __m256i q6_k_code(const uint8_t* pb, int g, int h) {
  const __m256i lowv = load256(pb + kQ6KLow + 64 * (g & 31) + 32 * h);
  const __m256i nib = _mm256_and_si256(g < 32 ? lowv : _mm256_srli_epi16(lowv, 4), bytes8(0x0F));
  const __m256i hv = load256(pb + kQ6KHigh + 64 * (g & 15) + 32 * h);
  const int m = g >> 4;
  const __m256i hs = m < 2 ? _mm256_slli_epi16(hv, 4 - 2 * m) : (m == 2 ? hv : _mm256_srli_epi16(hv, 2));
  return _mm256_or_si256(nib, _mm256_and_si256(hs, bytes8(0x30)));
}

// Half h of k-group g's codes (0..7): low 2 bits from bits 2(g / 16).. of low[g % 16], the third
// from bit g / 8 of high[g % 8] moved to bit 2.
inline __m256i q3_k_code(const uint8_t* pb, int g, int h) {
  const __m256i lowv = load256(pb + kQ3KLow + 64 * (g & 15) + 32 * h);
  const int m = g >> 4;
  const __m256i low = _mm256_and_si256(m == 0 ? lowv : _mm256_srli_epi16(lowv, 2 * m), bytes8(0x03));
  const __m256i hv = load256(pb + kQ3KHigh + 64 * (g & 7) + 32 * h);
  const int bit = g >> 3;
  const __m256i hs = bit < 2 ? _mm256_slli_epi16(hv, 2 - bit) : (bit == 2 ? hv : _mm256_srli_epi16(hv, bit - 2));
  return _mm256_or_si256(low, _mm256_and_si256(hs, bytes8(0x04)));
}

// Half h of k-group g's codes (0..3): bits 2(g / 16).. of low[g % 16].
inline __m256i q2_k_code(const uint8_t* pb, int g, int h) {
  const __m256i lowv = load256(pb + kQ2KCodes + 64 * (g & 15) + 32 * h);
  const int m = g >> 4;
  return _mm256_and_si256(m == 0 ? lowv : _mm256_srli_epi16(lowv, 2 * m), bytes8(0x03));
}

// The formats tile_k16 multiplies: codes after kHeader bytes, kChunk k-groups per int16 sum, the
// offset, and a sub-block's scales as int16 pairs (scale_pairs) and two sub-blocks' scales or
// mins as one pair per row (scale_two, min_two).
struct SignedScales {
  static constexpr bool kMins = false;
  static constexpr size_t kHeader = kK16Codes;
  static __m256i scale_pairs(const uint8_t* pb, int s, int h) { return pairs_i8(pb + kK16Sc + 16 * s, h); }
  static __m256i scale_two(const uint8_t* pb, int s, int h) {
    return two_subblocks_i8(pb + kK16Sc + 16 * s, pb + kK16Sc + 16 * (s + 1), h);
  }
};
struct Q6KCodes : SignedScales {
  static constexpr size_t kBytes = kQ6KBytes;
  static constexpr int kOffset = 32, kOffsetShift = 5, kChunk = 2;  // 2 * 2 * 63 * 127 < 2^15
  static __m256i code(const uint8_t* pb, int g, int h) { return q6_k_code(pb, g, h); }
};
struct Q3KCodes : SignedScales {
  static constexpr size_t kBytes = kQ3KBytes;
  static constexpr int kOffset = 4, kOffsetShift = 2, kChunk = 4;
  static __m256i code(const uint8_t* pb, int g, int h) { return q3_k_code(pb, g, h); }
};
struct Q2KCodes {
  static constexpr bool kMins = true;
  static constexpr size_t kDminAt = kQ2KDmin;
  static constexpr size_t kHeader = kQ2KCodes;
  static constexpr size_t kBytes = kQ2KBytes;
  static constexpr int kOffset = 0, kChunk = 4;
  static __m256i code(const uint8_t* pb, int g, int h) { return q2_k_code(pb, g, h); }
  static __m256i scale_pairs(const uint8_t* pb, int s, int h) {
    return _mm256_and_si256(pairs_u8(pb + kQ2KSc + 16 * s, h), _mm256_set1_epi16(15));
  }
  static __m256i min_two(const uint8_t* pb, int s, int h) {
    // Each zero-extended stored byte shifted right by 4 is its min; the pair's halves stay apart.
    return _mm256_srli_epi32(
        _mm256_and_si256(two_subblocks_u8(pb + kQ2KSc + 16 * s, pb + kQ2KSc + 16 * (s + 1), h),
                         _mm256_set1_epi32(0x00F000F0)),
        4);
  }
};

// The layout a prefill call unpacks a format's groups into: its kHeader bytes as above, then
// codes[64][64], k-group g's 16 rows' codes as Packed::code gives them.
template <typename Packed>
struct K16ByteCodes : Packed {
  static constexpr size_t kBytes = Packed::kHeader + 4096;
  static __m256i code(const uint8_t* pb, int g, int h) { return load256(pb + Packed::kHeader + 64 * g + 32 * h); }
};

template <typename Codes, int C>
void tile_k16(const uint8_t* w, size_t, const uint8_t* a, size_t a_stride, const PackedActInfo*, int64_t nb,
              float* y, int64_t ldy, const Prefetch& prefetch) {
  constexpr size_t kBlock = Codes::kBytes;
  constexpr int kChunk = Codes::kChunk;
  zero_tile<C>(y, ldy);
  for (int64_t i = 0; i < nb; ++i) {
    const BlockQ8_K* ab[C];
    for (int c = 0; c < C; ++c) ab[c] = reinterpret_cast<const BlockQ8_K*>(a + c * a_stride) + i;
    const uint8_t* pb = w + i * kBlock;
    prefetch.next_share(i);
    if (prefetch.ahead) prefetch_lines(pb + 2 * kBlock, kBlock);
    for (int h = 0; h < 2; ++h) {
      const int8_t* qs[C];
      for (int c = 0; c < C; ++c) qs[c] = opaque(ab[c]->qs);
      __m256i isum[C];
      for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
      // Unrolled so that every k-group's shifts are constants (as the AVX-512 tile).
#pragma GCC unroll 16
      for (int s = 0; s < 16; ++s) {
        const __m256i scale = Codes::scale_pairs(pb, s, h);
#pragma GCC unroll 4
        for (int q0 = 0; q0 < 4; q0 += kChunk) {
          __m256i s16[C];
#pragma GCC unroll 4
          for (int q = q0; q < q0 + kChunk; ++q) {
            const int g = 4 * s + q;
            add_products<C>(Codes::code(pb, g, h), qs, 4 * g, q == q0, s16);
          }
          add_scaled<C>(s16, scale, isum);
        }
      }
      __m256i msum[C];
      if constexpr (Codes::kOffset != 0 || Codes::kMins) {
        for (int c = 0; c < C; ++c) msum[c] = _mm256_setzero_si256();
        for (int s = 0; s < 16; s += 2) {
          __m256i two;
          if constexpr (Codes::kMins) {
            two = Codes::min_two(pb, s, h);
          } else {
            two = Codes::scale_two(pb, s, h);
          }
          for (int c = 0; c < C; ++c) {
            msum[c] = _mm256_add_epi32(msum[c], _mm256_madd_epi16(two, bcast32(ab[c]->bsums + s)));
          }
        }
      }
      if constexpr (Codes::kOffset != 0) {
        // isum - kOffset * sum_s scale_s * bsums[s] (kOffset = 1 << kOffsetShift): the AVX-512 tile's integer.
        for (int c = 0; c < C; ++c) {
          isum[c] = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(msum[c], Codes::kOffsetShift));
        }
      }
      const __m256 d = halves8(pb + 16 * h);
      for (int c = 0; c < C; ++c) {
        float* out = y + c * ldy + 8 * h;
        const __m256 dy = _mm256_set1_ps(ab[c]->d);
        __m256 v = _mm256_fmadd_ps(_mm256_mul_ps(dy, d), _mm256_cvtepi32_ps(isum[c]), _mm256_loadu_ps(out));
        if constexpr (Codes::kMins) {
          const __m256 dmin = halves8(pb + Codes::kDminAt + 16 * h);
          v = _mm256_fnmadd_ps(_mm256_mul_ps(dy, dmin), _mm256_cvtepi32_ps(msum[c]), v);
        }
        _mm256_storeu_ps(out, v);
      }
    }
  }
}

// ---- Drivers ------------------------------------------------------------------------------------
// One group per tile (R = 1): a group's two halves already give two result vectors per token.
// Token counts per tile within the 16 ymm registers: 4 for the formats whose 8 k-groups make one
// int16 sum (two accumulators, one int16 sum per token), 3 where int32 sums are kept besides.
template <typename F, int C>
constexpr PackedGemmFn packed_gemm =
    packed_gemm_tiles<tile<F, C>, tile<F, C>, tile<F, C>, tile<F, C>, tile<F, 1>, 1, C, kQK>;
constexpr int kC4 = 4, kC3 = 3;

// Q5_0 passed over several times (prefill): each call's codes formed once into bytes
// (PackQ5_0Bytes), as the AVX-512 tier does.
void unpack_q5_0(const uint8_t* src, uint8_t* dst) {
  std::memcpy(dst, src, kQ5_0ByteCodes);  // d[16]
  for (int g = 0; g < 8; ++g) {
    for (int h = 0; h < 2; ++h) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + kQ5_0ByteCodes + 64 * g + 32 * h), PackQ5_0::code(src, g, h));
    }
  }
}

void packed_gemm_q5_0(const uint8_t* w, size_t group_stride, int64_t n_groups, const void* act, size_t a_stride,
                      const PackedActInfo* infos, int64_t n_tok, int64_t n, float* y, int64_t ldy, bool one_pass) {
  if (n_tok < (one_pass ? 4 : 2) * kC3) {
    return packed_gemm<PackQ5_0, kC3>(w, group_stride, n_groups, act, a_stride, infos, n_tok, n, y, ldy, one_pass);
  }
  unpacked_gemm<PackQ5_0::kBytes, PackQ5_0Bytes::kBytes, kQK, unpack_q5_0, packed_gemm<PackQ5_0Bytes, kC3>, 1>(
      w, group_stride, n_groups, act, a_stride, infos, n_tok, n, y, ldy);
}

constexpr int kCK = 4;
template <KCodes kCodes>
constexpr PackedGemmFn packed_gemm_q45_k =
    packed_gemm_tiles<tile_q4_k<kCK, kCodes>, tile_q4_k<kCK, kCodes>, tile_q4_k<kCK, kCodes>, tile_q4_k<kCK, kCodes>,
                      tile_q4_k<1, kCodes>, 1, kCK, kQKK>;

void unpack_q5_k(const uint8_t* src, uint8_t* dst) {
  std::memcpy(dst, src, kQ4KCodes);  // d, dmin, sc, mn
  for (int s = 0; s < 8; ++s) {
    for (int l = 0; l < 8; ++l) {
      for (int h = 0; h < 2; ++h) {
        const __m256i q = load256(src + kQ4KCodes + 512 * (s / 2) + 64 * l + 32 * h);
        const __m256i nib = _mm256_and_si256(s & 1 ? _mm256_srli_epi16(q, 4) : q, bytes8(0x0F));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + kQ4KCodes + 512 * s + 64 * l + 32 * h),
                            with_fifth_bit(nib, load256(src + kQ5KHigh + 64 * l + 32 * h), s));
      }
    }
  }
}

void packed_gemm_q5_k_fn(const uint8_t* w, size_t group_stride, int64_t n_groups, const void* act, size_t a_stride,
                         const PackedActInfo* infos, int64_t n_tok, int64_t n, float* y, int64_t ldy, bool one_pass) {
  if (n_tok < (one_pass ? 8 : 4) * kCK) {
    return packed_gemm_q45_k<KCodes::kFifthBit>(w, group_stride, n_groups, act, a_stride, infos, n_tok, n, y, ldy,
                                                one_pass);
  }
  unpacked_gemm<kQ5KBytes, kQ5KUnpackedBytes, kQKK, unpack_q5_k, packed_gemm_q45_k<KCodes::kBytes>, 1>(
      w, group_stride, n_groups, act, a_stride, infos, n_tok, n, y, ldy);
}

template <typename Codes>
constexpr PackedGemmFn packed_gemm_k16 = packed_gemm_tiles<tile_k16<Codes, kCK>, tile_k16<Codes, kCK>,
                                                           tile_k16<Codes, kCK>, tile_k16<Codes, kCK>,
                                                           tile_k16<Codes, 1>, 1, kCK, kQKK>;

template <typename Codes>
void unpack_k16(const uint8_t* src, uint8_t* dst) {
  std::memcpy(dst, src, Codes::kHeader);
  for (int g = 0; g < 64; ++g) {
    for (int h = 0; h < 2; ++h) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + Codes::kHeader + 64 * g + 32 * h), Codes::code(src, g, h));
    }
  }
}

template <typename Codes>
void packed_gemm_k16_fn(const uint8_t* w, size_t group_stride, int64_t n_groups, const void* act, size_t a_stride,
                        const PackedActInfo* infos, int64_t n_tok, int64_t n, float* y, int64_t ldy, bool one_pass) {
  if (n_tok < (one_pass ? 8 : 4) * kCK) {
    return packed_gemm_k16<Codes>(w, group_stride, n_groups, act, a_stride, infos, n_tok, n, y, ldy, one_pass);
  }
  unpacked_gemm<Codes::kBytes, K16ByteCodes<Codes>::kBytes, kQKK, unpack_k16<Codes>,
                packed_gemm_k16<K16ByteCodes<Codes>>, 1>(w, group_stride, n_groups, act, a_stride, infos, n_tok, n,
                                                         y, ldy);
}

}  // namespace
#endif  // DI_PACKED_AVX2

namespace avx2 {

PackedGemmFn packed_gemm_fn(DType weight_type) {
#if defined(DI_PACKED_AVX2)
  switch (weight_type) {
    case DType::kQ4_0: return packed_gemm<PackQ4_0, kC4>;
    case DType::kQ4_1: return packed_gemm<PackQ4_1, kC4>;
    case DType::kQ5_0: return packed_gemm_q5_0;
    case DType::kQ5_1: return packed_gemm<PackQ5_1, kC3>;
    case DType::kQ8_0: return packed_gemm<PackQ8_0, kC3>;
    case DType::kQ4_K: return packed_gemm_q45_k<KCodes::kNibbles>;
    case DType::kQ5_K: return packed_gemm_q5_k_fn;
    case DType::kQ2_K: return packed_gemm_k16_fn<Q2KCodes>;
    case DType::kQ3_K: return packed_gemm_k16_fn<Q3KCodes>;
    case DType::kQ6_K: return packed_gemm_k16_fn<Q6KCodes>;
    default: return packed_float_gemm_fn(weight_type);
  }
#endif
  (void)weight_type;
  return nullptr;
}

PackedActInfoFn packed_act_info_fn(DType weight_type) {
#if defined(DI_PACKED_AVX2)
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

}  // namespace avx2

}  // namespace deepinfer::cpu
