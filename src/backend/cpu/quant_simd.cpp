// x86 SIMD paths of the block formats: AVX2 (+FMA, F16C). This file is compiled with those
// flags (CMakeLists.txt) and reached through quant.cpp's table only on CPUs that have them; the
// AVX-512 tier is quant_avx512.cpp.
//
// The integer part of every dot product is exact and equal to the reference's (each block's
// sum of code products, times its integer sub-scales), so a SIMD result differs from
// ref::vec_dot only by the order of float additions; the quantizers are bit-exact.
//
// Byte dot products of the 32-element formats are written on a `Dot` policy: vpmaddubsw
// multiplies unsigned by signed bytes, vpmaddwd widens. The k-quants use the same pair, since
// the vpmaddwd that widens also applies the sub-block scale for free.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backend/cpu/quant_kernels.h"
#include "core/half.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define DI_QUANT_AVX2 1
#include <immintrin.h>
#endif

namespace deepinfer::cpu {

#if defined(DI_QUANT_AVX2)
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// 16 bytes of packed nibbles -> 32 codes 0..15: low nibbles in bytes 0..15, high in 16..31,
// which is the element order of the 32-element formats.
inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
}

// 32 bits (little-endian) -> 32 bytes, 0xFF where the bit is set. Byte i takes byte i / 8 of
// the word (a shuffle within each 128-bit lane of the broadcast word) and tests bit i % 8.
inline __m256i expand_bits(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i select = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ULL));
  const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), select);
  return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
}

struct MaddubsDot {
  // 8 int32 lanes, each the sum of 4 products of unsigned u by signed s.
  static __m256i dot_u8_i8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
};

