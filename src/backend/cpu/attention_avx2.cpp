// The AVX2 tier of attention (attention_tier.h), for CPUs without AVX-512: the tile kernels on
// 8 lanes around the walk of attention_walk.inc, a chunk of up to 16 keys as two vectors. Per
// key and row the same arithmetic as the other tiers: a score is the two FMA chains of even and
// odd dimensions, a value sum goes in key order, so scores and values have the scalar tier's
// bits. Partial vectors: float32 through lane masks, float16 (which has no masked 16-bit load)
// through a zero-padded copy. Compiled with -mavx2 -mfma -mf16c (CMakeLists.txt) and run only
// where cpuid reports them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/attention_tier.h"
#include "backend/cpu/exp_avx2.h"
#include "core/check.h"
#include "core/half.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define DI_ATTENTION_AVX2 1
#include <immintrin.h>
#endif

namespace deepinfer::cpu {

#if defined(DI_ATTENTION_AVX2)
namespace {

using namespace attn;

inline __m256i lanes_below(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
// The first n (1..8) elements of p, zeros after; mask = lanes_below(n).
inline __m256 load8(const float* p, int64_t n, __m256i mask) { return n >= 8 ? load8(p) : _mm256_maskload_ps(p, mask); }
// v's first n (1..8) lanes to p. A masked store only for a partial vector: vmaskmovps stores are
// microcoded on AMD cores (Zen 3: prefill at 4.6K tokens spent a fifth of its attention time
// in them before the full vectors took plain stores).
inline void store8(float* p, __m256 v, int64_t n, __m256i mask) {
  if (n >= 8) {
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, mask, v);
  }
}
inline __m256 load8(const uint16_t* p, int64_t n, __m256i) {
  if (n >= 8) return load8(p);
  alignas(16) uint16_t padded[8] = {};
  std::memcpy(padded, p, static_cast<size_t>(n) * sizeof(uint16_t));
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(padded)));
}

// y += a * x
inline void axpy_f32(float* y, float a, const float* x, int64_t n) {
  int64_t i = 0;
  const __m256 va = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

// d float16 values into float32, exactly.
inline void widen_row(const uint16_t* v, int64_t d, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) _mm256_storeu_ps(dst + i, load8(v + i));
  for (; i < d; ++i) dst[i] = fp16_to_fp32(v[i]);
}

#include "backend/cpu/attention_common.inc"

inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// Scores of R query rows against one chunk (up to 16 keys: lanes 0..7, and 8..15 where kTwo),
// row r's to s + r * kTile + chunk.j. Even and odd dimensions in two FMA chains per lane.
template <int R, bool kTwo, typename T>
inline void score_chunk(const float* const* q, int64_t d, const T* k, int64_t block_size, const KeyChunk& ch,
                        float* s, LinePrefetcher& prefetch) {
  const int64_t n_lo = std::min<int64_t>(ch.n, 8), n_hi = ch.n - 8;
  const __m256i m_lo = lanes_below(n_lo), m_hi = lanes_below(n_hi);
  const T* kp = k + ch.k;
  __m256 e_lo[R], o_lo[R], e_hi[R], o_hi[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) e_lo[r] = o_lo[r] = e_hi[r] = o_hi[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 1 < d; i += 2) {
    prefetch.issue(1);
    const __m256 a0 = load8(kp + i * block_size, n_lo, m_lo), a1 = load8(kp + (i + 1) * block_size, n_lo, m_lo);
    __m256 b0, b1;
    if constexpr (kTwo) {
      b0 = load8(kp + i * block_size + 8, n_hi, m_hi);
      b1 = load8(kp + (i + 1) * block_size + 8, n_hi, m_hi);
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 q0 = _mm256_set1_ps(q[r][i]), q1 = _mm256_set1_ps(q[r][i + 1]);
      e_lo[r] = _mm256_fmadd_ps(q0, a0, e_lo[r]);
      o_lo[r] = _mm256_fmadd_ps(q1, a1, o_lo[r]);
      if constexpr (kTwo) {
        e_hi[r] = _mm256_fmadd_ps(q0, b0, e_hi[r]);
        o_hi[r] = _mm256_fmadd_ps(q1, b1, o_hi[r]);
      }
    }
  }
  if (i < d) {  // odd head_dim: the last dimension is even
    const __m256 a0 = load8(kp + i * block_size, n_lo, m_lo);
    __m256 b0;
    if constexpr (kTwo) b0 = load8(kp + i * block_size + 8, n_hi, m_hi);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 q0 = _mm256_set1_ps(q[r][i]);
      e_lo[r] = _mm256_fmadd_ps(q0, a0, e_lo[r]);
      if constexpr (kTwo) e_hi[r] = _mm256_fmadd_ps(q0, b0, e_hi[r]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    float* sr = s + r * kTile + ch.j;
    store8(sr, _mm256_add_ps(e_lo[r], o_lo[r]), n_lo, m_lo);
    if constexpr (kTwo) store8(sr + 8, _mm256_add_ps(e_hi[r], o_hi[r]), n_hi, m_hi);
  }
}

// Rows per register block of the AVX2 kernels: 2 rows of scores keep 8 accumulators, the four
// key vectors of a dimension pair and two broadcasts in the 16 registers; 3 rows of values
// keep 12 accumulators (3 x 32 columns).
constexpr int kScoreRows = 2, kValueRows = 3;

template <typename T>
inline void score_tile(const float* const* q, int64_t n_rows, int64_t d, const T* k, int64_t block_size,
                       const KeyChunk* chunks, int64_t n_chunks, float* s, LinePrefetcher& prefetch) {
  for (int64_t r0 = 0; r0 < n_rows; r0 += kScoreRows) {
    const bool pair = n_rows - r0 >= 2;
    for (int64_t c = 0; c < n_chunks; ++c) {
      const bool two = chunks[c].n > 8;
      const float* const* qr = q + r0;
      float* sr = s + r0 * kTile;
      if (pair) {
        two ? score_chunk<2, true>(qr, d, k, block_size, chunks[c], sr, prefetch)
            : score_chunk<2, false>(qr, d, k, block_size, chunks[c], sr, prefetch);
      } else {
        two ? score_chunk<1, true>(qr, d, k, block_size, chunks[c], sr, prefetch)
            : score_chunk<1, false>(qr, d, k, block_size, chunks[c], sr, prefetch);
      }
    }
  }
}

// The online softmax step of R rows (as the AVX-512 tier's softmax_rows: fixed-shape
// reductions, masked lanes -inf for the max and 0 for the sum).
template <int R>
inline void softmax_rows(float* s, int64_t n, float scale, int64_t d, HeadState* hs) {
  constexpr int kVecs = kTile / 8;
  __m256i mask[kVecs];
  for (int c = 0; c < kVecs; ++c) mask[c] = lanes_below(n - 8 * c);
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 neg_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 v[R][kVecs];
  float m[R], rescale[R], sum[R];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    __m256 vmax = neg_inf;
    for (int c = 0; c < kVecs; ++c) {
      v[r][c] = _mm256_mul_ps(load8(s + r * kTile + 8 * c, n - 8 * c, mask[c]), vscale);
      vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(neg_inf, v[r][c], _mm256_castsi256_ps(mask[c])));
    }
    m[r] = std::max(hs[r].m, hmax8(vmax));
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    rescale[r] = m[r] == hs[r].m ? 1.0f : std::exp(hs[r].m - m[r]);
    const __m256 vm = _mm256_set1_ps(m[r]);
    __m256 vsum = _mm256_setzero_ps();
    for (int c = 0; c < kVecs; ++c) {
      const __m256 p = avx2::exp_ps(_mm256_sub_ps(v[r][c], vm));
      if (n > 8 * c) store8(s + r * kTile + 8 * c, p, n - 8 * c, mask[c]);
      vsum = _mm256_add_ps(vsum, _mm256_and_ps(p, _mm256_castsi256_ps(mask[c])));
    }
    sum[r] = hsum8(vsum);
  }
  for (int r = 0; r < R; ++r) {
    hs[r].l = std::fma(hs[r].l, rescale[r], sum[r]);
    hs[r].m = m[r];
    if (rescale[r] != 1.0f) {
      const __m256 vr = _mm256_set1_ps(rescale[r]);
      int64_t i = 0;
      for (; i + 8 <= d; i += 8) _mm256_storeu_ps(hs[r].acc + i, _mm256_mul_ps(_mm256_loadu_ps(hs[r].acc + i), vr));
      for (; i < d; ++i) hs[r].acc[i] *= rescale[r];
    }
  }
}

