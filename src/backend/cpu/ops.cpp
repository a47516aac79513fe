#include "backend/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "backend/cpu/packed.h"
#include "backend/cpu/quant.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/vec_f32.h"
#include "core/check.h"

namespace deepinfer::cpu {

namespace {
// Rows handed to one thread at a time: enough to amortise the split, small enough that two
// threads share a 576-row matrix evenly, and whole groups of packed rows.
constexpr int64_t kRowGrain = kPackRows;
// Rows of the weight kept hot in L1/L2 while every token of the batch streams past them.
constexpr int64_t kRowTile = 16;
// GEMM blocking: a block of weight rows (a few KiB, L1) meets a block of tokens (their
// quantized activations, tens of KiB, L2); the kernel tiles it further in registers.
constexpr int64_t kGemmRows = 32;
constexpr int64_t kGemmTokens = 64;
// Packed matrices: 16 groups of 16 rows per call (Gemma 3's 640 columns of Q8_0: 174 KB), which
// stay in L2 while the batch's token tiles pass over them and the kernel brings in the next
// call's.
constexpr int64_t kPackedGemmRows = 16 * kPackRows;

// Vector gated activations and soft cap of the kernel tier in use (AVX-512 or AVX2); null: the
// scalar loops below.
struct VectorKernels {
  GatedFn silu = nullptr;
  GatedFn gelu = nullptr;
  SoftCapFn soft_cap = nullptr;
};

const VectorKernels& vector_kernels() {
  static const VectorKernels k = [] {
    VectorKernels v;
    if (std::string_view(kernel_isa()) == "avx512") {
      v.silu = avx512::silu_mul_fn();
      v.gelu = avx512::gelu_tanh_mul_fn();
      v.soft_cap = avx512::soft_cap_fn();
    } else if (std::string_view(kernel_isa()) == "avx2") {
      v.silu = avx2::silu_mul_fn();
      v.gelu = avx2::gelu_tanh_mul_fn();
      v.soft_cap = avx2::soft_cap_fn();
    }
    return v;
  }();
  return k;
}
}  // namespace

namespace {

// The next row's lines on their way while this one is computed (a one-token product streams
// its matrix from memory row after row).
inline void prefetch_row(const uint8_t* row, size_t bytes) {
  for (size_t at = 0; at < bytes; at += 64) __builtin_prefetch(row + at);
}

// x's rows in the activation type the weight's dot product takes; x itself when that is f32.
// With `info_fn`, also the rows' packed-kernel infos, into scratch.act_info (one pass for every
// call of the kernel that follows).
const uint8_t* quantize_activations(DType act_type, const float* x, int64_t n_tokens, int64_t n_in,
                                    PackedActInfoFn info_fn, QuantScratch& scratch, ThreadPool& pool) {
  if (act_type == DType::kF32) return reinterpret_cast<const uint8_t*>(x);
  const size_t act_row_bytes = dtype_row_bytes(act_type, n_in);
  const size_t need = act_row_bytes * static_cast<size_t>(n_tokens);
  if (scratch.bytes.size() < need) scratch.bytes.resize(need);
  const int64_t infos_per_row = n_in / kPackedActBlock;
  if (info_fn != nullptr && scratch.act_info.size() < static_cast<size_t>(n_tokens * infos_per_row)) {
    scratch.act_info.resize(static_cast<size_t>(n_tokens * infos_per_row));
  }
  pool.parallel_for(n_tokens, [&](int, int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      uint8_t* row = scratch.bytes.data() + t * act_row_bytes;
      quantize_row(act_type, x + t * n_in, row, n_in);
      if (info_fn != nullptr) info_fn(row, act_row_bytes, 1, n_in, scratch.act_info.data() + t * infos_per_row);
    }
  });
  return scratch.bytes.data();
}

// matmul_rows (below) for a packed matrix; begin and end are multiples of kPackRows. `infos`:
// the activations' PackedActInfo where the kernel takes them.
void packed_rows(const MatmulOutput& m, const uint8_t* act, size_t act_row_bytes, const PackedActInfo* infos,
                 int64_t n_tokens, int64_t begin, int64_t end, float* y, int64_t ldy) {
  const WeightMatrix& w = *m.w;
  const PackedGemmFn gemm = packed_gemm_fn(w.dtype);
  DI_ICHECK(gemm != nullptr && begin % kPackRows == 0 && end % kPackRows == 0);
  DI_ICHECK(infos != nullptr || packed_act_info_fn(w.dtype) == nullptr);
  const size_t group_bytes = packed_group_bytes(w.dtype, w.n_in);
  const int64_t infos_per_row = w.n_in / kPackedActBlock;
  // One pass over the matrix (a decode batch): its weights come from memory, once (packed.h).
  const bool one_pass = n_tokens <= kGemmTokens;
  for (int64_t t0 = 0; t0 < n_tokens; t0 += kGemmTokens) {
    const int64_t nt = std::min(kGemmTokens, n_tokens - t0);
    const PackedActInfo* info = infos != nullptr ? infos + t0 * infos_per_row : nullptr;
    for (int64_t o0 = begin; o0 < end; o0 += kPackedGemmRows) {
      const int64_t nr = std::min(kPackedGemmRows, end - o0);
      float* yb = y + t0 * ldy + (o0 - begin);
      gemm(w.packed + (o0 / kPackRows) * group_bytes, group_bytes, nr / kPackRows, act + t0 * act_row_bytes,
           act_row_bytes, info, nt, w.n_in, yb, ldy, one_pass);
      if (m.bias) {
        for (int64_t t = 0; t < nt; ++t) {
          for (int64_t o = 0; o < nr; ++o) yb[t * ldy + o] += m.bias[o0 + o];
        }
      }
    }
  }
}

// Output rows [begin, end) of y = w x for every token, from activations `act`. Each output is
// computed by the same instructions whatever range it falls in, so neither the split between
// threads nor the batch size changes a token's result. `y` points at column `begin` of token
// 0's row, rows ldy apart (m.y is not read).
void matmul_rows(const MatmulOutput& m, const uint8_t* act, size_t act_row_bytes, const PackedActInfo* infos,
                 int64_t n_tokens, int64_t begin, int64_t end, float* y, int64_t ldy) {
  const WeightMatrix& w = *m.w;
  if (w.packed != nullptr) return packed_rows(m, act, act_row_bytes, infos, n_tokens, begin, end, y, ldy);
  const float* bias = m.bias;
  const size_t w_row_bytes = w.row_bytes();
  if (const GemmFn gemm = gemm_fn(w.dtype)) {
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kGemmTokens) {
      const int64_t nt = std::min(kGemmTokens, n_tokens - t0);
      for (int64_t o0 = begin; o0 < end; o0 += kGemmRows) {
        const int64_t nr = std::min(kGemmRows, end - o0);
        float* yb = y + t0 * ldy + (o0 - begin);
        gemm(w.data + o0 * w_row_bytes, w_row_bytes, nr, act + t0 * act_row_bytes, act_row_bytes, nt, w.n_in, yb,
             ldy);
        if (bias) {
          for (int64_t t = 0; t < nt; ++t) {
            for (int64_t o = 0; o < nr; ++o) yb[t * ldy + o] += bias[o0 + o];
          }
        }
      }
    }
    return;
  }
  for (int64_t o0 = begin; o0 < end; o0 += kRowTile) {
    const int64_t o1 = std::min(end, o0 + kRowTile);
    int64_t t = 0;
    // Four tokens at a time share each weight row's unpacking; results are identical to the
    // one-token path, so batching never changes a token's output.
    for (; t + 4 <= n_tokens; t += 4) {
      const void* a4[4] = {act + t * act_row_bytes, act + (t + 1) * act_row_bytes, act + (t + 2) * act_row_bytes,
                           act + (t + 3) * act_row_bytes};
      for (int64_t o = o0; o < o1; ++o) {
        float out[4];
        vec_dot_x4(w.dtype, w.data + o * w_row_bytes, a4, w.n_in, out);
        const float b = bias ? bias[o] : 0.0f;
        for (int c = 0; c < 4; ++c) y[(t + c) * ldy + (o - begin)] = out[c] + b;
      }
    }
    for (; t < n_tokens; ++t) {
      const uint8_t* a = act + t * act_row_bytes;
      float* yt = y + t * ldy;
      const bool prefetch = t == 0 && weight_prefetch();  // the first token reads the rows from memory
      for (int64_t o = o0; o < o1; ++o) {
        const float b = bias ? bias[o] : 0.0f;
        if (prefetch) prefetch_row(w.data + (o + 1) * w_row_bytes, w_row_bytes);
        yt[o - begin] = vec_dot(w.dtype, w.data + o * w_row_bytes, a, w.n_in) + b;
      }
    }
  }
}

}  // namespace

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, const float* bias,
            QuantScratch& scratch, ThreadPool& pool) {
  const MatmulOutput out{&w, y, bias};
  matmul_group(std::span(&out, 1), x, n_tokens, scratch, pool);
}

