// DeepSeek V4 through the engine (tests/golden/dsv4_tiny): continuous batching, chunked
// prefill, preemption with recompute and asynchronous scheduling each give every request the
// greedy tokens the model gives it alone, and the golden prompt transformers' continuation.
//
// The single-sequence path (Model::new_context) is the reference: dsv4_tiny_test.cpp holds it
// to transformers. Both sides use an f32 KV cache, where the engine's batched passes and the
// reference agree to float rounding (the tiny model's greedy steps lead by 1e-2 or more).
#include "deepinfer/engine.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "model/model.h"
#include "test_backend.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(DEEPINFER_TEST_DATA) / "golden" / "dsv4_tiny";

nlohmann::json golden() {
  std::ifstream in(kDir / "golden.json");
  return nlohmann::json::parse(in);
}

constexpr int64_t kMaxTokens = 24;

// The model's greedy continuation of `prompt` alone, its first n tokens (n <= kMaxTokens);
// computed once per prompt for every test.
std::vector<int32_t> greedy_alone(const Model& model, const std::vector<int32_t>& prompt, int64_t n) {
  static std::map<std::vector<int32_t>, std::vector<int32_t>> done;
  std::vector<int32_t>& out = done[prompt];
  if (out.empty()) {
    auto ctx = std::move(model.new_context(static_cast<int64_t>(prompt.size()) + kMaxTokens, DType::kF32)).value();
    EXPECT_TRUE(ctx->eval(prompt, LogitsMode::kLast).ok());
    for (int64_t i = 0; i < kMaxTokens; ++i) {
      out.push_back(Sampler::argmax(ctx->logits(0)));
      if (i + 1 < kMaxTokens) {
        EXPECT_TRUE(ctx->eval(std::span<const int32_t>(&out.back(), 1), LogitsMode::kLast).ok());
      }
    }
  }
  return {out.begin(), out.begin() + n};
}

GenerationRequest greedy(const std::vector<int32_t>& prompt, int64_t max_tokens) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0.0f;
  r.sampling.ignore_eos = true;
  r.max_tokens = max_tokens;
  r.detokenize = false;
  return r;
}

std::vector<int32_t> collect(RequestHandle& h) {
  std::vector<int32_t> out;
  while (auto e = h.next()) out.insert(out.end(), e->tokens.begin(), e->tokens.end());
  return out;
}

// The golden prompt, its prefixes and random prompts, of lengths that end inside and at CSA (4),
// HCA (8) and sliding (8) windows; each generates long enough to close more of them.
std::vector<std::vector<int32_t>> prompts(const std::vector<int32_t>& golden_prompt, int64_t n_vocab) {
  std::vector<std::vector<int32_t>> out = {golden_prompt};
  for (size_t n : {5u, 17u, 32u}) out.emplace_back(golden_prompt.begin(), golden_prompt.begin() + n);
  std::mt19937 rng(16);
  std::uniform_int_distribution<int> tok(2, static_cast<int>(n_vocab) - 1);
  for (int n : {1, 11, 29, 46}) {
    std::vector<int32_t>& p = out.emplace_back(static_cast<size_t>(n));
    for (auto& t : p) t = tok(rng);
  }
  return out;
}

EngineConfig v4_config() {
  EngineConfig cfg;
  cfg.model_path = kDir.string();
  cfg.threads = 1;
  cfg.block_size = 8;  // whole HCA rows (8 tokens)
  cfg.kv_cache_dtype = KvCacheDtype::kF32;
  cfg.kv_cache_tokens = 2048;
  return cfg;
}

// All prompts at once through an engine made from `cfg`: each request's tokens equal the
// model's alone; returns the engine's statistics.
EngineStats check_engine(const EngineConfig& cfg, int64_t max_tokens) {
  const auto g = golden();
  auto model = std::move(testing::load_model(kDir.string())).value();
  const auto golden_prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  const auto all = prompts(golden_prompt, model->config().n_vocab);
  auto engine = std::move(Engine::create(cfg)).value();
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const auto& p : all) handles.push_back(std::move(engine->submit(greedy(p, max_tokens))).value());
  for (size_t i = 0; i < all.size(); ++i) {
    const std::vector<int32_t> got = collect(*handles[i]);
    EXPECT_EQ(got, greedy_alone(*model, all[i], max_tokens)) << "request " << i << " (" << all[i].size() << " tokens)";
    if (i == 0) {
      const auto want = g["greedy"].get<std::vector<int32_t>>();
      EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + std::min<size_t>(got.size(), want.size())),
                std::vector<int32_t>(want.begin(), want.begin() + std::min<size_t>(got.size(), want.size())))
          << "transformers' continuation of the golden prompt";
    }
  }
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.kv_usage, 0.0) << "every block went back";
  return s;
}

TEST(DeepseekV4Engine, ContinuousBatchingGivesEachRequestsTokens) {
  for (const bool async : {true, false}) {
    SCOPED_TRACE(async ? "async scheduling" : "synchronous");
    EngineConfig cfg = v4_config();
    cfg.async_scheduling = async;
    const EngineStats s = check_engine(cfg, kMaxTokens);
    // Prefix caching is off for V4 (no group is published): nothing is ever found.
    EXPECT_EQ(s.prefix_hits, 0);
    EXPECT_GT(s.decode_steps, 0);
  }
}

TEST(DeepseekV4Engine, ChunkedPrefillGivesTheSameTokens) {
  // Budgets of 3 and 7 tokens a step: chunks end inside every kind of window, and decodes of
  // some requests share steps with prefill chunks of others.
  for (const int64_t budget : {3, 7}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    EngineConfig cfg = v4_config();
    cfg.max_num_batched_tokens = budget;
    cfg.max_num_seqs = 3;
    check_engine(cfg, 12);
  }
}

TEST(DeepseekV4Engine, PreemptionAndRecomputeGiveTheSameTokens) {
  // 12 blocks of 8 per group: one request of 70 tokens fits, eight together do not, so they
  // preempt each other and are recomputed from the start.
  EngineConfig cfg = v4_config();
  cfg.kv_cache_tokens = 96;
  cfg.max_num_batched_tokens = 16;
  const EngineStats s = check_engine(cfg, kMaxTokens);
  EXPECT_GT(s.n_preemptions, 0) << "the cache was meant to be too small for all at once";
}

}  // namespace
}  // namespace deepinfer
