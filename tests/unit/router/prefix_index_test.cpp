#include "router/prefix_index.h"

#include <gtest/gtest.h>

#include <string>

namespace deepinfer::router {
namespace {

std::string text_of(size_t n_blocks, char fill) { return std::string(n_blocks * kTextBlockBytes, fill); }

TEST(TextBlockKeys, FullBlocksOnlyAndChained) {
  EXPECT_TRUE(text_block_keys(std::string(kTextBlockBytes - 1, 'a')).empty());
  const auto a = text_block_keys(text_of(3, 'a') + "tail");
  ASSERT_EQ(a.size(), 3u);
  // Equal blocks at different depths get different keys: each key covers its whole prefix.
  EXPECT_NE(a[0], a[1]);
  EXPECT_NE(a[1], a[2]);
  // A different first block changes every later key, as a prefix chain must.
  const auto b = text_block_keys("b" + text_of(3, 'a').substr(1));
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_NE(a[i], b[i]);
  // A shared prefix shares its keys.
  const auto c = text_block_keys(text_of(2, 'a') + text_of(1, 'z'));
  EXPECT_EQ(c[0], a[0]);
  EXPECT_EQ(c[1], a[1]);
  EXPECT_NE(c[2], a[2]);
}

TEST(PrefixIndex, MatchStopsAtFirstMissingBlock) {
  PrefixIndex index(100);
  const auto keys = text_block_keys(text_of(4, 'a'));
  index.insert(std::span(keys).first(2));
  EXPECT_EQ(index.match(keys), 2u);
  const auto other = text_block_keys(text_of(4, 'b'));
  EXPECT_EQ(index.match(other), 0u);
  index.insert(keys);
  EXPECT_EQ(index.match(keys), 4u);
  EXPECT_EQ(index.size(), 4u);
  index.clear();
  EXPECT_EQ(index.match(keys), 0u);
}

TEST(PrefixIndex, EvictsLeastRecentChainTailsFirst) {
  PrefixIndex index(4);
  const auto old_keys = text_block_keys(text_of(3, 'a'));
  const auto new_keys = text_block_keys(text_of(2, 'b'));
  index.insert(old_keys);
  index.insert(new_keys);  // 5 blocks for 4 places: the oldest chain loses its tail
  EXPECT_EQ(index.size(), 4u);
  EXPECT_EQ(index.match(new_keys), 2u);
  EXPECT_EQ(index.match(old_keys), 2u);  // head kept, tail gone: still a useful match
}

TEST(PrefixIndex, ReinsertRefreshesRecency) {
  PrefixIndex index(4);
  const auto a = text_block_keys(text_of(2, 'a'));
  const auto b = text_block_keys(text_of(2, 'b'));
  const auto c = text_block_keys(text_of(2, 'c'));
  index.insert(a);
  index.insert(b);
  index.insert(a);  // a is now the most recent
  index.insert(c);  // evicts b, not a
  EXPECT_EQ(index.match(a), 2u);
  EXPECT_EQ(index.match(b), 0u);
  EXPECT_EQ(index.match(c), 2u);
}

}  // namespace
}  // namespace deepinfer::router
