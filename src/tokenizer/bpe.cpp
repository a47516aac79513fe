#include "tokenizer/bpe.h"

#include <queue>

#include "tokenizer/byte_level.h"

namespace deepinfer {

Result<BpeModel> BpeModel::create(const Vocab& vocab, const std::vector<std::string>& merges) {
  BpeModel model;
  model.vocab_ = &vocab;
  // Strings that are not tokens get symbol ids from n_vocab upwards.
  std::unordered_map<std::string, int32_t> extra;
  auto intern = [&](const std::string& text) {
    const int32_t id = vocab.find(text);
    if (id >= 0) return id;
    auto [it, inserted] = extra.emplace(text, vocab.size() + static_cast<int32_t>(extra.size()));
    return it->second;
  };
  for (int b = 0; b < 256; ++b) model.byte_symbol_[b] = intern(byte_level::char_of_byte(static_cast<uint8_t>(b)));
  model.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const std::string& merge = merges[rank];
    // Searching from 1 lets the left part itself be a space (possible in non-byte-level vocabularies).
    const size_t space = merge.find(' ', 1);
    if (space == std::string::npos) {
      return invalid_argument("tokenizer.ggml.merges[" + std::to_string(rank) + "] '" + merge +
                              "' is not two symbols separated by a space");
    }
    const std::string left = merge.substr(0, space);
    const std::string right = merge.substr(space + 1);
    const Merge m{static_cast<int32_t>(rank), intern(left + right)};
    // A repeated pair keeps its first (best) rank.
    model.merges_.emplace(pair_key(intern(left), intern(right)), m);
  }
  return model;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t begin;  // byte range of the word this symbol covers
    uint32_t end;
  };
  // Heap order: lowest rank first, then leftmost (the left symbol's index is its first byte).
  struct Candidate {
    int32_t rank;
    int32_t left;
    int32_t left_id;
    int32_t right_id;
    int32_t result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::vector<Symbol> symbols(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    symbols[i] = {byte_symbol_[static_cast<uint8_t>(word[i])], static_cast<int32_t>(i) - 1,
                  i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1, static_cast<uint32_t>(i),
                  static_cast<uint32_t>(i + 1)};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    const int32_t right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end()) queue.push({it->second.rank, left, symbols[left].id, symbols[right].id, it->second.result});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    // A candidate goes stale when either side has since merged with something else.
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) continue;
    Symbol& right = symbols[left.next];
    left.id = c.result;
    left.end = right.end;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    right.id = -1;  // dead: no candidate can name it again
    consider(left.prev);
    consider(c.left);
  }

  const int32_t n_vocab = vocab_->size();
  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& s = symbols[i];
    if (s.id < n_vocab) {
      out->push_back(s.id);
      continue;
    }
    for (uint32_t b = s.begin; b < s.end; ++b) {
      const int32_t id = byte_symbol_[static_cast<uint8_t>(word[b])];
      if (id < n_vocab) {
        out->push_back(id);
      } else if (vocab_->unknown_id >= 0) {
        out->push_back(vocab_->unknown_id);
      }
    }
  }
}

}  // namespace deepinfer
