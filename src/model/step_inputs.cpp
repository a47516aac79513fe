#include "model/step_inputs.h"

#include <algorithm>
#include <string>

namespace deepinfer {

namespace {

// Blocks [first, end) of one table must name blocks of a pool of n_pool blocks.
Status check_table(size_t s, const KvGroupSpec& group, std::span<const int32_t> table, int64_t first, int64_t end) {
  if (static_cast<int64_t>(table.size()) < end) {
    return invalid_argument("batch sequence " + std::to_string(s) + " needs " + std::to_string(end) + " blocks of KV group '" +
                            group.name + "' but its block table has " + std::to_string(table.size()));
  }
  for (int64_t b = first; b < end; ++b) {
    const int32_t block = table[static_cast<size_t>(b)];
    if (block < 0 || block >= group.n_blocks) {
      return invalid_argument("batch sequence " + std::to_string(s) + " names block " + std::to_string(block) +
                              " outside KV group '" + group.name + "' (positions " +
                              std::to_string(b * group.block_size) + "..)");
    }
  }
  return {};
}

}  // namespace

Status StepInputs::build(std::span<const int32_t> tokens, std::span<const BatchSequence> sequences,
                         const backend::KvCache& kv, int64_t n_kv_groups, int64_t n_vocab) {
  const std::vector<KvGroupSpec>& groups = kv.groups();
  if (static_cast<int64_t>(groups.size()) != n_kv_groups) return invalid_argument("the KV cache was made for another model");
  sequences_.resize(sequences.size());
  output_rows_.clear();
  bool all_argmax = true;
  int64_t total = 0;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const BatchSequence& seq = sequences[s];
    if (seq.n_tokens <= 0 || seq.first_position < 0) {
      return invalid_argument("batch sequence " + std::to_string(s) + " has no tokens or a negative position");
    }
    if (seq.replay_start < 0 || seq.replay_start > seq.first_position || seq.n_shared < 0) {
      return invalid_argument("batch sequence " + std::to_string(s) + " replays from " +
                              std::to_string(seq.replay_start) + ", past its first position " +
                              std::to_string(seq.first_position));
    }
    backend::StepSequence& out = sequences_[s];
    out.n_tokens = seq.n_tokens;
    out.first_position = seq.first_position;
    const int64_t end_position = seq.first_position + seq.n_tokens;
    for (size_t g = 0; g < groups.size(); ++g) {
      const KvGroupSpec& group = groups[g];
      const bool sliding = group.windowed();
      // A sliding group's queries read from the oldest position the chunk's first query sees.
      const int64_t first_read =
          sliding ? std::max<int64_t>(0, std::max(seq.first_position - group.window + 1, seq.replay_start)) : 0;
      const int64_t n_blocks = (end_position + group.block_size - 1) / group.block_size;
      DI_RETURN_IF_ERROR(check_table(s, group, seq.block_tables[g], first_read / group.block_size, n_blocks));
      out.block_tables[g] = seq.block_tables[g];
      out.min_position[g] = sliding ? seq.replay_start : 0;
      out.first_write[g] = group.prefix_cached() ? seq.n_shared : 0;
    }
    const bool last = seq.logits == LogitsMode::kLast || seq.logits == LogitsMode::kLastArgmax;
    for (int64_t i = 0; i < seq.n_tokens; ++i) {
      if (seq.logits == LogitsMode::kAll || (last && i + 1 == seq.n_tokens)) {
        output_rows_.push_back(static_cast<int32_t>(total + i));
      }
    }
    if (seq.logits == LogitsMode::kAll || seq.logits == LogitsMode::kLast) all_argmax = false;
    total += seq.n_tokens;
  }
  if (total != static_cast<int64_t>(tokens.size())) {
    return invalid_argument("the batch's sequences hold " + std::to_string(total) + " tokens but " +
                            std::to_string(tokens.size()) + " were given");
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= n_vocab) {
      return invalid_argument("token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                              " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")");
    }
  }
  argmax_only_ = all_argmax && !output_rows_.empty();
  batch_ = {tokens, sequences_, output_rows_};
  return {};
}

}  // namespace deepinfer
