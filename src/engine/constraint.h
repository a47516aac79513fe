// Structured output in the engine: a request's Constraint compiled against the model's
// vocabulary, and per sequence a matcher that masks the sampler and follows the sampled tokens.
//
// Compilation runs in Engine::submit(), on the submitting thread, through a cache of compiled
// grammars: a request that compiles never stalls the engine thread's batch, and a bad grammar
// fails submit() (INVALID_ARGUMENT naming the problem, RESOURCE_EXHAUSTED past the budget).
//
// The matcher follows generated tokens only (never the prompt), and only tokens that the
// sequence keeps: a row dropped because its request was preempted or cancelled is never
// sampled, and a preempted request recomputes its KV without sampling again, so preemption and
// prefix-cache hits leave the matcher where the tokens are.
//
// A grammar may start only after a marker token (the end of a reasoning model's thinking):
// until the sequence generates it, sampling is unconstrained and the matcher sees nothing.
//
// Stops: the request's stop ids (the end-of-generation ids unless ignore_eos, and
// stop_token_ids) are allowed exactly where the grammar may end; the tokenizer's other
// end-of-generation ids never are. Once the grammar is complete (only a stop could follow) the
// sequence ends there without sampling that stop.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "deepinfer/status.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"

namespace deepinfer {

class Tokenizer;

class ConstraintCompiler {
 public:
  ConstraintCompiler(std::shared_ptr<const Tokenizer> tokenizer, size_t cache_capacity = 64);
  // Null for ConstraintKind::kNone. Thread-safe.
  Result<std::shared_ptr<const grammar::CompiledGrammar>> compile(const Constraint& constraint);
  // The id of constraint.start_after (-1 when empty); INVALID_ARGUMENT unless it is one token.
  Result<int32_t> start_token(const Constraint& constraint) const;

 private:
  std::shared_ptr<const grammar::TokenIndex> tokens();

  std::shared_ptr<const Tokenizer> tokenizer_;
  std::once_flag index_once_;
  std::shared_ptr<const grammar::TokenIndex> index_;  // built on the first constrained request
  grammar::GrammarCache cache_;
};

class SequenceConstraint {
 public:
  enum class Next { kContinue, kComplete, kRefused };

  // `stop_ids`: the request's; `n_vocab`: the model's (the mask covers it); `start_after`: the
  // token after which the grammar starts (ConstraintCompiler::start_token), -1: at once.
  SequenceConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar, std::span<const int32_t> stop_ids,
                     int64_t n_vocab, int32_t start_after = -1);

  // The tokens allowed next; empty (any token) before the grammar starts. Writes a buffer owned
  // here: no allocation once the matcher is warm.
  std::span<const uint64_t> mask();
  // Follows the sampled token. kComplete: the grammar is complete (the sequence ends here);
  // kRefused: the grammar allows no token at all here (nesting past its depth limit).
  Next accept(int32_t token);
  bool started() const { return start_after_ < 0; }

 private:
  grammar::Matcher matcher_;
  std::vector<int32_t> stop_ids_;       // the request's, each once
  std::vector<int32_t> foreign_stops_;  // the vocabulary's stops the request does not stop at
  std::vector<uint64_t> mask_;          // [max(vocabulary, model) words]
  int32_t grammar_words_ = 0;
  int32_t start_after_ = -1;  // -1 once the grammar has started
};

}  // namespace deepinfer
