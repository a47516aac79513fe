// One request's scheduling state, owned by the engine thread.
//
// There are no prefill and decode phases: a request knows `tokens` (prompt, then generated
// tokens) and how many of them have KV computed; each step hands it tokens until the two meet.
// That one rule covers chunked prefill, prefix-cache hits and plain decoding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deepinfer/engine.h"
#include "kv/kv_cache_manager.h"

namespace deepinfer {

using kv::RequestId;

// kLoading: waiting for an admission hook (the KV store) to bring more of its prefix into the
// prefix cache; it holds no blocks and is not in the waiting queue meanwhile.
enum class RequestState { kWaiting, kLoading, kRunning, kFinished };

struct Request {
  RequestId id = 0;
  std::vector<int32_t> tokens;  // prompt followed by generated tokens
  int64_t n_prompt = 0;
  // Leading tokens whose KV is in the cache or being computed by a step in flight: schedule()
  // advances it, so the next step can be planned before the last one has finished.
  int64_t n_computed = 0;
  // Tokens sampled by steps in flight and not yet known (asynchronous scheduling plans a decode
  // one position past the known tokens; the engine fills the id in before that step runs).
  int64_t n_placeholders = 0;
  int64_t n_done = 0;  // leading positions whose passes have finished (update())
  // SWA bounded replay (models with sliding-window layers): after a prefix hit of n_shared
  // tokens, computing restarts at replay_start (<= n_shared) to rebuild the sliding layers'
  // window. Full-attention layers keep the shared rows below n_shared untouched, and sliding
  // layers see no KV below replay_start. Both 0 without a hit; set on each admission.
  int64_t n_shared = 0;
  int64_t replay_start = 0;
  int64_t max_tokens = 16;      // generated tokens allowed
  std::vector<int32_t> stop_token_ids;
  std::string cache_salt;
  // False while the request must compute its whole prompt itself (prompt logprobs need every
  // position's logits, which a prefix-cache hit would skip). Its blocks are still published.
  bool use_prefix_cache = true;
  int32_t priority = 0;         // smaller runs first under the priority policy (vLLM's convention)
  uint64_t arrival = 0;         // submission order, the tie-break everywhere
  RequestState state = RequestState::kWaiting;
  FinishReason finish = FinishReason::kNone;
  int32_t n_preemptions = 0;     // also the epoch of its scheduled chunks: a preempted
                                 // request's chunks in flight are discarded
  bool cancel_requested = false;
  // The admission hook has been asked about this admission (reset by preemption).
  bool hook_consulted = false;
  // Speculative decoding: tokens proposed to follow `tokens`, verified by the next decode chunk
  // (set by the engine before schedule(), cleared by update() and preemption).
  std::vector<int32_t> draft;

  int64_t n_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t n_generated() const { return n_tokens() - n_prompt; }
  // The chunk's outputs still apply: the request runs and was not preempted since planning it.
  bool live(int32_t epoch) const { return state == RequestState::kRunning && n_preemptions == epoch; }
};

}  // namespace deepinfer
