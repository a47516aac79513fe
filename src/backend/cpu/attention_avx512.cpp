// The AVX-512 tier of attention (attention_tier.h): the tile kernels on 16 lanes, masked loads
// and stores for a tile's partial chunks, float16 widened by vcvtph2ps, around the walk of
// attention_walk.inc. Compiled with -mavx512f -mavx512bw -mavx512vl (CMakeLists.txt) and run
// only where cpuid reports them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/cpu/attention_tier.h"
#include "backend/cpu/exp_avx512.h"
#include "core/check.h"
#include "core/half.h"

// The vector kernels need AVX-512 with byte/word masks (masked float16 loads).
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define DI_ATTENTION_AVX512 1
// GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation (masked moves,
// reductions), which its own uninitialised-use warnings then report.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

namespace deepinfer::cpu {

#if defined(DI_ATTENTION_AVX512)
namespace {

using namespace attn;

// 16 cache elements as floats: float32 as they are, float16 widened (vcvtph2ps); the masked
// forms read only the lanes of `mask` (the others are zero and never touch memory). The
// widening is the zero-masking form with every lane set (the same instruction): GCC 12's
// _mm512_cvtph_ps passes an "undefined" vector that -Wmaybe-uninitialized reports.
inline __m512 widen16(__m256i h) { return _mm512_maskz_cvtph_ps(static_cast<__mmask16>(0xffff), h); }
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) { return widen16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 load16(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }
inline __m512 load16(const uint16_t* p, __mmask16 mask) { return widen16(_mm256_maskz_loadu_epi16(mask, p)); }

// y += a * x
inline void axpy_f32(float* y, float a, const float* x, int64_t n) {
  int64_t i = 0;
  const __m512 va = _mm512_set1_ps(a);
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += a * x[i];
}

// d float16 values into float32, exactly.
inline void widen_row(const uint16_t* v, int64_t d, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) _mm512_storeu_ps(dst + i, load16(v + i));
  for (; i < d; ++i) dst[i] = fp16_to_fp32(v[i]);
}

#include "backend/cpu/attention_common.inc"

// Scores of R query rows (q[r]: head_dim floats) against one or two chunks of keys, 16 keys per
// vector (lanes = positions of a K panel, KvLayout); row r's scores go to s + r * kTile. Per key
// and row the arithmetic of score_scalar: even and odd dimensions in two FMA chains, in dimension
// order, then their sum. Two chunks and two chains keep 4R independent FMA chains in flight.
template <int R, typename T>
inline void score_chunks(const float* const* q, int64_t d, const T* k, int64_t block_size, const KeyChunk& a,
                         const KeyChunk* b, float* s, LinePrefetcher& prefetch) {
  const auto mask_a = static_cast<__mmask16>((1u << a.n) - 1);
  const auto mask_b = static_cast<__mmask16>(b ? (1u << b->n) - 1 : 0);
  const T* ka = k + a.k;
  const T* kb = k + (b ? b->k : a.k);
  // Accumulators of row r: ea[r], eb[r] (even dimensions, chunks a and b), oa[r], ob[r] (odd).
  __m512 ea[R], eb[R], oa[R], ob[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) ea[r] = eb[r] = oa[r] = ob[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 1 < d; i += 2) {
    prefetch.issue(1);
    const __m512 a0 = load16(ka + i * block_size, mask_a), b0 = load16(kb + i * block_size, mask_b);
    const __m512 a1 = load16(ka + (i + 1) * block_size, mask_a), b1 = load16(kb + (i + 1) * block_size, mask_b);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 q0 = _mm512_set1_ps(q[r][i]), q1 = _mm512_set1_ps(q[r][i + 1]);
      ea[r] = _mm512_fmadd_ps(q0, a0, ea[r]);
      eb[r] = _mm512_fmadd_ps(q0, b0, eb[r]);
      oa[r] = _mm512_fmadd_ps(q1, a1, oa[r]);
      ob[r] = _mm512_fmadd_ps(q1, b1, ob[r]);
    }
  }
  if (i < d) {  // odd head_dim: the last dimension is even
    const __m512 a0 = load16(ka + i * block_size, mask_a), b0 = load16(kb + i * block_size, mask_b);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 q0 = _mm512_set1_ps(q[r][i]);
      ea[r] = _mm512_fmadd_ps(q0, a0, ea[r]);
      eb[r] = _mm512_fmadd_ps(q0, b0, eb[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(s + r * kTile + a.j, mask_a, _mm512_add_ps(ea[r], oa[r]));
    if (b) _mm512_mask_storeu_ps(s + r * kTile + b->j, mask_b, _mm512_add_ps(eb[r], ob[r]));
  }
}

// Rows per register block of the tile kernels: 6 rows keep 24 accumulators (scores: 2 chunks x
// even/odd; values: 4 x 16 columns) and the operands in the 32 vector registers.
constexpr int kRowBlock = 6;

// Scores of n_rows query rows (q[x]) against the tile's chunks, kRowBlock rows at a time.
template <typename T>
inline void score_tile(const float* const* q, int64_t n_rows, int64_t d, const T* k, int64_t block_size,
                       const KeyChunk* chunks, int64_t n_chunks, float* s, LinePrefetcher& prefetch) {
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRowBlock) {
    for (int64_t c = 0; c < n_chunks; c += 2) {
      const KeyChunk* second = c + 1 < n_chunks ? &chunks[c + 1] : nullptr;
      const float* const* qr = q + r0;
      float* sr = s + r0 * kTile;
      switch (std::min<int64_t>(kRowBlock, n_rows - r0)) {
        case 1: score_chunks<1>(qr, d, k, block_size, chunks[c], second, sr, prefetch); break;
        case 2: score_chunks<2>(qr, d, k, block_size, chunks[c], second, sr, prefetch); break;
        case 3: score_chunks<3>(qr, d, k, block_size, chunks[c], second, sr, prefetch); break;
        case 4: score_chunks<4>(qr, d, k, block_size, chunks[c], second, sr, prefetch); break;
        case 5: score_chunks<5>(qr, d, k, block_size, chunks[c], second, sr, prefetch); break;
        default: score_chunks<6>(qr, d, k, block_size, chunks[c], second, sr, prefetch); break;
      }
    }
  }
}

// acc[0..d) += sum over j < n of p[j] * v(rows[j]), in j order per element, the accumulator in
// a register through the keys.
// The same for head_dim 16 * kChunks, the whole accumulator in registers: each value row is
// consumed at once (its cache lines together), and the chunks' FMA chains interleave. Each
// element sums in the same j order as the general loop below, so both give the same bits.
template <int kChunks, typename T>
inline void accumulate_values_fixed(float* acc, const float* p, const T* v, const int64_t* rows, int64_t n,
                                    LinePrefetcher& prefetch) {
  __m512 a[kChunks];
  for (int c = 0; c < kChunks; ++c) a[c] = _mm512_loadu_ps(acc + 16 * c);
  for (int64_t j = 0; j < n; ++j) {
    prefetch.issue(2);
    const __m512 pj = _mm512_set1_ps(p[j]);
    for (int c = 0; c < kChunks; ++c) a[c] = _mm512_fmadd_ps(pj, load16(v + rows[j] + 16 * c), a[c]);
  }
  for (int c = 0; c < kChunks; ++c) _mm512_storeu_ps(acc + 16 * c, a[c]);
}

// accumulate_values for the R heads of a run at once, head_dim a multiple of 64, in slabs of 64
// columns: each value row's slab is loaded (and widened) once for all R heads, and R x 4
// accumulators stay in registers through the keys. Per head and element the same j order, the
// same bits.
template <int R, typename T>
inline void accumulate_values_run(HeadState* heads, const float* scores, const T* v, const int64_t* rows, int64_t n,
                                  int64_t d, LinePrefetcher& prefetch) {
  for (int64_t col = 0; col < d; col += 64) {
    __m512 a[R][4];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < 4; ++c) a[r][c] = _mm512_loadu_ps(heads[r].acc + col + 16 * c);
    }
    for (int64_t j = 0; j < n; ++j) {
      prefetch.issue(2);
      for (int c = 0; c < 4; ++c) {
        const __m512 vj = load16(v + rows[j] + col + 16 * c);
        for (int r = 0; r < R; ++r) a[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(scores[r * kTile + j]), vj, a[r][c]);
      }
    }
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < 4; ++c) _mm512_storeu_ps(heads[r].acc + col + 16 * c, a[r][c]);
    }
  }
}

