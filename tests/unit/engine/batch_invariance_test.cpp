// Batch invariance on the real default model (SmolLM2-135M): with EngineConfig::batch_invariant,
// 32 random requests give bitwise-identical sampled tokens and logprobs (the sampled token's
// and the top 5) run alone, all batched together, with small prefill chunks, and without
// asynchronous scheduling. Sampling is seeded at temperature 1, so a token differs as soon as
// a logit's last bit does; a repeated run gives the same tokens.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "deepinfer/engine.h"
#include "test_models.h"

namespace deepinfer {
namespace {

struct Result {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
};

std::vector<GenerationRequest> random_requests(int n, int64_t n_vocab) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> len(1, 48), tok(0, static_cast<int>(n_vocab) - 1);
  std::vector<GenerationRequest> out(static_cast<size_t>(n));
  for (size_t i = 0; i < out.size(); ++i) {
    GenerationRequest& r = out[i];
    r.prompt.resize(static_cast<size_t>(len(rng)));
    for (auto& t : r.prompt) t = tok(rng);
    // Some requests share a prefix, so prefix-cache hits are part of the mix.
    if (i % 4 == 3) std::copy_n(out[i - 1].prompt.begin(), std::min(out[i - 1].prompt.size(), r.prompt.size()), r.prompt.begin());
    r.max_tokens = 6 + static_cast<int64_t>(i % 5);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 100 + i;
    r.sampling.ignore_eos = true;
    r.sampling.logprobs = 5;
    r.detokenize = false;
  }
  return out;
}

Result collect(RequestHandle& h) {
  Result r;
  while (auto e = h.next()) {
    r.tokens.insert(r.tokens.end(), e->tokens.begin(), e->tokens.end());
    r.logprobs.insert(r.logprobs.end(), e->logprobs.begin(), e->logprobs.end());
  }
  return r;
}

std::vector<Result> run(const std::string& model, const std::vector<GenerationRequest>& requests,
                        int64_t max_num_batched_tokens, bool together, bool async) {
  EngineConfig cfg;
  cfg.model_path = model;
  cfg.threads = 2;
  cfg.kv_cache_tokens = 8192;
  cfg.batch_invariant = true;
  cfg.async_scheduling = async;
  cfg.max_num_batched_tokens = max_num_batched_tokens;
  auto engine = Engine::create(cfg);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return {};
  std::vector<Result> out;
  if (together) {
    std::vector<std::shared_ptr<RequestHandle>> handles;
    for (const auto& r : requests) handles.push_back(std::move((*engine)->submit(r)).value());
    for (auto& h : handles) out.push_back(collect(*h));
  } else {
    for (const auto& r : requests) out.push_back(collect(*std::move((*engine)->submit(r)).value()));
  }
  return out;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void expect_identical(const std::vector<Result>& want, const std::vector<Result>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i].tokens, got[i].tokens) << what << ": request " << i;
    ASSERT_EQ(want[i].logprobs.size(), got[i].logprobs.size()) << what << ": request " << i;
    for (size_t t = 0; t < want[i].logprobs.size(); ++t) {
      const TokenLogprob& a = want[i].logprobs[t];
      const TokenLogprob& b = got[i].logprobs[t];
      EXPECT_TRUE(same_bits(a.logprob, b.logprob)) << what << ": request " << i << " token " << t;
      ASSERT_EQ(a.top.size(), 5u);
      ASSERT_EQ(b.top.size(), 5u);
      for (size_t k = 0; k < 5; ++k) {
        EXPECT_EQ(a.top[k].token, b.top[k].token) << what << ": request " << i << " token " << t << " top " << k;
        EXPECT_TRUE(same_bits(a.top[k].logprob, b.top[k].logprob))
            << what << ": request " << i << " token " << t << " top " << k;
      }
    }
  }
}

TEST(BatchInvariance, LogprobsAreBitwiseIdenticalAloneBatchedAndChunked) {
  const std::string model = testing::real_model();
  ASSERT_FALSE(model.empty());
  const auto requests = random_requests(32, 49152);
  const auto alone = run(model, requests, 2048, /*together=*/false, /*async=*/true);
  expect_identical(alone, run(model, requests, 2048, /*together=*/true, /*async=*/true), "batched");
  expect_identical(alone, run(model, requests, 7, /*together=*/true, /*async=*/true), "7-token chunks");
  expect_identical(alone, run(model, requests, 61, /*together=*/true, /*async=*/false), "61-token chunks, sync");
}

// Greedy sequences without logprobs, bias, penalties or a held-back stop id take their token
// from the forward pass (LogitsMode::kLastArgmax: the output head's argmax, no logits handed
// over); with logprobs the same tokens come from the logits through the sampler. Both ways give
// the same tokens, batched and alone; min_tokens with end-of-generation ids keeps a sequence on
// the logits until it is met, and a batch that mixes both kinds keeps logits for every row.
TEST(BatchInvariance, GreedyTokensFromThePassEqualThoseFromTheLogits) {
  const std::string model = testing::real_model();
  ASSERT_FALSE(model.empty());
  auto plain = random_requests(24, 49152);
  for (size_t i = 0; i < plain.size(); ++i) {
    GenerationRequest& r = plain[i];
    r.sampling.temperature = 0.0f;
    r.sampling.logprobs = -1;
    r.max_tokens = 12;
    if (i % 3 == 1) {
      r.sampling.ignore_eos = false;
      r.sampling.min_tokens = 5;
    }
  }
  auto with_logprobs = plain;
  for (GenerationRequest& r : with_logprobs) r.sampling.logprobs = 0;
  auto mixed = plain;
  for (size_t i = 0; i < mixed.size(); i += 2) mixed[i].sampling.logprobs = 0;
  const auto tokens_of = [](const std::vector<Result>& results) {
    std::vector<std::vector<int32_t>> t;
    for (const Result& r : results) t.push_back(r.tokens);
    return t;
  };
  const auto want = tokens_of(run(model, with_logprobs, 2048, /*together=*/true, /*async=*/true));
  ASSERT_EQ(want.size(), plain.size());
  EXPECT_EQ(tokens_of(run(model, plain, 2048, /*together=*/true, /*async=*/true)), want) << "batched";
  EXPECT_EQ(tokens_of(run(model, plain, 2048, /*together=*/false, /*async=*/false)), want) << "alone, sync";
  EXPECT_EQ(tokens_of(run(model, mixed, 2048, /*together=*/true, /*async=*/true)), want) << "mixed";
}

}  // namespace
}  // namespace deepinfer
