#include "grammar/compiled_grammar.h"

#include <algorithm>
#include <bit>
#include <unordered_map>

#include "core/check.h"
#include "grammar/stacks.h"

namespace deepinfer::grammar {

size_t TokenClass::memory_bytes() const {
  return sizeof(TokenClass) + accepted_bits.size() * 8 + accepted_list.size() * 4 + uncertain.size() * 4 +
         uncertain_lcp.size() * 2;
}

CompiledGrammar::CompiledGrammar(std::shared_ptr<const Automaton> automaton, std::shared_ptr<const TokenIndex> tokens,
                                 MatcherLimits limits)
    : automaton_(std::move(automaton)), tokens_(std::move(tokens)), limits_(limits) {
  const uint32_t n = automaton_->n_states();
  classes_ = std::make_unique<std::atomic<const TokenClass*>[]>(n);
  for (uint32_t i = 0; i < n; ++i) classes_[i].store(nullptr, std::memory_order_relaxed);
}

CompiledGrammar::~CompiledGrammar() = default;

const TokenClass& CompiledGrammar::token_class(uint32_t state) const {
  if (const TokenClass* c = classes_[state].load(std::memory_order_acquire)) return *c;
  std::lock_guard<std::mutex> lock(mutex_);
  if (const TokenClass* c = classes_[state].load(std::memory_order_acquire)) return *c;
  owned_.push_back(shared_class(state));
  classes_[state].store(owned_.back().get(), std::memory_order_release);
  return *owned_.back();
}

namespace {

constexpr size_t kMaxKeyStates = 256;

// Byte by byte: GCC 12 warns falsely (-Wrestrict) on string appends of a reinterpret_cast.
void append_u64(std::string& key, uint64_t v) {
  for (int i = 0; i < 8; ++i) key.push_back(static_cast<char>(v >> (8 * i)));
}
constexpr size_t kMaxSharedClasses = 8192;

// The DFA reachable from `start`, renumbered in BFS order, as bytes; empty when a call is
// reachable or it is too large to be worth a key.
std::string lexical_key(const Automaton& a, uint32_t start) {
  std::vector<uint32_t> order = {start};
  std::unordered_map<uint32_t, uint32_t> index = {{start, 0}};
  std::string key;
  for (size_t k = 0; k < order.size(); ++k) {
    const Automaton::State& s = a.state(order[k]);
    if (s.n_calls) return {};
    key.push_back(s.final ? 'F' : 'N');
    const Automaton::Range* r = a.ranges(s);
    for (uint32_t i = 0; i < s.n_ranges; ++i) {
      auto [it, added] = index.emplace(r[i].next, static_cast<uint32_t>(order.size()));
      if (added) {
        if (order.size() >= kMaxKeyStates) return {};
        order.push_back(r[i].next);
      }
      key.push_back(static_cast<char>(r[i].lo));
      key.push_back(static_cast<char>(r[i].hi));
      append_u64(key, it->second);
    }
    key.push_back(';');
  }
  return key;
}

struct SharedClasses {
  std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<const TokenClass>> map;
};

SharedClasses& shared_classes() {
  static SharedClasses* cache = new SharedClasses();  // never destroyed: used until exit
  return *cache;
}

}  // namespace

std::shared_ptr<const TokenClass> CompiledGrammar::shared_class(uint32_t state) const {
  std::string key = lexical_key(*automaton_, state);
  if (key.empty()) return std::make_shared<const TokenClass>(compute_class(state));
  append_u64(key, limits_.max_stack_depth);
  append_u64(key, tokens_->id());
  SharedClasses& cache = shared_classes();
  {
    std::lock_guard<std::mutex> lock(cache.mutex);
    auto it = cache.map.find(key);
    if (it != cache.map.end()) return it->second;
  }
  auto computed = std::make_shared<const TokenClass>(compute_class(state));
  std::lock_guard<std::mutex> lock(cache.mutex);
  if (cache.map.size() >= kMaxSharedClasses) cache.map.clear();  // crude bound; rarely reached
  cache.map.emplace(std::move(key), computed);
  return computed;
}

// A step of the DFA as one load: a row per state, built on the state's first step, of one
// entry per byte class (Automaton::byte_class), each the state the class leads to with what
// the walk asks of that state in the high bits (kDead: no edge). A range scan per trie node
// cost a branch mispredicted on most bytes; rows of classes rather than bytes keep a walk's
// rows in the L1 cache (a chunked string's walk meets a few hundred states). And each state's
// run of text (text_run), which the walk's subtree shortcut asks for. Both depend on the
// automaton alone, so a CompiledGrammar keeps one table for all its walks (they run under its
// mutex): a walk no longer pays for setting up [n_states] arrays.
class DfaStepTables {
 public:
  static constexpr uint32_t kDead = 0xFFFFFFFFu;
  static constexpr uint32_t kHasCalls = 1u << 31, kFinal = 1u << 30, kNoRanges = 1u << 29;
  static constexpr uint32_t kFlags = kHasCalls | kFinal | kNoRanges, kStateMask = ~kFlags;
  static constexpr uint32_t kRunCap = 255;  // TrieNode::text_height's greatest value

