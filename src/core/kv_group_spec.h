// KvGroupSpec: one group of layers whose KV shares a kind of block table, as plain data.
//
// A model declares its groups (Model::kv_groups: kind, layers, row shape, window), whoever sizes
// the cache fills in the element type, block size and pool sizes, the backend allocates the
// memory (backend::KvCache), and the block manager (src/kv) keeps one pool and one table per
// request for each group. Nothing else knows how many groups there are:
//   Llama, SmolLM2, Qwen      one full group of every layer;
//   Gemma 3                   a full group (global layers) and a sliding group (local layers);
//   DeepSeek V4               a sliding ring of K=V rows (every layer), compressed rows
//                             (tokens_per_row = m: CSA's main KV and index keys, HCA's KV) and
//                             each compressor's per-token frontier (model/arch/deepseek_v4.cpp).
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
  // DeepSeek V4's compressed rows: row w summarises positions w*m .. w*m + m - 1 (m =
  // tokens_per_row) and is written once, by the step that holds position w*m + m - 1; every later
  // query may read it. Append-only and a function of the prefix alone, so full blocks are
  // published to the prefix cache as kFull's are; a request that takes a hit never writes rows
  // below its shared prefix (StepSequence::first_write), not even while it replays.
  kCompressed,
  // A compressor's frontier: per-token rows (V4: each token's kv and gate projections) that are
  // read back only while their window is open, i.e. within the last `window` positions. Not
  // prefix-cached: after a hit the replay (as for kSlidingWindow) rebuilds them, since the
  // replay covers the widest window of every windowed group.
  kCompressorState,
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
  int64_t window = 0;              // kSlidingWindow, kCompressorState: positions a query sees, its own included
  // Rows hold K only, and V takes no memory: DeepSeek V4 reads its shared K=V rows as values too,
  // and its compressed rows and index keys are keys only. block_bytes() and the backends' block
  // copies (read_block / write_block) then cover K alone.
  bool k_only = false;

  // Set by whoever sizes the cache (the engine, a test, a single-sequence context).
  DType dtype = DType::kF16;       // element type of K and V (f16 or f32)
  int64_t block_size = 16;         // tokens per block; a multiple of tokens_per_row
  int64_t n_blocks = 0;            // blocks in the group's pool

  bool prefix_cached() const { return kind == KvGroupKind::kFull || kind == KvGroupKind::kCompressed; }
  // Only the last `window` positions are read (their blocks are the ones a step needs).
  bool windowed() const { return kind == KvGroupKind::kSlidingWindow || kind == KvGroupKind::kCompressorState; }
  int64_t rows_per_block() const { return block_size / tokens_per_row; }
  int64_t row_elems() const { return n_head_kv * head_dim; }  // K (or V) elements of one row
  // K and V bytes of one block over all the group's layers (K alone when k_only).
  size_t block_bytes() const {
    return (k_only ? 1 : 2) * static_cast<size_t>(layers.size()) * static_cast<size_t>(rows_per_block() * row_elems()) *
           dtype_row_bytes(dtype, 1);
  }
};

}  // namespace deepinfer
