// A vocabulary prepared for mask computation: every token's bytes, and a trie of them stored in
// preorder so that a walk can skip a refused prefix's whole subtree with one index jump.
//
// A token's bytes are what decoding shows for it. Tokens whose bytes are empty (control and
// special tokens, which decode to nothing) are not in the trie: a grammar can never produce them. The stop tokens (EOS and the other end-of-generation
// tokens) are allowed exactly where the grammar may end. Immutable once built (but for the
// tokens_containing cache, which is thread-safe); shared by every grammar compiled for the
// vocabulary.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {
class Tokenizer;
}

namespace deepinfer::grammar {

class TokenIndex {
 public:
  struct TrieNode {
    uint8_t byte;
    // How many bytes the longest token below this node adds to it (at most 255), when the node
    // ends a whole character and everything below is text (kTextForms: well-formed UTF-8 but
    // control characters, '"' and '\\', a token's last character possibly cut); else 0, as
    // for a leaf. A walk in a state that takes that many characters of text, whichever they
    // are, accepts the whole subtree without visiting it.
    uint8_t text_height;
    uint16_t depth;        // 1 for a first byte
    uint32_t subtree_end;  // index one past the last node below this one
    // Into node_tokens(): the tokens whose bytes end here are [first_token, first_token +
    // n_tokens), and the whole subtree's are [first_token, subtree_tokens_end(node)).
    uint32_t first_token, n_tokens;
  };
  static bool plain_byte(uint8_t b) { return b >= 0x20 && b <= 0x7E && b != '"' && b != '\\'; }
  // The characters of text beyond plain ASCII: each form is a lead byte range followed by
  // continuation byte ranges (UTF-8's well-formed sequences, Unicode table 3-7).
  struct TextForm {
    uint8_t n_bytes;
    uint8_t lo[4], hi[4];
  };
  static constexpr TextForm kTextForms[] = {
      {2, {0xC2, 0x80, 0, 0}, {0xDF, 0xBF, 0, 0}},          {3, {0xE0, 0xA0, 0x80, 0}, {0xE0, 0xBF, 0xBF, 0}},
      {3, {0xE1, 0x80, 0x80, 0}, {0xEC, 0xBF, 0xBF, 0}},    {3, {0xED, 0x80, 0x80, 0}, {0xED, 0x9F, 0xBF, 0}},
      {3, {0xEE, 0x80, 0x80, 0}, {0xEF, 0xBF, 0xBF, 0}},    {4, {0xF0, 0x90, 0x80, 0x80}, {0xF0, 0xBF, 0xBF, 0xBF}},
      {4, {0xF1, 0x80, 0x80, 0x80}, {0xF3, 0xBF, 0xBF, 0xBF}}, {4, {0xF4, 0x80, 0x80, 0x80}, {0xF4, 0x8F, 0xBF, 0xBF}},
  };
  // One past the last of node i's subtree's tokens in node_tokens() (preorder keeps them together).
  uint32_t subtree_tokens_end(uint32_t i) const {
    const uint32_t end = trie_[i].subtree_end;
    return end < trie_.size() ? trie_[end].first_token : static_cast<uint32_t>(node_tokens_.size());
  }

  static std::shared_ptr<const TokenIndex> build(const Tokenizer& tokenizer);
  // `pieces[id]` is token id's bytes (empty: never allowed); for tests and other vocabularies.
  static std::shared_ptr<const TokenIndex> from_pieces(std::vector<std::string> pieces, std::vector<int32_t> stop_ids);

  int32_t n_vocab() const { return static_cast<int32_t>(offsets_.size() - 1); }
  int32_t n_words() const { return (n_vocab() + 63) / 64; }  // uint64 words of a bitmask
  std::string_view bytes(int32_t id) const {
    return std::string_view(bytes_).substr(offsets_[id], offsets_[id + 1] - offsets_[id]);
  }
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& node_tokens() const { return node_tokens_; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  bool is_stop(int32_t id) const;
  // Bumped for each index built, so that caches keyed by an index never confuse two of them.
  uint64_t id() const { return id_; }
  // The ids whose bytes contain `text`, ascending. A scan of the vocabulary the first time a
  // text is asked for (a grammar's start trigger: "</think>", a tool-call opening), then kept:
  // every request with the same trigger shares it. Thread-safe.
  std::shared_ptr<const std::vector<int32_t>> tokens_containing(std::string_view text) const;

 private:
  TokenIndex() = default;
  void build_trie();

  std::string bytes_;              // all pieces, one after another
  std::vector<uint32_t> offsets_;  // [n_vocab + 1]
  std::vector<TrieNode> trie_;
  std::vector<int32_t> node_tokens_;
  std::vector<int32_t> stop_ids_;  // sorted
  uint64_t id_ = 0;
  mutable std::mutex containing_mutex_;
  mutable std::map<std::string, std::shared_ptr<const std::vector<int32_t>>, std::less<>> containing_;
};

}  // namespace deepinfer::grammar