  explicit DfaStepTables(const Automaton& a) : a_(a), row_of_(a.n_states(), kNoRow), text_run_(a.n_states(), kUnknown) {
    // State ids share their entry's word with three flags.
    DI_ICHECK(a.n_states() < (1u << 29));
    for (int b = 0; b < 256; ++b) {
      if (!TokenIndex::plain_byte(static_cast<uint8_t>(b))) continue;
      const uint8_t c = a.byte_class(static_cast<uint8_t>(b));
      if (plain_classes_.empty() || plain_classes_.back() != c) plain_classes_.push_back(c);
    }
  }

  // Whether an entry leads to a state with byte edges, no calls, that is not final.
  static bool plain(uint32_t entry) { return entry != kDead && (entry & kFlags) == 0; }

  uint32_t step(uint32_t state, uint8_t byte) { return step_class(state, a_.byte_class(byte)); }
  uint32_t step_class(uint32_t state, uint8_t byte_class) {
    uint32_t row = row_of_[state];
    if (row == kNoRow) row = build_row(state);
    return rows_[row + byte_class];
  }

  // The state one character of text leads `state` to, the same whichever character it is,
  // through states without calls that are not final; kDead when there is no such state.
  uint32_t char_step(uint32_t state) {
    const uint32_t e = step_class(state, plain_classes_[0]);
    if (!plain(e)) return kDead;
    for (uint8_t c : plain_classes_) {
      if (step_class(state, c) != e) return kDead;
    }
    for (const TokenIndex::TextForm& form : TokenIndex::kTextForms) {
      uint32_t s = state;
      for (uint32_t k = 0; k < form.n_bytes; ++k) {
        const uint32_t first = step_class(s, a_.byte_class(form.lo[k]));
        if (!plain(first)) return kDead;
        for (uint32_t c = a_.byte_class(form.lo[k]) + 1u; c <= a_.byte_class(form.hi[k]); ++c) {
          if (step_class(s, static_cast<uint8_t>(c)) != first) return kDead;
        }
        s = first;
      }
      if (s != e) return kDead;
    }
    return e;
  }

  // How many characters of text in a row `state` takes, whichever they are (char_step after
  // char_step; at most kRunCap, and a loop takes any number).
  uint32_t text_run(uint32_t state) {
    if (text_run_[state] != kUnknown) return text_run_[state];
    chain_.clear();
    uint32_t s = state, run = 0;
    while (true) {
      if (text_run_[s] != kUnknown) {
        run = text_run_[s];
        break;
      }
      if (std::find(chain_.begin(), chain_.end(), s) != chain_.end() || chain_.size() >= kRunCap) {
        run = kRunCap;  // a loop, or a run past any token
        break;
      }
      const uint32_t next = char_step(s);
      if (next == kDead) {
        run = 0;  // the run ends before s's next character
        text_run_[s] = 0;
        break;
      }
      chain_.push_back(s);
      s = next;
    }
    // Back along the chain: each state takes one more character than its successor.
    for (size_t k = chain_.size(); k-- > 0;) {
      run = std::min(run + 1, kRunCap);
      text_run_[chain_[k]] = static_cast<uint16_t>(run);
    }
    return text_run_[state];
  }

