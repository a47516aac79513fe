// Block-scaled weights as DeepSeek releases them (V3, V4, V4.1) and as transformers' "fp8"
// quantization_config stores them: a matrix of small floats plus one scale per block.
//
//   FP8:  codes [n_out, n_in] of float8 e4m3fn (1 byte each);
//   FP4:  codes [n_out, n_in / 2] of e2m1 pairs, element 2i in the low nibble of byte i and
//         2i + 1 in the high one (DeepSeek stores them as I8; safetensors' F4 is the same bytes);
//   scales [ceil(n_out / block_rows), ceil(n_in / block_cols)], row-major, as UE8M0 (an 8-bit
//         power of two, 2^(b - 127), 255 is NaN), F32 or BF16. weight = code * scale of its block.
//
// V4 uses 128 x 128 blocks for FP8 and 1 x 32 for its FP4 experts; V4.1 uses blocks of 32. The
// block size is not stored next to a tensor, so it is read off the scale's shape: the smallest
// power of two whose block count matches (see infer_block).
//
// FP4 with UE8M0 scales on 1 x 32 blocks (V4's routed experts, most of the model) is MXFP4 as it
// stands, which the backends multiply natively: the loader repacks it (repack_mxfp4), keeping
// 17 bytes per 32 weights. Everything else the loader dequantizes to BF16 once. A code times a
// power-of-two scale is exact in BF16 (e4m3 and e2m1 have at most 3 mantissa bits) wherever the
// product is a normal number, so with UE8M0 scales the BF16 matrix holds exactly the weights the
// checkpoint means (a scale below about 2^-120 or above 2^118, which no real checkpoint uses,
// would round to a subnormal or overflow); F32 / BF16 scales are rounded to nearest even, as
// DeepSeek's own fp8_cast_bf16 does.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "deepinfer/status.h"

namespace deepinfer {

enum class BlockCode { kFp8E4M3, kFp4E2M1 };
enum class BlockScaleType { kUe8m0, kF32, kBF16 };

// Scalar references, one code at a time.
float e4m3fn_to_float(uint8_t code);        // NaN for 0x7f / 0xff; no infinities
float e2m1_to_float(uint8_t nibble);        // the low 4 bits
std::optional<float> ue8m0_to_float(uint8_t code);  // nullopt for 255 (NaN)

struct BlockShape {
  int64_t rows = 0, cols = 0;
};

// The smallest powers of two (rows, cols) with ceil(n_out / rows) == scale_rows and
// ceil(n_in / cols) == scale_cols; nullopt when none exists.
std::optional<BlockShape> infer_block(int64_t n_out, int64_t n_in, int64_t scale_rows, int64_t scale_cols);

struct BlockScaledMatrix {
  BlockCode code = BlockCode::kFp8E4M3;
  const uint8_t* codes = nullptr;  // FP8: n_out * n_in bytes; FP4: n_out * n_in / 2 (n_in even)
  size_t codes_bytes = 0;
  int64_t n_out = 0, n_in = 0;     // the logical matrix
  BlockScaleType scale_type = BlockScaleType::kUe8m0;
  const uint8_t* scales = nullptr;
  size_t scales_bytes = 0;
  int64_t scale_rows = 0, scale_cols = 0;
  BlockShape block;
};

// Whether m is FP4 with UE8M0 scales on 1 x 32 blocks and a width of whole blocks (MXFP4).
bool fits_mxfp4(const BlockScaledMatrix& m);

// out = the matrix as MXFP4 (DType::kMXFP4, ggml's block_mxfp4): per row, per block of 32, the
// scale byte, then 16 bytes whose low nibbles are elements 0..15 and high nibbles 16..31. The
// same values, no rounding. m must fit_mxfp4; errors as dequantize_to_bf16's.
Status repack_mxfp4(const BlockScaledMatrix& m, std::span<uint8_t> out, const std::string& name);

// out[n_out * n_in] = the BF16 matrix. INVALID_ARGUMENT (naming `name`) when the sizes do not
// fit (the buffers, the block grid, an odd FP4 width) and, naming the block, for a NaN or infinite
// scale; codes that are NaN stay NaN.
Status dequantize_to_bf16(const BlockScaledMatrix& m, std::span<uint16_t> out, const std::string& name);

}  // namespace deepinfer
