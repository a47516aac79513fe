// The grammar IR every front end (regex, JSON Schema, GBNF) lowers to, and that the automaton
// compiler (automaton.h) turns into per-rule DFAs.
//
// A Grammar is a set of named rules over bytes. A rule's body is an expression tree stored in
// one arena (ids index `exprs`): byte strings, byte sets, sequences, alternations, bounded or
// unbounded repetition and calls of other rules. Text is bytes: a front end that speaks Unicode
// (a regex class, a JSON string) lowers code points to their UTF-8 byte sequences itself
// (utf8_ranges.h), so the matcher never decodes.
//
// Expressions are values shared by id: a front end may use one id in several places (the
// automaton compiler copies it into each). A Grammar is built on one thread and read-only
// afterwards.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer::grammar {

using ExprId = int32_t;
using RuleId = int32_t;

inline constexpr int32_t kUnbounded = -1;  // Repeat::max for `*` and `+`

// 256 bits, one per byte value.
struct ByteSet {
  std::array<uint64_t, 4> words{};

  void add(uint8_t b) { words[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool has(uint8_t b) const { return (words[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (words[0] | words[1] | words[2] | words[3]) == 0; }
  ByteSet complement() const {
    ByteSet out;
    for (int i = 0; i < 4; ++i) out.words[i] = ~words[i];
    return out;
  }
  bool operator==(const ByteSet&) const = default;
};

// A deterministic automaton over bytes, usable as one expression: how a front end writes a
// language built by intersection or complement (byte_dfa.h), which the other expressions cannot
// say. State 0 is the start, and every state reaches a final one (the DFA is trimmed), so the
// matcher never enters a state that cannot complete. No states: the empty language.
struct ByteDfa {
  static constexpr uint32_t kDead = 0xFFFFFFFFu;
  std::array<uint8_t, 256> cls{};  // byte -> class; bytes of one class go to the same states
  uint32_t n_classes = 1;
  std::vector<uint32_t> next;      // [n_states * n_classes]: target state or kDead
  std::vector<char> final;         // [n_states]

  uint32_t n_states() const { return static_cast<uint32_t>(final.size()); }
  uint32_t step(uint32_t s, uint8_t b) const { return next[size_t{s} * n_classes + cls[b]]; }
};

enum class ExprKind : uint8_t {
  kEmpty,    // matches the empty string
  kNothing,  // matches no string (an empty alternation; an enum filtered to nothing)
  kBytes,    // a literal byte string
  kByteSet,  // one byte of the set
  kSeq,      // children in order
  kAlt,      // any one child
  kRepeat,   // child repeated [min, max] times (max kUnbounded)
  kRule,     // a call of rule `rule`
  kDfa,      // a string `dfa` accepts
};

struct Expr {
  ExprKind kind = ExprKind::kEmpty;
  int32_t min = 0, max = 0;       // kRepeat
  RuleId rule = -1;               // kRule
  std::string bytes;              // kBytes
  ByteSet set;                    // kByteSet
  std::vector<ExprId> children;   // kSeq, kAlt, kRepeat (one)
  std::shared_ptr<const ByteDfa> dfa;  // kDfa
};

struct Rule {
  std::string name;
  ExprId body = -1;  // -1 until defined
};

class Grammar {
 public:
  Grammar();

  ExprId empty() const { return kEmptyId; }
  ExprId nothing() const { return kNothingId; }
  ExprId bytes(std::string_view text);
  ExprId byte_set(const ByteSet& set);
  ExprId byte_range(uint8_t lo, uint8_t hi);
  ExprId seq(std::vector<ExprId> children);
  ExprId alt(std::vector<ExprId> children);
  ExprId repeat(ExprId child, int32_t min, int32_t max);
  ExprId optional(ExprId child) { return repeat(child, 0, 1); }
  ExprId star(ExprId child) { return repeat(child, 0, kUnbounded); }
  ExprId plus(ExprId child) { return repeat(child, 1, kUnbounded); }
  ExprId call(RuleId rule);
  ExprId dfa(std::shared_ptr<const ByteDfa> dfa);  // nothing() for an empty one

  // A rule declared before its body exists (recursion, forward references in GBNF).
  RuleId declare_rule(std::string name);
  void define_rule(RuleId rule, ExprId body);
  RuleId add_rule(std::string name, ExprId body);
  RuleId find_rule(std::string_view name) const;  // -1 when absent
  // A name not yet used, built from `base` ("value", "value_2", ...).
  std::string fresh_name(std::string_view base) const;
  // Copies every rule of `other` in under fresh names starting with `prefix` (a prefix no
  // front end's names can start with keeps them apart); returns its root's rule here.
  RuleId import(const Grammar& other, std::string_view prefix);

  void set_root(RuleId rule) { root_ = rule; }
  RuleId root() const { return root_; }

  const Expr& expr(ExprId id) const { return exprs_[id]; }
  const Rule& rule(RuleId id) const { return rules_[id]; }
  int32_t n_rules() const { return static_cast<int32_t>(rules_.size()); }
  int32_t n_exprs() const { return static_cast<int32_t>(exprs_.size()); }

  // INVALID_ARGUMENT naming the first rule that is called but never defined, or no root.
  Status validate() const;

  // GBNF-like text of every rule, for tests and `--dump`.
  std::string to_string() const;

 private:
  static constexpr ExprId kEmptyId = 0;
  static constexpr ExprId kNothingId = 1;
  ExprId push(Expr e);
  void print_expr(ExprId id, std::string* out) const;

  std::vector<Expr> exprs_;
  std::vector<Rule> rules_;
  std::unordered_map<std::string, RuleId> rule_by_name_;
  RuleId root_ = -1;
};

}  // namespace deepinfer::grammar
