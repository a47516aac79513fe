#include "grammar/grammar.h"

#include <cstdio>

namespace deepinfer::grammar {

namespace {

Expr make(ExprKind kind) {
  Expr e;
  e.kind = kind;
  return e;
}

}  // namespace

Grammar::Grammar() {
  exprs_.push_back(make(ExprKind::kEmpty));
  exprs_.push_back(make(ExprKind::kNothing));
}

ExprId Grammar::push(Expr e) {
  exprs_.push_back(std::move(e));
  return static_cast<ExprId>(exprs_.size() - 1);
}

ExprId Grammar::bytes(std::string_view text) {
  if (text.empty()) return kEmptyId;
  Expr e = make(ExprKind::kBytes);
  e.bytes = std::string(text);
  return push(std::move(e));
}

ExprId Grammar::byte_set(const ByteSet& set) {
  if (set.empty()) return kNothingId;
  Expr e = make(ExprKind::kByteSet);
  e.set = set;
  return push(std::move(e));
}

ExprId Grammar::byte_range(uint8_t lo, uint8_t hi) {
  ByteSet set;
  set.add_range(lo, hi);
  return byte_set(set);
}

ExprId Grammar::seq(std::vector<ExprId> children) {
  std::vector<ExprId> kept;
  kept.reserve(children.size());
  for (ExprId c : children) {
    if (c == kNothingId) return kNothingId;
    if (c != kEmptyId) kept.push_back(c);
  }
  if (kept.empty()) return kEmptyId;
  if (kept.size() == 1) return kept[0];
  Expr e = make(ExprKind::kSeq);
  e.children = std::move(kept);
  return push(std::move(e));
}

ExprId Grammar::alt(std::vector<ExprId> children) {
  std::vector<ExprId> kept;
  kept.reserve(children.size());
  for (ExprId c : children) {
    if (c != kNothingId) kept.push_back(c);
  }
  if (kept.empty()) return kNothingId;
  if (kept.size() == 1) return kept[0];
  Expr e = make(ExprKind::kAlt);
  e.children = std::move(kept);
  return push(std::move(e));
}

ExprId Grammar::repeat(ExprId child, int32_t min, int32_t max) {
  if (max == 0 || child == kEmptyId) return kEmptyId;
  if (child == kNothingId) return min == 0 ? kEmptyId : kNothingId;
  if (min == 1 && max == 1) return child;
  Expr e = make(ExprKind::kRepeat);
  e.min = min;
  e.max = max;
  e.children = {child};
  return push(std::move(e));
}

ExprId Grammar::call(RuleId rule) {
  Expr e = make(ExprKind::kRule);
  e.rule = rule;
  return push(std::move(e));
}

RuleId Grammar::declare_rule(std::string name) {
  auto it = rule_by_name_.find(name);
  if (it != rule_by_name_.end()) return it->second;
  const auto id = static_cast<RuleId>(rules_.size());
  rule_by_name_.emplace(name, id);
  rules_.push_back(Rule{.name = std::move(name)});
  return id;
}

void Grammar::define_rule(RuleId rule, ExprId body) { rules_[rule].body = body; }

RuleId Grammar::add_rule(std::string name, ExprId body) {
  const RuleId id = declare_rule(std::move(name));
  define_rule(id, body);
  return id;
}

RuleId Grammar::find_rule(std::string_view name) const {
  auto it = rule_by_name_.find(std::string(name));
  return it == rule_by_name_.end() ? -1 : it->second;
}

std::string Grammar::fresh_name(std::string_view base) const {
  std::string name(base);
  for (int i = 2; rule_by_name_.count(name); ++i) name = std::string(base) + "_" + std::to_string(i);
  return name;
}

RuleId Grammar::import(const Grammar& other, std::string_view prefix) {
  std::vector<RuleId> rules(static_cast<size_t>(other.n_rules()));
  for (RuleId r = 0; r < other.n_rules(); ++r) {
    rules[static_cast<size_t>(r)] = declare_rule(fresh_name(std::string(prefix) + other.rule(r).name));
  }
  // A child's id is always below its parent's (expressions are built bottom-up), so one pass in
  // id order maps every child before its parent.
  std::vector<ExprId> exprs(static_cast<size_t>(other.n_exprs()), kNothingId);
  auto mapped = [&](const std::vector<ExprId>& children) {
    std::vector<ExprId> out;
    out.reserve(children.size());
    for (ExprId c : children) out.push_back(exprs[static_cast<size_t>(c)]);
    return out;
  };
  for (ExprId id = 0; id < other.n_exprs(); ++id) {
    const Expr& e = other.expr(id);
    ExprId& to = exprs[static_cast<size_t>(id)];
    switch (e.kind) {
      case ExprKind::kEmpty: to = empty(); break;
      case ExprKind::kNothing: to = nothing(); break;
      case ExprKind::kBytes: to = bytes(e.bytes); break;
      case ExprKind::kByteSet: to = byte_set(e.set); break;
      case ExprKind::kSeq: to = seq(mapped(e.children)); break;
      case ExprKind::kAlt: to = alt(mapped(e.children)); break;
      case ExprKind::kRepeat: to = repeat(exprs[static_cast<size_t>(e.children[0])], e.min, e.max); break;
      case ExprKind::kRule: to = call(rules[static_cast<size_t>(e.rule)]); break;
      case ExprKind::kDfa: to = dfa(e.dfa); break;
    }
  }
  for (RuleId r = 0; r < other.n_rules(); ++r) {
    const ExprId body = other.rule(r).body;
    if (body >= 0) define_rule(rules[static_cast<size_t>(r)], exprs[static_cast<size_t>(body)]);
  }
  return rules[static_cast<size_t>(other.root())];
}

Status Grammar::validate() const {
  if (root_ < 0 || root_ >= n_rules()) return invalid_argument("grammar has no root rule");
  for (const Rule& r : rules_) {
    if (r.body < 0) return invalid_argument("rule '" + r.name + "' is used but never defined");
  }
  return Status::ok_status();
}

ExprId Grammar::dfa(std::shared_ptr<const ByteDfa> dfa) {
  if (!dfa || dfa->n_states() == 0) return kNothingId;
  Expr e = make(ExprKind::kDfa);
  e.dfa = std::move(dfa);
  return push(std::move(e));
}

namespace {

void print_byte(uint8_t b, bool in_class, std::string* out) {
  if (b == '\\' || b == (in_class ? ']' : '"') || (in_class && (b == '-' || b == '^'))) {
    out->push_back('\\');
    out->push_back(static_cast<char>(b));
  } else if (b >= 0x20 && b < 0x7f) {
    out->push_back(static_cast<char>(b));
  } else {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02X", b);
    *out += buf;
  }
}

}  // namespace

void Grammar::print_expr(ExprId id, std::string* out) const {
  const Expr& e = exprs_[id];
  switch (e.kind) {
    case ExprKind::kEmpty: *out += "\"\""; break;
    case ExprKind::kNothing: *out += "[]"; break;
    case ExprKind::kBytes:
      out->push_back('"');
      for (char c : e.bytes) print_byte(static_cast<uint8_t>(c), false, out);
      out->push_back('"');
      break;
    case ExprKind::kByteSet: {
      out->push_back('[');
      for (int b = 0; b < 256;) {
        if (!e.set.has(static_cast<uint8_t>(b))) { ++b; continue; }
        int hi = b;
        while (hi + 1 < 256 && e.set.has(static_cast<uint8_t>(hi + 1))) ++hi;
        print_byte(static_cast<uint8_t>(b), true, out);
        if (hi > b) {
          out->push_back('-');
          print_byte(static_cast<uint8_t>(hi), true, out);
        }
        b = hi + 1;
      }
      out->push_back(']');
      break;
    }
    case ExprKind::kSeq:
    case ExprKind::kAlt:
      out->push_back('(');
      for (size_t i = 0; i < e.children.size(); ++i) {
        if (i) *out += e.kind == ExprKind::kSeq ? " " : " | ";
        print_expr(e.children[i], out);
      }
      out->push_back(')');
      break;
    case ExprKind::kRepeat:
      print_expr(e.children[0], out);
      out->push_back('{');
      *out += std::to_string(e.min);
      out->push_back(',');
      if (e.max != kUnbounded) *out += std::to_string(e.max);
      out->push_back('}');
      break;
    case ExprKind::kRule: *out += rules_[e.rule].name; break;
    case ExprKind::kDfa: *out += "<dfa of " + std::to_string(e.dfa->n_states()) + " states>"; break;
  }
}

std::string Grammar::to_string() const {
  std::string out;
  for (const Rule& r : rules_) {
    out += r.name + " ::= ";
    if (r.body >= 0) print_expr(r.body, &out);
    out += "\n";
  }
  return out;
}

}  // namespace deepinfer::grammar