void matmul_group(std::span<const MatmulOutput> outputs, const float* x, int64_t n_tokens, QuantScratch& scratch,
                  ThreadPool& pool) {
  if (outputs.empty()) return;
  const WeightMatrix& first = *outputs[0].w;
  const DType act_type = vec_dot_type(first.dtype);
  for (const MatmulOutput& m : outputs) {
    if (m.w->n_in != first.n_in || vec_dot_type(m.w->dtype) != act_type ||
        (outputs.size() > 1 && m.w->n_out % kRowGrain != 0)) {
      // Different activation formats, or a matrix after which the rows laid end to end would
      // no longer start packed groups on a grain: one product after the other (never the case
      // for the projections models group today).
      for (const MatmulOutput& one : outputs) matmul(*one.w, x, n_tokens, one.y, one.bias, scratch, pool);
      return;
    }
  }
  // The packed-kernel infos depend on the activation type only: any packed output's function.
  PackedActInfoFn info_fn = nullptr;
  for (const MatmulOutput& m : outputs) {
    if (m.w->packed != nullptr && info_fn == nullptr) info_fn = packed_act_info_fn(m.w->dtype);
  }
  const uint8_t* act = quantize_activations(act_type, x, n_tokens, first.n_in, info_fn, scratch, pool);
  const PackedActInfo* infos = info_fn != nullptr ? scratch.act_info.data() : nullptr;
  const size_t act_row_bytes = dtype_row_bytes(act_type, first.n_in);
  int64_t total = 0;
  for (const MatmulOutput& m : outputs) total += m.w->n_out;
  // One parallel region over the outputs' rows laid end to end: one fan-out and one wait per
  // group instead of one per matrix.
  pool.parallel_for(
      total,
      [&](int, int64_t begin, int64_t end) {
        int64_t base = 0;
        for (const MatmulOutput& m : outputs) {
          const int64_t lo = std::max(begin, base), hi = std::min(end, base + m.w->n_out);
          if (lo < hi) matmul_rows(m, act, act_row_bytes, infos, n_tokens, lo - base, hi - base, m.y + (lo - base), m.w->n_out);
          base += m.w->n_out;
        }
      },
      kRowGrain);
}

