// The pushdown automaton's run-time state: a stack of "sets of parse stacks", one set per byte
// consumed, so that going back N bytes is truncating arrays.
//
// A parse stack is a chain of hash-consed nodes (state, parent): the top node's state is where
// the innermost rule is, each parent holds the state its rule resumes at when the callee pops.
// Identical stacks reached along different paths are the same node id, so a set never holds a
// stack twice (ambiguous grammars stay polynomial in practice) and sets are plain id arrays.
// Sets hold only "byte-consuming" stacks, whose top state has byte edges, plus root frames in a
// final state (the grammar may end there): calls and pops are expanded when a set is made.
//
// Nodes live in one arena that only grows while bytes are consumed; pop_to() truncates it with
// the sets, and the hash table tells a stale slot (its node was truncated) by the slot stored
// in the node. After warm-up (the arena and table at their high-water mark) advance() does not
// allocate. One owner thread; copyable (Matcher::fork copies it).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "grammar/automaton.h"

namespace deepinfer::grammar {

class Stacks {
 public:
  // Parent of the outermost frame: popping it ends the grammar.
  static constexpr uint32_t kRoot = 0xFFFFFFFFu;
  // Parent of the frame a context-free walk starts from (token_mask.cpp): popping it means the
  // rest of the token belongs to a caller the walk does not know.
  static constexpr uint32_t kBottom = 0xFFFFFFFEu;

  struct Node {
    uint32_t state, parent, depth, slot;
  };

  Stacks(const Automaton* automaton, uint32_t max_depth);

  // Drops everything and makes set 0: the closure of (state, parent).
  void reset(uint32_t state, uint32_t parent);
  // Drops everything and makes set 0 hold exactly the node (state, parent), without closure.
  void reset_single(uint32_t state, uint32_t parent);
  // Pushes a set holding exactly `node` (no closure): the start of a walk from one stack.
  void push_single(uint32_t node);
  // The same for the stack (state, parent), interned first; `parent` is a node of the sets kept.
  void push_stack(uint32_t state, uint32_t parent) { push_single(intern(state, parent)); }
  // Pushes the set the top set reaches on byte `b`; false (nothing pushed) when it is empty.
  bool advance(uint8_t b);
  // Keeps the first `n_sets` sets (and the nodes that existed when the last of them was made).
  void pop_to(uint32_t n_sets);

  uint32_t n_sets() const { return static_cast<uint32_t>(marks_.size()); }
  std::span<const uint32_t> top() const { return set(n_sets() - 1); }
  std::span<const uint32_t> set(uint32_t k) const {
    const uint32_t begin = k == 0 ? 0 : marks_[k - 1].items_end;
    return {items_.data() + begin, marks_[k].items_end - begin};
  }
  const Node& node(uint32_t id) const { return nodes_[id]; }
  // The last advance() popped a frame whose parent is kBottom.
  bool escaped() const { return escaped_; }
  // A root frame of the top set is in a final state.
  bool can_end() const;
  const Automaton& automaton() const { return *a_; }

 private:
  struct Mark {
    uint32_t items_end, nodes_end;
  };
  void clear();
  uint32_t intern(uint32_t state, uint32_t parent);
  void closure(uint32_t node);
  void rehash(size_t size);
  void next_generation();

  const Automaton* a_;
  uint32_t max_depth_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> table_;  // open addressing: node ids, kEmptySlot
  size_t used_slots_ = 0;
  std::vector<uint32_t> stamp_;  // [nodes] generation in which a node was last expanded
  uint32_t generation_ = 0;
  std::vector<uint32_t> items_;  // the sets, one after another
  std::vector<Mark> marks_;      // [n_sets]
  std::vector<uint32_t> work_;   // closure worklist
  bool escaped_ = false;
};

}  // namespace deepinfer::grammar
