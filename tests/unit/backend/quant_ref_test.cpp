// The scalar reference of the block formats, checked against blocks built field by field with
// known scales and codes (the expected floats worked out by hand from the format), the
// activation quantizers on inputs whose rounding is known, and the dot products against
// dequantize-then-multiply. The golden vectors of gguf-py are in quant_golden_test.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backend/cpu/quant.h"
#include "backend/cpu/quant_kernels.h"
#include "quant_test_util.h"

namespace deepinfer::cpu {
namespace {

using testing::block_size;
using testing::dot_double;
using testing::kWeightTypes;
using testing::random_floats;
using testing::random_row;

template <typename Block>
std::vector<float> dequant(DType type, const Block& b, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  ref::dequantize_row(type, &b, out.data(), n);
  // The public entry point must agree with the reference.
  std::vector<float> pub(static_cast<size_t>(n));
  dequantize_row(type, &b, pub.data(), n);
  EXPECT_EQ(out, pub) << dtype_name(type);
  return out;
}

// ---- layouts ---------------------------------------------------------------------------------

TEST(QuantLayout, BlockStructsMatchTheDtypeTable) {
  const std::pair<DType, size_t> sizes[] = {
      {DType::kQ4_0, sizeof(BlockQ4_0)}, {DType::kQ4_1, sizeof(BlockQ4_1)}, {DType::kQ5_0, sizeof(BlockQ5_0)},
      {DType::kQ5_1, sizeof(BlockQ5_1)}, {DType::kQ8_0, sizeof(BlockQ8_0)}, {DType::kQ8_1, sizeof(BlockQ8_1)},
      {DType::kQ2_K, sizeof(BlockQ2_K)}, {DType::kQ3_K, sizeof(BlockQ3_K)}, {DType::kQ4_K, sizeof(BlockQ4_K)},
      {DType::kQ5_K, sizeof(BlockQ5_K)}, {DType::kQ6_K, sizeof(BlockQ6_K)}, {DType::kQ8_K, sizeof(BlockQ8_K)},
      {DType::kMXFP4, sizeof(BlockMXFP4)},
  };
  for (const auto& [type, size] : sizes) {
    EXPECT_EQ(dtype_traits(type)->block_bytes, size) << dtype_name(type);
    const bool k_quant = type >= DType::kQ2_K && type <= DType::kQ8_K;
    EXPECT_EQ(dtype_traits(type)->block_size, k_quant ? kQKK : kQK) << dtype_name(type);
  }
}

TEST(QuantLayout, VecDotTypesAndSupport) {
  EXPECT_EQ(vec_dot_type(DType::kQ4_0), DType::kQ8_0);
  EXPECT_EQ(vec_dot_type(DType::kQ5_0), DType::kQ8_0);
  EXPECT_EQ(vec_dot_type(DType::kQ8_0), DType::kQ8_0);
  EXPECT_EQ(vec_dot_type(DType::kMXFP4), DType::kF32);
  EXPECT_EQ(vec_dot_type(DType::kQ4_1), DType::kQ8_1);
  EXPECT_EQ(vec_dot_type(DType::kQ5_1), DType::kQ8_1);
  for (DType t : {DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    EXPECT_EQ(vec_dot_type(t), DType::kQ8_K) << dtype_name(t);
  }
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) EXPECT_EQ(vec_dot_type(t), DType::kF32);
  for (DType t : kWeightTypes) EXPECT_TRUE(quant_supported(t)) << dtype_name(t);
  for (DType t : {DType::kI8, DType::kI32, DType::kF64, DType::kQ8_K, DType::kQ8_1}) {
    EXPECT_FALSE(quant_supported(t)) << dtype_name(t);
  }
  EXPECT_FALSE(quant_supported(static_cast<DType>(99)));
  EXPECT_FALSE(quant_supported(static_cast<DType>(1000)));
}

// ---- hand-built blocks: 32-element formats ------------------------------------------------------

// qs[j] = j | (15 - j) << 4: elements 0..15 hold codes 0..15, elements 16..31 codes 15..0.
void fill_ramp_nibbles(uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
}

// MXFP4: e2m1 codes (sign bit 3; exponent and mantissa: 0, 0.5, 1, 1.5, 2, 3, 4, 6) times
// 2^(e - 127).
TEST(QuantRef, Mxfp4HandBuilt) {
  const std::vector<float> e2m1 = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0f, -0.5, -1, -1.5, -2, -3, -4, -6};
  BlockMXFP4 b{};
  fill_ramp_nibbles(b.qs);
  for (const auto& [e, scale] : std::vector<std::pair<uint8_t, float>>{{127, 1.0f}, {130, 8.0f}, {125, 0.25f},
                                                                      {1, 0x1p-126f}, {0, 0x1p-127f}}) {
    b.e = e;
    std::vector<float> want;
    for (int j = 0; j < 16; ++j) want.push_back(e2m1[static_cast<size_t>(j)] * scale);
    for (int j = 0; j < 16; ++j) want.push_back(e2m1[static_cast<size_t>(15 - j)] * scale);
    EXPECT_EQ(dequant(DType::kMXFP4, b, 32), want) << "e = " << int{e};
  }
  b.e = 255;  // the NaN code
  float out[32];
  ref::dequantize_row(DType::kMXFP4, &b, out, 32);
  EXPECT_TRUE(std::isnan(out[1]));
}

TEST(QuantRef, Q4_0HandBuilt) {
  BlockQ4_0 b{};
  b.d = fp32_to_fp16(0.5f);
  fill_ramp_nibbles(b.qs);
  const std::vector<float> want = {-4,  -3.5, -3,  -2.5, -2,  -1.5, -1,  -0.5, 0,   0.5,  1,   1.5, 2,   2.5,  3,  3.5,
                                   3.5, 3,    2.5, 2,    1.5, 1,    0.5, 0,    -0.5, -1, -1.5, -2, -2.5, -3, -3.5, -4};
  EXPECT_EQ(dequant(DType::kQ4_0, b, 32), want);
}

TEST(QuantRef, Q4_1HandBuilt) {
  BlockQ4_1 b{};
  b.d = fp32_to_fp16(0.25f);
  b.m = fp32_to_fp16(-1.0f);
  fill_ramp_nibbles(b.qs);
  const std::vector<float> got = dequant(DType::kQ4_1, b, 32);
  EXPECT_EQ(got[0], -1.0f);    // 0.25 * 0 - 1
  EXPECT_EQ(got[7], 0.75f);    // 0.25 * 7 - 1
  EXPECT_EQ(got[15], 2.75f);   // 0.25 * 15 - 1
  EXPECT_EQ(got[16], 2.75f);   // code 15
  EXPECT_EQ(got[31], -1.0f);   // code 0
  EXPECT_EQ(got[20], 1.75f);   // code 11
}

// qh = 0xF0F0F0F0: the fifth bit is set on elements 4..7, 12..15, 20..23 and 28..31.
TEST(QuantRef, Q5_0HandBuilt) {
  BlockQ5_0 b{};
  b.d = fp32_to_fp16(1.0f);
  const uint32_t qh = 0xF0F0F0F0u;
  std::memcpy(b.qh, &qh, 4);
  fill_ramp_nibbles(b.qs);
  const std::vector<float> want = {-16, -15, -14, -13, 4,  5,  6,  7,  -8, -7,  -6,  -5,  12, 13, 14, 15,
                                   -1,  -2,  -3,  -4,  11, 10, 9,  8,  -9, -10, -11, -12, 3,  2,  1,  0};
  EXPECT_EQ(dequant(DType::kQ5_0, b, 32), want);
}

TEST(QuantRef, Q5_1HandBuilt) {
  BlockQ5_1 b{};
  b.d = fp32_to_fp16(0.5f);
  b.m = fp32_to_fp16(0.25f);
  const uint32_t qh = 0xF0F0F0F0u;
  std::memcpy(b.qh, &qh, 4);
  fill_ramp_nibbles(b.qs);
  const std::vector<float> got = dequant(DType::kQ5_1, b, 32);
  EXPECT_EQ(got[0], 0.25f);           // code 0
  EXPECT_EQ(got[5], 0.5f * 21 + 0.25f);   // 5 | 16
  EXPECT_EQ(got[16], 0.5f * 15 + 0.25f);  // nibble 15, bit clear
  EXPECT_EQ(got[21], 0.5f * 26 + 0.25f);  // nibble 10 | 16
  EXPECT_EQ(got[31], 0.5f * 16 + 0.25f);  // nibble 0 | 16
}

TEST(QuantRef, Q8_0AndQ8_1HandBuilt) {
  BlockQ8_0 b{};
  b.d = fp32_to_fp16(0.5f);
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  const std::vector<float> got = dequant(DType::kQ8_0, b, 32);
  EXPECT_EQ(got[0], -64.0f);
  EXPECT_EQ(got[16], 0.0f);
  EXPECT_EQ(got[31], 60.0f);

  BlockQ8_1 c{};
  c.d = fp32_to_fp16(2.0f);
  c.s = fp32_to_fp16(12345.0f);  // s does not enter dequantization
  for (int j = 0; j < 32; ++j) c.qs[j] = static_cast<int8_t>(j - 3);
  const std::vector<float> got1 = dequant(DType::kQ8_1, c, 32);
  EXPECT_EQ(got1[0], -6.0f);
  EXPECT_EQ(got1[31], 56.0f);
}

// ---- hand-built blocks: k-quants ----------------------------------------------------------------

// Packs 8 six-bit scales and mins as Q4_K/Q5_K store them (quant_blocks.h).
void pack_q4_k_scales(const int* sc, const int* mn, uint8_t* out) {
  for (int k = 0; k < 4; ++k) {
    out[k] = static_cast<uint8_t>(sc[k] | ((sc[k + 4] >> 4) << 6));
    out[k + 4] = static_cast<uint8_t>(mn[k] | ((mn[k + 4] >> 4) << 6));
    out[k + 8] = static_cast<uint8_t>((sc[k + 4] & 15) | ((mn[k + 4] & 15) << 4));
  }
}

const int kQ4kScales[8] = {1, 2, 3, 4, 17, 34, 51, 63};
const int kQ4kMins[8] = {0, 5, 10, 15, 20, 40, 60, 33};

// Codes: element 64p + l is l % 16 and element 64p + 32 + l is 15 - l % 16.
void fill_q4_k_codes(uint8_t* qs) {
  for (int p = 0; p < 4; ++p) {
    for (int l = 0; l < 32; ++l) qs[32 * p + l] = static_cast<uint8_t>((l % 16) | ((15 - l % 16) << 4));
  }
}

TEST(QuantRef, Q4_KHandBuilt) {
  BlockQ4_K b{};
  b.d = fp32_to_fp16(1.0f);
  b.dmin = fp32_to_fp16(0.5f);
  pack_q4_k_scales(kQ4kScales, kQ4kMins, b.scales);
  EXPECT_EQ(b.scales[0], 1 | (1 << 6));    // sc 1; bits 4-5 of sc[4] = 17
  EXPECT_EQ(b.scales[8], 1 | (4 << 4));    // low nibbles of sc[4] = 17 and mn[4] = 20
  fill_q4_k_codes(b.qs);
  const std::vector<float> y = dequant(DType::kQ4_K, b, 256);
  EXPECT_EQ(y[0], 0.0f);      // sub 0: 1 * 0 - 0.5 * 0
  EXPECT_EQ(y[5], 5.0f);      // 1 * 5
  EXPECT_EQ(y[40], 11.5f);    // sub 1, code 7: 2 * 7 - 0.5 * 5
  EXPECT_EQ(y[130], 24.0f);   // sub 4, code 2: 17 * 2 - 0.5 * 20
  EXPECT_EQ(y[200], 378.0f);  // sub 6, code 8: 51 * 8 - 0.5 * 60
  EXPECT_EQ(y[255], -16.5f);  // sub 7, code 0: -0.5 * 33
  for (int e = 0; e < 256; ++e) {
    const int k = e / 32, l = e % 32;
    const int code = (e % 64) < 32 ? l % 16 : 15 - l % 16;
    EXPECT_EQ(y[e], 1.0f * kQ4kScales[k] * code - 0.5f * kQ4kMins[k]) << e;
  }
}

TEST(QuantRef, Q5_KHandBuilt) {
  BlockQ5_K b{};
  b.d = fp32_to_fp16(0.5f);
  b.dmin = fp32_to_fp16(0.25f);
  pack_q4_k_scales(kQ4kScales, kQ4kMins, b.scales);
  fill_q4_k_codes(b.qs);
  // Bit k of qh[l] (bit 4 of element 32k + l) is set when (l + k) % 3 == 0.
  for (int l = 0; l < 32; ++l) {
    for (int k = 0; k < 8; ++k) b.qh[l] |= static_cast<uint8_t>(((l + k) % 3 == 0) << k);
  }
  const std::vector<float> y = dequant(DType::kQ5_K, b, 256);
  EXPECT_EQ(y[0], 0.5f * 1 * 16);               // code 0 | 16, sub 0 (min 0)
  EXPECT_EQ(y[1], 0.5f * 1 * 1);                // code 1, no fifth bit
  EXPECT_EQ(y[34], 0.5f * 2 * 29 - 0.25f * 5);  // element 32 + 2: code 13 | 16 ((2 + 1) % 3 == 0)
  EXPECT_EQ(y[255], 0.5f * 63 * 0 - 0.25f * 33);  // code 0, (31 + 7) % 3 != 0
  for (int e = 0; e < 256; ++e) {
    const int k = e / 32, l = e % 32;
    const int code = ((e % 64) < 32 ? l % 16 : 15 - l % 16) | (((l + k) % 3 == 0) << 4);
    EXPECT_EQ(y[e], 0.5f * kQ4kScales[k] * code - 0.25f * kQ4kMins[k]) << e;
  }
}

// Q2_K and Q3_K share the 2-bit codes: element 128h + 32s + l has code (l + s) % 4.
void fill_two_bit_codes(uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      uint8_t byte = 0;
      for (int s = 0; s < 4; ++s) byte |= static_cast<uint8_t>(((l + s) % 4) << (2 * s));
      qs[32 * h + l] = byte;
    }
  }
}

