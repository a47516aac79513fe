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

CostParams in_tokens() {
  CostParams p;
  p.load_unit = LoadUnit::kTokens;
  return p;
}

CostParams in_requests() {
  CostParams p;
  p.load_unit = LoadUnit::kRequests;
  return p;
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

TEST(CostModel, LeastLoadAddsOthersRequestsToTheRoutersOwn) {
  std::vector<CandidateView> cs = {replica(1), replica(2)};
  EXPECT_EQ(pick(Policy::kLeastLoad, cs, 0), 0u);
  cs[0].others_queue = 2;  // someone else's requests on replica 0: 3 against 2
  EXPECT_EQ(pick(Policy::kLeastLoad, cs, 0), 1u);
  cs[0].others_queue = 0;
  cs[0].in_flight = 3;
  EXPECT_EQ(pick(Policy::kLeastLoad, cs, 0), 1u);
}

TEST(CostModel, TiesBreakOnFewestRouted) {
  std::vector<CandidateView> cs = {replica(0, 0, 10), replica(0, 0, 3)};
  EXPECT_EQ(pick(Policy::kLeastLoad, cs, 0), 1u);
  EXPECT_EQ(pick(Policy::kCacheAware, cs, 4), 1u);
}

// Both load units (the default is tokens).
TEST(CostModel, CacheAwareFollowsThePrefix) {
  EXPECT_EQ(CostParams{}.load_unit, LoadUnit::kTokens);
  for (const CostParams& p : {in_tokens(), in_requests()}) {
    std::vector<CandidateView> cs = {replica(1, 0), replica(2, 8)};
    auto choice = choose(Policy::kCacheAware, cs, 10, p, 0);
    ASSERT_TRUE(choice);
    EXPECT_EQ(choice->index, 1u);
    EXPECT_EQ(choice->reason, Reason::kCacheHit);
    EXPECT_EQ(choice->matched_blocks, 8u);
  }
}

TEST(CostModel, CacheAwareMissEverywhereGoesToLeastLoadedNotSmallestTree) {
  for (const CostParams& p : {in_tokens(), in_requests()}) {
    std::vector<CandidateView> cs = {replica(5), replica(1)};
    auto choice = choose(Policy::kCacheAware, cs, 10, p, 0);
    ASSERT_TRUE(choice);
    EXPECT_EQ(choice->index, 1u);
    EXPECT_EQ(choice->reason, Reason::kLeastLoad);
  }
}

TEST(CostModel, LoadOutweighsASmallHit) {
  for (CostParams p : {in_tokens(), in_requests()}) {
    // 1 of 10 blocks cached on a replica 6 requests busier: the load term wins.
    std::vector<CandidateView> cs = {replica(7, 1), replica(1, 0)};
    EXPECT_EQ(pick(Policy::kCacheAware, cs, 10, p), 1u);
    // The weight is the knob: at 0 only the cache counts (within the bound).
    p.load_weight = 0;
    EXPECT_EQ(pick(Policy::kCacheAware, cs, 10, p), 0u);
  }
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

TEST(CostModel, LoadUnitNames) {
  for (LoadUnit u : {LoadUnit::kTokens, LoadUnit::kRequests}) EXPECT_EQ(parse_load_unit(load_unit_name(u)), u);
  EXPECT_FALSE(parse_load_unit("blocks").has_value());
  EXPECT_DOUBLE_EQ(tokens_of_blocks(10), 160.0);  // 64-byte blocks at 4 bytes a token
}

CandidateView prefilling(size_t matched, double pending_tokens, int64_t pending_requests, int64_t decoding = 0) {
  CandidateView c = replica(pending_requests + decoding, matched);
  c.pending_prefill_tokens = pending_tokens;
  c.pending_prefills = pending_requests;
  return c;
}

TEST(CostModel, TokensPriceThePrefillsAheadNotTheRequestCount) {
  // Replica 0 holds 8 of the 10 blocks (32 tokens to compute) but has one 2,000-token prefill
  // in flight; replica 1 holds nothing (160 tokens) and decodes two requests. Counted in
  // requests replica 1 is the busier one and the hit wins; counted in tokens the new request
  // would wait behind 2,000 tokens on replica 0.
  std::vector<CandidateView> cs = {prefilling(8, 2000, 1), prefilling(0, 0, 0, 2)};
  EXPECT_EQ(pick(Policy::kCacheAware, cs, 10, in_requests()), 0u);
  auto choice = choose(Policy::kCacheAware, cs, 10, in_tokens(), 0);
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->index, 1u);
  EXPECT_EQ(choice->reason, Reason::kLeastLoad);
  // Once that prefill has begun answering, the hit wins again: 32 + 16 against 160 + 32.
  cs[0] = prefilling(8, 0, 0, 1);
  EXPECT_EQ(pick(Policy::kCacheAware, cs, 10, in_tokens()), 0u);
}

TEST(CostModel, TokensKeepAffinityAgainstDecodes) {
  // A full hit on a replica decoding 6 requests beats a miss on an idle one: 6 * 16 < 160.
  std::vector<CandidateView> cs = {prefilling(10, 0, 0, 6), prefilling(0, 0, 0, 0)};
  EXPECT_EQ(pick(Policy::kCacheAware, cs, 10, in_tokens()), 0u);
  // Each decode row is priced by --decode-row-tokens.
  CostParams p = in_tokens();
  p.decode_row_tokens = 40;
  EXPECT_EQ(pick(Policy::kCacheAware, cs, 10, p), 1u);
}

TEST(CostModel, TokensMissEverywhereGoesToTheLeastWorkAhead) {
  // No hit anywhere: the fewest pending prefill tokens wins, whatever the request counts say.
  std::vector<CandidateView> cs = {prefilling(0, 1500, 1), prefilling(0, 300, 3)};
  auto choice = choose(Policy::kCacheAware, cs, 10, in_tokens(), 0);
  ASSERT_TRUE(choice);
  EXPECT_EQ(choice->index, 1u);
  EXPECT_EQ(choice->reason, Reason::kLeastLoad);
}

TEST(CostModel, TokensCountOthersRequestsAtThisRequestsSize) {
  // Replica 0 holds 3 requests this router did not send: each is priced as a
  // prompt of this request's size, so the hit (32 tokens) loses to the empty replica (160).
  std::vector<CandidateView> cs = {prefilling(8, 0, 0), prefilling(0, 0, 0)};
  EXPECT_EQ(pick(Policy::kCacheAware, cs, 10, in_tokens()), 0u);
  cs[0].others_queue = 3;
  EXPECT_EQ(pick(Policy::kCacheAware, cs, 10, in_tokens()), 1u);
}

TEST(CostModel, KvPressureCountsAsLoad) {
  std::vector<CandidateView> cs = {replica(1), replica(2)};
  cs[0].kv_usage = 0.95;  // about to preempt
  EXPECT_EQ(pick(Policy::kLeastLoad, cs, 0), 1u);
  // In tokens too: a near-full replica costs kv_usage_weight * usage times the request's size.
  cs = {replica(0, 8), replica(0, 0)};
  EXPECT_EQ(pick(Policy::kCacheAware, cs, 10, in_tokens()), 0u);
  cs[0].kv_usage = 0.95;
  EXPECT_EQ(pick(Policy::kCacheAware, cs, 10, in_tokens()), 1u);
}

}  // namespace
}  // namespace deepinfer::router