namespace {

// The maxima of x[0, n) lane by lane (element i in lane i % kLanes, NaN never taken) over the
// whole rows of kLanes; returns where they end. kLanes independent maxima, which GCC 12 keeps
// scalar (one vmaxss each): fine for max_skipping_nan, which runs only on a tile that holds a
// new maximum of its row, not for the test every tile takes (any_above).
template <int64_t kLanes>
int64_t lane_maxima(const float* x, int64_t n, float (&lanes)[kLanes]) {
  for (float& l : lanes) l = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = x[i + j] > lanes[j] ? x[i + j] : lanes[j];
  }
  return i;
}

// The largest of x[0, n) (NaN never the largest; -inf where there is nothing else).
float max_skipping_nan(const float* x, int64_t n) {
  float lanes[16];
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = lane_maxima(x, n, lanes); i < n; ++i) m = x[i] > m ? x[i] : m;
  for (float l : lanes) m = l > m ? l : m;
  return m;
}

// Whether any of x[0, n) is larger than v (NaN never is). A plain or of comparisons, which the
// compiler turns into vector compares: 64 lanes of running maxima (lane_maxima) stayed scalar
// (vmaxss, one per element), and Gemma 3's greedy head by 14-16 tokens spent 1-1.5 of its
// 7-8 ms here.
bool any_above(const float* x, int64_t n, float v) {
  int above = 0;
  for (int64_t i = 0; i < n; ++i) above |= x[i] > v;
  return above != 0;
}