TEST(QuantRef, Q2_KHandBuilt) {
  BlockQ2_K b{};
  b.d = fp32_to_fp16(0.25f);
  b.dmin = fp32_to_fp16(1.0f);
  for (int k = 0; k < 16; ++k) b.scales[k] = static_cast<uint8_t>(k | ((15 - k) << 4));  // sc k, mn 15 - k
  fill_two_bit_codes(b.qs);
  const std::vector<float> y = dequant(DType::kQ2_K, b, 256);
  EXPECT_EQ(y[0], -15.0f);    // sub 0: 0.25 * 0 * 0 - 15
  EXPECT_EQ(y[17], -13.75f);  // sub 1, code 1: 0.25 * 1 * 1 - 14
  EXPECT_EQ(y[100], -4.5f);   // sub 6, s 3, l 4, code 3: 0.25 * 6 * 3 - 9
  EXPECT_EQ(y[255], 7.5f);    // sub 15, code 2: 0.25 * 15 * 2 - 0
  for (int e = 0; e < 256; ++e) {
    const int k = e / 16, code = (e % 32 + (e % 128) / 32) % 4;
    EXPECT_EQ(y[e], 0.25f * k * code - 1.0f * (15 - k)) << e;
  }
}

TEST(QuantRef, Q3_KHandBuilt) {
  BlockQ3_K b{};
  b.d = fp32_to_fp16(0.5f);
  // 16 six-bit scales raw[k] = 4k + 2, i.e. k-th scale 4k - 30 after the -32 offset.
  for (int k = 0; k < 16; ++k) {
    const int raw = 4 * k + 2;
    if (k < 8) b.scales[k] |= static_cast<uint8_t>(raw & 15);
    else b.scales[k - 8] |= static_cast<uint8_t>((raw & 15) << 4);
    b.scales[8 + k % 4] |= static_cast<uint8_t>((raw >> 4) << (2 * (k / 4)));
  }
  fill_two_bit_codes(b.qs);
  // High bit of element 128h + 32s + l (bit 4h + s of hmask[l]) set when (l + h) is even.
  for (int l = 0; l < 32; ++l) {
    for (int h = 0; h < 2; ++h) {
      if ((l + h) % 2 == 0) b.hmask[l] |= static_cast<uint8_t>(0x0F << (4 * h));
    }
  }
  const std::vector<float> y = dequant(DType::kQ3_K, b, 256);
  EXPECT_EQ(y[0], 0.0f);     // code 0, high bit set
  EXPECT_EQ(y[1], 45.0f);    // code 1 - 4, sub 0 scale -30: 0.5 * -30 * -3
  EXPECT_EQ(y[130], -2.0f);  // h 1, l 2: code 2 - 4, sub 8 scale 2
  EXPECT_EQ(y[255], 30.0f);  // code 2, high bit set, sub 15 scale 30
  for (int e = 0; e < 256; ++e) {
    const int h = e / 128, s = (e % 128) / 32, l = e % 32;
    const int code = (l + s) % 4 - ((l + h) % 2 == 0 ? 0 : 4);
    EXPECT_EQ(y[e], 0.5f * (4 * (e / 16) - 30) * code) << e;
  }
}

