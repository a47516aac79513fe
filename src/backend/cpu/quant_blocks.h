// Block layouts of GGUF's quantized tensor types, as stored in the file (little-endian).
//
// A row of n elements is n / kBlock consecutive blocks. Scales are IEEE half floats held as raw
// uint16_t bits (convert with core/half.h) except Q8_K's, which is a float32. Element numbers
// below are positions inside one block. The sizes are asserted here and compared with dtype.cpp's
// table by tests/unit/backend/quant_layout_test.cpp, so a layout and the file format cannot
// drift apart.
//
// Every block is plain bytes with at most 4-byte alignment; the GGUF reader requires tensor data
// offsets to be multiples of 8, so blocks read straight from a memory map are aligned.
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

inline constexpr int kQK = 32;    // elements per block of the 32-element formats
inline constexpr int kQKK = 256;  // elements per super-block of the k-quants

// Q4_0: x = d * (q - 8), q a 4-bit code.
// qs[j] holds element j in its low nibble and element j + 16 in its high nibble (j < 16).
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];
};

// Q4_1: x = d * q + m, q a 4-bit code; nibbles as in Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kQK / 2];
};

// Q5_0: x = d * (q - 16), q a 5-bit code. The low 4 bits are nibbles as in Q4_0; bit i of the
// little-endian 32-bit word qh is bit 4 of element i.
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

// Q5_1: x = d * q + m, q a 5-bit code laid out as in Q5_0.
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};

// MXFP4 (ggml's block_mxfp4): x = 2^(e - 127) * e2m1(q), q a 4-bit code (sign, then exponent
// and mantissa 2 + 1 bits); nibbles as in Q4_0. As integers: e2m1(q) = kMxfp4Doubled[q] / 2, so
// x = 2^(e - 128) * kMxfp4Doubled[q] (mxfp4_scale), which keeps products with int8 activations
// exact in integers.
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[kQK / 2];
};
inline constexpr int8_t kMxfp4Doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128) as a float (e = 255, the NaN code, gives NaN); e < 2 gives a subnormal. Static:
// each file compiled with instruction-set flags of its own gets its own copy, so the linker can
// never hand an AVX-512 build of it to code that runs on any CPU.
static inline float mxfp4_scale(uint8_t e) {
  if (e == 255) return __builtin_nanf("");
  const uint32_t bits = e >= 2 ? static_cast<uint32_t>(e - 1) << 23 : (e == 1 ? 0x00400000u : 0x00200000u);
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// Q8_0: x = d * q, q a signed byte per element.
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[kQK];
};

// Q8_1: Q8_0 plus s = d * sum(q) (half), which lets a dot with Q4_1/Q5_1 fold in their min m.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[kQK];
};

// Q2_K: 16 sub-blocks of 16 elements; x = d * sc * q - dmin * mn, q a 2-bit code.
// scales[k]: low nibble sc, high nibble mn, of sub-block k.
// Element e = 128 * h + 32 * s + l (half h < 2, shift s < 4, l < 32) is bits 2s..2s+1 of
// qs[32 * h + l]; its sub-block is e / 16.
struct BlockQ2_K {
  uint8_t scales[kQKK / 16];
  uint8_t qs[kQKK / 4];
  uint16_t d;
  uint16_t dmin;
};

// Q3_K: 16 sub-blocks of 16 elements; x = d * (sc - 32) * (q - 4 * !hbit), q a 2-bit code.
// Low bits: as Q2_K's qs. High bit of element e = 128 * h + 32 * s + l is bit 4h + s of
// hmask[l] (a set bit means no -4 offset).
// scales: 16 6-bit values. Value k: low 4 bits are the low nibble of scales[k] (k < 8) or the
// high nibble of scales[k - 8] (k >= 8); high 2 bits are bits 2 * (k / 4) of scales[8 + k % 4].
struct BlockQ3_K {
  uint8_t hmask[kQKK / 8];
  uint8_t qs[kQKK / 4];
  uint8_t scales[12];
  uint16_t d;
};

// Q4_K: 8 sub-blocks of 32 elements; x = d * sc * q - dmin * mn, q a 4-bit code, sc and mn
// 6-bit. Element e = 64 * p + 32 * hi + l (pair p < 4, hi < 2, l < 32) is the low (hi = 0) or
// high (hi = 1) nibble of qs[32 * p + l]; its sub-block is 2 * p + hi = e / 32.
// scales (sub-block k): k < 4: sc = scales[k] & 63, mn = scales[k + 4] & 63.
// k >= 4: sc = (scales[k + 4] & 15) | (scales[k - 4] >> 6) << 4,
//         mn = (scales[k + 4] >> 4) | (scales[k] >> 6) << 4.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kQKK / 2];
};

// Q5_K: Q4_K plus a fifth bit: bit k of qh[l] is bit 4 of element 32 * k + l.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQKK / 8];
  uint8_t qs[kQKK / 2];
};

// Q6_K: 16 sub-blocks of 16 elements; x = d * scales[e / 16] * (q - 32), q a 6-bit code.
// Element e = 128 * h + 32 * s + l (half h < 2, quarter s < 4, l < 32): low 4 bits are the
// low (s < 2) or high (s >= 2) nibble of ql[64 * h + 32 * (s % 2) + l]; high 2 bits are bits
// 2s..2s+1 of qh[32 * h + l].
struct BlockQ6_K {
  uint8_t ql[kQKK / 2];
  uint8_t qh[kQKK / 4];
  int8_t scales[kQKK / 16];
  uint16_t d;
};

// Q8_K (activations for the k-quants): x = d * q; bsums[k] = sum of q over elements
// 16k..16k+15, precomputed so that the mins and offsets of the weight formats cost one
// multiply per sub-block.
struct BlockQ8_K {
  float d;
  int8_t qs[kQKK];
  int16_t bsums[kQKK / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockMXFP4) == 17);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

}  // namespace deepinfer::cpu
