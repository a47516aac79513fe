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
// A grammar may start only after a text (the end of a reasoning model's thinking, the opening of
// a tool-call block): until the generated text holds it, sampling is free and the matcher sees
// nothing; the bytes of the token that completes it beyond its end are the grammar's first. A
// token that would complete it with bytes the grammar refuses is masked out, so the grammar
// never has to refuse a token it did not mask.
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
#include <string>
#include <string_view>
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
  // text after which the grammar starts (Constraint::start_after), empty: at once.
  SequenceConstraint(std::shared_ptr<const grammar::CompiledGrammar> grammar, std::span<const int32_t> stop_ids,
                     int64_t n_vocab, std::string_view start_after = {});

  // The tokens allowed next; empty (any token) before the grammar starts. Writes a buffer owned
  // here: no allocation once the matcher is warm.
  std::span<const uint64_t> mask();
  // Computes the next mask now, so that mask() returns it without work until accept() moves
  // on: the engine calls this while the model's forward pass runs (masks in parallel with the
  // pass), and the sampler then finds the mask ready.
  void prepare_mask();
  // Follows the sampled token. kComplete: the grammar is complete (the sequence ends here);
  // kRefused: the grammar allows no token at all here (nesting past its depth limit).
  Next accept(int32_t token);
  bool started() const { return trigger_.empty(); }
  // The text the grammar forces next (Matcher::forced_bytes, up to max_bytes, cut to whole
  // UTF-8 characters); empty before the grammar starts.
  std::string forced_text(size_t max_bytes);
  // Whether the grammar has started and forces its next byte (forced_text would not be empty).
  bool forces_text() { return started() && !matcher_.forced_bytes(1).empty(); }

 private:
  grammar::Matcher matcher_;
  std::vector<int32_t> stop_ids_;       // the request's, each once
  std::vector<int32_t> foreign_stops_;  // the vocabulary's stops the request does not stop at
  std::vector<uint64_t> mask_;          // [max(vocabulary, model) words]
  int32_t grammar_words_ = 0;
  std::span<const uint64_t> compute_mask();
  bool mask_ready_ = false;             // prepare_mask() ran since the last accept()
  std::span<const uint64_t> ready_mask_;

  // Until the grammar starts: the text that starts it (empty once it has), the longest prefix of
  // it the generated text ends with, and its KMP failure function.
  int32_t trigger_step(int32_t state, uint8_t byte) const;
  // Feeds `bytes` to the trigger from *state: one past the byte that completes it, else npos.
  size_t feed_trigger(std::string_view bytes, int32_t* state) const;
  // Clears, in mask_, the tokens that would complete the trigger with bytes the grammar refuses.
  void refuse_bad_trigger_endings();
  std::string trigger_;
  int32_t trigger_state_ = 0;
  std::vector<int32_t> trigger_fail_;
  // Tokens that hold the whole trigger (they complete it from any state), found once per
  // vocabulary and trigger (TokenIndex::tokens_containing).
  std::shared_ptr<const std::vector<int32_t>> trigger_holders_;  // shared by the index's cache
};

}  // namespace deepinfer
