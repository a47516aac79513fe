#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "backend/cpu/exp_avx2.h"
#include "backend/cpu/exp_avx512.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/vec_f32.h"
#include "core/half.h"
#include "core/check.h"

// The vector kernels need AVX-512 with byte/word masks (masked float16 loads).
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define DI_ATTENTION_AVX512 1
// GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation (masked moves,
// reductions), which its own uninitialised-use warnings then report.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// A build for a CPU without AVX-512 (-march=native there): the same tile kernels on 8 lanes.
#define DI_ATTENTION_AVX2 1
#include <immintrin.h>
#endif

namespace deepinfer::cpu {

namespace {

// Keys per softmax tile (a multiple of 16). 32 rather than 64: batched decode attention (64
// sequences x 320 keys) and one query at 8191 keys ran 7-12% faster, prefill the same (Emerald
// Rapids Xeon, bench ops).
constexpr int64_t kTile = 32;
constexpr int64_t kMaxRun = 64;  // query heads of one work item
// Consecutive query tokens of one sequence that share each key tile's loads: K and V panels are
// read from memory once per block instead of once per token (at 8K keys a token's share of a
// layer's KV is megabytes, past the L2).
constexpr int64_t kQueryBlock = 32;
// Keys are attended in segments of kSegment positions (a multiple of kTile, cut on the same
// grid): each segment's softmax state starts afresh and the segments' states are merged in
// position order (merge_state). A long context's segments can then go to different threads
// (decode with few heads) and give the bits of the one-thread walk, which does the same merges.
constexpr int64_t kSegment = 1024;
static_assert(kSegment % kTile == 0);

// Per query head: running max, running sum and the unnormalised output.
struct HeadState {
  float m;
  float l;
  float* acc;  // [head_dim]
};


// total <- the merge of total (earlier keys) and seg (the next segment's), both unnormalised:
// rescaled to their common max. An empty state (m = -inf, no keys) leaves the other as it is,
// bit for bit, so a context of one segment gives the unsegmented walk's bits.
inline void merge_state(HeadState& total, const HeadState& seg, int64_t d) {
  if (seg.m == -std::numeric_limits<float>::infinity()) return;
  if (total.m == -std::numeric_limits<float>::infinity()) {
    total.m = seg.m;
    total.l = seg.l;
    std::copy(seg.acc, seg.acc + d, total.acc);
    return;
  }
  const float m = std::max(total.m, seg.m);
  const float a = std::exp(total.m - m), b = std::exp(seg.m - m);
  total.l = std::fma(seg.l, b, total.l * a);
  int64_t i = 0;
#if defined(__AVX512F__)
  const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b);
  for (; i + 16 <= d; i += 16) {
    const __m512 earlier = _mm512_mul_ps(_mm512_loadu_ps(total.acc + i), va);
    _mm512_storeu_ps(total.acc + i, _mm512_fmadd_ps(_mm512_loadu_ps(seg.acc + i), vb, earlier));
  }
#elif defined(DI_ATTENTION_AVX2)
  const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b);
  for (; i + 8 <= d; i += 8) {
    const __m256 earlier = _mm256_mul_ps(_mm256_loadu_ps(total.acc + i), va);
    _mm256_storeu_ps(total.acc + i, _mm256_fmadd_ps(_mm256_loadu_ps(seg.acc + i), vb, earlier));
  }
#endif
  for (; i < d; ++i) total.acc[i] = std::fma(seg.acc[i], b, total.acc[i] * a);
  total.m = m;
}

// Up to 16 consecutive keys of one block: the panel offset of the first one's dimension 0 (its
// dimension i is block_size elements further per i), its index in the tile, the count.
struct KeyChunk {
  int64_t k;
  int64_t j;
  int64_t n;
};

// Cache lines to prefetch, a few at a time from inside the loops: the next tile's K and V panels
// while this tile is computed. Hardware prefetchers stop at a panel's end and the next panel is
// elsewhere (the block table's order); asking for all of its lines at once stalls on the
// core's few outstanding misses, so they go out at the pace of the arithmetic.
class LinePrefetcher {
 public:
  void reset() { n_ = cur_ = 0; }
  void add(const void* begin, size_t bytes) {
    DI_DCHECK(n_ < kMaxRanges);
    begin_[n_] = static_cast<const char*>(begin);
    end_[n_] = begin_[n_] + bytes;
    if (n_++ == 0) p_ = begin_[0];
  }
  void issue(int lines) {
    for (int i = 0; i < lines && cur_ < n_; ++i) {
      __builtin_prefetch(p_);
      p_ += 64;
      if (p_ >= end_[cur_] && ++cur_ < n_) p_ = begin_[cur_];
    }
  }

