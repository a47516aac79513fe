// Attention over paged or contiguous KV caches: a tiled online softmax (a vector exponential
// per tile of keys, key and value rows shared by the query heads of a KV head), and the
// per-key online softmax it is tested against (attention_reference; tests/unit/backend/ops_test.cpp).
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace deepinfer::cpu {

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

// One sequence's KV for one layer. k, v: [n_rows, n_head_kv * head_dim] elements of `dtype`
// (kF32 or kF16), where a position's row is block_table[pos / block_size] * block_size +
// pos % block_size (paged), or simply pos when block_table is null (contiguous). Every sequence
// of one attention call has the same dtype (they share a cache).
struct SequenceKv {
  const void* k = nullptr;
  const void* v = nullptr;
  const int32_t* block_table = nullptr;
  int64_t block_size = 1;
  // No KV exists below this position (SWA bounded replay rebuilt the window from here): queries
  // clamp their first key to it.
  int64_t min_position = 0;
  DType dtype = DType::kF32;

  int64_t row(int64_t pos) const {
    return block_table ? static_cast<int64_t>(block_table[pos / block_size]) * block_size + pos % block_size : pos;
  }
};

void attention(const AttentionShape& shape, const float* q, int64_t n_tokens, std::span<const int32_t> positions,
               std::span<const SequenceKv> sequences, std::span<const int32_t> token_seq, float* out,
               ThreadPool& pool);

// The oracle: the same contract, one key at a time in plain order.
void attention_reference(const AttentionShape& shape, const float* q, int64_t n_tokens,
                         std::span<const int32_t> positions, std::span<const SequenceKv> sequences,
                         std::span<const int32_t> token_seq, float* out, ThreadPool& pool);

// Single contiguous sequence (every token belongs to it).
void attention(const AttentionShape& shape, const float* q, int64_t n_tokens, std::span<const int32_t> positions,
               const float* k, const float* v, float* out, ThreadPool& pool);

}  // namespace deepinfer::cpu
