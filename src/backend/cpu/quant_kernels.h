// The quantization kernels by name, below the dispatching functions of quant.h.
//
// quant.h picks, at startup, the fastest implementation this CPU runs (cpuid); tests and
// benchmarks use this header to call each implementation directly and compare it with the
// scalar reference. The avx2 and avx512 kernels live in translation units compiled with those
// instruction sets (CMakeLists.txt); call one only when cpu_has() says the CPU has its set.
// Every kernel takes n elements, n a multiple of the type's block size (any n for the plain
// types F32, F16 and BF16), and is safe to call from several threads at once.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/quant_blocks.h"
#include "core/dtype.h"

namespace deepinfer::cpu {

using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);
// weight_row in the weight type, activation_row in vec_dot_type(weight type).
using VecDotFn = float (*)(const void* weight_row, const void* activation_row, int64_t n);
// Four activation rows at once: out[c] equals VecDotFn(weight_row, activation_rows[c], n) bit
// for bit; only the weight row's loads and unpacking are shared.
using VecDot4Fn = void (*)(const void* weight_row, const void* const* activation_rows, int64_t n, float* out);
// Matrix product of n_rows weight rows (w_stride bytes apart) with n_tok activation rows
// (a_stride bytes apart, in vec_dot_type): y[t * ldy + r] = the same tier's VecDotFn of weight
// row r and activation row t, bit for bit, whatever n_rows and n_tok are (batch invariance).
using GemmFn = void (*)(const void* w, size_t w_stride, int64_t n_rows, const void* a, size_t a_stride, int64_t n_tok,
                        int64_t n, float* y, int64_t ldy);

// gate[i] = act(gate[i]) * up[i] for i < n (the gated activations of ops.h).
using GatedFn = void (*)(float* gate, const float* up, int64_t n);
// x[i] = exp(x[i]) for i < n.
using ExpFn = void (*)(float* x, int64_t n);
// x[i] = cap * tanh(x[i] / cap) for i < n (ops.h's soft_cap).
using SoftCapFn = void (*)(float* x, int64_t n, float cap);

// Instruction-set tiers of the kernels below, lowest first.
enum class Isa { kScalar, kAvx2, kAvx512 };
const char* isa_name(Isa isa);
// Whether this CPU runs the tier's instructions and this build compiled its kernels.
bool cpu_has(Isa isa);
// The tier the kernels run on: the highest cpu_has() reports, capped by DEEPINFER_ISA
// (quant.h's kernel_isa() names it).
Isa kernel_tier();

// The dispatched tier's matrix product for a weight type (the one quant.h's vec_dot agrees with
// bit for bit), or nullptr where that tier has none.
GemmFn gemm_fn(DType weight_type);

// Scalar reference: the oracle. Written for clarity; integer sums per block as llama.cpp
// forms them, so a SIMD path differs from it only in the order of float additions.
// A lookup gives nullptr for a type without that kernel.
namespace ref {
DequantizeRowFn dequantize_row_fn(DType type);
QuantizeRowFn quantize_row_fn(DType type);
VecDotFn vec_dot_fn(DType weight_type);

// The same, aborting on an unsupported type.
void dequantize_row(DType type, const void* src, float* dst, int64_t n);
void quantize_row(DType type, const float* src, void* dst, int64_t n);
float vec_dot(DType weight_type, const void* weight_row, const void* activation_row, int64_t n);
}  // namespace ref

// AVX2 + FMA + F16C. Every lookup gives nullptr when the compiler cannot target them.
namespace avx2 {
QuantizeRowFn quantize_row_fn(DType type);
VecDotFn vec_dot_fn(DType weight_type);
VecDot4Fn vec_dot4_fn(DType weight_type);
// The float weight types' (f32, f16, bf16) register-tiled matrix product; nullptr for the others,
// whose products go through vec_dot4_fn or the packed kernels (MXFP4's tiles were 6% slower than
// its four-row dots).
GemmFn gemm_fn(DType weight_type);
// ops.h's silu_mul, gelu_tanh_mul and soft_cap through avx2::exp_ps (act_avx2.cpp).
GatedFn silu_mul_fn();
GatedFn gelu_tanh_mul_fn();
SoftCapFn soft_cap_fn();
}  // namespace avx2

// AVX-512 (F, BW, VL, VNNI): register-tiled matrix products with VNNI byte dots
// (quant_avx512.cpp). nullptr where it has nothing faster than avx2, and for every type when the
// compiler cannot target those extensions. vec_dot_fn and vec_dot4_fn are gemm_fn's 1 x 1 tile.
namespace avx512 {
QuantizeRowFn quantize_row_fn(DType type);
VecDotFn vec_dot_fn(DType weight_type);
VecDot4Fn vec_dot4_fn(DType weight_type);
GemmFn gemm_fn(DType weight_type);
// ops.h's silu_mul and gelu_tanh_mul with a vector exponential (act_avx512.cpp).
GatedFn silu_mul_fn();
GatedFn gelu_tanh_mul_fn();
// The same vector exponential over an array (attention's softmax tiles).
ExpFn exp_fn();
// ops.h's soft_cap with a vector tanh (act_avx512.cpp).
SoftCapFn soft_cap_fn();
}  // namespace avx512

// Sub-block scales and mins of the k-quants, unpacked from their 6-bit packing (layouts in
// quant_blocks.h). Shared by the reference and the SIMD paths so both read the format alike.
// Always inlined: an out-of-line copy emitted by the AVX-512 translation unit could otherwise be
// the one the linker keeps for the scalar code.
[[gnu::always_inline]] inline void unpack_q4_k_scales(const uint8_t* packed, uint8_t* sc, uint8_t* mn) {  // 12 -> 8 + 8
  for (int k = 0; k < 4; ++k) {
    sc[k] = packed[k] & 63;
    mn[k] = packed[k + 4] & 63;
  }
  for (int k = 4; k < 8; ++k) {
    sc[k] = static_cast<uint8_t>((packed[k + 4] & 15) | ((packed[k - 4] >> 6) << 4));
    mn[k] = static_cast<uint8_t>((packed[k + 4] >> 4) | ((packed[k] >> 6) << 4));
  }
}

// Q3_K: 16 scales, already offset by -32.
[[gnu::always_inline]] inline void unpack_q3_k_scales(const uint8_t* packed, int8_t* sc) {  // 12 -> 16
  for (int k = 0; k < 16; ++k) {
    const int low = k < 8 ? packed[k] & 15 : packed[k - 8] >> 4;
    const int high = (packed[8 + k % 4] >> (2 * (k / 4))) & 3;
    sc[k] = static_cast<int8_t>((low | (high << 4)) - 32);
  }
}

}  // namespace deepinfer::cpu
