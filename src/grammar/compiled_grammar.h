// A grammar compiled against one vocabulary: the automaton, the token index, and the token
// classes of automaton states, computed on first use and kept for every later matcher.
//
// The token class of a state s (the xgrammar idea, made lazy): walk the token trie from a stack
// holding only s, whose parent is unknown (Stacks::kBottom), with the first byte taken by s's own
// byte edges. A token is
//   accepted   if some path consumes all its bytes without popping past s's frame: it is then
//              allowed under every stack whose top is s, whatever lies below;
//   uncertain  if no path accepts it but some path popped past s's frame before its last byte:
//              the rest depends on the caller, so it is checked against the real stack;
//   refused    otherwise, under every stack.
// Calls and pops out of s's frame without a byte are not s's business: the matcher's sets list
// those stacks separately (stacks.h), each with its own top. So a mask is the union over the
// set's stacks of their tops' accepted sets plus the uncertain tokens that pass against that
// stack, and most masks touch only precomputed bitmaps. Computing a class costs one trie walk,
// like one uncached mask; states of shared rules (JSON strings, numbers) are computed once.
//
// A state from which no call can be reached (inside a JSON string, a number, an enum literal) has
// a class that depends only on the DFA below it: such classes are also kept in a process-wide
// cache keyed by that sub-automaton and the vocabulary, so every grammar that uses a JSON string
// shares one computation of the string's classes.
//
// Thread-safe: matchers on many threads share one CompiledGrammar; a class is computed under a
// mutex once and read without locking afterwards.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/token_index.h"

namespace deepinfer::grammar {

struct TokenClass {
  std::vector<uint64_t> accepted_bits;  // [n_words] when many tokens are accepted, else empty
  std::vector<int32_t> accepted_list;   // the accepted ids when few are
  // Uncertain ids in trie order, each with the length of the prefix it shares with the one
  // before it, so a check reuses the previous token's sets for that prefix.
  std::vector<int32_t> uncertain;
  std::vector<uint16_t> uncertain_lcp;
  size_t memory_bytes() const;
};

class DfaStepTables;  // compiled_grammar.cpp: dense DFA steps for the class walks

struct MatcherLimits {
  uint32_t max_stack_depth = 2000;  // deeper nesting is refused (a bound on recursion)
};

class CompiledGrammar {
 public:
  CompiledGrammar(std::shared_ptr<const Automaton> automaton, std::shared_ptr<const TokenIndex> tokens,
                  MatcherLimits limits);
  ~CompiledGrammar();

  const Automaton& automaton() const { return *automaton_; }
  const TokenIndex& tokens() const { return *tokens_; }
  const MatcherLimits& limits() const { return limits_; }
  const TokenClass& token_class(uint32_t state) const;
  size_t memory_bytes() const;  // automaton plus the classes computed so far

 private:
  TokenClass compute_class(uint32_t state) const;
  std::shared_ptr<const TokenClass> shared_class(uint32_t state) const;

  std::shared_ptr<const Automaton> automaton_;
  std::shared_ptr<const TokenIndex> tokens_;
  MatcherLimits limits_;
  mutable std::mutex mutex_;
  mutable std::unique_ptr<std::atomic<const TokenClass*>[]> classes_;  // [n_states], owned below
  mutable std::vector<std::shared_ptr<const TokenClass>> owned_;
  mutable std::unique_ptr<DfaStepTables> steps_;  // made on the first class walk, under mutex_
};

// The walk CompiledGrammar::token_class runs. `shortcuts` false: every trie node is visited
// and every byte below a call goes through the full stacks (no virtual levels, no subtree
// accepted whole), the plain reference the tests compare the walk with.
TokenClass compute_token_class(const Automaton& automaton, const TokenIndex& tokens, uint32_t state,
                               uint32_t max_stack_depth, bool shortcuts = true);

}  // namespace deepinfer::grammar
