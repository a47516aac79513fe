#include "tokenizer/spm.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "tokenizer/utf8.h"

namespace deepinfer {

SpmModel::SpmModel(const Vocab& vocab) : vocab_(&vocab) {
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    int32_t id = vocab.find(name);
    if (id < 0) {
      const char c = static_cast<char>(b);
      id = vocab.find(std::string_view(&c, 1));
    }
    byte_token_[b] = id >= 0 ? id : vocab.unknown_id;
  }
}

void SpmModel::encode(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  struct Symbol {
    int32_t prev;
    int32_t next;
    uint32_t begin;  // byte range of text
    uint32_t length;  // 0 once merged into its left neighbour
  };
  std::vector<Symbol> symbols;
  for (size_t pos = 0; pos < text.size();) {
    // An invalid byte is a symbol of its own; it can only end as a byte token.
    const size_t n = std::max<size_t>(1, utf8::valid_length(text, pos));
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({index - 1, -1, static_cast<uint32_t>(pos), static_cast<uint32_t>(n)});
    if (index > 0) symbols[index - 1].next = index;
    pos += n;
  }

  // Heap order: highest score first, then leftmost.
  struct Candidate {
    float score;
    int32_t left;
    int32_t right;
    uint32_t length;  // of the merged piece; a mismatch later means a side has changed
    bool operator<(const Candidate& o) const { return score != o.score ? score < o.score : left > o.left; }
  };
  std::priority_queue<Candidate> queue;
  auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t length = symbols[left].length + symbols[right].length;
    const int32_t id = vocab_->find(text.substr(symbols[left].begin, length));
    if (id < 0) return;
    queue.push({vocab_->scores[id], left, right, length});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) consider(i - 1, i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    if (left.length == 0 || right.length == 0 || left.length + right.length != c.length) continue;
    left.length = c.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }

  for (int32_t i = 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].begin, symbols[i].length);
    const int32_t id = vocab_->find(piece);
    if (id >= 0) {
      out->push_back(id);
      continue;
    }
    for (char c : piece) {
      const int32_t byte_id = byte_token_[static_cast<uint8_t>(c)];
      if (byte_id >= 0) out->push_back(byte_id);
    }
  }
}

}  // namespace deepinfer
