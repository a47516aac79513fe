#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/vec_f32.h"
#include "core/half.h"
#include "core/check.h"

namespace deepinfer::cpu {

namespace {

constexpr int64_t kTile = 32;  // keys per softmax tile

// Per query head: running max, running sum and the unnormalised output.
struct HeadState {
  float m;
  float l;
  float* acc;  // [head_dim]
};


void exp_scalar(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
}

ExpFn exp_kernel() {
  static const ExpFn fn = [] {
    const ExpFn fast = cpu_has(Isa::kAvx512) ? avx512::exp_fn() : nullptr;
    return fast ? fast : exp_scalar;
  }();
  return fn;
}

// y += a * x
inline void axpy_f32(float* y, float a, const float* x, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 va = _mm512_set1_ps(a);
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
#elif defined(__AVX2__) && defined(__FMA__)
  const __m256 va = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] += a * x[i];
}

#if defined(__AVX512F__)
// Lane j of the result is the sum of v[j]'s 16 lanes. A transposing tree: pairs within 128-bit
// lanes (unpack), then quadruples (shuffle_ps), then across 128-bit lanes (shuffle_f32x4).
// Every lane's 16 terms are added in the same pattern, wherever its vector sits.
inline __m512 transpose_sum16(const __m512* v) {
  __m512 pairs[8];
  for (int i = 0; i < 8; ++i) {
    pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  __m512 quads[4];  // quads[g]: vectors 4g..4g+3, one per element of each 128-bit lane
  for (int g = 0; g < 4; ++g) {
    quads[g] = _mm512_add_ps(_mm512_shuffle_ps(pairs[2 * g], pairs[2 * g + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(pairs[2 * g], pairs[2 * g + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  const __m512 e01 = _mm512_add_ps(_mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 e23 = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_add_ps(_mm512_shuffle_f32x4(e01, e23, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_shuffle_f32x4(e01, e23, _MM_SHUFFLE(3, 1, 3, 1)));
}

// 16 cache elements as floats: float32 as they are, float16 widened (vcvtph2ps).
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// s[j] = q . k(rows[j]) for j < n <= 16, head_dim d a multiple of 16: one FMA chain per key,
// then one transposing reduction for all of them.
// The same for head_dim 16 * kChunks with the query in registers: each key row is read at once
// (its cache lines together). Each key's chain adds its chunks in the same order as the
// general loop below, so both give the same bits.
template <int kChunks, typename T>
inline void scores16_fixed(const float* q, const T* k, const int64_t* rows, int64_t n, float* s) {
  __m512 qc[kChunks];
  for (int c = 0; c < kChunks; ++c) qc[c] = _mm512_loadu_ps(q + 16 * c);
  __m512 acc[16];
  for (int64_t j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    for (int c = 0; c < kChunks; ++c) acc[j] = _mm512_fmadd_ps(qc[c], load16(k + rows[j] + 16 * c), acc[j]);
  }
  _mm512_mask_storeu_ps(s, static_cast<__mmask16>((1u << n) - 1), transpose_sum16(acc));
}

template <typename T>
inline void scores16(const float* q, const T* k, const int64_t* rows, int64_t n, int64_t d, float* s) {
  if (d == 64) return scores16_fixed<4>(q, k, rows, n, s);
  if (d == 128) return scores16_fixed<8>(q, k, rows, n, s);
  __m512 acc[16];
  for (int64_t j = 0; j < 16; ++j) acc[j] = _mm512_setzero_ps();
  for (int64_t c = 0; c < d; c += 16) {
    const __m512 qc = _mm512_loadu_ps(q + c);
    for (int64_t j = 0; j < n; ++j) acc[j] = _mm512_fmadd_ps(qc, load16(k + rows[j] + c), acc[j]);
  }
  _mm512_mask_storeu_ps(s, static_cast<__mmask16>((1u << n) - 1), transpose_sum16(acc));
}

// acc[0..d) += sum over j < n of p[j] * v(rows[j]), in j order per element, the accumulator in
// a register through the keys.
// The same for head_dim 16 * kChunks, the whole accumulator in registers: each value row is
// consumed at once (its cache lines together), and the chunks' FMA chains interleave. Each
// element sums in the same j order as the general loop below, so both give the same bits.
template <int kChunks, typename T>
inline void accumulate_values_fixed(float* acc, const float* p, const T* v, const int64_t* rows, int64_t n) {
  __m512 a[kChunks];
  for (int c = 0; c < kChunks; ++c) a[c] = _mm512_loadu_ps(acc + 16 * c);
  for (int64_t j = 0; j < n; ++j) {
    const __m512 pj = _mm512_set1_ps(p[j]);
    for (int c = 0; c < kChunks; ++c) a[c] = _mm512_fmadd_ps(pj, load16(v + rows[j] + 16 * c), a[c]);
  }
  for (int c = 0; c < kChunks; ++c) _mm512_storeu_ps(acc + 16 * c, a[c]);
}

// accumulate_values for the R heads of a run at once, head_dim 64: each value row is loaded
// (and widened) once for all of them. Per head and element the same j order, the same bits.
template <int R, typename T>
inline void accumulate_values_run64(HeadState* heads, const float* scores, const T* v, const int64_t* rows,
                                    int64_t n) {
  __m512 a[R][4];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < 4; ++c) a[r][c] = _mm512_loadu_ps(heads[r].acc + 16 * c);
  }
  for (int64_t j = 0; j < n; ++j) {
    for (int c = 0; c < 4; ++c) {
      const __m512 vj = load16(v + rows[j] + 16 * c);
      for (int r = 0; r < R; ++r) a[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(scores[r * kTile + j]), vj, a[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < 4; ++c) _mm512_storeu_ps(heads[r].acc + 16 * c, a[r][c]);
  }
}

template <typename T>
inline void accumulate_values(float* acc, const float* p, const T* v, const int64_t* rows, int64_t n, int64_t d) {
  if (d == 64) return accumulate_values_fixed<4>(acc, p, v, rows, n);
  if (d == 128) return accumulate_values_fixed<8>(acc, p, v, rows, n);
  for (int64_t c = 0; c < d; c += 16) {
    __m512 a = _mm512_loadu_ps(acc + c);
    for (int64_t j = 0; j < n; ++j) a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), load16(v + rows[j] + c), a);
    _mm512_storeu_ps(acc + c, a);
  }
}
#endif

// A cache row as float32: the row itself, or its float16 elements widened into buf (d floats).
inline const float* row_f32(const float* base, int64_t offset, int64_t, float*) { return base + offset; }
inline const float* row_f32(const uint16_t* base, int64_t offset, int64_t d, float* buf) {
  for (int64_t i = 0; i < d; ++i) buf[i] = fp16_to_fp32(base[offset + i]);
  return buf;
}

inline const float* kv_row_f32(const void* base, DType dtype, int64_t offset, int64_t d, float* buf) {
  return dtype == DType::kF16 ? row_f32(static_cast<const uint16_t*>(base), offset, d, buf)
                              : row_f32(static_cast<const float*>(base), offset, d, buf);
}

// Items [begin, end) of attention() (see there), over a cache of element type T.
template <typename T>
void attend_items(const AttentionShape& shape, const float* q, int64_t n_tokens, std::span<const int32_t> positions,
                  std::span<const SequenceKv> sequences, std::span<const int32_t> token_seq, float* out, int64_t run,
                  int64_t begin, int64_t end) {
  const int64_t d = shape.head_dim;
  const int64_t group = shape.n_head / shape.n_head_kv;
  const int64_t kv_stride = shape.n_head_kv * d;
  const int64_t runs_per_token = shape.n_head / run;
  const ExpFn exp_tile = exp_kernel();
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(run * (d + kTile) + d));
  float* row_buf = scratch.data() + run * (d + kTile);  // one widened row (generic paths)
  HeadState heads[64];
  int64_t rows[kTile];  // the tile's key and value offsets
  DI_ICHECK(run <= 64);
  for (int64_t item = begin; item < end; ++item) {
    // Tokens in zigzag order (first, last, second, second to last, ...): a causal prefill's
    // cost grows with the position, and each thread's contiguous range of items then gets
    // as many cheap tokens as dear ones.
    const int64_t u = item / runs_per_token;
    const int64_t t = u % 2 == 0 ? u / 2 : n_tokens - 1 - u / 2;
    const int64_t h0 = (item % runs_per_token) * run;
    const int64_t kv_h = h0 / group;
    const SequenceKv& seq = sequences[static_cast<size_t>(token_seq[t])];
    const T* kc = static_cast<const T*>(seq.k);
    const T* vc = static_cast<const T*>(seq.v);
    const float* q0 = q + (t * shape.n_head + h0) * d;
    float* scores = scratch.data() + run * d;  // [run][kTile]
    for (int64_t r = 0; r < run; ++r) {
      heads[r] = {-std::numeric_limits<float>::infinity(), 0.0f, scratch.data() + r * d};
      std::fill(heads[r].acc, heads[r].acc + d, 0.0f);
    }
    const int64_t last = positions[t];
    const int64_t window_first = shape.sliding_window > 0 ? last - shape.sliding_window + 1 : 0;
    const int64_t first = std::max<int64_t>({0, window_first, seq.min_position});
    int64_t block = first / seq.block_size, offset = first % seq.block_size;  // of key j0
    for (int64_t j0 = first; j0 <= last;) {
      // The tile: j0..j1-1, cut on a grid of positions (the same whatever the KV layout).
      const int64_t j1 = std::min(last + 1, (j0 / kTile + 1) * kTile);
      const int64_t n = j1 - j0;
      for (int64_t j = 0; j < n; ++j) {
        rows[j] = (seq.block_table ? static_cast<int64_t>(seq.block_table[block]) * seq.block_size + offset : j0 + j) *
                      kv_stride + kv_h * d;
        if (++offset == seq.block_size) {
          offset = 0;
          ++block;
        }
      }
      for (int64_t r = 0; r < run; ++r) {
        float* s = scores + r * kTile;
        const float* qh = q0 + r * d;
        float tile_max = -std::numeric_limits<float>::infinity();
#if defined(__AVX512F__)
        if (d % 16 == 0) {
          for (int64_t j = 0; j < n; j += 16) scores16(qh, kc, rows + j, std::min<int64_t>(16, n - j), d, s + j);
        } else {
          for (int64_t j = 0; j < n; ++j) s[j] = dot_f32(qh, row_f32(kc, rows[j], d, row_buf), d);
        }
#else
        for (int64_t j = 0; j < n; ++j) s[j] = dot_f32(qh, row_f32(kc, rows[j], d, row_buf), d);
#endif
        for (int64_t j = 0; j < n; ++j) {
          s[j] *= shape.scale;
          tile_max = std::max(tile_max, s[j]);
        }
        HeadState& hs = heads[r];
        const float m = std::max(hs.m, tile_max);
        const float rescale = std::exp(hs.m - m);  // 0 on the first tile
        for (int64_t j = 0; j < n; ++j) s[j] -= m;
        exp_tile(s, n);
        float sum = 0.0f;
        for (int64_t j = 0; j < n; ++j) sum += s[j];
        hs.l = hs.l * rescale + sum;
        hs.m = m;
        if (rescale != 1.0f) {
          for (int64_t i = 0; i < d; ++i) hs.acc[i] *= rescale;
        }
      }
#if defined(__AVX512F__)
      if (d % 16 == 0) {
        if (d == 64 && run == 2) {
          accumulate_values_run64<2>(heads, scores, vc, rows, n);
        } else if (d == 64 && run == 3) {
          accumulate_values_run64<3>(heads, scores, vc, rows, n);
        } else if (d == 64 && run == 4) {
          accumulate_values_run64<4>(heads, scores, vc, rows, n);
        } else {
          for (int64_t r = 0; r < run; ++r) accumulate_values(heads[r].acc, scores + r * kTile, vc, rows, n, d);
        }
      } else  // NOLINT(readability/braces): the generic loop below is the else branch
#endif
      {
        for (int64_t j = 0; j < n; ++j) {
          const float* vj = row_f32(vc, rows[j], d, row_buf);
          for (int64_t r = 0; r < run; ++r) axpy_f32(heads[r].acc, scores[r * kTile + j], vj, d);
        }
      }
      j0 = j1;
    }
    for (int64_t r = 0; r < run; ++r) {
      float* oh = out + (t * shape.n_head + h0 + r) * d;
      const float inv = 1.0f / heads[r].l;
      for (int64_t i = 0; i < d; ++i) oh[i] = heads[r].acc[i] * inv;
    }
  }
}

}  // namespace

// Tiled online softmax. A work item is one token and a run of query heads that share a KV head
// (all of the group when there are enough items to keep the threads busy, else one head), so
// each key and value row is read once for the run. Keys go in tiles cut at multiples of kTile
// positions: scores of the tile, one max, one vector exponential, one rescale of the output per
// tile instead of per key. A head's arithmetic depends neither on the run it is in, nor on the
// batch, nor on the KV layout (paged or contiguous, any block size): tiles follow positions only.
void attention(const AttentionShape& shape, const float* q, int64_t n_tokens, std::span<const int32_t> positions,
               std::span<const SequenceKv> sequences, std::span<const int32_t> token_seq, float* out,
               ThreadPool& pool) {
  DI_ICHECK(shape.n_head % shape.n_head_kv == 0);
  if (n_tokens == 0) return;
  const DType dtype = sequences[0].dtype;
  for (const SequenceKv& seq : sequences) DI_ICHECK(seq.dtype == dtype);
  DI_ICHECK(dtype == DType::kF32 || dtype == DType::kF16);
  const int64_t group = shape.n_head / shape.n_head_kv;
  const int64_t run = n_tokens * shape.n_head_kv >= 4 * pool.n_threads() ? group : 1;
  pool.parallel_for(n_tokens * (shape.n_head / run), [&](int, int64_t begin, int64_t end) {
    if (dtype == DType::kF16) {
      attend_items<uint16_t>(shape, q, n_tokens, positions, sequences, token_seq, out, run, begin, end);
    } else {
      attend_items<float>(shape, q, n_tokens, positions, sequences, token_seq, out, run, begin, end);
    }
  });
}

void attention_reference(const AttentionShape& shape, const float* q, int64_t n_tokens,
                         std::span<const int32_t> positions, std::span<const SequenceKv> sequences,
                         std::span<const int32_t> token_seq, float* out, ThreadPool& pool) {
  const int64_t d = shape.head_dim;
  const int64_t group = shape.n_head / shape.n_head_kv;
  const int64_t kv_stride = shape.n_head_kv * d;
  DI_ICHECK(d <= 1024 && shape.n_head % shape.n_head_kv == 0);
  pool.parallel_for(n_tokens * shape.n_head, [&](int, int64_t begin, int64_t end) {
    float acc[1024], k_buf[1024], v_buf[1024];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / shape.n_head;
      const int64_t h = item % shape.n_head;
      const int64_t kv_h = h / group;
      const SequenceKv& seq = sequences[static_cast<size_t>(token_seq[t])];
      const float* qh = q + (t * shape.n_head + h) * d;
      // Online softmax (one pass, running max): no score buffer, exact up to rounding.
      float m = -std::numeric_limits<float>::infinity();
      float l = 0.0f;
      std::fill(acc, acc + d, 0.0f);
      const int64_t window_first = shape.sliding_window > 0 ? positions[t] - shape.sliding_window + 1 : 0;
      const int64_t first = std::max<int64_t>({0, window_first, seq.min_position});
      for (int64_t j = first; j <= positions[t]; ++j) {
        const int64_t row = seq.row(j) * kv_stride + kv_h * d;
        const float s = dot_f32(qh, kv_row_f32(seq.k, seq.dtype, row, d, k_buf), d) * shape.scale;
        float rescale = 1.0f;
        if (s > m) {
          rescale = std::exp(m - s);
          l *= rescale;
          m = s;
        }
        const float p = std::exp(s - m);
        l += p;
        scale_add_f32(acc, rescale, p, kv_row_f32(seq.v, seq.dtype, row, d, v_buf), d);
      }
      float* oh = out + (t * shape.n_head + h) * d;
      const float inv = 1.0f / l;
      for (int64_t i = 0; i < d; ++i) oh[i] = acc[i] * inv;
    }
  });
}

void attention(const AttentionShape& shape, const float* q, int64_t n_tokens, std::span<const int32_t> positions,
               const float* k, const float* v, float* out, ThreadPool& pool) {
  const SequenceKv seq{k, v, nullptr, 1};
  // Every token is in sequence 0.
  thread_local std::vector<int32_t> zeros;
  if (static_cast<int64_t>(zeros.size()) < n_tokens) zeros.assign(static_cast<size_t>(n_tokens), 0);
  attention(shape, q, n_tokens, positions, std::span<const SequenceKv>(&seq, 1),
            std::span<const int32_t>(zeros.data(), static_cast<size_t>(n_tokens)), out, pool);
}

}  // namespace deepinfer::cpu