// Signed by signed: |a| times b with a's sign moved onto b. Products of the pairs stay below
// 2 * 128 * 127, so vpmaddubsw never saturates (activations never hold -128).
template <typename Dot>
inline __m256i dot_i8_i8(__m256i a, __m256i b) {
  return Dot::dot_u8_i8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// ---- 32-element formats --------------------------------------------------------------------

// Shared loop over C activation rows at once: block i adds dx * dy_c * sum(codes(x[i]) * y_c[i].qs)
// to row c's sum, two blocks per iteration for two independent FMA chains. The weight block is
// unpacked once for all C rows; each row's arithmetic is exactly the single-row kernel's, so
// results do not depend on C (batch invariance). extra[c] (the mins of Q4_1/Q5_1) is added at
// the end.
template <int C, typename Dot, bool kSigned, typename XBlock, typename YBlock, typename Codes>
inline void dot_blocks_32(const XBlock* x, const YBlock* const* y, int64_t nb, Codes codes, const float* extra,
                          float* out) {
  auto block = [&](int64_t i, __m256* acc) {
    const __m256i qx = codes(x[i]);
    const float dx = fp16_to_fp32(x[i].d);
    for (int c = 0; c < C; ++c) {
      const __m256i qy = load256(y[c][i].qs);
      const __m256i p = kSigned ? dot_i8_i8<Dot>(qx, qy) : Dot::dot_u8_i8(qx, qy);
      const __m256 d = _mm256_set1_ps(dx * fp16_to_fp32(y[c][i].d));
      acc[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[c]);
    }
  };
  __m256 acc0[C], acc1[C];
  for (int c = 0; c < C; ++c) acc0[c] = acc1[c] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {
    block(i, acc0);
    block(i + 1, acc1);
  }
  if (i < nb) block(i, acc0);
  for (int c = 0; c < C; ++c) out[c] = hsum(_mm256_add_ps(acc0[c], acc1[c])) + extra[c];
}

template <int C, typename Dot>
void dot_q4_0(const void* w, const void* const* a, int64_t n, float* out) {
  const __m256i eight = _mm256_set1_epi8(8);
  const float zero[C] = {};
  dot_blocks_32<C, Dot, true>(
      static_cast<const BlockQ4_0*>(w), reinterpret_cast<const BlockQ8_0* const*>(a), n / kQK,
      [&](const BlockQ4_0& b) { return _mm256_sub_epi8(unpack_nibbles(b.qs), eight); }, zero, out);
}

template <int C, typename Dot>
void dot_q5_0(const void* w, const void* const* a, int64_t n, float* out) {
  // q - 16 = nibble | 0xF0 (as int8) when the fifth bit is clear, the nibble itself when set.
  const __m256i high = _mm256_set1_epi8(static_cast<char>(0xF0));
  const float zero[C] = {};
  dot_blocks_32<C, Dot, true>(
      static_cast<const BlockQ5_0*>(w), reinterpret_cast<const BlockQ8_0* const*>(a), n / kQK,
      [&](const BlockQ5_0& b) {
        return _mm256_or_si256(unpack_nibbles(b.qs), _mm256_andnot_si256(expand_bits(b.qh), high));
      },
      zero, out);
}

template <int C, typename Dot>
void dot_q8_0(const void* w, const void* const* a, int64_t n, float* out) {
  const float zero[C] = {};
  dot_blocks_32<C, Dot, true>(static_cast<const BlockQ8_0*>(w), reinterpret_cast<const BlockQ8_0* const*>(a),
                              n / kQK, [](const BlockQ8_0& b) { return load256(b.qs); }, zero, out);
}

// Formats with a min m: sum(x * y) = dx * dy * sum(q * qy) + m * s (s from Q8_1). Four
// independent sums: one serial chain of float adds would cost more than the byte dots.
template <typename Block>
float sum_of_mins(const Block* x, const BlockQ8_1* y, int64_t nb) {
  float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int64_t i = 0;
  for (; i + 4 <= nb; i += 4) {
    for (int k = 0; k < 4; ++k) sum[k] += fp16_to_fp32(x[i + k].m) * fp16_to_fp32(y[i + k].s);
  }
  for (; i < nb; ++i) sum[0] += fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
  return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

template <int C, typename Dot>
void dot_q4_1(const void* w, const void* const* a, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ4_1*>(w);
  const auto* const* y = reinterpret_cast<const BlockQ8_1* const*>(a);
  float mins[C];
  for (int c = 0; c < C; ++c) mins[c] = sum_of_mins(x, y[c], n / kQK);
  dot_blocks_32<C, Dot, false>(x, y, n / kQK, [](const BlockQ4_1& b) { return unpack_nibbles(b.qs); }, mins, out);
}

template <int C, typename Dot>
void dot_q5_1(const void* w, const void* const* a, int64_t n, float* out) {
  const auto* x = static_cast<const BlockQ5_1*>(w);
  const auto* const* y = reinterpret_cast<const BlockQ8_1* const*>(a);
  const __m256i fifth = _mm256_set1_epi8(0x10);
  float mins[C];
  for (int c = 0; c < C; ++c) mins[c] = sum_of_mins(x, y[c], n / kQK);
  dot_blocks_32<C, Dot, false>(
      x, y, n / kQK,
      [&](const BlockQ5_1& b) { return _mm256_or_si256(unpack_nibbles(b.qs), _mm256_and_si256(expand_bits(b.qh), fifth)); },
      mins, out);
}

// Single-row entry points (VecDotFn) and four-row ones (VecDot4Fn) over the same loop.
template <void (*Dot1)(const void*, const void* const*, int64_t, float*)>
float one_row(const void* w, const void* a, int64_t n) {
  float out;
  Dot1(w, &a, n, &out);
  return out;
}

// ---- k-quants --------------------------------------------------------------------------------
//
// Per super-block the integer sum is reduced to one int32 and scaled exactly as the reference
// does (two fmas: + d * sumi, - dmin * summ), so these agree with ref::vec_dot bit for bit.

inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

inline __m256i scale_by(__m256i products16, int scale) {
  return _mm256_madd_epi16(products16, _mm256_set1_epi16(static_cast<int16_t>(scale)));
}

// Q4_K and Q5_K: each 32-byte load of codes is one sub-block of 32 elements, so one vpmaddwd by
// the broadcast sub-scale finishes it. Codes are at most 31 and activations at most 127 in
// magnitude, so vpmaddubsw's int16 pair sums cannot saturate.
template <bool kFifthBit, typename Block>
float vec_dot_q45_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    uint8_t sc[8], mn[8];
    unpack_q4_k_scales(x[i].scales, sc, mn);
    int summ = 0;
    for (int k = 0; k < 8; ++k) summ += mn[k] * (y[i].bsums[2 * k] + y[i].bsums[2 * k + 1]);

    __m256i sumi = _mm256_setzero_si256();
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFifthBit) qh = load256(x[i].qh);
    for (int p = 0; p < 4; ++p) {
      const __m256i q = load256(x[i].qs + 32 * p);
      __m256i lo = _mm256_and_si256(q, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
      if constexpr (kFifthBit) {
        // Bit 2p of qh[l] is bit 4 of the low-nibble element, bit 2p + 1 that of the high one.
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), one), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * p + 1), one), 4));
      }
      const __m256i p_lo = _mm256_maddubs_epi16(lo, load256(y[i].qs + 64 * p));
      const __m256i p_hi = _mm256_maddubs_epi16(hi, load256(y[i].qs + 64 * p + 32));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(scale_by(p_lo, sc[2 * p]), scale_by(p_hi, sc[2 * p + 1])));
    }
    sum = std::fma(y[i].d * fp16_to_fp32(x[i].d), static_cast<float>(hsum_i32(sumi)), sum);
    sum = std::fma(-(y[i].d * fp16_to_fp32(x[i].dmin)), static_cast<float>(summ), sum);
  }
  return sum;
}

