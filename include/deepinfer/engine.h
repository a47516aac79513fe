// deepinfer's engine API: many requests share one model, one KV cache and one step loop.
//
// Engine::create loads the model (and its tokenizer) and starts the engine thread, which owns
// all scheduling state. submit() validates a request and queues it, returning a handle; the
// handle streams TokenEvents and can cancel. Handles and the Engine are safe to use from any
// thread; nothing here exposes tensors or engine internals. Destroying the Engine stops its
// thread: pending requests finish as cancelled.
//
// Text and stop strings: when a request asks for text (detokenize, the default) each event
// carries the UTF-8 text its tokens added, never a partial character. Stop strings are matched
// on that text across token boundaries; text that might still become a stop string is held
// back until it cannot. The detokenizing runs in the handle, on the caller's thread, as the
// design wants (the engine thread only schedules, runs and samples); a stop-string match
// finishes the sequence (FinishReason::kStop) and the engine frees its blocks on its next step.
//
// n > 1: one handle streams the events of all n sequences, each tagged with its index; the
// sequences share the prompt's KV through the prefix cache (children start once the first
// sequence's prompt is computed). The handle ends after the last sequence's final event.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "deepinfer/status.h"

namespace deepinfer {

// Element type of the KV cache. f16 (llama.cpp's default) halves the cache's memory and the
// bytes each decode step reads; f32 keeps K and V exactly as the model computed them.
enum class KvCacheDtype { kF16, kF32 };

// Speculative decoding (docs/speculative-decoding.md): a drafter proposes the next tokens, one
// forward pass verifies them all, and the sequence keeps the longest prefix the target model
// agrees with plus one token of its own. Lossless: greedy output is token for token the plain
// engine's, and sampled output has the plain engine's distribution.
//   kNgram   the continuation of the latest earlier occurrence of the context's last n tokens
//            (prompt lookup, vLLM's `ngram`).
//   kSuffix  the most frequent continuation in suffix tries over the request's own tokens and
//            over the outputs of earlier requests (Arctic's suffix decoding).
//   kDraft   greedy tokens of a smaller model with the target's vocabulary
//            (SpeculativeConfig::draft_model_path), run in the same engine on its own KV cache.
//   kMtp     greedy tokens of the model's own draft layers (DeepSeek V4's MTP layer), chained
//            from the model's hidden states, on a KV cache of their own.
//   kDspark  a block of greedy tokens in one pass of the model's DSpark layers (DeepSeek V4.1)
//            from its features of the context, each with the layers' confidence estimate.
enum class SpeculativeMethod { kNone, kNgram, kSuffix, kDraft, kMtp, kDspark };
// kFixed verifies every proposed draft token (up to num_tokens); kConfidence verifies, per
// request and step, the draft prefix that maximises expected accepted tokens per second given
// each position's estimated acceptance and the step time the batch's size costs (DSpark's
// prefix scheduler), so a busy engine verifies less and an idle one more.
enum class SpeculativeSchedule { kFixed, kConfidence };

inline constexpr int32_t kMaxSpeculativeTokens = 15;

struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::kNone;
  int32_t num_tokens = 5;  // draft tokens per step at most, in [1, kMaxSpeculativeTokens]
  SpeculativeSchedule schedule = SpeculativeSchedule::kConfidence;
  // The draft model (GGUF file or Hugging Face directory) for kDraft; its tokenizer must be the
  // target's. Empty: none, and requests cannot ask for kDraft.
  std::string draft_model_path;
  // Tokens the draft model's KV cache holds; 0: as many as the target's.
  int64_t draft_kv_cache_tokens = 0;
};

// "none", "ngram", "suffix", "draft", "mtp", "dspark"; "fixed", "confidence".
inline const char* speculative_method_name(SpeculativeMethod m) {
  switch (m) {
    case SpeculativeMethod::kNgram: return "ngram";
    case SpeculativeMethod::kSuffix: return "suffix";
    case SpeculativeMethod::kDraft: return "draft";
    case SpeculativeMethod::kMtp: return "mtp";
    case SpeculativeMethod::kDspark: return "dspark";
    case SpeculativeMethod::kNone: break;
  }
  return "none";
}