// One head: slabs of 128 columns (8 accumulators, 8 independent FMA chains), then 16 at a time.
template <typename T>
inline void accumulate_values(float* acc, const float* p, const T* v, const int64_t* rows, int64_t n, int64_t d,
                              LinePrefetcher& prefetch) {
  int64_t col = 0;
  for (; col + 128 <= d; col += 128) accumulate_values_fixed<8>(acc + col, p, v + col, rows, n, prefetch);
  if (col + 64 <= d) {
    accumulate_values_fixed<4>(acc + col, p, v + col, rows, n, prefetch);
    col += 64;
  }
  for (; col < d; col += 16) {
    __m512 a = _mm512_loadu_ps(acc + col);
    for (int64_t j = 0; j < n; ++j) a = _mm512_fmadd_ps(_mm512_set1_ps(p[j]), load16(v + rows[j] + col), a);
    _mm512_storeu_ps(acc + col, a);
  }
}

// One tile's step of the online softmax for one head: s[0..n) (n <= kTile) are the raw scores
// q.k; they become the tile's probabilities exp(scale * s - m) against the new running max m, and
// the head's sum and output are rescaled to that max. The tile's max and sum are vector
// reductions of fixed shape (masked lanes are -inf for the max and 0 for the sum), so a key's
// contribution does not depend on how many keys share its tile.
// R rows at once (row r: scores s + r * kTile, state hs[r]), each with exactly the one-row
// arithmetic: the rows' reductions are independent chains that overlap in the core.
template <int R>
inline void softmax_rows(float* s, int64_t n, float scale, int64_t d, HeadState* hs) {
  constexpr int kVecs = kTile / 16;
  __mmask16 mask[kVecs];
  for (int c = 0; c < kVecs; ++c) {
    const int64_t left = std::clamp<int64_t>(n - 16 * c, 0, 16);
    mask[c] = static_cast<__mmask16>((1u << left) - 1);
  }
  const __m512 vscale = _mm512_set1_ps(scale);
  const __m512 neg_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 v[R][kVecs];
  float m[R], rescale[R], sum[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    __m512 vmax = neg_inf;
    for (int c = 0; c < kVecs; ++c) {
      v[r][c] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask[c], s + r * kTile + 16 * c), vscale);
      vmax = _mm512_max_ps(vmax, _mm512_mask_mov_ps(neg_inf, mask[c], v[r][c]));
    }
    m[r] = std::max(hs[r].m, _mm512_reduce_max_ps(vmax));
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    // 0 on the first tile; exactly 1 (no call) while the running max holds.
    rescale[r] = m[r] == hs[r].m ? 1.0f : std::exp(hs[r].m - m[r]);
    const __m512 vm = _mm512_set1_ps(m[r]);
    __m512 vsum = _mm512_setzero_ps();
    for (int c = 0; c < kVecs; ++c) {
      const __m512 p = avx512::exp_ps(_mm512_sub_ps(v[r][c], vm));
      _mm512_mask_storeu_ps(s + r * kTile + 16 * c, mask[c], p);
      vsum = _mm512_add_ps(vsum, _mm512_maskz_mov_ps(mask[c], p));
    }
    sum[r] = _mm512_reduce_add_ps(vsum);
  }
  for (int r = 0; r < R; ++r) {
    hs[r].l = std::fma(hs[r].l, rescale[r], sum[r]);
    hs[r].m = m[r];
    if (rescale[r] != 1.0f) {
      const __m512 vr = _mm512_set1_ps(rescale[r]);
      int64_t i = 0;
      for (; i + 16 <= d; i += 16) _mm512_storeu_ps(hs[r].acc + i, _mm512_mul_ps(_mm512_loadu_ps(hs[r].acc + i), vr));
      for (; i < d; ++i) hs[r].acc[i] *= rescale[r];
    }
  }
}