// Q6_K: codes are taken as 0..63 and the -32 offset folded in afterwards as
// -32 * sum_k sc[k] * bsums[k]. A 32-byte load spans two 16-element sub-blocks, so the scale
// vector holds two values, one per 128-bit lane.
float vec_dot_q6_k(const void* w, const void* a, int64_t n) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i two_bits = _mm256_set1_epi8(0x03);
  auto high_bits = [&](__m256i qh, int shift) {  // bits shift..shift+1 of each byte, moved to 4..5
    return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, shift), two_bits), 4);
  };
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const int8_t* sc = x[i].scales;
    int offset = 0;
    for (int k = 0; k < 16; ++k) offset += sc[k] * y[i].bsums[k];

    __m256i sumi = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = load256(x[i].ql + 64 * h);
      const __m256i ql1 = load256(x[i].ql + 64 * h + 32);
      const __m256i qh = load256(x[i].qh + 32 * h);
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low4), high_bits(qh, 0)),
          _mm256_or_si256(_mm256_and_si256(ql1, low4), high_bits(qh, 2)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), high_bits(qh, 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4), high_bits(qh, 6)),
      };
      for (int s = 0; s < 4; ++s) {
        const int k = 8 * h + 2 * s;
        const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(sc[k + 1]), _mm_set1_epi16(sc[k]));
        const __m256i p = _mm256_maddubs_epi16(q[s], load256(y[i].qs + 128 * h + 32 * s));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scales));
      }
    }
    sum = std::fma(y[i].d * fp16_to_fp32(x[i].d), static_cast<float>(hsum_i32(sumi) - 32 * offset), sum);
  }
  return sum;
}

