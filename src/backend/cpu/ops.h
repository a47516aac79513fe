// CPU operators of the forward pass. Each has a plain scalar implementation that doubles as
// the reference in tests/unit/backend/ops_test.cpp; matmul and the gated activations also have
// SIMD kernels picked at startup from cpuid (quant_kernels.h; tested against the reference in
// tests/ops/), and matmul fans out over a ThreadPool. Activations are float32 rows, row-major.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace deepinfer::cpu {

// A weight matrix in its stored format: n_out rows of n_in elements each, row-major, rows of
// dtype_row_bytes(dtype, n_in) bytes. `packed`, when set (packed.h's PackedWeights), is the same
// matrix regrouped for the packed kernels, and every product and row lookup reads it instead.
struct WeightMatrix {
  DType dtype = DType::kF32;
  const uint8_t* data = nullptr;
  int64_t n_out = 0;
  int64_t n_in = 0;
  const uint8_t* packed = nullptr;
  size_t row_bytes() const { return dtype_row_bytes(dtype, n_in); }
};

// What the packed kernels (packed.h) need of each quantized activation block besides its codes:
// the scale as a float, the sum of the codes (the weight formats' offsets enter the integer sums
// as -offset * code_sum) and Q8_1's s. Worked out once per product, not once per kernel call.
struct PackedActInfo {
  float d;
  int32_t code_sum;
  float s;
};

// Reusable buffers for activations quantized to a weight's vec_dot_type and their packed-kernel
// infos. Grow, never shrink, so a forward pass allocates only on its first call with a given
// batch size.
// A row's first maximum so far: its value and column (-1: none yet).
struct RowMax {
  float value = 0.0f;
  int64_t index = -1;
};

struct QuantScratch {
  std::vector<uint8_t> bytes;
  std::vector<PackedActInfo> act_info;  // [n_tokens, n_in / 32] where a packed kernel takes them
  std::vector<float> argmax_tiles;      // matmul_argmax: per thread [n_tokens, 256] products
  std::vector<RowMax> argmax_partial;   // matmul_argmax: per thread [n_tokens]
};

// y[t, o] = sum_i w[o, i] * x[t, i] (+ bias[o] when bias is non-null).
// x: [n_tokens, n_in], y: [n_tokens, n_out], bias: [n_out] or null.
void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, const float* bias,
            QuantScratch& scratch, ThreadPool& pool);

// Several products of the same x (q, k and v; gate and up): x is quantized once and the
// matrices' rows share one parallel region. Each output equals matmul's bit for bit.
struct MatmulOutput {
  const WeightMatrix* w = nullptr;
  float* y = nullptr;            // [n_tokens, w->n_out]
  const float* bias = nullptr;   // [w->n_out] or null
};
void matmul_group(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tokens, QuantScratch& scratch,
                  ThreadPool& pool);

// best[t] = the first column of the largest of y[t, :] = matmul's row t (NaN never the largest;
// a row of NaN only: 0), without writing y out: each thread keeps its share of the products in a
// small tile and folds it into its maxima while it is in cache. The greedy choice from an output
// head (a batch of 64 over Gemma 3's 262144 rows would otherwise write and read back 64 MB).
// best: [n_tokens].
void matmul_argmax(const WeightMatrix& w, const float* x, int64_t n_tokens, int32_t* best, QuantScratch& scratch,
                   ThreadPool& pool);
// best[r] = the first column of the largest of y[r, :] (NaN never the largest; a row of NaN
// only: 0), y: [n_rows, n]. matmul_argmax's choice from rows already written out.
void argmax_rows(const float* y, int64_t n_rows, int64_t n, int32_t* best);

// The oracle of matmul: each activation row quantized by the scalar reference quantizer and
// each output one reference dot product (quant.h's ref:: kernels) of the unpacked weight row.
void matmul_reference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, const float* bias,
                      QuantScratch& scratch, ThreadPool& pool);

// Row t of y = weight row ids[t] dequantized (embedding lookup). y: [n_ids, n_in].
void gather_rows(const WeightMatrix& w, std::span<const int32_t> ids, float* y);