// Folds columns [first, first + n) of one row (x) into its first maximum so far: a later
// column wins only by being larger, and a column of NaN never wins.
void fold_first_max(const float* x, int64_t n, int64_t first, RowMax& best) {
  if (best.index >= 0 && !any_above(x, n, best.value)) return;
  const float m = max_skipping_nan(x, n);  // above best.value where there was one
  for (int64_t j = 0; j < n; ++j) {
    if (x[j] == m) {
      best = {m, first + j};
      return;
    }
  }
}

}  // namespace

void matmul_argmax(const WeightMatrix& w, const float* x, int64_t n_tokens, int32_t* best, QuantScratch& scratch,
                   ThreadPool& pool) {
  const DType act_type = vec_dot_type(w.dtype);
  const PackedActInfoFn info_fn = w.packed != nullptr ? packed_act_info_fn(w.dtype) : nullptr;
  const uint8_t* act = quantize_activations(act_type, x, n_tokens, w.n_in, info_fn, scratch, pool);
  const PackedActInfo* infos = info_fn != nullptr ? scratch.act_info.data() : nullptr;
  const size_t act_row_bytes = dtype_row_bytes(act_type, w.n_in);
  const auto n_threads = static_cast<size_t>(pool.n_threads());
  const auto tile = static_cast<size_t>(n_tokens * kPackedGemmRows);
  if (scratch.argmax_tiles.size() < n_threads * tile) scratch.argmax_tiles.resize(n_threads * tile);
  scratch.argmax_partial.assign(n_threads * static_cast<size_t>(n_tokens), RowMax{});
  const MatmulOutput m{&w, nullptr, nullptr};
  // Each thread's range in calls of kPackedGemmRows rows, each call's products into the
  // thread's tile (L2) and folded into the thread's maxima there, never written out.
  pool.parallel_for(
      w.n_out,
      [&](int thread, int64_t begin, int64_t end) {
        float* y = scratch.argmax_tiles.data() + static_cast<size_t>(thread) * tile;
        RowMax* part = scratch.argmax_partial.data() + static_cast<size_t>(thread * n_tokens);
        for (int64_t o0 = begin; o0 < end; o0 += kPackedGemmRows) {
          const int64_t nr = std::min(kPackedGemmRows, end - o0);
          matmul_rows(m, act, act_row_bytes, infos, n_tokens, o0, o0 + nr, y, kPackedGemmRows);
          for (int64_t t = 0; t < n_tokens; ++t) fold_first_max(y + t * kPackedGemmRows, nr, o0, part[t]);
        }
      },
      kRowGrain);
  // The threads' ranges are consecutive and in thread order: folding them in that order keeps
  // the first maximum.
  for (int64_t t = 0; t < n_tokens; ++t) {
    RowMax all;
    for (size_t th = 0; th < n_threads; ++th) {
      const RowMax& p = scratch.argmax_partial[th * static_cast<size_t>(n_tokens) + static_cast<size_t>(t)];
      if (p.index >= 0 && (all.index < 0 || p.value > all.value)) all = p;
    }
    best[t] = static_cast<int32_t>(std::max<int64_t>(all.index, 0));
  }
}

void argmax_rows(const float* y, int64_t n_rows, int64_t n, int32_t* best) {
  for (int64_t r = 0; r < n_rows; ++r) {
    RowMax b;
    fold_first_max(y + r * n, n, 0, b);
    best[r] = static_cast<int32_t>(std::max<int64_t>(b.index, 0));
  }
}

void matmul_reference(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, const float* bias,
                      QuantScratch& scratch, ThreadPool& pool) {
  const DType act_type = vec_dot_type(w.dtype);
  const size_t act_row_bytes = dtype_row_bytes(act_type, w.n_in);
  const size_t w_row_bytes = w.row_bytes();
  if (scratch.bytes.size() < act_row_bytes * static_cast<size_t>(n_tokens)) {
    scratch.bytes.resize(act_row_bytes * static_cast<size_t>(n_tokens));
  }
  for (int64_t t = 0; t < n_tokens; ++t) {
    ref::quantize_row(act_type, x + t * w.n_in, scratch.bytes.data() + t * act_row_bytes, w.n_in);
  }
  pool.parallel_for(n_tokens, [&](int, int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const uint8_t* a = scratch.bytes.data() + t * act_row_bytes;
      for (int64_t o = 0; o < w.n_out; ++o) {
        y[t * w.n_out + o] = ref::vec_dot(w.dtype, w.data + o * w_row_bytes, a, w.n_in) + (bias ? bias[o] : 0.0f);
      }
    }
  });
}