// Q2_K and Q3_K: element 128h + 32s + l has its 2-bit code in bits 2s of qs[32h + l], so one
// 32-byte load shifted by 2s holds the codes of sub-blocks 8h + 2s and 8h + 2s + 1, one per
// 128-bit lane (as Q6_K's). Q3_K's third bit (bit 4h + s of hmask[l]) adds 4 to the codes not
// offset by -4, and the -4 is folded in afterwards as -4 * sum_k sc[k] * bsums[k]; Q2_K's mins
// go in as the reference's second fma.
template <typename Block>
float vec_dot_q23_k(const void* w, const void* a, int64_t n) {
  constexpr bool kQ3 = std::is_same_v<Block, BlockQ3_K>;
  const auto* x = static_cast<const Block*>(w);
  const auto* y = static_cast<const BlockQ8_K*>(a);
  const __m256i two_bits = _mm256_set1_epi8(0x03);
  const __m256i one = _mm256_set1_epi8(1);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQKK; ++i) {
    int sc[16];
    int bias = 0;  // Q3_K: sum(sc * bsums), Q2_K: sum(mn * bsums)
    if constexpr (kQ3) {
      int8_t sc8[16];
      unpack_q3_k_scales(x[i].scales, sc8);
      for (int k = 0; k < 16; ++k) sc[k] = sc8[k];
      for (int k = 0; k < 16; ++k) bias += sc[k] * y[i].bsums[k];
    } else {
      for (int k = 0; k < 16; ++k) sc[k] = x[i].scales[k] & 15;
      for (int k = 0; k < 16; ++k) bias += (x[i].scales[k] >> 4) * y[i].bsums[k];
    }
    __m256i sumi = _mm256_setzero_si256();
    __m256i hm = _mm256_setzero_si256();
    if constexpr (kQ3) hm = load256(x[i].hmask);
    for (int h = 0; h < 2; ++h) {
      const __m256i qs = load256(x[i].qs + 32 * h);
      for (int s = 0; s < 4; ++s) {
        __m256i q = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * s), two_bits);
        if constexpr (kQ3) {
          q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + s), one), 2));
        }
        const int k = 8 * h + 2 * s;
        const __m256i scales = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(sc[k + 1])),
                                                _mm_set1_epi16(static_cast<int16_t>(sc[k])));
        const __m256i p = _mm256_maddubs_epi16(q, load256(y[i].qs + 128 * h + 32 * s));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scales));
      }
    }
    if constexpr (kQ3) {
      sum = std::fma(y[i].d * fp16_to_fp32(x[i].d), static_cast<float>(hsum_i32(sumi) - 4 * bias), sum);
    } else {
      sum = std::fma(y[i].d * fp16_to_fp32(x[i].d), static_cast<float>(hsum_i32(sumi)), sum);
      sum = std::fma(-(y[i].d * fp16_to_fp32(x[i].dmin)), static_cast<float>(bias), sum);
    }
  }
  return sum;
}

// ---- plain weight types against float activations ---------------------------------------------

// The end of one plain dot, shared by dot_plain and the float tiles so that both give the same
// bits: its four chains summed in a fixed shape, then the scalar tail, elements i..n-1 in order.
template <typename Scalar>
inline float sum_chains(const __m256* chain, const float* y, int64_t i, int64_t n, Scalar scalar) {
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(chain[0], chain[1]), _mm256_add_ps(chain[2], chain[3])));
  for (int64_t j = i; j < n; ++j) sum = std::fma(scalar(j), y[j], sum);
  return sum;
}

// load8(i) gives weight elements i..i+7 as floats, scalar(i) element i; out[c] = the weight row
// times activation row y[c], for C rows at once. Four accumulators per row: with fewer the loop
// waits on FMA latency rather than on loads. Each row's arithmetic is the same whatever C is
// (its four accumulators, its sum of them, its tail in order), so a token's result does not
// depend on its batch; C rows share each weight load (and its widening), and 4C independent
// FMA chains keep both FMA units busy where one row's four wait on their latency.
template <int C, typename Load8, typename Scalar>
inline void dot_plain(const float* const* y, int64_t n, Load8 load8, Scalar scalar, float* out) {
  __m256 acc[C][4];
  for (int c = 0; c < C; ++c) {
    for (int k = 0; k < 4; ++k) acc[c][k] = _mm256_setzero_ps();
  }
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      const __m256 w = load8(i + 8 * k);
      for (int c = 0; c < C; ++c) acc[c][k] = _mm256_fmadd_ps(w, _mm256_loadu_ps(y[c] + i + 8 * k), acc[c][k]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 w = load8(i);
    for (int c = 0; c < C; ++c) acc[c][0] = _mm256_fmadd_ps(w, _mm256_loadu_ps(y[c] + i), acc[c][0]);
  }
  for (int c = 0; c < C; ++c) out[c] = sum_chains(acc[c], y[c], i, n, scalar);
}

