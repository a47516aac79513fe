#include "kv/kv_cache_manager.h"

#include "kv_configs.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace deepinfer::kv {
namespace {

std::vector<int32_t> iota_tokens(int n, int start = 0) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

KvCacheManager make(int32_t n_blocks, int32_t block_size = 4) {
  return KvCacheManager(single_group_config(block_size, n_blocks, "model-a"));
}

// Runs a request through its whole life: lookup, allocate, compute everything, cache, free.
void serve(KvCacheManager& m, RequestId id, const std::vector<int32_t>& tokens, std::string_view salt = "") {
  PrefixHit hit = m.find_cached_prefix(tokens, salt);
  ASSERT_TRUE(m.allocate_slots(id, static_cast<int64_t>(tokens.size()), &hit));
  m.cache_full_blocks(id, tokens, static_cast<int64_t>(tokens.size()), salt);
  m.free(id);
}

TEST(BlockHash, ChainsOverParentTokensAndExtras) {
  std::vector<int32_t> a = {1, 2, 3, 4}, b = {1, 2, 3, 5};
  const BlockHash ha = hash_block(nullptr, a, "x");
  EXPECT_EQ(ha, hash_block(nullptr, a, "x"));
  EXPECT_NE(ha, hash_block(nullptr, b, "x"));
  EXPECT_NE(ha, hash_block(nullptr, a, "y"));
  EXPECT_NE(hash_block(&ha, a, "x"), hash_block(nullptr, a, "x"));
  const BlockHash hb = hash_block(nullptr, b, "x");
  EXPECT_NE(hash_block(&ha, a, "x"), hash_block(&hb, a, "x"));
}

TEST(KvCacheManager, HitAcrossRequestsReusesTheSameBlocks) {
  auto m = make(16);
  const auto prompt = iota_tokens(10);  // two full blocks of 4 + 2 tokens
  PrefixHit cold = m.find_cached_prefix(prompt, "");
  EXPECT_EQ(cold.n_tokens, 0);
  ASSERT_TRUE(m.allocate_slots(1, 10, &cold));
  const std::vector<BlockId> first(m.block_table(1, kFullGroup).begin(), m.block_table(1, kFullGroup).end());
  m.cache_full_blocks(1, prompt, 10, "");
  // Request 2 while 1 still runs: shares the two full blocks (reference count 2).
  PrefixHit hot = m.find_cached_prefix(prompt, "");
  EXPECT_EQ(hot.n_tokens, 8);
  ASSERT_EQ(hot.blocks[kFullGroup].size(), 2u);
  EXPECT_EQ(hot.blocks[kFullGroup][0], first[0]);
  EXPECT_EQ(hot.blocks[kFullGroup][1], first[1]);
  ASSERT_TRUE(m.allocate_slots(2, 10, &hot));
  EXPECT_EQ(m.block_table(2, kFullGroup).size(), 3u);
  EXPECT_NE(m.block_table(2, kFullGroup)[2], first[2]);  // the partial block is private
  KvCacheStats s = m.stats();
  EXPECT_EQ(s.prefix_queries, 20);
  EXPECT_EQ(s.prefix_hits, 8);
  EXPECT_EQ(s.pool.n_free, 16 - 4);
}

TEST(KvCacheManager, LastTokenIsAlwaysRecomputed) {
  auto m = make(16);
  const auto prompt = iota_tokens(8);  // exactly two blocks
  serve(m, 1, prompt);
  PrefixHit hit = m.find_cached_prefix(prompt, "");
  EXPECT_EQ(hit.n_tokens, 4);  // not 8: the second block holds the last token
}

TEST(KvCacheManager, SaltsIsolateRequests) {
  auto m = make(16);
  const auto prompt = iota_tokens(9);
  serve(m, 1, prompt, "alice");
  EXPECT_EQ(m.find_cached_prefix(prompt, "bob").n_tokens, 0);
  EXPECT_EQ(m.find_cached_prefix(prompt, "").n_tokens, 0);
  EXPECT_EQ(m.find_cached_prefix(prompt, "alice").n_tokens, 8);
  KvCacheManager other(single_group_config(4, 16, "model-b"));
  serve(other, 1, prompt, "alice");
  EXPECT_EQ(other.find_cached_prefix(prompt, "alice").n_tokens, 8);
}

TEST(KvCacheManager, FreedCachedBlocksAreRevivedOnAHit) {
  auto m = make(4);
  const auto prompt = iota_tokens(9);  // 3 blocks
  serve(m, 1, prompt);
  EXPECT_EQ(m.stats().pool.n_free, 4);    // all free...
  EXPECT_EQ(m.stats().pool.n_cached, 2);  // ...two of them still cached
  PrefixHit hit = m.find_cached_prefix(prompt, "");
  ASSERT_EQ(hit.n_tokens, 8);
  ASSERT_TRUE(m.allocate_slots(2, 9, &hit));
  EXPECT_EQ(m.stats().pool.n_free, 1);
  EXPECT_EQ(m.stats().pool.n_evicted, 0);
}

TEST(KvCacheManager, EvictionIsLeastRecentlyFreedFirstTailBeforeHead) {
  auto m = make(4);
  serve(m, 1, iota_tokens(9, 0));     // caches blocks A0, A1 (+ a private partial)
  // A 2-block request takes the two least recently freed blocks. Freed tail first, A's chain
  // entered the queue as partial, A1, A0; the never-used 4th block sits before them.
  ASSERT_TRUE(m.allocate_slots(2, 8, nullptr));
  EXPECT_EQ(m.stats().pool.n_evicted, 0);  // the unused block and A's partial block went first
  EXPECT_EQ(m.find_cached_prefix(iota_tokens(9, 0), "").n_tokens, 8);
  ASSERT_TRUE(m.allocate_slots(3, 4, nullptr));  // now A1 (the chain's tail) is evicted
  EXPECT_EQ(m.stats().pool.n_evicted, 1);
  EXPECT_EQ(m.find_cached_prefix(iota_tokens(9, 0), "").n_tokens, 4);  // A0 survives
}

TEST(KvCacheManager, RunningOutIsANormalFalseThatChangesNothing) {
  auto m = make(3);
  ASSERT_TRUE(m.allocate_slots(1, 8, nullptr));  // 2 blocks
  EXPECT_FALSE(m.allocate_slots(2, 8, nullptr));  // needs 2, 1 free
  EXPECT_TRUE(m.block_table(2, kFullGroup).empty());
  EXPECT_EQ(m.stats().pool.n_free, 1);
  EXPECT_TRUE(m.allocate_slots(1, 12, nullptr));  // grows into the last block
  EXPECT_FALSE(m.allocate_slots(1, 13, nullptr));
  m.free(1);
  EXPECT_EQ(m.stats().pool.n_free, 3);
  m.free(1);  // unknown now: ignored
  EXPECT_TRUE(m.allocate_slots(2, 8, nullptr));
}

TEST(KvCacheManager, ReferenceCountsFollowSharing) {
  auto m = make(8);
  const auto prompt = iota_tokens(9);
  PrefixHit none = m.find_cached_prefix(prompt, "");
  ASSERT_TRUE(m.allocate_slots(1, 9, &none));
  m.cache_full_blocks(1, prompt, 9, "");
  const BlockId shared = m.block_table(1, kFullGroup)[0];
  PrefixHit hit = m.find_cached_prefix(prompt, "");
  ASSERT_TRUE(m.allocate_slots(2, 9, &hit));
  PrefixHit hit3 = m.find_cached_prefix(prompt, "");
  ASSERT_TRUE(m.allocate_slots(3, 9, &hit3));
  EXPECT_EQ(m.stats().pool.n_free, 8 - 3 - 2);
  m.free(1);
  m.free(2);
  EXPECT_EQ(m.stats().pool.n_free, 8 - 3);  // request 3 still holds the two shared blocks
  EXPECT_EQ(m.block_table(3, kFullGroup)[0], shared);
  m.free(3);
  EXPECT_EQ(m.stats().pool.n_free, 8);
}

TEST(KvCacheManager, PrefixCachingOffFindsNothing) {
  KvCacheManager m(single_group_config(4, 8, "m", false));
  const auto prompt = iota_tokens(9);
  serve(m, 1, prompt);
  EXPECT_EQ(m.find_cached_prefix(prompt, "").n_tokens, 0);
  EXPECT_EQ(m.stats().pool.n_cached, 0);
}


// ---- Sliding-window group ----

KvCacheManager make_sliding(int32_t n_full, int32_t n_sliding, int64_t window, int32_t block_size = 4) {
  return KvCacheManager(two_group_config(block_size, n_full, window, n_sliding, "model-a"));
}

int64_t used(const KvCacheManager& m, int group) { return m.stats().groups[static_cast<size_t>(group)].n_used; }

TEST(SlidingKvGroup, WithoutAWindowThereIsOneGroup) {
  KvCacheManager m = make(8);
  EXPECT_FALSE(m.has_window_groups());
  ASSERT_EQ(m.stats().groups.size(), 1u);
  EXPECT_EQ(m.stats().groups[0].kind, KvGroupKind::kFull);
  EXPECT_EQ(m.stats().groups[0].n_blocks, 8);
}

TEST(SlidingKvGroup, BlocksReturnToThePoolAsTheWindowMoves) {
  // Window 8, blocks of 4: between steps at most ceil(7 / 4) + 1 = 3 blocks stay.
  KvCacheManager m = make_sliding(/*n_full=*/32, /*n_sliding=*/8, /*window=*/8);
  ASSERT_TRUE(m.has_window_groups());
  ASSERT_TRUE(m.allocate_slots(1, 10, nullptr));  // a 10-token prompt in one chunk
  EXPECT_EQ(used(m, kSlidingGroup), 3);
  m.free_out_of_window(1, 10);  // the next query (10) sees 3..10: block 0 (0..3) still counts
  EXPECT_EQ(used(m, kSlidingGroup), 3);
  std::vector<BlockId> seen;
  for (int64_t n = 10; n < 100; ++n) {  // decode one token per step
    ASSERT_TRUE(m.allocate_slots(1, n + 1, nullptr)) << n;
    m.free_out_of_window(1, n + 1);
    const int64_t first_visible = n + 1 - 8 + 1;
    const auto table = m.block_table(1, kSlidingGroup);
    ASSERT_EQ(static_cast<int64_t>(table.size()), (n + 1 + 3) / 4);
    for (int64_t b = 0; b < static_cast<int64_t>(table.size()); ++b) {
      const bool visible = (b + 1) * 4 - 1 >= first_visible;
      EXPECT_EQ(table[static_cast<size_t>(b)] != kNoBlock, visible) << "n " << n << " block " << b;
      if (visible) seen.push_back(table[static_cast<size_t>(b)]);
    }
    EXPECT_LE(used(m, kSlidingGroup), 3) << n;
    EXPECT_EQ(used(m, kFullGroup), (n + 1 + 3) / 4);  // the full group keeps everything
  }
  // 25 logical blocks went through a pool of 8: blocks were reused.
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  EXPECT_LE(seen.size(), 8u);
  m.free(1);
  EXPECT_EQ(used(m, kSlidingGroup), 0);
  EXPECT_EQ(used(m, kFullGroup), 0);
  EXPECT_EQ(m.stats().pool.n_blocks, 40);  // all groups
  EXPECT_EQ(m.stats().pool.n_free, 40);
}

TEST(SlidingKvGroup, ChunkedPrefillHoldsTheWindowPlusTheChunk) {
  KvCacheManager m = make_sliding(64, 16, 8);
  int64_t n = 0;
  for (int64_t chunk : {16, 16, 16, 3}) {
    ASSERT_TRUE(m.allocate_slots(1, n + chunk, nullptr));
    // During the step: the window before the chunk (up to 2 whole blocks here) and the chunk.
    EXPECT_LE(used(m, kSlidingGroup), 3 + (chunk + 3) / 4);
    n += chunk;
    m.free_out_of_window(1, n);
    EXPECT_LE(used(m, kSlidingGroup), 3);
  }
}

TEST(SlidingKvGroup, ReplayStartLeavesNoBlocksBelowIt) {
  KvCacheManager m = make_sliding(32, 16, 8);
  const std::vector<int32_t> prompt = iota_tokens(30);
  serve(m, 1, prompt);  // publishes 7 full blocks
  PrefixHit hit = m.find_cached_prefix(prompt, "");
  ASSERT_EQ(hit.n_tokens, 28);
  // Replay from 28 - 8 = 20: the full group takes the hit, the sliding group starts at block 5.
  ASSERT_TRUE(m.allocate_slots(2, 30, &hit, /*n_computed=*/20));
  EXPECT_EQ(m.block_table(2, kFullGroup).size(), 8u);
  const auto sliding = m.block_table(2, kSlidingGroup);
  ASSERT_EQ(sliding.size(), 8u);
  for (size_t b = 0; b < 5; ++b) EXPECT_EQ(sliding[b], kNoBlock) << b;
  for (size_t b = 5; b < 8; ++b) EXPECT_NE(sliding[b], kNoBlock) << b;
  EXPECT_EQ(used(m, kSlidingGroup), 3);
  m.free(2);
  EXPECT_EQ(used(m, kSlidingGroup), 0);
}

TEST(SlidingKvGroup, ShortSlidingPoolIsANormalFalseThatChangesNothing) {
  KvCacheManager m = make_sliding(32, 2, 8);
  EXPECT_FALSE(m.allocate_slots(1, 12, nullptr));  // needs 3 sliding blocks, 2 exist
  EXPECT_EQ(used(m, kFullGroup), 0);
  EXPECT_TRUE(m.block_table(1, kFullGroup).empty());
  EXPECT_TRUE(m.allocate_slots(1, 8, nullptr));
  EXPECT_EQ(used(m, kFullGroup), 2);
  EXPECT_EQ(used(m, kSlidingGroup), 2);
}

// Groups with different block sizes (DeepSeek V4's compressed rows need larger blocks in
// tokens): two prefix-cached groups of 4- and 8-token blocks and a sliding group of 4.
KvCacheConfig mixed_groups(int64_t n_blocks) {
  KvCacheConfig c = two_group_config(4, n_blocks, /*window=*/6, n_blocks, "model-a");
  KvGroupSpec wide = c.groups[0];
  wide.name = "wide";
  wide.block_size = 8;
  c.groups.push_back(wide);
  return c;
}

TEST(MixedBlockSizes, HitsAreWholeBlocksOfEveryCachedGroup) {
  KvCacheManager m(mixed_groups(32));
  EXPECT_EQ(m.block_alignment(), 8);
  EXPECT_EQ(m.max_window(), 6);
  const std::vector<int32_t> prompt = iota_tokens(21);  // 5 blocks of 4, 2 of 8 (+ tails)
  serve(m, 1, prompt);
  PrefixHit hit = m.find_cached_prefix(prompt, "");
  // The 4-token group has 16 tokens cached (the last token is never a hit), the 8-token group
  // 16: both agree on 16, a multiple of 8.
  EXPECT_EQ(hit.n_tokens, 16);
  ASSERT_EQ(hit.blocks.size(), 3u);
  EXPECT_EQ(hit.blocks[0].size(), 4u);
  EXPECT_TRUE(hit.blocks[1].empty());  // sliding: never cached
  EXPECT_EQ(hit.blocks[2].size(), 2u);
  ASSERT_TRUE(m.allocate_slots(2, 21, &hit, /*n_computed=*/16));
  EXPECT_EQ(m.block_table(2, 0).size(), 6u);
  EXPECT_EQ(m.block_table(2, 2).size(), 3u);
  EXPECT_EQ(m.block_table(2, 0)[3], hit.blocks[0][3]);
  EXPECT_EQ(m.block_table(2, 2)[1], hit.blocks[2][1]);
  const auto sliding = m.block_table(2, 1);
  ASSERT_EQ(sliding.size(), 6u);
  for (size_t b = 0; b < 4; ++b) EXPECT_EQ(sliding[b], kNoBlock) << b;
  m.free(2);
}

TEST(MixedBlockSizes, AHitStopsWhereTheShorterGroupLostItsBlock) {
  KvCacheManager m(mixed_groups(32));
  const std::vector<int32_t> prompt = iota_tokens(40);
  PrefixHit cold = m.find_cached_prefix(prompt, "");
  ASSERT_TRUE(m.allocate_slots(1, 40, &cold));
  // Only the first 20 tokens computed so far: the 4-token group publishes 5 blocks, the
  // 8-token group 2 (its third block ends at 24).
  m.cache_full_blocks(1, prompt, 20, "");
  EXPECT_EQ(m.find_cached_prefix(prompt, "").n_tokens, 16);
  m.cache_full_blocks(1, prompt, 40, "");
  EXPECT_EQ(m.find_cached_prefix(prompt, "").n_tokens, 32);  // 39 tokens searchable: 4 blocks of 8
  const KvCacheStats s = m.stats();
  ASSERT_EQ(s.groups.size(), 3u);
  EXPECT_EQ(s.groups[0].n_cached, 10);
  EXPECT_EQ(s.groups[1].n_cached, 0);
  EXPECT_EQ(s.groups[2].n_cached, 5);
  EXPECT_EQ(s.groups[2].name, "wide");
  m.free(1);
}

TEST(MixedBlockSizes, ConfigurationsThatCannotWorkAreRejected) {
  KvCacheConfig c = mixed_groups(8);
  c.groups[2].block_size = 6;  // not a multiple of 4
  EXPECT_EQ(KvCacheManager::validate(c).code(), StatusCode::kInvalidArgument);
  c = mixed_groups(8);
  c.groups[1].window = 0;  // a sliding group without a window
  EXPECT_EQ(KvCacheManager::validate(c).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(KvCacheManager::validate(KvCacheConfig{}).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(KvCacheManager::validate(mixed_groups(8)).ok());
}


// DeepSeek V4's groups: a sliding ring, compressed rows (published like full blocks) and a
// compressor frontier whose window is wider than the ring's. Only groups without a full one.
KvCacheConfig v4_groups() {
  KvCacheConfig c = single_group_config(8, 32, "v4");
  c.groups[0].name = "csa_kv";
  c.groups[0].kind = KvGroupKind::kCompressed;
  c.groups[0].tokens_per_row = 4;
  KvGroupSpec window = c.groups[0];
  window.name = "window";
  window.kind = KvGroupKind::kSlidingWindow;
  window.tokens_per_row = 1;
  window.window = 4;
  KvGroupSpec state = window;
  state.name = "csa_state";
  state.kind = KvGroupKind::kCompressorState;
  state.window = 8;
  c.groups.insert(c.groups.begin(), window);
  c.groups.push_back(state);
  return c;
}

TEST(CompressedKvGroup, CompressedRowsArePrefixCachedAndTheReplayCoversTheFrontier) {
  KvCacheManager m(v4_groups());
  // The frontier's window (8), not only the ring's (4), is what a replay must rebuild.
  EXPECT_EQ(m.max_window(), 8);
  const std::vector<int32_t> prompt = iota_tokens(29);
  serve(m, 1, prompt);
  PrefixHit hit = m.find_cached_prefix(prompt, "");
  EXPECT_EQ(hit.n_tokens, 24);  // the compressed group's whole blocks before the last token
  ASSERT_EQ(hit.blocks.size(), 3u);
  EXPECT_TRUE(hit.blocks[0].empty());  // the ring: never cached
  EXPECT_EQ(hit.blocks[1].size(), 3u);
  EXPECT_TRUE(hit.blocks[2].empty());  // the frontier: never cached
  ASSERT_TRUE(m.allocate_slots(2, 29, &hit, /*n_computed=*/16));
  EXPECT_EQ(m.block_table(2, 1)[2], hit.blocks[1][2]);
  m.free(2);
}

TEST(CompressedKvGroup, TheFrontierIsReleasedBelowItsWindowAndCompressedRowsStay) {
  KvCacheManager m(v4_groups());
  // Decode a long request: each step frees what left the windows.
  const int64_t n = 196;
  for (int64_t computed = 1; computed <= n; ++computed) {
    ASSERT_TRUE(m.allocate_slots(1, computed, nullptr));
    m.free_out_of_window(1, computed);
  }
  // The next query, at 196, sees the frontier's rows 189..195 (window 8: blocks 23 and 24 of 8
  // tokens) and the ring's 193..195 (window 4: block 24); the compressed rows keep all 25 blocks.
  EXPECT_EQ(m.blocks_below(1, 2, n), 2);
  EXPECT_EQ(m.blocks_below(1, 0, n), 1);
  EXPECT_EQ(m.blocks_below(1, 1, n), 25);
  EXPECT_EQ(m.block_table(1, 2)[0], kNoBlock);
  // A new request starting at a replay skips the frontier's blocks below its start.
  const std::vector<int32_t> prompt = iota_tokens(29);
  ASSERT_TRUE(m.allocate_slots(2, 29, nullptr, /*n_computed=*/16));
  EXPECT_EQ(m.block_table(2, 2)[1], kNoBlock);
  EXPECT_NE(m.block_table(2, 2)[2], kNoBlock);
  m.free(1);
  m.free(2);
  for (const KvGroupStats& g : m.stats().groups) EXPECT_EQ(g.n_used, 0) << g.name;
}

}  // namespace
}  // namespace deepinfer::kv
