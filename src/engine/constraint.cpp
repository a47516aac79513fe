#include "engine/constraint.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace deepinfer {

namespace {

grammar::GrammarSpec to_spec(const Constraint& c) {
  grammar::GrammarSpec spec;
  switch (c.kind) {
    case ConstraintKind::kRegex: spec.kind = grammar::GrammarKind::kRegex; break;
    case ConstraintKind::kJsonSchema: spec.kind = grammar::GrammarKind::kJsonSchema; break;
    case ConstraintKind::kGbnf: spec.kind = grammar::GrammarKind::kGbnf; break;
    case ConstraintKind::kChoice: spec.kind = grammar::GrammarKind::kChoice; break;
    case ConstraintKind::kNone: break;
  }
  spec.text = c.text;
  spec.choices = c.choices;
  spec.json.compact = c.compact_json;
  return spec;
}

}  // namespace

ConstraintCompiler::ConstraintCompiler(std::shared_ptr<const Tokenizer> tokenizer, size_t cache_capacity)
    : tokenizer_(std::move(tokenizer)), cache_(cache_capacity) {}

std::shared_ptr<const grammar::TokenIndex> ConstraintCompiler::tokens() {
  std::call_once(index_once_, [this] { index_ = grammar::TokenIndex::build(*tokenizer_); });
  return index_;
}

Result<std::shared_ptr<const grammar::CompiledGrammar>> ConstraintCompiler::compile(const Constraint& constraint) {
  if (constraint.kind == ConstraintKind::kNone) return std::shared_ptr<const grammar::CompiledGrammar>();
  if (!tokenizer_) return invalid_argument("constraint: structured output needs the model's tokenizer, and it has none");
  if (constraint.kind == ConstraintKind::kChoice && constraint.choices.empty()) {
    return invalid_argument("constraint: the choice list is empty");
  }
  auto compiled = cache_.get(to_spec(constraint), tokens(), {});
  // Past the compile budget the grammar is the request's problem (a 400), not the server's load
  // (RESOURCE_EXHAUSTED would read as a 429 to retry).
  if (!compiled.ok()) return invalid_argument("constraint: " + compiled.status().message());
  return compiled;
}

SequenceConstraint::SequenceConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar,
                                       std::span<const int32_t> stop_ids, int64_t n_vocab, std::string_view start_after)
    : matcher_(std::move(grammar)), stop_ids_(stop_ids.begin(), stop_ids.end()), trigger_(start_after) {
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
  const grammar::TokenIndex& index = matcher_.grammar().tokens();
  for (int32_t id : index.stop_ids()) {
    if (!std::binary_search(stop_ids_.begin(), stop_ids_.end(), id)) foreign_stops_.push_back(id);
  }
  grammar_words_ = index.n_words();
  // Words past the vocabulary's (a model padded beyond its tokenizer) stay 0: never allowed.
  mask_.assign(static_cast<size_t>(std::max<int64_t>(grammar_words_, (n_vocab + 63) / 64)), 0);
  if (trigger_.empty()) return;
  // KMP: trigger_fail_[k] = the longest proper prefix of trigger[0..k] that is also its suffix.
  trigger_fail_.assign(trigger_.size(), 0);
  for (size_t k = 1, j = 0; k < trigger_.size(); ++k) {
    while (j > 0 && trigger_[k] != trigger_[j]) j = static_cast<size_t>(trigger_fail_[j - 1]);
    if (trigger_[k] == trigger_[j]) ++j;
    trigger_fail_[k] = static_cast<int32_t>(j);
  }
  trigger_holders_ = index.tokens_containing(trigger_);
}

int32_t SequenceConstraint::trigger_step(int32_t state, uint8_t byte) const {
  while (state > 0 && static_cast<uint8_t>(trigger_[static_cast<size_t>(state)]) != byte) {
    state = trigger_fail_[static_cast<size_t>(state - 1)];
  }
  return static_cast<uint8_t>(trigger_[static_cast<size_t>(state)]) == byte ? state + 1 : state;
}