void gather_rows(const WeightMatrix& w, std::span<const int32_t> ids, float* y) {
  const size_t row_bytes = w.row_bytes();
  for (size_t t = 0; t < ids.size(); ++t) {
    DI_ICHECK(ids[t] >= 0 && ids[t] < w.n_out);
    if (w.packed != nullptr) {
      dequantize_packed_row(w.dtype, w.packed, w.n_in, ids[t], y + t * w.n_in);
      continue;
    }
    dequantize_row(w.dtype, w.data + static_cast<size_t>(ids[t]) * row_bytes, y + t * w.n_in, w.n_in);
  }
}

namespace {

// The sum of squares of x[0..n) in double, in an order any backend can follow: element i goes
// into partial sum i % 32 (a fused multiply-add, in element order), then the 32 partial sums
// fold pairwise 16 apart, 8, 4, 2, 1 (a warp's butterfly). Exact products, 32 short chains
// instead of one long one: the float result is the one-chain sum's but in the rarest ties.
double sum_of_squares(const float* x, int64_t n) {
  double lanes[32] = {};
  int64_t i = 0;
#if defined(__AVX512F__)
  __m512d acc[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
  for (; i + 32 <= n; i += 32) {
    for (int c = 0; c < 4; ++c) {
      // The zero-masking form with every lane set: GCC 12's _mm512_cvtps_pd passes an "undefined"
      // vector that -Wmaybe-uninitialized reports.
      const __m512d v = _mm512_maskz_cvtps_pd(static_cast<__mmask8>(0xff), _mm256_loadu_ps(x + i + 8 * c));
      acc[c] = _mm512_fmadd_pd(v, v, acc[c]);
    }
  }
  for (int c = 0; c < 4; ++c) _mm512_storeu_pd(lanes + 8 * c, acc[c]);
#endif
  for (; i < n; ++i) {
    const auto v = static_cast<double>(x[i]);
    lanes[i % 32] = std::fma(v, v, lanes[i % 32]);
  }
  for (int span = 16; span >= 1; span /= 2) {
    for (int j = 0; j < span; ++j) lanes[j] += lanes[j + span];
  }
  return lanes[0];
}

void rms_norm_rows(const float* x, const float* w, float eps, int64_t begin, int64_t end, int64_t n, float* out) {
  for (int64_t r = begin; r < end; ++r) {
    const float* xr = x + r * n;
    float* yr = out + r * n;
    // In double: the reference (PyTorch) reduces in float32 with pairwise sums, and double
    // keeps us at least as close to the exact value as it is.
    const double ss = sum_of_squares(xr, n);
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
    for (int64_t i = 0; i < n; ++i) yr[i] = xr[i] * inv * w[i];
  }
}

}  // namespace

void rms_norm(const float* x, const float* w, float eps, int64_t n_rows, int64_t n, float* out) {
  rms_norm_rows(x, w, eps, 0, n_rows, n, out);
}

namespace {

// A parallel region costs a few microseconds: below this many elements an op stays on the
// calling thread.
constexpr int64_t kMinParallelElements = 16384;

// fn(begin, end) over rows [0, n_rows) of row_elems elements each, split over the pool's threads
// when there is enough work: for ops whose rows are independent and computed alike wherever
// they run.
template <typename Fn>
void for_rows(ThreadPool& pool, int64_t n_rows, int64_t row_elems, const Fn& fn) {
  if (n_rows < 2 || n_rows * row_elems < kMinParallelElements) return fn(int64_t{0}, n_rows);
  pool.parallel_for(n_rows, [&](int, int64_t begin, int64_t end) { fn(begin, end); });
}

}  // namespace

void rms_norm(const float* x, const float* w, float eps, int64_t n_rows, int64_t n, float* out, ThreadPool& pool) {
  for_rows(pool, n_rows, n, [&](int64_t begin, int64_t end) { rms_norm_rows(x, w, eps, begin, end, n, out); });
}

namespace {

// A token's angles: row[i] = cos(pos * inv_freq[i]), row[half + i] = its sin, half = inv_freq.size().
void token_angles(int32_t position, std::span<const float> inv_freq, float* row) {
  const float pos = static_cast<float>(position);
  const size_t half = inv_freq.size();
  for (size_t i = 0; i < half; ++i) {
    const float theta = pos * inv_freq[i];
    row[i] = std::cos(theta);
    row[half + i] = std::sin(theta);
  }
}

// Token t's heads (xt: [n_heads, head_dim]) rotated by its angles (token_angles' row): the
// arithmetic every rope path shares, so that they give the same bits.
void rotate_token(float* xt, int64_t n_heads, int64_t head_dim, int64_t half, const float* angles,
                  RotaryPairing pairing, int64_t offset, float sign) {
  for (int64_t i = 0; i < half; ++i) {
    const float c = angles[i], s = sign * angles[half + i];
    const int64_t a = pairing == RotaryPairing::kInterleaved ? 2 * i : i;
    const int64_t b = pairing == RotaryPairing::kInterleaved ? 2 * i + 1 : i + half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* xh = xt + h * head_dim + offset;
      const float x0 = xh[a], x1 = xh[b];
      xh[a] = x0 * c - x1 * s;
      xh[b] = x0 * s + x1 * c;
    }
  }
}

}  // namespace

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
          std::span<const int32_t> positions, std::span<const float> inv_freq,
          RotaryPairing pairing, int64_t offset, float sign) {
  DI_ICHECK(static_cast<int64_t>(inv_freq.size()) * 2 == n_rot && offset >= 0 && offset + n_rot <= head_dim);
  thread_local std::vector<float> angles;
  angles.resize(static_cast<size_t>(n_rot));
  for (int64_t t = 0; t < n_tokens; ++t) {
    token_angles(positions[static_cast<size_t>(t)], inv_freq, angles.data());
    rotate_token(x + t * n_heads * head_dim, n_heads, head_dim, n_rot / 2, angles.data(), pairing, offset, sign);
  }
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
          std::span<const int32_t> positions, std::span<const float> inv_freq, RotaryPairing pairing, int64_t offset,
          float sign, ThreadPool& pool) {
  for_rows(pool, n_tokens, n_heads * head_dim, [&](int64_t begin, int64_t end) {
    rope(x + begin * n_heads * head_dim, end - begin, n_heads, head_dim, n_rot,
         positions.subspan(static_cast<size_t>(begin), static_cast<size_t>(end - begin)), inv_freq, pairing, offset,
         sign);
  });
}

