#include "grammar/automaton.h"

#include <algorithm>
#include <deque>
#include <map>
#include <span>
#include <unordered_map>

namespace deepinfer::grammar {

class AutomatonBuilder {
 public:
  AutomatonBuilder(const Grammar& g, const CompileBudget& budget)
      : g_(g), budget_(budget), start_time_(std::chrono::steady_clock::now()) {}

  Result<std::shared_ptr<const Automaton>> run();

 private:
  struct NEdge {
    uint8_t lo, hi;
    int32_t target;
  };
  struct NState {
    std::vector<NEdge> bytes;
    std::vector<int32_t> eps;
    std::vector<std::pair<uint32_t, int32_t>> calls;  // (rule, target)
  };
  using StateSet = std::vector<int32_t>;  // sorted NFA state ids

  Result<int32_t> new_state();
  Status build(ExprId id, int32_t from, int32_t to, int depth);
  Status check_time();
  // The closure of `seeds` into `out` (cleared first).
  void closure(std::span<const int32_t> seeds, StateSet& out);
  Status build_rule(uint32_t rule);
  Status check_left_recursion() const;

  const Grammar& g_;
  CompileBudget budget_;
  std::chrono::steady_clock::time_point start_time_;
  // The rule being built's NFA: states [0, nfa_size_). Rules are built one after another and
  // the states past nfa_size_ keep their edge lists' storage for the next rule.
  std::vector<NState> nfa_;
  size_t nfa_size_ = 0;
  std::vector<char> seen_;   // closure scratch, [nfa_size_]
  std::vector<int32_t> closure_work_, closure_visited_;
  std::vector<NEdge> class_runs_;  // kDfa scratch: (lo, hi, the run's byte class)
  int32_t end_ = -1;         // the rule's final NFA state
  std::shared_ptr<Automaton> out_ = std::make_shared<Automaton>();
  std::deque<uint32_t> rule_queue_;
  std::vector<char> rule_scheduled_;
};

Status AutomatonBuilder::check_time() {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time_).count();
  if (s > budget_.max_seconds) {
    return resource_exhausted("grammar compilation exceeded its time budget of " +
                              std::to_string(budget_.max_seconds) + " s");
  }
  return Status::ok_status();
}

Result<int32_t> AutomatonBuilder::new_state() {
  if (static_cast<int64_t>(nfa_size_) >= budget_.max_states) {
    return resource_exhausted("grammar too large: a rule needs more than " + std::to_string(budget_.max_states) +
                              " automaton states (repetition bounds or nesting too large)");
  }
  if ((nfa_size_ & 4095) == 4095) DI_RETURN_IF_ERROR(check_time());
  if (nfa_size_ == nfa_.size()) {
    nfa_.emplace_back();
  } else {
    NState& reused = nfa_[nfa_size_];
    reused.bytes.clear();
    reused.eps.clear();
    reused.calls.clear();
  }
  return static_cast<int32_t>(nfa_size_++);
}

