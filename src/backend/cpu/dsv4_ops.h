// DeepSeek V4's own ops on the CPU (backend.h, "DeepSeek V4 ops"): scalar loops in plain order,
// which serve as both the CPU kernels and the reference ("cpu-reference") for now. KV rows are
// read through KvRows, which knows a group's paged layout and element type.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "backend/backend.h"

namespace deepinfer::cpu {

// mHC of one token: see Queue::hyper_pre / hyper_post. post and comb null: the final head.
// pre_out (may be null) receives the pre weights.
void hyper_pre_row(const backend::HyperParams& p, int64_t d, const float* streams, const float* mixes,
                   const float* base, const float* scale, float* collapsed, float* post, float* comb,
                   float* pre_out);
void hyper_post_row(const backend::HyperParams& p, int64_t d, const float* streams, const float* x, const float* post,
                    const float* comb, float* out_streams);

// One token's V4 routing (Queue::route_sqrt_softplus). bias and fixed_ids may be null.
void route_sqrt_softplus_row(const float* logits, int64_t n_expert, const float* bias, const int32_t* fixed_ids,
                             int64_t k, float scale, int32_t* ids, float* weights);

// One compressed entry from its slots: kv[s], gate[s] (width head_dim each, gate with the
// position bias added), n_slots of them; valid[s] false for a slot that does not exist (CSA's
// first entry has no previous window). out [head_dim] = RMSNorm(sum_s softmax_s(gate) kv) * norm.
void compress_entry(int64_t head_dim, int64_t n_slots, const float* const* kv, const float* const* gate,
                    const bool* valid, const float* norm, float eps, float* out);

// Rope of one head in place: the trailing n_rot channels of x [head_dim] in interleaved pairs at
// `position` (sign -1: the inverse rotation).
void rope_trailing(float* x, int64_t head_dim, int64_t n_rot, float position, const float* inv_freq, float sign);

// One token's Engram update (Queue::engram_mix): streams [s * d] in place, kv [(s + 1) * d].
void engram_mix_row(int64_t s, int64_t d, float* streams, const float* kv, const float* weight, float eps);

// x [n] in place through `format` and back, block channels a scale (Queue::cache_round_trip).
void cache_round_trip_row(float* x, int64_t n, backend::CacheFormat format, int64_t block);

}  // namespace deepinfer::cpu
