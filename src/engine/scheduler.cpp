#include "engine/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace deepinfer {

Scheduler::Scheduler(SchedulerConfig config, kv::KvCacheManager& kv) : config_(config), kv_(kv) {
  DI_ICHECK(config_.max_num_batched_tokens > 0 && config_.max_num_seqs > 0);
}

bool Scheduler::ranks_before(const Request& a, const Request& b) const {
  if (config_.policy == SchedulingPolicy::kPriority && a.priority != b.priority) return a.priority < b.priority;
  return a.arrival < b.arrival;
}

void Scheduler::insert_waiting(Request* r, bool at_front) {
  r->state = RequestState::kWaiting;
  auto pos = std::find_if(waiting_.begin(), waiting_.end(), [&](const Request* w) { return ranks_before(*r, *w); });
  if (at_front && config_.policy == SchedulingPolicy::kFcfs) pos = waiting_.begin();
  waiting_.insert(pos, r);
}

void Scheduler::add(std::unique_ptr<Request> request) {
  Request* r = request.get();
  DI_ICHECK(r->n_prompt > 0 && r->n_prompt == r->n_tokens() && !requests_.count(r->id));
  r->arrival = next_arrival_++;
  r->n_computed = 0;
  requests_.emplace(r->id, std::move(request));
  insert_waiting(r, /*at_front=*/false);
}

void Scheduler::cancel(RequestId id) {
  auto it = requests_.find(id);
  if (it != requests_.end() && it->second->state != RequestState::kFinished) it->second->cancel_requested = true;
}

const Request* Scheduler::find(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

std::unique_ptr<Request> Scheduler::take_finished(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second->state != RequestState::kFinished) return nullptr;
  auto r = std::move(it->second);
  requests_.erase(it);
  return r;
}

void Scheduler::finish(Request* r, FinishReason reason) {
  kv_.free(r->id);
  std::erase(running_, r);
  std::erase(waiting_, r);
  std::erase(loading_, r);
  if (hook_) hook_->on_finished(r->id);
  r->state = RequestState::kFinished;
  r->finish = reason;
}

std::vector<RequestId> Scheduler::fail(const StepPlan& plan) {
  std::vector<RequestId> failed;
  for (const ScheduledChunk& c : plan.chunks) {
    auto it = requests_.find(c.id);
    if (it == requests_.end() || !it->second->live(c.epoch)) continue;
    finish(it->second.get(), FinishReason::kError);
    failed.push_back(c.id);
  }
  return failed;
}

void Scheduler::restart(const StepPlan& plan) {
  StepPlan unused;
  for (const ScheduledChunk& c : plan.chunks) {
    auto it = requests_.find(c.id);
    if (it != requests_.end() && it->second->live(c.epoch)) preempt(it->second.get(), unused);
  }
}

void Scheduler::preempt(Request* r, StepPlan& plan) {
  kv_.free(r->id);
  std::erase(running_, r);
  r->n_computed = 0;  // recomputed from the prefix cache and the prompt when readmitted
  r->n_placeholders = 0;  // a token in flight is discarded (the epoch below changes)
  r->n_done = 0;
  r->hook_consulted = false;  // the blocks it loaded may be gone by its readmission
  r->draft.clear();
  ++r->n_preemptions;
  insert_waiting(r, /*at_front=*/true);
  plan.preempted.push_back(r->id);
}

Request* Scheduler::lowest_ranked_running(const Request* except) const {
  // running_ is kept in rank order, so the lowest is last.
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (*it != except) return *it;
  }
  return nullptr;
}