const float* RopeAngles::table(std::span<const int32_t> positions, std::span<const float> inv_freq,
                               ThreadPool& pool) {
  auto same = [](const auto& kept, const auto& now) {
    return kept.size() == now.size() && std::equal(now.begin(), now.end(), kept.begin());
  };
  for (Slot& slot : slots_) {
    if (same(slot.positions, positions) && same(slot.inv_freq, inv_freq)) return slot.angles.data();
  }
  // A slot with these frequencies (the positions moved on: the next step), else the oldest.
  Slot* slot = nullptr;
  for (Slot& s : slots_) {
    if (same(s.inv_freq, inv_freq)) slot = &s;
  }
  if (slot == nullptr) {
    slot = &slots_[next_];
    next_ = (next_ + 1) % kSlots;
    slot->inv_freq.assign(inv_freq.begin(), inv_freq.end());
  }
  slot->positions.assign(positions.begin(), positions.end());
  const auto half = static_cast<int64_t>(inv_freq.size());
  const auto n_tokens = static_cast<int64_t>(positions.size());
  slot->angles.resize(static_cast<size_t>(n_tokens * 2 * half));
  float* angles = slot->angles.data();
  for_rows(pool, n_tokens, 16 * half, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) token_angles(positions[static_cast<size_t>(t)], inv_freq, angles + t * 2 * half);
  });
  return angles;
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* angles,
          RotaryPairing pairing, int64_t offset, float sign, ThreadPool& pool) {
  DI_ICHECK(n_rot % 2 == 0 && offset >= 0 && offset + n_rot <= head_dim);
  const int64_t half = n_rot / 2;
  for_rows(pool, n_tokens, n_heads * head_dim, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      rotate_token(x + t * n_heads * head_dim, n_heads, head_dim, half, angles + t * n_rot, pairing, offset, sign);
    }
  });
}