// The tile's softmax step for n_rows rows (row x: scores s + x * kTile, state hs[x]).
inline void softmax_tile(float* s, int64_t n, int64_t n_rows, float scale, int64_t d, HeadState* hs) {
  for (int64_t x = 0; x < n_rows; x += kRowBlock) {
    float* sx = s + x * kTile;
    switch (std::min<int64_t>(kRowBlock, n_rows - x)) {
      case 1: softmax_rows<1>(sx, n, scale, d, hs + x); break;
      case 2: softmax_rows<2>(sx, n, scale, d, hs + x); break;
      case 3: softmax_rows<3>(sx, n, scale, d, hs + x); break;
      case 4: softmax_rows<4>(sx, n, scale, d, hs + x); break;
      case 5: softmax_rows<5>(sx, n, scale, d, hs + x); break;
      default: softmax_rows<6>(sx, n, scale, d, hs + x); break;
    }
  }
}

// heads[x].acc += sum over j < n of p[x * kTile + j] * v(rows[j]) for the n_rows rows x: with
// head_dim a multiple of 64, kRowBlock rows share each value row's loads; else one row at a time.
// Every element sums in j order, so a row's bits do not depend on the rows beside it.
template <typename T>
inline void values_tile(HeadState* heads, const float* p, const T* v, const int64_t* rows, int64_t n,
                        int64_t n_rows, int64_t d, float* row_buf, LinePrefetcher& prefetch) {
  if (d % 64 == 0) {
    for (int64_t x = 0; x < n_rows; x += kRowBlock) {
      HeadState* hs = heads + x;
      const float* px = p + x * kTile;
      switch (std::min<int64_t>(kRowBlock, n_rows - x)) {
        case 1: accumulate_values(hs->acc, px, v, rows, n, d, prefetch); break;
        case 2: accumulate_values_run<2>(hs, px, v, rows, n, d, prefetch); break;
        case 3: accumulate_values_run<3>(hs, px, v, rows, n, d, prefetch); break;
        case 4: accumulate_values_run<4>(hs, px, v, rows, n, d, prefetch); break;
        case 5: accumulate_values_run<5>(hs, px, v, rows, n, d, prefetch); break;
        default: accumulate_values_run<6>(hs, px, v, rows, n, d, prefetch); break;
      }
    }
    return;
  }
  if (d % 16 == 0) {
    for (int64_t x = 0; x < n_rows; ++x) accumulate_values(heads[x].acc, p + x * kTile, v, rows, n, d, prefetch);
    return;
  }
  values_rows(heads, p, v, rows, n, n_rows, d, row_buf);
}

// Keys 0..n-1 of a float16 K panel chunk (dimension i at k + i * block_size) into a float32
// panel (dimension i at dst + i * dst_stride), exactly.
inline void widen_chunk(const uint16_t* k, int64_t block_size, int64_t n, int64_t d, float* dst, int64_t dst_stride,
                        LinePrefetcher& prefetch) {
  const auto mask = static_cast<__mmask16>((1u << n) - 1);
  for (int64_t i = 0; i < d; ++i) {
    if (i % 4 == 0) prefetch.issue(1);
    _mm512_mask_storeu_ps(dst + i * dst_stride, mask, load16(k + i * block_size, mask));
  }
}

#include "backend/cpu/attention_walk.inc"

}  // namespace
#endif

attn::AttendItemsFn attn::avx512_attend_items(DType cache_type) {
#if defined(DI_ATTENTION_AVX512)
  return cache_type == DType::kF16 ? attend_items<uint16_t> : attend_items<float>;
#else
  (void)cache_type;
  return nullptr;
#endif
}

}  // namespace deepinfer::cpu
