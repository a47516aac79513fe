// Byte DFAs: built from expressions, combined, bounded in length, trimmed.
#include <gtest/gtest.h>

#include "grammar/byte_dfa.h"
#include "grammar/regex.h"

namespace deepinfer::grammar {
namespace {

ByteDfa raw(const char* pattern) {
  Grammar g;
  auto e = compile_regex(g, pattern, RegexEncoding::kRaw, RegexMatch::kFull);
  EXPECT_TRUE(e.ok()) << pattern;
  auto d = dfa_of(g, *e);
  EXPECT_TRUE(d.ok()) << d.status().to_string();
  return *d;
}

TEST(ByteDfa, BooleanCombinations) {
  const ByteDfa letters = raw("[a-z]+"), has_x = raw("[a-z]*x[a-z]*");
  auto both = combine(letters, has_x, DfaOp::kAnd);
  auto without = combine(letters, has_x, DfaOp::kAndNot);
  auto either = combine(raw("a"), raw("b+"), DfaOp::kOr);
  ASSERT_TRUE(both.ok() && without.ok() && either.ok());
  EXPECT_TRUE(dfa_accepts(*both, "abxc"));
  EXPECT_FALSE(dfa_accepts(*both, "abc"));
  EXPECT_TRUE(dfa_accepts(*without, "abc"));
  EXPECT_FALSE(dfa_accepts(*without, "xx"));
  EXPECT_FALSE(dfa_accepts(*without, ""));
  EXPECT_TRUE(dfa_accepts(*either, "a") && dfa_accepts(*either, "bbb"));
  EXPECT_FALSE(dfa_accepts(*either, "ab"));
}

// Trimmed: a language with no string is no states (the matcher never enters a dead end), and
// every state of a result reaches a final one.
TEST(ByteDfa, EmptyResultsHaveNoStatesAndLiveOnesNoDeadEnds) {
  auto none = combine(raw("a+"), raw("a*"), DfaOp::kAndNot);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(dfa_empty(*none));
  auto some = combine(raw("ab|ac"), raw("ac"), DfaOp::kAndNot);
  ASSERT_TRUE(some.ok());
  EXPECT_TRUE(dfa_accepts(*some, "ab"));
  EXPECT_FALSE(dfa_accepts(*some, "ac"));
  EXPECT_EQ(some->n_states(), 3u);  // start, after a, after ab: the dead "ac" branch is gone
}

TEST(ByteDfa, LengthCountsCharactersOfItsOwnLanguage) {
  const ByteDfa one_char = raw("[a-z]|\\\\n");  // a letter, or the two bytes \n
  auto l = with_length(raw("[a-z\\\\n]*"), one_char, 2, 3);
  ASSERT_TRUE(l.ok());
  EXPECT_FALSE(dfa_accepts(*l, "a"));
  EXPECT_TRUE(dfa_accepts(*l, "ab"));
  EXPECT_TRUE(dfa_accepts(*l, "a\\nb"));  // three characters, four bytes
  EXPECT_FALSE(dfa_accepts(*l, "abcd"));
  EXPECT_FALSE(dfa_accepts(*l, "a\\"));  // half a character
  auto unbounded = with_length(raw("[a-z]*"), raw("[a-z]"), 2, -1);
  ASSERT_TRUE(unbounded.ok());
  EXPECT_TRUE(dfa_accepts(*unbounded, std::string(50, 'q')));
  EXPECT_FALSE(dfa_accepts(*unbounded, "q"));
  // A character language that is not prefix-free cannot count characters.
  EXPECT_FALSE(with_length(raw("a*"), raw("a|aa"), 0, 2).ok());
}

TEST(ByteDfa, ProductPastItsBudgetIsRefused) {
  auto big = combine(raw("[ab]*a[ab]{12}"), raw("[ab]*b[ab]{12}"), DfaOp::kAnd, 100);
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace deepinfer::grammar