 private:
  static constexpr uint32_t kNoRow = 0xFFFFFFFFu;
  static constexpr uint16_t kUnknown = 0xFFFF;

  uint32_t build_row(uint32_t state) {
    const uint32_t width = a_.n_byte_classes();
    const auto row = static_cast<uint32_t>(rows_.size());
    rows_.resize(rows_.size() + width, kDead);
    uint32_t* out = rows_.data() + row;
    const Automaton::State& s = a_.state(state);
    const Automaton::Range* r = a_.ranges(s);
    for (uint32_t k = 0; k < s.n_ranges; ++k) {
      const Automaton::State& t = a_.state(r[k].next);
      const uint32_t e = r[k].next | (t.n_calls ? kHasCalls : 0) | (t.final ? kFinal : 0) | (t.n_ranges ? 0 : kNoRanges);
      for (uint32_t c = a_.byte_class(r[k].lo); c <= a_.byte_class(r[k].hi); ++c) out[c] = e;
    }
    row_of_[state] = row;
    return row;
  }

  const Automaton& a_;
  std::vector<uint32_t> row_of_;        // [n_states]: the offset of the state's row in rows_, or kNoRow
  std::vector<uint32_t> rows_;          // [rows][n_byte_classes]
  std::vector<uint16_t> text_run_;      // [n_states]: text_run(), or kUnknown
  std::vector<uint32_t> chain_;         // text_run's path
  std::vector<uint8_t> plain_classes_;  // the byte classes of plain bytes
};

namespace {

// The walk of one state's token class (see compiled_grammar.h). While the path stays in states
// without calls it is a plain DFA walk, one table load per trie node (DfaStepTables); below a
// state with calls the subtree is walked with full stacks.
class ClassWalk {
 public:
  ClassWalk(const Automaton& a, const TokenIndex& tokens, uint32_t max_depth, DfaStepTables& steps, bool shortcuts)
      : accepted_bits(static_cast<size_t>(tokens.n_words()), 0), tokens_(tokens), trie_(tokens.trie()),
        node_tokens_(tokens.node_tokens()), stacks_(&a, max_depth), steps_(steps), shortcuts_(shortcuts) {}

  void run(uint32_t start) {
    std::vector<uint32_t> state_at(2, start);  // [depth]
    std::vector<uint8_t> escaped(2, 0);        // [depth]: a pop past the start frame after 1..depth bytes
    for (uint32_t i = 0; i < trie_.size();) {
      const TokenIndex::TrieNode& n = trie_[i];
      const uint32_t d = n.depth;
      if (state_at.size() <= d) {
        state_at.resize(d + 1);
        escaped.resize(d + 1);
      }
      const uint32_t e = steps_.step(state_at[d - 1], n.byte);
      if (e == DfaStepTables::kDead) {
        settle_dead(i, false, escaped[d - 1]);
        i = n.subtree_end;
        continue;
      }
      const uint32_t next = e & DfaStepTables::kStateMask;
      if ((e & DfaStepTables::kHasCalls) == 0) {
        const bool final = (e & DfaStepTables::kFinal) != 0;
        if (e & DfaStepTables::kNoRanges) {
          settle_dead(i, final, escaped[d - 1]);
          i = n.subtree_end;
          continue;
        }
        if (!final && accepts_subtree(n, next)) {
          accept_subtree(i);
          i = n.subtree_end;
          continue;
        }
        accept(n);
        state_at[d] = next;
        escaped[d] = escaped[d - 1] | final;
        ++i;
        continue;
      }
      stacks_.reset(next, Stacks::kBottom);
      const bool escaped_here = stacks_.escaped();
      if (stacks_.top().empty()) {
        settle_dead(i, escaped_here, escaped[d - 1]);
      } else {
        accept(n);
        walk_stacks(i + 1, n.subtree_end, d, escaped[d - 1] | escaped_here);
      }
      i = n.subtree_end;
    }
  }

