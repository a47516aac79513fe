// A suffix trie of bounded depth over token streams (Arctic's suffix decoding): every substring
// of up to max_depth tokens of the inserted streams is a path from the root, and each node
// counts how often its substring occurred and which token followed it most often. A draft
// follows the most frequent continuation of the longest suffix of the context found here.
//
// Insertion costs max_depth edge updates per token (a cursor keeps the nodes of the suffixes
// ending at the stream's last token); a lookup walks at most max_match suffixes of the context.
// Memory is bounded by max_nodes: past it the trie is cleared (the owner re-inserts what it
// still wants).
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/speculative/draft.h"

namespace deepinfer::speculative {

struct SuffixTrieOptions {
  int32_t max_depth = 24;   // longest substring kept (match plus draft)
  int32_t max_match = 12;   // longest context suffix looked up
  // A draft token needs at least this share of its parent's continuations (Arctic's
  // min_token_prob): rarer ones are seldom accepted and cost a verification row.
  float min_token_probability = 0.1f;
  int64_t max_nodes = int64_t{1} << 21;
};

class SuffixTrie {
 public:
  // The nodes of the suffixes (depth < max_depth) ending at a stream's last inserted token.
  struct Cursor {
    std::vector<int32_t> active{0};
  };

  explicit SuffixTrie(SuffixTrieOptions options = {});

  // Appends `tokens` to the stream `cursor` follows.
  void insert(Cursor& cursor, std::span<const int32_t> tokens);
  // A whole stream of its own.
  void insert(std::span<const int32_t> tokens);

  // The longest suffix of `context` (at most max_match tokens) that occurred followed by some
  // token; `match_length` 0 when none. Then the most frequent continuation, token by token,
  // while each keeps min_token_probability of its parent's count: up to max_tokens tokens,
  // each with that share as its confidence.
  Draft propose(std::span<const int32_t> context, int32_t max_tokens, int32_t* match_length) const;

  int64_t n_nodes() const { return static_cast<int64_t>(nodes_.size()); }
  bool full() const { return n_nodes() >= options_.max_nodes; }
  void clear();
  const SuffixTrieOptions& options() const { return options_; }

 private:
  struct Node {
    int32_t depth = 0;
    int32_t followers = 0;   // occurrences followed by a token (sum of the children's counts)
    int32_t count = 0;       // occurrences of this node's substring
    int32_t best_child = -1; // the child with the largest count (the first to reach it)
    int32_t best_token = -1;
  };

  static uint64_t edge_key(int32_t node, int32_t token) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(node)) << 32) | static_cast<uint32_t>(token);
  }
  int32_t child(int32_t node, int32_t token) const;
  int32_t child_or_new(int32_t node, int32_t token);

  SuffixTrieOptions options_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> edges_;
};

}  // namespace deepinfer::speculative