Status AutomatonBuilder::build(ExprId id, int32_t from, int32_t to, int depth) {
  if (depth > 2000) return resource_exhausted("grammar expression nested more than 2000 deep");
  const Expr& e = g_.expr(id);
  switch (e.kind) {
    case ExprKind::kEmpty: nfa_[from].eps.push_back(to); return Status::ok_status();
    case ExprKind::kNothing: return Status::ok_status();
    case ExprKind::kBytes: {
      int32_t cur = from;
      for (size_t i = 0; i < e.bytes.size(); ++i) {
        int32_t next = to;
        if (i + 1 < e.bytes.size()) {
          DI_ASSIGN_OR_RETURN(next, new_state());
        }
        const auto b = static_cast<uint8_t>(e.bytes[i]);
        nfa_[cur].bytes.push_back({b, b, next});
        cur = next;
      }
      return Status::ok_status();
    }
    case ExprKind::kByteSet:
      for (int b = 0; b < 256;) {
        if (!e.set.has(static_cast<uint8_t>(b))) { ++b; continue; }
        int hi = b;
        while (hi + 1 < 256 && e.set.has(static_cast<uint8_t>(hi + 1))) ++hi;
        nfa_[from].bytes.push_back({static_cast<uint8_t>(b), static_cast<uint8_t>(hi), to});
        b = hi + 1;
      }
      return Status::ok_status();
    case ExprKind::kSeq: {
      int32_t cur = from;
      for (size_t i = 0; i < e.children.size(); ++i) {
        int32_t next = to;
        if (i + 1 < e.children.size()) {
          DI_ASSIGN_OR_RETURN(next, new_state());
        }
        DI_RETURN_IF_ERROR(build(e.children[i], cur, next, depth + 1));
        cur = next;
      }
      return Status::ok_status();
    }
    case ExprKind::kAlt:
      for (ExprId c : e.children) {
        // Each branch gets its own entry so that a loop inside one cannot reach another's edges.
        DI_ASSIGN_OR_RETURN(int32_t in, new_state());
        nfa_[from].eps.push_back(in);
        DI_RETURN_IF_ERROR(build(c, in, to, depth + 1));
      }
      return Status::ok_status();
    case ExprKind::kRepeat: {
      const ExprId child = e.children[0];
      int32_t cur = from;
      for (int32_t i = 0; i < e.min; ++i) {
        DI_ASSIGN_OR_RETURN(int32_t next, new_state());
        DI_RETURN_IF_ERROR(build(child, cur, next, depth + 1));
        cur = next;
      }
      if (e.max == kUnbounded) {
        DI_ASSIGN_OR_RETURN(int32_t loop, new_state());
        DI_ASSIGN_OR_RETURN(int32_t back, new_state());
        nfa_[cur].eps.push_back(loop);
        nfa_[loop].eps.push_back(to);
        nfa_[back].eps.push_back(loop);
        return build(child, loop, back, depth + 1);
      }
      nfa_[cur].eps.push_back(to);
      for (int32_t i = e.min; i < e.max; ++i) {
        DI_ASSIGN_OR_RETURN(int32_t next, new_state());
        DI_RETURN_IF_ERROR(build(child, cur, next, depth + 1));
        nfa_[next].eps.push_back(to);
        cur = next;
      }
      return Status::ok_status();
    }
    case ExprKind::kDfa: {
      const ByteDfa& d = *e.dfa;
      const auto base = static_cast<int32_t>(nfa_size_);
      for (uint32_t i = 0; i < d.n_states(); ++i) {
        DI_RETURN_IF_ERROR(new_state().status());
      }
      nfa_[from].eps.push_back(base);
      // The runs of bytes of one class, found once: a state's edges are then a step per run
      // instead of per byte (a long length bound's DFA has hundreds of states).
      class_runs_.clear();
      for (int b = 0; b < 256;) {
        int hi = b;
        while (hi + 1 < 256 && d.cls[hi + 1] == d.cls[b]) ++hi;
        class_runs_.push_back({static_cast<uint8_t>(b), static_cast<uint8_t>(hi), static_cast<int32_t>(d.cls[b])});
        b = hi + 1;
      }
      for (uint32_t i = 0; i < d.n_states(); ++i) {
        if (d.final[i]) nfa_[base + i].eps.push_back(to);
        std::vector<NEdge>& edges = nfa_[base + i].bytes;
        uint32_t last = ByteDfa::kDead;  // the target of edges.back()
        for (const NEdge& run : class_runs_) {
          const uint32_t t = d.next[size_t{i} * d.n_classes + static_cast<uint32_t>(run.target)];
          if (t == ByteDfa::kDead) {
            last = ByteDfa::kDead;
          } else if (t == last && edges.back().hi + 1 == run.lo) {
            edges.back().hi = run.hi;
          } else {
            edges.push_back({run.lo, run.hi, base + static_cast<int32_t>(t)});
            last = t;
          }
        }
      }
      return Status::ok_status();
    }
    case ExprKind::kRule:
      nfa_[from].calls.emplace_back(static_cast<uint32_t>(e.rule), to);
      if (!rule_scheduled_[e.rule]) {
        rule_scheduled_[e.rule] = 1;
        rule_queue_.push_back(static_cast<uint32_t>(e.rule));
      }
      return Status::ok_status();
  }
  return Status::ok_status();
}

