// Weight matrices regrouped for the matrix products of the AVX-512 VNNI and AVX2 tiers
// ("packed"): the blocks of 16 consecutive rows are interleaved so that one vpdpbusd multiplies
// 4 elements of each of the 16 rows with the same 4 activation bytes, and its 16 int32 lanes are
// the 16 rows' partial sums (on AVX2, vpmaddubsw and vpmaddwd over each 8-row half).
// A block's integer dot product then needs no horizontal reduction, and its float scaling (one
// conversion, one multiply, one fma) is shared by 16 rows instead of done per row. In the
// row-major GGUF layout every block costs that float work per row and per token.
//
// Layout. A matrix of n_out rows (a multiple of kPackRows) by n_in elements is n_out / 16 row
// groups, one after the other; a group is its n_in / 32 packed blocks in element order; a packed
// block holds block i of the group's 16 rows:
//
//   Q4_0  d[16] (half)                 codes[4][64]   288 bytes
//   Q4_1  d[16], m[16] (half)          codes[4][64]   320 bytes
//   Q5_0  d[16] (half), high[64]       codes[4][64]   352 bytes
//   Q5_1  d[16], m[16] (half), high[64] codes[4][64]  384 bytes
//   Q8_0  d[16] (half)                 codes[8][64]   544 bytes
//   Q4_K  d[16], dmin[16] (half), sc[8][16], mn[8][16] (bytes), codes[4][8][64]   2368 bytes
//   Q5_K  Q4_K's fields, then high[8][64]                                         2880 bytes
//   Q6_K  d[16] (half), sc[16][16] (int8), low[32][64], high[16][64]              3360 bytes
//   Q3_K  d[16] (half), sc[16][16] (int8), low[16][64], high[8][64]               1824 bytes
//   Q2_K  d[16], dmin[16] (half), scales[16][16] (bytes), low[16][64]             1344 bytes
//
//   MXFP4 e[16] (bytes)                codes[32][8]   272 bytes
//   F32   w[16] (float)    64 bytes      one element of 16 rows: a block is one element
//   F16   w[16] (half)     32 bytes
//   BF16  w[16] (bfloat)   32 bytes
//
// Float formats: packed block k holds element k of the group's rows 0..15 in row order, so one
// 16-value load (two vectors) feeds 16 rows' chains (packed_float_avx2.cpp); as large as the
// original. MXFP4: e[j] is row j's scale byte; codes[k] holds element k's 16 codes, row j's in
// bits 4(j % 8) of the little-endian word j / 8 (one shift per lane takes 8 rows' codes apart);
// its products decode blocks into f32 panels and take the f32 chains.
// 4-bit codes: byte 4j + b of codes[L] is byte 4L + b of row j's qs, so its low nibble is
// element 4L + b and its high nibble element 16 + 4L + b ("k-group" L and 4 + L). Q5_0 and
// Q5_1: bit G of high[4j + b] is bit 4 of row j's element of k-group G at position b. Q8_0: byte 4j + b of
// codes[G] is row j's element 4G + b plus 128 (unsigned, as vpdpbusd takes its first operand).
// Q4_K (256-element super-blocks): sc[s][j] and mn[s][j] are row j's 6-bit scale and min of
// sub-block s; byte 4j + b of codes[c][L] is byte 32c + 4L + b of row j's qs, so its low nibble
// is element 64c + 4L + b (sub-block 2c) and its high nibble element 64c + 32 + 4L + b (sub-block
// 2c + 1). Q5_K: Q4_K's fields hold its scales, mins and low 4 bits alike; byte 4j + b of
// high[L] is row j's qh[4L + b], whose bit s is the fifth bit of element 32s + 4L + b.
// Q6_K (256-element super-blocks, k-groups G = 0..63): sc[s][j] is row j's scale of
// sub-block s (16 elements); byte 4j + b of low[L] holds the low 4 bits of row j's element 4L + b
// (low nibble) and 128 + 4L + b (high nibble); bits 2m, 2m + 1 of byte 4j + b of high[H] are the
// high 2 bits of row j's element 4(H + 16m) + b. Q3_K as Q6_K with 3-bit codes: sc[s][j] is
// row j's scale of sub-block s less 32 (as used); bits 2m, 2m + 1 of byte 4j + b of low[L] are
// the low 2 bits of row j's element 4(L + 16m) + b, bit m of byte 4j + b of high[H] its element
// 4(H + 8m) + b's hmask bit (set: code 4..7, value code - 4). Q2_K: scales[s][j] is row j's
// stored byte of sub-block s (scale in the low nibble, min in the high); low as Q3_K's. Each
// packed block of the 32-element formats and of Q6_K and Q2_K is exactly 16 stored blocks'
// bytes, so such a packed matrix is as large as the original and a decode step reads as many
// bytes; Q4_K's unpacked scales add 64 bytes per 2304 (2.8%), Q5_K's 64 per 2816 (2.3%), Q3_K's
// 64 per 1760 (3.6%).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cpu/ops.h"
#include "core/dtype.h"
#include "core/page_buffer.h"

