#include "core/dtype.h"

#include <cstring>

#include "core/half.h"

#include "core/check.h"

namespace deepinfer {

namespace {
constexpr int64_t kQK = 32;    // block size of the 32-element formats
constexpr int64_t kQKK = 256;  // super-block size of the k-quants
}  // namespace

std::optional<DTypeTraits> dtype_traits(DType type) {
  switch (type) {
    case DType::kF32: return DTypeTraits{"f32", 1, 4, false};
    case DType::kF16: return DTypeTraits{"f16", 1, 2, false};
    case DType::kBF16: return DTypeTraits{"bf16", 1, 2, false};
    case DType::kF64: return DTypeTraits{"f64", 1, 8, false};
    case DType::kI8: return DTypeTraits{"i8", 1, 1, false};
    case DType::kI16: return DTypeTraits{"i16", 1, 2, false};
    case DType::kI32: return DTypeTraits{"i32", 1, 4, false};
    case DType::kI64: return DTypeTraits{"i64", 1, 8, false};
    // Block layouts (bytes): see backend/cpu/quant_blocks.h.
    case DType::kQ4_0: return DTypeTraits{"q4_0", kQK, 2 + kQK / 2, true};
    case DType::kQ4_1: return DTypeTraits{"q4_1", kQK, 4 + kQK / 2, true};
    case DType::kQ5_0: return DTypeTraits{"q5_0", kQK, 2 + 4 + kQK / 2, true};
    case DType::kQ5_1: return DTypeTraits{"q5_1", kQK, 4 + 4 + kQK / 2, true};
    case DType::kQ8_0: return DTypeTraits{"q8_0", kQK, 2 + kQK, true};
    case DType::kQ8_1: return DTypeTraits{"q8_1", kQK, 4 + kQK, true};
    case DType::kQ2_K: return DTypeTraits{"q2_K", kQKK, kQKK / 16 + kQKK / 4 + 4, true};
    case DType::kQ3_K: return DTypeTraits{"q3_K", kQKK, kQKK / 8 + kQKK / 4 + 12 + 2, true};
    case DType::kQ4_K: return DTypeTraits{"q4_K", kQKK, 4 + 12 + kQKK / 2, true};
    case DType::kQ5_K: return DTypeTraits{"q5_K", kQKK, 4 + 12 + kQKK / 8 + kQKK / 2, true};
    case DType::kQ6_K: return DTypeTraits{"q6_K", kQKK, kQKK / 2 + kQKK / 4 + kQKK / 16 + 2, true};
    case DType::kQ8_K: return DTypeTraits{"q8_K", kQKK, 4 + kQKK + kQKK / 16 * 2, true};
    case DType::kMXFP4: return DTypeTraits{"mxfp4", kQK, 1 + kQK / 2, true};
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_ggml_id(uint32_t id) {
  auto type = static_cast<DType>(id);
  if (dtype_traits(type)) return type;
  return std::nullopt;
}

std::string_view dtype_name(DType type) {
  auto traits = dtype_traits(type);
  return traits ? traits->name : std::string_view("unknown");
}

size_t dtype_row_bytes(DType type, int64_t n) {
  auto traits = dtype_traits(type);
  DI_ICHECK(traits && n % traits->block_size == 0);
  return static_cast<size_t>(n / traits->block_size) * traits->block_bytes;
}

bool widen_to_f32(DType type, const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  switch (type) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return true;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
      return true;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
      return true;
    default: return false;
  }
}

}  // namespace deepinfer
