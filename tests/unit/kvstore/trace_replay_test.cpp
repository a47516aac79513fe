// Trace replay on tiny traces whose hits, writes and evictions are worked out by hand below
// (blocks of 4 tokens, 1 byte per token: a page of 4 tokens is 4 bytes of "KV").
#include "kvstore/trace_replay.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

namespace deepinfer::kvstore {
namespace {

namespace fs = std::filesystem;

class TraceReplayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("deepinfer_replay_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  ReplayOptions options(int64_t memory_pages, int64_t disk_pages) const {
    ReplayOptions o;
    o.block_tokens = 4;
    o.page_tokens = 4;
    o.bytes_per_token = 1;
    o.memory_bytes = memory_pages * 4;
    o.disk_bytes = disk_pages * 4;
    o.dir = dir_.string();
    return o;
  }
  static const ReplayModeResult& mode(const ReplayReport& r, const std::string& name) {
    for (const ReplayModeResult& m : r.modes) {
      if (m.mode == name) return m;
    }
    ADD_FAILURE() << "no mode " << name;
    return r.modes.front();
  }

  fs::path dir_;
};

// Four requests, memory of 2 pages, disk unlimited. Pages are named by their prefix: (1,2) is
// the page of block 2 after block 1.
//   r0  9 tokens [1 2 3]: full blocks 1, 2 (3 is partial); nothing cached yet.
//   r1  8 tokens [1 2]:   its last token ends page (1,2), so only (1) may hit: 4 tokens.
//   r2 12 tokens [5 6 7]: three pages, more than the prefix cache's 2 blocks: it cannot run
//                         there; the store's memory keeps its last 2 pages, evicting (1), (1,2).
//   r3  9 tokens [1 2 9]: (1), (1,2) may hit: the prefix cache still has them (r2 took
//                         nothing), the memory tier lost them, the disk has them.
TEST_F(TraceReplayTest, HitsOfEachModeOnATinyTrace) {
  const std::vector<TraceRequest> trace = {
      {0, 9, {1, 2, 3}}, {1000, 8, {1, 2}}, {2000, 12, {5, 6, 7}}, {3000, 9, {1, 2, 9}}};
  auto report = replay_trace(trace, options(2, 0));
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->requests, 4);
  EXPECT_EQ(report->input_tokens, 38);
  EXPECT_EQ(report->trace_ms, 3000);
  EXPECT_EQ(report->unique_ids, 7);
  EXPECT_EQ(report->ids_with_two_parents, 0);
  EXPECT_EQ(report->page_bytes, 4);
  EXPECT_EQ(report->memory_pages, 2);
  ASSERT_EQ(report->modes.size(), 4u);

  // Blocks A, B. r0 fills them; r1 revives A and, computing its page 2, reuses B (an eviction)
  // for the same key again; r2 does not fit; r3 hits both.
  const ReplayModeResult& prefix = mode(*report, "prefix_cache");
  EXPECT_EQ(prefix.input_tokens, 38);
  EXPECT_EQ(prefix.hit_tokens, 4 + 8);
  EXPECT_EQ(prefix.memory_hit_tokens, 12);
  EXPECT_EQ(prefix.memory_evictions, 1);
  EXPECT_EQ(prefix.uncached_requests, 1);
  EXPECT_EQ(prefix.pages_written, 0);

  // r2's three puts evict (1), (1,2), (5); r3 misses (1) and its puts evict (5,6), (5,6,7).
  const ReplayModeResult& memory = mode(*report, "store_memory");
  EXPECT_EQ(memory.hit_tokens, 4);
  EXPECT_EQ(memory.memory_evictions, 5);
  EXPECT_EQ(memory.pages_written, 0);

