#include "grammar/byte_dfa.h"

#include <map>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "grammar/automaton.h"

namespace deepinfer::grammar {

namespace {

// Dense rows ([n][256]) and finality to a ByteDfa: byte classes from equal columns, then only
// the states that reach a final one, renumbered from the start (0).
// Rows are [n][width]; byte b follows column col[b].
struct Rows {
  uint32_t width = 256;
  std::array<uint32_t, 256> col{};
  std::vector<uint32_t> next;  // [n * width]
  uint32_t at(size_t s, uint32_t c) const { return next[s * width + c]; }
};

ByteDfa pack(const Rows& rows, const std::vector<char>& final) {
  const size_t n = final.size();
  const uint32_t w = rows.width;
  // Co-reachable states: backwards from the finals.
  std::vector<std::vector<uint32_t>> rev(n);
  for (size_t s = 0; s < n; ++s) {
    for (uint32_t c = 0; c < w; ++c) {
      const uint32_t t = rows.at(s, c);
      if (t != ByteDfa::kDead && (rev[t].empty() || rev[t].back() != s)) rev[t].push_back(static_cast<uint32_t>(s));
    }
  }
  std::vector<char> live(n, 0);
  std::vector<uint32_t> work;
  for (size_t s = 0; s < n; ++s) {
    if (final[s]) {
      live[s] = 1;
      work.push_back(static_cast<uint32_t>(s));
    }
  }
  while (!work.empty()) {
    const uint32_t t = work.back();
    work.pop_back();
    for (uint32_t s : rev[t]) {
      if (!live[s]) {
        live[s] = 1;
        work.push_back(s);
      }
    }
  }
  ByteDfa out;
  if (n == 0 || !live[0]) return out;
  // Renumber the live states reachable from 0 through live states, in BFS order.
  std::vector<uint32_t> id(n, ByteDfa::kDead), order = {0};
  id[0] = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    for (uint32_t c = 0; c < w; ++c) {
      const uint32_t t = rows.at(order[i], c);
      if (t != ByteDfa::kDead && live[t] && id[t] == ByteDfa::kDead) {
        id[t] = static_cast<uint32_t>(order.size());
        order.push_back(t);
      }
    }
  }
  auto target = [&](uint32_t s, uint32_t c) {
    const uint32_t t = rows.at(s, c);
    return t == ByteDfa::kDead || !live[t] ? ByteDfa::kDead : id[t];
  };
  std::map<std::vector<uint32_t>, uint8_t> classes;
  std::vector<uint32_t> rep;  // a column of each class
  std::vector<uint8_t> class_of_col(w);
  for (uint32_t c = 0; c < w; ++c) {
    std::vector<uint32_t> column(order.size());
    for (size_t i = 0; i < order.size(); ++i) column[i] = target(order[i], c);
    auto [it, added] = classes.emplace(std::move(column), static_cast<uint8_t>(rep.size()));
    if (added) rep.push_back(c);
    class_of_col[c] = it->second;
  }
  for (int b = 0; b < 256; ++b) out.cls[b] = class_of_col[rows.col[b]];
  out.n_classes = static_cast<uint32_t>(rep.size());
  out.next.resize(order.size() * out.n_classes);
  out.final.resize(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    out.final[i] = final[order[i]];
    for (uint32_t c = 0; c < out.n_classes; ++c) out.next[i * out.n_classes + c] = target(order[i], rep[c]);
  }
  return out;
}

}  // namespace

Result<ByteDfa> dfa_of(const Grammar& g, ExprId expr, uint32_t max_states) {
  Grammar t = g;
  t.set_root(t.add_rule(t.fresh_name("dfa"), expr));
  CompileBudget budget;
  budget.max_states = max_states;
  DI_ASSIGN_OR_RETURN(std::shared_ptr<const Automaton> a, Automaton::compile(t, budget));
  const uint32_t start = a->root_start();
  std::unordered_map<uint32_t, uint32_t> local = {{start, 0}};
  std::vector<uint32_t> order = {start};
  Rows rows;
  for (int b = 0; b < 256; ++b) rows.col[b] = static_cast<uint32_t>(b);
  std::vector<char> final;
  for (size_t i = 0; i < order.size(); ++i) {
    const Automaton::State& s = a->state(order[i]);
    if (s.n_calls) return invalid_argument("a rule call inside a language to intersect or complement");
    std::array<uint32_t, 256> row;
    row.fill(ByteDfa::kDead);
    const Automaton::Range* r = a->ranges(s);
    for (uint32_t k = 0; k < s.n_ranges; ++k) {
      auto [it, added] = local.emplace(r[k].next, static_cast<uint32_t>(order.size()));
      if (added) order.push_back(r[k].next);
      for (int b = r[k].lo; b <= r[k].hi; ++b) row[b] = it->second;
    }
    rows.next.insert(rows.next.end(), row.begin(), row.end());
    final.push_back(s.final);
  }
  return pack(rows, final);
}