// The last window before a hit of n_hit tokens (the widest sliding group's), rounded down to a
// block so the sliding groups' tables start on a block boundary (at most one block's worth of
// extra tokens replayed).
int64_t Scheduler::replay_start_for(int64_t n_hit) const {
  const int64_t bs = kv_.block_alignment();
  const int64_t replay = config_.swa_replay_tokens > 0 ? config_.swa_replay_tokens : kv_.max_window();
  const int64_t start = std::max<int64_t>(0, n_hit - replay);
  return start / bs * bs;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  for (auto& [id, r] : requests_) {
    if (r->cancel_requested && r->state != RequestState::kFinished) {
      finish(r.get(), FinishReason::kCancelled);
      plan.finished.push_back(id);
    }
  }
  take_loaded();
  int64_t budget = config_.max_num_batched_tokens;

  // Running requests first, in rank order. Preemption takes victims from the tail, which has
  // not been scheduled yet in this loop, or the current request itself.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request* r = running_[i];
    if (r->n_placeholders > 0 && r->n_generated() + r->n_placeholders >= r->max_tokens) {
      ++i;  // its last token is in flight
      continue;
    }
    const int64_t n = std::min(r->n_tokens() + r->n_placeholders - r->n_computed, budget);
    DI_ICHECK(n > 0);
    // A draft rides on a decode chunk (its last known token) within the budget.
    int32_t n_draft = n == 1 && r->n_placeholders == 0
                          ? static_cast<int32_t>(std::min<int64_t>(static_cast<int64_t>(r->draft.size()), budget - 1))
                          : 0;
    if (!allocate_running(r, n, &n_draft, plan)) break;  // r itself was the lowest: nothing after it is left to serve
    plan_chunk(r, n, plan, n_draft);
    budget -= n + n_draft;
    ++i;
  }

  // Then waiting requests, while budget and sequence slots last. No admission in a step that
  // had to preempt: memory is short, and the preempted request would just bounce back.
  while (!waiting_.empty() && budget > 0 && plan.preempted.empty() &&
         static_cast<int32_t>(running_.size()) < config_.max_num_seqs) {
    Request* r = waiting_.front();
    const bool sliding = kv_.has_window_groups();
    const bool lookup = r->use_prefix_cache && (!sliding || config_.swa_replay);
    if (lookup && hook_takes(r)) continue;
    const kv::PrefixHit hit = lookup ? kv_.find_cached_prefix(r->tokens, r->cache_salt) : kv::PrefixHit{};
    const int64_t start = sliding ? replay_start_for(hit.n_tokens) : hit.n_tokens;
    const int64_t n = std::min(r->n_tokens() - start, budget);
    if (!kv_.allocate_slots(r->id, start + n, &hit, start)) break;  // waits for blocks to free up
    waiting_.pop_front();
    r->n_computed = start;
    r->n_done = start;
    r->n_shared = hit.n_tokens;
    r->replay_start = start;
    r->state = RequestState::kRunning;
    auto pos = std::find_if(running_.begin(), running_.end(), [&](const Request* x) { return ranks_before(*r, *x); });
    running_.insert(pos, r);
    plan_chunk(r, n, plan);
    budget -= n;
  }
  for (const ScheduledChunk& c : plan.chunks) plan.n_tokens += c.n_tokens;
  return plan;
}

// Room for r's next n tokens and its draft; short of blocks, the draft goes first, then the
// lowest-ranked running requests (r itself last: false).
bool Scheduler::allocate_running(Request* r, int64_t n, int32_t* n_draft, StepPlan& plan) {
  while (true) {
    if (kv_.allocate_slots(r->id, r->n_computed + n + *n_draft, nullptr)) return true;
    if (*n_draft > 0) {
      *n_draft = 0;
      continue;
    }
    Request* victim = lowest_ranked_running(nullptr);
    preempt(victim, plan);
    if (victim == r) return false;
  }
}

void Scheduler::set_draft(RequestId id, std::span<const int32_t> draft) {
  auto it = requests_.find(id);
  if (it == requests_.end() || it->second->state != RequestState::kRunning) return;
  it->second->draft.assign(draft.begin(), draft.end());
}

// Once per admission, the hook may take the request at the head of the queue to load more of
// its prefix.
bool Scheduler::hook_takes(Request* r) {
  if (hook_ == nullptr || r->hook_consulted) return false;
  r->hook_consulted = true;
  if (!hook_->start_load(*r, kv_.peek_cached_prefix(r->tokens, r->cache_salt).n_tokens)) return false;
  waiting_.pop_front();
  r->state = RequestState::kLoading;
  loading_.push_back(r);
  return true;
}

