#include "grammar/token_index.h"

#include <algorithm>
#include <atomic>
#include <iterator>
#include <numeric>

#include "tokenizer/tokenizer.h"

namespace deepinfer::grammar {

namespace {
std::atomic<uint64_t> next_index_id{1};
}

std::shared_ptr<const TokenIndex> TokenIndex::from_pieces(std::vector<std::string> pieces, std::vector<int32_t> stop_ids) {
  auto index = std::shared_ptr<TokenIndex>(new TokenIndex());
  index->offsets_.reserve(pieces.size() + 1);
  index->offsets_.push_back(0);
  for (const std::string& p : pieces) {
    index->bytes_ += p;
    index->offsets_.push_back(static_cast<uint32_t>(index->bytes_.size()));
  }
  std::sort(stop_ids.begin(), stop_ids.end());
  stop_ids.erase(std::unique(stop_ids.begin(), stop_ids.end()), stop_ids.end());
  index->stop_ids_ = std::move(stop_ids);
  index->id_ = next_index_id.fetch_add(1);
  index->build_trie();
  return index;
}

std::shared_ptr<const TokenIndex> TokenIndex::build(const Tokenizer& tokenizer) {
  std::vector<std::string> pieces;
  std::vector<int32_t> stops;
  const auto n = static_cast<int32_t>(tokenizer.n_vocab());
  pieces.reserve(n);
  for (int32_t id = 0; id < n; ++id) {
    const bool stop = id == tokenizer.eos_id() || tokenizer.is_end_of_generation(id);
    if (stop) stops.push_back(id);
    // A token is the text decoding shows for it: control and special tokens show none (never
    // allowed); DeepSeek's non-special markers (｜DSML｜, </think>) show theirs, which grammars
    // spell. A stop's text is the grammar's end, not text.
    pieces.push_back(stop ? std::string() : tokenizer.token_piece(id));
  }
  return from_pieces(std::move(pieces), std::move(stops));
}

bool TokenIndex::is_stop(int32_t id) const { return std::binary_search(stop_ids_.begin(), stop_ids_.end(), id); }

std::shared_ptr<const std::vector<int32_t>> TokenIndex::tokens_containing(std::string_view text) const {
  {
    std::lock_guard<std::mutex> lock(containing_mutex_);
    if (auto it = containing_.find(text); it != containing_.end()) return it->second;
  }
  auto ids = std::make_shared<std::vector<int32_t>>();
  for (int32_t id = 0; id < n_vocab(); ++id) {
    if (bytes(id).find(text) != std::string_view::npos) ids->push_back(id);
  }
  std::lock_guard<std::mutex> lock(containing_mutex_);
  // Triggers are few (a model's reasoning and tool-call markers); the bound only keeps a stream
  // of odd ones from growing the map.
  if (containing_.size() >= 64) containing_.clear();
  return containing_.emplace(std::string(text), std::move(ids)).first->second;
}

// Tokens sorted by their bytes give the trie's preorder directly: a node per distinct prefix,
// made when the sorted walk first reaches it; its subtree ends where the prefix stops being
// shared.
void TokenIndex::build_trie() {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < n_vocab(); ++id) {
    if (!bytes(id).empty()) order.push_back(id);
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return bytes(a) < bytes(b); });
  std::vector<uint32_t> path;  // trie node index per depth of the current prefix
  std::string_view prev;
  for (int32_t id : order) {
    const std::string_view t = bytes(id);
    size_t common = 0;
    while (common < prev.size() && common < t.size() && prev[common] == t[common]) ++common;
    while (path.size() > common) {
      trie_[path.back()].subtree_end = static_cast<uint32_t>(trie_.size());
      path.pop_back();
    }
    for (size_t d = common; d < t.size(); ++d) {
      path.push_back(static_cast<uint32_t>(trie_.size()));
      trie_.push_back({static_cast<uint8_t>(t[d]), 0, static_cast<uint16_t>(std::min<size_t>(d + 1, 65535)), 0,
                       static_cast<uint32_t>(node_tokens_.size()), 0});
    }
    TrieNode& leaf = trie_[path.back()];
    // Sorted order puts tokens with equal bytes next to each other, so a node's tokens are
    // contiguous in node_tokens_, right after those of the nodes before it in preorder.
    node_tokens_.push_back(id);
    ++leaf.n_tokens;
    prev = t;
  }
  while (!path.empty()) {
    trie_[path.back()].subtree_end = static_cast<uint32_t>(trie_.size());
    path.pop_back();
  }
  // Each node's place in a character: 0 after a whole one (any ASCII byte ends one), else
  // 1 + (form * 4 + the position of the byte expected next), or kLost inside malformed UTF-8;
  // from its parent's (the depth stack) and its byte. bad[k]: nodes before k that are not text
  // after their parent (a control, '"', '\\', DEL, malformed UTF-8). A subtree below i is text
  // when none of its nodes is bad.
  constexpr uint32_t kLost = 0xFFFF;
  auto next_place = [](uint32_t place, uint8_t b, bool* is_bad) -> uint32_t {
    if (b < 0x80) {
      *is_bad = place != 0 || !plain_byte(b);
      return 0;
    }
    *is_bad = true;
    if (place == kLost) return kLost;
    if (place == 0) {
      for (uint32_t f = 0; f < std::size(kTextForms); ++f) {
        if (b >= kTextForms[f].lo[0] && b <= kTextForms[f].hi[0]) {
          *is_bad = false;
          return 1 + f * 4 + 1;
        }
      }
      return kLost;
    }
    const uint32_t f = (place - 1) / 4, at = (place - 1) % 4;
    const TextForm& form = kTextForms[f];
    if (b < form.lo[at] || b > form.hi[at]) return kLost;
    *is_bad = false;
    return at + 1 == form.n_bytes ? 0 : place + 1;
  };
  std::vector<uint32_t> place(trie_.size()), bad(trie_.size() + 1, 0), parent_at;  // parent_at: by depth
  for (size_t k = 0; k < trie_.size(); ++k) {
    const uint32_t d = trie_[k].depth;
    parent_at.resize(d);
    const uint32_t above = d >= 2 ? place[parent_at[d - 2]] : 0;
    bool is_bad = false;
    place[k] = next_place(above, trie_[k].byte, &is_bad);
    parent_at[d - 1] = static_cast<uint32_t>(k);
    bad[k + 1] = bad[k] + (is_bad ? 1 : 0);
  }
  std::vector<uint16_t> deepest(trie_.size());
  for (size_t k = trie_.size(); k-- > 0;) {
    deepest[k] = trie_[k].depth;
    for (uint32_t child = static_cast<uint32_t>(k) + 1; child < trie_[k].subtree_end; child = trie_[child].subtree_end) {
      deepest[k] = std::max(deepest[k], deepest[child]);
    }
    const bool text = place[k] == 0 && bad[trie_[k].subtree_end] == bad[k + 1];
    trie_[k].text_height = text ? static_cast<uint8_t>(std::min(deepest[k] - trie_[k].depth, 255)) : 0;
  }
}

}  // namespace deepinfer::grammar
