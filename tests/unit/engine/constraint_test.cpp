// SequenceConstraint's start trigger on a toy vocabulary: the grammar starts once the generated
// text holds the trigger, however the tokens cut it; the bytes after it in the completing token
// are the grammar's; a token that would complete it with bytes the grammar refuses is masked.
#include "engine/constraint.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "grammar/compile.h"

namespace deepinfer {
namespace {

struct Vocab {
  std::vector<std::string> pieces;
  int32_t id(const std::string& piece) const {
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i] == piece) return static_cast<int32_t>(i);
    }
    ADD_FAILURE() << "no token '" << piece << "'";
    return -1;
  }
};

// Letters and digits one byte each, a few longer pieces, then the stop token (empty bytes).
const Vocab& vocab() {
  static const Vocab v = [] {
    Vocab out;
    for (char c = 'a'; c <= 'z'; ++c) out.pieces.emplace_back(1, c);
    for (char c = '0'; c <= '9'; ++c) out.pieces.emplace_back(1, c);
    for (const char* p : {"<", ">", "<go", "go>", "o>1", "o>x", "x<go>7", " "}) out.pieces.emplace_back(p);
    out.pieces.emplace_back("");
    return out;
  }();
  return v;
}

SequenceConstraint make(std::string_view trigger) {
  std::vector<std::string> pieces = vocab().pieces;
  const auto stop = static_cast<int32_t>(pieces.size() - 1);
  auto index = grammar::TokenIndex::from_pieces(std::move(pieces), {stop});
  grammar::GrammarSpec spec;
  spec.kind = grammar::GrammarKind::kRegex;
  spec.text = "[0-9]{2}";
  auto compiled = grammar::compile_grammar(spec, index, {});
  EXPECT_TRUE(compiled.ok()) << compiled.status().to_string();
  const std::vector<int32_t> stops = {stop};
  return SequenceConstraint(*compiled, stops, static_cast<int64_t>(vocab().pieces.size()), trigger);
}

bool allowed(std::span<const uint64_t> mask, int32_t id) {
  return mask.empty() || ((mask[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1);
}

using Next = SequenceConstraint::Next;

TEST(ConstraintTrigger, StartsAfterTheTriggerHoweverTokensCutIt) {
  SequenceConstraint c = make("<go>");
  EXPECT_FALSE(c.started());
  for (const char* piece : {"h", "i", " ", "<", "g"}) {
    EXPECT_TRUE(allowed(c.mask(), vocab().id("x"))) << "free text before the trigger";
    EXPECT_EQ(c.accept(vocab().id(piece)), Next::kContinue);
  }
  EXPECT_FALSE(c.started());
  EXPECT_EQ(c.accept(vocab().id("o>1")), Next::kContinue);  // completes it; "1" is the grammar's
  EXPECT_TRUE(c.started());
  const auto mask = c.mask();
  EXPECT_TRUE(allowed(mask, vocab().id("2")));
  EXPECT_FALSE(allowed(mask, vocab().id("x")));
  EXPECT_EQ(c.accept(vocab().id("2")), Next::kComplete);
}

TEST(ConstraintTrigger, ATokenThatWouldEndTheTriggerWithRefusedBytesIsMasked) {
  SequenceConstraint c = make("<go>");
  EXPECT_EQ(c.accept(vocab().id("<")), Next::kContinue);
  EXPECT_EQ(c.accept(vocab().id("g")), Next::kContinue);
  const auto mask = c.mask();
  EXPECT_TRUE(allowed(mask, vocab().id("o>1")));   // "1" starts the grammar's text
  EXPECT_FALSE(allowed(mask, vocab().id("o>x")));  // "x" could not
  EXPECT_TRUE(allowed(mask, vocab().id("x")));     // not ending the trigger: free
  EXPECT_TRUE(allowed(mask, vocab().id("go>")));   // ends it exactly ("<g" + "go>" holds "<go>")
  // From the start, a token holding the whole trigger is checked too.
  SequenceConstraint d = make("<go>");
  const auto first = d.mask();
  EXPECT_FALSE(first.empty());
  EXPECT_TRUE(allowed(first, vocab().id("x<go>7")));
  SequenceConstraint e = make("<go>x");
  EXPECT_TRUE(e.mask().empty()) << "no token holds the whole trigger: nothing to check";
}

TEST(ConstraintTrigger, NoTriggerMeansTheGrammarFromTheFirstToken) {
  SequenceConstraint c = make("");
  EXPECT_TRUE(c.started());
  EXPECT_FALSE(allowed(c.mask(), vocab().id("h")));
  EXPECT_EQ(c.accept(vocab().id("4")), Next::kContinue);
  EXPECT_EQ(c.accept(vocab().id("5")), Next::kComplete);
}

}  // namespace
}  // namespace deepinfer