// The plain weight types' element loaders: load8 (8 elements widened to floats) and scalar.
struct F32Weights {
  const float* x;
  __m256 load8(int64_t i) const { return _mm256_loadu_ps(x + i); }
  float scalar(int64_t i) const { return x[i]; }
};
struct F16Weights {
  const uint16_t* x;
  __m256 load8(int64_t i) const { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))); }
  float scalar(int64_t i) const { return fp16_to_fp32(x[i]); }
};
struct BF16Weights {
  const uint16_t* x;
  __m256 load8(int64_t i) const {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  float scalar(int64_t i) const { return bf16_to_fp32(x[i]); }
};
// MXFP4: each run of 8 weights decoded to floats (the doubled e2m1 values through a byte shuffle,
// times the block's 2^(e - 128)), exact.
struct Mxfp4Weights {
  const BlockMXFP4* x;
  __m256 load8(int64_t i) const {
    const __m128i lut = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const BlockMXFP4& b = x[i / kQK];
    const int o = static_cast<int>(i % kQK);  // 0, 8, 16 or 24: runs never straddle blocks
    uint64_t bytes;
    std::memcpy(&bytes, b.qs + (o & 15), 8);
    if (o >= 16) bytes >>= 4;  // elements 16..31 are the high nibbles
    const __m128i codes = _mm_and_si128(_mm_cvtsi64_si128(static_cast<int64_t>(bytes)), _mm_set1_epi8(0x0F));
    const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_shuffle_epi8(lut, codes)));
    return _mm256_mul_ps(v, _mm256_set1_ps(mxfp4_scale(b.e)));
  }
  float scalar(int64_t i) const {
    const BlockMXFP4& b = x[i / kQK];
    const int o = static_cast<int>(i % kQK);
    const int code = o < 16 ? b.qs[o] & 15 : b.qs[o - 16] >> 4;
    return static_cast<float>(kMxfp4Doubled[code]) * mxfp4_scale(b.e);
  }
};

// C activation rows against one weight row of Weights' type (VecDotFn for C = 1, VecDot4Fn for 4).
template <typename Weights, typename Elem, int C>
void dot_plain_rows(const void* w, const void* const* a, int64_t n, float* out) {
  const Weights weights{static_cast<const Elem*>(w)};
  const float* y[C];
  for (int c = 0; c < C; ++c) y[c] = static_cast<const float*>(a[c]);
  dot_plain<C>(
      y, n, [&](int64_t i) { return weights.load8(i); }, [&](int64_t i) { return weights.scalar(i); }, out);
}

template <typename Weights, typename Elem>
float vec_dot_plain(const void* w, const void* a, int64_t n) {
  float out;
  dot_plain_rows<Weights, Elem, 1>(w, &a, n, &out);
  return out;
}

// The plain types' matrix product (GemmFn): tiles of kPlainRows weight rows x kPlainTokens
// tokens. An output's arithmetic is dot_plain's: four FMA chains, chain q taking elements
// i + 8q..i + 8q + 7 of every 32-element step i in order, then the remainder's 8-element steps on
// chain 0, the same sum of the chains and the scalar tail in order; so each output has vec_dot's
// bits whatever the tile. A tile runs one chain at a time through a block of kPlainBlock
// elements, so that chain's 12 accumulators stay in registers with the 3 weight vectors and an
// activation vector (dot_plain<4> needs 16 accumulators and spilled), and parks them in memory
// between blocks (exact). Blocks are the outer loop over a band of up to kPlainBand rows: the 4
// tokens' block of activations stays in L1 while the band's weights stream past it once.
// Rows and tokens short of a tile go through dot_plain<C>, row by row.
constexpr int kPlainRows = 3, kPlainTokens = 4;
constexpr int64_t kPlainBlock = 512;  // 4 tokens' block of activations: 8 KB
constexpr int kPlainBandTiles = 11;   // 33 rows: ops.cpp's products come in 32
using PlainChains = float[4][kPlainRows][kPlainTokens][8];  // a tile's parked chains