 private:
  static constexpr int kMaxRanges = 4;
  const char* begin_[kMaxRanges];
  const char* end_[kMaxRanges];
  const char* p_ = nullptr;
  int n_ = 0, cur_ = 0;
};

[[maybe_unused]] inline float widen(float x) { return x; }
[[maybe_unused]] inline float widen(uint16_t h) { return fp16_to_fp32(h); }

// The score q . k of one key (k: its dimension 0 in a K panel): even and odd dimensions in two
// FMA chains in dimension order, then their sum; score_chunks gives the same bits 16 at a time.
template <typename T>
inline float score_scalar(const float* q, const T* k, int64_t block_size, int64_t d) {
  float even = 0.0f, odd = 0.0f;
  int64_t i = 0;
  for (; i + 1 < d; i += 2) {
    even = std::fma(q[i], widen(k[i * block_size]), even);
    odd = std::fma(q[i + 1], widen(k[(i + 1) * block_size]), odd);
  }
  if (i < d) even = std::fma(q[i], widen(k[i * block_size]), even);
  return even + odd;
}

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

#if defined(DI_ATTENTION_AVX512)
// 16 cache elements as floats: float32 as they are, float16 widened (vcvtph2ps); the masked
// forms read only the lanes of `mask` (the others are zero and never touch memory). The
// widening is the zero-masking form with every lane set (the same instruction): GCC 12's
// _mm512_cvtph_ps passes an "undefined" vector that -Wmaybe-uninitialized reports.
inline __m512 widen16(__m256i h) { return _mm512_maskz_cvtph_ps(static_cast<__mmask16>(0xffff), h); }
inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load16(const uint16_t* p) { return widen16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
inline __m512 load16(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }
inline __m512 load16(const uint16_t* p, __mmask16 mask) { return widen16(_mm256_maskz_loadu_epi16(mask, p)); }

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
#endif

#if defined(DI_ATTENTION_AVX2)
// The AVX2 forms of the tile kernels (a build for a CPU without AVX-512): 8 lanes per vector,
// a chunk of up to 16 keys as two vectors. Per key and row the same arithmetic as above: a
// score is score_scalar's two FMA chains, a value sum goes in j order, so scores and values
// have the scalar path's bits. Partial vectors: float32 through lane masks, float16 (which
// has no masked 16-bit load) through a zero-padded copy.
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

// The online softmax step of R rows (as softmax_rows above: fixed-shape reductions, masked
// lanes -inf for the max and 0 for the sum).
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

inline void softmax_tile(float* s, int64_t n, int64_t n_rows, float scale, int64_t d, ExpFn, HeadState* hs) {
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
#endif

// One tile's step of the online softmax for one head: s[0..n) (n <= kTile) are the raw scores
// q.k; they become the tile's probabilities exp(scale * s - m) against the new running max m, and
// the head's sum and output are rescaled to that max. The tile's max and sum are vector
// reductions of fixed shape (masked lanes are -inf for the max and 0 for the sum), so a key's
// contribution does not depend on how many keys share its tile.
#if defined(DI_ATTENTION_AVX512)
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
inline void softmax_tile(float* s, int64_t n, int64_t n_rows, float scale, int64_t d, ExpFn, HeadState* hs) {
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
#elif !defined(DI_ATTENTION_AVX2)
inline void softmax_row(float* s, int64_t n, float scale, int64_t d, ExpFn exp_tile, HeadState& hs) {
  float tile_max = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    s[j] *= scale;
    tile_max = std::max(tile_max, s[j]);
  }
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

inline void softmax_tile(float* s, int64_t n, int64_t n_rows, float scale, int64_t d, ExpFn exp_tile, HeadState* hs) {
  for (int64_t x = 0; x < n_rows; ++x) softmax_row(s + x * kTile, n, scale, d, exp_tile, hs[x]);
}
#endif

// d float16 values into float32, exactly.
inline void widen_row(const uint16_t* v, int64_t d, float* dst) {
  int64_t i = 0;
#if defined(DI_ATTENTION_AVX512)
  for (; i + 16 <= d; i += 16) _mm512_storeu_ps(dst + i, load16(v + i));
#elif defined(DI_ATTENTION_AVX2)
  for (; i + 8 <= d; i += 8) _mm256_storeu_ps(dst + i, load8(v + i));
#endif
  for (; i < d; ++i) dst[i] = fp16_to_fp32(v[i]);
}

// A cache row as float32: the row itself, or its float16 elements widened into buf (d floats).
inline const float* row_f32(const float* base, int64_t offset, int64_t, float*) { return base + offset; }
inline const float* row_f32(const uint16_t* base, int64_t offset, int64_t d, float* buf) {
  widen_row(base + offset, d, buf);
  return buf;
}

inline const float* kv_row_f32(const void* base, DType dtype, int64_t offset, int64_t d, float* buf) {
  return dtype == DType::kF16 ? row_f32(static_cast<const uint16_t*>(base), offset, d, buf)
                              : row_f32(static_cast<const float*>(base), offset, d, buf);
}

// heads[x].acc += sum over j < n of p[x * kTile + j] * v(rows[j]) for the n_rows rows x: with
// head_dim a multiple of 64, kRowBlock rows share each value row's loads; else one row at a time.
// Every element sums in j order, so a row's bits do not depend on the rows beside it.
template <typename T>
inline void values_tile(HeadState* heads, const float* p, const T* v, const int64_t* rows, int64_t n,
                        int64_t n_rows, int64_t d, float* row_buf, LinePrefetcher& prefetch) {
#if defined(DI_ATTENTION_AVX512)
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
#elif defined(DI_ATTENTION_AVX2)
  if (d % 32 == 0) {
    int64_t x = 0;
    for (; x + kValueRows <= n_rows; x += kValueRows) {
      accumulate_values_run<kValueRows>(heads + x, p + x * kTile, v, rows, n, d, prefetch);
    }
    if (n_rows - x == 2) accumulate_values_run<2>(heads + x, p + x * kTile, v, rows, n, d, prefetch);
    if (n_rows - x == 1) accumulate_values_run<1>(heads + x, p + x * kTile, v, rows, n, d, prefetch);
    return;
  }
#endif
  (void)prefetch;
  for (int64_t j = 0; j < n; ++j) {
    const float* vj = row_f32(v, rows[j], d, row_buf);
    for (int64_t x = 0; x < n_rows; ++x) axpy_f32(heads[x].acc, p[x * kTile + j], vj, d);
  }
}

// Keys 0..n-1 of a float16 K panel chunk (dimension i at k + i * block_size) into a float32
// panel (dimension i at dst + i * dst_stride), exactly.
inline void widen_chunk(const uint16_t* k, int64_t block_size, int64_t n, int64_t d, float* dst, int64_t dst_stride,
                        LinePrefetcher& prefetch) {
#if defined(DI_ATTENTION_AVX512)
  const auto mask = static_cast<__mmask16>((1u << n) - 1);
  for (int64_t i = 0; i < d; ++i) {
    if (i % 4 == 0) prefetch.issue(1);
    _mm512_mask_storeu_ps(dst + i * dst_stride, mask, load16(k + i * block_size, mask));
  }
#elif defined(DI_ATTENTION_AVX2)
  const __m256i lo = lanes_below(n), hi = lanes_below(n - 8);
  for (int64_t i = 0; i < d; ++i) {
    if (i % 4 == 0) prefetch.issue(1);
    store8(dst + i * dst_stride, load8(k + i * block_size, std::min<int64_t>(n, 8), lo), n, lo);
    if (n > 8) store8(dst + i * dst_stride + 8, load8(k + i * block_size + 8, n - 8, hi), n - 8, hi);
  }
#else
  (void)prefetch;
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t e = 0; e < n; ++e) dst[i * dst_stride + e] = fp16_to_fp32(k[i * block_size + e]);
  }
#endif
}

// The query blocks of one attention call: runs of at most `limit` consecutive tokens of one
// sequence at consecutive positions (a prefill chunk), each token alone otherwise (decode).
// starts[b] is block b's first token; starts.back() == n_tokens.
void query_blocks(std::span<const int32_t> positions, std::span<const int32_t> token_seq, int64_t n_tokens,
                  int64_t limit, std::vector<int64_t>& starts) {
  starts.clear();
  for (int64_t t = 0; t < n_tokens; ++t) {
    const bool joins = !starts.empty() && t - starts.back() < limit && token_seq[t] == token_seq[t - 1] &&
                       positions[t] == positions[t - 1] + 1;
    if (!joins) starts.push_back(t);
  }
  starts.push_back(n_tokens);
}

// The first key a query at `position` sees: its window's first (when the shape has one), never
// below the sequence's min_position. Its last is `position` itself.
inline int64_t first_key(const AttentionShape& shape, const SequenceKv& seq, int64_t position) {
  const int64_t window_first = shape.sliding_window > 0 ? position - shape.sliding_window + 1 : 0;
  return std::max<int64_t>({0, window_first, seq.min_position});
}

// A row's output: its state's sum of values over its sum of weights.
inline void write_output(const HeadState& hs, int64_t d, float* out) {
  const float inv = 1.0f / hs.l;
  for (int64_t e = 0; e < d; ++e) out[e] = hs.acc[e] * inv;
}

// One segment of one query block's head run, for the split walk (see attention()): its
// partial states go to partials + partial, nt * run rows of [m, l, acc[head_dim]].
struct SegmentItem {
  int64_t blk;
  int64_t h0;
  int64_t seg;
  int64_t partial;
};

// Work items [begin, end) of attention() (see there), over a cache of element type T. An item is
// a query block and a run of query heads that share a KV head. The block's rows (tokens x heads)
// go through the key tiles together, so each tile's K and V panels are read from memory once for
// all of them rather than once per token; each row still sees exactly its own keys, in the same
// tiles, lanes and order as it would alone, so its result does not depend on its block.
// Without `split`, an item walks every segment of its keys and writes its rows' outputs; with
// it, item i is split[i], one segment, whose partial states go to `partials`.
template <typename T>
void attend_items(const AttentionShape& shape, const float* q, std::span<const int64_t> blocks,
                  std::span<const int32_t> positions, std::span<const SequenceKv> sequences,
                  std::span<const int32_t> token_seq, float* out, int64_t run, int64_t begin, int64_t end,
                  const SegmentItem* split, float* partials) {
  const int64_t d = shape.head_dim;
  const int64_t group = shape.n_head / shape.n_head_kv;
  const int64_t runs_per_token = shape.n_head / run;
  const int64_t n_blocks = static_cast<int64_t>(blocks.size()) - 1;
  const ExpFn exp_tile = exp_kernel();
  int64_t max_block = 1;
  for (int64_t b = 0; b < n_blocks; ++b) max_block = std::max(max_block, blocks[b + 1] - blocks[b]);
  const int64_t max_rows = max_block * run;
  thread_local std::vector<float> scratch;
  thread_local std::vector<HeadState> heads;
  thread_local std::vector<float> total_acc;
  thread_local std::vector<HeadState> totals;
  thread_local std::vector<const float*> q_rows;
  scratch.resize(static_cast<size_t>(max_rows * (d + kTile) + d));
  heads.resize(static_cast<size_t>(max_rows));
  total_acc.resize(static_cast<size_t>(max_rows * d));
  totals.resize(static_cast<size_t>(max_rows));
  q_rows.resize(static_cast<size_t>(max_rows));
  float* row_buf = scratch.data() + max_rows * (d + kTile);  // one widened row (generic paths)
  int64_t rows[kTile];  // the tile's value rows (element offsets)
  KeyChunk chunks[kTile];
  thread_local std::vector<float> stage;  // a float16 tile widened: K [d][kTile], V [kTile][d]
  stage.resize(static_cast<size_t>(2 * d * kTile));
  int64_t stage_rows[kTile];
  for (int64_t j = 0; j < kTile; ++j) stage_rows[j] = j * d;
  LinePrefetcher prefetch;
  DI_ICHECK(run <= kMaxRun);
  for (int64_t item = begin; item < end; ++item) {
    // Blocks in zigzag order (first, last, second, second to last, ...): a causal prefill's
    // cost grows with the position, and each thread's contiguous range of items then gets
    // as many cheap blocks as dear ones.
    const int64_t u = item / runs_per_token;
    const int64_t blk = split ? split[item].blk : (u % 2 == 0 ? u / 2 : n_blocks - 1 - u / 2);
    const int64_t t0 = blocks[blk], nt = blocks[blk + 1] - t0;
    const int64_t h0 = split ? split[item].h0 : (item % runs_per_token) * run;
    const int64_t kv_h = h0 / group;
    const SequenceKv& seq = sequences[static_cast<size_t>(token_seq[t0])];
    const T* kc = static_cast<const T*>(seq.k);
    const T* vc = static_cast<const T*>(seq.v);
    const KvLayout layout{seq.block_size, shape.n_head_kv, d};
    float* scores = scratch.data() + nt * run * d;  // [nt * run][kTile]
    // Token i of the block attends to keys first(i)..last(i); both grow with i.
    auto first_of = [&](int64_t i) { return first_key(shape, seq, positions[t0 + i]); };
    const int64_t lo = first_of(0), hi_all = positions[t0 + nt - 1];
    // Row x = i * run + r of the item is token i's query head h0 + r.
    for (int64_t x = 0; x < nt * run; ++x) q_rows[x] = q + ((t0 + x / run) * shape.n_head + h0 + x % run) * d;
    for (int64_t r = 0; r < nt * run; ++r) {
      totals[r] = {-std::numeric_limits<float>::infinity(), 0.0f, total_acc.data() + r * d};
    }
    const int64_t seg_first = split ? split[item].seg : lo / kSegment;
    const int64_t seg_last = split ? split[item].seg : hi_all / kSegment;
    for (int64_t seg = seg_first; seg <= seg_last; ++seg) {
      for (int64_t r = 0; r < nt * run; ++r) {
        heads[r] = {-std::numeric_limits<float>::infinity(), 0.0f, scratch.data() + r * d};
        std::fill(heads[r].acc, heads[r].acc + d, 0.0f);
      }
      const int64_t hi = std::min(hi_all, (seg + 1) * kSegment - 1);
      for (int64_t a = std::max(lo, seg * kSegment); a <= hi;) {
        // The tile: a..b-1, cut on a grid of positions (the same whatever the KV layout or block).
        const int64_t b = std::min(hi + 1, (a / kTile + 1) * kTile);
        const int64_t n = b - a;
        // The tile's keys in chunks of at most 16 within one block (K panels); V rows one by one.
        int64_t block = a / seq.block_size, offset = a % seq.block_size;
        int64_t n_chunks = 0;
        for (int64_t j = 0; j < n;) {
          const int64_t panel = layout.panel(seq.block_table[block], kv_h);
          const int64_t count = std::min({n - j, seq.block_size - offset, int64_t{16}});
          chunks[n_chunks++] = {panel + offset, j, count};
          for (int64_t c = 0; c < count; ++c) rows[j + c] = panel + (offset + c) * d;
          j += count;
          offset += count;
          if (offset == seq.block_size) {
            offset = 0;
            ++block;
          }
        }
        // The next tile's panels (those of the blocks it starts in): its first lines now, the rest
        // from the loops below (-25% time at 64 x 320 keys, bench ops).
        prefetch.reset();
        const int64_t next_last = std::min(block + (kTile - 1) / seq.block_size, hi / seq.block_size);
        for (const T* pool : {kc, vc}) {
          for (int64_t nb = block; nb <= next_last && nb < block + 2; ++nb) {
            const size_t bytes = static_cast<size_t>(layout.panel_elems()) * sizeof(T);
            prefetch.add(pool + layout.panel(seq.block_table[nb], kv_h), bytes);
          }
        }
        prefetch.issue(4);
        // Every token of the block against the tile's keys kp (panels of block size bs, chunks ch)
        // and value rows vp + rw[j].
        auto tokens_pass = [&](const auto* kp, const auto* vp, int64_t bs, const KeyChunk* ch, int64_t nch,
                               const int64_t* rw) {
          // Token i's keys in this tile: [k0(i), k1(i)). Both ends grow with i, so the tokens that
          // see the whole tile are one range [full0, full1): their rows (token, head) are
          // consecutive and go through the tile together, kRowBlock rows per register block.
          auto k0_of = [&](int64_t i) { return std::max(a, first_of(i)) - a; };
          auto k1_of = [&](int64_t i) { return std::min(b, int64_t{positions[t0 + i]} + 1) - a; };
          int64_t full0 = 0, full1 = 0;
          while (full0 < nt && k1_of(full0) < n) ++full0;
          full1 = full0;
          while (full1 < nt && k0_of(full1) == 0) ++full1;
          // Rows x0 <= x < x1 against keys [k0, k0 + nk) of the tile.
          auto rows_pass = [&](int64_t x0, int64_t x1, int64_t k0, int64_t nk) {
            float* sx = scores + x0 * kTile;
  #if defined(DI_ATTENTION_AVX512) || defined(DI_ATTENTION_AVX2)
            score_tile(q_rows.data() + x0, x1 - x0, d, kp, bs, ch, nch, sx, prefetch);
  #else
            for (int64_t x = x0; x < x1; ++x) {
              for (int64_t c = 0; c < nch; ++c) {
                for (int64_t e = 0; e < ch[c].n; ++e) {
                  scores[x * kTile + ch[c].j + e] = score_scalar(q_rows[x], kp + ch[c].k + e, bs, d);
                }
              }
            }
  #endif
            softmax_tile(sx + k0, nk, x1 - x0, shape.scale, d, exp_tile, heads.data() + x0);
            values_tile(heads.data() + x0, sx + k0, vp, rw + k0, nk, x1 - x0, d, row_buf, prefetch);
          };
          if (full0 < full1) rows_pass(full0 * run, full1 * run, 0, n);
          for (int64_t i = 0; i < nt; ++i) {
            if (i == full0) i = full1;
            if (i >= nt) break;
            const int64_t k0 = k0_of(i), k1 = k1_of(i);
            if (k1 > k0) rows_pass(i * run, (i + 1) * run, k0, k1 - k0);
          }
        };
        if constexpr (std::is_same_v<T, uint16_t>) {
          if (nt > 1) {
            // A float16 cache shared by several tokens: the tile widened to float32 once (exact),
            // so that the tokens' FMA loops read floats instead of each widening every element.
            // K as one [d][kTile] panel, V as [kTile][d] rows: the same values in other lanes.
            float* kt = stage.data();
            float* vt = kt + d * kTile;
            for (int64_t c = 0; c < n_chunks; ++c) {
              widen_chunk(kc + chunks[c].k, seq.block_size, chunks[c].n, d, kt + chunks[c].j, kTile, prefetch);
            }
            for (int64_t j = 0; j < n; ++j) widen_row(vc + rows[j], d, vt + j * d);
            KeyChunk staged[kTile / 16];
            int64_t n_staged = 0;
            for (int64_t j = 0; j < n; j += 16) staged[n_staged++] = {j, j, std::min<int64_t>(16, n - j)};
            tokens_pass(static_cast<const float*>(kt), static_cast<const float*>(vt), kTile, staged, n_staged,
                        stage_rows);
            a = b;
            continue;
          }
        }
        tokens_pass(kc, vc, seq.block_size, chunks, n_chunks, rows);
        a = b;
      }
      if (split) {
        for (int64_t r = 0; r < nt * run; ++r) {
          float* p = partials + split[item].partial + r * (d + 2);
          p[0] = heads[r].m;
          p[1] = heads[r].l;
          std::copy(heads[r].acc, heads[r].acc + d, p + 2);
        }
      } else {
        for (int64_t r = 0; r < nt * run; ++r) merge_state(totals[r], heads[r], d);
      }
    }
    if (split) continue;
    for (int64_t i = 0; i < nt; ++i) {
      for (int64_t r = 0; r < run; ++r) {
        write_output(totals[i * run + r], d, out + ((t0 + i) * shape.n_head + h0 + r) * d);
      }
    }
  }
}

}  // namespace

