#include "tokenizer/special_tokens.h"

#include <algorithm>

namespace deepinfer {

SpecialTokenMatcher::SpecialTokenMatcher(const Vocab& vocab, uint32_t types) : vocab_(&vocab) {
  nodes_.emplace_back();
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const std::string& text = vocab.texts[id];
    if (text.empty() || (type_bit(vocab.types[id]) & types) == 0) continue;
    int32_t node = 0;
    for (char c : text) {
      const auto byte = static_cast<uint8_t>(c);
      int32_t next = child(node, byte);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        auto& children = nodes_[node].children;
        children.insert(std::lower_bound(children.begin(), children.end(), std::make_pair(byte, INT32_MIN)),
                        {byte, next});
        nodes_.emplace_back();  // may reallocate: `children` is not used after this
      }
      node = next;
    }
    // The lower id keeps a text shared by two ids, as Vocab::find does.
    if (nodes_[node].token_id < 0) {
      nodes_[node].token_id = id;
      ++n_tokens_;
      types_present_ |= type_bit(vocab.types[id]);
    }
  }
}

int32_t SpecialTokenMatcher::child(int32_t node, uint8_t byte) const {
  const auto& children = nodes_[node].children;
  auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, INT32_MIN));
  return it != children.end() && it->first == byte ? it->second : -1;
}

void SpecialTokenMatcher::partition(std::string_view text, uint32_t types, std::vector<Fragment>* out) const {
  struct Match {
    uint32_t begin;
    uint32_t length;
    int32_t token_id;
  };
  std::vector<Match> matches;
  if ((types & types_present_) != 0) {
    for (size_t begin = 0; begin < text.size(); ++begin) {
      int32_t node = 0;
      for (size_t pos = begin; pos < text.size(); ++pos) {
        node = child(node, static_cast<uint8_t>(text[pos]));
        if (node < 0) break;
        const int32_t id = nodes_[node].token_id;
        if (id >= 0 && (type_bit(vocab_->types[id]) & types) != 0) {
          matches.push_back({static_cast<uint32_t>(begin), static_cast<uint32_t>(pos + 1 - begin), id});
        }
      }
    }
  }
  if (matches.empty()) {
    if (!text.empty()) out->push_back({-1, text});
    return;
  }
  // Longest first; one token's occurrences left to right before the next token of that length
  // (llama.cpp takes the tokens one by one in order of length).
  std::sort(matches.begin(), matches.end(), [](const Match& a, const Match& b) {
    if (a.length != b.length) return a.length > b.length;
    if (a.token_id != b.token_id) return a.token_id < b.token_id;
    return a.begin < b.begin;
  });
  std::vector<bool> claimed(text.size(), false);
  std::vector<Match> taken;
  for (const Match& m : matches) {
    bool free = true;
    for (uint32_t i = m.begin; i < m.begin + m.length && free; ++i) free = !claimed[i];
    if (!free) continue;
    for (uint32_t i = m.begin; i < m.begin + m.length; ++i) claimed[i] = true;
    taken.push_back(m);
  }
  std::sort(taken.begin(), taken.end(), [](const Match& a, const Match& b) { return a.begin < b.begin; });
  size_t pos = 0;
  for (const Match& m : taken) {
    if (m.begin > pos) out->push_back({-1, text.substr(pos, m.begin - pos)});
    out->push_back({m.token_id, text.substr(m.begin, m.length)});
    pos = m.begin + m.length;
  }
  if (pos < text.size()) out->push_back({-1, text.substr(pos)});
}

}  // namespace deepinfer