// Chain q of a tile over elements [k0, k1) (32-element steps), from and back to `parked`.
template <typename Weights>
inline void plain_tile_block(const Weights* w, const float* const* y, int64_t k0, int64_t k1, PlainChains& parked) {
  constexpr int R = kPlainRows, C = kPlainTokens;
  for (int q = 0; q < 4; ++q) {
    __m256 acc[R][C];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) acc[r][c] = k0 == 0 ? _mm256_setzero_ps() : _mm256_load_ps(parked[q][r][c]);
    }
    for (int64_t i = k0 + 8 * q; i < k1; i += 32) {
      const __m256 w0 = w[0].load8(i), w1 = w[1].load8(i), w2 = w[2].load8(i);
      for (int c = 0; c < C; ++c) {
        const __m256 yv = _mm256_loadu_ps(y[c] + i);
        acc[0][c] = _mm256_fmadd_ps(w0, yv, acc[0][c]);
        acc[1][c] = _mm256_fmadd_ps(w1, yv, acc[1][c]);
        acc[2][c] = _mm256_fmadd_ps(w2, yv, acc[2][c]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) _mm256_store_ps(parked[q][r][c], acc[r][c]);
    }
  }
}

// A tile's outputs from its parked chains (n32 elements done): the remainder, the sum, the tail.
template <typename Weights>
inline void plain_tile_finish(const Weights* w, const float* const* y, int64_t n, int64_t n32,
                              const PlainChains& parked, float* out, int64_t ldy) {
  for (int r = 0; r < kPlainRows; ++r) {
    for (int c = 0; c < kPlainTokens; ++c) {
      __m256 chain[4];
      for (int q = 0; q < 4; ++q) chain[q] = n32 == 0 ? _mm256_setzero_ps() : _mm256_load_ps(parked[q][r][c]);
      int64_t i = n32;
      for (; i + 8 <= n; i += 8) chain[0] = _mm256_fmadd_ps(w[r].load8(i), _mm256_loadu_ps(y[c] + i), chain[0]);
      out[c * ldy + r] = sum_chains(chain, y[c], i, n, [&](int64_t j) { return w[r].scalar(j); });
    }
  }
}

template <typename Weights, typename Elem>
void gemm_plain(const void* w, size_t w_stride, int64_t n_rows, const void* a, size_t a_stride, int64_t n_tok,
                int64_t n, float* y, int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  auto row = [&](int64_t r) { return Weights{reinterpret_cast<const Elem*>(wb + r * w_stride)}; };
  const int64_t n32 = n / 32 * 32;
  alignas(32) PlainChains parked[kPlainBandTiles];
  for (int64_t t0 = 0; t0 < n_tok; t0 += kPlainTokens) {
    const int nc = static_cast<int>(std::min<int64_t>(kPlainTokens, n_tok - t0));
    const float* rows[kPlainTokens];
    for (int c = 0; c < nc; ++c) rows[c] = reinterpret_cast<const float*>(ab + (t0 + c) * a_stride);
    float* out = y + t0 * ldy;
    int64_t r0 = 0;
    if (nc == kPlainTokens) {
      const int64_t full = n_rows / kPlainRows * kPlainRows;
      for (int64_t band = 0; band < full; band += kPlainBandTiles * kPlainRows) {
        const int tiles = static_cast<int>(std::min<int64_t>(kPlainBandTiles, (full - band) / kPlainRows));
        for (int64_t k0 = 0; k0 < n32; k0 += kPlainBlock) {
          const int64_t k1 = std::min(n32, k0 + kPlainBlock);
          for (int tile = 0; tile < tiles; ++tile) {
            const int64_t r = band + tile * kPlainRows;
            const Weights ws[kPlainRows] = {row(r), row(r + 1), row(r + 2)};
            plain_tile_block(ws, rows, k0, k1, parked[tile]);
          }
        }
        for (int tile = 0; tile < tiles; ++tile) {
          const int64_t r = band + tile * kPlainRows;
          const Weights ws[kPlainRows] = {row(r), row(r + 1), row(r + 2)};
          plain_tile_finish(ws, rows, n, n32, parked[tile], out + r, ldy);
        }
      }
      r0 = full;
    }
    // The rows and tokens short of a tile: dot_plain's own C-token form, one weight row at a time.
    for (; r0 < n_rows; ++r0) {
      const Weights wr = row(r0);
      auto load8 = [&](int64_t i) { return wr.load8(i); };
      auto scalar = [&](int64_t i) { return wr.scalar(i); };
      float o[kPlainTokens];
      switch (nc) {
        case 1: dot_plain<1>(rows, n, load8, scalar, o); break;
        case 2: dot_plain<2>(rows, n, load8, scalar, o); break;
        case 3: dot_plain<3>(rows, n, load8, scalar, o); break;
        default: dot_plain<4>(rows, n, load8, scalar, o); break;
      }
      for (int c = 0; c < nc; ++c) out[c * ldy + r0] = o[c];
    }
  }
}