// Tiled online softmax. A work item is a block of consecutive tokens of one sequence (a single
// token in decode) and a run of query heads that share a KV head (all of the group when there are
// enough items to keep the threads busy, else one head), so each key and value row is read once
// for the block and the run. Keys go in tiles cut at multiples of kTile
// positions: scores of the tile, one max, one vector exponential, one rescale of the output per
// tile instead of per key; and in segments of kSegment positions, whose states merge in order.
// A head's arithmetic depends neither on the run it is in, nor on the batch, nor on the block
// size or table, nor on the threads: tiles and segments follow positions only, and a key's score
// is the same two FMA chains whichever chunk of lanes it is computed in.
//
// Decode over a long context with few items (one sequence, few KV heads) splits the work by
// segment instead: whole GQA groups per item, so that each KV head's keys are read once rather
// than once per query head, and the segments spread over the threads; a second pass merges each
// row's segments in order, as the one-item walk does.
void attention(const AttentionShape& shape, const float* q, int64_t n_tokens, std::span<const int32_t> positions,
               std::span<const SequenceKv> sequences, std::span<const int32_t> token_seq, float* out,
               ThreadPool& pool) {
  DI_ICHECK(shape.n_head % shape.n_head_kv == 0);
  if (n_tokens == 0) return;
  const DType dtype = sequences[0].dtype;
  for (const SequenceKv& seq : sequences) DI_ICHECK(seq.dtype == dtype);
  DI_ICHECK(dtype == DType::kF32 || dtype == DType::kF16);
  const int64_t group = shape.n_head / shape.n_head_kv;
  const int64_t threads = pool.n_threads();
  // A group wider than kMaxRun heads (multi-query attention with many heads) goes in runs of its
  // largest divisor up to kMaxRun.
  auto run_of = [&](int64_t want) {
    while (want > kMaxRun || group % want != 0) --want;
    return want;
  };
  int64_t run = run_of(n_tokens * shape.n_head_kv >= 4 * threads ? group : 1);
  // Query blocks as long as kQueryBlock while that leaves at least 4 items per thread.
  int64_t block_limit = kQueryBlock;
  while (block_limit > 1 && (n_tokens / block_limit) * (shape.n_head / run) < 4 * threads) block_limit /= 2;
  thread_local std::vector<int64_t> blocks;
  query_blocks(positions, token_seq, n_tokens, block_limit, blocks);
  const int64_t n_blocks = static_cast<int64_t>(blocks.size()) - 1;
  const std::span<const int64_t> block_span(blocks);
  auto first_of = [&](int64_t t) {
    return first_key(shape, sequences[static_cast<size_t>(token_seq[t])], positions[t]);
  };
  int64_t longest = 0;
  for (int64_t b = 0; b < n_blocks; ++b) {
    longest = std::max<int64_t>(longest, positions[blocks[b + 1] - 1] + 1 - first_of(blocks[b]));
  }
  // Scratch of the calling thread, reached from the pool's threads through the spans below (a
  // thread_local named inside a lambda would be the running thread's own).
  thread_local std::vector<SegmentItem> split_items;
  thread_local std::vector<float> partial_states;
  std::vector<SegmentItem>& split = split_items;
  split.clear();
  if (longest > kSegment && (run < group || n_blocks * (shape.n_head / run) < 2 * threads)) {
    run = run_of(group);
    const int64_t d = shape.head_dim;
    int64_t at = 0;
    for (int64_t b = 0; b < n_blocks; ++b) {
      const int64_t rows = (blocks[b + 1] - blocks[b]) * run;
      for (int64_t h0 = 0; h0 < shape.n_head; h0 += run) {
        for (int64_t seg = first_of(blocks[b]) / kSegment; seg <= positions[blocks[b + 1] - 1] / kSegment; ++seg) {
          split.push_back({b, h0, seg, at});
          at += rows * (d + 2);
        }
      }
    }
    partial_states.resize(static_cast<size_t>(at));
  }
  float* const partials = partial_states.data();
  auto items = [&](const SegmentItem* segs, int64_t begin, int64_t end) {
    if (dtype == DType::kF16) {
      attend_items<uint16_t>(shape, q, block_span, positions, sequences, token_seq, out, run, begin, end, segs,
                             partials);
    } else {
      attend_items<float>(shape, q, block_span, positions, sequences, token_seq, out, run, begin, end, segs,
                          partials);
    }
  };
  // Items one at a time to whichever thread is free: their keys differ (a batch's sequences
  // have their own lengths), and equal counts left one thread waiting 8% of a served Gemma 3
  // step's attention.
  if (split.empty()) {
    pool.parallel_chunks(n_blocks * (shape.n_head / run), 1,
                         [&](int, int64_t begin, int64_t end) { items(nullptr, begin, end); });
    return;
  }
  pool.parallel_chunks(static_cast<int64_t>(split.size()), 1,
                       [&](int, int64_t begin, int64_t end) { items(split.data(), begin, end); });
  // Each (block, run)'s segments are consecutive in `split`: merged in position order.
  thread_local std::vector<int64_t> first_items;
  std::vector<int64_t>& firsts = first_items;
  firsts.clear();
  for (size_t i = 0; i < split.size(); ++i) {
    const bool starts = i == 0 || split[i].blk != split[i - 1].blk || split[i].h0 != split[i - 1].h0;
    if (starts) firsts.push_back(static_cast<int64_t>(i));
  }
  firsts.push_back(static_cast<int64_t>(split.size()));
  const int64_t d = shape.head_dim;
  pool.parallel_for(static_cast<int64_t>(firsts.size()) - 1, [&](int, int64_t begin, int64_t end) {
    thread_local std::vector<float> acc;
    acc.resize(static_cast<size_t>(d));
    for (int64_t g = begin; g < end; ++g) {
      const SegmentItem& first = split[static_cast<size_t>(firsts[g])];
      const int64_t t0 = block_span[first.blk], nt = block_span[first.blk + 1] - t0;
      for (int64_t r = 0; r < nt * run; ++r) {
        HeadState total{-std::numeric_limits<float>::infinity(), 0.0f, acc.data()};
        for (int64_t i = firsts[g]; i < firsts[g + 1]; ++i) {
          float* p = partials + split[static_cast<size_t>(i)].partial + r * (d + 2);
          merge_state(total, HeadState{p[0], p[1], p + 2}, d);
        }
        write_output(total, d, out + ((t0 + r / run) * shape.n_head + first.h0 + r % run) * d);
      }
    }
  });
}

