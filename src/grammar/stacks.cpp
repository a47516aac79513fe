#include "grammar/stacks.h"

#include <algorithm>

namespace deepinfer::grammar {

namespace {

constexpr uint32_t kEmptySlot = 0xFFFFFFFFu;

inline uint64_t mix(uint32_t state, uint32_t parent) {
  uint64_t h = (uint64_t{state} << 32 | parent) * 0x9E3779B97F4A7C15ull;
  h ^= h >> 31;
  h *= 0xBF58476D1CE4E5B9ull;
  return h ^ (h >> 29);
}

}  // namespace

Stacks::Stacks(const Automaton* automaton, uint32_t max_depth) : a_(automaton), max_depth_(max_depth) {
  table_.assign(1024, kEmptySlot);
}

void Stacks::next_generation() {
  if (++generation_ == 0) {  // wrapped: old stamps could alias the new generation
    std::fill(stamp_.begin(), stamp_.end(), 0);
    generation_ = 1;
  }
}

void Stacks::rehash(size_t size) {
  table_.assign(size, kEmptySlot);
  used_slots_ = 0;
  const size_t mask = size - 1;
  for (uint32_t id = 0; id < nodes_.size(); ++id) {
    size_t k = mix(nodes_[id].state, nodes_[id].parent) & mask;
    while (table_[k] != kEmptySlot) k = (k + 1) & mask;
    table_[k] = id;
    nodes_[id].slot = static_cast<uint32_t>(k);
    ++used_slots_;
  }
}

uint32_t Stacks::intern(uint32_t state, uint32_t parent) {
  const size_t mask = table_.size() - 1;
  size_t k = mix(state, parent) & mask;
  size_t reuse = SIZE_MAX;
  for (;; k = (k + 1) & mask) {
    const uint32_t id = table_[k];
    if (id == kEmptySlot) break;
    if (id < nodes_.size() && nodes_[id].slot == k) {
      if (nodes_[id].state == state && nodes_[id].parent == parent) return id;
    } else if (reuse == SIZE_MAX) {
      reuse = k;  // a slot whose node was truncated away
    }
  }
  if (reuse == SIZE_MAX) {
    reuse = k;
    ++used_slots_;
  }
  const auto id = static_cast<uint32_t>(nodes_.size());
  const uint32_t depth = parent >= kBottom ? 0 : nodes_[parent].depth + 1;
  nodes_.push_back({state, parent, depth, static_cast<uint32_t>(reuse)});
  if (stamp_.size() < nodes_.size()) {
    stamp_.push_back(0);
  } else {
    stamp_[id] = 0;
  }
  table_[reuse] = id;
  if (used_slots_ * 4 > table_.size() * 3) {
    rehash(nodes_.size() * 2 > table_.size() ? table_.size() * 2 : table_.size());
  }
  return id;
}

void Stacks::closure(uint32_t start) {
  work_.push_back(start);
  while (!work_.empty()) {
    const uint32_t n = work_.back();
    work_.pop_back();
    if (stamp_[n] == generation_) continue;
    stamp_[n] = generation_;
    const Node nd = nodes_[n];
    const Automaton::State& s = a_->state(nd.state);
    if (s.n_ranges || (s.final && nd.parent == kRoot)) items_.push_back(n);
    if (s.n_calls && nd.depth < max_depth_) {
      const Automaton::Call* calls = a_->calls(s);
      for (uint32_t i = 0; i < s.n_calls; ++i) {
        const uint32_t ret = intern(calls[i].ret, nd.parent);
        work_.push_back(intern(a_->rule_start(calls[i].rule), ret));
      }
    }
    if (s.final) {
      if (nd.parent == kBottom) {
        escaped_ = true;
      } else if (nd.parent != kRoot) {
        work_.push_back(nd.parent);
      }
    }
  }
}

void Stacks::clear() {
  nodes_.clear();
  items_.clear();
  marks_.clear();
  used_slots_ = 0;
  std::fill(table_.begin(), table_.end(), kEmptySlot);
  next_generation();
  escaped_ = false;
}

void Stacks::reset(uint32_t state, uint32_t parent) {
  clear();
  closure(intern(state, parent));
  marks_.push_back({static_cast<uint32_t>(items_.size()), static_cast<uint32_t>(nodes_.size())});
}

void Stacks::reset_single(uint32_t state, uint32_t parent) {
  clear();
  push_single(intern(state, parent));
}

void Stacks::push_single(uint32_t node) {
  items_.push_back(node);
  marks_.push_back({static_cast<uint32_t>(items_.size()), static_cast<uint32_t>(nodes_.size())});
}

bool Stacks::advance(uint8_t b) {
  next_generation();
  escaped_ = false;
  const uint32_t begin = marks_.size() == 1 ? 0 : marks_[marks_.size() - 2].items_end;
  const uint32_t end = marks_.back().items_end;
  const auto nodes_before = static_cast<uint32_t>(nodes_.size());
  for (uint32_t i = begin; i < end; ++i) {
    const Node nd = nodes_[items_[i]];
    const uint32_t next = a_->next(a_->state(nd.state), b);
    if (next != Automaton::kNone) closure(intern(next, nd.parent));
  }
  if (items_.size() == end) {
    nodes_.resize(nodes_before);
    return false;
  }
  marks_.push_back({static_cast<uint32_t>(items_.size()), static_cast<uint32_t>(nodes_.size())});
  return true;
}

void Stacks::pop_to(uint32_t n_sets) {
  if (n_sets >= marks_.size()) return;
  marks_.resize(n_sets);
  items_.resize(marks_.back().items_end);
  nodes_.resize(marks_.back().nodes_end);
}

bool Stacks::can_end() const {
  for (uint32_t n : top()) {
    const Node& nd = nodes_[n];
    if (nd.parent == kRoot && a_->state(nd.state).final) return true;
  }
  return false;
}

}  // namespace deepinfer::grammar