void Scheduler::take_loaded() {
  if (hook_ == nullptr) return;
  for (RequestId id : hook_->take_loaded()) {
    auto it = requests_.find(id);
    if (it == requests_.end() || it->second->state != RequestState::kLoading) continue;
    std::erase(loading_, it->second.get());
    // In rank order among those waiting: a load finishing does not overtake earlier arrivals
    // (whose own lookups may still be under way).
    insert_waiting(it->second.get(), /*at_front=*/false);
  }
}

void Scheduler::plan_chunk(Request* r, int64_t n, StepPlan& plan, int32_t n_draft) {
  const bool samples = r->n_computed + n == r->n_tokens() + r->n_placeholders;
  DI_ICHECK(n_draft == 0 || samples);
  plan.chunks.push_back({r->id, r->n_computed, n + n_draft, samples, r->n_preemptions, n_draft});
  r->n_computed += n + n_draft;
  if (samples) ++r->n_placeholders;
}

int64_t Scheduler::blocks_of_done_positions(int group) const {
  int64_t n = 0;
  for (const Request* r : running_) n += kv_.blocks_below(r->id, group, r->n_done);
  return n;
}

std::vector<RequestId> Scheduler::update(const StepPlan& plan, const std::vector<SampledToken>& sampled) {
  for (const ScheduledChunk& c : plan.chunks) {
    auto it = requests_.find(c.id);
    if (it == requests_.end() || !it->second->live(c.epoch)) continue;
    if (c.n_draft > 0) continue;  // published once verification says which rows to keep (below)
    Request* r = it->second.get();
    // Every position the pass computed had a known token (placeholders were filled in).
    const int64_t computed = c.first_position + c.n_tokens;
    r->n_done = computed;
    kv_.cache_full_blocks(r->id, r->tokens, computed, r->cache_salt);
    kv_.free_out_of_window(r->id, computed);
    if (hook_) hook_->on_computed(*r, computed);
  }
  std::vector<RequestId> finished;
  for (const SampledToken& s : sampled) {
    auto it = requests_.find(s.id);
    if (it == requests_.end() || !it->second->live(s.epoch)) continue;
    Request* r = it->second.get();
    DI_ICHECK(r->n_placeholders > 0);
    --r->n_placeholders;
    if (append_sampled(r, s)) finished.push_back(r->id);
  }
  return finished;
}

// After a verifying chunk: rows past the kept tokens are dropped. Computing resumes at the last
// kept token, and only kept rows are published (the next chunk overwrites the rest).
void Scheduler::keep_verified_rows(Request* r) {
  DI_ICHECK(r->n_placeholders == 0);  // drafts run in synchronous steps only
  const int64_t computed = r->n_tokens() - 1;
  r->n_computed = computed;
  r->n_done = computed;
  r->draft.clear();
  kv_.cache_full_blocks(r->id, r->tokens, computed, r->cache_salt);
  kv_.free_out_of_window(r->id, computed);
  if (hook_) hook_->on_computed(*r, computed);
}

// Appends what the chunk sampled, up to the first stop token or max_tokens; true when r has
// finished with it.
bool Scheduler::append_sampled(Request* r, const SampledToken& s) {
  const int32_t n = 1 + s.n_more;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t token = i == 0 ? s.token : s.more[static_cast<size_t>(i - 1)];
    r->tokens.push_back(token);
    const bool stop = std::find(r->stop_token_ids.begin(), r->stop_token_ids.end(), token) != r->stop_token_ids.end();
    const bool last = i == n - 1;
    if ((last && s.finish != FinishReason::kNone) || stop || r->n_generated() >= r->max_tokens) {
      const FinishReason reason = last && s.finish != FinishReason::kNone ? s.finish
                                  : stop                                  ? FinishReason::kStop
                                                                          : FinishReason::kLength;
      if (s.n_draft > 0) keep_verified_rows(r);  // published before the blocks go back
      finish(r, reason);
      return true;
    }
  }
  if (s.n_draft > 0) keep_verified_rows(r);
  return false;
}

}  // namespace deepinfer
