// Attention over paged KV caches (KvLayout): a tiled online softmax whose scores come 16 keys at
// a time from the keys-in-lanes K panels, key and value panels shared by the query heads of a KV
// head, and the per-key online softmax it is tested against (attention_reference;
// tests/unit/backend/ops_test.cpp).
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace deepinfer::cpu {

enum class Isa;  // quant_kernels.h

// Causal attention of n_tokens queries against their sequences' KV caches.
// q:   [n_tokens, n_head, head_dim]  (already rotated and not yet scaled)
// out: [n_tokens, n_head, head_dim]
// Query t belongs to sequence token_seq[t], sits at positions[t] and attends to that sequence's
// KV rows 0..positions[t] (or the last `sliding_window` of them), none below its sequence's
// min_position. Heads share KV in groups of
// n_head / n_head_kv (GQA). `scale` multiplies q·k.
struct AttentionShape {
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  float scale = 1.0f;
  int64_t sliding_window = 0;  // 0 = full causal attention; else a query at position p sees
                               // p-w+1..p (Mistral's convention: the window counts the query)
};

// The paged KV layout of one layer. A pool holds blocks of block_size positions (slots); slot
// `row` of the pool is position row % block_size of block row / block_size. Within a block each
// KV head owns a contiguous panel of block_size * head_dim elements:
//   K panel: [head_dim][block_size], a dimension's keys side by side, so that 16 keys' scores are
//            one vector FMA chain over the dimensions with no horizontal sums;
//   V panel: [block_size][head_dim], a position's values side by side, added into the output row.
// So a block is [n_head_kv][block_size * head_dim] for K and for V, and one head's keys of a
// block are one contiguous run of memory (what the hardware prefetchers follow).
struct KvLayout {
  int64_t block_size = 16;
  int64_t n_head_kv = 1;
  int64_t head_dim = 1;

  int64_t panel_elems() const { return block_size * head_dim; }
  int64_t block_elems() const { return n_head_kv * panel_elems(); }
  // First element of block `block`'s panel of KV head h (K or V: both pools are laid out alike).
  int64_t panel(int64_t block, int64_t h) const { return block * block_elems() + h * panel_elems(); }
  // Element of slot `row`'s K (or V) of KV head h, dimension i.
  int64_t k_index(int64_t row, int64_t h, int64_t i) const {
    return panel(row / block_size, h) + i * block_size + row % block_size;
  }
  int64_t v_index(int64_t row, int64_t h, int64_t i) const {
    return panel(row / block_size, h) + (row % block_size) * head_dim + i;
  }
};

// Writes one slot's K and V (n_head_kv * head_dim floats each, head after head) into a pool of
// KvLayout, as dtype elements (kF32 or kF16).
void store_kv(const KvLayout& layout, DType dtype, int64_t row, const float* k, const float* v, void* k_pool,
              void* v_pool);

// One sequence's KV for one layer: pools k and v of KvLayout{block_size, shape.n_head_kv,
// shape.head_dim} in `dtype` (kF32 or kF16), where position pos is slot
// block_table[pos / block_size] * block_size + pos % block_size. Every sequence of one attention
// call has the same dtype (they share a cache).
struct SequenceKv {
  const void* k = nullptr;
  const void* v = nullptr;
  const int32_t* block_table = nullptr;
  int64_t block_size = 16;
  // No KV exists below this position (SWA bounded replay rebuilt the window from here): queries
  // clamp their first key to it.
  int64_t min_position = 0;
  DType dtype = DType::kF32;

  int64_t row(int64_t pos) const {
    return static_cast<int64_t>(block_table[pos / block_size]) * block_size + pos % block_size;
  }
};

void attention(const AttentionShape& shape, const float* q, int64_t n_tokens, std::span<const int32_t> positions,
               std::span<const SequenceKv> sequences, std::span<const int32_t> token_seq, float* out,
               ThreadPool& pool);

// The same on the tile kernels of an instruction-set tier that cpu_has() reports (those of the
// next tier down where this build has none for it). The overload above runs the tier of the
// other CPU kernels, kernel_tier(): cpuid's best, capped by DEEPINFER_ISA. Tests compare the
// tiers on one machine with it.
void attention(const AttentionShape& shape, const float* q, int64_t n_tokens, std::span<const int32_t> positions,
               std::span<const SequenceKv> sequences, std::span<const int32_t> token_seq, float* out,
               ThreadPool& pool, Isa tier);

// The oracle: the same contract, one key at a time in plain order.
void attention_reference(const AttentionShape& shape, const float* q, int64_t n_tokens,
                         std::span<const int32_t> positions, std::span<const SequenceKv> sequences,
                         std::span<const int32_t> token_seq, float* out, ThreadPool& pool);

// Single sequence whose k and v are plain [n_rows, n_head_kv * head_dim] float32 rows, row =
// position (every token belongs to it): copied into a paged cache first. For tests and tools.
void attention(const AttentionShape& shape, const float* q, int64_t n_tokens, std::span<const int32_t> positions,
               const float* k, const float* v, float* out, ThreadPool& pool);

}  // namespace deepinfer::cpu
