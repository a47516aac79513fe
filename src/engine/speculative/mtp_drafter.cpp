#include "engine/speculative/mtp_drafter.h"

#include <algorithm>

namespace deepinfer::speculative {

MtpDrafter::MtpDrafter(Parts parts, Limits limits)
    : runner_(std::move(parts.runner)),
      kv_(std::move(parts.kv)),
      kv_manager_(std::move(parts.kv_config)),
      limits_(limits) {}

Status MtpDrafter::observe(std::span<const Chunk> chunks) {
  tokens_.clear();
  rows_.clear();
  batch_.clear();
  observed_.clear();
  for (const Chunk& c : chunks) {
    const int64_t last = std::min(c.first + c.n - 1, static_cast<int64_t>(c.tokens.size()) - 2);
    if (last < c.first) continue;  // no position of the chunk has its next token yet
    const bool fresh = !states_.contains(c.id);
    SequenceState& st = states_[c.id];
    st.ready_pass = 0;
    if (!begin_observed_chunk(kv_manager_, c.id, fresh, c.first, last, &st.window)) {  // no MTP rows now
      forget(c.id);
      continue;
    }
    const bool reaches_end = last == static_cast<int64_t>(c.tokens.size()) - 2;
    for (int64_t p = c.first; p <= last; ++p) {
      tokens_.push_back(c.tokens[static_cast<size_t>(p + 1)]);
      rows_.push_back(static_cast<int32_t>(c.row + p - c.first));
    }
    batch_.push_back(draft_layer_sequence(kv_manager_, c.id, st.window, c.first, last - c.first + 1,
                                          reaches_end ? LogitsMode::kLast : LogitsMode::kNone));
    observed_.push_back({c.id, &st});
  }
  if (batch_.empty()) return Status::ok_status();
  const Status status = runner_->run(tokens_, rows_, DraftHeadRunner::HiddenFrom::kTarget, batch_, *kv_);
  ++pass_;
  if (!status.ok()) {
    for (const auto& [id, st] : observed_) forget(id);
    return status;
  }
  int64_t pass_row = 0, logits_row = 0;
  for (size_t i = 0; i < batch_.size(); ++i) {
    SequenceState& st = *observed_[i].second;
    const int64_t last = batch_[i].first_position + batch_[i].n_tokens - 1;
    st.window.end = last + 1;
    pass_row += batch_[i].n_tokens;
    if (batch_[i].logits == LogitsMode::kNone) continue;
    const auto [token, p] =
        best_token(runner_->logits(logits_row++).first(static_cast<size_t>(limits_.n_vocab)));
    st.ready_pass = pass_;
    st.ready_context = last + 2;
    st.row = static_cast<int32_t>(pass_row - 1);
    st.token = token;
    st.p = p;
  }
  return Status::ok_status();
}

Status MtpDrafter::propose(std::span<const Job> jobs) {
  active_.clear();
  const uint64_t observed_pass = pass_;
  for (const Job& job : jobs) {
    job.out->n = 0;
    auto it = states_.find(job.id);
    if (it == states_.end() || job.max_tokens <= 0) continue;
    SequenceState& st = it->second;
    const auto n = static_cast<int64_t>(job.context.size());
    if (st.ready_pass != observed_pass || st.ready_context != n) continue;  // its last row's output is gone
    job.out->push(st.token, st.p);
    if (job.max_tokens == 1 || st.p < limits_.min_survival) continue;
    // Chained rows at positions n - 1 .. n + max_tokens - 3 (the one reading draft k sits at n - 2 + k).
    if (!kv_manager_.allocate_slots(job.id, n - 1 + job.max_tokens - 1, nullptr)) continue;
    active_.push_back({&job, &st, st.p, st.row});
  }
  while (!active_.empty()) {
    tokens_.clear();
    rows_.clear();
    batch_.clear();
    for (const Active& a : active_) {
      const Draft& d = *a.job->out;
      tokens_.push_back(d.tokens[static_cast<size_t>(d.n - 1)]);
      rows_.push_back(a.row);
      const int64_t position = static_cast<int64_t>(a.job->context.size()) - 2 + d.n;
      batch_.push_back(draft_layer_sequence(kv_manager_, a.job->id, a.state->window, position, 1, LogitsMode::kLast));
    }
    const Status status = runner_->run(tokens_, rows_, DraftHeadRunner::HiddenFrom::kSelf, batch_, *kv_);
    ++pass_;
    if (!status.ok()) return status;  // the drafts so far stand: verification decides on them
    for (size_t i = 0; i < active_.size(); ++i) {
      Active& a = active_[i];
      const auto [token, p] =
          best_token(runner_->logits(static_cast<int64_t>(i)).first(static_cast<size_t>(limits_.n_vocab)));
      a.survival *= p;
      a.row = static_cast<int32_t>(i);
      a.job->out->push(token, p);
    }
    std::erase_if(active_, [this](const Active& a) {
      return a.job->out->n >= a.job->max_tokens || a.survival < limits_.min_survival;
    });
  }
  return Status::ok_status();
}

void MtpDrafter::release(kv::RequestId id) { forget(id); }

void MtpDrafter::forget(kv::RequestId id) {
  kv_manager_.free(id);
  states_.erase(id);
}

}  // namespace deepinfer::speculative