  std::vector<uint64_t> accepted_bits;  // [n_words]
  int64_t n_accepted = 0;
  std::vector<int32_t> uncertain;  // in trie order

 private:
  void accept(const TokenIndex::TrieNode& n) { accept_tokens(n.first_token, n.first_token + n.n_tokens); }

  // node_tokens_[begin, end), trie order: a node's tokens, or a whole subtree's.
  void accept_tokens(uint32_t begin, uint32_t end) {
    for (uint32_t t = begin; t < end; ++t) {
      const int32_t id = node_tokens_[t];
      accepted_bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    }
    n_accepted += end - begin;
  }

  // Node n was entered in `state`, which is neither final nor has calls. When n ends a whole
  // character, everything below is text and the state takes any run of text as long as the
  // longest token below (a JSON string's body takes any; a bounded string's, as many characters
  // as it has room for), every token below is accepted in this state, so the subtree needs no
  // walk. A JSON string's body and most of a vocabulary made the common walk of nearly every
  // node.
  bool accepts_subtree(const TokenIndex::TrieNode& n, uint32_t state) {
    return shortcuts_ && n.text_height > 0 && steps_.text_run(state) >= n.text_height;
  }

  void accept_subtree(uint32_t i) { accept_tokens(trie_[i].first_token, tokens_.subtree_tokens_end(i)); }

  void add(const TokenIndex::TrieNode& n, std::vector<int32_t>* out) {
    out->insert(out->end(), node_tokens_.begin() + n.first_token, node_tokens_.begin() + n.first_token + n.n_tokens);
  }

  // Node i's path died here. escaped_here: the start frame's rule ended exactly at this byte (its
  // tokens are accepted: the caller resumes after them); escaped_before: it ended earlier on the
  // path. Either way what lies below is the caller's to judge.
  void settle_dead(uint32_t i, bool escaped_here, bool escaped_before) {
    const TokenIndex::TrieNode& n = trie_[i];
    if (!escaped_here && !escaped_before) return;
    if (escaped_here) {
      accept(n);
    } else {
      add(n, &uncertain);
    }
    for (uint32_t j = i + 1; j < n.subtree_end; ++j) add(trie_[j], &uncertain);
  }

  // One depth of walk_stacks' path. A real level's set is stacks_' set n_sets - 1. A virtual
  // level stands for the set holding the one stack (state, parent) without interning it: what a
  // single stack reaches on a byte when the state it lands in has byte edges, no calls and is
  // not final (most bytes of a JSON string, number or literal), where advance() would intern one
  // node and close over nothing. It is made real only when a call or a final state needs the
  // full stacks. n_sets: the real sets below it, the last of which holds `parent`.
  struct Level {
    bool is_virtual = false;
    uint32_t state = 0, parent = 0;
    uint32_t n_sets = 1;
  };

  // Nodes [begin, end) below a node at depth `base`, whose set is stacks_' set 0.
  void walk_stacks(uint32_t begin, uint32_t end, uint32_t base, uint8_t escaped_base) {
    escaped_.assign(2, 0);
    escaped_[0] = escaped_base;
    levels_.assign(2, Level{});
    for (uint32_t i = begin; i < end;) {
      const TokenIndex::TrieNode& n = trie_[i];
      const uint32_t d = n.depth - base;
      if (escaped_.size() <= d) {
        escaped_.resize(d + 1, 0);
        levels_.resize(d + 1);
      }
      const Level up = levels_[d - 1];
      bool alive = false, escaped_here = false;
      Level here;
      if (up.is_virtual) {
        const uint32_t e = steps_.step(up.state, n.byte);
        if (DfaStepTables::plain(e)) {
          here = {true, e, up.parent, up.n_sets};
          alive = true;
        } else if (e != DfaStepTables::kDead) {
          // A call or a pop ahead: the full stacks, from the stack this byte leaves.
          stacks_.pop_to(up.n_sets);
          stacks_.push_stack(up.state, up.parent);
          alive = stacks_.advance(n.byte);
          escaped_here = stacks_.escaped();
          here = {false, 0, 0, up.n_sets + 2};
        }
      } else {
        stacks_.pop_to(up.n_sets);
        const std::span<const uint32_t> top = stacks_.top();
        const Stacks::Node* one = shortcuts_ && top.size() == 1 ? &stacks_.node(top[0]) : nullptr;
        const uint32_t e = one != nullptr ? steps_.step(one->state, n.byte) : DfaStepTables::kDead;
        if (DfaStepTables::plain(e)) {
          here = {true, e, one->parent, up.n_sets};  // the set below keeps the parent alive
          alive = true;
        } else {
          alive = stacks_.advance(n.byte);
          escaped_here = stacks_.escaped();
          here = {false, 0, 0, up.n_sets + 1};
        }
      }
      if (alive && here.is_virtual && accepts_subtree(n, here.state)) {
        accept_subtree(i);
        i = n.subtree_end;
        continue;
      }
      if (alive) {
        accept(n);
        escaped_[d] = escaped_[d - 1] | escaped_here;
        levels_[d] = here;
        ++i;
        continue;
      }
      settle_dead(i, escaped_here, escaped_[d - 1]);
      i = n.subtree_end;
    }
  }