  // As store_memory up to r3, whose two hits come from the disk and are promoted to memory,
  // pushing r2's two pages out.
  const ReplayModeResult& tiers = mode(*report, "store_memory_disk");
  EXPECT_EQ(tiers.memory_hit_tokens, 4);
  EXPECT_EQ(tiers.disk_hit_tokens, 8);
  EXPECT_EQ(tiers.hit_tokens, 12);
  EXPECT_EQ(tiers.pages_written, 5);
  EXPECT_EQ(tiers.bytes_written, 5 * 4);
  EXPECT_EQ(tiers.disk_bytes_read, 8);
  EXPECT_EQ(tiers.memory_evictions, 5);
  EXPECT_EQ(tiers.disk_evictions, 0);

  // The prefix cache answers r1 and r3 itself; r2 never ran, so it wrote nothing.
  const ReplayModeResult& engine = mode(*report, "prefix_cache_store");
  EXPECT_EQ(engine.memory_hit_tokens, 12);
  EXPECT_EQ(engine.disk_hit_tokens, 0);
  EXPECT_EQ(engine.pages_written, 2);
  EXPECT_EQ(engine.uncached_requests, 1);
  EXPECT_EQ(engine.memory_evictions, 1);
}

// r1 evicts r0's pages from the 2-block prefix cache; r2 repeats r0's prefix: only a mode with
// the disk finds it, and the engine's mode imports it into the prefix cache (evicting r1's).
TEST_F(TraceReplayTest, TheDiskServesWhatMemoryEvicted) {
  const std::vector<TraceRequest> trace = {{0, 9, {1, 2, 3}}, {10, 9, {5, 6, 7}}, {20, 9, {1, 2, 8}}};
  auto report = replay_trace(trace, options(2, 0));
  ASSERT_TRUE(report.ok()) << report.status().message();
  const ReplayModeResult& prefix = mode(*report, "prefix_cache");
  EXPECT_EQ(prefix.hit_tokens, 0);
  EXPECT_EQ(prefix.memory_evictions, 4);
  EXPECT_EQ(mode(*report, "store_memory").hit_tokens, 0);
  const ReplayModeResult& tiers = mode(*report, "store_memory_disk");
  EXPECT_EQ(tiers.disk_hit_tokens, 8);
  EXPECT_EQ(tiers.memory_hit_tokens, 0);
  EXPECT_EQ(tiers.pages_written, 4);
  const ReplayModeResult& engine = mode(*report, "prefix_cache_store");
  EXPECT_EQ(engine.disk_hit_tokens, 8);
  EXPECT_EQ(engine.memory_hit_tokens, 0);
  EXPECT_EQ(engine.disk_bytes_read, 8);
  EXPECT_EQ(engine.pages_written, 4);
  EXPECT_EQ(engine.memory_evictions, 4);  // r1 took r0's blocks, the import took r1's
}

// A disk of 2 pages and no memory: a third page passes the watermark, and the least recently
// used go down to 90% of it (1.8 pages: two go). The store's LRU loses a prefix's head first.
TEST_F(TraceReplayTest, DiskCapacityEvictsLeastRecentlyUsed) {
  const std::vector<TraceRequest> trace = {
      {0, 9, {1, 2, 3}},   // puts (1), (1,2)
      {10, 5, {5, 6}},     // puts (5): evicts (1), (1,2)
      {20, 9, {1, 2, 8}},  // misses (1); puts (1), then (1,2): evicts (5), (1)
      {30, 5, {5, 6}}};    // misses (5)
  auto report = replay_trace(trace, options(0, 2));
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->disk_pages, 2);
  const ReplayModeResult& tiers = mode(*report, "store_memory_disk");
  EXPECT_EQ(tiers.hit_tokens, 0);
  EXPECT_EQ(tiers.pages_written, 6);  // (5) again by r3
  EXPECT_EQ(tiers.disk_evictions, 4);
  EXPECT_EQ(tiers.memory_evictions, 0);
}