// ---- activation quantizers -------------------------------------------------------------------

inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// roundf: half away from zero. vroundps has no such mode, so truncate and step one away from
// zero when the dropped fraction (exact in float) is at least one half.
inline __m256 round_half_away(__m256 v) {
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 up = _mm256_cmp_ps(abs_ps(_mm256_sub_ps(v, t)), _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 step = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, _mm256_set1_ps(-0.0f)));
  return _mm256_add_ps(t, _mm256_and_ps(up, step));
}

// Four vectors of 8 int32 (elements 0..31 in order) -> 32 saturated int8 in order. The packs
// work within 128-bit lanes and leave 4-byte groups in the order 0 2 4 6 1 3 5 7.
inline __m256i pack_i32_to_i8(__m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_packs_epi32(a, b);
  const __m256i cd = _mm256_packs_epi32(c, d);
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// Q8_0 / Q8_1 block: same arithmetic as the reference (d = amax / 127, codes = roundf(x / d)
// with the unrounded d). Returns d and stores the codes; *sum gets sum(codes) when non-null.
inline float quantize_block_8(const float* x, int8_t* q, int* sum) {
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    amax = _mm256_max_ps(amax, abs_ps(v[k]));
  }
  const float d = hmax(amax) / 127.0f;
  const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
  __m256i qi[4];
  for (int k = 0; k < 4; ++k) qi[k] = _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(v[k], id)));
  if (sum != nullptr) {
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
    *sum = hsum_i32(s);
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), pack_i32_to_i8(qi[0], qi[1], qi[2], qi[3]));
  return d;
}

void quantize_q8_0(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) y[i].d = fp32_to_fp16(quantize_block_8(src + i * kQK, y[i].qs, nullptr));
}

void quantize_q8_1(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_1*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) {
    int sum = 0;
    const float d = quantize_block_8(src + i * kQK, y[i].qs, &sum);
    y[i].d = fp32_to_fp16(d);
    y[i].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

// Q8_K: as the reference. The signed max is the first element of greatest magnitude; codes
// round half to even (vcvtps2dq in the default rounding mode).
void quantize_q8_k(const float* src, void* dst, int64_t n) {
  auto* y = static_cast<BlockQ8_K*>(dst);
  for (int64_t i = 0; i < n / kQKK; ++i) {
    const float* x = src + i * kQKK;
    __m256 amax_v = _mm256_setzero_ps();
    for (int j = 0; j < kQKK; j += 8) amax_v = _mm256_max_ps(amax_v, abs_ps(_mm256_loadu_ps(x + j)));
    const float amax = hmax(amax_v);
    if (amax == 0.0f) {
      std::memset(&y[i], 0, sizeof(BlockQ8_K));
      continue;
    }
    float max = 0.0f;
    for (int j = 0; j < kQKK; j += 8) {
      const int hits = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + j)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
      if (hits != 0) {
        max = x[j + __builtin_ctz(static_cast<unsigned>(hits))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 vs = _mm256_set1_ps(iscale);
    for (int j = 0; j < kQKK; j += 32) {
      __m256i qi[4];
      for (int k = 0; k < 4; ++k) qi[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j + 8 * k), vs));
      // Each 16 codes are one bsum; the packing saturates at 127 as the reference's MIN does,
      // and no code goes below -127.
      const __m256i q = pack_i32_to_i8(qi[0], qi[1], qi[2], qi[3]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + j), q);
      const __m256i q16_lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q));
      const __m256i q16_hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1));
      y[i].bsums[j / 16] = static_cast<int16_t>(hsum_i32(_mm256_madd_epi16(q16_lo, _mm256_set1_epi16(1))));
      y[i].bsums[j / 16 + 1] = static_cast<int16_t>(hsum_i32(_mm256_madd_epi16(q16_hi, _mm256_set1_epi16(1))));
    }
    y[i].d = 1.0f / iscale;
  }
}

}  // namespace
#endif  // DI_QUANT_AVX2