void attention_reference(const AttentionShape& shape, const float* q, int64_t n_tokens,
                         std::span<const int32_t> positions, std::span<const SequenceKv> sequences,
                         std::span<const int32_t> token_seq, float* out, ThreadPool& pool) {
  const int64_t d = shape.head_dim;
  const int64_t group = shape.n_head / shape.n_head_kv;
  DI_ICHECK(d <= 1024 && shape.n_head % shape.n_head_kv == 0);
  pool.parallel_for(n_tokens * shape.n_head, [&](int, int64_t begin, int64_t end) {
    float acc[1024], k_buf[1024], v_buf[1024];
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / shape.n_head;
      const int64_t h = item % shape.n_head;
      const int64_t kv_h = h / group;
      const SequenceKv& seq = sequences[static_cast<size_t>(token_seq[t])];
      const KvLayout layout{seq.block_size, shape.n_head_kv, d};
      const float* qh = q + (t * shape.n_head + h) * d;
      // Online softmax (one pass, running max): no score buffer, exact up to rounding.
      float m = -std::numeric_limits<float>::infinity();
      float l = 0.0f;
      std::fill(acc, acc + d, 0.0f);
      const int64_t window_first = shape.sliding_window > 0 ? positions[t] - shape.sliding_window + 1 : 0;
      const int64_t first = std::max<int64_t>({0, window_first, seq.min_position});
      for (int64_t j = first; j <= positions[t]; ++j) {
        const int64_t row = seq.row(j);
        for (int64_t i = 0; i < d; ++i) {
          const int64_t at = layout.k_index(row, kv_h, i);
          k_buf[i] = seq.dtype == DType::kF16 ? fp16_to_fp32(static_cast<const uint16_t*>(seq.k)[at])
                                              : static_cast<const float*>(seq.k)[at];
        }
        float dot = 0.0f;  // plain order: the oracle shares no kernel with the tiled path
        for (int64_t i = 0; i < d; ++i) dot += qh[i] * k_buf[i];
        const float s = dot * shape.scale;
        float rescale = 1.0f;
        if (s > m) {
          rescale = std::exp(m - s);
          l *= rescale;
          m = s;
        }
        const float p = std::exp(s - m);
        l += p;
        scale_add_f32(acc, rescale, p, kv_row_f32(seq.v, seq.dtype, layout.v_index(row, kv_h, 0), d, v_buf), d);
      }
      float* oh = out + (t * shape.n_head + h) * d;
      const float inv = 1.0f / l;
      for (int64_t i = 0; i < d; ++i) oh[i] = acc[i] * inv;
    }
  });
}