struct EngineConfig {
  std::string model_path;               // GGUF file or Hugging Face directory
  std::string backend = "cpu";          // "cpu", or "cpu-reference" (the scalar reference kernels)
  int32_t threads = 0;                  // 0 = all cores
  int32_t block_size = 16;              // tokens per KV block
  int64_t kv_cache_tokens = 0;          // KV capacity in tokens; 0 = 16 full-length sequences or what
                                        // kv_cache_memory_bytes holds, the smaller
  int64_t kv_cache_memory_bytes = int64_t{1} << 30;  // the KV memory the default capacity fills, every pool counted
  // Commit the KV cache's memory at start (`serve`): steps then never stop for the kernel to
  // zero a page the cache touches for the first time. Off for one-shot commands.
  bool prefault_kv_cache = false;
  KvCacheDtype kv_cache_dtype = KvCacheDtype::kF16;
  int64_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 64;
  bool enable_prefix_caching = true;
  bool priority_scheduling = false;     // else first come, first served
  // A request's logits do not depend on the rest of the batch or on how its prefill is
  // chunked (bitwise). With a seed as well, its output is reproducible.
  bool batch_invariant = false;
  bool async_scheduling = true;         // plan step N+1 while step N runs
  // With async_scheduling: compute the grammar masks of step N+1's constrained sequences while
  // its forward pass runs, instead of after it, when sampling. Only where a core is spare: a
  // backend that is not the CPU's, or a CPU pool with fewer threads than the machine's cores.
  bool overlap_masks = true;
  // Models with sliding-window layers (Gemma 3): after a prefix-cache hit, rebuild the sliding
  // layers' KV by recomputing only the last window of the cached prefix ("SWA bounded replay").
  // The rebuilt window sees no KV before the replay start, so it approximates a cold run's
  // (greedy tokens agree in the tests; logits differ slightly). Off: such models take no prefix
  // hit (cold recompute). Models without sliding layers ignore it.
  bool swa_replay = true;
  // Fast-forward of forced text: where a constrained request's grammar allows exactly one
  // continuation (a JSON key, the rest of an enum value), its tokens are drafted and verified in
  // one pass, as speculative drafts are (lossless: the model's own samples decide). Steps run
  // synchronously while such a draft exists.
  bool grammar_fast_forward = true;
  // Tokens replayed; 0 = one window (the bounded replay above). A model's number of sliding
  // layers times its window makes the replay reproduce the cold run exactly, at that cost.
  int64_t swa_replay_tokens = 0;
  // The KV-cache store (docs/kv-store.md): pages of computed KV kept beyond this process's
  // blocks, in memory and in a directory that other processes and restarts share. On when a
  // directory or a memory budget is given; needs prefix caching.
  std::string kv_store_dir;                 // "" = no directory tier
  int64_t kv_store_memory_bytes = 0;        // memory tier budget; 0 = none
  int64_t kv_store_capacity_bytes = 0;      // directory high watermark (LRU eviction); 0 = unlimited
  int64_t kv_store_ttl_seconds = 72 * 3600; // a page lives this long after its last use; 0 = forever
  int64_t kv_store_page_tokens = 128;       // a multiple of block_size
  int64_t kv_store_write_queue_bytes = int64_t{256} << 20;  // write-behind bound: more is dropped
  // Speculative decoding for every request that does not choose (GenerationRequest). Refused
  // together with batch_invariant: how many drafts a step verifies depends on the load.
  SpeculativeConfig speculative;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 16;
  int32_t n = 1;                        // independent samples of the same prompt
  std::vector<int32_t> stop_token_ids;  // generation ends after producing one of these
  std::vector<std::string> stop;        // stop strings, matched on the generated text
  bool include_stop_str_in_output = false;
  bool detokenize = true;               // events carry text (needed for stop strings)
  std::string cache_salt;               // requests with different salts never share KV
  int32_t priority = 0;                 // smaller first, with priority_scheduling
  // The first event of each sequence carries the raw logits at the prompt's last position (the
  // row its first token is drawn from) in TokenEvent::last_prompt_logits: for callers that need
  // the whole distribution, such as `deepinfer score --logits-last`. Costs one copy of n_vocab
  // floats per sequence.
  bool return_last_prompt_logits = false;
  // This request's speculative decoding method; unset: the engine's (EngineConfig::speculative),
  // kNone: none. The engine's num_tokens and schedule apply.
  std::optional<SpeculativeMethod> speculative_method;
};

