// Tensor element types. Numbering follows GGUF's ggml_type ids so a GGUF tensor's type field
// maps to a DType without a table; safetensors dtypes map onto the same enum (F32, F16, BF16).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace deepinfer {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kBF16 = 30,
  kMXFP4 = 39,  // OCP microscaling FP4: e2m1 codes, one power-of-two scale per 32 (ggml's id)
};

struct DTypeTraits {
  std::string_view name;   // "q4_K", as ggml spells it
  int64_t block_size;      // elements per block (1 for plain types)
  size_t block_bytes;      // bytes per block
  bool quantized;
};

// nullopt for ids that deepinfer does not know (a newer GGUF type, say).
std::optional<DTypeTraits> dtype_traits(DType type);
std::optional<DType> dtype_from_ggml_id(uint32_t id);
std::string_view dtype_name(DType type);  // "unknown" when not known

// Bytes taken by a row of n elements; n must be a multiple of the block size.
size_t dtype_row_bytes(DType type, int64_t n);

// dst[0..n) = src's n elements of a plain float type (F32, F16, BF16) as float32; false for any
// other type. For the small vectors a loader reads (norm weights, biases); matrices stay in their
// stored format for the backend.
bool widen_to_f32(DType type, const void* src, float* dst, int64_t n);

}  // namespace deepinfer
