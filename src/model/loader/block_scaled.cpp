#include "model/loader/block_scaled.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/half.h"

namespace deepinfer {

float e4m3fn_to_float(uint8_t code) {
  const float sign = (code & 0x80) ? -1.0f : 1.0f;
  const int exponent = (code >> 3) & 0xf;
  const int mantissa = code & 0x7;
  if (exponent == 0xf && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m/8 * 2^-6
  return sign * std::ldexp(1.0f + static_cast<float>(mantissa) / 8.0f, exponent - 7);
}

float e2m1_to_float(uint8_t nibble) {
  const float sign = (nibble & 0x8) ? -1.0f : 1.0f;
  const int exponent = (nibble >> 1) & 0x3;
  const int mantissa = nibble & 0x1;
  if (exponent == 0) return sign * 0.5f * static_cast<float>(mantissa);
  return sign * std::ldexp(1.0f + 0.5f * static_cast<float>(mantissa), exponent - 1);
}

std::optional<float> ue8m0_to_float(uint8_t code) {
  if (code == 0xff) return std::nullopt;
  return std::ldexp(1.0f, static_cast<int>(code) - 127);
}

namespace {

std::optional<int64_t> smallest_power_of_two_block(int64_t n, int64_t blocks) {
  if (n <= 0 || blocks <= 0) return std::nullopt;
  for (int64_t b = 1; b <= (int64_t{1} << 40); b <<= 1) {
    const int64_t count = (n + b - 1) / b;
    if (count == blocks) return b;
    if (count < blocks) return std::nullopt;  // counts only fall as the block grows
  }
  return std::nullopt;
}

float scale_at(const BlockScaledMatrix& m, int64_t index, bool* ok) {
  switch (m.scale_type) {
    case BlockScaleType::kUe8m0: {
      std::optional<float> s = ue8m0_to_float(m.scales[index]);
      *ok = s.has_value();
      return s.value_or(0.0f);
    }
    case BlockScaleType::kF32: {
      float s;
      std::memcpy(&s, m.scales + 4 * index, 4);
      *ok = std::isfinite(s);
      return s;
    }
    case BlockScaleType::kBF16: {
      uint16_t b;
      std::memcpy(&b, m.scales + 2 * index, 2);
      const float s = bf16_to_fp32(b);
      *ok = std::isfinite(s);
      return s;
    }
  }
  *ok = false;
  return 0.0f;
}

}  // namespace

std::optional<BlockShape> infer_block(int64_t n_out, int64_t n_in, int64_t scale_rows, int64_t scale_cols) {
  std::optional<int64_t> rows = smallest_power_of_two_block(n_out, scale_rows);
  std::optional<int64_t> cols = smallest_power_of_two_block(n_in, scale_cols);
  if (!rows || !cols) return std::nullopt;
  return BlockShape{*rows, *cols};
}

namespace {

size_t scale_bytes(BlockScaleType type) {
  switch (type) {
    case BlockScaleType::kUe8m0: return 1;
    case BlockScaleType::kF32: return 4;
    case BlockScaleType::kBF16: return 2;
  }
  return 4;
}

Status check_sizes(const BlockScaledMatrix& m, size_t out_values, const std::string& name) {
  const bool fp4 = m.code == BlockCode::kFp4E2M1;
  const auto bad = [&](const std::string& what) { return invalid_argument(name + ": " + what); };
  if (m.n_out <= 0 || m.n_in <= 0 || m.block.rows <= 0 || m.block.cols <= 0) return bad("an empty matrix or block");
  if (fp4 && m.n_in % 2 != 0) return bad("FP4 codes come in pairs, but the matrix is " + std::to_string(m.n_in) + " wide");
  const auto n_out = static_cast<uint64_t>(m.n_out), n_in = static_cast<uint64_t>(m.n_in);
  if (n_out > (uint64_t{1} << 40) / n_in || out_values != n_out * n_in) return bad("the output does not hold the matrix");
  if (m.codes_bytes < n_out * (fp4 ? n_in / 2 : n_in)) return bad("the codes are shorter than the matrix");
  const auto grid_rows = static_cast<uint64_t>((m.n_out + m.block.rows - 1) / m.block.rows);
  const auto grid_cols = static_cast<uint64_t>((m.n_in + m.block.cols - 1) / m.block.cols);
  if (m.scale_rows <= 0 || m.scale_cols <= 0 || grid_rows > static_cast<uint64_t>(m.scale_rows) ||
      grid_cols > static_cast<uint64_t>(m.scale_cols)) {
    return bad("the scales do not cover the blocks");
  }
  if (m.scales_bytes / scale_bytes(m.scale_type) / static_cast<uint64_t>(m.scale_cols) <
      static_cast<uint64_t>(m.scale_rows)) {
    return bad("the scales are shorter than their shape");
  }
  return {};
}

}  // namespace

bool fits_mxfp4(const BlockScaledMatrix& m) {
  return m.code == BlockCode::kFp4E2M1 && m.scale_type == BlockScaleType::kUe8m0 && m.block.rows == 1 &&
         m.block.cols == 32 && m.n_in % 32 == 0;
}

Status repack_mxfp4(const BlockScaledMatrix& m, std::span<uint8_t> out, const std::string& name) {
  DI_ICHECK(fits_mxfp4(m));
  // check_sizes counts elements: an MXFP4 block of 32 takes 17 bytes.
  const uint64_t n_values = static_cast<uint64_t>(m.n_out) * static_cast<uint64_t>(m.n_in);  // wraps: refused below
  DI_RETURN_IF_ERROR(check_sizes(m, static_cast<size_t>(n_values), name));
  if (out.size() != n_values / 32 * 17) {
    return invalid_argument(name + ": MXFP4 output of " + std::to_string(out.size()) + " bytes for a [" +
                            std::to_string(m.n_out) + ", " + std::to_string(m.n_in) + "] matrix");
  }
  const int64_t n_blocks = m.n_in / 32;
  uint8_t* dst = out.data();
  for (int64_t r = 0; r < m.n_out; ++r) {
    const uint8_t* row = m.codes + r * (m.n_in / 2);
    for (int64_t b = 0; b < n_blocks; ++b, dst += 17) {
      const uint8_t e = m.scales[r * m.scale_cols + b];
      if (e == 255) {
        return invalid_argument(name + ": the scale of block (" + std::to_string(r) + ", " + std::to_string(b) +
                                ") is NaN or infinite; the checkpoint is corrupt");
      }
      dst[0] = e;
      // Source byte i holds elements 2i (low) and 2i + 1 (high) of the block.
      const uint8_t* src = row + b * 16;
      const auto element = [src](int k) { return (k & 1) ? src[k / 2] >> 4 : src[k / 2] & 0xf; };
      for (int j = 0; j < 16; ++j) dst[1 + j] = static_cast<uint8_t>(element(j) | element(j + 16) << 4);
    }
  }
  return {};
}

Status dequantize_to_bf16(const BlockScaledMatrix& m, std::span<uint16_t> out, const std::string& name) {
  DI_RETURN_IF_ERROR(check_sizes(m, out.size(), name));
  // Every code's value, once: 256 FP8 codes, or the 16 FP4 nibbles.
  std::array<float, 256> value{};
  const bool fp4 = m.code == BlockCode::kFp4E2M1;
  for (int c = 0; c < (fp4 ? 16 : 256); ++c) {
    value[static_cast<size_t>(c)] = fp4 ? e2m1_to_float(static_cast<uint8_t>(c)) : e4m3fn_to_float(static_cast<uint8_t>(c));
  }
  const int64_t br = m.block.rows, bc = m.block.cols;
  for (int64_t r = 0; r < m.n_out; ++r) {
    uint16_t* dst = out.data() + r * m.n_in;
    const uint8_t* row = m.codes + (fp4 ? r * (m.n_in / 2) : r * m.n_in);
    for (int64_t c0 = 0; c0 < m.n_in; c0 += bc) {
      const int64_t index = (r / br) * m.scale_cols + c0 / bc;
      bool ok = false;
      const float scale = scale_at(m, index, &ok);
      if (!ok) {
        return invalid_argument(name + ": the scale of block (" + std::to_string(r / br) + ", " +
                                std::to_string(c0 / bc) + ") is NaN or infinite; the checkpoint is corrupt");
      }
      const int64_t end = std::min(m.n_in, c0 + bc);
      if (fp4) {
        for (int64_t c = c0; c < end; ++c) {
          const uint8_t byte = row[c / 2];
          const uint8_t nibble = (c & 1) ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0xf);
          dst[c] = fp32_to_bf16(value[nibble] * scale);
        }
      } else {
        for (int64_t c = c0; c < end; ++c) dst[c] = fp32_to_bf16(value[row[c]] * scale);
      }
    }
  }
  return {};
}

}  // namespace deepinfer