TEST(QuantRef, Q6_KHandBuilt) {
  BlockQ6_K b{};
  b.d = fp32_to_fp16(0.125f);
  for (int k = 0; k < 16; ++k) b.scales[k] = static_cast<int8_t>(k - 8);
  // Code of element e is (7e) % 64, packed as quant_blocks.h describes.
  for (int e = 0; e < 256; ++e) {
    const int q = (7 * e) % 64, h = e / 128, s = (e % 128) / 32, l = e % 32;
    b.ql[64 * h + 32 * (s % 2) + l] |= static_cast<uint8_t>((q & 15) << (s < 2 ? 0 : 4));
    b.qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * s));
  }
  const std::vector<float> y = dequant(DType::kQ6_K, b, 256);
  EXPECT_EQ(y[0], 32.0f);       // code 0 - 32, scale -8
  EXPECT_EQ(y[37], 21.75f);     // code 3 - 32, sub 2 scale -6
  EXPECT_EQ(y[255], 21.875f);   // code 57 - 32, sub 15 scale 7
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.125f * (e / 16 - 8) * ((7 * e) % 64 - 32)) << e;
}

TEST(QuantRef, Q8_KHandBuilt) {
  BlockQ8_K b{};
  b.d = 0.5f;
  for (int j = 0; j < 256; ++j) b.qs[j] = static_cast<int8_t>(j - 128);
  const std::vector<float> y = dequant(DType::kQ8_K, b, 256);
  EXPECT_EQ(y[0], -64.0f);
  EXPECT_EQ(y[255], 63.5f);
}

