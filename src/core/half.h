// IEEE half and bfloat16 conversions (round to nearest even, NaN preserved).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace deepinfer {

inline float fp32_from_bits(uint32_t w) {
  float f;
  std::memcpy(&f, &w, 4);
  return f;
}
inline uint32_t fp32_to_bits(float f) {
  uint32_t w;
  std::memcpy(&w, &f, 4);
  return w;
}

inline float fp16_to_fp32(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  if (exp == 0x1f) return fp32_from_bits(sign | 0x7f800000 | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return fp32_from_bits(sign);
    // Subnormal half: renormalise.
    exp = 127 - 15 + 1;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      --exp;
    }
    mant &= 0x3ff;
    return fp32_from_bits(sign | (exp << 23) | (mant << 13));
  }
  return fp32_from_bits(sign | ((exp + 127 - 15) << 23) | (mant << 13));
#endif
}

inline uint16_t fp32_to_fp16(float f) {
#if defined(__F16C__)
  return _cvtss_sh(f, 0);
#else
  uint32_t x = fp32_to_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  x &= 0x7fffffff;
  if (x >= 0x7f800000) return static_cast<uint16_t>(sign | 0x7c00 | (x > 0x7f800000 ? 0x200 : 0));
  if (x >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // overflow to inf
  if (x < 0x38800000) {                                             // subnormal or zero
    if (x < 0x33000000) return static_cast<uint16_t>(sign);
    const uint32_t e = x >> 23;
    uint32_t m = (x & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // value / 2^-24, the half subnormal unit
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (q & 1))) ++q;  // round to nearest even
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t r = x + 0xfff + ((x >> 13) & 1);  // round to nearest even
  r -= 0x38000000;
  return static_cast<uint16_t>(sign | (r >> 13));
#endif
}

inline float bf16_to_fp32(uint16_t h) { return fp32_from_bits(static_cast<uint32_t>(h) << 16); }

inline uint16_t fp32_to_bf16(float f) {
  uint32_t x = fp32_to_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // quiet NaN
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace deepinfer

