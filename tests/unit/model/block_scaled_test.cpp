// Block-scaled FP8 / FP4 decoding (model/loader/block_scaled.h) against values written out by
// hand from the formats' definitions (OCP FP8 e4m3fn, OCP MX e2m1 and e8m0).
#include "model/loader/block_scaled.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/half.h"

namespace deepinfer {
namespace {

TEST(BlockScaled, E4M3CodesDecodeToTheirValues) {
  EXPECT_EQ(e4m3fn_to_float(0x00), 0.0f);
  EXPECT_EQ(e4m3fn_to_float(0x01), 1.0f / 512);   // smallest subnormal, 2^-9
  EXPECT_EQ(e4m3fn_to_float(0x07), 7.0f / 512);   // largest subnormal
  EXPECT_EQ(e4m3fn_to_float(0x08), 1.0f / 64);    // smallest normal, 2^-6
  EXPECT_EQ(e4m3fn_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3fn_to_float(0x39), 1.125f);
  EXPECT_EQ(e4m3fn_to_float(0x40), 2.0f);
  EXPECT_EQ(e4m3fn_to_float(0x7e), 448.0f);       // the largest finite value
  EXPECT_EQ(e4m3fn_to_float(0xb8), -1.0f);
  EXPECT_EQ(e4m3fn_to_float(0xfe), -448.0f);
  EXPECT_TRUE(std::signbit(e4m3fn_to_float(0x80)));
  EXPECT_TRUE(std::isnan(e4m3fn_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3fn_to_float(0xff)));
  EXPECT_FALSE(std::isnan(e4m3fn_to_float(0x78)));  // exponent 15 is finite in the fn variant: 256
  EXPECT_EQ(e4m3fn_to_float(0x78), 256.0f);
  // Codes are ordered like their values (sign-magnitude), and every one is exact in BF16.
  for (int c = 1; c < 0x7f; ++c) {
    const float v = e4m3fn_to_float(static_cast<uint8_t>(c));
    EXPECT_LT(e4m3fn_to_float(static_cast<uint8_t>(c - 1)), v) << c;
    EXPECT_EQ(bf16_to_fp32(fp32_to_bf16(v)), v) << c;
    EXPECT_EQ(e4m3fn_to_float(static_cast<uint8_t>(c | 0x80)), -v) << c;
  }
}

TEST(BlockScaled, E2M1NibblesDecodeToTheirValues) {
  const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int n = 0; n < 16; ++n) EXPECT_EQ(e2m1_to_float(static_cast<uint8_t>(n)), want[n]) << n;
}

TEST(BlockScaled, Ue8m0IsAPowerOfTwoAnd255IsNaN) {
  EXPECT_EQ(*ue8m0_to_float(127), 1.0f);
  EXPECT_EQ(*ue8m0_to_float(128), 2.0f);
  EXPECT_EQ(*ue8m0_to_float(120), 1.0f / 128);
  EXPECT_EQ(*ue8m0_to_float(254), std::ldexp(1.0f, 127));
  EXPECT_EQ(*ue8m0_to_float(0), std::ldexp(1.0f, -127));
  EXPECT_FALSE(ue8m0_to_float(255).has_value());
}

TEST(BlockScaled, BlockSizeIsReadOffTheScaleShape) {
  auto eq = [](std::optional<BlockShape> b, int64_t r, int64_t c) {
    return b && b->rows == r && b->cols == c;
  };
  EXPECT_TRUE(eq(infer_block(1024, 4096, 8, 32), 128, 128));    // V4-Flash wq_a
  EXPECT_TRUE(eq(infer_block(2048, 4096, 2048, 128), 1, 32));   // V4-Flash FP4 expert w1
  EXPECT_TRUE(eq(infer_block(4096, 2048, 4096, 64), 1, 32));    // ... and w2
  EXPECT_TRUE(eq(infer_block(129280, 4096, 1010, 32), 128, 128));  // a partial last block row
  EXPECT_TRUE(eq(infer_block(24, 32, 2, 4), 16, 8));
  EXPECT_TRUE(eq(infer_block(24, 32, 1, 1), 32, 32));           // one block: the smallest that covers
  EXPECT_FALSE(infer_block(7, 5, 3, 1).has_value());            // ceil(7 / b) is 7, 4, 2, 1: never 3
  EXPECT_FALSE(infer_block(8, 8, 9, 1).has_value());            // more blocks than rows
  EXPECT_FALSE(infer_block(8, 8, 0, 1).has_value());
}

TEST(BlockScaled, Fp8BlocksScaleTheirOwnRowsAndColumns) {
  // A [3, 5] matrix in blocks of [2, 4]: scales [2, 2], partial blocks at the bottom and right.
  std::vector<uint8_t> codes(15);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(0x38 + i);  // 1, 1.125, ...
  const uint8_t scales[4] = {127, 128, 126, 130};  // 1, 2, 0.5, 8
  BlockScaledMatrix m{.code = BlockCode::kFp8E4M3, .codes = codes.data(), .codes_bytes = codes.size(), .n_out = 3,
                      .n_in = 5, .scale_type = BlockScaleType::kUe8m0, .scales = scales, .scales_bytes = 4,
                      .scale_rows = 2, .scale_cols = 2, .block = {2, 4}};
  std::vector<uint16_t> out(15);
  ASSERT_TRUE(dequantize_to_bf16(m, out, "w").ok());
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 5; ++c) {
      const float scale = std::ldexp(1.0f, scales[(r / 2) * 2 + c / 4] - 127);
      EXPECT_EQ(bf16_to_fp32(out[static_cast<size_t>(r * 5 + c)]), e4m3fn_to_float(codes[r * 5 + c]) * scale)
          << r << "," << c;
    }
  }
  EXPECT_EQ(bf16_to_fp32(out[4]), e4m3fn_to_float(0x3c) * 2);  // row 0, column 4: the right block
  EXPECT_EQ(bf16_to_fp32(out[10]), e4m3fn_to_float(0x42) * 0.5f);  // row 2: the bottom block
}

