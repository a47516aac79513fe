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

Result<int32_t> ConstraintCompiler::start_token(const Constraint& constraint) const {
  if (constraint.start_after.empty() || constraint.kind == ConstraintKind::kNone) return -1;
  if (!tokenizer_) return invalid_argument("constraint: structured output needs the model's tokenizer, and it has none");
  const std::optional<int32_t> id = tokenizer_->find_token(constraint.start_after);
  if (!id) {
    return invalid_argument("constraint: the grammar is to start after '" + constraint.start_after +
                            "', which is not one token of the model's vocabulary");
  }
  return *id;
}

SequenceConstraint::SequenceConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar,
                                       std::span<const int32_t> stop_ids, int64_t n_vocab, int32_t start_after)
    : matcher_(std::move(grammar)), stop_ids_(stop_ids.begin(), stop_ids.end()), start_after_(start_after) {
  std::sort(stop_ids_.begin(), stop_ids_.end());
  stop_ids_.erase(std::unique(stop_ids_.begin(), stop_ids_.end()), stop_ids_.end());
  const grammar::TokenIndex& index = matcher_.grammar().tokens();
  for (int32_t id : index.stop_ids()) {
    if (!std::binary_search(stop_ids_.begin(), stop_ids_.end(), id)) foreign_stops_.push_back(id);
  }
  grammar_words_ = index.n_words();
  // Words past the vocabulary's (a model padded beyond its tokenizer) stay 0: never allowed.
  mask_.assign(static_cast<size_t>(std::max<int64_t>(grammar_words_, (n_vocab + 63) / 64)), 0);
}

std::span<const uint64_t> SequenceConstraint::mask() {
  if (!started()) return {};
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

SequenceConstraint::Next SequenceConstraint::accept(int32_t token) {
  // A stop ends the sequence (the scheduler sees it); the matcher has nothing left to follow.
  if (std::binary_search(stop_ids_.begin(), stop_ids_.end(), token)) return Next::kContinue;
  if (!started()) {
    if (token == start_after_) start_after_ = -1;
    return Next::kContinue;
  }
  if (!matcher_.accept_token(token)) return Next::kRefused;
  return matcher_.is_complete() ? Next::kComplete : Next::kContinue;
}

}  // namespace deepinfer
