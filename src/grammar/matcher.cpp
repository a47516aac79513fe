#include "grammar/matcher.h"

#include <algorithm>

namespace deepinfer::grammar {

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), stacks_(&grammar_->automaton(), grammar_->limits().max_stack_depth) {
  stacks_.reset(grammar_->automaton().root_start(), Stacks::kRoot);
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  const uint32_t before = stacks_.n_sets();
  for (char c : bytes) {
    if (!stacks_.advance(static_cast<uint8_t>(c))) {
      stacks_.pop_to(before);
      return false;
    }
  }
  steps_.push_back({before, false});
  return true;
}

std::string Matcher::forced_bytes(size_t max_bytes) {
  std::string out;
  if (terminated_) return out;
  const uint32_t before = stacks_.n_sets();
  const Automaton& a = stacks_.automaton();
  while (out.size() < max_bytes && !stacks_.can_end()) {
    int only = -1;
    bool choice = false;
    for (uint32_t node : stacks_.top()) {
      const Automaton::State& s = a.state(stacks_.node(node).state);
      const Automaton::Range* r = a.ranges(s);
      for (uint32_t i = 0; i < s.n_ranges && !choice; ++i) {
        choice = r[i].lo != r[i].hi || (only >= 0 && only != r[i].lo);
        only = r[i].lo;
      }
      if (choice) break;
    }
    if (choice || only < 0 || !stacks_.advance(static_cast<uint8_t>(only))) break;
    out += static_cast<char>(only);
  }
  stacks_.pop_to(before);
  return out;
}

bool Matcher::accept_token(int32_t id) {
  const TokenIndex& tokens = grammar_->tokens();
  if (terminated_ || id < 0 || id >= tokens.n_vocab()) return false;
  if (tokens.is_stop(id)) {
    if (!stacks_.can_end()) return false;
    steps_.push_back({stacks_.n_sets(), true});
    terminated_ = true;
    return true;
  }
  const std::string_view bytes = tokens.bytes(id);
  return !bytes.empty() && accept_bytes(bytes);
}

void Matcher::rollback(int32_t n_steps) {
  n_steps = std::min<int32_t>(n_steps, static_cast<int32_t>(steps_.size()));
  if (n_steps <= 0) return;
  const Step& first = steps_[steps_.size() - n_steps];
  stacks_.pop_to(first.n_sets_before);
  steps_.resize(steps_.size() - n_steps);
  terminated_ = false;  // a stop token can only be the last step
}

bool Matcher::is_complete() const {
  if (terminated_) return true;
  if (!stacks_.can_end()) return false;
  for (uint32_t n : stacks_.top()) {
    if (stacks_.automaton().state(stacks_.node(n).state).n_ranges) return false;
  }
  return true;
}

void Matcher::add_stops(std::span<uint64_t> mask) const {
  if (!can_end()) return;
  for (int32_t id : grammar_->tokens().stop_ids()) mask_set(mask, id);
}

void Matcher::fill_mask(std::span<uint64_t> mask) {
  std::fill(mask.begin(), mask.end(), 0);
  if (terminated_) return;
  const Automaton& a = grammar_->automaton();
  // The top set may move when a check below grows the sets' storage: copy its ids out first.
  const std::span<const uint32_t> top = stacks_.top();
  for (size_t k = 0; k < top.size(); ++k) {
    const uint32_t node = stacks_.top()[k];
    const uint32_t state = stacks_.node(node).state;
    if (!a.state(state).n_ranges) continue;
    const TokenClass& cls = grammar_->token_class(state);
    if (!cls.accepted_bits.empty()) {
      const uint64_t* src = cls.accepted_bits.data();
      for (size_t w = 0; w < mask.size(); ++w) mask[w] |= src[w];
    } else {
      for (int32_t id : cls.accepted_list) mask_set(mask, id);
    }
    if (!cls.uncertain.empty()) check_uncertain(node, cls, mask);
  }
  (void)top;
  add_stops(mask);
}

// Walks the uncertain tokens of one stack in trie order, keeping the sets of the longest prefix
// the next token shares with the ones before it.
void Matcher::check_uncertain(uint32_t node, const TokenClass& cls, std::span<uint64_t> mask) {
  const TokenIndex& tokens = grammar_->tokens();
  const uint32_t base = stacks_.n_sets();
  stacks_.push_single(node);
  uint32_t have = 0;  // bytes of the previous token whose sets are on the stack
  for (size_t k = 0; k < cls.uncertain.size(); ++k) {
    have = std::min<uint32_t>(have, cls.uncertain_lcp[k]);
    const int32_t id = cls.uncertain[k];
    if (mask_has(mask, id)) continue;
    const std::string_view bytes = tokens.bytes(id);
    stacks_.pop_to(base + 1 + have);
    while (have < bytes.size() && stacks_.advance(static_cast<uint8_t>(bytes[have]))) ++have;
    if (have == bytes.size()) mask_set(mask, id);
  }
  stacks_.pop_to(base);
}

void Matcher::fill_mask_by_walk(std::span<uint64_t> mask) {
  std::fill(mask.begin(), mask.end(), 0);
  if (terminated_) return;
  const std::vector<TokenIndex::TrieNode>& trie = grammar_->tokens().trie();
  const std::vector<int32_t>& node_tokens = grammar_->tokens().node_tokens();
  const uint32_t base = stacks_.n_sets();
  for (uint32_t i = 0; i < trie.size();) {
    const TokenIndex::TrieNode& n = trie[i];
    stacks_.pop_to(base + n.depth - 1);
    if (!stacks_.advance(n.byte)) {
      i = n.subtree_end;
      continue;
    }
    for (uint32_t t = 0; t < n.n_tokens; ++t) mask_set(mask, node_tokens[n.first_token + t]);
    ++i;
  }
  stacks_.pop_to(base);
  add_stops(mask);
}

}  // namespace deepinfer::grammar
