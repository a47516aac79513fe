// deepinfer's engine API: many requests share one model, one KV cache and one step loop.
//
// Engine::create loads the model and starts the engine thread, which owns all scheduling
// state. submit() validates a request and queues it, returning a handle; the handle streams
// TokenEvents (next() blocks) and can cancel. Handles and the Engine are safe to use from any
// thread; nothing here exposes tensors or engine internals. Destroying the Engine stops its
// thread: pending requests finish as cancelled.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "deepinfer/status.h"

namespace deepinfer {

struct EngineConfig {
  std::string model_path;               // GGUF file or Hugging Face directory
  int32_t threads = 0;                  // 0 = all cores
  int32_t block_size = 16;              // tokens per KV block
  int64_t kv_cache_tokens = 0;          // KV capacity in tokens; 0 = 16 full-length sequences or 1 GiB, the smaller
  int64_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 64;
  bool enable_prefix_caching = true;
  bool priority_scheduling = false;     // else first come, first served
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 16;
  std::vector<int32_t> stop_token_ids;  // generation ends after producing one of these
  std::string cache_salt;               // requests with different salts never share KV
  int32_t priority = 0;                 // smaller first, with priority_scheduling
};

enum class FinishReason { kNone, kStop, kLength, kCancelled };

struct TokenEvent {
  std::vector<int32_t> tokens;  // new tokens since the previous event
  FinishReason finish = FinishReason::kNone;  // set on the last event of a request
  int64_t n_cached_prompt_tokens = 0;
};

class RequestHandle {
 public:
  virtual ~RequestHandle() = default;
  // Blocks until new tokens or the end; nullopt after the final event was returned.
  virtual std::optional<TokenEvent> next() = 0;
  // The request stops within one engine step and its KV blocks are freed.
  virtual void cancel() = 0;
};

struct EngineStats {
  int64_t n_running = 0;
  int64_t n_waiting = 0;
  double kv_usage = 0.0;           // fraction of KV blocks in use
  int64_t prefix_queries = 0;      // prompt tokens looked up in the prefix cache
  int64_t prefix_hits = 0;         // of those, found
  int64_t n_steps = 0;
  int64_t n_preemptions = 0;
  double forward_seconds = 0.0;    // time inside forward passes
  double overhead_seconds = 0.0;   // step time outside them (scheduling, sampling, bookkeeping)
};

class Engine {
 public:
  virtual ~Engine() = default;
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& config);

  // INVALID_ARGUMENT (empty prompt, max_tokens < 1, token ids outside the vocabulary, bad
  // sampling parameters) or OUT_OF_RANGE (prompt + max_tokens beyond the context) before
  // anything is queued.
  virtual Result<std::shared_ptr<RequestHandle>> submit(GenerationRequest request) = 0;
  virtual EngineStats stats() const = 0;
  virtual int64_t n_vocab() const = 0;
  virtual int64_t max_context() const = 0;
};

}  // namespace deepinfer