// The epsilon closure of `seeds`, keeping only its important states: those with a byte edge or
// a call, and the rule's end. A state with epsilons alone adds nothing to a DFA state's edges
// or finality, so two closures with the same important states are the same DFA state: the sets
// stay small (Thompson junctions are most NFA states) and equal sets merge.
void AutomatonBuilder::closure(std::span<const int32_t> seeds, StateSet& out) {
  out.clear();
  std::vector<int32_t>& work = closure_work_;
  std::vector<int32_t>& visited = closure_visited_;
  work.assign(seeds.begin(), seeds.end());
  visited.clear();
  std::vector<char>& seen = seen_;
  while (!work.empty()) {
    const int32_t s = work.back();
    work.pop_back();
    if (seen[s]) continue;
    seen[s] = 1;
    visited.push_back(s);
    const NState& n = nfa_[s];
    if (!n.bytes.empty() || !n.calls.empty() || s == end_) out.push_back(s);
    for (int32_t t : n.eps) work.push_back(t);
  }
  for (int32_t s : visited) seen[s] = 0;
  std::sort(out.begin(), out.end());
}

Status AutomatonBuilder::build_rule(uint32_t rule) {
  nfa_size_ = 0;
  DI_ASSIGN_OR_RETURN(int32_t start, new_state());
  DI_ASSIGN_OR_RETURN(int32_t end, new_state());
  end_ = end;
  DI_RETURN_IF_ERROR(build(g_.rule(static_cast<RuleId>(rule)).body, start, end, 0));
  seen_.assign(nfa_size_, 0);

  Automaton& a = *out_;
  struct SetHash {
    size_t operator()(const StateSet& v) const {
      uint64_t h = 0xcbf29ce484222325ull;
      for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 0x100000001b3ull;
      return static_cast<size_t>(h ^ (h >> 32));
    }
  };
  // The sets live once, as the map's keys (whose addresses rehashing keeps); `pending` points
  // at them by local id. Lookups go through one reused buffer, so a closure that is already a
  // state allocates nothing.
  std::unordered_map<StateSet, uint32_t, SetHash> ids;
  std::vector<const StateSet*> pending;  // by local id
  const auto base = static_cast<uint32_t>(a.states_.size());
  auto intern = [&](const StateSet& set) -> Result<uint32_t> {
    auto it = ids.find(set);
    if (it != ids.end()) return it->second;
    if (static_cast<int64_t>(a.states_.size()) >= budget_.max_states) {
      return resource_exhausted("grammar too large: more than " + std::to_string(budget_.max_states) +
                                " automaton states after determinization");
    }
    const auto id = static_cast<uint32_t>(a.states_.size());
    a.states_.push_back(Automaton::State{.rule = rule});
    pending.push_back(&ids.emplace(set, id).first->first);
    return id;
  };
  StateSet closed;
  const int32_t start_seed[] = {start};
  closure(start_seed, closed);
  DI_ASSIGN_OR_RETURN(uint32_t start_id, intern(closed));
  a.rule_start_[rule] = start_id;

  std::vector<int> points;
  std::vector<StateSet> per_interval;  // targets of each elementary byte interval
  std::vector<std::pair<uint32_t, int32_t>> call_edges;  // (callee, return target)
  std::vector<int32_t> call_targets;
  std::vector<Automaton::Range> ranges;
  std::vector<Automaton::Call> calls;
  for (size_t local = 0; local < pending.size(); ++local) {
    if ((local & 255) == 255) DI_RETURN_IF_ERROR(check_time());
    const StateSet& members = *pending[local];
    const uint32_t id = base + static_cast<uint32_t>(local);
    points.clear();
    call_edges.clear();
    bool final = false;
    for (int32_t m : members) {
      if (m == end) final = true;
      for (const NEdge& e : nfa_[m].bytes) {
        points.push_back(e.lo);
        points.push_back(e.hi + 1);
      }
      call_edges.insert(call_edges.end(), nfa_[m].calls.begin(), nfa_[m].calls.end());
    }
    std::sort(points.begin(), points.end());
    points.erase(std::unique(points.begin(), points.end()), points.end());
    ranges.clear();
    const size_t n_intervals = points.empty() ? 0 : points.size() - 1;
    if (per_interval.size() < n_intervals) per_interval.resize(n_intervals);
    for (size_t k = 0; k < n_intervals; ++k) per_interval[k].clear();
    for (int32_t m : members) {
      for (const NEdge& e : nfa_[m].bytes) {
        size_t k = std::lower_bound(points.begin(), points.end(), static_cast<int>(e.lo)) - points.begin();
        for (; k < n_intervals && points[k] <= e.hi; ++k) per_interval[k].push_back(e.target);
      }
    }
    for (size_t k = 0; k < n_intervals; ++k) {
      const int lo = points[k], hi = points[k + 1] - 1;
      if (per_interval[k].empty()) continue;
      closure(per_interval[k], closed);
      DI_ASSIGN_OR_RETURN(uint32_t next, intern(closed));
      if (!ranges.empty() && ranges.back().next == next && ranges.back().hi + 1 == lo) {
        ranges.back().hi = static_cast<uint8_t>(hi);
      } else {
        ranges.push_back({static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), next});
      }
    }
    // One call per callee, to the closure of all its return targets, in callee order. The sort
    // keeps members' order within a callee, as the targets were gathered before.
    std::stable_sort(call_edges.begin(), call_edges.end(),
                     [](const auto& x, const auto& y) { return x.first < y.first; });
    calls.clear();
    for (size_t k = 0; k < call_edges.size();) {
      const uint32_t callee = call_edges[k].first;
      call_targets.clear();
      for (; k < call_edges.size() && call_edges[k].first == callee; ++k) call_targets.push_back(call_edges[k].second);
      closure(call_targets, closed);
      DI_ASSIGN_OR_RETURN(uint32_t ret, intern(closed));
      calls.push_back({callee, ret});
    }
    Automaton::State& s = a.states_[id];
    s.final = final;
    s.first_range = static_cast<uint32_t>(a.ranges_.size());
    s.n_ranges = static_cast<uint32_t>(ranges.size());
    a.ranges_.insert(a.ranges_.end(), ranges.begin(), ranges.end());
    s.first_call = static_cast<uint32_t>(a.calls_.size());
    s.n_calls = static_cast<uint32_t>(calls.size());
    a.calls_.insert(a.calls_.end(), calls.begin(), calls.end());
  }
  return Status::ok_status();
}

