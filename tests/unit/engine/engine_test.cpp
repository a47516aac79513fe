// The engine end to end on tiny golden models: many requests together give the tokens each
// gives alone; prefix-cache hits and preemption change nothing; cancellation frees everything.
#include "deepinfer/engine.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "model/model.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

std::string tiny(const std::string& name) {
  return (fs::path(DEEPINFER_TEST_DATA) / "golden" / "tiny" / name).string();
}

// Greedy continuation through the single-sequence path, the reference.
std::vector<int32_t> greedy_alone(const Model& model, const std::vector<int32_t>& prompt, int n) {
  ThreadPool pool(1);
  auto ctx = std::move(model.new_context(256)).value();
  EXPECT_TRUE(ctx->eval(prompt, LogitsMode::kLast, pool).ok());
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t t = Sampler::argmax(ctx->logits(0));
    out.push_back(t);
    if (i + 1 < n) EXPECT_TRUE(ctx->eval(std::span<const int32_t>(&t, 1), LogitsMode::kLast, pool).ok());
  }
  return out;
}

std::vector<int32_t> collect(RequestHandle& h, FinishReason* reason = nullptr) {
  std::vector<int32_t> out;
  while (auto e = h.next()) {
    out.insert(out.end(), e->tokens.begin(), e->tokens.end());
    if (reason) *reason = e->finish;
  }
  return out;
}

std::vector<std::vector<int32_t>> random_prompts(int n, int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> len(1, 60), tok(0, static_cast<int>(n_vocab) - 1);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(n));
  for (auto& p : prompts) {
    p.resize(static_cast<size_t>(len(rng)));
    for (auto& t : p) t = tok(rng);
  }
  return prompts;
}

GenerationRequest greedy(const std::vector<int32_t>& prompt, int64_t max_tokens) {
  GenerationRequest r;
  r.prompt = prompt;
  r.sampling.temperature = 0.0f;
  r.max_tokens = max_tokens;
  return r;
}

TEST(Engine, ConcurrentRequestsEqualEachAlone) {
  auto model = std::move(Model::load(tiny("llama_gqa_tied"))).value();
  EngineConfig cfg;
  cfg.model_path = tiny("llama_gqa_tied");
  cfg.threads = 2;
  cfg.max_num_batched_tokens = 64;  // forces chunked prefill mixed with decodes
  auto engine = std::move(Engine::create(cfg)).value();
  const auto prompts = random_prompts(32, model->config().n_vocab, 1);
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (size_t i = 0; i < prompts.size(); ++i) handles.push_back(std::move(engine->submit(greedy(prompts[i], 8 + i % 9))).value());
  for (size_t i = 0; i < prompts.size(); ++i) {
    FinishReason reason = FinishReason::kNone;
    EXPECT_EQ(collect(*handles[i], &reason), greedy_alone(*model, prompts[i], 8 + static_cast<int>(i % 9))) << "request " << i;
    EXPECT_EQ(reason, FinishReason::kLength);
  }
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.kv_usage, 0.0);
  EXPECT_EQ(s.n_running + s.n_waiting, 0);
}

TEST(Engine, PrefixHitAndPreemptionGiveTheColdTokens) {
  auto model = std::move(Model::load(tiny("qwen2_gqa"))).value();
  EngineConfig cfg;
  cfg.model_path = tiny("qwen2_gqa");
  cfg.threads = 1;
  cfg.block_size = 4;
  cfg.kv_cache_tokens = 96;  // 24 blocks: eight 40-token requests cannot all fit
  auto engine = std::move(Engine::create(cfg)).value();
  auto prompts = random_prompts(8, model->config().n_vocab, 2);
  for (auto& p : prompts) p.resize(24, 7);
  // Requests 4..7 share request 0's first 16 tokens.
  for (int i = 4; i < 8; ++i) std::copy_n(prompts[0].begin(), 16, prompts[static_cast<size_t>(i)].begin());
  auto first = std::move(engine->submit(greedy(prompts[0], 16))).value();
  EXPECT_EQ(collect(*first), greedy_alone(*model, prompts[0], 16));
  std::vector<std::shared_ptr<RequestHandle>> handles;
  for (const auto& p : prompts) handles.push_back(std::move(engine->submit(greedy(p, 16))).value());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(collect(*handles[i]), greedy_alone(*model, prompts[i], 16)) << "request " << i;
  }
  const EngineStats s = engine->stats();
  EXPECT_GT(s.prefix_hits, 0);
  EXPECT_GT(s.n_preemptions, 0) << "the cache was meant to be too small for all at once";
  EXPECT_EQ(s.kv_usage, 0.0);
}

TEST(Engine, CancelFreesBlocksAndEndsTheStream) {
  EngineConfig cfg;
  cfg.model_path = tiny("llama_mha_untied");
  cfg.threads = 1;
  auto engine = std::move(Engine::create(cfg)).value();
  auto h = std::move(engine->submit(greedy({1, 2, 3, 4, 5}, 200))).value();
  auto first = h->next();
  ASSERT_TRUE(first.has_value());
  h->cancel();
  FinishReason reason = FinishReason::kNone;
  collect(*h, &reason);
  EXPECT_EQ(reason, FinishReason::kCancelled);
  for (int i = 0; i < 100 && engine->stats().kv_usage > 0.0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine->stats().kv_usage, 0.0);
}

TEST(Engine, BadRequestsAreRejectedBeforeQueueing) {
  EngineConfig cfg;
  cfg.model_path = tiny("llama_mha_untied");
  auto engine = std::move(Engine::create(cfg)).value();
  EXPECT_EQ(engine->submit(greedy({}, 4)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit(greedy({1}, 0)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit(greedy({1, -3}, 4)).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit(greedy({1, static_cast<int32_t>(engine->n_vocab())}, 4)).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->submit(greedy(std::vector<int32_t>(10, 1), engine->max_context())).status().code(),
            StatusCode::kOutOfRange);
  GenerationRequest bad = greedy({1, 2}, 4);
  bad.sampling.temperature = -1.0f;
  EXPECT_EQ(engine->submit(bad).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->stats().n_waiting, 0);
  EngineConfig missing;
  missing.model_path = "/nonexistent/model.gguf";
  EXPECT_EQ(Engine::create(missing).status().code(), StatusCode::kNotFound);
}

TEST(Engine, StopTokenEndsGeneration) {
  auto model = std::move(Model::load(tiny("llama_gqa_tied"))).value();
  EngineConfig cfg;
  cfg.model_path = tiny("llama_gqa_tied");
  auto engine = std::move(Engine::create(cfg)).value();
  const std::vector<int32_t> prompt = {5, 6, 7};
  const auto expect = greedy_alone(*model, prompt, 8);
  GenerationRequest r = greedy(prompt, 8);
  r.stop_token_ids = {expect[3]};
  const size_t first_stop = std::find(expect.begin(), expect.end(), expect[3]) - expect.begin();
  FinishReason reason = FinishReason::kNone;
  auto h = std::move(engine->submit(r)).value();
  EXPECT_EQ(collect(*h, &reason), std::vector<int32_t>(expect.begin(), expect.begin() + first_stop + 1));
  EXPECT_EQ(reason, FinishReason::kStop);
}

}  // namespace
}  // namespace deepinfer