namespace avx2 {

QuantizeRowFn quantize_row_fn(DType type) {
#if defined(DI_QUANT_AVX2)
  switch (type) {
    case DType::kQ8_0: return quantize_q8_0;
    case DType::kQ8_1: return quantize_q8_1;
    case DType::kQ8_K: return quantize_q8_k;
    default: break;
  }
#endif
  return nullptr;
}

VecDotFn vec_dot_fn(DType weight_type) {
#if defined(DI_QUANT_AVX2)
  switch (weight_type) {
    case DType::kF32: return vec_dot_plain<F32Weights, float>;
    case DType::kF16: return vec_dot_plain<F16Weights, uint16_t>;
    case DType::kBF16: return vec_dot_plain<BF16Weights, uint16_t>;
    case DType::kMXFP4: return vec_dot_plain<Mxfp4Weights, BlockMXFP4>;
    case DType::kQ4_0: return one_row<dot_q4_0<1, MaddubsDot>>;
    case DType::kQ4_1: return one_row<dot_q4_1<1, MaddubsDot>>;
    case DType::kQ5_0: return one_row<dot_q5_0<1, MaddubsDot>>;
    case DType::kQ5_1: return one_row<dot_q5_1<1, MaddubsDot>>;
    case DType::kQ8_0: return one_row<dot_q8_0<1, MaddubsDot>>;
    case DType::kQ4_K: return vec_dot_q45_k<false, BlockQ4_K>;
    case DType::kQ5_K: return vec_dot_q45_k<true, BlockQ5_K>;
    case DType::kQ6_K: return vec_dot_q6_k;
    case DType::kQ2_K: return vec_dot_q23_k<BlockQ2_K>;
    case DType::kQ3_K: return vec_dot_q23_k<BlockQ3_K>;
    default: break;
  }
#endif
  return nullptr;
}

GemmFn gemm_fn(DType weight_type) {
#if defined(DI_QUANT_AVX2)
  switch (weight_type) {
    case DType::kF32: return gemm_plain<F32Weights, float>;
    case DType::kF16: return gemm_plain<F16Weights, uint16_t>;
    case DType::kBF16: return gemm_plain<BF16Weights, uint16_t>;
    default: break;
  }
#endif
  return nullptr;
}

VecDot4Fn vec_dot4_fn(DType weight_type) {
#if defined(DI_QUANT_AVX2)
  switch (weight_type) {
    case DType::kQ4_0: return dot_q4_0<4, MaddubsDot>;
    case DType::kQ4_1: return dot_q4_1<4, MaddubsDot>;
    case DType::kQ5_0: return dot_q5_0<4, MaddubsDot>;
    case DType::kQ5_1: return dot_q5_1<4, MaddubsDot>;
    case DType::kQ8_0: return dot_q8_0<4, MaddubsDot>;
    case DType::kF32: return dot_plain_rows<F32Weights, float, 4>;
    case DType::kF16: return dot_plain_rows<F16Weights, uint16_t, 4>;
    case DType::kBF16: return dot_plain_rows<BF16Weights, uint16_t, 4>;
    case DType::kMXFP4: return dot_plain_rows<Mxfp4Weights, BlockMXFP4, 4>;
    default: break;
  }
#endif
  return nullptr;
}

}  // namespace avx2

}  // namespace deepinfer::cpu