// A rule that can reach a call of itself without consuming a byte would make the matcher push
// forever; such grammars are refused (rewrite `a ::= a "x" | "y"` as `a ::= "y" "x"*`).
Status AutomatonBuilder::check_left_recursion() const {
  const Automaton& a = *out_;
  const size_t n_rules = a.rule_start_.size();
  std::vector<char> nullable(n_rules, 0);
  // States reachable from a rule's start without consuming a byte, given `nullable`.
  auto null_reach = [&](uint32_t rule) {
    std::vector<uint32_t> out, work = {a.rule_start_[rule]};
    std::vector<uint32_t> seen;
    while (!work.empty()) {
      const uint32_t s = work.back();
      work.pop_back();
      if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
      seen.push_back(s);
      out.push_back(s);
      const Automaton::State& st = a.states_[s];
      for (uint32_t i = 0; i < st.n_calls; ++i) {
        const Automaton::Call& c = a.calls_[st.first_call + i];
        if (nullable[c.rule]) work.push_back(c.ret);
      }
    }
    return out;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < n_rules; ++r) {
      if (nullable[r] || a.rule_start_[r] == Automaton::kNone) continue;
      for (uint32_t s : null_reach(static_cast<uint32_t>(r))) {
        if (a.states_[s].final) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<uint32_t>> left(n_rules);
  for (size_t r = 0; r < n_rules; ++r) {
    if (a.rule_start_[r] == Automaton::kNone) continue;
    for (uint32_t s : null_reach(static_cast<uint32_t>(r))) {
      const Automaton::State& st = a.states_[s];
      for (uint32_t i = 0; i < st.n_calls; ++i) left[r].push_back(a.calls_[st.first_call + i].rule);
    }
  }
  std::vector<int> color(n_rules, 0);  // 0 new, 1 on the path, 2 done
  std::vector<uint32_t> path;
  std::string cycle;
  auto dfs = [&](auto&& self, uint32_t r) -> bool {
    color[r] = 1;
    path.push_back(r);
    for (uint32_t q : left[r]) {
      if (color[q] == 1) {
        auto it = std::find(path.begin(), path.end(), q);
        for (; it != path.end(); ++it) cycle += a.rule_names_[*it] + " -> ";
        cycle += a.rule_names_[q];
        return true;
      }
      if (color[q] == 0 && self(self, q)) return true;
    }
    path.pop_back();
    color[r] = 2;
    return false;
  };
  for (size_t r = 0; r < n_rules; ++r) {
    if (color[r] == 0 && a.rule_start_[r] != Automaton::kNone && dfs(dfs, static_cast<uint32_t>(r))) {
      return invalid_argument("left recursion is not supported: " + cycle +
                              " can repeat without consuming input");
    }
  }
  return Status::ok_status();
}

Result<std::shared_ptr<const Automaton>> AutomatonBuilder::run() {
  DI_RETURN_IF_ERROR(g_.validate());
  const auto n_rules = static_cast<size_t>(g_.n_rules());
  out_->rule_start_.assign(n_rules, Automaton::kNone);
  out_->root_ = static_cast<uint32_t>(g_.root());
  for (size_t r = 0; r < n_rules; ++r) out_->rule_names_.push_back(g_.rule(static_cast<RuleId>(r)).name);
  rule_scheduled_.assign(n_rules, 0);
  rule_scheduled_[g_.root()] = 1;
  rule_queue_.push_back(static_cast<uint32_t>(g_.root()));
  while (!rule_queue_.empty()) {
    const uint32_t r = rule_queue_.front();
    rule_queue_.pop_front();
    DI_RETURN_IF_ERROR(build_rule(r));
  }
  DI_RETURN_IF_ERROR(check_left_recursion());
  // A class starts at 0 and at every byte where some range starts or after one ends.
  bool starts[257] = {};
  starts[0] = true;
  for (const Automaton::Range& r : out_->ranges_) starts[r.lo] = starts[r.hi + 1] = true;
  uint32_t n_classes = 0;
  for (int b = 0; b < 256; ++b) {
    if (starts[b]) ++n_classes;
    out_->byte_class_[b] = static_cast<uint8_t>(n_classes - 1);
  }
  out_->n_byte_classes_ = n_classes;
  return std::shared_ptr<const Automaton>(std::move(out_));
}

Result<std::shared_ptr<const Automaton>> Automaton::compile(const Grammar& grammar, const CompileBudget& budget) {
  return AutomatonBuilder(grammar, budget).run();
}

size_t Automaton::memory_bytes() const {
  return states_.size() * sizeof(State) + ranges_.size() * sizeof(Range) + calls_.size() * sizeof(Call);
}

}  // namespace deepinfer::grammar
