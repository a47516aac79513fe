#include "router/cost_model.h"

#include <gtest/gtest.h>

#include <vector>

namespace deepinfer::router {
namespace {

CandidateView replica(int64_t in_flight, size_t matched = 0, uint64_t routed = 0) {
  CandidateView c;
  c.available = true;
  c.in_flight = in_flight;
  c.matched_blocks = matched;
  c.routed_total = routed;
  return c;
}

size_t pick(Policy policy, const std::vector<CandidateView>& cs, size_t total_blocks, const CostParams& p = {},
            uint64_t cursor = 0) {
  auto choice = choose(policy, cs, total_blocks, p, cursor);
  EXPECT_TRUE(choice.has_value());
  return choice ? choice->index : 99;
}

TEST(CostModel, PolicyNames) {
  for (Policy p : {Policy::kRoundRobin, Policy::kLeastLoad, Policy::kCacheAware}) {
    EXPECT_EQ(parse_policy(policy_name(p)), p);
  }
  EXPECT_FALSE(parse_policy("random").has_value());
}

TEST(CostModel, NothingAvailableIsNoChoice) {
  std::vector<CandidateView> cs = {replica(0), replica(0)};
  cs[0].available = cs[1].available = false;
  for (Policy p : {Policy::kRoundRobin, Policy::kLeastLoad, Policy::kCacheAware}) {
    EXPECT_FALSE(choose(p, cs, 4, {}, 0).has_value());
  }
}

TEST(CostModel, RoundRobinSkipsUnavailable) {
  std::vector<CandidateView> cs = {replica(0), replica(0), replica(0)};
  cs[1].available = false;
  EXPECT_EQ(pick(Policy::kRoundRobin, cs, 0, {}, 0), 0u);
  EXPECT_EQ(pick(Policy::kRoundRobin, cs, 0, {}, 1), 2u);
  EXPECT_EQ(pick(Policy::kRoundRobin, cs, 0, {}, 3), 0u);
}

TEST(CostModel, LeastLoadUsesTheHigherOfDispatchCountAndScrape) {
  std::vector<CandidateView> cs = {replica(1), replica(2)};
  EXPECT_EQ(pick(Policy::kLeastLoad, cs, 0), 0u);
  cs[0].scraped_queue = 5;  // someone else's requests on replica 0
  EXPECT_EQ(pick(Policy::kLeastLoad, cs, 0), 1u);
  // A stale scrape that says 0 does not hide what the router itself has sent.
  cs[0].scraped_queue = 0;
  cs[0].in_flight = 3;
  EXPECT_EQ(pick(Policy::kLeastLoad, cs, 0), 1u);
}

TEST(CostModel, TiesBreakOnFewestRouted) {
  std::vector<CandidateView> cs = {replica(0, 0, 10), replica(0, 0, 3)};
  EXPECT_EQ(pick(Policy::kLeastLoad, cs, 0), 1u);
  EXPECT_EQ(pick(Policy::kCacheAware, cs, 4), 1u);
}

TEST(CostModel, CacheAwareFollowsThePrefix) {
  std::vector<CandidateView> cs = {replica(1, 0), replica(2, 8)};
  auto choice = choose(Policy::kCacheAware, cs, 10, {}, 0);
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->index, 1u);
  EXPECT_EQ(choice->reason, Reason::kCacheHit);
  EXPECT_EQ(choice->matched_blocks, 8u);
}

TEST(CostModel, CacheAwareMissEverywhereGoesToLeastLoadedNotSmallestTree) {
  std::vector<CandidateView> cs = {replica(5), replica(1)};
  auto choice = choose(Policy::kCacheAware, cs, 10, {}, 0);
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->index, 1u);
  EXPECT_EQ(choice->reason, Reason::kLeastLoad);
}

TEST(CostModel, LoadOutweighsASmallHit) {
  // 1 of 10 blocks cached on a replica 6 requests busier: the load term wins.
  std::vector<CandidateView> cs = {replica(7, 1), replica(1, 0)};
  EXPECT_EQ(pick(Policy::kCacheAware, cs, 10), 1u);
  // The weight is the knob: at 0 only the cache counts (within the bound).
  CostParams p;
  p.load_weight = 0;
  EXPECT_EQ(pick(Policy::kCacheAware, cs, 10, p), 0u);
}

TEST(CostModel, BoundStopsAHotPrefixPilingOntoOneReplica) {
  CostParams p;
  p.load_weight = 0;  // affinity alone would always pick replica 0
  p.balance_abs = 4;
  p.balance_rel = 1.5;
  std::vector<CandidateView> cs = {replica(4, 10), replica(0, 0)};
  EXPECT_EQ(pick(Policy::kCacheAware, cs, 10, p), 0u);  // 4 <= 0 + 4: still affine
  cs[0].in_flight = 5;
  auto choice = choose(Policy::kCacheAware, cs, 10, p, 0);
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->index, 1u);
  EXPECT_EQ(choice->reason, Reason::kBound);
  // Simulated hot prefix: every request matches replica 0 fully. Queues stay within the bound.
  cs = {replica(0, 10), replica(0, 0)};
  for (int i = 0; i < 200; ++i) {
    const size_t chosen = pick(Policy::kCacheAware, cs, 10, p);
    ++cs[chosen].in_flight;
    cs[chosen].matched_blocks = 10;
    if (i % 3 == 0) {  // requests finish, one at a time, on the busiest replica
      auto& busiest = cs[0].in_flight >= cs[1].in_flight ? cs[0] : cs[1];
      --busiest.in_flight;
    }
  }
  EXPECT_LE(std::abs(cs[0].in_flight - cs[1].in_flight), 1.5 * std::min(cs[0].in_flight, cs[1].in_flight) + 5);
}

TEST(CostModel, KvPressureCountsAsLoad) {
  std::vector<CandidateView> cs = {replica(1), replica(2)};
  cs[0].kv_usage = 0.95;  // about to preempt
  EXPECT_EQ(pick(Policy::kLeastLoad, cs, 0), 1u);
}

}  // namespace
}  // namespace deepinfer::router