Result<ByteDfa> combine(const ByteDfa& a, const ByteDfa& b, DfaOp op, uint32_t max_states) {
  constexpr uint32_t kDead = ByteDfa::kDead;
  auto is_final = [](const ByteDfa& d, uint32_t s) { return s != kDead && d.final[s]; };
  // A pair whose outcome can no longer be final is dead.
  auto dead = [&](uint32_t x, uint32_t y) {
    switch (op) {
      case DfaOp::kAnd: return x == kDead || y == kDead;
      case DfaOp::kAndNot: return x == kDead;
      case DfaOp::kOr: return x == kDead && y == kDead;
    }
    return true;
  };
  const uint32_t a0 = a.n_states() ? 0 : kDead, b0 = b.n_states() ? 0 : kDead;
  Rows rows;
  std::vector<int> rep;  // a byte of each (class of a, class of b) pair
  {
    std::map<std::pair<uint8_t, uint8_t>, uint32_t> pairs;
    for (int c = 0; c < 256; ++c) {
      auto [it, added] = pairs.emplace(std::make_pair(a.cls[c], b.cls[c]), static_cast<uint32_t>(rep.size()));
      if (added) rep.push_back(c);
      rows.col[c] = it->second;
    }
    rows.width = static_cast<uint32_t>(rep.size());
  }
  std::vector<char> final;
  if (dead(a0, b0)) return pack(rows, final);
  std::unordered_map<uint64_t, uint32_t> ids;
  std::vector<std::pair<uint32_t, uint32_t>> order;
  auto intern = [&](uint32_t x, uint32_t y) -> Result<uint32_t> {
    if (dead(x, y)) return kDead;
    const uint64_t key = (uint64_t{x} << 32) | y;
    auto it = ids.find(key);
    if (it != ids.end()) return it->second;
    if (order.size() >= max_states) {
      return resource_exhausted("string language too large: more than " + std::to_string(max_states) + " automaton states");
    }
    ids.emplace(key, static_cast<uint32_t>(order.size()));
    order.emplace_back(x, y);
    return static_cast<uint32_t>(order.size() - 1);
  };
  DI_RETURN_IF_ERROR(intern(a0, b0).status());
  for (size_t i = 0; i < order.size(); ++i) {
    const auto [x, y] = order[i];
    for (int c : rep) {
      const auto byte = static_cast<uint8_t>(c);
      const uint32_t nx = x == kDead ? kDead : a.step(x, byte);
      const uint32_t ny = y == kDead ? kDead : b.step(y, byte);
      DI_ASSIGN_OR_RETURN(uint32_t t, intern(nx, ny));
      rows.next.push_back(t);
    }
    const bool fx = is_final(a, x), fy = is_final(b, y);
    final.push_back(op == DfaOp::kAnd ? fx && fy : op == DfaOp::kAndNot ? fx && !fy : fx || fy);
  }
  return pack(rows, final);
}

Result<ByteDfa> with_length(const ByteDfa& d, const ByteDfa& one_char, int64_t min_len, int64_t max_len,
                            uint32_t max_states) {
  constexpr uint32_t kDead = ByteDfa::kDead;
  // A completed character returns one_char to its start: its language must be prefix-free.
  for (uint32_t s = 0; s < one_char.n_states(); ++s) {
    if (!one_char.final[s]) continue;
    for (uint32_t c = 0; c < one_char.n_classes; ++c) {
      if (one_char.next[s * one_char.n_classes + c] != kDead) return invalid_argument("a character language that is not prefix-free");
    }
  }
  Rows rows;
  std::vector<int> rep;
  {
    std::map<std::pair<uint8_t, uint8_t>, uint32_t> pairs;
    for (int c = 0; c < 256; ++c) {
      auto [it, added] = pairs.emplace(std::make_pair(d.cls[c], one_char.cls[c]), static_cast<uint32_t>(rep.size()));
      if (added) rep.push_back(c);
      rows.col[c] = it->second;
    }
    rows.width = static_cast<uint32_t>(rep.size());
  }
  std::vector<char> final;
  if (d.n_states() == 0 || one_char.n_states() == 0) return pack(rows, final);
  // A state: (state of d, state of one_char inside the current character, characters done);
  // without an upper bound the count stops at min_len.
  struct Key {
    uint32_t x, c;
    int64_t n;
    bool operator<(const Key& o) const { return std::tie(x, c, n) < std::tie(o.x, o.c, o.n); }
  };
  std::map<Key, uint32_t> ids;
  std::vector<Key> order;
  auto intern = [&](Key k) -> Result<uint32_t> {
    auto it = ids.find(k);
    if (it != ids.end()) return it->second;
    if (order.size() >= max_states) {
      return resource_exhausted("string language too large: more than " + std::to_string(max_states) + " automaton states");
    }
    ids.emplace(k, static_cast<uint32_t>(order.size()));
    order.push_back(k);
    return static_cast<uint32_t>(order.size() - 1);
  };
  DI_RETURN_IF_ERROR(intern({0, 0, 0}).status());
  for (size_t i = 0; i < order.size(); ++i) {
    const Key k = order[i];
    for (int c : rep) {
      const auto byte = static_cast<uint8_t>(c);
      const uint32_t nx = d.step(k.x, byte);
      uint32_t nc = one_char.step(k.c, byte);
      uint32_t t = kDead;
      if (nx != kDead && nc != kDead) {
        int64_t n = k.n;
        if (one_char.final[nc]) {
          nc = 0;
          ++n;
          if (max_len == -1) n = std::min(n, min_len);
        }
        if (max_len == -1 || n <= max_len) {
          DI_ASSIGN_OR_RETURN(t, intern({nx, nc, n}));
        }
      }
      rows.next.push_back(t);
    }
    final.push_back(d.final[k.x] && k.c == 0 && k.n >= min_len);
  }
  return pack(rows, final);
}

bool dfa_accepts(const ByteDfa& d, std::string_view text) {
  if (d.n_states() == 0) return false;
  uint32_t s = 0;
  for (char c : text) {
    s = d.step(s, static_cast<uint8_t>(c));
    if (s == ByteDfa::kDead) return false;
  }
  return d.final[s];
}

}  // namespace deepinfer::grammar