TEST(QuantRef, PlainTypesHandBuilt) {
  const uint16_t f16[] = {0x3C00, 0xC000, 0x3555, 0x7BFF, 0x0001, 0x8000};
  std::vector<float> y(6);
  dequantize_row(DType::kF16, f16, y.data(), 6);
  EXPECT_EQ(y, (std::vector<float>{1.0f, -2.0f, 0.333251953125f, 65504.0f, std::ldexp(1.0f, -24), -0.0f}));
  EXPECT_TRUE(std::signbit(y[5]));

  const uint16_t bf16[] = {0x3F80, 0xC040, 0x4049, 0x0001};
  std::vector<float> z(4);
  dequantize_row(DType::kBF16, bf16, z.data(), 4);
  EXPECT_EQ(z, (std::vector<float>{1.0f, -3.0f, 3.140625f, std::ldexp(1.0f, -133)}));

  const float f32[] = {1.5f, -0.0f, 3e38f};
  std::vector<float> w(3);
  dequantize_row(DType::kF32, f32, w.data(), 3);
  EXPECT_EQ(w, (std::vector<float>{1.5f, -0.0f, 3e38f}));
}

// ---- activation quantizers ------------------------------------------------------------------

// amax 127 makes d exactly 1, so the codes show the rounding rule: Q8_0 and Q8_1 round halves
// away from zero (2.5 -> 3), as roundf does.
std::vector<float> halves_input() {
  std::vector<float> x(32, 0.0f);
  const float head[] = {127.0f, -127.0f, 0.5f, -0.5f, 1.5f, -1.5f, 2.5f, 2.4999998f};
  std::copy(std::begin(head), std::end(head), x.begin());
  return x;
}