size_t SequenceConstraint::feed_trigger(std::string_view bytes, int32_t* state) const {
  for (size_t i = 0; i < bytes.size(); ++i) {
    *state = trigger_step(*state, static_cast<uint8_t>(bytes[i]));
    if (*state == static_cast<int32_t>(trigger_.size())) return i + 1;
  }
  return std::string_view::npos;
}

void SequenceConstraint::refuse_bad_trigger_endings() {
  const grammar::TokenIndex& index = matcher_.grammar().tokens();
  auto check = [&](int32_t id) {
    const std::string_view bytes = index.bytes(id);
    int32_t state = trigger_state_;
    const size_t end = feed_trigger(bytes, &state);
    if (end == std::string_view::npos || end == bytes.size()) return;
    if (matcher_.accept_bytes(bytes.substr(end))) {
      matcher_.rollback(1);
    } else {
      mask_[static_cast<size_t>(id) >> 6] &= ~(uint64_t{1} << (id & 63));
    }
  };
  // From the start state only a token holding the whole trigger completes it; from a partial
  // match (the model is writing the trigger: a few steps per request) any token may.
  if (trigger_state_ == 0) {
    for (int32_t id : *trigger_holders_) check(id);
  } else {
    for (int32_t id = 0; id < index.n_vocab(); ++id) check(id);
  }
}

std::span<const uint64_t> SequenceConstraint::mask() {
  if (mask_ready_) return ready_mask_;
  return compute_mask();
}

void SequenceConstraint::prepare_mask() {
  ready_mask_ = compute_mask();
  mask_ready_ = true;
}

std::span<const uint64_t> SequenceConstraint::compute_mask() {
  if (!started()) {
    if (trigger_state_ == 0 && trigger_holders_->empty()) return {};
    std::fill(mask_.begin(), mask_.end(), ~uint64_t{0});
    refuse_bad_trigger_endings();
    return mask_;
  }
  const std::span<uint64_t> bits(mask_);
  matcher_.fill_mask(bits.first(static_cast<size_t>(grammar_words_)));
  for (int32_t id : foreign_stops_) bits[static_cast<size_t>(id) >> 6] &= ~(uint64_t{1} << (id & 63));
  const bool can_end = matcher_.can_end();
  for (int32_t id : stop_ids_) {
    const uint64_t bit = uint64_t{1} << (id & 63);
    uint64_t& word = bits[static_cast<size_t>(id) >> 6];
    word = can_end ? word | bit : word & ~bit;
  }
  return bits;
}

std::string SequenceConstraint::forced_text(size_t max_bytes) {
  if (!started()) return {};
  std::string text = matcher_.forced_bytes(max_bytes);
  // Drop a trailing partial character: the tokenizer is given whole text.
  size_t end = text.size();
  size_t lead = end;
  while (lead > 0 && (static_cast<uint8_t>(text[lead - 1]) & 0xC0) == 0x80) --lead;
  if (lead > 0) {
    const auto b = static_cast<uint8_t>(text[lead - 1]);
    const size_t want = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : 4;
    if (end - (lead - 1) < want) end = lead - 1;
  }
  text.resize(end);
  return text;
}

SequenceConstraint::Next SequenceConstraint::accept(int32_t token) {
  mask_ready_ = false;
  // A stop ends the sequence (the scheduler sees it); the matcher has nothing left to follow.
  if (std::binary_search(stop_ids_.begin(), stop_ids_.end(), token)) return Next::kContinue;
  if (!started()) {
    const grammar::TokenIndex& index = matcher_.grammar().tokens();
    const std::string_view bytes = token < index.n_vocab() ? index.bytes(token) : std::string_view();
    int32_t state = trigger_state_;
    const size_t end = feed_trigger(bytes, &state);
    if (end == std::string_view::npos) {
      trigger_state_ = state;
      return Next::kContinue;
    }
    trigger_.clear();
    if (end < bytes.size() && !matcher_.accept_bytes(bytes.substr(end))) return Next::kRefused;
    return matcher_.is_complete() ? Next::kComplete : Next::kContinue;
  }
  if (!matcher_.accept_token(token)) return Next::kRefused;
  return matcher_.is_complete() ? Next::kComplete : Next::kContinue;
}

}  // namespace deepinfer
