// KvGroupSpec: one group of layers whose KV shares a kind of block table, as plain data.
//
// A model declares its groups (Model::kv_groups: kind, layers, row shape, window), whoever sizes
// the cache fills in the element type, block size and pool sizes, the backend allocates the
// memory (backend::KvCache), and the block manager (src/kv) keeps one pool and one table per
// request for each group. Nothing else knows how many groups there are:
//   Llama, SmolLM2, Qwen      one full group of every layer;
//   Gemma 3                   a full group (global layers) and a sliding group (local layers);
//   DeepSeek V4 (to come)     a sliding ring, compressed rows (tokens_per_row = m), index keys
//                             and per-sequence compressor state.
// Lives in core because the backend, model, kv and engine layers all read it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace deepinfer {

enum class KvGroupKind {
  // Every position stays for the request's life; full blocks are published to the prefix cache.
  kFull,
  // A query at position p sees p - window + 1 .. p: blocks wholly below that go back to the pool
  // while the request runs. Not prefix-cached; rebuilt after a hit by SWA bounded replay.
  kSlidingWindow,
};

std::string_view kv_group_kind_name(KvGroupKind kind);

struct KvGroupSpec {
  // Declared by the model.
  std::string name;                // "full", "sliding": how statistics and errors name it
  KvGroupKind kind = KvGroupKind::kFull;
  std::vector<int32_t> layers;     // model layers whose KV lives here, ascending
  int64_t n_head_kv = 0;           // a row holds K and V of n_head_kv heads of head_dim each
  int64_t head_dim = 0;
  int64_t tokens_per_row = 1;      // 1: a row per token; m: one row summarises m tokens
  int64_t window = 0;              // kSlidingWindow: positions a query sees, its own included

  // Set by whoever sizes the cache (the engine, a test, a single-sequence context).
  DType dtype = DType::kF16;       // element type of K and V (f16 or f32)
  int64_t block_size = 16;         // tokens per block; a multiple of tokens_per_row
  int64_t n_blocks = 0;            // blocks in the group's pool

  bool prefix_cached() const { return kind == KvGroupKind::kFull; }
  int64_t rows_per_block() const { return block_size / tokens_per_row; }
  int64_t row_elems() const { return n_head_kv * head_dim; }  // K (or V) elements of one row
  // K and V bytes of one block over all the group's layers.
  size_t block_bytes() const {
    return 2 * static_cast<size_t>(layers.size()) * static_cast<size_t>(rows_per_block() * row_elems()) *
           dtype_row_bytes(dtype, 1);
  }
};

}  // namespace deepinfer