TEST(QuantRef, QuantizeQ8_0RoundsHalvesAwayFromZero) {
  for (auto quantize : {ref::quantize_row, quantize_row}) {
    BlockQ8_0 b{};
    quantize(DType::kQ8_0, halves_input().data(), &b, 32);
    EXPECT_EQ(b.d, 0x3C00);  // 1.0
    const int8_t want[8] = {127, -127, 1, -1, 2, -2, 3, 2};
    for (int j = 0; j < 32; ++j) EXPECT_EQ(b.qs[j], j < 8 ? want[j] : 0) << j;
  }
}

TEST(QuantRef, QuantizeQ8_1StoresScaledSum) {
  for (auto quantize : {ref::quantize_row, quantize_row}) {
    BlockQ8_1 b{};
    quantize(DType::kQ8_1, halves_input().data(), &b, 32);
    EXPECT_EQ(fp16_to_fp32(b.d), 1.0f);
    EXPECT_EQ(fp16_to_fp32(b.s), 5.0f);  // 127 - 127 + 1 - 1 + 2 - 2 + 3 + 2
    EXPECT_EQ(b.qs[6], 3);
  }
}

TEST(QuantRef, QuantizeQ8_0OfZerosAndScale) {
  std::vector<float> zeros(64, 0.0f);
  std::vector<uint8_t> out(dtype_row_bytes(DType::kQ8_0, 64), 0xAB);
  quantize_row(DType::kQ8_0, zeros.data(), out.data(), 64);
  for (uint8_t byte : out) EXPECT_EQ(byte, 0);
  // amax 16: d = 16 / 127, codes round(x * 127 / 16).
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  BlockQ8_0 b{};
  quantize_row(DType::kQ8_0, x.data(), &b, 32);
  EXPECT_EQ(b.d, fp32_to_fp16(16.0f / 127.0f));
  EXPECT_EQ(b.qs[0], -127);
  EXPECT_EQ(b.qs[17], 8);     // 7.9375
  EXPECT_EQ(b.qs[18], 16);    // 15.875
  EXPECT_EQ(b.qs[31], 119);   // 119.0625
}

