#include "grammar/compiled_grammar.h"

#include <algorithm>

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
  owned_.push_back(std::make_unique<TokenClass>(compute_class(state)));
  classes_[state].store(owned_.back().get(), std::memory_order_release);
  return *owned_.back();
}

TokenClass CompiledGrammar::compute_class(uint32_t state) const {
  const std::vector<TokenIndex::TrieNode>& trie = tokens_->trie();
  const std::vector<int32_t>& node_tokens = tokens_->node_tokens();
  Stacks stacks(automaton_.get(), limits_.max_stack_depth);
  stacks.reset_single(state, Stacks::kBottom);
  std::vector<uint8_t> escaped(2, 0);  // [depth]: a pop past the start frame after 1..depth bytes
  std::vector<int32_t> accepted, uncertain;
  auto add_tokens = [&](const TokenIndex::TrieNode& n, std::vector<int32_t>* out) {
    out->insert(out->end(), node_tokens.begin() + n.first_token, node_tokens.begin() + n.first_token + n.n_tokens);
  };
  for (uint32_t i = 0; i < trie.size();) {
    const TokenIndex::TrieNode& n = trie[i];
    const uint32_t d = n.depth;
    if (escaped.size() <= d) escaped.resize(d + 1, 0);
    stacks.pop_to(d);
    const bool alive = stacks.advance(n.byte);
    const bool escaped_here = stacks.escaped();
    if (alive) {
      add_tokens(n, &accepted);
      escaped[d] = escaped[d - 1] | escaped_here;
      ++i;
      continue;
    }
    if (escaped_here || escaped[d - 1]) {
      // The frame's rule can end inside this prefix: what follows is the caller's to judge.
      add_tokens(n, escaped_here ? &accepted : &uncertain);
      for (uint32_t j = i + 1; j < n.subtree_end; ++j) add_tokens(trie[j], &uncertain);
    }
    i = n.subtree_end;
  }
  TokenClass out;
  const int32_t n_vocab = tokens_->n_vocab();
  if (accepted.size() * 32 > static_cast<size_t>(n_vocab)) {
    out.accepted_bits.assign(tokens_->n_words(), 0);
    for (int32_t id : accepted) out.accepted_bits[id >> 6] |= uint64_t{1} << (id & 63);
  } else {
    out.accepted_list = std::move(accepted);
  }
  out.uncertain_lcp.reserve(uncertain.size());
  std::string_view prev;
  for (int32_t id : uncertain) {
    const std::string_view t = tokens_->bytes(id);
    size_t common = 0;
    while (common < prev.size() && common < t.size() && prev[common] == t[common]) ++common;
    out.uncertain_lcp.push_back(static_cast<uint16_t>(std::min<size_t>(common, 65535)));
    prev = t;
  }
  out.uncertain = std::move(uncertain);
  return out;
}

size_t CompiledGrammar::memory_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t total = automaton_->memory_bytes() + automaton_->n_states() * sizeof(void*);
  for (const auto& c : owned_) total += c->memory_bytes();
  return total;
}

}  // namespace deepinfer::grammar