inline void softmax_tile(float* s, int64_t n, int64_t n_rows, float scale, int64_t d, HeadState* hs) {
  int64_t x = 0;
  for (; x + 2 <= n_rows; x += 2) softmax_rows<2>(s + x * kTile, n, scale, d, hs + x);
  if (x < n_rows) softmax_rows<1>(s + x * kTile, n, scale, d, hs + x);
}

// heads[r].acc += sum over j < n of scores[r * kTile + j] * v(rows[j]) for R rows, head_dim a
// multiple of 32, in slabs of 32 columns: each value row's slab loaded (and widened) once for
// the R rows, R x 4 accumulators in registers through the keys; every element in j order.
template <int R, typename T>
inline void accumulate_values_run(HeadState* heads, const float* scores, const T* v, const int64_t* rows, int64_t n,
                                  int64_t d, LinePrefetcher& prefetch) {
  for (int64_t col = 0; col < d; col += 32) {
    __m256 a[R][4];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < 4; ++c) a[r][c] = _mm256_loadu_ps(heads[r].acc + col + 8 * c);
    }
    for (int64_t j = 0; j < n; ++j) {
      prefetch.issue(1);
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) {
        const __m256 vj = load8(v + rows[j] + col + 8 * c);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) a[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(scores[r * kTile + j]), vj, a[r][c]);
      }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < 4; ++c) _mm256_storeu_ps(heads[r].acc + col + 8 * c, a[r][c]);
    }
  }
}

// heads[x].acc += sum over j < n of p[x * kTile + j] * v(rows[j]) for the n_rows rows x: with
// head_dim a multiple of 32, kValueRows rows share each value row's loads; else one value row
// at a time. Every element sums in j order, so a row's bits do not depend on the rows beside it.
template <typename T>
inline void values_tile(HeadState* heads, const float* p, const T* v, const int64_t* rows, int64_t n,
                        int64_t n_rows, int64_t d, float* row_buf, LinePrefetcher& prefetch) {
  if (d % 32 == 0) {
    int64_t x = 0;
    for (; x + kValueRows <= n_rows; x += kValueRows) {
      accumulate_values_run<kValueRows>(heads + x, p + x * kTile, v, rows, n, d, prefetch);
    }
    if (n_rows - x == 2) accumulate_values_run<2>(heads + x, p + x * kTile, v, rows, n, d, prefetch);
    if (n_rows - x == 1) accumulate_values_run<1>(heads + x, p + x * kTile, v, rows, n, d, prefetch);
    return;
  }
  values_rows(heads, p, v, rows, n, n_rows, d, row_buf);
}

// Keys 0..n-1 of a float16 K panel chunk (dimension i at k + i * block_size) into a float32
// panel (dimension i at dst + i * dst_stride), exactly.
inline void widen_chunk(const uint16_t* k, int64_t block_size, int64_t n, int64_t d, float* dst, int64_t dst_stride,
                        LinePrefetcher& prefetch) {
  const __m256i lo = lanes_below(n), hi = lanes_below(n - 8);
  for (int64_t i = 0; i < d; ++i) {
    if (i % 4 == 0) prefetch.issue(1);
    store8(dst + i * dst_stride, load8(k + i * block_size, std::min<int64_t>(n, 8), lo), n, lo);
    if (n > 8) store8(dst + i * dst_stride + 8, load8(k + i * block_size + 8, n - 8, hi), n - 8, hi);
  }
}

#include "backend/cpu/attention_walk.inc"

}  // namespace
#endif

attn::AttendItemsFn attn::avx2_attend_items(DType cache_type) {
#if defined(DI_ATTENTION_AVX2)
  return cache_type == DType::kF16 ? attend_items<uint16_t> : attend_items<float>;
#else
  (void)cache_type;
  return nullptr;
#endif
}

}  // namespace deepinfer::cpu
