#include "engine/speculative/draft_model.h"

#include <algorithm>
#include <cmath>

namespace deepinfer::speculative {

DraftModel::DraftModel(Parts parts, Limits limits)
    : model_(std::move(parts.model)),
      kv_(std::move(parts.kv)),
      kv_manager_(std::move(parts.kv_config)),
      runner_(model_->new_batch_runner()),
      limits_(limits) {}

Status DraftModel::propose(std::span<const Job> jobs) {
  active_.clear();
  int64_t budget = limits_.catch_up_budget;
  for (const Job& job : jobs) {
    job.out->n = 0;
    Active a;
    if (plan_catch_up(job, states_[job.id], &budget, &a)) active_.push_back(a);
  }
  if (active_.empty()) return Status::ok_status();
  // Pass 0: every sequence's catch-up chunk; then one token per sequence still drafting.
  for (;;) {
    const Status st = run_pass(active_);
    if (!st.ok()) {
      for (const Active& a : active_) {
        a.job->out->n = 0;
        forget(a.job->id);
      }
      return st;
    }
    int64_t row = 0;
    for (Active& a : active_) {
      std::vector<int32_t>& fed = a.state->fed;
      fed.resize(static_cast<size_t>(a.first));
      fed.insert(fed.end(), a.feed.begin(), a.feed.end());
      if (a.drafts) take_draft_token(a, row++);
    }
    // Those that go on feed their last draft token next.
    std::erase_if(active_, [this](const Active& a) {
      const Draft& d = *a.job->out;
      return !a.drafts || d.n >= a.job->max_tokens || a.survival < limits_.min_survival;
    });
    if (active_.empty()) return Status::ok_status();
    for (Active& a : active_) {
      const Draft& d = *a.job->out;
      a.first = static_cast<int64_t>(a.state->fed.size());
      a.feed = std::span<const int32_t>(&d.tokens[static_cast<size_t>(d.n - 1)], 1);
    }
  }
}

bool DraftModel::plan_catch_up(const Job& job, SequenceState& state, int64_t* budget, Active* a) {
  const auto n = static_cast<int64_t>(job.context.size());
  if (n == 0 || job.max_tokens <= 0) return false;
  // The draft KV that still holds: the fed tokens the context agrees with, all but the last
  // context token at most (whose logits give the first draft token).
  const auto agree = std::mismatch(state.fed.begin(), state.fed.end(), job.context.begin(), job.context.end());
  const int64_t kept = std::min<int64_t>(agree.first - state.fed.begin(), n - 1);
  const int64_t feed = std::min(n - kept, *budget);
  if (feed <= 0) return false;
  const bool drafts = feed == n - kept;
  // Positions from `kept` on are computed again: windows below it are never read again.
  kv_manager_.free_out_of_window(job.id, kept);
  // Room for the catch-up and the draft tokens fed after it (the last one is not fed).
  const int64_t total = kept + feed + (drafts ? job.max_tokens - 1 : 0);
  if (total > limits_.max_context) return false;
  if (!kv_manager_.allocate_slots(job.id, total, nullptr)) return false;  // a pool is short: no draft now
  *budget -= feed;
  a->job = &job;
  a->state = &state;
  a->first = kept;
  a->feed = job.context.subspan(static_cast<size_t>(kept), static_cast<size_t>(feed));
  a->drafts = drafts;
  return true;
}

Status DraftModel::run_pass(std::span<const Active> active) {
  tokens_.clear();
  batch_.clear();
  for (const Active& a : active) {
    tokens_.insert(tokens_.end(), a.feed.begin(), a.feed.end());
    BatchSequence b;
    b.n_tokens = static_cast<int64_t>(a.feed.size());
    b.first_position = a.first;
    b.logits = a.drafts ? LogitsMode::kLast : LogitsMode::kNone;
    // The tables stay put until the pass returns: nothing allocates meanwhile.
    for (int g = 0; g < kv_manager_.n_groups(); ++g) {
      b.block_tables[static_cast<size_t>(g)] = kv_manager_.block_table(a.job->id, g);
    }
    batch_.push_back(b);
  }
  return runner_->run(tokens_, batch_, *kv_);
}

void DraftModel::take_draft_token(Active& a, int64_t row) {
  const auto [token, p] = best_token(runner_->logits(row).first(static_cast<size_t>(limits_.n_vocab)));
  a.survival *= p;
  a.job->out->push(token, p);
}

void DraftModel::release(kv::RequestId id) { forget(id); }

void DraftModel::forget(kv::RequestId id) {
  kv_manager_.free(id);
  states_.erase(id);
}

}  // namespace deepinfer::speculative
