// What attention.cpp shares with its instruction-set tiers (attention_avx2.cpp,
// attention_avx512.cpp): the tiling grid, the split walk's work items, and each tier's walk over
// the work items. Each tier compiles the same walk (attention_walk.inc) around its own tile
// kernels; attention.cpp picks one at run time, so one binary runs the vector tiles of the CPU
// it finds (DEEPINFER_NATIVE=OFF included).
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/attention.h"
#include "core/dtype.h"

namespace deepinfer::cpu::attn {

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

// One segment of one query block's head run, for the split walk (see attention()): its
// partial states go to partials + partial, nt * run rows of [m, l, acc[head_dim]].
struct SegmentItem {
  int64_t blk;
  int64_t h0;
  int64_t seg;
  int64_t partial;
};

// Work items [begin, end) of attention(): query blocks `blocks` (starts[b], then n_tokens) times
// runs of `run` query heads (attention_walk.inc says how). Without `split` an item walks all of
// its keys and writes its rows' outputs; with it item i is split[i], one segment of keys, whose
// partial states go to `partials`.
using AttendItemsFn = void (*)(const AttentionShape& shape, const float* q, std::span<const int64_t> blocks,
                               std::span<const int32_t> positions, std::span<const SequenceKv> sequences,
                               std::span<const int32_t> token_seq, float* out, int64_t run, int64_t begin,
                               int64_t end, const SegmentItem* split, float* partials);

// The walk of each tier for a cache element type (kF32 or kF16); nullptr where the compiler could
// not target the tier. Call a vector tier's only where cpu_has() says the CPU runs it.
AttendItemsFn scalar_attend_items(DType cache_type);
AttendItemsFn avx2_attend_items(DType cache_type);    // AVX2, FMA, F16C
AttendItemsFn avx512_attend_items(DType cache_type);  // AVX-512 F, BW, VL

}  // namespace deepinfer::cpu::attn
