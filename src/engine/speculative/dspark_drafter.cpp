#include "engine/speculative/dspark_drafter.h"

#include <algorithm>
#include <cmath>

namespace deepinfer::speculative {

DsparkDrafter::DsparkDrafter(Parts parts, Limits limits)
    : runner_(std::move(parts.runner)),
      kv_(std::move(parts.kv)),
      kv_manager_(std::move(parts.kv_config)),
      limits_(limits) {}

Status DsparkDrafter::observe(std::span<const Chunk> chunks) {
  rows_.clear();
  batch_.clear();
  observed_.clear();
  for (const Chunk& c : chunks) {
    const int64_t last = std::min(c.first + c.n - 1, static_cast<int64_t>(c.tokens.size()) - 2);
    if (last < c.first) continue;  // no position of the chunk has its next token yet
    const bool fresh = !states_.contains(c.id);
    LayerWindow& st = states_[c.id];
    if (!begin_observed_chunk(kv_manager_, c.id, fresh, c.first, last, &st)) {  // a pool is short: no rows now
      forget(c.id);
      continue;
    }
    for (int64_t p = c.first; p <= last; ++p) rows_.push_back(static_cast<int32_t>(c.row + p - c.first));
    batch_.push_back(draft_layer_sequence(kv_manager_, c.id, st, c.first, last - c.first + 1, LogitsMode::kNone));
    observed_.push_back({c.id, &st});
  }
  if (batch_.empty()) return Status::ok_status();
  const Status status = runner_->observe(rows_, batch_, *kv_);
  if (!status.ok()) {
    for (const auto& [id, st] : observed_) forget(id);
    return status;
  }
  for (size_t i = 0; i < batch_.size(); ++i) {
    observed_[i].second->end = batch_[i].first_position + batch_[i].n_tokens;
  }
  return Status::ok_status();
}

Status DsparkDrafter::propose(std::span<const DraftJob> jobs) {
  const int64_t block = runner_->block_size();
  batch_.clear();
  anchors_.clear();
  drafting_.clear();
  for (const DraftJob& job : jobs) {
    job.out->n = 0;
    auto it = states_.find(job.id);
    const auto n = static_cast<int64_t>(job.context.size());
    // Every position before the anchor (the last token, at n - 1) must have been observed.
    if (it == states_.end() || job.max_tokens <= 0 || it->second.end != n - 1) continue;
    // The block's rows sit at n - 1 .. n - 2 + block (read from the pass, not cached).
    if (!kv_manager_.allocate_slots(job.id, n - 1 + block, nullptr)) continue;
    batch_.push_back(draft_layer_sequence(kv_manager_, job.id, it->second, n - 1, block, LogitsMode::kNone));
    anchors_.push_back(job.context.back());
    drafting_.push_back(&job);
  }
  if (batch_.empty()) return Status::ok_status();
  DI_RETURN_IF_ERROR(runner_->draft(anchors_, batch_, *kv_));
  for (size_t i = 0; i < drafting_.size(); ++i) {
    const DraftJob& job = *drafting_[i];
    const auto tokens = runner_->drafts(static_cast<int64_t>(i));
    const auto confidence = runner_->confidence(static_cast<int64_t>(i));
    float survival = 1.0f;
    for (int64_t k = 0; k < block && job.out->n < job.max_tokens; ++k) {
      const int32_t token = tokens[static_cast<size_t>(k)];
      if (token >= limits_.n_vocab) break;  // past the tokenizer's ids: nothing the target could accept
      const float p = 1.0f / (1.0f + std::exp(-confidence[static_cast<size_t>(k)]));
      job.out->push(token, p);
      survival *= p;
      if (survival < limits_.min_survival) break;
    }
  }
  return Status::ok_status();
}

void DsparkDrafter::release(kv::RequestId id) { forget(id); }

void DsparkDrafter::forget(kv::RequestId id) {
  kv_manager_.free(id);
  states_.erase(id);
}

}  // namespace deepinfer::speculative