// Q8_K maps the first element of largest magnitude, with its sign, to -127; here that is
// +127, so d = -1 and every code flips sign. Codes round half to even (2.5 -> 2, 3.5 -> 4).
TEST(QuantRef, QuantizeQ8_KSignTrickAndBsums) {
  for (auto quantize : {ref::quantize_row, quantize_row}) {
    std::vector<float> x(256, 0.0f);
    x[0] = 127.0f;
    x[1] = 2.5f;
    x[2] = -3.5f;
    x[3] = 0.5f;
    x[17] = -127.0f;  // same magnitude, later: not the max
    x[255] = 1.0f;
    BlockQ8_K b{};
    quantize(DType::kQ8_K, x.data(), &b, 256);
    EXPECT_EQ(b.d, -1.0f);
    EXPECT_EQ(b.qs[0], -127);
    EXPECT_EQ(b.qs[1], -2);
    EXPECT_EQ(b.qs[2], 4);
    EXPECT_EQ(b.qs[3], 0);
    EXPECT_EQ(b.qs[17], 127);
    EXPECT_EQ(b.qs[255], -1);
    EXPECT_EQ(b.bsums[0], -127 - 2 + 4);
    EXPECT_EQ(b.bsums[1], 127);
    EXPECT_EQ(b.bsums[15], -1);
    for (int g = 2; g < 15; ++g) EXPECT_EQ(b.bsums[g], 0);
  }
}

TEST(QuantRef, QuantizeQ8_KOfZeros) {
  std::vector<float> x(512, 0.0f);
  x[300] = -0.0f;
  std::vector<uint8_t> out(dtype_row_bytes(DType::kQ8_K, 512), 0xCD);
  quantize_row(DType::kQ8_K, x.data(), out.data(), 512);
  for (uint8_t byte : out) EXPECT_EQ(byte, 0);
}