void silu_mul_reference(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void gelu_tanh_mul_reference(float* gate, const float* up, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  constexpr float kCubic = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    const float inner = kSqrt2OverPi * (g + kCubic * g * g * g);
    // 0.5 g (1 + tanh(inner)) as g / (1 + exp(-2 inner)): equal, without the cancellation of
    // 1 + tanh for very negative g.
    gate[i] = g / (1.0f + std::exp(-2.0f * inner)) * up[i];
  }
}

void silu_mul(float* gate, const float* up, int64_t n) {
  if (const GatedFn fast = vector_kernels().silu) return fast(gate, up, n);
  silu_mul_reference(gate, up, n);
}

void gelu_tanh_mul(float* gate, const float* up, int64_t n) {
  if (const GatedFn fast = vector_kernels().gelu) return fast(gate, up, n);
  gelu_tanh_mul_reference(gate, up, n);
}

namespace {

// fn(begin, end) over elements [0, n) in ranges of whole 64-element lines, split over the pool's
// threads when there is enough work (for_rows' threshold). The kernels compute every element
// alike, and a range starts on a line, so no element's value depends on the split.
template <typename Fn>
void for_elements(ThreadPool& pool, int64_t n, const Fn& fn) {
  constexpr int64_t kLine = 64;
  if (n < kMinParallelElements) return fn(int64_t{0}, n);
  pool.parallel_for((n + kLine - 1) / kLine,
                    [&](int, int64_t begin, int64_t end) { fn(begin * kLine, std::min(n, end * kLine)); });
}

}  // namespace

void silu_mul(float* gate, const float* up, int64_t n, ThreadPool& pool) {
  for_elements(pool, n, [&](int64_t begin, int64_t end) { silu_mul(gate + begin, up + begin, end - begin); });
}

void gelu_tanh_mul(float* gate, const float* up, int64_t n, ThreadPool& pool) {
  for_elements(pool, n, [&](int64_t begin, int64_t end) { gelu_tanh_mul(gate + begin, up + begin, end - begin); });
}

void add(float* x, const float* y, int64_t n, ThreadPool& pool) {
  for_elements(pool, n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] += y[i];
  });
}

void soft_cap_reference(float* x, int64_t n, float cap) {
  DI_ICHECK(cap > 0.0f);
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void soft_cap(float* x, int64_t n, float cap, ThreadPool& pool) {
  DI_ICHECK(cap > 0.0f);
  // libm's tanhf took 17 ms for 4 x 262144 logits (bench ops), every step of a capped model.
  const SoftCapFn fast = vector_kernels().soft_cap;
  for_elements(pool, n, [&](int64_t begin, int64_t end) {
    fast != nullptr ? fast(x + begin, end - begin, cap) : soft_cap_reference(x + begin, end - begin, cap);
  });
}

void route_top_k(const float* logits, int64_t n_expert, int64_t k, bool renormalize, int32_t* ids,
                 float* weights) {
  DI_ICHECK(k > 0 && k <= n_expert);
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t e = 0; e < n_expert; ++e) m = std::max(m, logits[e]);
  double sum = 0.0;
  for (int64_t e = 0; e < n_expert; ++e) sum += std::exp(static_cast<double>(logits[e] - m));
  // Selection by repeated scan: k and n_expert are small (8 of 128 at most in practice), and
  // this needs no buffer.
  double picked_sum = 0.0;
  for (int64_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int64_t e = 0; e < n_expert; ++e) {
      bool taken = false;
      for (int64_t i = 0; i < j; ++i) taken = taken || ids[i] == e;
      if (!taken && (best < 0 || logits[e] > logits[best])) best = static_cast<int32_t>(e);
    }
    ids[j] = best;
    const double p = std::exp(static_cast<double>(logits[best] - m)) / sum;
    weights[j] = static_cast<float>(p);
    picked_sum += p;
  }
  if (renormalize) {
    for (int64_t j = 0; j < k; ++j) weights[j] = static_cast<float>(weights[j] / picked_sum);
  }
}

void softmax(float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace deepinfer::cpu
