// Block-quantized formats of GGUF: scalar reference dequantization, activation quantization
// and dot products. These are the oracle that SIMD paths are tested against.
//
// A quantized weight row is a run of blocks (block layouts in quant_blocks.h). A dot product
// of a weight row with an activation vector first quantizes the activation into the weight
// type's companion format (vec_dot_type: Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for
// the k-quants), as llama.cpp does, so results match it to float rounding.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace deepinfer::cpu {

// Which weight types have dequantization and dot products here.
bool quant_supported(DType type);

// dst[0..n) = dequantized src; n is a multiple of the block size. Plain types (F32, F16, BF16)
// are converted.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

// The activation format that vec_dot pairs with a weight type (F32 for F32, F16 and BF16).
DType vec_dot_type(DType weight_type);

// Quantizes n floats into `type` (Q8_0, Q8_1, Q8_K, or the plain types F32/F16/BF16);
// dst holds dtype_row_bytes(type, n) bytes.
void quantize_row(DType type, const float* src, void* dst, int64_t n);

// Dot product of one weight row (weight_type) with one activation row already quantized to
// vec_dot_type(weight_type); n elements.
float vec_dot(DType weight_type, const void* weight_row, const void* activation_row, int64_t n);

// out[c] = vec_dot(weight_type, weight_row, activation_rows[c], n) for c < 4, bit for bit (so a
// token's result never depends on the tokens batched with it); the weight row is unpacked once
// for all four where a kernel exists.
void vec_dot_x4(DType weight_type, const void* weight_row, const void* const* activation_rows, int64_t n,
                float* out);

// Name of the instruction-set tier the kernels run on ("avx512", "avx2" or "scalar"), chosen
// once per process from cpuid (and the DEEPINFER_ISA cap).
const char* kernel_isa();

}  // namespace deepinfer::cpu
