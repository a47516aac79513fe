// Attention over paged KV caches (attention.h): the split of a call into work items, the tier
// that walks them, chosen at run time (attention_tier.h: AVX-512, AVX2, or the scalar tier
// below), the per-key reference, and the KV writes.
#include "backend/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "backend/cpu/attention_tier.h"
#include "backend/cpu/quant_kernels.h"
#include "backend/cpu/vec_f32.h"
#include "core/check.h"
#include "core/half.h"

namespace deepinfer::cpu {

namespace {

using namespace attn;

// The scalar tier: the walk of the vector tiers one key at a time, for CPUs without AVX2 (and
// to compare the tiers against on any CPU).

// y += a * x
inline void axpy_f32(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// d float16 values into float32, exactly.
inline void widen_row(const uint16_t* v, int64_t d, float* dst) {
  for (int64_t i = 0; i < d; ++i) dst[i] = fp16_to_fp32(v[i]);
}

#include "backend/cpu/attention_common.inc"

inline float widen(float x) { return x; }
inline float widen(uint16_t h) { return fp16_to_fp32(h); }

// The score q . k of one key (k: its dimension 0 in a K panel): even and odd dimensions in two
// FMA chains in dimension order, then their sum; the vector tiers give the same bits 8 or 16 keys at a time.
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

// Raw scores of n_rows query rows against the tile's chunks, one key at a time.
template <typename T>
inline void score_tile(const float* const* q, int64_t n_rows, int64_t d, const T* k, int64_t block_size,
                       const KeyChunk* chunks, int64_t n_chunks, float* s, LinePrefetcher&) {
  for (int64_t x = 0; x < n_rows; ++x) {
    for (int64_t c = 0; c < n_chunks; ++c) {
      for (int64_t e = 0; e < chunks[c].n; ++e) {
        s[x * kTile + chunks[c].j + e] = score_scalar(q[x], k + chunks[c].k + e, block_size, d);
      }
    }
  }
}

// One tile's step of the online softmax for one head: s[0..n) (n <= kTile) are the raw scores
// q.k; they become the tile's probabilities exp(scale * s - m) against the new running max m, and
// the head's sum and output are rescaled to that max.
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

inline void softmax_tile(float* s, int64_t n, int64_t n_rows, float scale, int64_t d, HeadState* hs) {
  const ExpFn exp_tile = exp_kernel();
  for (int64_t x = 0; x < n_rows; ++x) softmax_row(s + x * kTile, n, scale, d, exp_tile, hs[x]);
}

template <typename T>
inline void values_tile(HeadState* heads, const float* p, const T* v, const int64_t* rows, int64_t n,
                        int64_t n_rows, int64_t d, float* row_buf, LinePrefetcher&) {
  values_rows(heads, p, v, rows, n, n_rows, d, row_buf);
}

// Keys 0..n-1 of a float16 K panel chunk (dimension i at k + i * block_size) into a float32
// panel (dimension i at dst + i * dst_stride), exactly.
inline void widen_chunk(const uint16_t* k, int64_t block_size, int64_t n, int64_t d, float* dst, int64_t dst_stride,
                        LinePrefetcher&) {
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t e = 0; e < n; ++e) dst[i * dst_stride + e] = fp16_to_fp32(k[i * block_size + e]);
  }
}

#include "backend/cpu/attention_walk.inc"

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

// The walk of `tier` for the cache type, or of the next tier down where this build has none.
AttendItemsFn attend_items_of(Isa tier, DType cache_type) {
  AttendItemsFn fn = nullptr;
  if (tier == Isa::kAvx512) fn = avx512_attend_items(cache_type);
  if (!fn && tier >= Isa::kAvx2) fn = avx2_attend_items(cache_type);
  return fn ? fn : scalar_attend_items(cache_type);
}

}  // namespace

attn::AttendItemsFn attn::scalar_attend_items(DType cache_type) {
  return cache_type == DType::kF16 ? attend_items<uint16_t> : attend_items<float>;
}

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
  attention(shape, q, n_tokens, positions, sequences, token_seq, out, pool, kernel_tier());
}

void attention(const AttentionShape& shape, const float* q, int64_t n_tokens, std::span<const int32_t> positions,
               std::span<const SequenceKv> sequences, std::span<const int32_t> token_seq, float* out,
               ThreadPool& pool, Isa tier) {
  DI_ICHECK(shape.n_head % shape.n_head_kv == 0);
  DI_ICHECK(cpu_has(tier));
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
  const AttendItemsFn attend = attend_items_of(tier, dtype);
  auto items = [&](const SegmentItem* segs, int64_t begin, int64_t end) {
    attend(shape, q, block_span, positions, sequences, token_seq, out, run, begin, end, segs, partials);
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