TEST(BlockScaled, Fp4PairsAreLowNibbleFirst) {
  // One row of 4 codes: 1.0 (0x2), -3.0 (0xd), 6.0 (0x7), 0.5 (0x1); two blocks of 2.
  const uint8_t codes[2] = {0xd2, 0x17};
  const uint8_t scales[2] = {127, 125};  // 1, 1/4
  BlockScaledMatrix m{.code = BlockCode::kFp4E2M1, .codes = codes, .codes_bytes = 2, .n_out = 1, .n_in = 4,
                      .scale_type = BlockScaleType::kUe8m0, .scales = scales, .scales_bytes = 2, .scale_rows = 1,
                      .scale_cols = 2, .block = {1, 2}};
  std::vector<uint16_t> out(4);
  ASSERT_TRUE(dequantize_to_bf16(m, out, "w").ok());
  EXPECT_EQ(bf16_to_fp32(out[0]), 1.0f);
  EXPECT_EQ(bf16_to_fp32(out[1]), -3.0f);
  EXPECT_EQ(bf16_to_fp32(out[2]), 6.0f / 4);
  EXPECT_EQ(bf16_to_fp32(out[3]), 0.5f / 4);
}

// FP4 with UE8M0 scales per 1 x 32 is kept as MXFP4: per block the scale byte, then element j in
// the low nibble and j + 16 in the high nibble of byte j.
TEST(BlockScaled, Fp4OnBlocksOf32RepacksToMxfp4) {
  // Two rows of 64: element k of row r has code (k + r) % 16; scales 120 + 2r + block.
  std::vector<uint8_t> codes(2 * 32);
  const auto code = [](int r, int k) { return static_cast<uint8_t>((k + r) % 16); };
  for (int r = 0; r < 2; ++r) {
    for (int k = 0; k < 64; k += 2) codes[r * 32 + k / 2] = static_cast<uint8_t>(code(r, k) | code(r, k + 1) << 4);
  }
  const uint8_t scales[4] = {120, 121, 122, 123};
  BlockScaledMatrix m{.code = BlockCode::kFp4E2M1, .codes = codes.data(), .codes_bytes = codes.size(), .n_out = 2,
                      .n_in = 64, .scale_type = BlockScaleType::kUe8m0, .scales = scales, .scales_bytes = 4,
                      .scale_rows = 2, .scale_cols = 2, .block = {1, 32}};
  ASSERT_TRUE(fits_mxfp4(m));
  std::vector<uint8_t> out(4 * 17);
  ASSERT_TRUE(repack_mxfp4(m, out, "w").ok());
  for (int r = 0; r < 2; ++r) {
    for (int b = 0; b < 2; ++b) {
      const uint8_t* block = out.data() + (r * 2 + b) * 17;
      EXPECT_EQ(block[0], scales[r * 2 + b]);
      for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(block[1 + j] & 15, code(r, b * 32 + j)) << r << "," << b << "," << j;
        EXPECT_EQ(block[1 + j] >> 4, code(r, b * 32 + j + 16)) << r << "," << b << "," << j;
      }
    }
  }
  // What else is not MXFP4: other blocks, float scales, FP8.
  BlockScaledMatrix other = m;
  other.block = {1, 16};
  EXPECT_FALSE(fits_mxfp4(other));
  other = m;
  other.scale_type = BlockScaleType::kF32;
  EXPECT_FALSE(fits_mxfp4(other));
  other = m;
  other.code = BlockCode::kFp8E4M3;
  EXPECT_FALSE(fits_mxfp4(other));
  // A NaN scale is an error naming the block; a short output too.
  const uint8_t nan_scales[4] = {120, 121, 255, 123};
  other = m;
  other.scales = nan_scales;
  const Status s = repack_mxfp4(other, out, "experts.0.w1.weight");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("block (1, 0)"), std::string::npos) << s.to_string();
  std::vector<uint8_t> short_out(3 * 17);
  EXPECT_EQ(repack_mxfp4(m, short_out, "w").code(), StatusCode::kInvalidArgument);
}

