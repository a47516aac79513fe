// Scheduler: decides, each engine step, which requests run and how many tokens each computes.
//
// One rule for prefill and decode: every running request's computed tokens catch up with its
// known tokens, within a token budget per step (max_num_batched_tokens) and a cap on running
// sequences (max_num_seqs). Long prompts are chunked to the budget that is left. Running
// requests are served first, in policy order; waiting ones are admitted after them, starting
// from their cached prefix. When KV blocks run out the lowest-ranked running request is
// preempted: its blocks are freed and it waits again, to be recomputed (a normal outcome).
//
// schedule() emits a plain-data StepPlan and advances each scheduled request's computed count;
// the runner executes the plan and update() applies the sampled tokens. The next schedule()
// may come before the last plan's update() (asynchronous scheduling): a sequence whose sampled
// token is still in flight gets its next decode position all the same, with a placeholder the
// engine fills in before that step runs, unless the token in flight is its last (max_tokens).
// A stop token in flight costs one discarded position; a chunk whose request was preempted or
// finished since its planning is ignored by update(). With sliding-window KV groups, admission
// after a prefix hit starts at the replay start (see Request) and each update drops the blocks
// that left the window. Features such as speculative decoding or grammar masks attach to the
// plan and the update, not to branches here. Single-threaded: the engine thread owns it.
//
// Speculative decoding: a decoding request with a draft (set_draft) gets a chunk of its last
// token plus the draft tokens, which one pass verifies; update() takes the tokens verification
// kept and rolls the computed count back to them, so block publication, the sliding window and
// the KV-store hook only ever see kept tokens (rejected rows are overwritten later). Drafts
// need synchronous steps: the next draft depends on what this one kept.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/request.h"
#include "kv/kv_cache_manager.h"

namespace deepinfer {

enum class SchedulingPolicy { kFcfs, kPriority };

// Extends admission and publication without branches in schedule(): the KV store's connector
// (kv_store_connector.h) is one. Called on the engine thread only.
class AdmissionHook {
 public:
  virtual ~AdmissionHook() = default;
  // Requests whose loads finished since the last call: they wait again, in rank order (FCFS:
  // by arrival), and are admitted from the prefix cache.
  virtual std::vector<RequestId> take_loaded() = 0;
  // A request about to be admitted whose in-process prefix hit is n_hit tokens: true when the
  // hook starts loading more of its prefix; the request then waits in kLoading, holding no
  // blocks, while the step goes on without it.
  virtual bool start_load(const Request& r, int64_t n_hit) = 0;
  // After a step: r's first n_computed positions have KV, published to the prefix cache.
  virtual void on_computed(const Request& r, int64_t n_computed) = 0;
  // r has finished (or was cancelled, loading or not): the hook forgets it.
  virtual void on_finished(RequestId id) = 0;
};

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 64;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  // Models with sliding-window layers: on a prefix hit of P tokens, recompute only the last
  // window before P (SWA bounded replay). Off: such models take no prefix hit at all (their
  // blocks are still published), a cold recompute to compare against.
  bool swa_replay = true;
  // Tokens replayed before the hit's end; 0 = one window. One window is the bounded, fast
  // replay; (sliding layers) x (window - 1) + window reproduces the cold run exactly, since
  // then every sliding layer's rebuilt rows saw full windows below them.
  int64_t swa_replay_tokens = 0;
};

struct ScheduledChunk {
  RequestId id = 0;
  int64_t first_position = 0;  // == the request's n_computed before the step
  int64_t n_tokens = 0;
  bool samples = false;        // the chunk reaches the last known token: a new token follows
  int32_t epoch = 0;           // the request's n_preemptions when planned (Request::live)
  int32_t n_draft = 0;         // the chunk's last n_draft tokens are the request's draft
};

struct StepPlan {
  std::vector<ScheduledChunk> chunks;
  std::vector<RequestId> preempted;  // freed this step, back in the waiting queue
  std::vector<RequestId> finished;   // cancelled requests released this step
  int64_t n_tokens = 0;
  bool empty() const { return chunks.empty(); }
};

// What the runner reports for one sampling chunk.
struct SampledToken {
  RequestId id = 0;
  int32_t token = 0;
  int32_t epoch = 0;  // the sampling chunk's
  // Set by the engine when the sequence must end after its last token for a reason of its own
  // (a constraint's grammar is complete: kStop; it could not continue: kError).
  FinishReason finish = FinishReason::kNone;
  // A chunk that verified n_draft draft tokens keeps `token`, then more[0, n_more): the draft
  // tokens the target agreed with and its own token after them.
  int32_t n_draft = 0;
  int32_t n_more = 0;
  std::array<int32_t, kMaxSpeculativeTokens> more{};
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, kv::KvCacheManager& kv);

  // Borrowed; null: none.
  void set_hook(AdmissionHook* hook) { hook_ = hook; }

  void add(std::unique_ptr<Request> request);
  // The request stops at the next schedule(): its blocks are freed, it finishes as cancelled.
  void cancel(RequestId id);
  // Draft tokens for running request `id`'s next decode chunk (empty: none). Only between an
  // update() and the next schedule(), with no step in flight.
  void set_draft(RequestId id, std::span<const int32_t> draft);

  StepPlan schedule();
  // After the plan's forward pass: publishes the full blocks it computed to the prefix cache,
  // frees sliding-window blocks that left the window, appends sampled tokens and finishes
  // requests that hit a stop token or max_tokens. Chunks and tokens of requests no longer live
  // are skipped. Returns the ids finished by this update.
  std::vector<RequestId> update(const StepPlan& plan, const std::vector<SampledToken>& sampled);

  // A plan whose forward pass failed: its live requests finish with kError (blocks freed).
  // Returns their ids.
  std::vector<RequestId> fail(const StepPlan& plan);
  // A plan that will not run (planned on top of a failed one): its live requests go back to
  // the waiting queue's front to be recomputed, as after a preemption.
  void restart(const StepPlan& plan);

  const Request* find(RequestId id) const;
  // Blocks of KV group `group` the running requests hold for positions whose passes have
  // finished (not those allocated for a step planned ahead).
  int64_t blocks_of_done_positions(int group) const;
  // Finished requests are handed back (and forgotten) here.
  std::unique_ptr<Request> take_finished(RequestId id);

  size_t n_waiting() const { return waiting_.size() + loading_.size(); }
  size_t n_running() const { return running_.size(); }

 private:
  bool ranks_before(const Request& a, const Request& b) const;
  void insert_waiting(Request* r, bool at_front);
  void preempt(Request* r, StepPlan& plan);
  void finish(Request* r, FinishReason reason);
  Request* lowest_ranked_running(const Request* except) const;
  void plan_chunk(Request* r, int64_t n, StepPlan& plan, int32_t n_draft = 0);
  bool allocate_running(Request* r, int64_t n, int32_t* n_draft, StepPlan& plan);
  bool append_sampled(Request* r, const SampledToken& s);
  void keep_verified_rows(Request* r);
  int64_t replay_start_for(int64_t n_hit) const;
  void take_loaded();
  bool hook_takes(Request* r);

  SchedulerConfig config_;
  kv::KvCacheManager& kv_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::deque<Request*> waiting_;  // policy order
  std::vector<Request*> running_;  // policy order
  std::vector<Request*> loading_;  // kLoading, any order
  AdmissionHook* hook_ = nullptr;
  uint64_t next_arrival_ = 0;
};

}  // namespace deepinfer
