#include "tokenizer/hf_bpe.h"

#include <atomic>
#include <cstdio>
#include <queue>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace deepinfer {

Result<HfBpeModel> HfBpeModel::create(const Vocab& vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                                      const HfBpeOptions& options, const std::string& where) {
  static std::atomic<uint64_t> next_instance{1};
  HfBpeModel model;
  model.vocab_ = &vocab;
  model.instance_ = next_instance.fetch_add(1);
  model.options_ = options;
  for (int b = 0; b < 256; ++b) {
    model.byte_symbol_[b] = vocab.find(byte_level::char_of_byte(static_cast<uint8_t>(b)));
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    model.fallback_token_[b] = vocab.find(name);
  }
  const size_t prefix_size = options.continuing_subword_prefix.size();
  model.merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    // Named references, not a structured binding: clang-14 (the fuzz build) cannot capture those.
    const std::string& left = merges[rank].first;
    const std::string& right = merges[rank].second;
    const int32_t left_id = vocab.find(left);
    const int32_t right_id = vocab.find(right);
    auto bad = [&](const std::string& what) {
      return invalid_argument(where + ": model.merges[" + std::to_string(rank) + "] ('" + left + "' '" + right +
                              "'): " + what + " is not in model.vocab");
    };
    if (left_id < 0) return bad("'" + left + "'");
    if (right_id < 0) return bad("'" + right + "'");
    // The right part loses its continuation prefix when glued on, as Hugging Face spells it.
    std::string merged = left;
    if (prefix_size > 0 && right.compare(0, prefix_size, options.continuing_subword_prefix) == 0) {
      merged.append(right, prefix_size, std::string::npos);
    } else {
      merged += right;
    }
    const int32_t result = vocab.find(merged);
    if (result < 0) return bad("the merged text '" + merged + "'");
    // A repeated pair takes its last rank: Hugging Face collects merges into a map in order.
    model.merges_.insert_or_assign(pair_key(left_id, right_id), Merge{static_cast<int32_t>(rank), result});
  }
  return model;
}

void HfBpeModel::initial_symbols(std::string_view word, std::vector<int32_t>* ids) const {
  const bool plain_bytes =
      options_.byte_level && options_.continuing_subword_prefix.empty() && options_.end_of_word_suffix.empty();
  bool last_was_unk = false;
  std::string spelled;
  size_t pos = 0;
  while (pos < word.size()) {
    int32_t id = -1;
    if (plain_bytes) {
      id = byte_symbol_[static_cast<uint8_t>(word[pos])];
      if (id < 0) spelled = byte_level::char_of_byte(static_cast<uint8_t>(word[pos]));
      pos += 1;
    } else {
      size_t len = 1;
      if (options_.byte_level) {
        spelled = byte_level::char_of_byte(static_cast<uint8_t>(word[pos]));
      } else {
        // An invalid byte stands alone (Hugging Face's text is always valid UTF-8; ours may not be).
        len = utf8::valid_length(word, pos);
        if (len == 0) len = 1;
        spelled.assign(word.substr(pos, len));
      }
      if (pos > 0) spelled.insert(0, options_.continuing_subword_prefix);
      if (pos + len == word.size()) spelled += options_.end_of_word_suffix;
      id = vocab_->find(spelled);
      pos += len;
    }
    if (id >= 0) {
      ids->push_back(id);
      last_was_unk = false;
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (char c : spelled) all = all && fallback_token_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (char c : spelled) ids->push_back(fallback_token_[static_cast<uint8_t>(c)]);
        last_was_unk = false;
        continue;
      }
    }
    if (options_.unk_id >= 0) {
      if (!(options_.fuse_unk && last_was_unk)) ids->push_back(options_.unk_id);
      last_was_unk = true;
    }
  }
}

namespace {

constexpr size_t kMaxCachedWordBytes = 48;  // long words are rare and would crowd the cache
constexpr size_t kMaxCachedWords = 1 << 16;

struct WordCache {
  uint64_t instance = 0;
  std::unordered_map<std::string, std::vector<int32_t>> ids;
};

}  // namespace

void HfBpeModel::encode_word(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  if (word.size() > kMaxCachedWordBytes) {
    merge_word(word, out);
    return;
  }
  thread_local WordCache cache;
  if (cache.instance != instance_ || cache.ids.size() >= kMaxCachedWords) {
    cache.ids.clear();
    cache.instance = instance_;
  }
  auto [it, inserted] = cache.ids.try_emplace(std::string(word));
  if (inserted) merge_word(word, &it->second);
  out->insert(out->end(), it->second.begin(), it->second.end());
}

void HfBpeModel::merge_word(std::string_view word, std::vector<int32_t>* out) const {
  if (options_.ignore_merges) {
    const int32_t whole = options_.byte_level ? vocab_->find(byte_level::encode(word)) : vocab_->find(word);
    if (whole >= 0) {
      out->push_back(whole);
      return;
    }
  }
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  initial_symbols(word, &ids);
  const auto n = static_cast<int32_t>(ids.size());
  if (n <= 1) {
    out->insert(out->end(), ids.begin(), ids.end());
    return;
  }
  std::vector<int32_t> next(n);
  std::vector<int32_t> prev(n);
  for (int32_t i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  // Lowest rank first, then leftmost. A candidate records both ids so a stale one (either side
  // merged since) is recognised and skipped.
  struct Candidate {
    int32_t rank;
    int32_t left;
    int32_t left_id;
    int32_t right_id;
    int32_t result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t left) {
    if (left < 0 || next[left] < 0) return;
    const int32_t right = next[left];
    auto it = merges_.find(pair_key(ids[left], ids[right]));
    if (it != merges_.end()) queue.push({it->second.rank, left, ids[left], ids[right], it->second.result});
  };
  for (int32_t i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const int32_t right = next[c.left];
    if (ids[c.left] != c.left_id || right < 0 || ids[right] != c.right_id) continue;
    ids[c.left] = c.result;
    next[c.left] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.left;
    ids[right] = -1;
    consider(prev[c.left]);
    consider(c.left);
  }
  for (int32_t i = 0; i >= 0; i = next[i]) out->push_back(ids[i]);
}

}  // namespace deepinfer
