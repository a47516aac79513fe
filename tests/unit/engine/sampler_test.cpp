#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace deepinfer {
namespace {

SamplingParams params(float temp, int top_k = 0, float top_p = 1.0f, float min_p = 0.0f, uint64_t seed = 7) {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  return p;
}

std::map<int32_t, int> histogram(Sampler& s, const std::vector<float>& logits, int n) {
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(logits)];
  return h;
}

TEST(Sampler, GreedyTakesArgmaxLowestIdOnTies) {
  auto s = Sampler::create(params(0.0f));
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->sample(std::vector<float>{0.1f, 3.0f, -1.0f, 3.0f}), 1);
}

TEST(Sampler, RejectsBadParameters) {
  EXPECT_FALSE(Sampler::create(params(-1.0f)).ok());
  EXPECT_FALSE(Sampler::create(params(1.0f, 0, 0.0f)).ok());
  EXPECT_FALSE(Sampler::create(params(1.0f, 0, 1.5f)).ok());
  EXPECT_FALSE(Sampler::create(params(1.0f, 0, 1.0f, 2.0f)).ok());
}

TEST(Sampler, SameSeedSameSequence) {
  std::vector<float> logits = {1.0f, 1.1f, 0.9f, 1.05f, 0.5f};
  auto a = Sampler::create(params(1.0f, 0, 1.0f, 0.0f, 42));
  auto b = Sampler::create(params(1.0f, 0, 1.0f, 0.0f, 42));
  std::vector<int32_t> sa, sb;
  for (int i = 0; i < 50; ++i) {
    sa.push_back(a->sample(logits));
    sb.push_back(b->sample(logits));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_GT(histogram(*a, logits, 200).size(), 3u);  // not stuck on one token
}

TEST(Sampler, TopKKeepsOnlyTheKMostLikely) {
  std::vector<float> logits = {0.0f, 5.0f, 4.0f, 3.0f, 0.0f};
  auto s = Sampler::create(params(10.0f, 2));
  auto h = histogram(*s, logits, 500);
  for (const auto& [id, n] : h) EXPECT_TRUE(id == 1 || id == 2) << id;
  EXPECT_EQ(h.size(), 2u);
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // probabilities ~ {0.64, 0.24, 0.09, 0.03}: top_p 0.8 keeps the first two.
  std::vector<float> logits = {std::log(0.64f), std::log(0.24f), std::log(0.09f), std::log(0.03f)};
  auto s = Sampler::create(params(1.0f, 0, 0.8f));
  auto h = histogram(*s, logits, 1000);
  EXPECT_EQ(h.size(), 2u);
  EXPECT_GT(h[0], h[1]);
}

TEST(Sampler, MinPDropsTokensBelowFractionOfTheBest) {
  std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  auto s = Sampler::create(params(1.0f, 0, 1.0f, 0.2f));  // threshold 0.1
  auto h = histogram(*s, logits, 1000);
  EXPECT_EQ(h.count(3), 0u);
  EXPECT_EQ(h.size(), 3u);
}

TEST(Sampler, TemperatureFrequenciesFollowSoftmax) {
  std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 1/4, 3/4 at temperature 1
  auto s = Sampler::create(params(1.0f));
  auto h = histogram(*s, logits, 4000);
  EXPECT_NEAR(h[1] / 4000.0, 0.75, 0.03);
}

}  // namespace
}  // namespace deepinfer