// TTL 20 s of store time at 2x the trace's time: 10 s of trace. Expiry runs when a page is
// written, so r2 writes one before r3 looks (1) up.
TEST_F(TraceReplayTest, TraceTimeDrivesTheTtl) {
  ReplayOptions o = options(0, 0);
  o.ttl = std::chrono::seconds(20);
  o.time_scale = 2.0;
  const std::vector<TraceRequest> trace = {
      {0, 9, {1, 2, 3}},       // puts (1), (1,2) at 0 s
      {5000, 9, {1, 2, 4}},    // hits both (used 10 s ago): 8 tokens; last use now 10 s
      {16000, 5, {7, 8}},      // puts (7) at 32 s: (1), (1,2) expired (22 s > 20 s)
      {17000, 9, {1, 2, 4}}};  // misses
  auto report = replay_trace(trace, o);
  ASSERT_TRUE(report.ok()) << report.status().message();
  const ReplayModeResult& tiers = mode(*report, "store_memory_disk");
  EXPECT_EQ(tiers.disk_hit_tokens, 8);
  EXPECT_EQ(tiers.expirations, 2);
  EXPECT_EQ(tiers.pages_written, 2 + 1 + 2);
}

// Pages of 2 tokens in blocks of 4: a request may hit up to the page before its last token.
TEST_F(TraceReplayTest, PagesSplitBlocksAndTheLastTokenIsComputed) {
  ReplayOptions o = options(0, 0);
  o.page_tokens = 2;
  o.memory_bytes = 100;
  const std::vector<TraceRequest> trace = {
      {0, 9, {1, 2, 3}},  // 4 pages of 2 blocks
      {1, 6, {1, 2}},     // one full block: 2 pages, both end before token 6: 4 tokens
      {2, 8, {1, 2}}};    // 4 pages, the last ends at its last token: 3 pages, 6 tokens
  auto report = replay_trace(trace, o);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->page_bytes, 2);
  for (const ReplayModeResult& m : report->modes) EXPECT_EQ(m.hit_tokens, 4 + 6) << m.mode;
}

TEST_F(TraceReplayTest, CountsIdsThatAreNotPrefixUnique) {
  // Block 2 follows 1 in r0 and starts r1: keyed by ids alone, r1 would hit (2) and (2,3);
  // keyed by their prefixes, nothing.
  const std::vector<TraceRequest> trace = {{0, 12, {1, 2, 3}}, {1, 9, {2, 3, 4}}};
  auto report = replay_trace(trace, options(4, 0));
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->ids_with_two_parents, 1);
  for (const ReplayModeResult& m : report->modes) EXPECT_EQ(m.hit_tokens, 0) << m.mode;
}

TEST_F(TraceReplayTest, BadInputIsRefusedNamingIt) {
  const auto message = [&](const std::vector<TraceRequest>& trace, const ReplayOptions& o) {
    auto r = replay_trace(trace, o);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().message();
  };
  const std::vector<TraceRequest> good = {{0, 9, {1, 2, 3}}};
  EXPECT_NE(message({{0, 9, {1, 2}}}, options(2, 0)).find("request 0: hash_ids has 2 ids"), std::string::npos);
  EXPECT_NE(message({{0, 4, {-1}}}, options(2, 0)).find("hash_ids[0] is negative"), std::string::npos);
  EXPECT_NE(message({{5, 4, {1}}, {4, 4, {1}}}, options(2, 0)).find("request 1: timestamp goes back"),
            std::string::npos);
  EXPECT_NE(message({{0, 0, {}}}, options(2, 0)).find("input_length"), std::string::npos);
  ReplayOptions o = options(2, 0);
  o.page_tokens = 3;
  EXPECT_NE(message(good, o).find("page tokens (3) must divide"), std::string::npos);
  o = options(2, 0);
  o.memory_bytes = 3;  // less than a page of 4 bytes
  EXPECT_NE(message(good, o).find("smaller than one page"), std::string::npos);
  o = options(2, 0);
  o.dir.clear();
  EXPECT_NE(message(good, o).find("scratch directory"), std::string::npos);
  o = options(2, 0);
  o.time_scale = 0;
  EXPECT_NE(message(good, o).find("time scale"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::kvstore