// kError: the backend failed the step that computed the sequence (out of memory, a kernel
// failure); TokenEvent::error says why. The engine keeps serving the other requests.
enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };

// "stop", "length", "cancelled", "error"; "none" for kNone.
inline const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: break;
  }
  return "none";
}

struct TopLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

struct TokenLogprob {
  int32_t token = 0;          // the token that was sampled (or, for the prompt, given)
  float logprob = 0.0f;       // its log-probability under the raw model distribution
  int32_t rank = 0;           // 1 = most probable
  std::vector<TopLogprob> top;  // the k most probable, best first (k = the requested count)
};

struct TokenEvent {
  int32_t index = 0;                     // which of the request's n sequences
  std::vector<int32_t> tokens;           // new tokens since the previous event of this index
  std::vector<TokenLogprob> logprobs;    // one per token, when sampling.logprobs >= 0
  std::string text;                      // the text those tokens added (detokenize)
  FinishReason finish = FinishReason::kNone;  // set on the last event of this index
  std::string stop_string;               // the stop string that ended it (kStop)
  int32_t stop_token = -1;               // the stop token that ended it (kStop), else -1
  std::string error;                     // what failed (kError)
  // Set on the first event of each index:
  std::vector<std::optional<TokenLogprob>> prompt_logprobs;  // [n_prompt] when asked; [0] is empty
  int64_t n_prompt_tokens = 0;
  int64_t n_cached_prompt_tokens = 0;    // prompt tokens served from the prefix cache
  double queue_seconds = 0.0;            // submission to first scheduling
  double first_token_seconds = 0.0;      // submission to this first event (time to first token)
  std::vector<float> last_prompt_logits;  // [n_vocab] with return_last_prompt_logits, when it has a token
  // Set on the last event of each index (speculative decoding): draft tokens verified for this
  // sequence and how many of them it kept.
  int64_t n_draft_tokens = 0;
  int64_t n_accepted_draft_tokens = 0;
  double finish_seconds = 0.0;           // submission to this last event
};

enum class WaitStatus { kEvent, kTimeout, kEnd };

class RequestHandle {
 public:
  virtual ~RequestHandle() = default;
  // Blocks until new tokens or the end; nullopt after every sequence's final event was returned.
  virtual std::optional<TokenEvent> next() = 0;
  // As next(), but gives up after `timeout` (kTimeout, *event untouched), so a caller can
  // check its client between events.
  virtual WaitStatus next_for(std::chrono::milliseconds timeout, TokenEvent* event) = 0;
  // The request stops within one engine step and its KV blocks are freed.
  virtual void cancel() = 0;
};

// One KV group's blocks (the model's layer groups: "full" for global attention, "sliding" for
// sliding-window layers, ...).
struct KvGroupUsage {
  std::string name;
  int64_t blocks_used = 0;
  int64_t blocks_total = 0;
  // Most blocks held for computed positions at the end of any step; blocks already allocated
  // for the step planned ahead (asynchronous scheduling) are not counted, so the figure is the
  // same with and without it. A sliding group's peak is bounded by its window.
  int64_t blocks_peak = 0;
  int64_t bytes = 0;                    // KV memory of the group's layers
};

// The KV-cache store, as this engine sees it (all zero without one). Pages are
// kv_store_page_tokens tokens of every full-attention layer.
struct KvStoreUsage {
  bool enabled = false;
  int64_t hit_pages = 0;           // pages loaded into the prefix cache
  int64_t miss_pages = 0;          // lookups that ended at a page the store did not have
  int64_t hit_tokens = 0;          // prompt tokens those hits spared (beyond the in-process hit)
  int64_t bytes_read = 0;          // from the directory
  int64_t bytes_written = 0;
  int64_t pages_written = 0;
  int64_t write_drops = 0;         // pages not written: the write-behind queue was full
  int64_t write_failures = 0;      // writes that failed (a full disk)
  int64_t checksum_failures = 0;   // pages refused on read, and deleted
  int64_t evictions = 0;           // capacity watermark
  int64_t expirations = 0;         // TTL
  int64_t pages = 0;               // in the directory, as this process knows it
  int64_t bytes = 0;
  int64_t memory_bytes = 0;        // memory tier
  double load_seconds = 0.0;       // reading and verifying pages (off the engine thread)
};