void store_kv(const KvLayout& layout, DType dtype, int64_t row, const float* k, const float* v, void* k_pool,
              void* v_pool) {
  const int64_t d = layout.head_dim;
  for (int64_t h = 0; h < layout.n_head_kv; ++h) {
    const float* kh = k + h * d;
    const float* vh = v + h * d;
    const int64_t k_at = layout.k_index(row, h, 0), v_at = layout.v_index(row, h, 0);
    if (dtype == DType::kF16) {
      auto* kd = static_cast<uint16_t*>(k_pool) + k_at;
      for (int64_t i = 0; i < d; ++i) kd[i * layout.block_size] = fp32_to_fp16(kh[i]);
      auto* vd = static_cast<uint16_t*>(v_pool) + v_at;
      for (int64_t i = 0; i < d; ++i) vd[i] = fp32_to_fp16(vh[i]);
    } else {
      DI_ICHECK(dtype == DType::kF32);
      auto* kd = static_cast<float*>(k_pool) + k_at;
      for (int64_t i = 0; i < d; ++i) kd[i * layout.block_size] = kh[i];
      std::copy(vh, vh + d, static_cast<float*>(v_pool) + v_at);
    }
  }
}

void attention(const AttentionShape& shape, const float* q, int64_t n_tokens, std::span<const int32_t> positions,
               const float* k, const float* v, float* out, ThreadPool& pool) {
  if (n_tokens == 0) return;
  const KvLayout layout{16, shape.n_head_kv, shape.head_dim};
  const int64_t n_rows = *std::max_element(positions.begin(), positions.begin() + n_tokens) + 1;
  const int64_t n_blocks = (n_rows + layout.block_size - 1) / layout.block_size;
  const int64_t kv_stride = shape.n_head_kv * shape.head_dim;
  std::vector<float> k_pool(static_cast<size_t>(n_blocks * layout.block_elems()));
  std::vector<float> v_pool(k_pool.size());
  for (int64_t row = 0; row < n_rows; ++row) {
    store_kv(layout, DType::kF32, row, k + row * kv_stride, v + row * kv_stride, k_pool.data(), v_pool.data());
  }
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  const SequenceKv seq{k_pool.data(), v_pool.data(), table.data(), layout.block_size};
  const std::vector<int32_t> zeros(static_cast<size_t>(n_tokens), 0);  // every token is in sequence 0
  attention(shape, q, n_tokens, positions, std::span<const SequenceKv>(&seq, 1), zeros, out, pool);
}

}  // namespace deepinfer::cpu