  const TokenIndex& tokens_;
  const std::vector<TokenIndex::TrieNode>& trie_;
  const std::vector<int32_t>& node_tokens_;
  Stacks stacks_;
  std::vector<uint8_t> escaped_;
  std::vector<Level> levels_;
  DfaStepTables& steps_;
  bool shortcuts_;  // virtual levels and whole accepted subtrees; off: the plain reference walk
};

}  // namespace

namespace {

TokenClass walk_token_class(const Automaton& automaton, const TokenIndex& tokens, uint32_t state,
                            uint32_t max_stack_depth, DfaStepTables& steps, bool shortcuts) {
  ClassWalk walk(automaton, tokens, max_stack_depth, steps, shortcuts);
  walk.run(state);
  std::vector<int32_t>& uncertain = walk.uncertain;
  TokenClass out;
  const int32_t n_vocab = tokens.n_vocab();
  if (walk.n_accepted * 32 > n_vocab) {
    out.accepted_bits = std::move(walk.accepted_bits);
  } else {
    out.accepted_list.reserve(static_cast<size_t>(walk.n_accepted));
    for (size_t w = 0; w < walk.accepted_bits.size(); ++w) {
      for (uint64_t bits = walk.accepted_bits[w]; bits != 0; bits &= bits - 1) {
        out.accepted_list.push_back(static_cast<int32_t>(w * 64 + static_cast<size_t>(std::countr_zero(bits))));
      }
    }
  }
  out.uncertain_lcp.reserve(uncertain.size());
  std::string_view prev;
  for (int32_t id : uncertain) {
    const std::string_view t = tokens.bytes(id);
    size_t common = 0;
    while (common < prev.size() && common < t.size() && prev[common] == t[common]) ++common;
    out.uncertain_lcp.push_back(static_cast<uint16_t>(std::min<size_t>(common, 65535)));
    prev = t;
  }
  out.uncertain = std::move(uncertain);
  return out;
}

}  // namespace

// Under mutex_ (token_class), so the step tables are this grammar's walks' alone.
TokenClass CompiledGrammar::compute_class(uint32_t state) const {
  if (!steps_) steps_ = std::make_unique<DfaStepTables>(*automaton_);
  return walk_token_class(*automaton_, *tokens_, state, limits_.max_stack_depth, *steps_, true);
}

TokenClass compute_token_class(const Automaton& automaton, const TokenIndex& tokens, uint32_t state,
                               uint32_t max_stack_depth, bool shortcuts) {
  DfaStepTables steps(automaton);
  return walk_token_class(automaton, tokens, state, max_stack_depth, steps, shortcuts);
}

size_t CompiledGrammar::memory_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t total = automaton_->memory_bytes() + automaton_->n_states() * sizeof(void*);
  for (const auto& c : owned_) total += c->memory_bytes();
  return total;
}

}  // namespace deepinfer::grammar