// Speculative decoding, per method (EngineStats::speculative).
struct SpeculativeMethodUsage {
  std::string method;            // speculative_method_name
  int64_t verifications = 0;     // sequence-steps that verified at least one draft token
  int64_t draft_tokens = 0;      // draft tokens verified
  int64_t accepted_tokens = 0;   // of those, kept
  // Tokens a verification yields on average, its own token included: 1 + accepted / verifications.
  double mean_acceptance_length() const {
    return verifications == 0 ? 0.0 : 1.0 + static_cast<double>(accepted_tokens) / static_cast<double>(verifications);
  }
};

struct SpeculativeUsage {
  std::vector<SpeculativeMethodUsage> methods;  // ngram, suffix, grammar (forced text)
  // [k]: sequence-steps of speculating sequences that verified k draft tokens (k = 0 when the
  // drafter had nothing or the schedule chose none), k <= kMaxSpeculativeTokens.
  std::vector<int64_t> verify_sizes;
  int64_t draft_tokens() const;
  int64_t accepted_tokens() const;
};

inline int64_t SpeculativeUsage::draft_tokens() const {
  int64_t n = 0;
  for (const SpeculativeMethodUsage& m : methods) n += m.draft_tokens;
  return n;
}

inline int64_t SpeculativeUsage::accepted_tokens() const {
  int64_t n = 0;
  for (const SpeculativeMethodUsage& m : methods) n += m.accepted_tokens;
  return n;
}

struct EngineStats {
  int64_t n_running = 0;
  int64_t n_waiting = 0;
  double kv_usage = 0.0;           // fraction of KV blocks in use (all groups)
  int64_t kv_blocks_used = 0;      // all groups
  int64_t kv_blocks_total = 0;
  std::vector<KvGroupUsage> kv_groups;  // per group, in the model's order
  int64_t kv_block_size = 0;           // tokens per block
  int64_t kv_cache_bytes = 0;          // KV memory of all layers, all groups
  int64_t prefix_queries = 0;      // prompt tokens looked up in the prefix cache
  int64_t prefix_hits = 0;         // of those, found
  int64_t prompt_tokens = 0;       // computed prompt tokens (not counting cache hits)
  int64_t generation_tokens = 0;   // sampled tokens
  int64_t n_steps = 0;
  int64_t n_preemptions = 0;
  int64_t n_failed_steps = 0;      // steps the backend failed (their requests ended with kError)
  double forward_seconds = 0.0;    // time inside forward passes
  // Step time outside them: the time the model stood idle because of the engine (sampling,
  // and with synchronous scheduling also planning and bookkeeping, which asynchronous
  // scheduling does while the next pass runs).
  double overhead_seconds = 0.0;
  // Steps that computed no prompt token (every sequence decoding): their count, tokens and
  // time (forward plus overhead), the batch's steady decode speed without prefill.
  int64_t decode_steps = 0;
  int64_t decode_step_tokens = 0;
  double decode_step_seconds = 0.0;
  KvStoreUsage kv_store;
  SpeculativeUsage speculative;
};

class Engine {
 public:
  virtual ~Engine() = default;
  static Result<std::unique_ptr<Engine>> create(const EngineConfig& config);

  // INVALID_ARGUMENT (empty prompt, max_tokens < 1, n < 1, token ids outside the vocabulary,
  // bad sampling parameters, a constraint that does not compile, naming what is wrong) or
  // OUT_OF_RANGE (prompt + max_tokens beyond the context) or RESOURCE_EXHAUSTED (a constraint
  // past the compile budget) before anything is queued. A constraint compiles here, on the
  // caller's thread (cached by its text), never on the engine's.
  virtual Result<std::shared_ptr<RequestHandle>> submit(GenerationRequest request) = 0;
  virtual EngineStats stats() const = 0;
  virtual int64_t n_vocab() const = 0;
  virtual int64_t max_context() const = 0;
  // Waits until every KV page queued for the store so far is written (a page dropped because
  // the write queue was full is not). A prefill worker calls it before it answers, so that the
  // decode worker finds the prompt's pages. Returns at once without a store. Thread-safe.
  virtual void flush_kv_store() = 0;
};

}  // namespace deepinfer