namespace deepinfer::cpu {

inline constexpr int64_t kPackRows = 16;

// y[t * ldy + 16 g + j] = row j of group g times activation row t (in vec_dot_type), for groups
// [0, n_groups) starting at w (groups group_stride bytes apart) and n_tok activation rows
// a_stride bytes apart; n elements. `info`: the rows' PackedActInfo (n / kPackedActBlock per
// row, row after row) for the types with a packed_act_info_fn, ignored by the others. Every
// element is computed by the same instructions whatever n_groups and n_tok are, so a token's
// result does not depend on its batch.
//
// `one_pass`: the product makes no other pass over these rows (a batch of at most a call's
// tokens: decode), so their weights come from memory, once. The later token tiles then ask for
// as many bytes as these groups hold right after them (the caller's next call) into L2, so that
// the stream from memory goes on while they compute (where weight_prefetch() says so). A
// product of several passes (prefill) finds its weights in the caches: there the prefetch made
// it 2-4% slower, and Q5_0 and Q6_K unpack each call's codes once for all its token tiles.
using PackedGemmFn = void (*)(const uint8_t* w, size_t group_stride, int64_t n_groups, const void* a,
                              size_t a_stride, const PackedActInfo* info, int64_t n_tok, int64_t n, float* y,
                              int64_t ldy, bool one_pass);

// info[t * (n / kPackedActBlock) + i] for block i of activation row t, n_tok rows a_stride bytes
// apart.
inline constexpr int64_t kPackedActBlock = 32;
using PackedActInfoFn = void (*)(const void* a, size_t a_stride, int64_t n_tok, int64_t n, PackedActInfo* info);

// The dispatched tier's packed product for a weight type, or nullptr (another type, or a CPU or
// DEEPINFER_ISA cap below avx2).
PackedGemmFn packed_gemm_fn(DType weight_type);

// The infos that type's packed product takes, or nullptr where it takes none (Q4_K, Q6_K) or
// there is no packed product. It depends on the activation type only: weight types that share
// a vec_dot_type share it.
PackedActInfoFn packed_act_info_fn(DType weight_type);

// Whether products ask for their weights ahead of use (software prefetch: a packed call's first
// token tile and, in a one-pass product, its later tiles; a one-token product of unpacked rows):
// on for Intel CPUs, where it lifted decode 10-50% on an Emerald Rapids Xeon, and for CPUs on
// the AVX2 tier: on an AMD Zen 3 one token by 8192 x 4096 Q6_K went 1.42-2.19 -> 0.80-1.19 ms,
// Q4_K 0.69-0.79 -> 0.59-0.61 (Q4_0, Q8_0 the same), SmolLM2's decode 20-35% faster. Off on AMD
// CPUs with AVX-512, since an earlier prefetch on a Zen 4 made a streaming Q8_0 product slower
// (not measured with this one). DEEPINFER_WEIGHT_PREFETCH=1 or 0 sets it, to measure either
// way on any machine.
bool weight_prefetch();

// The AVX-512 VNNI kernels by name (packed_avx512.cpp): nullptr for a type without one, and for
// every type when the compiler cannot target those extensions. Call only where cpu_has(kAvx512).
namespace avx512 {
PackedGemmFn packed_gemm_fn(DType weight_type);
PackedActInfoFn packed_act_info_fn(DType weight_type);
}  // namespace avx512

// The AVX2 kernels (packed_avx2.cpp), on the same layout: a group's code vectors taken as two
// 32-byte halves. Same bits as the AVX-512 ones. Call only where cpu_has(kAvx2).
namespace avx2 {
PackedGemmFn packed_gemm_fn(DType weight_type);
PackedActInfoFn packed_act_info_fn(DType weight_type);
}  // namespace avx2

// The float formats' and MXFP4's products (f32, f16, bf16, MXFP4: packed_float_avx2.cpp), AVX2
// code that both tiers use; nullptr for other types. Call only where cpu_has(kAvx2).
namespace avx2 {
PackedGemmFn packed_float_gemm_fn(DType weight_type);
}  // namespace avx2

// Whether a matrix of this type and shape is packed: a packed product exists for the type and
// n_out is a multiple of kPackRows.
bool packable(DType type, int64_t n_out, int64_t n_in);

// Bytes of one packed group (kPackRows rows).
size_t packed_group_bytes(DType type, int64_t n_in);

// Regroups n_out row-major rows of `type` (src) into the layout above (dst, n_out * row bytes).
// Any type with a layout above, whatever the dispatched tier (tests pack for every tier).
bool has_packed_layout(DType type);
void pack_matrix(DType type, const uint8_t* src, int64_t n_out, int64_t n_in, uint8_t* dst);

// Row `row` of a packed matrix back in its stored format (dtype_row_bytes(type, n_in) bytes).
void unpack_row(DType type, const uint8_t* packed, int64_t n_in, int64_t row, uint8_t* dst);

// Dequantizes row `row` of a packed matrix into dst[0..n_in), block by block (no allocation).
void dequantize_packed_row(DType type, const uint8_t* packed, int64_t n_in, int64_t row, float* dst);

// Owns the packed copies of a model's matrices. pack() gives a matrix its packed copy when
// packable (and otherwise leaves it as it is); the copy lives as long as this object. Every
// product and row lookup of a packed matrix reads the copy, never the original.
class PackedWeights {
 public:
  void pack(WeightMatrix& m);
  size_t bytes() const { return bytes_; }

 private:
  uint8_t* allocate(size_t bytes);

  std::vector<PageBuffer> buffers_;  // huge pages: a decode step streams through all of them
  size_t chunk_used_ = 0;            // bytes handed out of buffers_.back()
  size_t bytes_ = 0;
};

}  // namespace deepinfer::cpu
