// A Grammar compiled for matching: one DFA per rule, over bytes and rule calls.
//
// Each rule's expression becomes a Thompson NFA whose edges are byte ranges, epsilons and calls
// of other rules; the subset construction makes it deterministic per symbol (a byte, or "call
// rule R"). Rules stay separate automata joined by calls, so the matcher (stacks.h) is a
// pushdown automaton: a frame is a DFA state, a call pushes the callee's start state above a
// frame holding the return state, and a final state pops. A byte can still be consumed along
// several paths (a byte edge and a call both starting with it, two calls): the matcher keeps a
// set of stacks, as a GLR parser does.
//
// Why a pushdown automaton over per-rule DFAs rather than an Earley parser: JSON Schema grammars
// are almost deterministic, so the set of live stacks is nearly always one or two, and a byte
// then costs one range lookup and one hash-consed push, where an Earley step pays for item sets
// and completion lists. Sharing rules (a JSON string, a number) across the grammar also makes a
// DFA state the natural key for precomputed token masks (token_mask.h). What an Earley parser
// would handle and this does not is left recursion; the compiler refuses it with the rule's name.
//
// The compile budget bounds NFA and DFA states and wall time; past it compile() fails with
// RESOURCE_EXHAUSTED naming what ran out, so a pathological grammar (a{1000}{1000}, an
// exponential subset construction) is refused instead of hanging its caller.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepinfer/status.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar {

struct CompileBudget {
  int64_t max_states = 250000;  // NFA states of one rule, and DFA states of all rules
  double max_seconds = 2.0;     // whole compilation (front end excluded)
};

class Automaton {
 public:
  struct Range {
    uint8_t lo, hi;
    uint32_t next;  // state id
  };
  struct Call {
    uint32_t rule;  // callee; its start state is rule_start(rule)
    uint32_t ret;   // state id in the caller to resume at after the callee pops
  };
  struct State {
    uint32_t first_range = 0, n_ranges = 0;  // ranges sorted by lo, disjoint
    uint32_t first_call = 0, n_calls = 0;
    uint32_t rule = 0;
    bool final = false;
  };

  // INVALID_ARGUMENT for an invalid grammar or left recursion (naming the rule),
  // RESOURCE_EXHAUSTED past the budget.
  static Result<std::shared_ptr<const Automaton>> compile(const Grammar& grammar, const CompileBudget& budget);

  uint32_t n_states() const { return static_cast<uint32_t>(states_.size()); }
  const State& state(uint32_t id) const { return states_[id]; }
  const Range* ranges(const State& s) const { return ranges_.data() + s.first_range; }
  const Call* calls(const State& s) const { return calls_.data() + s.first_call; }
  // Bytes no range boundary separates behave alike in every state: byte_class(b) numbers those
  // runs 0..n_byte_classes() - 1 (a JSON Schema grammar has a few dozen), so a dense transition
  // row per state needs n_byte_classes entries instead of 256.
  uint8_t byte_class(uint8_t b) const { return byte_class_[b]; }
  uint32_t n_byte_classes() const { return n_byte_classes_; }
  uint32_t rule_start(uint32_t rule) const { return rule_start_[rule]; }
  uint32_t root_start() const { return rule_start_[root_]; }
  const std::string& rule_name(uint32_t rule) const { return rule_names_[rule]; }
  // The state reached from `s` on byte `b`, or kNone.
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  uint32_t next(const State& s, uint8_t b) const {
    const Range* r = ranges(s);
    for (uint32_t i = 0; i < s.n_ranges; ++i) {
      if (b < r[i].lo) break;
      if (b <= r[i].hi) return r[i].next;
    }
    return kNone;
  }
  size_t memory_bytes() const;

 private:
  friend class AutomatonBuilder;
  std::vector<State> states_;
  std::vector<Range> ranges_;
  std::vector<Call> calls_;
  std::vector<uint32_t> rule_start_;  // [n_rules]; kNone for rules not reachable from the root
  std::vector<std::string> rule_names_;
  uint32_t root_ = 0;
  uint8_t byte_class_[256] = {};
  uint32_t n_byte_classes_ = 1;
};

}  // namespace deepinfer::grammar