// out[i] = x[i] * (1 / sqrt(float(ss / n) + eps)) * w[i] for each of n_rows rows of n elements, ss
// the row's sum of squares in double (element i into partial sum i % 32 by fma, the 32 folded
// 16, 8, 4, 2, 1 apart); in place allowed.
void rms_norm(const float* x, const float* w, float eps, int64_t n_rows, int64_t n, float* out);
// The same, rows split over the pool's threads (each row's bits as above).
void rms_norm(const float* x, const float* w, float eps, int64_t n_rows, int64_t n, float* out, ThreadPool& pool);

// Rotary position embedding applied in place to x: [n_tokens, n_heads, head_dim]. The first
// n_rot channels of each head rotate with angle positions[t] * inv_freq[i] (inv_freq: n_rot/2);
// with `offset` the n_rot channels from there (DeepSeek V4: the trailing ones), and sign -1
// rotates by -positions[t].
enum class RotaryPairing { kInterleaved, kHalf };
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
          std::span<const int32_t> positions, std::span<const float> inv_freq,
          RotaryPairing pairing, int64_t offset = 0, float sign = 1.0f);
// The same, tokens split over the pool's threads (each token's bits as above).
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
          std::span<const int32_t> positions, std::span<const float> inv_freq, RotaryPairing pairing, int64_t offset,
          float sign, ThreadPool& pool);

// The angles of one batch's rotations: cos and sin of positions[t] * inv_freq[i], worked out
// once and reused while the positions and the frequencies stay the same (every layer's q and k
// in an engine step: 2 x n_layer calls). Rows of the table: [n_tokens][n_rot], a token's n_rot/2
// cosines, then its n_rot/2 sines. Tables of the last kSlots frequency sets are kept (Gemma 3
// alternates a local and a global set).
class RopeAngles {
 public:
  const float* table(std::span<const int32_t> positions, std::span<const float> inv_freq, ThreadPool& pool);

 private:
  struct Slot {
    std::vector<int32_t> positions;
    std::vector<float> inv_freq;
    std::vector<float> angles;
  };
  static constexpr int kSlots = 4;
  Slot slots_[kSlots];
  int next_ = 0;
};

// rope (above) with the angles of RopeAngles::table for the same positions and inv_freq: the
// same bits, without the cos and sin.
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* angles,
          RotaryPairing pairing, int64_t offset, float sign, ThreadPool& pool);

// gate[i] = silu(gate[i]) * up[i], n elements.
void silu_mul(float* gate, const float* up, int64_t n);

// gate[i] = gelu_tanh(gate[i]) * up[i], n elements (GeGLU with the tanh approximation of GELU:
// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), PyTorch's gelu(approximate="tanh")).
void gelu_tanh_mul(float* gate, const float* up, int64_t n);

// The same over the pool's threads (a prefill's or a decode batch's rows; the same bits).
void silu_mul(float* gate, const float* up, int64_t n, ThreadPool& pool);
void gelu_tanh_mul(float* gate, const float* up, int64_t n, ThreadPool& pool);

// x[i] += y[i], n elements, over the pool's threads.
void add(float* x, const float* y, int64_t n, ThreadPool& pool);

// The scalar loops of silu_mul and gelu_tanh_mul, whatever the kernel tier (the oracle).
void silu_mul_reference(float* gate, const float* up, int64_t n);
void gelu_tanh_mul_reference(float* gate, const float* up, int64_t n);

// In-place softmax over n elements.
void softmax(float* x, int64_t n);

// x[i] = cap * tanh(x[i] / cap), n elements (Gemma's logit soft-capping); cap > 0. Over the
// pool's threads, with a vector tanh where the kernel tier is AVX-512 (within 4e-7 of the
// reference's, relative).
void soft_cap(float* x, int64_t n, float cap, ThreadPool& pool);
// Its scalar loop (std::tanh), whatever the tier: the oracle.
void soft_cap_reference(float* x, int64_t n, float cap);

// Mixture-of-experts routing of one token. logits: [n_expert] router outputs. Picks the k
// experts of highest softmax probability (ties: lower index first) into ids[0..k), best
// first, with their probabilities in weights[0..k); with `renormalize` the k weights are
// divided by their sum (Qwen3-MoE's norm_topk_prob). Softmax over all experts, then top-k.
void route_top_k(const float* logits, int64_t n_expert, int64_t k, bool renormalize, int32_t* ids,
                 float* weights);

// RMSNorm over every head of a [n_rows, n_heads, head_dim] tensor (QK-norm) is rms_norm with
// n_rows * n_heads rows of head_dim elements: heads are contiguous.

}  // namespace deepinfer::cpu
