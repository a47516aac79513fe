// Helpers for the quant_*_test.cpp files: random rows of every format, float dot products.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/quant_blocks.h"
#include "core/dtype.h"
#include "core/half.h"

namespace deepinfer::cpu::testing {

inline constexpr DType kWeightTypes[] = {
    DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
    DType::kQ8_0, DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kMXFP4,
};

inline int64_t block_size(DType type) { return dtype_traits(type)->block_size; }

// A positive half-float scale between 2^-10 and 2^-2: sane magnitudes, no inf or NaN.
inline uint16_t random_scale(std::mt19937& rng, bool either_sign = false) {
  std::uniform_real_distribution<float> exponent(-10.0f, -2.0f);
  float v = std::exp2(exponent(rng));
  if (either_sign && (rng() & 1)) v = -v;
  return fp32_to_fp16(v);
}

// n elements of `type`: random bytes with the half-float scale fields overwritten by sane
// values; plain types hold random normal values.
inline std::vector<uint8_t> random_row(DType type, int64_t n, std::mt19937& rng) {
  std::vector<uint8_t> row(dtype_row_bytes(type, n));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (type == DType::kF32 || type == DType::kF16 || type == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = normal(rng);
      if (type == DType::kF32) std::memcpy(row.data() + 4 * i, &v, 4);
      const uint16_t h = type == DType::kF16 ? fp32_to_fp16(v) : fp32_to_bf16(v);
      if (type != DType::kF32) std::memcpy(row.data() + 2 * i, &h, 2);
    }
    return row;
  }
  for (uint8_t& b : row) b = static_cast<uint8_t>(rng());
  const int64_t nb = n / block_size(type);
  for (int64_t i = 0; i < nb; ++i) {
    void* p = row.data() + i * dtype_traits(type)->block_bytes;
    switch (type) {
      case DType::kQ4_0: static_cast<BlockQ4_0*>(p)->d = random_scale(rng); break;
      case DType::kMXFP4: static_cast<BlockMXFP4*>(p)->e = static_cast<uint8_t>(117 + rng() % 9); break;
      case DType::kQ4_1:
        static_cast<BlockQ4_1*>(p)->d = random_scale(rng);
        static_cast<BlockQ4_1*>(p)->m = random_scale(rng, true);
        break;
      case DType::kQ5_0: static_cast<BlockQ5_0*>(p)->d = random_scale(rng); break;
      case DType::kQ5_1:
        static_cast<BlockQ5_1*>(p)->d = random_scale(rng);
        static_cast<BlockQ5_1*>(p)->m = random_scale(rng, true);
        break;
      case DType::kQ8_0: static_cast<BlockQ8_0*>(p)->d = random_scale(rng); break;
      case DType::kQ2_K:
        static_cast<BlockQ2_K*>(p)->d = random_scale(rng);
        static_cast<BlockQ2_K*>(p)->dmin = random_scale(rng);
        break;
      case DType::kQ3_K: static_cast<BlockQ3_K*>(p)->d = random_scale(rng); break;
      case DType::kQ4_K:
        static_cast<BlockQ4_K*>(p)->d = random_scale(rng);
        static_cast<BlockQ4_K*>(p)->dmin = random_scale(rng);
        break;
      case DType::kQ5_K:
        static_cast<BlockQ5_K*>(p)->d = random_scale(rng);
        static_cast<BlockQ5_K*>(p)->dmin = random_scale(rng);
        break;
      case DType::kQ6_K: static_cast<BlockQ6_K*>(p)->d = random_scale(rng); break;
      default: break;
    }
  }
  return row;
}

inline std::vector<float> random_floats(int64_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

struct DotAndMagnitude {
  double dot = 0.0;        // sum of a[i] * b[i], in double
  double magnitude = 0.0;  // sum of |a[i] * b[i]|: scales the rounding error of any float sum
};

inline DotAndMagnitude dot_double(const std::vector<float>& a, const std::vector<float>& b) {
  DotAndMagnitude r;
  for (size_t i = 0; i < a.size(); ++i) {
    const double p = static_cast<double>(a[i]) * b[i];
    r.dot += p;
    r.magnitude += std::fabs(p);
  }
  return r;
}

}  // namespace deepinfer::cpu::testing