TEST(BlockScaled, FloatScalesRoundToNearestBf16) {
  const uint8_t codes[2] = {0x38, 0xc0};  // 1, -2
  const float scale = 0.1f;
  uint8_t scale_bytes[4];
  std::memcpy(scale_bytes, &scale, 4);
  BlockScaledMatrix m{.code = BlockCode::kFp8E4M3, .codes = codes, .codes_bytes = 2, .n_out = 1, .n_in = 2,
                      .scale_type = BlockScaleType::kF32, .scales = scale_bytes, .scales_bytes = 4, .scale_rows = 1,
                      .scale_cols = 1, .block = {1, 2}};
  std::vector<uint16_t> out(2);
  ASSERT_TRUE(dequantize_to_bf16(m, out, "w").ok());
  EXPECT_EQ(out[0], fp32_to_bf16(0.1f));
  EXPECT_EQ(out[1], fp32_to_bf16(-0.2f));
}

TEST(BlockScaled, ANaNScaleIsAnErrorNamingTheBlock) {
  const uint8_t codes[4] = {0x38, 0x38, 0x38, 0x38};
  const uint8_t scales[2] = {127, 255};
  BlockScaledMatrix m{.code = BlockCode::kFp8E4M3, .codes = codes, .codes_bytes = 4, .n_out = 2, .n_in = 2,
                      .scale_type = BlockScaleType::kUe8m0, .scales = scales, .scales_bytes = 2, .scale_rows = 2,
                      .scale_cols = 1, .block = {1, 2}};
  std::vector<uint16_t> out(4);
  Status s = dequantize_to_bf16(m, out, "layers.0.attn.wq_a.weight");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layers.0.attn.wq_a.weight"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("block (1, 0)"), std::string::npos) << s.to_string();
}

// Sizes that do not fit are errors, never reads past a buffer: the codes, the scales, the block
// grid and an odd FP4 width are all checked before the first value is read.
TEST(BlockScaled, SizesThatDoNotFitAreErrors) {
  const uint8_t codes[8] = {0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38, 0x38};
  const uint8_t scales[4] = {127, 127, 127, 127};
  const BlockScaledMatrix good{.code = BlockCode::kFp8E4M3, .codes = codes, .codes_bytes = 8, .n_out = 2, .n_in = 4,
                               .scale_type = BlockScaleType::kUe8m0, .scales = scales, .scales_bytes = 2,
                               .scale_rows = 2, .scale_cols = 1, .block = {1, 4}};
  std::vector<uint16_t> out(8);
  ASSERT_TRUE(dequantize_to_bf16(good, out, "w").ok());
  auto fails = [&](BlockScaledMatrix m, size_t out_size, const char* what) {
    std::vector<uint16_t> o(out_size);
    const Status s = dequantize_to_bf16(m, o, "layers.0.w");
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find("layers.0.w"), std::string::npos) << what << ": " << s.to_string();
  };
  BlockScaledMatrix m = good;
  m.codes_bytes = 7;
  fails(m, 8, "codes too short");
  m = good;
  m.scales_bytes = 1;
  fails(m, 8, "scales too short");
  m = good;
  m.scale_rows = 1;
  m.scales_bytes = 1;
  fails(m, 8, "a grid of fewer blocks than the matrix needs");
  m = good;
  fails(m, 7, "an output too small");
  m = good;
  m.code = BlockCode::kFp4E2M1;
  m.n_in = 3;
  fails(m, 6, "an odd FP4 width");
  m = good;
  m.scale_type = BlockScaleType::kF32;  // 4 bytes a scale: 2 bytes hold none
  fails(m, 8, "F32 scales in 2 bytes");
}

}  // namespace
}  // namespace deepinfer
