// Byte offsets of the packed blocks' fields (the layouts packed.h draws), defined once for the
// packer (packed.cpp) and the tiles of every instruction set (packed_avx512.cpp,
// packed_avx2.cpp). A block holds kPackRows rows; d[16], m[16] and dmin[16] fields are halves.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/packed.h"
#include "backend/cpu/quant_blocks.h"

namespace deepinfer::cpu::packed_layout {

inline constexpr size_t kHalves = 2 * kPackRows;  // bytes of one d[16] field

// 32-element formats: d[16] (Q4_1, Q5_1: and m[16]), Q5's high[64], then the codes.
inline constexpr size_t kQ4_0Codes = kHalves, kQ4_0Bytes = kPackRows * sizeof(BlockQ4_0);
inline constexpr size_t kQ4_1Codes = 2 * kHalves, kQ4_1Bytes = kPackRows * sizeof(BlockQ4_1);
inline constexpr size_t kQ5_0High = kHalves, kQ5_0Codes = kQ5_0High + 64, kQ5_0Bytes = kPackRows * sizeof(BlockQ5_0);
inline constexpr size_t kQ5_1High = 2 * kHalves, kQ5_1Codes = kQ5_1High + 64, kQ5_1Bytes = kPackRows * sizeof(BlockQ5_1);
inline constexpr size_t kQ8_0Codes = kHalves, kQ8_0Bytes = kPackRows * sizeof(BlockQ8_0);

// What a 32-element format's tiles take from it besides its codes: the activation block its
// products take, the offset its unsigned packed codes carry (value = code - kOffset), whether a
// min term (m times the activation sum) follows, and a packed block's bytes.
struct Q4_0Format {
  using ActBlock = BlockQ8_0;
  static constexpr int32_t kOffset = 8;
  static constexpr bool kMin = false;
  static constexpr size_t kBytes = kQ4_0Bytes;
};
struct Q4_1Format {
  using ActBlock = BlockQ8_1;
  static constexpr int32_t kOffset = 0;
  static constexpr bool kMin = true;
  static constexpr size_t kBytes = kQ4_1Bytes;
};
struct Q5_0Format {
  using ActBlock = BlockQ8_0;
  static constexpr int32_t kOffset = 16;
  static constexpr bool kMin = false;
  static constexpr size_t kBytes = kQ5_0Bytes;
};
struct Q5_1Format {
  using ActBlock = BlockQ8_1;
  static constexpr int32_t kOffset = 0;
  static constexpr bool kMin = true;
  static constexpr size_t kBytes = kQ5_1Bytes;
};
struct Q8_0Format {
  using ActBlock = BlockQ8_0;
  static constexpr int32_t kOffset = 128;  // stored as code + 128
  static constexpr bool kMin = false;
  static constexpr size_t kBytes = kQ8_0Bytes;
};
// Q5_0 with its codes unpacked to bytes, which a prefill call forms once per call: d[16], then
// k-group g's 16 rows' codes (64 bytes) at kQ5_0ByteCodes + 64 g.
inline constexpr size_t kQ5_0ByteCodes = kHalves, kQ5_0ByteBytes = kQ5_0ByteCodes + 8 * 64;

// Q4_K: d[16], dmin[16], sc[8][16], mn[8][16], codes[4][8][64]; Q5_K: then high[8][64].
inline constexpr size_t kQ4KSc = 2 * kHalves, kQ4KMn = kQ4KSc + 8 * kPackRows, kQ4KCodes = kQ4KMn + 8 * kPackRows;
inline constexpr size_t kQ4KBytes = kQ4KCodes + kPackRows * kQKK / 2;
inline constexpr size_t kQ5KHigh = kQ4KBytes, kQ5KBytes = kQ5KHigh + kPackRows * kQKK / 8;

// Q6_K and Q3_K: d[16], sc[16][16] (int8), then Q6_K's low[32][64], high[16][64] or Q3_K's
// low[16][64], high[8][64].
inline constexpr size_t kK16Sc = kHalves, kK16Codes = kK16Sc + 16 * kPackRows;
inline constexpr size_t kQ6KLow = kK16Codes, kQ6KHigh = kQ6KLow + kPackRows * kQKK / 2;
inline constexpr size_t kQ6KBytes = kQ6KHigh + kPackRows * kQKK / 4;
inline constexpr size_t kQ3KLow = kK16Codes, kQ3KHigh = kQ3KLow + kPackRows * kQKK / 4;
inline constexpr size_t kQ3KBytes = kQ3KHigh + kPackRows * kQKK / 8;

// Q2_K: d[16], dmin[16], scales[16][16] (the stored bytes), low[16][64].
inline constexpr size_t kQ2KDmin = kHalves, kQ2KSc = 2 * kHalves, kQ2KCodes = kQ2KSc + 16 * kPackRows;
inline constexpr size_t kQ2KBytes = kQ2KCodes + kPackRows * kQKK / 4;

// MXFP4: e[16] (the rows' scale bytes), then per element k (0..31) 8 bytes: the 16 rows' 4-bit
// codes, row j in bits 4(j % 8) of little-endian word j / 8.
inline constexpr size_t kMxfp4Codes = kPackRows, kMxfp4Bytes = kMxfp4Codes + kQK * 8;

static_assert(kMxfp4Bytes == kPackRows * sizeof(BlockMXFP4));
static_assert(kQ4_0Bytes == 288 && kQ4_1Bytes == 320 && kQ5_0Bytes == 352 && kQ5_1Bytes == 384 && kQ8_0Bytes == 544 &&
              kQ5_0ByteBytes == 544);
static_assert(kQ4KBytes == 2368 && kQ5KBytes == 2880 && kQ6KBytes == 3360 && kQ3KBytes == 1824 && kQ2KBytes == 1344);

}  // namespace deepinfer::cpu::packed_layout