TEST(QuantRef, QuantizeRoundTrips) {
  std::mt19937 rng(7);
  const int64_t n = 1024;
  const std::vector<float> x = random_floats(n, rng, 3.0f);
  for (DType type : {DType::kQ8_0, DType::kQ8_1, DType::kQ8_K, DType::kF16, DType::kBF16, DType::kF32}) {
    std::vector<uint8_t> q(dtype_row_bytes(type, n));
    quantize_row(type, x.data(), q.data(), n);
    std::vector<float> back(n);
    dequantize_row(type, q.data(), back.data(), n);
    const int64_t bs = block_size(type) == 1 ? 32 : block_size(type);
    for (int64_t i0 = 0; i0 < n; i0 += bs) {
      float amax = 0.0f;
      for (int64_t i = i0; i < i0 + bs; ++i) amax = std::max(amax, std::fabs(x[i]));
      for (int64_t i = i0; i < i0 + bs; ++i) {
        // 8-bit: half a step of amax / 127, plus the half-float rounding of d (Q8_0, Q8_1).
        double tol = 0.0;
        if (type == DType::kQ8_0 || type == DType::kQ8_1 || type == DType::kQ8_K) tol = 0.51 * amax / 127 + amax * 1e-3;
        if (type == DType::kF16) tol = std::fabs(x[i]) * 0x1p-11 + 1e-7;
        if (type == DType::kBF16) tol = std::fabs(x[i]) * 0x1p-8;
        EXPECT_NEAR(back[i], x[i], tol) << dtype_name(type) << " at " << i;
      }
    }
  }
}

// ---- dot products ------------------------------------------------------------------------------

// vec_dot(w, quantize(a)) equals the float dot of the dequantized rows: the integer sums are
// exact, so only float rounding separates them. Q4_1/Q5_1 use Q8_1's s = half(d * sum(q)),
// which differs from sum(half(d) * q) by two half roundings; that is part of the format.
TEST(QuantRef, VecDotMatchesDequantizedDot) {
  std::mt19937 rng(11);
  for (DType type : kWeightTypes) {
    for (int64_t n_blocks : {1, 3, 16}) {
      const int64_t n = n_blocks * std::max<int64_t>(block_size(type), 32);
      const std::vector<uint8_t> w = random_row(type, n, rng);
      const std::vector<float> x = random_floats(n, rng);
      const DType act_type = vec_dot_type(type);
      std::vector<uint8_t> a(dtype_row_bytes(act_type, n));
      quantize_row(act_type, x.data(), a.data(), n);

      std::vector<float> w_f(n), a_f(n);
      dequantize_row(type, w.data(), w_f.data(), n);
      dequantize_row(act_type, a.data(), a_f.data(), n);
      const auto want = dot_double(w_f, a_f);
      double tol = 1e-5 * want.magnitude + 1e-30;
      if (act_type == DType::kQ8_1) {
        const auto* ab = reinterpret_cast<const BlockQ8_1*>(a.data());
        for (int64_t i = 0; i < n / 32; ++i) {
          float m = 0.0f;
          if (type == DType::kQ4_1) m = fp16_to_fp32(reinterpret_cast<const BlockQ4_1*>(w.data())[i].m);
          if (type == DType::kQ5_1) m = fp16_to_fp32(reinterpret_cast<const BlockQ5_1*>(w.data())[i].m);
          tol += std::fabs(m * fp16_to_fp32(ab[i].s)) * 0x1p-10;
        }
      }
      EXPECT_NEAR(ref::vec_dot(type, w.data(), a.data(), n), want.dot, tol) << dtype_name(type) << " n=" << n;
      EXPECT_NEAR(vec_dot(type, w.data(), a.data(), n), want.dot, tol) << dtype_name(type) << " n=" << n;
    }
  }
}

// A hand-checkable dot: Q4_0 codes all 9 (value d), Q8_0 codes 0..31 (value j * dy).
TEST(QuantRef, VecDotQ4_0ByHand) {
  BlockQ4_0 w{};
  w.d = fp32_to_fp16(0.5f);
  std::memset(w.qs, 0x99, 16);  // every code 9: value 0.5 * (9 - 8)
  BlockQ8_0 a{};
  a.d = fp32_to_fp16(0.25f);
  for (int j = 0; j < 32; ++j) a.qs[j] = static_cast<int8_t>(j);
  // sum_j 0.5 * 0.25 * j = 0.125 * 496
  EXPECT_EQ(ref::vec_dot(DType::kQ4_0, &w, &a, 32), 62.0f);
  EXPECT_EQ(vec_dot(DType::kQ4_0, &w, &a, 32), 62.0f);
}

}  // namespace
}  // namespace deepinfer::cpu
