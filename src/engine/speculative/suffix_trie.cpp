#include "engine/speculative/suffix_trie.h"

#include <algorithm>

#include "core/check.h"

namespace deepinfer::speculative {

SuffixTrie::SuffixTrie(SuffixTrieOptions options) : options_(options) {
  DI_ICHECK(options_.max_depth > options_.max_match && options_.max_match > 0);
  clear();
}

void SuffixTrie::clear() {
  nodes_.assign(1, Node{});
  edges_.clear();
}

int32_t SuffixTrie::child(int32_t node, int32_t token) const {
  const auto it = edges_.find(edge_key(node, token));
  return it == edges_.end() ? -1 : it->second;
}

int32_t SuffixTrie::child_or_new(int32_t node, int32_t token) {
  const auto [it, added] = edges_.try_emplace(edge_key(node, token), static_cast<int32_t>(nodes_.size()));
  if (added) {
    Node n;
    n.depth = nodes_[static_cast<size_t>(node)].depth + 1;
    nodes_.push_back(n);
  }
  return it->second;
}

void SuffixTrie::insert(Cursor& cursor, std::span<const int32_t> tokens) {
  std::vector<int32_t>& active = cursor.active;
  std::vector<int32_t> next;
  next.reserve(static_cast<size_t>(options_.max_depth) + 1);
  for (int32_t token : tokens) {
    next.assign(1, 0);  // the empty suffix: the root is always active
    for (int32_t parent : active) {
      const int32_t c = child_or_new(parent, token);
      Node& child_node = nodes_[static_cast<size_t>(c)];
      ++child_node.count;
      Node& p = nodes_[static_cast<size_t>(parent)];
      ++p.followers;
      if (p.best_child < 0 || (p.best_child != c && child_node.count > nodes_[static_cast<size_t>(p.best_child)].count)) {
        p.best_child = c;
        p.best_token = token;
      }
      if (child_node.depth < options_.max_depth) next.push_back(c);
    }
    active.swap(next);
  }
}

void SuffixTrie::insert(std::span<const int32_t> tokens) {
  Cursor cursor;
  insert(cursor, tokens);
}

Draft SuffixTrie::propose(std::span<const int32_t> context, int32_t max_tokens, int32_t* match_length) const {
  Draft d;
  *match_length = 0;
  const auto len = static_cast<int64_t>(context.size());
  // Longest first; a suffix whose only occurrence is the context's own end has no follower.
  int32_t node = -1;
  for (int64_t m = std::min<int64_t>(options_.max_match, len); m > 0 && node < 0; --m) {
    int32_t at = 0;
    for (int64_t i = len - m; i < len && at >= 0; ++i) at = child(at, context[static_cast<size_t>(i)]);
    if (at >= 0 && nodes_[static_cast<size_t>(at)].followers > 0) {
      node = at;
      *match_length = static_cast<int32_t>(m);
    }
  }
  max_tokens = std::min(max_tokens, kMaxSpeculativeTokens);
  while (node >= 0 && d.n < max_tokens) {
    const Node& n = nodes_[static_cast<size_t>(node)];
    if (n.best_child < 0 || n.followers == 0) break;
    const float share = static_cast<float>(nodes_[static_cast<size_t>(n.best_child)].count) /
                        static_cast<float>(n.followers);
    if (share < options_.min_token_probability) break;
    d.push(n.best_token, share);
    node = n.best_child;
  }
  return d;
}

}  // namespace deepinfer::speculative
